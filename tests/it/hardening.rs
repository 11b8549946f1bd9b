//! A sidecar on every request path must refuse what the servers behind it
//! could read differently, and pass on nothing a client could forge:
//! request heads over raw sockets, against a fake upstream that records
//! what reaches it.

use std::time::Duration;

use crate::support::*;

const EMBEDDING: &[u8] = br#"{"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.5, -0.25]}], "model": "m", "usage": {"prompt_tokens": 1, "total_tokens": 1}}"#;

async fn setup(server: &str) -> (Upstream, Probity) {
    let upstream = Upstream::json(b"{}").await;
    let probity = Probity::start(&config(
        server,
        &route("ollama", "/ollama", &upstream.url(), "ollama", ""),
    ));
    (upstream, probity)
}

/// Each head is answered 400 in probity's error shape, the connection is
/// closed (`raw` reads to the end: a kept connection would time out), and
/// nothing reaches the upstream.
#[tokio::test]
async fn ambiguous_heads_get_400_and_nothing_is_forwarded() {
    let (upstream, probity) = setup("").await;
    let post = "POST /ollama/api/embed HTTP/1.1\r\n";
    let cases = [
        ("two Transfer-Encoding lines", format!("{post}Host: p\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")),
        ("Transfer-Encoding: ,chunked", format!("{post}Host: p\r\nTransfer-Encoding: ,chunked\r\n\r\n0\r\n\r\n")),
        ("Transfer-Encoding: identity, chunked", format!("{post}Host: p\r\nTransfer-Encoding: identity, chunked\r\n\r\n0\r\n\r\n")),
        ("no Host", format!("{post}Content-Length: 2\r\n\r\n{{}}")),
        ("two different Hosts", format!("{post}Host: a\r\nHost: b\r\nContent-Length: 2\r\n\r\n{{}}")),
        ("Transfer-Encoding on HTTP/1.0", "POST /ollama/api/embed HTTP/1.0\r\nHost: p\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".into()),
        ("chunked not last", format!("{post}Host: p\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n")),
        ("a space before the colon", format!("{post}Host: p\r\nContent-Length : 2\r\n\r\n{{}}")),
        ("a control character in a value", format!("{post}Host: p\r\nx-a: b\x01c\r\nContent-Length: 2\r\n\r\n{{}}")),
        ("two different Content-Lengths", format!("{post}Host: p\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{{}}")),
    ];
    for (name, head) in cases {
        let reply = raw(probity.addr, head.as_bytes()).await;
        assert!(reply.starts_with("HTTP/1.1 400"), "{name}: {reply}");
    }
    // Those probity refuses itself carry its error body and say why.
    let no_host = "POST /ollama/api/embed HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}";
    let reply = raw(probity.addr, no_host.as_bytes()).await;
    assert!(
        reply.contains("bad_request") && reply.contains("Host"),
        "{reply}"
    );
    assert!(upstream.requests().is_empty(), "{:?}", upstream.requests());
}

/// A body after a refused head is never read as a second request.
#[tokio::test]
async fn what_follows_a_refused_head_is_not_a_request() {
    let (upstream, probity) = setup("").await;
    let smuggled = "GET /ollama/api/tags HTTP/1.1\r\nHost: p\r\n\r\n";
    let head = format!(
        "POST /ollama/api/embed HTTP/1.1\r\nHost: p\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{smuggled}"
    );
    let started = std::time::Instant::now();
    let reply = raw(probity.addr, head.as_bytes()).await;
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    assert_eq!(reply.matches("HTTP/1.1").count(), 1, "{reply}");
    assert!(upstream.requests().is_empty());
}

