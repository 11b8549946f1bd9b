//! The one conformance runner of the fixture suites (`tests/it/conformance.rs`,
//! `tests/it/generation_conformance.rs`, `tests/it/contract_conformance.rs`): what
//! they do alike, so that each suite keeps only its dialects' tables, its
//! oracle's rules, its mutations and its coverage lists.
//!
//! - [`Fixture`], [`load_fixtures`]: a case folder
//!   `tests/fixtures/<folder>/<case>/` as it is on disk: `endpoint`,
//!   `request.json`, one of `response.json`, `response.sse` (served as
//!   `text/event-stream`) or `response.ndjson` (`application/x-ndjson`),
//!   optional `status` (200 when absent) and `response.headers` (`name:
//!   value` lines the upstream adds), `expect.json`, optional
//!   `expected.<ext>` (the exact client body), `route.toml` (appended to
//!   the case's `[[routes]]` table) and `source.txt` (where an answer taken
//!   from the wild was reported: one line, for the reader; never read).
//!   Any other file is refused.
//! - [`Case`]: what the runner serves, sends and checks; `E` is what the
//!   suite expects of it.
//! - [`Expect`], [`figure_case`]: the expectation of the figure suites
//!   (`pass`, `normalized` or `rejected`), read from `expect.json`.
//! - The figure rule: [`Domain`], [`Figures`], [`judge`], [`figure_of`],
//!   and [`figure_variants`], the mutations generated from a valid figure.
//! - [`Bench`]: one probity in front of one fake upstream that answers each
//!   request with the case its `x-fixture` header names; it runs cases one
//!   after another, so that metric deltas and the capture list belong to the
//!   case at hand, and collects every failure under the case's name. A
//!   [`Suite`] tells it how to check the response, what the capture must
//!   list and which counters must move.
//! - The checks of a whole response that are the same in every suite:
//!   [`check_figures`] (pass, normalized, rejected) and its parts.
//!
//! Adding a dialect is data: its name in the suite's dialect list (a route
//! at `/<dialect>` is made for each, see [`dialect_routes`]), its figure
//! table ([`Figures`]) and its endpoints in the suite's endpoint table.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use serde_json::Value;

use super::fixtures::{
    differ, exchange, find, members, removal, short, splice, unmet, Probe, Span,
};
use super::{client, part, probity_error, route, Before, Got, Probity, Reply, ReplyBody, Upstream};

pub const MALFORMED: &str = "probity_malformed_figures_total";
pub const CONTRADICTIONS: &str = "probity_figure_contradictions_total";
pub const INVALID: &str = "probity_provider_invalid_response_total";
pub const UNINSPECTED: &str = "probity_uninspected_total";
pub const TOKENS: &str = "probity_tokens_total";
pub const UPSTREAM_STREAM_ERRORS: &str = "probity_upstream_stream_errors_total";
/// The `kind`s of `probity_tokens_total`.
pub const KINDS: [&str; 3] = ["input", "output", "total"];

/// How long the upstream waits between the writes of a case that pauses.
pub const WRITE_PAUSE: Duration = Duration::from_millis(2);

// ---------------------------------------------------------------- fixtures

/// How the upstream's answer is framed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Framing {
    /// One JSON body, sent with a Content-Length.
    Whole,
    Sse,
    Ndjson,
    /// AWS's binary event stream (Bedrock's `converse-stream`), written
    /// in the fixtures as text, one frame per line
    /// ([`super::eventstream::from_text`]).
    EventStream,
}

impl Framing {
    pub fn content_type(self) -> &'static str {
        match self {
            Framing::Whole => "application/json",
            Framing::Sse => "text/event-stream",
            Framing::Ndjson => "application/x-ndjson",
            Framing::EventStream => "application/vnd.amazon.eventstream",
        }
    }

    /// The extension of its `response.<ext>` and `expected.<ext>`.
    pub fn ext(self) -> &'static str {
        match self {
            Framing::Whole => "json",
            Framing::Sse => "sse",
            Framing::Ndjson => "ndjson",
            Framing::EventStream => "events",
        }
    }

    pub fn streamed(self) -> bool {
        self != Framing::Whole
    }
}

const FRAMINGS: [Framing; 4] = [
    Framing::Whole,
    Framing::Sse,
    Framing::Ndjson,
    Framing::EventStream,
];

/// The files a case folder may hold.
const FILES: [&str; 15] = [
    "endpoint",
    "source.txt",
    "request.json",
    "response.json",
    "response.sse",
    "response.ndjson",
    "response.events",
    "expected.events",
    "response.headers",
    "status",
    "expect.json",
    "expected.json",
    "expected.sse",
    "expected.ndjson",
    "route.toml",
];

/// A case folder as it is on disk.
#[derive(Debug, Clone)]
pub struct Fixture {
    /// The folder under `tests/fixtures` (a dialect, or `contracts`).
    pub folder: String,
    /// The case's folder name.
    pub name: String,
    /// The files it holds, sorted.
    pub files: Vec<String>,
    pub endpoint: String,
    pub request: Vec<u8>,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub framing: Framing,
    pub body: Vec<u8>,
    pub expect: Value,
    /// `expected.<ext>`, the extension of the response's.
    pub expected: Option<Vec<u8>>,
    /// `route.toml` (empty when absent).
    pub route: String,
}

impl Fixture {
    /// `folder/name`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.folder, self.name)
    }

    /// The case served and sent as the fixture says, on the route named
    /// after its folder, with an expectation the suite read.
    pub fn case<E>(&self, expect: E) -> Case<E> {
        Case {
            name: self.id(),
            key: self.id(),
            route: self.folder.clone(),
            dialect: self.folder.clone(),
            endpoint: self.endpoint.clone(),
            request: self.request.clone(),
            request_id: None,
            status: self.status,
            headers: self.headers.clone(),
            framing: self.framing,
            body: self.body.clone(),
            writes: Vec::new(),
            pause: false,
            expect,
        }
    }
}

pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The case folders of `tests/fixtures/<folder>` that `keep` accepts by name,
/// sorted by name; panics with every problem of every malformed one.
pub fn load_fixtures(folder: &str, keep: impl Fn(&str) -> bool) -> Vec<Fixture> {
    let dir = fixtures_dir().join(folder);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("{}: {err}", dir.display()))
        .map(|entry| entry.unwrap())
        .filter(|entry| entry.file_type().unwrap().is_dir())
        .map(|entry| entry.file_name().into_string().unwrap())
        .filter(|name| keep(name))
        .collect();
    names.sort();
    let mut problems = Vec::new();
    let mut fixtures = Vec::new();
    for name in names {
        match load_fixture(folder, &name) {
            Ok(fixture) => fixtures.push(fixture),
            Err(problem) => problems.push(format!("{folder}/{name}: {problem}")),
        }
    }
    assert!(
        problems.is_empty(),
        "bad fixtures:\n  - {}",
        problems.join("\n  - ")
    );
    fixtures
}

