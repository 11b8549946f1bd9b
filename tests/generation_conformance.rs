//! Generation conformance over real sockets, driven by fixtures: chat,
//! completions, Ollama chat/generate, Anthropic messages and Gemini
//! generateContent / streamGenerateContent, streamed and not, against recorded upstream bodies; the figure mutations generated
//! from every valid one; and every stream served again cut at awkward
//! offsets.
//!
//! A case is a folder `tests/fixtures/<dialect>/gen_<case>/` (the prefix keeps
//! it out of `tests/conformance.rs`):
//! - `endpoint`: the path after the route prefix, e.g. `/v1/chat/completions`;
//! - `request.json`: the client's body;
//! - the upstream's body, served verbatim: `response.json` (with a
//!   Content-Length), or for a stream `response.sse` (`text/event-stream`) or
//!   `response.ndjson` (`application/x-ndjson`), sent chunked;
//! - `status` (optional): the upstream's status, 200 when absent;
//! - `expect.json`: `"outcome"`: `pass`, `normalized` (with `"pointers"`) or
//!   `rejected` (with `"invariant"`); `"stream": true` for a stream;
//!   optionally `"tokens"` (the `probity_tokens_total` delta per kind),
//!   `"writes"` (offsets where the upstream cuts its writes, 2 ms apart), and
//!   for a rejected stream `"pointers"` rewritten before the break;
//! - `expected.<ext>`: the exact client body of a normalized case; for a
//!   rejected stream, the bytes the client gets before the broken event, then
//!   the error event with `<message>` and `<request_id>` standing for text
//!   probity chooses.
//!
//! Every expectation is cross-checked offline against [`verdict`], this
//! file's reading of the rule (README, "What probity checks: generation,
//! streamed or not"), which is also the oracle of the generated mutations.
//! One fake upstream serves every case, chosen by the `x-fixture` request
//! header; one probity has a route per dialect at `/<dialect>`. Cases run one
//! after another so that metric deltas and the capture list belong to the
//! case at hand; failures are collected under the case's name.

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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use support::fixtures::*;
use support::*;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

const DIALECTS: [&str; 4] = ["openai", "ollama", "anthropic", "gemini"];

const INVARIANTS: [&str; 8] = [
    "invalid_json",
    "payload_missing",
    "choice_count_mismatch",
    "choice_index_invalid",
    "choice_invalid",
    "content_block_invalid",
    "role_invalid",
    "stream_after_done",
];

const MALFORMED: &str = "probity_malformed_figures_total";
const INVALID: &str = "probity_provider_invalid_response_total";
const UNINSPECTED: &str = "probity_uninspected_total";
const TOKENS: &str = "probity_tokens_total";
const KINDS: [&str; 3] = ["input", "output", "total"];

/// How long the upstream waits between the writes a fixture names.
const WRITE_PAUSE: Duration = Duration::from_millis(2);

// ---------------------------------------------------------------- figure tables

/// What a figure must be to be well-formed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Domain {
    /// A non-negative integer written as one.
    Count,
    /// A non-empty string (a response id).
    Id,
}

use Domain::{Count, Id};

/// A table entry: its pointer (a last segment `*` stands for every member
/// of that record, and is the metric label), its domain, and the
/// `probity_tokens_total` kind it counts as.
type Figures = &'static [(&'static str, Domain, Option<&'static str>)];

const OPENAI: Figures = &[
    ("/id", Id, None),
    ("/usage/prompt_tokens", Count, Some("input")),
    ("/usage/completion_tokens", Count, Some("output")),
    ("/usage/total_tokens", Count, Some("total")),
    ("/usage/prompt_tokens_details/*", Count, None),
    ("/usage/completion_tokens_details/*", Count, None),
];
const OLLAMA: Figures = &[
    ("/prompt_eval_count", Count, Some("input")),
    ("/eval_count", Count, Some("output")),
    ("/total_duration", Count, None),
    ("/load_duration", Count, None),
    ("/prompt_eval_duration", Count, None),
    ("/eval_duration", Count, None),
];
const ANTHROPIC: Figures = &[
    ("/id", Id, None),
    ("/usage/input_tokens", Count, Some("input")),
    ("/usage/output_tokens", Count, Some("output")),
    ("/usage/cache_creation_input_tokens", Count, None),
    ("/usage/cache_read_input_tokens", Count, None),
    ("/usage/server_tool_use/*", Count, None),
];
/// `message_delta`: the message table without `/id`.
const ANTHROPIC_DELTA: Figures = &[
    ("/usage/input_tokens", Count, Some("input")),
    ("/usage/output_tokens", Count, Some("output")),
    ("/usage/cache_creation_input_tokens", Count, None),
    ("/usage/cache_read_input_tokens", Count, None),
    ("/usage/server_tool_use/*", Count, None),
];

/// Gemini's `GenerateContentResponse`, whole or one streamed chunk.
const GEMINI: Figures = &[
    ("/responseId", Id, None),
    ("/usageMetadata/promptTokenCount", Count, Some("input")),
    ("/usageMetadata/candidatesTokenCount", Count, Some("output")),
    ("/usageMetadata/totalTokenCount", Count, Some("total")),
    ("/usageMetadata/thoughtsTokenCount", Count, None),
    ("/usageMetadata/cachedContentTokenCount", Count, None),
    ("/usageMetadata/toolUsePromptTokenCount", Count, None),
];

/// The checked endpoints.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Api {
    /// `/v1/chat/completions` (OpenAI's, and Ollama's as OpenAI's).
    Chat,
    /// `/v1/completions`.
    Completions,
    OllamaChat,
    OllamaGenerate,
    Messages,
    /// Gemini `…:generateContent`.
    GeminiGenerate,
    /// Gemini `…:streamGenerateContent`: SSE, or (without `alt=sse`) one
    /// JSON array of chunks, read whole.
    GeminiStream,
}

fn api(dialect: &str, endpoint: &str) -> Option<Api> {
    match (dialect, endpoint) {
        ("openai" | "ollama", "/v1/chat/completions") => Some(Api::Chat),
        ("openai", "/v1/completions") => Some(Api::Completions),
        ("ollama", "/api/chat") => Some(Api::OllamaChat),
        ("ollama", "/api/generate") => Some(Api::OllamaGenerate),
        ("anthropic", "/v1/messages") => Some(Api::Messages),
        ("gemini", e) if e.ends_with(":generateContent") => Some(Api::GeminiGenerate),
        ("gemini", e) if e.ends_with(":streamGenerateContent") => Some(Api::GeminiStream),
        _ => None,
    }
}

fn table(api: Api) -> Figures {
    match api {
        Api::Chat | Api::Completions => OPENAI,
        Api::OllamaChat | Api::OllamaGenerate => OLLAMA,
        Api::Messages => ANTHROPIC,
        Api::GeminiGenerate | Api::GeminiStream => GEMINI,
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Framing {
    Sse,
    Ndjson,
}

impl Framing {
    fn content_type(self) -> &'static str {
        match self {
            Framing::Sse => "text/event-stream",
            Framing::Ndjson => "application/x-ndjson",
        }
    }
}

fn framing(api: Api) -> Framing {
    match api {
        Api::OllamaChat | Api::OllamaGenerate => Framing::Ndjson,
        _ => Framing::Sse,
    }
}

/// The record holding a figure (`""`: the root, which never collapses).
fn record_of(pointer: &str) -> &str {
    &pointer[..pointer.rfind('/').unwrap_or(0)]
}

/// Whether `pointer` lies inside the record at `record`.
fn under(pointer: &str, record: &str) -> bool {
    pointer.len() > record.len()
        && pointer.starts_with(record)
        && pointer.as_bytes()[record.len()] == b'/'
}

/// The metric label of a listed pointer (`None`: a collapsed record). The
/// `/message` of an Anthropic `message_start` is not part of the label.
fn label_of(api: Api, pointer: &str) -> Option<&'static str> {
    let tables: &[Figures] = match api {
        Api::Messages => &[ANTHROPIC, ANTHROPIC_DELTA],
        other => &[table(other)],
    };
    let candidates = [Some(pointer), pointer.strip_prefix("/message")];
    for pointer in candidates.into_iter().flatten() {
        for table in tables {
            for (figure, _, _) in table.iter() {
                let hit = match figure.strip_suffix("/*") {
                    Some(record) => record_of(pointer) == record,
                    None => *figure == pointer,
                };
                if hit {
                    return Some(figure);
                }
            }
        }
    }
    None
}

// ---------------------------------------------------------------- cases

#[derive(Debug, Clone, Copy, PartialEq)]
enum Outcome {
    Pass,
    Normalized,
    Rejected,
}

impl Outcome {
    fn name(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Normalized => "normalized",
            Outcome::Rejected => "rejected",
        }
    }
}

/// What probity must make of a case.
#[derive(Debug, Clone, PartialEq)]
struct Expect {
    outcome: Outcome,
    invariant: Option<String>,
    /// Normalized: the `probity-normalized` list and the capture's
    /// pointers. A rejected stream: the pointers of the events rewritten
    /// before the break (they count as malformed figures).
    pointers: Vec<String>,
    /// The exact client body (a rejected stream's ends with the error event
    /// template); `None` for a rejected whole response (a probity error).
    client: Option<Vec<u8>>,
    /// `probity_tokens_total` deltas by kind (absent: 0).
    tokens: BTreeMap<String, u64>,
    /// A broken stream: where its broken event ends in the upstream body.
    /// Probity stops reading there, so its capture holds at least this much.
    broken_end: Option<usize>,
}

#[derive(Debug, Clone)]
struct Case {
    /// `dialect/case`, with a variant's description after it.
    name: String,
    /// The `x-fixture` value the upstream serves this case by.
    key: String,
    dialect: &'static str,
    endpoint: String,
    request: Vec<u8>,
    status: u16,
    /// `Some` for a streamed answer.
    stream: Option<Framing>,
    body: Vec<u8>,
    /// Offsets where the upstream cuts its writes.
    writes: Vec<usize>,
    /// Whether the upstream pauses between writes.
    pause: bool,
    expect: Expect,
    /// Tokens stated in `expect.json`, to agree with the rule.
    stated_tokens: Option<BTreeMap<String, u64>>,
}

