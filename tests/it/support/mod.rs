//! The test harness: the real `probity` binary, started on a config file with
//! ports 0, and fake upstreams that speak HTTP over real sockets on 127.0.0.1.
//!
//! - [`Probity`] runs the built binary with JSON logs and reads the addresses
//!   it bound from its "probity listening" log line.
//! - [`Upstream`] is a well-behaved hyper server whose replies a test scripts
//!   (status, headers, body chunks with pauses or gates) and which records
//!   every request it received.
//! - [`raw_upstream`] is a bare TCP server for upstreams that misbehave:
//!   never answer, reset mid-body, send too much.
//! - [`conformance`] is the runner of the fixture-driven conformance suites,
//!   over [`fixtures`] (JSON spans, byte diffs, metric deltas).

mod base64;
pub mod conformance;
pub mod eventstream;
pub mod fixtures;

pub use base64::base64;

use std::convert::Infallible;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Notify};

/// Whether a test can run: `false` (it then returns early) when a tool it
/// drives is missing. The skip is written straight to the terminal, past
/// the test harness's capture, so `cargo test` shows it; under `CI` a
/// missing tool fails the test instead, since `.ci/run` installs it.
pub fn can_run(test: &str, missing: &[&str], install: &str) -> bool {
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: {missing:?} must be installed in CI (.ci/run: {install})"
    );
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {missing:?} not installed ({install})"
    );
    false
}

/// The Python modules of `modules` that `python3` cannot import.
pub fn missing_python<'a>(modules: &[&'a str]) -> Vec<&'a str> {
    modules
        .iter()
        .copied()
        .filter(|module| {
            !Command::new("python3")
                .args(["-c", &format!("import {module}")])
                .status()
                .is_ok_and(|s| s.success())
        })
        .collect()
}

/// Node itself, or those of `packages` that `npm ci --prefix tests/sdks/node`
/// has not installed.
pub fn missing_node<'a>(packages: &[&'a str]) -> Vec<&'a str> {
    let node = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !node {
        return vec!["node"];
    }
    let modules = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdks/node/node_modules");
    packages
        .iter()
        .copied()
        .filter(|p| !std::path::Path::new(&format!("{modules}/{p}/package.json")).exists())
        .collect()
}

/// Runs an app's script (`command`: python3 or node with its script)
/// against probity at `base` (`PROBE_URL`), and its whole output; past
/// `limit` the script hangs, and only it is killed.
pub async fn run_app(mut command: Command, base: String, limit: Duration) -> std::process::Output {
    command
        .env("PROBE_URL", base)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("NO_PROXY", "127.0.0.1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = command.spawn().unwrap();
    let pid = child.id();
    let waited = tokio::time::timeout(
        limit,
        tokio::task::spawn_blocking(move || child.wait_with_output()),
    )
    .await;
    let Ok(output) = waited else {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        panic!("{command:?} ran past {limit:?}");
    };
    output.unwrap().unwrap()
}

/// Longest any single step of a test may take before it counts as a hang.
pub const STEP: Duration = Duration::from_secs(10);

/// Awaits `future`, failing the test (not hanging it) after [`STEP`].
pub async fn within<F: std::future::Future>(what: &str, future: F) -> F::Output {
    match tokio::time::timeout(STEP, future).await {
        Ok(output) => output,
        Err(_) => panic!("{what}: no result within {STEP:?}"),
    }
}

/// The path to a fixture file's bytes.
pub fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|err| panic!("{path}: {err}"))
}

// ---------------------------------------------------------------- probity

/// The admin token every test probity is started with (`PROBITY_ADMIN_TOKEN`,
/// the default `[admin] token_env`): captures and reloads need it.
pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789abcdef";

/// The `probity` binary, running on a test configuration.
pub struct Probity {
    child: Child,
    /// Its working directory, where the default capture store goes.
    workdir: std::path::PathBuf,
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    logs: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<Vec<String>>>,
    config_path: std::path::PathBuf,
}

/// The egress proxy variables: cleared for every probity a test starts, so
/// a developer's own proxy never carries the tests' loopback traffic.
pub const PROXY_VARIABLES: [&str; 8] = [
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
];

/// Every file under `dir` (at any depth) whose name ends `.{ext}`, sorted:
/// the sources the architecture tests read, the manual's pages.
pub fn files_under(dir: &std::path::Path, ext: &str) -> Vec<std::path::PathBuf> {
    fn walk(dir: &std::path::Path, ext: &str, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, ext, out);
            } else if path.extension().is_some_and(|e| e == ext) {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, ext, &mut out);
    out.sort();
    out
}

