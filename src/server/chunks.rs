//! A large embedding batch, sent as chunks: the fetch phase of a request
//! whose inputs exceed the route's `max_batch_inputs`.
//!
//! Chunks go out concurrently (at most `max_chunk_concurrency`), each is
//! checked on its own like any embedding response, and the answers are
//! stitched (`batch`). The first failure in input order fails the whole
//! request with its own error; the other chunks are cancelled, and nothing
//! partial is ever returned. What the chunks' checks found is finished in
//! the same place as any response's (`finish`).

use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::{response, HeaderMap, HeaderValue, Method, Response, StatusCode};
use tokio::task::{self, AbortHandle, JoinSet};

use super::body::Payload;
use super::finish::{finish, reject, Verbatim};
use super::inspected::{undecodable, Inspect};
use super::respond::{announce, respond};
use super::Shared;
use crate::capture::{Captures, ChunkAnswer};
use crate::context::RequestContext;
use crate::error::ProxyError;
use crate::forward::{self, Decoded, Fetched, Reading, Relay, Traced, UpstreamBody};
use crate::route::Route;
use crate::telemetry;
use crate::trace::RequestSpan;
use probity_judge::batch::Part;
use probity_judge::contract::SchemaCache;
use probity_judge::inspect::{self, Contracts, Endpoint, Exchange, Findings, Verdict};
use probity_judge::violation::Violation;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// How one chunk ended, when not with a sound answer.
enum ChunkFailure {
    /// A transport fault.
    Proxy(ProxyError),
    /// The chunk's answer broke a payload invariant; kept for the capture.
    Rejected(Violation, response::Parts, Bytes),
    /// The provider's own error answer, passed on as it came.
    Upstream(response::Parts, Bytes),
    /// The provider's own error answer, as a stream.
    UpstreamStream(response::Parts, Relay),
    /// probity's own fault: the chunk's task panicked.
    Internal(String),
}

/// The wall time during which at least one chunk is at the upstream (sent,
/// its answer not yet read whole): a batch's wait on the upstream, which
/// chunks sent side by side share.
#[derive(Default)]
struct Outstanding(Mutex<Out>);

#[derive(Default)]
struct Out {
    chunks: usize,
    since: Option<Instant>,
    total: Duration,
}

impl Outstanding {
    /// A chunk goes out; it is back when the guard is dropped (its answer
    /// read, or its task cancelled).
    fn enter(self: &Arc<Self>) -> AtUpstream {
        if let Ok(mut out) = self.0.lock() {
            if out.chunks == 0 {
                out.since = Some(Instant::now());
            }
            out.chunks += 1;
        }
        AtUpstream(self.clone())
    }

    fn total(&self) -> Duration {
        self.0.lock().map_or(Duration::ZERO, |out| out.total)
    }
}

/// One chunk at the upstream.
struct AtUpstream(Arc<Outstanding>);

impl Drop for AtUpstream {
    fn drop(&mut self) {
        if let Ok(mut out) = self.0 .0.lock() {
            out.chunks = out.chunks.saturating_sub(1);
            if out.chunks == 0 {
                if let Some(since) = out.since.take() {
                    out.total += since.elapsed();
                }
            }
        }
    }
}

/// One chunk's checked answer.
struct ChunkReply {
    status: StatusCode,
    part: Part,
    /// The labels of the malformed figures its check found.
    malformed: Vec<&'static str>,
    /// The relations its figures broke.
    contradicted: Vec<&'static str>,
    uninspected: Option<&'static str>,
}

pub(super) async fn send(
    (shared, route): (&Shared, &Arc<Route>),
    inspect: &Inspect<'_>,
    bodies: Vec<Bytes>,
    ctx: &mut RequestContext,
) -> Result<Response<Payload>, ProxyError> {
    let endpoint = inspect.endpoint;
    telemetry::chunked(&route.name);
    let mut requests = Vec::with_capacity(bodies.len());
    for body in bodies {
        requests.push((
            inspect.upstream_request(route, body.clone().into(), &ctx.request_id)?,
            body,
        ));
    }
    let outstanding = Arc::new(Outstanding::default());
    let gathered = gather(route, endpoint, requests, (ctx.span.clone(), &outstanding)).await;
    ctx.waited.upstream += outstanding.total();
    let captures = &*shared.captures;
    let answers = match gathered {
        Ok(answers) => answers,
        Err(failure) => return failed(captures, failure, ctx),
    };
    stitched(captures, endpoint, answers, ctx)
}

