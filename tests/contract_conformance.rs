//! Output contracts, driven by fixtures: every reason alone and some
//! combined, for OpenAI chat, Ollama generate and chat, and Anthropic forced
//! tools; streamed and not; annotated and degraded.
//!
//! A case is a folder `tests/fixtures/contracts/<case>/`:
//! - `endpoint`: the client's path; its first segment names the dialect
//!   (`/ollama/api/generate`, `/ollama/api/chat`,
//!   `/openai/v1/chat/completions`, `/anthropic/v1/messages`);
//! - `route.toml` (optional): appended to the case's `[[routes]]` table, e.g.
//!   the `[routes.contract]` of `config/examples/grounded-answer.toml`;
//! - `request.json`: the client's body;
//! - `response.json`, `response.sse` or `response.ndjson`: the upstream's
//!   answer, served verbatim (a stream one event or line per write);
//! - `expect.json`: `{"output": "valid"}`; `{"output": "none"}` when no
//!   contract applies; or `{"output": "invalid", "reasons": [...], "task":
//!   ..., "body": "exact" | "degraded"}`, a degraded case adding the
//!   `degraded` answer (the string `"{reason}"` standing for the reason
//!   sentence) and the sentence's `reason_prefix`. `note` is free text.
//!
//! One probity has one route per case: `c<N>` at `/c<N>`, whose upstream
//! base path `/c<N>` tells the one fake upstream which case it serves. Cases
//! run one after another so that metric deltas and the capture list belong
//! to the case at hand; every disagreement is collected under the case's
//! name before the test fails with the whole list.
//!
//! What a case checks: the status; the body (valid, none and annotate: the
//! upstream's bytes; degrade: the answers replaced by the degraded answer
//! and every other byte as it came; a stream: the upstream's bytes with the
//! verdict comment before its terminal event, none for NDJSON); the
//! `probity-output`, `probity-output-reason`, `probity-capture` and
//! `x-request-id` headers; the change of every
//! `probity_model_invalid_output_total{task,reason}` sample; and the capture
//! listing (plus the captured verbatim body) on the admin listener.

// Tests and benches fail loudly: the request-path lints do not apply.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    unreachable_pub,
    missing_docs
)]

mod support;

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use serde::Deserialize;
use serde_json::Value;
use support::*;

/// The reasons, in the order a verdict reports them.
const REASONS: [&str; 12] = [
    "invalid_json",
    "schema_violation",
    "enum_violation",
    "field_name_echo",
    "placeholder",
    "too_short",
    "too_long",
    "citation_missing",
    "citation_unknown",
    "quote_ungrounded",
    "truncated",
    "refusal",
];

const ENDPOINTS: [&str; 4] = [
    "/openai/v1/chat/completions",
    "/ollama/api/generate",
    "/ollama/api/chat",
    "/anthropic/v1/messages",
];

const METRIC: &str = "probity_model_invalid_output_total";

/// The answer of `llama3.2:3b` under the grounded-answer contract.
const SMALL_MODEL_ANSWER: &str = r#"{"answer": "sufficient", "sufficient": true, "citations": []}"#;

// ---------------------------------------------------------------- cases

#[derive(Debug, Clone, Copy, PartialEq)]
enum Framing {
    Whole,
    Sse,
    Ndjson,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Output {
    Valid,
    Invalid,
    /// No contract applies: no verdict at all.
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum BodyKind {
    Exact,
    Degraded,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    output: Output,
    #[serde(default)]
    reasons: Vec<String>,
    task: Option<String>,
    body: Option<BodyKind>,
    degraded: Option<Value>,
    reason_prefix: Option<String>,
    #[serde(rename = "note")]
    _note: Option<String>,
}

struct Case {
    name: String,
    /// The client's path, e.g. `/ollama/api/generate`.
    endpoint: String,
    /// Its first segment: the route's dialect.
    dialect: String,
    /// The rest, sent after the route prefix.
    path: String,
    route: String,
    request: Vec<u8>,
    response: Vec<u8>,
    framing: Framing,
    expect: Expect,
}

impl Case {
    fn degrades(&self) -> bool {
        self.expect.body == Some(BodyKind::Degraded)
    }

    fn media(&self) -> &'static str {
        match self.framing {
            Framing::Whole => "application/json",
            Framing::Sse => "text/event-stream",
            Framing::Ndjson => "application/x-ndjson",
        }
    }
}

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/contracts")
}

