//! The one value that carries a request from its arrival to its log line,
//! as pingora's `CTX` does: created when the head arrives (`server::exchange`),
//! filled in by each phase (admit: its route and client; plan: the path it
//! goes to upstream; forward: the upstream's status and the time waited on
//! it; judge: what was found and whether it was captured), moved into the
//! response's body when the handler returns (or into the tunnel), and read
//! once at the end for the metrics, the log line and the span's end
//! (`telemetry::request_finished`).
//!
//! Nothing is copied out of it for a later phase: a judged stream borrows it
//! from the body that owns it each time it is polled.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, Method, StatusCode};
use tokio::time::Instant;

use crate::error::Answering;
use crate::route::Route;
use crate::trace::RequestSpan;
use probity_judge::inspect::Envelope;
use probity_judge::outcome::Outcome;

/// The `route` label of a request that matched no route. Route names start
/// with a letter or digit, so this never collides with one.
pub(crate) const NO_ROUTE_LABEL: &str = "-";

/// One request, from arrival to its log line.
pub(crate) struct RequestContext {
    pub(crate) request_id: HeaderValue,
    pub(crate) method: Method,
    /// The client's path only: a query string may carry a credential
    /// (`?key=`).
    pub(crate) path: String,
    pub(crate) started: Instant,
    /// The request's span, when spans are exported.
    pub(crate) span: Option<Arc<RequestSpan>>,
    /// The route it matched (admit), from the table in force when it came:
    /// a reload never changes a request in flight.
    pub(crate) route: Option<Arc<Route>>,
    /// The `[[clients]]` name it was admitted as; `None` when no client is
    /// configured or none was admitted (`unknown`).
    pub(crate) client: Option<Arc<str>>,
    /// The path it was sent to upstream (plan): a capture's `endpoint`.
    pub(crate) upstream_path: String,
    pub(crate) upstream_status: Option<StatusCode>,
    /// What of the time since `started` was spent waiting on others.
    pub(crate) waited: Waited,
    /// The one ranking of what judging found (`Findings::outcome`), once
    /// an answer was judged.
    pub(crate) outcome: Option<Outcome>,
    /// The upstream response was kept in the capture store.
    pub(crate) captured: bool,
    /// The status the client got.
    pub(crate) status: StatusCode,
}

impl RequestContext {
    /// A request whose head just arrived.
    pub(crate) fn arrived(
        request_id: HeaderValue,
        head: &http::request::Parts,
        span: Option<Arc<RequestSpan>>,
    ) -> Self {
        Self {
            request_id,
            method: head.method.clone(),
            path: head.uri.path().to_string(),
            started: Instant::now(),
            span,
            route: None,
            client: None,
            upstream_path: String::new(),
            upstream_status: None,
            waited: Waited::default(),
            outcome: None,
            captured: false,
            status: StatusCode::OK,
        }
    }

    /// The route's name, or [`NO_ROUTE_LABEL`] before one matched: the
    /// `route` label and log field.
    pub(crate) fn route_label(&self) -> &str {
        self.route.as_deref().map_or(NO_ROUTE_LABEL, |r| &r.name)
    }

    /// How an error of this request is worded: the route dialect's
    /// envelope and retry advice (OpenAI's shape until a route matched).
    pub(crate) fn answering(&self, mid_stream: bool) -> Answering<'_> {
        let route = self.route.as_deref();
        Answering {
            route: route.map(|r| &*r.name),
            request_id: &self.request_id,
            envelope: route.map_or(Envelope::Nested, |r| r.dialect.error_envelope()),
            retry_invalid: route.is_some_and(|r| r.retry_invalid),
            mid_stream,
        }
    }
}

/// The time of an exchange that was not probity's own. What is left of its
/// duration is probity's overhead (`probity_overhead_seconds`).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Waited {
    /// Waiting on the upstream: from handing it the request to its answer's
    /// head, for a whole answer's body frames, and while a stream waits for
    /// its next bytes; for a chunked batch, the wall time while any chunk
    /// is outstanding.
    pub(crate) upstream: Duration,
    /// Waiting on the client: reading its request body, and while the
    /// answer waits for the client (hyper) to take its next piece.
    pub(crate) client: Duration,
    /// A Realtime session: its length is the session's, not overhead, so
    /// none is recorded.
    pub(crate) session: bool,
}

impl Waited {
    /// probity's own share of `total`, never negative; `None` for a session.
    pub(crate) fn overhead(&self, total: Duration) -> Option<Duration> {
        let waited = self.upstream.saturating_add(self.client);
        (!self.session).then(|| total.saturating_sub(waited))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_overhead_is_what_the_waits_leave_and_never_negative() {
        let ms = Duration::from_millis;
        let waited = Waited {
            upstream: ms(300),
            client: ms(20),
            session: false,
        };
        assert_eq!(waited.overhead(ms(321)), Some(ms(1)));
        // Waits measured apart may add up past the total: none, not less.
        assert_eq!(waited.overhead(ms(310)), Some(Duration::ZERO));
        assert_eq!(Waited::default().overhead(ms(5)), Some(ms(5)));
        let session = Waited {
            session: true,
            ..Waited::default()
        };
        assert_eq!(session.overhead(ms(60_000)), None);
    }
}