/// Sends the chunks, at most `max_chunk_concurrency` in flight, started in
/// input order and refilled as soon as any finishes. Once a chunk fails,
/// nothing more is started and the chunks after it are cancelled; the ones
/// before it still finish, since one of them may be the first failure in
/// input order. The JoinSet aborts whatever is left when dropped (the
/// client went away, or the request is decided).
async fn gather(
    route: &Arc<Route>,
    endpoint: &'static Endpoint,
    requests: Vec<(http::Request<UpstreamBody>, Bytes)>,
    (span, outstanding): (Option<Arc<RequestSpan>>, &Arc<Outstanding>),
) -> Result<Vec<ChunkReply>, ChunkFailure> {
    let limit = route.max_chunk_concurrency.max(1);
    let total = requests.len();
    let mut pending = requests.into_iter().enumerate();
    let mut running: JoinSet<Result<ChunkReply, ChunkFailure>> = JoinSet::new();
    let mut handles: Vec<Option<AbortHandle>> = (0..total).map(|_| None).collect();
    // Which chunk each task carries, so that a task that ends without its
    // output (a panic) is still placed in input order.
    let mut index_of: HashMap<task::Id, usize> = HashMap::with_capacity(total);
    let mut answers: Vec<Option<ChunkReply>> = (0..total).map(|_| None).collect();
    let mut first_failure: Option<(usize, ChunkFailure)> = None;
    loop {
        while first_failure.is_none() && running.len() < limit {
            let Some((index, (request, body))) = pending.next() else {
                break;
            };
            telemetry::chunk_sent(&route.name);
            let route = route.clone();
            let (span, outstanding) = (span.clone(), outstanding.clone());
            let task = async move {
                let traced = span.as_deref().map(|span| Traced {
                    span,
                    chunk: Some(index),
                });
                fetch(&route, endpoint, (request, body), traced, &outstanding).await
            };
            let handle = running.spawn(task);
            index_of.insert(handle.id(), index);
            if let Some(slot) = handles.get_mut(index) {
                *slot = Some(handle);
            }
        }
        let Some(joined) = running.join_next_with_id().await else {
            break;
        };
        let (index, outcome) = match joined {
            Ok((id, outcome)) => (index_of.get(&id).copied(), outcome),
            // A chunk cancelled because an earlier one failed: that failure
            // is the answer, never the cancellation.
            Err(err) if err.is_cancelled() => continue,
            // A panic in the chunk's task: probity's own fault, placed at
            // that chunk, so an earlier chunk's own failure still wins.
            Err(err) => (index_of.get(&err.id()).copied(), Err(panicked(&err))),
        };
        // Every task spawned is in the map; were one not, it could only be
        // probity's fault, so it ranks first rather than vanish.
        let index = index.unwrap_or(0);
        match outcome {
            Ok(answer) => {
                if let Some(slot) = answers.get_mut(index) {
                    *slot = Some(answer);
                }
            }
            Err(failure) => {
                if first_failure
                    .as_ref()
                    .is_none_or(|(first, _)| index < *first)
                {
                    for handle in handles.iter().skip(index + 1).flatten() {
                        handle.abort();
                    }
                    first_failure = Some((index, failure));
                }
            }
        }
    }
    match first_failure {
        Some((_, failure)) => Err(failure),
        None => Ok(answers.into_iter().flatten().collect()),
    }
}

/// A chunk's task that ended without its output (it panicked).
fn panicked(err: &task::JoinError) -> ChunkFailure {
    ChunkFailure::Internal(format!("a chunk's task failed: {err}"))
}

/// The request fails with the first chunk's failure, answered like an
/// unchunked call's.
fn failed(
    captures: &Captures,
    failure: ChunkFailure,
    ctx: &mut RequestContext,
) -> Result<Response<Payload>, ProxyError> {
    match failure {
        ChunkFailure::Proxy(err) => Err(err),
        ChunkFailure::Internal(what) => {
            telemetry::internal_error(ctx.route_label(), &ctx.request_id, &what);
            Err(ProxyError::Internal { what })
        }
        ChunkFailure::Rejected(violation, parts, body) => {
            let verbatim = Verbatim {
                status: parts.status,
                headers: parts.headers,
                body_bytes: body.len(),
                body,
                chunks: Vec::new(),
            };
            Err(reject(ctx, captures, violation, verbatim))
        }
        ChunkFailure::Upstream(parts, body) => {
            ctx.upstream_status = Some(parts.status);
            Ok(respond(parts, &ctx.request_id, Payload::Whole(Some(body))))
        }
        ChunkFailure::UpstreamStream(parts, relay) => {
            ctx.upstream_status = Some(parts.status);
            Ok(respond(parts, &ctx.request_id, Payload::Stream(relay)))
        }
    }
}

