//! How probity opens connections to the servers it calls: the providers
//! (`forward`), the span collector (`trace`) and the capture buckets
//! (`capture`), directly or through the egress proxy the environment names
//! (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`, or lower-case).
//!
//! Through a proxy every destination, `http://` included, is reached by a
//! CONNECT tunnel, TLS inside it end to end. Not the absolute-form request
//! for `http://`: that needs `Proxy-Authorization` on every request the
//! three clients send, and sends the request itself to the proxy; a tunnel
//! carries the proxy's credentials in its CONNECT head only, and every
//! request goes out as it would directly. The cost: a proxy that allows
//! CONNECT to port 443 only (Squid's default) refuses an `http://`
//! destination on another port, which NO_PROXY then names.

use std::future::Future;
use std::pin::Pin;
use std::sync::LazyLock;
use std::task::{Context, Poll};
use std::time::Duration;

use http::uri::{Authority, Scheme};
use http::{HeaderValue, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tower_service::Service;

/// The connector of every client probity has: TLS (or cleartext) over
/// [`Egress`].
pub(crate) type Connector = HttpsConnector<Egress>;

/// The environment's proxy rules, read once: a running process's
/// environment does not change, so a reload keeps them.
static PROXIES: LazyLock<Matcher> = LazyLock::new(Matcher::from_env);

/// The variables the matcher reads, upper case first (its precedence, as
/// curl's).
const VARIABLES: [(&str, &str); 3] = [
    ("HTTPS_PROXY", "https_proxy"),
    ("HTTP_PROXY", "http_proxy"),
    ("ALL_PROXY", "all_proxy"),
];

/// HTTPS with the web PKI roots, HTTP/2 or HTTP/1.1 as the server offers
/// through ALPN; cleartext servers get HTTP/1.1. No Nagle: small writes
/// (a request head, an SSE event) go at once.
pub(crate) fn https(connect_timeout: Duration) -> Connector {
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_webpki_roots()
        .https_or_http()
        .enable_all_versions()
        .wrap_connector(Egress::new(connect_timeout))
}

/// As [`https`], HTTP/1.1 alone: a WebSocket handshake is an HTTP/1.1
/// upgrade, which an HTTP/2 connection (what ALPN would pick at a hosted
/// provider) cannot carry.
pub(crate) fn https_http1(connect_timeout: Duration) -> Connector {
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_webpki_roots()
        .https_or_http()
        .enable_http1()
        .wrap_connector(Egress::new(connect_timeout))
}

/// HTTPS with the system's roots, where an operator adds the CA of a
/// private MinIO or Ceph (as the clouds' own SDKs read them); the web PKI
/// roots when the system has none (a distroless image).
#[cfg(any(feature = "s3", feature = "gcs", feature = "azure"))]
pub(crate) fn https_system_roots(connect_timeout: Duration) -> Connector {
    let builder = hyper_rustls::HttpsConnectorBuilder::new();
    let builder = match builder.with_native_roots() {
        Ok(system) => system,
        Err(_) => hyper_rustls::HttpsConnectorBuilder::new().with_webpki_roots(),
    };
    builder
        .https_or_http()
        .enable_all_versions()
        .wrap_connector(Egress::new(connect_timeout))
}

/// What start-up says of the egress proxy: `None` when none is set.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Proxies {
    /// The proxy of `https://` destinations, without its credentials.
    pub(crate) https: Option<String>,
    /// The proxy of `http://` destinations, likewise.
    pub(crate) http: Option<String>,
    /// `NO_PROXY` as set (host names and networks, never a secret).
    pub(crate) no_proxy: String,
}

/// A proxy variable probity cannot use: refused at start rather than
/// silently going direct in a network that only lets the proxy out.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum ProxyProblem {
    // The value is not shown: it may hold a password.
    #[error("{variable} is not a proxy URL (http://host:port, or http://user:password@host:port)")]
    NotUrl { variable: &'static str },
    #[error(
        "{variable} names a {scheme}:// proxy; probity tunnels through an http:// proxy \
         (CONNECT) only: name one, or unset {variable}"
    )]
    Scheme {
        variable: &'static str,
        scheme: String,
    },
}

