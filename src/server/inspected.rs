//! An inspected call: the request the route's dialect judges the answer
//! of, its upstream request, and the judge phase of its answer, read whole
//! (`whole`) or judged event by event as it passes (`streamed`, through
//! `judged_stream`). A batch too large for the provider is sent by `chunks`.

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_LENGTH};
use http::{request, response, Request, Response};

use super::body::Payload;
use super::finish::{finish, reject, Verbatim};
use super::judged_stream::JudgedStream;
use super::respond::{announce, cannot_build, respond};
use super::Shared;
use crate::context::RequestContext;
use crate::error::ProxyError;
use crate::forward::{self, Codings, Decoded, Relay, UpstreamBody};
use crate::route::Route;
use crate::telemetry;
use probity_judge::inspect::{self, Contracts, Endpoint, Exchange, Verdict};
use probity_judge::json::Scanner;
use probity_judge::violation::{Invariant, Violation};

/// An inspected request, as the plan phase read it: the endpoint its
/// route's dialect judges, the client's head, its path after the route
/// prefix, its body (read whole: judging needs it), and the codings its
/// answer may come in.
pub(super) struct Inspect<'a> {
    pub(super) endpoint: &'static Endpoint,
    pub(super) client: &'a request::Parts,
    pub(super) rest: &'a str,
    pub(super) body: Bytes,
    /// What the upstream is asked for (none: `identity`).
    pub(super) ask: Codings,
    /// What the client accepts: a sound answer that nothing rewrote goes
    /// to it in the upstream's own coding, else decoded.
    pub(super) accepted: Codings,
}

impl Inspect<'_> {
    /// The request to send upstream, with `body` (the client's, or one
    /// chunk of it).
    pub(super) fn upstream_request(
        &self,
        route: &Route,
        body: UpstreamBody,
        request_id: &HeaderValue,
    ) -> Result<Request<UpstreamBody>, ProxyError> {
        let head = (self.client, self.rest);
        forward::upstream_request(&route.upstream, head, body, Some(self.ask), request_id)
            .map_err(cannot_build)
    }
}

/// A 2xx answer in gzip, br or zstd that does not decode: its payload
/// cannot be read, so it is not sound.
pub(super) fn undecodable(cause: &str) -> Violation {
    Violation {
        invariant: Invariant::InvalidEncoding,
        message: format!("the answer is compressed, but {cause}"),
    }
}

/// The route's output contract, and the server's compiled schemas.
fn contracts<'s>(route: &'s Route, shared: &'s Shared) -> Contracts<'s> {
    Contracts {
        config: route.contract.as_ref(),
        cache: &shared.schemas,
        convention: route.convention,
    }
}

/// Inspects a whole answer and finishes it.
pub(super) fn whole(
    (shared, route): (&Shared, &Route),
    inspect: &Inspect<'_>,
    (mut upstream, bytes, scanner, decoded): (response::Parts, Bytes, Scanner, Decoded),
    ctx: &mut RequestContext,
) -> Result<Response<Payload>, ProxyError> {
    ctx.upstream_status = Some(upstream.status);
    let verbatim = |upstream: &response::Parts| Verbatim {
        status: upstream.status,
        headers: upstream.headers.clone(),
        body: bytes.clone(),
        body_bytes: bytes.len(),
        chunks: Vec::new(),
    };
    if let (Decoded::Failed(cause), true) = (&decoded, upstream.status.is_success()) {
        let violation = undecodable(cause);
        return Err(reject(
            ctx,
            &shared.captures,
            violation,
            verbatim(&upstream),
        ));
    }
    let verdict = inspect::inspect_scanned(
        inspect.endpoint,
        &Exchange {
            method: &inspect.client.method,
            request_body: &inspect.body,
            status: upstream.status,
            response_headers: &upstream.headers,
            response_body: &bytes,
        },
        &contracts(route, shared),
        scanner,
    );
    let sound = match verdict {
        Verdict::Unchecked => {
            let body = sent(
                &mut upstream.headers,
                None,
                (bytes, decoded),
                inspect.accepted,
            );
            return Ok(respond(
                upstream,
                &ctx.request_id,
                Payload::Whole(Some(body)),
            ));
        }
        Verdict::Reject(violation) => {
            return Err(reject(
                ctx,
                &shared.captures,
                violation,
                verbatim(&upstream),
            ))
        }
        Verdict::Sound(sound) => *sound,
    };
    let findings = sound.findings;
    finish(ctx, &shared.captures, &findings, verbatim(&upstream));
    for header in &sound.removed_headers {
        upstream.headers.remove(*header);
    }
    let body = sent(
        &mut upstream.headers,
        sound.body,
        (bytes, decoded),
        inspect.accepted,
    );
    announce(&mut upstream.headers, &findings, ctx);
    Ok(respond(
        upstream,
        &ctx.request_id,
        Payload::Whole(Some(body)),
    ))
}

