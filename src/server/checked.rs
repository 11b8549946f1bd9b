//! A checked stream: the relay of an upstream stream whose events a dialect
//! judges as they pass (`inspect::stream`). Each complete event goes on as
//! soon as it is complete; only an incomplete one is held, until its end
//! arrives.
//!
//! - A sound event passes as the same bytes (sliced, not copied).
//! - An event with a malformed figure is rewritten alone, announced by an
//!   SSE comment line `: probity-normalized <pointers>` (NDJSON has no
//!   comments: the capture store says it).
//! - A broken stream, or an upstream fault, ends the stream with an error
//!   event in the stream's own format; the status line is long gone.
//!
//! The verbatim upstream bytes are retained (copied, up to
//! `capture.max_bytes`) so that a rewritten or cut stream can be captured
//! whole.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, StatusCode};
use http_body::{Body, Frame};

use crate::capture::{Capture, CaptureStore, Outcome};
use crate::contract::Contract;
use crate::error::ProxyError;
use crate::figures;
use crate::forward::{ForwardError, Relay};
use crate::inspect::stream::{self, EventCheck, Framing};
use crate::inspect::StreamJudge;
use crate::telemetry;

/// Where a checked stream belongs, for its metrics, errors and capture.
pub struct StreamContext {
    pub route: Arc<str>,
    pub request_id: HeaderValue,
    pub endpoint: String,
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub captures: Arc<CaptureStore>,
    pub retain_limit: usize,
}

pub struct CheckedStream {
    relay: Relay,
    framing: Framing,
    check: Box<dyn EventCheck>,
    /// The output contract whose verdict ends the stream, and whether it
    /// was given.
    contract: Option<Contract>,
    verdict_given: bool,
    output_reasons: Vec<&'static str>,
    context: StreamContext,
    /// An incomplete event, waiting for the rest of its bytes.
    pending: BytesMut,
    /// What is ready to go to the client.
    out: VecDeque<Bytes>,
    /// No more upstream bytes will be read.
    finished: bool,
    concluded: bool,
    /// A copy, not references: a received chunk is a slice of hyper's read
    /// buffer, and holding it would pin the whole buffer for the stream's life.
    verbatim: BytesMut,
    upstream_bytes: usize,
    normalized: Vec<String>,
    /// The last well-formed value of each token kind (usage is cumulative
    /// in streams: taken last, never summed).
    tokens: Vec<(&'static str, u64)>,
    /// Why the stream was cut short: an invariant or an upstream fault kind.
    cut: Option<Outcome>,
}

impl CheckedStream {
    pub fn new(relay: Relay, judge: StreamJudge, context: StreamContext) -> Self {
        Self {
            relay,
            framing: judge.framing,
            check: judge.check,
            contract: judge.contract,
            verdict_given: false,
            output_reasons: Vec::new(),
            context,
            pending: BytesMut::new(),
            out: VecDeque::new(),
            finished: false,
            concluded: false,
            verbatim: BytesMut::new(),
            upstream_bytes: 0,
            normalized: Vec::new(),
            tokens: Vec::new(),
            cut: None,
        }
    }

    /// The fault kind or invariant that cut the stream, if one did.
    pub fn cut(&self) -> Option<&'static str> {
        match self.cut {
            Some(Outcome::Cut(kind)) | Some(Outcome::Rejected(kind)) => Some(kind),
            _ => None,
        }
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
        let mut at = 0;
        let mut passed = 0;
        while let Some(len) = stream::next_event(self.framing, &buffer[at..]) {
            let end = at + len;
            if !self.judge(&buffer, at, end, &mut passed) {
                return;
            }
            at = end;
        }
        if at > passed {
            self.out.push_back(buffer.slice(passed..at));
        }
        self.pending.extend_from_slice(&buffer[at..]);
    }

    /// Judges the event `buffer[start..end]`; sound events accumulate in
    /// `buffer[passed..]` to go out as one slice. False when the stream ends.
    fn judge(&mut self, buffer: &Bytes, start: usize, end: usize, passed: &mut usize) -> bool {
        let event = stream::parse_event(self.framing, &buffer[start..end]);
        if self.check.ends(&event) && self.contract.is_some() && !self.verdict_given {
            // The answer is complete: the verdict goes before the last event.
            if start > *passed {
                self.out.push_back(buffer.slice(*passed..start));
            }
            *passed = start;
            self.give_verdict();
        }
        match self.check.event(&event) {
            Ok(None) => true,
            Ok(Some(judgement)) if judgement.is_clean() => {
                self.note_tokens(&judgement.tokens);
                true
            }
            Ok(Some(judgement)) => {
                if start > *passed {
                    self.out.push_back(buffer.slice(*passed..start));
                }
                let data = event.data.as_deref().unwrap_or_default();
                let clean = figures::splice(data, &judgement.nulls);
                let note = format!("probity-normalized {}", judgement.pointers.join(","));
                let rewritten = stream::write_event(self.framing, event.name, &clean, Some(&note));
                self.out.push_back(Bytes::from(rewritten));
                let route = &*self.context.route;
                telemetry::figures_normalized(
                    route,
                    &self.context.request_id,
                    &judgement.malformed,
                );
                self.note_tokens(&judgement.tokens);
                self.normalized.extend(judgement.pointers);
                *passed = end;
                true
            }
            Err(violation) => {
                if start > *passed {
                    self.out.push_back(buffer.slice(*passed..start));
                }
                *passed = end;
                let route = &*self.context.route;
                telemetry::invalid_response(route, &self.context.request_id, violation.invariant);
                self.cut = Some(Outcome::Rejected(violation.invariant));
                self.end_with(&ProxyError::InvalidResponse(violation));
                false
            }
        }
    }

