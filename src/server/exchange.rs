//! One request, from arrival to response, in explicit phases:
//!
//! 1. **request filter** (`exchange`): give it a request id, find its route
//!    (`route`), read its body within `max_request_bytes`, find the
//!    endpoint it is and what it asks for (a document or a stream);
//! 2. **chunks** (`chunks`): a batch larger than the provider takes goes
//!    out as chunks and comes back stitched;
//! 3. **upstream request and fetch** (`forward`): the response is read
//!    whole or relayed live, as the request asked;
//! 4. **inspect** (`whole`, `streamed`): the route's dialect judges it
//!    (`inspect`): pass, null malformed figures, or reject; a stream is
//!    judged event by event as it passes (`checked`);
//! 5. **finish and respond** (`finish`, `respond`): what was found is
//!    counted, logged and captured in one place, stated in headers, and the
//!    upstream's status and headers go back (hop-by-hop removed,
//!    `x-request-id` added) with the body, or an error response.
//!
//! Every request ends in exactly one response: each fault becomes a
//! [`ProxyError`], answered in one place (`error`); a panic is caught and
//! answered as `internal_error` (`catch`).

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_LENGTH};
use http::{request, response, HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;
use tokio::time::Instant;

use super::body::{Payload, ResponseBody};
use super::catch::{injected_panic, CatchPanic};
use super::checked::{CheckedStream, StreamContext};
use super::chunks;
use super::finish::{finish, Findings, Scope, Verbatim};
use super::head;
use super::held::{Delivery, Holder, Reserved};
use super::tunnel;
use super::Shared;
use crate::error::{ProxyError, RequestError};
use crate::figures;
use crate::forward::{
    self, remove_hop_by_hop, ClientFault, Fetched, Reading, Relay, Traced, UpstreamBody,
    X_REQUEST_ID,
};
use crate::inspect::{self, Asked, Contracts, Endpoint, Envelope, Exchange, Verdict};
use crate::json::Scanner;
use crate::request_id::request_id;
use crate::route::Route;
use crate::telemetry::{self, RequestRecord};
use crate::trace;

/// Lists the JSON pointers of the figures a response had nulled.
pub(crate) const PROBITY_NORMALIZED: HeaderName = HeaderName::from_static("probity-normalized");
/// The output contract's verdict: `valid` or `invalid`.
pub(crate) const PROBITY_OUTPUT: HeaderName = HeaderName::from_static("probity-output");
/// Why an answer is invalid: the reasons, comma-separated.
pub(crate) const PROBITY_OUTPUT_REASON: HeaderName =
    HeaderName::from_static("probity-output-reason");
/// Names the capture (the request id) holding the verbatim upstream response.
pub(crate) const PROBITY_CAPTURE: HeaderName = HeaderName::from_static("probity-capture");

/// The proxy's service: every request gets exactly one response.
pub(super) async fn handle(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Result<Response<ResponseBody>, Infallible> {
    let delivery = request.extensions().get::<Arc<Delivery>>().cloned();
    let peer = request.extensions().get::<head::Peer>().copied();
    let address = head::client_address(request.headers(), peer, shared.trusted_hops);
    let mut record = RequestRecord {
        request_id: request_id(request.headers()),
        route: None,
        client: None,
        method: request.method().clone(),
        path: request.uri().path().to_string(),
        status: http::StatusCode::OK,
        upstream_status: None,
        started: Instant::now(),
        captured: false,
        envelope: Envelope::Nested,
        retry_invalid: false,
        span: (shared.tracer.as_ref()).and_then(|t| t.request(request.headers(), request.method())),
    };
    let mut reserved = None;
    let mut opened = None;
    let outcome = CatchPanic::new(exchange(
        &shared,
        request,
        address,
        (&mut reserved, &mut opened),
        &mut record,
    ))
    .await;
    let response = match outcome {
        Ok(Ok(response)) => response,
        Ok(Err(err)) => error_response(&err, &record),
        Err(what) => {
            let route = record.route.as_deref().unwrap_or(telemetry::NO_ROUTE_LABEL);
            telemetry::internal_error(route, &record.request_id, &what);
            error_response(&ProxyError::Internal { what }, &record)
        }
    };
    record.status = response.status();
    if let (Some(pending), StatusCode::SWITCHING_PROTOCOLS) = (opened, response.status()) {
        tokio::spawn(pending.run(record, shared.tunnels.clone()));
        return Ok(response.map(|_| ResponseBody::switched()));
    }
    let share = match response.body() {
        Payload::Whole(Some(bytes)) => {
            let holder = Holder::of(record.client.as_deref(), address);
            if let Some(reserved) = &reserved {
                reserved.answered(bytes.len() as u64);
            }
            Some(
                shared
                    .held
                    .hold(bytes.len() as u64, holder, delivery.as_ref()),
            )
        }
        _ => None,
    };
    // Given back only now that the answer itself is counted.
    drop(reserved);
    Ok(response.map(|payload| ResponseBody::new(payload, record, share)))
}

/// The request filter, then the phases after it; `address` is the client's
/// (`head::client_address`), an inspected request's guess at its answer
/// is left in `reserved`, and a WebSocket tunnel to run in `opened`.
async fn exchange(
    shared: &Shared,
    request: Request<Incoming>,
    address: Option<std::net::IpAddr>,
    (reserved, opened): (&mut Option<Reserved>, &mut Option<tunnel::Pending>),
    record: &mut RequestRecord,
) -> Result<Response<Payload>, ProxyError> {
    let (mut parts, body) = request.into_parts();
    let upgrade = head::check(&parts)?.map(|asked| tunnel::Asked::take(asked, &mut parts, opened));
    let peer = parts.extensions.get::<head::Peer>().copied();
    head::clean(&mut parts.headers, peer, shared.trusted_hops);
    // The table in force when the request came: a reload never changes a
    // request (or a stream) in flight.
    let routes = shared.routes.current();
    let clients = &routes.clients;
    let matched = match routes.find(parts.uri.path()) {
        Ok(matched) => matched,
        Err(mut no_route) => {
            // Only an admitted client learns which prefixes exist.
            let specs = inspect::credential_specs();
            if clients.admit(&mut parts.headers, &specs).is_err() {
                no_route.prefixes.clear();
            }
            return Err(no_route.into());
        }
    };
    let route = matched.route;
    admit(record, route, clients, &mut parts.headers)?;
    if let Some(asked) = upgrade {
        return tunnel::open(route, &parts, matched.rest, asked, record).await;
    }
    let path = route.upstream.path(matched.rest);
    // The dialect's table decides by method: every POST it names, and the
    // few reads it names (a GET answering the same object as a POST).
    let endpoint = match parts.method {
        Method::POST => route.endpoint(&path),
        Method::GET => route.dialect.read(&path, parts.uri.query()),
        _ => None,
    };
    injected_panic("exchange", &record.request_id);
    let Some(endpoint) = endpoint else {
        let unjudged = (parts.method == Method::POST)
            .then(|| route.dialect.unjudged(&path))
            .flatten();
        if let Some(reason) = unjudged {
            telemetry::uninspected(&route.name, &record.request_id, reason);
        }
        return passthrough(route, &parts, matched.rest, body, record, shared).await;
    };
    let holder = Holder::of(record.client.as_deref(), address);
    *reserved = Some(shared.held.admit(&holder, &route.name)?);
    let body = read_body(body, &parts.headers, shared).await?;
    if let Some(span) = &record.span {
        span.requested(endpoint.operation, &body, &path);
    }
    let call = Call {
        shared,
        route,
        client: &parts,
        rest: matched.rest,
        path: &path,
        body: &body,
        endpoint,
    };

    if let Some((spec, bodies)) = call.chunks() {
        return chunks::send(&call, spec, bodies, record).await;
    }

    let upstream_request = call.upstream_request(body.clone().into(), &record.request_id)?;
    let traced = record.span.as_deref().map(Traced::request);
    match forward::fetch(&route.upstream, upstream_request, call.reading(), traced).await? {
        Fetched::Whole(upstream, bytes, scanner) => call.whole(upstream, bytes, scanner, record),
        Fetched::Stream(upstream, relay) => Ok(call.streamed(upstream, relay, record)),
    }
}

/// The request is its route's, and its client is admitted (or refused);
/// its span learns both.
fn admit(
    record: &mut RequestRecord,
    route: &Route,
    clients: &crate::route::Clients,
    headers: &mut HeaderMap,
) -> Result<(), RequestError> {
    record.route = Some(route.name.clone());
    record.envelope = route.dialect.error_envelope();
    record.retry_invalid = route.retry_invalid;
    record.client = clients
        .admit(headers, &[route.dialect.credential()])
        .map_err(|refused| {
            telemetry::refused(&route.name, &record.request_id, &refused);
            RequestError::Unauthenticated {
                header: refused.header,
                prefix: refused.prefix,
            }
        })?;
    routed(record, route);
    Ok(())
}

/// The request's span learns its route.
fn routed(record: &RequestRecord, route: &Route) {
    if let Some(span) = &record.span {
        let (address, port) = route.upstream.address();
        span.routed(&trace::Routed {
            route: &route.name,
            client: record.client.as_deref(),
            provider: route.dialect.provider(),
            server_address: address,
            server_port: port,
        });
    }
}

/// An endpoint the route's dialect does not inspect (a file upload, a
/// model list, a download): streamed through both ways as it arrives, as a
/// plain reverse proxy does, never held and bounded by no body limit of
/// probity's (those bound only what it must hold to judge).
async fn passthrough(
    route: &Route,
    client: &request::Parts,
    rest: &str,
    body: Incoming,
    record: &mut RequestRecord,
    shared: &Shared,
) -> Result<Response<Payload>, ProxyError> {
    let fault = ClientFault::default();
    let body = match route.upstream.signer {
        // A signature covers the body's hash: it is read whole first
        // (within max_request_bytes).
        Some(_) => UpstreamBody::from(read_body(body, &client.headers, shared).await?),
        None => UpstreamBody::Streaming(body, fault.clone()),
    };
    let request =
        forward::upstream_request(&route.upstream, client, rest, body, &record.request_id)
            .map_err(cannot_build)?;
    let traced = record.span.as_deref().map(Traced::request);
    let fetched = match forward::fetch(&route.upstream, request, Reading::Passthrough, traced).await
    {
        Ok(fetched) => fetched,
        // The upstream request failed because the client's body did: the
        // upstream got a cut request (hyper aborts it, and that connection
        // is never reused), the client a 400.
        Err(_) if fault.get().is_some() => {
            let cause = fault.get().unwrap_or_default().to_string();
            return Err(RequestError::Unreadable { cause }.into());
        }
        Err(err) => return Err(err.into()),
    };
    let (upstream, payload) = match fetched {
        Fetched::Stream(upstream, relay) => (upstream, Payload::Stream(relay)),
        Fetched::Whole(upstream, bytes, _) => (upstream, Payload::Whole(Some(bytes))),
    };
    record.upstream_status = Some(upstream.status);
    Ok(respond(upstream, &record.request_id, payload))
}

/// An upstream request that cannot be built is probity's own fault.
fn cannot_build(err: forward::BuildError) -> ProxyError {
    ProxyError::Internal {
        what: format!("cannot build the upstream request ({err})"),
    }
}

/// One client call, as the phases after the request filter see it.
pub(super) struct Call<'a> {
    pub(crate) shared: &'a Shared,
    pub(crate) route: &'a Arc<Route>,
    pub(crate) client: &'a request::Parts,
    /// The client's path after the route prefix.
    pub(crate) rest: &'a str,
    /// The path sent upstream.
    pub(crate) path: &'a str,
    pub(crate) body: &'a Bytes,
    /// The endpoint the route's dialect inspects.
    pub(crate) endpoint: &'static Endpoint,
}

impl Call<'_> {
    /// A batch larger than the route's `max_batch_inputs`, split.
    fn chunks(&self) -> Option<(crate::batch::BatchSpec, Vec<Bytes>)> {
        let max = self.route.max_batch_inputs?;
        let spec = self.endpoint.batch?;
        crate::batch::split(self.body, &spec, max).map(|bodies| (spec, bodies))
    }

    /// How the answer is read: as the request asked, when it is inspected.
    fn reading(&self) -> Reading {
        match self.endpoint.asked(self.body) {
            Asked::Unknown => Reading::ByMedia,
            Asked::Document => Reading::Document,
            Asked::Stream => Reading::Stream,
        }
    }

    pub(super) fn upstream_request(
        &self,
        body: UpstreamBody,
        request_id: &HeaderValue,
    ) -> Result<Request<UpstreamBody>, ProxyError> {
        forward::upstream_request(
            &self.route.upstream,
            self.client,
            self.rest,
            body,
            request_id,
        )
        .map_err(cannot_build)
    }

    pub(super) fn contracts(&self) -> Contracts<'_> {
        Contracts {
            config: self.route.contract.as_ref(),
            cache: &self.shared.schemas,
        }
    }

    pub(super) fn scope<'b>(&'b self, record: &'b RequestRecord) -> Scope<'b> {
        Scope {
            route: &self.route.name,
            client: record.client.as_deref(),
            request_id: &record.request_id,
            endpoint: self.path,
            dialect: self.route.dialect.name(),
            policy: self.route.capture,
            captures: &self.shared.captures,
            span: record.span.as_deref(),
        }
    }

    /// Inspects a whole answer and finishes it.
    fn whole(
        &self,
        mut upstream: response::Parts,
        bytes: Bytes,
        scanner: Scanner,
        record: &mut RequestRecord,
    ) -> Result<Response<Payload>, ProxyError> {
        record.upstream_status = Some(upstream.status);
        let verdict = inspect::inspect_scanned(
            self.endpoint,
            &Exchange {
                method: &self.client.method,
                request_body: self.body,
                status: upstream.status,
                response_headers: &upstream.headers,
                response_body: &bytes,
            },
            &self.contracts(),
            scanner,
        );
        let verbatim = |upstream: &response::Parts| Verbatim {
            status: upstream.status,
            headers: upstream.headers.clone(),
            body: bytes.clone(),
            body_bytes: bytes.len(),
            chunks: Vec::new(),
        };
        let checked = match verdict {
            Verdict::Unchecked => {
                return Ok(respond(
                    upstream,
                    &record.request_id,
                    Payload::Whole(Some(bytes)),
                ))
            }
            Verdict::Reject(violation) => {
                let findings = Findings {
                    rejected: Some(violation.invariant),
                    ..Findings::default()
                };
                let scope = self.scope(record);
                record.captured = finish(&scope, &findings, verbatim(&upstream));
                return Err(violation.into());
            }
            Verdict::Checked(checked) => *checked,
        };
        let judgement = checked.judgement;
        let findings = Findings {
            tokens: judgement.tokens,
            malformed: judgement.malformed,
            pointers: judgement.pointers,
            uninspected: checked.uninspected,
            output: checked.output.map(|o| (o.task, o.verdict)),
            identity: checked.identity,
            ..Findings::default()
        };
        let scope = self.scope(record);
        record.captured = finish(&scope, &findings, verbatim(&upstream));
        for header in &judgement.removed_headers {
            upstream.headers.remove(*header);
        }
        let body = match checked.body {
            Some(rewritten) => {
                // The body changed: its length is the rewritten one.
                upstream
                    .headers
                    .insert(CONTENT_LENGTH, rewritten.len().into());
                rewritten
            }
            None => bytes,
        };
        announce(&mut upstream.headers, &findings, record);
        Ok(respond(
            upstream,
            &record.request_id,
            Payload::Whole(Some(body)),
        ))
    }

    /// Sets up a live answer: judged event by event when it is a 2xx answer
    /// to an inspected endpoint, else relayed as it comes.
    fn streamed(
        &self,
        mut upstream: response::Parts,
        relay: Relay,
        record: &mut RequestRecord,
    ) -> Response<Payload> {
        record.upstream_status = Some(upstream.status);
        let judge = upstream
            .status
            .is_success()
            .then(|| inspect::stream_judge(self.endpoint, self.body, &self.contracts()));
        let payload = match judge {
            None => Payload::Stream(relay),
            Some(Err(reason)) => {
                telemetry::uninspected(&self.route.name, &record.request_id, reason);
                Payload::Stream(relay)
            }
            Some(Ok(judge)) => {
                if let Some(reason) = judge.uninspected {
                    telemetry::uninspected(&self.route.name, &record.request_id, reason);
                }
                let context = StreamContext {
                    route: self.route.name.clone(),
                    client: record.client.clone(),
                    request_id: record.request_id.clone(),
                    endpoint: self.path.to_string(),
                    status: upstream.status,
                    headers: upstream.headers.clone(),
                    dialect: self.route.dialect.name(),
                    policy: self.route.capture,
                    captures: self.shared.captures.clone(),
                    retain_limit: self.shared.captures.retain_limit(),
                    envelope: record.envelope,
                    retry_invalid: record.retry_invalid,
                    span: record.span.clone(),
                };
                // Its events may be rewritten, so the upstream's length no
                // longer holds: it goes out chunked (close-delimited to an
                // HTTP/1.0 client), never cut short by a stale length.
                upstream.headers.remove(CONTENT_LENGTH);
                Payload::Checked(Box::new(CheckedStream::new(relay, judge, context)))
            }
        };
        respond(upstream, &record.request_id, payload)
    }
}

