//! A route's keep-alive connections to its upstream, kept by probity.
//!
//! hyper-util's legacy pool did the same job through several layers a
//! request: a checkout raced against a lazily built connect future, a pool
//! keyed by scheme and authority under a mutex, a `Pooled` guard that put
//! the connection back when dropped, a `Host` value formatted for every
//! request, and, since an answer's body is read after its head, a task
//! spawned per request to wait for the connection to be ready again. Here
//! the answer's body ([`AnswerBody`]) parks its connection when it is read
//! to its end, and the next checkout takes the newest parked one hyper says
//! is ready: nothing is spawned per request, and the `Host` value is made
//! once. A body dropped before its end (a client that left a stream) drops
//! its connection, which hyper then closes: it is never reused.
//!
//! HTTP/1.1 connections carry one exchange at a time; an HTTPS upstream that
//! picks HTTP/2 through ALPN gets one shared connection, multiplexed.
//! Each connection's I/O runs in a task of its own (hyper's connection
//! future), as it did.
//!
//! A request is sent again on another connection only when hyper hands it
//! back unsent: a parked connection the upstream closed while it was idle.
//! Once a byte was written it never is (a model call is not idempotent).
//! So a parked connection is not taken on hyper's word alone: an upstream
//! that closes after every answer without saying so (simple servers,
//! serverless runtimes) has its FIN in the kernel before hyper's task has
//! read it, and a request written then is lost (14 of 300 back to back).
//! The checkout asks the kernel ([`SocketProbe::hung_up`]) first. That leaves
//! the request written in the microseconds between such an upstream's
//! answer and its close (1 of 2,000 at full speed): a pool that finds its
//! connections closed right after their answers parks none for a while,
//! and opens one a request, as `Connection: close` would have had it.

use std::error::Error as StdError;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt as _;
use http_body::{Body, Frame, SizeHint};