/// Every case, sorted by name; panics with every problem of a malformed one.
fn load_cases() -> Vec<Case> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(fixtures_dir())
        .expect("tests/fixtures/contracts")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_dir())
        .collect();
    dirs.sort();
    let mut problems = Vec::new();
    let mut cases = Vec::new();
    for dir in dirs {
        match load_case(&dir) {
            Ok(case) => cases.push(case),
            Err(problem) => problems.push(format!("{}: {problem}", dir.display())),
        }
    }
    assert!(
        problems.is_empty(),
        "bad fixtures:\n{}",
        problems.join("\n")
    );
    assert!(
        !cases.is_empty(),
        "no fixtures in {}",
        fixtures_dir().display()
    );
    cases
}

fn load_case(dir: &Path) -> Result<Case, String> {
    let name = dir.file_name().unwrap().to_string_lossy().into_owned();
    let read = |file: &str| std::fs::read(dir.join(file)).map_err(|e| format!("{file}: {e}"));
    for entry in std::fs::read_dir(dir).map_err(|e| e.to_string())? {
        let file = entry.map_err(|e| e.to_string())?.file_name();
        let file = file.to_string_lossy();
        let known = [
            "endpoint",
            "route.toml",
            "request.json",
            "response.json",
            "response.sse",
            "response.ndjson",
            "expect.json",
        ];
        if !known.contains(&file.as_ref()) {
            return Err(format!("unknown file {file}"));
        }
    }
    let endpoint = String::from_utf8(read("endpoint")?)
        .map_err(|e| e.to_string())?
        .trim()
        .to_string();
    if !ENDPOINTS.contains(&endpoint.as_str()) {
        return Err(format!("endpoint {endpoint} is not one of {ENDPOINTS:?}"));
    }
    let (dialect, path) = endpoint[1..].split_once('/').unwrap();
    let route = match std::fs::read_to_string(dir.join("route.toml")) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("route.toml: {e}")),
    };
    let request = read("request.json")?;
    serde_json::from_slice::<Value>(&request).map_err(|e| format!("request.json: {e}"))?;
    let responses: Vec<(Framing, &str)> = [
        (Framing::Whole, "response.json"),
        (Framing::Sse, "response.sse"),
        (Framing::Ndjson, "response.ndjson"),
    ]
    .into_iter()
    .filter(|(_, file)| dir.join(file).exists())
    .collect();
    let [(framing, file)] = responses[..] else {
        return Err("exactly one response.{json,sse,ndjson} is needed".into());
    };
    let response = read(file)?;
    let expect: Expect =
        serde_json::from_slice(&read("expect.json")?).map_err(|e| format!("expect.json: {e}"))?;
    let case = Case {
        name,
        endpoint: endpoint.clone(),
        dialect: dialect.to_string(),
        path: format!("/{path}"),
        route,
        request,
        response,
        framing,
        expect,
    };
    check_expect(&case)?;
    Ok(case)
}

/// An `expect.json` that says one consistent thing.
fn check_expect(case: &Case) -> Result<(), String> {
    let e = &case.expect;
    match e.output {
        Output::Invalid => {
            if e.reasons.is_empty() {
                return Err("an invalid case names its reasons".into());
            }
            let order: Vec<Option<usize>> = e
                .reasons
                .iter()
                .map(|r| REASONS.iter().position(|x| x == r))
                .collect();
            if order.iter().any(Option::is_none) {
                return Err(format!("reasons {:?}: not all in {REASONS:?}", e.reasons));
            }
            if order.windows(2).any(|w| w[0] >= w[1]) {
                return Err(format!("reasons {:?}: not once each in order", e.reasons));
            }
            if e.task.is_none() || e.body.is_none() {
                return Err("an invalid case names its task and body".into());
            }
            let degraded_fields = e.degraded.is_some() && e.reason_prefix.is_some();
            match (e.body, case.framing) {
                (Some(BodyKind::Degraded), Framing::Whole) if degraded_fields => {}
                (Some(BodyKind::Degraded), Framing::Whole) => {
                    return Err("a degraded case gives `degraded` and `reason_prefix`".into())
                }
                (Some(BodyKind::Degraded), _) => {
                    return Err("degrade never applies to streams: body is exact".into())
                }
                _ if e.degraded.is_some() || e.reason_prefix.is_some() => {
                    return Err("`degraded` and `reason_prefix` only with body degraded".into())
                }
                _ => {}
            }
        }
        Output::Valid | Output::None => {
            let extra = !e.reasons.is_empty()
                || e.task.is_some()
                || e.body.is_some()
                || e.degraded.is_some()
                || e.reason_prefix.is_some();
            if extra {
                return Err("a valid or none case has only `output` (and `note`)".into());
            }
        }
    }
    Ok(())
}

