//! Output contracts over real sockets: the verdict headers, the metric, the
//! capture, and the degraded answer, for Ollama, OpenAI, Anthropic and
//! Gemini.

use std::time::Duration;

use crate::support::*;

/// The route contract of `config/examples/grounded-answer.toml`.
const GROUNDED: &str = r#"
[routes.contract]
task = "grounded_answer"
on_invalid = "ON_INVALID"
prose = ["/answer"]
min_chars = 12
max_chars = 3000
degraded = '{"answer": "", "sufficient": false, "citations": [], "uncertainty": ["{reason}"]}'

[routes.contract.citations]
output = "/citations"
sources = "/sources"
required = true
quotes = "/quotes"
"#;

fn grounded_route(name: &str, dialect: &str, upstream: &Upstream, on_invalid: &str) -> String {
    format!(
        "{}{}",
        route(name, &format!("/{name}"), &upstream.url(), dialect, ""),
        GROUNDED.replace("ON_INVALID", on_invalid)
    )
}

/// The app's request: its prompt is a JSON document with its sources.
fn generate_request() -> String {
    let prompt = serde_json::json!({
        "question": "Why is the sky blue?",
        "sources": [
            {"id": "s1", "text": "Rayleigh scattering makes the sky blue."},
            {"id": "s2", "text": "Sunsets are red because light travels further."}
        ]
    });
    serde_json::json!({
        "model": "llama3.2:3b",
        "prompt": prompt.to_string(),
        "stream": false,
        "format": {
            "type": "object",
            "properties": {
                "answer": {"type": "string"},
                "sufficient": {"type": "boolean"},
                "citations": {"type": "array", "items": {"type": "string"}}
            },
            "required": ["answer", "sufficient", "citations"]
        }
    })
    .to_string()
}

fn ollama_generate(answer: &str) -> String {
    serde_json::json!({
        "model": "llama3.2:3b",
        "created_at": "2026-11-29T10:00:00Z",
        "response": answer,
        "done": true,
        "done_reason": "stop",
        "total_duration": 812345678,
        "prompt_eval_count": 120,
        "eval_count": 21
    })
    .to_string()
}

const ECHO: &str = r#"{"answer": "sufficient", "sufficient": true, "citations": []}"#;
const GOOD: &str =
    r#"{"answer": "Rayleigh scattering of sunlight.", "sufficient": true, "citations": ["s1"]}"#;

#[tokio::test]
async fn the_small_model_answer_is_annotated_counted_and_captured() {
    let upstream = Upstream::start(|request| {
        let body = String::from_utf8_lossy(&request.body);
        let answer = if body.contains("good") { GOOD } else { ECHO };
        Reply::json(200, ollama_generate(answer))
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &grounded_route("ollama", "ollama", &upstream, "annotate"),
    ));

    let got = post(&probity.url("/ollama/api/generate"), generate_request()).await;
    assert_eq!(got.status, 200, "an invalid answer never fails the request");
    assert_eq!(
        got.text(),
        ollama_generate(ECHO),
        "annotate leaves the body as it came"
    );
    assert_eq!(got.header("probity-output"), Some("invalid"));
    assert_eq!(
        got.header("probity-output-reason"),
        Some("field_name_echo,too_short,citation_missing")
    );
    let id = got.header("x-request-id").unwrap();
    assert_eq!(got.header("probity-capture"), Some(id));

    let metrics = get(&probity.admin_url("/metrics")).await.text();
    for reason in ["field_name_echo", "too_short", "citation_missing"] {
        let sample = format!(
            r#"probity_model_invalid_output_total{{task="grounded_answer",reason="{reason}",client="unknown"}}"#
        );
        assert_eq!(metric_value(&metrics, &sample), Some(1.0), "{reason}");
    }
    let invalid = r#"probity_model_outputs_total{task="grounded_answer",verdict="invalid"}"#;
    assert_eq!(metric_value(&metrics, invalid), Some(1.0));
    let listing = probity.admin_get("/captures").await.json();
    assert_eq!(listing["captures"][0]["outcome"], "output_invalid");
    assert_eq!(
        listing["captures"][0]["reasons"],
        serde_json::json!(["field_name_echo", "too_short", "citation_missing"])
    );

    // A grounded answer passes byte for byte, with the verdict header.
    let request = generate_request().replace("Why is", "good: why is");
    let got = post(&probity.url("/ollama/api/generate"), request).await;
    assert_eq!(got.text(), ollama_generate(GOOD));
    assert_eq!(got.header("probity-output"), Some("valid"));
    assert_eq!(got.header("probity-output-reason"), None);
    assert_eq!(got.header("probity-capture"), None);
    let valid = r#"probity_model_outputs_total{task="grounded_answer",verdict="valid"}"#;
    assert_eq!(probity.metric(valid).await, Some(1.0));
}