/// A config file path unique to this test process and call.
pub fn temp_path(suffix: &str) -> std::path::PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("probity-test-{}-{n}{suffix}", std::process::id()))
}

/// `[server]` on ports 0, then the given routes (and any other tables).
pub fn config(server_extra: &str, routes: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n{server_extra}\n{routes}"
    )
}

/// One `[[routes]]` table.
pub fn route(name: &str, prefix: &str, upstream: &str, dialect: &str, extra: &str) -> String {
    format!(
        "[[routes]]\nname = \"{name}\"\nprefix = \"{prefix}\"\nupstream = \"{upstream}\"\ndialect = \"{dialect}\"\n{extra}\n"
    )
}

impl Probity {
    pub fn start(config: &str) -> Self {
        Self::start_with_env(config, &[])
    }

    pub fn start_with_env(config: &str, env: &[(&str, &str)]) -> Self {
        let config_path = temp_path(".toml");
        std::fs::write(&config_path, config).unwrap();
        let arg = config_path.clone().into_os_string();
        Self::launch(&[std::ffi::OsStr::new("--config"), &arg], env, config_path)
    }

    /// Runs the binary with `args` alone (e.g. none: the embedded default, or
    /// `PROBITY_CONFIG` in `env`); `owned` is deleted when it stops.
    pub fn launch(
        args: &[&std::ffi::OsStr],
        env: &[(&str, &str)],
        owned: std::path::PathBuf,
    ) -> Self {
        Self::launch_masked(args, env, owned, None)
    }

    /// As [`Probity::start`], the process started with this umask.
    pub fn start_with_umask(config: &str, mask: u32) -> Self {
        let config_path = temp_path(".toml");
        std::fs::write(&config_path, config).unwrap();
        let arg = config_path.clone().into_os_string();
        Self::launch_masked(
            &[std::ffi::OsStr::new("--config"), &arg],
            &[],
            config_path,
            Some(mask),
        )
    }

