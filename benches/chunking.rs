//! Wall time of a 1,000-input embedding batch through probity, chunked
//! (`max_batch_inputs = 96`, `max_chunk_concurrency = 4`) versus sent whole,
//! against a provider that takes 50 ms per call whatever its size.
//!
//! `cargo bench --bench chunking`. Loopback only, a few seconds.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    unreachable_pub,
    reason = "tests and benches fail loudly: the request path's lints do not apply"
)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

#[expect(
    dead_code,
    reason = "this bench reads no memory figure (Probity::rss_kib)"
)]
mod support;
use support::Probity;

const INPUTS: usize = 1000;
const LATENCY: Duration = Duration::from_millis(50);

/// An OpenAI-style embeddings provider: 256-dimension vectors, 50 ms a call.
async fn provider() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let service = service_fn(|request: Request<Incoming>| async move {
                let body = request.into_body().collect().await.unwrap().to_bytes();
                let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
                let n = json["input"].as_array().map_or(1, Vec::len);
                let vector = format!("[{}]", vec!["0.0123456789"; 256].join(","));
                let data: Vec<String> = (0..n)
                    .map(|i| {
                        format!(r#"{{"object":"embedding","index":{i},"embedding":{vector}}}"#)
                    })
                    .collect();
                let body = format!(
                    r#"{{"object":"list","data":[{}],"model":"m","usage":{{"prompt_tokens":{n},"total_tokens":{n}}}}}"#,
                    data.join(",")
                );
                tokio::time::sleep(LATENCY).await;
                let response = Response::builder()
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(body)))
                    .unwrap();
                Ok::<_, Infallible>(response)
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

fn start(upstream: SocketAddr) -> Probity {
    Probity::start(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\
         [[routes]]\nname = \"chunked\"\nprefix = \"/chunked\"\nupstream = \"http://{upstream}\"\ndialect = \"openai\"\n\
         max_batch_inputs = 96\nmax_chunk_concurrency = 4\n\
         [[routes]]\nname = \"whole\"\nprefix = \"/whole\"\nupstream = \"http://{upstream}\"\ndialect = \"openai\"\n"
    ))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let upstream = provider().await;
    let probity = start(upstream);
    let addr = probity.addr;
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let inputs: Vec<String> = (0..INPUTS).map(|i| format!("document {i}")).collect();
    let request = Bytes::from(serde_json::json!({"model": "m", "input": inputs}).to_string());
    println!(
        "== {INPUTS} inputs, provider latency {} ms per call, 5 runs each",
        LATENCY.as_millis()
    );
    for (name, path) in [
        ("whole", "/whole/v1/embeddings"),
        ("chunked (96, 4 at once)", "/chunked/v1/embeddings"),
    ] {
        let mut times = Vec::new();
        for _ in 0..5 {
            let started = Instant::now();
            let response = client
                .request(
                    Request::post(format!("http://{addr}{path}"))
                        .body(Full::new(request.clone()))
                        .unwrap(),
                )
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
            let body = response.into_body().collect().await.unwrap().to_bytes();
            times.push(started.elapsed());
            let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(json["data"].as_array().unwrap().len(), INPUTS);
        }
        times.sort();
        println!(
            "{name:>24}: median {:?}, min {:?}, max {:?}",
            times[2], times[0], times[4]
        );
    }
    drop(probity);
}
