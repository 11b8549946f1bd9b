//! Generation conformance over real sockets, driven by fixtures: chat,
//! completions, Ollama chat/generate, Anthropic messages, Gemini
//! generateContent / streamGenerateContent, the Responses API and Bedrock's
//! Converse (whole, and streamed over AWS's event stream) and Anthropic
//! bodies through Bedrock's InvokeModel (whole, and streamed in base64
//! chunks by `invoke-with-response-stream`), against recorded upstream bodies;
//! the figure mutations generated from every valid one; and every stream
//! served again cut at awkward offsets.
//!
//! A case is a folder `tests/fixtures/<dialect>/gen_<case>/` (the prefix keeps
//! it out of `tests/it/conformance.rs`), read and run by the shared runner,
//! `tests/it/support/conformance.rs`:
//! - `endpoint`: the path after the route prefix, e.g. `/v1/chat/completions`;
//! - `request.json`: the client's body;
//! - the upstream's body, served verbatim: `response.json` (with a
//!   Content-Length), or for a stream `response.sse` (`text/event-stream`) or
//!   `response.ndjson` (`application/x-ndjson`), or `response.events`
//!   (`application/vnd.amazon.eventstream`, written one frame per line as
//!   `support::eventstream::from_text` reads it, faults marked), sent
//!   chunked;
//! - `status` (optional): the upstream's status, 200 when absent;
//! - `route.toml` (optional): `relations = "<convention>"`, which runs the
//!   case on the route of its dialect with that convention (see
//!   `CONVENTION_ROUTES`; `probity inspect`'s check skips it);
//! - `source.txt` (optional): one line saying where an answer from the wild
//!   was reported (an issue, a pull request), or what a made one is shaped
//!   after; for the reader only;
//! - `expect.json`: `"outcome"`: `pass`, `normalized` (with `"pointers"`) or
//!   `rejected` (with `"invariant"`); `"stream": true` for a stream;
//!   optionally `"tokens"` (the `probity_tokens_total` delta per kind),
//!   `"relations"` (the relations breached, once per breach, each event's in
//!   turn: `probity_figure_contradictions_total`'s deltas), `"writes"`
//!   (offsets where the upstream cuts its writes, 2 ms apart), and for a
//!   rejected stream `"pointers"` rewritten before the break;
//! - `expected.<ext>`: the exact client body of a normalized case; for a
//!   rejected stream, the bytes the client gets before the broken event, then
//!   the error event with `<message>` and `<request_id>` standing for text
//!   probity chooses.
//!
//! Every expectation is cross-checked offline against [`verdict`], this
//! file's reading of the rule (the manual, docs/src/concepts/figures.md and
//! docs/src/concepts/invariants.md), which is also the oracle of the generated mutations.
//! What is this file's own: the figure tables, relations (the manual,
//! docs/src/concepts/relations.md) and payload rules of each endpoint, the
//! stream rule event by event (running totals against the events before), the error event of each
//! framing, the mutations of streams and their cuts. One probity has a route
//! per dialect at `/<dialect>`, and a short capture list.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use crate::support::conformance::*;
use crate::support::fixtures::*;
use crate::support::*;
use serde_json::Value;

const DIALECTS: [&str; 8] = [
    "openai",
    "ollama",
    "anthropic",
    "gemini",
    "bedrock",
    "azure",
    "vertex",
    "cohere",
];

const INVARIANTS: [&str; 17] = [
    "event_stream_invalid",
    "invalid_json",
    "payload_missing",
    "choice_count_mismatch",
    "choice_index_invalid",
    "choice_invalid",
    "content_block_invalid",
    "role_invalid",
    "stream_after_done",
    "response_object_invalid",
    "response_status_invalid",
    "response_item_invalid",
    "response_content_invalid",
    "response_function_call_invalid",
    "response_sequence_invalid",
    "response_event_invalid",
    "tool_arguments_type",
];

// ---------------------------------------------------------------- figure tables

use Domain::{Count, Id, Number, Required};

const OPENAI: Figures = &[
    ("/id", Id, None),
    ("/usage/prompt_tokens", Count, Some("input")),
    ("/usage/completion_tokens", Count, Some("output")),
    ("/usage/total_tokens", Count, Some("total")),
    ("/usage/prompt_tokens_details/*", Count, None),
    ("/usage/completion_tokens_details/*", Count, None),
];
/// An Azure filter chunk (`object` `""`, naming no completion): the chat
/// table without `/id`, which Azure leaves empty there.
const AZURE_FILTER_CHUNK: Figures = &[
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
    ("/usage", Required, None),
    ("/id", Id, None),
    ("/usage/input_tokens", Count, Some("input")),
    ("/usage/output_tokens", Count, Some("output")),
    ("/usage/cache_creation_input_tokens", Count, None),
    ("/usage/cache_read_input_tokens", Count, None),
    ("/usage/cache_creation/*", Count, None),
    ("/usage/output_tokens_details/*", Count, None),
    ("/usage/server_tool_use/*", Count, None),
];
/// `message_delta`: the message table without `/id`.
const ANTHROPIC_DELTA: Figures = &[
    ("/usage", Required, None),
    ("/usage/input_tokens", Count, Some("input")),
    ("/usage/output_tokens", Count, Some("output")),
    ("/usage/cache_creation_input_tokens", Count, None),
    ("/usage/cache_read_input_tokens", Count, None),
    ("/usage/cache_creation/*", Count, None),
    ("/usage/output_tokens_details/*", Count, None),
    ("/usage/server_tool_use/*", Count, None),
];

/// Cohere's chat answer (cohere-python `types/usage*.py`: every figure
/// `Optional[float]`).
const COHERE_CHAT: Figures = &[
    ("/id", Id, None),
    ("/usage/billed_units/input_tokens", Number, None),
    ("/usage/billed_units/output_tokens", Number, None),
    ("/usage/billed_units/search_units", Number, None),
    ("/usage/billed_units/classifications", Number, None),
    ("/usage/tokens/input_tokens", Number, Some("input")),
    ("/usage/tokens/output_tokens", Number, Some("output")),
    ("/usage/cached_tokens", Number, None),
];
/// Cohere's `message-start`: its `id` alone.
const COHERE_CHAT_START: Figures = &[("/id", Id, None)];
/// A Cohere chat stream's figures, for their labels: `message-start`'s
/// and `message-end`'s.
const COHERE_CHAT_STREAM: Figures = &[
    ("/id", Id, None),
    ("/delta/usage/billed_units/input_tokens", Number, None),
    ("/delta/usage/billed_units/output_tokens", Number, None),
    ("/delta/usage/billed_units/search_units", Number, None),
    ("/delta/usage/billed_units/classifications", Number, None),
    ("/delta/usage/tokens/input_tokens", Number, Some("input")),
    ("/delta/usage/tokens/output_tokens", Number, Some("output")),
    ("/delta/usage/cached_tokens", Number, None),
];
/// Cohere's `message-end`: the answer's usage under `/delta`.
const COHERE_CHAT_END: Figures = &[
    ("/delta/usage/billed_units/input_tokens", Number, None),
    ("/delta/usage/billed_units/output_tokens", Number, None),
    ("/delta/usage/billed_units/search_units", Number, None),
    ("/delta/usage/billed_units/classifications", Number, None),
    ("/delta/usage/tokens/input_tokens", Number, Some("input")),
    ("/delta/usage/tokens/output_tokens", Number, Some("output")),
    ("/delta/usage/cached_tokens", Number, None),
];

