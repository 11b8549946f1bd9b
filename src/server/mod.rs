//! The proxy listener and the process lifecycle: the first step of a request
//! (**`server`** → `route` → `forward`) and the last of its response.
//!
//! Accepts HTTP/1.1 and cleartext HTTP/2 (prior knowledge) on one port,
//! refuses connections beyond `max_connections` with a 503, and on shutdown
//! drains: `/readyz` turns 503, the listener closes, requests in flight
//! (streams included) finish within `drain_timeout_ms`.

mod body;
mod catch;
mod chunks;
mod descriptors;
mod drain;
mod exchange;
mod finish;
mod head;
mod held;
mod inspected;
mod judged_stream;
mod memory;
mod reload;
mod respond;
mod tunnel;

pub use reload::ConfigSource;
use reload::{Reloader, Routes};

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::{TcpListener, TcpStream};

use crate::admin;
use crate::capture::Captures;
use crate::config::Config;
use crate::error::{ProxyError, RequestError};
use crate::route::RouteTable;
use crate::telemetry;
use probity_judge::contract::SchemaCache;

/// What every request handler reads.
pub(crate) struct Shared {
    /// The route table in force (swapped whole on a reload).
    pub(crate) routes: Routes,
    pub(crate) max_request_bytes: u64,
    /// `server.body_read_timeout_ms`: the longest an inspected body may take.
    pub(crate) body_read_timeout: Duration,
    /// `server.trusted_hops`: `X-Forwarded-For` entries kept from the client.
    pub(crate) trusted_hops: usize,
    pub(crate) captures: Arc<Captures>,
    /// Compiled JSON Schemas of output contracts.
    pub(crate) schemas: SchemaCache,
    /// Inspected answers held for clients still reading them.
    pub(crate) held: Arc<held::Held>,
    /// Makes the requests' spans, when spans are exported.
    pub(crate) tracer: Option<Arc<crate::trace::Tracer>>,
    /// The open WebSocket tunnels, which drain waits for.
    tunnels: Arc<tunnel::Tunnels>,
}

/// Failures before serving: nothing is half-started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listener could not be bound.
    #[error("cannot listen on {addr} ({key}): {source}")]
    Bind {
        /// The configuration key of the address.
        key: &'static str,
        /// The address, as configured.
        addr: String,
        /// Why binding failed.
        source: std::io::Error,
    },
    /// The capture store could not be opened (its path is not one).
    #[error("{0}")]
    Capture(String),
    /// The span exporter could not be built (`[telemetry]`, `OTEL_*`).
    #[error("{0}")]
    Telemetry(String),
    /// A proxy variable (`HTTPS_PROXY`, ...) names no usable proxy.
    #[error("{0}")]
    Egress(String),
}

/// A bound, not yet serving, proxy.
pub struct Probity {
    shared: Arc<Shared>,
    reloader: Arc<Reloader>,
    /// SIGHUP, listened for from the bind on: a hangup that comes before
    /// serving must reload, not end the process (its default action).
    #[cfg(unix)]
    hangup: Option<tokio::signal::unix::Signal>,
    proxy: TcpListener,
    admin: TcpListener,
    metrics: PrometheusHandle,
    max_connections: u64,
    max_header_count: usize,
    max_header_bytes: usize,
    header_read_timeout: Duration,
    drain_timeout: Duration,
}

/// The most headers hyper's HTTP/1 parser takes unless told otherwise.
const HYPER_MAX_HEADERS: usize = 100;

/// Concurrent HTTP/2 streams on one client connection.
const MAX_STREAMS_PER_CONNECTION: u32 = 100;

