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
//! No one client may spend the whole budget: each [`Holder`] (the admitted
//! `[[clients]]` name, else the client's address) may hold at most
//! `server.max_held_share` of it. Past its share only that holder is
//! refused; the others are admitted as long as the budget allows.
//!
//! An answer's size is known only once it has come, and a crowd of
//! requests sent at once is admitted before any of them is held: each
//! admitted request therefore [`Reserved`] what its route's last whole
//! answer weighed, against its holder's share and the budget, until its
//! own answer replaces the guess.
//!
//! A held answer must also be taken within `server.send_timeout_ms`: a
//! reader slower than that would hold its share (and with a crowd of them,
//! the whole budget) for as long as it likes. hyper stops polling a body
//! while the client's window is full, so the deadline cannot live in the
//! body: each connection has a [`Delivery`] clock, set while one of its
//! answers is held, and its task closes the connection when the clock
//! runs out.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::RequestError;
use crate::telemetry;

/// The bytes held now, and the budget.
pub(crate) struct Held {
    bytes: AtomicU64,
    limit: u64,
    /// What each holder holds now; a holder is removed when it holds
    /// nothing, so the map is bounded by the answers held.
    holders: Mutex<HashMap<Holder, u64>>,
    /// The most one holder may hold: `server.max_held_share` of `limit`.
    share: u64,
    /// `server.max_held_share`, as configured (for the refusal's message).
    fraction: f64,
    /// Each route's last whole answer, in bytes: what a request on it is
    /// expected to hold (bounded by the routes configured).
    expected: Mutex<HashMap<Arc<str>, u64>>,
    /// `server.send_timeout_ms`.
    send_timeout: Duration,
    /// What deadlines are counted from.
    epoch: Instant,
}

/// One answer's share of the budget, given back when its body is dropped
/// (sent, or its client gone), with its connection's clock stopped.
pub(crate) struct HeldShare {
    held: Arc<Held>,
    holder: Holder,
    bytes: u64,
    clock: Option<(Arc<Delivery>, u64)>,
}

/// An admitted request's guess at its answer, counted until it is
/// answered (or dropped: its client gone, a panic).
pub(crate) struct Reserved {
    held: Arc<Held>,
    holder: Holder,
    route: Arc<str>,
    bytes: u64,
}

/// Who an answer is held for: the admitted client, when `[[clients]]` are
/// configured, else the client's address (an IPv6 one by its /64, what one
/// host is usually given).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Holder {
    Client(Arc<str>),
    Address(IpAddr),
    /// No address known (not a TCP connection): one holder for all.
    Unknown,
}

impl Holder {
    /// The request's holder: its client's name, else its address.
    pub(crate) fn of(client: Option<&str>, address: Option<IpAddr>) -> Self {
        match (client, address) {
            (Some(name), _) => Self::Client(name.into()),
            (None, Some(address)) => Self::Address(host_of(address)),
            (None, None) => Self::Unknown,
        }
    }
}

/// An address as one host: IPv4 (an IPv4-mapped IPv6 one too) whole, IPv6
/// by its /64 (a host is usually given a /64, and can pick any address in
/// it).
fn host_of(address: IpAddr) -> IpAddr {
    match address.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(bits.into())
        }
        v4 => v4,
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Client(name) => write!(f, "client `{name}`"),
            Self::Address(IpAddr::V6(v6)) => write!(f, "address {v6}/64"),
            Self::Address(v4) => write!(f, "address {v4}"),
            Self::Unknown => f.write_str("this connection"),
        }
    }
}

/// A connection's delivery clock: the deadline (milliseconds after the
/// epoch; 0: none) by which its held answer must have been taken.
#[derive(Default)]
pub(crate) struct Delivery {
    deadline: AtomicU64,
    set: Notify,
}

impl Held {
    /// `fraction` is `server.max_held_share` (validated: 0 < x ≤ 1).
    pub(crate) fn new(limit: u64, fraction: f64, send_timeout: Duration) -> Arc<Self> {
        Arc::new(Self {
            bytes: AtomicU64::new(0),
            limit,
            holders: Mutex::default(),
            share: share_of(limit, fraction),
            fraction,
            expected: Mutex::default(),
            send_timeout,
            epoch: Instant::now(),
        })
    }

