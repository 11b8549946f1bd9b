//! The admin listener, on its own port so that metrics and health checks are
//! never reachable through the proxy port (and never routed upstream).
//!
//! `/metrics`, `/healthz`, `/readyz` and the page's shell (`/`, which holds
//! no data) are open: they are what Prometheus, the kubelet and a browser
//! need first. Everything that reveals an exchange or changes state needs
//! the admin token (`[admin] token_env`) as `Authorization: Bearer`; the
//! page asks for it once and keeps it in the tab's session storage. With no
//! token configured, a listener bound to loopback only (the default) serves
//! those to this host, and one bound beyond it (a container's) to no one.
//!
//! "This host" includes its browser, which runs other sites' pages: with no
//! token, a guarded endpoint refuses a request whose `Host` is not a
//! loopback name or address (a page that rebound its own name to 127.0.0.1)
//! and one a browser marks as sent for another origin (`Origin`,
//! `Sec-Fetch-Site`). `POST /reload` changes state: it refuses another
//! origin's request even with the token.
//!
//! - `GET /`: the admin page (`page.html`): per-route figures and the latest
//!   captures, one capture's verbatim body beside what the client received;
//! - `GET /status.json`: what the page shows, refreshed every few seconds;
//! - `GET /view.json?id=<request_id>`: one capture laid out for the page;
//! - `GET /metrics`: Prometheus text format;
//! - `GET /healthz`: 200 while the process is up;
//! - `GET /readyz`: 200 while accepting traffic, 503 while draining;
//! - `POST /reload`: reads the configuration again (as SIGHUP does);
//! - `GET /captures`: the capture store's listing, the newest first, paged
//!   (`limit`, `before`) and filtered (`route`, `outcome`, `since`);
//! - `GET /captures/{request_id}`: one capture's verbatim upstream body, with
//!   its content type; the upstream status and headers are in
//!   `probity-upstream-status` and `probity-upstream-<header name>`.
//!
//! Around those answers sit tower-http's layers ([`layered`]): gzip when
//! the client accepts it (Prometheus's scraper does), `Authorization`
//! marked sensitive, a deadline on each answer, and a panic caught; a
//! timeout or a panic is answered in probity's error shape.

mod page;
mod view;

use std::any::Any;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, ALLOW, AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tower::{BoxError, Service, ServiceBuilder};
use tower_http::body::UnsyncBoxBody;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::compression::predicate::{NotForContentType, Predicate, SizeAbove};
use tower_http::compression::{CompressionBody, CompressionLayer};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;

use crate::capture::{Captures, Meta, Query, Stored};
use crate::error::{Answering, ProxyError, RequestError};
use crate::opening::{self, Opening};
use crate::route::{AdminCrossing as Crossing, AdminRefusal, RouteSummary};
use crate::telemetry;
use probity_judge::inspect::Envelope;

/// Reloads the configuration: the routes now in force, or its problems.
pub(crate) type Reload = Arc<dyn Fn() -> Result<usize, String> + Send + Sync>;

/// The routes in force now (a reload may have changed them).
pub(crate) type RouteList = Arc<dyn Fn() -> Vec<RouteSummary> + Send + Sync>;

/// Whether a request's headers present the admin token in force now (a
/// reload may have rotated it); a refusal names its variable.
pub(crate) type Gate = Arc<dyn Fn(&HeaderMap) -> Result<(), (AdminRefusal, String)> + Send + Sync>;

/// How long an admin connection may take over its request head (and an
/// idle one stay open): a scraper or a browser sends one at once.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one admin answer may take to be ready: above a capture bucket's
/// own 30 s deadline for one request (`capture::buckets`), so the store's
/// own, more precise error comes first; below what a person or a scraper
/// waits for. Sending the body is not counted: every answer is whole in
/// memory once ready (a capture is at most a route's `max_response_bytes`),
/// so a large download over a slow link is never cut.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// Answers smaller than this go as they are: gzip's own header and trailer
/// would eat most of what it saves.
const COMPRESS_ABOVE_BYTES: u16 = 256;

