//! The body of every response probity sends, and the observation of its end.
//!
//! The request's log line and its metrics are emitted when the last byte has
//! gone out (or the stream was cut, or the client left), not when the handler
//! returns: for a stream that is minutes later.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::Instant;

use super::catch::catching;
use super::held::HeldShare;
use super::judged_stream::JudgedStream;
use crate::context::RequestContext;
use crate::forward::{ForwardError, Relay};
use crate::telemetry::{self, Ending};

/// Why a body ended early: an upstream fault (counted and logged where it
/// is polled), or a panic probity could not answer within the stream.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    #[error(transparent)]
    Upstream(#[from] ForwardError),
    #[error("probity failed while sending this response: {0}")]
    Internal(String),
}

/// What is sent: a body held whole, a relayed stream, or a stream whose
/// events are checked as they pass.
pub(crate) enum Payload {
    Whole(Option<Bytes>),
    Stream(Relay),
    Checked(Box<JudgedStream>),
}

pub(crate) struct ResponseBody {
    payload: Payload,
    /// The request's context, until its end is logged.
    ctx: Option<RequestContext>,
    bytes: u64,
    /// The bytes the client's answer carries when its head says so
    /// (`Content-Length`; none for a HEAD, a 204, a 304): hyper writes
    /// that many and polls no further, so the body may never see its own
    /// end (an upstream that closes after its answer sends no last frame).
    due: Option<u64>,
    first_byte_seen: bool,
    /// What the body has waited on since it last returned from a poll:
    /// not probity's time (`telemetry::Waited`).
    parked: Option<(Instant, Parked)>,
    /// A whole answer's share of `server.max_held_response_bytes`, given
    /// back when this body is dropped.
    _held: Option<HeldShare>,
}

/// What a response body waits on between two polls.
#[derive(Debug, Clone, Copy)]
enum Parked {
    /// A stream's next bytes from the upstream.
    Upstream,
    /// hyper asking for the next piece, once the client has taken enough.
    Client,
}

/// A whole body goes out in slices of this size, so hyper takes the next
/// only when the client has read enough (it never queues the whole answer).
const SLICE: usize = 64 * 1024;

impl ResponseBody {
    pub(crate) fn new(
        payload: Payload,
        ctx: RequestContext,
        head: &http::response::Parts,
        held: Option<HeldShare>,
    ) -> Self {
        let due = due(&ctx.method, head);
        Self {
            payload,
            ctx: Some(ctx),
            bytes: 0,
            due,
            first_byte_seen: false,
            parked: None,
            _held: held,
        }
    }

    /// The empty body of a `101 Switching Protocols`: the tunnel after it
    /// ends the request (`tunnel`), not this body.
    pub(crate) fn switched() -> Self {
        Self {
            payload: Payload::Whole(None),
            ctx: None,
            bytes: 0,
            due: None,
            first_byte_seen: false,
            parked: None,
            _held: None,
        }
    }

    /// The time since the last poll returned goes to what it was spent
    /// waiting on.
    fn settle(&mut self) {
        let (Some((since, on)), Some(ctx)) = (self.parked.take(), &mut self.ctx) else {
            return;
        };
        let waited = since.elapsed();
        match on {
            Parked::Upstream => ctx.waited.upstream += waited,
            Parked::Client => ctx.waited.client += waited,
        }
    }

    fn finish(&mut self, ending: Ending) {
        self.settle();
        if let Some(mut ctx) = self.ctx.take() {
            if let Payload::Checked(checked) = &mut self.payload {
                checked.conclude(&mut ctx);
            }
            telemetry::request_finished(&ctx, self.bytes, ending);
        }
    }

