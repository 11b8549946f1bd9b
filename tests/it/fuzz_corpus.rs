//! The fuzz targets' seed corpus, replayed as an ordinary test so that CI
//! runs it: every fixture under `tests/fixtures/` (and every shipped
//! configuration) becomes seeds for the targets it fits, each seed goes
//! through the same `probity_properties` entry point the fuzz target in
//! `fuzz/` calls, and every one must keep its property (`Ok`). The inputs
//! the fuzzer found that once broke a property are replayed the same way
//! (`FOUND`).
//!
//! `fuzz/seed` runs the ignored `write_seeds` test to write these same
//! seeds to `fuzz/corpus/<target>/`: one definition of the corpus.

use std::path::{Path, PathBuf};

use crate::support::eventstream;
use probity_properties::{self as fuzzing, pack};
use serde_json::Value;

type Target = fn(&[u8]) -> Result<(), String>;

const TARGETS: [(&str, Target); 7] = [
    ("embeddings", fuzzing::embeddings),
    ("rerank", fuzzing::rerank),
    ("chat", fuzzing::chat),
    ("stream", fuzzing::stream),
    ("contract", fuzzing::contract),
    ("stitch", fuzzing::stitch),
    ("config", fuzzing::config),
];

/// Inputs that once broke a property, minimized: `(target, what broke,
/// input)`.
const FOUND: &[(&str, &str, &[u8])] = &[
    // Found while writing the stream target's rewrite property (the
    // fuzzer had not hit it in its first 10 minutes): a nulled value
    // spread over several `data:` lines took every line between them with
    // it, here the `event:` line, so the event changed its name...
    (
        "stream",
        "a nulled span over data lines removed the event: line between them",
        b"openai /v1/chat/completions\xff{}\xffdata: {\"a\":[1,\nevent: x\ndata: 2]}\n\n",
    ),
    // ... and here the `id:` line, and with CR line ends.
    (
        "stream",
        "a nulled span over data lines removed the id: line between them",
        b"ollama /api/chat\xff{}\xffdata: {\"u\":{\"a\":1,\r: c\rid: 7\rdata: \"b\":2}}\r\r",
    ),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One fixture case: a folder with `endpoint`, `request.json` and a response.
struct Case {
    name: String,
    /// `<dialect> <path>`.
    header: String,
    request: Vec<u8>,
    /// `response.json`, `response.sse`, `response.ndjson` or
    /// `response.events` (encoded): (extension, bytes).
    response: Option<(String, Vec<u8>)>,
    route: Option<String>,
}

fn read(path: &Path) -> Option<Vec<u8>> {
    std::fs::read(path).ok()
}

fn sorted_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for group in sorted_dirs(&root().join("tests/fixtures")) {
        let group_name = group.file_name().unwrap().to_string_lossy().to_string();
        for dir in sorted_dirs(&group) {
            let endpoint = String::from_utf8(read(&dir.join("endpoint")).unwrap()).unwrap();
            let path = endpoint.trim().to_string();
            // A contract case's first segment names its dialect.
            let dialect = if group_name == "contracts" {
                path.trim_start_matches('/')
                    .split('/')
                    .next()
                    .unwrap()
                    .to_string()
            } else {
                group_name.clone()
            };
            let response = ["json", "sse", "ndjson"]
                .iter()
                .find_map(|ext| {
                    Some((ext.to_string(), read(&dir.join(format!("response.{ext}")))?))
                })
                .or_else(|| {
                    // An event stream, written as text one frame per line.
                    let text = read(&dir.join("response.events"))?;
                    let text = String::from_utf8(text).unwrap();
                    Some(("events".into(), eventstream::from_text(&text).unwrap()))
                });
            cases.push(Case {
                name: format!(
                    "{group_name}-{}",
                    dir.file_name().unwrap().to_string_lossy()
                ),
                header: format!("{dialect} {path}"),
                request: read(&dir.join("request.json")).unwrap(),
                response,
                route: read(&dir.join("route.toml")).map(|t| String::from_utf8(t).unwrap()),
            });
        }
    }
    assert!(cases.len() > 400, "only {} fixture cases", cases.len());
    cases
}

/// Cuts for the stream target: byte-sized pieces, then uneven ones.
const CUTS: [&[u8]; 2] = [&[0; 96], &[6, 13, 0, 40, 2, 255, 1, 17, 3, 90]];

