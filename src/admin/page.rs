//! The admin page (`GET /`) and the JSON it refreshes from
//! (`GET /status.json`, `GET /view.json?id=`). The page is one document
//! with its script and style inline, allowed by hash alone: it shows
//! response bodies, which are data and never markup.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use http::{Response, StatusCode};
use http_body_util::Full;
use serde_json::{json, Value};

use super::view::view;
use crate::capture::{rfc3339, Captures, Meta, Query};
use crate::route::RouteSummary;
use crate::telemetry::{self, RouteFigures};

const TEMPLATE: &str = include_str!("page.html");
const SCRIPT: &str = include_str!("page.js");
const STYLE: &str = include_str!("page.css");

/// Captures the page lists.
const LATEST: usize = 50;

/// How long `/status.json` waits for the capture index (a large store is
/// indexed in the background after a start).
const INDEX_WAIT: Duration = Duration::from_secs(2);

/// The page, and its Content-Security-Policy naming its script and style.
static PAGE: LazyLock<(String, String)> = LazyLock::new(|| {
    // The version first: the inlined script and style are hashed as is.
    let html = TEMPLATE
        .replace("{VERSION}", env!("CARGO_PKG_VERSION"))
        .replace("/*STYLE*/", STYLE)
        .replace("/*SCRIPT*/", SCRIPT);
    let csp = format!(
        "default-src 'none'; script-src 'sha256-{}'; style-src 'sha256-{}'; \
         connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; \
         frame-ancestors 'none'",
        sha256_base64(SCRIPT),
        sha256_base64(STYLE)
    );
    (html, csp)
});

/// When the admin listener started: the process's uptime, near enough.
pub(super) struct Started {
    at: SystemTime,
    clock: Instant,
}

impl Started {
    pub(super) fn now() -> Self {
        Self {
            at: SystemTime::now(),
            clock: Instant::now(),
        }
    }
}