/// A kind of case the suite must hold for each endpoint.
type Kind = fn(&Case) -> bool;

#[test]
fn the_fixtures_cover_every_reason_on_every_endpoint() {
    let cases = load_cases();
    let mut missing = Vec::new();
    for endpoint in ENDPOINTS {
        let of: Vec<&Case> = cases.iter().filter(|c| c.endpoint == endpoint).collect();
        for reason in REASONS {
            // Only OpenAI reports a refusal.
            if reason == "refusal" && !endpoint.starts_with("/openai") {
                continue;
            }
            if !of.iter().any(|c| c.expect.reasons == [reason]) {
                missing.push(format!("{endpoint}: {reason} alone"));
            }
        }
        let kinds: [(&str, Kind); 6] = [
            ("a valid answer", |c| c.expect.output == Output::Valid),
            ("no contract", |c| c.expect.output == Output::None),
            ("reasons combined", |c| c.expect.reasons.len() > 1),
            ("a degraded answer", |c| c.degrades()),
            ("a valid stream", |c| {
                c.framing != Framing::Whole && c.expect.output == Output::Valid
            }),
            ("an invalid stream", |c| {
                c.framing != Framing::Whole && c.expect.output == Output::Invalid
            }),
        ];
        for (what, test) in kinds {
            if !of.iter().any(|c| test(c)) {
                missing.push(format!("{endpoint}: {what}"));
            }
        }
    }
    // Degrade never applies to a stream, of either framing.
    for framing in [Framing::Sse, Framing::Ndjson] {
        let found = cases.iter().any(|c| {
            c.framing == framing
                && c.expect.output == Output::Invalid
                && c.route.contains("on_invalid = \"degrade\"")
        });
        if !found {
            missing.push(format!("{framing:?}: an invalid stream on a degrade route"));
        }
    }
    // The small model's answer under the grounded-answer contract.
    let small = cases
        .iter()
        .find(|c| c.name == "ollama_generate_small_model_echo")
        .expect("the ollama_generate_small_model_echo case");
    let response: Value = serde_json::from_slice(&small.response).unwrap();
    let request: Value = serde_json::from_slice(&small.request).unwrap();
    assert_eq!(response["response"], SMALL_MODEL_ANSWER);
    assert_eq!(request["model"], "llama3.2:3b");
    assert!(small.route.contains("task = \"grounded_answer\""));
    assert!(small.route.contains("min_chars = 12"));
    assert_eq!(
        small.expect.reasons,
        ["field_name_echo", "too_short", "citation_missing"]
    );
    assert!(missing.is_empty(), "not covered:\n{}", missing.join("\n"));
}

// ---------------------------------------------------------------- the run

#[tokio::test]
async fn every_contract_case_over_sockets() {
    let started = Instant::now();
    let cases = Arc::new(load_cases());
    let served = cases.clone();
    let upstream = Upstream::start(move |request| {
        let n: Option<usize> = request
            .target
            .strip_prefix("/c")
            .and_then(|rest| rest.split('/').next())
            .and_then(|n| n.parse().ok());
        match n.and_then(|n| served.get(n)) {
            Some(case) => reply(case),
            None => Reply::json(500, format!("no case for {}", request.target)),
        }
    })
    .await;
    let routes: String = cases
        .iter()
        .enumerate()
        .map(|(n, case)| {
            let upstream = format!("{}/c{n}", upstream.url());
            route(
                &format!("c{n}"),
                &format!("/c{n}"),
                &upstream,
                &case.dialect,
                "",
            ) + &case.route
                + "\n"
        })
        .collect();
    let probity = Probity::start(&config("", &routes));

    let mut failures = Vec::new();
    for (n, case) in cases.iter().enumerate() {
        for problem in run(&probity, n, case).await {
            failures.push(format!("{}: {problem}", case.name));
        }
    }
    eprintln!("{} contract cases in {:?}", cases.len(), started.elapsed());
    let mut disagreeing: Vec<&str> = failures
        .iter()
        .map(|f| f.split_once(':').map_or(f.as_str(), |(name, _)| name))
        .collect();
    disagreeing.dedup();
    assert!(
        failures.is_empty(),
        "{} of {} cases disagree ({} findings):\n{}",
        disagreeing.len(),
        cases.len(),
        failures.len(),
        failures.join("\n")
    );
}

