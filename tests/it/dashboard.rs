//! The Grafana dashboard (`deploy/grafana/probity.json`) and the Prometheus
//! alert and recording rules (`deploy/prometheus/alerts.yml`) cannot
//! silently rot: every metric and label their queries name must exist in
//! the `/metrics` of the real binary after traffic that makes each of those
//! series appear (a panel reading a recorded series is checked as the rule
//! that records it), every query must parse as PromQL, and the rules pass
//! `promtool check rules` and their unit tests (`alerts_test.yml`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::*;
use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const DASHBOARD: &str = "deploy/grafana/probity.json";
const ALERTS: &str = "deploy/prometheus/alerts.yml";
const ALERTS_TEST: &str = "deploy/prometheus/alerts_test.yml";

/// Labels Prometheus adds at scrape time: a query may name them though
/// probity's `/metrics` never shows them.
const SCRAPE_LABELS: &[&str] = &["instance", "job"];

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

// ------------------------------------------------------------ the queries

/// One query of the dashboard or the alert rules, and the labels its
/// output is shown by (legend, annotations).
#[derive(Debug)]
struct Query {
    /// Where it is: the panel's or the alert's name.
    at: String,
    expr: String,
    shown_by: Vec<String>,
}

/// What one PromQL expression asks of probity's metrics.
#[derive(Debug, Default, PartialEq)]
struct Asks {
    /// Each selector's metric name and the labels its matchers name.
    selectors: Vec<(String, Vec<String>)>,
    /// Labels named by `by`, `without`, `on`, `ignoring`, `group_left`,
    /// `group_right`.
    grouping: Vec<String>,
    /// Recorded series (`level:metric:operation`) and the labels their
    /// matchers name.
    recorded: Vec<(String, Vec<String>)>,
}

#[derive(Debug, PartialEq)]
enum Token {
    Ident(String),
    Punct(char),
    /// A string, a number, a duration, a `[range]`, a `$variable`.
    Other,
}

/// Splits PromQL into what [`asks`] needs: identifiers and punctuation,
/// with strings, numbers, ranges and Grafana variables reduced to `Other`.
fn tokens(expr: &str) -> Vec<Token> {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        i += 1;
        if c.is_whitespace() {
            continue;
        }
        let token = match c {
            '"' | '\'' | '`' => {
                while i < chars.len() && chars[i] != c {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
                Token::Other
            }
            '[' => {
                while i < chars.len() && chars[i] != ']' {
                    i += 1;
                }
                i += 1;
                Token::Other
            }
            '$' | '0'..='9' | '.' => {
                while i < chars.len() && (word(chars[i]) || chars[i] == '.') {
                    i += 1;
                }
                Token::Other
            }
            c if word(c) => {
                while i < chars.len() && word(chars[i]) {
                    i += 1;
                }
                Token::Ident(chars[start..i].iter().collect())
            }
            c => Token::Punct(c),
        };
        out.push(token);
    }
    out
}

/// The metric names and labels an expression names. Metric names are the
/// identifiers that start with `probity_`.
fn asks(expr: &str) -> Asks {
    let tokens = tokens(expr);
    let mut asks = Asks::default();
    let mut i = 0;
    while i < tokens.len() {
        let Token::Ident(ident) = &tokens[i] else {
            i += 1;
            continue;
        };
        i += 1;
        let opens = |at: usize, c: char| tokens.get(at) == Some(&Token::Punct(c));
        let list_up_to = |at: &mut usize, close: char| {
            let mut names = Vec::new();
            while *at < tokens.len() && tokens[*at] != Token::Punct(close) {
                if let Token::Ident(name) = &tokens[*at] {
                    names.push(name.clone());
                }
                *at += 1;
            }
            names
        };
        let recorded = ident.split(':').count() == 3;
        if ident.starts_with("probity_") || recorded {
            let mut labels = Vec::new();
            if opens(i, '{') {
                labels = list_up_to(&mut i, '}');
            }
            if recorded {
                asks.recorded.push((ident.clone(), labels));
            } else {
                asks.selectors.push((ident.clone(), labels));
            }
        } else if [
            "by",
            "without",
            "on",
            "ignoring",
            "group_left",
            "group_right",
        ]
        .contains(&ident.as_str())
            && opens(i, '(')
        {
            asks.grouping.extend(list_up_to(&mut i, ')'));
        }
    }
    asks
}

