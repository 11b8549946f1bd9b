//! The fault suite: upstreams that fail in each way a provider, a gateway
//! or a network does, over real sockets. Each gives the client exactly one
//! well-formed answer within the route's limits, is counted, and leaves no
//! descriptor behind.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use crate::support::*;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// What an upstream does once it has read the request head.
type Script = fn(TcpStream) -> Pin<Box<dyn Future<Output = ()> + Send>>;

const EMBEDDINGS: &str = r#"{"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.5, -0.25]}], "model": "m", "usage": {"prompt_tokens": 1, "total_tokens": 1}}"#;
const REQUEST: &str = r#"{"model": "m", "input": "a"}"#;
const LIMITS: &str = "timeout_ms = 600\nidle_timeout_ms = 300\nconnect_timeout_ms = 500";

async fn write(stream: &mut TcpStream, bytes: &[u8]) {
    let _ = stream.write_all(bytes).await;
}

#[expect(
    deprecated,
    reason = "tokio deprecates set_linger for its blocking close; a zero linger never blocks"
)]
fn reset(stream: TcpStream) {
    let _ = stream.set_linger(Some(Duration::ZERO));
    drop(stream);
}

fn head(extra: &str, length: usize) -> String {
    format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{extra}content-length: {length}\r\n\r\n")
}

fn accept_then_hang(_stream: TcpStream) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(_stream);
    })
}

fn hang_after_head(mut stream: TcpStream) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        write(&mut stream, head("", EMBEDDINGS.len()).as_bytes()).await;
        tokio::time::sleep(Duration::from_secs(30)).await;
    })
}

fn slow_drip(mut stream: TcpStream) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        write(&mut stream, head("", EMBEDDINGS.len()).as_bytes()).await;
        for byte in EMBEDDINGS.as_bytes() {
            write(&mut stream, &[*byte]).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
}

fn reset_mid_body(mut stream: TcpStream) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        write(&mut stream, head("", EMBEDDINGS.len()).as_bytes()).await;
        write(&mut stream, &EMBEDDINGS.as_bytes()[..20]).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        reset(stream);
    })
}

fn truncated_json(mut stream: TcpStream) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        // The length matches what is sent: only the JSON is cut.
        let cut = &EMBEDDINGS[..60];
        write(
            &mut stream,
            format!("{}{cut}", head("", cut.len())).as_bytes(),
        )
        .await;
    })
}

fn unrequested_gzip(mut stream: TcpStream) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        // A gzip member header, then deflate bytes: not JSON to anyone who
        // asked for `identity`.
        let body = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xabV\xca\xcfJ";
        let head = head("content-encoding: gzip\r\n", body.len());
        write(&mut stream, head.as_bytes()).await;
        write(&mut stream, body).await;
    })
}

fn oversized_headers(mut stream: TcpStream) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        let big = format!("x-big: {}\r\n", "a".repeat(1 << 20));
        write(
            &mut stream,
            format!("{}{EMBEDDINGS}", head(&big, EMBEDDINGS.len())).as_bytes(),
        )
        .await;
    })
}

fn empty_2xx(mut stream: TcpStream) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        write(&mut stream, head("", 0).as_bytes()).await;
    })
}

fn http_1_0(mut stream: TcpStream) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        // No length: the body ends when the connection does.
        let reply =
            format!("HTTP/1.0 200 OK\r\ncontent-type: application/json\r\n\r\n{EMBEDDINGS}");
        write(&mut stream, reply.as_bytes()).await;
    })
}

