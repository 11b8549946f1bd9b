//! The respond phase: what the client gets back. The upstream's status and
//! headers (hop-by-hop removed, `x-request-id` added) with the body; what
//! inspection found stated in probity's headers; or an error in the one
//! error shape (`error`). Every path (passthrough, whole, stream, chunks,
//! tunnel) answers through here.

use http::header::{HeaderName, HeaderValue};
use http::{response, HeaderMap, Response};

use super::body::Payload;
use crate::context::RequestContext;
use crate::error::ProxyError;
use crate::forward::{self, remove_hop_by_hop, X_REQUEST_ID};
use crate::telemetry;
use probity_judge::figures;
use probity_judge::inspect::Findings;

/// Lists the JSON pointers of the figures a response had nulled.
pub(crate) const PROBITY_NORMALIZED: HeaderName = HeaderName::from_static("probity-normalized");
/// The output contract's verdict: `valid` or `invalid`.
pub(crate) const PROBITY_OUTPUT: HeaderName = HeaderName::from_static("probity-output");
/// Why an answer is invalid: the reasons, comma-separated.
pub(crate) const PROBITY_OUTPUT_REASON: HeaderName =
    HeaderName::from_static("probity-output-reason");
/// Names the capture (the request id) holding the verbatim upstream response.
pub(crate) const PROBITY_CAPTURE: HeaderName = HeaderName::from_static("probity-capture");

/// States what inspection found in the response's headers:
/// `probity-normalized`, `probity-output` (and its reasons), and
/// `probity-capture` when the verbatim upstream response was kept.
pub(super) fn announce(headers: &mut HeaderMap, findings: &Findings, ctx: &RequestContext) {
    if !findings.pointers.is_empty() {
        if let Ok(list) = HeaderValue::try_from(figures::normalized_list(&findings.pointers)) {
            headers.insert(PROBITY_NORMALIZED, list);
        }
    }
    if let Some((_, verdict)) = &findings.output {
        let valid = verdict.valid();
        let value = HeaderValue::from_static(if valid { "valid" } else { "invalid" });
        headers.insert(PROBITY_OUTPUT, value);
        if let (false, Ok(reasons)) = (
            valid,
            HeaderValue::try_from(probity_judge::contract::joined(&verdict.reasons)),
        ) {
            headers.insert(PROBITY_OUTPUT_REASON, reasons);
        }
    }
    if ctx.captured {
        headers.insert(PROBITY_CAPTURE, ctx.request_id.clone());
    }
}

/// An error, answered in the one error shape; an upstream fault is counted
/// here (a broken payload was counted when it was found).
pub(super) fn error_response(err: &ProxyError, ctx: &RequestContext) -> Response<Payload> {
    if let ProxyError::Forward(fault) = err {
        telemetry::upstream_fault(ctx.route_label(), &ctx.request_id, fault, false);
    }
    if let Some(span) = &ctx.span {
        span.failed(err.kind());
    }
    let mut response = err.respond(&ctx.answering(false));
    if ctx.captured {
        let id = ctx.request_id.clone();
        response.headers_mut().insert(PROBITY_CAPTURE, id);
    }
    response.map(|body| Payload::Whole(Some(body)))
}

/// An upstream request that cannot be built is probity's own fault.
pub(super) fn cannot_build(err: forward::BuildError) -> ProxyError {
    ProxyError::Internal {
        what: format!("cannot build the upstream request ({err})"),
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
