//! The SDK matrix (issue 10): the official SDKs an app would use, Python and
//! Node, driven through probity the way the app drives them (only the base
//! URL changes) against a fake upstream speaking each provider's wire
//! format. For each SDK and each endpoint it uses, rows:
//!
//! 1. `valid`: a valid answer (whole, and streamed where the SDK streams)
//!    reaches the app unchanged: what the app reads equals what was sent;
//! 2. `figure`, `details`, `collapse`, `id`, `relation`: each normalization
//!    probity can make on the dialect (a figure nulled, a record collapsed,
//!    the id nulled, figures that contradict each other nulled) parses, and
//!    the app reads null for exactly those figures;
//! 3. `reject`: a broken payload raises the SDK's usual exception, whose
//!    text holds probity's message (the invariant's name);
//! 4. `retry-default`, `retry-advised`: `x-should-retry` is obeyed where the
//!    SDK knows it (openai, anthropic): a rejection reaches the upstream
//!    once by default, more than once on a `retry_invalid_response` route;
//!    `retry-default`, `retry-legacy`, `retry-off` where it does not
//!    (boto3): how often each retry mode sends a rejection again.
//!
//! Each script (`tests/sdks/*_app.py`, `tests/sdks/node/*_app.mjs`) prints
//! one JSON line per row (`rows.py`, `rows.mjs`); the `model` it asks for
//! names the case the fake upstream answers (on Bedrock, whose model id is
//! in the path, the id's version: `anthropic.claude-3-haiku-20240307-v1:figure`).
//! A row listed in one of the `BLOCKED_*` constants is reported as a
//! visible skip while it fails, and fails the test once it passes (so that
//! the list is emptied with the fix).

//!
//! A surface reached through a cloud or a chat API of its own has its rows
//! in a module of its own here (`sdks::<surface>`), with its own fake
//! upstream, session and scripts, judged by the same [`Matrix`].

use std::io::Write;
use std::process::{Command, Output};
use std::time::Duration;

use crate::support::eventstream::{event, CONVERSE_STREAM};
use crate::support::*;
use serde_json::{json, Value};

mod azure;
mod bedrock_anthropic;
mod cohere_chat;
mod vertex;

/// Rows that wait on a record the provider's schema requires being kept as
/// an object (issue 10 item 1): none since it landed. A listed row that
/// passes fails the test, so the list cannot go stale.
const BLOCKED_BY_REQUIRED_RECORDS: &[(&str, &str)] = &[];

/// Rows that fail for another reason: (SDK, row, why). Reported the same way.
const BLOCKED_OTHER: &[(&str, &str, &str)] = &[(
    "python voyageai",
    "embed.figure",
    "the voyageai SDK adds usage.total_tokens to an int (`EmbeddingsObject.update`: \
     `self.total_tokens += response.usage.total_tokens`), so any null total crashes it \
     (TypeError), even one the provider itself sends: no nulling can pass this row",
)];

// ---------------------------------------------------------------- the fake upstream

/// The cases whose answer breaks a payload invariant.
fn rejects(case: &str) -> bool {
    matches!(
        case,
        "reject" | "retry-default" | "retry-advised" | "retry-legacy" | "retry-off"
    )
}

/// The case a request asks for: its `model`, or on Bedrock, which names
/// the model in the path, the model id's version (after its last `:`,
/// which the SDKs send as `%3A`): `anthropic.claude-3-haiku-20240307-v1:figure`.
fn case_of(request: &Recorded) -> String {
    bedrock_case(&request.target).unwrap_or_else(|| {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
        body["model"].as_str().unwrap_or_default().to_string()
    })
}

fn bedrock_case(target: &str) -> Option<String> {
    let (id, _operation) = target.strip_prefix("/bedrock/model/")?.rsplit_once('/')?;
    let id = id.replace("%3A", ":");
    id.rsplit(':').next().map(str::to_string)
}

/// A valid body with one edit: `from` must be in it (once is enough).
fn edit(body: &str, from: &str, to: &str) -> String {
    assert!(body.contains(from), "{from} is not in {body}");
    body.replacen(from, to, 1)
}

/// A vector as JSON: base64 of little-endian float32 when the request asked
/// for it (the openai and voyageai SDKs do by default), else numbers.
fn vector(values: &[f32], base64_asked: bool) -> String {
    if base64_asked {
        let bytes: Vec<u8> = values.iter().flat_map(|x| x.to_le_bytes()).collect();
        format!("\"{}\"", base64(&bytes))
    } else {
        let numbers: Vec<String> = values.iter().map(f32::to_string).collect();
        format!("[{}]", numbers.join(", "))
    }
}

/// The number of inputs of an embedding request.
fn inputs(request: &Value, field: &str) -> usize {
    request[field].as_array().map_or(1, Vec::len)
}