/// A Responses API response object, whole or under a stream event's
/// `/response`: `usage` may be `null`, its two details records may not.
const RESPONSES: Figures = &[
    ("/usage/input_tokens_details", Required, None),
    ("/usage/output_tokens_details", Required, None),
    ("/id", Id, None),
    ("/usage/input_tokens", Count, Some("input")),
    ("/usage/output_tokens", Count, Some("output")),
    ("/usage/total_tokens", Count, Some("total")),
    ("/usage/input_tokens_details/*", Count, None),
    ("/usage/output_tokens_details/*", Count, None),
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

/// Bedrock's `ConverseResponse`: `usage` and `metrics` are required
/// records (never collapsed).
const CONVERSE: Figures = &[
    ("/usage", Required, None),
    ("/metrics", Required, None),
    ("/usage/inputTokens", Count, Some("input")),
    ("/usage/outputTokens", Count, Some("output")),
    ("/usage/totalTokens", Count, Some("total")),
    ("/usage/cacheReadInputTokens", Count, None),
    ("/usage/cacheWriteInputTokens", Count, None),
    ("/metrics/latencyMs", Count, None),
];

/// Bedrock's invocation metrics on the last event of an Anthropic model's
/// `invoke-with-response-stream` (AWS's Bedrock user guide example):
/// Bedrock's metering, tied by no relation to the model's `usage`.
const INVOCATION_METRICS: Figures = &[
    (
        "/amazon-bedrock-invocationMetrics/inputTokenCount",
        Count,
        None,
    ),
    (
        "/amazon-bedrock-invocationMetrics/outputTokenCount",
        Count,
        None,
    ),
    (
        "/amazon-bedrock-invocationMetrics/invocationLatency",
        Count,
        None,
    ),
    (
        "/amazon-bedrock-invocationMetrics/firstByteLatency",
        Count,
        None,
    ),
    (
        "/amazon-bedrock-invocationMetrics/cacheReadInputTokenCount",
        Count,
        None,
    ),
    (
        "/amazon-bedrock-invocationMetrics/cacheWriteInputTokenCount",
        Count,
        None,
    ),
];

// ---------------------------------------------------------------- relations

use Rule::{AtLeast, AtMost, PartsAtMost, Sum};

/// Chat and completions (openai-python `types/completion_usage.py`): the
/// total is prompt and completion; prompt details are of the prompt,
/// reasoning and prediction tokens of the completion. xAI counts reasoning
/// outside the completion and inside the total.
const OPENAI_RELATIONS: Relations = &[
    (
        "total_tokens=prompt_tokens+completion_tokens",
        Sum(
            "/usage/total_tokens",
            &["/usage/prompt_tokens", "/usage/completion_tokens"],
            &[],
        ),
        Under::Provider,
    ),
    (
        "total_tokens=prompt_tokens+completion_tokens+reasoning_tokens",
        Sum(
            "/usage/total_tokens",
            &["/usage/prompt_tokens", "/usage/completion_tokens"],
            &["/usage/completion_tokens_details/reasoning_tokens"],
        ),
        Under::Xai,
    ),
    (
        "cached_tokens<=prompt_tokens",
        AtMost(
            "/usage/prompt_tokens_details/cached_tokens",
            "/usage/prompt_tokens",
        ),
        Under::Both,
    ),
    (
        "prompt_tokens_details.audio_tokens<=prompt_tokens",
        AtMost(
            "/usage/prompt_tokens_details/audio_tokens",
            "/usage/prompt_tokens",
        ),
        Under::Both,
    ),
    (
        "prompt_tokens_details.text_tokens<=prompt_tokens",
        AtMost(
            "/usage/prompt_tokens_details/text_tokens",
            "/usage/prompt_tokens",
        ),
        Under::Both,
    ),
    (
        "prompt_tokens_details.image_tokens<=prompt_tokens",
        AtMost(
            "/usage/prompt_tokens_details/image_tokens",
            "/usage/prompt_tokens",
        ),
        Under::Both,
    ),
    (
        "cache_write_tokens<=prompt_tokens",
        AtMost(
            "/usage/prompt_tokens_details/cache_write_tokens",
            "/usage/prompt_tokens",
        ),
        Under::Both,
    ),
    (
        "reasoning_tokens<=completion_tokens",
        AtMost(
            "/usage/completion_tokens_details/reasoning_tokens",
            "/usage/completion_tokens",
        ),
        Under::Provider,
    ),
    (
        "prediction_tokens<=completion_tokens",
        PartsAtMost(
            &[
                "/usage/completion_tokens_details/accepted_prediction_tokens",
                "/usage/completion_tokens_details/rejected_prediction_tokens",
            ],
            "/usage/completion_tokens",
        ),
        Under::Provider,
    ),
    (
        "completion_tokens_details.audio_tokens<=completion_tokens",
        AtMost(
            "/usage/completion_tokens_details/audio_tokens",
            "/usage/completion_tokens",
        ),
        Under::Both,
    ),
    (
        "completion_tokens_details.text_tokens<=completion_tokens",
        AtMost(
            "/usage/completion_tokens_details/text_tokens",
            "/usage/completion_tokens",
        ),
        Under::Provider,
    ),
];

/// A response object (`types/responses/response_usage.py`): the total is
/// input and output, cached and cache-written tokens of the input,
/// reasoning of the output (not under xAI's convention).
const RESPONSES_RELATIONS: Relations = &[
    (
        "total_tokens=input_tokens+output_tokens",
        Sum(
            "/usage/total_tokens",
            &["/usage/input_tokens", "/usage/output_tokens"],
            &[],
        ),
        Under::Provider,
    ),
    (
        "cached_tokens<=input_tokens",
        AtMost(
            "/usage/input_tokens_details/cached_tokens",
            "/usage/input_tokens",
        ),
        Under::Both,
    ),
    (
        "cache_write_tokens<=input_tokens",
        AtMost(
            "/usage/input_tokens_details/cache_write_tokens",
            "/usage/input_tokens",
        ),
        Under::Both,
    ),
    (
        "reasoning_tokens<=output_tokens",
        AtMost(
            "/usage/output_tokens_details/reasoning_tokens",
            "/usage/output_tokens",
        ),
        Under::Provider,
    ),
];

/// A message's `usage`, whole, in `message_start` and in `message_delta`
/// (anthropic-sdk-python `types/usage.py`, `output_tokens_details.py`):
/// the TTL parts of `cache_creation` together are at most
/// `cache_creation_input_tokens`; thinking is of the output. No cache
/// figure is of `input_tokens`, which counts the uncached input only.
const ANTHROPIC_RELATIONS: Relations = &[
    (
        "cache_creation<=cache_creation_input_tokens",
        PartsAtMost(
            &[
                "/usage/cache_creation/ephemeral_5m_input_tokens",
                "/usage/cache_creation/ephemeral_1h_input_tokens",
            ],
            "/usage/cache_creation_input_tokens",
        ),
        Under::Both,
    ),
    (
        "thinking_tokens<=output_tokens",
        AtMost(
            "/usage/output_tokens_details/thinking_tokens",
            "/usage/output_tokens",
        ),
        Under::Both,
    ),
];

/// google-genai's `GenerateContentResponseUsageMetadata`: the total is the
/// prompt, candidates, tool-use prompt and thoughts (proto3 JSON leaves a
/// zero out: an absent term is none); cached content is of the prompt.
const GEMINI_RELATIONS: Relations = &[
    (
        "totalTokenCount=prompt+candidates+toolUsePrompt+thoughts",
        Sum(
            "/usageMetadata/totalTokenCount",
            &["/usageMetadata/promptTokenCount"],
            &[
                "/usageMetadata/candidatesTokenCount",
                "/usageMetadata/toolUsePromptTokenCount",
                "/usageMetadata/thoughtsTokenCount",
            ],
        ),
        Under::Both,
    ),
    (
        "cachedContentTokenCount<=promptTokenCount",
        AtMost(
            "/usageMetadata/cachedContentTokenCount",
            "/usageMetadata/promptTokenCount",
        ),
        Under::Both,
    ),
];

/// botocore's `TokenUsage`: the total is "the total of input tokens and
/// tokens generated"; cache reads and writes are outside `inputTokens`, and
/// whether the total holds them is not said: at least input and output.
const CONVERSE_RELATIONS: Relations = &[(
    "totalTokens>=inputTokens+outputTokens",
    AtLeast(
        "/usage/totalTokens",
        &["/usage/inputTokens", "/usage/outputTokens"],
    ),
    Under::Both,
)];

/// A stream's running totals, by table: each event restates the count so
/// far, so a later one below the last sound earlier one is nulled in the
/// later event (`message_start`'s counts are no floor for a delta's).
const GEMINI_RUNNING: &[&str] = &[
    "/usageMetadata/promptTokenCount",
    "/usageMetadata/candidatesTokenCount",
    "/usageMetadata/totalTokenCount",
    "/usageMetadata/thoughtsTokenCount",
    "/usageMetadata/cachedContentTokenCount",
    "/usageMetadata/toolUsePromptTokenCount",
];
const ANTHROPIC_DELTA_RUNNING: &[&str] = &[
    "/usage/input_tokens",
    "/usage/output_tokens",
    "/usage/cache_creation_input_tokens",
    "/usage/cache_read_input_tokens",
];
/// The relation a falling running total breaks.
const RUNNING_TOTAL: &str = "running_total_never_falls";

/// Routes beside the one per dialect, each with a `relations` convention:
/// (route, dialect, convention). A fixture whose `route.toml` is
/// `relations = "<name>"` runs on the route of its dialect that sets it.
const CONVENTION_ROUTES: [(&str, &str, &str, Convention); 1] =
    [("openai-xai", "openai", "xai", Convention::Xai)];

/// The convention a case's route judges by.
fn convention(case: &Case) -> Convention {
    CONVENTION_ROUTES
        .iter()
        .find(|(route, ..)| *route == case.route)
        .map_or(Convention::Provider, |(.., convention)| *convention)
}

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
    /// `POST /v1/responses`, whole or streamed.
    Responses,
    /// Bedrock `POST /model/{id}/converse`.
    Converse,
    /// Bedrock `POST /model/{id}/converse-stream`: the event stream.
    ConverseStream,
    /// Bedrock `POST /model/{id}/invoke-with-response-stream` on an
    /// Anthropic model: the event stream, each `chunk`'s base64 `bytes`
    /// one Messages stream event.
    InvokeStream,
    /// A stored response: `POST /v1/responses/{id}/cancel` (and `GET
    /// /v1/responses/{id}`, which `tests/it/responses.rs` drives).
    ResponsesStored,
    /// Cohere `POST /v2/chat`, whole or streamed.
    CohereChat,
}

/// The events of a Responses stream that carry a response object, and
/// those of them that end it.
const CARRY_RESPONSE: [&str; 6] = [
    "response.created",
    "response.in_progress",
    "response.queued",
    "response.completed",
    "response.incomplete",
    "response.failed",
];
const TERMINAL: [&str; 3] = [
    "response.completed",
    "response.incomplete",
    "response.failed",
];

