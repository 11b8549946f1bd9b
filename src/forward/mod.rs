//! Forwarding: the third step of a request (`server` → `route` → **`forward`**).
//!
//! Builds the upstream request from the client's (hop-by-hop headers removed,
//! credential injected, identity encoding asked for), sends it over a pooled
//! keep-alive connection, and fetches the response in one of two forms:
//!
//! - **whole**: a non-streaming body, read completely (bounded by
//!   `max_response_bytes`, within `timeout_ms`) so that `inspect` can judge it
//!   and any fault still gets its own status code;
//! - **stream**: SSE, NDJSON or any body of unknown length that is not JSON,
//!   relayed frame by frame as it arrives ([`Relay`]), never buffered whole.

mod headers;
mod relay;

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{HeaderName, HeaderValue, InvalidHeaderValue, ACCEPT_ENCODING, CONTENT_LENGTH};
use http::header::{AUTHORIZATION, CONTENT_TYPE, EXPECT, HOST};
use http::{request, response, HeaderMap, Request, Uri, Version};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::time::{timeout_at, Instant};

use crate::config::UpstreamUrl;
use crate::inspect::Dialect;
use crate::route::Route;

pub use headers::{remove_hop_by_hop, X_REQUEST_ID};
pub use relay::Relay;

/// Why an upstream exchange failed. Each variant is one row of the error
/// table and one `kind` of `probity_upstream_errors_total`.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("cannot reach upstream {upstream}: {cause}")]
    Unreachable {
        upstream: String,
        cause: String,
        hint: &'static str,
    },
    #[error("upstream {upstream} sent no {waited_for} within {after:?}")]
    Timeout {
        upstream: String,
        waited_for: &'static str,
        after: Duration,
        /// The configuration key that sets this limit.
        key: &'static str,
    },
    #[error("upstream {upstream} closed the connection before the response was complete: {cause}")]
    Reset { upstream: String, cause: String },
    #[error("upstream {upstream} sent more than max_response_bytes ({limit} bytes)")]
    TooLarge { upstream: String, limit: u64 },
}

impl ForwardError {
    /// The `kind` label of `probity_upstream_errors_total`.
    pub fn kind(&self) -> &'static str {
        match self {
            ForwardError::Unreachable { .. } => "unreachable",
            ForwardError::Timeout { .. } => "timeout",
            ForwardError::Reset { .. } => "reset",
            ForwardError::TooLarge { .. } => "too_large",
        }
    }
}

type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// A route's upstream: where it is and a pool of keep-alive connections to it.
pub struct Upstream {
    url: UpstreamUrl,
    /// The URL as configured, for messages and logs (it never holds credentials).
    pub display: String,
    client: HttpClient,
}

impl Upstream {
    pub fn new(url: UpstreamUrl, display: String, connect_timeout: Duration) -> Self {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(connect_timeout));
        // HTTPS with the web PKI roots; HTTP/2 or HTTP/1.1 as the upstream
        // offers through ALPN. Cleartext upstreams get HTTP/1.1.
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_webpki_roots()
            .https_or_http()
            .enable_all_versions()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(https);
        Self {
            url,
            display,
            client,
        }
    }

    /// The upstream URI for a request: scheme and host from the route alone,
    /// then the base path, the rest of the client's path, and its query.
    /// The path a request is sent to upstream: the base path, then `rest`.
    pub fn path(&self, rest: &str) -> String {
        let path = format!("{}{rest}", self.url.base_path);
        if path.is_empty() {
            "/".into()
        } else {
            path
        }
    }

    fn uri(&self, rest: &str, query: Option<&str>) -> Result<Uri, http::Error> {
        let mut path = String::with_capacity(self.url.base_path.len() + rest.len() + 1);
        path.push_str(&self.url.base_path);
        path.push_str(rest);
        if path.is_empty() {
            path.push('/');
        }
        if let Some(query) = query {
            path.push('?');
            path.push_str(query);
        }
        Uri::builder()
            .scheme(self.url.scheme.clone())
            .authority(self.url.authority.clone())
            .path_and_query(path)
            .build()
    }
}

/// A configured provider credential, as the headers its dialect sends.
pub struct Credential {
    headers: Vec<(HeaderName, HeaderValue)>,
    defaults: &'static [(&'static str, &'static str)],
}

impl Credential {
    pub fn new(dialect: &dyn Dialect, key: &str) -> Result<Self, InvalidHeaderValue> {
        let mut headers = dialect.credential_headers(key)?;
        for (_, value) in &mut headers {
            // Keeps the value out of hyper's debug output and HPACK tables.
            value.set_sensitive(true);
        }
        Ok(Self {
            headers,
            defaults: dialect.default_headers(),
        })
    }

