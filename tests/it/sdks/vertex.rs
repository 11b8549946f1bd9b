//! Vertex AI through its SDKs (issue 38): `anthropic.AnthropicVertex` and
//! `@anthropic-ai/vertex-sdk` (Claude's `:rawPredict`, `:streamRawPredict`),
//! google-genai and `@google/genai` with `vertexai` (Gemini's
//! `:generateContent`, `:streamGenerateContent`, and embeddings' `:predict`),
//! and the openai SDK against Vertex's OpenAI-compatible
//! `…/endpoints/openapi/chat/completions`, all on one `vertex` route in
//! front of a fake Vertex answering the `tests/fixtures/vertex/` answers.
//! The model in the path (or the openai request's `google/<model>`) names
//! the case. The route holds no credential here: the app's OAuth access
//! token reaches Vertex as it sent it.

use std::process::Command;

use super::{Calls, Expect, Matrix, NPM, PIP, SCRIPTS};
use crate::support::*;
use serde_json::{json, Value};

/// The access token the scripts send (tests/sdks/vertex_app.py).
const TOKEN: &str = "ya29.vertex-access-token";

const CLAUDE: &str = "vertex/gen_raw_predict_pass/response.json";
const CLAUDE_STREAM: &str = "vertex/gen_stream_raw_predict_pass/response.sse";
const GEMINI: &str = "vertex/gen_generate_traffic_type_pass/response.json";
const GEMINI_STREAM: &str = "vertex/gen_stream_generate_traffic_type_pass/response.sse";
const PREDICT: &str = "vertex/predict_pass/response.json";
const CHAT: &str = "vertex/gen_openapi_chat_pass/response.json";
const CHAT_STREAM: &str = "vertex/gen_openapi_chat_stream_pass/response.sse";

/// The cases whose answer breaks a payload invariant: the matrix's, and
/// google-genai's retry cases (apart from Claude's, so each is counted
/// alone).
fn rejects(case: &str) -> bool {
    super::rejects(case) || case.starts_with("retry-")
}

fn text(name: &str) -> String {
    String::from_utf8(fixture(name)).unwrap()
}

/// The path's publisher, model and method:
/// `…/publishers/google/models/valid:generateContent`.
fn model_path(target: &str) -> Option<(&str, &str, &str)> {
    let path = target.split('?').next()?;
    let (_, rest) = path.rsplit_once("/publishers/")?;
    let (publisher, rest) = rest.split_once("/models/")?;
    let (model, method) = rest.split_once(':')?;
    Some((publisher, model, method))
}

/// The case a request asks for: the model in its path, or the openai
/// request's `google/<case>`.
fn case_of(request: &Recorded) -> String {
    if let Some((_, model, _)) = model_path(&request.target) {
        return model.to_string();
    }
    let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
    let model = body["model"].as_str().unwrap_or_default();
    model.trim_start_matches("google/").to_string()
}

