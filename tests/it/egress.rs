//! The egress proxy over real sockets: probity started with `HTTP_PROXY`,
//! `HTTPS_PROXY` (or lower case) and `NO_PROXY` reaches its upstreams, its
//! span collector and its bucket through a CONNECT proxy run here, which
//! counts the tunnels and records their targets; NO_PROXY goes direct; the
//! proxy's password reaches the proxy and no log line nor metric; a proxy
//! that refuses is one typed error naming the remedy.
//!
//! The providers' connector trusts the web PKI roots only, so an HTTPS
//! fake provider cannot be trusted here: the provider path is shown
//! answering byte for byte through the tunnel over `http://`, and over
//! `https://` carrying TLS inside the tunnel (the handshake then fails on
//! the fake); an HTTPS answer through the tunnel is shown end to end by
//! the bucket client, which trusts a private CA (feature `s3`, moto).

use crate::support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::*;

const EMBEDDINGS_REQUEST: &str = r#"{"model": "m", "input": ["a"]}"#;
/// Spacing and member order of its own: a byte-for-byte relay keeps them.
const EMBEDDINGS_ANSWER: &[u8] = br#"{"object":"list",  "data": [{"object": "embedding", "index": 0, "embedding": [0.5, -0.25]}], "model": "m", "usage": {"prompt_tokens": 1, "total_tokens": 1}}"#;
/// The proxy's password: it must reach the proxy and nothing else.
const PASSWORD: &str = "pr0xy-pa55-never-shown";

/// What the proxy does with a CONNECT.
#[derive(Clone, Copy)]
enum Policy {
    /// Opens every tunnel.
    Open,
    /// Opens a tunnel only with this `Proxy-Authorization`; else 407.
    Credentials(&'static str),
    /// Answers every CONNECT with 403.
    Forbid,
}

/// One CONNECT the proxy received.
#[derive(Debug, Clone)]
struct Tunnel {
    /// `host:port` of the request line.
    target: String,
    authorization: Option<String>,
    /// The first byte the client sent inside an opened tunnel.
    first_byte: Option<u8>,
}

/// A CONNECT proxy on loopback: reads the CONNECT head, answers per its
/// policy, then copies bytes both ways to the target (loopback only).
struct ConnectProxy {
    addr: SocketAddr,
    tunnels: Arc<Mutex<Vec<Tunnel>>>,
    /// Connections accepted, CONNECT or not.
    accepted: Arc<AtomicUsize>,
}

impl ConnectProxy {
    async fn start(policy: Policy) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let tunnels = Arc::new(Mutex::new(Vec::new()));
        let accepted = Arc::new(AtomicUsize::new(0));
        let (kept, count) = (tunnels.clone(), accepted.clone());
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(serve_tunnel(client, policy, kept.clone()));
            }
        });
        Self {
            addr,
            tunnels,
            accepted,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn tunnels(&self) -> Vec<Tunnel> {
        self.tunnels.lock().unwrap().clone()
    }

    fn targets(&self) -> Vec<String> {
        self.tunnels().into_iter().map(|t| t.target).collect()
    }
}