#[tokio::test]
async fn degrade_replaces_the_answer_and_keeps_the_rest() {
    let upstream = Upstream::start(|_| Reply::json(200, ollama_generate(ECHO))).await;
    let probity = Probity::start(&config(
        "",
        &grounded_route("ollama", "ollama", &upstream, "degrade"),
    ));
    let got = post(&probity.url("/ollama/api/generate"), generate_request()).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.header("probity-output"), Some("invalid"));
    let body = got.json();
    assert_eq!(body["eval_count"], 21, "usage is untouched");
    assert_eq!(body["done"], true);
    let answer: serde_json::Value =
        serde_json::from_str(body["response"].as_str().unwrap()).unwrap();
    assert_eq!(answer["answer"], "");
    assert_eq!(answer["sufficient"], false);
    assert_eq!(answer["citations"], serde_json::json!([]));
    let reason = answer["uncertainty"][0].as_str().unwrap();
    assert!(
        reason.starts_with(
            r#"model output rejected: answer repeats the schema field name "sufficient""#
        ),
        "{reason}"
    );
    // The verbatim answer is in the capture store.
    let id = got.header("x-request-id").unwrap();
    let capture = probity.admin_get(&format!("/captures/{id}")).await;
    assert_eq!(capture.text(), ollama_generate(ECHO));
}

fn chat_completion(content: &str, finish: &str, refusal: Option<&str>) -> String {
    serde_json::json!({
        "id": "chatcmpl-9",
        "object": "chat.completion",
        "created": 1764410400,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content, "refusal": refusal}, "logprobs": null, "finish_reason": finish}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}
    })
    .to_string()
}

#[tokio::test]
async fn openai_json_schema_answers_are_checked_strictly() {
    let upstream = Upstream::start(|request| {
        let body = String::from_utf8_lossy(&request.body).to_string();
        let reply = if body.contains("fenced") {
            chat_completion("```json\n{\"label\": \"spam\"}\n```", "stop", None)
        } else if body.contains("wrong label") {
            chat_completion("{\"label\": \"maybe\"}", "stop", None)
        } else if body.contains("cut") {
            chat_completion("{\"label\": \"sp", "length", None)
        } else if body.contains("refuse") {
            chat_completion("", "stop", Some("I can't help with that."))
        } else {
            chat_completion("{\"label\": \"spam\"}", "stop", None)
        };
        Reply::json(200, reply)
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &upstream.url(), "openai", ""),
    ));
    let request = |what: &str| {
        serde_json::json!({
            "model": "gpt-4o-mini",
            "messages": [{"role": "user", "content": what}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "label", "strict": true, "schema": {
                "type": "object", "properties": {"label": {"enum": ["spam", "ham"]}},
                "required": ["label"], "additionalProperties": false}}}
        })
        .to_string()
    };
    for (what, reasons) in [
        ("fenced", Some("invalid_json")),
        ("wrong label", Some("enum_violation")),
        ("cut", Some("invalid_json,truncated")),
        ("refuse", Some("invalid_json,refusal")),
        ("fine", None),
    ] {
        let got = post(&probity.url("/openai/v1/chat/completions"), request(what)).await;
        assert_eq!(got.status, 200, "{what}");
        assert_eq!(got.header("probity-output-reason"), reasons, "{what}");
        assert_eq!(
            got.header("probity-output"),
            Some(if reasons.is_some() {
                "invalid"
            } else {
                "valid"
            })
        );
    }
    let metrics = get(&probity.admin_url("/metrics")).await.text();
    let sample = r#"probity_model_invalid_output_total{task="chat_completions",reason="invalid_json",client="unknown"}"#;
    assert_eq!(metric_value(&metrics, sample), Some(3.0));
    // Without response_format and without a route contract: no verdict.
    let plain =
        serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "fine"}]})
            .to_string();
    let got = post(&probity.url("/openai/v1/chat/completions"), plain).await;
    assert_eq!(got.header("probity-output"), None);
}