/// States what inspection found in the response's headers:
/// `probity-normalized`, `probity-output` (and its reasons), and
/// `probity-capture` when the verbatim upstream response was kept.
pub(super) fn announce(headers: &mut HeaderMap, findings: &Findings, record: &RequestRecord) {
    if !findings.pointers.is_empty() {
        if let Ok(list) = HeaderValue::try_from(figures::normalized_list(&findings.pointers)) {
            headers.insert(PROBITY_NORMALIZED, list);
        }
    }
    if let Some((_, verdict)) = &findings.output {
        let valid = verdict.valid();
        let value = HeaderValue::from_static(if valid { "valid" } else { "invalid" });
        headers.insert(PROBITY_OUTPUT, value);
        if let (false, Ok(reasons)) = (valid, HeaderValue::try_from(verdict.reasons.join(","))) {
            headers.insert(PROBITY_OUTPUT_REASON, reasons);
        }
    }
    if record.captured {
        headers.insert(PROBITY_CAPTURE, record.request_id.clone());
    }
}

/// An error, answered in the one error shape; an upstream fault is counted
/// here (a broken payload was counted when it was found).
fn error_response(err: &ProxyError, record: &RequestRecord) -> Response<Payload> {
    let route = record.route.as_deref();
    if let ProxyError::Forward(fault) = err {
        let label = route.unwrap_or(telemetry::NO_ROUTE_LABEL);
        telemetry::upstream_fault(label, &record.request_id, fault, false);
    }
    if let Some(span) = &record.span {
        span.failed(err.kind());
    }
    let mut response = err.respond(&record.answering(false));
    if record.captured {
        let id = record.request_id.clone();
        response.headers_mut().insert(PROBITY_CAPTURE, id);
    }
    response.map(|body| Payload::Whole(Some(body)))
}