/// One case folder, `tests/fixtures/<folder>/<name>`.
pub fn load_fixture(folder: &str, name: &str) -> Result<Fixture, String> {
    let dir = fixtures_dir().join(folder).join(name);
    let read = |file: &str| std::fs::read(dir.join(file)).map_err(|e| format!("{file}: {e}"));
    let text = |file: &str| String::from_utf8(read(file)?).map_err(|e| format!("{file}: {e}"));
    let exists = |file: &str| dir.join(file).exists();
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&dir).map_err(|e| e.to_string())? {
        let file = entry.map_err(|e| e.to_string())?.file_name();
        let file = file.to_string_lossy().into_owned();
        if !FILES.contains(&file.as_str()) {
            return Err(format!("unknown file {file}"));
        }
        files.push(file);
    }
    files.sort();
    let endpoint = text("endpoint")?.trim().to_string();
    if !endpoint.starts_with('/') {
        return Err(format!("endpoint {endpoint:?}"));
    }
    let status = match exists("status") {
        true => text("status")?
            .trim()
            .parse()
            .map_err(|e| format!("status: {e}"))?,
        false => 200,
    };
    let mut headers = Vec::new();
    if exists("response.headers") {
        for line in text("response.headers")?.lines() {
            if line.trim().is_empty() {
                continue;
            }
            let (name, value) = line
                .split_once(':')
                .ok_or_else(|| format!("header line {line:?}"))?;
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }
    let responses: Vec<Framing> = FRAMINGS
        .into_iter()
        .filter(|f| exists(&format!("response.{}", f.ext())))
        .collect();
    let [framing] = responses[..] else {
        return Err("exactly one response.{json,sse,ndjson,events} is needed".into());
    };
    let ext = framing.ext();
    for other in FRAMINGS.into_iter().filter(|f| *f != framing) {
        if exists(&format!("expected.{}", other.ext())) {
            return Err(format!("expected.{} beside response.{ext}", other.ext()));
        }
    }
    let expected = format!("expected.{ext}");
    // An event stream is written as text, one frame per line.
    let framed = |file: &str| match framing {
        Framing::EventStream => {
            super::eventstream::from_text(&text(file)?).map_err(|e| format!("{file}: {e}"))
        }
        _ => read(file),
    };
    Ok(Fixture {
        folder: folder.to_string(),
        name: name.to_string(),
        files,
        endpoint,
        request: read("request.json")?,
        status,
        headers,
        framing,
        body: framed(&format!("response.{ext}"))?,
        expect: serde_json::from_slice(&read("expect.json")?)
            .map_err(|e| format!("expect.json: {e}"))?,
        expected: if exists(&expected) {
            Some(framed(&expected)?)
        } else {
            None
        },
        route: if exists("route.toml") {
            text("route.toml")?
        } else {
            String::new()
        },
    })
}

// ---------------------------------------------------------------- cases

/// A case as the runner serves, sends and checks it.
#[derive(Debug, Clone)]
pub struct Case<E> {
    /// What failure messages call it: `folder/case`, with a variant's
    /// description after it.
    pub name: String,
    /// The `x-fixture` value the upstream serves this case by.
    pub key: String,
    /// The probity route it goes through, at `/<route>`.
    pub route: String,
    /// That route's dialect.
    pub dialect: String,
    /// The path after the route's prefix.
    pub endpoint: String,
    pub request: Vec<u8>,
    /// The `x-request-id` the client sends (`None`: probity picks one), which
    /// the response must carry.
    pub request_id: Option<String>,
    /// The upstream's status and headers (besides its content type).
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub framing: Framing,
    /// The upstream's body, served verbatim.
    pub body: Vec<u8>,
    /// Offsets where the upstream cuts its writes (a stream's).
    pub writes: Vec<usize>,
    /// Whether the upstream waits [`WRITE_PAUSE`] between writes.
    pub pause: bool,
    pub expect: E,
}

impl<E> Case<E> {
    pub fn content_type(&self) -> &'static str {
        self.framing.content_type()
    }

    /// The client's path: the route's prefix, then the endpoint.
    pub fn path(&self) -> String {
        format!("/{}{}", self.route, self.endpoint)
    }

    /// The body as the upstream writes it.
    pub fn parts(&self) -> Vec<Vec<u8>> {
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

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome {
    Pass,
    Normalized,
    Rejected,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Normalized => "normalized",
            Outcome::Rejected => "rejected",
        }
    }
}

/// What probity must make of a figure suite's case.
#[derive(Debug, Clone, PartialEq)]
pub struct Expect {
    pub outcome: Outcome,
    pub invariant: Option<String>,
    /// Normalized: the `probity-normalized` list and the capture's
    /// pointers. A rejected stream: the pointers of the events rewritten
    /// before the break (they count as malformed figures).
    pub pointers: Vec<String>,
    /// The exact client body (a rejected stream's ends with the error event
    /// template); `None` for a rejected whole response (a probity error).
    pub client: Option<Vec<u8>>,
    /// `probity_tokens_total` deltas by kind, every one of [`KINDS`] probed
    /// (absent: 0); `None`: not probed.
    pub tokens: Option<BTreeMap<String, u64>>,
    /// A broken stream: where its broken event ends in the upstream body.
    /// Probity stops reading there, so its capture holds at least this much.
    pub broken_end: Option<usize>,
    /// Why probity must pass the response on unchecked and count it so.
    pub uninspected: Option<String>,
    /// The listed pointers nulled because figures contradict each other,
    /// not as malformed (each once per listing).
    pub contradicted: Vec<String>,
    /// The relations breached, by name, once per breach (a stream's in
    /// each event): `probity_figure_contradictions_total`'s deltas.
    pub relations: Vec<String>,
}