/// Stitches the chunks' answers and finishes the result like any response.
fn stitched(
    captures: &Captures,
    endpoint: &'static Endpoint,
    answers: Vec<ChunkReply>,
    ctx: &mut RequestContext,
) -> Result<Response<Payload>, ProxyError> {
    let parts: Vec<&Part> = answers.iter().map(|a| &a.part).collect();
    let status = answers.first().map_or(StatusCode::OK, |a| a.status);
    // Every chunk's verbatim answer, in input order, is the capture: one
    // body each.
    let chunks: Vec<ChunkAnswer> = answers
        .iter()
        .map(|a| ChunkAnswer {
            status: a.status,
            headers: a.part.headers.clone(),
            body: a.part.body.clone(),
        })
        .collect();
    let verbatim = Verbatim {
        status,
        headers: json_headers(),
        body_bytes: chunks.iter().map(|c| c.body.len()).sum(),
        body: Bytes::new(),
        chunks,
    };
    let convention = ctx.route.as_ref().map(|r| r.convention).unwrap_or_default();
    let stitched = match endpoint.stitch(&parts, convention) {
        Ok(stitched) => stitched,
        Err(violation) => return Err(reject(ctx, captures, violation, verbatim)),
    };
    // Tokens are the stitched sums (a sum only of well-formed figures);
    // every malformed figure a chunk had is counted.
    let findings = Findings {
        tokens: inspect::tokens(endpoint, &stitched.body, &stitched.headers),
        malformed: answers
            .iter()
            .flat_map(|a| a.malformed.iter().copied())
            .collect(),
        contradicted: answers
            .iter()
            .flat_map(|a| a.contradicted.iter().copied())
            .collect(),
        pointers: stitched.nulled,
        uninspected: answers.iter().find_map(|a| a.uninspected),
        stitched: true,
        ..Findings::default()
    };
    ctx.upstream_status = Some(status);
    finish(ctx, captures, &findings, verbatim);

    let mut upstream = Response::new(());
    *upstream.status_mut() = status;
    *upstream.headers_mut() = stitched.headers;
    let (mut upstream, ()) = upstream.into_parts();
    upstream
        .headers
        .insert(CONTENT_LENGTH, stitched.body.len().into());
    announce(&mut upstream.headers, &findings, ctx);
    Ok(respond(
        upstream,
        &ctx.request_id,
        Payload::Whole(Some(stitched.body)),
    ))
}

fn json_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers
}

/// Sends one chunk and checks its answer on its own. A chunk is an
/// embedding request, which asks for a document: its answer is read whole
/// and judged as one, whatever its media type.
async fn fetch(
    route: &Route,
    endpoint: &'static Endpoint,
    (request, body): (http::Request<UpstreamBody>, Bytes),
    traced: Option<Traced<'_>>,
    outstanding: &Arc<Outstanding>,
) -> Result<ChunkReply, ChunkFailure> {
    let at_upstream = outstanding.enter();
    // The batch's wait is the time any chunk is out, not the sum of each
    // chunk's: `outstanding` counts it.
    let mut waited = Duration::ZERO;
    let fetched = forward::fetch(
        &route.upstream,
        request,
        Reading::Document,
        traced,
        &mut waited,
    )
    .await;
    drop(at_upstream);
    let (parts, bytes, scanner, decoded) = match fetched {
        Err(err) => return Err(ChunkFailure::Proxy(err.into())),
        Ok(Fetched::Whole(parts, bytes, scanner, decoded)) => (parts, bytes, scanner, decoded),
        // Only a provider's error answer is relayed live.
        Ok(Fetched::Stream(parts, relay)) => {
            return Err(ChunkFailure::UpstreamStream(parts, relay))
        }
    };
    if !parts.status.is_success() {
        return Err(ChunkFailure::Upstream(parts, bytes));
    }
    // A chunk's answer is judged decoded; the stitched body is new, so
    // its compressed bytes are never sent.
    if let Decoded::Failed(cause) = &decoded {
        return Err(ChunkFailure::Rejected(undecodable(cause), parts, bytes));
    }
    let cache = SchemaCache::new(1);
    let contracts = Contracts {
        config: None,
        cache: &cache,
        // A chunk whose figures contradict each other reports them as
        // not reported, and the stitched sum is then not reported either.
        convention: route.convention,
    };
    let exchange = Exchange {
        method: &Method::POST,
        request_body: &body,
        status: parts.status,
        response_headers: &parts.headers,
        response_body: &bytes,
    };
    let (verdict, scan) = inspect::inspect_keeping(endpoint, &exchange, &contracts, scanner);
    match verdict {
        Verdict::Reject(violation) => Err(ChunkFailure::Rejected(violation, parts, bytes)),
        verdict => {
            let (malformed, contradicted, uninspected) = match verdict {
                Verdict::Sound(sound) => {
                    let findings = sound.findings;
                    (
                        findings.malformed,
                        findings.contradicted,
                        findings.uninspected,
                    )
                }
                _ => (Vec::new(), Vec::new(), None),
            };
            Ok(ChunkReply {
                status: parts.status,
                part: Part {
                    headers: parts.headers,
                    body: bytes,
                    scan,
                },
                malformed,
                contradicted,
                uninspected,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_out_side_by_side_are_counted_once() {
        let wait = |ms| std::thread::sleep(Duration::from_millis(ms));
        let outstanding = Arc::new(Outstanding::default());
        let first = outstanding.enter();
        wait(100);
        let second = outstanding.enter();
        wait(100);
        drop(first);
        wait(50);
        drop(second);
        // Nothing out: this time is nobody's.
        wait(70);
        let third = outstanding.enter();
        wait(30);
        drop(third);
        // 280 ms with a chunk out; the chunks' own times add up to 380.
        let total = outstanding.total();
        assert!(total >= Duration::from_millis(280), "{total:?}");
        assert!(total < Duration::from_millis(370), "{total:?}");
    }
}