/// Reads the client's body, refusing it (before reading, when the length is
/// declared) once it exceeds `limit`. Held whole because model requests are
/// small JSON documents that inspection needs (`n`, the inputs, the schema).
async fn read_body(
    body: Incoming,
    headers: &HeaderMap,
    shared: &Shared,
) -> Result<Bytes, RequestError> {
    let limit = shared.max_request_bytes;
    if forward::content_length(headers).is_some_and(|len| len > limit) {
        return Err(RequestError::TooLarge { limit });
    }
    let limited = Limited::new(body, usize::try_from(limit).unwrap_or(usize::MAX));
    // A head then a trickled body must not hold a connection forever.
    let collected = tokio::time::timeout(shared.body_read_timeout, limited.collect())
        .await
        .map_err(|_| RequestError::BodyTimeout {
            after_ms: u64::try_from(shared.body_read_timeout.as_millis()).unwrap_or(u64::MAX),
        })?;
    match collected {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(err) if err.is::<LengthLimitError>() => Err(RequestError::TooLarge { limit }),
        Err(err) => Err(RequestError::Unreadable {
            cause: err.to_string(),
        }),
    }
}

/// The client's response: the upstream's status and headers, minus the
/// hop-by-hop ones, plus the request id.
pub(super) fn respond(
    upstream: response::Parts,
    request_id: &HeaderValue,
    payload: Payload,
) -> Response<Payload> {
    let mut response = Response::new(payload);
    *response.status_mut() = upstream.status;
    let mut headers = upstream.headers;
    remove_hop_by_hop(&mut headers);
    headers.insert(X_REQUEST_ID, request_id.clone());
    *response.headers_mut() = headers;
    response
}
