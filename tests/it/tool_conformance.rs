//! Tool calls, driven by fixtures: every tool-call reason in every dialect
//! that has tools (OpenAI chat and the Responses API, Anthropic messages,
//! Gemini generateContent, Ollama chat; Bedrock Converse whole), whole and
//! streamed, and the arguments' wire type as a
//! payload fault.
//!
//! A case is a folder `tests/fixtures/tools/<case>/`, run by the shared
//! runner, `tests/it/support/conformance.rs`:
//! - `endpoint`: the client's path, its first segment the dialect
//!   (`/openai/v1/chat/completions`, `/anthropic/v1/messages`,
//!   `/gemini/v1beta/models/m:generateContent`, `…:streamGenerateContent?alt=sse`,
//!   `/ollama/api/chat`, `/bedrock/model/{id}/converse`);
//! - `route.toml` (optional): appended to the case's `[[routes]]` table;
//! - `request.json`, `response.json|sse|ndjson`: the client's body and the
//!   upstream's answer (a stream one event or line per write);
//! - `expect.json`: `{"output": "valid"}`; `{"output": "none"}` (nothing
//!   judged); `{"output": "invalid", "reasons": [...], "task": ...}`; or
//!   `{"output": "rejected", "invariant": ..., "broken_event": N}` (a 502,
//!   or a stream cut at its event `N` with the dialect's error event).
//!
//! What a case checks: the status; the body, the upstream's bytes (a
//! stream's with the verdict comment before its terminal event where the
//! dialect allows comments); the `probity-output`, `probity-output-reason`
//! and `probity-capture` headers of a whole answer; the capture (outcome
//! `output_invalid` with the reasons, or `rejected` with the invariant);
//! and the counters: `probity_model_outputs_total{task}` once per judged
//! response however many calls it holds, and
//! `probity_model_invalid_output_total{task,reason,client}` once per reason.

use crate::support;

use std::collections::BTreeSet;
use std::time::Instant;

use crate::support::conformance::*;
use crate::support::fixtures::*;
use crate::support::*;
use serde::Deserialize;
use serde_json::Value;

const REASONS: [&str; 4] = [
    "tool_unknown",
    "tool_arguments_invalid_json",
    "tool_arguments_not_object",
    "tool_arguments_schema",
];

/// Each dialect with tools: its endpoint prefix and task.
const DIALECTS: [(&str, &str); 5] = [
    ("openai", "chat_completions"),
    ("anthropic", "anthropic_messages"),
    ("gemini", "gemini_generate_content"),
    ("ollama", "ollama_chat"),
    ("bedrock", "bedrock_converse"),
];