#[tokio::test]
async fn an_anthropic_forced_tool_input_is_the_answer() {
    let upstream = Upstream::start(|_| {
        Reply::json(
            200,
            r#"{"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [{"type": "tool_use", "id": "toolu_1", "name": "record", "input": {"answer": "answer", "confidence": "high"}}], "stop_reason": "tool_use", "usage": {"input_tokens": 50, "output_tokens": 20}}"#,
        )
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &format!(
            "{}\n[routes.contract]\ntask = \"extract\"\non_invalid = \"degrade\"\ndegraded = '{{\"answer\": \"\", \"error\": \"{{reason}}\"}}'\n",
            route("anthropic", "/anthropic", &upstream.url(), "anthropic", "")
        ),
    ));
    let request = serde_json::json!({
        "model": "claude-sonnet-4-5", "max_tokens": 256,
        "messages": [{"role": "user", "content": "Extract."}],
        "tools": [{"name": "record", "input_schema": {"type": "object", "properties": {
            "answer": {"type": "string"}, "confidence": {"type": "number"}}, "required": ["answer", "confidence"]}}],
        "tool_choice": {"type": "tool", "name": "record"}
    })
    .to_string();
    let got = post(&probity.url("/anthropic/v1/messages"), request).await;
    assert_eq!(got.status, 200);
    assert_eq!(
        got.header("probity-output-reason"),
        Some("schema_violation,field_name_echo")
    );
    let body = got.json();
    assert_eq!(body["content"][0]["input"]["answer"], "");
    assert!(body["content"][0]["input"]["error"]
        .as_str()
        .unwrap()
        .starts_with("model output rejected: "));
    assert_eq!(body["usage"]["output_tokens"], 20);
}

#[tokio::test]
async fn a_streamed_answer_gets_its_verdict_before_the_stream_ends() {
    let upstream = Upstream::start(|_| {
        let chunk = |content: &str, finish: &str| {
            format!(
                "data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{}}},\"finish_reason\":{finish}}}]}}\n\n",
                serde_json::to_string(content).unwrap()
            )
        };
        let parts = vec![
            part(Before::Now, chunk("{\"answer\": \"suff", "null")),
            part(Before::Pause(Duration::from_millis(5)), chunk("icient\", \"sufficient\": true, \"citations\": []}", "\"stop\"")),
            part(Before::Now, "data: [DONE]\n\n"),
        ];
        Reply::stream("text/event-stream", parts)
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &grounded_route("openai", "openai", &upstream, "degrade"),
    ));
    let request = serde_json::json!({
        "model": "m", "stream": true,
        "messages": [{"role": "user", "content": "{\"question\": \"q\", \"sources\": [{\"id\": \"s1\", \"text\": \"t\"}]}"}]
    })
    .to_string();
    let got = post(&probity.url("/openai/v1/chat/completions"), request).await;
    assert_eq!(got.status, 200);
    let text = got.text();
    assert!(
        text.ends_with(": probity-output invalid reason=field_name_echo,too_short,citation_missing\n\ndata: [DONE]\n\n"),
        "{text}"
    );
    assert!(
        text.contains("suff"),
        "degrade does not apply to streams: {text}"
    );
    let metrics = get(&probity.admin_url("/metrics")).await.text();
    let sample = r#"probity_model_invalid_output_total{task="grounded_answer",reason="citation_missing",client="unknown"}"#;
    assert_eq!(metric_value(&metrics, sample), Some(1.0));
}

/// A Gemini answer: one candidate with this text part (after a thought
/// part, which is not the answer).
fn gemini_answer(text: &str, finish: &str) -> String {
    serde_json::json!({
        "candidates": [{"content": {"parts": [
            {"text": "**Labelling**\n\nThe message sells pills.", "thought": true},
            {"text": text}
        ], "role": "model"}, "finishReason": finish, "index": 0}],
        "usageMetadata": {"promptTokenCount": 30, "candidatesTokenCount": 12, "totalTokenCount": 90, "thoughtsTokenCount": 48},
        "modelVersion": "gemini-2.5-flash",
        "responseId": "mAitaLmkHPPlz7IPvtfUqQ4"
    })
    .to_string()
}