/// `GET /`: the page.
pub(super) fn page() -> Response<Full<Bytes>> {
    let (html, csp) = &*PAGE;
    let mut response = Response::new(Full::new(Bytes::from(html.clone())));
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    if let Ok(csp) = HeaderValue::from_str(csp) {
        headers.insert(http::header::CONTENT_SECURITY_POLICY, csp);
    }
    headers.insert(
        http::header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    guarded(response)
}

/// `GET /status.json`: the process, each route's figures, the latest
/// captures.
pub(super) async fn status(
    ready: &AtomicBool,
    started: &Started,
    captures: &Captures,
    configured: &[RouteSummary],
) -> Response<Full<Bytes>> {
    let query = Query {
        limit: LATEST,
        ..Query::default()
    };
    let (latest, note) = match tokio::time::timeout(INDEX_WAIT, captures.list(&query)).await {
        Ok(Ok(page)) if page.unread > 0 => {
            let note = format!(
                "{} captures left out: the capture store did not answer in time",
                page.unread
            );
            (page.captures, note.into())
        }
        Ok(Ok(page)) => (page.captures, Value::Null),
        Ok(Err(err)) => (Vec::new(), err.to_string().into()),
        Err(_) => (
            Vec::new(),
            "the capture store is still being indexed, or is slow to answer".into(),
        ),
    };
    let body = json!({
        "probity": {
            "version": env!("CARGO_PKG_VERSION"),
            "started": rfc3339(started.at),
            "uptime_seconds": started.clock.elapsed().as_secs(),
            "ready": ready.load(Ordering::SeqCst),
        },
        "routes": routes(configured),
        "captures": latest.into_iter().filter_map(listed).collect::<Vec<_>>(),
        "captures_note": note,
    });
    json_response(StatusCode::OK, &body)
}

/// Each route's figures since the start: the configured routes as they
/// are tried (an idle one with zeros), then any that served requests before a
/// reload removed them (and `-`, requests that matched none).
fn routes(configured: &[RouteSummary]) -> Vec<Value> {
    let mut figures: Vec<(String, Option<Arc<RouteFigures>>)> = configured
        .iter()
        .map(|route| (route.name.clone(), None))
        .collect();
    for (route, f) in telemetry::route_figures() {
        match figures.iter_mut().find(|(name, _)| *name == route) {
            Some(slot) => slot.1 = Some(f),
            None => figures.push((route, Some(f))),
        }
    }
    let idle = RouteFigures::default();
    figures
        .into_iter()
        .map(|(route, f)| {
            let summary = configured.iter().find(|r| r.name == route);
            let mut row = route_row(&route, f.as_deref().unwrap_or(&idle));
            if let (Some(summary), Some(row)) = (summary, row.as_object_mut()) {
                row.insert("prefix".into(), summary.prefix.clone().into());
                row.insert("upstream".into(), summary.upstream.clone().into());
                row.insert("dialect".into(), summary.dialect.into());
            }
            row
        })
        .collect()
}

/// One route's figures.
fn route_row(route: &str, f: &RouteFigures) -> Value {
    let count = |n: &std::sync::atomic::AtomicU64| n.load(Ordering::Relaxed);
    let [c1, c2, c3, c4, c5] = f.classes.each_ref().map(count);
    json!({
        "route": route,
        "requests": c1 + c2 + c3 + c4 + c5,
        "by_class": {"1xx": c1, "2xx": c2, "3xx": c3, "4xx": c4, "5xx": c5},
        "errors": count(&f.errors),
        "normalized": count(&f.normalized),
        "rejected": count(&f.rejected),
        "outputs_judged": count(&f.outputs_judged),
        "invalid_outputs": count(&f.invalid_outputs),
    })
}

/// A capture's metadata as listed: its headers are for `/captures/{id}`.
pub(super) fn listed(mut meta: Meta) -> Option<Value> {
    meta.upstream_headers.clear();
    let mut value = serde_json::to_value(meta).ok()?;
    if let Some(object) = value.as_object_mut() {
        object.remove("upstream_headers");
    }
    Some(value)
}

/// `GET /view.json?id=<request id>`: one capture laid out for the page.
pub(super) async fn capture_view(captures: &Captures, id: &str) -> Response<Full<Bytes>> {
    let stored = match captures.get(id).await {
        Ok(Some(stored)) => stored,
        Ok(None) => {
            let why = json!({ "error": format!("no capture for request id {id}: it was valid, or evicted") });
            return json_response(StatusCode::NOT_FOUND, &why);
        }
        Err(err) => {
            let why = json!({ "error": format!("capture for request id {id}: {err}") });
            return json_response(StatusCode::SERVICE_UNAVAILABLE, &why);
        }
    };
    let mut body = view(&stored.meta, &stored.body);
    if let Some(object) = body.as_object_mut() {
        let content_type = stored
            .meta
            .upstream_headers
            .iter()
            .find(|(name, _)| name == "content-type")
            .map(|(_, value)| value.clone());
        object.insert("content_type".into(), content_type.into());
        object.insert("capture".into(), listed(stored.meta).unwrap_or_default());
    }
    json_response(StatusCode::OK, &body)
}

fn json_response(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    guarded(response)
}

/// What every response holding bodies carries: never sniffed as markup,
/// never cached.
pub(super) fn guarded(mut response: Response<Full<Bytes>>) -> Response<Full<Bytes>> {
    let headers = response.headers_mut();
    headers.insert(
        HeaderName::from_static("x-content-type-options"),
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// A CSP source hash: standard base64 of the text's SHA-256.
fn sha256_base64(text: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    let mut out = String::new();
    for chunk in digest.as_ref().chunks(3) {
        let [a, b, c] = [0, 1, 2].map(|i| chunk.get(i).copied().unwrap_or(0));
        let n = u32::from_be_bytes([0, a, b, c]);
        for i in 0..4 {
            let sextet = (n >> (18 - 6 * i)) & 63;
            let symbol = ALPHABET.get(sextet as usize).copied().unwrap_or(b'=');
            out.push(char::from(if i <= chunk.len() { symbol } else { b'=' }));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_is_standard_base64() {
        // echo -n abc | openssl dgst -sha256 -binary | base64
        assert_eq!(
            sha256_base64("abc"),
            "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0="
        );
    }

    #[test]
    fn the_page_inlines_its_script_and_style() {
        let (html, csp) = &*PAGE;
        assert!(html.contains(SCRIPT) && html.contains(STYLE));
        assert!(!html.contains("/*SCRIPT*/"));
        assert!(csp.contains(&sha256_base64(SCRIPT)));
    }

    #[test]
    fn the_script_never_parses_data_as_markup() {
        for sink in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
        ] {
            assert!(!SCRIPT.contains(sink), "page.js uses {sink}");
        }
    }
}