impl Probity {
    /// Binds both listeners of a validated configuration; `source` reads
    /// it again on a reload.
    pub async fn bind(
        config: &Config,
        routes: RouteTable,
        metrics: PrometheusHandle,
        source: ConfigSource,
    ) -> Result<Self, StartError> {
        let server = &config.server;
        // Before anything connects out: a proxy probity cannot use must
        // stop it, not let it go direct where only the proxy gets out.
        let egress = crate::connector::proxies(|var| std::env::var(var).ok())
            .map_err(|problem| StartError::Egress(problem.to_string()))?;
        if let Some(proxies) = egress {
            tracing::info!(
                https_proxy = proxies.https.as_deref().unwrap_or("-"),
                http_proxy = proxies.http.as_deref().unwrap_or("-"),
                no_proxy = %proxies.no_proxy,
                "outbound connections go through the egress proxy (CONNECT), except to NO_PROXY"
            );
        }
        descriptors::raise_for(server.max_connections);
        let bind = |key: &'static str, addr: &str| {
            let addr = addr.to_string();
            async move {
                TcpListener::bind(&addr)
                    .await
                    .map_err(|source| StartError::Bind { key, addr, source })
            }
        };
        let proxy = bind("server.listen", &server.listen).await?;
        let admin = bind("server.admin_listen", &server.admin_listen).await?;
        if let Ok(addr) = admin.local_addr().map(|a| a.ip()) {
            // A container binds it beyond loopback for its scraper: said once
            // at start, not warned, since that is the expected setup there.
            if !addr.is_loopback() {
                tracing::info!(
                    admin_listen = %server.admin_listen,
                    "the admin listener is reachable beyond this host: /captures serves upstream \
                     response bodies; keep it on a private network, or bind it to 127.0.0.1"
                );
            }
        }
        #[cfg(unix)]
        let hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        Ok(Self {
            #[cfg(unix)]
            hangup,
            reloader: Arc::new(Reloader {
                source,
                listen: server.listen.clone(),
                admin_listen: server.admin_listen.clone(),
            }),
            shared: Arc::new(Shared {
                routes: Routes::new(routes),
                max_request_bytes: server.max_request_bytes,
                body_read_timeout: Duration::from_millis(server.body_read_timeout_ms),
                trusted_hops: usize::try_from(server.trusted_hops).unwrap_or(usize::MAX),
                captures: Captures::start(&config.capture)
                    .await
                    .map_err(|err| StartError::Capture(err.to_string()))?,
                schemas: SchemaCache::new(256),
                held: held::Held::new(
                    server.max_held_response_bytes,
                    server.max_held_share,
                    Duration::from_millis(server.send_timeout_ms),
                ),
                tracer: crate::trace::Tracer::start(&config.telemetry)
                    .map_err(|err| StartError::Telemetry(err.to_string()))?,
                tunnels: tunnel::Tunnels::new(),
            }),
            proxy,
            admin,
            metrics,
            max_connections: server.max_connections,
            max_header_count: usize::try_from(server.max_header_count).unwrap_or(usize::MAX),
            max_header_bytes: usize::try_from(server.max_header_bytes).unwrap_or(usize::MAX),
            header_read_timeout: Duration::from_millis(server.header_read_timeout_ms),
            drain_timeout: Duration::from_millis(server.drain_timeout_ms),
        })
    }

    /// How client connections are served: HTTP/1.1 and HTTP/2, with the
    /// head limits and timeouts of `[server]`.
    fn connection_builder(&self) -> Protocols {
        // The same limits whichever builder serves HTTP/1 (their types differ).
        macro_rules! http1_limits {
            ($builder:expr) => {
                $builder
                    .timer(TokioTimer::new())
                    .header_read_timeout(self.header_read_timeout)
                    // A head beyond these is answered 431 (the buffer bound
                    // holds across split reads: it is what hyper has read so far).
                    .max_buf_size(self.max_header_bytes)
                    // The upstream's own Date passes through; hyper must not add one.
                    .auto_date_header(false);
                // hyper's own bound is 100 headers, parsed into arrays left
                // uninitialised on the stack; a bound it is given makes it
                // fill two arrays of that size for every request head
                // (smallvec's from_elem: about 700 instructions a request).
                if self.max_header_count != HYPER_MAX_HEADERS {
                    $builder.max_headers(self.max_header_count);
                }
            };
        }
        let mut http1 = http1::Builder::new();
        http1_limits!(http1);
        let mut http2 = http2::Builder::new(TokioExecutor::new());
        http2
            .timer(TokioTimer::new())
            .max_header_list_size(u32::try_from(self.max_header_bytes).unwrap_or(u32::MAX))
            // One connection cannot hold unbounded streams: max_connections
            // alone would not bound the requests in flight.
            .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION);
        Protocols {
            http1,
            http2,
            header_read_timeout: self.header_read_timeout,
        }
    }

    /// Where the proxy listens (the bound port when configured as 0).
    pub fn proxy_addr(&self) -> std::io::Result<SocketAddr> {
        self.proxy.local_addr()
    }

    /// Where the admin listener listens.
    pub fn admin_addr(&self) -> std::io::Result<SocketAddr> {
        self.admin.local_addr()
    }

    /// Serves until `shutdown` resolves, then drains and returns.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let http = Arc::new(self.connection_builder());
        let ready = Arc::new(AtomicBool::new(true));
        tokio::spawn(admin_endpoints(
            self.admin,
            self.metrics,
            &self.shared,
            &self.reloader,
            ready.clone(),
        ));
        #[cfg(unix)]
        tokio::spawn(reload_on_hangup(
            self.hangup,
            self.reloader.clone(),
            self.shared.clone(),
        ));

        let drain = drain::Drain::new();
        let connections = Arc::new(memory::Connections::default());
        let refusing = Arc::new(AtomicUsize::new(0));
        tokio::spawn(memory::trim_after_bursts(connections.clone()));
        tokio::pin!(shutdown);
        loop {
            let (stream, peer) = tokio::select! {
                () = &mut shutdown => break,
                accepted = self.proxy.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(err) => {
                        // Out of file descriptors, usually: back off, don't spin.
                        tracing::warn!(error = %err, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let accepted = tokio::time::Instant::now();
            let _ = stream.set_nodelay(true);
            if connections.active.load(Ordering::Relaxed) >= self.max_connections {
                let refusal = RefusalSlot::take(&refusing, self.max_connections);
                if let Some(refusal) = refusal {
                    let by = accepted + self.header_read_timeout;
                    tokio::spawn(refuse(stream, self.max_connections, by, refusal));
                }
                // Else dropped: as many refusals are in flight as
                // connections are served, and a flood gets no more.
                continue;
            }
            let slot = ConnectionSlot::take(&connections);
            let connection = Connection {
                shared: self.shared.clone(),
                stream,
                peer,
                accepted,
                slot,
            };
            tokio::spawn(connection.serve(http.clone(), drain.watcher()));
        }

        // Drain: not ready, no new connections, in-flight requests finish.
        ready.store(false, Ordering::SeqCst);
        let deadline = tokio::time::Instant::now() + self.drain_timeout;
        drop(self.proxy);
        let in_flight = connections.active.load(Ordering::Relaxed);
        tracing::info!(connections = in_flight, "draining");
        // A tunnel left its HTTP connection at the switch: waited for apart.
        tokio::join!(
            drain_requests(drain, &connections, self.drain_timeout),
            self.shared.tunnels.drain(deadline)
        );
        // Captures of the requests just finished, within what is left.
        self.shared.captures.drain(deadline).await;
        if let Some(tracer) = &self.shared.tracer {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            tracer.flush(left).await;
        }
    }
}

/// Waits for the requests in flight, `drain_timeout` at most.
async fn drain_requests(
    drain: drain::Drain,
    connections: &memory::Connections,
    drain_timeout: Duration,
) {
    match tokio::time::timeout(drain_timeout, drain.drain()).await {
        Ok(()) => tracing::info!("drained: every request in flight completed"),
        Err(_) => tracing::warn!(
            connections = connections.active.load(Ordering::Relaxed),
            drain_timeout_ms = drain_timeout.as_millis() as u64,
            "drain timeout reached: closing the connections still open"
        ),
    }
}

/// Reloads the configuration on every SIGHUP, for the process's life.
/// The admin listener, reading what is in force now: the routes, the admin
/// token (a reload may change either), and the reload itself.
fn admin_endpoints(
    listener: TcpListener,
    metrics: PrometheusHandle,
    shared: &Arc<Shared>,
    reloader: &Arc<Reloader>,
    ready: Arc<AtomicBool>,
) -> impl Future<Output = ()> {
    let reload: admin::Reload = {
        let (reloader, shared) = (reloader.clone(), shared.clone());
        Arc::new(move || reloader.reload(&shared.routes, "admin"))
    };
    let routes: admin::RouteList = {
        let shared = shared.clone();
        Arc::new(move || shared.routes.current().summaries())
    };
    let gate: admin::Gate = {
        let shared = shared.clone();
        Arc::new(move |headers| {
            let table = shared.routes.current();
            let admin = &table.admin;
            admin
                .permits(headers)
                .map_err(|refusal| (refusal, admin.variable().to_string()))
        })
    };
    admin::serve(
        listener,
        ready,
        metrics,
        shared.captures.clone(),
        reload,
        routes,
        gate,
    )
}

#[cfg(unix)]
async fn reload_on_hangup(
    hangup: Option<tokio::signal::unix::Signal>,
    reloader: Arc<Reloader>,
    shared: Arc<Shared>,
) {
    let Some(mut hangup) = hangup else {
        tracing::warn!("cannot listen for SIGHUP: reload through POST /reload");
        return;
    };
    while hangup.recv().await.is_some() {
        // The outcome is logged and counted by the reload itself.
        let _ = reloader.reload(&shared.routes, "sighup");
    }
}

/// One accepted client connection and what its requests share.
struct Connection {
    shared: Arc<Shared>,
    stream: TcpStream,
    peer: SocketAddr,
    /// When it was accepted: its first head is due `header_read_timeout`
    /// after.
    accepted: tokio::time::Instant,
    slot: ConnectionSlot,
}

impl Connection {
    /// Serves its requests until it closes, drains, or a held answer's
    /// client is past `send_timeout_ms`.
    async fn serve(self, http: Arc<Protocols>, mut draining: drain::Draining) {
        let Self {
            shared,
            stream,
            peer,
            accepted,
            slot,
        } = self;
        let delivery = Arc::new(held::Delivery::default());
        let held = shared.held.clone();
        // A tunnel keeps the connection's slot after hyper lets it go.
        let slot = Arc::new(slot);
        // One extension a request, made once a connection.
        let arrival = Arc::new(Arrival {
            peer: head::Peer::of(peer),
            delivery: delivery.clone(),
            slot: slot.clone(),
            headed: AtomicBool::new(false),
        });
        let headed = arrival.clone();
        let service = service_fn(move |mut request: Request<Incoming>| {
            arrival.headed.store(true, Ordering::Relaxed);
            request.extensions_mut().insert(arrival.clone());
            exchange::handle(shared.clone(), request)
        });
        let due = accepted + http.header_read_timeout;
        // A connection that has sent nothing yet is closed by a drain.
        let opening = tokio::select! {
            opening = crate::opening::opening(&stream, due) => opening,
            () = draining.begun() => None,
        };
        let Some(opening) = opening else {
            return;
        };
        let io = TokioIo::new(stream);
        let served = async {
            match opening {
                crate::opening::Opening::Http1 => {
                    let connection = http.http1.serve_connection(io, service).with_upgrades();
                    // hyper times a head from its own first read, which
                    // the opening's wait preceded: the first is due from
                    // the accept.
                    tokio::select! {
                        served = draining.watch(connection) => served,
                        () = crate::opening::headed_by(due, &headed.headed) => Ok(()),
                    }
                }
                // Boxed: the rare path's larger future does not size every
                // connection's task.
                crate::opening::Opening::Http2 => {
                    let connection = http.http2.serve_connection(io, service);
                    Box::pin(draining.watch(connection)).await
                }
            }
        };
        tokio::select! {
            served = served => if let Err(err) = served {
                tracing::debug!(error = %err, "client connection ended with an error");
            },
            // Dropping the connection closes it, and its held answer's body
            // gives its share back.
            () = held.overdue(&delivery) => {}
        }
        drop(slot);
    }
}

/// What a request knows of the connection it arrived on.
struct Arrival {
    peer: head::Peer,
    /// The clock of its held answers (`send_timeout_ms`).
    delivery: Arc<held::Delivery>,
    /// Its place under `max_connections`, which a tunnel keeps.
    slot: Arc<ConnectionSlot>,
    /// Whether a request head has arrived on it.
    headed: AtomicBool,
}

/// The servers of client connections, one a protocol (`opening` tells
/// which a connection speaks).
struct Protocols {
    http1: http1::Builder,
    http2: http2::Builder<TokioExecutor>,
    /// How long a new connection may stay silent.
    header_read_timeout: Duration,
}

/// Counts a connection for `max_connections` while it lives.
struct ConnectionSlot(Arc<memory::Connections>);

impl ConnectionSlot {
    fn take(connections: &Arc<memory::Connections>) -> Self {
        connections.opened();
        Self(connections.clone())
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.0.closed();
    }
}

/// A connection being refused, counted while it is: at most as many are
/// as `max_connections` (a flood past that is closed unanswered), and each
/// is done by its head's deadline.
struct RefusalSlot(Arc<AtomicUsize>);

impl RefusalSlot {
    fn take(refusing: &Arc<AtomicUsize>, limit: u64) -> Option<Self> {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let now = refusing.fetch_add(1, Ordering::Relaxed);
        let refusal = Self(refusing.clone());
        (now < limit).then_some(refusal)
    }
}

impl Drop for RefusalSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Answers every request of a connection over the limit with 503 and
/// `Retry-After`, then closes it; one that has not sent its request by
/// `by` is closed unanswered. A reply beats a silent drop: the client
/// learns why and when to come back.
async fn refuse(stream: TcpStream, limit: u64, by: tokio::time::Instant, _refusal: RefusalSlot) {
    let service = service_fn(move |request: Request<Incoming>| async move {
        telemetry::overload_rejected(limit);
        let request_id = crate::request_id::request_id(request.headers());
        // No route is looked up for a refused connection: OpenAI's shape.
        let at = crate::error::Answering {
            route: None,
            request_id: &request_id,
            envelope: probity_judge::inspect::Envelope::Nested,
            retry_invalid: false,
            mid_stream: false,
        };
        let mut response = ProxyError::from(RequestError::Overloaded { limit })
            .respond(&at)
            .map(http_body_util::Full::new);
        response.headers_mut().insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
        Ok::<Response<_>, std::convert::Infallible>(response)
    });
    let mut http = auto::Builder::new(TokioExecutor::new());
    http.http1().keep_alive(false);
    let _ = tokio::time::timeout_at(by, http.serve_connection(TokioIo::new(stream), service)).await;
}