/// The content type of the Prometheus text exposition format.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves the admin endpoints until the process exits; it outlives the proxy
/// listener during a drain so that `/readyz` can say 503.
pub(crate) async fn serve(
    listener: TcpListener,
    ready: Arc<AtomicBool>,
    metrics: PrometheusHandle,
    captures: Arc<Captures>,
    reload: Reload,
    routes: RouteList,
    gate: Gate,
) {
    tokio::spawn(upkeep(metrics.clone()));

    let started = Arc::new(page::Started::now());
    // Bound to loopback only, the listener is this host's alone: with no
    // token configured, it serves what needs one to this host (as a tool
    // on the same machine expects); anywhere else, only the token opens it.
    let local = listener.local_addr().ok();
    let local_only = local.is_some_and(|a| a.ip().is_loopback());
    let port = local.map_or(0, |a| a.port());
    let protocols = Arc::new(protocols());
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                tracing::warn!(error = %err, "admin accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let due = tokio::time::Instant::now() + HEADER_READ_TIMEOUT;
        let headed = Arc::new(AtomicBool::new(false));
        let ready = ready.clone();
        let metrics = metrics.clone();
        let captures = captures.clone();
        let reload = reload.clone();
        let started = started.clone();
        let routes = routes.clone();
        let gate = gate.clone();
        let first = headed.clone();
        let service = tower::service_fn(move |request: Request<Incoming>| {
            first.store(true, Ordering::Relaxed);
            let (ready, metrics, captures, reload, started, routes) = (
                ready.clone(),
                metrics.clone(),
                captures.clone(),
                reload.clone(),
                started.clone(),
                routes.clone(),
            );
            let refused = refusal(&request, &gate, peer, (local_only, port));
            async move {
                if let Some(refused) = refused {
                    return Ok::<_, Infallible>(refused);
                }
                let admin = Admin {
                    ready: &ready,
                    metrics: &metrics,
                    captures: &captures,
                    started: &started,
                    routes: &routes,
                };
                let response = if request.uri().path() == "/reload" {
                    reloaded(&request, &reload)
                } else {
                    answer(&request, &admin).await
                };
                Ok::<_, Infallible>(response)
            }
        });
        tokio::spawn(connection(
            stream,
            TowerToHyperService::new(layered(service, ANSWER_TIMEOUT)),
            protocols.clone(),
            (due, headed),
        ));
    }
}

/// An admin answer's body once the layers have had it.
type LayeredBody = CompressionBody<UnsyncBoxBody<Bytes, BoxError>>;

/// The admin's cross-cutting concerns as tower's and tower-http's layers
/// around what answers (`inner`), outermost first. Nothing here is on the
/// proxy path (docs/src/contributing/request-path.md says why): an admin
/// answer has no route, dialect or stream to keep.
fn layered<S, B>(
    inner: S,
    timeout: Duration,
) -> impl Service<
    Request<B>,
    Response = Response<LayeredBody>,
    Error = BoxError,
    Future: Send + 'static,
> + Clone
       + Send
       + 'static
where
    S: Service<Request<B>, Response = Response<Full<Bytes>>, Error = Infallible>,
    S: Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    ServiceBuilder::new()
        // First, so that no layer below (a log, a trace) prints the token.
        .layer(SetSensitiveRequestHeadersLayer::new([AUTHORIZATION]))
        .layer(CompressionLayer::new().compress_when(compressible()))
        .layer(CatchPanicLayer::custom(panicked))
        // The inner service cannot fail: the only error is the deadline's,
        // answered here, so no error reaches hyper.
        .map_result(move |answered: Result<_, BoxError>| {
            Ok::<_, BoxError>(answered.unwrap_or_else(|_| timed_out(timeout)))
        })
        .timeout(timeout)
        .service(inner)
}

/// Which answers are gzipped (for a client that accepts it): all but the
/// small and images (a capture of one is compressed already). Unlike
/// tower-http's default, `text/event-stream` is too: here it is a stored
/// stream sent whole, not a live one.
fn compressible() -> impl Predicate {
    SizeAbove::new(COMPRESS_ABOVE_BYTES).and(NotForContentType::IMAGES)
}