async fn serve_tunnel(mut client: TcpStream, policy: Policy, kept: Arc<Mutex<Vec<Tunnel>>>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match client.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        assert!(head.len() < 8192, "a CONNECT head of 8 KiB");
    }
    let head = String::from_utf8(head).unwrap();
    let mut lines = head.split("\r\n");
    let request_line: Vec<&str> = lines.next().unwrap().split(' ').collect();
    assert_eq!(request_line[0], "CONNECT", "{head}");
    assert_eq!(request_line[2], "HTTP/1.1", "{head}");
    let target = request_line[1].to_string();
    let authorization = lines
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.eq_ignore_ascii_case("proxy-authorization"))
        .map(|(_, value)| value.trim().to_string());
    let mut tunnel = Tunnel {
        target: target.clone(),
        authorization: authorization.clone(),
        first_byte: None,
    };
    let refusal: Option<&[u8]> = match policy {
        Policy::Open => None,
        Policy::Credentials(expected) if authorization.as_deref() == Some(expected) => None,
        Policy::Credentials(_) => Some(
            b"HTTP/1.1 407 Proxy Authentication Required\r\n\
              Proxy-Authenticate: Basic realm=\"test\"\r\nContent-Length: 0\r\n\r\n",
        ),
        Policy::Forbid => Some(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n"),
    };
    if let Some(refusal) = refusal {
        kept.lock().unwrap().push(tunnel);
        let _ = client.write_all(refusal).await;
        return;
    }
    // The tests' servers are all on loopback; nothing leaves the host.
    assert!(target.starts_with("127.0.0.1:"), "CONNECT {target}");
    let Ok(mut upstream) = TcpStream::connect(&target).await else {
        kept.lock().unwrap().push(tunnel);
        let _ = client
            .write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            .await;
        return;
    };
    client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .unwrap();
    let n = client.read(&mut buf).await.unwrap_or(0);
    tunnel.first_byte = buf[..n].first().copied();
    kept.lock().unwrap().push(tunnel);
    if n == 0 || upstream.write_all(&buf[..n]).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

/// `Basic base64(user:password)`, as a client sends it.
fn basic(user: &str, password: &str) -> String {
    format!("Basic {}", base64(format!("{user}:{password}").as_bytes()))
}

fn openai_config(upstream: &str) -> String {
    config("", &route("openai", "/openai", upstream, "openai", ""))
}

async fn embeddings(probity: &Probity) -> Got {
    post(&probity.url("/openai/v1/embeddings"), EMBEDDINGS_REQUEST).await
}

/// Through `HTTP_PROXY`, an `http://` upstream is reached by a CONNECT
/// tunnel to its host and port: one tunnel for a keep-alive connection's
/// three exchanges, each answer byte for byte, each request in origin form
/// as it would go direct.
#[tokio::test]
async fn an_http_upstream_is_reached_through_one_tunnel_per_connection() {
    let proxy = ConnectProxy::start(Policy::Open).await;
    let upstream = Upstream::json(EMBEDDINGS_ANSWER).await;
    let probity = Probity::start_with_env(
        &openai_config(&upstream.url()),
        &[("HTTP_PROXY", &proxy.url())],
    );
    for _ in 0..3 {
        let got = embeddings(&probity).await;
        assert_eq!(got.status, 200, "{}", got.text());
        assert_eq!(got.body, EMBEDDINGS_ANSWER);
    }
    assert_eq!(proxy.targets(), vec![upstream.addr.to_string()]);
    assert_eq!(proxy.tunnels()[0].authorization, None);
    let requests = upstream.requests();
    assert_eq!(requests.len(), 3);
    for request in requests {
        assert_eq!(request.target, "/v1/embeddings");
        assert!(request.headers.get("proxy-authorization").is_none());
    }
    let start = probity
        .logs()
        .into_iter()
        .find(|line| {
            line["message"]
                .as_str()
                .is_some_and(|m| m.contains("egress proxy"))
        })
        .expect("the egress proxy is said at start");
    assert_eq!(start["http_proxy"], proxy.url());
    assert_eq!(start["https_proxy"], "-");
}

/// `NO_PROXY` naming the upstream's host (here as a network) sends it
/// direct: no tunnel, not even a connection to the proxy.
#[tokio::test]
async fn no_proxy_naming_the_host_goes_direct() {
    let proxy = ConnectProxy::start(Policy::Open).await;
    let upstream = Upstream::json(EMBEDDINGS_ANSWER).await;
    let probity = Probity::start_with_env(
        &openai_config(&upstream.url()),
        &[
            ("HTTP_PROXY", &proxy.url()),
            ("NO_PROXY", "localhost, 127.0.0.0/8"),
        ],
    );
    let got = embeddings(&probity).await;
    assert_eq!(got.body, EMBEDDINGS_ANSWER);
    assert_eq!(upstream.requests().len(), 1);
    assert_eq!(proxy.accepted.load(Ordering::SeqCst), 0);

    // The proxy of one scheme does not carry the other: HTTPS_PROXY alone
    // leaves an http:// upstream direct.
    let probity = Probity::start_with_env(
        &openai_config(&upstream.url()),
        &[("HTTPS_PROXY", &proxy.url())],
    );
    let got = embeddings(&probity).await;
    assert_eq!(got.body, EMBEDDINGS_ANSWER);
    assert_eq!(upstream.requests().len(), 2);
    assert_eq!(proxy.accepted.load(Ordering::SeqCst), 0);
}

/// `https_proxy` in lower case carries an `https://` provider: the
/// tunnel's first byte is a TLS handshake record, so TLS runs end to end
/// inside it, never to the proxy, and nothing in clear passes.
#[tokio::test]
async fn lower_case_https_proxy_carries_tls_inside_the_tunnel() {
    let proxy = ConnectProxy::start(Policy::Open).await;
    // A provider that takes the TLS hello and hangs up (no certificate
    // the web PKI roots would trust can be had here).
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let provider = listener.local_addr().unwrap();
    let hellos = Arc::new(Mutex::new(Vec::<u8>::new()));
    let seen = hellos.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let n = stream.read(&mut buf).await.unwrap_or(0);
            seen.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    let probity = Probity::start_with_env(
        &openai_config(&format!("https://{provider}")),
        &[("https_proxy", &proxy.url())],
    );
    let got = embeddings(&probity).await;
    got.error(502, "upstream_unreachable");
    let tunnels = proxy.tunnels();
    assert!(!tunnels.is_empty());
    for tunnel in &tunnels {
        assert_eq!(tunnel.target, provider.to_string());
        assert_eq!(tunnel.first_byte, Some(0x16), "a TLS handshake record");
    }
    let hellos = hellos.lock().unwrap().clone();
    assert_eq!(hellos.first(), Some(&0x16));
    assert!(!String::from_utf8_lossy(&hellos).contains("embeddings"));
}

/// A proxy URL's `user:password@` becomes the CONNECT's
/// `Proxy-Authorization`; the password shows in no log line (stdout or
/// stderr), metric, or header the upstream gets.
#[tokio::test]
async fn proxy_credentials_reach_the_proxy_and_nothing_else() {
    let expected: &'static str = Box::leak(basic("probity", PASSWORD).into_boxed_str());
    let proxy = ConnectProxy::start(Policy::Credentials(expected)).await;
    let upstream = Upstream::json(EMBEDDINGS_ANSWER).await;
    let with_password = format!("http://probity:{PASSWORD}@{}", proxy.addr);
    let probity = Probity::start_with_env(
        &openai_config(&upstream.url()),
        &[("http_proxy", &with_password), ("RUST_LOG", "trace")],
    );
    let got = embeddings(&probity).await;
    assert_eq!(got.body, EMBEDDINGS_ANSWER);
    let tunnels = proxy.tunnels();
    assert_eq!(tunnels.len(), 1);
    assert_eq!(tunnels[0].authorization.as_deref(), Some(expected));
    let encoded = expected.trim_start_matches("Basic ");
    let metrics = get(&probity.admin_url("/metrics")).await.text();
    let shown = [
        probity.log_text(),
        probity.stderr_text(),
        metrics,
        format!("{:?}", upstream.only_request().headers),
    ];
    for text in shown {
        assert!(!text.contains(PASSWORD), "the proxy's password is shown");
        assert!(!text.contains(encoded), "the proxy's credentials are shown");
    }
    assert!(
        probity.log_text().contains(&proxy.url()),
        "the proxy is named"
    );
}

/// A proxy that refuses the tunnel (407, 403) or cannot be reached is one
/// `upstream_unreachable` answer that names the proxy, without its
/// password, and what to check; nothing reaches the upstream.
#[tokio::test]
async fn a_proxy_refusing_the_tunnel_is_one_typed_error_naming_the_remedy() {
    let upstream = Upstream::json(EMBEDDINGS_ANSWER).await;
    let config = openai_config(&upstream.url());

    let asking = ConnectProxy::start(Policy::Credentials("Basic cmlnaHQ6b25l")).await;
    let wrong = format!("http://probity:{PASSWORD}@{}", asking.addr);
    let probity = Probity::start_with_env(&config, &[("HTTP_PROXY", &wrong)]);
    let got = embeddings(&probity).await;
    let error = got.error(502, "upstream_unreachable");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains(&asking.url()), "{message}");
    assert!(
        message.contains("407") && message.contains("user:password"),
        "{message}"
    );
    assert!(!got.text().contains(PASSWORD), "{message}");
    assert!(!probity.log_text().contains(PASSWORD));
    assert_eq!(asking.tunnels().len(), 1);

    let forbidding = ConnectProxy::start(Policy::Forbid).await;
    let probity = Probity::start_with_env(&config, &[("HTTP_PROXY", &forbidding.url())]);
    let error = embeddings(&probity)
        .await
        .error(502, "upstream_unreachable");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains(&forbidding.url()), "{message}");
    assert!(
        message.contains("allows CONNECT") && message.contains("NO_PROXY"),
        "{message}"
    );
    assert!(message.contains(&upstream.addr.to_string()), "{message}");

    let gone = format!("http://probity:{PASSWORD}@127.0.0.1:{}", closed_port());
    let probity = Probity::start_with_env(&config, &[("HTTP_PROXY", &gone)]);
    let got = embeddings(&probity).await;
    let error = got.error(502, "upstream_unreachable");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("cannot be reached"), "{message}");
    assert!(message.contains("Connection refused"), "{message}");
    assert!(!got.text().contains(PASSWORD), "{message}");

    let sample = r#"probity_upstream_errors_total{kind="unreachable",route="openai"}"#;
    assert_eq!(probity.metric(sample).await, Some(1.0));

    // A proxy that takes the connection and never answers the CONNECT is
    // given the route's connect timeout, not the whole request's.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            held.push(stream);
        }
    });
    let quick = support::config(
        "",
        &route(
            "openai",
            "/openai",
            &upstream.url(),
            "openai",
            "connect_timeout_ms = 300",
        ),
    );
    let probity =
        Probity::start_with_env(&quick, &[("HTTP_PROXY", &format!("http://{silent_addr}"))]);
    let started = std::time::Instant::now();
    let error = embeddings(&probity)
        .await
        .error(502, "upstream_unreachable");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("http://{silent_addr}")),
        "{message}"
    );
    assert!(
        message.contains("did not open a tunnel") && message.contains("300 ms"),
        "{message}"
    );

    assert!(upstream.requests().is_empty());
}

