//! The one way a response's inspection is finished, whichever path it took
//! (read whole, streamed event by event, or sent as chunks and stitched):
//! what was found is counted, logged and, when anything was changed or
//! rejected, captured here and only here, so the three paths cannot drift.

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};

use crate::capture::{chosen, Capture, Captures, ChunkAnswer};
use crate::config::CapturePolicy;
use crate::telemetry;
use crate::trace::RequestSpan;
use probity_judge::inspect::Findings;
use probity_judge::violation::Invariant;

/// What the request's span shows of the findings.
/// The upstream response as it came, for the capture store.
pub(crate) struct Verbatim {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    /// The whole body's size (a stream's retained bytes may be fewer).
    pub(crate) body_bytes: usize,
    /// A chunked exchange's answers, each kept as its own body (then
    /// `body` is empty).
    pub(crate) chunks: Vec<ChunkAnswer>,
}

/// Where a finished response belongs.
pub(crate) struct Scope<'a> {
    pub(crate) route: &'a Arc<str>,
    /// The admitted client's name (`None`: `unknown`).
    pub(crate) client: Option<&'a str>,
    pub(crate) request_id: &'a HeaderValue,
    pub(crate) endpoint: &'a str,
    pub(crate) dialect: &'static str,
    /// The route's `capture` and `capture_sample`.
    pub(crate) policy: CapturePolicy,
    pub(crate) captures: &'a Captures,
    /// The request's span, when spans are exported.
    pub(crate) span: Option<&'a RequestSpan>,
}

/// Counts, logs and captures what inspection found; whether the upstream
/// response was captured.
pub(crate) fn finish(scope: &Scope<'_>, findings: &Findings, verbatim: Verbatim) -> bool {
    let (route, request_id) = (&**scope.route, scope.request_id);
    if let Some(reason) = findings.uninspected {
        telemetry::uninspected(route, request_id, reason);
    }
    if let Some(invariant) = findings.rejected {
        telemetry::invalid_response(route, request_id, invariant.as_str());
    }
    telemetry::tokens(route, &findings.tokens);
    telemetry::upstream_stream_errors(route, findings.upstream_errors);
    if !findings.malformed.is_empty() {
        telemetry::figures_normalized(route, request_id, &findings.malformed);
    }
    if let Some((task, verdict)) = &findings.output {
        telemetry::output_judged(task, verdict.valid());
        if !verdict.valid() {
            telemetry::output_invalid(task, scope.client, request_id, &verdict.reasons);
        }
    }
    if let Some(span) = scope.span {
        span.judged(findings);
    }
    let output = findings.output.as_ref().map(|(_, verdict)| verdict.valid());
    let normalized = !findings.pointers.is_empty();
    telemetry::route_judged(route, normalized, findings.rejected.is_some(), output);
    let outcome = findings.outcome();
    if !chosen(scope.policy, outcome, request_id.as_bytes()) {
        return false;
    }
    scope.captures.keep(Capture {
        request_id: request_id.to_str().unwrap_or_default().to_string(),
        time: SystemTime::now(),
        route: scope.route.clone(),
        endpoint: scope.endpoint.to_string(),
        dialect: scope.dialect,
        outcome,
        pointers: findings.pointers.clone(),
        invariant: findings.rejected.map(Invariant::as_str).or(findings.cut),
        reasons: findings.reasons().to_vec(),
        status: verbatim.status,
        headers: verbatim.headers,
        body: verbatim.body,
        body_bytes: verbatim.body_bytes,
        chunks: verbatim.chunks,
    })
}
