//! Which protocol a client connection speaks, and draining it at shutdown.
//!
//! One port serves HTTP/1.1 and cleartext HTTP/2 with prior knowledge.
//! hyper-util's `auto` builder tells them apart by reading the first bytes
//! and replaying them to hyper through a rewinding reader; hyper's read
//! buffer then starts at those few bytes and, when the rest of the head
//! arrives, doubles from 8 KiB to 16 KiB, for the connection's life
//! (heaptrack, 1,000 slow streams: 16.4 MB of 41.6 MB). Here the first
//! bytes are *peeked*: nothing is consumed, and an HTTP/1 connection (every
//! request line but HTTP/2's `PRI * HTTP/2.0` preface) goes to hyper's
//! HTTP/1 server directly, whose first read takes the whole head into one
//! 8 KiB buffer. Only a connection that opens like the preface goes
//! through `auto`, which then reads the whole preface to decide.
//!
//! A drain is a watch channel: every connection holds a receiver, turns
//! graceful (finishes the request in flight, takes no new one) when the
//! value changes, and the server waits until every receiver is gone.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::watch;

/// HTTP/2's connection preface (RFC 9113 §3.4): no HTTP/1 request line
/// starts with its first three bytes.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What a connection's first bytes say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Opening {
    /// Not HTTP/2's preface: an HTTP/1 request (or garbage hyper refuses).
    Http1,
    /// The preface, or too little of it to tell: `auto` reads on and decides.
    MaybeHttp2,
}

/// Peeks at the first bytes a client sends, waiting at most `within` for
/// them (a client that sends nothing is closed as hyper closes a head that
/// never finishes). `None`: the client closed, failed, or sent nothing in time.
pub(super) async fn opening(stream: &TcpStream, within: Duration) -> Option<Opening> {
    let mut first = [0u8; 3];
    let peeked = tokio::time::timeout(within, stream.peek(&mut first)).await;
    let n = match peeked {
        Ok(Ok(n)) if n > 0 => n,
        _ => return None,
    };
    Some(of(first.get(..n).unwrap_or_default()))
}

/// The opening of a connection whose first bytes are `first`.
fn of(first: &[u8]) -> Opening {
    if PREFACE.starts_with(first) {
        Opening::MaybeHttp2
    } else {
        Opening::Http1
    }
}

/// Tells every connection to drain, and waits for them.
pub(super) struct Drain(watch::Sender<bool>);

/// A connection's end of the drain: held while it lives.
#[derive(Clone)]
pub(super) struct Draining(watch::Receiver<bool>);

impl Drain {
    pub(super) fn new() -> Self {
        Self(watch::channel(false).0)
    }

    pub(super) fn watcher(&self) -> Draining {
        Draining(self.0.subscribe())
    }

    /// Asks every connection to finish its request in flight and close,
    /// then waits until all have.
    pub(super) async fn drain(self) {
        let _ = self.0.send(true);
        self.0.closed().await;
    }
}

/// A served connection that can be asked to close once its request in
/// flight is answered (hyper's `graceful_shutdown`).
pub(super) trait Graceful: Future {
    fn close_when_idle(self: Pin<&mut Self>);
}

impl<I, S, B> Graceful for hyper::server::conn::http1::UpgradeableConnection<I, S>
where
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    B: hyper::body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn close_when_idle(self: Pin<&mut Self>) {
        hyper::server::conn::http1::UpgradeableConnection::graceful_shutdown(self);
    }
}

impl<I, S, B, E> Graceful for hyper_util::server::conn::auto::UpgradeableConnection<'_, I, S, E>
where
    S: hyper::service::Service<http::Request<hyper::body::Incoming>, Response = http::Response<B>>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S::Future: 'static,
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    B: hyper::body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    E: hyper::rt::bounds::Http2ServerConnExec<S::Future, B>,
{
    fn close_when_idle(self: Pin<&mut Self>) {
        hyper_util::server::conn::auto::UpgradeableConnection::graceful_shutdown(self);
    }
}

impl Draining {
    /// Resolves once the drain has begun (or the server is gone).
    pub(super) async fn begun(&mut self) {
        let _ = self.0.wait_for(|draining| *draining).await;
    }

    /// Runs `connection` to its end, turning it graceful when the drain
    /// begins (or at once, if it began before the connection was served).
    pub(super) async fn watch<C: Graceful>(mut self, connection: C) -> C::Output {
        let mut connection = std::pin::pin!(connection);
        let mut asked = false;
        loop {
            if !asked && *self.0.borrow_and_update() {
                connection.as_mut().close_when_idle();
                asked = true;
            }
            tokio::select! {
                served = connection.as_mut() => return served,
                changed = self.0.changed(), if !asked => {
                    if changed.is_err() {
                        // The server is gone: nothing will ask again.
                        asked = true;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_preface_or_its_start_goes_to_auto() {
        for http1 in [
            &b"GET"[..],
            b"POS",
            b"PUT",
            b"PAT",
            b"OPT",
            b"\x16\x03\x01",
            b"pri",
        ] {
            assert_eq!(of(http1), Opening::Http1, "{http1:?}");
        }
        for h2 in [&b"PRI"[..], b"PR", b"P"] {
            assert_eq!(of(h2), Opening::MaybeHttp2, "{h2:?}");
        }
    }
}
