//! The reference of what the judging core checks, written from its own
//! tables: every dialect's endpoints, the payload invariants each holds,
//! its figures, kept records, relations and output contract. `probity
//! checks` prints it as Markdown ([`markdown`], [`index`]) and as JSON
//! ([`json`]); the manual's reference pages are that output, checked in,
//! so what the docs say is checked is what the code checks.
//!
//! Nothing here is a list of its own: each row is read from a table in
//! `inspect` (the endpoints, their [`HeldInvariant`]s), `figures` (the
//! figure and relation tables) or `contract` (the reasons).

use std::fmt::Write as _;

use serde::Serialize;

use crate::contract::Reason;
use crate::figures::{Convention, Domain, Figure, Relation, Rule};
use crate::inspect::{self, stream::Framing, Dialect, Endpoint, Envelope, HeldInvariant};
use crate::json::Kind;
use crate::violation::Invariant;

/// Every dialect's checks, the invariant codes and the contract reasons.
#[derive(Debug, Serialize)]
pub struct Checks {
    /// Each dialect, in the dialect table's order.
    pub dialects: Vec<DialectChecks>,
    /// Every payload invariant code, with the endpoints that hold it.
    pub invariants: Vec<InvariantEntry>,
    /// Every output-contract reason ([`Reason::ALL`]): any endpoint with an
    /// output contract may give each.
    pub contract_reasons: Vec<&'static str>,
    /// Every convention a route's `relations` may name.
    pub conventions: Vec<&'static str>,
}

/// One dialect: how it takes a credential, its error shape, its endpoints.
#[derive(Debug, Serialize)]
pub struct DialectChecks {
    /// The name a route's `dialect` takes.
    pub name: &'static str,
    /// The provider, as OpenTelemetry names it.
    pub provider: &'static str,
    /// Where it takes a key.
    pub credential: CredentialEntry,
    /// The shape of its error bodies, which probity's errors take.
    pub error_envelope: String,
    /// The conventions a route of this dialect may count figures by.
    pub conventions: Vec<&'static str>,
    /// Every endpoint it judges.
    pub endpoints: Vec<EndpointChecks>,
    /// The Realtime sessions it tunnels, when it does.
    pub realtime: Option<RealtimeChecks>,
}

/// A dialect's credential header.
#[derive(Debug, Serialize)]
pub struct CredentialEntry {
    /// The header that carries the key.
    pub header: &'static str,
    /// The text before the key.
    pub prefix: &'static str,
    /// Other headers a client may carry a key in.
    pub also: Vec<&'static str>,
    /// The query parameter a client may carry a key in.
    pub query: Option<&'static str>,
    /// Headers set beside the key when the client sent none.
    pub defaults: Vec<(&'static str, &'static str)>,
}

/// One endpoint and what judging it checks.
#[derive(Debug, Serialize)]
pub struct EndpointChecks {
    /// How a path reaches it: `…/chat/completions`, `…:generateContent`,
    /// `…/model/{modelId}/converse`, an `invoke` of a model family.
    pub path: String,
    /// What its key in the dialect's table is (`suffix`, `method`,
    /// `operation`, `family`, `unlisted`).
    pub matched_by: &'static str,
    /// The HTTP methods judged.
    pub methods: Vec<&'static str>,
    /// OpenTelemetry's `gen_ai.operation.name`.
    pub operation: &'static str,
    /// Whether the request carries a body.
    pub request_body: bool,
    /// The request fields judging reads.
    pub request_fields: Vec<FieldRead>,
    /// What a whole answer is held to.
    pub invariants: Vec<InvariantRule>,
    /// How a streamed answer is judged, when the endpoint streams.
    pub stream: Option<StreamChecks>,
    /// The ancillary figures in the body.
    pub figures: Vec<FigureRow>,
    /// The records holding figures, and what a record of only malformed
    /// figures becomes.
    pub records: Vec<RecordEntry>,
    /// The figures sent as response headers.
    pub header_figures: Vec<FigureRow>,
    /// What the provider defines between the figures.
    pub relations: Vec<RelationEntry>,
    /// The output contract's `task` label, when one applies.
    pub output_task: Option<&'static str>,
    /// The request members a large batch is split by, when it may be.
    pub batch_inputs: Option<Vec<&'static str>>,
}

