//! A checked stream: the relay of an upstream stream whose events a dialect
//! judges as they pass (`inspect::stream`). Each complete event goes on as
//! soon as it is complete; only an incomplete one is held, until its end
//! arrives, and at the upstream's end whatever is held is judged too.
//!
//! - A sound event passes as the same bytes (sliced, not copied).
//! - An event with a malformed figure is rewritten alone: only the figure's
//!   bytes change, announced by an SSE comment line `: probity-normalized
//!   <pointers>` (NDJSON has no comments: the capture store says it).
//! - A broken stream, or an upstream fault, ends the stream with an error
//!   event in the stream's own format; the status line is long gone.
//!
//! What the stream's checks found is finished once, at its end
//! (`finish`), like any response's. The verbatim upstream bytes are
//! retained (copied, up to `capture.max_bytes`) so that a rewritten or cut
//! stream can be captured whole.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, StatusCode};
use http_body::{Body, Frame};

use super::catch::injected_panic;
use super::finish::{finish, Findings, Scope, Verbatim};
use crate::capture::Captures;
use crate::config::CapturePolicy;
use crate::contract::Contract;
use crate::error::ProxyError;
use crate::figures;
use crate::forward::ForwardError;
use crate::inspect::stream::{self, EventCheck, Framing};
use crate::inspect::{Identity, StreamJudge};
use crate::telemetry;

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
    pub(crate) envelope: crate::inspect::Envelope,
    pub(crate) retry_invalid: bool,
    /// The request's span, which the stream's findings complete.
    pub(crate) span: Option<Arc<crate::trace::RequestSpan>>,
}

/// Where a checked stream's bytes come from: the upstream's relay, or
/// (offline) a saved body.
type Source = Pin<Box<dyn Body<Data = Bytes, Error = ForwardError> + Send>>;

pub(crate) struct CheckedStream {
    relay: Source,
    framing: Framing,
    /// Whether SSE comment lines may be added.
    comments: bool,
    check: Box<dyn EventCheck>,
    /// The output contract whose verdict ends the stream, and whether it
    /// was given.
    contract: Option<Contract>,
    verdict_given: bool,
    context: StreamContext,
    /// An incomplete event, waiting for the rest of its bytes.
    pending: BytesMut,
    /// What is ready to go to the client.
    out: VecDeque<Bytes>,
    /// No more upstream bytes will be read.
    finished: bool,
    concluded: bool,
    captured: bool,
    /// A copy, not references: a received chunk is a slice of hyper's read
    /// buffer, and holding it would pin the whole buffer for the stream's life.
    verbatim: BytesMut,
    upstream_bytes: usize,
    /// What the checks found so far. Token counts hold the last
    /// well-formed value of each kind (usage is cumulative in streams:
    /// taken last, never summed).
    findings: Findings,
}

impl CheckedStream {
    pub(crate) fn new(
        relay: impl Body<Data = Bytes, Error = ForwardError> + Send + 'static,
        judge: StreamJudge,
        context: StreamContext,
    ) -> Self {
        Self {
            relay: Box::pin(relay),
            framing: judge.framing,
            comments: judge.comments,
            check: judge.check,
            contract: judge.contract,
            verdict_given: false,
            context,
            pending: BytesMut::new(),
            out: VecDeque::new(),
            finished: false,
            concluded: false,
            captured: false,
            verbatim: BytesMut::new(),
            upstream_bytes: 0,
            findings: Findings::default(),
        }
    }