/// An admin answer in probity's error shape (no route: OpenAI's layout).
fn admin_error(err: &ProxyError, request_id: &HeaderValue) -> Response<Full<Bytes>> {
    let answering = Answering {
        route: None,
        request_id,
        envelope: Envelope::Nested,
        retry_invalid: false,
        mid_stream: false,
    };
    err.respond(&answering).map(Full::new)
}

/// A request not answered within `after`: 503 with `Retry-After`.
fn timed_out(after: Duration) -> Response<Full<Bytes>> {
    // The request is gone with its future: a fresh id ties the answer to
    // this log line.
    let request_id = crate::request_id::request_id(&HeaderMap::new());
    tracing::warn!(
        request_id = request_id.to_str().unwrap_or("-"),
        after_s = after.as_secs(),
        "admin request timed out"
    );
    admin_error(&ProxyError::AdminTimeout { after }, &request_id)
}

/// A panic while answering: a 500 `internal_error`, counted and logged as
/// the proxy's own are, never a dropped connection.
fn panicked(payload: Box<dyn Any + Send>) -> Response<Full<Bytes>> {
    let what = if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_string()
    };
    let request_id = crate::request_id::request_id(&HeaderMap::new());
    telemetry::internal_error(crate::context::NO_ROUTE_LABEL, &request_id, &what);
    admin_error(&ProxyError::Internal { what }, &request_id)
}

/// The servers of admin connections, one a protocol.
fn protocols() -> (http1::Builder, http2::Builder<TokioExecutor>) {
    let mut http1 = http1::Builder::new();
    http1
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let mut http2 = http2::Builder::new(TokioExecutor::new());
    http2.timer(TokioTimer::new());
    (http1, http2)
}

/// Histograms are drained into their buckets by upkeep, not on render.
async fn upkeep(metrics: PrometheusHandle) {
    let mut every = tokio::time::interval(Duration::from_secs(5));
    loop {
        every.tick().await;
        metrics.run_upkeep();
    }
}

/// Serves one admin connection. As the proxy's, its opening and its first
/// head are `due` from the accept, however the client paces them
/// (`headed` is set by its service at its first request).
async fn connection<S>(
    stream: tokio::net::TcpStream,
    service: S,
    protocols: Arc<(http1::Builder, http2::Builder<TokioExecutor>)>,
    (due, headed): (tokio::time::Instant, Arc<AtomicBool>),
) where
    S: hyper::service::HttpService<Incoming, ResBody = LayeredBody> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    let Some(opening) = opening::opening(&stream, due).await else {
        return;
    };
    let (http1, http2) = &*protocols;
    let io = TokioIo::new(stream);
    match opening {
        Opening::Http1 => tokio::select! {
            _ = http1.serve_connection(io, service) => {}
            () = opening::headed_by(due, &headed) => {}
        },
        Opening::Http2 => {
            let _ = http2.serve_connection(io, service).await;
        }
    }
}

/// Whether an endpoint reveals an exchange or changes state: the captures,
/// the page's data and the reload need the admin token; metrics, health and
/// the page's shell do not.
fn guarded(path: &str) -> bool {
    matches!(path, "/status.json" | "/view.json" | "/reload") || path.starts_with("/captures")
}

