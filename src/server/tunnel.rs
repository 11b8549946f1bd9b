//! WebSocket tunnels: a Realtime session (`GET …/realtime` with `Upgrade:
//! websocket`, on a route whose dialect has one) relayed between the client
//! and the upstream, frame by frame, instead of refused.
//!
//! probity answers each side's handshake itself (tokio-tungstenite over
//! hyper's upgraded connections), so that it reads whole frames: the
//! upstream's text frames are judged by `inspect::realtime` (figures nulled,
//! usage and `error` events counted); binary frames, pings, pongs and every
//! client frame pass as they are. No extension is negotiated, so frames are
//! never compressed. A close from either side is relayed to the other, a
//! reset of one closes the other with a close frame saying why, and so does
//! a frame over the route's `max_response_bytes`. The session is one
//! request: its log line and `probity_requests_total` (status 101) come
//! when it ends. Drain waits for open tunnels up to `drain_timeout_ms`,
//! then closes them (1001).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::header::{
    HeaderValue, CONNECTION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_EXTENSIONS, SEC_WEBSOCKET_KEY,
    SEC_WEBSOCKET_PROTOCOL, SEC_WEBSOCKET_VERSION, UPGRADE,
};
use http::{request, Method, Response, Version};
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::handshake::{client::generate_key, derive_accept_key};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;

use super::body::Payload;
use super::respond::respond;
use crate::context::RequestContext;
use crate::error::{ProxyError, RequestError};
use crate::forward::{self, Codings, ForwardError, Handshake, UpstreamBody};
use crate::route::Route;
use crate::telemetry::{self, Ending};
use probity_judge::inspect::realtime::{self, EventKind};

/// How long a side has to answer a close frame before its connection is
/// dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// The subprotocol a browser client carries its own key in: never passed
/// on when the route injects its key.
const KEY_PROTOCOL: &str = "openai-insecure-api-key.";

/// A tunnel whose handshakes are done, waiting for the client's 101 to go
/// out before it relays.
pub(super) struct ReadyTunnel {
    client: OnUpgrade,
    upstream: Upgraded,
    route: Arc<Route>,
    /// The client's connection slot, held for the session's life.
    slot: Option<Arc<super::ConnectionSlot>>,
}

/// The open tunnels, which drain waits for.
pub(super) struct Tunnels {
    open: AtomicUsize,
    ended: Notify,
    closing: watch::Sender<bool>,
}

impl Tunnels {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self {
            open: AtomicUsize::new(0),
            ended: Notify::new(),
            closing: watch::Sender::new(false),
        })
    }

    /// Waits for open tunnels to end until `deadline`, then closes those
    /// left (1001) and gives them [`CLOSE_GRACE`] to go.
    pub(super) async fn drain(&self, deadline: Instant) {
        if self.ended_by(deadline).await {
            return;
        }
        tracing::warn!(
            tunnels = self.open.load(Ordering::SeqCst),
            "drain timeout reached: closing the WebSocket tunnels still open"
        );
        self.closing.send_replace(true);
        self.ended_by(Instant::now() + CLOSE_GRACE).await;
    }

    /// Whether every tunnel ended by `until`.
    async fn ended_by(&self, until: Instant) -> bool {
        loop {
            // Made before the count is read: a tunnel ending in between
            // still wakes it (`notify_waiters` reaches every future made).
            let ended = self.ended.notified();
            if self.open.load(Ordering::SeqCst) == 0 {
                return true;
            }
            if tokio::time::timeout_at(until, ended).await.is_err() {
                return self.open.load(Ordering::SeqCst) == 0;
            }
        }
    }
}

/// One open tunnel, counted while it lives.
struct Open(Arc<Tunnels>);

impl Open {
    fn enter(tunnels: &Arc<Tunnels>) -> Self {
        tunnels.open.fetch_add(1, Ordering::SeqCst);
        Self(tunnels.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
        self.0.ended.notify_waiters();
    }
}

/// An upgrade a request asks for: its protocol, the client's side of the
/// switch (taken from the request before it is routed), and where the
/// tunnel to run is left for the handler.
pub(super) struct Upgrade<'a> {
    protocol: String,
    on_upgrade: Option<OnUpgrade>,
    opened: &'a mut Option<ReadyTunnel>,
}

impl<'a> Upgrade<'a> {
    pub(super) fn take(
        protocol: String,
        client: &mut request::Parts,
        opened: &'a mut Option<ReadyTunnel>,
    ) -> Self {
        Self {
            protocol,
            on_upgrade: client.extensions.remove::<OnUpgrade>(),
            opened,
        }
    }
}

