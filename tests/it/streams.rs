//! Generation, streamed and not: each event checked as it passes, the stream
//! kept live, faults ending it with an error event in its own format.

use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use tokio::sync::Notify;

/// Serves `body` split into the given parts, `pause` apart.
async fn streaming(content_type: &'static str, parts: Vec<Vec<u8>>, pause: Duration) -> Upstream {
    Upstream::start(move |_| {
        let parts = parts
            .iter()
            .map(|p| part(Before::Pause(pause), p.clone()))
            .collect();
        Reply::stream(content_type, parts)
    })
    .await
}

fn one_route(dialect: &str, upstream: &Upstream) -> Probity {
    Probity::start(&config(
        "",
        &route(
            dialect,
            &format!("/{dialect}"),
            &upstream.url(),
            dialect,
            "",
        ),
    ))
}

/// Reads a streamed response to its end, or to its error.
async fn read_stream(probity: &Probity, path: &str, request: &'static str) -> (String, Vec<u8>) {
    let request = Request::post(probity.url(path))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(request.as_bytes())))
        .unwrap();
    let response = within("stream head", client().request(request))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let id = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    let body = within("stream body", response.into_body().collect())
        .await
        .expect("a stream ends cleanly");
    (id, body.to_bytes().to_vec())
}

const CHAT_STREAM: &str = r#"{"model": "gpt-4o-mini", "stream": true, "stream_options": {"include_usage": true}, "messages": [{"role": "user", "content": "Hi"}]}"#;

#[tokio::test]
async fn a_valid_sse_stream_passes_byte_for_byte_whatever_the_reads() {
    let stream = fixture("openai_chat_stream.sse");
    // Events split across reads, several in one read, CRLF and comments.
    let parts: Vec<Vec<u8>> = stream.chunks(61).map(<[u8]>::to_vec).collect();
    let upstream = streaming("text/event-stream", parts, Duration::from_millis(2)).await;
    let probity = one_route("openai", &upstream);
    let (_, body) = read_stream(&probity, "/openai/v1/chat/completions", CHAT_STREAM).await;
    assert_eq!(
        String::from_utf8_lossy(&body),
        String::from_utf8_lossy(&stream)
    );
    let metrics = get(&probity.admin_url("/metrics")).await.text();
    assert_eq!(
        metric_value(
            &metrics,
            r#"probity_tokens_total{route="openai",kind="input"}"#
        ),
        Some(9.0)
    );
    assert_eq!(
        metric_value(
            &metrics,
            r#"probity_tokens_total{route="openai",kind="output"}"#
        ),
        Some(1.0)
    );
    assert!(metrics.contains("probity_time_to_first_byte_seconds_bucket{route=\"openai\""));
}

#[tokio::test]
async fn each_event_reaches_the_client_before_the_next_is_written() {
    let gate = Arc::new(Notify::new());
    let upstream_gate = gate.clone();
    let first =
        b"data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n"
            .to_vec();
    let rest = b"data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"}}]}\n\ndata: [DONE]\n\n".to_vec();
    let expected_rest = rest.clone();
    let upstream = Upstream::start(move |_| {
        Reply::stream(
            "text/event-stream",
            vec![
                part(Before::Now, first.clone()),
                part(Before::Gate(upstream_gate.clone()), rest.clone()),
            ],
        )
    })
    .await;
    let probity = one_route("openai", &upstream);
    let request = Request::post(probity.url("/openai/v1/chat/completions"))
        .body(Full::new(Bytes::from_static(CHAT_STREAM.as_bytes())))
        .unwrap();
    let response = within("head", client().request(request)).await.unwrap();
    let mut body = response.into_body();
    let frame = within("first event", body.frame()).await.unwrap().unwrap();
    assert!(frame
        .into_data()
        .unwrap()
        .starts_with(b"data: {\"id\":\"c1\""));
    gate.notify_one();
    let rest = within("rest", body.collect()).await.unwrap().to_bytes();
    assert_eq!(rest, expected_rest);
}

