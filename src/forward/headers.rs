//! Header rules at the proxy boundary, applied in both directions.

use http::header::{
    HeaderName, CONNECTION, PROXY_AUTHENTICATE, PROXY_AUTHORIZATION, TE, TRAILER,
    TRANSFER_ENCODING, UPGRADE,
};
use http::HeaderMap;

/// The request id, kept from the client or generated, sent both ways.
pub(crate) const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Removes the hop-by-hop headers of RFC 9110 §7.6.1: `Connection` and every
/// header it names, `Keep-Alive`, `Proxy-*`, `TE`, `Trailer`,
/// `Transfer-Encoding` and `Upgrade`. They describe one connection, not the
/// message, so a proxy must not pass them on.
pub fn remove_hop_by_hop(headers: &mut HeaderMap) {
    // One look at the names first: most messages carry none of these, and
    // a removal by name hashes it (nine of them were 2.5 thousand
    // instructions on every request and every answer).
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    if headers.contains_key(CONNECTION) {
        let named: Vec<HeaderName> = headers
            .get_all(CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
            .collect();
        for name in named {
            headers.remove(name);
        }
        headers.remove(CONNECTION);
    }
    for name in ALWAYS {
        headers.remove(name);
    }
    headers.remove("keep-alive");
    // `Proxy-Connection` and any other `Proxy-*` header; rare, so look first.
    if headers.keys().any(|k| k.as_str().starts_with("proxy-")) {
        let proxy: Vec<HeaderName> = headers
            .keys()
            .filter(|k| k.as_str().starts_with("proxy-"))
            .cloned()
            .collect();
        for name in proxy {
            headers.remove(name);
        }
    }
}

/// Whether `name` is one of the headers [`remove_hop_by_hop`] removes
/// whatever `Connection` says (or `Connection` itself).
fn is_hop_by_hop(name: &HeaderName) -> bool {
    name == CONNECTION
        || ALWAYS.contains(name)
        || name.as_str() == "keep-alive"
        || name.as_str().starts_with("proxy-")
}

/// The hop-by-hop headers removed by name whatever `Connection` says
/// (besides `Keep-Alive` and any `Proxy-*`).
const ALWAYS: [HeaderName; 6] = [
    TE,
    TRAILER,
    TRANSFER_ENCODING,
    UPGRADE,
    PROXY_AUTHORIZATION,
    PROXY_AUTHENTICATE,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_hop_by_hop_headers_and_those_connection_names() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("connection", "keep-alive, X-Secret-Hop"),
            ("connection", "x-other"),
            ("keep-alive", "timeout=5"),
            ("x-secret-hop", "1"),
            ("x-other", "1"),
            ("te", "trailers"),
            ("trailer", "x-checksum"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("proxy-authorization", "Basic eA=="),
            ("proxy-connection", "keep-alive"),
            ("content-type", "application/json"),
            ("authorization", "Bearer k"),
        ] {
            headers.append(name, value.parse().unwrap());
        }
        remove_hop_by_hop(&mut headers);
        let left: Vec<&str> = headers.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, ["content-type", "authorization"]);
    }

    #[test]
    fn each_hop_by_hop_header_alone_is_removed() {
        for name in [
            "connection",
            "keep-alive",
            "te",
            "trailer",
            "transfer-encoding",
            "upgrade",
            "proxy-authorization",
            "proxy-authenticate",
            "proxy-connection",
        ] {
            let mut headers = HeaderMap::new();
            headers.insert(HeaderName::from_static(name), "x".parse().unwrap());
            headers.insert("content-type", "application/json".parse().unwrap());
            remove_hop_by_hop(&mut headers);
            let left: Vec<&str> = headers.keys().map(|k| k.as_str()).collect();
            assert_eq!(left, ["content-type"], "{name}");
        }
    }
}
