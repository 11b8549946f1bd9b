//! Output contracts, driven by fixtures: every reason alone and some
//! combined, for OpenAI chat, Ollama generate and chat, and Anthropic forced
//! tools; streamed and not; annotated and degraded.
//!
//! A case is a folder `tests/fixtures/contracts/<case>/`, read and run by the
//! shared runner, `tests/it/support/conformance.rs`:
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
//! One probity has one route per case: `c<N>` at `/c<N>`, in front of the
//! runner's one fake upstream. The client names its request id,
//! `contract-<case>`.
//!
//! What a case checks: the status; the body (valid, none and annotate: the
//! upstream's bytes; degrade: the answers replaced by the degraded answer
//! and every other byte as it came; a stream: the upstream's bytes with the
//! verdict comment before its terminal event, none for NDJSON); the
//! `probity-output`, `probity-output-reason`, `probity-capture` and
//! `x-request-id` headers; the change of every
//! `probity_model_invalid_output_total{task,reason}` sample; and, by the
//! runner's capture check, the capture listing (plus the captured verbatim
//! body) on the admin listener.

use crate::support;

use std::ops::Range;
use std::time::Instant;

use crate::support::conformance::*;
use crate::support::fixtures::*;
use crate::support::*;
use serde::Deserialize;
use serde_json::Value;

/// The reasons, in the order a verdict reports them.
/// The answer's reasons, in verdict order (the tool calls' are
/// tests/it/tool_conformance.rs's).
fn answer_reasons() -> Vec<&'static str> {
    probity_judge::contract::Reason::ALL
        .iter()
        .filter(|r| !r.of_a_tool_call())
        .map(|r| r.as_str())
        .collect()
}

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

/// What the case's `expect.json` says, and its `route.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Contract {
    output: Output,
    #[serde(default)]
    reasons: Vec<String>,
    task: Option<String>,
    body: Option<BodyKind>,
    degraded: Option<Value>,
    reason_prefix: Option<String>,
    #[serde(rename = "note")]
    _note: Option<String>,
    /// Appended to the case's `[[routes]]` table.
    #[serde(skip)]
    route: String,
}

type Case = support::conformance::Case<Contract>;

/// The files a contract case may hold.
const FILES: [&str; 7] = [
    "endpoint",
    "route.toml",
    "request.json",
    "response.json",
    "response.sse",
    "response.ndjson",
    "expect.json",
];

fn degrades(case: &Case) -> bool {
    case.expect.body == Some(BodyKind::Degraded)
}

/// The client's path, e.g. `/ollama/api/generate`.
fn client_path(case: &Case) -> String {
    format!("/{}{}", case.dialect, case.endpoint)
}

/// Every case, sorted by name; panics with every problem of a malformed one.
fn load_cases() -> Vec<Case> {
    let mut problems = Vec::new();
    let mut cases = Vec::new();
    for fixture in load_fixtures("contracts", |_| true) {
        match contract_case(cases.len(), &fixture) {
            Ok(case) => cases.push(case),
            Err(problem) => problems.push(format!("{}: {problem}", fixture.id())),
        }
    }
    assert!(
        problems.is_empty(),
        "bad fixtures:\n{}",
        problems.join("\n")
    );
    assert!(!cases.is_empty(), "no fixtures in tests/fixtures/contracts");
    cases
}

