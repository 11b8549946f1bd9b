//! Conformance over real sockets, driven by fixtures: every provider dialect
//! against recorded upstream bodies, and the figure mutations generated from
//! every valid one.
//!
//! A case is a folder `tests/fixtures/<dialect>/<case>/`:
//! - `endpoint`: the path after the route prefix, e.g. `/v1/embeddings`;
//! - `request.json`: the client's body (not JSON when the case says so);
//! - `response.json`: the upstream's body, served verbatim;
//! - `response.headers` (optional): `name: value` lines the upstream adds;
//! - `status` (optional): the upstream's status, 200 when absent;
//! - `expect.json`: `{"outcome":"pass"}`, `{"outcome":"rejected","invariant":..}`
//!   or `{"outcome":"normalized","pointers":[..]}` with the exact client body
//!   in `"body"` or in `expected.json`; `"uninspected": "<reason>"` marks a
//!   case probity must forward unchecked and count as such.
//!
//! One fake upstream serves every case, chosen by the `x-fixture` request
//! header; one probity has a route per dialect, named after it, at `/<dialect>`.
//! Cases run one after another so that metric deltas and the capture list
//! belong to the case at hand, and every failure is collected under the
//! case's name before the test fails with the whole list.

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

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use serde_json::Value;
use support::fixtures::*;
use support::*;

const DIALECTS: [&str; 7] = [
    "openai", "ollama", "cohere", "jina", "tei", "voyage", "gemini",
];

const INVARIANTS: [&str; 14] = [
    "invalid_json",
    "payload_missing",
    "embedding_count_mismatch",
    "embedding_index_invalid",
    "embedding_item_invalid",
    "embedding_dimension_mismatch",
    "embedding_value_invalid",
    "embedding_base64_invalid",
    "rerank_result_invalid",
    "rerank_count_exceeded",
    "rerank_index_out_of_range",
    "rerank_index_duplicate",
    "rerank_score_invalid",
    "rerank_document_invalid",
];

const MALFORMED: &str = "probity_malformed_figures_total";
const INVALID: &str = "probity_provider_invalid_response_total";
const UNINSPECTED: &str = "probity_uninspected_total";
const TOKENS: &str = "probity_tokens_total";

// ---------------------------------------------------------------- figure tables

/// What a figure must be to be well-formed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Domain {
    /// A non-negative integer written as one.
    Count,
    /// A non-negative finite number (Cohere's `meta` figures).
    Number,
    /// A non-empty string (a response id).
    Id,
}

use Domain::{Count, Id, Number};

type Figures = &'static [(&'static str, Domain)];

const OPENAI: Figures = &[
    ("/id", Id),
    ("/usage/prompt_tokens", Count),
    ("/usage/total_tokens", Count),
];
const OLLAMA: Figures = &[
    ("/prompt_eval_count", Count),
    ("/total_duration", Count),
    ("/load_duration", Count),
];
const COHERE_EMBED: Figures = &[
    ("/id", Id),
    ("/meta/billed_units/input_tokens", Number),
    ("/meta/billed_units/images", Number),
    ("/meta/billed_units/image_tokens", Number),
    ("/meta/tokens/input_tokens", Number),
    ("/meta/tokens/output_tokens", Number),
];
const COHERE_RERANK: Figures = &[
    ("/id", Id),
    ("/meta/billed_units/search_units", Number),
    ("/meta/tokens/input_tokens", Number),
    ("/meta/tokens/output_tokens", Number),
];
const JINA: Figures = &[
    ("/usage/total_tokens", Count),
    ("/usage/prompt_tokens", Count),
];
const VOYAGE: Figures = &[("/usage/total_tokens", Count)];
/// Gemini's embedding answers, when they carry `usageMetadata`.
const GEMINI: Figures = &[
    ("/usageMetadata/promptTokenCount", Count),
    ("/usageMetadata/totalTokenCount", Count),
];
const TEI_HEADERS: &[&str] = &[
    "x-compute-tokens",
    "x-compute-characters",
    "x-compute-time",
    "x-total-time",
    "x-tokenization-time",
    "x-queue-time",
    "x-inference-time",
];

/// The figures probity judges on one endpoint, in table order.
#[derive(Clone, Copy)]
struct Table {
    body: Figures,
    /// Header figures to mutate (TEI's native endpoints).
    headers: &'static [&'static str],
}

/// `None` for an endpoint probity does not check.
fn table(dialect: &str, endpoint: &str) -> Option<Table> {
    let body = |body| Some(Table { body, headers: &[] });
    match (dialect, endpoint) {
        ("openai", "/v1/embeddings" | "/v1/rerank") => body(OPENAI),
        ("ollama", "/api/embed") => body(OLLAMA),
        ("ollama", "/api/embeddings") => body(&[]),
        // Checked as openai.
        ("ollama" | "tei", "/v1/embeddings") => body(OPENAI),
        ("cohere", "/v1/embed" | "/v2/embed") => body(COHERE_EMBED),
        ("cohere", "/v1/rerank" | "/v2/rerank") => body(COHERE_RERANK),
        ("jina", "/v1/embeddings" | "/v1/rerank") => body(JINA),
        ("tei", "/embed" | "/rerank") => Some(Table {
            body: &[],
            headers: TEI_HEADERS,
        }),
        ("voyage", "/v1/embeddings" | "/v1/rerank") => body(VOYAGE),
        ("gemini", e) if e.ends_with(":embedContent") || e.ends_with(":batchEmbedContents") => {
            body(GEMINI)
        }
        _ => None,
    }
}

