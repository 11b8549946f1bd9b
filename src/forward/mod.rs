//! Forwarding: the third step of a request (`server` → `route` → **`forward`**).
//!
//! Builds the upstream request from the client's (hop-by-hop headers removed,
//! credential injected, the codings it can decode asked for), sends it over a pooled
//! keep-alive connection, and fetches the response in one of two forms:
//!
//! - **whole**: a non-streaming body, read completely (bounded by
//!   `max_response_bytes`, within `timeout_ms`; decoded when gzip, br or
//!   zstd, `encoding`) so that `inspect` can judge it and any fault still
//!   gets its own status code;
//! - **stream**: SSE, NDJSON or any body of unknown length that is not JSON,
//!   relayed frame by frame as it arrives ([`Relay`]), never buffered whole.

mod body;
pub(crate) mod encoding;

mod google;
mod headers;
mod pool;
mod relay;
mod sigv4;
mod upgrade;

use std::borrow::Cow;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{
    HeaderName, HeaderValue, InvalidHeaderValue, ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_LENGTH,
    ETAG,
};
use http::header::{CONTENT_TYPE, EXPECT, HOST};
use http::{request, response, HeaderMap, Request, Uri, Version};
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use tokio::time::{timeout_at, Instant};

use crate::config::UpstreamUrl;
use crate::trace::RequestSpan;
use probity_judge::json::Scanner;

pub(crate) use body::{ClientFault, UpstreamBody};
pub(crate) use encoding::Codings;
use encoding::{BodyCoding, Coding, DecodeError};
pub(crate) use google::{GoogleCredential, GoogleSetupError};
pub use headers::remove_hop_by_hop;
pub(crate) use headers::X_REQUEST_ID;
pub(crate) use relay::Relay;
pub(crate) use sigv4::{SignError, Signer};
pub(crate) use upgrade::{upgrade, Handshake};

/// Why an upstream exchange failed. Each variant is one row of the error
/// table and one `kind` of `probity_upstream_errors_total`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ForwardError {
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
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            ForwardError::Unreachable { .. } => "unreachable",
            ForwardError::Timeout { .. } => "timeout",
            ForwardError::Reset { .. } => "reset",
            ForwardError::TooLarge { .. } => "too_large",
        }
    }
}

type HttpClient = Client<crate::connector::Connector, UpstreamBody>;

/// How long and how much an upstream exchange may take.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// The whole call, to the last byte of a whole response or the first of
    /// a stream (`timeout_ms`).
    pub(crate) timeout: Duration,
    /// Silence inside a stream (`idle_timeout_ms`).
    pub(crate) idle_timeout: Duration,
    pub(crate) max_response_bytes: u64,
}

/// A route's upstream: where it is, a pool of keep-alive connections to it,
/// its limits, its credential, and what to tell a user who cannot reach it
/// (all resolved when the routes are built).
pub(crate) struct Upstream {
    url: UpstreamUrl,
    /// The URL as configured, for messages and logs (it never holds credentials).
    pub(crate) display: String,
    pool: pool::Pool,
    pub(crate) limits: Limits,
    /// The configured provider credential, when its variable was set.
    pub(crate) credential: Option<Credential>,
    /// The SigV4 signer of a route with `aws_region`: every request is
    /// signed anew over the bytes it carries.
    pub(crate) signer: Option<Signer>,
    /// The Google credential of a route with `google_credentials`: each
    /// request carries its current access token.
    pub(crate) google: Option<GoogleCredential>,
    /// The remedy named in `upstream_unreachable` errors.
    pub(crate) hint: &'static str,
    /// The client of WebSocket tunnels (HTTP/1.1, unpooled), made on the
    /// route's first one.
    tunnels: std::sync::OnceLock<HttpClient>,
    connect_timeout: Duration,
}

impl Upstream {
    /// `server.address` and `server.port` of the upstream's spans.
    pub(crate) fn address(&self) -> (&str, Option<u16>) {
        (self.url.authority.host(), self.url.authority.port_u16())
    }