/// A request field judging reads.
#[derive(Debug, Serialize)]
pub struct FieldRead {
    /// Its name.
    pub name: &'static str,
    /// The JSON kinds it may be.
    pub kinds: Vec<&'static str>,
    /// Whether the provider requires it (else `null` stands for absent).
    pub required: bool,
}

/// An invariant an endpoint holds, and its rule there.
#[derive(Debug, Serialize)]
pub struct InvariantRule {
    /// Its code.
    pub code: &'static str,
    /// The rule, as a user reads it.
    pub rule: &'static str,
}

/// How a streamed answer is judged.
#[derive(Debug, Serialize)]
pub struct StreamChecks {
    /// Its framing: `sse`, `ndjson` or `aws_event_stream`.
    pub framing: &'static str,
    /// Whether probity may add SSE comment lines to it.
    pub comments: bool,
    /// What its events are held to.
    pub invariants: Vec<InvariantRule>,
}

/// One ancillary figure.
#[derive(Debug, Serialize)]
pub struct FigureRow {
    /// Its JSON pointer (a last `*`: every member of that record), or
    /// `header:<name>`.
    pub pointer: &'static str,
    /// `count`, `number`, `id` or `required` (a record kept as an object).
    pub domain: &'static str,
    /// The `kind` it is counted as on `probity_tokens_total`.
    pub tokens: Option<&'static str>,
    /// Whether a stream restates it as a running total.
    pub running: bool,
}

/// A record that holds figures.
#[derive(Debug, Serialize)]
pub struct RecordEntry {
    /// Its JSON pointer.
    pub pointer: &'static str,
    /// Whether it keeps its object when all its figures are malformed
    /// (the provider's schema requires it); else it becomes `null` whole.
    pub kept: bool,
}

/// A relation between figures.
#[derive(Debug, Serialize)]
pub struct RelationEntry {
    /// Its name: the `relation` label.
    pub name: &'static str,
    /// The rule, in words.
    pub rule: String,
    /// The conventions of the dialect it holds under.
    pub conventions: Vec<&'static str>,
}

/// A dialect's Realtime sessions: figures judged in `response.done`.
#[derive(Debug, Serialize)]
pub struct RealtimeChecks {
    /// The path a WebSocket upgrade is tunnelled at.
    pub path: &'static str,
    /// The figures of each `response.done` event.
    pub figures: Vec<FigureRow>,
    /// What the provider defines between them.
    pub relations: Vec<RelationEntry>,
}

/// An invariant code and where it is held.
#[derive(Debug, Serialize)]
pub struct InvariantEntry {
    /// Its code.
    pub code: &'static str,
    /// What breaking it means, in general.
    pub meaning: &'static str,
    /// `dialect path` of every endpoint that holds it (whole or streamed).
    pub endpoints: Vec<String>,
}

/// The whole reference, from the tables.
pub fn checks() -> Checks {
    let dialects: Vec<DialectChecks> = inspect::DIALECTS.iter().map(|d| dialect(*d)).collect();
    let invariants = Invariant::ALL
        .iter()
        .map(|invariant| InvariantEntry {
            code: invariant.as_str(),
            meaning: invariant.meaning(),
            endpoints: holding(&dialects, invariant.as_str()),
        })
        .collect();
    Checks {
        dialects,
        invariants,
        contract_reasons: Reason::ALL.iter().map(|r| r.as_str()).collect(),
        conventions: Convention::NAMES.to_vec(),
    }
}

/// The endpoints, across dialects, that hold `code`.
fn holding(dialects: &[DialectChecks], code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for dialect in dialects {
        for endpoint in &dialect.endpoints {
            let streamed = endpoint.stream.iter().flat_map(|s| &s.invariants);
            if endpoint
                .invariants
                .iter()
                .chain(streamed)
                .any(|i| i.code == code)
            {
                found.push(format!("{} {}", dialect.name, endpoint.path));
            }
        }
    }
    found
}

/// The reference as JSON.
pub fn json() -> serde_json::Value {
    serde_json::to_value(checks()).unwrap_or_default()
}

/// One dialect's part of [`json`]; `None`: no such dialect.
pub fn dialect_json(name: &str) -> Option<serde_json::Value> {
    let found = checks().dialects.into_iter().find(|d| d.name == name)?;
    serde_json::to_value(found).ok()
}