#[tokio::test]
async fn a_malformed_usage_figure_in_a_stream_is_nulled_in_that_event_alone() {
    let stream = String::from_utf8(fixture("openai_chat_stream.sse")).unwrap();
    let bad = stream.replace(r#""prompt_tokens":9"#, r#""prompt_tokens":"9""#);
    let upstream = streaming(
        "text/event-stream",
        vec![bad.clone().into_bytes()],
        Duration::ZERO,
    )
    .await;
    let probity = one_route("openai", &upstream);
    let (id, body) = read_stream(&probity, "/openai/v1/chat/completions", CHAT_STREAM).await;
    let body = String::from_utf8(body).unwrap();

    // Everything before the usage event is byte-identical; the usage event
    // is announced by a comment and carries null; [DONE] follows.
    let usage_at = bad.find("data: {\"id\":\"chatcmpl-AbC123\",\"object\":\"chat.completion.chunk\",\"created\":1764410400,\"model\":\"gpt-4o-mini-2024-07-18\",\"system_fingerprint\":\"fp_0ba0d124f1\",\"choices\":[],").unwrap();
    assert_eq!(&body[..usage_at], &bad[..usage_at]);
    let rest = &body[usage_at..];
    assert!(
        rest.starts_with(": probity-normalized /usage/prompt_tokens\ndata: {"),
        "{rest}"
    );
    assert!(
        rest.contains(r#""prompt_tokens":null,"completion_tokens":1"#),
        "{rest}"
    );
    assert!(rest.ends_with("\n\ndata: [DONE]\n\n"), "{rest}");

    let metrics = get(&probity.admin_url("/metrics")).await.text();
    let sample = r#"probity_malformed_figures_total{route="openai",figure="/usage/prompt_tokens"}"#;
    assert_eq!(metric_value(&metrics, sample), Some(1.0));
    assert_eq!(
        metric_value(
            &metrics,
            r#"probity_tokens_total{route="openai",kind="input"}"#
        ),
        None
    );
    let capture = probity.admin_get(&format!("/captures/{id}")).await;
    assert_eq!(capture.text(), bad, "the verbatim upstream stream");
    let listing = probity.admin_get("/captures").await.json();
    assert_eq!(listing["captures"][0]["outcome"], "normalized");
    assert_eq!(
        listing["captures"][0]["pointers"],
        serde_json::json!(["/usage/prompt_tokens"])
    );
}

#[tokio::test]
async fn a_broken_event_ends_the_stream_with_an_error_event() {
    for (bad, invariant) in [
        (
            "data: {\"choices\": [{\"index\": 0, \"delta\": {}}]\n\n",
            "invalid_json",
        ),
        (
            "data: {\"choices\": [{\"index\": 3, \"delta\": {}}]}\n\n",
            "choice_index_invalid",
        ),
        (
            "data: [DONE]\n\ndata: {\"choices\": []}\n\n",
            "stream_after_done",
        ),
    ] {
        let good = "data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \"a\"}}]}\n\n";
        let upstream_bytes = format!("{good}{bad}data: {{\"never\": \"sent\"}}\n\n");
        let upstream = streaming(
            "text/event-stream",
            vec![upstream_bytes.clone().into_bytes()],
            Duration::ZERO,
        )
        .await;
        let probity = one_route("openai", &upstream);
        let (id, body) = read_stream(&probity, "/openai/v1/chat/completions", CHAT_STREAM).await;
        let body = String::from_utf8(body).unwrap();
        assert!(body.starts_with(good), "{body}");
        assert!(
            !body.contains("never"),
            "nothing after the error event: {body}"
        );
        let last = body.trim_end().rsplit("\n\n").next().unwrap();
        let error: serde_json::Value =
            serde_json::from_str(last.strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(
            error["error"]["type"], "provider_invalid_response",
            "{body}"
        );
        assert_eq!(error["error"]["code"], invariant, "{body}");
        assert_eq!(error["error"]["request_id"], id.as_str());
        let listing = probity.admin_get("/captures").await.json();
        assert_eq!(listing["captures"][0]["outcome"], "rejected");
        assert_eq!(listing["captures"][0]["invariant"], invariant);
        assert_eq!(
            probity.admin_get(&format!("/captures/{id}")).await.text(),
            upstream_bytes
        );
        let line = probity.request_log(&id).await;
        assert_eq!(line["ending"], "cut");
    }
}

#[tokio::test]
async fn an_upstream_stall_or_reset_mid_stream_ends_it_with_an_error_event() {
    let upstream = Upstream::start(|_| {
        Reply::stream(
            "text/event-stream",
            vec![
                part(
                    Before::Now,
                    b"data: {\"choices\": [{\"index\": 0, \"delta\": {}}]}\n\n".to_vec(),
                ),
                part(
                    Before::Pause(Duration::from_secs(5)),
                    b"data: [DONE]\n\n".to_vec(),
                ),
            ],
        )
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route(
            "openai",
            "/openai",
            &upstream.url(),
            "openai",
            "idle_timeout_ms = 300",
        ),
    ));
    let (_, body) = read_stream(&probity, "/openai/v1/chat/completions", CHAT_STREAM).await;
    let body = String::from_utf8(body).unwrap();
    let last = body.trim_end().rsplit("\n\n").next().unwrap();
    let error: serde_json::Value =
        serde_json::from_str(last.strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(error["error"]["type"], "upstream_timeout", "{body}");
    assert_eq!(error["error"]["code"], "idle_timeout_ms");
    let sample = r#"probity_upstream_errors_total{route="openai",kind="timeout"}"#;
    assert_eq!(probity.metric(sample).await, Some(1.0));

    let (addr, _) = raw_upstream(|mut stream| async move {
        use tokio::io::AsyncWriteExt;
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n";
        let line = "{\"message\":{\"role\":\"assistant\",\"content\":\"a\"},\"done\":false}\n";
        let chunk = format!("{:x}\r\n{line}\r\n", line.len());
        let _ = stream.write_all(format!("{head}{chunk}").as_bytes()).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(stream);
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route("ollama", "/ollama", &format!("http://{addr}"), "ollama", ""),
    ));
    let (_, body) = read_stream(
        &probity,
        "/ollama/api/chat",
        r#"{"model": "llama3.2", "messages": []}"#,
    )
    .await;
    let body = String::from_utf8(body).unwrap();
    let last: serde_json::Value =
        serde_json::from_str(body.trim_end().lines().last().unwrap()).unwrap();
    assert!(
        last["error"]
            .as_str()
            .unwrap()
            .starts_with("upstream_reset: "),
        "{body}"
    );
    assert_eq!(last["type"], "upstream_reset");
}

#[tokio::test]
async fn ollama_lines_are_checked_and_normalized() {
    let stream = String::from_utf8(fixture("ollama_chat_stream.ndjson")).unwrap();
    let bad = stream.replace("\"eval_count\":4", "\"eval_count\":4.5");
    let upstream = streaming(
        "application/x-ndjson",
        vec![bad.clone().into_bytes()],
        Duration::ZERO,
    )
    .await;
    let probity = one_route("ollama", &upstream);
    let (id, body) = read_stream(
        &probity,
        "/ollama/api/chat",
        r#"{"model": "llama3.2:3b", "messages": []}"#,
    )
    .await;
    assert_eq!(
        String::from_utf8(body).unwrap(),
        stream.replace("\"eval_count\":4", "\"eval_count\":null")
    );
    let listing = probity.admin_get("/captures").await.json();
    assert_eq!(
        listing["captures"][0]["pointers"],
        serde_json::json!(["/eval_count"])
    );
    assert_eq!(
        probity.admin_get(&format!("/captures/{id}")).await.text(),
        bad
    );
    let metrics = get(&probity.admin_url("/metrics")).await.text();
    assert_eq!(
        metric_value(
            &metrics,
            r#"probity_tokens_total{route="ollama",kind="input"}"#
        ),
        Some(26.0)
    );

    // A second `done: true` line ends the stream with an error line.
    let twice = format!("{stream}{}", stream.lines().last().unwrap());
    let upstream = streaming(
        "application/x-ndjson",
        vec![twice.into_bytes()],
        Duration::ZERO,
    )
    .await;
    let probity = one_route("ollama", &upstream);
    let (_, body) = read_stream(
        &probity,
        "/ollama/api/chat",
        r#"{"model": "llama3.2:3b", "messages": []}"#,
    )
    .await;
    let body = String::from_utf8(body).unwrap();
    assert!(body.starts_with(&stream));
    let last: serde_json::Value = serde_json::from_str(body.lines().last().unwrap()).unwrap();
    assert_eq!(last["code"], "stream_after_done", "{body}");
}

#[tokio::test]
async fn anthropic_events_are_checked_and_usage_is_taken_last() {
    let stream = String::from_utf8(fixture("anthropic_messages_stream.sse")).unwrap();
    let upstream = streaming(
        "text/event-stream",
        vec![stream.clone().into_bytes()],
        Duration::ZERO,
    )
    .await;
    let probity = one_route("anthropic", &upstream);
    let request = r#"{"model": "claude-sonnet-4-5", "max_tokens": 64, "stream": true, "messages": [{"role": "user", "content": "Hi"}]}"#;
    let (_, body) = read_stream(&probity, "/anthropic/v1/messages", request).await;
    assert_eq!(String::from_utf8(body).unwrap(), stream);
    let metrics = get(&probity.admin_url("/metrics")).await.text();
    // output_tokens: 1 in message_start, 15 (cumulative) in message_delta: 15, never 16.
    assert_eq!(
        metric_value(
            &metrics,
            r#"probity_tokens_total{route="anthropic",kind="output"}"#
        ),
        Some(15.0)
    );
    assert_eq!(
        metric_value(
            &metrics,
            r#"probity_tokens_total{route="anthropic",kind="input"}"#
        ),
        Some(25.0)
    );

    // A malformed input count in message_start; an unknown event passes;
    // a delta for a block never started ends the stream.
    let bad = stream
        .replace(r#""input_tokens":25"#, r#""input_tokens":-25"#)
        .replace("event: ping\n", "event: future_event\n")
        .replace(
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":7,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}",
        );
    let upstream = streaming("text/event-stream", vec![bad.into_bytes()], Duration::ZERO).await;
    let probity = one_route("anthropic", &upstream);
    let (_, body) = read_stream(&probity, "/anthropic/v1/messages", request).await;
    let body = String::from_utf8(body).unwrap();
    assert!(
        body.starts_with(
            ": probity-normalized /message/usage/input_tokens\nevent: message_start\n"
        ),
        "{body}"
    );
    assert!(body.contains(r#""input_tokens":null"#));
    assert!(body.contains("event: future_event\n"));
    assert!(body.ends_with("\n\n"));
    let last = body.trim_end().rsplit("\n\n").next().unwrap();
    assert!(last.starts_with("event: error\ndata: "), "{last}");
    let error: serde_json::Value =
        serde_json::from_str(last.strip_prefix("event: error\ndata: ").unwrap()).unwrap();
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["code"], "content_block_invalid");
    assert!(!body.contains("message_stop"));
}

#[tokio::test]
async fn non_streaming_generation_is_checked() {
    let upstream = Upstream::start(|request| {
        let body = match request.target.as_str() {
            "/v1/chat/completions" => r#"{"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6, "completion_tokens_details": {"reasoning_tokens": "0"}}}"#,
            "/api/generate" => r#"{"model": "llama3.2", "response": 42, "done": true}"#,
            _ => r#"{"id": "msg_1", "type": "message", "role": "user", "content": [{"type": "text", "text": "Hi"}], "usage": {"input_tokens": 3, "output_tokens": 1}}"#,
        };
        Reply::json(200, body)
    })
    .await;
    let routes = [
        route("openai", "/openai", &upstream.url(), "openai", ""),
        route("ollama", "/ollama", &upstream.url(), "ollama", ""),
        route("anthropic", "/anthropic", &upstream.url(), "anthropic", ""),
    ]
    .concat();
    let probity = Probity::start(&config("", &routes));

    let got = post(
        &probity.url("/openai/v1/chat/completions"),
        r#"{"messages": []}"#,
    )
    .await;
    assert_eq!(got.status, 200);
    assert_eq!(
        got.header("probity-normalized"),
        Some("/usage/completion_tokens_details/reasoning_tokens,/usage/completion_tokens_details")
    );
    assert!(got.text().contains(r#""completion_tokens_details": null"#));
    let error = post(
        &probity.url("/openai/v1/chat/completions"),
        r#"{"messages": [], "n": 2}"#,
    )
    .await
    .error(502, "provider_invalid_response");
    assert_eq!(error["code"], "choice_count_mismatch");
    assert!(error["message"]
        .as_str()
        .unwrap()
        .contains("expected 2 choices"));
    let error = post(
        &probity.url("/ollama/api/generate"),
        r#"{"model": "llama3.2", "prompt": "Hi", "stream": false}"#,
    )
    .await
    .error(502, "provider_invalid_response");
    assert_eq!(error["code"], "payload_missing");
    let error = post(
        &probity.url("/anthropic/v1/messages"),
        r#"{"messages": []}"#,
    )
    .await
    .error(502, "provider_invalid_response");
    assert_eq!(error["code"], "role_invalid");
}

/// The wrong-typed forms a request member is given.
const WRONG: [&str; 7] = [r#""x""#, "-1", "1.5", "{}", "[]", "null", "true"];

/// Every variant of `request` with one member (or one member of an object
/// member) replaced by a value of another type; `stream` is kept, since it
/// decides what is asked.
fn mistyped(request: &str) -> Vec<String> {
    let root: serde_json::Value = serde_json::from_str(request).unwrap();
    let mut variants = Vec::new();
    for (key, value) in root.as_object().unwrap() {
        if key == "stream" {
            continue;
        }
        for wrong in WRONG {
            let mut changed = root.clone();
            changed[key] = serde_json::from_str(wrong).unwrap();
            variants.push(changed.to_string());
        }
        for inner in value
            .as_object()
            .map(|o| o.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
        {
            for wrong in WRONG {
                let mut changed = root.clone();
                changed[key][&inner] = serde_json::from_str(wrong).unwrap();
                variants.push(changed.to_string());
            }
        }
    }
    // Not JSON at all, and JSON but not an object.
    variants.push("{\"model\": ".into());
    variants.push("[1]".into());
    variants
}

/// A request that cannot be read (a member of the wrong type, or not JSON)
/// still has its streamed answer judged: a malformed figure is nulled, as
/// in a whole answer. Once, `"n": "2"` let the stream pass unjudged.
#[tokio::test]
async fn every_mistyped_request_member_still_has_its_streamed_figures_judged() {
    let cases: [(&str, &str, &str, &str, &str, &str); 6] = [
        (
            "openai",
            "/openai/v1/chat/completions",
            r#"{"model":"m","stream":true,"n":1,"messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true},"response_format":{"type":"text"},"temperature":0.5,"tool_choice":"auto","max_tokens":5}"#,
            "text/event-stream",
            "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":\"x\",\"completion_tokens\":1,\"total_tokens\":5}}\n\ndata: [DONE]\n\n",
            r#""prompt_tokens":null"#,
        ),
        (
            "openai",
            "/openai/v1/completions",
            r#"{"model":"m","stream":true,"prompt":"hi","n":1,"best_of":1,"max_tokens":5,"stream_options":{"include_usage":true}}"#,
            "text/event-stream",
            "data: {\"id\":\"c\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\"hi\",\"finish_reason\":\"stop\"}]}\n\ndata: {\"id\":\"c\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":\"x\",\"completion_tokens\":1,\"total_tokens\":5}}\n\ndata: [DONE]\n\n",
            r#""prompt_tokens":null"#,
        ),
        (
            "anthropic",
            "/anthropic/v1/messages",
            r#"{"model":"m","max_tokens":5,"stream":true,"system":"s","messages":[{"role":"user","content":"hi"}],"tool_choice":{"type":"auto"},"metadata":{"user_id":"u"}}"#,
            "text/event-stream",
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"m\",\"stop_reason\":null,\"usage\":{\"input_tokens\":\"x\",\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\nevent: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
            r#""input_tokens":null"#,
        ),
        (
            "ollama",
            "/ollama/api/chat",
            r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"options":{"temperature":0},"keep_alive":"5m"}"#,
            "application/x-ndjson",
            "{\"model\":\"m\",\"created_at\":\"2026-01-01T00:00:00Z\",\"message\":{\"role\":\"assistant\",\"content\":\"hi\"},\"done\":false}\n{\"model\":\"m\",\"created_at\":\"2026-01-01T00:00:01Z\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":true,\"done_reason\":\"stop\",\"prompt_eval_count\":\"x\",\"eval_count\":1}\n",
            r#""prompt_eval_count":null"#,
        ),
        (
            "ollama",
            "/ollama/api/generate",
            r#"{"model":"m","stream":true,"prompt":"hi","options":{"temperature":0},"raw":false}"#,
            "application/x-ndjson",
            "{\"model\":\"m\",\"created_at\":\"2026-01-01T00:00:00Z\",\"response\":\"hi\",\"done\":false}\n{\"model\":\"m\",\"created_at\":\"2026-01-01T00:00:01Z\",\"response\":\"\",\"done\":true,\"done_reason\":\"stop\",\"prompt_eval_count\":\"x\",\"eval_count\":1}\n",
            r#""prompt_eval_count":null"#,
        ),
        (
            "gemini",
            "/gemini/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
            r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generationConfig":{"candidateCount":1,"responseMimeType":"text/plain","temperature":0},"safetySettings":[]}"#,
            "text/event-stream",
            "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"hi\"}],\"role\":\"model\"},\"index\":0}],\"modelVersion\":\"gemini-2.5-flash\",\"responseId\":\"r1\"}\r\n\r\ndata: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"\"}],\"role\":\"model\"},\"finishReason\":\"STOP\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":\"x\",\"candidatesTokenCount\":1,\"totalTokenCount\":5},\"modelVersion\":\"gemini-2.5-flash\",\"responseId\":\"r1\"}\r\n\r\n",
            r#""promptTokenCount":null"#,
        ),
    ];
    for (dialect, path, request, content_type, stream, nulled) in cases {
        let upstream = streaming(
            content_type,
            vec![stream.as_bytes().to_vec()],
            Duration::ZERO,
        )
        .await;
        let probity = one_route(dialect, &upstream);
        let variants = mistyped(request);
        for variant in std::iter::once(request.to_string()).chain(variants) {
            let request = Request::post(probity.url(path))
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(variant.clone())))
                .unwrap();
            let got = send(request).await;
            assert_eq!(got.status, 200, "{path} {variant}: {}", got.text());
            // Judged: the figure nulled, or the stream cut by a broken
            // payload (`"prompt": []` asks for no choice at all); the
            // malformed figure never reaches the client.
            let text = got.text();
            let raw = nulled.replace("null", "\"x\"");
            assert!(
                !text.contains(&raw)
                    && (text.contains(nulled) || text.contains("provider_invalid_response")),
                "{path}: the malformed figure passed for the request {variant}: {text}"
            );
        }
    }
}
