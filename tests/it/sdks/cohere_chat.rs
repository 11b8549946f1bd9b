//! Cohere's chat through its SDKs (issue 38): `cohere.ClientV2.chat` and
//! `chat_stream`, Node's `CohereClientV2` `chat` and `chatStream`, which
//! call `POST /v2/chat` against a fake Cohere answering the
//! `tests/fixtures/cohere/gen_chat_*` bodies. The `model` names the case.
//!
//! Beside the figure and payload rows, the citations: a request that
//! supplies `documents` has its answer's document citations judged against
//! them. An unknown one is annotated on the `cohere` route (the body as it
//! came, `probity-output: invalid`), degraded on `cohere-degrade` (whose
//! contract says so), counted, and never retried.

use std::process::Command;

use super::{Calls, Expect, Matrix, NPM, PIP, SCRIPTS};
use crate::support::*;
use serde_json::{json, Value};

const CHAT: &str = "cohere/gen_chat_pass/response.json";
const TOOL_CALL: &str = "cohere/gen_chat_tool_call_pass/response.json";
const STREAM: &str = "cohere/gen_chat_stream_pass/response.sse";
const CHAT_ID: &str = "c14c80c3-18eb-4519-9460-6c92edd8cfb4";
const STREAM_ID: &str = "29f14a5a-11de-4cae-9800-25e4747408ea";

/// docs.cohere.com "Documents and Citations": the penguins, cited by the
/// ids Cohere gives documents supplied without one (`doc:0:<position>`),
/// and the third document by its own id.
const CITED: &str = r#"{"id":"6a3f1c2e-9d1b-4e53-a2c4-0b7e9f2d4a61","finish_reason":"COMPLETE","message":{"role":"assistant","content":[{"type":"text","text":"The tallest penguins are the Emperor penguins. They only live in Antarctica."}],"citations":[{"start":29,"end":46,"text":"Emperor penguins.","sources":[{"type":"document","id":"doc:0:0","document":{"id":"doc:0:0","snippet":"Emperor penguins are the tallest.","title":"Tall penguins"}}],"type":"TEXT_CONTENT"},{"start":65,"end":76,"text":"Antarctica.","sources":[{"type":"document","id":"doc:0:1","document":{"id":"doc:0:1","snippet":"Emperor penguins only live in Antarctica.","title":"Penguin habitats"}},{"type":"document","id":"animals","document":{"id":"animals","snippet":"Animals are different from plants."}}],"type":"TEXT_CONTENT"}]},"usage":{"billed_units":{"input_tokens":89,"output_tokens":15},"tokens":{"input_tokens":1046,"output_tokens":34}}}"#;
const CITED_TEXT: &str =
    "The tallest penguins are the Emperor penguins. They only live in Antarctica.";
/// The JSON answer a degrade route's contract reads (a route contract
/// holds the answer to be one JSON value).
const CITED_JSON: &str = r#"{\"answer\": \"Emperor penguins, in Antarctica.\"}"#;

/// The sentence the unknown citation's verdict says.
const UNKNOWN: &str = "a citation names \"doc:0:7\", not a document of the request";

fn text(name: &str) -> String {
    String::from_utf8(fixture(name)).unwrap()
}

fn case_of(request: &Recorded) -> String {
    let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
    body["model"].as_str().unwrap_or_default().to_string()
}