/// The record holding a figure (`""`: the root, which never collapses).
fn record_of(pointer: &str) -> &str {
    &pointer[..pointer.rfind('/').unwrap_or(0)]
}

// ---------------------------------------------------------------- cases

#[derive(Debug, Clone, Copy, PartialEq)]
enum Outcome {
    Pass,
    Normalized,
    Rejected,
}

#[derive(Debug, Clone)]
struct Case {
    /// `dialect/case`, with a mutation's description after it.
    name: String,
    /// The `x-fixture` value the upstream serves this case by.
    key: String,
    dialect: &'static str,
    endpoint: String,
    request: Vec<u8>,
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    outcome: Outcome,
    invariant: Option<String>,
    pointers: Vec<String>,
    /// The exact client body of a normalized case.
    expected: Option<Vec<u8>>,
    uninspected: Option<String>,
}

impl Case {
    /// What the client must receive as the body (rejections aside).
    fn client_body(&self) -> &[u8] {
        self.expected.as_deref().unwrap_or(&self.body)
    }

    fn table(&self) -> Option<Table> {
        table(self.dialect, &self.endpoint)
    }

    /// Whether probity judges this response at all: its syntax and figures
    /// are judged even when its request is unreadable (`uninspected`: only
    /// the payload checks that need the request are skipped).
    fn inspected(&self) -> bool {
        self.table().is_some() && (200..300).contains(&self.status)
    }

    /// The pointers that name a figure (not a collapsed record).
    fn figure_pointers(&self) -> Vec<&str> {
        let body = self.table().map_or(&[][..], |t| t.body);
        self.pointers
            .iter()
            .map(String::as_str)
            .filter(|p| p.starts_with("header:") || body.iter().any(|(f, _)| f == p))
            .collect()
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
        .filter(|name| !name.starts_with("gen_")) // tests/generation_conformance.rs
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
    let headers = if dir.join("response.headers").exists() {
        text("response.headers")
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let (n, v) = l
                    .split_once(':')
                    .unwrap_or_else(|| panic!("{id}: header line {l:?}"));
                (n.trim().to_ascii_lowercase(), v.trim().to_string())
            })
            .collect()
    } else {
        Vec::new()
    };
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
    let expected = match (&expect["body"], dir.join("expected.json")) {
        (Value::String(body), _) => Some(body.clone().into_bytes()),
        (_, path) if path.exists() => Some(read(&path)),
        _ => None,
    };
    Case {
        name: id.clone(),
        key: id,
        dialect,
        endpoint,
        request: read(&dir.join("request.json")),
        status,
        headers,
        body: read(&dir.join("response.json")),
        outcome,
        invariant: expect["invariant"].as_str().map(str::to_owned),
        pointers: expect["pointers"]
            .as_array()
            .map(|a| a.iter().map(|p| p.as_str().unwrap().to_owned()).collect())
            .unwrap_or_default(),
        expected,
        uninspected: expect["uninspected"].as_str().map(str::to_owned),
    }
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
        Number => value.as_f64().is_some_and(|n| n.is_finite()) && raw[0] != b'-',
        Id => value.as_str().is_some_and(|s| !s.is_empty()),
    })
}

fn header_well_formed(value: &str) -> bool {
    !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit())
}

/// What the spec says probity makes of a response's figures: the
/// `probity-normalized` list and the body the client gets. The oracle for
/// generated mutations, and a cross-check of the hand-written cases.
fn judge(body: &[u8], headers: &[(String, String)], table: Table) -> (Vec<String>, Vec<u8>) {
    let mut malformed: Vec<(&str, Range<usize>)> = Vec::new();
    let mut sound_records = BTreeSet::new();
    let mut broken_records = BTreeSet::new();
    for &(pointer, domain) in table.body {
        let Some(span) = find(body, pointer) else {
            continue;
        };
        match well_formed(&body[span.value.clone()], domain) {
            None => {}
            Some(true) => {
                sound_records.insert(record_of(pointer));
            }
            Some(false) => {
                broken_records.insert(record_of(pointer));
                malformed.push((pointer, span.value));
            }
        }
    }
    let mut collapsed: Vec<&str> = Vec::new();
    for &(pointer, _) in table.body {
        let record = record_of(pointer);
        if !record.is_empty()
            && broken_records.contains(record)
            && !sound_records.contains(record)
            && !collapsed.contains(&record)
        {
            collapsed.push(record);
        }
    }
    let mut edits: Vec<(Range<usize>, &[u8])> = Vec::new();
    for record in &collapsed {
        edits.push((find(body, record).unwrap().value, b"null"));
    }
    for (pointer, range) in &malformed {
        if !collapsed.contains(&record_of(pointer)) {
            edits.push((range.clone(), b"null"));
        }
    }
    let mut pointers: Vec<String> = malformed.iter().map(|(p, _)| p.to_string()).collect();
    pointers.extend(collapsed.iter().map(|r| r.to_string()));
    for name in table.headers {
        if let Some((_, value)) = headers.iter().find(|(n, _)| n == name) {
            if !header_well_formed(value) {
                pointers.push(format!("header:{name}"));
            }
        }
    }
    (pointers, splice(body, &edits))
}

// ---------------------------------------------------------------- mutations

/// The malformed forms a figure's text is replaced with.
fn malformed_forms(domain: Domain, original: &str) -> Vec<String> {
    let forms: &[&str] = match domain {
        Count => &["\"abc\"", "-1", "8.5", "8.0", "1e3", "true", "{}", "[]"],
        Number => &["\"abc\"", "-1", "-8.5", "true", "{}", "[]"],
        Id => &["\"\"", "5", "true", "{}"],
    };
    let mut forms: Vec<String> = forms.iter().map(|f| f.to_string()).collect();
    if domain != Id {
        forms.insert(1, format!("\"{original}\""));
    }
    forms
}