fn dialect(dialect: &dyn Dialect) -> DialectChecks {
    let credential = dialect.credential();
    let conventions = dialect.conventions();
    let mut endpoints = Vec::new();
    let matched_by = match dialect.name() {
        "gemini" => "method",
        "bedrock" => "operation",
        // `…/publishers/{publisher}/models/{model}:{method}`, any project
        // and location before it.
        "vertex" => "publisher and method",
        _ => "suffix",
    };
    for (key, endpoint) in dialect.endpoints() {
        let path = match matched_by {
            "method" => format!("…:{key}"),
            "operation" => format!("…/model/{{modelId}}/{key}"),
            _ => format!("…{key}"),
        };
        endpoints.push(endpoint_checks(
            endpoint,
            path,
            matched_by,
            &["POST"],
            conventions,
        ));
    }
    for family in dialect.families() {
        if let Some(endpoint) = dialect.family(family) {
            let path = format!("…/model/{{modelId}}/invoke ({family})");
            endpoints.push(endpoint_checks(
                endpoint,
                path,
                "family",
                &["POST"],
                conventions,
            ));
        }
        if let Some(endpoint) = dialect.family_stream(family) {
            let path = format!("…/model/{{modelId}}/invoke-with-response-stream ({family})");
            endpoints.push(endpoint_checks(
                endpoint,
                path,
                "family",
                &["POST"],
                conventions,
            ));
        }
    }
    for endpoint in dialect.unlisted() {
        for (method, path) in inspect::unlisted_paths(endpoint) {
            let path = (*path).to_owned();
            endpoints.push(endpoint_checks(
                endpoint,
                path,
                "unlisted",
                &[method],
                conventions,
            ));
        }
    }
    DialectChecks {
        name: dialect.name(),
        provider: dialect.provider(),
        credential: CredentialEntry {
            header: credential.header,
            prefix: credential.prefix,
            also: credential.also.to_vec(),
            query: credential.query,
            defaults: credential.defaults.to_vec(),
        },
        error_envelope: envelope(dialect.error_envelope()),
        conventions: conventions.iter().map(|c| c.name()).collect(),
        endpoints,
        realtime: dialect.realtime("/realtime").then(|| RealtimeChecks {
            path: "…/realtime",
            figures: inspect::realtime::FIGURES.iter().map(figure).collect(),
            relations: relations(inspect::realtime::RELATIONS, conventions),
        }),
    }
}