    pub(crate) fn new(
        url: UpstreamUrl,
        display: String,
        connect_timeout: Duration,
        limits: Limits,
        hint: &'static str,
    ) -> Self {
        let https = url.scheme == http::uri::Scheme::HTTPS;
        // hyper reads ahead up to ~400 KB of a relayed answer its client
        // has not taken yet; 64 KiB keeps a slow reader's cost there
        // (benches/slowhttp: 100 slow readers 106 → 29 MiB) and still
        // admits response heads 8 times nginx's default buffer.
        let pool = pool::Pool::new(
            crate::connector::https(connect_timeout),
            &url.authority,
            https,
            64 * 1024,
        );
        Self {
            url,
            display,
            pool,
            limits,
            credential: None,
            signer: None,
            google: None,
            hint,
            tunnels: std::sync::OnceLock::new(),
            connect_timeout,
        }
    }

    /// The path a request is sent to upstream: the base path, then `rest`.
    pub(crate) fn path(&self, rest: &str) -> String {
        // Sized once: this is on every request's path.
        let mut path = String::with_capacity(self.url.base_path.len() + rest.len().max(1));
        path.push_str(&self.url.base_path);
        path.push_str(rest);
        if path.is_empty() {
            path.push('/');
        }
        path
    }

    /// The upstream URI for a request: scheme and host from the route alone,
    /// then the base path, the rest of the client's path, and its query.
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

/// A configured provider credential: the header that presents it, the
/// headers set beside it when the client did not, and every header any
/// provider takes a credential in, which the client's own is removed from.
pub(crate) struct Credential {
    header: (HeaderName, HeaderValue),
    defaults: &'static [(&'static str, &'static str)],
    replaces: &'static [HeaderName],
    /// The query parameter the client's own key may be in.
    query: Option<&'static str>,
}

impl Credential {
    pub(crate) fn new(
        name: HeaderName,
        value: &str,
        defaults: &'static [(&'static str, &'static str)],
        replaces: &'static [HeaderName],
        query: Option<&'static str>,
    ) -> Result<Self, InvalidHeaderValue> {
        let mut value = HeaderValue::try_from(value)?;
        // Keeps the value out of hyper's debug output and HPACK tables.
        value.set_sensitive(true);
        Ok(Self {
            header: (name, value),
            defaults,
            replaces,
            query,
        })
    }

    /// The client's query without the parameter its own key may be in.
    fn query<'a>(&self, query: Option<&'a str>) -> Option<Cow<'a, str>> {
        let query = query?;
        let Some(name) = self.query else {
            return Some(Cow::Borrowed(query));
        };
        without_parameter(query, name)
    }

    /// Replaces whatever credential the client sent with the configured one.
    fn apply(&self, headers: &mut HeaderMap) {
        for name in self.replaces {
            headers.remove(name);
        }
        headers.insert(self.header.0.clone(), self.header.1.clone());
        for (name, value) in self.defaults {
            if !headers.contains_key(*name) {
                headers.insert(*name, HeaderValue::from_static(value));
            }
        }
    }
}

/// `query` without the parameter `name` (a client's own key).
fn without_parameter<'a>(query: &'a str, name: &str) -> Option<Cow<'a, str>> {
    // Compared as the provider reads it: `k%65y` is `key` too.
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| {
            let raw = pair.split_once('=').map_or(*pair, |(name, _)| name);
            !probity_judge::json::percent_decoded(raw).eq_ignore_ascii_case(name.as_bytes())
        })
        .collect();
    if kept.len() == query.split('&').count() {
        return Some(Cow::Borrowed(query));
    }
    (!kept.is_empty()).then(|| Cow::Owned(kept.join("&")))
}