    fn launch_masked(
        args: &[&std::ffi::OsStr],
        env: &[(&str, &str)],
        owned: std::path::PathBuf,
        mask: Option<u32>,
    ) -> Self {
        let config_path = owned;
        // Each process its own working directory: the default capture store
        // (`probity-captures/` there) is never shared nor left in the repo.
        let workdir = temp_path(".d");
        std::fs::create_dir_all(&workdir).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_probity"));
        command
            .current_dir(&workdir)
            .args(args)
            .env("PROBITY_LOG_FORMAT", "json")
            .env("RUST_LOG", "info")
            .env("PROBITY_ADMIN_TOKEN", ADMIN_TOKEN)
            .env_remove("PROBITY_CONFIG")
            .env_remove("PROBITY_LISTEN")
            .env_remove("PROBITY_ADMIN_LISTEN")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for key in PROXY_VARIABLES {
            command.env_remove(key);
        }
        for (key, value) in env {
            command.env(key, value);
        }
        if let Some(mask) = mask {
            use std::os::unix::process::CommandExt;
            // SAFETY: between fork and exec, `umask` is async-signal-safe.
            unsafe {
                command.pre_exec(move || {
                    libc::umask(mask as libc::mode_t);
                    Ok(())
                });
            }
        }
        let mut child = command.spawn().expect("spawn probity");
        // Read stderr too, so a burst of output (panic backtraces) never
        // fills the pipe and stalls probity; kept for a failed start.
        let stderr_lines = Arc::new(Mutex::new(Vec::new()));
        if let Some(stderr) = child.stderr.take() {
            let kept = stderr_lines.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    kept.lock().unwrap().push(line);
                }
            });
        }
        let stdout = child.stdout.take().unwrap();
        let logs = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let logs = logs.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if line.contains("\"probity listening\"") {
                        let _ = tx.send(line.clone());
                    }
                    logs.lock().unwrap().push(line);
                }
            });
        }
        let line = match rx.recv_timeout(STEP) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                std::thread::sleep(Duration::from_millis(50));
                let err = stderr_lines.lock().unwrap().join("\n");
                panic!("probity did not start: {err}");
            }
        };
        let json: serde_json::Value = serde_json::from_str(&line).unwrap();
        let addr = json["proxy"].as_str().unwrap().parse().unwrap();
        let admin = json["admin"].as_str().unwrap().parse().unwrap();
        Self {
            child,
            workdir,
            addr,
            admin,
            logs,
            stderr: stderr_lines,
            config_path,
        }
    }

    /// Replaces the configuration file the process was started on (for a
    /// reload).
    pub fn rewrite_config(&self, config: &str) {
        std::fs::write(&self.config_path, config).unwrap();
    }

    /// Peak resident memory of the process so far (`VmHWM`), in bytes.
    /// The open file descriptors of the process.
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .map(|dir| dir.count())
            .unwrap_or(0)
    }

    pub fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.admin)
    }

    /// `GET` of an admin endpoint, with the admin token.
    pub async fn admin_get(&self, path: &str) -> Got {
        send(
            Request::get(self.admin_url(path))
                .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
                .body(Full::default())
                .unwrap(),
        )
        .await
    }

    /// `POST` to an admin endpoint, with the admin token.
    pub async fn admin_post(&self, path: &str, body: impl Into<Bytes>) -> Got {
        send(
            Request::post(self.admin_url(path))
                .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
                .body(Full::new(body.into()))
                .unwrap(),
        )
        .await
    }

    /// Every log line so far, parsed.
    pub fn logs(&self) -> Vec<serde_json::Value> {
        self.logs
            .lock()
            .unwrap()
            .iter()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not JSON: {l}")))
            .collect()
    }

    /// Everything it wrote to stderr so far.
    pub fn stderr_text(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }

    /// The raw log text, for checks that something never appears.
    pub fn log_text(&self) -> String {
        self.logs.lock().unwrap().join("\n")
    }

    /// Waits for the `request` log line of a request id.
    pub async fn request_log(&self, request_id: &str) -> serde_json::Value {
        within("request log line", async {
            loop {
                let found = self.logs().into_iter().find(|l| {
                    l["message"] == "request" && l["request_id"].as_str() == Some(request_id)
                });
                if let Some(line) = found {
                    return line;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
    }

    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the process to exit and returns its exit code.
    pub async fn exit_code(&mut self) -> Option<i32> {
        within("probity exit", async {
            loop {
                if let Some(status) = self.child.try_wait().unwrap() {
                    if status.code().is_none() {
                        use std::os::unix::process::ExitStatusExt;
                        eprintln!("probity was ended by signal {:?}", status.signal());
                    }
                    return status.code();
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
    }

    /// The value of one sample in `/metrics`, e.g. `probity_requests_total{route="a",client="unknown",status="200"}`.
    pub async fn metric(&self, sample: &str) -> Option<f64> {
        let text = get(&self.admin_url("/metrics")).await.text();
        metric_value(&text, sample)
    }
}

/// Finds a sample whose name and labels match, whatever the label order.
pub fn metric_value(text: &str, sample: &str) -> Option<f64> {
    let (name, labels) = match sample.split_once('{') {
        Some((name, labels)) => (name, labels.trim_end_matches('}')),
        None => (sample, ""),
    };
    let wanted: Vec<&str> = labels.split(',').filter(|l| !l.is_empty()).collect();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (series_name, series_labels) = match series.split_once('{') {
                Some((n, l)) => (n, l.trim_end_matches('}')),
                None => (series, ""),
            };
            let have: Vec<&str> = series_labels.split(',').filter(|l| !l.is_empty()).collect();
            let same = series_name == name
                && have.len() == wanted.len()
                && wanted.iter().all(|w| have.contains(w));
            same.then(|| value.parse().ok()).flatten()
        })
}

impl Drop for Probity {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.config_path);
        let _ = std::fs::remove_dir_all(&self.workdir);
    }
}

// ---------------------------------------------------------------- client

/// A response read whole.
pub struct Got {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Got {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// Asserts a probity error (in whichever dialect's envelope) and
    /// returns its fields as one object: `type`, `code`, `message`,
    /// `route`, `request_id`.
    pub fn error(&self, status: u16, kind: &str) -> serde_json::Value {
        assert_eq!(self.status.as_u16(), status, "{}", self.text());
        assert_eq!(self.header("content-type"), Some("application/json"));
        let error = probity_error(&self.json())
            .unwrap_or_else(|| panic!("not a probity error: {}", self.text()));
        assert_eq!(error["type"], kind, "{}", self.text());
        for member in ["code", "message", "request_id"] {
            assert!(error[member].is_string(), "no {member} in {}", self.text());
        }
        error
    }
}

/// probity's error fields from a body in any dialect's envelope: OpenAI's
/// `{"error": {...}}`, Anthropic's `{"type": "error", "error": {...}}`,
/// Google's `{"error": {"code": 502, "details": [...]}}`, or a flat one
/// (`{"message" | "detail" | "error": "...", "type" | "error_type", "code"}`).
pub fn probity_error(json: &serde_json::Value) -> Option<serde_json::Value> {
    use serde_json::{json, Value};
    let error = &json["error"];
    if let Some(details) = error["details"].get(0) {
        let metadata = &details["metadata"];
        return Some(json!({
            "type": metadata["type"], "code": details["reason"], "message": error["message"],
            "route": metadata["route"], "request_id": metadata["request_id"],
        }));
    }
    if error.is_object() {
        return Some(json!({
            "type": error["type"], "code": error["code"], "message": error["message"],
            "route": error["route"], "request_id": error["request_id"],
        }));
    }
    let code = json["code"].as_str()?;
    let message = ["message", "detail", "error"]
        .iter()
        .find_map(|m| json[*m].as_str())?;
    let kind = json.get("type").or_else(|| json.get("error_type"))?;
    Some(json!({
        "type": kind, "code": code, "message": message,
        "route": json["route"], "request_id": json["request_id"],
    }))
    .filter(|e: &Value| e["type"].is_string())
}

pub fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

pub async fn send(request: Request<Full<Bytes>>) -> Got {
    within("response", async {
        let response = client().request(request).await.expect("request failed");
        let (parts, body) = response.into_parts();
        let body = body.collect().await.expect("body failed").to_bytes();
        Got {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    })
    .await
}

/// The request ids of a `GET /captures` listing, in its order.
pub fn capture_ids(listing: &serde_json::Value) -> Vec<String> {
    listing["captures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["request_id"].as_str().unwrap().to_string())
        .collect()
}

pub async fn get(url: &str) -> Got {
    send(Request::get(url).body(Full::default()).unwrap()).await
}

pub async fn post(url: &str, body: impl Into<Bytes>) -> Got {
    send(
        Request::post(url)
            .header("content-type", "application/json")
            .body(Full::new(body.into()))
            .unwrap(),
    )
    .await
}

/// Writes raw bytes on a fresh connection and reads until the server closes.
pub async fn raw(addr: SocketAddr, request: &[u8]) -> String {
    within("raw exchange", async {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(request).await.unwrap();
        let mut out = Vec::new();
        let _ = stream.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    })
    .await
}

// ---------------------------------------------------------------- upstreams

/// A request as the fake upstream received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// Path and query, as received.
    pub target: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }
}

/// What the fake upstream answers.
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: ReplyBody,
}

pub enum ReplyBody {
    /// Sent with a Content-Length.
    Whole(Vec<u8>),
    /// Sent chunked, each part after its pause (or, with a gate, after the
    /// test notifies it).
    Parts(Vec<Part>),
}

pub struct Part {
    pub before: Before,
    pub bytes: Vec<u8>,
}

pub enum Before {
    Now,
    Pause(Duration),
    Gate(Arc<Notify>),
}

impl Reply {
    pub fn json(status: u16, body: impl Into<Vec<u8>>) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: ReplyBody::Whole(body.into()),
        }
    }

    pub fn stream(content_type: &str, parts: Vec<Part>) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type".into(), content_type.into())],
            body: ReplyBody::Parts(parts),
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

pub fn part(before: Before, bytes: impl Into<Vec<u8>>) -> Part {
    Part {
        before,
        bytes: bytes.into(),
    }
}

type Handler = dyn Fn(&Recorded) -> Reply + Send + Sync;

/// A well-behaved upstream over hyper (HTTP/1.1), scripted by a handler.
pub struct Upstream {
    pub addr: SocketAddr,
    recorded: Arc<Mutex<Vec<Recorded>>>,
}

impl Upstream {
    pub async fn start(handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let recorded = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let log = recorded.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                // Without it, Nagle holds small stream writes back ~40 ms.
                let _ = stream.set_nodelay(true);
                let handler = handler.clone();
                let log = log.clone();
                let service = service_fn(move |request: Request<Incoming>| {
                    let handler = handler.clone();
                    let log = log.clone();
                    async move {
                        let (parts, body) = request.into_parts();
                        let body = body
                            .collect()
                            .await
                            .map(|c| c.to_bytes())
                            .unwrap_or_default();
                        let recorded = Recorded {
                            method: parts.method.to_string(),
                            target: parts.uri.path_and_query().map_or("", |p| p.as_str()).into(),
                            headers: parts.headers,
                            body,
                        };
                        let reply = handler(&recorded);
                        log.lock().unwrap().push(recorded);
                        Ok::<_, Infallible>(reply.into_response())
                    }
                });
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self { addr, recorded }
    }

    /// An upstream that answers every request with the same JSON.
    pub async fn json(body: &'static [u8]) -> Self {
        Self::start(move |_| Reply::json(200, body)).await
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.recorded.lock().unwrap().clone()
    }

    pub fn only_request(&self) -> Recorded {
        let requests = self.requests();
        assert_eq!(requests.len(), 1, "{requests:#?}");
        requests.into_iter().next().unwrap()
    }
}

impl Reply {
    fn into_response(self) -> Response<ReplyStream> {
        let (tx, rx) = mpsc::channel(1);
        let mut builder = Response::builder().status(self.status);
        for (name, value) in &self.headers {
            builder = builder.header(name, value);
        }
        match self.body {
            ReplyBody::Whole(bytes) => {
                builder = builder.header("content-length", bytes.len());
                let _ = tx.try_send(Bytes::from(bytes));
            }
            ReplyBody::Parts(parts) => {
                tokio::spawn(async move {
                    for part in parts {
                        match part.before {
                            Before::Now => {}
                            Before::Pause(pause) => tokio::time::sleep(pause).await,
                            Before::Gate(gate) => gate.notified().await,
                        }
                        if tx.send(Bytes::from(part.bytes)).await.is_err() {
                            return;
                        }
                    }
                });
            }
        }
        builder.body(ReplyStream(rx)).unwrap()
    }
}

/// A response body fed from a channel: one frame per message, ended when the
/// sender is dropped.
pub struct ReplyStream(mpsc::Receiver<Bytes>);

impl Body for ReplyStream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

/// A bare TCP upstream: reads a request head, then runs `script` on the
/// socket. Returns its address and a count of connections accepted.
pub async fn raw_upstream<F, Fut>(script: F) -> (SocketAddr, Arc<AtomicUsize>)
where
    F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    let script = Arc::new(script);
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            count.fetch_add(1, Ordering::SeqCst);
            let script = script.clone();
            tokio::spawn(async move {
                read_head(&mut stream).await;
                script(stream).await;
            });
        }
    });
    (addr, accepted)
}

