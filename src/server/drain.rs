//! Draining client connections at shutdown.
//!
//! A drain is a watch channel: every connection holds a receiver, turns
//! graceful (finishes the request in flight, takes no new one) when the
//! value changes, and the server waits until every receiver is gone.

use std::future::Future;
use std::pin::Pin;

use tokio::sync::watch;

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

impl<I, S, B, E> Graceful for hyper::server::conn::http2::Connection<I, S, E>
where
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    B: hyper::body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    E: hyper::rt::bounds::Http2ServerConnExec<S::Future, B>,
{
    fn close_when_idle(self: Pin<&mut Self>) {
        hyper::server::conn::http2::Connection::graceful_shutdown(self);
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