impl Case {
    fn api(&self) -> Option<Api> {
        api(self.dialect, &self.endpoint)
    }

    fn content_type(&self) -> &'static str {
        self.stream
            .map_or("application/json", Framing::content_type)
    }

    /// The pointers that name a figure (not a collapsed record), as labels.
    fn labels(&self) -> Vec<&'static str> {
        let Some(api) = self.api() else {
            return Vec::new();
        };
        self.expect
            .pointers
            .iter()
            .filter_map(|p| label_of(api, p))
            .collect()
    }

    fn parts(&self) -> Vec<Vec<u8>> {
        let mut cuts: Vec<usize> = self.writes.clone();
        cuts.push(self.body.len());
        let mut parts = Vec::new();
        let mut at = 0;
        for cut in cuts {
            if cut > at && cut <= self.body.len() {
                parts.push(self.body[at..cut].to_vec());
                at = cut;
            }
        }
        parts
    }
}

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

fn load(dialect: &'static str) -> Vec<Case> {
    let dir = fixtures_dir().join(dialect);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("{}: {err}", dir.display()))
        .map(|entry| entry.unwrap())
        .filter(|entry| entry.file_type().unwrap().is_dir())
        .map(|entry| entry.file_name().into_string().unwrap())
        .filter(|name| name.starts_with("gen_"))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| load_case(dialect, &name))
        .collect()
}

fn load_case(dialect: &'static str, name: &str) -> Case {
    let dir = fixtures_dir().join(dialect).join(name);
    let id = format!("{dialect}/{name}");
    let text = |file: &str| String::from_utf8(read(&dir.join(file))).unwrap();
    let endpoint = text("endpoint").trim().to_string();
    assert!(endpoint.starts_with('/'), "{id}: endpoint {endpoint:?}");
    let status = if dir.join("status").exists() {
        text("status").trim().parse().unwrap()
    } else {
        200
    };
    let expect: Value = serde_json::from_slice(&read(&dir.join("expect.json")))
        .unwrap_or_else(|err| panic!("{id}: expect.json: {err}"));
    let outcome = match expect["outcome"].as_str() {
        Some("pass") => Outcome::Pass,
        Some("normalized") => Outcome::Normalized,
        Some("rejected") => Outcome::Rejected,
        other => panic!("{id}: outcome {other:?}"),
    };
    let streamed = expect["stream"] == true;
    let (stream, ext) = if dir.join("response.sse").exists() {
        (Some(Framing::Sse), "sse")
    } else if dir.join("response.ndjson").exists() {
        (Some(Framing::Ndjson), "ndjson")
    } else {
        (None, "json")
    };
    assert_eq!(
        streamed,
        stream.is_some(),
        "{id}: \"stream\": true iff the response is response.sse or response.ndjson"
    );
    let body = read(&dir.join(format!("response.{ext}")));
    let expected = dir.join(format!("expected.{ext}"));
    let client = match outcome {
        Outcome::Pass => Some(body.clone()),
        _ if expected.exists() => Some(read(&expected)),
        Outcome::Rejected if stream.is_none() => None,
        _ => panic!("{id}: no expected.{ext}"),
    };
    let tokens = |value: &Value| -> BTreeMap<String, u64> {
        value
            .as_object()
            .unwrap_or_else(|| panic!("{id}: tokens {value}"))
            .iter()
            .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
            .collect()
    };
    let stated_tokens = (!expect["tokens"].is_null()).then(|| tokens(&expect["tokens"]));
    let writes: Vec<usize> = expect["writes"]
        .as_array()
        .map(|a| a.iter().map(|w| w.as_u64().unwrap() as usize).collect())
        .unwrap_or_default();
    let mut case = Case {
        name: id.clone(),
        key: id,
        dialect,
        endpoint,
        request: read(&dir.join("request.json")),
        status,
        stream,
        pause: !writes.is_empty(),
        writes,
        body,
        expect: Expect {
            outcome,
            invariant: expect["invariant"].as_str().map(str::to_owned),
            pointers: expect["pointers"]
                .as_array()
                .map(|a| a.iter().map(|p| p.as_str().unwrap().to_owned()).collect())
                .unwrap_or_default(),
            client,
            tokens: BTreeMap::new(),
            broken_end: None,
        },
        stated_tokens,
    };
    // Stated tokens are the expectation; otherwise the rule's count (the
    // offline check holds both to the rule).
    let rule = verdict(&case);
    case.expect.tokens = case.stated_tokens.clone().unwrap_or(rule.tokens);
    case.expect.broken_end = rule.broken_end;
    case
}

// ---------------------------------------------------------------- the rule

/// `None`: not reported (`null`); otherwise whether the value is well-formed.
fn well_formed(raw: &[u8], domain: Domain) -> Option<bool> {
    let value: Value = serde_json::from_slice(raw).ok()?;
    if value.is_null() {
        return None;
    }
    Some(match domain {
        Count => !raw.is_empty() && raw.iter().all(u8::is_ascii_digit),
        Id => value.as_str().is_some_and(|s| !s.is_empty()),
    })
}

/// One concrete figure found in a JSON text.
#[derive(Debug, Clone)]
struct Entry {
    /// The concrete pointer, with the event's prefix (`/message`).
    pointer: String,
    domain: Domain,
    kind: Option<&'static str>,
    span: Span,
}

/// The figures of `table` present in `text` (below `prefix`), in table
/// order; a wildcard stands for the members of its record in document order.
fn entries(text: &[u8], prefix: &str, table: Figures) -> Vec<Entry> {
    let mut out = Vec::new();
    for &(figure, domain, kind) in table {
        match figure.strip_suffix("/*") {
            Some(record) => {
                let record = format!("{prefix}{record}");
                for (key, span) in members(text, &record).unwrap_or_default() {
                    out.push(Entry {
                        pointer: format!("{record}/{key}"),
                        domain,
                        kind: None,
                        span,
                    });
                }
            }
            None => {
                let pointer = format!("{prefix}{figure}");
                if let Some(span) = find(text, &pointer) {
                    out.push(Entry {
                        pointer,
                        domain,
                        kind,
                        span,
                    });
                }
            }
        }
    }
    out
}

/// What the rule makes of the figures of one JSON text.
#[derive(Debug, Default, PartialEq)]
struct Judged {
    /// Malformed figures in table order, then the collapsed records.
    pointers: Vec<String>,
    /// The text with the malformed bytes (or whole records) nulled.
    text: Vec<u8>,
    /// Well-formed token counts by kind.
    tokens: Vec<(&'static str, u64)>,
}

fn judge(text: &[u8], prefix: &str, table: Figures) -> Judged {
    let found = entries(text, prefix, table);
    let readings: Vec<Option<bool>> = found
        .iter()
        .map(|e| well_formed(&text[e.span.value.clone()], e.domain))
        .collect();
    // The records, in table order; only those present as objects collapse.
    let mut records: Vec<String> = Vec::new();
    for (figure, _, _) in table {
        let record = format!("{prefix}{}", record_of(figure));
        if record != prefix && !records.contains(&record) {
            records.push(record);
        }
    }
    let collapsed: Vec<String> = records
        .into_iter()
        .filter(|record| {
            let is_object = find(text, record).is_some_and(|s| text[s.value.start] == b'{');
            let inside = || {
                found
                    .iter()
                    .zip(&readings)
                    .filter(|(e, _)| under(&e.pointer, record))
            };
            is_object
                && inside().any(|(_, r)| *r == Some(false))
                && !inside().any(|(_, r)| *r == Some(true))
        })
        .collect();
    let nulled_whole = |pointer: &str| collapsed.iter().any(|r| under(pointer, r));
    let mut edits: Vec<(Range<usize>, &[u8])> = Vec::new();
    for record in &collapsed {
        if !nulled_whole(record) {
            edits.push((find(text, record).unwrap().value, b"null"));
        }
    }
    let mut judged = Judged::default();
    for (entry, reading) in found.iter().zip(&readings) {
        match reading {
            Some(false) => {
                judged.pointers.push(entry.pointer.clone());
                if !nulled_whole(&entry.pointer) {
                    edits.push((entry.span.value.clone(), b"null"));
                }
            }
            Some(true) => {
                if let Some(kind) = entry.kind {
                    let raw = std::str::from_utf8(&text[entry.span.value.clone()]).unwrap();
                    judged.tokens.push((kind, raw.parse().unwrap()));
                }
            }
            None => {}
        }
    }
    judged.pointers.extend(collapsed);
    judged.text = splice(text, &edits);
    judged
}

/// How many choices a request asks for: `n` (default 1), times the prompts
/// for `/v1/completions` (a string or `int[]` is one, an array of strings or
/// of `int[]` its length, none is one).
fn choices_asked(api: Api, request: &Value) -> u64 {
    if matches!(api, Api::GeminiGenerate | Api::GeminiStream) {
        // `generationConfig.candidateCount`, or its proto name.
        let config = match &request["generationConfig"] {
            Value::Null => &request["generation_config"],
            config => config,
        };
        let count = match &config["candidateCount"] {
            Value::Null => &config["candidate_count"],
            count => count,
        };
        return count.as_u64().unwrap_or(1);
    }
    let n = request["n"].as_u64().unwrap_or(1);
    if api != Api::Completions {
        return n;
    }
    let prompts = match &request["prompt"] {
        Value::Array(items) => match items.first() {
            Some(Value::Number(_)) => 1,
            _ => items.len() as u64,
        },
        _ => 1,
    };
    n * prompts
}

/// The payload invariant a whole response breaks, if any.
fn payload(api: Api, request: &Value, root: &Value) -> Result<(), &'static str> {
    if api == Api::GeminiStream {
        // Without `alt=sse`: an array of chunks, each judged as a streamed
        // chunk. A single object is a whole answer.
        if let Some(chunks) = root.as_array() {
            for chunk in chunks {
                let chunk = chunk.as_object().ok_or("payload_missing")?;
                if !chunk.contains_key("error") {
                    gemini_candidates(chunk, choices_asked(api, request))?;
                }
            }
            return Ok(());
        }
    }
    let root = root.as_object().ok_or("payload_missing")?;
    match api {
        Api::Chat | Api::Completions => {
            let choices = root
                .get("choices")
                .and_then(Value::as_array)
                .ok_or("payload_missing")?;
            let n = choices_asked(api, request);
            if choices.len() as u64 != n {
                return Err("choice_count_mismatch");
            }
            let mut seen = BTreeSet::new();
            for choice in choices {
                let choice = choice.as_object().ok_or("choice_invalid")?;
                match choice.get("index").and_then(Value::as_u64) {
                    Some(i) if i < n && seen.insert(i) => {}
                    _ => return Err("choice_index_invalid"),
                }
                let sound = match api {
                    Api::Chat => choice.get("message").is_some_and(Value::is_object),
                    _ => choice.get("text").is_some_and(Value::is_string),
                };
                if !sound {
                    return Err("choice_invalid");
                }
            }
        }
        Api::OllamaChat | Api::OllamaGenerate => ollama_line(api, root)?,
        Api::GeminiGenerate | Api::GeminiStream => {
            // A blocked prompt has no candidates, but `promptFeedback`.
            let candidates = gemini_candidates(root, choices_asked(api, request))?;
            if !candidates && root.get("promptFeedback").is_none_or(Value::is_null) {
                return Err("payload_missing");
            }
        }
        Api::Messages => {
            let content = root
                .get("content")
                .and_then(Value::as_array)
                .ok_or("payload_missing")?;
            for block in content {
                if !block.get("type").is_some_and(Value::is_string) {
                    return Err("content_block_invalid");
                }
            }
            if root.get("role").and_then(Value::as_str) != Some("assistant") {
                return Err("role_invalid");
            }
        }
    }
    Ok(())
}