/// Every endpoint probity checks; any other passes unchecked.
const ENDPOINTS: [(&str, &str, Api); 21] = [
    ("openai", "/v1/chat/completions", Api::Chat),
    ("openai", "/v1/responses", Api::Responses),
    (
        "openai",
        "/v1/responses/resp_68f0c2a1b3d4e5f60718293a4b5c6d7e/cancel",
        Api::ResponsesStored,
    ),
    ("openai", "/v1/completions", Api::Completions),
    // Checked as openai, Azure's filter chunks apart.
    ("azure", "/openai/deployments/gpt-4o/chat/completions", Api::Chat),
    ("ollama", "/api/chat", Api::OllamaChat),
    ("ollama", "/api/generate", Api::OllamaGenerate),
    // Checked as openai.
    ("ollama", "/v1/chat/completions", Api::Chat),
    ("anthropic", "/v1/messages", Api::Messages),
    ("cohere", "/v2/chat", Api::CohereChat),
    (
        "gemini",
        "/v1beta/models/gemini-2.5-flash:generateContent",
        Api::GeminiGenerate,
    ),
    (
        "gemini",
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
        Api::GeminiStream,
    ),
    (
        "bedrock",
        "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse",
        Api::Converse,
    ),
    (
        "bedrock",
        "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream",
        Api::ConverseStream,
    ),
    // An Anthropic model through InvokeModel: a Messages body, judged as
    // the anthropic dialect judges Messages (a cross-region profile id).
    (
        "bedrock",
        "/model/us.anthropic.claude-3-5-haiku-20241022-v1%3A0/invoke",
        Api::Messages,
    ),
    // Vertex AI: each publisher's model judged as its maker's API.
    (
        "vertex",
        "/v1/projects/my-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict",
        Api::Messages,
    ),
    (
        "vertex",
        "/v1/projects/my-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict",
        Api::Messages,
    ),
    (
        "vertex",
        "/v1/projects/my-project/locations/us-east5/publishers/google/models/gemini-2.5-flash:generateContent",
        Api::GeminiGenerate,
    ),
    (
        "vertex",
        "/v1/projects/my-project/locations/us-east5/publishers/google/models/gemini-2.5-flash:streamGenerateContent",
        Api::GeminiStream,
    ),
    (
        "vertex",
        "/v1/projects/my-project/locations/us-east5/endpoints/openapi/chat/completions",
        Api::Chat,
    ),
    (
        "bedrock",
        "/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke-with-response-stream",
        Api::InvokeStream,
    ),
];

/// How a Vertex endpoint answers: Claude whole at `:rawPredict` and
/// streamed at `:streamRawPredict` (as AnthropicVertex calls them), Gemini
/// streamed at `:streamGenerateContent` (with `alt=sse`, as google-genai
/// calls it), the OpenAI-compatible chat both ways.
fn vertex_ways(endpoint: &str) -> &'static [bool] {
    if endpoint.ends_with(":rawPredict") {
        &[false]
    } else if endpoint.ends_with(":streamRawPredict")
        || endpoint.ends_with(":streamGenerateContent")
    {
        &[true]
    } else {
        &[false, true]
    }
}

fn api(dialect: &str, endpoint: &str) -> Option<Api> {
    ENDPOINTS
        .iter()
        .find(|(d, e, _)| *d == dialect && *e == endpoint)
        .map(|(_, _, api)| *api)
}

fn table(api: Api) -> Figures {
    match api {
        Api::CohereChat => COHERE_CHAT,
        Api::Chat | Api::Completions => OPENAI,
        Api::OllamaChat | Api::OllamaGenerate => OLLAMA,
        Api::Messages | Api::InvokeStream => ANTHROPIC,
        Api::GeminiGenerate | Api::GeminiStream => GEMINI,
        Api::Responses | Api::ResponsesStored => RESPONSES,
        Api::Converse | Api::ConverseStream => CONVERSE,
    }
}

/// The relations an endpoint's figures are judged by (Ollama defines none).
fn relations(api: Api) -> Relations {
    match api {
        // Cohere defines none between its usage figures.
        Api::CohereChat => &[],
        Api::Chat | Api::Completions => OPENAI_RELATIONS,
        Api::OllamaChat | Api::OllamaGenerate => &[],
        Api::Messages | Api::InvokeStream => ANTHROPIC_RELATIONS,
        Api::GeminiGenerate | Api::GeminiStream => GEMINI_RELATIONS,
        Api::Responses | Api::ResponsesStored => RESPONSES_RELATIONS,
        Api::Converse | Api::ConverseStream => CONVERSE_RELATIONS,
    }
}

/// The tables an endpoint's figures are read by (for its metric labels, in
/// this order), each with the event that holds it in a stream: an Anthropic
/// `message_start` holds the message table, `message_delta` the delta table.
fn stream_tables(api: Api) -> Vec<(&'static str, Figures)> {
    match api {
        Api::CohereChat => vec![("", COHERE_CHAT_STREAM)],
        Api::Messages => vec![(" message_start", ANTHROPIC), ("", ANTHROPIC_DELTA)],
        Api::InvokeStream => vec![
            (" message_start", ANTHROPIC),
            ("", ANTHROPIC_DELTA),
            ("", INVOCATION_METRICS),
        ],
        other => vec![("", table(other))],
    }
}

fn framing(api: Api) -> Framing {
    match api {
        Api::OllamaChat | Api::OllamaGenerate => Framing::Ndjson,
        Api::ConverseStream | Api::InvokeStream => Framing::EventStream,
        _ => Framing::Sse,
    }
}

/// The metric label of a listed pointer (`None`: a collapsed record). The
/// `/message` of an Anthropic `message_start` is not part of the label.
fn label_of(api: Api, pointer: &str) -> Option<&'static str> {
    let tables = stream_tables(api);
    let candidates = [
        Some(pointer),
        pointer.strip_prefix("/message"),
        pointer.strip_prefix("/response"),
    ];
    candidates.into_iter().flatten().find_map(|pointer| {
        tables
            .iter()
            .find_map(|(_, table)| figure_of(table, pointer))
            // A whole answer's, where no stream table holds it (Cohere's).
            .or_else(|| figure_of(table(api), pointer))
    })
}

// ---------------------------------------------------------------- cases

type Case = support::conformance::Case<Expect>;

fn api_of(case: &Case) -> Option<Api> {
    api(&case.dialect, &case.endpoint)
}

/// The malformed pointers that name a figure (not a collapsed record, not
/// a contradicted one), as labels.
fn labels(case: &Case) -> Vec<String> {
    let Some(api) = api_of(case) else {
        return Vec::new();
    };
    malformed_pointers(&case.expect)
        .iter()
        .filter_map(|p| label_of(api, p))
        .map(str::to_owned)
        .collect()
}

fn load(dialect: &str) -> Vec<Case> {
    load_fixtures(dialect, |name| name.starts_with("gen_"))
        .iter()
        .map(|fixture| {
            // Stated tokens and relations are the expectation; otherwise
            // the rule's (the offline check holds both to the rule).
            let mut case = figure_case(fixture);
            if !fixture.route.is_empty() {
                case.route = convention_route(fixture);
            }
            let rule = verdict(&case);
            case.expect.tokens = case.expect.tokens.or(rule.tokens);
            case.expect.broken_end = rule.broken_end;
            case.expect.contradicted = rule.contradicted;
            if case.expect.relations.is_empty() {
                case.expect.relations = rule.relations;
            }
            case
        })
        .collect()
}

/// The route a fixture's `route.toml` names by its one setting.
fn convention_route(fixture: &Fixture) -> String {
    CONVENTION_ROUTES
        .iter()
        .find(|(_, dialect, name, _)| {
            *dialect == fixture.folder && fixture.route.trim() == format!("relations = \"{name}\"")
        })
        .map(|(route, ..)| route.to_string())
        .unwrap_or_else(|| {
            panic!(
                "{}: route.toml {:?} is no convention route",
                fixture.id(),
                fixture.route
            )
        })
}

