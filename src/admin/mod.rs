//! The admin listener, on its own port so that metrics and health checks are
//! never reachable through the proxy port (and never routed upstream).
//!
//! - `GET /metrics`: Prometheus text format;
//! - `GET /healthz`: 200 while the process is up;
//! - `GET /readyz`: 200 while accepting traffic, 503 while draining.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;

/// The content type of the Prometheus text exposition format.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves the admin endpoints until the process exits; it outlives the proxy
/// listener during a drain so that `/readyz` can say 503.
pub async fn serve(listener: TcpListener, ready: Arc<AtomicBool>, metrics: PrometheusHandle) {
    // Histograms are drained into their buckets by upkeep, not on render.
    let upkeep = metrics.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(5));
        loop {
            every.tick().await;
            upkeep.run_upkeep();
        }
    });

    let mut http = auto::Builder::new(TokioExecutor::new());
    http.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(10));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(err) => {
                tracing::warn!(error = %err, "admin accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let ready = ready.clone();
        let metrics = metrics.clone();
        let service = service_fn(move |request: Request<Incoming>| {
            let response = answer(&request, &ready, &metrics);
            async move { Ok::<_, Infallible>(response) }
        });
        let http = http.clone();
        tokio::spawn(async move {
            let _ = http.serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

fn answer(
    request: &Request<Incoming>,
    ready: &AtomicBool,
    metrics: &PrometheusHandle,
) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    let known = matches!(path, "/metrics" | "/healthz" | "/readyz");
    if known && request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "use GET\n".into());
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    match path {
        "/metrics" => {
            let mut response = text(StatusCode::OK, metrics.render());
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static(PROMETHEUS_TEXT));
            response
        }
        "/healthz" => text(StatusCode::OK, "ok\n".into()),
        "/readyz" if ready.load(Ordering::SeqCst) => text(StatusCode::OK, "ready\n".into()),
        "/readyz" => text(StatusCode::SERVICE_UNAVAILABLE, "draining\n".into()),
        _ => text(
            StatusCode::NOT_FOUND,
            "admin endpoints: /metrics, /healthz, /readyz\n".into(),
        ),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