/// Why an upstream request could not be built: probity's own fault.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BuildError {
    #[error(transparent)]
    Http(#[from] http::Error),
    #[error(transparent)]
    Sign(#[from] SignError),
    /// A signing route's body was not held (a bug: the server holds it).
    #[error("a SigV4 route's request body was not read whole before signing")]
    Unsigned,
}

/// The upstream request for a client request, `rest` being its path after
/// the route prefix; on a signing route, signed over `body`, which is then
/// held whole.
pub(crate) fn upstream_request(
    upstream: &Upstream,
    (client, rest): (&request::Parts, &str),
    body: UpstreamBody,
    accept: Option<Codings>,
    request_id: &HeaderValue,
) -> Result<Request<UpstreamBody>, BuildError> {
    let query = match (&upstream.credential, &upstream.google) {
        (Some(credential), _) => credential.query(client.uri.query()),
        // Google's APIs take a key in `?key=` too; the token replaces it.
        (None, Some(_)) => client
            .uri
            .query()
            .and_then(|query| without_parameter(query, google::KEY_PARAMETER)),
        (None, None) => client.uri.query().map(Cow::Borrowed),
    };
    let uri = upstream.uri(rest, query.as_deref())?;
    let mut headers = client.headers.clone();
    remove_hop_by_hop(&mut headers);
    // The client sees the upstream through probity, so its Host names probity;
    // hyper sets the upstream's from the URI. `Expect` is dropped because the
    // body is already here: there is nothing left to wait for.
    headers.remove(HOST);
    headers.remove(EXPECT);
    // hyper sets the length of the body actually sent (a chunk's is its own).
    headers.remove(CONTENT_LENGTH);
    // What is judged is asked for in codings probity decodes (none:
    // `identity`); what passes through unjudged asks what the client asked.
    if let Some(accept) = accept {
        headers.insert(ACCEPT_ENCODING, accept.header());
    }
    headers.insert(X_REQUEST_ID, request_id.clone());
    if let Some(credential) = &upstream.credential {
        credential.apply(&mut headers);
    }
    if upstream.signer.is_some() || upstream.google.is_some() {
        // The client's own key or signature is not for the upstream.
        for name in probity_judge::inspect::credential_headers() {
            headers.remove(name);
        }
    }
    let mut request = Request::builder()
        .method(client.method.clone())
        .uri(uri)
        // HTTP/2 toward the upstream is negotiated per connection; the request
        // itself is version-neutral.
        .version(Version::HTTP_11)
        .body(body)?;
    *request.headers_mut() = headers;
    if let Some(signer) = &upstream.signer {
        let bytes = request
            .body()
            .whole()
            .cloned()
            .ok_or(BuildError::Unsigned)?;
        signer.sign(&mut request, &bytes)?;
    }
    Ok(request)
}

/// The upstream's response, read whole or ready to relay. A whole 2xx
/// body comes with the scan of its JSON made while it arrived.
pub(crate) enum Fetched {
    /// Read whole: the head and the bytes (decoded, when it came in a coding
    /// probity decodes: then the head describes the decoded body, and
    /// [`Decoded`] keeps the upstream's own bytes), scanned if 2xx.
    Whole(response::Parts, Bytes, Scanner, Decoded),
    Stream(response::Parts, Relay),
}

/// How a response is to be read, decided from the request before it is
/// sent: what the request asked for decides how an inspected response is
/// judged, never the upstream's `content-type` alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reading {
    /// An endpoint probity does not inspect: relayed live whatever it is,
    /// never held, and not bounded by `max_response_bytes` (which bounds
    /// only what probity must hold to judge), as a plain reverse proxy does.
    Passthrough,
    /// Inspected, but what the request asked is unknown (it cannot be
    /// read): streams (by media type) relayed live, documents whole.
    ByMedia,
    /// A JSON document was asked: a 2xx answer is read whole (within
    /// `max_response_bytes`) whatever its media type, and judged as that
    /// document.
    Document,
    /// A stream was asked: a 2xx answer is relayed live and judged event by
    /// event, unless it is a JSON document, which is read whole.
    Stream,
}

/// The request's span and, for a chunk of a split batch, its index: the
/// upstream call gets its own child span.
#[derive(Clone, Copy)]
pub(crate) struct Traced<'a> {
    pub(crate) span: &'a RequestSpan,
    pub(crate) chunk: Option<usize>,
}

impl<'a> Traced<'a> {
    /// The request's one upstream call.
    pub(crate) fn request(span: &'a RequestSpan) -> Self {
        Self { span, chunk: None }
    }
}

