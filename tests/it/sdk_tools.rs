//! Tool calls through probity with each SDK's own tool helpers (issue 22),
//! in the style of `tests/it/sdks.rs`: `tests/sdks/tools_app.py` drives the
//! openai, anthropic and ollama Python SDKs the way an agent does, and
//! `tests/sdks/node/tools_app.mjs` their Node twins, against
//! a fake upstream that answers each `model` with its case. A valid call
//! reaches the app unchanged (parsed by the SDK's helper); an invalid one
//! reaches it as the upstream sent it, and is counted with its reason
//! under the endpoint's task.

use crate::support;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use crate::support::*;
use serde_json::{json, Value};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdks/tools_app.py");
const NODE_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdks/node/tools_app.mjs");
const LIMIT: Duration = Duration::from_secs(60);

/// What each case's call is: its tool name and arguments as sent.
fn call_of(case: &str) -> (&'static str, Value) {
    match case {
        "unknown" => ("get_wether", json!({"city": "Paris"})),
        "schema" => ("get_weather", json!({"city": "Paris", "unit": "kelvin"})),
        _ => ("get_weather", json!({"city": "Paris", "unit": "celsius"})),
    }
}

/// OpenAI's arguments text: the cut case's is cut, as llama.cpp's parser
/// has sent it.
const CUT: &str = r#"{"city": "Par"#;

fn openai_arguments(case: &str) -> String {
    match case {
        "cut" => CUT.into(),
        _ => call_of(case).1.to_string(),
    }
}

fn openai(case: &str, stream: bool) -> Reply {
    let (name, _) = call_of(case);
    let arguments = openai_arguments(case);
    if !stream {
        let call = json!({"id": "call_1", "type": "function",
            "function": {"name": name, "arguments": arguments}});
        let body = json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1,
            "model": "gpt-4o-mini", "choices": [{"index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": null, "refusal": null, "tool_calls": [call]}}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 9, "total_tokens": 18}});
        return Reply::json(200, body.to_string());
    }
    let (head, tail) = arguments.split_at(arguments.len() / 2);
    let chunk = |delta: Value, finish: Value| {
        let chunk = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
            "model": "gpt-4o-mini", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {chunk}\n\n")
    };
    let fragment =
        |text: &str| json!({"tool_calls": [{"index": 0, "function": {"arguments": text}}]});
    let first = json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1",
        "type": "function", "function": {"name": name, "arguments": ""}}]});
    let text = [
        chunk(first, Value::Null),
        chunk(fragment(head), Value::Null),
        chunk(fragment(tail), Value::Null),
        chunk(json!({}), json!("tool_calls")),
        "data: [DONE]\n\n".to_string(),
    ]
    .concat();
    Reply::stream("text/event-stream", vec![part(Before::Now, text)])
}

/// A Responses API answer holding one function call; streamed, its events
/// as OpenAI sends them (the call added, its arguments in two deltas and
/// whole in `.done`, the item done, then `response.completed`).
fn responses(case: &str, stream: bool) -> Reply {
    let (name, _) = call_of(case);
    let arguments = openai_arguments(case);
    let item = |status: &str, arguments: &str| {
        json!({"id": "fc_1", "type": "function_call", "status": status,
            "arguments": arguments, "call_id": "call_1", "name": name})
    };
    let response = |status: &str, output: Value| {
        json!({"id": "resp_1", "object": "response", "created_at": 1, "status": status,
            "model": "gpt-4.1-mini", "output": output, "parallel_tool_calls": true,
            "tool_choice": "auto", "tools": [],
            "usage": {"input_tokens": 9, "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 9, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 18}})
    };
    let done = response("completed", json!([item("completed", &arguments)]));
    if !stream {
        return Reply::json(200, done.to_string());
    }
    let (head, tail) = arguments.split_at(arguments.len() / 2);
    let events = [
        json!({"type": "response.created", "response": response("in_progress", json!([]))}),
        json!({"type": "response.output_item.added", "output_index": 0,
            "item": item("in_progress", "")}),
        json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1",
            "output_index": 0, "delta": head}),
        json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1",
            "output_index": 0, "delta": tail}),
        json!({"type": "response.function_call_arguments.done", "item_id": "fc_1",
            "output_index": 0, "arguments": arguments}),
        json!({"type": "response.output_item.done", "output_index": 0,
            "item": item("completed", &arguments)}),
        json!({"type": "response.completed", "response": done}),
    ];
    let text: String = events
        .into_iter()
        .enumerate()
        .map(|(n, mut event)| {
            event["sequence_number"] = json!(n);
            format!(
                "event: {}\ndata: {event}\n\n",
                event["type"].as_str().unwrap()
            )
        })
        .collect();
    Reply::stream("text/event-stream", vec![part(Before::Now, text)])
}

