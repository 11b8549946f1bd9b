//! Conformance over real sockets, driven by fixtures: every embedding and
//! rerank dialect against recorded upstream bodies, and the figure mutations
//! generated from every valid one.
//!
//! A case is a folder `tests/fixtures/<dialect>/<case>/` (not `gen_*`, which
//! are `tests/it/generation_conformance.rs`'s), read and run by the shared
//! runner, `tests/it/support/conformance.rs`: `endpoint`, `request.json` (not
//! JSON when the case says so), `response.json` served verbatim, optional
//! `response.headers`, `status` and `source.txt` (where the answer comes
//! from, for the reader), and `expect.json`: `{"outcome":"pass"}`,
//! `{"outcome":"rejected","invariant":..}` or
//! `{"outcome":"normalized","pointers":[..]}` with the exact client body in
//! `"body"` or in `expected.json`, optionally `"relations"` (those breached,
//! which the rule must find too); `"uninspected": "<reason>"` marks a case
//! probity must forward unchecked and count as such.
//!
//! What is this file's own: the figure tables (and relations) of each dialect's endpoints
//! (body figures, and the header figures of TEI and of Bedrock's
//! `invoke`), the rule's reading of header figures, the header mutations,
//! and the invariants each dialect's fixtures must break. One probity has a route per dialect, named after
//! it, at `/<dialect>`.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};

use crate::support::conformance::*;
use crate::support::fixtures::*;
use crate::support::*;
use serde_json::Value;

const DIALECTS: [&str; 10] = [
    "openai", "ollama", "cohere", "jina", "tei", "voyage", "gemini", "bedrock", "azure", "vertex",
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

// ---------------------------------------------------------------- figure tables

use Domain::{Count, Id, Number, Required};

const OPENAI: Figures = &[
    ("/usage", Required, None),
    ("/id", Id, None),
    ("/usage/prompt_tokens", Count, Some("input")),
    ("/usage/total_tokens", Count, Some("total")),
];
const OLLAMA: Figures = &[
    ("/prompt_eval_count", Count, None),
    ("/total_duration", Count, None),
    ("/load_duration", Count, None),
];
const COHERE_EMBED: Figures = &[
    ("/id", Id, None),
    ("/meta/billed_units/input_tokens", Number, None),
    ("/meta/billed_units/images", Number, None),
    ("/meta/billed_units/image_tokens", Number, None),
    ("/meta/tokens/input_tokens", Number, None),
    ("/meta/tokens/output_tokens", Number, None),
];
const COHERE_RERANK: Figures = &[
    ("/id", Id, None),
    ("/meta/billed_units/search_units", Number, None),
    ("/meta/tokens/input_tokens", Number, None),
    ("/meta/tokens/output_tokens", Number, None),
];
const JINA: Figures = &[
    ("/usage", Required, None),
    ("/usage/total_tokens", Count, None),
    ("/usage/prompt_tokens", Count, None),
];
const VOYAGE: Figures = &[
    ("/usage", Required, None),
    ("/usage/total_tokens", Count, None),
];
/// Gemini's embedding answers, when they carry `usageMetadata`.
const GEMINI: Figures = &[
    ("/usageMetadata/promptTokenCount", Count, None),
    ("/usageMetadata/totalTokenCount", Count, None),
];
/// Vertex's `:predict` on a text-embedding model.
const VERTEX_PREDICT: Figures = &[("/metadata/billableCharacterCount", Count, None)];
const TEI_HEADERS: &[&str] = &[
    "x-compute-tokens",
    "x-compute-characters",
    "x-compute-time",
    "x-total-time",
    "x-tokenization-time",
    "x-queue-time",
    "x-inference-time",
];

/// Bedrock's InvokeModel header figures, beside the model's own body.
const BEDROCK_HEADERS: &[&str] = &[
    "x-amzn-bedrock-input-token-count",
    "x-amzn-bedrock-output-token-count",
    "x-amzn-bedrock-invocation-latency",
];
/// `invoke` on Titan Text Embeddings v2.
const TITAN: Figures = &[("/inputTextTokenCount", Count, Some("input"))];
const TITAN_INVOKE: &str = "/model/amazon.titan-embed-text-v2%3A0/invoke";

/// OpenAI's embeddings `usage` (`types/create_embedding_response.py`): no
/// relation is stated and an embedding has no output, so the prompt is at
/// most the total (equal in OpenAI's own answers).
const OPENAI_RELATIONS: Relations = &[(
    "prompt_tokens<=total_tokens",
    Rule::AtMost("/usage/prompt_tokens", "/usage/total_tokens"),
    Under::Both,
)];

/// The figures probity judges on one endpoint, in table order.
#[derive(Clone, Copy)]
struct Table {
    body: Figures,
    /// What the body figures are defined to be against each other.
    relations: Relations,
    /// Header figures to mutate (TEI's native endpoints, Bedrock's invoke).
    headers: &'static [&'static str],
}