    /// Replaces whatever credential the client sent with the configured one.
    fn apply(&self, headers: &mut HeaderMap) {
        for name in [AUTHORIZATION.as_str(), "x-api-key", "api-key"] {
            headers.remove(name);
        }
        for (name, value) in &self.headers {
            headers.insert(name.clone(), value.clone());
        }
        for (name, value) in self.defaults {
            if !headers.contains_key(*name) {
                headers.insert(*name, HeaderValue::from_static(value));
            }
        }
    }
}

/// The upstream request for a client request that matched `route`.
pub fn upstream_request(
    route: &Route,
    client: &request::Parts,
    rest: &str,
    body: Bytes,
    request_id: &HeaderValue,
) -> Result<Request<Full<Bytes>>, http::Error> {
    let uri = route.upstream.uri(rest, client.uri.query())?;
    let mut headers = client.headers.clone();
    remove_hop_by_hop(&mut headers);
    // The client sees the upstream through probity, so its Host names probity;
    // hyper sets the upstream's from the URI. `Expect` is dropped because the
    // body is already here: there is nothing left to wait for.
    headers.remove(HOST);
    headers.remove(EXPECT);
    // hyper sets the length of the body actually sent (a chunk's is its own).
    headers.remove(CONTENT_LENGTH);
    // Inspection needs plain bytes, so ask for no compression.
    headers.insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
    headers.insert(X_REQUEST_ID, request_id.clone());
    if let Some(credential) = &route.credential {
        credential.apply(&mut headers);
    }
    let mut request = Request::builder()
        .method(client.method.clone())
        .uri(uri)
        // HTTP/2 toward the upstream is negotiated per connection; the request
        // itself is version-neutral.
        .version(Version::HTTP_11)
        .body(Full::new(body))?;
    *request.headers_mut() = headers;
    Ok(request)
}

/// The upstream's response, read whole or ready to relay.
pub enum Fetched {
    Whole(response::Parts, Bytes),
    Stream(response::Parts, Relay),
}

/// Sends the request and fetches the response within the route's limits.
/// `checked`: the response will be inspected, so it is read whole unless it
/// is an event stream or NDJSON.
pub async fn fetch(
    route: &Route,
    request: Request<Full<Bytes>>,
    checked: bool,
) -> Result<Fetched, ForwardError> {
    let upstream = &route.upstream;
    let deadline = Instant::now() + route.timeout;
    let timeout = |waited_for| ForwardError::Timeout {
        upstream: upstream.display.clone(),
        waited_for,
        after: route.timeout,
        key: "timeout_ms",
    };

    let response = match timeout_at(deadline, upstream.client.request(request)).await {
        Err(_) => return Err(timeout("response")),
        Ok(Err(err)) => return Err(classify(upstream, route.dialect, &err)),
        Ok(Ok(response)) => response,
    };
    let (parts, body) = response.into_parts();

    let limit = route.max_response_bytes;
    let declared = content_length(&parts.headers);
    if declared.is_some_and(|len| len > limit) {
        return Err(ForwardError::TooLarge {
            upstream: upstream.display.clone(),
            limit,
        });
    }

    if is_stream(&parts.headers, checked) {
        // A stream's status line goes out with its first byte, so silence
        // before that byte can still be answered with a 504.
        let relay = Relay::start(body, route, deadline).await?;
        return Ok(Fetched::Stream(parts, relay));
    }

    let mut body = body;
    let mut whole = Collector::with_capacity(declared.unwrap_or(0).min(limit));
    loop {
        match timeout_at(deadline, body.frame()).await {
            Err(_) => return Err(timeout("complete response")),
            Ok(None) => break,
            Ok(Some(Err(err))) => return Err(reset(upstream, &err)),
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    if whole.len() + data.len() as u64 > limit {
                        return Err(ForwardError::TooLarge {
                            upstream: upstream.display.clone(),
                            limit,
                        });
                    }
                    whole.push(data);
                }
            }
        }
    }
    Ok(Fetched::Whole(parts, whole.finish()))
}

/// Joins body frames, without a copy when there is only one.
struct Collector {
    first: Option<Bytes>,
    rest: Option<BytesMut>,
    capacity: u64,
    len: u64,
}

