//! The very same judgement, offline: a saved response (a JSON document, or
//! an SSE or NDJSON stream) judged as a route would judge it, without a
//! server or an upstream. `probity inspect` prints what the client would
//! receive and the verdict, so an app's test suite can check its recorded
//! fixtures and a user can check a capture or a provider's example.

use std::collections::VecDeque;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};

use crate::error::{Answering, ProxyError};
use crate::route::{Route, RouteTable};
use probity_judge::contract::SchemaCache;
use probity_judge::inspect::{self, Asked, Contracts, Endpoint, Exchange, Findings, Verdict};
use probity_judge::outcome::Outcome;
use probity_judge::violation::Invariant;

/// What judging a saved response found.
#[derive(Debug, serde::Serialize)]
pub struct Report {
    /// The proxy's outcome ([`Outcome`]: `rejected`, `output_invalid`,
    /// `normalized`, `passed`…), or `unchecked` (an endpoint the route's
    /// dialect does not inspect).
    pub outcome: &'static str,
    /// What became `null` (the full list, unbounded).
    pub pointers: Vec<String>,
    /// The relations between figures that broke (their figures are among
    /// `pointers`), by name from the dialect's table.
    pub contradicted: Vec<&'static str>,
    /// The payload invariant broken, for a rejection.
    pub invariant: Option<&'static str>,
    /// The output contract's reasons, for an invalid answer.
    pub output_reasons: Vec<probity_judge::contract::Reason>,
    /// What the client would receive: the body (a rejection's error body,
    /// or a stream ending with its error event).
    #[serde(skip)]
    pub body: Bytes,
}

/// Why a saved response cannot be judged on this route.
#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    /// No route of that name.
    #[error("no route is named {0}: `probity routes` lists them")]
    UnknownRoute(String),
    /// The route's dialect does not inspect that path.
    #[error("route {route} does not inspect {path} (its dialect is {dialect})")]
    NotInspected {
        /// The route's name.
        route: String,
        /// The path sent upstream.
        path: String,
        /// The route's dialect.
        dialect: &'static str,
    },
}

/// Judges `response`, an answer to `request` on the route named `route` at
/// `path` (the path after the route prefix, e.g. `/v1/embeddings`, with
/// its query if it has one, as the app called it: the query decides where
/// the proxy reads it, `?stream=true` on a stored response).
/// `document`: the response is one JSON document, as the proxy knows from
/// its media type: a stream asked but answered with a document is judged
/// as that document, as the proxy does.
pub fn judge(
    routes: &RouteTable,
    route: &str,
    path: &str,
    request: &[u8],
    response: &[u8],
    document: bool,
) -> Result<Report, OfflineError> {
    let route = routes
        .named(route)
        .ok_or_else(|| OfflineError::UnknownRoute(route.to_string()))?;
    let (path, query) = match path.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (path, None),
    };
    let upstream_path = route.upstream.path(path);
    // A POST's endpoint, else the read a GET of that path is (a stored
    // response), as the proxy chooses by the method it was sent with.
    let endpoint = route
        .endpoint(&upstream_path)
        .or_else(|| route.dialect.read(&upstream_path, query))
        .ok_or_else(|| OfflineError::NotInspected {
            route: route.name.to_string(),
            path: match query {
                Some(query) => format!("{upstream_path}?{query}"),
                None => upstream_path.clone(),
            },
            dialect: route.dialect.name(),
        })?;
    let cache = SchemaCache::new(16);
    let contracts = Contracts {
        config: route.contract.as_ref(),
        cache: &cache,
        convention: route.convention,
    };
    let (request, response) = (
        Bytes::copy_from_slice(request),
        Bytes::copy_from_slice(response),
    );
    let judged = match endpoint.asked(&request) {
        Asked::Stream if !document => {
            streamed(route, endpoint, &request, response.clone(), &contracts)
        }
        _ => None,
    };
    Ok(judged.unwrap_or_else(|| whole(route, endpoint, &request, response, &contracts)))
}

/// Where an error is worded: as on the route, under the request id
/// `offline`.
fn answering<'a>(route: &'a Route, id: &'a HeaderValue, mid_stream: bool) -> Answering<'a> {
    Answering {
        route: Some(&route.name),
        request_id: id,
        envelope: route.dialect.error_envelope(),
        retry_invalid: route.retry_invalid,
        mid_stream,
    }
}

/// A document, judged as the proxy judges a whole answer.
fn whole(
    route: &Route,
    endpoint: &Endpoint,
    request: &Bytes,
    response: Bytes,
    contracts: &Contracts<'_>,
) -> Report {
    let headers = HeaderMap::new();
    let exchange = Exchange::answered(request, &headers, &response);
    match inspect::inspect(endpoint, &exchange, contracts) {
        Verdict::Unchecked => Report {
            outcome: "unchecked",
            pointers: Vec::new(),
            contradicted: Vec::new(),
            invariant: None,
            output_reasons: Vec::new(),
            body: response,
        },
        Verdict::Reject(violation) => {
            let invariant = violation.invariant;
            let id = HeaderValue::from_static("offline");
            let at = answering(route, &id, false);
            let body = ProxyError::InvalidResponse(violation)
                .respond(&at)
                .into_body();
            Report {
                outcome: Outcome::Rejected.as_str(),
                pointers: Vec::new(),
                contradicted: Vec::new(),
                invariant: Some(invariant.as_str()),
                output_reasons: Vec::new(),
                body,
            }
        }
        Verdict::Sound(sound) => {
            let findings = sound.findings;
            let reasons = findings.reasons().to_vec();
            Report {
                outcome: findings.outcome().as_str(),
                pointers: findings.pointers,
                contradicted: findings.contradicted,
                invariant: None,
                output_reasons: reasons,
                body: sound.body.unwrap_or(response),
            }
        }
    }
}

/// A stream, judged event by event by the proxy's own stream judge, fed
/// the saved body at once; `None` when its request cannot be read (then it
/// is judged as a document).
fn streamed(
    route: &Route,
    endpoint: &Endpoint,
    request: &Bytes,
    response: Bytes,
    contracts: &Contracts<'_>,
) -> Option<Report> {
    let mut judge = inspect::stream_judge(endpoint, request, contracts).ok()?;
    let mut sent = VecDeque::new();
    let judged = judge
        .feed(&response, &mut sent)
        .and_then(|()| judge.end(&mut sent));
    let mut out = Vec::with_capacity(response.len());
    for bytes in &sent {
        out.extend_from_slice(bytes);
    }
    if let Err(violation) = judged {
        let id = HeaderValue::from_static("offline");
        let at = answering(route, &id, true);
        let error = ProxyError::InvalidResponse(violation).error_object(&at);
        out.extend_from_slice(&judge.end_with(&error));
    }
    let findings: &Findings = judge.findings();
    Some(Report {
        outcome: findings.outcome().as_str(),
        pointers: findings.pointers.clone(),
        contradicted: findings.contradicted.clone(),
        invariant: findings.rejected.map(Invariant::as_str),
        output_reasons: findings.reasons().to_vec(),
        body: Bytes::from(out),
    })
}