const fn body(body: Figures) -> Table {
    Table {
        body,
        relations: &[],
        headers: &[],
    }
}

const fn related(body: Figures, relations: Relations) -> Table {
    Table {
        body,
        relations,
        headers: &[],
    }
}

/// Every endpoint probity checks, with its table; any other passes
/// unchecked.
const TABLES: [(&str, &str, Table); 22] = [
    (
        "openai",
        "/v1/embeddings",
        related(OPENAI, OPENAI_RELATIONS),
    ),
    ("openai", "/v1/rerank", body(OPENAI)),
    // Checked as openai.
    (
        "azure",
        "/openai/deployments/text-embedding-3-small/embeddings",
        related(OPENAI, OPENAI_RELATIONS),
    ),
    ("ollama", "/api/embed", body(OLLAMA)),
    ("ollama", "/api/embeddings", body(&[])),
    // Checked as openai.
    (
        "ollama",
        "/v1/embeddings",
        related(OPENAI, OPENAI_RELATIONS),
    ),
    ("cohere", "/v1/embed", body(COHERE_EMBED)),
    ("cohere", "/v2/embed", body(COHERE_EMBED)),
    ("cohere", "/v1/rerank", body(COHERE_RERANK)),
    ("cohere", "/v2/rerank", body(COHERE_RERANK)),
    ("jina", "/v1/embeddings", body(JINA)),
    ("jina", "/v1/rerank", body(JINA)),
    (
        "tei",
        "/embed",
        Table {
            body: &[],
            relations: &[],
            headers: TEI_HEADERS,
        },
    ),
    (
        "tei",
        "/rerank",
        Table {
            body: &[],
            relations: &[],
            headers: TEI_HEADERS,
        },
    ),
    // Checked as openai.
    ("tei", "/v1/embeddings", body(OPENAI)),
    ("voyage", "/v1/embeddings", body(VOYAGE)),
    ("voyage", "/v1/rerank", body(VOYAGE)),
    (
        "gemini",
        "/v1beta/models/gemini-embedding-001:embedContent",
        body(GEMINI),
    ),
    (
        "gemini",
        "/v1beta/models/gemini-embedding-001:batchEmbedContents",
        body(GEMINI),
    ),
    (
        "vertex",
        "/v1/projects/my-project/locations/us-central1/publishers/google/models/text-embedding-005:predict",
        body(VERTEX_PREDICT),
    ),
    (
        "bedrock",
        TITAN_INVOKE,
        Table {
            body: TITAN,
            relations: &[],
            headers: BEDROCK_HEADERS,
        },
    ),
    // Cohere's v1 embed shapes.
    (
        "bedrock",
        "/model/cohere.embed-english-v3/invoke",
        Table {
            body: COHERE_EMBED,
            relations: &[],
            headers: BEDROCK_HEADERS,
        },
    ),
];

/// `None` for an endpoint probity does not check.
fn table(dialect: &str, endpoint: &str) -> Option<Table> {
    TABLES
        .iter()
        .find(|(d, e, _)| *d == dialect && *e == endpoint)
        .map(|(_, _, table)| *table)
}