#[tokio::test]
async fn every_upstream_fault_gets_one_answer_and_leaves_nothing_behind() {
    let cases: [(&str, Script, u16, &str); 9] = [
        (
            "accept then hang",
            accept_then_hang,
            504,
            "upstream_timeout",
        ),
        (
            "hang after the head",
            hang_after_head,
            504,
            "upstream_timeout",
        ),
        ("a slow drip", slow_drip, 504, "upstream_timeout"),
        ("a reset mid-body", reset_mid_body, 502, "upstream_reset"),
        (
            "truncated JSON, its length right",
            truncated_json,
            502,
            "provider_invalid_response",
        ),
        (
            "an unrequested gzip body",
            unrequested_gzip,
            502,
            "provider_invalid_response",
        ),
        (
            "a 1 MB response header",
            oversized_headers,
            502,
            "upstream_reset",
        ),
        ("an empty 2xx", empty_2xx, 502, "provider_invalid_response"),
        ("an HTTP/1.0 upstream", http_1_0, 200, ""),
    ];
    let mut routes = String::new();
    let mut upstreams = Vec::new();
    for (i, (_, script, _, _)) in cases.iter().enumerate() {
        let (addr, accepted) = raw_upstream(*script).await;
        routes.push_str(&route(
            &format!("f{i}"),
            &format!("/f{i}"),
            &format!("http://{addr}"),
            "openai",
            LIMITS,
        ));
        upstreams.push(accepted);
    }
    let refused = format!("http://127.0.0.1:{}", closed_port());
    routes.push_str(&route("refused", "/refused", &refused, "openai", LIMITS));
    let probity = Probity::start(&config("", &routes));
    let baseline = probity.open_fds();

    let mut table = Vec::new();
    let mut check = |name: &str, got: &Got, status: u16, kind: &str, took: Duration| {
        table.push(format!("{name}: {} in {} ms", got.status, took.as_millis()));
        assert_eq!(got.status.as_u16(), status, "{name}: {}", got.text());
        if kind.is_empty() {
            assert_eq!(got.text(), EMBEDDINGS, "{name}: passed byte for byte");
        } else {
            assert_eq!(probity_error(&got.json()).unwrap()["type"], kind, "{name}");
        }
        // Within the route's limits: nothing waits past timeout_ms.
        assert!(took < Duration::from_secs(3), "{name} took {took:?}");
    };
    for (i, (name, _, status, kind)) in cases.iter().enumerate() {
        let started = Instant::now();
        let got = post(&probity.url(&format!("/f{i}/v1/embeddings")), REQUEST).await;
        check(name, &got, *status, kind, started.elapsed());
        // A model-API POST is never retried once a byte was sent.
        assert_eq!(
            upstreams[i].load(std::sync::atomic::Ordering::SeqCst),
            1,
            "{name}"
        );
    }
    let started = Instant::now();
    let got = post(&probity.url("/refused/v1/embeddings"), REQUEST).await;
    check(
        "refused",
        &got,
        502,
        "upstream_unreachable",
        started.elapsed(),
    );
    eprintln!("{}", table.join("\n"));

    // Each fault was counted.
    let metrics = get(&probity.admin_url("/metrics")).await.text();
    for (kind, at_least) in [("timeout", 3.0), ("reset", 2.0), ("unreachable", 1.0)] {
        let total: f64 = metrics
            .lines()
            .filter(|l| {
                l.starts_with("probity_upstream_errors_total")
                    && l.contains(&format!("kind=\"{kind}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        assert!(total >= at_least, "{kind}: {total}\n{metrics}");
    }
    // No descriptor left behind once the faulty connections are gone
    // (the hanging upstreams still hold theirs: probity dropped its side).
    let deadline = Instant::now() + Duration::from_secs(5);
    while probity.open_fds() > baseline && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        probity.open_fds() <= baseline,
        "{} descriptors open, {baseline} before",
        probity.open_fds()
    );
}

/// probity's alive tasks, as its `/metrics` reports them.
/// Read on a connection probity closes, so it holds no descriptor after.
async fn alive_tasks(probity: &Probity) -> f64 {
    let scrape = "GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    let text = raw(probity.admin, scrape.as_bytes()).await;
    metric_value(&text, "probity_runtime_alive_tasks").unwrap()
}

/// Waits until probity is back to its idle level of descriptors and tasks.
async fn settles(probity: &Probity, fds: usize, tasks: f64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while (probity.open_fds() > fds || alive_tasks(probity).await > tasks)
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if probity.open_fds() > fds {
        let out = std::process::Command::new("ss")
            .args(["-tanp"])
            .output()
            .unwrap();
        eprintln!("{}", String::from_utf8_lossy(&out.stdout));
    }
    assert!(
        probity.open_fds() <= fds,
        "{} descriptors, {fds} before",
        probity.open_fds()
    );
    let now = alive_tasks(probity).await;
    assert!(now <= tasks, "{now} tasks alive, {tasks} before");
}

/// Reads one request (head and a `Content-Length` body) off a kept-alive
/// upstream connection; false at its end.
async fn read_request(stream: &mut TcpStream) -> bool {
    use tokio::io::AsyncReadExt;
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if seen.len() >= end + 4 + length {
                return true;
            }
        }
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

/// One kept-alive upstream connection carries answer after answer, whether
/// probity read it whole to judge it, relayed it unjudged with its length,
/// or judged it as a chunked stream: the connection goes back to the pool
/// when its answer is read to the end, whoever read it. (A route has its
/// pool: the judged route and the passthrough route have one each.)
#[tokio::test]
async fn a_kept_alive_connection_serves_every_kind_of_answer_in_turn() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (accepted, served) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (count, answers) = (accepted.clone(), served.clone());
    let event = r#"data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}"#;
    let stream_answer = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n\
         {:x}\r\n{event}\n\n\r\n{:x}\r\ndata: [DONE]\n\n\r\n0\r\n\r\n",
        event.len() + 2,
        "data: [DONE]\n\n".len()
    );
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let (answers, stream_answer) = (answers.clone(), stream_answer.clone());
            tokio::spawn(async move {
                while read_request(&mut stream).await {
                    // Every third answer is a stream, the rest a document.
                    let n = answers.fetch_add(1, Ordering::SeqCst);
                    let reply = if n % 3 == 2 {
                        stream_answer.clone()
                    } else {
                        format!("{}{EMBEDDINGS}", head("", EMBEDDINGS.len()))
                    };
                    write(&mut stream, reply.as_bytes()).await;
                }
            });
        }
    });
    let upstream = format!("http://{addr}");
    let routes = [
        route("f", "/f", &upstream, "openai", LIMITS),
        route("p", "/p", &upstream, "passthrough", LIMITS),
    ]
    .concat();
    let probity = Probity::start(&config("", &routes));
    let chat = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    for round in 0..3 {
        let whole = post(&probity.url("/f/v1/embeddings"), REQUEST).await;
        assert_eq!(whole.text(), EMBEDDINGS, "round {round}: judged whole");
        let relayed = post(&probity.url("/p/v1/embeddings"), REQUEST).await;
        assert_eq!(relayed.text(), EMBEDDINGS, "round {round}: relayed");
        let streamed = post(&probity.url("/f/v1/chat/completions"), chat).await;
        assert!(
            streamed.text().ends_with("data: [DONE]\n\n"),
            "round {round}"
        );
    }
    assert_eq!(served.load(Ordering::SeqCst), 9);
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "one connection a route for all nine"
    );
}