fn stream_seeds(cases: &[Case], out: &mut Vec<Seed>) {
    for case in cases {
        let Some((ext, body)) = &case.response else {
            continue;
        };
        if ext == "json" {
            continue;
        }
        let base = [case.header.as_bytes(), &case.request, body];
        out.push(("stream", case.name.clone(), pack(&base)));
        for (i, cuts) in CUTS.iter().enumerate() {
            let input = pack(&[case.header.as_bytes(), &case.request, body, cuts]);
            out.push(("stream", format!("{}-cut{i}", case.name), input));
        }
    }
    // The loose streams, with a request asking for a stream.
    let chat = br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let loose = [
        ("openai /v1/chat/completions", "openai_chat_stream.sse"),
        ("anthropic /v1/messages", "anthropic_messages_stream.sse"),
        ("ollama /api/chat", "ollama_chat_stream.ndjson"),
    ];
    for (header, file) in loose {
        let body = read(&root().join("tests/fixtures").join(file)).unwrap();
        let input = pack(&[header.as_bytes(), chat, &body, CUTS[1]]);
        out.push(("stream", file.to_string(), input));
    }
}

/// The strings of a JSON value, depth first.
fn strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(members) => members.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

/// The answer text of a contract case's response: a document's longest
/// string or forced tool input; a stream's text deltas joined.
fn answer_of(ext: &str, body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    if ext == "json" {
        let Ok(value) = serde_json::from_str::<Value>(&text) else {
            return text.to_string();
        };
        let tool = value["content"].as_array().and_then(|blocks| {
            blocks
                .iter()
                .find_map(|b| b.get("input").map(Value::to_string))
        });
        let mut found = Vec::new();
        strings(&value, &mut found);
        return tool.unwrap_or_else(|| {
            found
                .into_iter()
                .max_by_key(String::len)
                .unwrap_or_default()
        });
    }
    let mut answer = String::new();
    for line in text.lines() {
        let data = line.strip_prefix("data:").unwrap_or(line).trim();
        let Ok(event) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        for pointer in [
            "/choices/0/delta/content",
            "/message/content",
            "/response",
            "/delta/text",
            "/delta/partial_json",
        ] {
            if let Some(piece) = event.pointer(pointer).and_then(Value::as_str) {
                answer.push_str(piece);
            }
        }
    }
    answer
}

fn contract_seeds(cases: &[Case], out: &mut Vec<Seed>) {
    for case in cases.iter().filter(|c| c.name.starts_with("contracts-")) {
        let Some((ext, body)) = &case.response else {
            continue;
        };
        let answer = answer_of(ext, body);
        let route = case.route.clone().unwrap_or_default();
        for flags in [0u8, 3] {
            let input = pack(&[
                case.header.as_bytes(),
                &case.request,
                route.as_bytes(),
                answer.as_bytes(),
                &[flags],
            ]);
            out.push(("contract", format!("{}-{flags}", case.name), input));
        }
    }
}

/// The request's inputs: its first top-level array of two or more.
fn input_count(request: &Value) -> Option<usize> {
    ["input", "inputs", "texts", "requests", "documents"]
        .iter()
        .find_map(|k| request.get(k)?.as_array().map(Vec::len))
        .filter(|n| *n >= 2)
}