/// Checks the proxy variables the way the matcher will read them, through
/// `var` (the environment).
pub(crate) fn proxies(
    var: impl Fn(&str) -> Option<String>,
) -> Result<Option<Proxies>, ProxyProblem> {
    // Under CGI the matcher ignores them all (`HTTP_PROXY` may then be a
    // request's `Proxy:` header): so does this.
    if var("REQUEST_METHOD").is_some() {
        return Ok(None);
    }
    let mut found: [Option<String>; 3] = [None, None, None];
    for ((upper, lower), slot) in VARIABLES.into_iter().zip(found.iter_mut()) {
        let (variable, value) = match (var(upper), var(lower)) {
            (Some(value), _) => (upper, value),
            (None, Some(value)) => (lower, value),
            (None, None) => continue,
        };
        if value.trim().is_empty() {
            continue;
        }
        *slot = Some(shown(variable, &value)?);
    }
    let [https, http, all] = found;
    let https = https.or_else(|| all.clone());
    let http = http.or(all);
    if https.is_none() && http.is_none() {
        return Ok(None);
    }
    let no_proxy = var("NO_PROXY")
        .or_else(|| var("no_proxy"))
        .unwrap_or_default();
    Ok(Some(Proxies {
        https,
        http,
        no_proxy,
    }))
}

/// A proxy URL as logs and errors show it: scheme, host and port, never
/// the `user:password@` before them.
fn shown(variable: &'static str, value: &str) -> Result<String, ProxyProblem> {
    let uri: Uri = value
        .trim()
        .parse()
        .map_err(|_| ProxyProblem::NotUrl { variable })?;
    let authority = uri.authority().ok_or(ProxyProblem::NotUrl { variable })?;
    // The matcher takes a bare `host:port` as http://.
    let scheme = uri.scheme_str().unwrap_or("http");
    if scheme != "http" {
        return Err(ProxyProblem::Scheme {
            variable,
            scheme: scheme.to_string(),
        });
    }
    Ok(without_userinfo(authority))
}

fn without_userinfo(authority: &Authority) -> String {
    let host_port = authority
        .as_str()
        .rsplit_once('@')
        .map_or(authority.as_str(), |(_, host_port)| host_port);
    format!("http://{host_port}")
}

/// TCP to the destination, or a CONNECT tunnel to it through the proxy
/// the environment names for its scheme (hyper-util's matcher: curl's
/// rules, NO_PROXY included; loopback is not exempt unless NO_PROXY says).
#[derive(Clone)]
pub(crate) struct Egress {
    tcp: HttpConnector,
    connect_timeout: Duration,
}

impl std::fmt::Debug for Egress {
    // The proxy's credentials live in the matcher: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Egress")
            .field("connect_timeout", &self.connect_timeout)
            .finish_non_exhaustive()
    }
}

impl Egress {
    fn new(connect_timeout: Duration) -> Self {
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        tcp.set_connect_timeout(Some(connect_timeout));
        Self {
            tcp,
            connect_timeout,
        }
    }
}

/// Why no connection to a destination opened. A proxy's failure is its own
/// message, with no source: the error table shows a connector error's
/// innermost cause, and this one must name the proxy and what to check.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EgressError {
    #[error(transparent)]
    Direct(Box<dyn std::error::Error + Send + Sync>),
    #[error("{0}")]
    Proxy(String),
}