/// Forms a Cohere `meta` figure may take and still be sound.
const TOLERATED_NUMBERS: [&str; 3] = ["8.0", "1e3", "2.5"];

/// Variants of a valid case with its figures broken, nulled or removed; the
/// expectation of each follows from the rule (see [`judge`]).
fn mutations(case: &Case) -> Vec<Case> {
    let Some(table) = case.table() else {
        return Vec::new();
    };
    if case.outcome != Outcome::Pass || !case.inspected() {
        return Vec::new();
    }
    let body = &case.body;
    let mut out = Vec::new();
    let mut push =
        |what: String, body: Vec<u8>, headers: Vec<(String, String)>, malformed: &[&str]| {
            let (pointers, expected) = judge(&body, &headers, table);
            for pointer in malformed {
                assert!(
                    pointers.iter().any(|p| p == pointer),
                    "{}: {what}: the rule must find {pointer} malformed",
                    case.name
                );
            }
            let n = out.len();
            out.push(Case {
                name: format!("{} [{what}]", case.name),
                key: format!("{}#{n}", case.key),
                outcome: if pointers.is_empty() {
                    Outcome::Pass
                } else {
                    Outcome::Normalized
                },
                expected: (!pointers.is_empty()).then_some(expected),
                pointers,
                body,
                headers,
                ..case.clone()
            });
        };

    // The figures present and sound, in table order.
    let present: Vec<(&str, Domain, Span)> = table
        .body
        .iter()
        .filter_map(|&(pointer, domain)| {
            let span = find(body, pointer)?;
            (well_formed(&body[span.value.clone()], domain) == Some(true))
                .then_some((pointer, domain, span))
        })
        .collect();
    let headers = &case.headers;
    for (pointer, domain, span) in &present {
        let original = std::str::from_utf8(&body[span.value.clone()]).unwrap();
        for form in malformed_forms(*domain, original) {
            let mutated = splice(body, &[(span.value.clone(), form.as_bytes())]);
            push(
                format!("{pointer} = {form}"),
                mutated,
                headers.clone(),
                &[pointer],
            );
        }
        if *domain == Number {
            for form in TOLERATED_NUMBERS {
                let mutated = splice(body, &[(span.value.clone(), form.as_bytes())]);
                push(format!("{pointer} = {form}"), mutated, headers.clone(), &[]);
            }
        }
        let nulled = splice(body, &[(span.value.clone(), b"null")]);
        push(format!("{pointer} = null"), nulled, headers.clone(), &[]);
        if let Some(member) = &span.member {
            let removed = splice(body, &[(removal(body, member.clone()), b"")]);
            push(format!("{pointer} removed"), removed, headers.clone(), &[]);
        }
    }

    // Whole records (and the root, which never collapses).
    let mut records: Vec<&str> = present.iter().map(|(p, _, _)| record_of(p)).collect();
    records.dedup();
    for record in records {
        let members: Vec<&(&str, Domain, Span)> = present
            .iter()
            .filter(|(p, _, _)| record_of(p) == record)
            .collect();
        if members.len() < 2 {
            continue;
        }
        let all_bad: Vec<(Range<usize>, &[u8])> = members
            .iter()
            .zip(
                ["\"abc\"", "-1", "true", "{}", "[]", "\"8\""]
                    .iter()
                    .cycle(),
            )
            .map(|((_, _, span), form)| (span.value.clone(), form.as_bytes()))
            .collect();
        let names: Vec<&str> = members.iter().map(|(p, _, _)| *p).collect();
        let what = if record.is_empty() { "root" } else { record };
        push(
            format!("every figure of {what} malformed"),
            splice(body, &all_bad),
            headers.clone(),
            &names,
        );
        let mut null_and_bad = all_bad.clone();
        null_and_bad[0].1 = b"null";
        push(
            format!("{what}: first figure null, the others malformed"),
            splice(body, &null_and_bad),
            headers.clone(),
            &names[1..],
        );
        let all_null: Vec<(Range<usize>, &[u8])> = members
            .iter()
            .map(|(_, _, s)| (s.value.clone(), &b"null"[..]))
            .collect();
        push(
            format!("every figure of {what} null"),
            splice(body, &all_null),
            headers.clone(),
            &[],
        );
    }

    // Header figures.
    let sound_headers: Vec<&str> = table
        .headers
        .iter()
        .copied()
        .filter(|name| {
            headers
                .iter()
                .any(|(n, v)| n == name && header_well_formed(v))
        })
        .collect();
    let with = |changes: &[(&str, &str)]| -> Vec<(String, String)> {
        headers
            .iter()
            .map(|(n, v)| match changes.iter().find(|(c, _)| c == n) {
                Some((_, new)) => (n.clone(), new.to_string()),
                None => (n.clone(), v.clone()),
            })
            .collect()
    };
    for name in &sound_headers {
        for value in ["abc", "-1", "1.5"] {
            push(
                format!("header {name}: {value}"),
                body.clone(),
                with(&[(*name, value)]),
                &[],
            );
        }
    }
    if let [first, .., last] = sound_headers[..] {
        push(
            format!("headers {first} and {last} malformed"),
            body.clone(),
            with(&[(last, "12ms"), (first, "-5")]),
            &[],
        );
    }
    out
}

// ---------------------------------------------------------------- the bench

