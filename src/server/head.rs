//! What a request head must be before any of it is forwarded, and what of
//! it is never forwarded.
//!
//! hyper already refuses a `Transfer-Encoding` on HTTP/1.0, `chunked` not
//! last, a space before a colon, control characters and conflicting
//! `Content-Length`s. What it lets through but a server behind probity
//! could read differently (RFC 9112 §6.1, §3.2) is refused here with a 400,
//! before anything is sent upstream: more than one `Transfer-Encoding`
//! line, one that is not exactly `chunked`, and a request without exactly
//! one `Host`. The connection is then closed. A protocol upgrade is
//! returned to the caller, which tunnels a Realtime WebSocket and refuses
//! every other (its bytes after the switch would pass unchecked).

use std::net::SocketAddr;

use http::header::{HeaderName, HeaderValue, CONNECTION, HOST, TRANSFER_ENCODING, UPGRADE};
use http::{request, HeaderMap, Version};

use crate::error::RequestError;

/// `X-Forwarded-For`: the chain of client addresses.
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The address of the client connection a request came on, and its text
/// as an `X-Forwarded-For` entry, written once for all the connection's
/// requests (formatting it took 2 % of a passthrough request's CPU).
#[derive(Debug, Clone)]
pub(super) struct Peer {
    addr: SocketAddr,
    forwarded: Option<HeaderValue>,
}

impl Peer {
    pub(super) fn of(addr: SocketAddr) -> Self {
        // The address's own text becomes the value, not a copy of it.
        let forwarded = HeaderValue::from_maybe_shared(bytes::Bytes::from(addr.ip().to_string()));
        Self {
            addr,
            forwarded: forwarded.ok(),
        }
    }
}

/// Refuses a head whose framing or target is ambiguous; returns the
/// protocol an upgrade asks for, if it asks one.
pub(super) fn check(parts: &request::Parts) -> Result<Option<String>, RequestError> {
    let hosts = parts.headers.get_all(HOST).iter().count();
    let needs_host = parts.version == Version::HTTP_11;
    if hosts > 1 || (needs_host && hosts == 0) {
        return Err(RequestError::Malformed {
            what: "an HTTP/1.1 request needs exactly one Host header",
        });
    }
    // `Upgrade: h2c` (what `curl --http2` sends over cleartext) may be
    // ignored, RFC 9113 §3.1: the answer stays HTTP/1.1. (An `Upgrade` that
    // `Connection` does not name asks for nothing: it is dropped as
    // hop-by-hop.)
    let asks_upgrade = parts
        .headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("upgrade"));
    let upgrade = parts
        .headers
        .get(UPGRADE)
        .filter(|_| asks_upgrade)
        .map(|upgrade| String::from_utf8_lossy(upgrade.as_bytes()).into_owned())
        .filter(|protocol| !protocol.trim().eq_ignore_ascii_case("h2c"));
    let mut encodings = parts.headers.get_all(TRANSFER_ENCODING).iter();
    if let Some(first) = encodings.next() {
        let chunked = first
            .to_str()
            .is_ok_and(|v| v.trim().eq_ignore_ascii_case("chunked"));
        if encodings.next().is_some() || !chunked {
            return Err(RequestError::Malformed {
                what: "Transfer-Encoding must be one line reading `chunked`",
            });
        }
    }
    Ok(upgrade)
}

/// Removes what must never reach an upstream, and states who the client
/// is:
/// - names with `_` (some servers read `x_real_ip` as `x-real-ip`, so a
///   client could forge a header a proxy in front had set; nginx drops
///   them too);
/// - probity's own `probity-*` headers (they describe probity's answers:
///   a client's copy is never trusted or passed on);
/// - `X-Forwarded-For`: the last `trusted_hops` addresses the client sent
///   (added by proxies in front of probity that the operator trusts), then
///   the peer's; anything further left could be forged.
pub(super) fn clean(headers: &mut HeaderMap, peer: Option<&Peer>, trusted_hops: usize) {
    let foreign = |name: &HeaderName| {
        let name = name.as_str();
        name.contains('_') || name.starts_with("probity-")
    };
    if headers.keys().any(foreign) {
        let names: Vec<HeaderName> = headers.keys().filter(|n| foreign(n)).cloned().collect();
        for name in names {
            headers.remove(name);
        }
    }
    // A credential is kept out of debug output and, to an HTTP/2 upstream,
    // out of HPACK's tables (RFC 7541 §7.1.3).
    for name in probity_judge::inspect::credential_headers() {
        if let http::header::Entry::Occupied(mut entry) = headers.entry(name) {
            for value in entry.iter_mut() {
                value.set_sensitive(true);
            }
        }
    }
    if !headers.contains_key(X_FORWARDED_FOR) {
        // The usual case: the client is the first hop.
        if let Some(value) = peer.and_then(|peer| peer.forwarded.clone()) {
            headers.insert(X_FORWARDED_FOR, value);
        }
        return;
    }
    let sent: Vec<String> = headers
        .get_all(X_FORWARDED_FOR)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|hop| hop.trim().to_string())
        .filter(|hop| !hop.is_empty())
        .collect();
    headers.remove(X_FORWARDED_FOR);
    let mut chain: Vec<String> = sent
        .get(sent.len().saturating_sub(trusted_hops)..)
        .unwrap_or_default()
        .to_vec();
    if let Some(peer) = peer {
        chain.push(peer.addr.ip().to_string());
    }
    if let Ok(value) = HeaderValue::from_str(&chain.join(", ")) {
        if !chain.is_empty() {
            headers.insert(X_FORWARDED_FOR, value);
        }
    }
}