fn endpoint_checks(
    endpoint: &Endpoint,
    path: String,
    matched_by: &'static str,
    methods: &[&'static str],
    conventions: &[Convention],
) -> EndpointChecks {
    let rules = |held: Vec<HeldInvariant>| -> Vec<InvariantRule> {
        held.iter()
            .map(|h| InvariantRule {
                code: h.invariant.as_str(),
                rule: h.rule,
            })
            .collect()
    };
    let stream = endpoint.stream.as_ref().map(|spec| StreamChecks {
        framing: match spec.framing {
            Framing::Sse => "sse",
            Framing::Ndjson => "ndjson",
            Framing::EventStream => "aws_event_stream",
        },
        comments: spec.comments && spec.framing == Framing::Sse,
        invariants: rules(endpoint.stream_invariants().unwrap_or_default()),
    });
    EndpointChecks {
        path,
        matched_by,
        methods: methods.to_vec(),
        operation: endpoint.operation,
        request_body: endpoint.request.body,
        request_fields: endpoint
            .request
            .fields
            .iter()
            .map(|f| FieldRead {
                name: f.name,
                kinds: f.kinds.iter().map(|k| kind(*k)).collect(),
                required: !f.null,
            })
            .collect(),
        invariants: rules(endpoint.invariants()),
        stream,
        figures: endpoint.figures.iter().map(figure).collect(),
        records: records(endpoint.figures),
        header_figures: endpoint
            .header_figures
            .iter()
            .map(|h| FigureRow {
                pointer: h.label,
                domain: "count",
                tokens: h.tokens,
                running: false,
            })
            .collect(),
        relations: relations(endpoint.relations, conventions),
        output_task: endpoint.output.as_ref().map(|o| o.task),
        batch_inputs: endpoint.batch.as_ref().map(|b| b.inputs.to_vec()),
    }
}

fn figure(figure: &Figure) -> FigureRow {
    FigureRow {
        pointer: figure.pointer,
        domain: match figure.domain {
            Domain::Count => "count",
            Domain::Number => "number",
            Domain::Id => "id",
            Domain::Required => "required",
        },
        tokens: figure.tokens,
        running: figure.running,
    }
}

/// Each record a figure sits in (the root aside), in table order: kept
/// when the table marks it [`Domain::Required`].
fn records(figures: &[Figure]) -> Vec<RecordEntry> {
    let mut records: Vec<RecordEntry> = Vec::new();
    let kept = |pointer: &str| {
        figures
            .iter()
            .any(|f| f.domain == Domain::Required && f.pointer == pointer)
    };
    for figure in figures {
        let pointer = match figure.domain {
            Domain::Required => figure.pointer,
            _ => figure.record(),
        };
        if !pointer.is_empty() && !records.iter().any(|r| r.pointer == pointer) {
            records.push(RecordEntry {
                pointer,
                kept: kept(pointer),
            });
        }
    }
    records
}

fn relations(relations: &[Relation], conventions: &[Convention]) -> Vec<RelationEntry> {
    relations
        .iter()
        .map(|relation| RelationEntry {
            name: relation.name,
            rule: rule(relation.rule),
            conventions: conventions
                .iter()
                .filter(|c| relation.holds(**c))
                .map(|c| c.name())
                .collect(),
        })
        .collect()
}

/// A relation's rule in words, over its pointers.
fn rule(rule: Rule) -> String {
    let sum = |terms: &[&str]| {
        terms
            .iter()
            .map(|t| format!("`{t}`"))
            .collect::<Vec<_>>()
            .join(" + ")
    };
    match rule {
        Rule::AtMost { part, whole } => format!("`{part}` ≤ `{whole}`"),
        Rule::PartsAtMost { parts, whole } => format!("{} ≤ `{whole}`", sum(parts)),
        Rule::Sum {
            total,
            terms,
            optional,
        } => match optional.is_empty() {
            true => format!("`{total}` = {}", sum(terms)),
            false => format!(
                "`{total}` = {} (+ {}, absent counts 0)",
                sum(terms),
                sum(optional)
            ),
        },
        Rule::AtLeast { total, terms } => format!("`{total}` ≥ {}", sum(terms)),
    }
}

fn kind(kind: Kind) -> &'static str {
    match kind {
        Kind::Object => "object",
        Kind::Array => "array",
        Kind::String => "string",
        Kind::Number => "number",
        Kind::Bool => "boolean",
        Kind::Null => "null",
    }
}