/// Opens the upstream half of a tunnel for an upgrade asking `protocol`
/// on `route` (its client already admitted), and answers the client: 101
/// with the tunnel to run, or the upstream's refusal as it came. Any
/// other upgrade is refused (501), as before tunnels existed.
pub(super) async fn open(
    route: &Arc<Route>,
    client: &request::Parts,
    rest: &str,
    asked: Upgrade<'_>,
    ctx: &mut RequestContext,
) -> Result<Response<Payload>, ProxyError> {
    let Upgrade {
        protocol,
        on_upgrade,
        opened,
    } = asked;
    let tunnelled = protocol.trim().eq_ignore_ascii_case("websocket")
        && client.method == Method::GET
        && client.version == Version::HTTP_11
        && route.dialect.realtime(&ctx.upstream_path);
    if !tunnelled {
        return Err(RequestError::Upgrade {
            protocol: protocol.to_string(),
        }
        .into());
    }
    let version = client.headers.get(SEC_WEBSOCKET_VERSION);
    let Some(client_key) = client
        .headers
        .get(SEC_WEBSOCKET_KEY)
        .filter(|_| version.is_some_and(|v| v.as_bytes() == b"13"))
        .map(|key| derive_accept_key(key.as_bytes()))
    else {
        return Err(RequestError::Malformed {
            what: "a WebSocket handshake needs Sec-WebSocket-Version: 13 and a Sec-WebSocket-Key",
        }
        .into());
    };
    let key = generate_key();
    let request = handshake(route, client, rest, &key, ctx)?;
    let (upstream, io) = match shake_hands(route, request, &key, ctx).await? {
        Handshake::Switched(parts, io) => (parts, io),
        Handshake::Refused(parts, body) => {
            ctx.upstream_status = Some(parts.status);
            return Ok(respond(parts, &ctx.request_id, Payload::Whole(Some(body))));
        }
    };
    ctx.upstream_status = Some(upstream.status);
    let Some(on_upgrade) = on_upgrade else {
        return Err(ProxyError::Internal {
            what: "the client connection cannot be upgraded".into(),
        });
    };
    let chosen = upstream.headers.get(SEC_WEBSOCKET_PROTOCOL).cloned();
    let mut response = respond(upstream, &ctx.request_id, Payload::Whole(None));
    let headers = response.headers_mut();
    for name in [SEC_WEBSOCKET_EXTENSIONS, SEC_WEBSOCKET_PROTOCOL] {
        headers.remove(name);
    }
    headers.insert(UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(accept) = HeaderValue::try_from(client_key) {
        headers.insert(SEC_WEBSOCKET_ACCEPT, accept);
    }
    if let Some(chosen) = chosen {
        headers.insert(SEC_WEBSOCKET_PROTOCOL, chosen);
    }
    *opened = Some(ReadyTunnel {
        client: on_upgrade,
        upstream: io,
        route: route.clone(),
        slot: client
            .extensions
            .get::<Arc<super::Arrival>>()
            .map(|arrival| arrival.slot.clone()),
    });
    Ok(response)
}

/// Sends the upstream's handshake; the wait for its answer is the
/// upstream's time, not probity's.
async fn shake_hands(
    route: &Route,
    request: http::Request<UpstreamBody>,
    key: &str,
    ctx: &mut RequestContext,
) -> Result<Handshake, ForwardError> {
    let asked = Instant::now();
    let handshake = forward::upgrade(&route.upstream, request, key).await;
    ctx.waited.upstream += asked.elapsed();
    handshake
}

/// The upstream's handshake: the client's request as any other is
/// forwarded (credential injected, the client's removed), with probity's
/// own key and no extension.
fn handshake(
    route: &Route,
    client: &request::Parts,
    rest: &str,
    key: &str,
    ctx: &RequestContext,
) -> Result<http::Request<UpstreamBody>, ProxyError> {
    let mut request = forward::upstream_request(
        &route.upstream,
        (client, rest),
        Bytes::new().into(),
        Some(Codings::NONE),
        &ctx.request_id,
    )
    .map_err(|err| ProxyError::Internal {
        what: format!("cannot build the upstream handshake ({err})"),
    })?;
    let headers = request.headers_mut();
    headers.remove(SEC_WEBSOCKET_EXTENSIONS);
    headers.remove(http::header::ACCEPT_ENCODING);
    if route.upstream.credential.is_some() {
        strip_key_protocol(headers);
    }
    let set = [
        (UPGRADE, "websocket"),
        (CONNECTION, "Upgrade"),
        (SEC_WEBSOCKET_VERSION, "13"),
    ];
    for (name, value) in set {
        headers.insert(name, HeaderValue::from_static(value));
    }
    if let Ok(key) = HeaderValue::try_from(key) {
        headers.insert(SEC_WEBSOCKET_KEY, key);
    }
    Ok(request)
}

/// Removes the subprotocol a browser client's own key rides in.
fn strip_key_protocol(headers: &mut http::HeaderMap) {
    let offered: Vec<String> = headers
        .get_all(SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty() && !p.starts_with(KEY_PROTOCOL))
        .map(str::to_string)
        .collect();
    headers.remove(SEC_WEBSOCKET_PROTOCOL);
    if let Ok(kept) = HeaderValue::try_from(offered.join(", ")) {
        if !offered.is_empty() {
            headers.insert(SEC_WEBSOCKET_PROTOCOL, kept);
        }
    }
}

impl ReadyTunnel {
    /// Relays the session once the client's connection has switched, and
    /// ends the request when it ends.
    pub(super) async fn run(self, mut ctx: RequestContext, tunnels: Arc<Tunnels>) {
        ctx.waited.session = true;
        let _open = Open::enter(&tunnels);
        let _slot = self.slot;
        let Ok(client) = self.client.await else {
            telemetry::request_finished(&ctx, 0, Ending::ClientGone);
            return;
        };
        let limit =
            usize::try_from(self.route.upstream.limits.max_response_bytes).unwrap_or(usize::MAX);
        let config = WebSocketConfig::default()
            .max_message_size(Some(limit))
            .max_frame_size(Some(limit));
        let mut relay = TunnelEnds {
            client: WebSocketStream::from_raw_socket(
                TokioIo::new(client),
                Role::Server,
                Some(config),
            )
            .await,
            upstream: WebSocketStream::from_raw_socket(
                TokioIo::new(self.upstream),
                Role::Client,
                Some(config),
            )
            .await,
            route: self.route,
            ctx: &ctx,
            bytes: 0,
        };
        let mut closing = tunnels.closing.subscribe();
        let ending = if *closing.borrow_and_update() {
            relay.close_both(CloseCode::Away, SHUTTING_DOWN).await;
            Ending::Cut("drain")
        } else {
            relay.run(&mut closing).await
        };
        let bytes = relay.bytes;
        telemetry::request_finished(&ctx, bytes, ending);
    }
}

const SHUTTING_DOWN: &str = "probity is shutting down";

type Socket = WebSocketStream<TokioIo<Upgraded>>;

/// Both sides of an open tunnel.
struct TunnelEnds<'r> {
    client: Socket,
    upstream: Socket,
    route: Arc<Route>,
    ctx: &'r RequestContext,
    /// Payload bytes sent to the client.
    bytes: u64,
}