/// `{{label}}` in a legend, `$labels.label` in an annotation.
fn shown_by(text: &str) -> Vec<String> {
    let mut labels = Vec::new();
    for (open, close) in [("{{", "}}"), ("$labels.", " ")] {
        let mut rest = text;
        while let Some(at) = rest.find(open) {
            rest = &rest[at + open.len()..];
            let end = rest.find(close).unwrap_or(rest.len());
            let name = rest[..end].trim();
            if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                labels.push(name.to_string());
            }
        }
    }
    labels
}

/// Every panel query of the dashboard (rows' panels too) and every
/// template variable's `label_values(selector, label)`.
fn dashboard_queries() -> Vec<Query> {
    let text = std::fs::read_to_string(repo(DASHBOARD)).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut queries = Vec::new();
    for panel in all_panels(&dashboard) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            queries.push(Query {
                at: format!("panel {:?}", panel["title"].as_str().unwrap_or("")),
                expr: target["expr"].as_str().unwrap().to_string(),
                shown_by: shown_by(target["legendFormat"].as_str().unwrap_or("")),
            });
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        let Some(query) = variable["query"]["query"].as_str() else {
            continue;
        };
        let inner = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .unwrap_or_else(|| panic!("variable {}: not label_values: {query}", variable["name"]));
        let (selector, label) = inner.rsplit_once(',').unwrap();
        queries.push(Query {
            at: format!("variable {}", variable["name"]),
            expr: selector.trim().to_string(),
            shown_by: vec![label.trim().to_string()],
        });
    }
    queries
}

fn all_panels(dashboard: &serde_json::Value) -> Vec<&serde_json::Value> {
    let mut panels = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        panels.push(panel);
        panels.extend(panel["panels"].as_array().into_iter().flatten());
    }
    panels
}

/// Every rule's `expr` (a block scalar or one line) and the labels an
/// alert's annotations show; a recording rule's `at` is `record <name>`.
/// The file's style is kept simple enough to read without a YAML parser;
/// the count of rules guards that reading.
fn alert_queries() -> Vec<Query> {
    let text = std::fs::read_to_string(repo(ALERTS)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let indent = |line: &str| line.len() - line.trim_start().len();
    let mut queries: Vec<Query> = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let rule = (trimmed.strip_prefix("- alert:").map(|n| ("alert", n)))
            .or_else(|| trimmed.strip_prefix("- record:").map(|n| ("record", n)));
        if let Some((kind, name)) = rule {
            queries.push(Query {
                at: format!("{kind} {}", name.trim()),
                expr: String::new(),
                shown_by: Vec::new(),
            });
            continue;
        }
        let Some(query) = queries.last_mut() else {
            continue;
        };
        if let Some(value) = trimmed.strip_prefix("expr:") {
            let value = value.trim();
            query.expr = if value.starts_with('|') || value.starts_with('>') {
                lines[at + 1..]
                    .iter()
                    .take_while(|l| l.trim().is_empty() || indent(l) > indent(line))
                    .copied()
                    .collect::<Vec<_>>()
                    .join("\n")
            } else {
                value.trim_matches(|c| c == '"' || c == '\'').to_string()
            };
        } else {
            query.shown_by.extend(shown_by(trimmed));
        }
    }
    let alerts = text.matches("- alert:").count();
    assert!(alerts >= 5, "{ALERTS}: {alerts} alerts");
    let rules = alerts + text.matches("- record:").count();
    assert_eq!(queries.len(), rules, "{ALERTS}: every rule read");
    for query in &queries {
        assert!(!query.expr.trim().is_empty(), "{}: no expr read", query.at);
    }
    queries
}

fn all_queries() -> Vec<Query> {
    let rules = alert_queries();
    let mut queries: Vec<Query> = dashboard_queries()
        .into_iter()
        .map(|query| read_through(query, &rules))
        .collect();
    queries.extend(rules);
    queries
}

