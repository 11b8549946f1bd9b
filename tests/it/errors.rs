//! Every row of the error table, against upstreams that fail in that way.

use std::time::Duration;

use crate::support::*;
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use tokio::io::AsyncWriteExt;

/// Closes with RST rather than FIN. (A zero linger never blocks on drop.)
#[expect(
    deprecated,
    reason = "tokio deprecates set_linger for its blocking close; a zero linger never blocks"
)]
fn reset(stream: tokio::net::TcpStream) {
    let _ = stream.set_linger(Some(Duration::ZERO));
    drop(stream);
}

const FAST: &str = "timeout_ms = 600\nidle_timeout_ms = 300\nconnect_timeout_ms = 500";

/// An inspected request: one embedding.
const EMBED_ONE: &str = r#"{"model": "m", "input": "a"}"#;

#[tokio::test]
async fn a_closed_port_is_upstream_unreachable_with_the_remedy() {
    let port = closed_port();
    let upstream = format!("http://127.0.0.1:{port}");
    let routes = [
        route("ollama", "/ollama", &upstream, "ollama", ""),
        route("tei", "/tei", &upstream, "tei", ""),
    ]
    .concat();
    let probity = Probity::start(&config("", &routes));

    let error = get(&probity.url("/ollama/api/tags"))
        .await
        .error(502, "upstream_unreachable");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains(&upstream), "{message}");
    assert!(message.contains("ollama serve"), "{message}");
    assert!(message.contains("refused"), "{message}");
    assert_eq!(error["route"], "ollama");

    let error = get(&probity.url("/tei/embed"))
        .await
        .error(502, "upstream_unreachable");
    assert!(error["message"]
        .as_str()
        .unwrap()
        .contains("text-embeddings-router"));

    let sample = "probity_upstream_errors_total{route=\"ollama\",kind=\"unreachable\"}";
    assert_eq!(probity.metric(sample).await, Some(1.0));
}

#[tokio::test]
async fn an_unresolvable_host_is_upstream_unreachable() {
    let probity = Probity::start(&config(
        "",
        // A generous timeout: a slow resolver must fail the lookup, not the test.
        &route(
            "openai",
            "/openai",
            "http://no-such-host.invalid",
            "openai",
            "timeout_ms = 8000",
        ),
    ));
    let error = get(&probity.url("/openai/v1/models"))
        .await
        .error(502, "upstream_unreachable");
    assert!(error["message"]
        .as_str()
        .unwrap()
        .contains("no-such-host.invalid"));
}

#[tokio::test]
async fn an_upstream_that_never_answers_is_a_timeout() {
    let (addr, _) = raw_upstream(|stream| async move {
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(stream);
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route(
            "ollama",
            "/ollama",
            &format!("http://{addr}"),
            "ollama",
            FAST,
        ),
    ));
    let started = std::time::Instant::now();
    let error = get(&probity.url("/ollama/api/chat"))
        .await
        .error(504, "upstream_timeout");
    assert!(started.elapsed() >= Duration::from_millis(600));
    assert_eq!(error["code"], "timeout_ms");
    assert!(
        error["message"].as_str().unwrap().contains("600 ms"),
        "{error}"
    );
    let sample = "probity_upstream_errors_total{route=\"ollama\",kind=\"timeout\"}";
    assert_eq!(probity.metric(sample).await, Some(1.0));
}

