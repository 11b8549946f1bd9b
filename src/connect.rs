//! How probity opens connections to the servers it calls: the providers
//! (`forward`), the span collector (`trace`) and the capture buckets
//! (`capture`).

use std::time::Duration;

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;

/// HTTPS with the web PKI roots, HTTP/2 or HTTP/1.1 as the server offers
/// through ALPN; cleartext servers get HTTP/1.1. No Nagle: small writes
/// (a request head, an SSE event) go at once.
pub(crate) fn https(connect_timeout: Duration) -> HttpsConnector<HttpConnector> {
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_webpki_roots()
        .https_or_http()
        .enable_all_versions()
        .wrap_connector(tcp(connect_timeout))
}

/// HTTPS with the system's roots, where an operator adds the CA of a
/// private MinIO or Ceph (as the clouds' own SDKs read them); the web PKI
/// roots when the system has none (a distroless image).
#[cfg(any(feature = "s3", feature = "gcs", feature = "azure"))]
pub(crate) fn https_system_roots(connect_timeout: Duration) -> HttpsConnector<HttpConnector> {
    let builder = hyper_rustls::HttpsConnectorBuilder::new();
    let builder = match builder.with_native_roots() {
        Ok(system) => system,
        Err(_) => hyper_rustls::HttpsConnectorBuilder::new().with_webpki_roots(),
    };
    builder
        .https_or_http()
        .enable_all_versions()
        .wrap_connector(tcp(connect_timeout))
}

fn tcp(connect_timeout: Duration) -> HttpConnector {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(connect_timeout));
    http
}