/// A fake Cohere: `/v2/chat`, whole or streamed, by the case.
fn cohere(request: &Recorded) -> Reply {
    let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
    if !request.target.ends_with("/v2/chat") {
        return Reply::json(
            404,
            format!(r#"{{"message": "no {} here"}}"#, request.target),
        );
    }
    let case = case_of(request);
    if body["stream"] == true {
        return super::sse(stream(&case));
    }
    Reply::json(200, chat(&case))
}

fn chat(case: &str) -> String {
    let unknown = || super::edit(CITED, r#""id":"doc:0:1""#, r#""id":"doc:0:7""#);
    match case {
        "figure" => super::edit(
            &text(CHAT),
            r#""input_tokens":17"#,
            r#""input_tokens":"17""#,
        ),
        "tools" => text(TOOL_CALL),
        "citations" => CITED.to_string(),
        "citation-unknown" | "citation-retried" => unknown(),
        "citation-degrade" => super::edit(&unknown(), CITED_TEXT, CITED_JSON),
        case if super::rejects(case) => {
            super::edit(&text(CHAT), r#""role":"assistant""#, r#""role":"user""#)
        }
        _ => text(CHAT),
    }
}

fn stream(case: &str) -> String {
    let body = text(STREAM);
    match case {
        "figure" => super::edit(
            &body,
            r#""output_tokens":5},"cached"#,
            r#""output_tokens":"5"},"cached"#,
        ),
        // The second delta names a block no content-start began.
        "reject" => super::edit(
            &body,
            r#""index":0,"delta":{"message":{"content":{"text":" APIs"#,
            r#""index":1,"delta":{"message":{"content":{"text":" APIs"#,
        ),
        "citation-unknown" => {
            let citation = r#"event: citation-start
data: {"type":"citation-start","index":0,"delta":{"message":{"citations":{"start":0,"end":9,"text":"Designing","sources":[{"type":"document","id":"doc:0:7","document":{"id":"doc:0:7","snippet":"Design APIs."}}],"type":"TEXT_CONTENT"}}}}

event: citation-end
data: {"type":"citation-end","index":0}

event: message-end"#;
            super::edit(&body, "event: message-end", citation)
        }
        _ => body,
    }
}

struct Session {
    upstream: Upstream,
    probity: Probity,
}

impl Session {
    async fn start() -> Self {
        let upstream = Upstream::start(cohere).await;
        let degrade = "[routes.contract]\ntask = \"penguins\"\non_invalid = \"degrade\"";
        let routes = [
            route("cohere", "/cohere", &upstream.url(), "cohere", ""),
            route(
                "cohere-degrade",
                "/cohere-degrade",
                &upstream.url(),
                "cohere",
                degrade,
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

    /// Each unknown citation was counted once under its task: two whole
    /// answers and a stream under `cohere_chat`, the degraded one under
    /// its route's task.
    async fn counted(&self) {
        let sample = |task: &str| {
            format!(
                r#"probity_model_invalid_output_total{{task="{task}",reason="citation_unknown",client="unknown"}}"#
            )
        };
        let chat = self.probity.metric(&sample("cohere_chat")).await;
        let degraded = self.probity.metric(&sample("penguins")).await;
        assert_eq!(chat, Some(3.0), "cohere_chat");
        assert_eq!(degraded, Some(1.0), "penguins");
    }
}

/// The rows, the same in Python and Node but for the error class.
fn chat_rows(m: &mut Matrix, s: &Session, error: &'static str) {
    let usage = |input: Value| {
        json!({"billed_units": {"input_tokens": input, "output_tokens": 24},
               "tokens": {"input_tokens": 215, "output_tokens": 24}})
    };
    let chat = |input: Value| {
        Expect::Seen(json!({
            "id": CHAT_ID, "finish_reason": "COMPLETE",
            "text": "LLMs stand for Large Language Models, which are a type of neural network model specialized in processing and generating human language.",
            "usage": usage(input), "output": null,
        }))
    };
    m.row("chat.valid", chat(json!(17)));
    m.row("chat.figure", chat(json!(null)));
    m.row("chat.reject", Expect::Raised(error, "role_invalid"));
    m.row(
        "chat.tools",
        Expect::Seen(json!({
            "finish_reason": "TOOL_CALL",
            "calls": [["get_weather", "{\"location\":\"Toronto\"}"]],
            "output": "valid", "reason": null,
        })),
    );
    let cited = |second: &str, output: &str, reason: Value| {
        Expect::Seen(json!({
            "text": CITED_TEXT, "sources": ["doc:0:0", second, "animals"],
            "output": output, "reason": reason,
        }))
    };
    m.row("chat.citations", cited("doc:0:1", "valid", json!(null)));
    // Annotated: the answer as it came, the verdict in the headers.
    m.row(
        "chat.citation-unknown",
        cited("doc:0:7", "invalid", json!("citation_unknown")),
    );
    // Degraded, as the route's contract says: the text is its answer.
    let degraded = json!({"answer": "", "sufficient": false, "citations": [],
                          "uncertainty": [format!("model output rejected: {UNKNOWN}")]});
    m.row(
        "chat.citation-degrade",
        Expect::Seen(json!({
            "answer": degraded, "sources": ["doc:0:0", "doc:0:7", "animals"],
            "output": "invalid", "reason": "citation_unknown",
        })),
    );
    // Never retried: the SDK sees a sound 200.
    m.row_calls(
        "chat.citation-retried",
        cited("doc:0:7", "invalid", json!("citation_unknown")),
        s.calls("citation-retried"),
        Calls::Times(1),
    );

    let stream = |output: Value, sources: Value| {
        Expect::Seen(json!({
            "id": STREAM_ID, "text": "Designing APIs That Last", "finish_reason": "COMPLETE",
            "usage": {"billed_units": {"input_tokens": 11, "output_tokens": 5},
                      "tokens": {"input_tokens": 508, "output_tokens": output}},
            "sources": sources, "error": null,
        }))
    };
    m.row("chat-stream.valid", stream(json!(5), json!([])));
    m.row("chat-stream.figure", stream(json!(null), json!([])));
    m.row(
        "chat-stream.citation-unknown",
        stream(json!(5), json!(["doc:0:7"])),
    );
    // Cohere's SDKs raise nothing mid-stream: its own failed-generation
    // event (`finish_reason` `ERROR`, `delta.error`) carries probity's
    // message.
    m.row(
        "chat-stream.reject",
        Expect::Seen(json!({
            "id": STREAM_ID, "text": "Designing", "finish_reason": "ERROR",
            "usage": null, "sources": [], "error": "content_block_invalid",
        })),
    );

    // The SDK retries every 5xx twice, whatever x-should-retry says.
    m.row_calls(
        "chat.retry-default",
        Expect::Raised(error, "role_invalid"),
        s.calls("retry-default"),
        Calls::MoreThanOnce,
    );
}

#[tokio::test]
async fn python_cohere_chat() {
    let sdk = "python cohere ClientV2 chat";
    if !can_run(
        &format!("the {sdk} rows"),
        &missing_python(&["cohere"]),
        PIP,
    ) {
        return;
    }
    let s = Session::start().await;
    let mut command = Command::new("python3");
    command.arg(format!("{SCRIPTS}/cohere_chat_app.py"));
    let mut m = Matrix::run(sdk, command, &s.probity).await;
    chat_rows(&mut m, &s, "ApiError");
    m.finish();
    s.counted().await;
}

#[tokio::test]
async fn node_cohere_chat() {
    let sdk = "node CohereClientV2 chat";
    if !can_run(
        &format!("the {sdk} rows"),
        &missing_node(&["cohere-ai"]),
        NPM,
    ) {
        return;
    }
    let s = Session::start().await;
    let mut command = Command::new("node");
    command.arg(format!("{SCRIPTS}/node/cohere_chat_app.mjs"));
    let mut m = Matrix::run(sdk, command, &s.probity).await;
    chat_rows(&mut m, &s, "CohereError");
    m.finish();
    s.counted().await;
}