/// Gemini's `candidates`, when present (not `null`): an array of at most
/// `asked` objects, each `index` (when present) in `0..asked` once, each
/// `content` (when present) an object whose `parts` (when present) is an
/// array of objects. Whether there were candidates.
fn gemini_candidates(
    root: &serde_json::Map<String, Value>,
    asked: u64,
) -> Result<bool, &'static str> {
    let present = |v: Option<&Value>| v.filter(|v| !v.is_null()).cloned();
    let Some(list) = present(root.get("candidates")) else {
        return Ok(false);
    };
    let list = list.as_array().ok_or("payload_missing")?;
    if list.len() as u64 > asked {
        return Err("choice_count_mismatch");
    }
    let mut seen = BTreeSet::new();
    for candidate in list {
        let candidate = candidate.as_object().ok_or("choice_invalid")?;
        if let Some(index) = present(candidate.get("index")) {
            match index.as_u64() {
                Some(i) if i < asked && seen.insert(i) => {}
                _ => return Err("choice_index_invalid"),
            }
        }
        if let Some(content) = present(candidate.get("content")) {
            let content = content.as_object().ok_or("choice_invalid")?;
            if let Some(parts) = present(content.get("parts")) {
                let parts = parts.as_array().ok_or("choice_invalid")?;
                if !parts.iter().all(Value::is_object) {
                    return Err("choice_invalid");
                }
            }
        }
    }
    Ok(true)
}

/// An Ollama chat (`message` object) or generate (`response` string) object
/// with a boolean `done`.
fn ollama_line(api: Api, root: &serde_json::Map<String, Value>) -> Result<(), &'static str> {
    let text = match api {
        Api::OllamaChat => root.get("message").is_some_and(Value::is_object),
        _ => root.get("response").is_some_and(Value::is_string),
    };
    if text && root.get("done").is_some_and(Value::is_boolean) {
        Ok(())
    } else {
        Err("payload_missing")
    }
}

/// What the spec says probity makes of a case.
fn verdict(case: &Case) -> Expect {
    // Unchecked: passed on as it came.
    let pass = || Expect {
        outcome: Outcome::Pass,
        invariant: None,
        pointers: Vec::new(),
        client: Some(case.body.clone()),
        tokens: BTreeMap::new(),
        broken_end: None,
    };
    let Some(api) = case.api() else {
        return pass();
    };
    if !(200..300).contains(&case.status) {
        return pass();
    }
    let request: Value = serde_json::from_slice(&case.request).expect("request.json is JSON");
    match case.stream {
        None => whole_verdict(api, &request, &case.body),
        Some(framing) => stream_verdict(case.dialect, api, framing, &request, &case.body),
    }
}

fn whole_verdict(api: Api, request: &Value, body: &[u8]) -> Expect {
    let rejected = |invariant: &str| Expect {
        outcome: Outcome::Rejected,
        invariant: Some(invariant.to_string()),
        pointers: Vec::new(),
        client: None,
        tokens: BTreeMap::new(),
        broken_end: None,
    };
    let Ok(root) = serde_json::from_slice::<Value>(body) else {
        return rejected("invalid_json");
    };
    if let Err(invariant) = payload(api, request, &root) {
        return rejected(invariant);
    }
    let judged = judge(body, "", table(api));
    Expect {
        outcome: if judged.pointers.is_empty() {
            Outcome::Pass
        } else {
            Outcome::Normalized
        },
        invariant: None,
        pointers: judged.pointers,
        client: Some(judged.text),
        tokens: judged
            .tokens
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        broken_end: None,
    }
}

// ---------------------------------------------------------------- streams

/// The events of a stream, as byte ranges: SSE events end at a blank line
/// (lines end in `\r\n`, `\n` or `\r`), NDJSON events at `\n`. A tail
/// without its end is a last range of its own.
fn split_events(framing: Framing, body: &[u8]) -> Vec<Range<usize>> {
    let mut events = Vec::new();
    let mut start = 0;
    let mut at = 0;
    let mut line_start = 0;
    while at < body.len() {
        let end = match body[at] {
            b'\n' => at + 1,
            b'\r' if framing == Framing::Sse => {
                if body.get(at + 1) == Some(&b'\n') {
                    at + 2
                } else {
                    at + 1
                }
            }
            _ => {
                at += 1;
                continue;
            }
        };
        if framing == Framing::Ndjson || at == line_start {
            events.push(start..end);
            start = end;
        }
        at = end;
        line_start = end;
    }
    if start < body.len() {
        events.push(start..body.len());
    }
    events
}

/// An SSE event's name and data (its `data:` lines joined by `\n`); the
/// range of the data when it is one `data:` line.
struct SseEvent {
    name: Option<String>,
    data: Option<Vec<u8>>,
    data_range: Option<Range<usize>>,
}

fn parse_sse(raw: &[u8]) -> SseEvent {
    let mut event = SseEvent {
        name: None,
        data: None,
        data_range: None,
    };
    let mut lines = 0;
    let mut at = 0;
    while at < raw.len() {
        let end = raw[at..]
            .iter()
            .position(|b| matches!(b, b'\r' | b'\n'))
            .map_or(raw.len(), |n| at + n);
        let line = &raw[at..end];
        let (field, value_at) = match line.iter().position(|b| *b == b':') {
            Some(0) | None if line.is_empty() => (&b""[..], end),
            Some(0) => (&b":"[..], end),
            Some(i) => {
                let mut v = at + i + 1;
                if raw.get(v) == Some(&b' ') {
                    v += 1;
                }
                (&line[..i], v)
            }
            None => (line, end),
        };
        let value = &raw[value_at.min(end)..end];
        match field {
            b"event" => event.name = Some(String::from_utf8_lossy(value).into_owned()),
            b"data" => {
                lines += 1;
                event.data_range = (lines == 1).then(|| value_at.min(end)..end);
                match &mut event.data {
                    None => event.data = Some(value.to_vec()),
                    Some(data) => {
                        data.push(b'\n');
                        data.extend_from_slice(value);
                    }
                }
            }
            _ => {}
        }
        at = end + 1;
    }
    if lines > 1 {
        event.data_range = None;
    }
    event
}

/// Where an event's figures are and which table judges them.
struct Judging {
    /// The event's data, within the event's bytes.
    data: Range<usize>,
    prefix: &'static str,
    table: Figures,
}

/// The state of one stream as the rule reads it.
struct StreamRule {
    api: Api,
    choices: u64,
    done: bool,
    blocks: Vec<u64>,
}

enum EventVerdict {
    /// Passes as it came, unjudged or without figures.
    Untouched,
    /// Its figures are judged.
    Figures(Judging),
    Broken(&'static str),
}

impl StreamRule {
    fn new(api: Api, request: &Value) -> Self {
        Self {
            api,
            choices: choices_asked(api, request),
            done: false,
            blocks: Vec::new(),
        }
    }

