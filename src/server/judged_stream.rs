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
use http::{HeaderMap, HeaderValue, StatusCode};
use http_body::{Body, Frame};

use super::catch::injected_panic;
use super::finish::{finish, Scope, Verbatim};
use crate::capture::Captures;
use crate::config::CapturePolicy;
use crate::error::ProxyError;
use crate::forward::ForwardError;
use crate::telemetry;
use probity_judge::inspect::StreamJudge;
use probity_judge::violation::Invariant;
use probity_judge::violation::Violation;

/// Where a checked stream belongs, for its metrics, errors and capture.
pub(crate) struct StreamContext {
    pub(crate) route: Arc<str>,
    pub(crate) client: Option<Arc<str>>,
    pub(crate) request_id: HeaderValue,
    pub(crate) endpoint: String,
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) dialect: &'static str,
    pub(crate) policy: CapturePolicy,
    pub(crate) captures: Arc<Captures>,
    pub(crate) retain_limit: usize,
    /// How a mid-stream error is worded (its envelope is the stream's own
    /// error event).
    pub(crate) envelope: probity_judge::inspect::Envelope,
    pub(crate) retry_invalid: bool,
    /// The request's span, which the stream's findings complete.
    pub(crate) span: Option<Arc<crate::trace::RequestSpan>>,
}

/// Where a checked stream's bytes come from: the upstream's relay (or, for
/// the fuzz targets, pieces of a body).
type UpstreamFrames = Pin<Box<dyn Body<Data = Bytes, Error = ForwardError> + Send>>;

pub(crate) struct JudgedStream {
    relay: UpstreamFrames,
    judge: StreamJudge,
    context: StreamContext,
    /// What is ready to go to the client.
    out: VecDeque<Bytes>,
    /// No more upstream bytes will be read.
    finished: bool,
    concluded: bool,
    captured: bool,
    /// A copy, not references: a received frame is a slice of hyper's read
    /// buffer, and holding it would pin the whole buffer for the stream's life.
    verbatim: BytesMut,
    upstream_bytes: usize,
}

impl JudgedStream {
    pub(crate) fn new(
        relay: impl Body<Data = Bytes, Error = ForwardError> + Send + 'static,
        judge: StreamJudge,
        context: StreamContext,
    ) -> Self {
        Self {
            relay: Box::pin(relay),
            judge: judge.identifying(context.span.is_some()),
            context,
            out: VecDeque::new(),
            finished: false,
            concluded: false,
            captured: false,
            verbatim: BytesMut::new(),
            upstream_bytes: 0,
        }
    }

    /// The fault kind or invariant that cut the stream, if one did.
    pub(crate) fn cut(&self) -> Option<&'static str> {
        let findings = self.judge.findings();
        findings.cut.or(findings.rejected.map(Invariant::as_str))
    }

    /// Whether the verbatim upstream stream was captured (known once the
    /// stream has concluded).
    pub(crate) fn captured(&self) -> bool {
        self.captured
    }

    fn retain(&mut self, frame: &Bytes) {
        self.upstream_bytes += frame.len();
        if self.verbatim.len() + frame.len() <= self.context.retain_limit {
            self.verbatim.extend_from_slice(frame);
        }
    }

    /// A broken stream ends with its error event, after what the judge
    /// let through.
    fn end_if_broken(&mut self, judged: Result<(), Violation>) {
        if let Err(violation) = judged {
            self.end_with(&ProxyError::InvalidResponse(violation));
        }
    }

    /// How an error in this stream is worded.
    fn error_object(&self, error: &ProxyError) -> serde_json::Value {
        let at = crate::error::Answering {
            route: Some(&self.context.route),
            request_id: &self.context.request_id,
            envelope: self.context.envelope,
            retry_invalid: self.context.retry_invalid,
            mid_stream: true,
        };
        error.error_object(&at)
    }

    /// Ends the stream with an error event in its own format.
    fn end_with(&mut self, error: &ProxyError) {
        let object = self.error_object(error);
        self.out.push_back(self.judge.end_with(&object));
        self.finished = true;
    }

    fn fault(&mut self, fault: ForwardError) {
        let route = &*self.context.route;
        telemetry::upstream_fault(route, &self.context.request_id, &fault, true);
        let kind = fault.kind();
        let object = self.error_object(&ProxyError::Forward(fault));
        self.out.push_back(self.judge.cut(kind, &object));
        self.finished = true;
    }

    /// probity's own fault while judging (a panic, caught by the body):
    /// the stream ends with its error event, counted as internal.
    pub(crate) fn internal_error(&mut self, what: String) {
        telemetry::internal_error(&self.context.route, &self.context.request_id, &what);
        self.out.clear();
        self.end_with(&ProxyError::Internal { what });
    }

    /// Once, at the end: what the checks found is finished (counted,
    /// logged, and a rewritten, cut or invalid stream captured).
    pub(crate) fn conclude(&mut self) {
        if std::mem::replace(&mut self.concluded, true) {
            return;
        }
        let scope = Scope {
            route: &self.context.route,
            client: self.context.client.as_deref(),
            request_id: &self.context.request_id,
            endpoint: &self.context.endpoint,
            dialect: self.context.dialect,
            policy: self.context.policy,
            captures: &self.context.captures,
            span: self.context.span.as_deref(),
        };
        let verbatim = Verbatim {
            status: self.context.status,
            headers: std::mem::take(&mut self.context.headers),
            body: self.verbatim.split().freeze(),
            body_bytes: self.upstream_bytes,
            chunks: Vec::new(),
        };
        self.captured = finish(&scope, self.judge.findings(), verbatim);
    }
}

impl Body for JudgedStream {
    type Data = Bytes;
    type Error = ForwardError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ForwardError>>> {
        let this = &mut *self;
        loop {
            if let Some(bytes) = this.out.pop_front() {
                if this.finished && this.out.is_empty() {
                    // Concluded before the last bytes go: whoever reads the
                    // end of the stream finds it counted.
                    this.conclude();
                }
                return Poll::Ready(Some(Ok(Frame::data(bytes))));
            }
            if this.finished {
                this.conclude();
                return Poll::Ready(None);
            }
            match this.relay.as_mut().poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    this.finished = true;
                    let judged = this.judge.end(&mut this.out);
                    this.end_if_broken(judged);
                }
                Poll::Ready(Some(Err(fault))) => this.fault(fault),
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        this.retain(&data);
                        if !data.is_empty() {
                            injected_panic("stream", &this.context.request_id);
                        }
                        let judged = this.judge.feed(&data, &mut this.out);
                        this.end_if_broken(judged);
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.finished && self.out.is_empty()
    }
}

impl Drop for JudgedStream {
    /// A client that leaves mid-stream still gets its tokens counted and a
    /// rewritten stream captured.
    fn drop(&mut self) {
        self.conclude();
    }
}