/// An upstream that closes its kept-alive connections when it likes: after
/// a random number of answers, announced (`Connection: close`) or not, at
/// once or a few milliseconds later (the race a pool must survive).
#[tokio::test]
async fn an_upstream_closing_kept_alive_connections_at_random_loses_no_request() {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use std::sync::Arc;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = Arc::new(AtomicUsize::new(0));
    let seed = Arc::new(AtomicU64::new(0x9e37_79b9_7f4a_7c15));
    let (count, random) = (served.clone(), seed.clone());
    tokio::spawn(async move {
        // A xorshift: the same closes on every run.
        let next = move || {
            let mut x = random.load(Ordering::SeqCst);
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            random.store(x, Ordering::SeqCst);
            x
        };
        while let Ok((mut stream, _)) = listener.accept().await {
            let (count, roll) = (count.clone(), next());
            tokio::spawn(async move {
                let answers = 1 + roll % 4;
                for i in 0..answers {
                    // An idle connection is closed after a while, as servers do.
                    let idle = Duration::from_millis(500);
                    if !matches!(
                        tokio::time::timeout(idle, read_request(&mut stream)).await,
                        Ok(true)
                    ) {
                        return;
                    }
                    count.fetch_add(1, Ordering::SeqCst);
                    let last = i + 1 == answers;
                    let announce = if last && roll % 3 == 0 {
                        "connection: close\r\n"
                    } else {
                        ""
                    };
                    let reply = format!("{}{EMBEDDINGS}", head(announce, EMBEDDINGS.len()));
                    write(&mut stream, reply.as_bytes()).await;
                }
                tokio::time::sleep(Duration::from_millis(roll % 7)).await;
            });
        }
    });
    let probity = Probity::start(&config(
        "",
        &route("f", "/f", &format!("http://{addr}"), "openai", LIMITS),
    ));
    let url = probity.url("/f/v1/embeddings");
    // The first upstream connection starts the pool's reaper task: the
    // level to come back to is after it.
    assert_eq!(post(&url, REQUEST).await.status, 200);
    served.store(0, Ordering::SeqCst);
    let (tasks, fds) = (alive_tasks(&probity).await, probity.open_fds());
    let mut outcomes = std::collections::BTreeMap::new();
    for _ in 0..50 {
        // Four at a time, so connections are reused while others close.
        let batch: Vec<_> = (0..4)
            .map(|_| {
                let url = url.clone();
                tokio::spawn(async move { post(&url, REQUEST).await })
            })
            .collect();
        for call in batch {
            let got = call.await.unwrap();
            let outcome = match got.status.as_u16() {
                200 => {
                    assert_eq!(got.text(), EMBEDDINGS, "passed byte for byte");
                    "200".to_string()
                }
                status => format!("{status} {}", probity_error(&got.json()).unwrap()["type"]),
            };
            *outcomes.entry(outcome).or_insert(0) += 1;
        }
    }
    eprintln!("200 requests against random closes: {outcomes:?}");
    let ok = outcomes.get("200").copied().unwrap_or(0);
    // Every request got one answer; none was sent twice (a 200 is one
    // upstream answer, and the upstream answered no more than that).
    assert_eq!(outcomes.values().sum::<usize>(), 200);
    assert_eq!(served.load(Ordering::SeqCst), ok, "{outcomes:?}");
    for outcome in outcomes.keys() {
        assert!(
            ["200", "502 \"upstream_reset\""].contains(&outcome.as_str()),
            "{outcome}"
        );
    }
    settles(&probity, fds, tasks).await;
}