/// Sends the request and fetches the response within the route's limits,
/// read as `reading` says; with `traced`, as a child span of the request's
/// whose id the upstream gets in `traceparent`. The time spent waiting on
/// the upstream (for its head, then for each frame of a whole body or a
/// stream's first) is added to `waited`; what is left is probity's own.
pub(crate) async fn fetch(
    upstream: &Upstream,
    mut request: Request<UpstreamBody>,
    reading: Reading,
    traced: Option<Traced<'_>>,
    waited: &mut Duration,
) -> Result<Fetched, ForwardError> {
    if let Some(google) = &upstream.google {
        // The token's fetch, when one is due, is the upstream's time.
        let asked = Instant::now();
        // Boxed: only these routes' futures hold its room.
        let authorized = Box::pin(google.authorize(request.headers_mut())).await;
        *waited += asked.elapsed();
        authorized.map_err(|err| ForwardError::Unreachable {
            upstream: format!("{} (the route's Google token endpoint)", err.endpoint),
            cause: err.cause,
            hint: err.hint,
        })?;
    }
    // One call of fetch_untraced, whether traced or not: each await of it
    // would take its own room in this future, which is moved whole.
    let call = traced.map(|traced| {
        let method = request.method().clone();
        (
            traced,
            traced
                .span
                .call(request.headers_mut(), &method, traced.chunk),
        )
    });
    let fetched = fetch_untraced(upstream, request, reading, waited).await;
    if let Some((traced, call)) = call {
        match &fetched {
            Ok(Fetched::Whole(parts, ..)) => {
                traced.span.answered(call, parts.status.as_u16(), true)
            }
            Ok(Fetched::Stream(parts, _)) => {
                traced.span.answered(call, parts.status.as_u16(), false)
            }
            Err(err) => traced.span.call_failed(call, err.kind()),
        }
    }
    fetched
}