/// A query of recorded series, checked as the rules that record them:
/// their expressions, with the labels the query matches and shows. A
/// series no rule records fails here.
fn read_through(query: Query, rules: &[Query]) -> Query {
    let recorded = asks(&query.expr).recorded;
    if recorded.is_empty() {
        return query;
    }
    let mut exprs = Vec::new();
    let mut shown_by = query.shown_by;
    for (name, labels) in recorded {
        let at = format!("record {name}");
        let rule = rules.iter().find(|rule| rule.at == at);
        let rule = rule.unwrap_or_else(|| panic!("{}: no rule records {name}", query.at));
        exprs.push(rule.expr.clone());
        shown_by.extend(labels);
    }
    Query {
        at: query.at,
        expr: exprs.join("\n+\n"),
        shown_by,
    }
}

// ------------------------------------------------------------ /metrics

/// Each sample name in an exposition (`_bucket`, `_sum`, `_count` as
/// printed) and the label names its series carry.
fn exposed(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut names: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let end = line.find(['{', ' ']).unwrap_or(line.len());
        let labels = names.entry(line[..end].to_string()).or_default();
        let Some(mut rest) = line[end..].strip_prefix('{') else {
            continue;
        };
        // name="value", with `\"` and `\\` escaped inside the value.
        while let Some(eq) = rest.find("=\"") {
            labels.insert(rest[..eq].trim_start_matches(',').to_string());
            let value = &rest[eq + 2..];
            let mut close = 0;
            let bytes = value.as_bytes();
            while bytes[close] != b'"' {
                close += if bytes[close] == b'\\' { 2 } else { 1 };
            }
            rest = &value[close + 1..];
            if rest.starts_with('}') {
                break;
            }
        }
    }
    names
}

/// What a query names that `/metrics` lacks, one line each.
fn missing_from(exposed: &BTreeMap<String, BTreeSet<String>>, query: &Query) -> Vec<String> {
    let asks = asks(&query.expr);
    let mut missing = Vec::new();
    let mut on_some = BTreeSet::new();
    for (metric, labels) in &asks.selectors {
        let Some(has) = exposed.get(metric) else {
            missing.push(format!("{}: metric {metric}", query.at));
            continue;
        };
        on_some.extend(has.iter().cloned());
        for label in labels.iter().filter(|l| !has.contains(*l)) {
            missing.push(format!("{}: label {label} on {metric}", query.at));
        }
    }
    let found = asks
        .selectors
        .iter()
        .filter(|(m, _)| exposed.contains_key(m));
    if found.count() < asks.selectors.len() {
        return missing;
    }
    for label in asks.grouping.iter().chain(&query.shown_by) {
        if !on_some.contains(label) && !SCRAPE_LABELS.contains(&label.as_str()) {
            missing.push(format!(
                "{}: label {label} on none of {:?}",
                query.at, asks.selectors
            ));
        }
    }
    missing
}

// ------------------------------------------------------------ the traffic

/// The route contract of `config/examples/grounded-answer.toml`, shortened.
const CONTRACT: &str = r#"
[routes.contract]
task = "grounded_answer"
prose = ["/answer"]
min_chars = 12
[routes.contract.citations]
output = "/citations"
sources = "/sources"
required = true
"#;

const ECHO: &str = r#"{"answer": "sufficient", "sufficient": true, "citations": []}"#;
const GOOD: &str =
    r#"{"answer": "Rayleigh scattering of sunlight.", "sufficient": true, "citations": ["s1"]}"#;

/// An Ollama generate request whose prompt document has one source; the
/// fake model answers well when the question says "good".
fn generate_request(question: &str) -> String {
    let prompt = serde_json::json!({
        "question": question,
        "sources": [{"id": "s1", "text": "Rayleigh scattering makes the sky blue."}]
    });
    serde_json::json!({"model": "llama3.2:3b", "prompt": prompt.to_string(), "stream": false})
        .to_string()
}

/// A fake Ollama whose model echoes field names, or answers well.
async fn ollama() -> Upstream {
    Upstream::start(|request| {
        let good = String::from_utf8_lossy(&request.body).contains("good");
        let answer = if good { GOOD } else { ECHO };
        let body = serde_json::json!({
            "model": "llama3.2:3b", "created_at": "2026-12-01T10:00:00Z",
            "response": answer, "done": true, "done_reason": "stop",
            "prompt_eval_count": 20, "eval_count": 9
        });
        Reply::json(200, body.to_string())
    })
    .await
}

