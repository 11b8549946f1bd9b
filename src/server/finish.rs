//! The one way a response's inspection is finished, whichever path it took
//! (read whole, streamed event by event, or sent as chunks and stitched):
//! what was found is counted, logged and, when anything was changed or
//! rejected, captured here and only here, so the three paths cannot drift.

use std::time::SystemTime;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};

use crate::capture::{chosen, Capture, Captures, ChunkAnswer};
use crate::context::RequestContext;
use crate::error::ProxyError;
use crate::telemetry;
use probity_judge::inspect::Findings;
use probity_judge::violation::{Invariant, Violation};

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

/// Counts, logs and captures what inspection found, and tells the request's
/// context its outcome and whether the upstream response was captured.
pub(crate) fn finish(
    ctx: &mut RequestContext,
    captures: &Captures,
    findings: &Findings,
    verbatim: Verbatim,
) {
    let outcome = findings.outcome();
    ctx.outcome = Some(outcome);
    let Some(route) = ctx.route.clone() else {
        return;
    };
    let (route, request_id) = (&route, &ctx.request_id);
    let (name, client) = (&*route.name, ctx.client.as_deref());
    if let Some(reason) = findings.uninspected {
        telemetry::uninspected(name, request_id, reason);
    }
    if let Some(invariant) = findings.rejected {
        telemetry::invalid_response(name, request_id, invariant.as_str());
    }
    telemetry::tokens(name, &findings.tokens);
    telemetry::upstream_stream_errors(name, findings.upstream_errors);
    if !findings.malformed.is_empty() {
        telemetry::figures_normalized(name, request_id, &findings.malformed);
    }
    if !findings.contradicted.is_empty() {
        telemetry::figures_contradicted(name, request_id, &findings.contradicted);
    }
    if let Some((task, verdict)) = &findings.output {
        telemetry::output_judged(task, verdict.valid());
        if !verdict.valid() {
            telemetry::output_invalid(task, client, request_id, &verdict.reasons);
        }
    }
    if let Some(span) = &ctx.span {
        span.judged(findings);
    }
    let output = findings.output.as_ref().map(|(_, verdict)| verdict.valid());
    let normalized = !findings.pointers.is_empty();
    telemetry::route_judged(name, normalized, findings.rejected.is_some(), output);
    if !chosen(route.capture, outcome, request_id.as_bytes()) {
        return;
    }
    ctx.captured = captures.keep(Capture {
        request_id: request_id.to_str().unwrap_or_default().to_string(),
        time: SystemTime::now(),
        route: route.name.clone(),
        endpoint: ctx.upstream_path.clone(),
        dialect: route.dialect.name(),
        outcome,
        pointers: findings.pointers.clone(),
        contradicted: findings.contradicted.clone(),
        invariant: findings.rejected.map(Invariant::as_str).or(findings.cut),
        reasons: findings.reasons().to_vec(),
        status: verbatim.status,
        headers: verbatim.headers,
        body: verbatim.body,
        body_bytes: verbatim.body_bytes,
        chunks: verbatim.chunks,
    });
}

/// The one reject path: an answer that broke a payload invariant is
/// finished like any other (counted, and captured verbatim as `rejected`),
/// and the request fails with the violation.
pub(crate) fn reject(
    ctx: &mut RequestContext,
    captures: &Captures,
    violation: Violation,
    verbatim: Verbatim,
) -> ProxyError {
    let findings = Findings {
        rejected: Some(violation.invariant),
        ..Findings::default()
    };
    finish(ctx, captures, &findings, verbatim);
    violation.into()
}