/// The `n`th case, on route `c<n>`.
fn contract_case(n: usize, fixture: &Fixture) -> Result<Case, String> {
    if let Some(file) = fixture.files.iter().find(|f| !FILES.contains(&f.as_str())) {
        return Err(format!("unknown file {file}"));
    }
    let endpoint = fixture.endpoint.as_str();
    if !ENDPOINTS.contains(&endpoint) {
        return Err(format!("endpoint {endpoint} is not one of {ENDPOINTS:?}"));
    }
    let (dialect, path) = endpoint[1..].split_once('/').unwrap();
    serde_json::from_slice::<Value>(&fixture.request).map_err(|e| format!("request.json: {e}"))?;
    let mut contract: Contract =
        serde_json::from_value(fixture.expect.clone()).map_err(|e| format!("expect.json: {e}"))?;
    contract.route = fixture.route.clone();
    // A stream one event (or line) per write.
    let writes = match fixture.framing {
        Framing::Whole => Vec::new(),
        framing => split_events(framing, &fixture.body)
            .into_iter()
            .map(|event| event.end)
            .collect(),
    };
    let case = Case {
        name: fixture.name.clone(),
        route: format!("c{n}"),
        dialect: dialect.to_string(),
        endpoint: format!("/{path}"),
        request_id: Some(format!("contract-{}", fixture.name)),
        writes,
        ..fixture.case(contract)
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
                .map(|r| answer_reasons().iter().position(|x| x == r))
                .collect();
            if order.iter().any(Option::is_none) {
                return Err(format!(
                    "reasons {:?}: not all in {:?}",
                    e.reasons,
                    answer_reasons()
                ));
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
        let of: Vec<&Case> = cases
            .iter()
            .filter(|c| client_path(c) == endpoint)
            .collect();
        for reason in answer_reasons() {
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
            ("a degraded answer", degrades),
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
                && c.expect.route.contains("on_invalid = \"degrade\"")
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
    let response: Value = serde_json::from_slice(&small.body).unwrap();
    let request: Value = serde_json::from_slice(&small.request).unwrap();
    assert_eq!(response["response"], SMALL_MODEL_ANSWER);
    assert_eq!(request["model"], "llama3.2:3b");
    assert!(small.expect.route.contains("task = \"grounded_answer\""));
    assert!(small.expect.route.contains("min_chars = 12"));
    assert_eq!(
        small.expect.reasons,
        ["field_name_echo", "too_short", "citation_missing"]
    );
    assert!(missing.is_empty(), "not covered:\n{}", missing.join("\n"));
}

// ---------------------------------------------------------------- the run

/// The answer checked against its contract's verdict; an invalid one
/// captured, and counted once per reason under its task.
struct Contracts;

impl Suite for Contracts {
    type Expect = Contract;

    fn check(&self, case: &Case, got: &Got, id: &str, failed: &mut Vec<String>) {
        check_answer(case, got, id, failed);
    }

    fn capture(&self, case: &Case) -> Option<Capture> {
        let expect = &case.expect;
        (expect.output == Output::Invalid).then(|| Capture {
            members: vec![
                ("outcome", Value::from("output_invalid")),
                ("reasons", Value::from(expect.reasons.clone())),
                ("invariant", Value::Null),
                ("pointers", Value::Array(Vec::new())),
            ],
            least: None,
        })
    }

    /// One per reason, under the task, and nothing else: each reason's
    /// sample moves by one, and the metric's sum by as many (a counter
    /// never falls, so no other sample moved).
    fn probes(&self, case: &Case) -> Vec<Probe> {
        let expect = &case.expect;
        let reasons = match expect.output {
            Output::Invalid => &expect.reasons[..],
            _ => &[],
        };
        let task = expect.task.clone().unwrap_or_default();
        let mut probes = vec![(METRIC, Vec::new(), reasons.len() as f64)];
        for reason in reasons {
            probes.push((
                METRIC,
                vec![("task", task.clone()), ("reason", reason.clone())],
                1.0,
            ));
        }
        probes
    }
}

#[tokio::test]
async fn every_contract_case_over_sockets() {
    let started = Instant::now();
    let cases = load_cases();
    let routes = |upstream: &str| -> String {
        cases
            .iter()
            .map(|case| {
                let prefix = format!("/{}", case.route);
                route(&case.route, &prefix, upstream, &case.dialect, "") + &case.expect.route + "\n"
            })
            .collect()
    };
    let mut bench = Bench::start(Contracts, |upstream| config("", &routes(upstream))).await;
    for case in &cases {
        bench.run(case).await;
    }
    eprintln!("{} contract cases in {:?}", cases.len(), started.elapsed());
    bench.finish("contract cases");
}

/// The status, the body (see the module's doc) and, for a whole answer, the
/// verdict headers (a stream's verdict is in its body).
fn check_answer(case: &Case, got: &Got, id: &str, failed: &mut Vec<String>) {
    let expect = &case.expect;
    check_status(got, 200, failed);
    if got.status != 200 {
        return;
    }
    check_content_type(got, case.content_type(), failed);
    check_content_length(got, failed);
    match (case.framing, expect.body) {
        (Framing::Whole, Some(BodyKind::Degraded)) => check_degraded(case, &got.body, failed),
        (Framing::Whole, _) => check_body("the body (the upstream's)", got, &case.body, failed),
        _ => check_body(
            "the stream (the upstream's, with the verdict)",
            got,
            &with_verdict(case),
            failed,
        ),
    }
    if case.framing != Framing::Whole {
        return;
    }
    let (output, reasons, capture) = match expect.output {
        Output::None => (None, None, None),
        Output::Valid => (Some("valid".to_string()), None, None),
        Output::Invalid => (
            Some("invalid".to_string()),
            Some(expect.reasons.join(",")),
            Some(id.to_string()),
        ),
    };
    for (name, want) in [
        ("probity-output", output),
        ("probity-output-reason", reasons),
        ("probity-capture", capture),
    ] {
        if got.header(name) != want.as_deref() {
            failed.push(format!("{name}: {:?}, want {want:?}", got.header(name)));
        }
    }
}

// ---------------------------------------------------------------- streams

/// The upstream's stream with the verdict comment the client should see:
/// before `data: [DONE]` (OpenAI) or the `message_stop` event (Anthropic),
/// or at the end without one; NDJSON and no-contract streams as they came.
fn with_verdict(case: &Case) -> Vec<u8> {
    let line = match (case.framing, case.expect.output) {
        (Framing::Ndjson, _) | (_, Output::None) => return case.body.clone(),
        (_, Output::Valid) => ": probity-output valid\n\n".to_string(),
        (_, Output::Invalid) => format!(
            ": probity-output invalid reason={}\n\n",
            case.expect.reasons.join(",")
        ),
    };
    let text = &case.body;
    let terminal = split_events(case.framing, text).into_iter().find(|event| {
        String::from_utf8_lossy(&text[event.clone()])
            .lines()
            .any(|l| match case.dialect.as_str() {
                "openai" => l.trim_end() == "data: [DONE]",
                _ => l.trim_end() == "event: message_stop",
            })
    });
    let at = terminal.map_or(text.len(), |event| event.start);
    let mut out = text[..at].to_vec();
    out.extend_from_slice(line.as_bytes());
    out.extend_from_slice(&text[at..]);
    out
}

// ---------------------------------------------------------------- degrade

/// Where a response's answers are: each choice's `message.content`
/// (OpenAI), `response` (Ollama generate), `message.content` (Ollama chat),
/// the forced tool's `tool_use` block's `input` (Anthropic).
fn answer_pointers(case: &Case) -> Vec<String> {
    let response: Value = serde_json::from_slice(&case.body).unwrap_or_default();
    let request: Value = serde_json::from_slice(&case.request).unwrap_or_default();
    match client_path(case).as_str() {
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
        match (span(&case.body, pointer), span(got, pointer)) {
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
    let want_gaps = gaps(&upstream_spans, case.body.len());
    let got_gaps = gaps(&got_spans, got.len());
    for (i, (w, g)) in want_gaps.iter().zip(&got_gaps).enumerate() {
        let what = format!("outside the answers, segment {i} of the body (the upstream's)");
        if let Some(diff) = differ(&what, &got[g.clone()], &case.body[w.clone()]) {
            problems.push(diff);
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

/// The bytes of the value at a JSON pointer (the last of duplicate keys).
fn span(text: &[u8], pointer: &str) -> Option<Range<usize>> {
    find_last(text, pointer).map(|span| span.value)
}