/// A fake Vertex AI endpoint (`https://{region}-aiplatform.googleapis.com`).
fn vertex(request: &Recorded) -> Reply {
    let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
    let case = case_of(request);
    let streamed = body["stream"] == true;
    let path = request.target.split('?').next().unwrap_or_default();
    if path.ends_with("/endpoints/openapi/chat/completions") {
        return match streamed {
            true => super::sse(chat_stream(&case)),
            false => Reply::json(200, chat(&case)),
        };
    }
    match model_path(&request.target).map(|(p, _, m)| (p, m)) {
        Some(("anthropic", "rawPredict")) => Reply::json(200, claude(&case)),
        Some(("anthropic", "streamRawPredict")) => super::sse(claude_stream(&case)),
        Some(("google", "generateContent")) => Reply::json(200, gemini(&case)),
        Some(("google", "streamGenerateContent")) => super::sse(gemini_stream(&case)),
        Some(("google", "predict")) => Reply::json(200, predict(&case)),
        _ => Reply::json(
            404,
            format!(r#"{{"error": {{"code": 404, "message": "no {path} here"}}}}"#),
        ),
    }
}

fn claude(case: &str) -> String {
    let body = text(CLAUDE);
    match case {
        "figure" => super::edit(&body, r#""output_tokens":12"#, r#""output_tokens":"12""#),
        case if rejects(case) => super::edit(&body, r#""role":"assistant""#, r#""role":"user""#),
        _ => body,
    }
}

fn claude_stream(case: &str) -> String {
    let body = text(CLAUDE_STREAM);
    match case {
        "figure" => super::edit(&body, r#""output_tokens":15"#, r#""output_tokens":"15""#),
        // A delta for a block never started.
        "reject" => super::edit(
            &body,
            r#""index":0,"delta":{"type":"text_delta","text":"!"}"#,
            r#""index":1,"delta":{"type":"text_delta","text":"!"}"#,
        ),
        _ => body,
    }
}

fn gemini(case: &str) -> String {
    let body = text(GEMINI);
    match case {
        "figure" => super::edit(
            &body,
            r#""promptTokenCount": 9"#,
            r#""promptTokenCount": "9""#,
        ),
        // The one candidate asked for, at index 3.
        case if rejects(case) => super::edit(
            &body,
            r#""finishReason": "STOP","#,
            r#""finishReason": "STOP", "index": 3,"#,
        ),
        _ => body,
    }
}

fn gemini_stream(case: &str) -> String {
    let body = text(GEMINI_STREAM);
    match case {
        "figure" => super::edit(
            &body,
            r#""promptTokenCount": 9"#,
            r#""promptTokenCount": "9""#,
        ),
        "reject" => super::edit(
            &body,
            r#" patterns from data"}]},"index": 0"#,
            r#" patterns from data"}]},"index": 1"#,
        ),
        _ => body,
    }
}

fn predict(case: &str) -> String {
    let body = text(PREDICT);
    match case {
        "figure" => super::edit(
            &body,
            r#""billableCharacterCount": 50"#,
            r#""billableCharacterCount": "50""#,
        ),
        // One prediction for two instances.
        "reject" => {
            let mut answer: Value = serde_json::from_str(&body).unwrap();
            answer["predictions"].as_array_mut().unwrap().pop();
            answer.to_string()
        }
        _ => body,
    }
}

fn chat(case: &str) -> String {
    let body = text(CHAT);
    match case {
        "figure" => super::edit(&body, r#""prompt_tokens": 6"#, r#""prompt_tokens": "6""#),
        "reject" => super::edit(&body, r#""index": 0,"#, r#""index": 2,"#),
        _ => body,
    }
}

fn chat_stream(case: &str) -> String {
    let body = text(CHAT_STREAM);
    match case {
        "reject" => super::edit(
            &body,
            r#""finish_reason":"stop","index":0"#,
            r#""finish_reason":"stop","index":1"#,
        ),
        _ => body,
    }
}

struct Session {
    upstream: Upstream,
    probity: Probity,
}

impl Session {
    async fn start() -> Self {
        let upstream = Upstream::start(vertex).await;
        let routes = [
            route("vertex", "/vertex", &upstream.url(), "vertex", ""),
            route(
                "vertex-retry",
                "/vertex-retry",
                &upstream.url(),
                "vertex",
                "retry_invalid_response = true",
            ),
        ]
        .concat();
        let probity = Probity::start(&config("", &routes));
        Self { upstream, probity }
    }

    fn calls(&self, case: &str) -> usize {
        let requests = self.upstream.requests();
        requests.iter().filter(|r| case_of(r) == case).count()
    }

    /// Every request reached Vertex with the app's own access token.
    fn tokens_passed_through(&self) {
        let bearer = format!("Bearer {TOKEN}");
        for request in self.upstream.requests() {
            let target = &request.target;
            assert_eq!(
                request.header("authorization"),
                Some(bearer.as_str()),
                "{target}"
            );
        }
    }
}

/// Claude's rows, the same in Python and Node.
fn claude_rows(m: &mut Matrix, s: &Session, stream_error: &'static str) {
    let id = "msg_vrtx_01HnKmJLvqx1ZGvJzF8aW2yR";
    let text = "Hello! How can I help you today?";
    let message = |output: Value| {
        Expect::Seen(json!({"id": id, "text": text, "input_tokens": 10, "output_tokens": output}))
    };
    m.row("message.valid", message(json!(12)));
    m.row("message.figure", message(json!(null)));
    let rejected = || Expect::Raised("InternalServerError", "role_invalid");
    m.row("message.reject", rejected());
    let id = "msg_vrtx_01PxqL8sVNuyT3RkZcDkWbYe";
    let streamed = |output: Value| {
        Expect::Seen(json!({
            "id": id, "text": "Hello!", "streamed": "Hello!",
            "input_tokens": 25, "output_tokens": output,
        }))
    };
    m.row("message-stream.valid", streamed(json!(15)));
    m.row("message-stream.figure", streamed(json!(null)));
    m.row(
        "message-stream.reject",
        Expect::Raised(stream_error, "content_block_invalid"),
    );
    // The anthropic SDKs obey `x-should-retry`.
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

/// Gemini's and the embeddings' rows, the same in Python and Node: Vertex's
/// `trafficType` and details lists reach the app as Vertex sent them.
fn gemini_rows(m: &mut Matrix, s: &Session, error: &'static str) {
    let usage = |prompt: Value| {
        json!({
            "prompt": prompt, "candidates": 10, "total": 47, "thoughts": 28,
            "traffic_type": "ON_DEMAND",
            "prompt_details": [["TEXT", 9]], "candidates_details": [["TEXT", 10]],
        })
    };
    let generated = |prompt: Value| {
        Expect::Seen(json!({
            "id": "Q2ykaN7uBZXbz7IP5cWe-Ak",
            "text": "AI learns patterns from data to make predictions.",
            "usage": usage(prompt),
        }))
    };
    m.row("generate.valid", generated(json!(9)));
    m.row("generate.figure", generated(json!(null)));
    let rejected = || Expect::Raised(error, "choice_index_invalid");
    m.row("generate.reject", rejected());

    let chunk = |prompt: Value| {
        json!({
            "prompt": prompt, "candidates": null, "total": 9, "thoughts": null,
            "traffic_type": "ON_DEMAND", "prompt_details": [["TEXT", 9]], "candidates_details": null,
        })
    };
    let last = json!({
        "prompt": 9, "candidates": 12, "total": 49, "thoughts": 28, "traffic_type": "ON_DEMAND",
        "prompt_details": [["TEXT", 9]], "candidates_details": [["TEXT", 12]],
    });
    let streamed = |prompt: Value| {
        Expect::Seen(json!({
            "text": "AI learns patterns from data to make predictions.",
            "first": chunk(prompt), "last": last, "chunks": 3,
        }))
    };
    m.row("generate-stream.valid", streamed(json!(9)));
    m.row("generate-stream.figure", streamed(json!(null)));
    m.row("generate-stream.reject", rejected());
    // google-genai retries only when its HttpRetryOptions say so.
    m.row_calls(
        "generate.retry-default",
        rejected(),
        s.calls("retry-genai-default"),
        Calls::Times(1),
    );
    m.row_calls(
        "generate.retry-configured",
        rejected(),
        s.calls("retry-genai-configured"),
        Calls::Times(2),
    );

    let embedded = |billable: Value| {
        Expect::Seen(json!({
            "vectors": [
                [0.010562753304839134, 0.04915031045675278, -0.03647759184241295, -0.05006510391831398],
                [-0.0069738235, 0.012880106, 0.0071839094, -0.057437018],
            ],
            "token_counts": [4, 8], "truncated": [false, false],
            "billable_characters": billable,
        }))
    };
    m.row("embed.valid", embedded(json!(50)));
    m.row("embed.figure", embedded(json!(null)));
    m.row(
        "embed.reject",
        Expect::Raised(error, "embedding_count_mismatch"),
    );
}

/// The openai SDK's rows on Vertex's OpenAI-compatible endpoint.
fn chat_rows(m: &mut Matrix) {
    let chat = |prompt: Value| {
        Expect::Seen(json!({
            "id": "k2ykaN7uBZXbz7IP5cWe-Ak", "text": "Bonjour !", "usage": [prompt, 3, 9],
        }))
    };
    m.row("chat.valid", chat(json!(6)));
    m.row("chat.figure", chat(json!(null)));
    m.row(
        "chat.reject",
        Expect::Raised("InternalServerError", "choice_index_invalid"),
    );
    m.row(
        "chat-stream.valid",
        Expect::Seen(json!({"text": "Bonjour !", "usage": [6, 3, 9]})),
    );
    m.row(
        "chat-stream.reject",
        Expect::Raised("APIError", "choice_index_invalid"),
    );
}

#[tokio::test]
async fn python_vertex() {
    let sdk = "python vertex";
    let modules = ["anthropic", "google.genai", "google.oauth2", "openai"];
    if !can_run(&format!("the {sdk} rows"), &missing_python(&modules), PIP) {
        return;
    }
    let s = Session::start().await;
    let mut command = Command::new("python3");
    command.arg(format!("{SCRIPTS}/vertex_app.py"));
    let mut m = Matrix::run(sdk, command, &s.probity).await;
    claude_rows(&mut m, &s, "APIStatusError");
    gemini_rows(&mut m, &s, "ServerError");
    chat_rows(&mut m);
    m.finish();
    s.tokens_passed_through();
}

#[tokio::test]
async fn node_vertex() {
    let sdk = "node vertex";
    let packages = [
        "@anthropic-ai/vertex-sdk",
        "@google/genai",
        "google-auth-library",
        "openai",
    ];
    if !can_run(&format!("the {sdk} rows"), &missing_node(&packages), NPM) {
        return;
    }
    let s = Session::start().await;
    let mut command = Command::new("node");
    command.arg(format!("{SCRIPTS}/node/vertex_app.mjs"));
    let mut m = Matrix::run(sdk, command, &s.probity).await;
    claude_rows(&mut m, &s, "APIError");
    gemini_rows(&mut m, &s, "ApiError");
    chat_rows(&mut m);
    m.finish();
    s.tokens_passed_through();
}
