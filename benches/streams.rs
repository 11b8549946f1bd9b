//! What probity adds to a live stream, measured end to end over loopback:
//!
//! 1. latency: an in-process upstream writes SSE chat chunks at a fixed pace
//!    and stamps each write; the client stamps each arrival. The same stream
//!    is read directly and through the `probity` binary (release build), and
//!    the difference of the delays is what probity adds, to the first byte
//!    and to each event;
//! 2. memory: 1,000 concurrent slow streams (one event every 500 ms) through
//!    probity, and its resident memory before and during.
//!
//! `cargo bench --bench streams`. Bounded in time (about 20 s) and only on
//! 127.0.0.1.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    unreachable_pub,
    reason = "tests and benches fail loudly: the request path's lints do not apply"
)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

mod support;
use support::Probity;

const EVENTS: usize = 200;
const PACE: Duration = Duration::from_millis(5);
const STREAMS: usize = 1000;

fn chunk(i: usize) -> Bytes {
    Bytes::from(format!(
        "data: {{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1764410400,\"model\":\"gpt-4o-mini\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"token{i} \"}},\"finish_reason\":null}}],\"usage\":null}}\n\n"
    ))
}

struct Channel(mpsc::Receiver<Bytes>);

impl Body for Channel {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

/// An SSE upstream: `events` chunks `pace` apart; each write time is pushed
/// to `stamps` (when given).
async fn upstream(events: usize, pace: Duration, stamps: Arc<Mutex<Vec<Instant>>>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let _ = stream.set_nodelay(true);
            let stamps = stamps.clone();
            let service = service_fn(move |request: Request<Incoming>| {
                let stamps = stamps.clone();
                async move {
                    let _ = request.into_body().collect().await;
                    let (tx, rx) = mpsc::channel(4);
                    tokio::spawn(async move {
                        for i in 0..events {
                            if i > 0 {
                                tokio::time::sleep(pace).await;
                            }
                            stamps.lock().unwrap().push(Instant::now());
                            if tx.send(chunk(i)).await.is_err() {
                                return;
                            }
                        }
                        let _ = tx.send(Bytes::from_static(b"data: [DONE]\n\n")).await;
                    });
                    let response = Response::builder()
                        .header("content-type", "text/event-stream")
                        .body(Channel(rx))
                        .unwrap();
                    Ok::<_, Infallible>(response)
                }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// The bench configuration: one route to `upstream`. PROBITY_BENCH_DIALECT
/// = passthrough measures the relay alone.
fn start(upstream: SocketAddr) -> Probity {
    let dialect = std::env::var("PROBITY_BENCH_DIALECT").unwrap_or_else(|_| "openai".into());
    Probity::start(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\nmax_connections = 8192\n\
         [[routes]]\nname = \"bench\"\nprefix = \"/bench\"\nupstream = \"http://{upstream}\"\ndialect = \"{dialect}\"\n"
    ))
}

const REQUEST: &str =
    r#"{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"Hi"}]}"#;

/// Reads one stream; returns (first byte delay, per-event delays) against
/// the upstream's write stamps.
async fn measure(url: String, stamps: Arc<Mutex<Vec<Instant>>>) -> (Duration, Vec<Duration>) {
    stamps.lock().unwrap().clear();
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let started = Instant::now();
    let request = Request::post(url)
        .body(Full::new(Bytes::from_static(REQUEST.as_bytes())))
        .unwrap();
    let response = client.request(request).await.unwrap();
    let mut body = response.into_body();
    let mut arrivals = Vec::with_capacity(EVENTS);
    let mut buffered = Vec::new();
    let mut first_byte = None;
    while let Some(frame) = body.frame().await {
        let now = Instant::now();
        first_byte.get_or_insert(now - started);
        buffered.extend_from_slice(&frame.unwrap().into_data().unwrap());
        // Count complete events in what arrived.
        while let Some(end) = buffered.windows(2).position(|w| w == b"\n\n") {
            buffered.drain(..end + 2);
            arrivals.push(now);
        }
    }
    let stamps = stamps.lock().unwrap().clone();
    let delays = stamps
        .iter()
        .zip(&arrivals)
        .map(|(sent, got)| got.saturating_duration_since(*sent))
        .collect();
    (first_byte.unwrap_or_default(), delays)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // `cargo test --all-targets` builds benches and runs them with `--bench`
    // absent: do nothing then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let stamps = Arc::new(Mutex::new(Vec::new()));
    let up = upstream(EVENTS, PACE, stamps.clone()).await;
    let probity = start(up);

    println!(
        "== latency: {EVENTS} SSE chat chunks, {} ms apart, 5 runs each",
        PACE.as_millis()
    );
    let mut results = Vec::new();
    for (name, url) in [
        ("direct", format!("http://{up}/v1/chat/completions")),
        (
            "probity",
            format!("http://{}/bench/v1/chat/completions", probity.addr),
        ),
    ] {
        let mut firsts = Vec::new();
        let mut delays = Vec::new();
        for _ in 0..5 {
            let (first, d) = measure(url.clone(), stamps.clone()).await;
            firsts.push(first);
            delays.extend(d);
        }
        firsts.sort();
        delays.sort();
        let (f50, d50, d99) = (
            percentile(&firsts, 0.5),
            percentile(&delays, 0.5),
            percentile(&delays, 0.99),
        );
        println!(
            "{name:>8}: first byte p50 {f50:?}; per event p50 {d50:?}, p99 {d99:?} ({} events)",
            delays.len()
        );
        results.push((f50, d50, d99));
    }
    let (direct, via) = (results[0], results[1]);
    println!(
        "probity adds: first byte {:?} (p50), per event {:?} (p50), {:?} (p99)",
        via.0.saturating_sub(direct.0),
        via.1.saturating_sub(direct.1),
        via.2.saturating_sub(direct.2)
    );
    drop(probity);

    println!("== memory: {STREAMS} concurrent slow streams (an event every 500 ms, 5 s each)");
    let slow = upstream(
        10,
        Duration::from_millis(500),
        Arc::new(Mutex::new(Vec::new())),
    )
    .await;
    let probity = start(slow);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let idle = probity.rss_kib();
    let url = format!("http://{}/bench/v1/chat/completions", probity.addr);
    let mut tasks = Vec::new();
    for _ in 0..STREAMS {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let client: Client<HttpConnector, Full<Bytes>> =
                Client::builder(TokioExecutor::new()).build(HttpConnector::new());
            let request = Request::post(url)
                .body(Full::new(Bytes::from_static(REQUEST.as_bytes())))
                .unwrap();
            let response = client.request(request).await.unwrap();
            response
                .into_body()
                .collect()
                .await
                .unwrap()
                .to_bytes()
                .len()
        }));
    }
    let mut peak = idle;
    let started = Instant::now();
    while tasks.iter().any(|t| !t.is_finished()) && started.elapsed() < Duration::from_secs(15) {
        peak = peak.max(probity.rss_kib());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut bytes = 0;
    for task in tasks {
        bytes += task.await.unwrap();
    }
    println!(
        "probity RSS: idle {idle} KiB, peak {peak} KiB with {STREAMS} streams: {:.1} KiB per stream ({bytes} bytes relayed)",
        (peak - idle) as f64 / STREAMS as f64
    );
}