/// A proxy variable probity cannot use stops the start, naming the
/// variable and never its value.
#[test]
fn an_unusable_proxy_variable_stops_the_start() {
    let config_path = temp_path(".toml");
    std::fs::write(&config_path, openai_config("http://127.0.0.1:9")).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_probity"));
    command.arg("--config").arg(&config_path);
    for key in PROXY_VARIABLES {
        command.env_remove(key);
    }
    let out = command
        .env(
            "HTTPS_PROXY",
            format!("socks5://probity:{PASSWORD}@127.0.0.1:1080"),
        )
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&config_path);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("HTTPS_PROXY") && stderr.contains("socks5"),
        "{stderr}"
    );
    assert!(!stderr.contains(PASSWORD), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains(PASSWORD));
}

/// The span exporter goes through the proxy too: the collector's exports
/// arrive through a tunnel to it.
#[tokio::test]
async fn spans_reach_the_collector_through_the_proxy() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let collector = listener.local_addr().unwrap();
    let exports = Arc::new(AtomicUsize::new(0));
    let count = exports.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let count = count.clone();
            let service = service_fn(move |request: Request<Incoming>| {
                let count = count.clone();
                async move {
                    assert_eq!(request.uri().path(), "/v1/traces");
                    let body = request.into_body().collect().await.unwrap().to_bytes();
                    assert!(!body.is_empty());
                    count.fetch_add(1, Ordering::SeqCst);
                    // An empty ExportTraceServiceResponse: all accepted.
                    Ok::<_, Infallible>(
                        Response::builder()
                            .header("content-type", "application/x-protobuf")
                            .body(Full::new(Bytes::new()))
                            .unwrap(),
                    )
                }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    let proxy = ConnectProxy::start(Policy::Open).await;
    let upstream = Upstream::json(EMBEDDINGS_ANSWER).await;
    let telemetry = format!("[telemetry]\notlp_endpoint = \"http://{collector}\"\n");
    let routes = route("openai", "/openai", &upstream.url(), "openai", "");
    let probity = Probity::start_with_env(
        &config("", &format!("{routes}{telemetry}")),
        &[("HTTP_PROXY", &proxy.url())],
    );
    let got = embeddings(&probity).await;
    assert_eq!(got.body, EMBEDDINGS_ANSWER);
    within("spans exported", async {
        while exports.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let targets = proxy.targets();
    assert!(targets.contains(&collector.to_string()), "{targets:?}");
    assert!(targets.contains(&upstream.addr.to_string()), "{targets:?}");
    let sample = "probity_telemetry_exported_spans_total";
    assert!(probity.metric(sample).await.unwrap_or(0.0) >= 1.0);
}

#[cfg(feature = "s3")]
mod bucket {
    //! An HTTPS answer end to end through the tunnel: moto over TLS, its
    //! certificate signed by a CA of the test's own, which the bucket
    //! client trusts through `SSL_CERT_FILE`.

    use super::*;

    const BUCKET: &str = "probity-captures";
    const CAPTURED_ANSWER: &[u8] = br#"{"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}], "model": "m", "usage": {"prompt_tokens": "4", "total_tokens": 4}}"#;

    /// moto over HTTPS on its own port; killed and its folder removed on drop.
    struct Moto {
        child: std::process::Child,
        url: String,
        dir: std::path::PathBuf,
    }

    impl Drop for Moto {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    async fn moto() -> Option<Moto> {
        let has = |program: &str, args: &[&str]| {
            Command::new(program)
                .args(args)
                .output()
                .is_ok_and(|out| out.status.success())
        };
        let mut missing = Vec::new();
        if !has("python3", &["-c", "import moto.server, flask_cors"]) {
            missing.push("moto[server]");
        }
        if !has("openssl", &["version"]) {
            missing.push("openssl");
        }
        if !can_run(
            "egress",
            &missing,
            "python3 -m pip install 'moto[server]'; apt-get install openssl",
        ) {
            return None;
        }
        let dir = temp_path("-tls");
        std::fs::create_dir_all(&dir).unwrap();
        private_ca(&dir);
        let port = closed_port();
        let child = Command::new("python3")
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .arg("-c")
            .arg(dir.join("cert.pem"))
            .arg("-k")
            .arg(dir.join("key.pem"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let moto = Moto {
            child,
            url: format!("https://127.0.0.1:{port}"),
            dir,
        };
        // Python's HTTP client, trusting the CA, creates the bucket (direct).
        let script = "import ssl, sys, urllib.request\n\
            context = ssl.create_default_context(cafile=sys.argv[1])\n\
            request = urllib.request.Request(sys.argv[2], method='PUT')\n\
            urllib.request.urlopen(request, context=context, timeout=1)";
        let ca = moto.dir.join("ca.pem");
        let url = format!("{}/{BUCKET}", moto.url);
        let started = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                let (ca, url) = (ca.clone(), url.clone());
                let made = tokio::task::spawn_blocking(move || {
                    Command::new("python3")
                        .args(["-c", script])
                        .arg(ca)
                        .arg(url)
                        .env_remove("HTTPS_PROXY")
                        .env_remove("https_proxy")
                        .stderr(Stdio::null())
                        .status()
                        .is_ok_and(|status| status.success())
                })
                .await
                .unwrap();
                if made {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        assert!(started.is_ok(), "moto did not start within 30 s");
        Some(moto)
    }

    /// `HTTPS_PROXY` carries the bucket client: the capture is written
    /// and read back over TLS inside tunnels to moto, and given back byte
    /// for byte; the `http://` provider, which HTTPS_PROXY does not name,
    /// stays direct.
    #[tokio::test]
    async fn a_bucket_over_https_is_written_and_read_through_the_tunnel() {
        let Some(moto) = moto().await else {
            return;
        };
        let proxy = ConnectProxy::start(Policy::Open).await;
        // A count given as a string: normalized, so the answer is captured.
        let upstream = Upstream::json(CAPTURED_ANSWER).await;
        let routes = route("openai", "/openai", &upstream.url(), "openai", "");
        let config = config(
            "",
            &format!("{routes}\n[capture]\nstore = \"s3://{BUCKET}/captures\"\n"),
        );
        let ca = moto.dir.join("ca.pem");
        let probity = Probity::start_with_env(
            &config,
            &[
                ("HTTPS_PROXY", &proxy.url()),
                ("SSL_CERT_FILE", ca.to_str().unwrap()),
                ("AWS_ENDPOINT_URL", &moto.url),
                ("AWS_ACCESS_KEY_ID", "probity-test-key-id"),
                ("AWS_SECRET_ACCESS_KEY", "probity-test-secret"),
                ("AWS_REGION", "us-east-1"),
            ],
        );
        let got = embeddings(&probity).await;
        assert_eq!(got.status, 200, "{}", got.text());
        let id = got.header("x-request-id").unwrap().to_string();
        let sample = r#"probity_capture_writes_total{result="ok"}"#;
        within("the capture written", async {
            while probity.metric(sample).await != Some(1.0) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        let capture = probity.admin_get(&format!("/captures/{id}")).await;
        assert_eq!(capture.status, 200, "{}", capture.text());
        assert_eq!(capture.body, CAPTURED_ANSWER);
        let moto_authority = moto.url.trim_start_matches("https://").to_string();
        let tunnels = proxy.tunnels();
        assert!(!tunnels.is_empty());
        for tunnel in &tunnels {
            assert_eq!(tunnel.target, moto_authority);
            assert_eq!(tunnel.first_byte, Some(0x16), "a TLS handshake record");
        }
        assert_eq!(upstream.requests().len(), 1);
    }
}
