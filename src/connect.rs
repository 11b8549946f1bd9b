//! How probity opens connections to the servers it calls: the providers
//! (`forward`) and the span collector (`trace`).

use std::time::Duration;

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;

/// HTTPS with the web PKI roots, HTTP/2 or HTTP/1.1 as the server offers
/// through ALPN; cleartext servers get HTTP/1.1. No Nagle: small writes
/// (a request head, an SSE event) go at once.
pub(crate) fn https(connect_timeout: Duration) -> HttpsConnector<HttpConnector> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(connect_timeout));
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_webpki_roots()
        .https_or_http()
        .enable_all_versions()
        .wrap_connector(http)
}
