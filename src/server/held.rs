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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::RequestError;

/// The bytes held now, and the budget.
pub(crate) struct Held {
    bytes: AtomicU64,
    limit: u64,
}

/// One answer's share of the budget, given back when its body is dropped
/// (sent, or its client gone).
pub(crate) struct HeldShare {
    held: Arc<Held>,
    bytes: u64,
}

impl Held {
    pub(crate) fn new(limit: u64) -> Arc<Self> {
        Arc::new(Self {
            bytes: AtomicU64::new(0),
            limit,
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

    /// Counts an answer about to be sent whole.
    pub(crate) fn hold(self: &Arc<Self>, bytes: u64) -> HeldShare {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        HeldShare {
            held: self.clone(),
            bytes,
        }
    }
}

impl Drop for HeldShare {
    fn drop(&mut self) {
        self.held.bytes.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}
