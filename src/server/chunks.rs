//! A large embedding batch, sent as chunks: the fetch phase of a request
//! whose inputs exceed the route's `max_batch_inputs`.
//!
//! Chunks go out concurrently (at most `max_chunk_concurrency`), each is
//! checked on its own like any embedding response, and the answers are
//! stitched (`batch`). The first failure in input order fails the whole
//! request with its own error; the other chunks are cancelled, and nothing
//! partial is ever returned.

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::{request, response, HeaderMap, HeaderValue, Method, Response, StatusCode};
use tokio::task::{AbortHandle, JoinSet};

use super::body::Payload;
use super::exchange::{respond, PROBITY_CAPTURE, PROBITY_NORMALIZED};
use super::Shared;
use crate::batch::{self, BatchSpec, Part};
use crate::capture::{Capture, Outcome};
use crate::contract::SchemaCache;
use crate::error::{ProxyError, RequestError};
use crate::forward::{self, Fetched};
use crate::inspect::{self, Contracts, Endpoint, Exchange, Verdict, Violation};
use crate::route::Route;
use crate::telemetry::{self, RequestRecord};

/// How one chunk ended, when not with a sound answer.
enum Failure {
    /// probity's own error: transport, or a broken payload.
    Proxy(ProxyError),
    /// The provider's own error answer, passed on as it came.
    Upstream(response::Parts, Bytes),
}

