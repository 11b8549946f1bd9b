//! One malformation, three paths: a response read whole, a stream judged
//! event by event, and a batch sent as chunks and stitched all end in the
//! same finishing step (`server/finish.rs`), so they must report alike:
//! the same metrics, the same log fields, the same capture. A Responses API
//! answer takes the first two paths too, and so does a Bedrock Converse
//! answer (its stream in AWS's binary frames).

use crate::support::*;
use serde_json::{json, Value};

/// The upstream: embeddings (one chunk of 3 inputs, or one input) whose
/// `prompt_tokens` is the malformed `"x"` in the first chunk or the only
/// call, and a chat stream whose usage chunk carries the same fault.
async fn provider() -> Upstream {
    Upstream::start(|recorded| {
        let request: Value = serde_json::from_slice(&recorded.body).unwrap();
        if recorded.target.ends_with("/responses") {
            let response = json!({"id": "resp_1", "object": "response", "status": "completed",
                "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]}],
                "usage": {"input_tokens": "x", "output_tokens": 1, "total_tokens": 4}});
            if request["stream"] != true {
                return Reply::json(200, response.to_string());
            }
            let event = |kind: &str, n: u64, rest: Value| {
                let mut data = json!({"type": kind, "sequence_number": n});
                data.as_object_mut().unwrap().extend(rest.as_object().unwrap().clone());
                format!("event: {kind}\ndata: {data}\n\n")
            };
            let body = event("response.output_text.delta", 0, json!({"delta": "hi"}))
                + &event("response.completed", 1, json!({"response": response}));
            return Reply::stream("text/event-stream", vec![part(Before::Now, body)]);
        }
        let converse = json!({"output": {"message": {"role": "assistant", "content": [{"text": "hi"}]}},
            "stopReason": "end_turn", "usage": {"inputTokens": "x", "outputTokens": 1, "totalTokens": 4},
            "metrics": {"latencyMs": 9}});
        if recorded.target.ends_with("/converse") {
            return Reply::json(200, converse.to_string());
        }
        if recorded.target.ends_with("/converse-stream") {
            let metadata = json!({"usage": converse["usage"], "metrics": converse["metrics"]});
            let body = [
                crate::support::eventstream::event("contentBlockDelta", r#"{"contentBlockIndex":0,"delta":{"text":"hi"}}"#),
                crate::support::eventstream::event("messageStop", r#"{"stopReason":"end_turn"}"#),
                crate::support::eventstream::event("metadata", &metadata.to_string()),
            ]
            .concat();
            return Reply::stream("application/vnd.amazon.eventstream", vec![part(Before::Now, body)]);
        }
        if recorded.target.ends_with("/chat/completions") {
            let chunk = |delta: Value, usage: Value| {
                format!(
                    "data: {}\n\n",
                    json!({"id": "c", "object": "chat.completion.chunk", "choices": delta, "usage": usage})
                )
            };
            let body = chunk(
                json!([{"index": 0, "delta": {"content": "hi"}}]),
                Value::Null,
            ) + &chunk(
                json!([]),
                json!({"prompt_tokens": "x", "completion_tokens": 1, "total_tokens": 4}),
            ) + "data: [DONE]\n\n";
            return Reply::stream("text/event-stream", vec![part(Before::Now, body)]);
        }
        let inputs = request["input"].as_array().unwrap().len();
        let data: Vec<Value> = (0..inputs)
            .map(|i| json!({"object": "embedding", "index": i, "embedding": [0.25, -0.5]}))
            .collect();
        // The first (or only) call's prompt count is malformed; a later
        // chunk's is sound, and the totals always are.
        let prompt = if request["input"][0] == "a" {
            json!("x")
        } else {
            json!(inputs)
        };
        let body = json!({
            "object": "list",
            "data": data,
            "model": "m",
            "usage": {"prompt_tokens": prompt, "total_tokens": inputs},
        });
        Reply::json(200, body.to_string())
    })
    .await
}

struct Path {
    route: &'static str,
    path: &'static str,
    request: Value,
    /// The well-formed total the client sees and the metric counts.
    total: u64,
    outcome: &'static str,
    /// Where the malformed count is, as listed, and its metric label.
    pointer: &'static str,
    figure: &'static str,
}

#[tokio::test]
async fn whole_streamed_and_chunked_responses_report_alike() {
    let upstream = provider().await;
    let url = upstream.url();
    let routes = [
        route("whole", "/whole", &url, "openai", ""),
        route("streamed", "/streamed", &url, "openai", ""),
        route(
            "chunked",
            "/chunked",
            &url,
            "openai",
            "max_batch_inputs = 3\n",
        ),
        route("bedrock-whole", "/bedrock-whole", &url, "bedrock", ""),
        route("bedrock-streamed", "/bedrock-streamed", &url, "bedrock", ""),
    ]
    .concat();
    let paths = [
        Path {
            route: "whole",
            path: "/whole/v1/embeddings",
            request: json!({"model": "m", "input": ["a"]}),
            total: 1,
            outcome: "normalized",
            pointer: "/usage/prompt_tokens",
            figure: "/usage/prompt_tokens",
        },
        Path {
            route: "streamed",
            path: "/streamed/v1/chat/completions",
            request: json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]}),
            total: 4,
            outcome: "normalized",
            pointer: "/usage/prompt_tokens",
            figure: "/usage/prompt_tokens",
        },
        Path {
            route: "chunked",
            path: "/chunked/v1/embeddings",
            request: json!({"model": "m", "input": ["a", "b", "c", "d"]}),
            total: 4,
            outcome: "stitched",
            pointer: "/usage/prompt_tokens",
            figure: "/usage/prompt_tokens",
        },
        Path {
            route: "whole",
            path: "/whole/v1/responses",
            request: json!({"model": "m", "input": "hi"}),
            total: 4,
            outcome: "normalized",
            pointer: "/usage/input_tokens",
            figure: "/usage/input_tokens",
        },
        Path {
            route: "streamed",
            path: "/streamed/v1/responses",
            request: json!({"model": "m", "input": "hi", "stream": true}),
            total: 4,
            outcome: "normalized",
            pointer: "/response/usage/input_tokens",
            figure: "/usage/input_tokens",
        },
        Path {
            route: "bedrock-whole",
            path: "/bedrock-whole/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse",
            request: json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}]}),
            total: 4,
            outcome: "normalized",
            pointer: "/usage/inputTokens",
            figure: "/usage/inputTokens",
        },
        Path {
            route: "bedrock-streamed",
            path:
                "/bedrock-streamed/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream",
            request: json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}]}),
            total: 4,
            outcome: "normalized",
            pointer: "/usage/inputTokens",
            figure: "/usage/inputTokens",
        },
    ];
    for path in &paths {
        // A probity per path: each one's metrics are its own.
        let probity = Probity::start(&config("", &routes));
        let id = format!("three-paths-{}", path.route);
        let got = send(
            http::Request::post(probity.url(path.path))
                .header("content-type", "application/json")
                .header("x-request-id", &id)
                .body(http_body_util::Full::new(path.request.to_string().into()))
                .unwrap(),
        )
        .await;
        assert_eq!(got.status, 200, "{}: {}", path.route, got.text());
        let text = got.text();
        assert!(!text.contains("\"x\""), "{}: {text}", path.route);
        if path.route == "bedrock-streamed" {
            // Binary frames carry no comment: the capture and the metrics
            // list the pointer.
            assert!(text.contains(r#""inputTokens":null"#), "{text}");
            assert!(!text.contains("exception"), "{text}");
        } else if path.route == "streamed" {
            let note = format!(": probity-normalized {}\n", path.pointer);
            assert!(text.contains(&note), "{text}");
            assert!(!text.contains("event: error"), "{text}");
            if path.path.ends_with("/chat/completions") {
                assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
            }
        } else {
            assert_eq!(got.header("probity-normalized"), Some(path.pointer));
            assert_eq!(got.header("probity-capture"), Some(id.as_str()));
            let usage = &got.json()["usage"];
            let total = usage.get("totalTokens").unwrap_or(&usage["total_tokens"]);
            assert_eq!(*total, path.total);
        }

        // The same log fields.
        let log = probity.request_log(&id).await;
        assert_eq!(log["captured"], true, "{}: {log}", path.route);
        // The one ranking: the log line's outcome is the capture's.
        assert_eq!(log["outcome"], path.outcome, "{}: {log}", path.route);
        assert_eq!(log["ending"], "complete", "{}: {log}", path.route);
        assert_eq!(log["status"], 200);

        // The same metrics.
        let route = path.route;
        let sample = |name: &str, labels: &str| format!("{name}{{route=\"{route}\"{labels}}}");
        let malformed = probity
            .metric(&sample(
                "probity_malformed_figures_total",
                &format!(",figure=\"{}\"", path.figure),
            ))
            .await;
        assert_eq!(malformed, Some(1.0), "{route}: malformed figures counted");
        let total = probity
            .metric(&sample("probity_tokens_total", ",kind=\"total\""))
            .await;
        assert_eq!(total, Some(path.total as f64), "{route}: tokens counted");
        let input = probity
            .metric(&sample("probity_tokens_total", ",kind=\"input\""))
            .await;
        assert_eq!(input, None, "{route}: a malformed count is never counted");
        for never in [
            "probity_uninspected_total",
            "probity_internal_errors_total",
            "probity_provider_invalid_response_total",
        ] {
            let metrics = get(&probity.admin_url("/metrics")).await.text();
            let labelled = format!("{never}{{route=\"{route}\"");
            assert!(!metrics.contains(&labelled), "{route}: {never} moved");
        }

        // The same capture.
        let listing = probity.admin_get("/captures").await.json();
        let entry = listing["captures"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["request_id"] == id.as_str())
            .unwrap_or_else(|| panic!("{route}: not captured: {listing}"))
            .clone();
        assert_eq!(entry["outcome"], path.outcome, "{route}: {entry}");
        assert_eq!(entry["route"], route);
        assert_eq!(entry["pointers"], json!([path.pointer]), "{entry}");
    }
}