impl Service<Uri> for Egress {
    type Response = TokioIo<TcpStream>;
    type Error = EgressError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, EgressError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), EgressError>> {
        self.tcp
            .poll_ready(cx)
            .map_err(|err| EgressError::Direct(err.into()))
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let Some(proxy) = PROXIES.intercept(&dst) else {
            let connecting = self.tcp.call(dst);
            return Box::pin(async move {
                connecting
                    .await
                    .map_err(|err| EgressError::Direct(err.into()))
            });
        };
        let shown = proxy
            .uri()
            .authority()
            .map_or_else(|| "http://?".to_string(), without_userinfo);
        let variable = if dst.scheme() == Some(&Scheme::HTTPS) {
            "HTTPS_PROXY"
        } else {
            "HTTP_PROXY"
        };
        let connecting = self.tcp.call(proxy.uri().clone());
        let credentials = proxy.basic_auth().cloned();
        let target = target(&dst);
        let timeout = self.connect_timeout;
        Box::pin(async move {
            let failed = |what: String| {
                EgressError::Proxy(format!("the egress proxy {shown} ({variable}) {what}"))
            };
            let Some((authority, host)) = target else {
                return Err(failed("has no destination host to tunnel to".into()));
            };
            let opening = async {
                let stream = connecting.await.map_err(|err| {
                    format!(
                        "cannot be reached ({}): check {variable}, or list {host} in NO_PROXY",
                        innermost(&err)
                    )
                })?;
                connect(stream.into_inner(), &authority, credentials.as_ref())
                    .await
                    .map_err(|refusal| refusal.advice(&authority, &host))
            };
            // connect_timeout_ms bounds the connection to the destination,
            // whether direct or through the proxy (TLS excluded, as direct).
            match tokio::time::timeout(timeout, opening).await {
                Ok(Ok(stream)) => Ok(TokioIo::new(stream)),
                Ok(Err(what)) => Err(failed(what)),
                Err(_) => Err(failed(format!(
                    "did not open a tunnel to {authority} within the connect timeout \
                     ({} ms): check the proxy, or list {host} in NO_PROXY",
                    timeout.as_millis()
                ))),
            }
        })
    }
}

/// The CONNECT target (the destination's `host:port`, the port named even
/// when the URI leaves it implicit) and its host, for the NO_PROXY advice.
fn target(dst: &Uri) -> Option<(String, String)> {
    let host = dst.host()?;
    let port = dst
        .port_u16()
        .unwrap_or(if dst.scheme() == Some(&Scheme::HTTP) {
            80
        } else {
            443
        });
    Some((format!("{host}:{port}"), host.to_string()))
}

/// The longest answer head a proxy may give a CONNECT.
const MAX_CONNECT_HEAD: usize = 8 * 1024;

/// Why a proxy gave no tunnel.
#[derive(Debug, PartialEq, Eq)]
enum Refusal {
    /// It answered with this status line's code and reason.
    Status(u16, String),
    /// It closed the connection, or answered what is not HTTP.
    Broken(String),
}

impl Refusal {
    /// What went wrong, then what to check.
    fn advice(&self, authority: &str, host: &str) -> String {
        match self {
            Refusal::Status(407, reason) => format!(
                "asked for credentials (407 {reason}) to open a tunnel to {authority}: put \
                 the right user:password in the proxy URL (http://user:password@host:port)"
            ),
            Refusal::Status(code, reason) => format!(
                "refused a tunnel (CONNECT) to {authority} with {code} {reason}: check that the \
                 proxy allows CONNECT to this host and port, or list {host} in NO_PROXY"
            ),
            Refusal::Broken(why) => {
                format!("broke off the tunnel to {authority} ({why}): check the proxy's logs")
            }
        }
    }
}