/// The upstream's reply for a case: a stream one event (or line) per write.
fn reply(case: &Case) -> Reply {
    let delimiter: &[u8] = match case.framing {
        Framing::Whole => return Reply::json(200, case.response.clone()),
        Framing::Sse => b"\n\n",
        Framing::Ndjson => b"\n",
    };
    let mut parts = Vec::new();
    let mut start = 0;
    let bytes = &case.response;
    while start < bytes.len() {
        let end =
            find(&bytes[start..], delimiter).map_or(bytes.len(), |at| start + at + delimiter.len());
        parts.push(part(Before::Now, bytes[start..end].to_vec()));
        start = end;
    }
    Reply::stream(case.media(), parts)
}

async fn run(probity: &Probity, n: usize, case: &Case) -> Vec<String> {
    let mut problems = Vec::new();
    let id = format!("contract-{}", case.name);
    let before = invalid_outputs(probity).await;
    let request = Request::post(probity.url(&format!("/c{n}{}", case.path)))
        .header("content-type", "application/json")
        .header("x-request-id", &id)
        .body(Full::new(Bytes::from(case.request.clone())))
        .unwrap();
    let got = send(request).await;
    let after = invalid_outputs(probity).await;
    let expect = &case.expect;
    let invalid = expect.output == Output::Invalid;

    if got.status != 200 {
        problems.push(format!(
            "status {}, expected 200: {}",
            got.status,
            got.text()
        ));
        return problems;
    }
    if got.header("x-request-id") != Some(id.as_str()) {
        problems.push(format!("x-request-id {:?}", got.header("x-request-id")));
    }
    if got.header("content-type") != Some(case.media()) {
        problems.push(format!("content-type {:?}", got.header("content-type")));
    }
    if let Some(length) = got.header("content-length") {
        if length != got.body.len().to_string() {
            problems.push(format!(
                "content-length {length} for a body of {} bytes",
                got.body.len()
            ));
        }
    }

    // The body.
    match (case.framing, expect.body) {
        (Framing::Whole, Some(BodyKind::Degraded)) => {
            check_degraded(case, &got.body, &mut problems)
        }
        (Framing::Whole, _) => {
            if let Some(diff) = differ(&got.body, &case.response) {
                problems.push(format!("the body is not the upstream's: {diff}"));
            }
        }
        (_, _) => {
            let want = with_verdict(case);
            if let Some(diff) = differ(&got.body, &want) {
                problems.push(format!("the stream is not as expected: {diff}"));
            }
        }
    }

    // The verdict headers (a stream's verdict is in its body).
    if case.framing == Framing::Whole {
        let (output, reasons, capture) = match expect.output {
            Output::None => (None, None, None),
            Output::Valid => (Some("valid".to_string()), None, None),
            Output::Invalid => (
                Some("invalid".to_string()),
                Some(expect.reasons.join(",")),
                Some(id.clone()),
            ),
        };
        for (name, want) in [
            ("probity-output", output),
            ("probity-output-reason", reasons),
            ("probity-capture", capture),
        ] {
            if got.header(name) != want.as_deref() {
                problems.push(format!("{name}: {:?}, expected {want:?}", got.header(name)));
            }
        }
    }

    // The metric: one per reason, under the task, and nothing else.
    let mut want = BTreeMap::new();
    if invalid {
        let task = expect.task.clone().unwrap_or_default();
        for reason in &expect.reasons {
            want.insert((task.clone(), reason.clone()), 1.0);
        }
    }
    let delta = deltas(&before, &after);
    if delta != want {
        problems.push(format!("{METRIC} changed by {delta:?}, expected {want:?}"));
    }

    // The capture.
    check_capture(probity, n, case, &id, &mut problems).await;
    problems
}