impl Collector {
    fn with_capacity(capacity: u64) -> Self {
        Self {
            first: None,
            rest: None,
            capacity,
            len: 0,
        }
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn push(&mut self, data: Bytes) {
        self.len += data.len() as u64;
        if let Some(rest) = &mut self.rest {
            rest.extend_from_slice(&data);
        } else if let Some(first) = self.first.take() {
            let capacity = (self.capacity as usize).max(2 * (first.len() + data.len()));
            let mut rest = BytesMut::with_capacity(capacity);
            rest.extend_from_slice(&first);
            rest.extend_from_slice(&data);
            self.rest = Some(rest);
        } else {
            self.first = Some(data);
        }
    }

    fn finish(self) -> Bytes {
        match (self.rest, self.first) {
            (Some(rest), _) => rest.freeze(),
            (None, Some(first)) => first,
            (None, None) => Bytes::new(),
        }
    }
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether a response is relayed live: event streams and NDJSON always, and
/// any body of unknown length that is not JSON and will not be inspected (a
/// JSON document is only useful whole, and is what `inspect` judges).
fn is_stream(headers: &HeaderMap, checked: bool) -> bool {
    let media = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default();
    match media.as_str() {
        "text/event-stream"
        | "application/x-ndjson"
        | "application/ndjson"
        | "application/jsonl"
        | "application/x-jsonlines"
        | "application/stream+json" => true,
        _ => {
            let json = media == "application/json" || media.ends_with("+json");
            !checked && !json && !headers.contains_key(CONTENT_LENGTH)
        }
    }
}

/// A failed send: no connection at all, or one that broke before the response head.
fn classify(
    upstream: &Upstream,
    dialect: &dyn Dialect,
    err: &hyper_util::client::legacy::Error,
) -> ForwardError {
    if err.is_connect() {
        ForwardError::Unreachable {
            upstream: upstream.display.clone(),
            cause: root_cause(err),
            hint: dialect.unreachable_hint(),
        }
    } else {
        reset(upstream, err)
    }
}

fn reset(upstream: &Upstream, err: &(dyn std::error::Error + 'static)) -> ForwardError {
    ForwardError::Reset {
        upstream: upstream.display.clone(),
        cause: root_cause(err),
    }
}

/// The innermost error's text (`Connection refused`, `dns error: ...`), which
/// is what a user can act on; hyper's outer layers only say "client error".
fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut cause: &(dyn std::error::Error + 'static) = err;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    let text = cause.to_string();
    // io errors append "(os error 111)": noise for the reader.
    match text.find(" (os error") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (k.parse().unwrap(), v.parse().unwrap()))
            .collect()
    }

    #[test]
    fn streams_are_event_streams_ndjson_and_unsized_non_json() {
        let sse = headers(&[("content-type", "text/event-stream; charset=utf-8")]);
        assert!(is_stream(&sse, false) && is_stream(&sse, true));
        let ndjson = headers(&[("content-type", "application/x-ndjson")]);
        assert!(is_stream(&ndjson, true));
        let plain = headers(&[("content-type", "text/plain")]);
        assert!(is_stream(&plain, false));
        assert!(!is_stream(&plain, true), "a checked endpoint is read whole");
        assert!(is_stream(&headers(&[]), false));
        let json = headers(&[("content-type", "application/json")]);
        assert!(!is_stream(&json, false));
        let problem = headers(&[("content-type", "application/problem+json")]);
        assert!(!is_stream(&problem, false));
        let sized = headers(&[("content-type", "text/plain"), ("content-length", "3")]);
        assert!(!is_stream(&sized, false));
    }

    #[test]
    fn the_collector_joins_frames_and_keeps_a_single_frame_as_is() {
        let one = Bytes::from_static(b"{\"a\":1}");
        let mut c = Collector::with_capacity(0);
        c.push(one.clone());
        assert_eq!(c.finish().as_ptr(), one.as_ptr());
        let mut c = Collector::with_capacity(4);
        for part in ["{\"a\"", ":", "1}"] {
            c.push(Bytes::from(part));
        }
        assert_eq!(c.len(), 7);
        assert_eq!(c.finish(), "{\"a\":1}");
        assert_eq!(Collector::with_capacity(0).finish(), "");
    }

    #[test]
    fn upstream_uris_join_base_path_rest_and_query() {
        let url = |u: &str| {
            Upstream::new(
                UpstreamUrl::parse(u).unwrap(),
                u.into(),
                Duration::from_secs(1),
            )
        };
        let up = url("http://127.0.0.1:9/v1");
        assert_eq!(
            up.uri("/embeddings", Some("a=1")).unwrap(),
            "http://127.0.0.1:9/v1/embeddings?a=1"
        );
        assert_eq!(up.uri("", None).unwrap(), "http://127.0.0.1:9/v1");
        let up = url("http://127.0.0.1:9");
        assert_eq!(up.uri("", None).unwrap(), "http://127.0.0.1:9/");
        assert_eq!(
            up.uri("/api/chat", None).unwrap(),
            "http://127.0.0.1:9/api/chat"
        );
    }
}