fn anthropic(case: &str, stream: bool) -> Reply {
    let (name, input) = call_of(case);
    let usage = json!({"input_tokens": 9, "output_tokens": 9});
    if !stream {
        let body = json!({"id": "msg_1", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-5", "stop_reason": "tool_use", "stop_sequence": null,
            "content": [{"type": "tool_use", "id": "toolu_1", "name": name, "input": input}],
            "usage": usage});
        return Reply::json(200, body.to_string());
    }
    let text = input.to_string();
    let (head, tail) = text.split_at(text.len() / 2);
    let event = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let delta = |json: &str| {
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": json}}),
        )
    };
    let text = [
        event("message_start", json!({"type": "message_start", "message": {"id": "msg_1",
            "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [],
            "stop_reason": null, "stop_sequence": null, "usage": usage}})),
        event("content_block_start", json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": name, "input": {}}})),
        delta(head),
        delta(tail),
        event("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
        event("message_delta", json!({"type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 9}})),
        event("message_stop", json!({"type": "message_stop"})),
    ]
    .concat();
    Reply::stream("text/event-stream", vec![part(Before::Now, text)])
}

fn ollama(case: &str, stream: bool) -> Reply {
    let (name, arguments) = match case {
        "schema" => ("get_weather", json!({"unit": "celsius"})),
        other => call_of(other),
    };
    let message = json!({"role": "assistant", "content": "",
        "tool_calls": [{"function": {"name": name, "arguments": arguments}}]});
    let last = |message: Value| {
        json!({"model": "llama3.2:3b", "created_at": "2025-05-12T10:00:00Z", "message": message,
            "done": true, "done_reason": "stop", "prompt_eval_count": 9, "eval_count": 9})
    };
    if !stream {
        return Reply::json(200, last(message).to_string());
    }
    let first = json!({"model": "llama3.2:3b", "created_at": "2025-05-12T10:00:00Z",
        "message": message, "done": false});
    let text = format!(
        "{first}\n{}\n",
        last(json!({"role": "assistant", "content": ""}))
    );
    Reply::stream("application/x-ndjson", vec![part(Before::Now, text)])
}

fn provider(request: &Recorded) -> Reply {
    let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
    let case = body["model"].as_str().unwrap_or_default().to_string();
    let stream = body["stream"] == json!(true);
    if request.target.ends_with("/responses") {
        responses(&case, stream)
    } else if request.target.starts_with("/openai") {
        openai(&case, stream)
    } else if request.target.starts_with("/anthropic") {
        anthropic(&case, stream)
    } else {
        ollama(&case, stream)
    }
}

/// Runs one app script against probity, within [`LIMIT`]: its rows, and
/// what it wrote on stderr.
async fn run(program: &str, script: &str, probity: &Probity) -> (BTreeMap<String, Value>, String) {
    let mut command = Command::new(program);
    command.arg(script);
    let output = run_app(command, probity.url(""), LIMIT).await;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (rows(&output.stdout), stderr)
}

/// Node and the SDKs tests/sdks/node pins, or the rows are skipped the way
/// tests/it/sdks.rs skips them (a failure where CI runs).
fn node_ready() -> bool {
    let missing = missing_node(&["openai", "@anthropic-ai/sdk", "ollama"]);
    can_run(
        "the Node SDK tool rows",
        &missing,
        "npm ci --prefix tests/sdks/node",
    )
}

/// The rows the script printed, by name.
fn rows(stdout: &[u8]) -> BTreeMap<String, Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .map(|row| (row["row"].as_str().unwrap().to_string(), row))
        .collect()
}

#[tokio::test]
async fn each_sdks_tool_helpers_get_valid_calls_unchanged_and_invalid_ones_as_sent() {
    let missing = missing_python(&["openai", "anthropic", "ollama", "pydantic"]);
    if !can_run(
        "the SDK tool rows",
        &missing,
        "python3 -m pip install openai anthropic ollama",
    ) {
        return;
    }
    let upstream = Upstream::start(provider).await;
    let routes: String = ["openai", "anthropic", "ollama"]
        .iter()
        .map(|d| {
            route(
                d,
                &format!("/{d}"),
                &format!("{}/{d}", upstream.url()),
                d,
                "",
            )
        })
        .collect();
    let probity = Probity::start(&config("", &routes));
    let (mut rows, mut stderr) = run("python3", SCRIPT, &probity).await;
    let node = node_ready();
    if node {
        let (more, err) = run("node", NODE_SCRIPT, &probity).await;
        rows.extend(more);
        stderr += &err;
    }
    let seen = |name: &str| -> &Value {
        let row = rows
            .get(name)
            .unwrap_or_else(|| panic!("no row {name}: {stderr}"));
        row.get("seen")
            .unwrap_or_else(|| panic!("{name} raised: {row}"))
    };
    // Valid: what the SDK's helper parsed is what the model sent.
    assert_eq!(seen("openai.parse.valid")["parsed"], call_of("valid").1);
    assert_eq!(seen("responses.parse.valid")["parsed"], call_of("valid").1);
    assert_eq!(seen("responses.stream.valid")["parsed"], call_of("valid").1);
    assert_eq!(seen("anthropic.stream.valid")["input"], call_of("valid").1);
    assert_eq!(seen("ollama.chat.valid")["arguments"], call_of("valid").1);
    // Invalid: the app has the upstream's call, and the verdict.
    let cut = seen("openai.create.cut");
    assert_eq!(cut["arguments"], CUT);
    assert_eq!(cut["output"], "invalid");
    assert_eq!(cut["reason"], "tool_arguments_invalid_json");
    // A streamed Responses call: the final response and the deltas are
    // the upstream's.
    let cut = seen("responses.stream.cut");
    assert_eq!(
        (cut["arguments"].clone(), cut["deltas"].clone()),
        (json!(CUT), json!(CUT))
    );
    assert_eq!(seen("responses.stream.unknown")["name"], "get_wether");
    if node {
        let cut = seen("node.openai.stream.cut");
        assert_eq!(cut["arguments"], CUT, "{cut}");
        let schema = seen("node.openai.create.schema");
        assert_eq!(
            (schema["output"].clone(), schema["reason"].clone()),
            (json!("invalid"), json!("tool_arguments_schema"))
        );
        assert_eq!(schema["arguments"], json!(call_of("schema").1.to_string()));
        let valid = seen("node.responses.stream.valid");
        assert_eq!(valid["arguments"], json!(call_of("valid").1.to_string()));
        assert_eq!(valid["deltas"], valid["arguments"]);
        let schema = seen("node.responses.create.schema");
        assert_eq!(
            (schema["output"].clone(), schema["reason"].clone()),
            (json!("invalid"), json!("tool_arguments_schema"))
        );
        assert_eq!(seen("node.anthropic.stream.unknown")["name"], "get_wether");
        assert_eq!(
            seen("node.ollama.chat.schema")["arguments"],
            json!({"unit": "celsius"})
        );
    }
    let unknown = seen("openai.stream.unknown");
    assert_eq!(
        (unknown["name"].clone(), unknown["arguments"].clone()),
        (json!("get_wether"), json!(call_of("unknown").1.to_string()))
    );
    assert_eq!(
        seen("anthropic.stream.schema")["input"],
        call_of("schema").1
    );
    let unknown = seen("anthropic.create.unknown");
    assert_eq!(
        (unknown["name"].clone(), unknown["reason"].clone()),
        (json!("get_wether"), json!("tool_unknown"))
    );
    assert_eq!(
        seen("ollama.chat.schema")["arguments"],
        json!({"unit": "celsius"})
    );
    assert_eq!(seen("ollama.stream.unknown")["name"], "get_wether");
    // Counted once per response, with its reason, under the endpoint's task.
    // The Node rows add one call each: counted alike.
    let n = f64::from(u8::from(node));
    let counted = [
        ("chat_completions", "tool_arguments_invalid_json", 1.0 + n),
        ("chat_completions", "tool_unknown", 1.0),
        ("chat_completions", "tool_arguments_schema", n),
        ("responses", "tool_arguments_invalid_json", 1.0),
        ("responses", "tool_unknown", 1.0),
        ("responses", "tool_arguments_schema", n),
        ("anthropic_messages", "tool_arguments_schema", 1.0),
        ("anthropic_messages", "tool_unknown", 1.0 + n),
        ("ollama_chat", "tool_arguments_schema", 1.0 + n),
        ("ollama_chat", "tool_unknown", 1.0),
    ];
    let metric = |text: &str, labels: &[(&str, &str)]| {
        support::fixtures::measure(text, "probity_model_invalid_output_total", labels)
    };
    let mut text = String::new();
    for _ in 0..50 {
        text = get(&probity.admin_url("/metrics")).await.text();
        if metric(
            &text,
            &[("task", "ollama_chat"), ("reason", "tool_arguments_schema")],
        ) >= 1.0 + n
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for (task, reason, want) in counted {
        let got = metric(&text, &[("task", task), ("reason", reason)]);
        assert_eq!(got, want, "{task} {reason}");
    }
    for (task, judged) in [
        ("chat_completions", 3.0 + 2.0 * n),
        ("responses", 4.0 + 2.0 * n),
        ("anthropic_messages", 3.0 + n),
        ("ollama_chat", 3.0 + n),
    ] {
        let got =
            support::fixtures::measure(&text, "probity_model_outputs_total", &[("task", task)]);
        assert_eq!(got, judged, "{task}: one verdict per response");
    }
}