/// The capture listing: an invalid answer is kept (the newest entry, with
/// its reasons and the verbatim upstream body); anything else is not.
async fn check_capture(
    probity: &Probity,
    n: usize,
    case: &Case,
    id: &str,
    problems: &mut Vec<String>,
) {
    let invalid = case.expect.output == Output::Invalid;
    // A stream is captured when it ends, which may be just after the client
    // has read its last byte.
    let patience = if invalid && case.framing != Framing::Whole {
        Duration::from_millis(100)
    } else {
        Duration::ZERO
    };
    let deadline = Instant::now() + patience;
    let (captures, entries) = loop {
        let listing = get(&probity.admin_url("/captures")).await.json();
        let captures = listing["captures"].as_array().cloned().unwrap_or_default();
        let entries: Vec<Value> = captures
            .iter()
            .filter(|c| c["request_id"] == id)
            .cloned()
            .collect();
        if !entries.is_empty() || Instant::now() >= deadline {
            break (captures, entries);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    if !invalid {
        if !entries.is_empty() {
            problems.push(format!("captured, though not invalid: {entries:?}"));
        }
        return;
    }
    let [entry] = &entries[..] else {
        problems.push(format!("{} capture entries, expected 1", entries.len()));
        return;
    };
    if captures[0]["request_id"] != id {
        problems.push("the capture is not the newest entry".into());
    }
    let reasons: Vec<Value> = case
        .expect
        .reasons
        .iter()
        .map(|r| r.as_str().into())
        .collect();
    let want = [
        ("outcome", Value::from("output_invalid")),
        ("reasons", Value::from(reasons)),
        ("route", Value::from(format!("c{n}"))),
        ("upstream_status", Value::from(200)),
    ];
    for (member, value) in want {
        if entry[member] != value {
            problems.push(format!(
                "capture {member}: {}, expected {value}",
                entry[member]
            ));
        }
    }
    let body = get(&probity.admin_url(&format!("/captures/{id}"))).await;
    if let Some(diff) = differ(&body.body, &case.response) {
        problems.push(format!("the captured body is not the upstream's: {diff}"));
    }
}

// ---------------------------------------------------------------- streams

/// The upstream's stream with the verdict comment the client should see:
/// before `data: [DONE]` (OpenAI) or the `message_stop` event (Anthropic),
/// or at the end without one; NDJSON and no-contract streams as they came.
fn with_verdict(case: &Case) -> Vec<u8> {
    let line = match (case.framing, case.expect.output) {
        (Framing::Ndjson, _) | (_, Output::None) => return case.response.clone(),
        (_, Output::Valid) => ": probity-output valid\n\n".to_string(),
        (_, Output::Invalid) => format!(
            ": probity-output invalid reason={}\n\n",
            case.expect.reasons.join(",")
        ),
    };
    let text = &case.response;
    let mut at = text.len();
    let mut start = 0;
    while start < text.len() {
        let end = find(&text[start..], b"\n\n").map_or(text.len(), |i| start + i + 2);
        let event = String::from_utf8_lossy(&text[start..end]);
        let terminal = event.lines().any(|l| match case.dialect.as_str() {
            "openai" => l.trim_end() == "data: [DONE]",
            _ => l.trim_end() == "event: message_stop",
        });
        if terminal {
            at = start;
            break;
        }
        start = end;
    }
    let mut out = text[..at].to_vec();
    out.extend_from_slice(line.as_bytes());
    out.extend_from_slice(&text[at..]);
    out
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

// ---------------------------------------------------------------- degrade

/// Where a response's answers are: each choice's `message.content`
/// (OpenAI), `response` (Ollama generate), `message.content` (Ollama chat),
/// the forced tool's `tool_use` block's `input` (Anthropic).
fn answer_pointers(case: &Case) -> Vec<String> {
    let response: Value = serde_json::from_slice(&case.response).unwrap_or_default();
    let request: Value = serde_json::from_slice(&case.request).unwrap_or_default();
    match case.endpoint.as_str() {
        "/openai/v1/chat/completions" => (0..response["choices"].as_array().map_or(0, Vec::len))
            .map(|i| format!("/choices/{i}/message/content"))
            .collect(),
        "/ollama/api/generate" => vec!["/response".into()],
        "/ollama/api/chat" => vec!["/message/content".into()],
        _ => {
            let tool = &request["tool_choice"]["name"];
            let blocks = response["content"].as_array().cloned().unwrap_or_default();
            blocks
                .iter()
                .enumerate()
                .filter(|(_, b)| b["type"] == "tool_use" && &b["name"] == tool)
                .map(|(i, _)| format!("/content/{i}/input"))
                .collect()
        }
    }
}

/// Only the answers are replaced, each by the degraded answer (a JSON
/// string holding it for text content, the value itself for a tool input);
/// every other byte is the upstream's.
fn check_degraded(case: &Case, got: &[u8], problems: &mut Vec<String>) {
    let pointers = answer_pointers(case);
    if pointers.is_empty() {
        problems.push("the fixture's response has no answer to degrade".into());
        return;
    }
    let mut upstream_spans = Vec::new();
    let mut got_spans = Vec::new();
    for pointer in &pointers {
        match (span(&case.response, pointer), span(got, pointer)) {
            (Some(up), Some(g)) => {
                upstream_spans.push(up);
                got_spans.push(g);
            }
            (None, _) => problems.push(format!("the fixture's response has no {pointer}")),
            (_, None) => problems.push(format!(
                "the body has no {pointer}: {}",
                String::from_utf8_lossy(got)
            )),
        }
    }
    if upstream_spans.len() != pointers.len() {
        return;
    }
    // Every byte outside the answers is the upstream's.
    let gaps = |spans: &[Range<usize>], len: usize| {
        let mut gaps = Vec::new();
        let mut at = 0;
        for span in spans {
            gaps.push(at..span.start);
            at = span.end;
        }
        gaps.push(at..len);
        gaps
    };
    let want_gaps = gaps(&upstream_spans, case.response.len());
    let got_gaps = gaps(&got_spans, got.len());
    for (i, (w, g)) in want_gaps.iter().zip(&got_gaps).enumerate() {
        if let Some(diff) = differ(&got[g.clone()], &case.response[w.clone()]) {
            problems.push(format!(
                "outside the answers (segment {i}), the body is not the upstream's: {diff}"
            ));
        }
    }
    // Each answer is the degraded answer.
    let template = case.expect.degraded.as_ref().unwrap();
    let prefix = case.expect.reason_prefix.as_deref().unwrap();
    let mut sentences = Vec::new();
    for (pointer, span) in pointers.iter().zip(&got_spans) {
        let value: Value = match serde_json::from_slice(&got[span.clone()]) {
            Ok(value) => value,
            Err(e) => {
                problems.push(format!("{pointer} is not JSON: {e}"));
                continue;
            }
        };
        let answer = if case.dialect == "anthropic" {
            value
        } else {
            match value.as_str().map(serde_json::from_str::<Value>) {
                Some(Ok(answer)) => answer,
                _ => {
                    problems.push(format!(
                        "{pointer} is not a string holding the degraded JSON: {value}"
                    ));
                    continue;
                }
            }
        };
        if let Err(mismatch) = matches(template, &answer, pointer, &mut sentences) {
            problems.push(format!("{mismatch} (the answer: {answer})"));
        }
    }
    for sentence in &sentences {
        if !sentence.starts_with("model output rejected: ") || !sentence.starts_with(prefix) {
            problems.push(format!(
                "the reason {sentence:?} does not start with {prefix:?}"
            ));
        }
        if sentence.len() <= "model output rejected: ".len() {
            problems.push("the reason states no finding".into());
        }
    }
}

/// `actual` is `template` with `{reason}` filled in; the reasons found are
/// gathered.
fn matches(
    template: &Value,
    actual: &Value,
    at: &str,
    sentences: &mut Vec<String>,
) -> Result<(), String> {
    match (template, actual) {
        (Value::String(t), Value::String(a)) if t.contains("{reason}") => {
            let (before, after) = t.split_once("{reason}").unwrap();
            let middle = a
                .strip_prefix(before)
                .and_then(|rest| rest.strip_suffix(after))
                .ok_or_else(|| format!("{at}: {a:?} is not {t:?} with a reason"))?;
            sentences.push(middle.to_string());
            Ok(())
        }
        (Value::Object(t), Value::Object(a)) => {
            let (tk, ak): (Vec<_>, Vec<_>) = (t.keys().collect(), a.keys().collect());
            if tk != ak {
                return Err(format!("{at}: members {ak:?}, expected {tk:?}"));
            }
            for (key, value) in t {
                matches(value, &a[key], &format!("{at}/{key}"), sentences)?;
            }
            Ok(())
        }
        (Value::Array(t), Value::Array(a)) if t.len() == a.len() => {
            for (i, (t, a)) in t.iter().zip(a).enumerate() {
                matches(t, a, &format!("{at}/{i}"), sentences)?;
            }
            Ok(())
        }
        _ if template == actual => Ok(()),
        _ => Err(format!("{at}: {actual}, expected {template}")),
    }
}

// ---------------------------------------------------------------- JSON spans

fn skip_ws(text: &[u8], mut at: usize) -> usize {
    while text.get(at).is_some_and(|b| b" \t\r\n".contains(b)) {
        at += 1;
    }
    at
}

fn string_end(text: &[u8], at: usize) -> Option<usize> {
    if text.get(at) != Some(&b'"') {
        return None;
    }
    let mut i = at + 1;
    loop {
        match text.get(i)? {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
}

/// The end of the value starting at `at`.
fn value_end(text: &[u8], at: usize) -> Option<usize> {
    match *text.get(at)? {
        b'"' => string_end(text, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = at;
            loop {
                match *text.get(i)? {
                    b'"' => {
                        i = string_end(text, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => {
            let len = text[at..]
                .iter()
                .position(|b| b",]} \t\r\n".contains(b))
                .unwrap_or(text.len() - at);
            (len > 0).then_some(at + len)
        }
    }
}

/// The bytes of the value at a JSON pointer (the last of duplicate keys).
fn span(text: &[u8], pointer: &str) -> Option<Range<usize>> {
    let mut at = skip_ws(text, 0);
    for token in pointer.split('/').skip(1) {
        let token = token.replace("~1", "/").replace("~0", "~");
        let open = *text.get(at)?;
        let mut i = skip_ws(text, at + 1);
        let mut found = None;
        let mut index = 0usize;
        while !matches!(text.get(i), Some(b'}' | b']') | None) {
            if open == b'{' {
                let end = string_end(text, i)?;
                let key: String = serde_json::from_slice(&text[i..end]).ok()?;
                i = skip_ws(text, end);
                if text.get(i) != Some(&b':') {
                    return None;
                }
                i = skip_ws(text, i + 1);
                if key == token {
                    found = Some(i);
                }
            } else if open == b'[' {
                if token.parse() == Ok(index) {
                    found = Some(i);
                }
                index += 1;
            } else {
                return None;
            }
            i = skip_ws(text, value_end(text, i)?);
            if text.get(i) == Some(&b',') {
                i = skip_ws(text, i + 1);
            }
        }
        at = found?;
    }
    Some(at..value_end(text, at)?)
}

// ---------------------------------------------------------------- helpers

/// Where two byte strings first differ, shown in context; `None` if equal.
fn differ(got: &[u8], want: &[u8]) -> Option<String> {
    if got == want {
        return None;
    }
    let at = got
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    let show = |bytes: &[u8]| {
        let from = at.saturating_sub(40);
        let to = (at + 80).min(bytes.len());
        format!("{:?}", String::from_utf8_lossy(&bytes[from.min(to)..to]))
    };
    Some(format!(
        "{} bytes, expected {}; first difference at byte {at}: got {}, expected {}",
        got.len(),
        want.len(),
        show(got),
        show(want)
    ))
}

type Samples = BTreeMap<(String, String), f64>;

/// Every `probity_model_invalid_output_total{task,reason}` sample.
async fn invalid_outputs(probity: &Probity) -> Samples {
    let text = get(&probity.admin_url("/metrics")).await.text();
    let mut samples = Samples::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(METRIC).and_then(|r| r.strip_prefix('{')) else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels.split(',').find_map(|pair| {
                let (key, value) = pair.split_once('=')?;
                (key == name).then(|| value.trim_matches('"').to_string())
            })
        };
        if let (Some(task), Some(reason), Ok(value)) =
            (label("task"), label("reason"), value.trim().parse())
        {
            samples.insert((task, reason), value);
        }
    }
    samples
}

fn deltas(before: &Samples, after: &Samples) -> Samples {
    after
        .iter()
        .map(|(key, value)| (key.clone(), value - before.get(key).copied().unwrap_or(0.0)))
        .filter(|(_, delta)| *delta != 0.0)
        .collect()
}