use http::header::HOST;
use http::uri::PathAndQuery;
use http::{HeaderValue, Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::client::legacy::connect::Connection as _;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::time::Instant;
use tower_service::Service;

use super::UpstreamBody;
use crate::connector::Connector;

/// Connections parked at most: a burst of streams does not leave one idle
/// per stream (and its buffers) for the next `IDLE_TIMEOUT`.
const MAX_PARKED: usize = 64;

/// A connection unused this long is closed (as the legacy pool's default
/// of 90 s; providers' own idle timeouts are longer).
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// How often idle connections are looked at without a request to do it.
const REAP_EVERY: Duration = Duration::from_secs(30);

/// Why an exchange with the upstream failed before its answer's head.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    /// No connection could be opened (refused, DNS, TLS, the egress proxy,
    /// the connect timeout).
    #[error("{0}")]
    Connect(Box<dyn StdError + Send + Sync>),
    /// The connection failed during the exchange.
    #[error(transparent)]
    Exchange(#[from] hyper::Error),
}

/// One upstream's connections.
pub(crate) struct Pool {
    connector: Connector,
    /// `Host` of an HTTP/1.1 request: the authority, without the scheme's
    /// default port (as hyper-util wrote it).
    host: Option<HeaderValue>,
    parked: Arc<Parking>,
    /// The HTTP/2 connection, when the upstream chose it.
    shared: Mutex<Option<http2::SendRequest<UpstreamBody>>>,
    http1: http1::Builder,
    http2: http2::Builder<TokioExecutor>,
}

/// The parked connections, and whether a task reaps them: one runs while
/// any is parked, so an idle proxy runs none.
#[derive(Default)]
struct Parking {
    connections: Mutex<Lot>,
    reaping: AtomicBool,
}

/// What the parking's one lock guards: parking an answer's connection
/// takes it once, and reads both.
#[derive(Default)]
struct Lot {
    connections: Vec<ParkedConnection>,
    /// Until when no answer's connection is parked: the upstream was seen
    /// closing them right after their answers.
    closing: Option<Instant>,
}

/// A parked connection found closed this soon after its answer was closed
/// because of it, not for idling.
const CLOSED_AFTER_ANSWER: Duration = Duration::from_secs(1);

/// How long a pool that saw that parks nothing (then it tries again).
const UNPARKED_FOR: Duration = Duration::from_secs(30);

/// An HTTP/1.1 connection between exchanges (or finishing one's body).
struct ParkedConnection {
    sender: http1::SendRequest<UpstreamBody>,
    socket: SocketProbe,
    /// When it was last handed out.
    used: Instant,
}

impl ParkedConnection {
    /// Closed by the upstream, or idle past [`IDLE_TIMEOUT`].
    fn stale(&self, now: Instant) -> bool {
        self.sender.is_closed()
            || (self.sender.is_ready() && now.duration_since(self.used) > IDLE_TIMEOUT)
    }
}

/// A connection to send one request on.
enum Sender {
    Http1(http1::SendRequest<UpstreamBody>, SocketProbe),
    Http2(http2::SendRequest<UpstreamBody>),
}

impl Pool {
    /// `max_buf_size`: the most hyper reads ahead of an HTTP/1.1 answer
    /// its reader has not taken yet.
    pub(crate) fn new(
        connector: Connector,
        authority: &http::uri::Authority,
        https: bool,
        max_buf_size: usize,
    ) -> Self {
        let default_port = if https { 443 } else { 80 };
        let host = match authority.port_u16() {
            Some(port) if port != default_port => HeaderValue::from_str(authority.as_str()),
            _ => HeaderValue::from_str(authority.host()),
        };
        let mut http1 = http1::Builder::new();
        http1.max_buf_size(max_buf_size);
        let mut http2 = http2::Builder::new(TokioExecutor::new());
        http2.timer(TokioTimer::new());
        Self {
            connector,
            host: host.ok(),
            parked: Arc::default(),
            shared: Mutex::new(None),
            http1,
            http2,
        }
    }

    /// Sends `request` (its URI absolute) and waits for its answer's head.
    pub(crate) async fn send(
        &self,
        mut request: Request<UpstreamBody>,
    ) -> Result<Response<AnswerBody>, SendError> {
        let uri = request.uri().clone();
        let mut opened = 0;
        loop {
            let sender = match self.checkout() {
                Some(sender) => sender,
                // Boxed: connecting (TLS, the egress proxy, two handshakes)
                // is a large future that a request on a parked connection
                // never runs.
                None => {
                    opened += 1;
                    Box::pin(self.connect(&uri)).await?
                }
            };
            // A connection closed before hyper wrote the request hands it
            // back unsent: it goes on the next one, whatever its method
            // (the parked ones, then at most two new ones, so an upstream
            // that closes every connection at once is not tried forever).
            request = match self.send_on(sender, request).await {
                Ok(response) => return Ok(response),
                Err((Some(unsent), _)) if opened < MAX_OPENED => restored(unsent, &uri),
                Err((_, err)) => return Err(SendError::Exchange(err)),
            };
        }
    }

    /// Sends on `sender`; an HTTP/1.1 connection goes with the answer's
    /// body, which parks it once read to its end.
    async fn send_on(
        &self,
        sender: Sender,
        mut request: Request<UpstreamBody>,
    ) -> Result<Response<AnswerBody>, (Option<Request<UpstreamBody>>, hyper::Error)> {
        match sender {
            Sender::Http1(mut sender, socket) => {
                origin_form(&mut request);
                if let Some(host) = &self.host {
                    request
                        .headers_mut()
                        .entry(HOST)
                        .or_insert_with(|| host.clone());
                }
                match sender.try_send_request(request).await {
                    Ok(response) => {
                        let release = Release {
                            sender,
                            socket,
                            parked: self.parked.clone(),
                        };
                        Ok(response.map(|body| AnswerBody::new(body, Some(release))))
                    }
                    Err(mut err) => Err((err.take_message(), err.into_error())),
                }
            }
            Sender::Http2(mut sender) => {
                *request.version_mut() = http::Version::HTTP_2;
                match sender.try_send_request(request).await {
                    Ok(response) => Ok(response.map(|body| AnswerBody::new(body, None))),
                    Err(mut err) => {
                        // Failed or refused a stream: the next request
                        // opens a new connection rather than try it again.
                        lock(&self.shared).take();
                        Err((err.take_message(), err.into_error()))
                    }
                }
            }
        }
    }

    /// The newest ready connection; closed and expired ones are dropped.
    fn checkout(&self) -> Option<Sender> {
        if let Some(shared) = lock(&self.shared).as_ref() {
            if !shared.is_closed() {
                return Some(Sender::Http2(shared.clone()));
            }
        }
        let mut lot = lock(&self.parked.connections);
        let parked = &mut lot.connections;
        let now = Instant::now();
        let mut closed_after_answer = false;
        let mut i = parked.len();
        let taken = loop {
            if i == 0 {
                break None;
            }
            i -= 1;
            let Some(entry) = parked.get(i) else {
                break None;
            };
            let closed = entry.sender.is_closed() || entry.socket.hung_up();
            if closed || entry.stale(now) {
                closed_after_answer |=
                    closed && now.duration_since(entry.used) < CLOSED_AFTER_ANSWER;
                parked.remove(i);
            } else if entry.sender.is_ready() {
                let taken = parked.remove(i);
                break Some(Sender::Http1(taken.sender, taken.socket));
            }
        };
        if closed_after_answer {
            lot.closing = Some(now + UNPARKED_FOR);
            drop(lot);
            tracing::debug!(
                "the upstream closes its connections after each answer without saying so: \
                 one is opened a request for the next {} s",
                UNPARKED_FOR.as_secs()
            );
        }
        taken
    }

    /// Opens a connection: HTTP/2 when TLS's ALPN chose it, else HTTP/1.1.
    async fn connect(&self, uri: &Uri) -> Result<Sender, SendError> {
        let mut connector = self.connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(SendError::Connect)?;
        let io = connector
            .call(uri.clone())
            .await
            .map_err(SendError::Connect)?;
        if io.connected().is_negotiated_h2() {
            let (sender, connection) = self.http2.handshake(io).await?;
            tokio::spawn(connection.map(ended));
            *lock(&self.shared) = Some(sender.clone());
            return Ok(Sender::Http2(sender));
        }
        let socket = SocketProbe::of(&io);
        let (sender, connection) = self.http1.handshake(io).await?;
        // Mapped, not awaited in an async block, which would hold room
        // for the connection twice (3.6 KB a connection instead of 1.7).
        tokio::spawn(connection.map(ended));
        Ok(Sender::Http1(sender, socket))
    }
}

/// New connections a request is tried on at most, when each hands it back
/// unsent.
const MAX_OPENED: usize = 2;

/// An upstream connection's socket, asked about between exchanges.
///
/// Only its number is kept: hyper's task owns it and may close it. A
/// number reused since then can only give a wrong answer for a connection
/// hyper has already dropped, and a request sent on that one is handed
/// back unsent.
#[derive(Clone, Copy)]
struct SocketProbe(Option<i32>);

impl SocketProbe {
    /// The socket under a connector's stream, TLS or not.
    fn of(io: &<Connector as Service<Uri>>::Response) -> Self {
        #[cfg(unix)]
        {
            use hyper_rustls::MaybeHttpsStream;
            use std::os::fd::AsRawFd;
            let tcp = match io {
                MaybeHttpsStream::Http(tcp) => tcp.inner(),
                MaybeHttpsStream::Https(tls) => tls.inner().get_ref().0.inner().inner(),
            };
            Self(Some(tcp.as_raw_fd()))
        }
        #[cfg(not(unix))]
        {
            let _ = io;
            Self(None)
        }
    }

    /// Whether the kernel holds the upstream's close, a reset, or bytes
    /// nobody asked for (an idle HTTP/1.1 connection gets none; a server's
    /// parting `408` is one) for this idle connection: what hyper's task
    /// will read next, and why nothing may be written into it now.
    fn hung_up(self) -> bool {
        #[cfg(target_os = "linux")]
        if let Some(fd) = self.0 {
            let mut probe = libc::pollfd {
                fd,
                events: libc::POLLIN | libc::POLLRDHUP,
                revents: 0,
            };
            // SAFETY: `poll` reads and writes one `pollfd`, a live local,
            // and does not wait (timeout 0); any descriptor number is
            // safe to ask about.
            let ready = unsafe { libc::poll(&mut probe, 1, 0) };
            return ready != 0;
        }
        false
    }
}

/// How an upstream connection's I/O ended, for the debug log.
fn ended(result: Result<(), hyper::Error>) {
    if let Err(err) = result {
        tracing::debug!(error = %err, "upstream connection ended with an error");
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while it was held leaves a list or a sender, still sound.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Drops idle and closed connections every [`REAP_EVERY`], until none is
/// parked or the pool is gone (a reload dropped its route table).
async fn reap(parked: Weak<Parking>) {
    loop {
        tokio::time::sleep(REAP_EVERY).await;
        let Some(parked) = parked.upgrade() else {
            return;
        };
        let now = Instant::now();
        let mut lot = lock(&parked.connections);
        lot.connections.retain(|entry| !entry.stale(now));
        if lot.connections.is_empty() {
            // Under the list's lock, as parking checks it: a connection
            // parked after this starts a reaper of its own.
            parked.reaping.store(false, Ordering::Release);
            return;
        }
    }
}

/// An HTTP/1.1 connection on its way back to its pool.
struct Release {
    sender: http1::SendRequest<UpstreamBody>,
    socket: SocketProbe,
    parked: Arc<Parking>,
}

impl Release {
    fn park(self) {
        if self.sender.is_closed() {
            return;
        }
        let now = Instant::now();
        let mut lot = lock(&self.parked.connections);
        let closing = lot.closing.is_some_and(|until| now < until);
        if closing || lot.connections.len() >= MAX_PARKED {
            return;
        }
        lot.connections.push(ParkedConnection {
            sender: self.sender,
            socket: self.socket,
            used: now,
        });
        let start = !self.parked.reaping.swap(true, Ordering::AcqRel);
        drop(lot);
        if start {
            drop(tokio::spawn(reap(Arc::downgrade(&self.parked))));
        }
    }
}

/// An upstream answer's body. Read to its end, it parks its HTTP/1.1
/// connection for the next request; dropped before, it drops it.
pub(crate) struct AnswerBody {
    body: Incoming,
    release: Option<Release>,
}

impl AnswerBody {
    fn new(body: Incoming, release: Option<Release>) -> Self {
        let mut answer = Self { body, release };
        // An empty body (a 204, a HEAD's answer) may never be polled.
        if answer.body.is_end_stream() {
            answer.released();
        }
        answer
    }

    fn released(&mut self) {
        if let Some(release) = self.release.take() {
            release.park();
        }
    }
}

impl Body for AnswerBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        // At the end, or at the last frame: a reader that sees the body
        // ended (hyper's server does, for a known length) polls no more.
        if matches!(polled, Poll::Ready(None)) || self.body.is_end_stream() {
            self.released();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// An HTTP/1.1 request names its path alone (RFC 9112 §3.2.1).
fn origin_form(request: &mut Request<UpstreamBody>) {
    let path = request
        .uri()
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    *request.uri_mut() = Uri::from(path);
}

/// A request handed back unsent, with its absolute URI again (an HTTP/2
/// connection may take it next).
fn restored(mut request: Request<UpstreamBody>, uri: &Uri) -> Request<UpstreamBody> {
    *request.uri_mut() = uri.clone();
    *request.version_mut() = http::Version::HTTP_11;
    request
}