/// A fake OpenAI: a streamed chat answer, and embeddings for each input,
/// where the input `malformed` makes `prompt_tokens` a string and `short`
/// drops a vector.
async fn openai() -> Upstream {
    Upstream::start(|request| {
        if request.target.ends_with("/chat/completions") {
            let stream = fixture("openai_chat_stream.sse");
            return Reply::stream("text/event-stream", vec![part(Before::Now, stream)]);
        }
        // A request probity could not read is passed on unchecked.
        let Ok(body) = serde_json::from_slice::<serde_json::Value>(&request.body) else {
            return Reply::json(200, "{}");
        };
        let inputs: Vec<&str> = body["input"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        let mut data: Vec<String> = (0..inputs.len())
            .map(|i| format!(r#"{{"object": "embedding", "index": {i}, "embedding": [0.5, {i}]}}"#))
            .collect();
        if inputs.contains(&"short") {
            data.pop();
        }
        let n = inputs.len();
        let prompt = if inputs.contains(&"malformed") {
            format!("\"{n}\"")
        } else {
            n.to_string()
        };
        Reply::json(
            200,
            format!(
                r#"{{"object": "list", "data": [{}], "model": "m", "usage": {{"prompt_tokens": {prompt}, "total_tokens": {n}}}}}"#,
                data.join(", ")
            ),
        )
    })
    .await
}

/// An embeddings answer of about 9 MB: more than the socket buffers hold,
/// so a client that reads nothing leaves most of it held in probity.
async fn big() -> Upstream {
    let floats = vec!["0.0123456789"; 700_000].join(",");
    let body: &'static [u8] = format!(
        r#"{{"object": "list", "data": [{{"object": "embedding", "index": 0, "embedding": [{floats}]}}], "model": "m", "usage": {{"prompt_tokens": 1, "total_tokens": 1}}}}"#
    )
    .into_bytes()
    .leak();
    Upstream::json(body).await
}

/// Asks for the big answer on a connection with a tiny receive window and
/// never reads: probity closes it at `send_timeout_ms`.
async fn slow_reader(probity: &Probity) -> TcpStream {
    let request = r#"{"model": "m", "input": "a"}"#;
    let head = format!(
        "POST /big/v1/embeddings HTTP/1.1\r\nHost: p\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{request}",
        request.len()
    );
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(probity.addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

async fn post_as(url: &str, body: &str, request_id: &str) -> Got {
    send(
        Request::post(url)
            .header("content-type", "application/json")
            .header("x-request-id", request_id)
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap(),
    )
    .await
}

/// Opens connections, each sending a request and staying open, until one
/// is refused with 503 for `max_connections`.
async fn overload(probity: &Probity) {
    let mut held = Vec::new();
    within("a connection refused for max_connections", async {
        loop {
            let mut stream = TcpStream::connect(probity.addr).await.unwrap();
            stream
                .write_all(b"GET /nowhere HTTP/1.1\r\nHost: p\r\n\r\n")
                .await
                .unwrap();
            let mut buf = [0u8; 4096];
            let n = stream.read(&mut buf).await.unwrap();
            if buf[..n].starts_with(b"HTTP/1.1 503") {
                return;
            }
            held.push(stream);
        }
    })
    .await;
}

/// Every kind of event the dashboard and the alerts show, once at least.
async fn traffic(probity: &Probity, store: &Path) {
    let embeddings = probity.url("/openai/v1/embeddings");
    let input = |inputs: &str| format!(r#"{{"model": "m", "input": {inputs}}}"#);
    assert_eq!(post(&embeddings, input(r#"["a", "b"]"#)).await.status, 200);
    let nulled = post(&embeddings, input(r#"["malformed", "b"]"#)).await;
    assert_eq!(
        nulled.header("probity-normalized"),
        Some("/usage/prompt_tokens")
    );
    post(&embeddings, input(r#"["short", "b"]"#))
        .await
        .error(502, "provider_invalid_response");
    // Over max_batch_inputs = 2: two chunks.
    let chunked = post(&embeddings, input(r#"["a", "b", "c"]"#)).await;
    assert_eq!(chunked.status, 200, "{}", chunked.text());
    assert_eq!(
        post(&embeddings, "input=a").await.status,
        200,
        "uninspected"
    );
    let chat = r#"{"model": "gpt-4o-mini", "stream": true, "messages": [{"role": "user", "content": "Hi"}]}"#;
    let streamed = post(&probity.url("/openai/v1/chat/completions"), chat).await;
    assert_eq!(streamed.status, 200);
    let generate = probity.url("/answers/api/generate");
    for question in ["Why is the sky blue?", "good: why is the sky blue?"] {
        let got = post(&generate, generate_request(question)).await;
        assert!(got.header("probity-output").is_some(), "{}", got.text());
    }
    post(&probity.url("/down/v1/embeddings"), input(r#"["a"]"#))
        .await
        .error(502, "upstream_unreachable");
    assert_eq!(get(&probity.url("/nowhere")).await.status, 404);
    post_as(&embeddings, &input(r#"["a"]"#), "panic-test")
        .await
        .error(500, "internal_error");
    assert_eq!(probity.admin_post("/reload", "").await.status, 200);
    // One capture written, then the store breaks: the next are dropped.
    let written = r#"probity_capture_writes_total{result="ok"}"#;
    within("a capture written", async {
        while probity.metric(written).await.is_none() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    std::fs::remove_dir_all(store).unwrap();
    std::fs::write(store, "not a directory").unwrap();
    post(&embeddings, input(r#"["malformed", "b"]"#)).await;
    overload(probity).await;
}

/// `/metrics` once every name and label the queries need is in it (the
/// capture store and the send timeout report a little after the requests),
/// or after a few seconds, for the failure to say what is missing.
async fn settled_metrics(probity: &Probity, queries: &[Query]) -> String {
    let started = std::time::Instant::now();
    loop {
        let text = get(&probity.admin_url("/metrics")).await.text();
        let exposed = exposed(&text);
        let complete = queries.iter().all(|q| missing_from(&exposed, q).is_empty());
        if complete || started.elapsed() > Duration::from_secs(8) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every series the dashboard and the alert rules query is produced here,
/// so each is checked in `/metrics` itself. (The exporter prints nothing,
/// not even `# HELP`, for a metric described but never touched, so there
/// is no weaker check to fall back on: a query whose series this traffic
/// cannot make must get traffic that does.)
#[tokio::test]
async fn every_metric_and_label_the_dashboard_and_alerts_query_is_in_metrics() {
    let (openai, ollama, big) = (openai().await, ollama().await, big().await);
    let store = temp_path(".captures");
    let routes = [
        route(
            "openai",
            "/openai",
            &openai.url(),
            "openai",
            "max_batch_inputs = 2",
        ),
        route(
            "down",
            "/down",
            &format!("http://127.0.0.1:{}", closed_port()),
            "openai",
            "",
        ),
        route("big", "/big", &big.url(), "openai", ""),
        route("answers", "/answers", &ollama.url(), "ollama", CONTRACT),
    ]
    .concat();
    let probity = Probity::start_with_env(
        &config(
            "max_connections = 8\nsend_timeout_ms = 1000",
            &format!(
                "{routes}\n[capture]\nstore = \"{}\"\n[telemetry]\notlp_endpoint = \"http://127.0.0.1:{}\"\n",
                store.display(),
                closed_port()
            ),
        ),
        &[("PROBITY_TEST_PANIC", "exchange")],
    );
    let _slow = slow_reader(&probity).await;
    traffic(&probity, &store).await;

    let queries = all_queries();
    let text = settled_metrics(&probity, &queries).await;
    let exposed = exposed(&text);
    let missing: Vec<String> = queries
        .iter()
        .flat_map(|q| missing_from(&exposed, q))
        .collect();
    assert!(
        missing.is_empty(),
        "queried but not in /metrics:\n{}\n\n{text}",
        missing.join("\n")
    );
    let _ = std::fs::remove_file(&store);
    let _ = std::fs::remove_dir_all(&store);
}

// ------------------------------------------------------------ promtool

fn promtool(test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("promtool"))
            .find(|path| path.is_file())
    });
    if found.is_none() {
        can_run(test, &["promtool"], "apt-get install prometheus");
    }
    found
}

fn run(program: &Path, args: &[&str]) {
    let output = Command::new(program)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "promtool {}: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// What `.ci/run` runs, so that `cargo test` alone covers it too: the rules
/// are valid, and each alert fires and stays quiet as its unit tests say.
#[test]
fn promtool_checks_the_alert_rules_and_runs_their_unit_tests() {
    let Some(promtool) = promtool("promtool_checks_the_alert_rules_and_runs_their_unit_tests")
    else {
        return;
    };
    run(&promtool, &["check", "rules", ALERTS]);
    run(&promtool, &["test", "rules", ALERTS_TEST]);
}

/// Every dashboard query parses as PromQL: each becomes a recording rule
/// (Grafana's variables given values) that `promtool check rules` reads.
#[test]
fn promtool_parses_every_dashboard_query() {
    let Some(promtool) = promtool("promtool_parses_every_dashboard_query") else {
        return;
    };
    let rules: Vec<serde_json::Value> = dashboard_queries()
        .iter()
        .enumerate()
        .map(|(n, query)| {
            let expr = query
                .expr
                .replace("$__rate_interval", "5m")
                .replace("$route", ".*")
                .replace("$client", ".*");
            serde_json::json!({"record": format!("dashboard:query_{n}"), "expr": expr})
        })
        .collect();
    assert!(rules.len() >= 20, "{} queries", rules.len());
    // JSON is YAML: one group of recording rules.
    let file = temp_path(".rules.yml");
    let groups = serde_json::json!({"groups": [{"name": "dashboard", "rules": rules}]});
    std::fs::write(&file, groups.to_string()).unwrap();
    run(&promtool, &["check", "rules", file.to_str().unwrap()]);
    std::fs::remove_file(&file).unwrap();
}

// ------------------------------------------------------------ the dashboard

/// Importable as it is: a data source variable every query uses, the route
/// and client variables, unique panel ids, panels on Grafana's 24-column
/// grid, and a panel for each thing the dashboard is there to show.
#[test]
fn the_dashboard_is_importable_and_shows_what_it_promises() {
    let text = std::fs::read_to_string(repo(DASHBOARD)).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(dashboard["schemaVersion"].as_u64().unwrap() >= 36);
    assert_eq!(dashboard["uid"], "probity");
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(variables, ["DS_PROMETHEUS", "route", "client"]);
    assert_eq!(dashboard["templating"]["list"][0]["type"], "datasource");
    assert_eq!(dashboard["templating"]["list"][0]["query"], "prometheus");
    let source = serde_json::json!({"type": "prometheus", "uid": "${DS_PROMETHEUS}"});
    let mut ids = BTreeSet::new();
    for panel in all_panels(&dashboard) {
        let title = &panel["title"];
        assert!(
            ids.insert(panel["id"].as_u64().unwrap()),
            "{title}: id taken"
        );
        let grid = &panel["gridPos"];
        let (x, w) = (grid["x"].as_u64().unwrap(), grid["w"].as_u64().unwrap());
        assert!(
            x + w <= 24 && grid["h"].as_u64().unwrap() > 0,
            "{title}: {grid}"
        );
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(panel["datasource"], source, "{title}");
        assert!(
            panel["description"].as_str().is_some_and(|d| !d.is_empty()),
            "{title}"
        );
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title}: no query");
        for target in targets {
            assert_eq!(target["datasource"], source, "{title}");
            assert!(target["refId"].is_string(), "{title}");
        }
    }
    let rules = alert_queries();
    let queried: BTreeSet<String> = dashboard_queries()
        .into_iter()
        .map(|query| read_through(query, &rules))
        .flat_map(|q| asks(&q.expr).selectors)
        .map(|(metric, _)| metric)
        .collect();
    for metric in [
        "probity_requests_total",
        "probity_request_duration_seconds_bucket",
        "probity_time_to_first_byte_seconds_bucket",
        "probity_overhead_seconds_bucket",
        "probity_model_invalid_output_total",
        "probity_model_outputs_total",
        "probity_malformed_figures_total",
        "probity_provider_invalid_response_total",
        "probity_tokens_total",
        "probity_upstream_errors_total",
        "probity_overload_rejections_total",
        "probity_chunked_requests_total",
        "probity_capture_dropped_total",
        "probity_capture_writes_total",
        "probity_build_info",
    ] {
        assert!(queried.contains(metric), "no panel queries {metric}");
    }
}

/// The reader of queries finds what a query names, or the checks above
/// would pass on a dashboard they did not read.
#[test]
fn the_query_reader_finds_each_metric_and_label() {
    let expr = r#"histogram_quantile(0.99, sum by (route, le) (rate(probity_request_duration_seconds_bucket{route=~"$route",status!="5.."}[$__rate_interval])))
        / on (route) group_left (client) probity_requests_total offset 10m"#;
    assert_eq!(
        asks(expr),
        Asks {
            selectors: vec![
                (
                    "probity_request_duration_seconds_bucket".into(),
                    vec!["route".into(), "status".into()]
                ),
                ("probity_requests_total".into(), vec![]),
            ],
            grouping: vec!["route".into(), "le".into(), "route".into(), "client".into()],
            recorded: vec![],
        }
    );
    let recorded = r#"route:probity_overhead_seconds:p99_5m{route=~"$route"}"#;
    assert_eq!(
        asks(recorded).recorded,
        [(
            "route:probity_overhead_seconds:p99_5m".to_string(),
            vec!["route".to_string()]
        )]
    );
    let panel = Query {
        at: "panel".into(),
        expr: recorded.into(),
        shown_by: vec![],
    };
    let read = read_through(panel, &alert_queries());
    assert!(
        read.expr.contains("probity_overhead_seconds_bucket"),
        "{read:?}"
    );
    assert_eq!(read.shown_by, ["route"]);
    assert_eq!(shown_by("{{route}} p99"), ["route"]);
    assert_eq!(
        shown_by("Route {{ $labels.route }}: {{ $value }}"),
        ["route"]
    );
    let exposed = exposed(
        "# TYPE probity_tokens_total counter\nprobity_tokens_total{route=\"a\\\"b,c\",kind=\"input\"} 3\nprobity_overload_rejections_total 1\n",
    );
    assert_eq!(
        exposed["probity_tokens_total"],
        BTreeSet::from(["route".into(), "kind".into()])
    );
    assert!(exposed["probity_overload_rejections_total"].is_empty());
    let renamed = Query {
        at: "panel".into(),
        expr: "sum by (pointer) (rate(probity_tokens_total{route=\"a\"}[5m]))".into(),
        shown_by: vec!["kind".into()],
    };
    assert_eq!(
        missing_from(&exposed, &renamed),
        [r#"panel: label pointer on none of [("probity_tokens_total", ["route"])]"#]
    );
    let alerts = alert_queries();
    assert!(alerts
        .iter()
        .any(|q| q.expr.contains("offset") && q.shown_by.contains(&"invariant".to_string())));
}

/// The output panels match no `task` or `reason` value: every task and
/// reason is shown as it appears (the tool-call reasons, the endpoints'
/// tasks), and one panel splits the invalid outputs by reason.
#[test]
fn the_output_panels_show_every_task_and_reason_without_naming_one() {
    let outputs = [
        "probity_model_invalid_output_total",
        "probity_model_outputs_total",
    ];
    let mut by_reason = false;
    for query in dashboard_queries() {
        let asks = asks(&query.expr);
        for (metric, labels) in &asks.selectors {
            if !outputs.contains(&metric.as_str()) {
                continue;
            }
            for label in ["task", "reason"] {
                assert!(
                    !labels.iter().any(|l| l == label),
                    "{}: {metric} matches a {label}: {}",
                    query.at,
                    query.expr
                );
            }
            by_reason |= metric == "probity_model_invalid_output_total"
                && asks.grouping.iter().any(|l| l == "reason")
                && query.shown_by.iter().any(|l| l == "reason");
        }
    }
    assert!(by_reason, "no panel shows the invalid outputs by reason");
}
