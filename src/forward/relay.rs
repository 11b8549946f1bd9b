//! Relaying a streaming response: each frame goes to the client as soon as it
//! arrives; nothing is held back or accumulated.
//!
//! Once the status line is out, a fault (silence past `idle_timeout_ms`, a
//! reset, too many bytes) can no longer change the status: the relay ends the
//! body with an error, hyper cuts the response off (the client sees an
//! incomplete stream, never a hanging one), and `server` counts and logs it.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use tokio::time::{sleep_until, timeout_at, Instant, Sleep};

use super::pool::AnswerBody;
use super::{ForwardError, Upstream};

pub(crate) struct Relay {
    /// The first data frame, read before the status line went out.
    first: Option<Bytes>,
    body: AnswerBody,
    idle: Pin<Box<Sleep>>,
    idle_timeout: Duration,
    sent: u64,
    limit: u64,
    upstream: String,
    done: bool,
}

impl Relay {
    /// Waits for the stream's first data frame, so that silence before it is
    /// still a 504 and not a stream cut short. The wait ends at the
    /// whole-call `deadline` or after `idle_timeout_ms`, whichever is first;
    /// the wait is added to `waited`.
    pub(super) async fn start(
        mut body: AnswerBody,
        to: &Upstream,
        (deadline, limit): (Instant, u64),
        waited: &mut Duration,
    ) -> Result<Self, ForwardError> {
        let limits = to.limits;
        let upstream = to.display.clone();
        let mut waiting = Instant::now();
        let idle_by = waiting + limits.idle_timeout;
        let (first_by, after, key) = if idle_by < deadline {
            (idle_by, limits.idle_timeout, "idle_timeout_ms")
        } else {
            (deadline, limits.timeout, "timeout_ms")
        };
        let first = loop {
            let frame = timeout_at(first_by, body.frame()).await;
            *waited += waiting.elapsed();
            waiting = Instant::now();
            match frame {
                Err(_) => {
                    return Err(ForwardError::Timeout {
                        upstream,
                        waited_for: "first byte of its stream",
                        after,
                        key,
                    });
                }
                Ok(None) => break None,
                Ok(Some(Err(err))) => return Err(super::reset(to, &err)),
                Ok(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) if !data.is_empty() => break Some(data),
                    _ => continue,
                },
            }
        };
        let sent = first.as_ref().map_or(0, |d| d.len() as u64);
        let done = first.is_none() || body.is_end_stream();
        let mut relay = Self {
            first,
            body,
            idle: Box::pin(sleep_until(Instant::now() + limits.idle_timeout)),
            idle_timeout: limits.idle_timeout,
            sent,
            limit,
            upstream,
            done,
        };
        if relay.sent > relay.limit {
            return Err(relay.too_large());
        }
        Ok(relay)
    }

    fn too_large(&mut self) -> ForwardError {
        self.done = true;
        ForwardError::TooLarge {
            upstream: self.upstream.clone(),
            limit: self.limit,
        }
    }
}

impl Body for Relay {
    type Data = Bytes;
    type Error = ForwardError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ForwardError>>> {
        let this = &mut *self;
        if let Some(first) = this.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        if this.done {
            return Poll::Ready(None);
        }
        loop {
            match Pin::new(&mut this.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    // Trailers describe the upstream hop only; data goes on.
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    this.sent += data.len() as u64;
                    if this.sent > this.limit {
                        return Poll::Ready(Some(Err(this.too_large())));
                    }
                    let next = Instant::now() + this.idle_timeout;
                    this.idle.as_mut().reset(next);
                    // The last frame of a known length: hyper's server
                    // polls no further after it, so the end is seen here.
                    this.done = this.body.is_end_stream();
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Poll::Ready(Some(Err(err))) => {
                    this.done = true;
                    let upstream = &this.upstream;
                    return Poll::Ready(Some(Err(ForwardError::Reset {
                        upstream: upstream.clone(),
                        cause: super::root_cause(&err),
                    })));
                }
                Poll::Ready(None) => {
                    this.done = true;
                    return Poll::Ready(None);
                }
                Poll::Pending => {
                    ready!(this.idle.as_mut().poll(cx));
                    this.done = true;
                    return Poll::Ready(Some(Err(ForwardError::Timeout {
                        upstream: this.upstream.clone(),
                        waited_for: "stream event",
                        after: this.idle_timeout,
                        key: "idle_timeout_ms",
                    })));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.first.is_none()
    }
}