impl Expect {
    /// What the capture list must say of the case (`None`: nothing).
    pub fn capture(&self) -> Option<Capture> {
        if self.outcome == Outcome::Pass {
            return None;
        }
        let mut members = vec![
            ("outcome", Value::from(self.outcome.name())),
            (
                "invariant",
                self.invariant.clone().map_or(Value::Null, Value::from),
            ),
        ];
        if self.outcome == Outcome::Normalized {
            members.push(("pointers", Value::from(self.pointers.clone())));
        }
        Some(Capture {
            members,
            least: self.broken_end,
        })
    }
}

/// A figure suite's case as its fixture says: `expect.json` holds
/// `"outcome"` (`pass`, `normalized` with `"pointers"`, `rejected` with
/// `"invariant"`), `"stream": true` for a streamed answer, optionally
/// `"uninspected"` (the reason probity counts), `"tokens"` (the
/// `probity_tokens_total` delta per kind), `"writes"` (offsets where the
/// upstream cuts its writes, [`WRITE_PAUSE`] apart), `"body"` (the exact
/// client body, else `expected.<ext>`) and `"relations"` (the relations
/// breached, which the suites' rule must find too).
pub fn figure_case(fixture: &Fixture) -> Case<Expect> {
    let id = fixture.id();
    let expect = &fixture.expect;
    let outcome = match expect["outcome"].as_str() {
        Some("pass") => Outcome::Pass,
        Some("normalized") => Outcome::Normalized,
        Some("rejected") => Outcome::Rejected,
        other => panic!("{id}: outcome {other:?}"),
    };
    assert_eq!(
        expect["stream"] == true,
        fixture.framing.streamed(),
        "{id}: \"stream\": true iff the response is response.sse, .ndjson or .events"
    );
    let client = match (&expect["body"], &fixture.expected) {
        (Value::String(body), _) => Some(body.clone().into_bytes()),
        (_, Some(expected)) => Some(expected.clone()),
        _ if outcome == Outcome::Pass => Some(fixture.body.clone()),
        _ if outcome == Outcome::Rejected && !fixture.framing.streamed() => None,
        _ => panic!("{id}: no expected.{}", fixture.framing.ext()),
    };
    let tokens = (!expect["tokens"].is_null()).then(|| {
        expect["tokens"]
            .as_object()
            .unwrap_or_else(|| panic!("{id}: tokens {}", expect["tokens"]))
            .iter()
            .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
            .collect()
    });
    let writes: Vec<usize> = expect["writes"]
        .as_array()
        .map(|a| a.iter().map(|w| w.as_u64().unwrap() as usize).collect())
        .unwrap_or_default();
    Case {
        pause: !writes.is_empty(),
        writes,
        ..fixture.case(Expect {
            outcome,
            invariant: expect["invariant"].as_str().map(str::to_owned),
            pointers: strings(&expect["pointers"]),
            client,
            tokens,
            broken_end: None,
            uninspected: expect["uninspected"].as_str().map(str::to_owned),
            contradicted: Vec::new(),
            relations: strings(&expect["relations"]),
        })
    }
}

/// An array of strings in `expect.json` (absent: none).
fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| a.iter().map(|p| p.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default()
}

/// The listed pointers that are malformed (or collapsed records), not
/// contradicted: what `probity_malformed_figures_total` counts from.
pub fn malformed_pointers(expect: &Expect) -> Vec<String> {
    let mut contradicted = expect.contradicted.clone();
    let mut out = Vec::new();
    for pointer in &expect.pointers {
        match contradicted.iter().position(|c| c == pointer) {
            Some(i) => {
                contradicted.remove(i);
            }
            None => out.push(pointer.clone()),
        }
    }
    out
}

// ---------------------------------------------------------------- the figure rule

/// What a figure must be to be well-formed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Domain {
    /// A non-negative integer written as one.
    Count,
    /// A non-negative finite number (Cohere's `meta` figures).
    Number,
    /// A non-empty string (a response id).
    Id,
    /// Not a figure: a record the provider's schema requires, which keeps
    /// its object (its malformed figures are nulled one by one).
    Required,
}

/// A figure table: each figure's pointer (a last segment `*` stands for
/// every member of that record, and is the metric label), its domain, and
/// the `probity_tokens_total` kind it counts as.
pub type Figures = &'static [(&'static str, Domain, Option<&'static str>)];

/// `None`: not reported (`null`); otherwise whether the value is well-formed.
pub fn well_formed(raw: &[u8], domain: Domain) -> Option<bool> {
    let value: Value = serde_json::from_slice(raw).ok()?;
    if value.is_null() {
        return None;
    }
    Some(match domain {
        Domain::Count => !raw.is_empty() && raw.iter().all(u8::is_ascii_digit),
        Domain::Number => value.as_f64().is_some_and(|n| n.is_finite()) && raw[0] != b'-',
        Domain::Id => value.as_str().is_some_and(|s| !s.is_empty()),
        Domain::Required => return None,
    })
}

/// The record holding a figure (`""`: the root, which never collapses).
pub fn record_of(pointer: &str) -> &str {
    &pointer[..pointer.rfind('/').unwrap_or(0)]
}

/// Whether `pointer` lies inside the record at `record`.
pub fn under(pointer: &str, record: &str) -> bool {
    pointer.len() > record.len()
        && pointer.starts_with(record)
        && pointer.as_bytes()[record.len()] == b'/'
}

/// The figure of `table` a concrete pointer is, as the metric labels it.
pub fn figure_of(table: Figures, pointer: &str) -> Option<&'static str> {
    table
        .iter()
        .filter(|(_, domain, _)| *domain != Domain::Required)
        .map(|(figure, _, _)| *figure)
        .find(|figure| match figure.strip_suffix("/*") {
            Some(record) => record_of(pointer) == record,
            None => *figure == pointer,
        })
}

/// One concrete figure found in a JSON text.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The concrete pointer, with the text's prefix.
    pub pointer: String,
    pub domain: Domain,
    pub kind: Option<&'static str>,
    pub span: Span,
}