fn table_for(dialect: &str, endpoint: &str) -> Table {
    table(dialect, endpoint).unwrap()
}

// ---------------------------------------------------------------- cases

type Case = support::conformance::Case<Expect>;

/// Whether probity judges this response at all: its syntax and figures are
/// judged even when its request is unreadable (`uninspected`: only the
/// payload checks that need the request are skipped).
fn inspected(case: &Case) -> bool {
    table(&case.dialect, &case.endpoint).is_some() && (200..300).contains(&case.status)
}

/// The metric labels of the listed malformed pointers that name a figure
/// (not a collapsed record, not a contradicted one): the pointer itself.
fn labels(case: &Case) -> Vec<String> {
    let body = table(&case.dialect, &case.endpoint).map_or(&[][..], |t| t.body);
    malformed_pointers(&case.expect)
        .into_iter()
        .filter(|p| p.starts_with("header:") || figure_of(body, p).is_some())
        .collect()
}

/// The tokens counted: well-formed token figures, never malformed ones (the
/// manual names the kinds, docs/src/operations/metrics.md: a prompt count is `input`); probed on openai's
/// inspected answers and on Titan's.
fn tokens(case: &Case) -> Option<BTreeMap<String, u64>> {
    let table = table(&case.dialect, &case.endpoint)?;
    let probed = case.dialect == "openai" || case.endpoint == TITAN_INVOKE;
    let counted = probed && inspected(case) && case.expect.outcome != Outcome::Rejected;
    counted.then(|| {
        judge(
            &case.body,
            "",
            table.body,
            table.relations,
            Convention::Provider,
        )
        .tokens
        .into_iter()
        .map(|(kind, n)| (kind.to_string(), n))
        .collect()
    })
}

fn case_of(fixture: &Fixture) -> Case {
    let mut case = figure_case(fixture);
    if case.expect.tokens.is_none() {
        case.expect.tokens = tokens(&case);
    }
    // What contradicts is the rule's (the offline check holds a stated
    // list of relations to it).
    if let Some(table) = table(&case.dialect, &case.endpoint).filter(|_| inspected(&case)) {
        let judged = judge_response(&case.body, &case.headers, table);
        case.expect.contradicted = judged.contradicted;
        if case.expect.relations.is_empty() {
            case.expect.relations = judged.relations;
        }
    }
    case
}

fn load(dialect: &str) -> Vec<Case> {
    load_fixtures(dialect, |name| !name.starts_with("gen_"))
        .iter()
        .map(case_of)
        .collect()
}

fn load_case(dialect: &str, name: &str) -> Case {
    case_of(&load_fixture(dialect, name).unwrap_or_else(|e| panic!("{dialect}/{name}: {e}")))
}

// ---------------------------------------------------------------- the rule

fn header_well_formed(value: &str) -> bool {
    !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit())
}

/// What the spec says probity makes of a response's figures.
struct Response {
    /// The `probity-normalized` list: body figures by [`judge`], then
    /// malformed header figures.
    pointers: Vec<String>,
    /// The body the client gets.
    body: Vec<u8>,
    /// The listed pointers nulled by a contradiction.
    contradicted: Vec<String>,
    /// The relations breached.
    relations: Vec<String>,
}

/// The oracle for generated mutations, and a cross-check of the
/// hand-written cases (every route on the provider's convention).
fn judge_response(body: &[u8], headers: &[(String, String)], table: Table) -> Response {
    let judged = judge(body, "", table.body, table.relations, Convention::Provider);
    let mut pointers = judged.pointers;
    for name in table.headers {
        if let Some((_, value)) = headers.iter().find(|(n, _)| n == name) {
            if !header_well_formed(value) {
                pointers.push(format!("header:{name}"));
            }
        }
    }
    Response {
        pointers,
        body: judged.text,
        contradicted: judged.contradicted,
        relations: judged.relations.iter().map(|r| r.to_string()).collect(),
    }
}