// ---------------------------------------------------------------- the rule

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
        Api::CohereChat => cohere_chat_payload(root)?,
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
        Api::Responses | Api::ResponsesStored => response_payload(root)?,
        Api::Converse => converse_payload(root)?,
        Api::ConverseStream | Api::InvokeStream => {
            unreachable!(
                "converse-stream's and invoke-with-response-stream's 2xx answers are event streams"
            )
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

/// A Converse answer: `output.message` an object whose `content` is an
/// array of objects of one member each (`text` a string; `toolUse` an
/// object whose `input` is an object), `role` `assistant`, `stopReason` a
/// string.
fn converse_payload(root: &serde_json::Map<String, Value>) -> Result<(), &'static str> {
    let message = root
        .get("output")
        .and_then(|o| o.get("message"))
        .and_then(Value::as_object)
        .ok_or("payload_missing")?;
    let content = message
        .get("content")
        .and_then(Value::as_array)
        .ok_or("payload_missing")?;
    for block in content {
        let block = block.as_object().ok_or("content_block_invalid")?;
        if block.len() != 1 {
            return Err("content_block_invalid");
        }
        if block.get("text").is_some_and(|t| !t.is_string()) {
            return Err("content_block_invalid");
        }
        if let Some(tool) = block.get("toolUse") {
            let tool = tool.as_object().ok_or("content_block_invalid")?;
            if !tool.get("input").is_some_and(Value::is_object) {
                return Err("tool_arguments_type");
            }
        }
    }
    if message.get("role").and_then(Value::as_str) != Some("assistant") {
        return Err("role_invalid");
    }
    if !root.get("stopReason").is_some_and(Value::is_string) {
        return Err("payload_missing");
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

/// A response object: `object` `"response"` when present, `status` (when
/// present) a documented one, `output` an array of items each with a
/// string `type`, checked by [`response_item`].
fn response_payload(root: &serde_json::Map<String, Value>) -> Result<(), &'static str> {
    let present = |key: &str| root.get(key).filter(|v| !v.is_null());
    if present("object").is_some_and(|o| o != "response") {
        return Err("response_object_invalid");
    }
    let statuses = [
        "completed",
        "incomplete",
        "failed",
        "in_progress",
        "queued",
        "cancelled",
    ];
    if let Some(status) = present("status") {
        if !status.as_str().is_some_and(|s| statuses.contains(&s)) {
            return Err("response_status_invalid");
        }
    }
    let output = present("output")
        .and_then(Value::as_array)
        .ok_or("payload_missing")?;
    output.iter().try_for_each(response_item)
}

/// An output item: a `message`'s `content` parts each with a string
/// `type`, an `output_text` part's `text` a string; a `function_call`'s
/// `name`, `call_id` and `arguments` strings.
fn response_item(item: &Value) -> Result<(), &'static str> {
    let kind = item
        .get("type")
        .and_then(Value::as_str)
        .filter(|_| item.is_object())
        .ok_or("response_item_invalid")?;
    match kind {
        "message" => {
            let parts = item
                .get("content")
                .and_then(Value::as_array)
                .ok_or("response_content_invalid")?;
            for part in parts {
                let sound = match part.get("type").and_then(Value::as_str) {
                    Some("output_text") => part.get("text").is_some_and(Value::is_string),
                    Some(_) => part.is_object(),
                    None => false,
                };
                if !sound {
                    return Err("response_content_invalid");
                }
            }
            Ok(())
        }
        "function_call" => {
            let strings = ["name", "call_id", "arguments"];
            match strings
                .iter()
                .all(|k| item.get(*k).is_some_and(Value::is_string))
            {
                true => Ok(()),
                false => Err("response_function_call_invalid"),
            }
        }
        _ => Ok(()),
    }
}

/// A Cohere chat answer: `message` an object whose `role` is `assistant`,
/// whose `content` (when present) is an array of objects with a string
/// `type`, whose tool calls' `function.arguments` are strings.
fn cohere_chat_payload(root: &serde_json::Map<String, Value>) -> Result<(), &'static str> {
    let message = root
        .get("message")
        .and_then(Value::as_object)
        .ok_or("payload_missing")?;
    if message.get("role").and_then(Value::as_str) != Some("assistant") {
        return Err("role_invalid");
    }
    match message.get("content") {
        None | Some(Value::Null) => {}
        Some(Value::Array(blocks)) => {
            if !blocks
                .iter()
                .all(|b| b.get("type").is_some_and(Value::is_string))
            {
                return Err("content_block_invalid");
            }
        }
        Some(_) => return Err("content_block_invalid"),
    }
    let calls = message.get("tool_calls").and_then(Value::as_array);
    for call in calls.into_iter().flatten() {
        let arguments = &call["function"]["arguments"];
        if !(arguments.is_null() || arguments.is_string()) {
            return Err("tool_arguments_type");
        }
    }
    Ok(())
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
        tokens: Some(BTreeMap::new()),
        broken_end: None,
        uninspected: None,
        contradicted: Vec::new(),
        relations: Vec::new(),
    };
    let Some(api) = api_of(case) else {
        return pass();
    };
    if !(200..300).contains(&case.status) {
        return pass();
    }
    let request: Value = serde_json::from_slice(&case.request).expect("request.json is JSON");
    let convention = convention(case);
    match case.framing {
        Framing::Whole => whole_verdict(api, &request, &case.body, convention),
        framing => stream_verdict(
            &case.dialect,
            api,
            framing,
            &request,
            &case.body,
            convention,
        ),
    }
}

fn whole_verdict(api: Api, request: &Value, body: &[u8], convention: Convention) -> Expect {
    let rejected = |invariant: &str| Expect {
        outcome: Outcome::Rejected,
        invariant: Some(invariant.to_string()),
        pointers: Vec::new(),
        client: None,
        tokens: Some(BTreeMap::new()),
        broken_end: None,
        uninspected: None,
        contradicted: Vec::new(),
        relations: Vec::new(),
    };
    let Ok(root) = serde_json::from_slice::<Value>(body) else {
        return rejected("invalid_json");
    };
    if let Err(invariant) = payload(api, request, &root) {
        return rejected(invariant);
    }
    let judged = judge(body, "", table(api), relations(api), convention);
    Expect {
        outcome: if judged.pointers.is_empty() {
            Outcome::Pass
        } else {
            Outcome::Normalized
        },
        invariant: None,
        pointers: judged.pointers,
        client: Some(judged.text),
        tokens: Some(
            judged
                .tokens
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        ),
        broken_end: None,
        uninspected: None,
        contradicted: judged.contradicted,
        relations: judged.relations.iter().map(|r| r.to_string()).collect(),
    }
}

// ---------------------------------------------------------------- streams

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
    relations: Relations,
    /// The table's running totals.
    running: &'static [&'static str],
    /// A Bedrock `chunk`'s decoded `bytes`, when the figures sit in them
    /// (`data` is then a range of these).
    decoded: Option<Vec<u8>>,
}

/// The state of one stream as the rule reads it.
struct StreamRule {
    api: Api,
    /// Whether Azure's filter chunks are known (the `azure` dialect).
    filter_chunks: bool,
    choices: u64,
    done: bool,
    blocks: Vec<u64>,
    /// A Responses stream's last delivered `sequence_number`.
    sequence: Option<u64>,
}

enum EventVerdict {
    /// Passes as it came, unjudged or without figures.
    Untouched,
    /// The upstream's own error event: passes as it came, counted.
    UpstreamError,
    /// Its figures are judged.
    Figures(Judging),
    Broken(&'static str),
}

impl StreamRule {
    fn new(dialect: &str, api: Api, request: &Value) -> Self {
        Self {
            api,
            filter_chunks: dialect == "azure",
            choices: choices_asked(api, request),
            done: false,
            blocks: Vec::new(),
            sequence: None,
        }
    }