/// The figures of `table` present in `text` (below `prefix`), in table
/// order; a wildcard stands for the members of its record in document order.
pub fn entries(text: &[u8], prefix: &str, table: Figures) -> Vec<Entry> {
    let mut out = Vec::new();
    for &(figure, domain, kind) in table.iter().filter(|f| f.1 != Domain::Required) {
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
pub struct Judged {
    /// Malformed and contradicted figures in table order, then the
    /// collapsed records.
    pub pointers: Vec<String>,
    /// The text with the malformed and contradicted bytes (or whole
    /// records) nulled.
    pub text: Vec<u8>,
    /// The spans of the text that are nulled.
    pub nulls: Vec<Range<usize>>,
    /// Sound token counts by kind (neither malformed nor contradicted).
    pub tokens: Vec<(&'static str, u64)>,
    /// The listed pointers that are nulled by a contradiction, not as
    /// malformed.
    pub contradicted: Vec<String>,
    /// The relations breached, by name.
    pub relations: Vec<&'static str>,
    /// The sound counts, for a stream's running totals: each one's
    /// pointer (with the text's prefix), value, span and token kind.
    pub sound: Vec<(String, u128, Range<usize>, Option<&'static str>)>,
}

/// The rule (the manual, docs/src/concepts/figures.md): a malformed figure is nulled
/// and listed; then every relation of `relations` that holds under
/// `convention` is judged on the figures as read alone (the manual,
/// docs/src/concepts/relations.md), and every sound figure a breached one names is
/// nulled and listed as a malformed one is (not counted as malformed); a
/// record (below the root) that lost figures and keeps no sound one is
/// nulled whole and listed after them; null and absent figures are not
/// reported; sound token figures count.
pub fn judge(
    text: &[u8],
    prefix: &str,
    table: Figures,
    relations: Relations,
    convention: Convention,
) -> Judged {
    let found = entries(text, prefix, table);
    let readings: Vec<Option<bool>> = found
        .iter()
        .map(|e| well_formed(&text[e.span.value.clone()], e.domain))
        .collect();
    let contradicted = contradictions(text, prefix, &found, &readings, relations, convention);
    let sound = |i: usize| readings[i] == Some(true) && !contradicted.1.contains(&i);
    let lost = |i: usize| readings[i] == Some(false) || contradicted.1.contains(&i);
    // The records, in table order; only those present as objects, and not
    // required by the provider's schema, collapse.
    let required = |record: &str| {
        table
            .iter()
            .any(|(f, d, _)| *d == Domain::Required && format!("{prefix}{f}") == record)
    };
    let mut records: Vec<String> = Vec::new();
    for (figure, domain, _) in table {
        let record = format!("{prefix}{}", record_of(figure));
        if *domain != Domain::Required
            && record != prefix
            && !records.contains(&record)
            && !required(&record)
        {
            records.push(record);
        }
    }
    let collapsed: Vec<String> = records
        .into_iter()
        .filter(|record| {
            let is_object = find(text, record).is_some_and(|s| text[s.value.start] == b'{');
            let inside = || (0..found.len()).filter(|i| under(&found[*i].pointer, record));
            is_object && inside().any(lost) && !inside().any(sound)
        })
        .collect();
    let nulled_whole = |pointer: &str| collapsed.iter().any(|r| under(pointer, r));
    let mut judged = Judged {
        relations: contradicted.0,
        ..Judged::default()
    };
    for record in &collapsed {
        if !nulled_whole(record) {
            judged.nulls.push(find(text, record).unwrap().value);
        }
    }
    for (i, entry) in found.iter().enumerate() {
        if lost(i) {
            judged.pointers.push(entry.pointer.clone());
            if readings[i] == Some(true) {
                judged.contradicted.push(entry.pointer.clone());
            }
            if !nulled_whole(&entry.pointer) {
                judged.nulls.push(entry.span.value.clone());
            }
        } else if sound(i) {
            let raw = std::str::from_utf8(&text[entry.span.value.clone()]).unwrap();
            // A number counts only when whole and within a `u64` (`1e3`
            // is 1000 tokens, `2.5` none), as a count always does.
            if let (Some(kind), Some(n)) = (entry.kind, whole_number(raw)) {
                judged.tokens.push((kind, n));
            }
            if entry.domain == Domain::Count {
                let value = raw.parse().unwrap();
                let span = entry.span.value.clone();
                judged
                    .sound
                    .push((entry.pointer.clone(), value, span, entry.kind));
            }
        }
    }
    judged.pointers.extend(collapsed);
    judged.text = nulled(text, &judged.nulls);
    judged
}

/// A sound figure's value as a token count: a whole number a `u64` holds
/// exactly.
fn whole_number(raw: &str) -> Option<u64> {
    raw.parse().ok().or_else(|| {
        let n: f64 = raw.parse().ok()?;
        (n >= 0.0 && n.fract() == 0.0 && n < u64::MAX as f64).then_some(n as u64)
    })
}

/// `text` with the spans nulled.
pub fn nulled(text: &[u8], nulls: &[Range<usize>]) -> Vec<u8> {
    let edits: Vec<(Range<usize>, &[u8])> =
        nulls.iter().map(|r| (r.clone(), &b"null"[..])).collect();
    splice(text, &edits)
}

// ---------------------------------------------------------------- relations

/// A route's `relations` convention: whose definitions its figures are
/// judged by.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Convention {
    /// The dialect's own (every route's default but `api.x.ai`'s).
    Provider,
    /// xAI's on the OpenAI wire: reasoning outside `completion_tokens`,
    /// inside `total_tokens`.
    Xai,
}

/// Under which conventions a relation holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Under {
    Both,
    Provider,
    Xai,
}

impl Under {
    fn holds(self, convention: Convention) -> bool {
        matches!(
            (self, convention),
            (Under::Both, _)
                | (Under::Provider, Convention::Provider)
                | (Under::Xai, Convention::Xai)
        )
    }
}

/// What a relation says, over figures named by their table pointers (a
/// member under a wildcard by its own pointer).
#[derive(Debug, Clone, Copy)]
pub enum Rule {
    /// `part ≤ whole`: both needed.
    AtMost(&'static str, &'static str),
    /// The parts there together ≤ the whole: the whole and one part
    /// needed, an absent part none.
    PartsAtMost(&'static [&'static str], &'static str),
    /// `total = Σ terms + Σ optional`: the total and every term needed,
    /// an absent optional term none.
    Sum(
        &'static str,
        &'static [&'static str],
        &'static [&'static str],
    ),
    /// `total ≥ Σ terms`: all needed.
    AtLeast(&'static str, &'static [&'static str]),
}

/// A dialect's relations, each with its name (the `relation` label of
/// `probity_figure_contradictions_total`) and the conventions it holds
/// under.
pub type Relations = &'static [(&'static str, Rule, Under)];

/// How a relation reads one figure.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Term {
    /// Not in the text: none of a sum.
    Absent,
    Count(u128),
    /// `null` or malformed: it cannot be judged.
    Unknown,
}