    /// The fault kind or invariant that cut the stream, if one did.
    pub(crate) fn cut(&self) -> Option<&'static str> {
        self.findings.cut.or(self.findings.rejected)
    }

    /// What the checks found so far.
    pub(crate) fn findings(&self) -> &Findings {
        &self.findings
    }

    /// Whether the verbatim upstream stream was captured (known once the
    /// stream has concluded).
    pub(crate) fn captured(&self) -> bool {
        self.captured
    }

    fn retain(&mut self, chunk: &Bytes) {
        self.upstream_bytes += chunk.len();
        if self.verbatim.len() + chunk.len() <= self.context.retain_limit {
            self.verbatim.extend_from_slice(chunk);
        }
    }

    /// Splits what has arrived into events and judges each complete one.
    fn feed(&mut self, chunk: Bytes) {
        let buffer = if self.pending.is_empty() {
            chunk
        } else {
            self.pending.extend_from_slice(&chunk);
            self.pending.split().freeze()
        };
        if let Some(rest) = self.judge_events(&buffer, false) {
            self.pending
                .extend_from_slice(buffer.get(rest..).unwrap_or_default());
        }
    }

    /// Judges each complete event of `buffer` (at the end of the stream,
    /// whatever it holds: a last `\r` ends its line, an unterminated rest
    /// is a final event); sound events go out as one slice. Where the
    /// incomplete rest starts, or `None` once the stream has ended.
    fn judge_events(&mut self, buffer: &Bytes, at_end: bool) -> Option<usize> {
        let (mut at, mut passed) = (0, 0);
        while let Some(len) = stream::next_event(self.framing, buffer.get(at..)?, at_end) {
            if !self.judge(buffer, at, at + len, &mut passed) {
                return None;
            }
            at += len;
        }
        if at_end && at < buffer.len() {
            if !self.judge(buffer, at, buffer.len(), &mut passed) {
                return None;
            }
            at = buffer.len();
        }
        if at > passed {
            self.out.push_back(buffer.slice(passed..at));
        }
        Some(at)
    }

    /// Judges the event `buffer[start..end]`; sound events accumulate in
    /// `buffer[passed..]` to go out as one slice. False when the stream ends.
    fn judge(&mut self, buffer: &Bytes, start: usize, end: usize, passed: &mut usize) -> bool {
        injected_panic("stream", &self.context.request_id);
        let event = stream::parse_event(self.framing, buffer.get(start..end).unwrap_or_default());
        if self.check.ends(&event) && self.contract.is_some() && !self.verdict_given {
            // The answer is complete: the verdict goes before the last event.
            if start > *passed {
                self.out.push_back(buffer.slice(*passed..start));
            }
            *passed = start;
            self.check.closing(&event);
            self.give_verdict();
        }
        match self.check.event(&event) {
            Ok(None) => {
                self.identify(&event);
                true
            }
            Ok(Some(judgement)) if judgement.is_clean() => {
                self.identify(&event);
                self.note_tokens(&judgement.tokens);
                true
            }
            Ok(Some(judgement)) => {
                if start > *passed {
                    self.out.push_back(buffer.slice(*passed..start));
                }
                let note = format!(
                    "probity-normalized {}",
                    figures::normalized_list(&judgement.pointers)
                );
                let note = self.comments.then_some(note.as_str());
                let rewritten = stream::rewrite(self.framing, event.raw, &judgement.nulls, note);
                // The span reads the event as delivered: a nulled id stays
                // out of it, a sound model beside it does not.
                if self.context.span.is_some() {
                    self.identify(&stream::parse_event(self.framing, &rewritten));
                }
                self.out.push_back(Bytes::from(rewritten));
                self.note_tokens(&judgement.tokens);
                self.findings.malformed.extend(judgement.malformed);
                self.findings.pointers.extend(judgement.pointers);
                *passed = end;
                true
            }
            Err(violation) => {
                if start > *passed {
                    self.out.push_back(buffer.slice(*passed..start));
                }
                *passed = end;
                self.findings.rejected = Some(violation.invariant);
                self.end_with(&ProxyError::InvalidResponse(violation));
                false
            }
        }
    }

    /// For the request's span: the model and response id of the first
    /// event that carries them, read from the event as it was delivered (a
    /// nulled id is `null` there and never reaches the span).
    fn identify(&mut self, event: &stream::Event<'_>) {
        let found = &self.findings.identity;
        if self.context.span.is_none() || (found.model.is_some() && found.id.is_some()) {
            return;
        }
        if let Some(data) = &event.data {
            let seen = Identity::of_event(data);
            let identity = &mut self.findings.identity;
            identity.model = identity.model.take().or(seen.model);
            identity.id = identity.id.take().or(seen.id);
        }
    }

    fn note_tokens(&mut self, tokens: &[(&'static str, u64)]) {
        let kept = &mut self.findings.tokens;
        for (kind, count) in tokens {
            match kept.iter_mut().find(|(k, _)| k == kind) {
                Some(slot) => slot.1 = *count,
                None => kept.push((kind, *count)),
            }
        }
    }

    /// Ends the stream with an error event in its own format.
    fn end_with(&mut self, error: &ProxyError) {
        let at = crate::error::Answering {
            route: Some(&self.context.route),
            request_id: &self.context.request_id,
            envelope: self.context.envelope,
            retry_invalid: self.context.retry_invalid,
            mid_stream: true,
        };
        let object = error.error_object(&at);
        self.out
            .push_back(Bytes::from(self.check.error_event(&object)));
        self.finished = true;
        self.pending.clear();
    }

    fn fault(&mut self, fault: ForwardError) {
        let route = &*self.context.route;
        telemetry::upstream_fault(route, &self.context.request_id, &fault, true);
        self.findings.cut = Some(fault.kind());
        self.end_with(&ProxyError::Forward(fault));
    }

    /// probity's own fault while judging (a panic, caught by the body):
    /// the stream ends with its error event, counted as internal.
    pub(crate) fn internal_error(&mut self, what: String) {
        telemetry::internal_error(&self.context.route, &self.context.request_id, &what);
        self.out.clear();
        self.end_with(&ProxyError::Internal { what });
    }

    /// The output contract's verdict on the answer gathered so far; for SSE
    /// announced in a comment line (NDJSON has none).
    fn give_verdict(&mut self) {
        self.verdict_given = true;
        let Some(contract) = &self.contract else {
            return;
        };
        let calls = self.check.calls().map(|c| c.calls()).unwrap_or_default();
        let Some(verdict) = contract.judge_streamed(self.check.answer(), &calls) else {
            return;
        };
        let line = if verdict.valid() {
            ": probity-output valid\n\n".to_string()
        } else {
            format!(
                ": probity-output invalid reason={}\n\n",
                verdict.reasons.join(",")
            )
        };
        self.findings.output = Some((contract.task.clone(), verdict));
        if self.comments {
            self.out.push_back(Bytes::from(line));
        }
    }

    /// At the upstream's end, whatever the splitter still holds is judged:
    /// the events a last `\r` completes (CR-only line endings), then any
    /// unterminated rest as a final event. Nothing leaves unjudged.
    fn flush(&mut self) {
        self.finished = true;
        let tail = self.pending.split().freeze();
        if self.judge_events(&tail, true).is_none() {
            return;
        }
        // A stream that ended without its terminal event still gets a verdict.
        if self.contract.is_some() && !self.verdict_given {
            self.give_verdict();
        }
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
        self.captured = finish(&scope, &self.findings, verbatim);
    }
}

impl Body for CheckedStream {
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
                Poll::Ready(None) => this.flush(),
                Poll::Ready(Some(Err(fault))) => this.fault(fault),
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(chunk) = frame.into_data() {
                        this.retain(&chunk);
                        this.feed(chunk);
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.finished && self.out.is_empty()
    }
}

impl Drop for CheckedStream {
    /// A client that leaves mid-stream still gets its tokens counted and a
    /// rewritten stream captured.
    fn drop(&mut self) {
        self.conclude();
    }
}
