//! The process around the proxy: configuration, admin endpoints, connection
//! limits and the graceful drain.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;

fn probity_command() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_probity"));
    command.env_remove("PROBITY_CONFIG").env("RUST_LOG", "warn");
    command
}

const BAD_CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"
admin_listen = "localhost"
max_connections = "lots"
max_held_share = 1.5
verbose = true

[[routes]]
name = "ollama"
prefix = "/ollama"
upstream = "http://127.0.0.1:11434"
dialect = "ollama"

[[routes]]
name = "ollama"
prefix = "openai"
upstream = "127.0.0.1:9"
dialect = "bard"
timeout = 5
"#;

const EXPECTED_PROBLEMS: &[&str] = &[
    "server.max_connections: invalid type: string \"lots\", expected u64",
    "server.verbose: unknown field `verbose`",
    "server.admin_listen: not an ip:port",
    "server.max_held_share: is 1.5: must be a fraction of server.max_held_response_bytes",
    "routes[1].dialect: unknown dialect \"bard\": one of openai, azure, ollama, cohere",
    "routes[1].timeout: unknown field `timeout`",
    "routes[1].name: \"ollama\" is already the name of routes[0]",
    "routes[1].prefix: must start with '/'",
    "routes[1].upstream: not an http(s) URL",
];

fn assert_every_problem(stderr: &str) {
    for problem in EXPECTED_PROBLEMS {
        assert!(
            stderr.contains(problem),
            "missing {problem:?} in:\n{stderr}"
        );
    }
    let listed = stderr.lines().filter(|l| l.starts_with("  ")).count();
    assert_eq!(listed, EXPECTED_PROBLEMS.len(), "{stderr}");
}

#[test]
fn check_config_lists_every_problem_with_its_path() {
    let path = temp_path(".toml");
    std::fs::write(&path, BAD_CONFIG).unwrap();
    let output = probity_command()
        .arg("check-config")
        .arg(&path)
        .output()
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert_every_problem(&String::from_utf8_lossy(&output.stderr));
}

#[test]
fn a_bad_file_stops_probity_before_it_binds() {
    let path = temp_path(".toml");
    std::fs::write(&path, BAD_CONFIG).unwrap();
    let by_flag = probity_command()
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    let by_env = probity_command()
        .env("PROBITY_CONFIG", &path)
        .output()
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    for output in [by_flag, by_env] {
        assert_eq!(output.status.code(), Some(1));
        assert_every_problem(&String::from_utf8_lossy(&output.stderr));
        assert!(!String::from_utf8_lossy(&output.stdout).contains("listening"));
    }
}

#[test]
fn check_config_accepts_the_shipped_files_and_reports_a_missing_one() {
    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/config/probity.toml");
    let output = probity_command()
        .arg("check-config")
        .arg(shipped)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("ok (9 routes)"));

    let output = probity_command()
        .arg("check-config")
        .arg("/nonexistent/probity.toml")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr)
        .contains("file: cannot read /nonexistent/probity.toml"));
}

#[tokio::test]
async fn probity_config_names_the_file_to_run_on() {
    let upstream = Upstream::json(b"{}").await;
    let path = temp_path(".toml");
    std::fs::write(
        &path,
        config(
            "",
            &route("viaenv", "/viaenv", &upstream.url(), "passthrough", ""),
        ),
    )
    .unwrap();
    // Started with the variable only, no --config.
    let env_path = path.to_str().unwrap();
    let probity = Probity::launch(&[], &[("PROBITY_CONFIG", env_path)], path.clone());
    assert_eq!(get(&probity.url("/viaenv/x")).await.status, 200);
}

