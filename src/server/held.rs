//! The inspected answers probity holds for clients still reading them.
//!
//! An inspected answer is read whole before it is judged, so it cannot push
//! back on the upstream: a client that reads it slowly keeps all of it in
//! memory until its last byte is sent. Each such answer counts against one
//! process-wide budget (`server.max_held_response_bytes`); while the budget
//! is spent, new inspected requests are refused with 503 and `Retry-After`
//! before anything is read or forwarded, so a crowd of slow readers costs at
//! most the budget plus the answers already in flight, never connections ×
//! answer size. A relayed answer (a stream, an endpoint probity does not
//! inspect) needs none of this: it is passed on only as fast as it is read.
//!
//! A held answer must also be taken within `server.send_timeout_ms`: a
//! reader slower than that would hold its share (and with a crowd of them,
//! the whole budget) for as long as it likes. hyper stops polling a body
//! while the client's window is full, so the deadline cannot live in the
//! body: each connection has a [`Delivery`] clock, set while one of its
//! answers is held, and its task closes the connection when the clock
//! runs out.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::RequestError;
use crate::telemetry;

/// The bytes held now, and the budget.
pub(crate) struct Held {
    bytes: AtomicU64,
    limit: u64,
    /// `server.send_timeout_ms`.
    send_timeout: Duration,
    /// What deadlines are counted from.
    epoch: Instant,
}

/// One answer's share of the budget, given back when its body is dropped
/// (sent, or its client gone), with its connection's clock stopped.
pub(crate) struct HeldShare {
    held: Arc<Held>,
    bytes: u64,
    clock: Option<(Arc<Delivery>, u64)>,
}

/// A connection's delivery clock: the deadline (milliseconds after the
/// epoch; 0: none) by which its held answer must have been taken.
#[derive(Default)]
pub(crate) struct Delivery {
    deadline: AtomicU64,
    set: Notify,
}

impl Held {
    pub(crate) fn new(limit: u64, send_timeout: Duration) -> Arc<Self> {
        Arc::new(Self {
            bytes: AtomicU64::new(0),
            limit,
            send_timeout,
            epoch: Instant::now(),
        })
    }

    /// Refuses a new inspected request while the budget is spent.
    pub(crate) fn admit(&self) -> Result<(), RequestError> {
        let held = self.bytes.load(Ordering::Relaxed);
        if held >= self.limit {
            return Err(RequestError::Saturated {
                held,
                limit: self.limit,
            });
        }
        Ok(())
    }

    /// Counts an answer about to be sent whole, and starts its
    /// connection's clock (the earliest deadline of its answers holds).
    pub(crate) fn hold(
        self: &Arc<Self>,
        bytes: u64,
        delivery: Option<&Arc<Delivery>>,
    ) -> HeldShare {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        let clock = delivery.map(|delivery| {
            let due = self.epoch.elapsed() + self.send_timeout;
            let due = u64::try_from(due.as_millis()).unwrap_or(u64::MAX).max(1);
            let unset = delivery
                .deadline
                .compare_exchange(0, due, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
            if unset {
                delivery.set.notify_one();
            }
            (delivery.clone(), due)
        });
        HeldShare {
            held: self.clone(),
            bytes,
            clock,
        }
    }

    /// Resolves when `delivery`'s clock runs out; never while it is unset.
    pub(crate) async fn overdue(&self, delivery: &Delivery) {
        loop {
            let notified = delivery.set.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let due = delivery.deadline.load(Ordering::Acquire);
            if due == 0 {
                notified.await;
                continue;
            }
            tokio::time::sleep_until(self.epoch + Duration::from_millis(due)).await;
            if delivery.deadline.load(Ordering::Acquire) == due {
                telemetry::send_timed_out(self.send_timeout);
                return;
            }
        }
    }
}

impl Drop for HeldShare {
    fn drop(&mut self) {
        self.held.bytes.fetch_sub(self.bytes, Ordering::Relaxed);
        if let Some((delivery, due)) = &self.clock {
            let _ =
                delivery
                    .deadline
                    .compare_exchange(*due, 0, Ordering::AcqRel, Ordering::Acquire);
        }
    }
}