/// Asks the proxy on `stream` for a tunnel to `authority`.
///
/// Not hyper-util's `Tunnel`: its error type is not exported (0.1.21), so
/// a 407 and a 403 could be told apart only by their text, and it names
/// no status for any other refusal, where the message must say what to
/// check. The answer head is read a byte at a time: nothing past it (the
/// destination's first TLS bytes) may be consumed.
async fn connect(
    mut stream: TcpStream,
    authority: &str,
    credentials: Option<&HeaderValue>,
) -> Result<TcpStream, Refusal> {
    let broken = |err: std::io::Error| Refusal::Broken(innermost(&err));
    let mut head = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n").into_bytes();
    if let Some(credentials) = credentials {
        head.extend_from_slice(b"Proxy-Authorization: ");
        head.extend_from_slice(credentials.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    stream.write_all(&head).await.map_err(broken)?;
    drop(head);

    let mut answer = Vec::with_capacity(128);
    let mut byte = [0u8; 1];
    while !answer.ends_with(b"\r\n\r\n") {
        if answer.len() >= MAX_CONNECT_HEAD {
            return Err(Refusal::Broken(format!(
                "an answer head over {MAX_CONNECT_HEAD} bytes"
            )));
        }
        match stream.read(&mut byte).await.map_err(broken)? {
            0 => {
                return Err(Refusal::Broken(
                    "it closed the connection before answering the CONNECT".into(),
                ))
            }
            _ => answer.extend_from_slice(&byte),
        }
    }
    match status(&answer) {
        Some((200..=299, _)) => Ok(stream),
        Some((code, reason)) => Err(Refusal::Status(code, reason)),
        None => Err(Refusal::Broken("its answer is not HTTP".into())),
    }
}

/// The code and reason of an HTTP/1.x status line (the reason cut short
/// and kept to printable ASCII: it goes into an error message).
fn status(head: &[u8]) -> Option<(u16, String)> {
    let line = head.split(|&b| b == b'\r').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let rest = line
        .strip_prefix("HTTP/1.1 ")
        .or_else(|| line.strip_prefix("HTTP/1.0 "))?;
    let (code, reason) = rest.split_once(' ').unwrap_or((rest, ""));
    if code.len() != 3 {
        return None;
    }
    let code = code.parse().ok()?;
    let reason = reason
        .chars()
        .filter(|c| c.is_ascii_graphic() || *c == ' ')
        .take(64)
        .collect();
    Some((code, reason))
}

/// The innermost cause's text (`Connection refused`), without the
/// `(os error N)` noise.
fn innermost(err: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = err;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    let text = cause.to_string();
    match text.find(" (os error") {
        Some(at) => text.get(..at).unwrap_or(&text).to_string(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.to_string())
        }
    }

    #[test]
    fn no_proxy_variable_is_none() {
        assert_eq!(proxies(env(&[("NO_PROXY", "example.com")])), Ok(None));
        assert_eq!(proxies(env(&[("HTTPS_PROXY", " ")])), Ok(None));
    }

    #[test]
    fn credentials_are_never_shown() {
        let got = proxies(env(&[
            ("https_proxy", "http://user:s3cret@proxy.internal:3128"),
            ("no_proxy", "localhost,10.0.0.0/8"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(got.https.as_deref(), Some("http://proxy.internal:3128"));
        assert_eq!(got.http, None);
        assert_eq!(got.no_proxy, "localhost,10.0.0.0/8");
    }

    #[test]
    fn upper_case_wins_and_all_proxy_fills_in() {
        let got = proxies(env(&[
            ("HTTPS_PROXY", "http://upper:3128"),
            ("https_proxy", "http://lower:3128"),
            ("ALL_PROXY", "all:8080"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(got.https.as_deref(), Some("http://upper:3128"));
        assert_eq!(got.http.as_deref(), Some("http://all:8080"));
    }

    #[test]
    fn an_unusable_proxy_is_refused_without_its_value() {
        let problem = proxies(env(&[("HTTP_PROXY", "socks5://u:pw@proxy:1080")])).unwrap_err();
        assert_eq!(
            problem,
            ProxyProblem::Scheme {
                variable: "HTTP_PROXY",
                scheme: "socks5".into()
            }
        );
        assert!(!problem.to_string().contains("pw"));
        let problem = proxies(env(&[("https_proxy", "http://u:pw@bad host")])).unwrap_err();
        assert_eq!(
            problem,
            ProxyProblem::NotUrl {
                variable: "https_proxy"
            }
        );
    }

    #[test]
    fn an_implicit_port_is_named_in_the_tunnels_target() {
        let at = |uri: &str| target(&uri.parse().unwrap()).unwrap();
        assert_eq!(
            at("http://ollama.internal/v1"),
            ("ollama.internal:80".into(), "ollama.internal".into())
        );
        assert_eq!(at("https://api.openai.com/v1").0, "api.openai.com:443");
        assert_eq!(at("https://[::1]:8443/").0, "[::1]:8443");
    }

    #[test]
    fn a_status_line_is_read_and_its_reason_kept_printable() {
        assert_eq!(
            status(b"HTTP/1.1 200 Connection established\r\n\r\n"),
            Some((200, "Connection established".into()))
        );
        assert_eq!(status(b"HTTP/1.0 403\r\n\r\n"), Some((403, String::new())));
        assert_eq!(
            status(b"HTTP/1.1 407 Auth\x1b[31m\r\n\r\n"),
            Some((407, "Auth[31m".into()))
        );
        assert_eq!(status(b"SSH-2.0-OpenSSH\r\n\r\n"), None);
        assert_eq!(status(b"HTTP/1.1 2000 OK\r\n\r\n"), None);
    }
}