#[tokio::test]
async fn admin_endpoints_answer_on_their_own_port() {
    let upstream = Upstream::json(b"{}").await;
    let probity = Probity::start(&config(
        "",
        &route("ollama", "/ollama", &upstream.url(), "ollama", ""),
    ));
    post(&probity.url("/ollama/api/show"), "{}").await;
    get(&probity.url("/nowhere")).await;

    let health = get(&probity.admin_url("/healthz")).await;
    assert_eq!(
        (health.status.as_u16(), health.text().as_str()),
        (200, "ok\n")
    );
    let ready = get(&probity.admin_url("/readyz")).await;
    assert_eq!(
        (ready.status.as_u16(), ready.text().as_str()),
        (200, "ready\n")
    );
    let metrics = get(&probity.admin_url("/metrics")).await;
    assert_eq!(metrics.status, 200);
    assert!(metrics
        .header("content-type")
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let text = metrics.text();
    assert_eq!(
        metric_value(
            &text,
            "probity_requests_total{route=\"ollama\",client=\"unknown\",status=\"200\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        metric_value(
            &text,
            "probity_requests_total{route=\"-\",client=\"unknown\",status=\"404\"}"
        ),
        Some(1.0)
    );
    assert!(
        text.contains("# TYPE probity_request_duration_seconds histogram"),
        "{text}"
    );
    assert!(text.contains("probity_request_duration_seconds_bucket{route=\"ollama\",le=\"0.005\"}"));
    assert_eq!(probity.admin_get("/elsewhere").await.status, 404);
    let posted = post(&probity.admin_url("/metrics"), "").await;
    assert_eq!(posted.status, 405);

    // The proxy port never serves admin endpoints.
    get(&probity.url("/metrics")).await.error(404, "no_route");
    get(&probity.url("/healthz")).await.error(404, "no_route");
}

/// `promtool check metrics` is the reference linter for the exposition
/// format. `.ci/run` installs it; a developer machine without it is told so.
#[tokio::test]
async fn promtool_accepts_the_metrics() {
    let Ok(promtool) = which("promtool") else {
        can_run(
            "promtool_accepts_the_metrics",
            &["promtool"],
            "apt-get install prometheus",
        );
        return;
    };
    let (addr, _) = raw_upstream(|stream| async move { drop(stream) }).await;
    let upstream = Upstream::json(b"{}").await;
    let routes = [
        route("ok", "/ok", &upstream.url(), "openai", ""),
        route("broken", "/broken", &format!("http://{addr}"), "openai", ""),
    ]
    .concat();
    let probity = Probity::start(&config("max_connections = 1", &routes));
    // One keep-alive connection for every request, so the limit of one is
    // only exceeded by the raw connection below, which gets a 503.
    let mut held = TcpStream::connect(probity.addr).await.unwrap();
    for target in ["/ok/v1/embeddings", "/broken/v1/embeddings", "/none"] {
        let head = format!("GET {target} HTTP/1.1\r\nHost: p\r\n\r\n");
        held.write_all(head.as_bytes()).await.unwrap();
        let mut buf = [0u8; 4096];
        within("held response", held.read(&mut buf)).await.unwrap();
    }
    let reply = raw(probity.addr, b"GET /ok HTTP/1.1\r\nHost: p\r\n\r\n").await;
    assert!(reply.starts_with("HTTP/1.1 503"), "{reply}");
    let text = get(&probity.admin_url("/metrics")).await.text();
    for family in [
        "probity_requests_total",
        "probity_request_duration_seconds",
        "probity_upstream_errors_total",
        "probity_overload_rejections_total",
    ] {
        assert!(
            text.contains(&format!("# TYPE {family} ")),
            "no {family} in {text}"
        );
    }

    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "promtool: {}{}\n{text}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn which(program: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
        .ok_or(())
}

#[tokio::test]
async fn connections_over_the_limit_get_503_with_retry_after() {
    let upstream = Upstream::json(b"{}").await;
    let probity = Probity::start(&config(
        "max_connections = 1",
        &route("ollama", "/ollama", &upstream.url(), "ollama", ""),
    ));
    // The first connection stays open (keep-alive) after its request.
    let mut held = TcpStream::connect(probity.addr).await.unwrap();
    held.write_all(b"GET /ollama/api/tags HTTP/1.1\r\nHost: p\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = within("held response", held.read(&mut buf)).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));

    let reply = raw(
        probity.addr,
        b"GET /ollama/api/tags HTTP/1.1\r\nHost: p\r\n\r\n",
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 503"), "{reply}");
    assert!(
        reply.to_ascii_lowercase().contains("retry-after: 1"),
        "{reply}"
    );
    assert!(reply.contains("\"type\":\"overloaded\""), "{reply}");
    assert_eq!(
        probity
            .metric("probity_overload_rejections_total{limit=\"max_connections\"}")
            .await,
        Some(1.0)
    );

    // Once the held connection closes, there is room again.
    drop(held);
    within("room again", async {
        loop {
            let reply = raw(
                probity.addr,
                b"GET /ollama/api/tags HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n",
            )
            .await;
            if reply.starts_with("HTTP/1.1 200") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// Starts a stream held open by a gate; returns the client's response body.
async fn start_stream(probity: &Probity) -> hyper::body::Incoming {
    let request = Request::post(probity.url("/ollama/api/pull"))
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    let response = within("stream head", client().request(request))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.into_body()
}

fn gated_upstream_reply(gate: Arc<Notify>) -> Reply {
    Reply::stream(
        "application/x-ndjson",
        vec![
            part(Before::Now, b"{\"status\":\"pulling manifest\"}\n".to_vec()),
            part(Before::Gate(gate), b"{\"status\":\"success\"}\n".to_vec()),
        ],
    )
}

#[tokio::test]
async fn sigterm_drains_requests_in_flight_then_exits_0() {
    let gate = Arc::new(Notify::new());
    let upstream_gate = gate.clone();
    let upstream = Upstream::start(move |_| gated_upstream_reply(upstream_gate.clone())).await;
    let mut probity = Probity::start(&config(
        "drain_timeout_ms = 10000",
        &route("ollama", "/ollama", &upstream.url(), "ollama", ""),
    ));
    let mut body = start_stream(&probity).await;
    let first = within("first line", body.frame()).await.unwrap().unwrap();
    assert_eq!(
        first.into_data().unwrap(),
        "{\"status\":\"pulling manifest\"}\n"
    );

    probity.signal("TERM");
    within("readyz 503", async {
        while get(&probity.admin_url("/readyz")).await.status != 503 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        TcpStream::connect(probity.addr).await.is_err(),
        "the listener must be closed"
    );

    // The stream in flight still completes.
    gate.notify_one();
    let rest = within("rest of the stream", body.collect())
        .await
        .unwrap()
        .to_bytes();
    assert_eq!(rest, "{\"status\":\"success\"}\n");
    assert_eq!(probity.exit_code().await, Some(0));
}

#[tokio::test]
async fn the_drain_ends_at_its_timeout() {
    let gate = Arc::new(Notify::new());
    let upstream_gate = gate.clone();
    let upstream = Upstream::start(move |_| gated_upstream_reply(upstream_gate.clone())).await;
    let mut probity = Probity::start(&config(
        "drain_timeout_ms = 300",
        &route("ollama", "/ollama", &upstream.url(), "ollama", ""),
    ));
    let mut body = start_stream(&probity).await;
    within("first line", body.frame()).await.unwrap().unwrap();
    let started = std::time::Instant::now();
    probity.signal("INT");
    assert_eq!(probity.exit_code().await, Some(0));
    assert!(started.elapsed() >= Duration::from_millis(300));
    // The client's stream ends rather than hanging.
    assert!(within("cut stream", body.collect()).await.is_err());
}

/// The README's first command: `probity` with no argument runs on the
/// embedded default (its addresses, 127.0.0.1:8080 and :9464, are the
/// config's unit test's; here the listeners are moved to port 0 the way a
/// deployment moves them, so a probity from `cargo run` may stay up).
#[tokio::test]
async fn with_no_argument_the_embedded_default_runs() {
    let ports = [
        ("PROBITY_LISTEN", "127.0.0.1:0"),
        ("PROBITY_ADMIN_LISTEN", "127.0.0.1:0"),
    ];
    let probity = Probity::launch(&[], &ports, temp_path(".unused"));
    assert_eq!(get(&probity.admin_url("/readyz")).await.status, 200);
    let error = get(&probity.url("/nothing")).await.error(404, "no_route");
    let message = error["message"].as_str().unwrap();
    for prefix in [
        "/ollama",
        "/openai",
        "/anthropic",
        "/cohere",
        "/jina",
        "/voyage",
        "/tei",
        "/gemini",
        "/bedrock",
    ] {
        assert!(message.contains(prefix), "{message}");
    }
    // A normal start says which routes pass the client's own credential in
    // one INFO line, and warns of nothing.
    let logs = probity.logs();
    let warnings: Vec<&serde_json::Value> = logs.iter().filter(|l| l["level"] == "WARN").collect();
    assert!(warnings.is_empty(), "{warnings:?}");
    let passing: Vec<&serde_json::Value> = logs
        .iter()
        .filter(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("client credentials pass through"))
        })
        .collect();
    assert_eq!(passing.len(), 1, "{passing:?}");
    assert_eq!(passing[0]["level"], "INFO");
    let named: Vec<&str> = passing[0]["routes"].as_str().unwrap().split(',').collect();
    let keyed = [
        ("openai", "OPENAI_API_KEY"),
        ("anthropic", "ANTHROPIC_API_KEY"),
        ("cohere", "CO_API_KEY"),
        ("jina", "JINA_API_KEY"),
        ("voyage", "VOYAGE_API_KEY"),
        ("gemini", "GEMINI_API_KEY"),
        ("bedrock", "AWS_BEARER_TOKEN_BEDROCK"),
    ];
    let mut want: Vec<&str> = vec!["ollama", "tei"];
    want.extend(
        keyed
            .iter()
            .filter(|(_, var)| std::env::var_os(var).is_none())
            .map(|(route, _)| *route),
    );
    let mut named_sorted = named.clone();
    named_sorted.sort_unstable();
    want.sort_unstable();
    assert_eq!(named_sorted, want);
}

/// What is probably a mistake is warned of, once, with the route: a key
/// variable set but empty, and a key sent in clear text off this host.
#[tokio::test]
async fn a_start_warns_only_of_probable_mistakes() {
    let routes = format!(
        "{}{}{}",
        route(
            "empty",
            "/empty",
            "https://api.openai.com/v1",
            "openai",
            "api_key_env = \"PROBITY_TEST_EMPTY_KEY\""
        ),
        route(
            "clear",
            "/clear",
            "http://10.1.2.3:8000/v1",
            "openai",
            "api_key_env = \"PROBITY_TEST_SET_KEY\""
        ),
        route(
            "local",
            "/local",
            "http://127.0.0.1:8000/v1",
            "openai",
            "api_key_env = \"PROBITY_TEST_SET_KEY\""
        ),
    );
    let probity = Probity::start_with_env(
        &config("", &routes),
        &[
            ("PROBITY_TEST_EMPTY_KEY", ""),
            ("PROBITY_TEST_SET_KEY", "sk-test-secret-value"),
        ],
    );
    let logs = probity.logs();
    let warnings: Vec<(&str, &str)> = logs
        .iter()
        .filter(|l| l["level"] == "WARN")
        .map(|l| (l["route"].as_str().unwrap(), l["message"].as_str().unwrap()))
        .collect();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert_eq!(warnings[0].0, "empty");
    assert!(warnings[0].1.contains("set but empty"), "{}", warnings[0].1);
    assert_eq!(warnings[1].0, "clear");
    assert!(warnings[1].1.contains("clear text"), "{}", warnings[1].1);
    assert!(!probity.log_text().contains("sk-test-secret-value"));
    let passing = logs
        .iter()
        .find(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("client credentials"))
        })
        .unwrap();
    assert_eq!(passing["routes"], "empty");
}