    /// Refuses a new inspected request while its holder's share, or the
    /// budget, is spent. The share is checked first: a holder past it is
    /// told it is its own doing, whatever the others hold (unless its share
    /// is the whole budget: then the budget is what is spent).
    pub(crate) fn admit(
        self: &Arc<Self>,
        holder: &Holder,
        route: &str,
    ) -> Result<Reserved, RequestError> {
        let own = self.holders().get(holder).copied().unwrap_or(0);
        if own >= self.share && self.share < self.limit {
            telemetry::held_share_spent(self.share);
            return Err(RequestError::ShareSpent {
                holder: holder.to_string(),
                held: own,
                share: self.share,
                fraction: self.fraction,
                limit: self.limit,
            });
        }
        let held = self.bytes.load(Ordering::Relaxed);
        if held >= self.limit {
            telemetry::held_budget_spent(self.limit);
            return Err(RequestError::Saturated {
                held,
                limit: self.limit,
            });
        }
        let bytes = (self.expected.lock().unwrap_or_else(PoisonError::into_inner))
            .get(route)
            .copied()
            .unwrap_or(0);
        self.add(holder, bytes);
        Ok(Reserved {
            held: self.clone(),
            holder: holder.clone(),
            route: route.into(),
            bytes,
        })
    }

    /// Counts `bytes` more for `holder` and the budget.
    fn add(&self, holder: &Holder, bytes: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        *self.holders().entry(holder.clone()).or_insert(0) += bytes;
    }

    /// Counts `bytes` less; a holder left with nothing is forgotten.
    fn remove(&self, holder: &Holder, bytes: u64) {
        self.bytes.fetch_sub(bytes, Ordering::Relaxed);
        let mut holders = self.holders();
        if let Some(own) = holders.get_mut(holder) {
            *own = own.saturating_sub(bytes);
            if *own == 0 {
                holders.remove(holder);
            }
        }
    }

    /// Counts an answer about to be sent whole, and starts its
    /// connection's clock (the earliest deadline of its answers holds).
    pub(crate) fn hold(
        self: &Arc<Self>,
        bytes: u64,
        holder: Holder,
        delivery: Option<&Arc<Delivery>>,
    ) -> HeldShare {
        self.add(&holder, bytes);
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
            holder,
            bytes,
            clock,
        }
    }

    /// The holders' map, locked only for one lookup or update. A panic
    /// while it was held cannot leave it half-updated (each update is one
    /// addition or subtraction), so a poisoned lock is taken as it is.
    fn holders(&self) -> std::sync::MutexGuard<'_, HashMap<Holder, u64>> {
        self.holders.lock().unwrap_or_else(PoisonError::into_inner)
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
        self.held.remove(&self.holder, self.bytes);
        if let Some((delivery, due)) = &self.clock {
            let _ =
                delivery
                    .deadline
                    .compare_exchange(*due, 0, Ordering::AcqRel, Ordering::Acquire);
        }
    }
}

impl Reserved {
    /// The answer came whole: it is what the route's next requests expect
    /// (the guess is given back when `self` is dropped, once the answer
    /// itself is counted).
    pub(crate) fn answered(&self, bytes: u64) {
        let mut expected = self
            .held
            .expected
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        expected.insert(self.route.clone(), bytes);
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        self.held.remove(&self.holder, self.bytes);
    }
}

/// `fraction` of `limit`, in bytes: at least 1, at most `limit`.
fn share_of(limit: u64, fraction: f64) -> u64 {
    // Exact for any budget below 2^53 bytes (8 PiB); `as` saturates.
    let bytes = (limit as f64 * fraction).ceil() as u64;
    bytes.clamp(1, limit.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_is_a_fraction_of_the_budget_rounded_up() {
        assert_eq!(share_of(1000, 0.25), 250);
        assert_eq!(share_of(1001, 0.25), 251);
        assert_eq!(share_of(1000, 1.0), 1000);
        assert_eq!(share_of(3, 0.0001), 1);
        assert_eq!(share_of(u64::MAX, 1.0), u64::MAX);
    }

    #[test]
    fn an_ipv6_host_is_its_64_and_a_mapped_ipv4_its_ipv4() {
        let of = |a: &str| Holder::of(None, Some(a.parse().unwrap()));
        assert_eq!(of("2001:db8::1"), of("2001:db8::ffff:2"));
        assert_ne!(of("2001:db8::1"), of("2001:db8:0:1::1"));
        assert_eq!(of("::ffff:127.0.0.2"), of("127.0.0.2"));
        assert_ne!(of("127.0.0.2"), of("127.0.0.3"));
        assert_eq!(
            Holder::of(Some("app"), Some("127.0.0.2".parse().unwrap())),
            Holder::of(Some("app"), Some("127.0.0.3".parse().unwrap()))
        );
    }
}