#[tokio::test]
async fn heads_over_the_limits_get_431() {
    let (upstream, probity) = setup("max_header_bytes = 16384\nmax_header_count = 20").await;
    let get = |extra: String| {
        format!("GET /ollama/api/tags HTTP/1.1\r\nHost: p\r\n{extra}Connection: close\r\n\r\n")
    };
    let big = |n: usize| format!("x-big: {}\r\n", "a".repeat(n));
    let many = |n: usize| (0..n).map(|i| format!("x-h{i}: 1\r\n")).collect::<String>();
    assert!(raw(probity.addr, get(big(8_000)).as_bytes())
        .await
        .starts_with("HTTP/1.1 200"));
    assert!(raw(probity.addr, get(big(20_000)).as_bytes())
        .await
        .starts_with("HTTP/1.1 431"));
    assert!(raw(probity.addr, get(many(15)).as_bytes())
        .await
        .starts_with("HTTP/1.1 200"));
    assert!(raw(probity.addr, get(many(25)).as_bytes())
        .await
        .starts_with("HTTP/1.1 431"));
    // Across split reads: the head arrives a few bytes at a time.
    let head = get(big(20_000));
    let reply = within("split head", async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(probity.addr).await.unwrap();
        for piece in head.as_bytes().chunks(4096) {
            if stream.write_all(piece).await.is_err() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let mut out = Vec::new();
        let _ = stream.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    })
    .await;
    assert!(reply.starts_with("HTTP/1.1 431"), "{reply}");
    assert_eq!(upstream.requests().len(), 2);
}

#[tokio::test]
async fn forged_and_own_headers_never_reach_the_upstream() {
    let (upstream, probity) = setup("").await;
    let head = "GET /ollama/api/tags HTTP/1.1\r\nHost: p\r\nx_real_ip: 6.6.6.6\r\ntransfer_encoding: chunked\r\nprobity-capture: forged\r\nprobity-normalized: /usage\r\nX-Forwarded-For: 6.6.6.6\r\nx-real-ip: 1.2.3.4\r\nConnection: close\r\n\r\n";
    assert!(raw(probity.addr, head.as_bytes())
        .await
        .starts_with("HTTP/1.1 200"));
    let seen = upstream.only_request();
    for name in [
        "x_real_ip",
        "transfer_encoding",
        "probity-capture",
        "probity-normalized",
    ] {
        assert!(seen.header(name).is_none(), "{name} reached the upstream");
    }
    assert_eq!(seen.header("x-real-ip"), Some("1.2.3.4"));
    // No trusted hop: the client's chain is dropped, the peer stated.
    assert_eq!(seen.header("x-forwarded-for"), Some("127.0.0.1"));
}

#[tokio::test]
async fn a_trusted_proxy_in_front_keeps_its_entry() {
    let (upstream, probity) = setup("trusted_hops = 1").await;
    let head = "GET /ollama/api/tags HTTP/1.1\r\nHost: p\r\nX-Forwarded-For: 6.6.6.6, 10.1.2.3\r\nConnection: close\r\n\r\n";
    assert!(raw(probity.addr, head.as_bytes())
        .await
        .starts_with("HTTP/1.1 200"));
    assert_eq!(
        upstream.only_request().header("x-forwarded-for"),
        Some("10.1.2.3, 127.0.0.1")
    );
}

/// A head, then a body that never finishes: answered 408 when
/// `body_read_timeout_ms` runs out, nothing forwarded, connection closed.
#[tokio::test]
async fn a_trickled_body_is_cut_off() {
    let (upstream, probity) = setup("body_read_timeout_ms = 300").await;
    let started = std::time::Instant::now();
    let head = "POST /ollama/api/embed HTTP/1.1\r\nHost: p\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\":";
    let reply = raw(probity.addr, head.as_bytes()).await;
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    assert!(reply.contains("request_timeout") && reply.contains("body_read_timeout_ms"));
    assert!(started.elapsed() >= std::time::Duration::from_millis(300));
    assert!(upstream.requests().is_empty());
}

