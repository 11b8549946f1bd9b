//! Claude on Bedrock through Anthropic's own SDKs (issue 38):
//! `anthropic.AnthropicBedrock` and `@anthropic-ai/bedrock-sdk`, which call
//! `POST /model/{model}/invoke` with a Messages body
//! (`anthropic_version: "bedrock-2023-05-31"`) and, to stream,
//! `/model/{model}/invoke-with-response-stream`: AWS's event stream whose
//! `chunk` frames carry one Anthropic event each, in base64 (the
//! `tests/fixtures/bedrock/gen_invoke_*` answers). The model id's version
//! names the case (`anthropic.claude-3-haiku-20240307-v1:figure`).
//!
//! Both routes hold a Bedrock API key: the SDKs sign with dummy AWS
//! credentials, and the upstream must see the route's key and none of the
//! SDK's SigV4 headers.

use std::process::Command;

use super::{Calls, Expect, Matrix, NPM, PIP, SCRIPTS};
use crate::support::*;
use serde_json::{json, Value};

/// The routes' Bedrock API key (their `api_key_env`).
const KEY: &str = "bedrock-claude-key-0123";

/// A whole answer (an Anthropic Message, as `invoke` returns it).
const MESSAGE: &str = "bedrock/gen_invoke_messages_pass/response.json";
/// A stream (AWS's Bedrock example, written one frame per line).
const STREAM: &str = "bedrock/gen_invoke_stream_pass/response.events";
const MESSAGE_ID: &str = "msg_01XFDUDYJgAACzvnptvVoYEL";
const STREAM_ID: &str = "msg_bdrk_01XtrXhdRwKsXvtzRLuwkmnZ";
const TEXT: &str = "Hello! How can I help you today?";

fn text(name: &str) -> String {
    String::from_utf8(fixture(name)).unwrap()
}

/// The case a request asks for: its model id's version, after the last `:`
/// (sent as `:` or `%3A`).
fn case_of(request: &Recorded) -> String {
    let Some((_, rest)) = request.target.split_once("/model/") else {
        return String::new();
    };
    let id = rest.rsplit_once('/').map_or(rest, |(id, _)| id);
    let id = id.replace("%3A", ":");
    id.rsplit(':').next().unwrap_or_default().to_string()
}