/// The client's address, as a share of held answers is keyed: the socket
/// peer (unforgeable), or, with `trusted_hops` set, the leftmost address
/// of the `X-Forwarded-For` entries those hops added (what the outermost
/// trusted proxy saw). An entry that is not an address counts as absent.
pub(super) fn client_address(
    headers: &HeaderMap,
    peer: Option<&Peer>,
    trusted_hops: usize,
) -> Option<std::net::IpAddr> {
    let peer = peer.map(|peer| peer.addr.ip());
    if trusted_hops == 0 {
        return peer;
    }
    let sent: Vec<&str> = headers
        .get_all(X_FORWARDED_FOR)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|hop| !hop.is_empty())
        .collect();
    let first_trusted = sent.len().saturating_sub(trusted_hops);
    sent.get(first_trusted)
        .and_then(|hop| hop.parse().ok())
        .or(peer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forwarded(sent: &[&str], trusted_hops: usize) -> Option<String> {
        let mut headers = HeaderMap::new();
        for value in sent {
            headers.append(X_FORWARDED_FOR, value.parse().unwrap());
        }
        let peer = Peer::of("10.0.0.7:5555".parse().unwrap());
        clean(&mut headers, Some(&peer), trusted_hops);
        headers
            .get(X_FORWARDED_FOR)
            .map(|v| v.to_str().unwrap().to_string())
    }

    #[test]
    fn a_share_is_keyed_by_the_peer_unless_hops_are_trusted() {
        let address = |sent: &[&str], trusted_hops: usize| {
            let mut headers = HeaderMap::new();
            for value in sent {
                headers.append(X_FORWARDED_FOR, value.parse().unwrap());
            }
            let peer = Peer::of("10.0.0.7:5555".parse().unwrap());
            client_address(&headers, Some(&peer), trusted_hops)
                .unwrap()
                .to_string()
        };
        assert_eq!(address(&["6.6.6.6"], 0), "10.0.0.7");
        assert_eq!(address(&[], 1), "10.0.0.7");
        assert_eq!(address(&["6.6.6.6, 1.2.3.4"], 1), "1.2.3.4");
        assert_eq!(address(&["6.6.6.6", "1.2.3.4, 10.0.0.1"], 2), "1.2.3.4");
        assert_eq!(address(&["1.2.3.4"], 3), "1.2.3.4");
        assert_eq!(address(&["unknown"], 1), "10.0.0.7");
    }

    #[test]
    fn only_trusted_hops_of_a_forwarded_chain_are_kept() {
        assert_eq!(forwarded(&[], 0).as_deref(), Some("10.0.0.7"));
        assert_eq!(forwarded(&["6.6.6.6"], 0).as_deref(), Some("10.0.0.7"));
        assert_eq!(
            forwarded(&["6.6.6.6, 1.1.1.1", "2.2.2.2"], 2).as_deref(),
            Some("1.1.1.1, 2.2.2.2, 10.0.0.7")
        );
        assert_eq!(
            forwarded(&["1.1.1.1"], 5).as_deref(),
            Some("1.1.1.1, 10.0.0.7")
        );
    }

    #[test]
    fn underscores_and_probity_headers_never_pass() {
        let mut headers = HeaderMap::new();
        for name in [
            "x_real_ip",
            "transfer_encoding",
            "probity-capture",
            "probity-normalized",
        ] {
            headers.insert(HeaderName::from_static(name), "1".parse().unwrap());
        }
        headers.insert("x-real-ip", "1.2.3.4".parse().unwrap());
        clean(&mut headers, None, 0);
        let left: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["x-real-ip"]);
    }
}