/// A body refused for its declared size is never read as a request.
#[tokio::test]
async fn an_unread_body_is_not_a_second_request() {
    let (upstream, probity) = setup("max_request_bytes = 64").await;
    let smuggled = "GET /ollama/api/tags HTTP/1.1\r\nHost: p\r\n\r\n";
    let body = format!("{smuggled}{}", " ".repeat(100));
    let head = format!(
        "POST /ollama/api/embed HTTP/1.1\r\nHost: p\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let started = std::time::Instant::now();
    let reply = raw(probity.addr, head.as_bytes()).await;
    // Closed at once, not left open for whatever comes next.
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
    assert_eq!(reply.matches("HTTP/1.1").count(), 1, "{reply}");
    assert!(upstream.requests().is_empty());
}

/// Starts the binary under `prlimit --nofile=SOFT:HARD` and returns its
/// log lines up to the one that says it listens.
fn start_lines_with_nofile(limits: &str, server: &str) -> Vec<serde_json::Value> {
    use std::io::BufRead;
    let config_path = temp_path(".toml");
    std::fs::write(
        &config_path,
        config(
            server,
            &route("ollama", "/ollama", "http://127.0.0.1:9", "ollama", ""),
        ),
    )
    .unwrap();
    let mut child = std::process::Command::new("prlimit")
        .arg(format!("--nofile={limits}"))
        .arg(env!("CARGO_BIN_EXE_probity"))
        .arg("--config")
        .arg(&config_path)
        .env("PROBITY_LOG_FORMAT", "json")
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = Vec::new();
    for line in std::io::BufReader::new(child.stdout.take().unwrap()).lines() {
        let line: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
        let done = line["message"] == "probity listening";
        lines.push(line);
        if done {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_file(config_path);
    lines
}

#[test]
fn the_open_file_limit_is_raised_and_a_shortfall_is_said() {
    // prlimit is util-linux's, an essential package on Debian.
    let said = |lines: &[serde_json::Value], message: &str| {
        lines
            .iter()
            .find(|l| l["message"].as_str().unwrap_or("").contains(message))
            .cloned()
    };
    // The default 4,096 connections need 8,448 descriptors: too many for 400.
    let lines = start_lines_with_nofile("200:400", "");
    let raised = said(&lines, "raised the open-file limit").expect("raised");
    assert_eq!(
        (raised["from"].as_u64(), raised["to"].as_u64()),
        (Some(200), Some(400))
    );
    let warning = said(&lines, "cannot fit in the open-file limit").expect("warned");
    assert_eq!(warning["level"], "WARN");
    assert_eq!(warning["needed"].as_u64(), Some(8448));
    // 1,000 connections fit in 4,000.
    let lines = start_lines_with_nofile("200:4000", "max_connections = 1000");
    assert!(said(&lines, "raised the open-file limit").is_some());
    assert!(said(&lines, "cannot fit").is_none(), "{lines:?}");
}

#[tokio::test]
async fn upgrades_are_refused_but_h2c_is_ignored() {
    let (upstream, probity) = setup("").await;
    let websocket = "GET /ollama/api/tags HTTP/1.1\r\nHost: p\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
    let reply = raw(probity.addr, websocket.as_bytes()).await;
    assert!(reply.starts_with("HTTP/1.1 501"), "{reply}");
    assert!(reply.contains("upgrade_not_supported"), "{reply}");
    assert!(upstream.requests().is_empty());
    // What `curl --http2` sends over cleartext: answered in HTTP/1.1.
    let h2c = "GET /ollama/api/tags HTTP/1.1\r\nHost: p\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\nConnection: close\r\n\r\n";
    let reply = raw(probity.addr, h2c.as_bytes()).await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    let seen = upstream.only_request();
    assert!(seen.header("upgrade").is_none() && seen.header("http2-settings").is_none());
}

/// An idle keep-alive connection is closed once `header_read_timeout_ms`
/// passes without a new request head.
#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed() {
    let (_upstream, probity) = setup("header_read_timeout_ms = 300").await;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(probity.addr).await.unwrap();
    stream
        .write_all(b"GET /ollama/api/tags HTTP/1.1\r\nHost: p\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = stream.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    let idle = std::time::Instant::now();
    let closed = within("idle close", async { stream.read(&mut buf).await.unwrap() }).await;
    assert_eq!(closed, 0, "closed, nothing more sent");
    let waited = idle.elapsed();
    assert!(
        waited >= std::time::Duration::from_millis(250)
            && waited < std::time::Duration::from_secs(3),
        "{waited:?}"
    );
}

/// Label values come from bounded sets only: after thousands of requests
/// with random paths, methods, hosts and model names, and upstream answers
/// of every kind, `/metrics` holds no more series than after one of each.
#[tokio::test]
async fn random_requests_add_no_metric_series() {
    let upstream = Upstream::start(|request| {
        // The answer's kind follows the request's model.
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap_or_default();
        let model = body["model"].as_str().unwrap_or("").to_string();
        let usage = match model.as_bytes().get(6).copied().unwrap_or(b'0') {
            b'0' => r#"{"prompt_tokens": 1, "total_tokens": 1}"#.to_string(),
            b'1' => format!(r#"{{"prompt_tokens": "{model}", "total_tokens": 1}}"#),
            _ => r#"{"prompt_tokens": -1, "total_tokens": 1}"#.to_string(),
        };
        Reply::json(
            200,
            format!(r#"{{"object": "list", "data": [{{"object": "embedding", "index": 0, "embedding": [0.5]}}], "model": "{model}", "usage": {usage}}}"#),
        )
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &upstream.url(), "openai", ""),
    ));
    let series = || async {
        get(&probity.admin_url("/metrics"))
            .await
            .text()
            .lines()
            .filter(|l| l.starts_with("probity_") && !l.contains("_bucket{"))
            .filter_map(|l| l.rsplit_once(' ').map(|(series, _)| series.to_string()))
            .collect::<std::collections::BTreeSet<String>>()
    };
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut random = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut send_batch = |n: usize| {
        (0..n)
            .map(|_| {
                let r = random();
                // `model-<kind>-<random>`: the kind picks the upstream's answer.
                let model = format!("model-{}-{:x}", (r >> 24) % 3, r % 1_000_000);
                let path = match r % 4 {
                    0 => "/openai/v1/embeddings".to_string(),
                    1 => format!("/openai/v1/{:x}", r),
                    2 => format!("/x{:x}/y", r),
                    _ => "/openai/v1/embeddings".to_string(),
                };
                let method = ["POST", "GET", "PUT", "DELETE", "PATCH"][(r >> 8) as usize % 5];
                let request = http::Request::builder()
                    .method(method)
                    .uri(probity.url(&path))
                    .header("host", format!("h{:x}.example", r >> 16))
                    .header("content-type", "application/json")
                    .body(http_body_util::Full::new(bytes::Bytes::from(format!(
                        r#"{{"model": "{model}", "input": "a"}}"#
                    ))))
                    .unwrap();
                send(request)
            })
            .collect::<Vec<_>>()
    };
    // One of each kind first, then many more.
    for request in send_batch(200) {
        request.await;
    }
    let before = series().await;
    for _ in 0..98 {
        for request in send_batch(100) {
            request.await;
        }
    }
    let after = series().await;
    let new: Vec<&String> = after.difference(&before).collect();
    assert!(
        new.is_empty(),
        "new series after 9,800 more requests: {new:?}"
    );
}

/// A client that reads an inspected answer slowly holds all of it (it was
/// read whole to be judged): past `max_held_response_bytes`, new inspected
/// requests get 503 with `Retry-After`, until the slow reader is done or,
/// past `send_timeout_ms`, cut off.
#[tokio::test]
async fn slow_readers_of_inspected_answers_cannot_hold_unbounded_memory() {
    let floats = vec!["0.0123456789"; 700_000].join(",");
    let big: &'static [u8] = format!(
        r#"{{"object": "list", "data": [{{"object": "embedding", "index": 0, "embedding": [{floats}]}}], "model": "m", "usage": {{"prompt_tokens": 1, "total_tokens": 1}}}}"#
    )
    .into_bytes()
    .leak();
    let (large, small) = (Upstream::json(big).await, Upstream::json(EMBEDDING).await);
    let routes = [
        route("large", "/large", &large.url(), "openai", ""),
        route("small", "/small", &small.url(), "openai", ""),
    ];
    let probity = Probity::start(&config(
        // One client may hold all of it: this is the budget, not a share.
        "max_held_response_bytes = 4194304\nmax_held_share = 1\nsend_timeout_ms = 2000",
        &routes.concat(),
    ));
    let request = r#"{"model": "m", "input": "a"}"#;
    let head = format!(
        "POST /large/v1/embeddings HTTP/1.1\r\nHost: p\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{request}",
        request.len()
    );
    // A reader with a tiny window that reads nothing.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut slow = socket.connect(probity.addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut slow, head.as_bytes())
        .await
        .unwrap();
    let small_url = probity.url("/small/v1/embeddings");
    let refused = within("the budget spent", async {
        loop {
            let got = post(&small_url, request).await;
            if got.status == 503 {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let error = refused.error(503, "overloaded");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("max_held_response_bytes"),
        "{error}"
    );
    assert_eq!(refused.header("retry-after"), Some("1"));
    // What is relayed needs no budget: it goes only as fast as it is read.
    assert_eq!(get(&probity.url("/small/v1/models")).await.status, 200);
    // The slow reader is cut off at send_timeout_ms: its share comes back.
    let started = std::time::Instant::now();
    within("the budget given back", async {
        while post(&small_url, request).await.status != 200 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(
        probity.metric("probity_send_timeouts_total").await,
        Some(1.0)
    );
    let mut rest = Vec::new();
    let read = tokio::io::AsyncReadExt::read_to_end(&mut slow, &mut rest);
    let _ = within("the slow connection closed", read).await;
    assert!(
        rest.len() < big.len(),
        "the answer was cut: {} bytes",
        rest.len()
    );
    assert_eq!(large.requests().len(), 1);
}

/// An embeddings answer of about 9 MB: larger than the socket buffers, so a
/// reader that reads nothing keeps it held.
fn big_embedding() -> &'static [u8] {
    let floats = vec!["0.0123456789"; 700_000].join(",");
    format!(
        r#"{{"object": "list", "data": [{{"object": "embedding", "index": 0, "embedding": [{floats}]}}], "model": "m", "usage": {{"prompt_tokens": 1, "total_tokens": 1}}}}"#
    )
    .into_bytes()
    .leak()
}

const EMBED_REQUEST: &str = r#"{"model": "m", "input": "a"}"#;

/// A client that sends an inspected request from `ip` (a loopback address)
/// with a tiny receive window, reads its status line and nothing more: the
/// answer, if there is one, stays held for it.
async fn slow_reader(
    ip: &str,
    to: std::net::SocketAddr,
    path: &str,
    headers: &str,
) -> (tokio::net::TcpStream, u16) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.bind(format!("{ip}:0").parse().unwrap()).unwrap();
    let mut stream = socket.connect(to).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: p\r\nConnection: close\r\n{headers}content-type: application/json\r\ncontent-length: {}\r\n\r\n{EMBED_REQUEST}",
        EMBED_REQUEST.len()
    );
    tokio::io::AsyncWriteExt::write_all(&mut stream, head.as_bytes())
        .await
        .unwrap();
    let mut status = [0u8; 12];
    within(
        "the status line",
        tokio::io::AsyncReadExt::read_exact(&mut stream, &mut status),
    )
    .await
    .unwrap();
    let status = std::str::from_utf8(&status[9..]).unwrap().parse().unwrap();
    (stream, status)
}

/// An ordinary client on `ip`: the answer read whole.
async fn post_from(ip: &str, url: &str, headers: &[(&str, &str)]) -> Got {
    use http_body_util::BodyExt;
    let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
    connector.set_local_address(Some(ip.parse().unwrap()));
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(connector);
    let mut request = http::Request::post(url).header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(http_body_util::Full::new(bytes::Bytes::from(EMBED_REQUEST)))
        .unwrap();
    within("response", async {
        let (parts, body) = client.request(request).await.unwrap().into_parts();
        Got {
            status: parts.status,
            headers: parts.headers,
            body: body.collect().await.unwrap().to_bytes(),
        }
    })
    .await
}

/// Polls `call` until it answers 200.
async fn until_served<F, Fut>(what: &str, call: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Got>,
{
    within(what, async {
        while call().await.status != 200 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

/// Slow readers from one address spend that address's share of
/// `max_held_response_bytes`, not the whole budget: it alone gets 503 and
/// is told the share is its own, while another address (127.0.0.2, the
/// same host: the share is per socket peer) is still served whole answers.
/// The budget still bounds them all together; a share comes back when its
/// reader finishes or disconnects.
#[tokio::test]
async fn slow_readers_from_one_address_spend_only_their_own_share() {
    let big = big_embedding();
    let b = big.len() as u64;
    let (large, small) = (Upstream::json(big).await, Upstream::json(EMBEDDING).await);
    let routes = [
        route("large", "/large", &large.url(), "openai", ""),
        route("small", "/small", &small.url(), "openai", ""),
    ];
    // A share of 1.8 answers: two held answers spend it; the budget of 4.5
    // is spent by five.
    let probity = Probity::start(&config(
        &format!(
            "max_held_response_bytes = {}\nmax_held_share = 0.4",
            b * 9 / 2
        ),
        &routes.concat(),
    ));
    let (addr, small_url) = (probity.addr, probity.url("/small/v1/embeddings"));
    let large_path = "/large/v1/embeddings";

    let (_r1, first) = slow_reader("127.0.0.1", addr, large_path, "").await;
    let (r2, second) = slow_reader("127.0.0.1", addr, large_path, "").await;
    assert_eq!((first, second), (200, 200));
    let (_, third) = slow_reader("127.0.0.1", addr, large_path, "").await;
    assert_eq!(third, 503);
    let refused = post_from("127.0.0.1", &small_url, &[]).await;
    let error = refused.error(503, "overloaded");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("address 127.0.0.1 holds")
            && message.contains("its own share")
            && message.contains("server.max_held_share"),
        "{message}"
    );
    assert_eq!(refused.header("retry-after"), Some("1"));
    // With no trusted hops, a forged X-Forwarded-For changes nothing.
    let forged = [("x-forwarded-for", "203.0.113.9")];
    assert_eq!(
        post_from("127.0.0.1", &small_url, &forged).await.status,
        503
    );
    assert_eq!(
        probity
            .metric("probity_overload_rejections_total{limit=\"max_held_share\"}")
            .await,
        Some(3.0)
    );

    // Another address is served, whole answers included, byte for byte.
    let other = post_from("127.0.0.2", &probity.url(large_path), &[]).await;
    assert_eq!(other.status, 200);
    assert_eq!(other.body.as_ref(), big);
    assert_eq!(post_from("127.0.0.2", &small_url, &[]).await.status, 200);

    // The budget bounds them all: two more from .2 and one from .3 spend it
    // (5 answers of 4.5), and .4, holding nothing, is refused too.
    let (_r4, s4) = slow_reader("127.0.0.2", addr, large_path, "").await;
    let (_r5, s5) = slow_reader("127.0.0.2", addr, large_path, "").await;
    let (mut r6, s6) = slow_reader("127.0.0.3", addr, large_path, "").await;
    assert_eq!((s4, s5, s6), (200, 200, 200));
    let refused = post_from("127.0.0.4", &small_url, &[]).await;
    let message = refused.error(503, "overloaded")["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("server.max_held_response_bytes") && !message.contains("own share"),
        "{message}"
    );
    assert_eq!(
        probity
            .metric("probity_overload_rejections_total{limit=\"max_held_response_bytes\"}")
            .await,
        Some(1.0)
    );

    // A reader that finishes gives its share back: .4 is served again.
    let mut rest = Vec::new();
    within(
        "the answer read to its end",
        tokio::io::AsyncReadExt::read_to_end(&mut r6, &mut rest),
    )
    .await
    .unwrap();
    assert!(rest.ends_with(big), "the whole answer came");
    until_served("the budget given back", || {
        post_from("127.0.0.4", &small_url, &[])
    })
    .await;

    // One that disconnects gives its share back: .1 is served again.
    assert_eq!(post_from("127.0.0.1", &small_url, &[]).await.status, 503);
    drop(r2);
    until_served("the share given back", || {
        post_from("127.0.0.1", &small_url, &[])
    })
    .await;
    // Only the refused requests never reached the upstream.
    assert_eq!(large.requests().len(), 6);
}

/// With `[[clients]]`, a share is the client's, whatever its address: a
/// client whose slow readers spent its share is refused, another client on
/// the same address is served.
#[tokio::test]
async fn a_client_token_has_its_own_share() {
    let big = big_embedding();
    let b = big.len() as u64;
    let large = Upstream::json(big).await;
    let routes = [
        route("large", "/large", &large.url(), "openai", ""),
        "[[clients]]\nname = \"batch\"\ntoken_env = \"T_BATCH\"\n".into(),
        "[[clients]]\nname = \"search-ui\"\ntoken_env = \"T_SEARCH\"\n".into(),
    ];
    let env = [
        ("T_BATCH", "pt-batch-token-4d7e1a9c2b"),
        ("T_SEARCH", "pt-search-token-8f2c6b0e3a"),
    ];
    let probity = Probity::start_with_env(
        &config(
            &format!(
                "max_held_response_bytes = {}\nmax_held_share = 0.4",
                b * 9 / 2
            ),
            &routes.concat(),
        ),
        &env,
    );
    let (addr, path) = (probity.addr, "/large/v1/embeddings");
    let batch = "Authorization: Bearer pt-batch-token-4d7e1a9c2b\r\n";
    let (_r1, first) = slow_reader("127.0.0.1", addr, path, batch).await;
    let (_r2, second) = slow_reader("127.0.0.1", addr, path, batch).await;
    assert_eq!((first, second), (200, 200));
    // From another address, the same client is still the same holder.
    let refused = post_from(
        "127.0.0.2",
        &probity.url(path),
        &[("authorization", "Bearer pt-batch-token-4d7e1a9c2b")],
    )
    .await;
    let message = refused.error(503, "overloaded")["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("client `batch` holds"), "{message}");
    // Another client on the same address is served.
    let served = post_from(
        "127.0.0.1",
        &probity.url(path),
        &[("authorization", "Bearer pt-search-token-8f2c6b0e3a")],
    )
    .await;
    assert_eq!(served.status, 200);
    assert_eq!(served.body.as_ref(), big);
}

/// Behind a trusted proxy every client has the proxy's address: the share is
/// then keyed by the X-Forwarded-For entry the trusted hop added.
#[tokio::test]
async fn behind_trusted_hops_a_share_is_the_forwarded_address() {
    let big = big_embedding();
    let b = big.len() as u64;
    let large = Upstream::json(big).await;
    let probity = Probity::start(&config(
        &format!(
            "max_held_response_bytes = {}\nmax_held_share = 0.4\ntrusted_hops = 1",
            b * 9 / 2
        ),
        &route("large", "/large", &large.url(), "openai", ""),
    ));
    let (addr, path) = (probity.addr, "/large/v1/embeddings");
    let one = "X-Forwarded-For: 203.0.113.9, 198.51.100.7\r\n";
    let (_r1, first) = slow_reader("127.0.0.1", addr, path, one).await;
    let (_r2, second) = slow_reader("127.0.0.1", addr, path, one).await;
    assert_eq!((first, second), (200, 200));
    let url = probity.url(path);
    let refused = post_from("127.0.0.1", &url, &[("x-forwarded-for", "198.51.100.7")]).await;
    let message = refused.error(503, "overloaded")["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("address 198.51.100.7 holds"), "{message}");
    // Another client behind the same proxy is served.
    let other = post_from("127.0.0.1", &url, &[("x-forwarded-for", "198.51.100.8")]).await;
    assert_eq!(other.status, 200);
}

/// A crowd sent at once is admitted before any of its answers is held: each
/// admitted request counts what its route's last answer weighed, so the
/// share still stops the crowd (two of eight: 1.8 answers of share).
#[tokio::test]
async fn a_crowd_sent_at_once_is_counted_before_its_answers_come() {
    let big = big_embedding();
    let b = big.len() as u64;
    let large = Upstream::json(big).await;
    let probity = Probity::start(&config(
        &format!(
            "max_held_response_bytes = {}\nmax_held_share = 0.4",
            b * 9 / 2
        ),
        &route("large", "/large", &large.url(), "openai", ""),
    ));
    let (addr, path) = (probity.addr, "/large/v1/embeddings");
    // One answer read whole: the route's answers are now known to be big.
    assert_eq!(
        post_from("127.0.0.9", &probity.url(path), &[]).await.status,
        200
    );
    let crowd = (0..8).map(|_| slow_reader("127.0.0.5", addr, path, ""));
    let answered = futures_util::future::join_all(crowd).await;
    let mut statuses: Vec<u16> = answered.iter().map(|(_, status)| *status).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 503, 503, 503, 503, 503, 503]);
    assert_eq!(large.requests().len(), 3);
}

/// A close-delimited answer (no `Content-Length`: it ends when the
/// upstream closes) is scanned read by read as it arrives. One string of
/// 3.6 MB of `\u0078` escapes, written 1 KiB at a time, passes byte for
/// byte. That each read's scan goes on where the last stopped is counted
/// beside the scanner (`json::scan` tests); its speed is the `scan`
/// benchmark's.
#[tokio::test]
async fn a_long_string_written_in_small_pieces_passes_byte_for_byte() {
    let content = r"\u0078".repeat(600_000);
    let body: &'static str = format!(
        r#"{{"id": "chatcmpl-1", "object": "chat.completion", "created": 1764410400, "model": "m", "choices": [{{"index": 0, "message": {{"role": "assistant", "content": "{content}"}}, "finish_reason": "stop"}}], "usage": {{"prompt_tokens": 1, "completion_tokens": 600000, "total_tokens": 600001}}}}"#
    )
    .leak();
    let (addr, accepted) = raw_upstream(move |mut stream: tokio::net::TcpStream| async move {
        use tokio::io::AsyncWriteExt;
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n";
        if stream.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        for piece in body.as_bytes().chunks(1024) {
            if stream.write_all(piece).await.is_err() {
                return;
            }
            // Let probity read between writes, so the body comes in many reads.
            tokio::task::yield_now().await;
        }
        let _ = stream.shutdown().await;
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &format!("http://{addr}"), "openai", ""),
    ));
    let request = r#"{"model": "m", "messages": [{"role": "user", "content": "x"}]}"#;
    let got = post(&probity.url("/openai/v1/chat/completions"), request).await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(got.text().len(), body.len());
    assert!(got.text() == body, "the answer passed byte for byte");
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
}