    fn event(&mut self, raw: &[u8]) -> EventVerdict {
        use EventVerdict::*;
        match self.api {
            Api::CohereChat => self.cohere_event(raw),
            Api::Converse => {
                unreachable!("Converse answers whole: converse-stream is its own endpoint")
            }
            Api::ConverseStream => self.converse_event(raw),
            Api::InvokeStream => self.invoke_event(raw),
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
                    return UpstreamError;
                }
                if let Err(invariant) = ollama_line(self.api, &object) {
                    return Broken(invariant);
                }
                self.done = object["done"] == true;
                Figures(Judging {
                    data: 0..end,
                    prefix: "",
                    table: OLLAMA,
                    relations: &[],
                    running: &[],
                    decoded: None,
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
                    return UpstreamError;
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
                let table = match self.filter_chunks && azure_filter_chunk(&chunk) {
                    true => AZURE_FILTER_CHUNK,
                    false => OPENAI,
                };
                self.figures(event.data_range, "", table, OPENAI_RELATIONS, &[])
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
                    return UpstreamError;
                }
                if let Err(invariant) = gemini_candidates(&chunk, self.choices) {
                    return Broken(invariant);
                }
                self.figures(
                    event.data_range,
                    "",
                    GEMINI,
                    GEMINI_RELATIONS,
                    GEMINI_RUNNING,
                )
            }
            Api::Responses | Api::ResponsesStored => self.responses_event(raw),
            Api::Messages => {
                let event = parse_sse(raw);
                let Some(data) = event.data else {
                    return Untouched;
                };
                let name = event.name.unwrap_or_default();
                if name == "error" {
                    return UpstreamError;
                }
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
                        self.figures(
                            event.data_range,
                            "/message",
                            ANTHROPIC,
                            ANTHROPIC_RELATIONS,
                            &[],
                        )
                    }
                    "message_delta" => self.figures(
                        event.data_range,
                        "",
                        ANTHROPIC_DELTA,
                        ANTHROPIC_RELATIONS,
                        ANTHROPIC_DELTA_RUNNING,
                    ),
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

    /// A Responses event, by its data's `type`: `sequence_number` (when
    /// present) a count above the last delivered one; a response object in
    /// the events that carry one, its figures under `/response`; an output
    /// item sound in `output_item.added` / `.done`; nothing after a
    /// terminal event; every other type (`error` too) passes.
    fn responses_event(&mut self, raw: &[u8]) -> EventVerdict {
        use EventVerdict::*;
        let event = parse_sse(raw);
        let Some(data) = event.data else {
            return Untouched;
        };
        if self.done {
            return Broken("stream_after_done");
        }
        let Some(body) = json_object(&data) else {
            return Broken("invalid_json");
        };
        let Some(kind) = body.get("type").and_then(Value::as_str) else {
            return Broken("response_event_invalid");
        };
        let number = match body.get("sequence_number").filter(|v| !v.is_null()) {
            None => None,
            Some(n) => match n.as_u64() {
                Some(n) if self.sequence.is_none_or(|last| n > last) => Some(n),
                _ => return Broken("response_sequence_invalid"),
            },
        };
        let verdict = if kind == "error" {
            UpstreamError
        } else if CARRY_RESPONSE.contains(&kind) {
            let Some(response) = body.get("response").and_then(Value::as_object) else {
                return Broken("response_event_invalid");
            };
            if let Err(invariant) = response_payload(response) {
                return Broken(invariant);
            }
            self.done = TERMINAL.contains(&kind);
            self.figures(
                event.data_range,
                "/response",
                RESPONSES,
                RESPONSES_RELATIONS,
                &[],
            )
        } else if kind.starts_with("response.output_item.") {
            match response_item(&body["item"]) {
                Ok(()) => Untouched,
                Err(invariant) => return Broken(invariant),
            }
        } else {
            Untouched
        };
        self.sequence = number.or(self.sequence);
        verdict
    }

    /// A Converse stream's frame, by its `:event-type`: a frame that
    /// cannot be read breaks the stream; an exception frame passes (the SDK
    /// raises it); `contentBlockStart` and `contentBlockDelta` carry a
    /// `contentBlockIndex` count, a tool-input delta's `input` is a string;
    /// `messageStop` a string `stopReason`; `metadata` holds the figures;
    /// every other type passes.
    fn converse_event(&mut self, raw: &[u8]) -> EventVerdict {
        use EventVerdict::*;
        let Some((headers, payload)) = eventstream::read(raw) else {
            return Broken("event_stream_invalid");
        };
        let header = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        if header(":message-type") == Some("exception") {
            return UpstreamError;
        }
        let name = header(":event-type").unwrap_or_default();
        let known = [
            "contentBlockStart",
            "contentBlockDelta",
            "messageStop",
            "metadata",
        ];
        if !known.contains(&name) {
            return Untouched; // messageStart, contentBlockStop, new types
        }
        let Some(body) = json_object(&payload) else {
            return Broken("invalid_json");
        };
        let indexed = body
            .get("contentBlockIndex")
            .and_then(Value::as_u64)
            .is_some();
        match name {
            "contentBlockStart" if !indexed => Broken("content_block_invalid"),
            "contentBlockDelta" if !indexed => Broken("content_block_invalid"),
            "contentBlockDelta" => match &body["delta"]["toolUse"] {
                Value::Object(tool) if !tool.get("input").is_some_and(Value::is_string) => {
                    Broken("tool_arguments_type")
                }
                _ => Untouched,
            },
            "messageStop" if !body.get("stopReason").is_some_and(Value::is_string) => {
                Broken("payload_missing")
            }
            "metadata" => self.figures(
                eventstream::payload_range(raw),
                "",
                CONVERSE,
                CONVERSE_RELATIONS,
                &[],
            ),
            _ => Untouched,
        }
    }

    /// An `invoke-with-response-stream` frame: one that cannot be read
    /// breaks the stream, an exception frame passes (the SDK raises it),
    /// and so does every type but `chunk`. A chunk's payload is an object
    /// with a string `bytes` of padded base64, decoded one Messages stream
    /// event, judged as a Messages stream's event named by its `type`; an
    /// event that passes so (the last, `message_stop`) may hold Bedrock's
    /// invocation metrics.
    fn invoke_event(&mut self, raw: &[u8]) -> EventVerdict {
        use EventVerdict::*;
        let Some((headers, payload)) = eventstream::read(raw) else {
            return Broken("event_stream_invalid");
        };
        let header = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        if header(":message-type") == Some("exception") {
            return UpstreamError;
        }
        if header(":event-type") != Some("chunk") {
            return Untouched;
        }
        let Some(chunk) = json_object(&payload) else {
            return Broken("invalid_json");
        };
        let Some(bytes) = chunk.get("bytes").and_then(Value::as_str) else {
            return Broken("payload_missing");
        };
        let Some(decoded) = eventstream::unbase64(bytes) else {
            return Broken("event_stream_invalid");
        };
        let Some(body) = json_object(&decoded) else {
            return Broken("invalid_json");
        };
        // The event as the Messages rule reads it off SSE.
        let name = body.get("type").and_then(Value::as_str).unwrap_or_default();
        let head = format!("event: {name}\ndata: ");
        let mut sse = head.clone().into_bytes();
        sse.extend_from_slice(&decoded);
        sse.extend_from_slice(b"\n\n");
        self.api = Api::Messages;
        let verdict = self.event(&sse);
        self.api = Api::InvokeStream;
        match verdict {
            Figures(mut judging) => {
                judging.data = judging.data.start - head.len()..judging.data.end - head.len();
                judging.decoded = Some(decoded);
                Figures(judging)
            }
            Untouched if body.contains_key("amazon-bedrock-invocationMetrics") => {
                Figures(Judging {
                    data: 0..decoded.len(),
                    prefix: "",
                    table: INVOCATION_METRICS,
                    relations: &[],
                    running: &[],
                    decoded: Some(decoded),
                })
            }
            other => other,
        }
    }

    /// A Cohere chat event, by its `event:` name (else its data's
    /// `type`): `message-start` holds the id, `message-end` the usage
    /// under `/delta`; a `content-delta` or `content-end` names a block a
    /// `content-start` began; a tool call's `function.arguments` is a
    /// string; every other type (`tool-plan-delta`, `citation-*`, `debug`)
    /// passes.
    fn cohere_event(&mut self, raw: &[u8]) -> EventVerdict {
        use EventVerdict::*;
        let event = parse_sse(raw);
        let Some(data) = event.data else {
            return Untouched;
        };
        // The terminator both SDKs stop at.
        if data.trim_ascii() == b"[DONE]" {
            return Untouched;
        }
        let Some(body) = json_object(&data) else {
            return Broken("invalid_json");
        };
        let name = event
            .name
            .or_else(|| body.get("type").and_then(Value::as_str).map(str::to_string))
            .unwrap_or_default();
        let index = body.get("index").and_then(Value::as_u64);
        match name.as_str() {
            "message-start" => self.figures(event.data_range, "", COHERE_CHAT_START, &[], &[]),
            "message-end" => self.figures(event.data_range, "", COHERE_CHAT_END, &[], &[]),
            "content-start" => match index {
                Some(index) => {
                    self.blocks.push(index);
                    Untouched
                }
                None => Broken("content_block_invalid"),
            },
            "content-delta" | "content-end" => match index {
                Some(index) if self.blocks.contains(&index) => Untouched,
                _ => Broken("content_block_invalid"),
            },
            "tool-call-start" | "tool-call-delta" => {
                let arguments = &body.get("delta").map_or(&Value::Null, |d| {
                    &d["message"]["tool_calls"]["function"]["arguments"]
                });
                if arguments.is_null() || arguments.is_string() {
                    Untouched
                } else {
                    Broken("tool_arguments_type")
                }
            }
            _ => Untouched,
        }
    }

    fn figures(
        &self,
        data: Option<Range<usize>>,
        prefix: &'static str,
        table: Figures,
        relations: Relations,
        running: &'static [&'static str],
    ) -> EventVerdict {
        match data {
            Some(data) => EventVerdict::Figures(Judging {
                data,
                prefix,
                table,
                relations,
                running,
                decoded: None,
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
fn error_template(dialect: &str, api: Api, invariant: &str, delivered: &[u8]) -> Vec<u8> {
    let object = format!(
        r#"{{"type":"provider_invalid_response","code":"{invariant}","message":"<message>","route":"{dialect}","request_id":"<request_id>"}}"#
    );
    if matches!(api, Api::ConverseStream | Api::InvokeStream) {
        // An exception frame of a type the SDKs raise, the object its payload.
        return eventstream::exception("modelStreamErrorException", &object);
    }
    let text = match api {
        // Cohere's own failed generation: `message-end`, `finish_reason`
        // `ERROR`, the reason in `delta.error`.
        Api::CohereChat => {
            format!(
                r#"event: message-end
data: {{"type":"message-end","delta":{{"finish_reason":"ERROR","error":"provider_invalid_response: <message>"}},"error":{object}}}"#
            ) + "\n\n"
        }
        Api::Converse | Api::ConverseStream | Api::InvokeStream => {
            unreachable!("Converse answers whole, the event streams end in an exception")
        }
        Api::Chat | Api::Completions => format!("data: {{\"error\":{object}}}\n\n"),
        Api::Messages => {
            format!("event: error\ndata: {{\"type\":\"error\",\"error\":{object}}}\n\n")
        }
        // The Responses API's own error event, numbered after the last
        // event delivered, the usual object under `error`.
        Api::Responses | Api::ResponsesStored => {
            let next = next_sequence(delivered);
            format!(
                r#"event: error
data: {{"type":"error","code":"provider_invalid_response","message":"<message>","param":"{invariant}","sequence_number":{next},"error":{object}}}"#
            ) + "\n\n"
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
    };
    text.into_bytes()
}

/// The `sequence_number` after the highest one in the events delivered.
fn next_sequence(delivered: &[u8]) -> u64 {
    split_events(Framing::Sse, delivered)
        .into_iter()
        .filter_map(|range| parse_sse(&delivered[range]).data)
        .filter_map(|data| json_object(&data)?.get("sequence_number")?.as_u64())
        .max()
        .map_or(0, |n| n + 1)
}

fn stream_verdict(
    dialect: &str,
    api: Api,
    framing: Framing,
    request: &Value,
    body: &[u8],
    convention: Convention,
) -> Expect {
    let mut rule = StreamRule::new(dialect, api, request);
    let mut client = Vec::new();
    let mut pointers = Vec::new();
    let mut tokens = BTreeMap::new();
    let mut contradicted = Vec::new();
    let mut breached: Vec<String> = Vec::new();
    // The last sound value of each running total, by table pointer.
    let mut running: BTreeMap<&str, u128> = BTreeMap::new();
    // Every event is judged, an unterminated last one too.
    for range in split_events(framing, body) {
        let end = range.end;
        let raw = &body[range];
        match rule.event(raw) {
            EventVerdict::Untouched | EventVerdict::UpstreamError => client.extend_from_slice(raw),
            EventVerdict::Broken(invariant) => {
                let template = error_template(dialect, api, invariant, &client);
                client.extend_from_slice(&template);
                return Expect {
                    outcome: Outcome::Rejected,
                    invariant: Some(invariant.to_string()),
                    pointers,
                    client: Some(client),
                    tokens: Some(tokens),
                    broken_end: Some(end),
                    uninspected: None,
                    contradicted,
                    relations: breached,
                };
            }
            EventVerdict::Figures(judging) => {
                let data = match &judging.decoded {
                    Some(decoded) => &decoded[judging.data.clone()],
                    None => &raw[judging.data.clone()],
                };
                let mut judged = judge(
                    data,
                    judging.prefix,
                    judging.table,
                    judging.relations,
                    convention,
                );
                // Then its running totals against the events before: one
                // that falls is nulled and listed, not counted; its record
                // keeps its object even when nothing sound is left in it (a
                // fall is judged after the event's own figures and records).
                let mut fell = false;
                for (pointer, value, span, kind) in std::mem::take(&mut judged.sound) {
                    let Some(figure) = pointer.strip_prefix(judging.prefix) else {
                        continue;
                    };
                    let Some(figure) = judging.running.iter().find(|f| **f == figure) else {
                        continue;
                    };
                    match running.get(figure) {
                        Some(last) if value < *last => {
                            fell = true;
                            judged.nulls.push(span);
                            judged.pointers.push(pointer.clone());
                            judged.contradicted.push(pointer);
                            if let Some(i) =
                                judged.tokens.iter().position(|(k, _)| Some(*k) == kind)
                            {
                                judged.tokens.remove(i);
                            }
                        }
                        _ => {
                            running.insert(figure, value);
                        }
                    }
                }
                if fell {
                    judged.relations.push(RUNNING_TOTAL);
                    judged.text = nulled(data, &judged.nulls);
                }
                for (kind, n) in &judged.tokens {
                    tokens.insert(kind.to_string(), *n);
                }
                contradicted.extend(judged.contradicted.iter().cloned());
                breached.extend(judged.relations.iter().map(|r| r.to_string()));
                if judged.pointers.is_empty() {
                    client.extend_from_slice(raw);
                    continue;
                }
                pointers.extend(judged.pointers.iter().cloned());
                // A chunk's event is encoded anew in its `bytes`, the rest
                // of its payload as it came, the frame around it anew.
                if judging.decoded.is_some() {
                    client.extend(eventstream::rechunked(raw, &judged.text).unwrap());
                    continue;
                }
                // A frame is written anew around its nulled payload: its
                // headers as they came, both CRCs computed again.
                if framing == Framing::EventStream {
                    client.extend(eventstream::reframed(raw, &judged.text).unwrap());
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
        tokens: Some(tokens),
        broken_end: None,
        uninspected: None,
        contradicted,
        relations: breached,
    }
}

/// Azure's filter chunk, as Azure's content filtering pages show it: an
/// empty `object`, and the prompt's filter results, or choices that hold
/// filter results or offsets and no `delta`.
fn azure_filter_chunk(chunk: &serde_json::Map<String, Value>) -> bool {
    if chunk.get("object") != Some(&Value::String(String::new())) {
        return false;
    }
    let present = |value: Option<&Value>| value.is_some_and(|v| !v.is_null());
    if present(chunk.get("prompt_filter_results")) {
        return true;
    }
    let choices = chunk.get("choices").and_then(Value::as_array);
    choices.is_some_and(|choices| {
        !choices.is_empty()
            && choices.iter().all(|choice| {
                choice.is_object()
                    && !present(choice.get("delta"))
                    && (present(choice.get("content_filter_results"))
                        || present(choice.get("content_filter_offsets")))
            })
    })
}

/// How many of the upstream's own error events the client gets (those
/// before a broken event), by the rule.
fn upstream_errors(case: &Case) -> usize {
    let Some(api) = api_of(case) else {
        return 0;
    };
    if !case.framing.streamed() || !(200..300).contains(&case.status) {
        return 0;
    }
    let request: Value = serde_json::from_slice(&case.request).unwrap();
    let mut rule = StreamRule::new(&case.dialect, api, &request);
    let mut errors = 0;
    for range in split_events(case.framing, &case.body) {
        match rule.event(&case.body[range]) {
            EventVerdict::UpstreamError => errors += 1,
            EventVerdict::Broken(_) => break,
            _ => {}
        }
    }
    errors
}

// ---------------------------------------------------------------- mutations

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
    /// An event-stream frame's range in the body: its payload is edited
    /// alone and the frame written anew around it (lengths, CRCs).
    frame: Option<Range<usize>>,
    /// Whether the text is a Bedrock `chunk`'s decoded `bytes`, encoded
    /// anew in the frame once edited.
    chunk: bool,
}

impl Site {
    /// The case's body with `edit` made to this site.
    fn edited(&self, body: &[u8], edit: &Variant) -> Vec<u8> {
        let Some(frame) = &self.frame else {
            return edit.apply(body, self.offset);
        };
        let payload = edit.apply(&self.text, 0);
        let mut out = body[..frame.start].to_vec();
        let raw = &body[frame.clone()];
        out.extend(match self.chunk {
            true => eventstream::rechunked(raw, &payload).unwrap(),
            false => eventstream::reframed(raw, &payload).unwrap(),
        });
        out.extend_from_slice(&body[frame.end..]);
        out
    }
}

fn sites(case: &Case) -> Vec<Site> {
    let Some(api) = api_of(case) else {
        return Vec::new();
    };
    if !(200..300).contains(&case.status) {
        return Vec::new();
    }
    let framing = case.framing;
    if !framing.streamed() {
        if case.expect.outcome != Outcome::Pass {
            return Vec::new();
        }
        return vec![Site {
            what: String::new(),
            offset: 0,
            text: case.body.clone(),
            prefix: "",
            table: table(api),
            frame: None,
            chunk: false,
        }];
    }
    if case.expect.outcome == Outcome::Rejected {
        return Vec::new();
    }
    let request: Value = serde_json::from_slice(&case.request).unwrap();
    let mut rule = StreamRule::new(&case.dialect, api, &request);
    let mut out = Vec::new();
    for (n, range) in split_events(framing, &case.body).into_iter().enumerate() {
        let raw = &case.body[range.clone()];
        if let EventVerdict::Figures(judging) = rule.event(raw) {
            let name = match framing {
                Framing::Sse => parse_sse(raw).name,
                Framing::EventStream => eventstream::read(raw).and_then(|(headers, _)| {
                    headers
                        .into_iter()
                        .find(|(n, _)| n == ":event-type")
                        .map(|(_, v)| v)
                }),
                _ => None,
            };
            out.push(Site {
                what: format!(
                    "event {n}{} ",
                    name.map(|n| format!(" {n}")).unwrap_or_default()
                ),
                offset: range.start + judging.data.start,
                text: match &judging.decoded {
                    Some(decoded) => decoded[judging.data.clone()].to_vec(),
                    None => raw[judging.data.clone()].to_vec(),
                },
                prefix: judging.prefix,
                table: judging.table,
                frame: (framing == Framing::EventStream).then_some(range),
                chunk: judging.decoded.is_some(),
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
    let mut out: Vec<Case> = Vec::new();
    let how = if case.framing.streamed() {
        "stream"
    } else {
        "whole"
    };
    let scope = format!("{}{} {how}", case.dialect, case.endpoint);
    for (n, site) in sites(case).into_iter().enumerate() {
        let battery = Battery::Once {
            seen: &mut *seen,
            scope: &scope,
            site: n,
        };
        for edit in figure_variants(&site.text, site.prefix, site.table, battery) {
            let mut variant = Case {
                name: format!("{} [{}{}]", case.name, site.what, edit.what),
                key: format!("{}#{}", case.key, out.len()),
                body: site.edited(&case.body, &edit),
                writes: Vec::new(),
                pause: false,
                ..case.clone()
            };
            variant.expect = verdict(&variant);
            for pointer in &edit.malformed {
                assert!(
                    variant.expect.pointers.contains(pointer),
                    "{}: the rule must find {pointer} malformed",
                    variant.name
                );
            }
            out.push(variant);
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
    for event in split_events(case.framing, body) {
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

/// Whole answers checked by the shared pass, normalized and rejection
/// checks, streams by [`check_stream`]; malformed figures counted by label.
struct Generation;

impl Suite for Generation {
    type Expect = Expect;

    fn check(&self, case: &Case, got: &Got, id: &str, failed: &mut Vec<String>) {
        match case.framing.streamed() {
            true => check_stream(case, got, id, failed),
            false => check_figures(case, got, id, failed),
        }
    }

    fn capture(&self, case: &Case) -> Option<Capture> {
        case.expect.capture()
    }

    fn probes(&self, case: &Case) -> Vec<Probe> {
        let mut probes = figure_probes(case, &labels(case));
        let route = vec![("route", case.route.clone())];
        probes.push((UPSTREAM_STREAM_ERRORS, route, upstream_errors(case) as f64));
        probes
    }
}

/// A stream keeps its status and content type, carries no probity header
/// (they go out before the verdict), and its bytes are exactly the expected
/// ones; a broken one ends with one error event in its own format.
fn check_stream(case: &Case, got: &Got, id: &str, failed: &mut Vec<String>) {
    check_status(got, case.status, failed);
    check_content_type(got, case.content_type(), failed);
    no_probity_headers(got, failed);
    let want = case.expect.client.as_deref().unwrap_or_default();
    let Some(invariant) = &case.expect.invariant else {
        let body = match case.framing {
            Framing::Sse => without_verdict(&got.body),
            _ => got.body.to_vec(),
        };
        if let Some(diff) = stream_differ("the stream", case.framing, &body, want) {
            failed.push(diff);
        }
        return;
    };
    let api = api_of(case).unwrap();
    // The error event is the expected stream's last.
    let last = split_events(case.framing, want)
        .last()
        .map_or(0, |r| r.start);
    let template = error_template(&case.dialect, api, invariant, &want[..last]);
    let Some(before) = want.strip_suffix(template.as_slice()) else {
        let template = match case.framing {
            Framing::EventStream => eventstream::to_text(&template),
            _ => String::from_utf8_lossy(&template).into_owned(),
        };
        return failed.push(format!(
            "the expected stream does not end with {template:?}"
        ));
    };
    if !got.body.starts_with(before) {
        let cut = got.body.len().min(before.len());
        let what = "the stream before the error";
        if let Some(diff) = stream_differ(what, case.framing, &got.body[..cut], before) {
            failed.push(diff);
        }
        return;
    }
    if matches!(api, Api::ConverseStream | Api::InvokeStream) {
        return check_exception_frame(&got.body[before.len()..], &template, id, failed);
    }
    let template = String::from_utf8(template).unwrap();
    let rest = String::from_utf8_lossy(&got.body[before.len()..]).into_owned();
    let (head, tail) = match api {
        Api::CohereChat => ("event: message-end\ndata: ", "\n\n"),
        Api::Converse | Api::ConverseStream | Api::InvokeStream => {
            unreachable!("Converse answers whole, the event streams end in an exception")
        }
        Api::Chat | Api::Completions => ("data: ", "\n\n"),
        Api::GeminiGenerate | Api::GeminiStream => ("data: ", "\n\n"),
        Api::Messages | Api::Responses | Api::ResponsesStored => ("event: error\ndata: ", "\n\n"),
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

/// [`differ`] for a stream; an event stream's frames are shown as text.
fn stream_differ(what: &str, framing: Framing, got: &[u8], want: &[u8]) -> Option<String> {
    if framing != Framing::EventStream || got == want {
        return differ(what, got, want);
    }
    let (got, want) = (eventstream::to_text(got), eventstream::to_text(want));
    differ(what, got.as_bytes(), want.as_bytes())
        .or_else(|| Some(format!("{what}: the same frames, other bytes")))
}

/// What follows the last sound frame is one exception frame with the
/// template's headers, its payload the template's object.
fn check_exception_frame(rest: &[u8], template: &[u8], id: &str, failed: &mut Vec<String>) {
    let (want_headers, want_payload) = eventstream::read(template).unwrap();
    let want: Value = serde_json::from_slice(&want_payload).unwrap();
    let one = eventstream::split(rest).len() == 1;
    match eventstream::read(rest) {
        Some((headers, payload)) if one && headers == want_headers => {
            match serde_json::from_slice::<Value>(&payload) {
                Ok(got) if fits(&got, &want, id) => {}
                _ => failed.push(format!(
                    "the exception frame's payload {:?}, want one like {want}",
                    String::from_utf8_lossy(&payload)
                )),
            }
        }
        _ => failed.push(format!(
            "after the last sound frame: {:?}, want one exception frame {:?}",
            eventstream::to_text(rest),
            eventstream::to_text(template)
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
    case.framing.streamed()
}

/// One probity with a route per dialect and a short capture list (each
/// case reads it).
async fn run_cases(what: &str, cases: impl IntoIterator<Item = Case>) {
    let bench = Bench::start(Generation, |upstream| {
        let mut routes = dialect_routes(&DIALECTS, upstream);
        for (name, dialect, relations, _) in CONVENTION_ROUTES {
            let setting = format!("relations = \"{relations}\"");
            routes += &route(name, &format!("/{name}"), upstream, dialect, &setting);
        }
        config("", &format!("{routes}\n[capture]\nmax_entries = 4\n"))
    })
    .await;
    bench.run_all(what, cases).await;
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
async fn cohere_fixtures() {
    run_cases("cohere fixtures", load("cohere")).await;
}

#[tokio::test]
async fn cohere_figure_mutations() {
    run_cases("cohere figure mutations", all_mutations(load("cohere"))).await;
}

#[tokio::test]
async fn gemini_fixtures() {
    run_cases("gemini fixtures", load("gemini")).await;
}

#[tokio::test]
async fn vertex_fixtures() {
    run_cases("vertex fixtures", load("vertex")).await;
}

#[tokio::test]
async fn vertex_figure_mutations() {
    run_cases("vertex figure mutations", all_mutations(load("vertex"))).await;
}

#[tokio::test]
async fn bedrock_fixtures() {
    run_cases("bedrock fixtures", load("bedrock")).await;
}

#[tokio::test]
async fn azure_fixtures() {
    run_cases("azure fixtures", load("azure")).await;
}

#[tokio::test]
async fn azure_figure_mutations() {
    run_cases("azure figure mutations", all_mutations(load("azure"))).await;
}

#[tokio::test]
async fn bedrock_figure_mutations() {
    run_cases("bedrock figure mutations", all_mutations(load("bedrock"))).await;
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
        "bedrock/gen_converse_stream_rewritten_then_broken",
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
        (Api::CohereChat, false) => &[
            "invalid_json",
            "payload_missing",
            "role_invalid",
            "content_block_invalid",
            "tool_arguments_type",
        ],
        (Api::CohereChat, true) => &["invalid_json", "content_block_invalid"],
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
        (Api::Responses, false) => &[
            "invalid_json",
            "payload_missing",
            "response_object_invalid",
            "response_status_invalid",
            "response_item_invalid",
            "response_content_invalid",
            "response_function_call_invalid",
        ],
        (Api::Responses, true) => &[
            "invalid_json",
            "stream_after_done",
            "response_status_invalid",
            "response_item_invalid",
            "response_function_call_invalid",
            "response_sequence_invalid",
            "response_event_invalid",
        ],
        (Api::ResponsesStored, false) => &["response_status_invalid"],
        (Api::Converse, false) => &[
            "invalid_json",
            "payload_missing",
            "content_block_invalid",
            "role_invalid",
            "tool_arguments_type",
        ],
        (Api::Converse, true) | (Api::ConverseStream, false) => &[],
        (Api::ConverseStream, true) => &[
            "event_stream_invalid",
            "invalid_json",
            "content_block_invalid",
            "tool_arguments_type",
            "payload_missing",
        ],
        (Api::InvokeStream, true) => &[
            "event_stream_invalid",
            "invalid_json",
            "content_block_invalid",
            "payload_missing",
        ],
        (Api::InvokeStream, false) => &[],
        (Api::ResponsesStored, true) => &[],
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
        let Some(api) = api_of(&case) else {
            problems.push(format!(
                "{name}: {} is not a checked endpoint",
                case.endpoint
            ));
            continue;
        };
        if serde_json::from_slice::<Value>(&case.request).is_err() {
            problems.push(format!("{name}: request.json is not JSON"));
        }
        if case.framing.streamed() && case.framing != framing(api) {
            problems.push(format!("{name}: the wrong framing for {}", case.endpoint));
        }
        let rule = verdict(&case);
        let mut stated = case.expect.clone();
        // The tokens are the stated ones, else the rule's (see `load`).
        if case.expect.tokens != rule.tokens {
            problems.push(format!(
                "{name}: the rule counts tokens {:?}, the case says {:?}",
                rule.tokens.clone().unwrap_or_default(),
                case.expect.tokens.clone().unwrap_or_default()
            ));
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
            case.framing.streamed(),
        );
        let inspected = (200..300).contains(&case.status);
        match case.expect.outcome {
            Outcome::Pass if inspected => {
                valid.insert(key);
            }
            Outcome::Pass => {}
            Outcome::Normalized => {
                normalized.insert((case.dialect.to_string(), case.framing.streamed()));
                for pointer in &case.expect.pointers {
                    if label_of(api, pointer).is_none() {
                        collapsed.insert(case.dialect.clone());
                    } else if label_of(api, pointer).is_some_and(|l| l.ends_with("/*")) {
                        wildcards.insert(case.dialect.clone());
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
    for (dialect, endpoint, api) in ENDPOINTS {
        // Gemini's generateContent never streams, nor Bedrock's converse
        // and invoke (converse-stream is its own endpoint).
        let ways: &[bool] = match api {
            Api::GeminiGenerate | Api::ResponsesStored | Api::Converse => &[false],
            Api::ConverseStream | Api::InvokeStream => &[true],
            _ if dialect == "vertex" => vertex_ways(endpoint),
            _ if dialect == "bedrock" => &[false],
            _ => &[false, true],
        };
        for &streamed in ways {
            let key = (dialect.to_string(), endpoint.to_string(), streamed);
            let how = if streamed { "streamed" } else { "whole" };
            if !valid.contains(&key) {
                problems.push(format!("{dialect}{endpoint}: no valid {how} case"));
            }
            // Ollama's /v1 is checked as OpenAI's: one broken case each way.
            // Vertex's endpoints are their makers': one broken case each way too.
            let as_openai =
                (matches!(dialect, "ollama" | "azure") && api == Api::Chat) || dialect == "vertex";
            let must: &[&str] = if as_openai {
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
            if as_openai && have.is_empty() {
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
        // Bedrock's records are all required: none collapses.
        if !collapsed.contains(dialect) && !["ollama", "bedrock"].contains(&dialect) {
            problems.push(format!("{dialect}: no hand-written record collapse"));
        }
        // Ollama and Gemini have no wildcard figure.
        if !wildcards.contains(dialect)
            && !["ollama", "gemini", "bedrock", "cohere"].contains(&dialect)
        {
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
            let api = api_of(&case).unwrap();
            let how = if case.framing.streamed() {
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
        // Anthropic's server tools (web search) are not offered on Bedrock.
        "bedrock/model/us.anthropic.claude-3-5-haiku-20241022-v1%3A0/invoke whole /usage/server_tool_use/*",
        "bedrock/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke-with-response-stream stream message_start /usage/server_tool_use/*",
        "bedrock/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke-with-response-stream stream /usage/server_tool_use/*",
        // A message_delta's usage has no cache_creation
        // (anthropic-sdk-python's `types/message_delta_usage.py`).
        "bedrock/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke-with-response-stream stream /usage/cache_creation/*",
        // Bedrock's Claude reports no thinking tokens apart.
        "bedrock/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke-with-response-stream stream message_start /usage/output_tokens_details/*",
        "bedrock/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke-with-response-stream stream /usage/output_tokens_details/*",
        // Vertex's cases are few: their makers' suites mutate these.
        "vertex/v1/projects/my-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict whole /usage/output_tokens_details/*",
        "vertex/v1/projects/my-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict whole /usage/server_tool_use/*",
        "vertex/v1/projects/my-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict stream message_start /usage/output_tokens_details/*",
        "vertex/v1/projects/my-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict stream message_start /usage/server_tool_use/*",
        "vertex/v1/projects/my-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict stream /usage/cache_creation/*",
        "vertex/v1/projects/my-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict stream /usage/output_tokens_details/*",
        "vertex/v1/projects/my-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict stream /usage/server_tool_use/*",
        "vertex/v1/projects/my-project/locations/us-east5/publishers/google/models/gemini-2.5-flash:generateContent whole /usageMetadata/toolUsePromptTokenCount",
        "vertex/v1/projects/my-project/locations/us-east5/publishers/google/models/gemini-2.5-flash:streamGenerateContent stream /usageMetadata/toolUsePromptTokenCount",
        // Cohere bills search units and classifications on other
        // endpoints (connectors, classify), not on a plain chat.
        "cohere/v2/chat whole /usage/billed_units/search_units",
        "cohere/v2/chat whole /usage/billed_units/classifications",
        "cohere/v2/chat stream /delta/usage/billed_units/search_units",
        "cohere/v2/chat stream /delta/usage/billed_units/classifications",
        // Vertex's OpenAI-compatible usage has no details records.
        "vertex/v1/projects/my-project/locations/us-east5/endpoints/openapi/chat/completions whole /usage/prompt_tokens_details/*",
        "vertex/v1/projects/my-project/locations/us-east5/endpoints/openapi/chat/completions whole /usage/completion_tokens_details/*",
        "vertex/v1/projects/my-project/locations/us-east5/endpoints/openapi/chat/completions stream /usage/prompt_tokens_details/*",
        "vertex/v1/projects/my-project/locations/us-east5/endpoints/openapi/chat/completions stream /usage/completion_tokens_details/*",
    ];
    let mut tables: Vec<(&str, &str, String, Figures)> = Vec::new();
    for (dialect, endpoint, api) in ENDPOINTS {
        // Gemini's generateContent never streams, and its
        // streamGenerateContent answers whole only as one JSON array, whose
        // elements' figures are not judged (figures sit on a root object).
        let vertex = |streamed| dialect != "vertex" || vertex_ways(endpoint).contains(&streamed);
        let event_stream = matches!(api, Api::ConverseStream | Api::InvokeStream);
        if !matches!(api, Api::GeminiStream) && !event_stream && vertex(false) {
            tables.push((dialect, endpoint, "whole".into(), table(api)));
        }
        if matches!(
            api,
            Api::GeminiGenerate | Api::ResponsesStored | Api::Converse
        ) || (dialect == "bedrock" && api == Api::Messages)
            || !vertex(true)
        {
            continue;
        }
        for (event, figures) in stream_tables(api) {
            tables.push((dialect, endpoint, format!("stream{event}"), figures));
        }
    }
    for (dialect, endpoint, how, figures) in tables {
        for (pointer, _, _) in figures.iter().filter(|(_, d, _)| *d != Required) {
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
    let judged = judge(body, "", OPENAI, OPENAI_RELATIONS, Convention::Provider);
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
    let judged = judge(body, "", OPENAI, OPENAI_RELATIONS, Convention::Provider);
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
    let judged = judge(body, "", OPENAI, OPENAI_RELATIONS, Convention::Provider);
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
    let judged = judge(
        body,
        "/message",
        ANTHROPIC,
        ANTHROPIC_RELATIONS,
        Convention::Provider,
    );
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
        judge(
            br#"{"eval_count":null}"#,
            "",
            OLLAMA,
            &[],
            Convention::Provider
        ),
        Judged {
            text: br#"{"eval_count":null}"#.to_vec(),
            ..Judged::default()
        }
    );
}

#[test]
fn the_rule_judges_relations_on_the_figures_as_read_alone() {
    let gemini = |usage: &str| {
        let body = format!(r#"{{"usageMetadata":{usage}}}"#);
        let judged = judge(
            body.as_bytes(),
            "",
            GEMINI,
            GEMINI_RELATIONS,
            Convention::Provider,
        );
        (String::from_utf8(judged.text).unwrap(), judged.relations)
    };
    // An absent term is none of Gemini's total; a `null` one decides nothing.
    let sum = "totalTokenCount=prompt+candidates+toolUsePrompt+thoughts";
    assert_eq!(
        gemini(r#"{"promptTokenCount":8,"totalTokenCount":20}"#),
        (r#"{"usageMetadata":null}"#.to_string(), vec![sum])
    );
    let null = r#"{"usageMetadata":{"promptTokenCount":8,"candidatesTokenCount":null,"totalTokenCount":20}}"#;
    let judged =
        gemini(r#"{"promptTokenCount":8,"candidatesTokenCount":null,"totalTokenCount":20}"#);
    assert_eq!(judged, (null.to_string(), vec![]));
    // A malformed term decides nothing either, and is nulled alone.
    let judged =
        gemini(r#"{"promptTokenCount":8,"candidatesTokenCount":"12","totalTokenCount":21}"#);
    assert_eq!(
        judged.0,
        r#"{"usageMetadata":{"promptTokenCount":8,"candidatesTokenCount":null,"totalTokenCount":21}}"#
    );
    assert!(judged.1.is_empty());

    // Every breach is judged before any figure is marked: the prompt, which
    // the cache breaks, still sums into the total.
    let body = br#"{"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6,"prompt_tokens_details":{"cached_tokens":9}}}"#;
    let judged = judge(body, "", OPENAI, OPENAI_RELATIONS, Convention::Provider);
    assert_eq!(
        judged.pointers,
        [
            "/usage/prompt_tokens",
            "/usage/prompt_tokens_details/cached_tokens",
            "/usage/prompt_tokens_details"
        ]
    );
    assert_eq!(judged.relations, ["cached_tokens<=prompt_tokens"]);
    assert_eq!(judged.tokens, [("output", 1), ("total", 6)]);
    // xAI's convention: reasoning outside the completion, inside the total.
    let body = br#"{"usage":{"prompt_tokens":279,"completion_tokens":6,"total_tokens":374,"completion_tokens_details":{"reasoning_tokens":89}}}"#;
    let xai = judge(body, "", OPENAI, OPENAI_RELATIONS, Convention::Xai);
    assert!(xai.pointers.is_empty(), "{:?}", xai.pointers);
    let provider = judge(body, "", OPENAI, OPENAI_RELATIONS, Convention::Provider);
    assert_eq!(provider.relations.len(), 2);
}