// ---------------------------------------------------------------- mutations

/// Variants of a valid case with its figures broken, nulled or removed (see
/// [`figure_variants`], every figure the full battery) and its header
/// figures broken; the expectation of each follows from the rule.
fn mutations(case: &Case) -> Vec<Case> {
    let Some(table) = table(&case.dialect, &case.endpoint) else {
        return Vec::new();
    };
    if case.expect.outcome != Outcome::Pass || !inspected(case) {
        return Vec::new();
    }
    let body = &case.body;
    let mut out = Vec::new();
    let mut push =
        |what: String, body: Vec<u8>, headers: Vec<(String, String)>, malformed: &[String]| {
            let judged = judge_response(&body, &headers, table);
            let pointers = judged.pointers;
            for pointer in malformed {
                assert!(
                    pointers.contains(pointer),
                    "{}: {what}: the rule must find {pointer} malformed",
                    case.name
                );
            }
            let mut variant = Case {
                name: format!("{} [{what}]", case.name),
                key: format!("{}#{}", case.key, out.len()),
                body,
                headers,
                ..case.clone()
            };
            variant.expect = Expect {
                outcome: if pointers.is_empty() {
                    Outcome::Pass
                } else {
                    Outcome::Normalized
                },
                pointers,
                client: Some(judged.body),
                contradicted: judged.contradicted,
                relations: judged.relations,
                ..case.expect.clone()
            };
            variant.expect.tokens = tokens(&variant);
            out.push(variant);
        };

    let headers = &case.headers;
    for variant in figure_variants(body, "", table.body, Battery::Full) {
        let mutated = variant.apply(body, 0);
        push(variant.what, mutated, headers.clone(), &variant.malformed);
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

// ---------------------------------------------------------------- the tests

/// Whole answers, checked by the shared rejection, normalized and pass
/// checks; the malformed figures counted by pointer.
struct Embeddings;

impl Suite for Embeddings {
    type Expect = Expect;

    fn check(&self, case: &Case, got: &Got, id: &str, failed: &mut Vec<String>) {
        check_figures(case, got, id, failed);
    }

    fn capture(&self, case: &Case) -> Option<Capture> {
        case.expect.capture()
    }

    fn probes(&self, case: &Case) -> Vec<Probe> {
        figure_probes(case, &labels(case))
    }
}

/// One probity with a route per dialect.
async fn bench() -> Bench<Embeddings> {
    Bench::start(Embeddings, |upstream| {
        config("", &dialect_routes(&DIALECTS, upstream))
    })
    .await
}

async fn run_fixtures(dialect: &str) {
    bench()
        .await
        .run_all(&format!("{dialect} fixtures"), load(dialect))
        .await;
}

async fn run_mutations(dialect: &str) {
    let variants = load(dialect).iter().flat_map(mutations).collect::<Vec<_>>();
    bench()
        .await
        .run_all(&format!("{dialect} figure mutations"), variants)
        .await;
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
async fn bedrock_fixtures() {
    run_fixtures("bedrock").await;
}

#[tokio::test]
async fn bedrock_figure_mutations() {
    run_mutations("bedrock").await;
}

#[tokio::test]
async fn vertex_fixtures() {
    run_fixtures("vertex").await;
}

#[tokio::test]
async fn vertex_figure_mutations() {
    run_mutations("vertex").await;
}

#[tokio::test]
async fn azure_fixtures() {
    run_fixtures("azure").await;
}

#[tokio::test]
async fn azure_figure_mutations() {
    run_mutations("azure").await;
}

#[tokio::test]
async fn captures_are_listed_newest_first_and_only_for_rewrites() {
    let bench = bench().await;
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
        if case.expect.outcome != Outcome::Pass {
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
    if dialect == "azure" {
        // Judged as openai's embeddings: one broken case is enough.
        return vec!["embedding_count_mismatch"];
    }
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
        "gemini" | "vertex" => all.push("embedding_item_invalid"),
        // Titan's and Cohere's (v1 shapes, base64 when asked) on invoke.
        "bedrock" => all.push("embedding_base64_invalid"),
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
            match &case.expect.uninspected {
                Some(reason) if reason == "request_not_json" && request_is_json => {
                    problems.push(format!("{name}: the request is JSON"))
                }
                None if !request_is_json => {
                    problems.push(format!("{name}: request.json is not JSON"))
                }
                _ => {}
            }
            let response_is_json = serde_json::from_slice::<Value>(&case.body).is_ok();
            let table = table(&case.dialect, &case.endpoint);
            match case.expect.outcome {
                Outcome::Rejected => {
                    let invariant = case.expect.invariant.as_deref().unwrap_or_default();
                    if !INVARIANTS.contains(&invariant) {
                        problems.push(format!("{name}: unknown invariant {invariant:?}"));
                    }
                    if (invariant == "invalid_json") == response_is_json {
                        problems.push(format!("{name}: invalid_json iff the body is not JSON"));
                    }
                    if !inspected(case) {
                        problems.push(format!("{name}: rejected but not inspected"));
                    }
                    broken.insert(invariant.to_string());
                }
                Outcome::Pass => {
                    if inspected(case) {
                        endpoints_with_pass.insert(case.endpoint.clone());
                        let pointers =
                            judge_response(&case.body, &case.headers, table.unwrap()).pointers;
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
                    let Some(expected) = &case.expect.client else {
                        problems.push(format!("{name}: no expected body"));
                        continue;
                    };
                    let Some(table) = table.filter(|_| inspected(case)) else {
                        problems.push(format!("{name}: normalized but not inspected"));
                        continue;
                    };
                    // The hand-written expectation must agree with the rule.
                    let Response {
                        pointers,
                        body,
                        relations,
                        ..
                    } = judge_response(&case.body, &case.headers, table);
                    if pointers != case.expect.pointers {
                        problems.push(format!(
                            "{name}: the rule gives {pointers:?}, the case says {:?}",
                            case.expect.pointers
                        ));
                    }
                    if relations != case.expect.relations {
                        problems.push(format!(
                            "{name}: the rule breaks {relations:?}, the case says {:?}",
                            case.expect.relations
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
            if case.expect.outcome != Outcome::Pass && !(200..300).contains(&case.status) {
                problems.push(format!("{name}: a non-2xx response is never checked"));
            }
            for variant in mutations(case) {
                if let Some(expected) = &variant.expect.client {
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
            .filter(|c| inspected(c))
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
                for pointer in labels(&variant) {
                    seen.insert(format!("{dialect}{} {pointer}", case.endpoint));
                }
            }
        }
    }
    let mut missing = Vec::new();
    // Figures these providers never send, so no valid case has them.
    let never_sent = [
        "ollama/v1/embeddings /id",
        "tei/v1/embeddings /id",
        // Azure's embeddings carry no id (OpenAI's do not either; vLLM's do).
        "azure/openai/deployments/text-embedding-3-small/embeddings /id",
        "cohere/v1/embed /meta/billed_units/images",
        "cohere/v1/embed /meta/billed_units/image_tokens",
        "cohere/v1/embed /meta/tokens/input_tokens",
        "cohere/v1/embed /meta/tokens/output_tokens",
        "cohere/v1/rerank /meta/tokens/input_tokens",
        "cohere/v1/rerank /meta/tokens/output_tokens",
        // Bedrock's Cohere answers carry no `meta`.
        "bedrock/model/cohere.embed-english-v3/invoke /meta/billed_units/input_tokens",
        "bedrock/model/cohere.embed-english-v3/invoke /meta/billed_units/images",
        "bedrock/model/cohere.embed-english-v3/invoke /meta/billed_units/image_tokens",
        "bedrock/model/cohere.embed-english-v3/invoke /meta/tokens/input_tokens",
        "bedrock/model/cohere.embed-english-v3/invoke /meta/tokens/output_tokens",
    ];
    for (dialect, endpoint, table) in TABLES {
        let pointers = table
            .body
            .iter()
            .filter(|(_, domain, _)| *domain != Required)
            .map(|(p, _, _)| p.to_string())
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

    // A repeated key: the first, or the last (as serde keeps it).
    let repeated = br#"{"a": {"b": 1}, "a": {"b": 2}, "c": 3}"#;
    assert_eq!(&repeated[find(repeated, "/a/b").unwrap().value], b"1");
    assert_eq!(&repeated[find_last(repeated, "/a/b").unwrap().value], b"2");
    assert_eq!(&repeated[find_last(repeated, "/c").unwrap().value], b"3");
    assert_eq!(find_last(repeated, "/d"), None);

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
    // OpenAI's embeddings `usage` is required: it keeps its object.
    let body = br#"{"id": "r", "usage": {"prompt_tokens": "8", "total_tokens": -8}}"#;
    let table = table("openai", "/v1/embeddings").unwrap();
    let Response {
        pointers,
        body: out,
        ..
    } = judge_response(body, &[], table);
    assert_eq!(pointers, ["/usage/prompt_tokens", "/usage/total_tokens"]);
    assert_eq!(
        out,
        br#"{"id": "r", "usage": {"prompt_tokens": null, "total_tokens": null}}"#
    );

    let body = br#"{"id": 5, "usage": {"prompt_tokens": 8.0, "total_tokens": 8}}"#;
    let Response {
        pointers,
        body: out,
        ..
    } = judge_response(body, &[], table);
    assert_eq!(pointers, ["/id", "/usage/prompt_tokens"]);
    assert_eq!(
        out,
        br#"{"id": null, "usage": {"prompt_tokens": null, "total_tokens": 8}}"#
    );

    let body = br#"{"usage": {"prompt_tokens": null, "total_tokens": true}}"#;
    assert_eq!(
        judge_response(body, &[], table).pointers,
        ["/usage/total_tokens"]
    );
    let body = br#"{"usage": {"prompt_tokens": null}}"#;
    assert!(judge_response(body, &[], table).pointers.is_empty());

    // A prompt above its total: both nulled, the required usage kept, the
    // relation named; equal is consistent, and a null decides nothing.
    let body = br#"{"id": "r", "usage": {"prompt_tokens": 9, "total_tokens": 8}}"#;
    let judged = judge_response(body, &[], table);
    assert_eq!(
        judged.pointers,
        ["/usage/prompt_tokens", "/usage/total_tokens"]
    );
    assert_eq!(judged.contradicted, judged.pointers);
    assert_eq!(judged.relations, ["prompt_tokens<=total_tokens"]);
    assert_eq!(
        judged.body,
        br#"{"id": "r", "usage": {"prompt_tokens": null, "total_tokens": null}}"#
    );
    for body in [
        &br#"{"usage": {"prompt_tokens": 8, "total_tokens": 8}}"#[..],
        br#"{"usage": {"prompt_tokens": 9, "total_tokens": null}}"#,
    ] {
        let judged = judge_response(body, &[], table);
        assert!(judged.pointers.is_empty() && judged.relations.is_empty());
    }

    let ollama = table_for("ollama", "/api/embed");
    let body = br#"{"embeddings":[[1]],"total_duration":"1","load_duration":-1}"#;
    let Response {
        pointers,
        body: out,
        ..
    } = judge_response(body, &[], ollama);
    assert_eq!(pointers, ["/total_duration", "/load_duration"]);
    assert_eq!(
        out,
        br#"{"embeddings":[[1]],"total_duration":null,"load_duration":null}"#
    );

    let cohere = table_for("cohere", "/v2/rerank");
    let body = br#"{"meta":{"billed_units":{"search_units":1e3},"tokens":{"input_tokens":"3"}}}"#;
    let Response {
        pointers,
        body: out,
        ..
    } = judge_response(body, &[], cohere);
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
    let Response {
        pointers,
        body: out,
        ..
    } = judge_response(b"[[1]]", &headers, tei);
    assert_eq!(pointers, ["header:x-compute-tokens", "header:x-queue-time"]);
    assert_eq!(out, b"[[1]]");
}

// ------------------------------------------------------ declared invariants

/// The folders of judged fixtures: a dialect's, or the tool and contract
/// suites' (their endpoint starts with the dialect's route prefix).
const JUDGED_FOLDERS: [&str; 13] = [
    "openai",
    "vertex",
    "azure",
    "ollama",
    "cohere",
    "jina",
    "tei",
    "voyage",
    "anthropic",
    "gemini",
    "bedrock",
    "tools",
    "contracts",
];

/// The invariants endpoints declare that no fixture breaks, each with
/// where it is broken instead: the reference says what the code holds, and
/// a new fixture that breaks one takes it off this list.
const UNFIXTURED: [(&str, &str); 2] = [
    (
        "invalid_encoding",
        "tests/it/compression.rs (the proxy decodes before judging)",
    ),
    (
        "chunk_dimension_mismatch",
        "tests/it/chunking.rs and batch::tests",
    ),
];

/// The dialect and the path (as sent upstream) of a fixture's endpoint.
fn dialect_and_path(fixture: &Fixture) -> (String, String) {
    if fixture.folder != "tools" && fixture.folder != "contracts" {
        return (fixture.folder.clone(), fixture.endpoint.clone());
    }
    let rest = fixture.endpoint.trim_start_matches('/');
    let (dialect, path) = rest.split_once('/').unwrap_or((rest, ""));
    (dialect.to_owned(), format!("/{path}"))
}

/// What `probity checks` prints as each endpoint's invariants is what its
/// fixtures break: every rejection a fixture expects (and the suites check
/// over sockets) names an invariant its endpoint declares, whole or
/// streamed as the fixture's answer is; and every invariant an endpoint
/// declares is broken by a fixture, but for [`UNFIXTURED`].
#[test]
fn every_rejection_is_an_invariant_its_endpoint_declares() {
    let mut undeclared = Vec::new();
    let mut broken: BTreeSet<String> = BTreeSet::new();
    for folder in JUDGED_FOLDERS {
        for fixture in load_fixtures(folder, |_| true) {
            let Some(invariant) = fixture.expect["invariant"].as_str() else {
                continue;
            };
            let (dialect, path) = dialect_and_path(&fixture);
            let endpoint =
                probity_judge::inspect::dialect(&dialect).and_then(|d| d.endpoint(&path));
            let Some(endpoint) = endpoint else {
                undeclared.push(format!("{}: no {dialect} endpoint at {path}", fixture.id()));
                continue;
            };
            let held = match fixture.framing.streamed() {
                true => endpoint.stream_invariants().unwrap_or_default(),
                false => endpoint.invariants(),
            };
            if !held.iter().any(|h| h.invariant == invariant) {
                let how = if fixture.framing.streamed() {
                    "its stream"
                } else {
                    "it"
                };
                undeclared.push(format!(
                    "{}: {invariant}, which {dialect} {path} does not declare {how} holds",
                    fixture.id()
                ));
            }
            broken.insert(invariant.to_owned());
        }
    }
    assert!(
        undeclared.is_empty(),
        "undeclared:\n  {}",
        undeclared.join("\n  ")
    );

    let declared: BTreeSet<String> = probity_judge::reference::checks()
        .invariants
        .into_iter()
        .filter(|i| !i.endpoints.is_empty())
        .map(|i| i.code.to_owned())
        .collect();
    let unbroken: BTreeSet<String> = declared.difference(&broken).cloned().collect();
    let listed: BTreeSet<String> = UNFIXTURED
        .iter()
        .map(|(code, _)| (*code).to_owned())
        .collect();
    assert_eq!(
        unbroken, listed,
        "the declared invariants no fixture breaks are not the ones UNFIXTURED lists"
    );
}
