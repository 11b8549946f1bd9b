//! The fault suite: upstreams that fail in each way a provider, a gateway
//! or a network does, over real sockets. Each gives the client exactly one
//! well-formed answer within the route's limits, is counted, and leaves no
//! descriptor behind.

// Tests and benches fail loudly: the request-path lints do not apply.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    unreachable_pub,
    missing_docs
)]

mod support;

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use support::*;
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

#[allow(deprecated)]
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