/// Reads up to the end of a request head (bodies in these tests are small
/// enough to arrive with it).
async fn read_head(stream: &mut TcpStream) {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

/// Runs `tests/clients/{script}` (an app on a real SDK) with `args`,
/// pointed at probity by `PROBE_BASE_URL`: each JSON line it printed.
pub async fn client_script(script: &str, args: &[&str], base: String) -> Vec<serde_json::Value> {
    let path = format!("{}/tests/clients/{script}", env!("CARGO_MANIFEST_DIR"));
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let output = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .arg(path)
            .args(args)
            .env("PROBE_BASE_URL", base)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{script}: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{script}: {e}: {l}")))
        .collect()
}

/// For a server over TLS behind a private CA (moto over HTTPS): `ca.pem`,
/// and `cert.pem` / `key.pem` for 127.0.0.1. Only the bucket stores' tests
/// serve TLS of their own.
#[cfg(any(feature = "s3", feature = "azure"))]
pub fn private_ca(dir: &std::path::Path) {
    let openssl = |args: &str| {
        let out = std::process::Command::new("openssl")
            .args(args.split_whitespace())
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "openssl {args}: {out:?}");
    };
    let key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    openssl(&format!(
        "req -x509 {key} -days 2 -subj /CN=probity-test-CA -keyout ca.key -out ca.pem"
    ));
    openssl(&format!(
        "req -new {key} -subj /CN=127.0.0.1 -keyout key.pem -out cert.csr"
    ));
    std::fs::write(
        dir.join("cert.ext"),
        "basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1\n\
         extendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        "x509 -req -in cert.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
         -extfile cert.ext -out cert.pem",
    );
}

/// A port nothing listens on (bound, then released).
pub fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

impl From<mpsc::Receiver<Bytes>> for ReplyStream {
    fn from(rx: mpsc::Receiver<Bytes>) -> Self {
        Self(rx)
    }
}
