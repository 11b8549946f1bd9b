//! OpenAI on Azure through its SDKs (issue 38): `openai.AzureOpenAI` and
//! Node's `AzureOpenAI`, which call
//! `/openai/deployments/{model}/chat/completions?api-version=…` (and
//! `/embeddings`) against a fake Azure resource answering Azure's own
//! bodies (the `tests/fixtures/azure/` answers: filter results at the root
//! and on each choice, the filter chunks of a stream). The deployment is
//! the model, and names the case.
//!
//! The `azure` route holds the resource's key: the upstream must see
//! `api-key: <the route's key>` and no key of the client's. The
//! `azure-own` route holds none: the client's own `api-key`, or its Entra
//! token (`Authorization: Bearer`), reaches the upstream as it was sent.

use std::process::Command;

use super::{Calls, Expect, Matrix, NPM, PIP, SCRIPTS};
use crate::support::*;
use serde_json::{json, Value};

/// The `azure` route's key (its `api_key_env`).
const AZURE_KEY: &str = "azure-resource-key-0123";
/// The key and the Entra token the scripts send (tests/sdks/azure_app.py).
const CLIENT_KEY: &str = "client-azure-key";
const ENTRA_TOKEN: &str = "entra-token-0123";

const CHAT: &str = "azure/gen_chat_content_filter_results_pass/response.json";
const STREAM: &str = "azure/gen_chat_stream_prompt_filter_chunk_pass/response.sse";
const ASYNC_FILTER: &str = "azure/gen_chat_stream_async_filter_offsets_pass/response.sse";
const CHAT_ID: &str = "chatcmpl-7R1nGnsXO8n4oi9UPz2f3UHdgAYMn";
const STREAM_ID: &str = "chatcmpl-CZ5cXkP9eQ1rS2tU3vW4xY5zA6bC";
const ASYNC_ID: &str = "chatcmpl-7rCNsVeZy0PGnX3H6jK8STps5nZUY";

fn text(name: &str) -> String {
    String::from_utf8(fixture(name)).unwrap()
}

/// The case a request asks for: its `model` (also the deployment in its
/// path).
fn case_of(request: &Recorded) -> String {
    let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
    body["model"].as_str().unwrap_or_default().to_string()
}

