//! The admin page, over real sockets with the real binary: `/status.json`
//! counts each route's answers and lists the latest captures, `/view.json`
//! lays a normalized capture out exactly as the client received it, the
//! page carries its Content-Security-Policy; then Debian's chromium, driven
//! headless by playwright-core (`tests/browser/admin_page.mjs`), opens the
//! page and checks that it shows the route, that a normalized capture opens
//! side by side with its nulled figure highlighted in both panes, that a
//! body holding `<script>` and `<img onerror>` is shown as text and runs
//! nothing, and that the page refreshes itself. It writes a screenshot.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;
use bytes::Bytes;
use http::Request;
use http_body_util::Full;

const EMBEDDINGS_REQUEST: &str = r#"{"model": "m", "input": ["a", "b"]}"#;
const HOSTILE: &str = r#"<script>window.__pwned=1</script><img src=x onerror=window.__pwned=2>"#;
const CHROMIUM: &str = "/usr/bin/chromium";
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/browser/admin_page.mjs");
const INSTALL: &str = "apt-get install chromium; npm ci --prefix tests/browser";

/// An embeddings answer; `model` and `prompt_tokens` as given (JSON text),
/// `vectors` of them.
fn embeddings(model: &str, prompt_tokens: &str, vectors: usize) -> String {
    let data: Vec<String> = (0..vectors)
        .map(|i| format!(r#"{{"object": "embedding", "index": {i}, "embedding": [0.1, 0.2]}}"#))
        .collect();
    format!(
        r#"{{"object": "list", "data": [{}], "model": {model}, "usage": {{"prompt_tokens": {prompt_tokens}, "total_tokens": 4}}}}"#,
        data.join(", ")
    )
}

/// Answers by the request's `x-fake` header: `normalized` (a quoted
/// count), `rejected` (one vector for two inputs), `hostile` (a quoted
/// count and markup in `model`), else valid.
async fn upstream() -> Upstream {
    Upstream::start(|request| {
        let hostile = serde_json::to_string(HOSTILE).unwrap();
        let body = match request.header("x-fake") {
            Some("normalized") => embeddings(r#""m""#, r#""4""#, 2),
            Some("rejected") => embeddings(r#""m""#, "2", 1),
            Some("hostile") => embeddings(&hostile, r#""4""#, 2),
            _ => embeddings(r#""m""#, "2", 2),
        };
        Reply::json(200, body)
    })
    .await
}

async fn exchange(probity: &Probity, fake: &str, id: &str) -> Got {
    send(
        Request::post(probity.url("/openai/v1/embeddings"))
            .header("content-type", "application/json")
            .header("x-fake", fake)
            .header("x-request-id", id)
            .body(Full::new(Bytes::from(EMBEDDINGS_REQUEST)))
            .unwrap(),
    )
    .await
}

/// Waits until `/status.json` lists `n` captures (they are queued, then
/// listed at once; this is the listing's view).
async fn status_with(probity: &Probity, n: usize) -> serde_json::Value {
    within("captures listed", async {
        loop {
            let status = probity.admin_get("/status.json").await.json();
            if status["captures"].as_array().unwrap().len() >= n {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

fn runs_text(runs: &serde_json::Value) -> String {
    runs.as_array()
        .unwrap()
        .iter()
        .map(|r| r["text"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn the_admin_page_shows_routes_and_captures_and_runs_no_body() {
    let upstream = upstream().await;
    let routes = [
        route("openai", "/openai", &upstream.url(), "openai", ""),
        route("idle", "/idle", "http://127.0.0.1:9", "cohere", ""),
    ]
    .concat();
    let probity = Probity::start(&config(
        "",
        &format!("{routes}\n[capture]\nstore = \"memory:\"\n"),
    ));

    assert_eq!(exchange(&probity, "valid", "valid-1").await.status, 200);
    let normalized = exchange(&probity, "normalized", "normalized-1").await;
    assert_eq!(
        normalized.header("probity-normalized"),
        Some("/usage/prompt_tokens")
    );
    exchange(&probity, "rejected", "rejected-1")
        .await
        .error(502, "provider_invalid_response");
    let hostile = exchange(&probity, "hostile", "hostile-1").await;
    assert_eq!(hostile.header("probity-capture"), Some("hostile-1"));

    let status = status_with(&probity, 3).await;
    assert_eq!(status["probity"]["ready"], true);
    assert_eq!(status["probity"]["version"], env!("CARGO_PKG_VERSION"));
    let route = &status["routes"][0];
    assert_eq!(route["route"], "openai", "{status}");
    assert_eq!(route["requests"], 4);
    assert_eq!(route["by_class"]["2xx"], 3);
    assert_eq!(route["by_class"]["5xx"], 1);
    assert_eq!(route["errors"], 1);
    assert_eq!(route["normalized"], 2);
    assert_eq!(route["rejected"], 1);
    assert_eq!(route["prefix"], "/openai");
    assert_eq!(route["upstream"], upstream.url());
    assert_eq!(route["dialect"], "openai");
    // A configured route that served nothing is listed, with zeros.
    let idle = &status["routes"][1];
    assert_eq!(idle["route"], "idle", "{status}");
    assert_eq!(idle["requests"], 0);
    assert_eq!(idle["dialect"], "cohere");
    let listed: Vec<&str> = status["captures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["request_id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["hostile-1", "rejected-1", "normalized-1"]);
    assert!(status["captures"][0].get("upstream_headers").is_none());

    // What the client received, byte for byte, with the nulled figure as
    // its own run on both sides.
    let view = probity.admin_get("/view.json?id=normalized-1").await.json();
    assert_eq!(runs_text(&view["delivered"]), normalized.text());
    assert_eq!(
        runs_text(&view["verbatim"]),
        embeddings(r#""m""#, r#""4""#, 2)
    );
    assert_eq!(view["exact"], true);
    let nulled = |side: &str| -> Vec<(String, String)> {
        view[side]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| !r["pointer"].is_null())
            .map(|r| {
                (
                    r["pointer"].as_str().unwrap().into(),
                    r["text"].as_str().unwrap().into(),
                )
            })
            .collect()
    };
    assert_eq!(
        nulled("verbatim"),
        [("/usage/prompt_tokens".into(), "\"4\"".into())]
    );
    assert_eq!(
        nulled("delivered"),
        [("/usage/prompt_tokens".into(), "null".into())]
    );
    assert_eq!(probity.admin_get("/view.json?id=nope").await.status, 404);

    let page = probity.admin_get("/").await;
    assert_eq!(page.status, 200);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    let csp = page.header("content-security-policy").unwrap();
    assert!(
        csp.starts_with("default-src 'none'; script-src 'sha256-"),
        "{csp}"
    );
    assert!(!csp.contains("unsafe"), "{csp}");
    let raw = probity.admin_get("/captures/hostile-1").await;
    assert!(raw
        .header("content-security-policy")
        .unwrap()
        .starts_with("sandbox"));
    let lost = probity.admin_get("/nope").await;
    assert_eq!(lost.status, 404);
    assert!(lost.text().contains("/status.json"), "{}", lost.text());

    in_chromium(&probity).await;
}

/// The page in a real browser; skipped loudly (failed under `CI`) when
/// chromium, node or playwright-core is missing.
async fn in_chromium(probity: &Probity) {
    let node = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .status();
    let playwright = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/browser/node_modules/playwright-core"
    );
    let mut missing = Vec::new();
    if !Path::new(CHROMIUM).exists() {
        missing.push("chromium");
    }
    if !node.is_ok_and(|s| s.success()) {
        missing.push("node");
    }
    if !Path::new(playwright).exists() {
        missing.push("playwright-core");
    }
    if !can_run("the admin page in chromium", &missing, INSTALL) {
        return;
    }
    let shot = temp_path("-admin-page.png");
    let started = Instant::now();
    let child = Command::new("node")
        .arg(SCRIPT)
        .args([probity.admin_url("/"), probity.url("/openai/v1/embeddings")])
        .args(["normalized-1", "hostile-1"])
        .arg(&shot)
        .arg(ADMIN_TOKEN)
        .env("CHROMIUM", CHROMIUM)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    let waited = tokio::task::spawn_blocking(move || child.wait_with_output());
    let output = match tokio::time::timeout(Duration::from_secs(120), waited).await {
        Ok(output) => output.unwrap().unwrap(),
        Err(_) => {
            // SIGTERM: playwright closes its browser on the way out.
            let _ = Command::new("kill").args(["-TERM", &pid]).status();
            panic!("the browser script hung for 120 s");
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "browser checks failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("all checks passed"), "{stdout}");
    assert!(shot.exists(), "no screenshot at {}", shot.display());
    println!("{stdout}");
    println!(
        "admin page screenshot: {} (browser run {:.1} s)",
        shot.display(),
        started.elapsed().as_secs_f64()
    );
}