/// Items `range` of every list of `n` in an answer (the root, a member, or
/// a member of an object of lists), each item's `index` renumbered.
fn slice_lists(value: &Value, n: usize, range: std::ops::Range<usize>) -> Value {
    match value {
        Value::Array(items) if items.len() == n => Value::Array(
            items[range.clone()]
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    let mut item = item.clone();
                    if let Some(index) = item.get_mut("index").filter(|v| v.is_u64()) {
                        *index = Value::from(i);
                    }
                    item
                })
                .collect(),
        ),
        Value::Object(members) => Value::Object(
            members
                .iter()
                .map(|(k, v)| (k.clone(), slice_lists(v, n, range.clone())))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Stitch seeds: each passing embeddings case with several inputs, its
/// answer cut into the answers of chunks of one and of two inputs.
fn stitch_seeds(cases: &[Case], out: &mut Vec<Seed>) {
    for case in cases {
        let Some((ext, body)) = &case.response else {
            continue;
        };
        if ext != "json" || fuzzing::inspector(&case.header) != Some("embeddings") {
            continue;
        }
        let (Ok(request), Ok(answer)) = (
            serde_json::from_slice::<Value>(&case.request),
            serde_json::from_slice::<Value>(body),
        ) else {
            continue;
        };
        let Some(n) = input_count(&request) else {
            continue;
        };
        for max in [1, 2] {
            let header = format!("{} {max}", case.header);
            let chunks: Vec<String> = (0..n)
                .step_by(max)
                .map(|start| slice_lists(&answer, n, start..(start + max).min(n)).to_string())
                .collect();
            let mut parts: Vec<&[u8]> = vec![header.as_bytes(), &case.request];
            parts.extend(chunks.iter().map(String::as_bytes));
            out.push(("stitch", format!("{}-{max}", case.name), pack(&parts)));
        }
    }
}

fn config_seeds(cases: &[Case], out: &mut Vec<Seed>) {
    for file in [
        "config/probity.toml",
        "config/examples/grounded-answer.toml",
        "deploy/compose/probity.toml",
        "deploy/container/probity.toml",
    ] {
        out.push((
            "config",
            file.replace('/', "-"),
            read(&root().join(file)).unwrap(),
        ));
    }
    for case in cases {
        if let Some(route) = &case.route {
            let dialect = case.header.split(' ').next().unwrap();
            let text = format!(
                "[server]\nlisten = \"127.0.0.1:0\"\n\n[[routes]]\nname = \"c\"\nprefix = \"/c\"\n\
                 upstream = \"http://127.0.0.1:9\"\ndialect = \"{dialect}\"\n{route}\n"
            );
            out.push(("config", case.name.clone(), text.into_bytes()));
        }
    }
}

/// `(target, name, input)`.
type Seed = (&'static str, String, Vec<u8>);

fn seeds() -> Vec<Seed> {
    let cases = cases();
    let mut out = Vec::new();
    for case in &cases {
        if let Some((ext, body)) = &case.response {
            if let (Some(target), "json") = (fuzzing::inspector(&case.header), ext.as_str()) {
                let input = pack(&[case.header.as_bytes(), &case.request, body]);
                out.push((target, case.name.clone(), input));
            }
        }
    }
    stream_seeds(&cases, &mut out);
    contract_seeds(&cases, &mut out);
    stitch_seeds(&cases, &mut out);
    config_seeds(&cases, &mut out);
    out
}

fn replay(target: &str, minimum: usize) {
    let run = TARGETS.iter().find(|(t, _)| *t == target).unwrap().1;
    let seeds: Vec<Seed> = seeds().into_iter().filter(|s| s.0 == target).collect();
    assert!(
        seeds.len() >= minimum,
        "{target}: only {} seeds",
        seeds.len()
    );
    let broken: Vec<String> = seeds
        .iter()
        .filter_map(|(_, name, input)| run(input).err().map(|e| format!("{name}: {e}")))
        .collect();
    assert!(broken.is_empty(), "{target}: {broken:#?}");
}

#[test]
fn embeddings_seeds_keep_their_property() {
    replay("embeddings", 100);
}

#[test]
fn rerank_seeds_keep_their_property() {
    replay("rerank", 50);
}

#[test]
fn chat_seeds_keep_their_property() {
    replay("chat", 150);
}

#[test]
fn stream_seeds_keep_their_property() {
    replay("stream", 150);
}

#[test]
fn contract_seeds_keep_their_property() {
    replay("contract", 150);
}

#[test]
fn stitch_seeds_keep_their_property() {
    replay("stitch", 20);
}

#[test]
fn config_seeds_keep_their_property() {
    replay("config", 20);
}

#[test]
fn what_the_fuzzer_found_stays_fixed() {
    for (target, what, input) in FOUND {
        let run = TARGETS.iter().find(|(t, _)| t == target).unwrap().1;
        assert_eq!(run(input), Ok(()), "{target}: {what}");
    }
}

/// Writes the seeds to `$PROBITY_FUZZ_CORPUS/<target>/<name>` (`fuzz/seed`).
#[test]
#[ignore = "run by fuzz/seed"]
fn write_seeds() {
    let dir = PathBuf::from(std::env::var("PROBITY_FUZZ_CORPUS").unwrap());
    for (target, name, input) in seeds() {
        let target_dir = dir.join(target);
        std::fs::create_dir_all(&target_dir).unwrap();
        std::fs::write(target_dir.join(name), input).unwrap();
    }
}