/// `None` for an open endpoint, a request with the admin token, or one
/// from this host to a loopback listener with no token configured; else its
/// 401 or 403, in probity's error shape, logged without any token.
fn refusal(
    request: &Request<Incoming>,
    gate: &Gate,
    peer: std::net::SocketAddr,
    (local_only, port): (bool, u16),
) -> Option<Response<Full<Bytes>>> {
    let path = request.uri().path();
    if !guarded(path) {
        return None;
    }
    let crossing = crossing(request, port);
    let err = match (gate(request.headers()), crossing) {
        // A change of state is never another site's to ask for.
        (_, Some(crossing @ Crossing::OtherOrigin)) if path == "/reload" => {
            RequestError::AdminCrossSite { crossing }
        }
        (Ok(()), _) => return None,
        (Err((AdminRefusal::NotConfigured, _)), None) if local_only => return None,
        (Err((AdminRefusal::NotConfigured, _)), Some(crossing)) if local_only => {
            RequestError::AdminCrossSite { crossing }
        }
        (Err((refusal, variable)), _) => RequestError::AdminUnauthenticated { refusal, variable },
    };
    let request_id = crate::request_id::request_id(request.headers());
    let refusal = match &err {
        RequestError::AdminUnauthenticated { refusal, .. } => refusal.as_str(),
        RequestError::AdminCrossSite { crossing } => crossing.as_str(),
        _ => "-",
    };
    tracing::info!(
        request_id = request_id.to_str().unwrap_or("-"),
        path,
        peer = %peer.ip(),
        refusal,
        "admin request refused"
    );
    Some(admin_error(&ProxyError::Request(err), &request_id))
}

/// What a request says of where it comes from, against a listener on
/// `port`: `None` when it is this listener's own origin's (or no
/// browser's: a tool sends neither header).
fn crossing(request: &Request<Incoming>, port: u16) -> Option<Crossing> {
    let headers = request.headers();
    let host = request
        .uri()
        .authority()
        .map(|a| a.as_str())
        .or_else(|| headers.get(http::header::HOST)?.to_str().ok());
    if !host.is_some_and(|host| loopback(host, None)) {
        return Some(Crossing::ForeignHost);
    }
    let fetched = headers.get("sec-fetch-site").map(HeaderValue::as_bytes);
    if fetched.is_some_and(|site| site != b"same-origin" && site != b"none") {
        return Some(Crossing::OtherOrigin);
    }
    let origin = headers.get(http::header::ORIGIN).map(|o| o.to_str());
    match origin {
        None => None,
        Some(Ok(origin)) => match origin.strip_prefix("http://") {
            Some(authority) if loopback(authority, Some(port)) => None,
            _ => Some(Crossing::OtherOrigin),
        },
        Some(Err(_)) => Some(Crossing::OtherOrigin),
    }
}

/// Whether an authority (`host[:port]`) names this host by a loopback
/// address or the `localhost` names browsers keep on loopback (RFC 6761),
/// on `port` when one is asked for (an origin's port is part of it).
fn loopback(authority: &str, port: Option<u16>) -> bool {
    let Ok(authority) = authority.parse::<http::uri::Authority>() else {
        return false;
    };
    if let Some(port) = port {
        if authority.port_u16().unwrap_or(80) != port {
            return false;
        }
    }
    let host = authority.host();
    let name = host.trim_start_matches('[').trim_end_matches(']');
    match name.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            name == "localhost" || name.ends_with(".localhost")
        }
    }
}

/// What the admin endpoints read.
struct Admin<'a> {
    ready: &'a AtomicBool,
    metrics: &'a PrometheusHandle,
    captures: &'a Captures,
    started: &'a page::Started,
    routes: &'a RouteList,
}