#[tokio::test]
async fn a_json_body_that_stalls_midway_is_a_timeout() {
    let (addr, _) = raw_upstream(|mut stream| async move {
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 50\r\n\r\n{\"data\":";
        let _ = stream.write_all(head.as_bytes()).await;
        tokio::time::sleep(Duration::from_secs(30)).await;
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route(
            "openai",
            "/openai",
            &format!("http://{addr}"),
            "openai",
            FAST,
        ),
    ));
    // An inspected answer is read whole: a stall midway is still a 504.
    post(&probity.url("/openai/v1/embeddings"), EMBED_ONE)
        .await
        .error(504, "upstream_timeout");
}

#[tokio::test]
async fn a_reset_mid_body_is_upstream_reset() {
    let (addr, _) = raw_upstream(|mut stream| async move {
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"data\":[[0.1,";
        let _ = stream.write_all(head.as_bytes()).await;
        // Abortive close: RST, not FIN.
        reset(stream);
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route(
            "openai",
            "/openai",
            &format!("http://{addr}"),
            "openai",
            FAST,
        ),
    ));
    let error = post(&probity.url("/openai/v1/embeddings"), EMBED_ONE)
        .await
        .error(502, "upstream_reset");
    assert!(
        error["message"].as_str().unwrap().contains("retry"),
        "{error}"
    );
    let sample = "probity_upstream_errors_total{route=\"openai\",kind=\"reset\"}";
    assert_eq!(probity.metric(sample).await, Some(1.0));
}

#[tokio::test]
async fn a_close_before_any_response_is_upstream_reset() {
    let (addr, accepted) = raw_upstream(|stream| async move { drop(stream) }).await;
    let probity = Probity::start(&config(
        "",
        &route(
            "openai",
            "/openai",
            &format!("http://{addr}"),
            "openai",
            FAST,
        ),
    ));
    get(&probity.url("/openai/v1/embeddings"))
        .await
        .error(502, "upstream_reset");
    assert!(accepted.load(std::sync::atomic::Ordering::SeqCst) >= 1);
}

#[tokio::test]
async fn a_response_over_the_limit_is_refused_declared_or_not() {
    // Inspected answers (TEI's /embed) are held to judge them: bounded.
    let upstream = Upstream::start(|request| match request.target.as_str() {
        "/declared/embed" => Reply::json(200, vec![b' '; 2048]),
        "/chunked/embed" => Reply::stream(
            "application/json",
            (0..4).map(|_| part(Before::Now, vec![b' '; 600])).collect(),
        ),
        _ => Reply::json(200, format!("[[0.5]]{}", " ".repeat(990))),
    })
    .await;
    let limits = "max_response_bytes = 1024";
    let probity = Probity::start(&config(
        "",
        &route("tei", "/tei", &upstream.url(), "tei", limits),
    ));

    let inputs = r#"{"inputs": ["a"]}"#;
    for path in ["/tei/declared/embed", "/tei/chunked/embed"] {
        let error = post(&probity.url(path), inputs)
            .await
            .error(502, "upstream_response_too_large");
        assert!(
            error["message"].as_str().unwrap().contains("1024"),
            "{error}"
        );
    }
    let small = post(&probity.url("/tei/small/embed"), inputs).await;
    assert_eq!(small.status, 200, "{}", small.text());
    let sample = "probity_upstream_errors_total{route=\"tei\",kind=\"too_large\"}";
    assert_eq!(probity.metric(sample).await, Some(2.0));
}

#[tokio::test]
async fn a_request_over_the_limit_is_413_and_not_forwarded() {
    let upstream = Upstream::json(b"{}").await;
    let probity = Probity::start(&config(
        "max_request_bytes = 1024",
        &route("ollama", "/ollama", &upstream.url(), "ollama", ""),
    ));
    // Declared length (an inspected endpoint: its request is held).
    let error = post(&probity.url("/ollama/api/embed"), vec![b'x'; 4096])
        .await
        .error(413, "request_too_large");
    assert!(error["message"]
        .as_str()
        .unwrap()
        .contains("max_request_bytes"));
    // Chunked, no declared length: found while reading.
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    for _ in 0..3 {
        tx.send(Bytes::from(vec![b'y'; 600])).await.unwrap();
    }
    drop(tx);
    let request = Request::post(probity.url("/ollama/api/embed"))
        .body(ReplyStream::from(rx))
        .unwrap();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(hyper_util::client::legacy::connect::HttpConnector::new());
    let response = within("chunked 413", client.request(request))
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    // Exactly at the limit passes.
    assert_eq!(
        post(&probity.url("/ollama/api/embed"), vec![b'z'; 1024])
            .await
            .status,
        200
    );
    assert_eq!(upstream.requests().len(), 1);
}

#[tokio::test]
async fn a_stream_silent_before_its_first_byte_is_a_timeout() {
    let upstream = Upstream::start(|_| {
        Reply::stream(
            "application/x-ndjson",
            vec![part(
                Before::Pause(Duration::from_secs(5)),
                b"{\"done\":true}\n".to_vec(),
            )],
        )
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route("ollama", "/ollama", &upstream.url(), "ollama", FAST),
    ));
    let error = post(&probity.url("/ollama/api/chat"), "{}")
        .await
        .error(504, "upstream_timeout");
    assert_eq!(error["code"], "idle_timeout_ms");
}

#[tokio::test]
/// An endpoint no dialect checks (the Assistants API's streamed run) is
/// relayed as it comes; a fault cuts it
/// (checked streams end with an error event instead: tests/it/streams.rs).
async fn a_stream_that_goes_silent_is_ended_counted_and_logged() {
    let upstream = Upstream::start(|_| {
        Reply::stream(
            "text/event-stream",
            vec![
                part(Before::Now, b"data: {\"n\":1}\n\n".to_vec()),
                part(
                    Before::Pause(Duration::from_millis(50)),
                    b"data: {\"n\":2}\n\n".to_vec(),
                ),
                part(
                    Before::Pause(Duration::from_secs(5)),
                    b"data: [DONE]\n\n".to_vec(),
                ),
            ],
        )
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &upstream.url(), "openai", FAST),
    ));
    let request = Request::post(probity.url("/openai/v1/threads/runs"))
        .body(Full::new(Bytes::from_static(b"{\"stream\":true}")))
        .unwrap();
    let response = within("head", client().request(request)).await.unwrap();
    assert_eq!(response.status(), 200);
    let id = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    let mut body = response.into_body();
    let mut received = Vec::new();
    let mut failed = false;
    // The body ends (with an error: the stream was cut), it never hangs.
    while let Some(frame) = within("stream end", body.frame()).await {
        match frame {
            Ok(frame) => received.extend_from_slice(&frame.into_data().unwrap()),
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    assert!(failed, "a cut stream must not look complete");
    assert_eq!(received, b"data: {\"n\":1}\n\ndata: {\"n\":2}\n\n");
    let line = probity.request_log(&id).await;
    assert_eq!(line["ending"], "cut");
    let sample = "probity_upstream_errors_total{route=\"openai\",kind=\"timeout\"}";
    assert_eq!(probity.metric(sample).await, Some(1.0));
}

#[tokio::test]
async fn a_stream_reset_midway_is_ended_not_left_hanging() {
    let (addr, _) = raw_upstream(|mut stream| async move {
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n";
        let line = "{\"done\":false}\n";
        let chunk = format!("{:x}\r\n{line}\r\n", line.len());
        let _ = stream.write_all(format!("{head}{chunk}").as_bytes()).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        reset(stream);
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route(
            "ollama",
            "/ollama",
            &format!("http://{addr}"),
            "ollama",
            FAST,
        ),
    ));
    // Relayed as it comes (pulling a model is not inspected): cut.
    let request = Request::post(probity.url("/ollama/api/pull"))
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    let response = within("head", client().request(request)).await.unwrap();
    assert_eq!(response.status(), 200);
    let outcome = within("stream end", response.into_body().collect()).await;
    assert!(outcome.is_err(), "a reset stream must not look complete");
    let sample = "probity_upstream_errors_total{route=\"ollama\",kind=\"reset\"}";
    within("reset counted", async {
        while probity.metric(sample).await != Some(1.0) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_stream_over_the_limit_is_cut() {
    let upstream = Upstream::start(|_| {
        Reply::stream(
            "application/x-ndjson",
            (0..10)
                .map(|_| part(Before::Pause(Duration::from_millis(5)), vec![b'a'; 300]))
                .collect(),
        )
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route(
            "ollama",
            "/ollama",
            &upstream.url(),
            "ollama",
            "max_response_bytes = 1000",
        ),
    ));
    // An inspected stream (Ollama's chat streams by default) is held to
    // max_response_bytes, and ends with its own error line when over it.
    let request = Request::post(probity.url("/ollama/api/chat"))
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    let response = within("head", client().request(request)).await.unwrap();
    assert_eq!(response.status(), 200);
    let body = within("stream end", response.into_body().collect())
        .await
        .unwrap()
        .to_bytes();
    let text = String::from_utf8_lossy(&body);
    let last = text.lines().last().unwrap_or_default();
    let line: serde_json::Value = serde_json::from_str(last).unwrap();
    assert_eq!(line["type"], "upstream_response_too_large", "{last}");
    // Not inspected (a model pull): relayed as it comes, bounded by none
    // of probity's limits.
    let request = Request::post(probity.url("/ollama/api/pull"))
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    let response = within("head", client().request(request)).await.unwrap();
    let body = within("pull", response.into_body().collect())
        .await
        .unwrap()
        .to_bytes();
    assert_eq!(body.len(), 3000);
}

#[tokio::test]
async fn a_tls_failure_is_upstream_unreachable() {
    // An https:// upstream that speaks plain HTTP: the TLS handshake fails.
    let upstream = Upstream::json(b"{}").await;
    let https = format!("https://{}", upstream.addr);
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &https, "openai", FAST),
    ));
    let error = get(&probity.url("/openai/v1/models"))
        .await
        .error(502, "upstream_unreachable");
    assert!(
        error["message"].as_str().unwrap().contains(&https),
        "{error}"
    );
}

#[tokio::test]
async fn a_client_that_never_finishes_its_head_is_disconnected() {
    let upstream = Upstream::json(b"{}").await;
    let probity = Probity::start(&config(
        "header_read_timeout_ms = 200",
        &route("ollama", "/ollama", &upstream.url(), "ollama", ""),
    ));
    let started = std::time::Instant::now();
    // `raw` reads until the server closes; a slow head must not hold the slot.
    let reply = raw(
        probity.addr,
        b"GET /ollama/api/tags HTTP/1.1\r\nHost: p\r\n",
    )
    .await;
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert!(!reply.contains("200 OK"), "{reply}");
    assert!(upstream.requests().is_empty());
}
