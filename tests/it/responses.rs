//! The Responses API over real sockets, beyond the fixtures
//! (`tests/fixtures/openai/gen_responses_*`): the stored response read with
//! `GET …/responses/{id}` (the one GET the openai table inspects) and the
//! reads that pass unchecked; the output contract over the joined
//! `output_text` parts, degraded whole and judged streamed; usage counted
//! from whichever terminal event carries it.

use crate::support::*;
use serde_json::{json, Value};

const ID: &str = "resp_68f0c2a1b3d4e5f6";

/// A response object whose message holds `parts`.
fn response(parts: Value, status: &str, usage: Value) -> String {
    json!({
        "id": ID, "object": "response", "created_at": 1764410400, "status": status,
        "incomplete_details": if status == "incomplete" { json!({"reason": "max_output_tokens"}) } else { json!(null) },
        "model": "gpt-4.1-mini-2025-04-14",
        "output": [{"id": "msg_1", "type": "message", "status": status, "role": "assistant", "content": parts}],
        "usage": usage,
    })
    .to_string()
}

fn usage() -> Value {
    json!({"input_tokens": 14, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 3,
           "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 17})
}

fn text(text: &str) -> Value {
    json!({"type": "output_text", "annotations": [], "text": text})
}

#[tokio::test]
async fn a_stored_response_read_with_get_is_judged_and_other_reads_pass() {
    let upstream = Upstream::start(|request| {
        let broken = request.target.contains("broken");
        let body = match request.target.as_str() {
            t if t.ends_with("/input_items") => {
                r#"{"object": "list", "data": "whatever"}"#.to_string()
            }
            t if t.contains("stream=true") => "event: x\ndata: not json\n\n".to_string(),
            _ if broken => response(json!([{"text": "Paris."}]), "completed", usage()),
            _ => response(json!([text("Paris.")]), "completed", usage())
                .replace("\"input_tokens\":14", "\"input_tokens\":\"14\""),
        };
        Reply::json(200, body)
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &upstream.url(), "openai", ""),
    ));
    let got = get(&probity.url(&format!("/openai/v1/responses/{ID}"))).await;
    assert_eq!(got.status, 200);
    assert_eq!(
        got.header("probity-normalized"),
        Some("/usage/input_tokens")
    );
    assert_eq!(got.json()["usage"]["input_tokens"], Value::Null);
    assert_eq!(got.json()["usage"]["output_tokens"], 3);
    let got = get(&probity.url("/openai/v1/responses/resp_broken")).await;
    assert_eq!(
        got.error(502, "provider_invalid_response")["code"],
        "response_content_invalid"
    );
    // Not a response object: the list of input items, the replayed stream.
    for path in [
        format!("/openai/v1/responses/{ID}/input_items"),
        format!("/openai/v1/responses/{ID}?stream=true"),
    ] {
        let got = get(&probity.url(&path)).await;
        assert_eq!(got.status, 200, "{path}");
        assert_eq!(got.header("probity-normalized"), None, "{path}");
    }
    let counted = probity
        .metric(r#"probity_tokens_total{route="openai",kind="output"}"#)
        .await;
    assert_eq!(counted, Some(3.0), "the GET's sound figures are counted");
}

/// The answer is every `output_text` part joined: `{"city":` and
/// `"Paris"}` are one JSON value. Degraded, the first part holds the
/// replacement and the others are emptied.
#[tokio::test]
async fn the_joined_output_text_is_the_answer_and_degrade_replaces_its_parts() {
    let upstream = Upstream::start(|request| {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        let parts = match body["model"].as_str().unwrap() {
            "joined" => json!([text("{\"city\": "), {"type": "output_text", "text": "\"Paris\"}"}]),
            _ => json!([text("The city"), text(" is Paris.")]),
        };
        Reply::json(200, response(parts, "completed", usage()))
    })
    .await;
    let contract = "[routes.contract]\ntask = \"city\"\non_invalid = \"degrade\"\ndegraded = '{\"city\": \"\", \"error\": \"{reason}\"}'\n";
    let probity = Probity::start(&config(
        "",
        &format!(
            "{}\n{contract}",
            route("openai", "/openai", &upstream.url(), "openai", "")
        ),
    ));
    let ask = |model: &str| {
        json!({"model": model, "input": "Which city?", "text": {"format": {"type": "json_object"}}})
            .to_string()
    };
    let got = post(&probity.url("/openai/v1/responses"), ask("joined")).await;
    assert_eq!(got.header("probity-output"), Some("valid"));
    let got = post(&probity.url("/openai/v1/responses"), ask("prose")).await;
    assert_eq!(got.header("probity-output"), Some("invalid"));
    assert_eq!(got.header("probity-output-reason"), Some("invalid_json"));
    let body = got.json();
    let parts = &body["output"][0]["content"];
    let degraded: Value = serde_json::from_str(parts[0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(degraded["city"], "");
    assert_eq!(parts[1]["text"], "");
    assert_eq!(body["usage"]["output_tokens"], 3);
    let sample = r#"probity_model_outputs_total{task="city",verdict="invalid"}"#;
    assert_eq!(probity.metric(sample).await, Some(1.0));
}

fn event(kind: &str, n: u64, rest: Value) -> String {
    let mut data = json!({"type": kind});
    data.as_object_mut()
        .unwrap()
        .extend(rest.as_object().unwrap().clone());
    data["sequence_number"] = json!(n);
    format!("event: {kind}\ndata: {data}\n\n")
}

/// Streamed: the deltas are the answer, the verdict goes before the
/// terminal event, an incomplete one for `max_output_tokens` is
/// `truncated`, and its usage is counted (task `responses`).
#[tokio::test]
async fn a_streamed_answer_is_judged_and_an_incomplete_ones_usage_counted() {
    let upstream = Upstream::start(|_| {
        let delta = |n, d: &str| event("response.output_text.delta", n, json!({"item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": d}));
        let events = [
            event("response.created", 0, json!({"response": serde_json::from_str::<Value>(&response(json!([]), "in_progress", Value::Null)).unwrap()})),
            delta(1, "{\"city\": "),
            delta(2, "\"Par"),
            event("response.incomplete", 3, json!({"response": serde_json::from_str::<Value>(&response(json!([text("{\"city\": \"Par")]), "incomplete", usage())).unwrap()})),
        ];
        Reply::stream("text/event-stream", vec![part(Before::Now, events.concat())])
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &upstream.url(), "openai", ""),
    ));
    let request = json!({"model": "m", "input": "Which city?", "stream": true, "max_output_tokens": 8,
                         "text": {"format": {"type": "json_object"}}});
    let got = post(&probity.url("/openai/v1/responses"), request.to_string()).await;
    assert_eq!(got.status, 200);
    let body = got.text();
    let verdict = body.find(": probity-output").expect(&body);
    assert!(
        verdict < body.find("event: response.incomplete").unwrap(),
        "{body}"
    );
    assert!(body.contains("truncated"), "{body}");
    let invalid = r#"probity_model_invalid_output_total{task="responses",reason="truncated",client="unknown"}"#;
    assert_eq!(probity.metric(invalid).await, Some(1.0));
    for (kind, n) in [("input", 14.0), ("output", 3.0), ("total", 17.0)] {
        let sample = format!(r#"probity_tokens_total{{route="openai",kind="{kind}"}}"#);
        assert_eq!(probity.metric(&sample).await, Some(n), "{kind}");
    }
}