#[derive(Clone)]
struct Served {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// One probity with a route per dialect, in front of one upstream that
/// answers each request with the case its `x-fixture` header names.
struct Bench {
    probity: Probity,
    _upstream: Upstream,
    served: Arc<Mutex<HashMap<String, Served>>>,
    client: Client<HttpConnector, Full<Bytes>>,
    /// The request id of the last capture, which the list must show second.
    last_capture: Option<String>,
    failures: Vec<String>,
    ran: usize,
}

impl Bench {
    async fn start() -> Self {
        let served: Arc<Mutex<HashMap<String, Served>>> = Arc::default();
        let cases = served.clone();
        let upstream = Upstream::start(move |request| {
            let key = request.header("x-fixture").unwrap_or_default();
            match cases.lock().unwrap().get(key) {
                Some(case) => {
                    let mut reply = Reply::json(case.status, case.body.clone());
                    for (name, value) in &case.headers {
                        reply = reply.header(name, value);
                    }
                    reply
                }
                None => Reply::json(500, format!("{{\"error\":\"no fixture {key:?}\"}}")),
            }
        })
        .await;
        let routes: String = DIALECTS
            .iter()
            .map(|d| route(d, &format!("/{d}"), &upstream.url(), d, ""))
            .collect();
        let probity = Probity::start(&config("", &routes));
        Self {
            probity,
            _upstream: upstream,
            served,
            client: client(),
            last_capture: None,
            failures: Vec::new(),
            ran: 0,
        }
    }

    async fn get(&self, url: String) -> Result<Got, String> {
        let request = Request::get(url).body(Full::default()).unwrap();
        exchange(&self.client, request).await
    }

    async fn metrics(&self) -> String {
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
                headers: case.headers.clone(),
                body: case.body.clone(),
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
        let before = self.metrics().await;
        let got = match self.send(case).await {
            Ok(got) => got,
            Err(err) => {
                self.failures.push(format!("{}: {err}", case.name));
                return;
            }
        };
        let id = got.header("x-request-id").unwrap_or_default().to_string();
        if id.is_empty() {
            failed.push("no x-request-id on the response".into());
        }
        match case.outcome {
            Outcome::Pass => check_pass(case, &got, &mut failed),
            Outcome::Normalized => check_normalized(case, &got, &id, &mut failed),
            Outcome::Rejected => check_rejected(case, &got, &id, &mut failed),
        }
        if case.outcome != Outcome::Pass && !id.is_empty() {
            self.check_capture(case, &id, &mut failed).await;
        }
        self.check_metrics(case, &before, &mut failed).await;
        for failure in failed {
            self.failures.push(format!("{}: {failure}", case.name));
        }
    }