impl Rule {
    /// Every figure it names.
    fn pointers(&self) -> Vec<&'static str> {
        match *self {
            Rule::AtMost(part, whole) => vec![whole, part],
            Rule::PartsAtMost(parts, whole) => [&[whole][..], parts].concat(),
            Rule::Sum(total, terms, optional) => [&[total][..], terms, optional].concat(),
            Rule::AtLeast(total, terms) => [&[total][..], terms].concat(),
        }
    }

    /// `Some(true)` when the figures break it, `None` when it cannot be
    /// judged.
    fn breached(&self, term: impl Fn(&str) -> Term) -> Option<bool> {
        let count = |p: &str| match term(p) {
            Term::Count(n) => Some(n),
            _ => None,
        };
        let all = |ps: &[&str]| ps.iter().map(|p| count(p)).sum::<Option<u128>>();
        // An absent one none; `None` if one cannot be read.
        let present = |ps: &[&str]| {
            ps.iter()
                .map(|p| match term(p) {
                    Term::Count(n) => Some(n),
                    Term::Absent => Some(0),
                    Term::Unknown => None,
                })
                .sum::<Option<u128>>()
        };
        match *self {
            Rule::AtMost(part, whole) => Some(count(part)? > count(whole)?),
            Rule::PartsAtMost(parts, whole) => {
                let whole = count(whole)?;
                let sum = present(parts)?;
                parts
                    .iter()
                    .any(|p| count(p).is_some())
                    .then_some(sum > whole)
            }
            Rule::Sum(total, terms, optional) => {
                let total = count(total)?;
                Some(total != all(terms)? + present(optional)?)
            }
            Rule::AtLeast(total, terms) => Some(count(total)? < all(terms)?),
        }
    }
}

/// The relations breached among the figures `found` (read alone as
/// `readings`), by name, and the sound figures they name, all judged on
/// the readings before any is marked.
fn contradictions(
    text: &[u8],
    prefix: &str,
    found: &[Entry],
    readings: &[Option<bool>],
    relations: Relations,
    convention: Convention,
) -> (Vec<&'static str>, BTreeSet<usize>) {
    let at = |pointer: &str| {
        found
            .iter()
            .position(|e| e.pointer == format!("{prefix}{pointer}"))
    };
    let term = |pointer: &str| match at(pointer) {
        None => Term::Absent,
        Some(i) => match readings[i] {
            Some(true) => {
                let raw = std::str::from_utf8(&text[found[i].span.value.clone()]).unwrap();
                raw.parse().map_or(Term::Unknown, Term::Count)
            }
            _ => Term::Unknown,
        },
    };
    let mut breached = Vec::new();
    let mut marked = BTreeSet::new();
    for (name, rule, under) in relations {
        if !under.holds(convention) || rule.breached(term) != Some(true) {
            continue;
        }
        breached.push(*name);
        for pointer in rule.pointers() {
            if let Some(i) = at(pointer).filter(|i| readings[*i] == Some(true)) {
                marked.insert(i);
            }
        }
    }
    (breached, marked)
}

// ---------------------------------------------------------------- figure mutations

/// The malformed forms a figure's text is replaced with.
pub fn malformed_forms(domain: Domain, original: &str) -> Vec<String> {
    let forms: &[&str] = match domain {
        Domain::Count => &["\"abc\"", "-1", "8.5", "8.0", "1e3", "true", "{}", "[]"],
        Domain::Number => &["\"abc\"", "-1", "-8.5", "true", "{}", "[]"],
        Domain::Id => &["\"\"", "5", "true", "{}"],
        Domain::Required => &[],
    };
    let mut forms: Vec<String> = forms.iter().map(|f| f.to_string()).collect();
    if domain != Domain::Id {
        forms.insert(1, format!("\"{original}\""));
    }
    forms
}

/// Forms a [`Domain::Number`] figure may take and still be sound.
pub const TOLERATED_NUMBERS: [&str; 3] = ["8.0", "1e3", "2.5"];

/// One edit of a valid text's figures.
#[derive(Debug, Clone)]
pub struct Variant {
    /// What the variant's name says of it.
    pub what: String,
    /// Byte ranges of the text and what replaces them.
    pub edits: Vec<(Range<usize>, Vec<u8>)>,
    /// The pointers the rule must find malformed.
    pub malformed: Vec<String>,
}

impl Variant {
    /// `body` with the edits made to the text that starts at `offset` in it.
    pub fn apply(&self, body: &[u8], offset: usize) -> Vec<u8> {
        let edits: Vec<(Range<usize>, &[u8])> = self
            .edits
            .iter()
            .map(|(r, with)| (r.start + offset..r.end + offset, with.as_slice()))
            .collect();
        splice(body, &edits)
    }
}

/// Which variants a figure gets, with [`figure_variants`].
pub enum Battery<'a> {
    /// Every form, `null` and removal for every figure, and the
    /// whole-record variants for every record.
    Full,
    /// The full battery for the first occurrence of a figure (or record) in
    /// a scope (`seen` holds those met so far, as `"<scope> <pointer>"`);
    /// later ones one form each, in turn (`site` turns the choice), so that
    /// usage on every chunk does not multiply the run time.
    Once {
        seen: &'a mut BTreeSet<String>,
        scope: &'a str,
        site: usize,
    },
}