async fn answer(request: &Request<Incoming>, admin: &Admin<'_>) -> Response<Full<Bytes>> {
    let Admin {
        ready,
        metrics,
        captures,
        started,
        routes,
    } = *admin;
    let path = request.uri().path();
    let known = matches!(
        path,
        "/" | "/status.json" | "/view.json" | "/metrics" | "/healthz" | "/readyz"
    ) || path.starts_with("/captures");
    if known && request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "use GET\n".into());
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    match path {
        "/" => page::page(),
        "/status.json" => page::status(ready, started, captures, &routes()).await,
        "/view.json" => match view_id(request.uri().query()) {
            Some(id) => page::capture_view(captures, &id).await,
            None => text(
                StatusCode::BAD_REQUEST,
                "use /view.json?id=<request id>\n".into(),
            ),
        },
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
        "/captures" | "/captures/" => listing(captures, request.uri().query()).await,
        _ => match path.strip_prefix("/captures/") {
            Some(id) => match chunk_path(id) {
                Some((id, n)) => match captures.get(id).await {
                    Ok(found) => match found.and_then(|c| chunk_of(c, n)) {
                        Some(chunk) => sandboxed(verbatim(chunk)),
                        None => text(
                            StatusCode::NOT_FOUND,
                            format!("no chunk {n} of a capture for request id {id}\n"),
                        ),
                    },
                    Err(err) => unreadable(id, &err),
                },
                None => match captures.get(id).await {
                    Ok(Some(capture)) => sandboxed(verbatim(capture)),
                    Ok(None) => text(
                        StatusCode::NOT_FOUND,
                        format!("no capture for request id {id}: it was valid, or evicted\n"),
                    ),
                    Err(err) => unreadable(id, &err),
                },
            },
            None => text(
                StatusCode::NOT_FOUND,
                "admin endpoints: / (the admin page), /status.json, /view.json?id=, /metrics, \
                 /healthz, /readyz, /captures, POST /reload\n"
                    .into(),
            ),
        },
    }
}

/// A capture the store would not give back: 503, since it may be there.
fn unreadable(id: &str, err: &crate::capture::ReadError) -> Response<Full<Bytes>> {
    let mut response = text(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("capture for request id {id}: {err}\n"),
    );
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static("5"));
    response
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

/// `{id}/chunks/{n}`: a chunk of a chunked exchange's capture.
fn chunk_path(path: &str) -> Option<(&str, usize)> {
    let (id, n) = path.split_once("/chunks/")?;
    Some((id, n.parse().ok()?))
}

/// Most captures on one page of a listing.
const MAX_PAGE: usize = 1000;

/// `{"captures": [...], "next": <request id>|null, "unread": n}`, the
/// newest first; the next page is `?before=<next>` with the same filters;
/// `unread` counts captures the store did not give in time (left out).
async fn listing(captures: &Captures, query: Option<&str>) -> Response<Full<Bytes>> {
    let query = match parse_query(query.unwrap_or("")) {
        Ok(query) => query,
        Err(why) => return text(StatusCode::BAD_REQUEST, format!("{why}\n")),
    };
    let found = match captures.list(&query).await {
        Ok(found) => found,
        Err(err) => return text(StatusCode::BAD_REQUEST, format!("{err}\n")),
    };
    let entries: Vec<serde_json::Value> = found
        .captures
        .into_iter()
        .filter_map(page::listed)
        .collect();
    let body =
        serde_json::json!({ "captures": entries, "next": found.next, "unread": found.unread })
            .to_string();
    let mut response = text(StatusCode::OK, body);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// The `id` of `/view.json?id=`, percent-decoded.
fn view_id(query: Option<&str>) -> Option<String> {
    query?
        .split('&')
        .find_map(|pair| pair.strip_prefix("id="))
        .map(decode)
        .filter(|id| !id.is_empty())
}

/// `limit`, `before`, `route`, `outcome`, `since` (RFC 3339, or a date).
fn parse_query(query: &str) -> Result<Query, String> {
    let mut parsed = Query {
        limit: 100,
        ..Query::default()
    };
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = decode(value);
        match key {
            "limit" => {
                parsed.limit = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_PAGE).contains(n))
                    .ok_or(format!("limit={value}: a number from 1 to {MAX_PAGE}"))?;
            }
            "before" => parsed.before = Some(value),
            "route" => parsed.route = Some(value),
            "outcome" => parsed.outcome = Some(value),
            "since" => {
                parsed.since = Some(crate::capture::parse_time(&value).ok_or(format!(
                    "since={value}: not a time (e.g. 2026-12-01T22:00:00Z)"
                ))?);
            }
            _ => {
                return Err(format!(
                    "unknown parameter {key}: limit, before, route, outcome, since"
                ))
            }
        }
    }
    Ok(parsed)
}

