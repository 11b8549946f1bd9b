//! Output contracts: is what the model wrote usable? The last check on the
//! way back (`inspect` → **`contract`** → `server`).
//!
//! A bad answer is a normal outcome of asking a small model, not a broken
//! dependency: the request still succeeds. The verdict is stated in headers
//! (`probity-output`, `probity-output-reason`), counted per task and reason,
//! and, with `on_invalid = "degrade"`, the answer is replaced by the route's
//! degraded answer so that the app keeps working. Strict: nothing is
//! repaired, code fences are not stripped, and a quote is grounded only if
//! it appears in a cited source with whitespace folded, nothing looser.
//!
//! A contract comes from the request (a JSON schema or JSON mode the app
//! asked the provider for, the tools it declared, the documents a provider
//! that cites was given) and from the route's `[routes.contract]`.

mod documents;
mod schema;
mod tools;

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;

use serde_json::Value;

mod config;

use crate::json::Json;
pub use config::{CitationsConfig, ContractConfig, OnInvalid, DEFAULT_DEGRADED};
pub(crate) use documents::{CitationSpec, Documents};
pub(crate) use schema::Compiled;
pub use schema::SchemaCache;
pub(crate) use tools::{
    declared_functions, function, name_of, Arguments, Declared, StreamedCalls, ToolCall,
};
pub(crate) use tools::{ToolSpec, Tools};

/// Why an answer (or a tool call) is unusable: the `reason` label of
/// `probity_model_invalid_output_total`, `probity-output-reason`, the
/// span's `probity.output.reasons` and a capture's `reasons`. A verdict
/// lists its reasons in this order, each once; the tool calls' come last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// `invalid_json`.
    InvalidJson,
    /// `schema_violation`.
    SchemaViolation,
    /// `enum_violation`.
    EnumViolation,
    /// `field_name_echo`.
    FieldNameEcho,
    /// `placeholder`.
    Placeholder,
    /// `too_short`.
    TooShort,
    /// `too_long`.
    TooLong,
    /// `citation_missing`.
    CitationMissing,
    /// `citation_unknown`.
    CitationUnknown,
    /// `quote_ungrounded`.
    QuoteUngrounded,
    /// `truncated`.
    Truncated,
    /// `refusal`.
    Refusal,
    /// `tool_unknown`.
    ToolUnknown,
    /// `tool_arguments_invalid_json`.
    ToolArgumentsInvalidJson,
    /// `tool_arguments_not_object`.
    ToolArgumentsNotObject,
    /// `tool_arguments_schema`.
    ToolArgumentsSchema,
}

impl Reason {
    /// Every reason, in verdict order.
    pub const ALL: [Reason; 16] = [
        Reason::InvalidJson,
        Reason::SchemaViolation,
        Reason::EnumViolation,
        Reason::FieldNameEcho,
        Reason::Placeholder,
        Reason::TooShort,
        Reason::TooLong,
        Reason::CitationMissing,
        Reason::CitationUnknown,
        Reason::QuoteUngrounded,
        Reason::Truncated,
        Reason::Refusal,
        Reason::ToolUnknown,
        Reason::ToolArgumentsInvalidJson,
        Reason::ToolArgumentsNotObject,
        Reason::ToolArgumentsSchema,
    ];

