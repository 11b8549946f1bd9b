//! The upstream half of a WebSocket tunnel (`server::tunnel`): the
//! handshake sent to the upstream over probity's connector (TLS, the egress
//! proxy), HTTP/1.1 alone, and its answer: the switched connection, or the
//! refusal to relay as it is.

use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderValue, CONNECTION, SEC_WEBSOCKET_ACCEPT, UPGRADE};
use http::{response, Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::upgrade::Upgraded;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::time::{timeout_at, Instant};

use super::{classify_legacy, reset, ForwardError, HttpClient, Upstream, UpstreamBody};

/// The upstream's answer to a handshake.
pub(crate) enum Handshake {
    /// `101 Switching Protocols`: its head, and the connection now speaking
    /// WebSocket.
    Switched(response::Parts, Upgraded),
    /// Any other answer (a 401, a 404), read whole within
    /// `max_response_bytes`: the client gets it as it came.
    Refused(response::Parts, Bytes),
}

/// The client of a route's tunnels, made on the first one: no pool (an
/// upgraded connection is never reused) and HTTP/1.1 alone.
pub(super) fn tunnel_client(cell: &OnceLock<HttpClient>, connect_timeout: Duration) -> &HttpClient {
    cell.get_or_init(|| {
        Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_max_idle_per_host(0)
            .build(crate::connector::https_http1(connect_timeout))
    })
}

/// Sends `request` (a WebSocket handshake whose `Sec-WebSocket-Key` is
/// `key`) and waits for the answer within `timeout_ms`. A 101 whose
/// `Sec-WebSocket-Accept` does not answer `key` is no WebSocket server's.
pub(crate) async fn upgrade(
    upstream: &Upstream,
    request: Request<UpstreamBody>,
    key: &str,
) -> Result<Handshake, ForwardError> {
    let limits = upstream.limits;
    let deadline = Instant::now() + limits.timeout;
    let timeout = |waited_for| ForwardError::Timeout {
        upstream: upstream.display.clone(),
        waited_for,
        after: limits.timeout,
        key: "timeout_ms",
    };
    let client = tunnel_client(&upstream.tunnels, upstream.connect_timeout);
    let mut response = match timeout_at(deadline, client.request(request)).await {
        Err(_) => return Err(timeout("response")),
        Ok(Err(err)) => return Err(classify_legacy(upstream, &err)),
        Ok(Ok(response)) => response,
    };
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
        let headers = response.headers();
        let websocket = headers
            .get(UPGRADE)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"websocket"));
        let upgraded = headers
            .get_all(CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
        if !websocket
            || !upgraded
            || headers.get(SEC_WEBSOCKET_ACCEPT)
                != Some(&HeaderValue::from_str(&accept).unwrap_or(HeaderValue::from_static("-")))
        {
            return Err(ForwardError::Reset {
                upstream: upstream.display.clone(),
                cause: "its 101 answer is not a WebSocket handshake's (Upgrade, Connection or \
                        Sec-WebSocket-Accept)"
                    .into(),
            });
        }
        let switched = hyper::upgrade::on(&mut response);
        let (parts, _) = response.into_parts();
        return match timeout_at(deadline, switched).await {
            Err(_) => Err(timeout("switched connection")),
            Ok(Err(err)) => Err(reset(upstream, &err)),
            Ok(Ok(io)) => Ok(Handshake::Switched(parts, io)),
        };
    }
    let (parts, body) = response.into_parts();
    let limit = usize::try_from(limits.max_response_bytes).unwrap_or(usize::MAX);
    match timeout_at(deadline, Limited::new(body, limit).collect()).await {
        Err(_) => Err(timeout("complete response")),
        Ok(Ok(collected)) => Ok(Handshake::Refused(parts, collected.to_bytes())),
        Ok(Err(err)) if err.is::<http_body_util::LengthLimitError>() => {
            Err(ForwardError::TooLarge {
                upstream: upstream.display.clone(),
                limit: limits.max_response_bytes,
            })
        }
        Ok(Err(err)) => Err(ForwardError::Reset {
            upstream: upstream.display.clone(),
            cause: err.to_string(),
        }),
    }
}