/// A query value, percent-decoded (`+` is a space).
fn decode(value: &str) -> String {
    let mut out = Vec::with_capacity(value.len());
    let mut bytes = value.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'+' => out.push(b' '),
            b'%' => {
                let hex: Vec<u8> = bytes.by_ref().take(2).collect();
                let decoded = std::str::from_utf8(&hex)
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match decoded {
                    Some(byte) if hex.len() == 2 => out.push(byte),
                    _ => {
                        out.push(b'%');
                        out.extend_from_slice(&hex);
                    }
                }
            }
            _ => out.push(b),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The verbatim upstream body; status and headers beside it. A chunked
/// exchange's capture is the list of its chunks' answers, as JSON (each
/// chunk's bytes, verbatim: `/captures/{id}/chunks/{n}`).
fn verbatim(capture: Stored) -> Response<Full<Bytes>> {
    let Stored { meta, body, chunks } = capture;
    if !meta.chunks.is_empty() || meta.outcome == "stitched" {
        // A capture written before chunks had bodies of their own holds
        // this document as its body.
        let document = if meta.chunks.is_empty() {
            body
        } else {
            chunks_document(&meta, &chunks)
        };
        let mut response = text(StatusCode::OK, String::new());
        *response.body_mut() = Full::new(document);
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response.headers_mut().insert(
            HeaderName::from_static("probity-capture-shape"),
            HeaderValue::from_static("chunks"),
        );
        return response;
    }
    let mut response = Response::new(Full::new(body));
    let headers = response.headers_mut();
    for (name, value) in &meta.upstream_headers {
        let name = HeaderName::try_from(format!("probity-upstream-{name}"));
        if let (Ok(name), Ok(value)) = (name, HeaderValue::from_str(value)) {
            headers.append(name, value);
        }
    }
    headers.insert(
        HeaderName::from_static("probity-upstream-status"),
        HeaderValue::from(meta.upstream_status),
    );
    let content_type = meta
        .upstream_headers
        .iter()
        .find(|(name, _)| name == "content-type")
        .and_then(|(_, value)| HeaderValue::from_str(value).ok());
    if let Some(content_type) = content_type {
        headers.insert(CONTENT_TYPE, content_type);
    }
    if !meta.body_captured {
        headers.insert(
            HeaderName::from_static("probity-capture-body"),
            HeaderValue::from_static("omitted: larger than capture.max_bytes"),
        );
    }
    response
}

/// `{"chunks": [{"status", "headers": {name: value}, "body": "<text>"}]}`,
/// in input order.
fn chunks_document(meta: &Meta, bodies: &[Bytes]) -> Bytes {
    let listed: Vec<serde_json::Value> = meta
        .chunks
        .iter()
        .zip(bodies)
        .map(|(chunk, body)| {
            let headers: serde_json::Map<String, serde_json::Value> = chunk
                .headers
                .iter()
                .map(|(name, value)| (name.clone(), value.as_str().into()))
                .collect();
            serde_json::json!({
                "status": chunk.status,
                "headers": headers,
                "body": String::from_utf8_lossy(body),
            })
        })
        .collect();
    Bytes::from(serde_json::json!({ "chunks": listed }).to_string())
}

/// Chunk `n` of a chunked exchange's capture, as a capture of its own:
/// its status, headers and verbatim bytes.
fn chunk_of(capture: Stored, n: usize) -> Option<Stored> {
    let Stored {
        mut meta, chunks, ..
    } = capture;
    let chunk = meta.chunks.get(n)?.clone();
    let body = chunks.into_iter().nth(n)?;
    meta.upstream_status = chunk.status;
    meta.upstream_headers = chunk.headers;
    meta.body = chunk.body;
    meta.body_bytes = chunk.body_bytes;
    meta.body_sha256 = chunk.body_sha256;
    meta.outcome = "chunk".into();
    meta.chunks.clear();
    Some(Stored {
        meta,
        body,
        chunks: Vec::new(),
    })
}

/// A verbatim body opened in a browser (the page links it) runs nothing on
/// the admin origin, whatever its upstream content type says.
fn sandboxed(response: Response<Full<Bytes>>) -> Response<Full<Bytes>> {
    let mut response = page::guarded(response);
    response.headers_mut().insert(
        http::header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox; default-src 'none'"),
    );
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

#[cfg(test)]
mod tests {
    use std::io::Read;

    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::*;

    /// What the layers answer `request` with around `inner`.
    async fn through<S>(inner: S, request: Request<Full<Bytes>>) -> (StatusCode, HeaderMap, Bytes)
    where
        S: Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>, Error = Infallible>,
        S: Clone + Send + 'static,
        S::Future: Send + 'static,
    {
        let layered = layered(inner, Duration::from_millis(200));
        let response = layered.oneshot(request).await.unwrap();
        let (parts, body) = response.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        (parts.status, parts.headers, body)
    }

    fn get() -> Request<Full<Bytes>> {
        Request::get("/metrics").body(Full::default()).unwrap()
    }

    fn panics() -> Response<Full<Bytes>> {
        panic!("the test's panic")
    }

    #[tokio::test]
    async fn a_panic_is_a_500_in_the_admin_error_shape() {
        let inner =
            tower::service_fn(|_: Request<Full<Bytes>>| async { Ok::<_, Infallible>(panics()) });
        let (status, headers, body) = through(inner, get()).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(headers[CONTENT_TYPE], "application/json");
        let error: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(error["error"]["type"], "internal_error", "{error}");
        assert_eq!(error["error"]["code"], "internal_error");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains("the test's panic"), "{message}");
        let id = error["error"]["request_id"].as_str().unwrap();
        assert_eq!(headers["x-request-id"], id);
    }

    #[tokio::test]
    async fn an_answer_past_its_deadline_is_a_503_in_the_admin_error_shape() {
        let inner = tower::service_fn(|_: Request<Full<Bytes>>| async {
            tokio::time::sleep(Duration::from_secs(10)).await;
            Ok::<_, Infallible>(text(StatusCode::OK, "late\n".into()))
        });
        let (status, headers, body) = through(inner, get()).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(headers[RETRY_AFTER], "5");
        let error: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(error["error"]["type"], "admin_timeout", "{error}");
        assert_eq!(error["error"]["code"], "admin_timeout");
    }

    #[tokio::test]
    async fn authorization_reaches_the_answer_marked_sensitive() {
        let inner = tower::service_fn(|request: Request<Full<Bytes>>| async move {
            let marked = request.headers()[AUTHORIZATION].is_sensitive();
            Ok::<_, Infallible>(text(StatusCode::OK, format!("{marked}")))
        });
        let mut request = get();
        let token = HeaderValue::from_static("Bearer t");
        request.headers_mut().insert(AUTHORIZATION, token);
        let (_, _, body) = through(inner, request).await;
        assert_eq!(body, "true");
    }

    #[tokio::test]
    async fn an_answer_is_gzipped_only_for_a_client_that_accepts_it() {
        let long = "probity_requests_total{route=\"a\"} 1\n".repeat(100);
        let answer = long.clone();
        let inner = tower::service_fn(move |_: Request<Full<Bytes>>| {
            let answer = answer.clone();
            async move { Ok::<_, Infallible>(text(StatusCode::OK, answer)) }
        });
        let (_, headers, plain) = through(inner.clone(), get()).await;
        assert_eq!(headers.get(http::header::CONTENT_ENCODING), None);
        assert_eq!(plain, long);
        let mut request = get();
        let gzip = HeaderValue::from_static("gzip");
        request
            .headers_mut()
            .insert(http::header::ACCEPT_ENCODING, gzip);
        let (_, headers, zipped) = through(inner, request).await;
        assert_eq!(headers[http::header::CONTENT_ENCODING], "gzip");
        assert!(zipped.len() < long.len() / 10, "{} bytes", zipped.len());
        let mut decoded = String::new();
        flate2::read::GzDecoder::new(&zipped[..])
            .read_to_string(&mut decoded)
            .unwrap();
        assert_eq!(decoded, long);
    }
}