/// Every provider the SDKs speak, on one server: the path picks the
/// provider, the request's `model` the case.
fn provider(request: &Recorded) -> Reply {
    if let Some(case) = bedrock_case(&request.target) {
        return bedrock(&request.target, &case);
    }
    let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
    let case = body["model"].as_str().unwrap_or_default();
    let streamed = body["stream"] == true;
    match request.target.as_str() {
        "/openai/v1/embeddings" => Reply::json(200, openai_embeddings(case, &body)),
        "/openai/v1/chat/completions" if streamed => sse(openai_chat_stream(case)),
        "/openai/v1/chat/completions" => Reply::json(200, openai_chat(case)),
        "/openai/v1/responses" if streamed => sse(openai_responses_stream(case)),
        "/openai/v1/responses" => Reply::json(200, openai_responses(case, &body)),
        "/anthropic/v1/messages" if streamed => sse(anthropic_stream(case)),
        "/anthropic/v1/messages" => Reply::json(200, anthropic_message(case)),
        // Ollama streams unless asked not to.
        "/ollama/api/chat" if body["stream"] != false => Reply::stream(
            "application/x-ndjson",
            vec![part(Before::Now, ollama_chat_stream(case))],
        ),
        "/ollama/api/chat" => Reply::json(200, ollama_chat(case)),
        "/ollama/api/embed" => Reply::json(200, ollama_embed(case)),
        "/cohere/v2/embed" => Reply::json(200, cohere_embed(case)),
        "/cohere/v2/rerank" => Reply::json(200, cohere_rerank(case)),
        "/voyage/v1/embeddings" => Reply::json(200, voyage_embed(case, &body)),
        "/voyage/v1/rerank" => Reply::json(200, voyage_rerank(case)),
        other => Reply::json(404, format!(r#"{{"error": "no {other} here"}}"#)),
    }
}

fn sse(text: String) -> Reply {
    Reply::stream("text/event-stream", vec![part(Before::Now, text)])
}

/// vLLM's embeddings carry an id (OpenAI's do not): its row needs one.
const OPENAI_EMBEDDINGS_ID: &str = "embd-4c1e0a5f9b7d4e2a8f31";
/// Exact in float32, so that base64 round-trips them.
const OPENAI_VECTORS: [[f32; 3]; 2] = [[0.25, -1.5, 3.0], [0.5, 0.125, -0.75]];

fn openai_embeddings(case: &str, request: &Value) -> String {
    let asked = inputs(request, "input");
    let sent = if rejects(case) { asked - 1 } else { asked };
    let base64_asked = request["encoding_format"] == "base64";
    let data: Vec<String> = OPENAI_VECTORS
        .iter()
        .take(sent)
        .enumerate()
        .map(|(i, v)| {
            format!(
                r#"{{"object": "embedding", "index": {i}, "embedding": {}}}"#,
                vector(v, base64_asked)
            )
        })
        .collect();
    let body = format!(
        r#"{{"id": "{OPENAI_EMBEDDINGS_ID}", "object": "list", "data": [{}], "model": "text-embedding-3-small", "usage": {{"prompt_tokens": 6, "total_tokens": 6}}}}"#,
        data.join(", ")
    );
    let usage = r#"{"prompt_tokens": 6, "total_tokens": 6}"#;
    match case {
        "figure" => edit(&body, usage, r#"{"prompt_tokens": "6", "total_tokens": 6}"#),
        "collapse" => edit(
            &body,
            usage,
            r#"{"prompt_tokens": "6", "total_tokens": -6}"#,
        ),
        "id" => edit(&body, OPENAI_EMBEDDINGS_ID, ""),
        _ => body,
    }
}

const OPENAI_CHAT: &str = r#"{
  "id": "chatcmpl-CZ4kQ2bF7yqU1nR0aX9vT3mL8pWd",
  "object": "chat.completion",
  "created": 1764410400,
  "model": "gpt-4o-mini-2024-07-18",
  "choices": [
    {
      "index": 0,
      "message": {"role": "assistant", "content": "Paris.", "refusal": null, "annotations": []},
      "logprobs": null,
      "finish_reason": "stop"
    }
  ],
  "usage": {
    "prompt_tokens": 24,
    "completion_tokens": 2,
    "total_tokens": 26,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
  },
  "service_tier": "default",
  "system_fingerprint": "fp_560af6e559"
}"#;

fn openai_chat(case: &str) -> String {
    let body = OPENAI_CHAT;
    match case {
        "figure" => edit(body, r#""prompt_tokens": 24"#, r#""prompt_tokens": "24""#),
        // A nested record with no sound figure left: it alone collapses.
        "details" => edit(
            body,
            r#"{"cached_tokens": 0, "audio_tokens": 0}"#,
            r#"{"cached_tokens": "0", "audio_tokens": -1}"#,
        ),
        // Nothing sound left in `usage` (optional in a chat completion).
        "collapse" => {
            let start = body.find(r#""usage": {"#).unwrap();
            let end = body.find(r#""service_tier""#).unwrap();
            format!(
                "{}\"usage\": {{\"prompt_tokens\": \"24\", \"completion_tokens\": 2.0, \"total_tokens\": -26}},\n  {}",
                &body[..start],
                &body[end..]
            )
        }
        "id" => edit(body, "chatcmpl-CZ4kQ2bF7yqU1nR0aX9vT3mL8pWd", ""),
        // Well-formed, and not the sum OpenAI defines (24 + 2 = 26): the
        // three are not reported, the cached tokens still are.
        "relation" => edit(body, r#""total_tokens": 26"#, r#""total_tokens": 27"#),
        // `message` must be an object.
        case if rejects(case) => edit(
            body,
            r#""message": {"role": "assistant", "content": "Paris.", "refusal": null, "annotations": []}"#,
            r#""message": "Paris.""#,
        ),
        _ => body.to_string(),
    }
}

fn openai_chat_stream(case: &str) -> String {
    let text = String::from_utf8(fixture("openai_chat_stream.sse")).unwrap();
    let usage = r#""usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}"#;
    match case {
        "figure" => edit(&text, r#""prompt_tokens":9"#, r#""prompt_tokens":"9""#),
        "collapse" => edit(
            &text,
            usage,
            r#""usage":{"prompt_tokens":"9","completion_tokens":"1","total_tokens":"10"}"#,
        ),
        // Azure's first chunk: `"id": ""`.
        "id" => edit(&text, r#""id":"chatcmpl-AbC123""#, r#""id":"""#),
        // The usage chunk's total is not its prompt and completion.
        "relation" => edit(&text, r#""total_tokens":10"#, r#""total_tokens":11"#),
        // The finishing chunk names a choice beyond the one asked for.
        "reject" => edit(
            &text,
            r#""choices":[{"index":0,"delta":{},"#,
            r#""choices":[{"index":1,"delta":{},"#,
        ),
        _ => text,
    }
}

/// A Responses API answer, as api.openai.com sends it (trimmed of the
/// request echo the SDKs do not read).
const OPENAI_RESPONSE: &str = r#"{
  "id": "resp_68f0c2a1b3d4e5f60718293a4b5c6d7e",
  "object": "response",
  "created_at": 1764410400,
  "status": "completed",
  "error": null,
  "incomplete_details": null,
  "model": "gpt-4.1-mini-2025-04-14",
  "output": [
    {"id": "msg_68f0c2a2c4d5e6f7", "type": "message", "status": "completed", "role": "assistant",
     "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": "Paris."}]}
  ],
  "parallel_tool_calls": true,
  "store": true,
  "text": {"format": {"type": "text"}},
  "tool_choice": "auto",
  "tools": [],
  "usage": {"input_tokens": 14, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 3, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 17}
}"#;

/// The answer the contract rows and the Agents SDK ask for: `format` is
/// JSON (`{"city": "Paris"}`) or, for `format-invalid`, prose; `agent` calls
/// the tool once, then answers with what it returned.
fn openai_responses(case: &str, request: &Value) -> String {
    let body = OPENAI_RESPONSE;
    match case {
        "figure" => edit(body, r#""input_tokens": 14"#, r#""input_tokens": "14""#),
        // The details record is required by the SDKs' types: it keeps its object.
        "details" => edit(body, r#""cached_tokens": 0"#, r#""cached_tokens": "0""#),
        // `usage` is optional (`Optional[ResponseUsage]`): it may collapse whole.
        "collapse" => edit(
            body,
            r#"{"input_tokens": 14, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 3, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 17}"#,
            r#"{"input_tokens": "14", "input_tokens_details": {"cached_tokens": -1}, "output_tokens": 3.0, "output_tokens_details": {"reasoning_tokens": "0"}, "total_tokens": -17}"#,
        ),
        "id" => edit(body, "resp_68f0c2a1b3d4e5f60718293a4b5c6d7e", ""),
        // More cached tokens than input tokens, of which they are a part.
        "relation" => edit(body, r#""cached_tokens": 0"#, r#""cached_tokens": 15"#),
        // An output item without its `type`.
        "reject" => edit(body, r#""type": "message", "#, ""),
        "format" => edit(
            body,
            r#""text": "Paris.""#,
            r#""text": "{\"city\": \"Paris\"}""#,
        ),
        "format-invalid" => edit(
            body,
            r#""text": "Paris.""#,
            r#""text": "The city is Paris.""#,
        ),
        "agent" => {
            // The second turn carries the tool's output back.
            let answered = request["input"]
                .as_array()
                .is_some_and(|items| items.iter().any(|i| i["type"] == "function_call_output"));
            match answered {
                true => edit(
                    body,
                    r#""text": "Paris.""#,
                    r#""text": "It is sunny in Paris.""#,
                ),
                false => edit(
                    body,
                    r#"{"id": "msg_68f0c2a2c4d5e6f7", "type": "message", "status": "completed", "role": "assistant",
     "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": "Paris."}]}"#,
                    r#"{"id": "fc_68f0c2a3d5e6f708", "type": "function_call", "status": "completed", "name": "get_weather", "call_id": "call_Qm3xV7bN2kL9pR4s", "arguments": "{\"city\": \"Paris\"}"}"#,
                ),
            }
        }
        "agent-figure" => edit(body, r#""output_tokens": 3"#, r#""output_tokens": -3"#),
        _ => body.to_string(),
    }
}

/// A streamed response: `Par` `is.` in two deltas, usage on
/// `response.completed`.
fn openai_responses_stream(case: &str) -> String {
    let created = r#"{"id":"resp_68f0c2a1b3d4e5f6","object":"response","created_at":1764410400,"status":"in_progress","model":"gpt-4.1-mini-2025-04-14","output":[],"usage":null}"#;
    let item = r#"{"id":"msg_68f0c2a2","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"text":"Paris."}]}"#;
    let completed = format!(
        r#"{{"id":"resp_68f0c2a1b3d4e5f6","object":"response","created_at":1764410400,"status":"completed","model":"gpt-4.1-mini-2025-04-14","output":[{item}],"usage":{{"input_tokens":14,"input_tokens_details":{{"cached_tokens":0}},"output_tokens":3,"output_tokens_details":{{"reasoning_tokens":0}},"total_tokens":17}}}}"#
    );
    let events = [
        ("response.created".to_string(), format!(r#""response":{created}"#)),
        ("response.in_progress".into(), format!(r#""response":{created}"#)),
        (
            "response.output_item.added".into(),
            r#""output_index":0,"item":{"id":"msg_68f0c2a2","type":"message","status":"in_progress","role":"assistant","content":[]}"#.into(),
        ),
        (
            "response.content_part.added".into(),
            r#""item_id":"msg_68f0c2a2","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"text":""}"#.into(),
        ),
        (
            "response.output_text.delta".into(),
            r#""item_id":"msg_68f0c2a2","output_index":0,"content_index":0,"delta":"Par","logprobs":[]"#.into(),
        ),
        (
            "response.output_text.delta".into(),
            r#""item_id":"msg_68f0c2a2","output_index":0,"content_index":0,"delta":"is.","logprobs":[]"#.into(),
        ),
        (
            "response.output_text.done".into(),
            r#""item_id":"msg_68f0c2a2","output_index":0,"content_index":0,"text":"Paris.","logprobs":[]"#.into(),
        ),
        (
            "response.content_part.done".into(),
            r#""item_id":"msg_68f0c2a2","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"text":"Paris."}"#.into(),
        ),
        ("response.output_item.done".into(), format!(r#""output_index":0,"item":{item}"#)),
        ("response.completed".into(), format!(r#""response":{completed}"#)),
    ];
    let text: String = events
        .iter()
        .enumerate()
        .map(|(n, (kind, rest))| {
            format!(
                "event: {kind}\ndata: {{\"type\":\"{kind}\",{rest},\"sequence_number\":{n}}}\n\n"
            )
        })
        .collect();
    match case {
        "figure" => edit(&text, r#""input_tokens":14"#, r#""input_tokens":"14""#),
        "collapse" => edit(
            &text,
            r#""input_tokens":14,"input_tokens_details":{"cached_tokens":0},"output_tokens":3,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":17"#,
            r#""input_tokens":"14","input_tokens_details":{"cached_tokens":"0"},"output_tokens":"3","output_tokens_details":{"reasoning_tokens":-0},"total_tokens":1.7e1"#,
        ),
        // The second delta repeats the first one's number.
        "reject" => edit(
            &text,
            r#""delta":"is.","logprobs":[],"sequence_number":5"#,
            r#""delta":"is.","logprobs":[],"sequence_number":4"#,
        ),
        _ => text,
    }
}

const ANTHROPIC_MESSAGE: &str = r#"{"model":"claude-sonnet-4-5-20250929","id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","content":[{"type":"text","text":"The capital of France is Paris."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":14,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},"output_tokens":10,"service_tier":"standard"}}"#;

fn anthropic_message(case: &str) -> String {
    let body = ANTHROPIC_MESSAGE;
    match case {
        "figure" => edit(body, r#""input_tokens":14"#, r#""input_tokens":"14""#),
        "collapse" => edit(
            body,
            r#""input_tokens":14,"cache_creation_input_tokens":0,"cache_read_input_tokens":0"#,
            r#""input_tokens":"14","cache_creation_input_tokens":-1,"cache_read_input_tokens":0.5"#,
        )
        .replacen(r#""output_tokens":10"#, r#""output_tokens":"10""#, 1),
        // A nested record with no sound figure left: it alone collapses.
        "details" => edit(
            body,
            r#","service_tier":"standard"}"#,
            r#","server_tool_use":{"web_search_requests":"1"},"service_tier":"standard"}"#,
        ),
        "id" => edit(body, "msg_01XFDUDYJgAACzvnptvVoYEL", ""),
        // Thinking tokens above the output they are a part of.
        "relation" => edit(
            body,
            r#""output_tokens":10,"#,
            r#""output_tokens":10,"output_tokens_details":{"thinking_tokens":11},"#,
        ),
        // A content block without its `type`.
        case if rejects(case) => edit(
            body,
            r#"{"type":"text","text":"The capital"#,
            r#"{"text":"The capital"#,
        ),
        _ => body.to_string(),
    }
}

fn anthropic_stream(case: &str) -> String {
    let text = String::from_utf8(fixture("anthropic_messages_stream.sse")).unwrap();
    match case {
        "figure" => edit(&text, r#""input_tokens":25"#, r#""input_tokens":"25""#),
        // message_start's usage with no sound figure left.
        "collapse" => edit(
            &text,
            r#""usage":{"input_tokens":25,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}"#,
            r#""usage":{"input_tokens":"25","cache_creation_input_tokens":"0","cache_read_input_tokens":"0","output_tokens":"1"}"#,
        ),
        // message_delta's usage with no sound figure left.
        "collapse-delta" => edit(
            &text,
            r#""usage":{"output_tokens":15}"#,
            r#""usage":{"output_tokens":"15"}"#,
        ),
        "id" => edit(&text, "msg_01XFDUDYJgAACzvnptvVoYEL", ""),
        // A delta for a block never started.
        "reject" => edit(
            &text,
            r#""index":0,"delta":{"type":"text_delta","text":"!"}"#,
            r#""index":1,"delta":{"type":"text_delta","text":"!"}"#,
        ),
        _ => text,
    }
}

const OLLAMA_CHAT: &str = r#"{"model":"llama3.2","created_at":"2026-11-29T10:00:04.883583Z","message":{"role":"assistant","content":"The capital of France is Paris."},"done_reason":"stop","done":true,"total_duration":4883583458,"load_duration":1334875,"prompt_eval_count":36,"prompt_eval_duration":342546000,"eval_count":17,"eval_duration":4535599000}"#;

fn ollama_chat(case: &str) -> String {
    match case {
        "figure" => edit(OLLAMA_CHAT, r#""eval_count":17"#, r#""eval_count":"17""#),
        // A final answer without its `message`.
        "reject" => edit(
            OLLAMA_CHAT,
            r#""message":{"role":"assistant","content":"The capital of France is Paris."},"#,
            "",
        ),
        _ => OLLAMA_CHAT.to_string(),
    }
}

fn ollama_chat_stream(case: &str) -> String {
    let text = String::from_utf8(fixture("ollama_chat_stream.ndjson")).unwrap();
    match case {
        "figure" => edit(&text, r#""eval_count":4"#, r#""eval_count":4.5"#),
        // A line without its `message` (ollama-js stops reading at the
        // `done` line: a broken line after it would never reach the app).
        "reject" => edit(
            &text,
            r#""message":{"role":"assistant","content":" sky"}"#,
            r#""response":" sky""#,
        ),
        _ => text,
    }
}

const OLLAMA_EMBED: &str = r#"{"model":"all-minilm","embeddings":[[-0.00988927,0.0570856,-0.02802485,0.04217853,0.00568453,0.11982401],[0.03769729,-0.08550727,0.0441691,0.02323356,0.01761595,0.11597303]],"total_duration":14143917,"load_duration":1019500,"prompt_eval_count":8}"#;

fn ollama_embed(case: &str) -> String {
    match case {
        "figure" => edit(
            OLLAMA_EMBED,
            r#""prompt_eval_count":8"#,
            r#""prompt_eval_count":"8""#,
        ),
        // One vector for two inputs.
        "reject" => edit(
            OLLAMA_EMBED,
            ",[0.03769729,-0.08550727,0.0441691,0.02323356,0.01761595,0.11597303]",
            "",
        ),
        _ => OLLAMA_EMBED.to_string(),
    }
}

const COHERE_EMBED: &str = r#"{"id":"da6e531f-54c6-4a73-bf92-f60566d8d753","embeddings":{"float":[[-0.02550791,0.08440178,0.07503259,0.07593699,0.05890679,0.0246976,-0.0368792,0.05988022],[-0.11585804,-0.01713478,0.02128788,0.0400487,-0.07546668,0.03265419,0.06174331,-0.01665946]]},"texts":["hello","goodbye"],"meta":{"api_version":{"version":"2"},"billed_units":{"input_tokens":2},"tokens":{"input_tokens":2,"output_tokens":0}},"response_type":"embeddings_by_type"}"#;

fn cohere_embed(case: &str) -> String {
    let body = COHERE_EMBED;
    match case {
        "figure" => edit(
            body,
            r#""tokens":{"input_tokens":2,"#,
            r#""tokens":{"input_tokens":-2,"#,
        ),
        "collapse" => edit(
            body,
            r#""billed_units":{"input_tokens":2}"#,
            r#""billed_units":{"input_tokens":"2"}"#,
        ),
        "id" => edit(body, "da6e531f-54c6-4a73-bf92-f60566d8d753", ""),
        // One vector for two texts.
        "reject" => edit(
            body,
            ",[-0.11585804,-0.01713478,0.02128788,0.0400487,-0.07546668,0.03265419,0.06174331,-0.01665946]",
            "",
        ),
        _ => body.to_string(),
    }
}

const COHERE_RERANK: &str = r#"{"results":[{"index":3,"relevance_score":0.999071},{"index":4,"relevance_score":0.7867867},{"index":2,"relevance_score":0.32713068}],"id":"07734bd2-2473-4f07-94e1-0d9f0e6843cf","meta":{"api_version":{"version":"2"},"billed_units":{"search_units":1},"tokens":{"input_tokens":120,"output_tokens":0}}}"#;

fn cohere_rerank(case: &str) -> String {
    let body = COHERE_RERANK;
    match case {
        "figure" => edit(
            body,
            r#""input_tokens":120"#,
            r#""input_tokens":{"count":120}"#,
        ),
        "collapse" => edit(body, r#""search_units":1"#, r#""search_units":"1""#),
        "id" => edit(body, "07734bd2-2473-4f07-94e1-0d9f0e6843cf", ""),
        // Five documents: index 7 points at none.
        "reject" => edit(body, r#""index":4"#, r#""index":7"#),
        _ => body.to_string(),
    }
}

/// Exact in float32, so that base64 round-trips them.
const VOYAGE_VECTORS: [[f32; 6]; 2] = [
    [-0.125, 0.0625, -0.015625, 0.5, 0.25, -0.75],
    [0.375, -0.0078125, 0.03125, -0.5, 0.125, -0.25],
];

fn voyage_embed(case: &str, request: &Value) -> String {
    let asked = inputs(request, "input");
    let sent = if rejects(case) { asked - 1 } else { asked };
    let base64_asked = request["encoding_format"] == "base64";
    let data: Vec<String> = VOYAGE_VECTORS
        .iter()
        .take(sent)
        .enumerate()
        .map(|(i, v)| {
            format!(
                r#"{{"object":"embedding","embedding":{},"index":{i}}}"#,
                vector(v, base64_asked)
            )
        })
        .collect();
    let body = format!(
        r#"{{"object":"list","data":[{}],"model":"voyage-3.5","usage":{{"total_tokens":10}}}}"#,
        data.join(",")
    );
    match case {
        // The record's only figure: today the record collapses with it.
        "figure" => edit(&body, r#""total_tokens":10"#, r#""total_tokens":"10""#),
        _ => body,
    }
}

const VOYAGE_RERANK: &str = r#"{"object":"list","data":[{"relevance_score":0.4375,"index":3},{"relevance_score":0.34765625,"index":2}],"model":"rerank-2.5","usage":{"total_tokens":26}}"#;

fn voyage_rerank(case: &str) -> String {
    match case {
        // The record's only figure: today the record collapses with it.
        "figure" => edit(
            VOYAGE_RERANK,
            r#""total_tokens":26"#,
            r#""total_tokens":-26"#,
        ),
        // Four documents: index 7 points at none.
        "reject" => edit(VOYAGE_RERANK, r#""index":3"#, r#""index":7"#),
        _ => VOYAGE_RERANK.to_string(),
    }
}

/// Bedrock Runtime: Converse's JSON, ConverseStream's event frames, and
/// InvokeModel's model bodies with Bedrock's `x-amzn-bedrock-*` figures.
fn bedrock(target: &str, case: &str) -> Reply {
    let (model, operation) = target.rsplit_once('/').unwrap_or_default();
    match operation {
        "converse" => Reply::json(200, bedrock_converse(case)),
        "converse-stream" => Reply::stream(
            "application/vnd.amazon.eventstream",
            bedrock_converse_stream(case),
        ),
        "invoke" if model.contains("amazon.titan-embed-text-v2") => {
            let latency = if case == "header" { "-4" } else { "212" };
            invoke_reply(titan_embed(case), "7", latency)
        }
        "invoke" if model.contains("cohere.embed-") => {
            let input = if case == "header" { "7.0" } else { "7" };
            invoke_reply(bedrock_cohere_embed(case), input, "212")
        }
        _ => Reply::json(404, format!(r#"{{"message": "no {target} here"}}"#))
            .header("x-amzn-errortype", "UnknownOperationException"),
    }
}

/// InvokeModel's answer: the model's own body, Bedrock's figures in headers.
fn invoke_reply(body: String, input_tokens: &str, latency: &str) -> Reply {
    Reply::json(200, body)
        .header("x-amzn-bedrock-input-token-count", input_tokens)
        .header("x-amzn-bedrock-invocation-latency", latency)
}

/// A Converse answer (tests/fixtures/bedrock/gen_converse_pass).
const BEDROCK_CONVERSE: &str = r#"{"output":{"message":{"role":"assistant","content":[{"text":"Hello! How can I help you today?"}]}},"stopReason":"end_turn","usage":{"inputTokens":12,"outputTokens":9,"totalTokens":21},"metrics":{"latencyMs":412}}"#;

fn bedrock_converse(case: &str) -> String {
    let body = BEDROCK_CONVERSE;
    match case {
        "figure" => edit(body, r#""inputTokens":12"#, r#""inputTokens":"12""#),
        // A total below its input and output (12 + 9).
        "relation" => edit(body, r#""totalTokens":21"#, r#""totalTokens":20"#),
        // `usage` and `metrics` are required: no sound figure left in either.
        "collapse" => edit(
            body,
            r#""usage":{"inputTokens":12,"outputTokens":9,"totalTokens":21},"metrics":{"latencyMs":412}"#,
            r#""usage":{"inputTokens":"12","outputTokens":-9,"totalTokens":2.1e1},"metrics":{"latencyMs":"412"}"#,
        ),
        // A ContentBlock is a union: two members in one block
        // (tests/fixtures/bedrock/gen_converse_block_two_members).
        case if rejects(case) => edit(
            body,
            r#"{"text":"Hello! How can I help you today?"}"#,
            r#"{"text":"Hello!","toolUse":{"toolUseId":"tooluse_kZJMlvQmRJ6eAyJE5GIl7Q","name":"get_weather","input":{}}}"#,
        ),
        _ => body.to_string(),
    }
}

/// A ConverseStream answer (the harness's `CONVERSE_STREAM`), one event
/// frame per write but the third, split in two.
fn bedrock_converse_stream(case: &str) -> Vec<Part> {
    let payload = |i: usize, payload: &str| match (i, case) {
        (5, "figure") => edit(payload, r#""inputTokens":12"#, r#""inputTokens":"12""#),
        // `usage` and `metrics` are required: no sound figure left in either.
        (5, "collapse") => edit(
            payload,
            r#"{"metrics":{"latencyMs":412},"p":"abc","usage":{"inputTokens":12,"outputTokens":9,"totalTokens":21}}"#,
            r#"{"metrics":{"latencyMs":-412},"p":"abc","usage":{"inputTokens":"12","outputTokens":9.5,"totalTokens":"21"}}"#,
        ),
        // The second delta names no block.
        (2, "reject") => edit(payload, r#""contentBlockIndex":0,"#, ""),
        _ => payload.to_string(),
    };
    let mut frames: Vec<Vec<u8>> = CONVERSE_STREAM
        .iter()
        .enumerate()
        .map(|(i, (kind, body))| event(kind, &payload(i, body)))
        .collect();
    if case == "reject-frame" {
        // The second delta's message CRC is wrong.
        if let Some(byte) = frames[2].last_mut() {
            *byte ^= 0x5a;
        }
    }
    let third = frames.remove(2);
    let (head, tail) = third.split_at(7);
    let mut parts: Vec<Part> = frames.into_iter().map(|f| part(Before::Now, f)).collect();
    parts.insert(2, part(Before::Now, tail.to_vec()));
    parts.insert(2, part(Before::Now, head.to_vec()));
    parts
}

/// Titan Text Embeddings v2's 256 dimensions, exact in float32.
fn titan_vector() -> Vec<f32> {
    (0..=255u8)
        .map(|i| (f32::from(i) - 128.0) / 512.0)
        .collect()
}

fn titan_embed(case: &str) -> String {
    let mut values = titan_vector();
    if rejects(case) {
        // 256 asked: one short is a dimension mismatch.
        values.pop();
    }
    let body = format!(
        r#"{{"embedding":{},"inputTextTokenCount":7}}"#,
        vector(&values, false)
    );
    match case {
        "figure" => edit(
            &body,
            r#""inputTextTokenCount":7"#,
            r#""inputTextTokenCount":"7""#,
        ),
        _ => body,
    }
}

/// Cohere Embed on Bedrock: Cohere's v1 body, no `meta` (Bedrock counts in
/// its headers).
const BEDROCK_COHERE_EMBED: &str = r#"{"embeddings":[[-0.02550791,0.08440178,0.07503259,0.07593699,0.05890679,0.0246976,-0.0368792,0.05988022],[-0.11585804,-0.01713478,0.02128788,0.0400487,-0.07546668,0.03265419,0.06174331,-0.01665946]],"id":"5b8c0a9e-6f2d-4c1b-9e7a-3d2f1c0b8a76","response_type":"embeddings_floats","texts":["hello","goodbye"]}"#;

fn bedrock_cohere_embed(case: &str) -> String {
    let body = BEDROCK_COHERE_EMBED;
    match case {
        "id" => edit(body, "5b8c0a9e-6f2d-4c1b-9e7a-3d2f1c0b8a76", ""),
        // One vector for two texts.
        "reject" => edit(
            body,
            ",[-0.11585804,-0.01713478,0.02128788,0.0400487,-0.07546668,0.03265419,0.06174331,-0.01665946]",
            "",
        ),
        _ => body.to_string(),
    }
}

// ---------------------------------------------------------------- probity and the scripts

/// The fake providers behind one probity, with a route per dialect, and for
/// openai and anthropic a second route with `retry_invalid_response = true`.
/// The Bedrock route holds a Bedrock API key, as the manual advises (docs/src/apps.md): the
/// SDKs sign with dummy credentials, and probity sends its key instead.
struct Session {
    upstream: Upstream,
    probity: Probity,
}

impl Session {
    async fn start() -> Self {
        let upstream = Upstream::start(provider).await;
        let at = |dialect: &str| format!("{}/{dialect}", upstream.url());
        let advised = "retry_invalid_response = true";
        let routes = [
            route("openai", "/openai", &at("openai"), "openai", ""),
            route(
                "openai-retry",
                "/openai-retry",
                &at("openai"),
                "openai",
                advised,
            ),
            route("anthropic", "/anthropic", &at("anthropic"), "anthropic", ""),
            route(
                "anthropic-retry",
                "/anthropic-retry",
                &at("anthropic"),
                "anthropic",
                advised,
            ),
            route("ollama", "/ollama", &at("ollama"), "ollama", ""),
            route("cohere", "/cohere", &at("cohere"), "cohere", ""),
            route("voyage", "/voyage", &at("voyage"), "voyage", ""),
            route(
                "bedrock",
                "/bedrock",
                &at("bedrock"),
                "bedrock",
                "api_key_env = \"PROBITY_TEST_BEDROCK_KEY\"",
            ),
        ]
        .concat();
        let probity = Probity::start_with_env(
            &config("", &routes),
            &[("PROBITY_TEST_BEDROCK_KEY", BEDROCK_KEY)],
        );
        Self { upstream, probity }
    }

    /// How many requests asking for `case` reached the upstream.
    fn calls(&self, case: &str) -> usize {
        self.upstream
            .requests()
            .iter()
            .filter(|r| case_of(r) == case)
            .count()
    }

    /// Every Bedrock request reached the upstream with the route's key and
    /// none of the SDK's own SigV4 signature.
    fn bedrock_signed_by_the_route(&self) {
        let requests = self.upstream.requests();
        let bedrock: Vec<&Recorded> = requests
            .iter()
            .filter(|r| r.target.starts_with("/bedrock/"))
            .collect();
        assert!(
            !bedrock.is_empty(),
            "no Bedrock request reached the upstream"
        );
        for request in bedrock {
            let target = &request.target;
            assert_eq!(
                request.header("authorization"),
                Some(format!("Bearer {BEDROCK_KEY}").as_str()),
                "{target}"
            );
            for signed in ["x-amz-date", "x-amz-security-token", "x-amz-content-sha256"] {
                assert_eq!(request.header(signed), None, "{signed} reached {target}");
            }
        }
    }

    /// Runs `command` (a script of rows) against probity.
    async fn rows(&self, sdk: &'static str, command: Command) -> Matrix {
        Matrix::run(sdk, command, &self.probity).await
    }

    async fn python(&self, sdk: &'static str, script: &str, modules: &[&str]) -> Option<Matrix> {
        if !can_run(&format!("the {sdk} rows"), &missing_python(modules), PIP) {
            return None;
        }
        let mut command = Command::new("python3");
        command.arg(format!("{SCRIPTS}/{script}"));
        Some(self.rows(sdk, command).await)
    }

    async fn node(&self, sdk: &'static str, script: &str, package: &str) -> Option<Matrix> {
        if !can_run(&format!("the {sdk} rows"), &missing_node(&[package]), NPM) {
            return None;
        }
        let mut command = Command::new("node");
        command.arg(format!("{SCRIPTS}/node/{script}"));
        Some(self.rows(sdk, command).await)
    }
}

/// The Bedrock route's API key (its `api_key_env`).
const BEDROCK_KEY: &str = "bedrock-api-key-0123";
const SCRIPTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdks");
/// How the Python SDKs are installed (.ci/run).
const PIP: &str =
    "python3 -m pip install openai anthropic ollama cohere voyageai langchain-openai \
     openai-agents boto3 langchain-aws";
/// How the Node SDKs are installed (.ci/run), at the versions pinned there.
const NPM: &str = "npm ci --prefix tests/sdks/node";
/// Longer than any script takes: past it, the script hangs.
const SCRIPT_LIMIT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------- the matrix

/// What one row expects.
enum Expect {
    /// The call returns, and the app read exactly this (numbers compared
    /// by value: `3` and `3.0` are the same float).
    Seen(Value),
    /// The call raises `class`, and its text (`str(e)`, `e.message`) names
    /// the invariant.
    Raised(&'static str, &'static str),
    /// The call raises `class`, and the body the SDK keeps names the
    /// invariant (its text is the SDK's own fixed sentence).
    RaisedKeeping(&'static str, &'static str),
}

/// How often a rejection reached the upstream.
enum Calls {
    Times(usize),
    MoreThanOnce,
}

/// One SDK's rows, as its script printed them, judged one by one.
struct Matrix {
    sdk: &'static str,
    rows: Vec<Value>,
    checked: Vec<String>,
    failures: Vec<String>,
}

impl Matrix {
    /// Runs an SDK's script against `probity` and reads the rows it
    /// printed: every surface's session does it the same way.
    async fn run(sdk: &'static str, command: Command, probity: &Probity) -> Self {
        Self::new(sdk, run_app(command, probity.url(""), SCRIPT_LIMIT).await)
    }

    fn new(sdk: &'static str, output: Output) -> Self {
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "{sdk}: the script failed\n{stdout}\n{stderr}"
        );
        if std::env::var_os("SDK_ROWS").is_some() {
            // `SDK_ROWS=1 cargo test --test it sdks::` shows what each app saw.
            let _ = writeln!(std::io::stderr(), "{sdk}:\n{stdout}");
        }
        let rows = stdout
            .lines()
            .map(|line| {
                serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("{sdk}: not a row ({e}): {line}\n{stderr}"))
            })
            .collect();
        Self {
            sdk,
            rows,
            checked: Vec::new(),
            failures: Vec::new(),
        }
    }

    fn row(&mut self, name: &str, expect: Expect) {
        let verdict = self.judge(name, &expect);
        self.settle(name, verdict);
    }

    /// A rejection row that also counts the upstream's requests.
    fn row_calls(&mut self, name: &str, expect: Expect, calls: usize, want: Calls) {
        if std::env::var_os("SDK_ROWS").is_some() {
            let _ = writeln!(
                std::io::stderr(),
                "{} {name}: {calls} upstream calls",
                self.sdk
            );
        }
        let verdict = self.judge(name, &expect).and_then(|()| match want {
            Calls::Times(n) if calls == n => Ok(()),
            Calls::MoreThanOnce if calls > 1 => Ok(()),
            Calls::Times(n) => Err(format!("the upstream got it {calls} times, not {n}")),
            Calls::MoreThanOnce => Err(format!("the upstream got it {calls} times: no retry")),
        });
        self.settle(name, verdict);
    }

    fn judge(&mut self, name: &str, expect: &Expect) -> Result<(), String> {
        self.checked.push(name.to_string());
        let line = self
            .rows
            .iter()
            .find(|r| r["row"] == name)
            .ok_or_else(|| "the script printed no such row".to_string())?;
        let raised = |class: &str, invariant: &str, kept: bool| {
            let text = line["text"].as_str().unwrap_or_default();
            let body = line["body"].as_str().unwrap_or_default();
            let holder = if kept { body } else { text };
            if line["raised"] != class || !holder.contains(invariant) {
                let place = if kept {
                    "in the kept body"
                } else {
                    "in its text"
                };
                return Err(format!(
                    "expected {class} with {invariant} {place}, got {line}"
                ));
            }
            Ok(())
        };
        match expect {
            Expect::Seen(expected) => {
                if same(&line["seen"], expected) {
                    Ok(())
                } else {
                    Err(format!("expected the app to see {expected}, got {line}"))
                }
            }
            Expect::Raised(class, invariant) => raised(class, invariant, false),
            Expect::RaisedKeeping(class, invariant) => raised(class, invariant, true),
        }
    }

    fn settle(&mut self, name: &str, verdict: Result<(), String>) {
        let sdk = self.sdk;
        let blocked = BLOCKED_BY_REQUIRED_RECORDS
            .iter()
            .find(|(s, r)| *s == sdk && *r == name)
            .map(|_| {
                (
                    "BLOCKED_BY_REQUIRED_RECORDS",
                    "blocked by issue 10 item 1 (a required record must keep its object, \
                     with only its malformed figures null)",
                )
            })
            .or_else(|| {
                BLOCKED_OTHER
                    .iter()
                    .find(|(s, r, _)| *s == sdk && *r == name)
                    .map(|(_, _, why)| ("BLOCKED_OTHER", *why))
            });
        match (verdict, blocked) {
            (Ok(()), None) => {}
            (Err(failure), None) => self.failures.push(format!("{sdk} {name}: {failure}")),
            (Err(failure), Some((_, why))) => {
                // Past the test harness's capture, as `can_run` does.
                let _ = writeln!(std::io::stderr(), "SKIPPED {sdk} {name}: {why}: {failure}");
            }
            (Ok(()), Some((list, _))) => self
                .failures
                .push(format!("{sdk} {name} passes now: remove it from {list}")),
        }
    }

    /// Fails on every failed row at once, on a row the script printed that
    /// no check read, and on a blocked row that is not in the matrix.
    fn finish(mut self) {
        let sdk = self.sdk;
        for line in &self.rows {
            let name = line["row"].as_str().unwrap_or_default();
            if !self.checked.iter().any(|c| c == name) {
                self.failures
                    .push(format!("{sdk} {name}: printed but never checked"));
            }
        }
        let listed = BLOCKED_BY_REQUIRED_RECORDS
            .iter()
            .copied()
            .chain(BLOCKED_OTHER.iter().map(|(s, r, _)| (*s, *r)));
        for (s, name) in listed.filter(|(s, _)| *s == sdk) {
            if !self.checked.iter().any(|c| c == name) {
                self.failures
                    .push(format!("{s} {name}: blocked, but no such row"));
            }
        }
        assert!(self.failures.is_empty(), "\n{}", self.failures.join("\n"));
    }
}

/// JSON equality with numbers compared as floats.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

// ---------------------------------------------------------------- what the apps read

/// OpenAI's rows, the same in Python and Node (both SDKs are generated from
/// one specification and name their errors alike).
fn openai_rows(m: &mut Matrix, s: &Session) {
    let vectors = json!([[0.25, -1.5, 3.0], [0.5, 0.125, -0.75]]);
    let embeddings = |id: Value, prompt: Value, total: Value| {
        Expect::Seen(json!({
            "id": id, "vectors": vectors, "prompt_tokens": prompt, "total_tokens": total
        }))
    };
    let id = json!(OPENAI_EMBEDDINGS_ID);
    m.row(
        "embeddings.valid",
        embeddings(id.clone(), json!(6), json!(6)),
    );
    m.row(
        "embeddings.figure",
        embeddings(id.clone(), json!(null), json!(6)),
    );
    m.row(
        "embeddings.collapse",
        embeddings(id, json!(null), json!(null)),
    );
    m.row("embeddings.id", embeddings(json!(null), json!(6), json!(6)));
    m.row(
        "embeddings.reject",
        Expect::Raised("InternalServerError", "embedding_count_mismatch"),
    );

    let chat = |id: &str, usage: Value| {
        Expect::Seen(
            json!({"id": if id.is_empty() { json!(null) } else { json!(id) }, "text": "Paris.", "usage": usage}),
        )
    };
    let usage = |prompt: Value, cached: Value| json!({"prompt_tokens": prompt, "completion_tokens": 2, "total_tokens": 26, "cached_tokens": cached});
    let id = "chatcmpl-CZ4kQ2bF7yqU1nR0aX9vT3mL8pWd";
    m.row("chat.valid", chat(id, usage(json!(24), json!(0))));
    m.row("chat.figure", chat(id, usage(json!(null), json!(0))));
    m.row("chat.details", chat(id, usage(json!(24), json!(null))));
    // A chat completion's `usage` is optional: it may collapse whole.
    m.row("chat.collapse", chat(id, json!(null)));
    m.row("chat.id", chat("", usage(json!(24), json!(0))));
    // Figures that contradict each other: each is not reported.
    m.row(
        "chat.relation",
        chat(id, json!({"prompt_tokens": null, "completion_tokens": null, "total_tokens": null, "cached_tokens": 0})),
    );
    m.row(
        "chat.reject",
        Expect::Raised("InternalServerError", "choice_invalid"),
    );

    let id = json!("chatcmpl-AbC123");
    let stream = |first: Value, usage: Value| {
        Expect::Seen(json!({"ids": [first, id, id, id], "text": "Hello", "usage": usage}))
    };
    let usage = |prompt: Value| json!({"prompt_tokens": prompt, "completion_tokens": 1, "total_tokens": 10, "cached_tokens": 0});
    m.row("chat-stream.valid", stream(id.clone(), usage(json!(9))));
    m.row("chat-stream.figure", stream(id.clone(), usage(json!(null))));
    m.row("chat-stream.collapse", stream(id.clone(), json!(null)));
    m.row("chat-stream.id", stream(json!(null), usage(json!(9))));
    m.row(
        "chat-stream.relation",
        stream(id.clone(), json!({"prompt_tokens": null, "completion_tokens": null, "total_tokens": null, "cached_tokens": 0})),
    );
    // The stream's final error event: the SDK raises its message.
    m.row(
        "chat-stream.reject",
        Expect::Raised("APIError", "choice_index_invalid"),
    );

    let rejected = || Expect::Raised("InternalServerError", "choice_invalid");
    m.row_calls(
        "chat.retry-default",
        rejected(),
        s.calls("retry-default"),
        Calls::Times(1),
    );
    m.row_calls(
        "chat.retry-advised",
        rejected(),
        s.calls("retry-advised"),
        Calls::MoreThanOnce,
    );
}

/// The Responses API's rows, the same in Python and Node: `responses.create`
/// plain and with `text.format`, and `responses.stream`. `usage` is
/// optional in both SDKs' types (it collapses whole), its details records
/// are not (they keep their object, the malformed count `null`).
fn responses_rows(m: &mut Matrix) {
    let id = "resp_68f0c2a1b3d4e5f60718293a4b5c6d7e";
    let reply =
        |id: Value, usage: Value| Expect::Seen(json!({"id": id, "text": "Paris.", "usage": usage}));
    let usage = |input: Value, cached: Value| json!({"input_tokens": input, "output_tokens": 3, "total_tokens": 17, "cached_tokens": cached});
    m.row(
        "responses.valid",
        reply(json!(id), usage(json!(14), json!(0))),
    );
    m.row(
        "responses.figure",
        reply(json!(id), usage(json!(null), json!(0))),
    );
    m.row(
        "responses.details",
        reply(json!(id), usage(json!(14), json!(null))),
    );
    m.row("responses.collapse", reply(json!(id), json!(null)));
    // The two that contradict each other; the total still holds.
    m.row(
        "responses.relation",
        reply(json!(id), usage(json!(null), json!(null))),
    );
    m.row(
        "responses.id",
        reply(json!(null), usage(json!(14), json!(0))),
    );
    m.row(
        "responses.reject",
        Expect::Raised("InternalServerError", "response_item_invalid"),
    );
    // The contract from `text.format`: the answer is judged, the body
    // unchanged (`annotate`), the verdict in the headers.
    m.row(
        "responses.format",
        Expect::Seen(json!({"text": "{\"city\": \"Paris\"}", "output": "valid", "reason": null})),
    );
    m.row(
        "responses.format-invalid",
        Expect::Seen(
            json!({"text": "The city is Paris.", "output": "invalid", "reason": "invalid_json"}),
        ),
    );
    let streamed = |usage: Value| {
        Expect::Seen(json!({"deltas": ["Par", "is."], "text": "Paris.", "usage": usage}))
    };
    let usage = |input: Value| json!({"input_tokens": input, "output_tokens": 3, "total_tokens": 17, "cached_tokens": 0});
    m.row("responses-stream.valid", streamed(usage(json!(14))));
    m.row("responses-stream.figure", streamed(usage(json!(null))));
    m.row("responses-stream.collapse", streamed(json!(null)));
    // probity's error event: the SDK raises its message.
    m.row(
        "responses-stream.reject",
        Expect::Raised("APIError", "response_sequence_invalid"),
    );
}

/// Anthropic's rows, the same in Python and Node but for the class of the
/// error a stream's error event raises.
fn anthropic_rows(m: &mut Matrix, s: &Session, stream_error: &'static str) {
    let message = |id: &str, input: Value, output: Value| {
        Expect::Seen(json!({
            "id": if id.is_empty() { json!(null) } else { json!(id) },
            "text": "The capital of France is Paris.",
            "input_tokens": input, "output_tokens": output, "web_search_requests": null,
        }))
    };
    let id = "msg_01XFDUDYJgAACzvnptvVoYEL";
    m.row("message.valid", message(id, json!(14), json!(10)));
    m.row("message.figure", message(id, json!(null), json!(10)));
    // `server_tool_use` is optional: the app reads it as absent.
    m.row("message.details", message(id, json!(14), json!(10)));
    m.row("message.collapse", message(id, json!(null), json!(null)));
    m.row("message.id", message("", json!(14), json!(10)));
    m.row("message.relation", message(id, json!(14), json!(null)));
    m.row(
        "message.reject",
        Expect::Raised("InternalServerError", "content_block_invalid"),
    );

    let streamed = |id: &str, input: Value, output: Value| {
        Expect::Seen(json!({
            "id": if id.is_empty() { json!(null) } else { json!(id) },
            "text": "Hello!", "streamed": "Hello!",
            "input_tokens": input, "output_tokens": output, "web_search_requests": null,
        }))
    };
    m.row("message-stream.valid", streamed(id, json!(25), json!(15)));
    m.row(
        "message-stream.figure",
        streamed(id, json!(null), json!(15)),
    );
    // message_delta's output_tokens still arrives.
    m.row(
        "message-stream.collapse",
        streamed(id, json!(null), json!(15)),
    );
    m.row(
        "message-stream.collapse-delta",
        streamed(id, json!(25), json!(null)),
    );
    m.row("message-stream.id", streamed("", json!(25), json!(15)));
    m.row(
        "message-stream.reject",
        Expect::Raised(stream_error, "content_block_invalid"),
    );

    let rejected = || Expect::Raised("InternalServerError", "content_block_invalid");
    m.row_calls(
        "message.retry-default",
        rejected(),
        s.calls("retry-default"),
        Calls::Times(1),
    );
    m.row_calls(
        "message.retry-advised",
        rejected(),
        s.calls("retry-advised"),
        Calls::MoreThanOnce,
    );
}

/// Ollama's rows (no record, no id: a figure nulled is its only
/// normalization), the same in Python and Node but for the class of the
/// error a stream's error line raises.
fn ollama_rows(m: &mut Matrix, stream_error: &'static str) {
    let chat = |text: &str, prompt: u64, eval: Value| {
        Expect::Seen(json!({"text": text, "prompt_eval_count": prompt, "eval_count": eval}))
    };
    let answer = "The capital of France is Paris.";
    m.row("chat.valid", chat(answer, 36, json!(17)));
    m.row("chat.figure", chat(answer, 36, json!(null)));
    m.row(
        "chat.reject",
        Expect::Raised("ResponseError", "payload_missing"),
    );
    m.row("chat-stream.valid", chat("The sky is blue.", 26, json!(4)));
    m.row(
        "chat-stream.figure",
        chat("The sky is blue.", 26, json!(null)),
    );
    // The stream's final error line: the SDK raises its `error`.
    m.row(
        "chat-stream.reject",
        Expect::Raised(stream_error, "payload_missing"),
    );
    let embed = |prompt: Value| {
        Expect::Seen(json!({
            "vectors": [[-0.00988927,0.0570856,-0.02802485,0.04217853,0.00568453,0.11982401],
                        [0.03769729,-0.08550727,0.0441691,0.02323356,0.01761595,0.11597303]],
            "prompt_eval_count": prompt, "total_duration": 14143917,
        }))
    };
    m.row("embed.valid", embed(json!(8)));
    m.row("embed.figure", embed(json!(null)));
    m.row(
        "embed.reject",
        Expect::Raised("ResponseError", "embedding_count_mismatch"),
    );
}

/// Cohere's rows, the same in Python and Node but for the error's class.
fn cohere_rows(m: &mut Matrix, error: &'static str) {
    let meta = |billed: Value, tokens: Value| json!({"billed_units": billed, "tokens": tokens});
    let embed = |id: Value, meta: Value| {
        Expect::Seen(json!({
            "id": id,
            "vectors": [[-0.02550791,0.08440178,0.07503259,0.07593699,0.05890679,0.0246976,-0.0368792,0.05988022],
                        [-0.11585804,-0.01713478,0.02128788,0.0400487,-0.07546668,0.03265419,0.06174331,-0.01665946]],
            "meta": meta,
        }))
    };
    let id = json!("da6e531f-54c6-4a73-bf92-f60566d8d753");
    let billed = json!({"input_tokens": 2, "search_units": null});
    let tokens = json!({"input_tokens": 2, "output_tokens": 0});
    m.row(
        "embed.valid",
        embed(id.clone(), meta(billed.clone(), tokens.clone())),
    );
    m.row(
        "embed.figure",
        embed(
            id.clone(),
            meta(
                billed.clone(),
                json!({"input_tokens": null, "output_tokens": 0}),
            ),
        ),
    );
    m.row(
        "embed.collapse",
        embed(id, meta(json!(null), tokens.clone())),
    );
    m.row("embed.id", embed(json!(null), meta(billed, tokens)));
    m.row(
        "embed.reject",
        Expect::Raised(error, "embedding_count_mismatch"),
    );

    let rerank = |id: Value, meta: Value| {
        Expect::Seen(json!({
            "id": id,
            "results": [[3, 0.999071], [4, 0.7867867], [2, 0.32713068]],
            "meta": meta,
        }))
    };
    let id = json!("07734bd2-2473-4f07-94e1-0d9f0e6843cf");
    let billed = json!({"input_tokens": null, "search_units": 1});
    let tokens = json!({"input_tokens": 120, "output_tokens": 0});
    m.row(
        "rerank.valid",
        rerank(id.clone(), meta(billed.clone(), tokens.clone())),
    );
    m.row(
        "rerank.figure",
        rerank(
            id.clone(),
            meta(
                billed.clone(),
                json!({"input_tokens": null, "output_tokens": 0}),
            ),
        ),
    );
    m.row(
        "rerank.collapse",
        rerank(id, meta(json!(null), tokens.clone())),
    );
    m.row("rerank.id", rerank(json!(null), meta(billed, tokens)));
    m.row(
        "rerank.reject",
        Expect::Raised(error, "rerank_index_out_of_range"),
    );
}

/// Bedrock Converse's rows, whole and streamed, the same in boto3 and the
/// JS SDK but for the classes of their errors. `usage` and `metrics` are
/// required records: with no sound figure left they keep their objects,
/// which the apps read unguarded, every figure absent.
fn bedrock_converse_rows(m: &mut Matrix, error: &'static str, stream_error: &'static str) {
    let usage = |input: Value, output: Value, total: Value| json!({"inputTokens": input, "outputTokens": output, "totalTokens": total});
    let sound = usage(json!(12), json!(9), json!(21));
    let figure = usage(json!(null), json!(9), json!(21));
    let none = usage(json!(null), json!(null), json!(null));
    let whole = |usage: &Value, latency: Value| {
        Expect::Seen(json!({
            "text": "Hello! How can I help you today?", "stop": "end_turn",
            "usage": usage, "latency": latency,
        }))
    };
    m.row("converse.valid", whole(&sound, json!(412)));
    m.row("converse.figure", whole(&figure, json!(412)));
    m.row("converse.collapse", whole(&none, json!(null)));
    m.row(
        "converse.relation",
        whole(&usage(json!(null), json!(null), json!(null)), json!(412)),
    );
    m.row(
        "converse.reject",
        Expect::Raised(error, "content_block_invalid"),
    );

    let streamed = |usage: &Value, latency: Value| {
        Expect::Seen(json!({
            "events": ["messageStart", "contentBlockDelta", "contentBlockDelta",
                       "contentBlockStop", "messageStop", "metadata"],
            "deltas": ["Hello!", " How can I help?"], "stop": "end_turn",
            "usage": usage, "latency": latency,
        }))
    };
    m.row("converse-stream.valid", streamed(&sound, json!(412)));
    m.row("converse-stream.figure", streamed(&figure, json!(412)));
    m.row("converse-stream.collapse", streamed(&none, json!(null)));
    // probity's exception frame after the first delta: the SDK raises it
    // as the stream's own error, probity's message its text.
    m.row(
        "converse-stream.reject",
        Expect::Raised(stream_error, "content_block_invalid"),
    );
    m.row(
        "converse-stream.reject-frame",
        Expect::Raised(stream_error, "event_stream_invalid"),
    );
}

// ---------------------------------------------------------------- Python

#[tokio::test]
async fn python_openai() {
    let s = Session::start().await;
    let Some(mut m) = s
        .python("python openai", "openai_app.py", &["openai"])
        .await
    else {
        return;
    };
    openai_rows(&mut m, &s);
    m.finish();
}

#[tokio::test]
async fn python_openai_responses() {
    let s = Session::start().await;
    let Some(mut m) = s
        .python(
            "python openai responses",
            "openai_responses_app.py",
            &["openai"],
        )
        .await
    else {
        return;
    };
    responses_rows(&mut m);
    m.finish();
}

/// The Agents SDK's `Runner.run` with one function tool: two Responses
/// calls (the tool call, then the answer with its output), usage summed.
#[tokio::test]
async fn python_openai_agents() {
    let s = Session::start().await;
    let Some(mut m) = s
        .python("python openai-agents", "openai_agents_app.py", &["agents"])
        .await
    else {
        return;
    };
    m.row(
        "agents.agent",
        Expect::Seen(json!({"final": "It is sunny in Paris.", "calls": ["Paris"], "requests": 2, "input_tokens": 28, "output_tokens": 6})),
    );
    // A malformed count reaches the agent as `null`, which its usage sum reads as 0.
    m.row(
        "agents.agent-figure",
        Expect::Seen(json!({"final": "Paris.", "calls": [], "requests": 1, "input_tokens": 14, "output_tokens": 0})),
    );
    m.row(
        "agents.reject",
        Expect::Raised("InternalServerError", "response_item_invalid"),
    );
    m.finish();
}

#[tokio::test]
async fn python_anthropic() {
    let s = Session::start().await;
    let Some(mut m) = s
        .python("python anthropic", "anthropic_app.py", &["anthropic"])
        .await
    else {
        return;
    };
    anthropic_rows(&mut m, &s, "APIStatusError");
    m.finish();
}

#[tokio::test]
async fn python_ollama() {
    let s = Session::start().await;
    let Some(mut m) = s
        .python("python ollama", "ollama_app.py", &["ollama"])
        .await
    else {
        return;
    };
    ollama_rows(&mut m, "ResponseError");
    m.finish();
}

#[tokio::test]
async fn python_cohere() {
    let s = Session::start().await;
    let Some(mut m) = s
        .python("python cohere", "cohere_app.py", &["cohere"])
        .await
    else {
        return;
    };
    cohere_rows(&mut m, "ApiError");
    m.finish();
}

#[tokio::test]
async fn python_voyageai() {
    let s = Session::start().await;
    let Some(mut m) = s
        .python("python voyageai", "voyageai_app.py", &["voyageai"])
        .await
    else {
        return;
    };
    let vectors: Vec<Vec<f64>> = VOYAGE_VECTORS
        .iter()
        .map(|v| v.iter().map(|x| f64::from(*x)).collect())
        .collect();
    let embed = |total: Value| Expect::Seen(json!({"vectors": vectors, "total_tokens": total}));
    m.row("embed.valid", embed(json!(10)));
    m.row("embed.figure", embed(json!(null)));
    // For a 502 the SDK's text is its own fixed sentence ("The server is
    // overloaded or not ready yet."): probity's message is in the body it
    // keeps, `e.http_body`.
    m.row(
        "embed.reject",
        Expect::RaisedKeeping("ServiceUnavailableError", "embedding_count_mismatch"),
    );
    let rerank = |total: Value| {
        Expect::Seen(json!({"results": [[3, 0.4375], [2, 0.34765625]], "total_tokens": total}))
    };
    m.row("rerank.valid", rerank(json!(26)));
    m.row("rerank.figure", rerank(json!(null)));
    m.row(
        "rerank.reject",
        Expect::RaisedKeeping("ServiceUnavailableError", "rerank_index_out_of_range"),
    );
    m.finish();
}

#[tokio::test]
async fn python_langchain_openai() {
    let s = Session::start().await;
    let Some(mut m) = s
        .python(
            "python langchain-openai",
            "langchain_openai_app.py",
            &["langchain_openai"],
        )
        .await
    else {
        return;
    };
    // langchain hands the app the vectors alone: a normalized figure or id
    // must simply not get in their way.
    let vectors = || Expect::Seen(json!({"vectors": [[0.25, -1.5, 3.0], [0.5, 0.125, -0.75]]}));
    for case in ["valid", "figure", "collapse", "id"] {
        m.row(&format!("embeddings.{case}"), vectors());
    }
    m.row(
        "embeddings.reject",
        Expect::Raised("InternalServerError", "embedding_count_mismatch"),
    );

    // The provider's figures as the SDK parsed them (`token_usage`), and
    // langchain's own summary (`usage_metadata`), which reads a null count
    // as 0: langchain's convention, not a value probity made up.
    let chat = |id: Value, token_usage: Value, summary: Value| {
        Expect::Seen(json!({
            "id": id, "text": "Paris.", "token_usage": token_usage, "usage_metadata": summary,
        }))
    };
    let figures = |prompt: Value| json!({"prompt_tokens": prompt, "completion_tokens": 2, "total_tokens": 26});
    let summary = |input: u64, cache_read: Value| json!({"input_tokens": input, "output_tokens": 2, "total_tokens": 26, "cache_read": cache_read});
    let id = json!("chatcmpl-CZ4kQ2bF7yqU1nR0aX9vT3mL8pWd");
    m.row(
        "chat.valid",
        chat(id.clone(), figures(json!(24)), summary(24, json!(0))),
    );
    m.row(
        "chat.figure",
        chat(id.clone(), figures(json!(null)), summary(0, json!(0))),
    );
    m.row(
        "chat.details",
        chat(id.clone(), figures(json!(24)), summary(24, json!(null))),
    );
    m.row("chat.collapse", chat(id, json!(null), json!(null)));
    m.row(
        "chat.id",
        chat(json!(null), figures(json!(24)), summary(24, json!(0))),
    );
    // langchain re-raises the openai SDK's error as its own subclass.
    m.row(
        "chat.reject",
        Expect::Raised("OpenAIAPIError", "choice_invalid"),
    );

    // A stream gives the app langchain's summary alone.
    let stream = |summary: Value| Expect::Seen(json!({"text": "Hello", "usage_metadata": summary}));
    let summary = |input: u64| json!({"input_tokens": input, "output_tokens": 1, "total_tokens": 10, "cache_read": 0});
    m.row("chat-stream.valid", stream(summary(9)));
    m.row("chat-stream.figure", stream(summary(0)));
    m.row("chat-stream.collapse", stream(json!(null)));
    m.row("chat-stream.id", stream(summary(9)));
    m.row(
        "chat-stream.reject",
        Expect::Raised("APIError", "choice_index_invalid"),
    );
    m.finish();
}

/// boto3's `bedrock-runtime` client: `converse`, `converse_stream`, and
/// `invoke_model` for Titan Text Embeddings v2 and Cohere Embed, whose
/// bodies the app reads itself (`json.loads(reply["body"].read())`) and
/// Bedrock's figures from the headers boto3 keeps.
#[tokio::test]
async fn python_boto3() {
    let s = Session::start().await;
    let Some(mut m) = s.python("python boto3", "bedrock_app.py", &["boto3"]).await else {
        return;
    };
    bedrock_converse_rows(&mut m, "ClientError", "EventStreamError");

    let invoked = |body: Value, input: Value, latency: Value| {
        Expect::Seen(json!({"body": body, "input_token_count": input, "latency": latency}))
    };
    // The body as sent: the same numbers, the same text.
    let titan: Value = serde_json::from_str(&titan_embed("valid")).unwrap();
    let mut nulled = titan.clone();
    nulled["inputTextTokenCount"] = Value::Null;
    m.row(
        "invoke-titan.valid",
        invoked(titan.clone(), json!("7"), json!("212")),
    );
    m.row(
        "invoke-titan.figure",
        invoked(nulled, json!("7"), json!("212")),
    );
    // A malformed header figure is removed: the app reads it as absent.
    m.row(
        "invoke-titan.header",
        invoked(titan, json!("7"), json!(null)),
    );
    m.row(
        "invoke-titan.reject",
        Expect::Raised("ClientError", "embedding_dimension_mismatch"),
    );
    let cohere: Value = serde_json::from_str(BEDROCK_COHERE_EMBED).unwrap();
    let mut no_id = cohere.clone();
    no_id["id"] = Value::Null;
    m.row(
        "invoke-cohere.valid",
        invoked(cohere.clone(), json!("7"), json!("212")),
    );
    m.row(
        "invoke-cohere.header",
        invoked(cohere, json!(null), json!("212")),
    );
    m.row("invoke-cohere.id", invoked(no_id, json!("7"), json!("212")));
    m.row(
        "invoke-cohere.reject",
        Expect::Raised("ClientError", "embedding_count_mismatch"),
    );

    // boto3 knows no `x-should-retry`: it retries any 502, in its default
    // mode twice (`standard`, botocore's default as of 1.44, with
    // AWS_RETRY_MODE unset), in `legacy` mode four times; with retries off
    // (the manual's advice, docs/src/apps.md) the corrupt answer is asked for once.
    let rejected = || Expect::Raised("ClientError", "content_block_invalid");
    for (case, times) in [("retry-default", 3), ("retry-legacy", 5), ("retry-off", 1)] {
        m.row_calls(
            &format!("converse.{case}"),
            rejected(),
            s.calls(case),
            Calls::Times(times),
        );
    }
    m.finish();
    s.bedrock_signed_by_the_route();
}

/// LangChain's `ChatBedrockConverse` (boto3's `converse` and
/// `converse_stream` underneath): the app gets LangChain's summary, which
/// reads a count boto3 left out as 0 (LangChain's default, not a value
/// probity made up); a rejection is boto3's own exception.
#[tokio::test]
async fn python_langchain_aws() {
    let s = Session::start().await;
    let Some(mut m) = s
        .python(
            "python langchain-aws",
            "langchain_bedrock_app.py",
            &["langchain_aws"],
        )
        .await
    else {
        return;
    };
    let seen = |input: u64| {
        Expect::Seen(json!({
            "text": "Hello! How can I help you today?",
            "usage_metadata": {"input_tokens": input, "output_tokens": 9, "total_tokens": 21},
        }))
    };
    m.row("converse.valid", seen(12));
    m.row("converse.figure", seen(0));
    m.row(
        "converse.reject",
        Expect::Raised("ClientError", "content_block_invalid"),
    );
    let streamed = |input: u64| {
        Expect::Seen(json!({
            "text": "Hello! How can I help?",
            "usage_metadata": {"input_tokens": input, "output_tokens": 9, "total_tokens": 21},
        }))
    };
    m.row("converse-stream.valid", streamed(12));
    m.row("converse-stream.figure", streamed(0));
    m.row(
        "converse-stream.reject",
        Expect::Raised("EventStreamError", "content_block_invalid"),
    );
    m.finish();
    s.bedrock_signed_by_the_route();
}

// ---------------------------------------------------------------- Node

#[tokio::test]
async fn node_openai() {
    let s = Session::start().await;
    let Some(mut m) = s.node("node openai", "openai_app.mjs", "openai").await else {
        return;
    };
    openai_rows(&mut m, &s);
    m.finish();
}

#[tokio::test]
async fn node_openai_responses() {
    let s = Session::start().await;
    let Some(mut m) = s
        .node(
            "node openai responses",
            "openai_responses_app.mjs",
            "openai",
        )
        .await
    else {
        return;
    };
    responses_rows(&mut m);
    m.finish();
}

#[tokio::test]
async fn node_anthropic() {
    let s = Session::start().await;
    let Some(mut m) = s
        .node("node anthropic", "anthropic_app.mjs", "@anthropic-ai/sdk")
        .await
    else {
        return;
    };
    anthropic_rows(&mut m, &s, "APIError");
    m.finish();
}

#[tokio::test]
async fn node_ollama() {
    let s = Session::start().await;
    let Some(mut m) = s.node("node ollama", "ollama_app.mjs", "ollama").await else {
        return;
    };
    // ollama-js throws a plain Error with the line's `error`.
    ollama_rows(&mut m, "Error");
    m.finish();
}

#[tokio::test]
async fn node_cohere() {
    let s = Session::start().await;
    let Some(mut m) = s.node("node cohere", "cohere_app.mjs", "cohere-ai").await else {
        return;
    };
    cohere_rows(&mut m, "CohereError");
    m.finish();
}

/// The AWS SDK for JavaScript v3's `BedrockRuntimeClient`: an error code it
/// has no class for (`provider_invalid_response`) is its service's base
/// exception, `name` the code, `message` probity's.
#[tokio::test]
async fn node_bedrock() {
    let s = Session::start().await;
    let Some(mut m) = s
        .node(
            "node bedrock",
            "bedrock_app.mjs",
            "@aws-sdk/client-bedrock-runtime",
        )
        .await
    else {
        return;
    };
    bedrock_converse_rows(
        &mut m,
        "BedrockRuntimeServiceException",
        "ModelStreamErrorException",
    );
    m.finish();
    s.bedrock_signed_by_the_route();
}
