//! The admin listener, on its own port so that metrics and health checks are
//! never reachable through the proxy port (and never routed upstream).
//!
//! - `GET /metrics`: Prometheus text format;
//! - `GET /healthz`: 200 while the process is up;
//! - `GET /readyz`: 200 while accepting traffic, 503 while draining;
//! - `POST /reload`: reads the configuration again (as SIGHUP does);
//! - `GET /captures`: the capture store's listing, the newest first;
//! - `GET /captures/{request_id}`: one capture's verbatim upstream body, with
//!   its content type; the upstream status and headers are in
//!   `probity-upstream-status` and `probity-upstream-<header name>`.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, ALLOW, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;

use crate::capture::{rfc3339, Capture, CaptureStore, Outcome};
use crate::telemetry;

/// Reloads the configuration: the routes now in force, or its problems.
pub(crate) type Reload = Arc<dyn Fn() -> Result<usize, String> + Send + Sync>;

/// The content type of the Prometheus text exposition format.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves the admin endpoints until the process exits; it outlives the proxy
/// listener during a drain so that `/readyz` can say 503.
pub(crate) async fn serve(
    listener: TcpListener,
    ready: Arc<AtomicBool>,
    metrics: PrometheusHandle,
    captures: Arc<CaptureStore>,
    reload: Reload,
) {
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
        let captures = captures.clone();
        let reload = reload.clone();
        let service = service_fn(move |request: Request<Incoming>| {
            let response = if request.uri().path() == "/reload" {
                reloaded(&request, &reload)
            } else {
                answer(&request, &ready, &metrics, &captures)
            };
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
    captures: &CaptureStore,
) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    let known =
        matches!(path, "/metrics" | "/healthz" | "/readyz") || path.starts_with("/captures");
    if known && request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "use GET\n".into());
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    match path {
        "/metrics" => {
            telemetry::runtime_sampled();
            let mut response = text(StatusCode::OK, metrics.render());
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static(PROMETHEUS_TEXT));
            response
        }
        "/healthz" => text(StatusCode::OK, "ok\n".into()),
        "/readyz" if ready.load(Ordering::SeqCst) => text(StatusCode::OK, "ready\n".into()),
        "/readyz" => text(StatusCode::SERVICE_UNAVAILABLE, "draining\n".into()),
        "/captures" | "/captures/" => listing(captures),
        _ => match path.strip_prefix("/captures/") {
            Some(id) => match captures.get(id) {
                Some(capture) => verbatim(&capture),
                None => text(
                    StatusCode::NOT_FOUND,
                    format!("no capture for request id {id}: it was valid, or evicted\n"),
                ),
            },
            None => text(
                StatusCode::NOT_FOUND,
                "admin endpoints: /metrics, /healthz, /readyz, /captures, POST /reload\n".into(),
            ),
        },
    }
}

/// `POST /reload`: 200 with the routes now in force, or 422 with every
/// problem of the configuration that was refused (the old one serves on).
fn reloaded(request: &Request<Incoming>, reload: &Reload) -> Response<Full<Bytes>> {
    if request.method() != Method::POST {
        let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "use POST\n".into());
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("POST"));
        return response;
    }
    match reload() {
        Ok(routes) => text(StatusCode::OK, format!("reloaded: {routes} routes\n")),
        Err(problems) => text(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("reload refused, the previous configuration keeps serving:\n{problems}\n"),
        ),
    }
}

/// `{"captures": [...]}`, the newest first.
fn listing(captures: &CaptureStore) -> Response<Full<Bytes>> {
    let entries: Vec<serde_json::Value> = captures
        .list()
        .iter()
        .map(|c| {
            let (outcome, pointers, invariant, reasons) = match &c.outcome {
                Outcome::Normalized(pointers) => ("normalized", pointers.clone(), None, Vec::new()),
                Outcome::Rejected(invariant) => {
                    ("rejected", Vec::new(), Some(*invariant), Vec::new())
                }
                Outcome::Cut(kind) => ("cut", Vec::new(), Some(*kind), Vec::new()),
                Outcome::OutputInvalid(reasons) => {
                    ("output_invalid", Vec::new(), None, reasons.clone())
                }
                Outcome::Stitched(pointers) => ("stitched", pointers.clone(), None, Vec::new()),
            };
            serde_json::json!({
                "request_id": c.request_id,
                "time": rfc3339(c.time),
                "route": &*c.route,
                "endpoint": c.endpoint,
                "outcome": outcome,
                "pointers": pointers,
                "invariant": invariant,
                "reasons": reasons,
                "upstream_status": c.status.as_u16(),
                "body_bytes": c.body_bytes,
                "body_captured": c.body.is_some(),
            })
        })
        .collect();
    let body = serde_json::json!({ "captures": entries }).to_string();
    let mut response = text(StatusCode::OK, body);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// The verbatim upstream body; status and headers beside it. A stitched
/// batch's capture is the list of its chunks' answers, as JSON.
fn verbatim(capture: &Capture) -> Response<Full<Bytes>> {
    if let Outcome::Stitched(_) = capture.outcome {
        let mut response = text(StatusCode::OK, String::new());
        *response.body_mut() = Full::new(capture.body.clone().unwrap_or_default());
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response.headers_mut().insert(
            HeaderName::from_static("probity-capture-shape"),
            HeaderValue::from_static("chunks"),
        );
        return response;
    }
    let body = capture.body.clone().unwrap_or_default();
    let mut response = Response::new(Full::new(body));
    let headers = response.headers_mut();
    for (name, value) in &capture.headers {
        if let Ok(name) = HeaderName::try_from(format!("probity-upstream-{name}")) {
            headers.append(name, value.clone());
        }
    }
    headers.insert(
        HeaderName::from_static("probity-upstream-status"),
        HeaderValue::from(capture.status.as_u16()),
    );
    if let Some(content_type) = capture.headers.get(CONTENT_TYPE) {
        headers.insert(CONTENT_TYPE, content_type.clone());
    }
    if capture.body.is_none() {
        headers.insert(
            HeaderName::from_static("probity-capture-body"),
            HeaderValue::from_static("omitted: larger than capture.max_bytes"),
        );
    }
    response
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