/// Variants of a text's sound figures (of `table`, below `prefix`): each
/// broken in every malformed form, nulled and removed, and whole records
/// (the root too, which never collapses) broken or nulled together.
pub fn figure_variants(
    text: &[u8],
    prefix: &str,
    table: Figures,
    mut battery: Battery<'_>,
) -> Vec<Variant> {
    let mut out = Vec::new();
    let mut push = |what: String, edits: &[(Range<usize>, &[u8])], malformed: &[&str]| {
        out.push(Variant {
            what,
            edits: edits.iter().map(|(r, w)| (r.clone(), w.to_vec())).collect(),
            malformed: malformed.iter().map(|p| p.to_string()).collect(),
        });
    };
    let present: Vec<Entry> = entries(text, prefix, table)
        .into_iter()
        .filter(|e| well_formed(&text[e.span.value.clone()], e.domain) == Some(true))
        .collect();
    for (f, entry) in present.iter().enumerate() {
        let value = entry.span.value.clone();
        let original = std::str::from_utf8(&text[value.clone()]).unwrap();
        let mut forms = malformed_forms(entry.domain, original);
        if let Battery::Once { seen, scope, site } = &mut battery {
            if !seen.insert(format!("{scope} {}", entry.pointer)) {
                let form = forms.swap_remove((*site + f) % forms.len());
                push(
                    format!("{} = {form}", entry.pointer),
                    &[(value.clone(), form.as_bytes())],
                    &[&entry.pointer],
                );
                continue;
            }
        }
        for form in forms {
            push(
                format!("{} = {form}", entry.pointer),
                &[(value.clone(), form.as_bytes())],
                &[&entry.pointer],
            );
        }
        if entry.domain == Domain::Number {
            for form in TOLERATED_NUMBERS {
                push(
                    format!("{} = {form}", entry.pointer),
                    &[(value.clone(), form.as_bytes())],
                    &[],
                );
            }
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
        if members.len() < 2 {
            continue;
        }
        if let Battery::Once { seen, scope, .. } = &mut battery {
            if !seen.insert(format!("{scope} record {record}")) {
                continue;
            }
        }
        let forms = ["\"abc\"", "-1", "true", "{}", "[]", "\"8\""];
        let all_bad: Vec<(Range<usize>, &[u8])> = members
            .iter()
            .zip(forms.iter().cycle())
            .map(|(e, form)| (e.span.value.clone(), form.as_bytes()))
            .collect();
        let names: Vec<&str> = members.iter().map(|e| e.pointer.as_str()).collect();
        let what = if record == prefix { "root" } else { record };
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
    out
}

// ---------------------------------------------------------------- streams

/// The events of a stream, as byte ranges: SSE events end at a blank line
/// (lines end in `\r\n`, `\n` or `\r`), NDJSON events at `\n`. A tail
/// without its end is a last range of its own.
pub fn split_events(framing: Framing, body: &[u8]) -> Vec<Range<usize>> {
    if framing == Framing::EventStream {
        return super::eventstream::split(body);
    }
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

// ---------------------------------------------------------------- the bench

/// What a suite makes of its cases, for the [`Bench`].
pub trait Suite {
    /// What the suite expects of a case.
    type Expect;

    /// The checks of the client's response: its status, headers and body.
    fn check(&self, case: &Case<Self::Expect>, got: &Got, id: &str, failed: &mut Vec<String>);

    /// What the capture list must say of the case (`None`: it captures
    /// nothing).
    fn capture(&self, case: &Case<Self::Expect>) -> Option<Capture>;

    /// The counters the case must move, and by how much.
    fn probes(&self, case: &Case<Self::Expect>) -> Vec<Probe>;
}

/// What the capture of a case must be.
#[derive(Debug, Clone)]
pub struct Capture {
    /// Members of its listing entry beside `route`, `upstream_status`,
    /// `body_bytes` and `body_captured`, which every capture has.
    pub members: Vec<(&'static str, Value)>,
    /// A broken stream is read no further than needed: its captured body is
    /// the upstream's first bytes, at least this many.
    pub least: Option<usize>,
}

/// What the fake upstream answers a case with.
#[derive(Clone)]
struct Served {
    status: u16,
    headers: Vec<(String, String)>,
    parts: Vec<Vec<u8>>,
    stream: bool,
    pause: bool,
}

impl Served {
    fn of<E>(case: &Case<E>) -> Self {
        let mut headers = vec![("content-type".to_string(), case.content_type().to_string())];
        headers.extend(case.headers.iter().cloned());
        Self {
            status: case.status,
            headers,
            parts: case.parts(),
            stream: case.framing.streamed(),
            pause: case.pause,
        }
    }

    /// A whole body with a Content-Length; a stream chunked, each part its
    /// own write.
    fn reply(self) -> Reply {
        let body = if self.stream {
            let pause = self.pause;
            ReplyBody::Parts(
                self.parts
                    .into_iter()
                    .enumerate()
                    .map(|(i, bytes)| match i {
                        0 => part(Before::Now, bytes),
                        _ if pause => part(Before::Pause(WRITE_PAUSE), bytes),
                        _ => part(Before::Now, bytes),
                    })
                    .collect(),
            )
        } else {
            ReplyBody::Whole(self.parts.concat())
        };
        Reply {
            status: self.status,
            headers: self.headers,
            body,
        }
    }
}

/// A `[[routes]]` table per dialect, named after it, at `/<dialect>`.
pub fn dialect_routes(dialects: &[&str], upstream: &str) -> String {
    dialects
        .iter()
        .map(|d| route(d, &format!("/{d}"), upstream, d, ""))
        .collect()
}

/// One probity in front of one upstream that answers each request with the
/// case its `x-fixture` header names; cases run one after another.
pub struct Bench<S: Suite> {
    suite: S,
    pub probity: Probity,
    _upstream: Upstream,
    served: Arc<Mutex<HashMap<String, Served>>>,
    client: Client<HttpConnector, Full<Bytes>>,
    /// The metrics after the last case: the next case's "before".
    metrics: String,
    /// The request id of the last capture, which the list must show second.
    last_capture: Option<String>,
    failures: Vec<String>,
    /// How many cases failed.
    failed: usize,
    ran: usize,
}

impl<S: Suite> Bench<S> {
    /// Starts the upstream, then probity on the configuration `config` makes
    /// of the upstream's URL.
    pub async fn start(suite: S, config: impl FnOnce(&str) -> String) -> Self {
        let served: Arc<Mutex<HashMap<String, Served>>> = Arc::default();
        let cases = served.clone();
        let upstream = Upstream::start(move |request| {
            let key = request.header("x-fixture").unwrap_or_default();
            match cases.lock().unwrap().get(key) {
                Some(served) => served.clone().reply(),
                None => Reply::json(500, format!("{{\"error\":\"no fixture {key:?}\"}}")),
            }
        })
        .await;
        let probity = Probity::start(&config(&upstream.url()));
        let mut bench = Self {
            suite,
            probity,
            _upstream: upstream,
            served,
            client: client(),
            metrics: String::new(),
            last_capture: None,
            failures: Vec::new(),
            failed: 0,
            ran: 0,
        };
        bench.metrics = bench.fetch_metrics().await;
        bench
    }

    /// `GET` of an admin endpoint, with the admin token.
    pub async fn get(&self, url: String) -> Result<Got, String> {
        let request = Request::get(url)
            .header("authorization", format!("Bearer {}", super::ADMIN_TOKEN))
            .body(Full::default())
            .unwrap();
        exchange(&self.client, request).await
    }

    pub async fn fetch_metrics(&self) -> String {
        match self.get(self.probity.admin_url("/metrics")).await {
            Ok(got) => got.text(),
            Err(err) => panic!("/metrics: {err}"),
        }
    }

    /// Sends a case through probity; returns the response to the client.
    pub async fn send(&self, case: &Case<S::Expect>) -> Result<Got, String> {
        self.served
            .lock()
            .unwrap()
            .insert(case.key.clone(), Served::of(case));
        let mut request = Request::post(self.probity.url(&case.path()))
            .header("content-type", "application/json")
            .header("x-fixture", &case.key);
        if let Some(id) = &case.request_id {
            request = request.header("x-request-id", id);
        }
        let request = request
            .body(Full::new(Bytes::from(case.request.clone())))
            .unwrap();
        exchange(&self.client, request).await
    }

    /// Runs the cases, then fails with every failure (or when none ran).
    pub async fn run_all(mut self, what: &str, cases: impl IntoIterator<Item = Case<S::Expect>>) {
        for case in cases {
            self.run(&case).await;
        }
        self.finish(what);
    }

    /// Sends a case and checks the response, the capture and the metrics;
    /// failures are kept under the case's name.
    pub async fn run(&mut self, case: &Case<S::Expect>) {
        self.ran += 1;
        let mut failed = Vec::new();
        match self.send(case).await {
            Err(err) => {
                failed.push(err);
                self.metrics = self.fetch_metrics().await;
            }
            Ok(got) => {
                let id = got.header("x-request-id").unwrap_or_default().to_string();
                match &case.request_id {
                    Some(want) if id != *want => {
                        failed.push(format!("x-request-id {id:?}, want {want:?}"))
                    }
                    _ if id.is_empty() => failed.push("no x-request-id on the response".into()),
                    _ => {}
                }
                self.suite.check(case, &got, &id, &mut failed);
                if !id.is_empty() {
                    self.check_capture(case, &id, &mut failed).await;
                }
                self.check_metrics(case, &mut failed).await;
            }
        }
        if !failed.is_empty() {
            self.failed += 1;
        }
        for failure in failed {
            self.failures.push(format!("{}: {failure}", case.name));
        }
    }

    /// The one capture check: a case that captures nothing has no capture;
    /// one that does has its verbatim upstream body and headers at
    /// `/captures/<id>`, and is the newest entry of `/captures`, once, with
    /// the members the suite names, the previous capture second.
    async fn check_capture(&mut self, case: &Case<S::Expect>, id: &str, failed: &mut Vec<String>) {
        let url = self.probity.admin_url(&format!("/captures/{id}"));
        let Some(want) = self.suite.capture(case) else {
            match self.get(url).await {
                Ok(got) if got.status == 404 => {}
                Ok(got) => failed.push(format!(
                    "a valid exchange was captured: GET /captures/{id} is {}",
                    got.status
                )),
                Err(err) => failed.push(format!("GET /captures/{id}: {err}")),
            }
            return;
        };
        // A stream is captured when it ends, which may be just after the
        // client has read its last byte.
        let patience = match case.framing.streamed() {
            true => Duration::from_millis(100),
            false => Duration::ZERO,
        };
        let deadline = Instant::now() + patience;
        let verbatim = loop {
            match self.get(url.clone()).await {
                Ok(got) if got.status != 200 && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                other => break other,
            }
        };
        let mut captured: &[u8] = &case.body;
        match &verbatim {
            Err(err) => failed.push(format!("GET /captures/{id}: {err}")),
            Ok(got) if got.status != 200 => failed.push(format!(
                "GET /captures/{id}: {} {}",
                got.status,
                short(&got.text())
            )),
            Ok(got) => {
                if let Some(least) = want.least {
                    if got.body.len() >= least && case.body.starts_with(&got.body) {
                        captured = &got.body;
                    }
                }
                if let Some(diff) = differ("the captured body", &got.body, captured) {
                    failed.push(diff);
                }
                let status = case.status.to_string();
                let mut headers = vec![
                    ("content-type".to_string(), case.content_type()),
                    (
                        "probity-upstream-content-type".to_string(),
                        case.content_type(),
                    ),
                    ("probity-upstream-status".to_string(), status.as_str()),
                ];
                for (name, value) in &case.headers {
                    headers.push((format!("probity-upstream-{name}"), value.as_str()));
                }
                for (name, want) in headers {
                    if got.header(&name) != Some(want) {
                        failed.push(format!(
                            "capture header {name}: {:?}, want {want:?}",
                            got.header(&name)
                        ));
                    }
                }
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
        let list: Value = match serde_json::from_slice(&list.body) {
            Ok(list) => list,
            Err(err) => {
                return failed.push(format!(
                    "GET /captures: not JSON ({err}): {}",
                    short(&list.text())
                ))
            }
        };
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
        let entries = captures.iter().filter(|c| c["request_id"] == id).count();
        if entries != 1 {
            failed.push(format!(
                "{entries} capture entries for this request, want 1"
            ));
        }
        let every = [
            ("route", Value::from(case.route.as_str())),
            ("upstream_status", Value::from(case.status)),
            ("body_bytes", Value::from(captured.len())),
            ("body_captured", Value::from(true)),
        ];
        for (member, value) in every.into_iter().chain(want.members) {
            if newest[member] != value {
                failed.push(format!(
                    "newest capture {member}: {}, want {value}",
                    newest[member]
                ));
            }
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

    /// Every probe moved by exactly its delta since the last case.
    async fn check_metrics(&mut self, case: &Case<S::Expect>, failed: &mut Vec<String>) {
        let probes = self.suite.probes(case);
        let before = std::mem::take(&mut self.metrics);
        let mut wrong = Vec::new();
        // A counter may move just after the response (a stream's are counted
        // when it ends): wait a little for one that lags, never for one that
        // moved too far.
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

    /// Fails with every failure collected, or when no case ran.
    pub fn finish(self, what: &str) {
        eprintln!("{what}: {} case(s), {} failed", self.ran, self.failed);
        assert!(self.ran > 0, "{what}: no case ran");
        assert!(
            self.failures.is_empty(),
            "{what}: {} of {} case(s) failed, {} failure(s):\n  - {}",
            self.failed,
            self.ran,
            self.failures.len(),
            self.failures.join("\n  - ")
        );
    }
}

// ---------------------------------------------------------------- response checks

pub fn check_status(got: &Got, want: u16, failed: &mut Vec<String>) {
    if got.status.as_u16() != want {
        failed.push(format!(
            "status {}, want {want}: {}",
            got.status,
            short(&got.text())
        ));
    }
}

pub fn check_content_type(got: &Got, want: &str, failed: &mut Vec<String>) {
    if got.header("content-type") != Some(want) {
        failed.push(format!(
            "content-type {:?}, want {want:?}",
            got.header("content-type")
        ));
    }
}

/// A Content-Length, when there is one, is the body's.
pub fn check_content_length(got: &Got, failed: &mut Vec<String>) {
    if let Some(length) = got.header("content-length") {
        if length != got.body.len().to_string() {
            failed.push(format!(
                "content-length {length} for {} bytes",
                got.body.len()
            ));
        }
    }
}

pub fn check_body(what: &str, got: &Got, want: &[u8], failed: &mut Vec<String>) {
    if let Some(diff) = differ(what, &got.body, want) {
        failed.push(diff);
    }
}

/// An answer probity let pass carries no `probity-*` header.
pub fn no_probity_headers(got: &Got, failed: &mut Vec<String>) {
    for name in got.headers.keys() {
        if name.as_str().starts_with("probity-") {
            failed.push(format!(
                "a valid response got {name}: {:?}",
                got.headers[name]
            ));
        }
    }
}

/// The upstream's headers reach the client, except those named in `removed`.
pub fn check_upstream_headers<E>(
    case: &Case<E>,
    got: &Got,
    removed: &[&str],
    failed: &mut Vec<String>,
) {
    for (name, value) in &case.headers {
        if !removed.contains(&name.as_str()) && got.header(name) != Some(value.as_str()) {
            failed.push(format!(
                "upstream header {name}: {:?}, want {value:?}",
                got.header(name)
            ));
        }
    }
}

/// The checks of a whole answer of a figure suite, by its outcome.
pub fn check_figures(case: &Case<Expect>, got: &Got, id: &str, failed: &mut Vec<String>) {
    match case.expect.outcome {
        Outcome::Pass => check_pass(case, got, failed),
        Outcome::Normalized => check_normalized(case, got, id, failed),
        Outcome::Rejected => check_rejected(case, got, id, failed),
    }
}

/// Passed as it came: status, headers and body.
pub fn check_pass(case: &Case<Expect>, got: &Got, failed: &mut Vec<String>) {
    check_status(got, case.status, failed);
    check_body("the body", got, &case.body, failed);
    no_probity_headers(got, failed);
    check_content_type(got, case.content_type(), failed);
    check_upstream_headers(case, got, &[], failed);
}

/// Its figures rewritten: the expected body, the list of what was nulled,
/// the capture's id; malformed header figures removed.
pub fn check_normalized(case: &Case<Expect>, got: &Got, id: &str, failed: &mut Vec<String>) {
    check_status(got, case.status, failed);
    let want = case.expect.client.as_deref().unwrap_or(&case.body);
    check_body("the body", got, want, failed);
    let list = case.expect.pointers.join(",");
    if got.header("probity-normalized") != Some(list.as_str()) {
        failed.push(format!(
            "probity-normalized: {:?}, want {list:?}",
            got.header("probity-normalized")
        ));
    }
    check_capture_header(got, id, failed);
    check_content_length(got, failed);
    let removed: Vec<&str> = case
        .expect
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
    check_content_type(got, case.content_type(), failed);
    check_upstream_headers(case, got, &removed, failed);
}

/// A 502 with probity's error in the dialect's envelope, the capture's id
/// and no `probity-normalized`.
pub fn check_rejected(case: &Case<Expect>, got: &Got, id: &str, failed: &mut Vec<String>) {
    check_status(got, 502, failed);
    check_content_type(got, "application/json", failed);
    check_capture_header(got, id, failed);
    if let Some(value) = got.header("probity-normalized") {
        failed.push(format!("a rejection got probity-normalized: {value:?}"));
    }
    // The fields are the same in every dialect's envelope.
    let json: Value = serde_json::from_slice(&got.body).unwrap_or_default();
    let error = &probity_error(&json).unwrap_or_default();
    if !error.is_object() {
        return failed.push(format!("no probity error in {}", short(&got.text())));
    }
    let want = [
        ("type", Value::from("provider_invalid_response")),
        ("code", Value::from(case.expect.invariant.clone())),
        ("route", Value::from(case.route.as_str())),
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
}

pub fn check_capture_header(got: &Got, id: &str, failed: &mut Vec<String>) {
    if got.header("probity-capture") != Some(id) {
        failed.push(format!(
            "probity-capture: {:?}, want the request id {id:?}",
            got.header("probity-capture")
        ));
    }
}

/// The counters a figure suite's case moves: malformed figures by route and
/// by figure (`labels`: the figure of each listed malformed pointer that
/// names one, see [`malformed_pointers`]), contradictions by route and
/// relation, rejections by route and invariant, uninspected answers by
/// route and reason, and tokens by kind when the case says.
pub fn figure_probes(case: &Case<Expect>, labels: &[String]) -> Vec<Probe> {
    let expect = &case.expect;
    let route = || ("route", case.route.clone());
    let count = |yes: bool| f64::from(u8::from(yes));
    let mut probes = vec![
        (MALFORMED, vec![route()], labels.len() as f64),
        (
            INVALID,
            vec![route()],
            count(expect.outcome == Outcome::Rejected),
        ),
        (
            UNINSPECTED,
            vec![route()],
            count(expect.uninspected.is_some()),
        ),
    ];
    let distinct: BTreeSet<&String> = labels.iter().collect();
    for label in distinct {
        let n = labels.iter().filter(|l| *l == label).count();
        probes.push((
            MALFORMED,
            vec![route(), ("figure", label.clone())],
            n as f64,
        ));
    }
    probes.push((CONTRADICTIONS, vec![route()], expect.relations.len() as f64));
    let relations: BTreeSet<&String> = expect.relations.iter().collect();
    for relation in relations {
        let n = expect.relations.iter().filter(|r| *r == relation).count();
        probes.push((
            CONTRADICTIONS,
            vec![route(), ("relation", relation.clone())],
            n as f64,
        ));
    }
    if let Some(invariant) = &expect.invariant {
        probes.push((
            INVALID,
            vec![route(), ("invariant", invariant.clone())],
            1.0,
        ));
    }
    if let Some(reason) = &expect.uninspected {
        probes.push((UNINSPECTED, vec![route(), ("reason", reason.clone())], 1.0));
    }
    if let Some(tokens) = &expect.tokens {
        for kind in KINDS {
            let n = tokens.get(kind).copied().unwrap_or(0);
            probes.push((TOKENS, vec![route(), ("kind", kind.to_string())], n as f64));
        }
    }
    probes
}