/// What one step of the relay came to.
enum Step {
    Go,
    Ended(Ending),
}

impl TunnelEnds<'_> {
    async fn run(&mut self, closing: &mut watch::Receiver<bool>) -> Ending {
        loop {
            let step = tokio::select! {
                message = self.client.next() => self.relay_client(message).await,
                message = self.upstream.next() => self.relay_upstream(message).await,
                Ok(()) = closing.changed() => {
                    self.close_both(CloseCode::Away, SHUTTING_DOWN).await;
                    Step::Ended(Ending::Cut("drain"))
                }
            };
            if let Step::Ended(ending) = step {
                return ending;
            }
        }
    }

    /// A client frame passes as it is; a close is relayed and the
    /// upstream's answer awaited.
    async fn relay_client(&mut self, message: Option<Result<Message, WsError>>) -> Step {
        match message {
            Some(Ok(Message::Close(frame))) => {
                let _ = self.client.flush().await;
                let _ = self.upstream.send(Message::Close(frame)).await;
                settle(&mut self.upstream).await;
                Step::Ended(Ending::Complete)
            }
            Some(Ok(message)) => match self.upstream.send(message).await {
                Ok(()) => Step::Go,
                Err(err) => self.upstream_broke(&err).await,
            },
            Some(Err(err)) if too_large(&err) => {
                let reason = self.too_large_reason("a client");
                self.close_both(CloseCode::Size, &reason).await;
                Step::Ended(Ending::Cut("too_large"))
            }
            // Gone without a close frame (reset), or closed: the upstream
            // hears it from probity.
            Some(Err(_)) | None => {
                let _ = self
                    .upstream
                    .send(close(CloseCode::Away, "the client went away"))
                    .await;
                settle(&mut self.upstream).await;
                Step::Ended(Ending::ClientGone)
            }
        }
    }

    /// An upstream frame: a text frame judged (and rewritten when a figure
    /// is malformed), any other as it is; a close relayed.
    async fn relay_upstream(&mut self, message: Option<Result<Message, WsError>>) -> Step {
        let message = match message {
            Some(Ok(Message::Text(text))) => Message::Text(self.judged(text)),
            Some(Ok(Message::Close(frame))) => {
                let _ = self.upstream.flush().await;
                let _ = self.client.send(Message::Close(frame)).await;
                settle(&mut self.client).await;
                return Step::Ended(Ending::Complete);
            }
            Some(Ok(message)) => message,
            Some(Err(err)) if too_large(&err) => {
                let limit = self.route.upstream.limits.max_response_bytes;
                let fault = ForwardError::TooLarge {
                    upstream: self.route.upstream.display.clone(),
                    limit,
                };
                telemetry::upstream_fault(&self.route.name, &self.ctx.request_id, &fault, true);
                let reason = self.too_large_reason("the upstream");
                self.close_both(CloseCode::Size, &reason).await;
                return Step::Ended(Ending::Cut(fault.kind()));
            }
            Some(Err(err)) => return self.upstream_broke(&err).await,
            None => {
                let err = WsError::ConnectionClosed;
                return self.upstream_broke(&err).await;
            }
        };
        let len = message.len() as u64;
        match self.client.send(message).await {
            Ok(()) => {
                self.bytes += len;
                Step::Go
            }
            Err(_) => {
                let _ = self
                    .upstream
                    .send(close(CloseCode::Away, "the client went away"))
                    .await;
                settle(&mut self.upstream).await;
                Step::Ended(Ending::ClientGone)
            }
        }
    }

    /// The upstream's connection broke (a reset, no close frame): counted,
    /// and the client told with a close frame.
    async fn upstream_broke(&mut self, err: &WsError) -> Step {
        let fault = ForwardError::Reset {
            upstream: self.route.upstream.display.clone(),
            cause: err.to_string(),
        };
        telemetry::upstream_fault(&self.route.name, &self.ctx.request_id, &fault, true);
        let _ = self
            .client
            .send(close(
                CloseCode::Error,
                "probity: the upstream connection was reset",
            ))
            .await;
        settle(&mut self.client).await;
        Step::Ended(Ending::Cut(fault.kind()))
    }

    /// A server text frame, judged: figures nulled, usage and errors counted.
    fn judged(
        &self,
        text: tokio_tungstenite::tungstenite::Utf8Bytes,
    ) -> tokio_tungstenite::tungstenite::Utf8Bytes {
        let frame = realtime::judge_server_text(text.as_bytes(), self.route.convention);
        let route = &self.route.name;
        match frame.kind {
            EventKind::Error => telemetry::realtime_error(route, &self.ctx.request_id),
            EventKind::ResponseDone => {
                telemetry::tokens(route, &frame.findings.tokens);
                if !frame.findings.malformed.is_empty() {
                    telemetry::figures_normalized(
                        route,
                        &self.ctx.request_id,
                        &frame.findings.malformed,
                    );
                }
                if !frame.findings.contradicted.is_empty() {
                    telemetry::figures_contradicted(
                        route,
                        &self.ctx.request_id,
                        &frame.findings.contradicted,
                    );
                }
            }
            EventKind::Other => {}
        }
        match frame.rewritten.map(String::from_utf8) {
            Some(Ok(rewritten)) => rewritten.into(),
            _ => text,
        }
    }

    fn too_large_reason(&self, from: &str) -> String {
        format!(
            "probity: {from} sent a frame over max_response_bytes ({} bytes)",
            self.route.upstream.limits.max_response_bytes
        )
    }

    /// Closes both sides with `code` and `reason`, each given its grace.
    async fn close_both(&mut self, code: CloseCode, reason: &str) {
        let _ = self.client.send(close(code, reason)).await;
        let _ = self.upstream.send(close(code, reason)).await;
        tokio::join!(settle(&mut self.client), settle(&mut self.upstream));
    }
}

fn close(code: CloseCode, reason: &str) -> Message {
    Message::Close(Some(CloseFrame {
        code,
        reason: reason.to_string().into(),
    }))
}

fn too_large(err: &WsError) -> bool {
    matches!(err, WsError::Capacity(_))
}

/// Reads what a side still sends after a close frame (its own close
/// answering ours), for [`CLOSE_GRACE`] at most, then lets it go.
async fn settle(socket: &mut Socket) {
    let _ = tokio::time::timeout(CLOSE_GRACE, async {
        while let Some(Ok(_)) = socket.next().await {}
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_subprotocol_is_never_passed_on() {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static(
                "realtime, openai-insecure-api-key.sk-x, openai-beta.realtime-v1",
            ),
        );
        strip_key_protocol(&mut headers);
        assert_eq!(
            headers.get(SEC_WEBSOCKET_PROTOCOL).unwrap(),
            "realtime, openai-beta.realtime-v1"
        );
        let mut headers = http::HeaderMap::new();
        headers.insert(
            SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static("openai-insecure-api-key.sk-x"),
        );
        strip_key_protocol(&mut headers);
        assert!(headers.get(SEC_WEBSOCKET_PROTOCOL).is_none());
    }
}