const INVALID_OUTPUT: &str = "probity_model_invalid_output_total";
const OUTPUTS: &str = "probity_model_outputs_total";

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Output {
    Valid,
    Invalid,
    None,
    Rejected,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Tools {
    output: Output,
    #[serde(default)]
    reasons: Vec<String>,
    task: Option<String>,
    invariant: Option<String>,
    broken_event: Option<usize>,
    #[serde(rename = "note")]
    _note: Option<String>,
    #[serde(skip)]
    route: String,
}

type Case = support::conformance::Case<Tools>;

fn load_cases() -> Vec<Case> {
    let mut problems = Vec::new();
    let mut cases = Vec::new();
    for fixture in load_fixtures("tools", |_| true) {
        match tool_case(cases.len(), &fixture) {
            Ok(case) => cases.push(case),
            Err(problem) => problems.push(format!("{}: {problem}", fixture.id())),
        }
    }
    assert!(
        problems.is_empty(),
        "bad fixtures:\n{}",
        problems.join("\n")
    );
    cases
}

fn tool_case(n: usize, fixture: &Fixture) -> Result<Case, String> {
    let (dialect, path) = fixture.endpoint[1..]
        .split_once('/')
        .ok_or("endpoint without a dialect")?;
    let task = DIALECTS
        .iter()
        .find(|(d, _)| *d == dialect)
        .map(|(_, t)| *t)
        .ok_or_else(|| format!("dialect {dialect} has no tools"))?;
    // The Responses API is the openai dialect's too, with its own task.
    let task = if path.ends_with("/responses") {
        "responses"
    } else {
        task
    };
    serde_json::from_slice::<Value>(&fixture.request).map_err(|e| format!("request.json: {e}"))?;
    let mut expect: Tools =
        serde_json::from_value(fixture.expect.clone()).map_err(|e| format!("expect.json: {e}"))?;
    expect.route = fixture.route.clone();
    match expect.output {
        Output::Invalid => {
            let order: Vec<Option<usize>> = expect
                .reasons
                .iter()
                .map(|r| REASONS.iter().position(|x| x == r))
                .collect();
            if order.is_empty() || order.iter().any(Option::is_none) {
                return Err(format!("reasons {:?} not in {REASONS:?}", expect.reasons));
            }
            if order.windows(2).any(|w| w[0] >= w[1]) {
                return Err("reasons not once each in order".into());
            }
            if expect.task.as_deref() != Some(task) {
                return Err(format!("an invalid {dialect} case has task {task}"));
            }
        }
        Output::Rejected if expect.invariant.is_none() => {
            return Err("a rejected case names its invariant".into())
        }
        _ if !expect.reasons.is_empty() => return Err("reasons only when invalid".into()),
        _ => {}
    }
    let writes = match fixture.framing {
        Framing::Whole => Vec::new(),
        framing => split_events(framing, &fixture.body)
            .into_iter()
            .map(|event| event.end)
            .collect(),
    };
    Ok(Case {
        name: fixture.name.clone(),
        route: format!("t{n}"),
        dialect: dialect.to_string(),
        endpoint: format!("/{path}"),
        request_id: Some(format!("tools-{}", fixture.name)),
        writes,
        ..fixture.case(expect)
    })
}

#[test]
fn the_fixtures_cover_every_reason_in_every_dialect_whole_and_streamed() {
    let cases = load_cases();
    let mut missing = Vec::new();
    let tasks = DIALECTS.iter().chain([&("openai", "responses")]);
    for &(dialect, task) in tasks {
        for streamed in [false, true] {
            let of: Vec<&Case> = cases
                .iter()
                .filter(|c| task_of(c) == task && c.framing.streamed() == streamed)
                .collect();
            let what = if streamed { "streamed" } else { "whole" };
            // Arguments that are text exist only where the wire or the
            // stream makes them text: OpenAI's string, Anthropic's and
            // Bedrock's deltas.
            let text =
                dialect == "openai" || (["anthropic", "bedrock"].contains(&dialect) && streamed);
            for reason in REASONS {
                let reachable = text
                    || !reason.starts_with("tool_arguments_")
                    || reason == "tool_arguments_schema";
                if reachable && !of.iter().any(|c| c.expect.reasons == [reason]) {
                    missing.push(format!("{task} {what}: {reason} alone"));
                }
            }
            for (label, output) in [("valid", Output::Valid), ("rejected", Output::Rejected)] {
                if !of.iter().any(|c| c.expect.output == output) {
                    missing.push(format!("{task} {what}: a {label} case"));
                }
            }
        }
        let degrade = cases.iter().any(|c| {
            task_of(c) == task
                && c.expect.output == Output::Invalid
                && c.expect.route.contains("on_invalid = \"degrade\"")
        });
        if !degrade {
            missing.push(format!("{task}: an invalid call on a degrade route"));
        }
    }
    let several = cases.iter().any(|c| c.expect.reasons.len() > 1);
    if !several {
        missing.push("a response with several invalid calls".into());
    }
    assert!(missing.is_empty(), "not covered:\n{}", missing.join("\n"));
}

/// A case's task: its dialect's, but the Responses API's on the openai
/// dialect.
fn task_of(case: &Case) -> &'static str {
    if case.endpoint.ends_with("/responses") {
        return "responses";
    }
    DIALECTS
        .iter()
        .find(|(d, _)| *d == case.dialect)
        .map_or("", |(_, t)| *t)
}

struct Suite;

impl support::conformance::Suite for Suite {
    type Expect = Tools;

    fn check(&self, case: &Case, got: &Got, id: &str, failed: &mut Vec<String>) {
        match case.expect.output {
            Output::Rejected if !case.framing.streamed() => {
                check_status(got, 502, failed);
                let json: Value = serde_json::from_slice(&got.body).unwrap_or_default();
                let error = probity_error(&json).unwrap_or_default();
                if error["code"] != Value::from(case.expect.invariant.clone()) {
                    failed.push(format!("error {error}, want {:?}", case.expect.invariant));
                }
                check_capture_header(got, id, failed);
            }
            Output::Rejected => check_cut(case, got, failed),
            _ => check_answer(case, got, id, failed),
        }
    }

    fn capture(&self, case: &Case) -> Option<Capture> {
        let expect = &case.expect;
        match expect.output {
            Output::Invalid => Some(Capture {
                members: vec![
                    ("outcome", Value::from("output_invalid")),
                    ("reasons", Value::from(expect.reasons.clone())),
                    ("invariant", Value::Null),
                ],
                least: None,
            }),
            Output::Rejected => Some(Capture {
                members: vec![
                    ("outcome", Value::from("rejected")),
                    ("invariant", Value::from(expect.invariant.clone())),
                ],
                least: case.framing.streamed().then_some(1),
            }),
            _ => None,
        }
    }

