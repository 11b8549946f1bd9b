//! The ways probity is deployed, checked as far as this machine can (images
//! cannot be built or pulled here): the container's configuration is valid,
//! equal to the embedded default but for its listeners, and serves; the
//! Dockerfile copies what exists and exposes what the configuration binds;
//! the binary prints its default configuration and its routes.

use std::path::Path;
use std::process::Command;

use http::Request;
use http_body_util::Full;

use crate::support::*;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn probity(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_probity"))
        .args(args)
        .env_remove("PROBITY_CONFIG")
        .output()
        .unwrap()
}

const CONTAINER_CONFIG: &str = "deploy/container/probity.toml";

#[test]
fn the_container_configuration_is_the_default_listening_on_every_interface() {
    let default = read("config/probity.toml");
    let container = read(CONTAINER_CONFIG);
    // Its own header comment aside, only the two listeners and the capture
    // store (on the image's volume) differ.
    let body = container.split_once("\n\n").map(|(_, body)| body).unwrap();
    let expected = default
        .replacen(
            "listen = \"127.0.0.1:8080\"",
            "listen = \"0.0.0.0:8080\"",
            1,
        )
        .replacen(
            "admin_listen = \"127.0.0.1:9464\"",
            "admin_listen = \"0.0.0.0:9464\"",
            1,
        )
        .replacen(
            "store = \"probity-captures\"     # a directory (or file:///path), or memory: (lost on exit)",
            "store = \"/var/lib/probity/captures\"  # the image's volume; or file:///path, or memory:",
            1,
        );
    assert_eq!(
        body, expected,
        "{CONTAINER_CONFIG} drifted from the default"
    );
    let output = probity(&[
        "check-config",
        root().join(CONTAINER_CONFIG).to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{output:?}");
}

#[tokio::test]
async fn the_container_configuration_serves() {
    // On port 0: the image's own addresses are for the container's network.
    let path = root().join(CONTAINER_CONFIG);
    let ports = [
        ("PROBITY_LISTEN", "127.0.0.1:0"),
        ("PROBITY_ADMIN_LISTEN", "127.0.0.1:0"),
    ];
    let probity = Probity::launch(
        &[std::ffi::OsStr::new("--config"), path.as_os_str()],
        &ports,
        temp_path(".unused"),
    );
    assert_eq!(get(&probity.admin_url("/healthz")).await.status, 200);
    assert_eq!(get(&probity.admin_url("/readyz")).await.status, 200);

    // The image's HEALTHCHECK: `probity healthcheck` asks /healthz of the
    // admin listener (here moved to where the test bound it).
    let admin = probity.admin.to_string();
    let config = path.to_str().unwrap();
    let check = |admin: &str| {
        Command::new(env!("CARGO_BIN_EXE_probity"))
            .args(["--config", config, "--admin-listen", admin, "healthcheck"])
            .output()
            .unwrap()
    };
    let healthy = check(&admin);
    assert!(healthy.status.success(), "{healthy:?}");
    let closed = format!("127.0.0.1:{}", closed_port());
    let down = check(&closed);
    assert!(!down.status.success());
    assert!(String::from_utf8_lossy(&down.stderr).contains("/healthz"));
}

#[test]
fn the_dockerfile_copies_what_exists_and_exposes_what_is_bound() {
    let dockerfile = read("Dockerfile");
    let mut copies = 0;
    for line in dockerfile.lines().map(str::trim) {
        let Some(args) = line.strip_prefix("COPY ") else {
            continue;
        };
        if args.starts_with("--from") {
            continue;
        }
        let words: Vec<&str> = args.split_whitespace().collect();
        for source in &words[..words.len() - 1] {
            assert!(root().join(source).exists(), "COPY {source}: no such path");
            copies += 1;
        }
    }
    assert!(copies >= 4, "{dockerfile}");
    assert!(dockerfile.contains("cargo build --release --locked"));
    assert!(dockerfile.contains(&format!(
        "COPY {CONTAINER_CONFIG} /etc/probity/probity.toml"
    )));
    assert!(dockerfile.contains("ENV PROBITY_CONFIG=/etc/probity/probity.toml"));
    assert!(dockerfile.contains("EXPOSE 8080 9464"));
    assert!(dockerfile.contains("USER 10001"), "a non-root user");
    assert!(dockerfile.contains(
        r#"HEALTHCHECK --interval=10s --timeout=3s CMD ["/usr/local/bin/probity", "healthcheck"]"#
    ));
    let container = read(CONTAINER_CONFIG);
    assert!(container.contains("listen = \"0.0.0.0:8080\""));
    assert!(container.contains("admin_listen = \"0.0.0.0:9464\""));
    let ignore = read(".dockerignore");
    assert!(ignore.lines().any(|l| l.trim() == "target"));
}

#[test]
fn the_binary_prints_its_default_configuration_and_routes() {
    let output = probity(&["config", "default"]);
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        read("config/probity.toml")
    );

    let output = probity(&["routes"]);
    assert!(output.status.success(), "{output:?}");
    let table = String::from_utf8(output.stdout).unwrap();
    for prefix in [
        "/ollama",
        "/openai",
        "/anthropic",
        "/cohere",
        "/jina",
        "/voyage",
        "/tei",
        "/gemini",
    ] {
        assert!(table.contains(prefix), "{prefix} missing:\n{table}");
    }
    assert!(table.lines().next().unwrap().starts_with("name"));
    // An invalid file is reported like check-config does, and fails.
    let bad = temp_path(".toml");
    std::fs::write(&bad, "[server]\nmax_connections = \"lots\"\n").unwrap();
    let output = probity(&["--config", bad.to_str().unwrap(), "routes"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("server.max_connections"));
    let _ = std::fs::remove_file(bad);
}

/// `probity routes` says how each route holds its credential: a route that
/// signs or fetches a token is not one that passes the client's own.
#[test]
fn routes_name_how_each_route_holds_its_credential() {
    let file = temp_path(".toml");
    let route = |name: &str, extra: &str| {
        format!(
            "[[routes]]\nname = \"{name}\"\nprefix = \"/{name}\"\nupstream = \"https://example.com\"\n{extra}\n"
        )
    };
    let text = [
        route(
            "signed",
            "dialect = \"bedrock\"\naws_region = \"eu-west-1\"",
        ),
        route(
            "vertex",
            "dialect = \"vertex\"\ngoogle_credentials = \"metadata\"",
        ),
        route("open", "dialect = \"openai\""),
    ]
    .concat();
    std::fs::write(&file, text).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_probity"))
        .args(["--config", file.to_str().unwrap(), "routes"])
        .env_remove("PROBITY_CONFIG")
        .env_remove("GOOGLE_APPLICATION_CREDENTIALS")
        .env("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
        .env(
            "AWS_SECRET_ACCESS_KEY",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        )
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    let line = |name: &str| {
        table
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        line("signed").ends_with("SigV4-signed for eu-west-1"),
        "{table}"
    );
    assert!(
        line("vertex").ends_with("Google token from the metadata server"),
        "{table}"
    );
    assert!(line("open").ends_with("the client's own"), "{table}");
}

/// The Kubernetes manifests: valid against the Kubernetes schemas (offline,
/// `kubernetes-validate`), and in step with probity: probes on the admin
/// port's `/readyz` and `/healthz`, ports the configuration binds, a grace
/// period longer than the drain plus the preStop pause, and a ConfigMap
/// whose configuration passes `check-config`.
#[test]
fn the_kubernetes_manifests_are_valid_and_agree_with_the_configuration() {
    let install = "python3 -m pip install kubernetes-validate pyyaml";
    let validator = Command::new("kubernetes-validate")
        .arg("--version")
        .output();
    let yaml = Command::new("python3").args(["-c", "import yaml"]).status();
    let mut missing = Vec::new();
    if !validator.is_ok_and(|o| o.status.success()) {
        missing.push("kubernetes-validate");
    }
    if !yaml.is_ok_and(|s| s.success()) {
        missing.push("pyyaml");
    }
    if !can_run(
        "the_kubernetes_manifests_are_valid_and_agree_with_the_configuration",
        &missing,
        install,
    ) {
        return;
    }
    let manifests: Vec<_> = std::fs::read_dir(root().join("deploy/kubernetes"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    assert!(manifests.len() >= 6, "{manifests:?}");
    let output = Command::new("kubernetes-validate")
        .arg("--strict")
        .args(&manifests)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );

    let output = Command::new("python3")
        .arg(root().join("tests/deploy/kubernetes.py"))
        .arg(root())
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let facts: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let config = facts["config"].as_str().expect("the probity ConfigMap");
    let path = temp_path(".toml");
    std::fs::write(&path, config).unwrap();
    let checked = probity(&["check-config", path.to_str().unwrap()]);
    let _ = std::fs::remove_file(&path);
    assert!(checked.status.success(), "{checked:?}");
    let port = |key: &str| -> u64 {
        let line = config
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{key} =")))
            .unwrap();
        line.rsplit(':')
            .next()
            .unwrap()
            .trim_end_matches('"')
            .parse()
            .unwrap()
    };
    let (proxy, admin) = (port("listen"), port("admin_listen"));
    let drain_ms: u64 = config
        .lines()
        .find_map(|l| l.trim().strip_prefix("drain_timeout_ms = "))
        .map_or(30_000, |v| v.parse().unwrap());
    // Services reach the admin port only (metrics and health, and captures
    // only with the token); the proxy port stays inside the pod.
    for service in facts["services"].as_array().unwrap() {
        assert_eq!(
            service["target_ports"],
            serde_json::json!(["metrics"]),
            "{service}"
        );
    }
    let pods = facts["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 2, "the classic and the native sidecar");
    for pod in pods {
        let file = &pod["file"];
        assert_eq!(pod["ports"]["proxy"], proxy, "{file}");
        assert_eq!(pod["ports"]["metrics"], admin, "{file}");
        assert_eq!(pod["readiness"]["path"], "/readyz", "{file}");
        assert_eq!(pod["readiness"]["port"], admin, "{file}");
        assert_eq!(pod["liveness"]["path"], "/healthz", "{file}");
        assert_eq!(pod["liveness"]["port"], admin, "{file}");
        assert_eq!(pod["config_env"], "/etc/probity/probity.toml", "{file}");
        assert_eq!(pod["mount"], "/etc/probity", "{file}");
        // The admin token only ever from an optional Secret: absent, the
        // captures stay closed; never a literal in the manifest.
        let token = &pod["admin_token"]["secretKeyRef"];
        assert_eq!(token["name"], "probity-admin", "{file}");
        assert_eq!(token["optional"], true, "{file}");
        let grace = pod["grace"].as_u64().unwrap();
        let pause = pod["pre_stop"].as_u64().unwrap();
        assert!(
            grace * 1000 > drain_ms + pause * 1000,
            "{file}: a grace period of {grace} s leaves no room for a {drain_ms} ms drain after a {pause} s pause"
        );
    }
}

/// The Compose example (no `docker compose` here to run `config`): parsed
/// as YAML, its files exist, its probity configuration is valid, and the
/// ports, the scrape target and the data source agree with each other.
#[test]
fn the_compose_example_agrees_with_itself_and_with_probity() {
    let yaml = Command::new("python3")
        .args(["-c", "import yaml"])
        .status()
        .is_ok_and(|s| s.success());
    let missing: &[&str] = if yaml { &[] } else { &["pyyaml"] };
    if !can_run(
        "the_compose_example_agrees_with_itself_and_with_probity",
        missing,
        "python3 -m pip install pyyaml",
    ) {
        return;
    }
    let dir = root().join("deploy/compose");
    let as_json = |file: &str| -> serde_json::Value {
        let output = Command::new("python3")
            .args([
                "-c",
                "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))",
            ])
            .arg(dir.join(file))
            .output()
            .unwrap();
        assert!(output.status.success(), "{file}: {output:?}");
        serde_json::from_slice(&output.stdout).unwrap()
    };
    let compose = as_json("compose.yaml");
    let services = &compose["services"];
    for name in ["probity", "ollama", "prometheus", "grafana"] {
        assert!(services[name].is_object(), "no {name} service");
    }
    // Every bind-mounted file exists; the build context holds the Dockerfile.
    for (_, service) in services.as_object().unwrap() {
        for volume in service["volumes"].as_array().into_iter().flatten() {
            let source = volume.as_str().unwrap().split(':').next().unwrap();
            if source.starts_with("./") || source.starts_with("../") {
                assert!(dir.join(source).exists(), "{source}: no such file");
            }
        }
    }
    let context = services["probity"]["build"].as_str().unwrap();
    assert!(dir.join(context).join("Dockerfile").exists());

    // probity's configuration is valid and binds the ports Compose publishes.
    let config = dir.join("probity.toml");
    let output = probity(&["check-config", config.to_str().unwrap()]);
    assert!(output.status.success(), "{output:?}");
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains("listen = \"0.0.0.0:8080\""));
    assert!(text.contains("admin_listen = \"0.0.0.0:9464\""));
    assert!(text.contains("upstream = \"http://ollama:11434\""));
    let ports: Vec<&str> = services["probity"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(ports, ["8080:8080", "127.0.0.1:9464:9464"]);
    // The admin token comes from the shell that starts Compose, never from
    // a file in the repository.
    assert_eq!(
        services["probity"]["environment"]["PROBITY_ADMIN_TOKEN"],
        "${PROBITY_ADMIN_TOKEN:-}"
    );

    // Prometheus scrapes probity's admin port; Grafana reads Prometheus.
    let prometheus = as_json("prometheus.yml");
    let target = &prometheus["scrape_configs"][0]["static_configs"][0]["targets"][0];
    assert_eq!(target, "probity:9464");
    let grafana = as_json("grafana-datasource.yml");
    assert_eq!(grafana["datasources"][0]["url"], "http://prometheus:9090");
    let published = services["prometheus"]["ports"][0].as_str().unwrap();
    assert!(published.ends_with(":9090"));

    // Prometheus evaluates probity's alert rules; Grafana loads its dashboard.
    let mounts = |service: &str| -> Vec<String> {
        let volumes = services[service]["volumes"].as_array().unwrap();
        volumes
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    };
    let rules = prometheus["rule_files"][0].as_str().unwrap();
    let mount = format!("../prometheus/alerts.yml:{rules}:ro");
    assert!(mounts("prometheus").contains(&mount), "{mount}");
    let provider = as_json("grafana-dashboards.yml");
    let folder = provider["providers"][0]["options"]["path"]
        .as_str()
        .unwrap();
    let mount = format!("../grafana/probity.json:{folder}/probity.json:ro");
    assert!(mounts("grafana").contains(&mount), "{mount}");
    let mount = "./grafana-dashboards.yml:/etc/grafana/provisioning/dashboards/probity.yml:ro";
    assert!(mounts("grafana").iter().any(|m| m == mount), "{mount}");
}

/// Through the example's admin port (the container's configuration, bound to
/// every interface, which the Kubernetes Service and Compose publish):
/// without the admin token nothing that reads an exchange or changes state
/// is answered, while Prometheus's scrape and the probes are; with the
/// token, all of it is.
#[tokio::test]
async fn the_examples_admin_port_reads_and_reloads_nothing_without_the_token() {
    let path = root().join(CONTAINER_CONFIG);
    // The container binds every interface, as the Service and Compose
    // reach it; the test's requests still go to this host alone.
    let launch = |token: &str, admin: &str| {
        Probity::launch(
            &[std::ffi::OsStr::new("--config"), path.as_os_str()],
            &[
                ("PROBITY_LISTEN", "127.0.0.1:0"),
                ("PROBITY_ADMIN_LISTEN", admin),
                ("PROBITY_ADMIN_TOKEN", token),
            ],
            temp_path(".unused"),
        )
    };
    let guarded = [
        ("GET", "/captures"),
        ("GET", "/captures/some-request"),
        ("GET", "/captures/some-request/chunks/0"),
        ("GET", "/status.json"),
        ("GET", "/view.json?id=some-request"),
        ("POST", "/reload"),
    ];
    let ask = |probity: &Probity, method: &str, path: &str, token: Option<&str>| {
        let mut request = Request::builder()
            .method(method)
            .uri(probity.admin_url(path));
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        send(request.body(Full::default()).unwrap())
    };
    let open = |probity: &Probity| {
        let (metrics, healthz, readyz) = (
            probity.admin_url("/metrics"),
            probity.admin_url("/healthz"),
            probity.admin_url("/readyz"),
        );
        async move {
            let scraped = get(&metrics).await;
            assert_eq!(scraped.status, 200);
            assert!(scraped
                .header("content-type")
                .unwrap()
                .starts_with("text/plain; version=0.0.4"));
            assert!(scraped.text().contains("probity_build_info"));
            assert_eq!(get(&healthz).await.status, 200);
            assert_eq!(get(&readyz).await.status, 200);
        }
    };

    // No token configured (the Secret absent), on every interface: closed
    // to everyone, whatever is presented, and the error says how to open it.
    let closed = launch("", "0.0.0.0:0");
    assert!(closed.admin.ip().is_unspecified(), "{}", closed.admin);
    open(&closed).await;
    for (method, path) in guarded {
        for token in [None, Some(ADMIN_TOKEN)] {
            let got = ask(&closed, method, path, token).await;
            let error = got.error(401, "unauthenticated");
            assert_eq!(error["code"], "admin_token_required", "{path}");
            assert!(
                error["message"]
                    .as_str()
                    .unwrap()
                    .contains("set PROBITY_ADMIN_TOKEN"),
                "{error}"
            );
            assert_eq!(
                got.header("www-authenticate"),
                Some("Bearer realm=\"probity admin\"")
            );
        }
    }
    // The page's shell holds no data: it asks for the token.
    let shell = get(&closed.admin_url("/")).await;
    assert_eq!(shell.status, 200);
    assert!(shell.text().contains("id=\"login\""));

    // No token, on loopback only (the binary's default listener): this
    // host's tools read what only this host can reach.
    let local = launch("", "127.0.0.1:0");
    for (method, path) in guarded {
        let got = ask(&local, method, path, None).await;
        let want = if path.contains("some-request") {
            404
        } else {
            200
        };
        assert_eq!(got.status, want, "{method} {path}: {}", got.text());
    }

    // A token configured: refused without it or with another, answered
    // with it, wherever the listener is.
    let probity = launch(ADMIN_TOKEN, "127.0.0.1:0");
    open(&probity).await;
    let wrong = "another-token-0123456789abcdef";
    for (method, path) in guarded {
        let missing = ask(&probity, method, path, None).await;
        missing.error(401, "unauthenticated");
        let refused = ask(&probity, method, path, Some(wrong)).await;
        let error = refused.error(401, "unauthenticated");
        assert!(error["message"]
            .as_str()
            .unwrap()
            .contains("not the value of PROBITY_ADMIN_TOKEN"));
        let got = ask(&probity, method, path, Some(ADMIN_TOKEN)).await;
        let want = if path.contains("some-request") {
            404
        } else {
            200
        };
        assert_eq!(got.status, want, "{method} {path}: {}", got.text());
    }
    assert!(probity.admin_get("/status.json").await.json()["routes"].is_array());
    // Each refusal is logged with its path and why, never with a token.
    let logs = probity.logs();
    let refusals: Vec<&serde_json::Value> = logs
        .iter()
        .filter(|l| l["message"] == "admin request refused")
        .collect();
    assert_eq!(refusals.len(), 2 * guarded.len(), "{refusals:?}");
    assert!(refusals.iter().any(|l| l["refusal"] == "wrong"));
    assert!(refusals.iter().any(|l| l["refusal"] == "missing"));
    let text = probity.log_text();
    assert!(!text.contains(ADMIN_TOKEN) && !text.contains(wrong));
}

/// An admin token that is no gate stops the start with its key path: too
/// short, or the token of a client (an app's token must not read captures).
#[test]
fn a_weak_or_shared_admin_token_stops_the_start() {
    let config = temp_path(".toml");
    std::fs::write(
        &config,
        "[[routes]]\nname = \"a\"\nprefix = \"/a\"\nupstream = \"http://127.0.0.1:9\"\ndialect = \"openai\"\n\n[[clients]]\nname = \"app\"\ntoken_env = \"PROBITY_TEST_APP_TOKEN\"\n",
    )
    .unwrap();
    let check = |admin: &str| {
        Command::new(env!("CARGO_BIN_EXE_probity"))
            .args(["check-config", config.to_str().unwrap()])
            .env("PROBITY_ADMIN_TOKEN", admin)
            .env("PROBITY_TEST_APP_TOKEN", "the-apps-token-0123456789")
            .output()
            .unwrap()
    };
    let short = check("short");
    assert!(!short.status.success());
    let said = String::from_utf8_lossy(&short.stdout).to_string()
        + &String::from_utf8_lossy(&short.stderr);
    assert!(
        said.contains("admin.token_env: PROBITY_ADMIN_TOKEN holds fewer than 16"),
        "{said}"
    );
    let shared = check("the-apps-token-0123456789");
    assert!(!shared.status.success());
    let said = String::from_utf8_lossy(&shared.stdout).to_string()
        + &String::from_utf8_lossy(&shared.stderr);
    assert!(
        said.contains("admin.token_env: PROBITY_ADMIN_TOKEN holds the token of clients[0]"),
        "{said}"
    );
    assert!(
        !said.contains("the-apps-token"),
        "a token was printed: {said}"
    );
    assert!(check("a-good-admin-token-0123456789").status.success());
    let _ = std::fs::remove_file(&config);
}
