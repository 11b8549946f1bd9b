//! One request, from arrival to response, in explicit phases:
//!
//! 1. **request filter**: give it a request id, find its route (`route`),
//!    read its body within `max_request_bytes`;
//! 2. **upstream request**: build it (`forward::upstream_request`);
//! 3. **fetch**: send it and read the response whole, or ready a relay
//!    (`forward::fetch`);
//! 4. **inspect**: the route's dialect judges a whole response (`inspect`):
//!    pass it, null its malformed figures, or reject it; what is changed or
//!    rejected is kept verbatim in the capture store;
//! 5. **respond**: the upstream's status and headers (hop-by-hop removed,
//!    `x-request-id` added) with the body as it came, or an error response.
//!
//! Every request ends in exactly one response: each fault becomes a
//! [`ProxyError`], answered in one place (`error`).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_LENGTH};
use http::{response, HeaderMap, Method, Request, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;
use tokio::time::Instant;

use super::body::{Payload, ResponseBody};
use super::checked::{CheckedStream, StreamContext};
use super::chunks;
use super::request_id::request_id;
use super::Shared;
use crate::batch;
use crate::capture::{Capture, Outcome};
use crate::error::{ProxyError, RequestError};
use crate::forward::{self, remove_hop_by_hop, Fetched, X_REQUEST_ID};
use crate::inspect::{self, Contracts, Exchange, Verdict};
use crate::route::Route;

/// Lists the JSON pointers of the figures a response had nulled.
pub const PROBITY_NORMALIZED: HeaderName = HeaderName::from_static("probity-normalized");
/// The output contract's verdict: `valid` or `invalid`.
pub const PROBITY_OUTPUT: HeaderName = HeaderName::from_static("probity-output");
/// Why an answer is invalid: the reasons, comma-separated.
pub const PROBITY_OUTPUT_REASON: HeaderName = HeaderName::from_static("probity-output-reason");
/// Names the capture (the request id) holding the verbatim upstream response.
pub const PROBITY_CAPTURE: HeaderName = HeaderName::from_static("probity-capture");
use crate::telemetry::{self, RequestRecord};

/// The proxy's service: every request gets exactly one response.
pub(super) async fn handle(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Result<Response<ResponseBody>, Infallible> {
    let mut record = RequestRecord {
        request_id: request_id(request.headers()),
        route: None,
        method: request.method().clone(),
        path: request.uri().path().to_string(),
        status: http::StatusCode::OK,
        upstream_status: None,
        started: Instant::now(),
        captured: false,
    };
    let response = match exchange(&shared, request, &mut record).await {
        Ok(response) => response,
        Err(err) => {
            let route = record.route.as_deref();
            if let ProxyError::Forward(fault) = &err {
                let label = route.unwrap_or(telemetry::NO_ROUTE_LABEL);
                telemetry::upstream_fault(label, &record.request_id, fault, false);
            }
            let mut response = err.respond(route, &record.request_id);
            if record.captured {
                let id = record.request_id.clone();
                response.headers_mut().insert(PROBITY_CAPTURE, id);
            }
            response.map(|body| Payload::Whole(Some(body)))
        }
    };
    record.status = response.status();
    Ok(response.map(|payload| ResponseBody::new(payload, record)))
}

async fn exchange(
    shared: &Shared,
    request: Request<Incoming>,
    record: &mut RequestRecord,
) -> Result<Response<Payload>, ProxyError> {
    // Request filter.
    let (parts, body) = request.into_parts();
    let matched = shared.routes.find(parts.uri.path())?;
    let route: &Route = matched.route;
    record.route = Some(route.name.clone());
    let body = read_body(body, &parts.headers, shared.max_request_bytes).await?;

    // The endpoint this POST is, when the route's dialect checks it.
    let endpoint = route.upstream.path(matched.rest);
    let checked = match parts.method {
        Method::POST => route.dialect.endpoint(&endpoint),
        _ => None,
    };

    // A batch larger than the provider takes goes out as chunks.
    if let (Some(max), Some(checked)) = (route.max_batch_inputs, checked) {
        if let Some(spec) = checked.batch {
            if let Some(bodies) = batch::split(&body, &spec, max) {
                let (rest, route) = (matched.rest, matched.route);
                return chunks::send(
                    shared, route, &parts, rest, endpoint, checked, spec, bodies, record,
                )
                .await;
            }
        }
    }

    // Upstream request.
    let upstream_request = forward::upstream_request(
        route,
        &parts,
        matched.rest,
        body.clone(),
        &record.request_id,
    )
    .map_err(|_| RequestError::BadTarget)?;

    // Fetch.
    // A response this dialect checks is read whole, whatever its framing.
    let whole = checked.is_some();
    let (upstream, bytes) = match forward::fetch(route, upstream_request, whole).await? {
        Fetched::Whole(upstream, bytes) => (upstream, bytes),
        Fetched::Stream(upstream, relay) => {
            record.upstream_status = Some(upstream.status);
            let exchange = Exchange {
                method: &parts.method,
                path: &endpoint,
                request_headers: &parts.headers,
                request_body: &body,
                status: upstream.status,
                response_headers: &upstream.headers,
                response_body: &Bytes::new(),
            };
            let contracts = Contracts {
                config: route.contract.as_ref(),
                cache: &shared.schemas,
            };
            let payload = match inspect::stream_check(route.dialect, &exchange, &contracts) {
                None => Payload::Stream(relay),
                Some(Err(reason)) => {
                    telemetry::uninspected(&route.name, &record.request_id, reason);
                    Payload::Stream(relay)
                }
                Some(Ok(judge)) => {
                    let context = StreamContext {
                        route: route.name.clone(),
                        request_id: record.request_id.clone(),
                        endpoint,
                        status: upstream.status,
                        headers: upstream.headers.clone(),
                        captures: shared.captures.clone(),
                        retain_limit: shared.capture_retain_limit,
                    };
                    Payload::Checked(Box::new(CheckedStream::new(relay, judge, context)))
                }
            };
            return Ok(respond(upstream, &record.request_id, payload));
        }
    };
    record.upstream_status = Some(upstream.status);

    // Inspect.
    let contracts = Contracts {
        config: route.contract.as_ref(),
        cache: &shared.schemas,
    };
    let verdict = inspect::inspect(
        route.dialect,
        &Exchange {
            method: &parts.method,
            path: &endpoint,
            request_headers: &parts.headers,
            request_body: &body,
            status: upstream.status,
            response_headers: &upstream.headers,
            response_body: &bytes,
        },
        &contracts,
    );
    let name = &*route.name;
    let request_id = &record.request_id;
    let checked = match verdict {
        Verdict::Unchecked => None,
        Verdict::Uninspected(reason) => {
            telemetry::uninspected(name, request_id, reason);
            None
        }
        Verdict::Reject(violation) => {
            telemetry::invalid_response(name, request_id, violation.invariant);
            let outcome = Outcome::Rejected(violation.invariant);
            record.captured = keep(
                shared, route, &endpoint, request_id, outcome, &upstream, &bytes,
            );
            return Err(violation.into());
        }
        Verdict::Checked(checked) => Some(checked),
    };
    let Some(checked) = checked else {
        return Ok(respond(upstream, request_id, Payload::Whole(Some(bytes))));
    };

    // Respond: what inspection found is counted, stated in headers, and
    // (when anything changed or the answer is invalid) captured.
    telemetry::tokens(name, &checked.judgement.tokens);
    let normalized = !checked.judgement.is_clean();
    if normalized {
        telemetry::figures_normalized(name, request_id, &checked.judgement.malformed);
    }
    if let Some(output) = &checked.output {
        telemetry::output_judged(&output.task, output.verdict.valid());
    }
    let invalid = checked.output.as_ref().filter(|o| !o.verdict.valid());
    if let Some(output) = invalid {
        telemetry::output_invalid(&output.task, request_id, &output.verdict.reasons);
    }
    let outcome = match (normalized, invalid) {
        (true, _) => Some(Outcome::Normalized(checked.judgement.pointers.clone())),
        (false, Some(output)) => Some(Outcome::OutputInvalid(output.verdict.reasons.clone())),
        (false, None) => None,
    };
    let captured = outcome.is_some_and(|outcome| {
        keep(
            shared, route, &endpoint, request_id, outcome, &upstream, &bytes,
        )
    });
    record.captured = captured;

    let mut upstream = upstream;
    for header in &checked.judgement.removed_headers {
        upstream.headers.remove(*header);
    }
    let bytes = match checked.body {
        Some(rewritten) => {
            upstream
                .headers
                .insert(CONTENT_LENGTH, rewritten.len().into());
            rewritten
        }
        None => bytes,
    };
    if normalized {
        if let Ok(list) = HeaderValue::try_from(checked.judgement.pointers.join(",")) {
            upstream.headers.insert(PROBITY_NORMALIZED, list);
        }
    }
    if let Some(output) = &checked.output {
        let valid = output.verdict.valid();
        let verdict = HeaderValue::from_static(if valid { "valid" } else { "invalid" });
        upstream.headers.insert(PROBITY_OUTPUT, verdict);
        if let (false, Ok(reasons)) = (
            valid,
            HeaderValue::try_from(output.verdict.reasons.join(",")),
        ) {
            upstream.headers.insert(PROBITY_OUTPUT_REASON, reasons);
        }
    }
    if captured {
        upstream.headers.insert(PROBITY_CAPTURE, request_id.clone());
    }
    Ok(respond(upstream, request_id, Payload::Whole(Some(bytes))))
}

/// Keeps the verbatim upstream response in the capture store; whether it
/// was kept (the store may be disabled).
fn keep(
    shared: &Shared,
    route: &Route,
    endpoint: &str,
    request_id: &HeaderValue,
    outcome: Outcome,
    upstream: &response::Parts,
    bytes: &Bytes,
) -> bool {
    shared.captures.keep(Capture {
        request_id: request_id.to_str().unwrap_or_default().to_string(),
        time: SystemTime::now(),
        route: route.name.clone(),
        endpoint: endpoint.to_string(),
        outcome,
        status: upstream.status,
        headers: upstream.headers.clone(),
        body: Some(bytes.clone()),
        body_bytes: bytes.len(),
    });
    shared.captures.enabled()
}

/// Reads the client's body, refusing it (before reading, when the length is
/// declared) once it exceeds `limit`. Held whole because model requests are
/// small JSON documents that inspection needs (`n`, the inputs, the schema).
async fn read_body(body: Incoming, headers: &HeaderMap, limit: u64) -> Result<Bytes, RequestError> {
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit) {
        return Err(RequestError::TooLarge { limit });
    }
    let limited = Limited::new(body, usize::try_from(limit).unwrap_or(usize::MAX));
    match limited.collect().await {
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