    fn note_tokens(&mut self, tokens: &[(&'static str, u64)]) {
        for (kind, count) in tokens {
            match self.tokens.iter_mut().find(|(k, _)| k == kind) {
                Some(slot) => slot.1 = *count,
                None => self.tokens.push((kind, *count)),
            }
        }
    }

    /// Ends the stream with an error event in its own format.
    fn end_with(&mut self, error: &ProxyError) {
        let object = error.error_object(Some(&self.context.route), &self.context.request_id);
        self.out
            .push_back(Bytes::from(self.check.error_event(&object)));
        self.finished = true;
        self.pending.clear();
    }

    fn fault(&mut self, fault: ForwardError) {
        let route = &*self.context.route;
        telemetry::upstream_fault(route, &self.context.request_id, &fault, true);
        self.cut = Some(Outcome::Cut(fault.kind()));
        self.end_with(&ProxyError::Forward(fault));
    }

    /// The output contract's verdict on the answer gathered so far: counted,
    /// and for SSE announced in a comment line (NDJSON has none).
    fn give_verdict(&mut self) {
        self.verdict_given = true;
        let (Some(contract), Some(answer)) = (&self.contract, self.check.answer()) else {
            return;
        };
        let verdict = contract.judge_text(&answer.text, answer.truncated, answer.refusal);
        telemetry::output_judged(&contract.task, verdict.valid());
        let line = if verdict.valid() {
            ": probity-output valid\n\n".to_string()
        } else {
            telemetry::output_invalid(&contract.task, &self.context.request_id, &verdict.reasons);
            self.output_reasons = verdict.reasons.clone();
            format!(
                ": probity-output invalid reason={}\n\n",
                verdict.reasons.join(",")
            )
        };
        if self.framing == Framing::Sse {
            self.out.push_back(Bytes::from(line));
        }
    }

    /// At the upstream's end: an unterminated last NDJSON line is still a
    /// line; an unterminated SSE event is passed as it came (clients drop it).
    fn flush(&mut self) {
        self.finished = true;
        if self.pending.is_empty() {
            self.finish_verdict();
            return;
        }
        let tail = self.pending.split().freeze();
        let mut passed = 0;
        if self.framing == Framing::Ndjson && !self.judge(&tail, 0, tail.len(), &mut passed) {
            return;
        }
        if tail.len() > passed {
            self.out.push_back(tail.slice(passed..));
        }
        self.finish_verdict();
    }

    /// A stream that ended without its terminal event still gets a verdict.
    fn finish_verdict(&mut self) {
        if self.contract.is_some() && !self.verdict_given && self.cut.is_none() {
            self.give_verdict();
        }
    }

    /// Once, at the end: the token counts, and the capture of a stream that
    /// was rewritten or cut.
    fn conclude(&mut self) {
        if std::mem::replace(&mut self.concluded, true) {
            return;
        }
        telemetry::tokens(&self.context.route, &self.tokens);
        let outcome = match self.cut.take() {
            Some(outcome) => outcome,
            None if !self.normalized.is_empty() => {
                Outcome::Normalized(std::mem::take(&mut self.normalized))
            }
            None if !self.output_reasons.is_empty() => {
                Outcome::OutputInvalid(self.output_reasons.clone())
            }
            None => return,
        };
        let body = self.verbatim.split();
        self.context.captures.keep(Capture {
            request_id: self
                .context
                .request_id
                .to_str()
                .unwrap_or_default()
                .to_string(),
            time: SystemTime::now(),
            route: self.context.route.clone(),
            endpoint: self.context.endpoint.clone(),
            outcome: outcome.clone(),
            status: self.context.status,
            headers: std::mem::take(&mut self.context.headers),
            body: Some(body.freeze()),
            body_bytes: self.upstream_bytes,
        });
        self.cut = match outcome {
            Outcome::Normalized(_) | Outcome::OutputInvalid(_) | Outcome::Stitched(_) => None,
            other => Some(other),
        };
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
                return Poll::Ready(Some(Ok(Frame::data(bytes))));
            }
            if this.finished {
                this.conclude();
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.relay).poll_frame(cx) {
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