    fn event(&mut self, raw: &[u8]) -> EventVerdict {
        use EventVerdict::*;
        match self.api {
            Api::OllamaChat | Api::OllamaGenerate => {
                let mut end = raw.len();
                if raw[..end].ends_with(b"\n") {
                    end -= 1;
                }
                if raw[..end].ends_with(b"\r") {
                    end -= 1;
                }
                let line = &raw[..end];
                if line.iter().all(u8::is_ascii_whitespace) {
                    return Untouched;
                }
                if self.done {
                    return Broken("stream_after_done");
                }
                let Some(object) = json_object(line) else {
                    return Broken("invalid_json");
                };
                if object.contains_key("error") {
                    return Untouched;
                }
                if let Err(invariant) = ollama_line(self.api, &object) {
                    return Broken(invariant);
                }
                self.done = object["done"] == true;
                Figures(Judging {
                    data: 0..end,
                    prefix: "",
                    table: OLLAMA,
                })
            }
            Api::Chat | Api::Completions => {
                let event = parse_sse(raw);
                let Some(data) = event.data else {
                    return Untouched; // a comment
                };
                if self.done {
                    return Broken("stream_after_done");
                }
                if data.trim_ascii() == b"[DONE]" {
                    self.done = true;
                    return Untouched;
                }
                let Some(chunk) = json_object(&data) else {
                    return Broken("invalid_json");
                };
                if chunk.contains_key("error") {
                    return Untouched;
                }
                match chunk.get("choices") {
                    None | Some(Value::Null) => {}
                    Some(Value::Array(choices)) => {
                        for choice in choices {
                            let index = choice.get("index").and_then(Value::as_u64);
                            if index.is_none_or(|i| i >= self.choices) {
                                return Broken("choice_index_invalid");
                            }
                        }
                    }
                    Some(_) => return Broken("choice_index_invalid"),
                }
                self.figures(event.data_range, "", OPENAI)
            }
            Api::GeminiGenerate | Api::GeminiStream => {
                // One whole `GenerateContentResponse` per event, no `[DONE]`.
                let event = parse_sse(raw);
                let Some(data) = event.data else {
                    return Untouched; // a comment
                };
                let Some(chunk) = json_object(&data) else {
                    return Broken("invalid_json");
                };
                if chunk.contains_key("error") {
                    return Untouched;
                }
                if let Err(invariant) = gemini_candidates(&chunk, self.choices) {
                    return Broken(invariant);
                }
                self.figures(event.data_range, "", GEMINI)
            }
            Api::Messages => {
                let event = parse_sse(raw);
                let Some(data) = event.data else {
                    return Untouched;
                };
                let name = event.name.unwrap_or_default();
                let known = [
                    "message_start",
                    "message_delta",
                    "content_block_start",
                    "content_block_delta",
                    "content_block_stop",
                ];
                if !known.contains(&name.as_str()) {
                    return Untouched; // ping, message_stop, error, new types
                }
                let Some(body) = json_object(&data) else {
                    return Broken("invalid_json");
                };
                let index = body.get("index").and_then(Value::as_u64);
                match name.as_str() {
                    "message_start" => {
                        if !body.get("message").is_some_and(Value::is_object) {
                            return Broken("payload_missing");
                        }
                        self.figures(event.data_range, "/message", ANTHROPIC)
                    }
                    "message_delta" => self.figures(event.data_range, "", ANTHROPIC_DELTA),
                    "content_block_start" => match index {
                        Some(index) => {
                            self.blocks.push(index);
                            Untouched
                        }
                        None => Broken("content_block_invalid"),
                    },
                    _ => match index {
                        Some(index) if self.blocks.contains(&index) => Untouched,
                        _ => Broken("content_block_invalid"),
                    },
                }
            }
        }
    }