/// A fake Bedrock Runtime for Claude: `invoke` answers a Message with
/// Bedrock's token headers, `invoke-with-response-stream` its event stream.
fn bedrock(request: &Recorded) -> Reply {
    let case = case_of(request);
    let path = request.target.split('?').next().unwrap_or_default();
    if path.ends_with("/invoke-with-response-stream") {
        return Reply::stream("application/vnd.amazon.eventstream", stream(&case));
    }
    if !path.ends_with("/invoke") {
        return Reply::json(404, format!(r#"{{"message": "no {path} here"}}"#))
            .header("x-amzn-errortype", "UnknownOperationException");
    }
    Reply::json(200, message(&case))
        .header("x-amzn-bedrock-input-token-count", "10")
        .header("x-amzn-bedrock-output-token-count", "12")
        .header("x-amzn-bedrock-invocation-latency", "742")
}

fn message(case: &str) -> String {
    let body = text(MESSAGE);
    match case {
        "figure" => super::edit(&body, r#""input_tokens":10"#, r#""input_tokens":"10""#),
        // A content block without its `type`
        // (tests/fixtures/bedrock/gen_invoke_messages_block_type_missing).
        case if super::rejects(case) => super::edit(&body, r#"{"type":"text","#, "{"),
        _ => body,
    }
}

/// The stream of a case, one frame per write but the third, split in two.
fn stream(case: &str) -> Vec<Part> {
    let events = text(STREAM);
    let delta = r#""usage":{"output_tokens":9}"#;
    let events = match case {
        "figure" => super::edit(&events, delta, r#""usage":{"output_tokens":"9"}"#),
        // A second message_delta whose cumulative count falls: nulled.
        "falling" => {
            let last = events.lines().last().unwrap();
            let falling = r#"chunk-of {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":4}}"#;
            super::edit(&events, last, &format!("{falling}\n{last}"))
        }
        "metrics" => super::edit(
            &events,
            r#""inputTokenCount":12"#,
            r#""inputTokenCount":"12""#,
        ),
        // A delta for a block never started.
        "reject" => super::edit(
            &events,
            r#""index":0,"delta":{"type":"text_delta","text":"! How"#,
            r#""index":1,"delta":{"type":"text_delta","text":"! How"#,
        ),
        // The second delta's message CRC is wrong.
        "reject-frame" => super::edit(&events, "chunk-of {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"! How", "!crc chunk-of {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"! How"),
        // Bedrock's own exception frame after the first delta.
        "throttled" => {
            let lines: Vec<&str> = events.lines().take(3).collect();
            format!(
                "{}\nexception throttlingException {{\"message\":\"Too many requests, please wait before trying again.\"}}\n",
                lines.join("\n")
            )
        }
        _ => events,
    };
    let body = eventstream::from_text(&events).unwrap();
    let frames = eventstream::split(&body);
    let mut parts: Vec<Part> = Vec::new();
    for (i, frame) in frames.into_iter().enumerate() {
        let bytes = &body[frame];
        if i == 2 && bytes.len() > 7 {
            parts.push(part(Before::Now, bytes[..7].to_vec()));
            parts.push(part(Before::Now, bytes[7..].to_vec()));
        } else {
            parts.push(part(Before::Now, bytes.to_vec()));
        }
    }
    parts
}

struct Session {
    upstream: Upstream,
    probity: Probity,
}

impl Session {
    async fn start() -> Self {
        let upstream = Upstream::start(bedrock).await;
        let key = "api_key_env = \"PROBITY_TEST_BEDROCK_CLAUDE_KEY\"";
        let at = format!("{}/bc", upstream.url());
        let routes = [
            route("bedrock", "/bedrock", &at, "bedrock", key),
            route(
                "bedrock-retry",
                "/bedrock-retry",
                &at,
                "bedrock",
                &format!("{key}\nretry_invalid_response = true"),
            ),
        ]
        .concat();
        let probity = Probity::start_with_env(
            &config("", &routes),
            &[("PROBITY_TEST_BEDROCK_CLAUDE_KEY", KEY)],
        );
        Self { upstream, probity }
    }

    fn calls(&self, case: &str) -> usize {
        let requests = self.upstream.requests();
        requests.iter().filter(|r| case_of(r) == case).count()
    }

    /// Every request reached the upstream with the route's key and none of
    /// the SDK's own SigV4 signature.
    fn signed_by_the_route(&self) {
        let requests = self.upstream.requests();
        assert!(!requests.is_empty(), "no request reached the upstream");
        for request in &requests {
            let target = &request.target;
            let bearer = format!("Bearer {KEY}");
            assert_eq!(
                request.header("authorization"),
                Some(bearer.as_str()),
                "{target}"
            );
            for signed in ["x-amz-date", "x-amz-security-token", "x-amz-content-sha256"] {
                assert_eq!(request.header(signed), None, "{signed} reached {target}");
            }
            // The Messages body names its version (Python's SDK
            // `bedrock-2023-05-31`, Node's the `anthropic-version` it
            // would have sent as a header).
            let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
            assert!(body["anthropic_version"].is_string(), "{target}");
            assert!(body.get("model").is_none(), "the model is in {target}");
        }
    }
}

/// The rows, the same in Python and Node but for the classes each SDK
/// raises: (a whole answer's, a stream's).
fn claude_rows(m: &mut Matrix, s: &Session, raised: (&'static str, &'static str)) {
    let message = |input: Value| {
        Expect::Seen(
            json!({"id": MESSAGE_ID, "text": TEXT, "input_tokens": input, "output_tokens": 12}),
        )
    };
    m.row("message.valid", message(json!(10)));
    m.row("message.figure", message(json!(null)));
    m.row(
        "message.reject",
        Expect::Raised(raised.0, "content_block_invalid"),
    );

    let stream = |output: Value| {
        Expect::Seen(json!({
            "id": STREAM_ID, "text": TEXT, "input_tokens": 12, "output_tokens": output,
            "streamed": TEXT,
        }))
    };
    m.row("message-stream.valid", stream(json!(9)));
    m.row("message-stream.figure", stream(json!(null)));
    // The later, falling count is nulled, and the SDK takes the last one.
    m.row("message-stream.falling", stream(json!(null)));
    // Bedrock's invocation metrics, on the raw events.
    let events = |input: Value| {
        let metrics = json!({"inputTokenCount": input, "outputTokenCount": 9, "invocationLatency": 1187, "firstByteLatency": 402});
        Expect::Seen(json!({"text": TEXT, "metrics": metrics}))
    };
    m.row("events.valid", events(json!(12)));
    m.row("events.metrics", events(json!(null)));
    m.row(
        "message-stream.reject",
        Expect::Raised(raised.1, "content_block_invalid"),
    );
    m.row(
        "message-stream.reject-frame",
        Expect::Raised(raised.1, "event_stream_invalid"),
    );
    // Bedrock's own exception frame reaches the SDK as it came.
    m.row(
        "message-stream.throttled",
        Expect::Raised(raised.1, "Too many requests"),
    );

    let rejected = || Expect::Raised(raised.0, "content_block_invalid");
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

#[tokio::test]
async fn python_anthropic_bedrock() {
    let sdk = "python AnthropicBedrock";
    let missing = missing_python(&["anthropic", "boto3"]);
    if !can_run(&format!("the {sdk} rows"), &missing, PIP) {
        return;
    }
    let s = Session::start().await;
    let mut command = Command::new("python3");
    command.arg(format!("{SCRIPTS}/bedrock_anthropic_app.py"));
    let mut m = Matrix::run(sdk, command, &s.probity).await;
    claude_rows(&mut m, &s, ("InternalServerError", "APIStatusError"));
    m.finish();
    s.signed_by_the_route();
}

#[tokio::test]
async fn node_anthropic_bedrock() {
    let sdk = "node AnthropicBedrock";
    let missing = missing_node(&["@anthropic-ai/bedrock-sdk"]);
    if !can_run(&format!("the {sdk} rows"), &missing, NPM) {
        return;
    }
    let s = Session::start().await;
    let mut command = Command::new("node");
    command.arg(format!("{SCRIPTS}/node/bedrock_anthropic_app.mjs"));
    let mut m = Matrix::run(sdk, command, &s.probity).await;
    claude_rows(&mut m, &s, ("InternalServerError", "APIError"));
    m.finish();
    s.signed_by_the_route();
}