    /// One verdict per judged response; one count per reason, with the
    /// client (`unknown`: the route admits anyone).
    fn probes(&self, case: &Case) -> Vec<Probe> {
        let expect = &case.expect;
        let task = expect
            .task
            .clone()
            .unwrap_or_else(|| task_of(case).to_string());
        let judged = matches!(expect.output, Output::Valid | Output::Invalid);
        let verdict = match expect.output {
            Output::Invalid => "invalid",
            _ => "valid",
        };
        let mut probes = vec![
            (
                OUTPUTS,
                vec![("task", task.clone())],
                f64::from(u8::from(judged)),
            ),
            (
                OUTPUTS,
                vec![("task", task.clone()), ("verdict", verdict.to_string())],
                f64::from(u8::from(judged)),
            ),
            (
                INVALID_OUTPUT,
                vec![("task", task.clone())],
                expect.reasons.len() as f64,
            ),
        ];
        for reason in &expect.reasons {
            probes.push((
                INVALID_OUTPUT,
                vec![
                    ("task", task.clone()),
                    ("reason", reason.clone()),
                    ("client", "unknown".into()),
                ],
                1.0,
            ));
        }
        if let Some(invariant) = &expect.invariant {
            probes.push((
                INVALID,
                vec![
                    ("route", case.route.clone()),
                    ("invariant", invariant.clone()),
                ],
                1.0,
            ));
        }
        probes
    }
}

#[tokio::test]
async fn every_tool_case_over_sockets() {
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
    let mut bench = Bench::start(Suite, |upstream| config("", &routes(upstream))).await;
    for case in &cases {
        bench.run(case).await;
    }
    let dialects: BTreeSet<&str> = cases.iter().map(|c| c.dialect.as_str()).collect();
    eprintln!(
        "{} tool cases ({dialects:?}) in {:?}",
        cases.len(),
        started.elapsed()
    );
    bench.finish("tool cases");
}

/// A judged (or unjudged) answer: the upstream's bytes, the verdict in the
/// headers (whole) or in a comment before the terminal event (SSE streams
/// of dialects that allow comments).
fn check_answer(case: &Case, got: &Got, id: &str, failed: &mut Vec<String>) {
    let expect = &case.expect;
    check_status(got, 200, failed);
    check_content_type(got, case.content_type(), failed);
    check_content_length(got, failed);
    check_body(
        "the body (the upstream's)",
        got,
        &with_verdict(case),
        failed,
    );
    if case.framing.streamed() {
        return;
    }
    let (output, reasons, capture) = match expect.output {
        Output::Valid => (Some("valid".to_string()), None, None),
        Output::Invalid => (
            Some("invalid".to_string()),
            Some(expect.reasons.join(",")),
            Some(id.to_string()),
        ),
        _ => (None, None, None),
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

/// The lines that mark a stream's terminal event, before which the verdict
/// goes: chat's `[DONE]`, Anthropic's `message_stop`, the Responses API's
/// terminal events.
const TERMINAL_LINES: [&str; 5] = [
    "data: [DONE]",
    "event: message_stop",
    "event: response.completed",
    "event: response.incomplete",
    "event: response.failed",
];

/// The upstream's stream with the verdict comment the client should see.
fn with_verdict(case: &Case) -> Vec<u8> {
    let comments = matches!(case.dialect.as_str(), "openai" | "anthropic");
    let line = match case.expect.output {
        _ if case.framing != Framing::Sse || !comments => return case.body.clone(),
        Output::Valid => ": probity-output valid\n\n".to_string(),
        Output::Invalid => format!(
            ": probity-output invalid reason={}\n\n",
            case.expect.reasons.join(",")
        ),
        _ => return case.body.clone(),
    };
    let text = &case.body;
    let terminal = split_events(case.framing, text).into_iter().find(|event| {
        String::from_utf8_lossy(&text[event.clone()])
            .lines()
            .any(|l| TERMINAL_LINES.contains(&l.trim_end()))
    });
    let at = terminal.map_or(text.len(), |event| event.start);
    let mut out = text[..at].to_vec();
    out.extend_from_slice(line.as_bytes());
    out.extend_from_slice(&text[at..]);
    out
}

/// A stream cut at its broken event: the events before it as they came,
/// then one error event naming the invariant.
fn check_cut(case: &Case, got: &Got, failed: &mut Vec<String>) {
    check_status(got, 200, failed);
    let events = split_events(case.framing, &case.body);
    let Some(broken) = case.expect.broken_event.and_then(|i| events.get(i)) else {
        return failed.push("a rejected stream names its broken_event".into());
    };
    let before = &case.body[..broken.start];
    if !got.body.starts_with(before) {
        let cut = got.body.len().min(before.len());
        if let Some(diff) = differ("the stream before the break", &got.body[..cut], before) {
            failed.push(diff);
        }
        return;
    }
    let rest = String::from_utf8_lossy(&got.body[before.len()..]).into_owned();
    let invariant = case.expect.invariant.as_deref().unwrap_or_default();
    if !rest.contains(&format!("\"{invariant}\"")) || rest.contains("probity-output") {
        failed.push(format!(
            "after the sound events: {rest:?}, want one error event"
        ));
    }
}