/// A stream that never ends: the client that stops reading and leaves
/// closes it through to the upstream, and nothing stays behind.
#[tokio::test]
async fn a_stream_that_never_ends_is_closed_when_its_client_leaves() {
    use http_body_util::BodyExt;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let ended = Arc::new(AtomicBool::new(false));
    let flag = ended.clone();
    let (addr, _) = raw_upstream(move |mut stream: TcpStream| {
        let flag = flag.clone();
        async move {
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
            write(&mut stream, head.as_bytes()).await;
            let event = r#"data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}"#;
            let chunk = format!("{:x}\r\n{event}\n\n\r\n", event.len() + 2);
            while stream.write_all(chunk.as_bytes()).await.is_ok() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            flag.store(true, Ordering::SeqCst);
        }
    })
    .await;
    let warm = Upstream::json(b"{}").await;
    let routes = [
        route("f", "/f", &format!("http://{addr}"), "openai", LIMITS),
        route("warm", "/warm", &warm.url(), "openai", ""),
    ];
    let probity = Probity::start(&config("", &routes.concat()));
    // The first upstream connection starts the pool's reaper task: the
    // level to come back to is after it.
    assert_eq!(get(&probity.url("/warm/v1/models")).await.status, 200);
    let (tasks, fds) = (alive_tasks(&probity).await, probity.open_fds());
    let request = http::Request::post(probity.url("/f/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from_static(
            br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
        )))
        .unwrap();
    let response = within("stream head", client().request(request))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut received = 0;
    while received < 20_000 {
        let frame = within("an event", body.frame()).await.unwrap().unwrap();
        received += frame.data_ref().map_or(0, |d| d.len());
    }
    drop(body);
    within("the upstream connection closed", async {
        while !ended.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    settles(&probity, fds, tasks).await;
}

/// A client's chunked body that breaks part way through a streamed upload:
/// the upstream never gets it whole, that upstream connection is never
/// used again, and the next request goes out on a fresh one.
#[tokio::test]
async fn a_request_body_broken_part_way_aborts_the_upstream_request() {
    use std::sync::{Arc, Mutex};
    use tokio::io::AsyncReadExt;
    // Per upstream connection: the bytes it received before it ended.
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let at = {
                    let mut log = log.lock().unwrap();
                    log.push(String::new());
                    log.len() - 1
                };
                let mut buf = [0u8; 4096];
                loop {
                    let n = match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    let text = {
                        let mut log = log.lock().unwrap();
                        log[at].push_str(&String::from_utf8_lossy(&buf[..n]));
                        log[at].clone()
                    };
                    // A whole request: answer it (kept alive).
                    let whole = text.ends_with("0\r\n\r\n")
                        || (text.contains("\r\n\r\n") && !text.contains("transfer-encoding"));
                    if whole {
                        let reply = format!("{}{{}}", head("", 2));
                        write(&mut stream, reply.as_bytes()).await;
                    }
                }
            });
        }
    });
    let probity = Probity::start(&config(
        "",
        &route("f", "/f", &format!("http://{addr}"), "openai", LIMITS),
    ));
    let started = Instant::now();
    let reply = within("a broken upload", async {
        let mut client = TcpStream::connect(probity.addr).await.unwrap();
        let head = "POST /f/v1/files HTTP/1.1\r\nHost: p\r\ncontent-type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
        client.write_all(head.as_bytes()).await.unwrap();
        client.write_all(b"5\r\nhello\r\n").await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let _ = client.write_all(b"zz\r\nbroken\r\n").await;
        let mut out = Vec::new();
        let _ = client.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    })
    .await;
    assert!(started.elapsed() < Duration::from_secs(3));
    // The client's fault, told as such: a 400, never blamed on the upstream.
    assert!(reply.starts_with("HTTP/1.1 400"), "{reply}");
    assert!(reply.contains("bad_request"), "{reply}");
    assert_eq!(reply.matches("HTTP/1.1").count(), 1, "{reply}");
    // The next request reaches the upstream on a new connection.
    let got = get(&probity.url("/f/v1/models")).await;
    assert_eq!(got.status, 200, "{}", got.text());
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:#?}");
    assert!(
        seen[0].contains("hello") && !seen[0].ends_with("0\r\n\r\n"),
        "{seen:#?}"
    );
    assert!(seen[1].starts_with("GET /v1/models"), "{seen:#?}");
    let errors = get(&probity.admin_url("/metrics")).await.text();
    assert!(
        !errors.contains("probity_upstream_errors_total{"),
        "{errors}"
    );
}