async fn fetch_untraced(
    upstream: &Upstream,
    request: Request<UpstreamBody>,
    reading: Reading,
    waited: &mut Duration,
) -> Result<Fetched, ForwardError> {
    let limits = upstream.limits;
    let asked = Instant::now();
    let deadline = asked + limits.timeout;
    let timeout = |waited_for| ForwardError::Timeout {
        upstream: upstream.display.clone(),
        waited_for,
        after: limits.timeout,
        key: "timeout_ms",
    };

    let response = timeout_at(deadline, upstream.pool.send(request)).await;
    *waited += asked.elapsed();
    let response = match response {
        Err(_) => return Err(timeout("response")),
        Ok(Err(err)) => return Err(classify(upstream, &err)),
        Ok(Ok(response)) => response,
    };
    let (parts, body) = response.into_parts();

    let limit = match reading {
        Reading::Passthrough => u64::MAX,
        _ => limits.max_response_bytes,
    };
    let declared = content_length(&parts.headers);
    if declared.is_some_and(|len| len > limit) {
        return Err(ForwardError::TooLarge {
            upstream: upstream.display.clone(),
            limit,
        });
    }

    if is_live(&parts, reading) {
        // A stream's status line goes out with its first byte, so silence
        // before that byte can still be answered with a 504.
        let relay = Relay::start(body, upstream, (deadline, limit), waited).await?;
        return Ok(Fetched::Stream(parts, relay));
    }

    let coding = BodyCoding::of(&parts.headers);
    let mut body = body;
    let mut whole = BodyCollector::with_capacity(declared.unwrap_or(0).min(limit));
    // Only a 2xx answer is judged; its JSON is scanned frame by frame, so
    // the last frame leaves only the tail to scan (a compressed one once
    // decoded).
    whole.scan = parts.status.is_success() && coding == BodyCoding::Identity;
    loop {
        let reading = Instant::now();
        let frame = timeout_at(deadline, body.frame()).await;
        *waited += reading.elapsed();
        match frame {
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
    let (bytes, scanner) = whole.finish();
    match coding {
        BodyCoding::Known(coding) => decoded(upstream, parts, bytes, (coding, limit)),
        BodyCoding::Identity | BodyCoding::Other => {
            Ok(Fetched::Whole(parts, bytes, scanner, Decoded::AsCame))
        }
    }
}

/// A compressed answer read whole, decoded within `limit` (a decompression
/// bomb is as too large as an answer that big); one that does not decode
/// is handed on as it came, for the judge phase to reject.
fn decoded(
    upstream: &Upstream,
    mut parts: response::Parts,
    raw: Bytes,
    (coding, limit): (Coding, u64),
) -> Result<Fetched, ForwardError> {
    // A guess at the decoded size, never past what may be held.
    let mut whole = BodyCollector::with_capacity((raw.len() as u64).saturating_mul(4).min(limit));
    whole.scan = parts.status.is_success();
    match encoding::decode(coding, &raw, limit, |piece| whole.extend(piece)) {
        Ok(()) => {}
        Err(DecodeError::TooLarge { limit }) => {
            return Err(ForwardError::TooLarge {
                upstream: upstream.display.clone(),
                limit,
            })
        }
        Err(err @ DecodeError::Corrupt { .. }) => {
            let failed = Decoded::Failed(err.to_string());
            return Ok(Fetched::Whole(parts, raw, Scanner::default(), failed));
        }
    }
    let (bytes, scanner) = whole.finish();
    let content_encoding = parts.headers.remove(CONTENT_ENCODING);
    parts.headers.insert(CONTENT_LENGTH, bytes.len().into());
    // A strong validator names the compressed bytes: the decoded ones are
    // only weakly the same (RFC 9110 §8.8.1), as nginx's gunzip marks them.
    let etag = parts.headers.get(ETAG).cloned();
    if let Some(weak) = etag.as_ref().and_then(weakened) {
        parts.headers.insert(ETAG, weak);
    }
    let from = Decoded::From {
        coding,
        raw,
        content_encoding,
        etag,
    };
    Ok(Fetched::Whole(parts, bytes, scanner, from))
}

/// A strong entity tag made weak; `None` for one already weak.
fn weakened(etag: &HeaderValue) -> Option<HeaderValue> {
    let bytes = etag.as_bytes();
    if bytes.starts_with(b"W/") {
        return None;
    }
    let mut weak = Vec::with_capacity(bytes.len() + 2);
    weak.extend_from_slice(b"W/");
    weak.extend_from_slice(bytes);
    HeaderValue::from_bytes(&weak).ok()
}

/// What became of a whole answer's content coding.
#[derive(Debug)]
pub(crate) enum Decoded {
    /// Uncompressed, or in a coding probity does not decode: the bytes are
    /// the upstream's.
    AsCame,
    /// Decoded from `raw`, the upstream's own bytes, sent on as they came
    /// to a client that accepts `coding` when nothing was rewritten.
    From {
        coding: Coding,
        raw: Bytes,
        content_encoding: Option<HeaderValue>,
        /// The upstream's own `ETag`, weakened on the decoded head.
        etag: Option<HeaderValue>,
    },
    /// It names gzip, br or zstd but does not decode (why): the bytes and
    /// the head are the upstream's.
    Failed(String),
}

impl Decoded {
    /// The upstream's answer as it came, for a client that accepts its
    /// coding: its own bytes and head. `None`: send the decoded one.
    pub(crate) fn into_upstream_bytes(
        self,
        headers: &mut HeaderMap,
        accepted: Codings,
    ) -> Option<Bytes> {
        let Decoded::From {
            coding,
            raw,
            content_encoding,
            etag,
        } = self
        else {
            return None;
        };
        if !accepted.contains(coding) {
            return None;
        }
        if let Some(value) = content_encoding {
            headers.insert(CONTENT_ENCODING, value);
        }
        if let Some(value) = etag {
            headers.insert(ETAG, value);
        }
        headers.insert(CONTENT_LENGTH, raw.len().into());
        Some(raw)
    }
}

/// Joins body frames, without a copy when there is only one, and feeds
/// them to the JSON scanner as they come (when `scan`).
struct BodyCollector {
    first: Option<Bytes>,
    rest: Option<BytesMut>,
    capacity: u64,
    len: u64,
    scan: bool,
    scanner: Scanner,
}

impl BodyCollector {
    fn with_capacity(capacity: u64) -> Self {
        Self {
            first: None,
            rest: None,
            capacity,
            len: 0,
            scan: false,
            scanner: Scanner::default(),
        }
    }

    fn len(&self) -> u64 {
        self.len
    }

    /// A received frame: kept as it is when it is the first.
    fn push(&mut self, data: Bytes) {
        if self.first.is_some() || self.rest.is_some() {
            return self.extend(&data);
        }
        self.len += data.len() as u64;
        self.first = Some(data);
        self.scan_more();
    }

    /// Bytes copied onto the end (a frame after the first, a decoded piece).
    fn extend(&mut self, data: &[u8]) {
        self.len += data.len() as u64;
        let rest = match &mut self.rest {
            Some(rest) => rest,
            None => {
                let first = self.first.take().unwrap_or_default();
                let capacity = (self.capacity as usize).max(2 * (first.len() + data.len()));
                let mut rest = BytesMut::with_capacity(capacity);
                rest.extend_from_slice(&first);
                self.rest.insert(rest)
            }
        };
        rest.extend_from_slice(data);
        self.scan_more();
    }

    /// Feeds the scanner what has come so far (it resumes where it was).
    fn scan_more(&mut self) {
        if self.scan {
            match (&self.rest, &self.first) {
                (Some(rest), _) => self.scanner.feed(rest),
                (None, Some(first)) => self.scanner.feed(first),
                (None, None) => {}
            }
        }
    }

    fn finish(self) -> (Bytes, Scanner) {
        let bytes = match (self.rest, self.first) {
            (Some(rest), _) => rest.freeze(),
            (None, Some(first)) => first,
            (None, None) => Bytes::new(),
        };
        (bytes, self.scanner)
    }
}

/// A declared `Content-Length`, the one parser of it.
pub(crate) fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// What a body's `content-type` says it is: the one parser of media types,
/// case-insensitive (RFC 9110 §8.3.1), parameters ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Media {
    /// Server-sent events, NDJSON and the other line-delimited JSON types.
    Stream,
    /// `application/json` or any `+json` type.
    Json,
    /// Anything else, or no `content-type`.
    Other,
}

impl Media {
    pub(crate) fn of(headers: &HeaderMap) -> Self {
        let Some(value) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
            return Media::Other;
        };
        let essence = value.split(';').next().unwrap_or("").trim();
        let is = |name: &str| essence.eq_ignore_ascii_case(name);
        if is("text/event-stream")
            || is("application/x-ndjson")
            || is("application/ndjson")
            || is("application/jsonl")
            || is("application/x-jsonlines")
            || is("application/stream+json")
        {
            Media::Stream
        } else if is("application/json")
            || essence
                .get(essence.len().saturating_sub(5)..)
                .is_some_and(|end| end.eq_ignore_ascii_case("+json"))
        {
            Media::Json
        } else {
            Media::Other
        }
    }
}