/// A fake Azure OpenAI resource: `/az/…` behind the `azure` routes,
/// `/own/…` behind `azure-own`.
fn resource(request: &Recorded) -> Reply {
    let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
    let case = case_of(request);
    let path = request.target.split('?').next().unwrap_or_default();
    if path.ends_with("/embeddings") {
        return Reply::json(200, super::openai_embeddings(&case, &body));
    }
    if !path.ends_with("/chat/completions") {
        return Reply::json(404, format!(r#"{{"error": "no {path} here"}}"#));
    }
    match (body["stream"] == true, case.as_str()) {
        (true, "async-filter") => super::sse(text(ASYNC_FILTER)),
        (true, case) => super::sse(stream(case)),
        (false, case) => Reply::json(200, chat(case)),
    }
}

fn chat(case: &str) -> String {
    let body = text(CHAT);
    match case {
        "figure" => super::edit(&body, r#""prompt_tokens": 27"#, r#""prompt_tokens": "27""#),
        // `message` must be an object.
        case if super::rejects(case) => {
            let start = body.find(r#""message": {"#).unwrap();
            let end = start + body[start..].find('}').unwrap() + 1;
            format!(
                "{}\"message\": \"Thomas Edison.\"{}",
                &body[..start],
                &body[end..]
            )
        }
        _ => body,
    }
}

fn stream(case: &str) -> String {
    let body = text(STREAM);
    match case {
        "figure" => super::edit(&body, r#""prompt_tokens":12"#, r#""prompt_tokens":"12""#),
        // A completion chunk's empty id (not a filter chunk's) is nulled.
        "id" => super::edit(&body, &format!(r#""id":"{STREAM_ID}""#), r#""id":"""#),
        // The finishing chunk names a choice beyond the one asked for.
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
        let upstream = Upstream::start(resource).await;
        let key = "api_key_env = \"PROBITY_TEST_AZURE_KEY\"";
        let injected = format!("{}/az", upstream.url());
        let routes = [
            route("azure", "/azure", &injected, "azure", key),
            route(
                "azure-retry",
                "/azure-retry",
                &injected,
                "azure",
                &format!("{key}\nretry_invalid_response = true"),
            ),
            route(
                "azure-own",
                "/azure-own",
                &format!("{}/own", upstream.url()),
                "azure",
                "",
            ),
        ]
        .concat();
        let probity = Probity::start_with_env(
            &config("", &routes),
            &[("PROBITY_TEST_AZURE_KEY", AZURE_KEY)],
        );
        Self { upstream, probity }
    }

    fn calls(&self, case: &str) -> usize {
        let requests = self.upstream.requests();
        requests.iter().filter(|r| case_of(r) == case).count()
    }

    /// Each request reached the resource with the key its route says: the
    /// route's `api-key` and nothing of the client's behind `azure`; the
    /// client's own key or Entra token behind `azure-own`.
    fn keys_as_the_routes_say(&self) {
        let requests = self.upstream.requests();
        for (case, prefix) in [
            ("entra", "/own/"),
            ("own-key", "/own/"),
            ("entra-replaced", "/az/"),
        ] {
            assert!(
                requests
                    .iter()
                    .any(|r| case_of(r) == case && r.target.starts_with(prefix)),
                "no {case} request reached {prefix}"
            );
        }
        for request in &requests {
            let target = &request.target;
            assert!(target.contains("api-version="), "{target}");
            let (key, bearer) = match (target.starts_with("/az/"), case_of(request).as_str()) {
                (true, _) => (Some(AZURE_KEY.to_string()), None),
                (false, "entra") => (None, Some(format!("Bearer {ENTRA_TOKEN}"))),
                (false, _) => (Some(CLIENT_KEY.to_string()), None),
            };
            assert_eq!(request.header("api-key"), key.as_deref(), "{target}");
            assert_eq!(
                request.header("authorization"),
                bearer.as_deref(),
                "{target}"
            );
        }
    }
}

/// The rows, the same in Python and Node.
fn azure_rows(m: &mut Matrix, s: &Session) {
    let vectors = json!([[0.25, -1.5, 3.0], [0.5, 0.125, -0.75]]);
    let embeddings = |prompt: Value| {
        Expect::Seen(json!({"vectors": vectors, "prompt_tokens": prompt, "total_tokens": 6}))
    };
    m.row("embeddings.valid", embeddings(json!(6)));
    m.row("embeddings.figure", embeddings(json!(null)));
    m.row(
        "embeddings.reject",
        Expect::Raised("InternalServerError", "embedding_count_mismatch"),
    );

    let text =
        "Thomas Edison held 1,093 US patents, and his first was for an electric vote recorder.";
    // What the app reads, Azure's filter results with it.
    let chat = |prompt: Value| {
        Expect::Seen(json!({
            "id": CHAT_ID, "text": text,
            "usage": {"prompt_tokens": prompt, "completion_tokens": 22, "total_tokens": 49},
            "prompt_filters": 1, "choice_filtered": false,
        }))
    };
    for name in [
        "chat.valid",
        "chat.own-key",
        "chat.entra",
        "chat.entra-replaced",
    ] {
        m.row(name, chat(json!(27)));
    }
    m.row("chat.figure", chat(json!(null)));
    m.row(
        "chat.reject",
        Expect::Raised("InternalServerError", "choice_invalid"),
    );

    // The prompt's filter chunk comes first, its id `""` as Azure sent it.
    let id = json!(STREAM_ID);
    let stream = |second: Value, prompt: Value| {
        Expect::Seen(json!({
            "ids": ["", second, id, id, id, id], "text": "Bonjour le monde !",
            "usage": {"prompt_tokens": prompt, "completion_tokens": 4, "total_tokens": 16},
            "filter_chunks": 1, "offsets": [],
        }))
    };
    m.row("chat-stream.valid", stream(id.clone(), json!(12)));
    m.row("chat-stream.figure", stream(id.clone(), json!(null)));
    m.row("chat-stream.id", stream(json!(null), json!(12)));
    m.row(
        "chat-stream.reject",
        Expect::Raised("APIError", "choice_index_invalid"),
    );
    // The Asynchronous Filter's chunks (offsets, no delta) pass untouched.
    let a = json!(ASYNC_ID);
    m.row(
        "chat-stream.async-filter",
        Expect::Seen(json!({
            "ids": ["", a, a, a, a, "", a, a, ""], "text": "Color is a perception.",
            "usage": null, "filter_chunks": 3, "offsets": [198, 571],
        })),
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

#[tokio::test]
async fn python_azure_openai() {
    let sdk = "python AzureOpenAI";
    if !can_run(
        &format!("the {sdk} rows"),
        &missing_python(&["openai"]),
        PIP,
    ) {
        return;
    }
    let s = Session::start().await;
    let mut command = Command::new("python3");
    command.arg(format!("{SCRIPTS}/azure_app.py"));
    let mut m = Matrix::run(sdk, command, &s.probity).await;
    azure_rows(&mut m, &s);
    m.finish();
    s.keys_as_the_routes_say();
}

#[tokio::test]
async fn node_azure_openai() {
    let sdk = "node AzureOpenAI";
    if !can_run(&format!("the {sdk} rows"), &missing_node(&["openai"]), NPM) {
        return;
    }
    let s = Session::start().await;
    let mut command = Command::new("node");
    command.arg(format!("{SCRIPTS}/node/azure_app.mjs"));
    let mut m = Matrix::run(sdk, command, &s.probity).await;
    azure_rows(&mut m, &s);
    m.finish();
    s.keys_as_the_routes_say();
}
