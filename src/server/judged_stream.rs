//! A checked stream: the relay of an upstream stream whose events a
//! dialect judges as they pass. The judging is `inspect::StreamJudge`'s, a
//! state machine fed bytes; this is its driver on the network: it polls
//! the upstream's relay, feeds the judge each frame and sends on what the
//! judge gives back, turns an upstream fault or a broken stream into the
//! stream's own error event (the status line is long gone), and at the end
//! hands what the judge found to `finish`, like any response's.
//!
//! The verbatim upstream bytes are retained (copied, up to
//! `capture.max_bytes`) so that a rewritten or cut stream can be captured
//! whole.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, StatusCode};
use http_body::{Body, Frame};

use super::catch::injected_panic;
use super::finish::{finish, Verbatim};
use crate::capture::Captures;
use crate::context::RequestContext;
use crate::error::ProxyError;
use crate::forward::ForwardError;
use crate::telemetry;
use probity_judge::inspect::StreamJudge;
use probity_judge::violation::Invariant;
use probity_judge::violation::Violation;

/// Where a checked stream's bytes come from: the upstream's relay.
type UpstreamFrames = Pin<Box<dyn Body<Data = Bytes, Error = ForwardError> + Send>>;

/// A judged stream. It is polled by the response body that owns the
/// request's context, and borrows that context on every poll
/// ([`JudgedStream::poll_judged`]) rather than keep a copy of it.
pub(crate) struct JudgedStream {
    relay: UpstreamFrames,
    judge: StreamJudge,
    /// The upstream answer's status and headers, for the capture.
    status: StatusCode,
    headers: HeaderMap,
    captures: Arc<Captures>,
    /// What is ready to go to the client.
    out: VecDeque<Bytes>,
    /// No more upstream bytes will be read.
    finished: bool,
    concluded: bool,
    /// A copy, not references: a received frame is a slice of hyper's read
    /// buffer, and holding it would pin the whole buffer for the stream's life.
    verbatim: BytesMut,
    upstream_bytes: usize,
}

impl JudgedStream {
    pub(crate) fn new(
        relay: impl Body<Data = Bytes, Error = ForwardError> + Send + 'static,
        judge: StreamJudge,
        (status, headers): (StatusCode, HeaderMap),
        (captures, ctx): (Arc<Captures>, &RequestContext),
    ) -> Self {
        Self {
            relay: Box::pin(relay),
            judge: judge.identifying(ctx.span.is_some()),
            status,
            headers,
            captures,
            out: VecDeque::new(),
            finished: false,
            concluded: false,
            verbatim: BytesMut::new(),
            upstream_bytes: 0,
        }
    }

    /// The fault kind or invariant that cut the stream, if one did.
    pub(crate) fn cut(&self) -> Option<&'static str> {
        let findings = self.judge.findings();
        findings.cut.or(findings.rejected.map(Invariant::as_str))
    }

    fn retain(&mut self, frame: &Bytes) {
        self.upstream_bytes += frame.len();
        if self.verbatim.len() + frame.len() <= self.captures.retain_limit() {
            self.verbatim.extend_from_slice(frame);
        }
    }

    /// A broken stream ends with its error event, after what the judge
    /// let through.
    fn end_if_broken(&mut self, judged: Result<(), Violation>, ctx: &RequestContext) {
        if let Err(violation) = judged {
            self.end_with(&ProxyError::InvalidResponse(violation), ctx);
        }
    }

    /// Ends the stream with an error event in its own format.
    fn end_with(&mut self, error: &ProxyError, ctx: &RequestContext) {
        let object = error.error_object(&ctx.answering(true));
        self.out.push_back(self.judge.end_with(&object));
        self.finished = true;
    }

    fn fault(&mut self, fault: ForwardError, ctx: &RequestContext) {
        telemetry::upstream_fault(ctx.route_label(), &ctx.request_id, &fault, true);
        let kind = fault.kind();
        let object = ProxyError::Forward(fault).error_object(&ctx.answering(true));
        self.out.push_back(self.judge.cut(kind, &object));
        self.finished = true;
    }

    /// probity's own fault while judging (a panic, caught by the body):
    /// the stream ends with its error event, counted as internal.
    pub(crate) fn internal_error(&mut self, what: String, ctx: &RequestContext) {
        telemetry::internal_error(ctx.route_label(), &ctx.request_id, &what);
        self.out.clear();
        self.end_with(&ProxyError::Internal { what }, ctx);
    }

    /// Once, at the end (the last bytes, or the body dropped when the
    /// client left): what the checks found is finished (counted, logged,
    /// and a rewritten, cut or invalid stream captured), so a client that
    /// leaves mid-stream still gets its tokens counted.
    pub(crate) fn conclude(&mut self, ctx: &mut RequestContext) {
        if std::mem::replace(&mut self.concluded, true) {
            return;
        }
        let verbatim = Verbatim {
            status: self.status,
            headers: std::mem::take(&mut self.headers),
            body: self.verbatim.split().freeze(),
            body_bytes: self.upstream_bytes,
            chunks: Vec::new(),
        };
        finish(ctx, &self.captures, self.judge.findings(), verbatim);
    }

    /// The next piece for the client: what the judge let through, or an
    /// error event that ends the stream.
    pub(crate) fn poll_judged(
        &mut self,
        cx: &mut Context<'_>,
        ctx: &mut RequestContext,
    ) -> Poll<Option<Result<Frame<Bytes>, ForwardError>>> {
        loop {
            if let Some(bytes) = self.out.pop_front() {
                if self.finished && self.out.is_empty() {
                    // Concluded before the last bytes go: whoever reads the
                    // end of the stream finds it counted.
                    self.conclude(ctx);
                }
                return Poll::Ready(Some(Ok(Frame::data(bytes))));
            }
            if self.finished {
                self.conclude(ctx);
                return Poll::Ready(None);
            }
            match self.relay.as_mut().poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    self.finished = true;
                    let judged = self.judge.end(&mut self.out);
                    self.end_if_broken(judged, ctx);
                }
                Poll::Ready(Some(Err(fault))) => self.fault(fault, ctx),
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        self.retain(&data);
                        if !data.is_empty() {
                            injected_panic("stream", &ctx.request_id);
                        }
                        let judged = self.judge.feed(&data, &mut self.out);
                        self.end_if_broken(judged, ctx);
                    }
                }
            }
        }
    }

    pub(crate) fn is_end_stream(&self) -> bool {
        self.finished && self.out.is_empty()
    }
}