    /// Its label.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::InvalidJson => "invalid_json",
            Reason::SchemaViolation => "schema_violation",
            Reason::EnumViolation => "enum_violation",
            Reason::FieldNameEcho => "field_name_echo",
            Reason::Placeholder => "placeholder",
            Reason::TooShort => "too_short",
            Reason::TooLong => "too_long",
            Reason::CitationMissing => "citation_missing",
            Reason::CitationUnknown => "citation_unknown",
            Reason::QuoteUngrounded => "quote_ungrounded",
            Reason::Truncated => "truncated",
            Reason::Refusal => "refusal",
            Reason::ToolUnknown => "tool_unknown",
            Reason::ToolArgumentsInvalidJson => "tool_arguments_invalid_json",
            Reason::ToolArgumentsNotObject => "tool_arguments_not_object",
            Reason::ToolArgumentsSchema => "tool_arguments_schema",
        }
    }

    /// A tool call's reason, not the answer's.
    pub fn of_a_tool_call(self) -> bool {
        self >= Reason::ToolUnknown
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for Reason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl serde::Serialize for Reason {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// The labels of `reasons`, comma-separated (`probity-output-reason`, the
/// stream's verdict comment, the log line).
pub fn joined(reasons: &[Reason]) -> String {
    let labels: Vec<&str> = reasons.iter().map(|r| r.as_str()).collect();
    labels.join(",")
}

/// Strings that stand in for an answer rather than being one.
const PLACEHOLDERS: &[&str] = &[
    "string",
    "...",
    "…",
    "n/a",
    "todo",
    "tbd",
    "<answer>",
    "<string>",
    "your answer here",
    "answer here",
    "insert answer here",
    "lorem ipsum",
    "placeholder",
    "xxx",
    "undefined",
];

/// What the app asked the provider for, read from the request.
#[derive(Debug, Clone)]
pub enum Requested {
    /// No structured output.
    Nothing,
    /// Any single JSON value (`json_object`, Ollama `format: "json"`).
    Json,
    /// JSON satisfying this schema.
    Schema(Value),
}

/// One answer of a response, as the dialect found it.
#[derive(Debug, Clone)]
pub(crate) struct Answer<'a> {
    /// The model's content: a JSON string holding the text, or (a forced
    /// Anthropic tool's `input`) the JSON value itself. `None`: no content.
    pub(crate) content: Option<Json<'a>>,
    /// More text strings the answer goes on in, joined after `content`
    /// (the Responses API's several `output_text` parts); a degraded
    /// answer empties them.
    pub(crate) more: Vec<Json<'a>>,
    /// The model stopped on the length limit.
    pub(crate) truncated: bool,
    /// The model refused (OpenAI `refusal`).
    pub(crate) refusal: bool,
}

/// What a dialect knows of an endpoint's answers: where the contract and
/// the prompt are in a request, and where the answers are in a response.
pub(crate) struct OutputSpec {
    /// The `task` label when the route configures none.
    pub(crate) task: &'static str,
    pub(crate) requested: fn(&crate::json::Object<'_>) -> Requested,
    pub(crate) prompt: fn(&crate::json::Object<'_>) -> Option<String>,
    /// The answers of a response (the request says which tool was forced).
    pub(crate) answers:
        for<'a> fn(&crate::json::Object<'_>, &crate::json::Object<'a>) -> Vec<Answer<'a>>,
    /// Where the declared tools and the tool calls are, when the endpoint
    /// has tools.
    pub(crate) tools: Option<ToolSpec>,
    /// Where the supplied documents and the answer's own citations are,
    /// when the provider cites (Cohere's chat).
    pub(crate) citations: Option<CitationSpec>,
}

/// An answer gathered from a stream's deltas.
#[derive(Debug, Default, Clone)]
pub(crate) struct StreamedAnswer {
    pub(crate) text: String,
    pub(crate) truncated: bool,
    pub(crate) refusal: bool,
}

impl StreamedAnswer {
    /// Gathers the whole answer: judging a cut text would give a wrong
    /// verdict (`invalid_json` for a sound answer). It needs no bound of its
    /// own: the stream it comes from is bounded by the route's
    /// `max_response_bytes`, and only streams under a contract gather one.
    pub(crate) fn push(&mut self, text: &str) {
        self.text.push_str(text);
    }
}

/// A contract in force for one request.
pub struct Contract {
    /// The `task` label.
    pub(crate) task: Cow<'static, str>,
    pub(crate) config: Option<Arc<ContractConfig>>,
    pub(crate) schema: Option<Arc<Compiled>>,
    /// The sources the app supplied in its prompt document: `(id, text)`.
    pub(crate) sources: Vec<(String, String)>,
    /// Whether the answer itself is judged (the request or the route asked
    /// for a contract), not only the tool calls.
    pub(crate) answer: bool,
    /// The tools the request declared, that its calls are judged against.
    pub(crate) tools: Option<Tools>,
    /// The documents the request supplied, that the answer's own
    /// citations are judged against.
    pub(crate) documents: Option<Documents>,
}

/// What the output contract found in a response's answers and tool calls:
/// its verdict is `valid()` (no reason found) or invalid.
#[derive(Debug, Default, PartialEq)]
pub struct OutputFindings {
    /// Every reason found, in [`Reason`]'s order, each once.
    pub reasons: Vec<Reason>,
    /// One sentence per finding, for the degraded answer.
    pub sentences: Vec<String>,
}

impl OutputFindings {
    /// No reason was found.
    pub fn valid(&self) -> bool {
        self.reasons.is_empty()
    }

    fn add(&mut self, reason: Reason, sentence: String) {
        if !self.reasons.contains(&reason) {
            self.reasons.push(reason);
            self.sentences.push(sentence);
        }
    }

    fn sort(&mut self) {
        let mut pairs: Vec<(Reason, String)> = self
            .reasons
            .drain(..)
            .zip(self.sentences.drain(..))
            .collect();
        pairs.sort_by_key(|(r, _)| *r);
        for (reason, sentence) in pairs {
            self.reasons.push(reason);
            self.sentences.push(sentence);
        }
    }

    /// `model output rejected: <first finding>[; <next>...]`.
    pub(crate) fn sentence(&self) -> String {
        format!("model output rejected: {}", self.sentences.join("; "))
    }
}

impl Contract {
    /// The contract for a request, if any: from what it asked for and from
    /// the route's configuration. `endpoint` names the task when the route
    /// configures none. `prompt` is the request's prompt text.
    pub fn resolve(
        requested: Requested,
        config: Option<&Arc<ContractConfig>>,
        endpoint: &'static str,
        prompt: Option<String>,
        cache: &SchemaCache,
    ) -> Option<Self> {
        Self::resolve_with_tools(requested, None, None, config, endpoint, prompt, cache)
    }

    /// The contract for a request to an endpoint whose answers `spec`
    /// finds: [`Contract::resolve_with_tools`] with what the request asked,
    /// declared and supplied.
    pub(crate) fn of_request(
        spec: &OutputSpec,
        request: &crate::json::Object<'_>,
        config: Option<&Arc<ContractConfig>>,
        cache: &SchemaCache,
    ) -> Option<Self> {
        Self::resolve_with_tools(
            (spec.requested)(request),
            spec.tools.as_ref().and_then(|t| (t.declared)(request)),
            spec.citations.as_ref().and_then(|c| (c.supplied)(request)),
            config,
            spec.task,
            (spec.prompt)(request),
            cache,
        )
    }

    /// [`Contract::resolve`], with the tools the request declared and the
    /// documents it supplied: a request that declares tools has its calls
    /// judged, and one that supplies documents its citations, contract or
    /// not.
    pub(crate) fn resolve_with_tools(
        requested: Requested,
        declared: Option<Declared>,
        documents: Option<Documents>,
        config: Option<&Arc<ContractConfig>>,
        endpoint: &'static str,
        prompt: Option<String>,
        cache: &SchemaCache,
    ) -> Option<Self> {
        let schema = match &requested {
            Requested::Schema(schema) => cache.get(schema),
            _ => None,
        };
        let answer = !matches!(requested, Requested::Nothing) || config.is_some();
        if !answer && declared.is_none() && documents.is_none() {
            return None;
        }
        let sources = match (config.and_then(|c| c.citations.as_ref()), prompt) {
            (Some(citations), Some(prompt)) => sources(&prompt, &citations.sources),
            _ => Vec::new(),
        };
        Some(Self {
            task: config.map_or(Cow::Borrowed(endpoint), |c| Cow::Owned(c.task.clone())),
            config: config.cloned(),
            schema,
            sources,
            answer,
            tools: declared.map(|d| Tools::compile(d, cache)),
            documents,
        })
    }

    /// Whether this verdict's answers are replaced: with `degrade`, and
    /// only for the answer's own reasons. A tool call is never replaced
    /// (an app cannot execute a stand-in call), and the text beside an
    /// unusable call is left as it came so that the app sees the call's
    /// verdict with what the upstream sent: annotated only.
    pub(crate) fn degrades(&self, found: &OutputFindings) -> bool {
        let degrade = self
            .config
            .as_ref()
            .is_some_and(|c| c.on_invalid == OnInvalid::Degrade);
        degrade && !found.valid() && !found.reasons.iter().any(|r| r.of_a_tool_call())
    }

    /// How many of `calls` are judged as calls (the forced tool's are the
    /// answer), and whether an answer without content beside them is no
    /// answer at all (the calls are).
    fn calls_judged(&self, calls: &[ToolCall]) -> (usize, bool) {
        let Some(tools) = &self.tools else {
            return (0, false);
        };
        let judged = tools.judged(calls).len();
        (judged, judged > 0 && !tools.forces())
    }

    /// The degraded answer with the reason sentence filled in: JSON text.
    pub fn degraded(&self, found: &OutputFindings) -> String {
        let template = self
            .config
            .as_ref()
            .map_or(DEFAULT_DEGRADED, |c| c.degraded.as_str());
        // The sentence goes inside a JSON string: escape it as one.
        let quoted = serde_json::to_string(&found.sentence()).unwrap_or_default();
        template.replace("{reason}", &quoted[1..quoted.len() - 1])
    }

    /// Whether the answer's own citations are judged: the request
    /// supplied documents and the answer cites.
    fn cites(&self, cited: &[String]) -> bool {
        self.documents.is_some() && !cited.is_empty()
    }

    /// Judges every answer, every tool call and the document ids the
    /// answer's own citations name (`cited`); the one verdict gathers all
    /// their reasons. `None`: nothing to judge (tools were declared, none
    /// was called, nothing was cited, and no contract asks about the
    /// answer).
    pub(crate) fn judge(
        &self,
        answers: &[Answer<'_>],
        calls: &[ToolCall],
        cited: &[String],
    ) -> Option<OutputFindings> {
        let (judged, beside_calls) = self.calls_judged(calls);
        if !self.answer && judged == 0 && !self.cites(cited) {
            return None;
        }
        let mut found = OutputFindings::default();
        if self.answer {
            let answers: Vec<&Answer<'_>> = answers
                .iter()
                .filter(|a| !beside_calls || a.content.is_some_and(has_content))
                .collect();
            if answers.is_empty() && !beside_calls {
                found.add(Reason::InvalidJson, "the response holds no answer".into());
            }
            for answer in answers {
                self.judge_one(answer, &mut found);
            }
        }
        if let Some(documents) = &self.documents {
            documents.judge(cited, &mut found);
        }
        if let Some(tools) = &self.tools {
            tools.judge(calls, &mut found);
        }
        found.sort();
        Some(found)
    }

    /// Judges a stream's answer, calls and citations, gathered from its
    /// events, as [`Contract::judge`] does a whole response's.
    pub(crate) fn judge_streamed(
        &self,
        answer: Option<&StreamedAnswer>,
        calls: &[ToolCall],
        cited: &[String],
    ) -> Option<OutputFindings> {
        let (judged, beside_calls) = self.calls_judged(calls);
        if !self.answer && judged == 0 && !self.cites(cited) {
            return None;
        }
        let mut found = OutputFindings::default();
        match answer {
            Some(answer) if self.answer && !(beside_calls && answer.text.is_empty()) => {
                let value = parse_answer(&answer.text);
                self.judge_value(value, answer.truncated, answer.refusal, &mut found);
            }
            _ => {}
        }
        if let Some(documents) = &self.documents {
            documents.judge(cited, &mut found);
        }
        if let Some(tools) = &self.tools {
            tools.judge(calls, &mut found);
        }
        found.sort();
        Some(found)
    }

    /// Judges the text of a streamed answer, gathered from its deltas.
    pub fn judge_text(&self, text: &str, truncated: bool, refusal: bool) -> OutputFindings {
        let mut found = OutputFindings::default();
        self.judge_value(parse_answer(text), truncated, refusal, &mut found);
        found.sort();
        found
    }

    fn judge_one(&self, answer: &Answer<'_>, found: &mut OutputFindings) {
        let value = match answer.content {
            None => None,
            Some(json) if json.is_null() => None,
            // A forced tool's input is JSON already.
            Some(json) if json.kind() != crate::json::Kind::String => {
                serde_json::from_str(json.text()).ok()
            }
            Some(json) if answer.more.is_empty() => {
                json.string().and_then(|text| parse_answer(&text))
            }
            Some(json) => {
                let mut text = json.string().map(|t| t.into_owned());
                for more in &answer.more {
                    text = text.zip(more.string()).map(|(t, m)| t + &m);
                }
                text.and_then(|text| parse_answer(&text))
            }
        };
        self.judge_value(value, answer.truncated, answer.refusal, found);
    }

    fn judge_value(
        &self,
        value: Option<Value>,
        truncated: bool,
        refusal: bool,
        found: &mut OutputFindings,
    ) {
        if truncated {
            found.add(
                Reason::Truncated,
                "the model stopped at the length limit".into(),
            );
        }
        if refusal {
            found.add(Reason::Refusal, "the model refused".into());
        }
        let Some(value) = value else {
            found.add(
                Reason::InvalidJson,
                "the answer is not exactly one JSON value".into(),
            );
            return;
        };
        if let Some(schema) = &self.schema {
            schema.check(&value, found);
        }
        self.free_text(&value, found);
        if let Some(config) = &self.config {
            self.prose(config, &value, found);
            self.citations(config, &value, found);
        }
    }

    /// Field-name echoes and placeholders in every free-text string.
    fn free_text(&self, value: &Value, found: &mut OutputFindings) {
        let mut names: HashSet<String> = self
            .schema
            .as_ref()
            .map(|s| {
                s.property_names()
                    .iter()
                    .map(|n| n.to_lowercase())
                    .collect()
            })
            .unwrap_or_default();
        if let Value::Object(members) = value {
            names.extend(members.keys().map(|k| k.to_lowercase()));
        }
        let extra: Vec<String> = self
            .config
            .as_ref()
            .map(|c| {
                c.placeholders
                    .iter()
                    .map(|p| p.trim().to_lowercase())
                    .collect()
            })
            .unwrap_or_default();
        let mut strings = Vec::new();
        free_strings(value, self.schema.as_deref(), &mut strings);
        for text in strings {
            let folded = text.trim().to_lowercase();
            if names.contains(&folded) {
                found.add(
                    Reason::FieldNameEcho,
                    format!("answer repeats the schema field name \"{}\"", text.trim()),
                );
            }
            if PLACEHOLDERS.contains(&folded.as_str()) || extra.contains(&folded) {
                found.add(
                    Reason::Placeholder,
                    format!("answer is the placeholder \"{}\"", text.trim()),
                );
            }
        }
    }

    fn prose(&self, config: &ContractConfig, value: &Value, found: &mut OutputFindings) {
        for pointer in &config.prose {
            let text = value.pointer(pointer).and_then(Value::as_str).unwrap_or("");
            let chars = text.trim().chars().count();
            if chars < config.min_chars {
                found.add(
                    Reason::TooShort,
                    format!(
                        "{pointer} has {chars} characters, fewer than {}",
                        config.min_chars
                    ),
                );
            } else if chars > config.max_chars {
                found.add(
                    Reason::TooLong,
                    format!(
                        "{pointer} has {chars} characters, more than {}",
                        config.max_chars
                    ),
                );
            }
        }
    }

    fn citations(&self, config: &ContractConfig, value: &Value, found: &mut OutputFindings) {
        let Some(citations) = &config.citations else {
            return;
        };
        let cited: Vec<String> = value
            .pointer(&citations.output)
            .and_then(Value::as_array)
            .map(|ids| ids.iter().map(id_text).collect())
            .unwrap_or_default();
        if cited.is_empty() && citations.required {
            found.add(Reason::CitationMissing, "answer cites no source".into());
        }
        for id in &cited {
            if !self.sources.iter().any(|(known, _)| known == id) {
                found.add(
                    Reason::CitationUnknown,
                    format!("answer cites \"{id}\", which is not a supplied source"),
                );
            }
        }
        let Some(quotes) = citations
            .quotes
            .as_ref()
            .and_then(|p| value.pointer(p))
            .and_then(Value::as_array)
        else {
            return;
        };
        let cited_texts: Vec<String> = self
            .sources
            .iter()
            .filter(|(id, _)| cited.contains(id))
            .map(|(_, text)| fold(text))
            .collect();
        for quote in quotes {
            let quote = quote.as_str().map(fold).unwrap_or_default();
            if !cited_texts.iter().any(|text| text.contains(&quote)) || quote.is_empty() {
                found.add(
                    Reason::QuoteUngrounded,
                    "answer quotes text found in no cited source".into(),
                );
            }
        }
    }
}

/// Content beside tool calls: `null` or `""` is none (the calls are
/// the answer: OpenAI sends `null` there, Ollama `""`).
fn has_content(content: Json<'_>) -> bool {
    !content.is_null() && content.string().is_none_or(|text| !text.is_empty())
}

/// The content parsed strictly: exactly one JSON value, nothing stripped.
fn parse_answer(text: &str) -> Option<Value> {
    serde_json::from_str(text).ok()
}

/// Every string in `value` that is free text: one whose schema (if any)
/// sets no `enum` or `const`, looked up through `$ref` (pydantic puts its
/// enums in `$defs`) and single-schema `allOf`/`anyOf` wrappers.
fn free_strings<'v>(value: &'v Value, schema: Option<&Compiled>, out: &mut Vec<&'v str>) {
    fn resolve<'s>(mut sub: &'s Value, root: &'s Value) -> &'s Value {
        for _ in 0..8 {
            if let Some(reference) = sub.get("$ref").and_then(Value::as_str) {
                match reference.strip_prefix('#').and_then(|p| root.pointer(p)) {
                    Some(target) => sub = target,
                    None => break,
                }
            } else if let Some(only) = ["allOf", "anyOf", "oneOf"].iter().find_map(|k| {
                sub.get(*k)
                    .and_then(Value::as_array)
                    .filter(|a| a.len() == 1)
                    .and_then(|a| a.first())
            }) {
                sub = only;
            } else {
                break;
            }
        }
        sub
    }
    fn walk<'v>(
        value: &'v Value,
        sub: Option<&Value>,
        root: Option<&Value>,
        out: &mut Vec<&'v str>,
    ) {
        let sub = match (sub, root) {
            (Some(sub), Some(root)) => Some(resolve(sub, root)),
            _ => sub,
        };
        let constrained = sub.is_some_and(|s| s.get("enum").is_some() || s.get("const").is_some());
        match value {
            Value::String(text) if !constrained => out.push(text),
            Value::Array(items) => {
                let item_schema = sub.and_then(|s| s.get("items"));
                for item in items {
                    walk(item, item_schema, root, out);
                }
            }
            Value::Object(members) => {
                for (key, member) in members {
                    let member_schema = sub
                        .and_then(|s| s.get("properties"))
                        .and_then(|p| p.get(key));
                    walk(member, member_schema, root, out);
                }
            }
            _ => {}
        }
    }
    let root = schema.map(|s| s.schema());
    walk(value, root, root, out);
}

/// The `(id, text)` sources in the prompt document at `pointer`.
fn sources(prompt: &str, pointer: &str) -> Vec<(String, String)> {
    let Ok(document) = serde_json::from_str::<Value>(prompt) else {
        return Vec::new();
    };
    document
        .pointer(pointer)
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|item| {
                    let id = id_text(item.get("id")?);
                    let text = item
                        .get("text")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string();
                    Some((id, text))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Ids compare as text, so `1` and `"1"` are the same source.
fn id_text(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Whitespace folded: runs of whitespace become one space, ends trimmed.
fn fold(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::CitationsConfig;
    use super::*;

    fn grounded() -> Arc<ContractConfig> {
        Arc::new(ContractConfig {
            task: "grounded_answer".into(),
            prose: vec!["/answer".into()],
            min_chars: 12,
            max_chars: 60,
            citations: Some(CitationsConfig {
                output: "/citations".into(),
                sources: "/sources".into(),
                required: true,
                quotes: Some("/quotes".into()),
            }),
            ..ContractConfig::default()
        })
    }

    const SCHEMA: &str = r#"{"type": "object", "required": ["answer", "sufficient", "citations"],
        "properties": {"answer": {"type": "string"}, "sufficient": {"type": "boolean"},
        "citations": {"type": "array", "items": {"type": "string"}},
        "quotes": {"type": "array", "items": {"type": "string"}},
        "tone": {"enum": ["formal", "casual"]}}, "additionalProperties": false}"#;

    const PROMPT: &str = r#"{"question": "Why is the sky blue?", "sources": [
        {"id": "s1", "text": "Rayleigh scattering   makes the sky\nblue."},
        {"id": "s2", "text": "Sunsets are red."}]}"#;

    fn reasons(answer: &str) -> Vec<Reason> {
        let cache = SchemaCache::new(4);
        let config = grounded();
        let contract = Contract::resolve(
            Requested::Schema(serde_json::from_str(SCHEMA).unwrap()),
            Some(&config),
            "ollama_generate",
            Some(PROMPT.into()),
            &cache,
        )
        .unwrap();
        contract.judge_text(answer, false, false).reasons
    }

    #[test]
    fn a_grounded_answer_is_valid() {
        let answer = r#"{"answer": "Rayleigh scattering of sunlight.", "sufficient": true, "citations": ["s1"], "quotes": ["scattering makes the sky blue."]}"#;
        assert_eq!(reasons(answer), Vec::<&str>::new());
    }

    #[test]
    fn the_small_model_answer_is_an_echo_without_citations() {
        let answer = r#"{"answer": "sufficient", "sufficient": true, "citations": []}"#;
        assert_eq!(
            reasons(answer),
            ["field_name_echo", "too_short", "citation_missing"]
        );
    }

    #[test]
    fn each_reason_on_its_own() {
        let base = |answer: &str, citations: &str| {
            format!(r#"{{"answer": "{answer}", "sufficient": true, "citations": {citations}}}"#)
        };
        assert_eq!(reasons("```json\n{}\n```"), ["invalid_json"]);
        assert_eq!(
            reasons(&format!(
                "{} trailing",
                base("Rayleigh scattering.", r#"["s1"]"#)
            )),
            ["invalid_json"]
        );
        assert_eq!(
            reasons(
                r#"{"answer": "Rayleigh scattering.", "sufficient": "yes", "citations": ["s1"]}"#
            ),
            ["schema_violation"]
        );
        assert_eq!(
            reasons(
                r#"{"answer": "Rayleigh scattering.", "sufficient": true, "citations": ["s1"], "tone": "rude"}"#
            ),
            ["enum_violation"]
        );
        assert_eq!(
            reasons(&base("your answer here", r#"["s1"]"#)),
            ["placeholder"]
        );
        assert_eq!(reasons(&base("Too short.", r#"["s1"]"#)), ["too_short"]);
        assert_eq!(reasons(&base(&"x".repeat(61), r#"["s1"]"#)), ["too_long"]);
        assert_eq!(
            reasons(&base("Rayleigh scattering.", r#"["s9"]"#)),
            ["citation_unknown"]
        );
        let ungrounded = r#"{"answer": "Rayleigh scattering.", "sufficient": true, "citations": ["s1"], "quotes": ["Sunsets are red."]}"#;
        assert_eq!(
            reasons(ungrounded),
            ["quote_ungrounded"],
            "quotes come from the cited sources only"
        );
    }

    #[test]
    fn truncation_and_refusal_are_reasons_too() {
        let cache = SchemaCache::new(4);
        let contract =
            Contract::resolve(Requested::Json, None, "chat_completions", None, &cache).unwrap();
        assert_eq!(contract.task, "chat_completions");
        assert_eq!(
            contract.judge_text("{\"a\": 1", true, false).reasons,
            ["invalid_json", "truncated"]
        );
        assert_eq!(contract.judge_text("{}", false, true).reasons, ["refusal"]);
        assert!(Contract::resolve(Requested::Nothing, None, "x", None, &cache).is_none());
    }

    #[test]
    fn the_degraded_answer_states_the_reason_as_json() {
        let cache = SchemaCache::new(4);
        let config = grounded();
        let contract =
            Contract::resolve(Requested::Json, Some(&config), "x", None, &cache).unwrap();
        let found = contract.judge_text(r#"{"answer": "Answer", "citations": []}"#, false, false);
        let degraded: Value = serde_json::from_str(&contract.degraded(&found)).unwrap();
        let reason = degraded["uncertainty"][0].as_str().unwrap();
        assert!(
            reason.starts_with(
                "model output rejected: answer repeats the schema field name \"Answer\"; "
            ),
            "{reason}"
        );
        assert_eq!(degraded["sufficient"], false);
    }

    #[test]
    fn schemas_are_compiled_once() {
        let cache = SchemaCache::new(1);
        let schema: Value = serde_json::from_str(SCHEMA).unwrap();
        let a = cache.get(&schema).unwrap();
        let b = cache.get(&schema).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert!(
            cache.get(&serde_json::json!({"type": 12})).is_none(),
            "an invalid schema is skipped"
        );
    }
}