/// Gemini's JSON mode: `responseJsonSchema` is a JSON Schema, and
/// `responseSchema` (Google's OpenAPI subset, upper-case type names) is
/// judged as its JSON Schema translation. The answer is the text part,
/// thoughts left out; `MAX_TOKENS` is truncation, a blocked prompt a
/// refusal; a stream's verdict is counted (no comment: google-genai reads
/// every non-`data:` line as JSON).
#[tokio::test]
async fn gemini_json_mode_answers_are_checked() {
    let upstream = Upstream::start(|request| {
        let body = String::from_utf8_lossy(&request.body).to_string();
        if request.target.contains(":streamGenerateContent") {
            let chunk = |text: &str| {
                format!(
                    "data: {}\r\n\r\n",
                    serde_json::json!({"candidates": [{"content": {"parts": [{"text": text}], "role": "model"}, "index": 0}]})
                )
            };
            return Reply::stream(
                "text/event-stream",
                vec![
                    part(Before::Now, chunk("{\"label\": ")),
                    part(Before::Now, chunk("\"maybe\"}")),
                ],
            );
        }
        let reply = if body.contains("wrong label") {
            gemini_answer("{\"label\": \"maybe\"}", "STOP")
        } else if body.contains("cut") {
            gemini_answer("{\"label\": \"sp", "MAX_TOKENS")
        } else if body.contains("blocked") {
            serde_json::json!({"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9}}).to_string()
        } else {
            gemini_answer("{\"label\": \"spam\"}", "STOP")
        };
        Reply::json(200, reply)
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route("gemini", "/gemini", &upstream.url(), "gemini", ""),
    ));
    let google = serde_json::json!({"type": "OBJECT", "properties": {"label": {"type": "STRING", "enum": ["spam", "ham"]}}, "required": ["label"], "propertyOrdering": ["label"]});
    let json_schema = serde_json::json!({"type": "object", "properties": {"label": {"enum": ["spam", "ham"]}}, "required": ["label"]});
    let request = |what: &str, schema: (&str, &serde_json::Value)| {
        serde_json::json!({
            "contents": [{"role": "user", "parts": [{"text": what}]}],
            "generationConfig": {"responseMimeType": "application/json", schema.0: schema.1}
        })
        .to_string()
    };
    let generate = probity.url("/gemini/v1beta/models/gemini-2.5-flash:generateContent");
    for schema in [
        ("responseSchema", &google),
        ("responseJsonSchema", &json_schema),
    ] {
        for (what, reasons) in [
            ("wrong label", Some("enum_violation")),
            ("cut", Some("invalid_json,truncated")),
            ("blocked", Some("invalid_json,refusal")),
            ("fine", None),
        ] {
            let got = post(&generate, request(what, schema)).await;
            assert_eq!(got.status, 200, "{what}");
            assert_eq!(
                got.header("probity-output-reason"),
                reasons,
                "{what} {}",
                schema.0
            );
            let verdict = if reasons.is_some() {
                "invalid"
            } else {
                "valid"
            };
            assert_eq!(got.header("probity-output"), Some(verdict), "{what}");
        }
    }
    // Without JSON mode: no verdict.
    let plain = serde_json::json!({"contents": [{"parts": [{"text": "fine"}]}]}).to_string();
    assert_eq!(post(&generate, plain).await.header("probity-output"), None);

    let stream =
        probity.url("/gemini/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse");
    let got = post(
        &stream,
        request("stream", ("responseJsonSchema", &json_schema)),
    )
    .await;
    assert_eq!(got.status, 200);
    assert!(!got.text().contains(": probity"), "{}", got.text());
    let sample = r#"probity_model_invalid_output_total{task="gemini_generate_content",reason="enum_violation",client="unknown"}"#;
    let mut counted = None;
    for _ in 0..50 {
        let metrics = get(&probity.admin_url("/metrics")).await.text();
        counted = metric_value(&metrics, sample);
        if counted == Some(3.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(counted, Some(3.0), "two whole answers and the stream");
}

#[test]
fn the_example_configuration_is_valid() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/examples/grounded-answer.toml"
    );
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_probity"))
        .args(["check-config", path])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
