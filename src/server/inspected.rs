//! An inspected call: the request the route's dialect judges the answer
//! of, its upstream request, and the judge phase of its answer, read whole
//! (`whole`) or judged event by event as it passes (`streamed`, through
//! `judged_stream`). A batch too large for the provider is sent by `chunks`.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_LENGTH};
use http::{request, response, Request, Response};

use super::body::Payload;
use super::finish::{finish, Scope, Verbatim};
use super::judged_stream::{JudgedStream, StreamContext};
use super::respond::{announce, cannot_build, respond};
use super::Shared;
use crate::error::ProxyError;
use crate::forward::{self, Relay, UpstreamBody};
use crate::route::Route;
use crate::telemetry::{self, RequestRecord};
use probity_judge::inspect::{self, Contracts, Endpoint, Exchange, Findings, Verdict};
use probity_judge::json::Scanner;

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

impl<'a> Call<'a> {
    pub(super) fn new(
        shared: &'a Shared,
        route: &'a Arc<Route>,
        client: &'a request::Parts,
        (rest, path): (&'a str, &'a str),
        (endpoint, body): (&'static Endpoint, &'a Bytes),
    ) -> Self {
        Self {
            shared,
            route,
            client,
            rest,
            path,
            body,
            endpoint,
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
    pub(super) fn whole(
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
    pub(super) fn streamed(
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
                if let Some(reason) = judge.uninspected() {
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
                Payload::Checked(Box::new(JudgedStream::new(relay, judge, context)))
            }
        };
        respond(upstream, &record.request_id, payload)
    }
}