fn envelope(envelope: Envelope) -> String {
    match envelope {
        Envelope::Nested => r#"OpenAI's: `{"error": {"message", "type", "param", "code"}}`"#.into(),
        Envelope::Typed => {
            r#"Anthropic's: `{"type": "error", "error": {"type", "message"}}`"#.into()
        }
        Envelope::Flat { message, kind } => match kind {
            Some(kind) => format!(r#"flat: `{{"{message}": "…", "{kind}": "…"}}`"#),
            None => format!(r#"flat: `{{"{message}": "…"}}`"#),
        },
        Envelope::Google => {
            r#"Google's: `{"error": {"code", "message", "status", "details"}}`"#.into()
        }
        Envelope::Amazon => r#"AWS's: `{"message": "…"}` with `x-amzn-ErrorType`"#.into(),
    }
}

// ------------------------------------------------------------------ Markdown

/// The page of one dialect, as Markdown: it starts at a `##` heading, so a
/// prose page can include it under its own title. `None`: no such dialect.
pub fn markdown(name: &str) -> Option<String> {
    let checks = checks();
    let dialect = checks.dialects.iter().find(|d| d.name == name)?;
    let mut page = String::new();
    dialect_header(&mut page, dialect);
    if dialect.endpoints.is_empty() {
        page.push_str("No endpoint is judged: every answer passes as it came.\n");
    }
    for endpoint in &dialect.endpoints {
        endpoint_section(&mut page, endpoint);
    }
    if let Some(realtime) = &dialect.realtime {
        let _ = writeln!(page, "### Realtime: `GET {}` (WebSocket)\n", realtime.path);
        page.push_str(
            "Every frame passes; each `response.done` event's figures are judged. \
             No payload invariant applies.\n\n",
        );
        figure_table(&mut page, "Figures of `response.done`", &realtime.figures);
        relation_table(&mut page, &realtime.relations);
    }
    Some(page)
}

fn dialect_header(page: &mut String, dialect: &DialectChecks) {
    let _ = writeln!(page, "## What probity checks: `{}`\n", dialect.name);
    page.push_str("<!-- Written by `probity checks`; do not edit by hand. -->\n\n");
    let credential = &dialect.credential;
    let _ = writeln!(page, "- provider: `{}`", dialect.provider);
    let _ = write!(
        page,
        "- credential: `{}: {}<key>`",
        credential.header, credential.prefix
    );
    if !credential.also.is_empty() {
        let _ = write!(page, " (also in {})", code_list(&credential.also));
    }
    if let Some(query) = credential.query {
        let _ = write!(page, " (or `?{query}=`)");
    }
    page.push('\n');
    for (header, value) in &credential.defaults {
        let _ = writeln!(page, "- sent beside it when absent: `{header}: {value}`");
    }
    let _ = writeln!(page, "- error envelope: {}", dialect.error_envelope);
    let _ = writeln!(
        page,
        "- conventions (`relations`): {}\n",
        code_list(&dialect.conventions)
    );
    page.push_str(
        "An endpoint with an output contract may give any of its reasons, \
         listed once in the index.\n\n",
    );
}

fn endpoint_section(page: &mut String, endpoint: &EndpointChecks) {
    let _ = writeln!(
        page,
        "### `{} {}`\n",
        endpoint.methods.join(", "),
        endpoint.path
    );
    let _ = writeln!(page, "- operation: `{}`", endpoint.operation);
    let _ = writeln!(page, "- matched by: {}", endpoint.matched_by);
    match &endpoint.stream {
        Some(stream) => {
            let comments = if stream.comments { "with" } else { "without" };
            let _ = writeln!(
                page,
                "- streams: {} ({comments} probity's comment lines)",
                stream.framing
            );
        }
        None => page.push_str("- streams: no\n"),
    }
    if let Some(task) = endpoint.output_task {
        let _ = writeln!(page, "- output contract: task `{task}`");
    }
    if let Some(inputs) = &endpoint.batch_inputs {
        let _ = writeln!(page, "- large batches split by: {}", code_list(inputs));
    }
    request_list(page, endpoint);
    invariant_table(page, "Payload invariants", &endpoint.invariants);
    if let Some(stream) = &endpoint.stream {
        invariant_table(page, "Stream invariants", &stream.invariants);
    }
    figure_table(page, "Figures", &endpoint.figures);
    if !endpoint.records.is_empty() {
        page.push_str("Records, when every figure in one is malformed:\n\n");
        for record in &endpoint.records {
            let becomes = match record.kept {
                true => "kept as an object, its figures `null` (required by the provider's schema)",
                false => "becomes `null` whole",
            };
            let _ = writeln!(page, "- `{}`: {becomes}", record.pointer);
        }
        page.push('\n');
    }
    figure_table(page, "Header figures", &endpoint.header_figures);
    relation_table(page, &endpoint.relations);
}

fn request_list(page: &mut String, endpoint: &EndpointChecks) {
    let body = if endpoint.request_body {
        "a JSON object"
    } else {
        "none (empty reads as `{}`)"
    };
    let _ = writeln!(page, "- request body: {body}");
    if endpoint.request_fields.is_empty() {
        page.push('\n');
        return;
    }
    page.push_str("- request fields judging reads:\n");
    for field in &endpoint.request_fields {
        let need = if field.required {
            "required"
        } else {
            "optional"
        };
        let _ = writeln!(
            page,
            "  - `{}`: {} ({need})",
            field.name,
            field.kinds.join(" or ")
        );
    }
    page.push('\n');
}

fn invariant_table(page: &mut String, title: &str, rules: &[InvariantRule]) {
    let _ = writeln!(page, "{title}:\n\n| code | rule |\n| --- | --- |");
    for rule in rules {
        let _ = writeln!(
            page,
            "| `{}` | {} |",
            rule.code,
            rule.rule.replace('|', "\\|")
        );
    }
    page.push('\n');
}

fn figure_table(page: &mut String, title: &str, figures: &[FigureRow]) {
    if figures.is_empty() {
        return;
    }
    let _ = writeln!(
        page,
        "{title}:\n\n| pointer | domain | tokens | running |\n| --- | --- | --- | --- |"
    );
    for figure in figures {
        let tokens = figure.tokens.map_or_else(String::new, |t| format!("`{t}`"));
        let running = if figure.running { "yes" } else { "" };
        let _ = writeln!(
            page,
            "| `{}` | {} | {tokens} | {running} |",
            figure.pointer, figure.domain
        );
    }
    page.push('\n');
}

/// A list, not a table: a rule over full pointers is too wide for a row.
fn relation_table(page: &mut String, relations: &[RelationEntry]) {
    if relations.is_empty() {
        return;
    }
    page.push_str("Relations (figures that contradict each other are nulled, not reported):\n\n");
    for relation in relations {
        let under = match relation.conventions.is_empty() {
            true => "none of this dialect's conventions".to_owned(),
            false => code_list(&relation.conventions),
        };
        let _ = writeln!(
            page,
            "- `{}`, under {under}: {}",
            relation.name, relation.rule
        );
    }
    page.push('\n');
}

/// The index page: every dialect, every invariant code with the
/// endpoints that hold it, every contract reason.
pub fn index() -> String {
    let checks = checks();
    let mut page = String::from("# What probity checks\n\n");
    page.push_str("<!-- Written by `probity checks`; do not edit by hand. -->\n\n");
    page.push_str(
        "Written by `probity checks` from the judging core's own tables \
         (`probity checks --json` gives the same as JSON). Each dialect's page \
         includes its part, `reference/checks/<dialect>.md`.\n\n## Dialects\n\n",
    );
    for dialect in &checks.dialects {
        let _ = writeln!(
            page,
            "- [`{0}`](../dialects/{0}.md): endpoints judged: {1}",
            dialect.name,
            dialect.endpoints.len()
        );
    }
    page.push_str("\n## Payload invariants\n\nA broken one is a 502 `provider_invalid_response` whose `code` is the invariant.\n\n");
    let every: usize = checks.dialects.iter().map(|d| d.endpoints.len()).sum();
    for invariant in &checks.invariants {
        let _ = writeln!(page, "### `{}`\n\n{}\n", invariant.code, invariant.meaning);
        match invariant.endpoints.len() {
            0 => page.push_str("Held by no endpoint's table.\n\n"),
            held if held == every => page.push_str("Held by every endpoint.\n\n"),
            _ => {
                for endpoint in &invariant.endpoints {
                    let _ = writeln!(page, "- {endpoint}");
                }
                page.push('\n');
            }
        }
    }
    page.push_str("## Output-contract reasons\n\nWhy an answer breaks its output contract, on any endpoint with one (`probity-output-reason`):\n\n");
    for reason in &checks.contract_reasons {
        let _ = writeln!(page, "- `{reason}`");
    }
    let _ = writeln!(
        page,
        "\n## Conventions\n\nWhat a route's `relations` may name: {}.",
        code_list(&checks.conventions)
    );
    page
}

fn code_list(items: &[&str]) -> String {
    items
        .iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dialect_has_a_page_that_starts_below_a_title() {
        for name in inspect::names() {
            let page = markdown(name).unwrap();
            assert!(page.starts_with("## "), "{name}");
        }
        assert!(markdown("nope").is_none());
    }

    #[test]
    fn kept_records_are_the_required_ones() {
        let checks = checks();
        let openai = &checks.dialects[0];
        let embeddings = openai
            .endpoints
            .iter()
            .find(|e| e.path == "…/embeddings")
            .unwrap();
        assert!(embeddings
            .records
            .iter()
            .any(|r| r.pointer == "/usage" && r.kept));
        let chat = &openai.endpoints[0];
        assert!(chat.records.iter().all(|r| !r.kept), "{:?}", chat.records);
    }

    #[test]
    fn an_invariant_lists_the_endpoints_that_hold_it() {
        let checks = checks();
        let count = checks
            .invariants
            .iter()
            .find(|i| i.code == "embedding_count_mismatch")
            .unwrap();
        assert!(count.endpoints.contains(&"openai …/embeddings".to_owned()));
        assert!(!count.endpoints.iter().any(|e| e.contains("chat")));
    }
}