/// Whether a response is relayed live rather than read whole. What probity
/// does not inspect always is; an inspected 2xx answer follows the request
/// (see [`Reading`]); anything else follows its media type: streams live,
/// the rest whole.
fn is_live(parts: &response::Parts, reading: Reading) -> bool {
    let media = Media::of(&parts.headers);
    match (reading, parts.status.is_success()) {
        (Reading::Passthrough, _) => true,
        (Reading::Document, true) => false,
        (Reading::Stream, true) => media != Media::Json,
        _ => media == Media::Stream,
    }
}

/// A failed send: no connection at all, or one that broke before the response head.
fn classify(upstream: &Upstream, err: &pool::SendError) -> ForwardError {
    match err {
        pool::SendError::Connect(cause) => ForwardError::Unreachable {
            upstream: upstream.display.clone(),
            cause: root_cause(&**cause),
            hint: upstream.hint,
        },
        pool::SendError::Exchange(err) => reset(upstream, err),
    }
}

/// A tunnel's handshake failed: a connect error is the upstream's being
/// unreachable, any other a reset.
fn classify_legacy(upstream: &Upstream, err: &hyper_util::client::legacy::Error) -> ForwardError {
    if err.is_connect() {
        ForwardError::Unreachable {
            upstream: upstream.display.clone(),
            cause: root_cause(err),
            hint: upstream.hint,
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
    use http::StatusCode;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (k.parse().unwrap(), v.parse().unwrap()))
            .collect()
    }

    fn parts(status: u16, pairs: &[(&str, &str)]) -> response::Parts {
        let mut response = http::Response::new(());
        *response.status_mut() = StatusCode::from_u16(status).unwrap();
        *response.headers_mut() = headers(pairs);
        response.into_parts().0
    }

    #[test]
    fn media_types_are_read_case_insensitively_by_one_parser() {
        for (value, media) in [
            ("text/event-stream; charset=utf-8", Media::Stream),
            ("Text/Event-Stream", Media::Stream),
            ("application/x-ndjson", Media::Stream),
            ("application/stream+json", Media::Stream),
            ("application/json", Media::Json),
            ("Application/JSON; charset=utf-8", Media::Json),
            ("application/problem+JSON", Media::Json),
            ("text/plain", Media::Other),
            ("json", Media::Other),
        ] {
            assert_eq!(
                Media::of(&headers(&[("content-type", value)])),
                media,
                "{value}"
            );
        }
        assert_eq!(Media::of(&headers(&[])), Media::Other);
    }

    #[test]
    fn the_request_decides_how_an_inspected_answer_is_read() {
        let sse = [("content-type", "text/event-stream")];
        let json = [("content-type", "application/json")];
        let plain = [("content-type", "text/plain")];
        // A document was asked: read whole, whatever the type says.
        assert!(!is_live(&parts(200, &sse), Reading::Document));
        assert!(!is_live(&parts(200, &plain), Reading::Document));
        // A stream was asked: live, unless a JSON document came.
        assert!(is_live(&parts(200, &plain), Reading::Stream));
        assert!(is_live(&parts(200, &[]), Reading::Stream));
        assert!(!is_live(&parts(200, &json), Reading::Stream));
        // The ask unknown, or not a 2xx: by media type.
        assert!(is_live(&parts(200, &sse), Reading::ByMedia));
        assert!(!is_live(&parts(200, &plain), Reading::ByMedia));
        assert!(!is_live(&parts(200, &json), Reading::ByMedia));
        assert!(is_live(&parts(500, &sse), Reading::Document));
        assert!(!is_live(&parts(500, &plain), Reading::Document));
        // Not inspected: always live, whatever it is.
        for headers in [&sse[..], &json, &plain, &[]] {
            assert!(is_live(&parts(200, headers), Reading::Passthrough));
            assert!(is_live(&parts(404, headers), Reading::Passthrough));
        }
    }

    #[test]
    fn the_collector_joins_frames_and_keeps_a_single_frame_as_is() {
        let one = Bytes::from_static(b"{\"a\":1}");
        let mut c = BodyCollector::with_capacity(0);
        c.push(one.clone());
        assert_eq!(c.finish().0.as_ptr(), one.as_ptr());
        let mut c = BodyCollector::with_capacity(4);
        for part in ["{\"a\"", ":", "1}"] {
            c.push(Bytes::from(part));
        }
        assert_eq!(c.len(), 7);
        assert_eq!(c.finish().0, "{\"a\":1}");
        assert_eq!(BodyCollector::with_capacity(0).finish().0, "");
    }

    #[test]
    fn an_injected_key_takes_the_place_of_the_clients_query_key() {
        let credential = Credential::new(
            HeaderName::from_static("x-goog-api-key"),
            "k",
            &[],
            &[],
            Some("key"),
        )
        .unwrap();
        for (query, want) in [
            ("key=client", None),
            ("alt=sse&key=client", Some("alt=sse")),
            ("key=a&alt=sse&KEY=b&k%65y=c&key", Some("alt=sse")),
            ("alt=sse", Some("alt=sse")),
            ("monkey=1&key2=x&%zz=1", Some("monkey=1&key2=x&%zz=1")),
        ] {
            assert_eq!(credential.query(Some(query)).as_deref(), want, "{query}");
        }
        assert_eq!(credential.query(None), None);
    }

    #[test]
    fn upstream_uris_join_base_path_rest_and_query() {
        let url = |u: &str| {
            Upstream::new(
                UpstreamUrl::parse(u).unwrap(),
                u.into(),
                Duration::from_secs(1),
                Limits {
                    timeout: Duration::from_secs(1),
                    idle_timeout: Duration::from_secs(1),
                    max_response_bytes: 1,
                },
                "",
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