    fn figures(
        &self,
        data: Option<Range<usize>>,
        prefix: &'static str,
        table: Figures,
    ) -> EventVerdict {
        match data {
            Some(data) => EventVerdict::Figures(Judging {
                data,
                prefix,
                table,
            }),
            None => panic!("the oracle reads figures of single-line data only"),
        }
    }
}

fn json_object(data: &[u8]) -> Option<serde_json::Map<String, Value>> {
    match serde_json::from_slice::<Value>(data) {
        Ok(Value::Object(object)) => Some(object),
        _ => None,
    }
}

/// The error event that ends a broken stream, in the stream's format, with
/// `<message>` and `<request_id>` for what probity fills in.
fn error_template(dialect: &str, api: Api, invariant: &str) -> String {
    let object = format!(
        r#"{{"type":"provider_invalid_response","code":"{invariant}","message":"<message>","route":"{dialect}","request_id":"<request_id>"}}"#
    );
    match api {
        Api::Chat | Api::Completions => format!("data: {{\"error\":{object}}}\n\n"),
        Api::Messages => {
            format!("event: error\ndata: {{\"type\":\"error\",\"error\":{object}}}\n\n")
        }
        Api::OllamaChat | Api::OllamaGenerate => {
            format!(
                r#"{{"error":"provider_invalid_response: <message>","type":"provider_invalid_response","code":"{invariant}","request_id":"<request_id>"}}"#
            ) + "\n"
        }
        // Google's error shape (an HTTP `code`, a gRPC `status`), probity's
        // `code` the reason of an `ErrorInfo` whose metadata holds its fields.
        Api::GeminiGenerate | Api::GeminiStream => {
            format!(
                r#"data: {{"error":{{"code":502,"message":"<message>","status":"UNAVAILABLE","details":[{{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"{invariant}","domain":"probity","metadata":{{"type":"provider_invalid_response","route":"{dialect}","request_id":"<request_id>"}}}}]}}}}"#
            ) + "\n\n"
        }
    }
}

fn stream_verdict(
    dialect: &str,
    api: Api,
    framing: Framing,
    request: &Value,
    body: &[u8],
) -> Expect {
    let mut rule = StreamRule::new(api, request);
    let mut client = Vec::new();
    let mut pointers = Vec::new();
    let mut tokens = BTreeMap::new();
    // Every event is judged, an unterminated last one too.
    for range in split_events(framing, body) {
        let end = range.end;
        let raw = &body[range];
        match rule.event(raw) {
            EventVerdict::Untouched => client.extend_from_slice(raw),
            EventVerdict::Broken(invariant) => {
                client.extend_from_slice(error_template(dialect, api, invariant).as_bytes());
                // Gemini's stream is judged line by line: reading stops at
                // the end of the broken `data:` line, before the blank line.
                let end = match api {
                    Api::GeminiStream => raw
                        .iter()
                        .position(|b| *b == b'\n')
                        .map_or(end, |at| end - raw.len() + at + 1),
                    _ => end,
                };
                return Expect {
                    outcome: Outcome::Rejected,
                    invariant: Some(invariant.to_string()),
                    pointers,
                    client: Some(client),
                    tokens,
                    broken_end: Some(end),
                };
            }
            EventVerdict::Figures(judging) => {
                let data = &raw[judging.data.clone()];
                let judged = judge(data, judging.prefix, judging.table);
                for (kind, n) in &judged.tokens {
                    tokens.insert(kind.to_string(), *n);
                }
                if judged.pointers.is_empty() {
                    client.extend_from_slice(raw);
                    continue;
                }
                // Only the data's nulled spans change: every other byte of
                // the event (fields, line endings) stays. Gemini's streams
                // carry no comment: google-genai reads any line that is not
                // `data: ` as JSON.
                if framing == Framing::Sse && api != Api::GeminiStream {
                    let eol = match raw.iter().position(|b| matches!(b, b'\r' | b'\n')) {
                        Some(at) if raw[at..].starts_with(b"\r\n") => "\r\n",
                        Some(at) if raw[at] == b'\r' => "\r",
                        _ => "\n",
                    };
                    let note = format!(": probity-normalized {}{eol}", judged.pointers.join(","));
                    client.extend_from_slice(note.as_bytes());
                }
                client.extend_from_slice(&raw[..judging.data.start]);
                client.extend_from_slice(&judged.text);
                client.extend_from_slice(&raw[judging.data.end..]);
                pointers.extend(judged.pointers);
            }
        }
    }
    Expect {
        outcome: if pointers.is_empty() {
            Outcome::Pass
        } else {
            Outcome::Normalized
        },
        invariant: None,
        pointers,
        client: Some(client),
        tokens,
        broken_end: None,
    }
}

// ---------------------------------------------------------------- mutations

/// The malformed forms a figure's text is replaced with.
fn malformed_forms(domain: Domain, original: &str) -> Vec<String> {
    match domain {
        Count => [
            "\"abc\"".to_string(),
            format!("\"{original}\""),
            "-1".into(),
            "8.5".into(),
            "8.0".into(),
            "1e3".into(),
            "true".into(),
            "{}".into(),
            "[]".into(),
        ]
        .to_vec(),
        Id => ["\"\"", "5", "true", "{}"].map(String::from).to_vec(),
    }
}

/// A JSON text inside a case's body where figures sit: the whole body, or
/// one event's data.
struct Site {
    /// What the variant's name says about where it is.
    what: String,
    /// The text's offset in the body.
    offset: usize,
    text: Vec<u8>,
    prefix: &'static str,
    table: Figures,
}

fn sites(case: &Case) -> Vec<Site> {
    let Some(api) = case.api() else {
        return Vec::new();
    };
    if !(200..300).contains(&case.status) {
        return Vec::new();
    }
    let Some(framing) = case.stream else {
        if case.expect.outcome != Outcome::Pass {
            return Vec::new();
        }
        return vec![Site {
            what: String::new(),
            offset: 0,
            text: case.body.clone(),
            prefix: "",
            table: table(api),
        }];
    };
    if case.expect.outcome == Outcome::Rejected {
        return Vec::new();
    }
    let request: Value = serde_json::from_slice(&case.request).unwrap();
    let mut rule = StreamRule::new(api, &request);
    let mut out = Vec::new();
    for (n, range) in split_events(framing, &case.body).into_iter().enumerate() {
        let raw = &case.body[range.clone()];
        if let EventVerdict::Figures(judging) = rule.event(raw) {
            let name = match framing {
                Framing::Sse => parse_sse(raw).name,
                Framing::Ndjson => None,
            };
            out.push(Site {
                what: format!(
                    "event {n}{} ",
                    name.map(|n| format!(" {n}")).unwrap_or_default()
                ),
                offset: range.start + judging.data.start,
                text: raw[judging.data].to_vec(),
                prefix: judging.prefix,
                table: judging.table,
            });
        }
    }
    out
}

/// Variants of a valid case (for a stream, any case that is not rejected)
/// with one figure at a time broken, nulled or removed, and with whole
/// records broken; the expectation of each follows from [`verdict`].
///
/// Every occurrence of every figure is broken (in a stream, inside its
/// event, each event on its own). The first occurrence of a figure on an
/// endpoint, whole or streamed (`seen` holds those met so far), gets every
/// form, `null` and removal, and its record the whole-record variants;
/// later ones (other events, other cases) one form each, in turn, so that
/// usage on every chunk does not multiply the run time.
fn mutations(case: &Case, seen: &mut BTreeSet<String>) -> Vec<Case> {
    let mut out = Vec::new();
    let how = if case.stream.is_some() {
        "stream"
    } else {
        "whole"
    };
    let scope = format!("{}{} {how}", case.dialect, case.endpoint);
    for (n, site) in sites(case).into_iter().enumerate() {
        let mut push = |what: String, edits: &[(Range<usize>, &[u8])], malformed: &[&str]| {
            let shifted: Vec<(Range<usize>, &[u8])> = edits
                .iter()
                .map(|(r, w)| (r.start + site.offset..r.end + site.offset, *w))
                .collect();
            let mut variant = Case {
                name: format!("{} [{}{what}]", case.name, site.what),
                key: format!("{}#{}", case.key, out.len()),
                body: splice(&case.body, &shifted),
                writes: Vec::new(),
                pause: false,
                stated_tokens: None,
                ..case.clone()
            };
            variant.expect = verdict(&variant);
            for pointer in malformed {
                assert!(
                    variant.expect.pointers.iter().any(|p| p == pointer),
                    "{}: the rule must find {pointer} malformed",
                    variant.name
                );
            }
            out.push(variant);
        };
        let text = &site.text;
        let present: Vec<Entry> = entries(text, site.prefix, site.table)
            .into_iter()
            .filter(|e| well_formed(&text[e.span.value.clone()], e.domain) == Some(true))
            .collect();
        for (f, entry) in present.iter().enumerate() {
            let value = entry.span.value.clone();
            let original = std::str::from_utf8(&text[value.clone()]).unwrap();
            let mut forms = malformed_forms(entry.domain, original);
            if !seen.insert(format!("{scope} {}", entry.pointer)) {
                let form = forms.swap_remove((n + f) % forms.len());
                push(
                    format!("{} = {form}", entry.pointer),
                    &[(value.clone(), form.as_bytes())],
                    &[&entry.pointer],
                );
                continue;
            }
            for form in forms {
                push(
                    format!("{} = {form}", entry.pointer),
                    &[(value.clone(), form.as_bytes())],
                    &[&entry.pointer],
                );
            }
            push(
                format!("{} = null", entry.pointer),
                &[(value.clone(), b"null")],
                &[],
            );
            if let Some(member) = &entry.span.member {
                push(
                    format!("{} removed", entry.pointer),
                    &[(removal(text, member.clone()), b"")],
                    &[],
                );
            }
        }
        // Whole records (and the root, which never collapses).
        let mut records: Vec<&str> = present.iter().map(|e| record_of(&e.pointer)).collect();
        records.dedup();
        for record in records {
            let members: Vec<&Entry> = present
                .iter()
                .filter(|e| record_of(&e.pointer) == record)
                .collect();
            if members.len() < 2 || !seen.insert(format!("{scope} record {record}")) {
                continue;
            }
            let forms = ["\"abc\"", "-1", "true", "{}", "[]", "\"8\""];
            let all_bad: Vec<(Range<usize>, &[u8])> = members
                .iter()
                .zip(forms.iter().cycle())
                .map(|(e, form)| (e.span.value.clone(), form.as_bytes()))
                .collect();
            let names: Vec<&str> = members.iter().map(|e| e.pointer.as_str()).collect();
            let what = if record == site.prefix {
                "root"
            } else {
                record
            };
            push(
                format!("every figure of {what} malformed"),
                &all_bad,
                &names,
            );
            let mut null_and_bad = all_bad.clone();
            null_and_bad[0].1 = b"null";
            push(
                format!("{what}: first figure null, the others malformed"),
                &null_and_bad,
                &names[1..],
            );
            let all_null: Vec<(Range<usize>, &[u8])> = members
                .iter()
                .map(|e| (e.span.value.clone(), &b"null"[..]))
                .collect();
            push(format!("every figure of {what} null"), &all_null, &[]);
        }
    }
    out
}

/// Offsets that cut a stream where a reader is most likely to trip: inside
/// every `\r\n`, between an event's two line ends, one byte into an event,
/// mid-event, one byte before its end.
fn awkward_cuts(case: &Case) -> Vec<usize> {
    let body = &case.body;
    let mut cuts = BTreeSet::new();
    for i in 1..body.len() {
        if body[i - 1] == b'\r' && body[i] == b'\n' {
            cuts.insert(i);
        }
    }
    for event in split_events(case.stream.unwrap(), body) {
        let len = event.end - event.start;
        cuts.extend([
            event.start + 1,
            event.start + len / 2,
            event.end - 1,
            event.end.saturating_sub(2),
        ]);
    }
    cuts.into_iter()
        .filter(|c| *c > 0 && *c < body.len())
        .collect()
}

/// The mutations of a list of cases, the full battery once per figure.
fn all_mutations(cases: impl IntoIterator<Item = Case>) -> Vec<Case> {
    let mut seen = BTreeSet::new();
    cases
        .into_iter()
        .flat_map(|case| mutations(&case, &mut seen))
        .collect()
}

// ---------------------------------------------------------------- the bench

#[derive(Clone)]
struct Served {
    status: u16,
    content_type: &'static str,
    parts: Vec<Vec<u8>>,
    stream: bool,
    pause: bool,
}

/// The fake upstream: serves the case an `x-fixture` header names, each
/// stream part as its own chunk. Its sockets set TCP_NODELAY: with Nagle on
/// (as in the harness's `Upstream`) a stream's last chunk waits for a delayed
/// ACK, 40 ms a case.
async fn upstream(served: Arc<Mutex<HashMap<String, Served>>>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            let served = served.clone();
            let service = service_fn(move |request: Request<Incoming>| {
                let served = served.clone();
                async move {
                    let key = request
                        .headers()
                        .get("x-fixture")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string();
                    let _ = request.into_body().collect().await;
                    let case = served.lock().unwrap().get(&key).cloned();
                    Ok::<_, Infallible>(answer(case, &key))
                }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

fn answer(case: Option<Served>, key: &str) -> Response<ReplyStream> {
    let (tx, rx) = mpsc::channel(1);
    let Some(case) = case else {
        let _ = tx.try_send(Bytes::from(format!("{{\"error\":\"no fixture {key:?}\"}}")));
        return Response::builder()
            .status(500)
            .header("content-type", "application/json")
            .body(rx.into())
            .unwrap();
    };
    let builder = Response::builder()
        .status(case.status)
        .header("content-type", case.content_type);
    if !case.stream {
        let body = case.parts.concat();
        let builder = builder.header("content-length", body.len());
        let _ = tx.try_send(Bytes::from(body));
        return builder.body(rx.into()).unwrap();
    }
    tokio::spawn(async move {
        for (i, part) in case.parts.into_iter().enumerate() {
            if case.pause && i > 0 {
                tokio::time::sleep(WRITE_PAUSE).await;
            }
            if tx.send(Bytes::from(part)).await.is_err() {
                return;
            }
        }
    });
    builder.body(rx.into()).unwrap()
}

/// One probity with a route per dialect, in front of one upstream that
/// answers each request with the case its `x-fixture` header names.
struct Bench {
    probity: Probity,
    served: Arc<Mutex<HashMap<String, Served>>>,
    client: Client<HttpConnector, Full<Bytes>>,
    /// The metrics after the last case: the next case's "before".
    metrics: String,
    /// The request id of the last capture, which the list must show second.
    last_capture: Option<String>,
    failures: Vec<String>,
    ran: usize,
}

impl Bench {
    async fn start() -> Self {
        let served: Arc<Mutex<HashMap<String, Served>>> = Arc::default();
        let upstream = format!("http://{}", upstream(served.clone()).await);
        let routes: String = DIALECTS
            .iter()
            .map(|d| route(d, &format!("/{d}"), &upstream, d, ""))
            .collect();
        // A short capture list: each case reads it.
        let probity = Probity::start(&config(
            "",
            &format!("{routes}\n[capture]\nmax_entries = 4\n"),
        ));
        let mut bench = Self {
            probity,
            served,
            client: client(),
            metrics: String::new(),
            last_capture: None,
            failures: Vec::new(),
            ran: 0,
        };
        bench.metrics = bench.fetch_metrics().await;
        bench
    }

    async fn get(&self, url: String) -> Result<Got, String> {
        let request = Request::get(url).body(Full::default()).unwrap();
        exchange(&self.client, request).await
    }

    async fn fetch_metrics(&self) -> String {
        match self.get(self.probity.admin_url("/metrics")).await {
            Ok(got) => got.text(),
            Err(err) => panic!("/metrics: {err}"),
        }
    }

    /// Sends a case through probity; returns the response to the client.
    async fn send(&self, case: &Case) -> Result<Got, String> {
        self.served.lock().unwrap().insert(
            case.key.clone(),
            Served {
                status: case.status,
                content_type: case.content_type(),
                parts: case.parts(),
                stream: case.stream.is_some(),
                pause: case.pause,
            },
        );
        let url = self
            .probity
            .url(&format!("/{}{}", case.dialect, case.endpoint));
        let request = Request::post(url)
            .header("content-type", "application/json")
            .header("x-fixture", &case.key)
            .body(Full::new(Bytes::from(case.request.clone())))
            .unwrap();
        exchange(&self.client, request).await
    }

    async fn run(&mut self, case: &Case) {
        self.ran += 1;
        let mut failed = Vec::new();
        let got = match self.send(case).await {
            Ok(got) => got,
            Err(err) => {
                self.failures.push(format!("{}: {err}", case.name));
                self.metrics = self.fetch_metrics().await;
                return;
            }
        };
        let id = got.header("x-request-id").unwrap_or_default().to_string();
        if id.is_empty() {
            failed.push("no x-request-id on the response".into());
        }
        match (case.stream.is_some(), case.expect.outcome) {
            (true, _) => check_stream(case, &got, &id, &mut failed),
            (false, Outcome::Pass) => check_pass(case, &got, &mut failed),
            (false, Outcome::Normalized) => check_normalized(case, &got, &id, &mut failed),
            (false, Outcome::Rejected) => check_rejected(case, &got, &id, &mut failed),
        }
        if !id.is_empty() {
            self.check_capture(case, &id, &mut failed).await;
        }
        self.check_metrics(case, &mut failed).await;
        for failure in failed {
            self.failures.push(format!("{}: {failure}", case.name));
        }
    }

    async fn check_capture(&mut self, case: &Case, id: &str, failed: &mut Vec<String>) {
        let verbatim = match self
            .get(self.probity.admin_url(&format!("/captures/{id}")))
            .await
        {
            Ok(got) => got,
            Err(err) => return failed.push(format!("GET /captures/{id}: {err}")),
        };
        if case.expect.outcome == Outcome::Pass {
            if verbatim.status != 404 {
                failed.push(format!(
                    "a valid exchange was captured: GET /captures/{id} is {}",
                    verbatim.status
                ));
            }
            return;
        }
        if verbatim.status != 200 {
            return failed.push(format!(
                "GET /captures/{id}: {} {}",
                verbatim.status,
                short(&verbatim.text())
            ));
        }
        // A broken stream is read no further than needed: its capture is the
        // upstream bytes up to the broken event at least.
        let captured: &[u8] = match case.expect.broken_end {
            Some(end) if verbatim.body.len() >= end && case.body.starts_with(&verbatim.body) => {
                &verbatim.body
            }
            _ => &case.body,
        };
        if let Some(diff) = differ("the captured body", &verbatim.body, captured) {
            failed.push(diff);
        }
        let ct = case.content_type();
        for (name, want) in [
            ("content-type", ct),
            ("probity-upstream-content-type", ct),
            ("probity-upstream-status", &case.status.to_string()),
        ] {
            if verbatim.header(name) != Some(want) {
                failed.push(format!(
                    "capture header {name}: {:?}, want {want:?}",
                    verbatim.header(name)
                ));
            }
        }

        let list = match self.get(self.probity.admin_url("/captures")).await {
            Ok(got) if got.status == 200 => got,
            Ok(got) => {
                return failed.push(format!(
                    "GET /captures: {} {}",
                    got.status,
                    short(&got.text())
                ))
            }
            Err(err) => return failed.push(format!("GET /captures: {err}")),
        };
        let list: Value = serde_json::from_slice(&list.body).unwrap_or_default();
        let captures = list["captures"].as_array().cloned().unwrap_or_default();
        let Some(newest) = captures.first() else {
            return failed.push(format!("GET /captures lists nothing: {list}"));
        };
        if newest["request_id"] != id {
            failed.push(format!(
                "the newest capture is {}, not this request",
                newest["request_id"]
            ));
            self.last_capture = newest["request_id"].as_str().map(str::to_owned);
            return;
        }
        let want = [
            ("route", Value::from(case.dialect)),
            ("outcome", Value::from(case.expect.outcome.name())),
            (
                "invariant",
                case.expect
                    .invariant
                    .clone()
                    .map_or(Value::Null, Value::from),
            ),
            ("upstream_status", Value::from(case.status)),
            ("body_bytes", Value::from(captured.len())),
            ("body_captured", Value::from(true)),
        ];
        for (member, value) in want {
            if newest[member] != value {
                failed.push(format!(
                    "newest capture {member}: {}, want {value}",
                    newest[member]
                ));
            }
        }
        if case.expect.outcome == Outcome::Normalized
            && newest["pointers"] != Value::from(case.expect.pointers.clone())
        {
            failed.push(format!(
                "newest capture pointers: {}, want {:?}",
                newest["pointers"], case.expect.pointers
            ));
        }
        if !newest["pointers"].is_array() {
            failed.push(format!("newest capture pointers: {}", newest["pointers"]));
        }
        if !newest["endpoint"]
            .as_str()
            .is_some_and(|e| e.ends_with(&case.endpoint))
        {
            failed.push(format!(
                "newest capture endpoint: {}, want {:?}",
                newest["endpoint"], case.endpoint
            ));
        }
        if newest["time"].is_null() {
            failed.push("newest capture has no time".into());
        }
        if let Some(previous) = &self.last_capture {
            let second = captures.get(1).map(|c| &c["request_id"]);
            if second != Some(&Value::from(previous.as_str())) {
                failed.push(format!(
                    "captures are not newest first: second is {second:?}, want {previous:?}"
                ));
            }
        }
        self.last_capture = Some(id.to_string());
    }

    async fn check_metrics(&mut self, case: &Case, failed: &mut Vec<String>) {
        let probes = probes(case);
        let before = std::mem::take(&mut self.metrics);
        let mut wrong = Vec::new();
        // A counter may move just after the response (a stream's tokens are
        // counted when it ends): wait a little for one that lags, never for
        // one that moved too far.
        for _ in 0..20 {
            let after = self.fetch_metrics().await;
            let (unmet, lagging) = unmet(&before, &after, &probes);
            wrong = unmet;
            self.metrics = after;
            if !lagging {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        failed.extend(wrong);
    }

    fn finish(self, what: &str) {
        finish(self.ran, &self.failures, what);
    }
}

fn probes(case: &Case) -> Vec<Probe> {
    let route = || ("route", case.dialect.to_string());
    let labels = case.labels();
    let rejected = case.expect.outcome == Outcome::Rejected;
    let mut probes = vec![
        (MALFORMED, vec![route()], labels.len() as f64),
        (INVALID, vec![route()], f64::from(u8::from(rejected))),
        (UNINSPECTED, vec![route()], 0.0),
    ];
    let distinct: BTreeSet<&str> = labels.iter().copied().collect();
    for label in distinct {
        let count = labels.iter().filter(|l| **l == label).count();
        probes.push((
            MALFORMED,
            vec![route(), ("figure", label.to_string())],
            count as f64,
        ));
    }
    if let Some(invariant) = &case.expect.invariant {
        probes.push((
            INVALID,
            vec![route(), ("invariant", invariant.clone())],
            1.0,
        ));
    }
    for kind in KINDS {
        let tokens = case.expect.tokens.get(kind).copied().unwrap_or(0);
        probes.push((
            TOKENS,
            vec![route(), ("kind", kind.to_string())],
            tokens as f64,
        ));
    }
    probes
}

fn no_probity_headers(got: &Got, failed: &mut Vec<String>) {
    for name in got.headers.keys() {
        if name.as_str().starts_with("probity-") {
            failed.push(format!("unexpected {name}: {:?}", got.headers[name]));
        }
    }
}

fn check_status(got: &Got, want: u16, failed: &mut Vec<String>) {
    if got.status.as_u16() != want {
        failed.push(format!(
            "status {}, want {want}: {}",
            got.status,
            short(&got.text())
        ));
    }
}

fn check_content_type(case: &Case, got: &Got, failed: &mut Vec<String>) {
    if got.header("content-type") != Some(case.content_type()) {
        failed.push(format!(
            "content-type {:?}, want {:?}",
            got.header("content-type"),
            case.content_type()
        ));
    }
}

fn check_pass(case: &Case, got: &Got, failed: &mut Vec<String>) {
    check_status(got, case.status, failed);
    if let Some(diff) = differ("the body", &got.body, &case.body) {
        failed.push(diff);
    }
    no_probity_headers(got, failed);
    check_content_type(case, got, failed);
}

fn check_normalized(case: &Case, got: &Got, id: &str, failed: &mut Vec<String>) {
    check_status(got, case.status, failed);
    let want = case.expect.client.as_deref().unwrap_or_default();
    if let Some(diff) = differ("the body", &got.body, want) {
        failed.push(diff);
    }
    let list = case.expect.pointers.join(",");
    if got.header("probity-normalized") != Some(list.as_str()) {
        failed.push(format!(
            "probity-normalized: {:?}, want {list:?}",
            got.header("probity-normalized")
        ));
    }
    if got.header("probity-capture") != Some(id) {
        failed.push(format!(
            "probity-capture: {:?}, want the request id {id:?}",
            got.header("probity-capture")
        ));
    }
    if let Some(length) = got.header("content-length") {
        if length != got.body.len().to_string() {
            failed.push(format!(
                "content-length {length} for {} bytes",
                got.body.len()
            ));
        }
    }
    check_content_type(case, got, failed);
}

/// The probity error object every rejection carries.
fn error_object(dialect: &str, invariant: &str, id: &str) -> Value {
    serde_json::json!({
        "type": "provider_invalid_response",
        "code": invariant,
        "message": "<message>",
        "route": dialect,
        "request_id": id,
    })
}

fn check_rejected(case: &Case, got: &Got, id: &str, failed: &mut Vec<String>) {
    check_status(got, 502, failed);
    if got.header("content-type") != Some("application/json") {
        failed.push(format!("content-type {:?}", got.header("content-type")));
    }
    // The fields are the same in every dialect's envelope.
    let want = error_object(
        case.dialect,
        case.expect.invariant.as_deref().unwrap_or(""),
        id,
    );
    match serde_json::from_slice::<Value>(&got.body)
        .ok()
        .and_then(|json| probity_error(&json))
    {
        Some(error) if fits(&error, &want, id) => {}
        _ => failed.push(format!("the error is {}, want {want}", short(&got.text()))),
    }
    if got.header("probity-capture") != Some(id) {
        failed.push(format!(
            "probity-capture: {:?}, want the request id {id:?}",
            got.header("probity-capture")
        ));
    }
    if let Some(value) = got.header("probity-normalized") {
        failed.push(format!("a rejection got probity-normalized: {value:?}"));
    }
}

/// A stream keeps its status and content type, carries no probity header
/// (they go out before the verdict), and its bytes are exactly the expected
/// ones; a broken one ends with one error event in its own format.
fn check_stream(case: &Case, got: &Got, id: &str, failed: &mut Vec<String>) {
    check_status(got, case.status, failed);
    check_content_type(case, got, failed);
    no_probity_headers(got, failed);
    let want = case.expect.client.as_deref().unwrap_or_default();
    let Some(invariant) = &case.expect.invariant else {
        if let Some(diff) = differ("the stream", &got.body, want) {
            failed.push(diff);
        }
        return;
    };
    let api = case.api().unwrap();
    let template = error_template(case.dialect, api, invariant);
    let Some(before) = want.strip_suffix(template.as_bytes()) else {
        return failed.push(format!(
            "the expected stream does not end with {template:?}"
        ));
    };
    if !got.body.starts_with(before) {
        let cut = got.body.len().min(before.len());
        if let Some(diff) = differ("the stream before the error", &got.body[..cut], before) {
            failed.push(diff);
        }
        return;
    }
    let rest = String::from_utf8_lossy(&got.body[before.len()..]).into_owned();
    let (head, tail) = match api {
        Api::Chat | Api::Completions => ("data: ", "\n\n"),
        Api::GeminiGenerate | Api::GeminiStream => ("data: ", "\n\n"),
        Api::Messages => ("event: error\ndata: ", "\n\n"),
        Api::OllamaChat | Api::OllamaGenerate => ("", "\n"),
    };
    let json = rest
        .strip_prefix(head)
        .and_then(|r| r.strip_suffix(tail))
        .filter(|j| !j.contains('\n'));
    let template_json = template
        .strip_prefix(head)
        .and_then(|r| r.strip_suffix(tail))
        .unwrap();
    let want: Value = serde_json::from_str(template_json).unwrap();
    match json.and_then(|j| serde_json::from_str::<Value>(j).ok()) {
        Some(json) if fits(&json, &want, id) => {}
        _ => failed.push(format!(
            "after the last sound event: {rest:?}, want one event like {template:?}"
        )),
    }
}

/// Whether `got` matches `want`, where `<request_id>` in a string stands for
/// `id` and `<message>` for any non-empty text.
fn fits(got: &Value, want: &Value, id: &str) -> bool {
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => {
            g.len() == w.len()
                && w.iter()
                    .all(|(k, wv)| g.get(k).is_some_and(|gv| fits(gv, wv, id)))
        }
        (Value::String(g), Value::String(w)) => {
            let w = w.replace("<request_id>", id);
            match w.split_once("<message>") {
                Some((pre, post)) => {
                    g.len() > pre.len() + post.len() && g.starts_with(pre) && g.ends_with(post)
                }
                None => *g == w,
            }
        }
        (Value::Array(g), Value::Array(w)) => {
            g.len() == w.len() && g.iter().zip(w).all(|(g, w)| fits(g, w, id))
        }
        _ => got == want,
    }
}

// ---------------------------------------------------------------- the tests

fn streamed(case: &Case) -> bool {
    case.stream.is_some()
}

async fn run_cases(what: &str, cases: impl IntoIterator<Item = Case>) {
    let mut bench = Bench::start().await;
    for case in cases {
        bench.run(&case).await;
    }
    bench.finish(what);
}

#[tokio::test]
async fn openai_fixtures() {
    run_cases("openai fixtures", load("openai")).await;
}

#[tokio::test]
async fn ollama_fixtures() {
    run_cases("ollama fixtures", load("ollama")).await;
}

#[tokio::test]
async fn anthropic_fixtures() {
    run_cases("anthropic fixtures", load("anthropic")).await;
}

#[tokio::test]
async fn gemini_fixtures() {
    run_cases("gemini fixtures", load("gemini")).await;
}

#[tokio::test]
async fn openai_figure_mutations() {
    run_cases("openai figure mutations", all_mutations(load("openai"))).await;
}

#[tokio::test]
async fn ollama_figure_mutations() {
    run_cases("ollama figure mutations", all_mutations(load("ollama"))).await;
}

#[tokio::test]
async fn anthropic_figure_mutations() {
    run_cases(
        "anthropic figure mutations",
        all_mutations(load("anthropic")),
    )
    .await;
}

#[tokio::test]
async fn gemini_figure_mutations() {
    run_cases("gemini figure mutations", all_mutations(load("gemini"))).await;
}

/// Every stream again, its writes cut inside `\r\n`, between line ends and
/// mid-event (several events per write elsewhere); a few a byte at a time.
#[tokio::test]
async fn streams_hold_whatever_the_write_boundaries() {
    let byte_by_byte = [
        "openai/gen_chat_stream_openrouter_crlf_comments_pass",
        "openai/gen_chat_stream_azure_empty_first_chunk",
        "ollama/gen_chat_stream_eval_count_fraction",
        "anthropic/gen_messages_stream_rewritten_then_broken",
        "gemini/gen_stream_rewritten_then_broken",
    ];
    let mut variants = Vec::new();
    for case in DIALECTS.into_iter().flat_map(load).filter(streamed) {
        variants.push(Case {
            name: format!("{} [awkward writes]", case.name),
            key: format!("{}#awkward", case.key),
            writes: awkward_cuts(&case),
            pause: false,
            ..case.clone()
        });
        if byte_by_byte.contains(&case.name.as_str()) {
            variants.push(Case {
                name: format!("{} [a byte per write]", case.name),
                key: format!("{}#bytes", case.key),
                writes: (1..case.body.len()).collect(),
                pause: false,
                ..case
            });
        }
    }
    run_cases("streams cut at awkward offsets", variants).await;
}

// ---------------------------------------------------------------- offline checks

/// Which invariants each endpoint's fixtures must break, whole and streamed.
fn required(api: Api, streamed: bool) -> &'static [&'static str] {
    match (api, streamed) {
        (Api::Chat, false) => &[
            "invalid_json",
            "payload_missing",
            "choice_count_mismatch",
            "choice_invalid",
            "choice_index_invalid",
        ],
        (Api::Completions, false) => &[
            "payload_missing",
            "choice_count_mismatch",
            "choice_invalid",
            "choice_index_invalid",
        ],
        (Api::OllamaChat, false) => &["invalid_json", "payload_missing"],
        (Api::OllamaGenerate, false) => &["payload_missing"],
        (Api::Messages, false) => &[
            "invalid_json",
            "payload_missing",
            "content_block_invalid",
            "role_invalid",
        ],
        (Api::Chat, true) => &["invalid_json", "choice_index_invalid", "stream_after_done"],
        (Api::Completions, true) => &["choice_index_invalid"],
        (Api::OllamaChat, true) => &["invalid_json", "payload_missing", "stream_after_done"],
        (Api::OllamaGenerate, true) => &["payload_missing"],
        (Api::Messages, true) => &["content_block_invalid"],
        (Api::GeminiGenerate, false) => &[
            "invalid_json",
            "payload_missing",
            "choice_count_mismatch",
            "choice_invalid",
            "choice_index_invalid",
        ],
        // Without `alt=sse`: the JSON array of chunks.
        (Api::GeminiStream, false) => &["invalid_json", "payload_missing", "choice_index_invalid"],
        (Api::GeminiStream, true) => &[
            "invalid_json",
            "payload_missing",
            "choice_count_mismatch",
            "choice_invalid",
            "choice_index_invalid",
        ],
        (Api::GeminiGenerate, true) => &[],
    }
}

#[test]
fn the_generation_fixtures_agree_with_the_rule_and_cover_every_invariant() {
    let mut problems = Vec::new();
    // (dialect, endpoint, streamed) -> what the fixtures show.
    let mut valid: BTreeSet<(String, String, bool)> = BTreeSet::new();
    let mut broken: BTreeMap<(String, String, bool), BTreeSet<String>> = BTreeMap::new();
    let mut normalized: BTreeSet<(String, bool)> = BTreeSet::new();
    let mut collapsed = BTreeSet::new();
    let mut wildcards = BTreeSet::new();
    for case in DIALECTS.into_iter().flat_map(load) {
        let name = &case.name;
        let Some(api) = case.api() else {
            problems.push(format!(
                "{name}: {} is not a checked endpoint",
                case.endpoint
            ));
            continue;
        };
        if serde_json::from_slice::<Value>(&case.request).is_err() {
            problems.push(format!("{name}: request.json is not JSON"));
        }
        if case.stream.is_some_and(|f| f != framing(api)) {
            problems.push(format!("{name}: the wrong framing for {}", case.endpoint));
        }
        let rule = verdict(&case);
        let mut stated = case.expect.clone();
        if let Some(tokens) = &case.stated_tokens {
            if *tokens != rule.tokens {
                problems.push(format!(
                    "{name}: the rule counts tokens {:?}, the case says {tokens:?}",
                    rule.tokens
                ));
            }
        }
        stated.tokens = rule.tokens.clone();
        stated.broken_end = rule.broken_end;
        if stated != rule {
            let show = |e: &Expect| format!("{:?} {:?} {:?}", e.outcome, e.invariant, e.pointers);
            problems.push(format!(
                "{name}: the rule gives {}, the case says {}",
                show(&rule),
                show(&stated)
            ));
            if let (Some(want), Some(got)) = (&rule.client, &stated.client) {
                if let Some(diff) = differ("the case's client bytes", got, want) {
                    problems.push(format!("{name}: {diff}"));
                }
            }
        }
        let key = (
            case.dialect.to_string(),
            case.endpoint.clone(),
            case.stream.is_some(),
        );
        let inspected = (200..300).contains(&case.status);
        match case.expect.outcome {
            Outcome::Pass if inspected => {
                valid.insert(key);
            }
            Outcome::Pass => {}
            Outcome::Normalized => {
                normalized.insert((case.dialect.to_string(), case.stream.is_some()));
                for pointer in &case.expect.pointers {
                    if label_of(api, pointer).is_none() {
                        collapsed.insert(case.dialect);
                    } else if label_of(api, pointer).is_some_and(|l| l.ends_with("/*")) {
                        wildcards.insert(case.dialect);
                    }
                }
            }
            Outcome::Rejected => {
                let invariant = case.expect.invariant.clone().unwrap_or_default();
                if !INVARIANTS.contains(&invariant.as_str()) {
                    problems.push(format!("{name}: unknown invariant {invariant:?}"));
                }
                broken.entry(key).or_default().insert(invariant);
            }
        }
        if !case.writes.windows(2).all(|w| w[0] < w[1])
            || case.writes.iter().any(|w| *w == 0 || *w >= case.body.len())
        {
            problems.push(format!("{name}: writes must rise inside the body"));
        }
    }
    // Each endpoint and the ways it answers: whole, streamed. Gemini's
    // generateContent never streams; its streamGenerateContent answers
    // whole when asked without `alt=sse` (one JSON array).
    let both: &[bool] = &[false, true];
    let endpoints = [
        ("openai", "/v1/chat/completions", both),
        ("openai", "/v1/completions", both),
        ("ollama", "/api/chat", both),
        ("ollama", "/api/generate", both),
        ("ollama", "/v1/chat/completions", both),
        ("anthropic", "/v1/messages", both),
        (
            "gemini",
            "/v1beta/models/gemini-2.5-flash:generateContent",
            &[false],
        ),
        (
            "gemini",
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
            both,
        ),
    ];
    for (dialect, endpoint, ways) in endpoints {
        let api = api(dialect, endpoint).unwrap();
        for &streamed in ways {
            let key = (dialect.to_string(), endpoint.to_string(), streamed);
            let how = if streamed { "streamed" } else { "whole" };
            if !valid.contains(&key) {
                problems.push(format!("{dialect}{endpoint}: no valid {how} case"));
            }
            // Ollama's /v1 is checked as OpenAI's: one broken case each way.
            let must: &[&str] = if dialect == "ollama" && api == Api::Chat {
                &[]
            } else {
                required(api, streamed)
            };
            let have = broken.get(&key).cloned().unwrap_or_default();
            for invariant in must {
                if !have.contains(*invariant) {
                    problems.push(format!(
                        "{dialect}{endpoint} ({how}): no case breaks {invariant}"
                    ));
                }
            }
            if dialect == "ollama" && api == Api::Chat && have.is_empty() {
                problems.push(format!("{dialect}{endpoint} ({how}): no broken case"));
            }
        }
    }
    for dialect in DIALECTS {
        for streamed in [false, true] {
            if !normalized.contains(&(dialect.to_string(), streamed)) {
                problems.push(format!(
                    "{dialect}: no hand-written normalized case (streamed: {streamed})"
                ));
            }
        }
        if !collapsed.contains(dialect) && dialect != "ollama" {
            problems.push(format!("{dialect}: no hand-written record collapse"));
        }
        // Ollama and Gemini have no wildcard figure.
        if !wildcards.contains(dialect) && !["ollama", "gemini"].contains(&dialect) {
            problems.push(format!("{dialect}: no hand-written wildcard figure"));
        }
    }
    assert!(problems.is_empty(), "\n  - {}", problems.join("\n  - "));
}

#[test]
fn the_mutations_cover_every_figure_of_every_table() {
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for dialect in DIALECTS {
        let mut battery = BTreeSet::new();
        for case in load(dialect) {
            let api = case.api().unwrap();
            let how = if case.stream.is_some() {
                "stream"
            } else {
                "whole"
            };
            for variant in mutations(&case, &mut battery) {
                assert_ne!(
                    variant.body, case.body,
                    "{}: a mutation changes the body",
                    variant.name
                );
                for pointer in &variant.expect.pointers {
                    if let Some(label) = label_of(api, pointer) {
                        let event = if pointer.starts_with("/message/") {
                            " message_start"
                        } else {
                            ""
                        };
                        seen.insert(format!("{dialect}{} {how}{event} {label}", case.endpoint));
                    }
                }
            }
        }
    }
    let mut missing = Vec::new();
    // Figures these providers never send, so no valid case has them.
    let never_sent = [
        "openai/v1/completions whole /usage/prompt_tokens_details/*",
        "openai/v1/completions whole /usage/completion_tokens_details/*",
        "openai/v1/completions stream /usage/prompt_tokens_details/*",
        "openai/v1/completions stream /usage/completion_tokens_details/*",
        "ollama/v1/chat/completions whole /usage/prompt_tokens_details/*",
        "ollama/v1/chat/completions whole /usage/completion_tokens_details/*",
        "ollama/v1/chat/completions stream /usage/prompt_tokens_details/*",
        "ollama/v1/chat/completions stream /usage/completion_tokens_details/*",
        "anthropic/v1/messages stream message_start /usage/server_tool_use/*",
    ];
    let tables: [(&str, &str, &str, Figures); 15] = [
        ("openai", "/v1/chat/completions", "whole", OPENAI),
        ("openai", "/v1/chat/completions", "stream", OPENAI),
        ("openai", "/v1/completions", "whole", OPENAI),
        ("openai", "/v1/completions", "stream", OPENAI),
        ("ollama", "/api/chat", "whole", OLLAMA),
        ("ollama", "/api/chat", "stream", OLLAMA),
        ("ollama", "/api/generate", "whole", OLLAMA),
        ("ollama", "/api/generate", "stream", OLLAMA),
        ("ollama", "/v1/chat/completions", "whole", OPENAI),
        ("ollama", "/v1/chat/completions", "stream", OPENAI),
        ("anthropic", "/v1/messages", "whole", ANTHROPIC),
        (
            "anthropic",
            "/v1/messages",
            "stream message_start",
            ANTHROPIC,
        ),
        ("anthropic", "/v1/messages", "stream", ANTHROPIC_DELTA),
        (
            "gemini",
            "/v1beta/models/gemini-2.5-flash:generateContent",
            "whole",
            GEMINI,
        ),
        // Without `alt=sse` the chunks come as one JSON array, whose
        // elements' figures are not judged (figures sit on a root object).
        (
            "gemini",
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
            "stream",
            GEMINI,
        ),
    ];
    for (dialect, endpoint, how, figures) in tables {
        for (pointer, _, _) in figures {
            let figure = format!("{dialect}{endpoint} {how} {pointer}");
            if !seen.contains(&figure) && !never_sent.contains(&figure.as_str()) {
                missing.push(figure);
            }
        }
    }
    assert!(missing.is_empty(), "never mutated: {missing:?}");
}

#[test]
fn the_event_splitter_reads_every_line_end() {
    let body = b"data: {\"a\":1}\n\n: ping\n\ndata: x\r\n\r\nevent: e\rdata: y\r\rdata: partial";
    let events: Vec<&[u8]> = split_events(Framing::Sse, body)
        .into_iter()
        .map(|r| &body[r])
        .collect();
    assert_eq!(
        events,
        [
            &b"data: {\"a\":1}\n\n"[..],
            b": ping\n\n",
            b"data: x\r\n\r\n",
            b"event: e\rdata: y\r\r",
            b"data: partial",
        ]
    );
    let event = parse_sse(b": note\r\nevent: message_delta\r\ndata: {\"u\":1}\r\n\r\n");
    assert_eq!(event.name.as_deref(), Some("message_delta"));
    assert_eq!(event.data.as_deref(), Some(&b"{\"u\":1}"[..]));
    let raw = b"data:{\"u\":1}\n\n";
    assert_eq!(&raw[parse_sse(raw).data_range.unwrap()], b"{\"u\":1}");
    let lines: Vec<&[u8]> = split_events(Framing::Ndjson, b"{}\n\n{\"a\":1}\r\n{")
        .into_iter()
        .map(|r| &b"{}\n\n{\"a\":1}\r\n{"[r])
        .collect();
    assert_eq!(lines, [&b"{}\n"[..], b"\n", b"{\"a\":1}\r\n", b"{"]);
}

#[test]
fn the_rule_nulls_figures_and_collapses_the_outermost_record() {
    // A malformed detail beside a sound one: that figure alone.
    let body = br#"{"usage":{"prompt_tokens":3,"completion_tokens_details":{"reasoning_tokens":"0","audio_tokens":0}}}"#;
    let judged = judge(body, "", OPENAI);
    assert_eq!(
        judged.pointers,
        ["/usage/completion_tokens_details/reasoning_tokens"]
    );
    assert_eq!(
        judged.text,
        br#"{"usage":{"prompt_tokens":3,"completion_tokens_details":{"reasoning_tokens":null,"audio_tokens":0}}}"#
    );
    assert_eq!(judged.tokens, [("input", 3)]);
    assert_eq!(
        label_of(Api::Chat, &judged.pointers[0]),
        Some("/usage/completion_tokens_details/*")
    );

    // A sound detail keeps /usage; the detail record itself collapses.
    let body = br#"{"usage":{"prompt_tokens":"3","prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":-1}}}"#;
    let judged = judge(body, "", OPENAI);
    assert_eq!(
        judged.pointers,
        [
            "/usage/prompt_tokens",
            "/usage/completion_tokens_details/reasoning_tokens",
            "/usage/completion_tokens_details"
        ]
    );
    assert_eq!(
        judged.text,
        br#"{"usage":{"prompt_tokens":null,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":null}}"#
    );

    // Nothing sound left anywhere under /usage: it goes whole, and the
    // nested record is listed too.
    let body =
        br#"{"usage":{"total_tokens":true,"completion_tokens_details":{"reasoning_tokens":"1"}}}"#;
    let judged = judge(body, "", OPENAI);
    assert_eq!(
        judged.pointers,
        [
            "/usage/total_tokens",
            "/usage/completion_tokens_details/reasoning_tokens",
            "/usage",
            "/usage/completion_tokens_details"
        ]
    );
    assert_eq!(judged.text, br#"{"usage":null}"#);

    // message_start: prefixed pointers, unprefixed labels; the root stays.
    let body = br#"{"type":"message_start","message":{"id":"","usage":{"input_tokens":-1,"output_tokens":1}}}"#;
    let judged = judge(body, "/message", ANTHROPIC);
    assert_eq!(
        judged.pointers,
        ["/message/id", "/message/usage/input_tokens"]
    );
    assert_eq!(
        label_of(Api::Messages, "/message/usage/input_tokens"),
        Some("/usage/input_tokens")
    );
    assert_eq!(label_of(Api::Messages, "/message/usage"), None);
    assert_eq!(judged.tokens, [("output", 1)]);

    // Null and absent are not reported.
    assert_eq!(
        judge(br#"{"eval_count":null}"#, "", OLLAMA),
        Judged {
            text: br#"{"eval_count":null}"#.to_vec(),
            ..Judged::default()
        }
    );
}