/// One chunk's answer, with what its capture needs.
struct Answer {
    status: StatusCode,
    part: Part,
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn send(
    shared: &Shared,
    route: &Arc<Route>,
    client: &request::Parts,
    rest: &str,
    path: String,
    endpoint: &'static Endpoint,
    spec: BatchSpec,
    bodies: Vec<Bytes>,
    record: &mut RequestRecord,
) -> Result<Response<Payload>, ProxyError> {
    telemetry::chunked(&route.name, bodies.len());
    let mut requests = Vec::with_capacity(bodies.len());
    for body in &bodies {
        let request =
            forward::upstream_request(route, client, rest, body.clone(), &record.request_id)
                .map_err(|_| RequestError::BadTarget)?;
        requests.push((request, body.clone()));
    }

    // At most `max_chunk_concurrency` in flight, started in input order,
    // refilled as soon as any finishes. Once a chunk fails, nothing more is
    // started and the chunks after it are cancelled; the ones before it
    // still finish, since one of them may be the first failure in input
    // order. The JoinSet aborts whatever is left when dropped (the client
    // went away, or the request is decided).
    let limit = route.max_chunk_concurrency.max(1);
    let total = requests.len();
    let mut pending = requests.into_iter().enumerate();
    let mut running: JoinSet<(usize, Result<Answer, Failure>)> = JoinSet::new();
    let mut handles: Vec<Option<AbortHandle>> = (0..total).map(|_| None).collect();
    let mut answers: Vec<Option<Answer>> = (0..total).map(|_| None).collect();
    let mut first_failure: Option<(usize, Failure)> = None;
    loop {
        while first_failure.is_none() && running.len() < limit {
            let Some((index, (request, body))) = pending.next() else {
                break;
            };
            let (route, path) = (route.clone(), path.clone());
            handles[index] = Some(
                running.spawn(async move { (index, fetch(&route, request, body, &path).await) }),
            );
        }
        let Some(joined) = running.join_next().await else {
            break;
        };
        let (index, outcome) = match joined {
            Ok(joined) => joined,
            // Only a panic gets here (aborts happen after a failure is known).
            Err(_) => (
                total,
                Err(Failure::Proxy(ProxyError::from(Violation {
                    invariant: "chunk_failed",
                    message: "a chunk's task ended without an answer".into(),
                }))),
            ),
        };
        match outcome {
            Ok(answer) => answers[index] = Some(answer),
            Err(failure) => {
                if first_failure
                    .as_ref()
                    .map_or(true, |(first, _)| index < *first)
                {
                    for handle in handles.iter().skip(index + 1).flatten() {
                        handle.abort();
                    }
                    first_failure = Some((index, failure));
                }
            }
        }
    }
    drop(running);
    if let Some((_, failure)) = first_failure {
        return match failure {
            Failure::Proxy(ProxyError::InvalidResponse(violation)) => {
                telemetry::invalid_response(&route.name, &record.request_id, violation.invariant);
                Err(violation.into())
            }
            Failure::Proxy(err) => Err(err),
            Failure::Upstream(parts, body) => {
                record.upstream_status = Some(parts.status);
                Ok(respond(
                    parts,
                    &record.request_id,
                    Payload::Whole(Some(body)),
                ))
            }
        };
    }
    let answers: Vec<Answer> = answers.into_iter().flatten().collect();

    let parts: Vec<Part> = answers
        .iter()
        .map(|a| Part {
            headers: a.part.headers.clone(),
            body: a.part.body.clone(),
        })
        .collect();
    let stitched = match batch::stitch(&parts, &spec, endpoint.figures, endpoint.header_figures) {
        Ok(stitched) => stitched,
        Err(violation) => {
            telemetry::invalid_response(&route.name, &record.request_id, violation.invariant);
            record.captured = keep(
                shared,
                route,
                &path,
                &record.request_id,
                &answers,
                Outcome::Rejected(violation.invariant),
            );
            return Err(violation.into());
        }
    };
    record.upstream_status = Some(answers[0].status);
    record.captured = keep(
        shared,
        route,
        &path,
        &record.request_id,
        &answers,
        Outcome::Stitched(stitched.nulled.clone()),
    );

    let mut upstream = Response::new(());
    *upstream.status_mut() = answers[0].status;
    *upstream.headers_mut() = stitched.headers;
    let (mut upstream, ()) = upstream.into_parts();
    upstream
        .headers
        .insert(CONTENT_LENGTH, stitched.body.len().into());
    if !stitched.nulled.is_empty() {
        if let Ok(list) = HeaderValue::try_from(stitched.nulled.join(",")) {
            upstream.headers.insert(PROBITY_NORMALIZED, list);
        }
    }
    if record.captured {
        upstream
            .headers
            .insert(PROBITY_CAPTURE, record.request_id.clone());
    }
    Ok(respond(
        upstream,
        &record.request_id,
        Payload::Whole(Some(stitched.body)),
    ))
}

/// Sends one chunk and checks its answer on its own.
async fn fetch(
    route: &Route,
    request: http::Request<http_body_util::Full<Bytes>>,
    body: Bytes,
    path: &str,
) -> Result<Answer, Failure> {
    let (parts, bytes) = match forward::fetch(route, request, true).await {
        Err(err) => return Err(Failure::Proxy(err.into())),
        Ok(Fetched::Whole(parts, bytes)) => (parts, bytes),
        Ok(Fetched::Stream(..)) => {
            return Err(Failure::Proxy(ProxyError::from(Violation {
                invariant: "invalid_json",
                message: "an embedding chunk was answered with a stream".into(),
            })))
        }
    };
    if !parts.status.is_success() {
        return Err(Failure::Upstream(parts, bytes));
    }
    let cache = SchemaCache::new(1);
    let contracts = Contracts {
        config: None,
        cache: &cache,
    };
    let exchange = Exchange {
        method: &Method::POST,
        path,
        request_headers: &HeaderMap::new(),
        request_body: &body,
        status: parts.status,
        response_headers: &parts.headers,
        response_body: &bytes,
    };
    match inspect::inspect(route.dialect, &exchange, &contracts) {
        Verdict::Reject(violation) => Err(Failure::Proxy(violation.into())),
        _ => Ok(Answer {
            status: parts.status,
            part: Part {
                headers: parts.headers,
                body: bytes,
            },
        }),
    }
}

/// Captures every chunk's verbatim answer, in order, as one JSON document:
/// `{"chunks": [{"status": 200, "headers": {...}, "body": "..."}]}`.
fn keep(
    shared: &Shared,
    route: &Route,
    path: &str,
    request_id: &HeaderValue,
    answers: &[Answer],
    outcome: Outcome,
) -> bool {
    let chunks: Vec<serde_json::Value> = answers
        .iter()
        .map(|a| {
            let headers: serde_json::Map<String, serde_json::Value> = a
                .part
                .headers
                .iter()
                .filter_map(|(k, v)| {
                    Some((k.to_string(), serde_json::Value::from(v.to_str().ok()?)))
                })
                .collect();
            serde_json::json!({
                "status": a.status.as_u16(),
                "headers": headers,
                "body": String::from_utf8_lossy(&a.part.body),
            })
        })
        .collect();
    let body = Bytes::from(serde_json::json!({ "chunks": chunks }).to_string());
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    shared.captures.keep(Capture {
        request_id: request_id.to_str().unwrap_or_default().to_string(),
        time: SystemTime::now(),
        route: route.name.clone(),
        endpoint: path.to_string(),
        outcome,
        status: answers.first().map_or(StatusCode::OK, |a| a.status),
        headers,
        body_bytes: body.len(),
        body: Some(body),
    });
    shared.captures.enabled()
}