    /// Polls the payload; a panic inside it is probity's own fault: a
    /// checked stream ends with its error event, anything else is cut.
    fn poll_payload(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let ctx = &mut self.ctx;
        let polled = catching(|| match (&mut self.payload, &mut *ctx) {
            (Payload::Whole(Some(bytes)), _) if bytes.len() > SLICE => {
                Poll::Ready(Some(Ok(Frame::data(bytes.split_to(SLICE)))))
            }
            (Payload::Whole(bytes), _) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            (Payload::Stream(relay), _) => Pin::new(relay).poll_frame(cx),
            (Payload::Checked(checked), Some(ctx)) => checked.poll_judged(cx, ctx),
            // Its end was logged: nothing more goes out.
            (Payload::Checked(_), None) => Poll::Ready(None),
        });
        let what = match polled {
            Ok(polled) => return polled.map(|f| f.map(|r| r.map_err(BodyError::from))),
            Err(what) => what,
        };
        if let (Payload::Checked(checked), Some(ctx)) = (&mut self.payload, &mut self.ctx) {
            let answered = catching(|| {
                checked.internal_error(what.clone(), ctx);
                checked.poll_judged(cx, ctx)
            });
            if let Ok(polled) = answered {
                return polled.map(|f| f.map(|r| r.map_err(BodyError::from)));
            }
            // What it found is still finished before it goes.
            checked.conclude(ctx);
        } else if let Some(ctx) = &self.ctx {
            telemetry::internal_error(ctx.route_label(), &ctx.request_id, &what);
        }
        self.payload = Payload::Whole(None);
        Poll::Ready(Some(Err(BodyError::Internal(what))))
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        this.settle();
        let polled = this.poll_payload(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                this.bytes += frame.data_ref().map_or(0, |d| d.len() as u64);
                if !std::mem::replace(&mut this.first_byte_seen, true) {
                    if let (Some(ctx), false) =
                        (&this.ctx, matches!(this.payload, Payload::Whole(_)))
                    {
                        telemetry::stream_first_byte(ctx);
                    }
                }
                if this.delivered() {
                    this.finish(this.ending());
                }
            }
            Poll::Ready(Some(Err(err))) => {
                let kind = match err {
                    BodyError::Upstream(fault) => {
                        if let Some(ctx) = &this.ctx {
                            telemetry::upstream_fault(
                                ctx.route_label(),
                                &ctx.request_id,
                                fault,
                                true,
                            );
                        }
                        fault.kind()
                    }
                    BodyError::Internal(_) => "internal",
                };
                this.finish(Ending::Cut(kind));
            }
            Poll::Ready(None) => this.finish(this.ending()),
            Poll::Pending => {}
        }
        if this.ctx.is_some() {
            this.parked = match &polled {
                // Only a stream is ever pending: on its upstream's next bytes.
                Poll::Pending => Some((Instant::now(), Parked::Upstream)),
                // A piece went out: until hyper asks for the next, the
                // client is reading (or hyper writing) it.
                Poll::Ready(Some(Ok(_))) => Some((Instant::now(), Parked::Client)),
                Poll::Ready(_) => None,
            };
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.payload_ended()
    }

    fn size_hint(&self) -> SizeHint {
        match &self.payload {
            Payload::Whole(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            Payload::Stream(relay) => relay.size_hint(),
            Payload::Checked(_) => SizeHint::default(),
        }
    }
}

impl ResponseBody {
    /// How a body that reached its end ended: a checked stream may have
    /// been cut short by a fault it turned into an error event.
    fn ending(&self) -> Ending {
        match &self.payload {
            Payload::Checked(checked) => checked.cut().map_or(Ending::Complete, Ending::Cut),
            _ => Ending::Complete,
        }
    }

    /// Whether the client has had the whole answer: the payload's end, or
    /// every byte its head promised.
    fn delivered(&self) -> bool {
        self.payload_ended() || self.due.is_some_and(|due| self.bytes >= due)
    }

    fn payload_ended(&self) -> bool {
        match &self.payload {
            Payload::Whole(bytes) => bytes.is_none(),
            Payload::Stream(relay) => relay.is_end_stream(),
            Payload::Checked(checked) => checked.is_end_stream(),
        }
    }
}

/// The body bytes hyper sends with the answer `head` to a `method`
/// request, when its head fixes them (RFC 9110 §6.4.1: none to a HEAD,
/// in a 1xx, 204 or 304; else its `Content-Length`).
fn due(method: &http::Method, head: &http::response::Parts) -> Option<u64> {
    let status = head.status;
    if method == http::Method::HEAD
        || status.is_informational()
        || status == http::StatusCode::NO_CONTENT
        || status == http::StatusCode::NOT_MODIFIED
    {
        return Some(0);
    }
    let length = head.headers.get(http::header::CONTENT_LENGTH)?;
    length.to_str().ok()?.parse().ok()
}

impl Drop for ResponseBody {
    /// hyper drops the body early when the client goes away.
    fn drop(&mut self) {
        let ending = if self.delivered() {
            Ending::Complete
        } else {
            Ending::ClientGone
        };
        self.finish(ending);
    }
}