/// The body a whole answer goes out with, its head made to say so: the
/// rewritten one; else the upstream's own bytes (compressed as they came)
/// to a client that accepts their coding; else the decoded bytes.
fn sent(
    headers: &mut http::HeaderMap,
    rewritten: Option<Bytes>,
    (bytes, decoded): (Bytes, Decoded),
    accepted: Codings,
) -> Bytes {
    match rewritten {
        Some(rewritten) => {
            // The body changed: its length is the rewritten one.
            headers.insert(CONTENT_LENGTH, rewritten.len().into());
            rewritten
        }
        None => decoded
            .into_upstream_bytes(headers, accepted)
            .unwrap_or(bytes),
    }
}

/// Sets up a live answer: judged event by event when it is a 2xx answer
/// to an inspected endpoint, else relayed as it comes.
pub(super) fn streamed(
    (shared, route): (&Shared, &Route),
    inspect: &Inspect<'_>,
    (mut upstream, relay): (response::Parts, Relay),
    ctx: &mut RequestContext,
) -> Response<Payload> {
    ctx.upstream_status = Some(upstream.status);
    let contracts = contracts(route, shared);
    let judge = upstream
        .status
        .is_success()
        .then(|| inspect::stream_judge(inspect.endpoint, &inspect.body, &contracts));
    let payload = match judge {
        None => Payload::Stream(relay),
        Some(Err(reason)) => {
            telemetry::uninspected(&route.name, &ctx.request_id, reason);
            Payload::Stream(relay)
        }
        Some(Ok(judge)) => {
            if let Some(reason) = judge.uninspected() {
                telemetry::uninspected(&route.name, &ctx.request_id, reason);
            }
            // The capture keeps the upstream's head as it came.
            let upstream_head = (upstream.status, owned(&upstream.headers));
            let sink = (shared.captures.clone(), &*ctx);
            // Its events may be rewritten, so the upstream's length no
            // longer holds: it goes out chunked (close-delimited to an
            // HTTP/1.0 client), never cut short by a stale length.
            upstream.headers.remove(CONTENT_LENGTH);
            Payload::Checked(Box::new(JudgedStream::new(
                relay,
                judge,
                upstream_head,
                sink,
            )))
        }
    };
    respond(upstream, &ctx.request_id, payload)
}

/// A copy of a stream's upstream header values, kept for its capture: a
/// received value is a slice of the upstream connection's read buffer, and
/// holding it for the stream's life keeps that buffer alive, so hyper
/// allocates another for the body instead of reusing it.
fn owned(headers: &http::HeaderMap) -> http::HeaderMap {
    let mut copy = http::HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let mut owned = HeaderValue::from_bytes(value.as_bytes()).unwrap_or_else(|_| value.clone());
        owned.set_sensitive(value.is_sensitive());
        copy.append(name.clone(), owned);
    }
    copy
}