    async fn check_capture(&mut self, case: &Case, id: &str, failed: &mut Vec<String>) {
        match self
            .get(self.probity.admin_url(&format!("/captures/{id}")))
            .await
        {
            Err(err) => failed.push(format!("GET /captures/{id}: {err}")),
            Ok(got) => {
                if got.status != 200 {
                    failed.push(format!(
                        "GET /captures/{id}: {} {}",
                        got.status,
                        short(&got.text())
                    ));
                } else {
                    if let Some(diff) = differ("the captured body", &got.body, &case.body) {
                        failed.push(diff);
                    }
                    let mut expect_header = |name: &str, want: &str| {
                        if got.header(name) != Some(want) {
                            failed.push(format!(
                                "capture header {name}: {:?}, want {want:?}",
                                got.header(name)
                            ));
                        }
                    };
                    expect_header("content-type", "application/json");
                    expect_header("probity-upstream-status", &case.status.to_string());
                    expect_header("probity-upstream-content-type", "application/json");
                    for (name, value) in &case.headers {
                        expect_header(&format!("probity-upstream-{name}"), value);
                    }
                }
            }
        }

        let list = match self.get(self.probity.admin_url("/captures")).await {
            Ok(got) if got.status == 200 => got,
            Ok(got) => {
                failed.push(format!(
                    "GET /captures: {} {}",
                    got.status,
                    short(&got.text())
                ));
                return;
            }
            Err(err) => {
                failed.push(format!("GET /captures: {err}"));
                return;
            }
        };
        let list: Value = match serde_json::from_slice(&list.body) {
            Ok(list) => list,
            Err(err) => {
                failed.push(format!(
                    "GET /captures: not JSON ({err}): {}",
                    short(&list.text())
                ));
                return;
            }
        };
        let captures = list["captures"].as_array().cloned().unwrap_or_default();
        let Some(newest) = captures.first() else {
            failed.push(format!("GET /captures lists nothing: {list}"));
            return;
        };
        if newest["request_id"] != id {
            failed.push(format!(
                "the newest capture is {}, not this request",
                newest["request_id"]
            ));
            self.last_capture = newest["request_id"].as_str().map(str::to_owned);
            return;
        }
        let outcome = match case.outcome {
            Outcome::Normalized => "normalized",
            _ => "rejected",
        };
        let want = [
            ("route", Value::from(case.dialect)),
            ("outcome", Value::from(outcome)),
            (
                "invariant",
                case.invariant.clone().map_or(Value::Null, Value::from),
            ),
            ("upstream_status", Value::from(case.status)),
            ("body_bytes", Value::from(case.body.len())),
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
        if case.outcome == Outcome::Normalized
            && newest["pointers"] != Value::from(case.pointers.clone())
        {
            failed.push(format!(
                "newest capture pointers: {}, want {:?}",
                newest["pointers"], case.pointers
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

    async fn check_metrics(&self, case: &Case, before: &str, failed: &mut Vec<String>) {
        let probes = probes(case);
        let mut wrong = Vec::new();
        // A counter may move just after the response: wait a little for one
        // that lags, never for one that moved too far.
        for _ in 0..6 {
            let after = self.metrics().await;
            let (unmet, lagging) = unmet(before, &after, &probes);
            wrong = unmet;
            if !lagging {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        failed.extend(wrong);
    }

    fn finish(self, what: &str) {
        finish(self.ran, &self.failures, what);
    }
}

/// The counters a case must move.
fn probes(case: &Case) -> Vec<Probe> {
    let route = || ("route", case.dialect.to_string());
    let figures = case.figure_pointers();
    let mut probes = vec![
        (MALFORMED, vec![route()], figures.len() as f64),
        (
            INVALID,
            vec![route()],
            f64::from(u8::from(case.outcome == Outcome::Rejected)),
        ),
    ];
    let distinct: BTreeSet<&str> = figures.iter().copied().collect();
    for figure in distinct {
        let count = figures.iter().filter(|f| **f == figure).count();
        probes.push((
            MALFORMED,
            vec![route(), ("figure", figure.to_string())],
            count as f64,
        ));
    }
    if let Some(invariant) = &case.invariant {
        probes.push((
            INVALID,
            vec![route(), ("invariant", invariant.clone())],
            1.0,
        ));
    }
    if let Some(reason) = &case.uninspected {
        probes.push((UNINSPECTED, vec![route(), ("reason", reason.clone())], 1.0));
    }
    if case.inspected() && case.uninspected.is_none() {
        probes.push((UNINSPECTED, vec![route()], 0.0));
    }
    // Well-formed token figures are counted; malformed ones never are. The
    // README names the kinds: a prompt count is `input`.
    if case.dialect == "openai" && case.inspected() && case.outcome != Outcome::Rejected {
        let body: Value = serde_json::from_slice(case.client_body()).unwrap_or_default();
        for (kind, pointer) in [
            ("input", "/usage/prompt_tokens"),
            ("total", "/usage/total_tokens"),
        ] {
            let tokens = body.pointer(pointer).and_then(Value::as_u64).unwrap_or(0);
            probes.push((
                TOKENS,
                vec![route(), ("kind", kind.to_string())],
                tokens as f64,
            ));
        }
    }
    probes
}

fn check_pass(case: &Case, got: &Got, failed: &mut Vec<String>) {
    if got.status.as_u16() != case.status {
        failed.push(format!(
            "status {}, want {}: {}",
            got.status,
            case.status,
            short(&got.text())
        ));
    }
    if let Some(diff) = differ("the body", &got.body, &case.body) {
        failed.push(diff);
    }
    for name in got.headers.keys() {
        if name.as_str().starts_with("probity-") {
            failed.push(format!(
                "a valid response got {name}: {:?}",
                got.headers[name]
            ));
        }
    }
    expect_upstream_headers(case, got, &[], failed);
}

fn check_normalized(case: &Case, got: &Got, id: &str, failed: &mut Vec<String>) {
    if got.status.as_u16() != case.status {
        failed.push(format!(
            "status {}, want {}: {}",
            got.status,
            case.status,
            short(&got.text())
        ));
    }
    if let Some(diff) = differ("the body", &got.body, case.client_body()) {
        failed.push(diff);
    }
    let want = case.pointers.join(",");
    if got.header("probity-normalized") != Some(want.as_str()) {
        failed.push(format!(
            "probity-normalized: {:?}, want {want:?}",
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
    let removed: Vec<&str> = case
        .pointers
        .iter()
        .filter_map(|p| p.strip_prefix("header:"))
        .collect();
    for name in &removed {
        if let Some(value) = got.header(name) {
            failed.push(format!(
                "malformed header {name}: {value:?} reached the client"
            ));
        }
    }
    expect_upstream_headers(case, got, &removed, failed);
}

fn check_rejected(case: &Case, got: &Got, id: &str, failed: &mut Vec<String>) {
    if got.status != 502 {
        failed.push(format!(
            "status {}, want 502: {}",
            got.status,
            short(&got.text())
        ));
    }
    if got.header("content-type") != Some("application/json") {
        failed.push(format!("content-type {:?}", got.header("content-type")));
    }
    let json: Value = serde_json::from_slice(&got.body).unwrap_or_default();
    let error = &probity_error(&json).unwrap_or_default();
    if !error.is_object() {
        failed.push(format!("no probity error in {}", short(&got.text())));
        return;
    }
    let want = [
        ("type", Value::from("provider_invalid_response")),
        ("code", Value::from(case.invariant.clone())),
        ("route", Value::from(case.dialect)),
        ("request_id", Value::from(id)),
    ];
    for (member, value) in want {
        if error[member] != value {
            failed.push(format!(
                "error.{member}: {}, want {value} in {}",
                error[member],
                short(&got.text())
            ));
        }
    }
    if error["message"].as_str().is_none_or(|m| m.is_empty()) {
        failed.push(format!("error.message missing in {}", short(&got.text())));
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

/// The upstream's headers reach the client, except those named in `removed`.
fn expect_upstream_headers(case: &Case, got: &Got, removed: &[&str], failed: &mut Vec<String>) {
    if got.header("content-type") != Some("application/json") {
        failed.push(format!("content-type {:?}", got.header("content-type")));
    }
    for (name, value) in &case.headers {
        if !removed.contains(&name.as_str()) && got.header(name) != Some(value.as_str()) {
            failed.push(format!(
                "upstream header {name}: {:?}, want {value:?}",
                got.header(name)
            ));
        }
    }
}

// ---------------------------------------------------------------- the tests

async fn run_fixtures(dialect: &'static str) {
    let mut bench = Bench::start().await;
    for case in load(dialect) {
        bench.run(&case).await;
    }
    bench.finish(&format!("{dialect} fixtures"));
}

async fn run_mutations(dialect: &'static str) {
    let mut bench = Bench::start().await;
    for case in load(dialect) {
        for variant in mutations(&case) {
            bench.run(&variant).await;
        }
    }
    bench.finish(&format!("{dialect} figure mutations"));
}

#[tokio::test]
async fn openai_fixtures() {
    run_fixtures("openai").await;
}

#[tokio::test]
async fn openai_figure_mutations() {
    run_mutations("openai").await;
}

#[tokio::test]
async fn ollama_fixtures() {
    run_fixtures("ollama").await;
}

#[tokio::test]
async fn ollama_figure_mutations() {
    run_mutations("ollama").await;
}

#[tokio::test]
async fn cohere_fixtures() {
    run_fixtures("cohere").await;
}

#[tokio::test]
async fn cohere_figure_mutations() {
    run_mutations("cohere").await;
}

#[tokio::test]
async fn jina_fixtures() {
    run_fixtures("jina").await;
}

#[tokio::test]
async fn jina_figure_mutations() {
    run_mutations("jina").await;
}

#[tokio::test]
async fn tei_fixtures() {
    run_fixtures("tei").await;
}

#[tokio::test]
async fn tei_figure_mutations() {
    run_mutations("tei").await;
}

#[tokio::test]
async fn voyage_fixtures() {
    run_fixtures("voyage").await;
}

#[tokio::test]
async fn voyage_figure_mutations() {
    run_mutations("voyage").await;
}

#[tokio::test]
async fn gemini_fixtures() {
    run_fixtures("gemini").await;
}

#[tokio::test]
async fn gemini_figure_mutations() {
    run_mutations("gemini").await;
}

#[tokio::test]
async fn captures_are_listed_newest_first_and_only_for_rewrites() {
    let bench = Bench::start().await;
    let cases = [
        load_case("openai", "embeddings_count_short"),
        load_case("cohere", "v2_embed_billed_units_collapse"),
        load_case("tei", "embed_compute_tokens_fraction"),
        load_case("voyage", "rerank_pass"),
        load_case("jina", "rerank_index_duplicate"),
    ];
    let mut ids = Vec::new();
    for case in &cases {
        let got = bench.send(case).await.unwrap();
        let id = got.header("x-request-id").unwrap().to_string();
        if case.outcome != Outcome::Pass {
            assert_eq!(
                got.header("probity-capture"),
                Some(id.as_str()),
                "{}",
                case.name
            );
            ids.push(id);
        } else {
            assert_eq!(got.header("probity-capture"), None, "{}", case.name);
        }
    }
    ids.reverse();
    let list = bench
        .get(bench.probity.admin_url("/captures"))
        .await
        .unwrap()
        .json();
    let listed: Vec<&str> = list["captures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["request_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        listed, ids,
        "newest first, and no capture for a valid response"
    );
    let outcomes: Vec<&str> = list["captures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        ["rejected", "normalized", "normalized", "rejected"]
    );

    let unknown = bench
        .get(bench.probity.admin_url("/captures/no-such-request"))
        .await
        .unwrap();
    assert_eq!(unknown.status, 404, "{}", unknown.text());
}

// ---------------------------------------------------------------- offline checks

/// Which invariants each dialect's fixtures must break, one case at least each.
fn required_invariants(dialect: &str) -> Vec<&'static str> {
    let embedding = [
        "invalid_json",
        "payload_missing",
        "embedding_count_mismatch",
        "embedding_dimension_mismatch",
        "embedding_value_invalid",
    ];
    let data_items = ["embedding_index_invalid", "embedding_item_invalid"];
    let rerank = [
        "rerank_result_invalid",
        "rerank_count_exceeded",
        "rerank_index_out_of_range",
        "rerank_index_duplicate",
        "rerank_score_invalid",
    ];
    let mut all: Vec<&str> = embedding.to_vec();
    match dialect {
        "openai" => {
            all.extend(data_items);
            all.push("embedding_base64_invalid");
            all.extend(rerank);
        }
        "ollama" => all.push("embedding_index_invalid"),
        "cohere" => {
            all.push("embedding_base64_invalid");
            all.extend(rerank);
            all.push("rerank_document_invalid");
        }
        "jina" | "voyage" => {
            all.extend(data_items);
            all.push("embedding_base64_invalid");
            all.extend(rerank);
            all.push("rerank_document_invalid");
        }
        "tei" => {
            all.extend(rerank);
            all.push("rerank_document_invalid");
        }
        "gemini" => all.push("embedding_item_invalid"),
        _ => unreachable!(),
    }
    all
}

#[test]
fn the_fixtures_are_sound_and_cover_every_invariant() {
    let mut problems = Vec::new();
    for dialect in DIALECTS {
        let cases = load(dialect);
        let mut broken: BTreeSet<String> = BTreeSet::new();
        let mut endpoints_with_pass: BTreeSet<String> = BTreeSet::new();
        let mut normalized = 0;
        for case in &cases {
            let name = &case.name;
            let request_is_json = serde_json::from_slice::<Value>(&case.request).is_ok();
            match &case.uninspected {
                Some(reason) if reason == "request_not_json" && request_is_json => {
                    problems.push(format!("{name}: the request is JSON"))
                }
                None if !request_is_json => {
                    problems.push(format!("{name}: request.json is not JSON"))
                }
                _ => {}
            }
            let response_is_json = serde_json::from_slice::<Value>(&case.body).is_ok();
            let table = case.table();
            match case.outcome {
                Outcome::Rejected => {
                    let invariant = case.invariant.as_deref().unwrap_or_default();
                    if !INVARIANTS.contains(&invariant) {
                        problems.push(format!("{name}: unknown invariant {invariant:?}"));
                    }
                    if (invariant == "invalid_json") == response_is_json {
                        problems.push(format!("{name}: invalid_json iff the body is not JSON"));
                    }
                    if !case.inspected() {
                        problems.push(format!("{name}: rejected but not inspected"));
                    }
                    broken.insert(invariant.to_string());
                }
                Outcome::Pass => {
                    if case.inspected() {
                        endpoints_with_pass.insert(case.endpoint.clone());
                        let (pointers, _) = judge(&case.body, &case.headers, table.unwrap());
                        if !pointers.is_empty() {
                            problems
                                .push(format!("{name}: a pass case with malformed {pointers:?}"));
                        }
                        if !response_is_json {
                            problems.push(format!("{name}: a pass case whose body is not JSON"));
                        }
                    }
                }
                Outcome::Normalized => {
                    normalized += 1;
                    let Some(expected) = &case.expected else {
                        problems.push(format!("{name}: no expected body"));
                        continue;
                    };
                    let Some(table) = table.filter(|_| case.inspected()) else {
                        problems.push(format!("{name}: normalized but not inspected"));
                        continue;
                    };
                    // The hand-written expectation must agree with the rule.
                    let (pointers, body) = judge(&case.body, &case.headers, table);
                    if pointers != case.pointers {
                        problems.push(format!(
                            "{name}: the rule gives {pointers:?}, the case says {:?}",
                            case.pointers
                        ));
                    }
                    if let Some(diff) = differ("the rule's body", &body, expected) {
                        problems.push(format!("{name}: {diff}"));
                    }
                    if serde_json::from_slice::<Value>(expected).is_err() {
                        problems.push(format!("{name}: the expected body is not JSON"));
                    }
                }
            }
            if case.outcome != Outcome::Pass && !(200..300).contains(&case.status) {
                problems.push(format!("{name}: a non-2xx response is never checked"));
            }
            for variant in mutations(case) {
                if let Some(expected) = &variant.expected {
                    if serde_json::from_slice::<Value>(expected).is_err() {
                        problems.push(format!("{}: the expected body is not JSON", variant.name));
                    }
                }
                if serde_json::from_slice::<Value>(&variant.body).is_err() {
                    problems.push(format!("{}: the mutated body is not JSON", variant.name));
                }
            }
        }
        for invariant in required_invariants(dialect) {
            if !broken.contains(invariant) {
                problems.push(format!("{dialect}: no case breaks {invariant}"));
            }
        }
        if normalized == 0 {
            problems.push(format!("{dialect}: no hand-written normalized case"));
        }
        let endpoints: BTreeSet<String> = cases
            .iter()
            .filter(|c| c.inspected())
            .map(|c| c.endpoint.clone())
            .collect();
        for endpoint in endpoints.difference(&endpoints_with_pass) {
            problems.push(format!("{dialect}{endpoint}: no valid case"));
        }
    }
    for must in [
        "openai/request_not_json_passes_unchecked",
        "openai/unknown_endpoint_moderations_passes_unchecked",
        "openai/error_500_broken_body_passes",
    ] {
        if !fixtures_dir().join(must).is_dir() {
            problems.push(format!("{must}: missing"));
        }
    }
    assert!(problems.is_empty(), "\n  - {}", problems.join("\n  - "));
}

#[test]
fn the_figure_mutations_cover_every_figure_of_every_dialect() {
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for dialect in DIALECTS {
        for case in load(dialect) {
            for variant in mutations(&case) {
                for pointer in variant.figure_pointers() {
                    seen.insert(format!("{dialect}{} {pointer}", case.endpoint));
                }
            }
        }
    }
    let mut missing = Vec::new();
    let tables = [
        ("openai", "/v1/embeddings"),
        ("openai", "/v1/rerank"),
        ("ollama", "/api/embed"),
        ("ollama", "/v1/embeddings"),
        ("cohere", "/v1/embed"),
        ("cohere", "/v2/embed"),
        ("cohere", "/v1/rerank"),
        ("cohere", "/v2/rerank"),
        ("jina", "/v1/embeddings"),
        ("jina", "/v1/rerank"),
        ("tei", "/embed"),
        ("tei", "/rerank"),
        ("tei", "/v1/embeddings"),
        ("voyage", "/v1/embeddings"),
        ("voyage", "/v1/rerank"),
        ("gemini", "/v1beta/models/gemini-embedding-001:embedContent"),
        (
            "gemini",
            "/v1beta/models/gemini-embedding-001:batchEmbedContents",
        ),
    ];
    // Figures these providers never send, so no valid case has them.
    let never_sent = [
        "ollama/v1/embeddings /id",
        "tei/v1/embeddings /id",
        "cohere/v1/embed /meta/billed_units/images",
        "cohere/v1/embed /meta/billed_units/image_tokens",
        "cohere/v1/embed /meta/tokens/input_tokens",
        "cohere/v1/embed /meta/tokens/output_tokens",
        "cohere/v1/rerank /meta/tokens/input_tokens",
        "cohere/v1/rerank /meta/tokens/output_tokens",
    ];
    for (dialect, endpoint) in tables {
        let table = table(dialect, endpoint).unwrap();
        let pointers = table
            .body
            .iter()
            .map(|(p, _)| p.to_string())
            .chain(table.headers.iter().map(|h| format!("header:{h}")));
        for pointer in pointers {
            let figure = format!("{dialect}{endpoint} {pointer}");
            if !seen.contains(&figure) && !never_sent.contains(&figure.as_str()) {
                missing.push(figure);
            }
        }
    }
    assert!(missing.is_empty(), "never mutated: {missing:?}");
}

#[test]
fn the_span_finder_follows_pointers_whatever_the_layout() {
    let pretty = br#"{
  "id": "x",
  "a\"b": 1,
  "caf\u00e9": [10, {"k": "v}"}, [ ]],
  "usage": {
    "prompt_tokens": 8,
    "total_tokens": 8
  }
}"#;
    let text = |pointer: &str| {
        let span = find(pretty, pointer).unwrap_or_else(|| panic!("{pointer}"));
        std::str::from_utf8(&pretty[span.value])
            .unwrap()
            .to_string()
    };
    assert_eq!(text("/id"), "\"x\"");
    assert_eq!(text("/a\"b"), "1");
    assert_eq!(text("/café/0"), "10");
    assert_eq!(text("/café/1/k"), "\"v}\"");
    assert_eq!(text("/café/2"), "[ ]");
    assert_eq!(text("/usage/total_tokens"), "8");
    assert!(text("").starts_with('{'));
    assert_eq!(find(pretty, "/usage/missing"), None);
    assert_eq!(find(pretty, "/café/3"), None);
    assert_eq!(find(pretty, "/id/0"), None);

    let compact = br#"{"a~b":{"c/d":[1,2]},"z":null}"#;
    let span = find(compact, "/a~0b/c~1d/1").unwrap();
    assert_eq!(&compact[span.value], b"2");
    assert_eq!(span.member, None);
    let span = find(compact, "/z").unwrap();
    assert_eq!(&compact[span.member.unwrap()], br#""z":null"#);

    // Removing a member keeps the rest, and keeps it JSON, wherever it sits.
    for pointer in [
        "/id",
        "/usage/prompt_tokens",
        "/usage/total_tokens",
        "/usage",
    ] {
        let member = find(pretty, pointer).unwrap().member.unwrap();
        let cut = splice(pretty, &[(removal(pretty, member), b"")]);
        let json: Value = serde_json::from_slice(&cut)
            .unwrap_or_else(|e| panic!("{pointer}: {e}: {}", String::from_utf8_lossy(&cut)));
        assert!(json.pointer(pointer).is_none(), "{pointer}");
        let top_level = pointer.matches('/').count() == 1;
        assert_eq!(
            json.as_object().unwrap().len(),
            if top_level { 3 } else { 4 }
        );
    }
    let only = br#"{"usage":{"total_tokens":3}}"#;
    let member = find(only, "/usage/total_tokens").unwrap().member.unwrap();
    assert_eq!(
        splice(only, &[(removal(only, member), b"")]),
        br#"{"usage":{}}"#
    );
}

#[test]
fn the_rule_nulls_figures_and_collapses_records_surgically() {
    let body = br#"{"id": "r", "usage": {"prompt_tokens": "8", "total_tokens": -8}}"#;
    let table = table("openai", "/v1/embeddings").unwrap();
    let (pointers, out) = judge(body, &[], table);
    assert_eq!(
        pointers,
        ["/usage/prompt_tokens", "/usage/total_tokens", "/usage"]
    );
    assert_eq!(out, br#"{"id": "r", "usage": null}"#);

    let body = br#"{"id": 5, "usage": {"prompt_tokens": 8.0, "total_tokens": 8}}"#;
    let (pointers, out) = judge(body, &[], table);
    assert_eq!(pointers, ["/id", "/usage/prompt_tokens"]);
    assert_eq!(
        out,
        br#"{"id": null, "usage": {"prompt_tokens": null, "total_tokens": 8}}"#
    );

    let body = br#"{"usage": {"prompt_tokens": null, "total_tokens": true}}"#;
    assert_eq!(judge(body, &[], table).0, ["/usage/total_tokens", "/usage"]);
    let body = br#"{"usage": {"prompt_tokens": null}}"#;
    assert!(judge(body, &[], table).0.is_empty());

    let ollama = table_for("ollama", "/api/embed");
    let body = br#"{"embeddings":[[1]],"total_duration":"1","load_duration":-1}"#;
    let (pointers, out) = judge(body, &[], ollama);
    assert_eq!(pointers, ["/total_duration", "/load_duration"]);
    assert_eq!(
        out,
        br#"{"embeddings":[[1]],"total_duration":null,"load_duration":null}"#
    );

    let cohere = table_for("cohere", "/v2/rerank");
    let body = br#"{"meta":{"billed_units":{"search_units":1e3},"tokens":{"input_tokens":"3"}}}"#;
    let (pointers, out) = judge(body, &[], cohere);
    assert_eq!(pointers, ["/meta/tokens/input_tokens", "/meta/tokens"]);
    assert_eq!(
        out,
        br#"{"meta":{"billed_units":{"search_units":1e3},"tokens":null}}"#
    );

    let tei = table_for("tei", "/embed");
    let headers = [
        ("x-queue-time".to_string(), "1.5".to_string()),
        ("x-compute-tokens".to_string(), "abc".to_string()),
        ("x-total-time".to_string(), "12".to_string()),
    ];
    let (pointers, out) = judge(b"[[1]]", &headers, tei);
    assert_eq!(pointers, ["header:x-compute-tokens", "header:x-queue-time"]);
    assert_eq!(out, b"[[1]]");
}

fn table_for(dialect: &str, endpoint: &str) -> Table {
    table(dialect, endpoint).unwrap()
}
