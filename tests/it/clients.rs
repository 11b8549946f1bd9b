//! Real client libraries through probity: a normalized response must still
//! be one the SDK accepts, and a rejected one an error it reports.

use crate::support::*;
use std::process::Command;

/// How the SDKs are installed.
const PIP: &str = "python3 -m pip install openai anthropic ollama google-genai";

/// The openai SDK asks for base64 unless told otherwise; the upstream
/// answers in kind, with a malformed `prompt_tokens` (a gateway that
/// stringifies numbers). The SDK must get the vectors and `None` for the
/// figure; a list one vector short must reach it as a 502 error.
#[tokio::test]
async fn the_openai_sdk_accepts_a_normalized_embeddings_response() {
    if !can_run(
        "the_openai_sdk_accepts_a_normalized_embeddings_response",
        &missing_python(&["openai"]),
        PIP,
    ) {
        return;
    }
    let vectors: [[f32; 3]; 2] = [[0.25, -1.5, 3.0], [0.5, 0.125, -0.75]];
    let upstream = Upstream::start(move |request| {
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        let base64_asked = body["encoding_format"] == "base64";
        let data: Vec<String> = vectors
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let embedding = if base64_asked {
                    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                    format!("\"{}\"", base64(&bytes))
                } else {
                    format!("[{}, {}, {}]", v[0], v[1], v[2])
                };
                format!(r#"{{"object": "embedding", "index": {i}, "embedding": {embedding}}}"#)
            })
            .collect();
        Reply::json(
            200,
            format!(
                r#"{{"object": "list", "data": [{}], "model": "text-embedding-3-small", "usage": {{"prompt_tokens": "6", "total_tokens": 6}}}}"#,
                data.join(", ")
            ),
        )
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &upstream.url(), "openai", ""),
    ));

    let printed = client_script("openai_embeddings.py", &[], probity.url("/openai/v1")).await;
    let mut lines = printed.iter();
    let seen = lines.next().unwrap();
    assert_eq!(
        seen["vectors"],
        serde_json::json!([[0.25, -1.5, 3.0], [0.5, 0.125, -0.75]])
    );
    assert_eq!(seen["indexes"], serde_json::json!([0, 1]));
    assert!(seen["prompt_tokens"].is_null(), "{seen}");
    assert_eq!(seen["total_tokens"], 6);
    assert_eq!(seen["normalized"], "/usage/prompt_tokens");
    let short = lines.next().unwrap();
    assert_eq!(short["short_list"], 502, "{short}");
    assert_eq!(
        upstream.requests()[0].header("authorization"),
        Some("Bearer sk-app")
    );
}

/// The upstream of the generation SDK tests: realistic answers, streamed or
/// not as asked, each with one malformed figure.
async fn generation_upstream() -> Upstream {
    Upstream::start(|request| {
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap_or_default();
        let stream = |default| body["stream"].as_bool().unwrap_or(default);
        let sse = |text: String| Reply::stream("text/event-stream", vec![part(Before::Now, text)]);
        match request.target.as_str() {
            "/openai/v1/chat/completions" if stream(false) => {
                let text = String::from_utf8(fixture("openai_chat_stream.sse")).unwrap();
                sse(text.replace(r#""prompt_tokens":9"#, r#""prompt_tokens":"9""#))
            }
            "/openai/v1/chat/completions" => Reply::json(
                200,
                r#"{"id": "chatcmpl-B9", "object": "chat.completion", "created": 1764410400, "model": "gpt-4o-mini-2024-07-18", "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello!", "refusal": null}, "logprobs": null, "finish_reason": "stop"}], "usage": {"prompt_tokens": "9", "completion_tokens": 2, "total_tokens": 11}}"#,
            ),
            "/anthropic/v1/messages" if stream(false) => {
                let text = String::from_utf8(fixture("anthropic_messages_stream.sse")).unwrap();
                sse(text.replace(r#""input_tokens":25"#, r#""input_tokens":-25"#))
            }
            "/anthropic/v1/messages" => Reply::json(
                200,
                r#"{"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [{"type": "text", "text": "Hello!"}], "stop_reason": "end_turn", "stop_sequence": null, "usage": {"input_tokens": "25", "output_tokens": 15}}"#,
            ),
            "/ollama/api/chat" if stream(true) => {
                let text = String::from_utf8(fixture("ollama_chat_stream.ndjson")).unwrap();
                Reply::stream("application/x-ndjson", vec![part(Before::Now, text.replace("\"eval_count\":4", "\"eval_count\":4.5"))])
            }
            "/ollama/api/chat" => Reply::json(
                200,
                r#"{"model": "llama3.2:3b", "created_at": "2026-11-29T10:00:00Z", "message": {"role": "assistant", "content": "The sky is blue."}, "done_reason": "stop", "done": true, "total_duration": 1523456789, "prompt_eval_count": 26, "eval_count": "4"}"#,
            ),
            other => Reply::json(404, format!(r#"{{"error": "no {other}"}}"#)),
        }
    })
    .await
}

/// Runs `generation.py SDK` against probity; returns the two JSON lines.
async fn run_sdk(sdk: &'static str, base: String) -> Vec<serde_json::Value> {
    client_script("generation.py", &[sdk], base).await
}

/// openai, anthropic and ollama, each streamed and not: the app gets its
/// text, `None` for the malformed figure, the sound ones as sent.
#[tokio::test]
async fn the_generation_sdks_accept_normalized_answers_streamed_or_not() {
    if !can_run(
        "the_generation_sdks_accept_normalized_answers_streamed_or_not",
        &missing_python(&["openai", "anthropic", "ollama"]),
        PIP,
    ) {
        return;
    }
    let upstream = generation_upstream().await;
    let routes = [
        route(
            "openai",
            "/openai",
            &format!("{}/openai", upstream.url()),
            "openai",
            "",
        ),
        route(
            "anthropic",
            "/anthropic",
            &format!("{}/anthropic", upstream.url()),
            "anthropic",
            "",
        ),
        route(
            "ollama",
            "/ollama",
            &format!("{}/ollama", upstream.url()),
            "ollama",
            "",
        ),
    ]
    .concat();
    let probity = Probity::start(&config("", &routes));

    let seen = run_sdk("openai", probity.url("/openai/v1")).await;
    assert_eq!(
        seen[0],
        serde_json::json!({"text": "Hello!", "input": null, "output": 2})
    );
    assert_eq!(
        seen[1],
        serde_json::json!({"text": "Hello", "input": null, "output": 1})
    );
    let seen = run_sdk("anthropic", probity.url("/anthropic")).await;
    assert_eq!(
        seen[0],
        serde_json::json!({"text": "Hello!", "input": null, "output": 15})
    );
    assert_eq!(seen[1]["text"], "Hello!");
    assert_eq!(seen[1]["output"], 15);
    assert!(seen[1]["input"].is_null(), "{}", seen[1]);
    let seen = run_sdk("ollama", probity.url("/ollama")).await;
    assert_eq!(
        seen[0],
        serde_json::json!({"text": "The sky is blue.", "input": 26, "output": null})
    );
    assert_eq!(
        seen[1],
        serde_json::json!({"text": "The sky is blue.", "input": 26, "output": null})
    );
}

/// A pydantic `response_format` through a degrading contract: the SDK's
/// own parser must accept the degraded answer.
#[tokio::test]
async fn the_openai_sdk_parses_a_degraded_answer() {
    if !can_run(
        "the_openai_sdk_parses_a_degraded_answer",
        &missing_python(&["openai"]),
        PIP,
    ) {
        return;
    }
    let upstream = Upstream::start(|request| {
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(body["response_format"]["type"], "json_schema");
        let content = r#"{"answer": "sufficient", "sufficient": true, "citations": [], "uncertainty": []}"#;
        Reply::json(
            200,
            serde_json::json!({
                "id": "chatcmpl-7", "object": "chat.completion", "created": 1764410400, "model": "llama3.2:3b",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 80, "completion_tokens": 20, "total_tokens": 100}
            })
            .to_string(),
        )
    })
    .await;
    let contract = r#"
[routes.contract]
task = "grounded_answer"
on_invalid = "degrade"
prose = ["/answer"]
min_chars = 12
[routes.contract.citations]
output = "/citations"
sources = "/sources"
required = true
"#;
    let routes = format!(
        "{}{contract}",
        route("ollama", "/ollama", &upstream.url(), "ollama", "")
    );
    let probity = Probity::start(&config("", &routes));

    let printed = client_script("contract.py", &[], probity.url("/ollama/v1")).await;
    let seen = &printed[0];
    assert_eq!(seen["answer"], "");
    assert_eq!(seen["sufficient"], false);
    assert_eq!(seen["citations"], serde_json::json!([]));
    assert_eq!(seen["output"], "invalid");
    assert_eq!(
        seen["reasons"],
        "field_name_echo,too_short,citation_missing"
    );
    let reason = seen["uncertainty"][0].as_str().unwrap();
    assert!(
        reason.starts_with("model output rejected: answer repeats the schema field name"),
        "{reason}"
    );
}

/// A fake Gemini: `batchEmbedContents`, `generateContent` and
/// `streamGenerateContent?alt=sse`, each answer sound unless the request
/// says "malformed", in which case one count is malformed.
async fn gemini_upstream() -> Upstream {
    Upstream::start(|request| {
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap_or_default();
        let malformed = String::from_utf8_lossy(&request.body).contains("malformed");
        let target = request.target.as_str();
        if target.ends_with("/models/gemini-embedding-001:batchEmbedContents") {
            let requests = body["requests"].as_array().cloned().unwrap_or_default();
            let embeddings: Vec<String> = (0..requests.len())
                .map(|i| format!(r#"{{"values": [{i}.25, -0.5, 0.125]}}"#))
                .collect();
            let tokens = 3 * requests.len();
            let prompt = if malformed { "-6".to_string() } else { tokens.to_string() };
            return Reply::json(
                200,
                format!(
                    r#"{{"embeddings": [{}], "usageMetadata": {{"promptTokenCount": {prompt}, "totalTokenCount": {tokens}}}}}"#,
                    embeddings.join(", ")
                ),
            );
        }
        if target.ends_with("/models/gemini-2.5-flash:generateContent") {
            let prompt = if malformed { r#""3""# } else { "3" };
            return Reply::json(
                200,
                format!(
                    r#"{{"candidates": [{{"content": {{"parts": [{{"text": "Hello! How can I help you today?"}}], "role": "model"}}, "finishReason": "STOP", "index": 0}}], "usageMetadata": {{"promptTokenCount": {prompt}, "candidatesTokenCount": 9, "totalTokenCount": 31, "promptTokensDetails": [{{"modality": "TEXT", "tokenCount": 3}}], "thoughtsTokenCount": 19}}, "modelVersion": "gemini-2.5-flash", "responseId": "mAitaLmkHPPlz7IPvtfUqQ4"}}"#
                ),
            );
        }
        if target.ends_with("/models/gemini-2.5-flash:streamGenerateContent?alt=sse") {
            let output = if malformed { "9.5" } else { "9" };
            // Asked to break: the second chunk names a candidate never asked for.
            let index = if String::from_utf8_lossy(&request.body).contains("broken") { 3 } else { 0 };
            let text = format!(
                "data: {{\"candidates\": [{{\"content\": {{\"parts\": [{{\"text\": \"Hello!\"}}],\"role\": \"model\"}},\"index\": 0}}],\"usageMetadata\": {{\"promptTokenCount\": 3,\"totalTokenCount\": 3}},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"xG6taPGmLqK2z7IPpqaXsAg\"}}\r\n\r\n\
                 data: {{\"candidates\": [{{\"content\": {{\"parts\": [{{\"text\": \" How can I help?\"}}],\"role\": \"model\"}},\"finishReason\": \"STOP\",\"index\": {index}}}],\"usageMetadata\": {{\"promptTokenCount\": 3,\"candidatesTokenCount\": {output},\"totalTokenCount\": 31,\"thoughtsTokenCount\": 19}},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"xG6taPGmLqK2z7IPpqaXsAg\"}}\r\n\r\n"
            );
            return Reply::stream("text/event-stream", vec![part(Before::Now, text)]);
        }
        Reply::json(
            404,
            format!(r#"{{"error": {{"code": 404, "message": "no {target}", "status": "NOT_FOUND"}}}}"#),
        )
    })
    .await
}

/// The google-genai SDK through probity: embeddings (which it always sends
/// to `batchEmbedContents`, one content or several), `generate_content`
/// and `generate_content_stream`. Sound answers reach the app unchanged;
/// a malformed count reaches it as `None`, with no exception.
#[tokio::test]
async fn the_google_genai_sdk_accepts_sound_and_normalized_answers() {
    if !can_run(
        "the_google_genai_sdk_accepts_sound_and_normalized_answers",
        &missing_python(&["google.genai"]),
        PIP,
    ) {
        return;
    }
    let upstream = gemini_upstream().await;
    let probity = Probity::start(&config(
        "",
        &route(
            "gemini",
            "/gemini",
            &format!("{}/gemini", upstream.url()),
            "gemini",
            "",
        ),
    ));
    let printed = client_script("gemini.py", &[], probity.url("/gemini")).await;
    let seen = printed;
    let usage = |input: serde_json::Value, output: serde_json::Value, total| serde_json::json!({"input": input, "output": output, "total": total});
    let null = serde_json::Value::Null;
    assert_eq!(seen[0]["vectors"], serde_json::json!([[0.25, -0.5, 0.125]]));
    assert_eq!(seen[0]["usage"], usage(3.into(), null.clone(), 3));
    assert_eq!(
        seen[1]["vectors"],
        serde_json::json!([[0.25, -0.5, 0.125], [1.25, -0.5, 0.125]])
    );
    assert_eq!(seen[1]["usage"], usage(6.into(), null.clone(), 6));
    assert_eq!(seen[2]["vectors"], seen[1]["vectors"]);
    assert_eq!(seen[2]["usage"], usage(null.clone(), null.clone(), 6));
    let hello = "Hello! How can I help you today?";
    assert_eq!(seen[3]["text"], hello);
    assert_eq!(seen[3]["usage"], usage(3.into(), 9.into(), 31));
    assert_eq!(seen[3]["id"], "mAitaLmkHPPlz7IPvtfUqQ4");
    assert_eq!(seen[4]["text"], "Hello! How can I help?");
    assert_eq!(seen[4]["usage"], usage(3.into(), 9.into(), 31));
    assert_eq!(seen[5]["text"], hello);
    assert_eq!(seen[5]["usage"], usage(null.clone(), 9.into(), 31));
    assert_eq!(seen[6]["text"], "Hello! How can I help?");
    assert_eq!(seen[6]["usage"], usage(3.into(), null, 31));
    assert_eq!(
        seen[7],
        serde_json::json!({"text": "Hello!", "error": 502, "status": "UNAVAILABLE", "reason": "choice_index_invalid"}),
        "a broken stream ends in an error the SDK raises as its own"
    );

    let requests = upstream.requests();
    let paths: Vec<&str> = requests.iter().map(|r| r.target.as_str()).collect();
    assert!(
        paths[..3]
            .iter()
            .all(|p| p.ends_with(":batchEmbedContents")),
        "the SDK embeds through batchEmbedContents: {paths:?}"
    );
    assert!(requests
        .iter()
        .all(|r| r.header("x-goog-api-key") == Some("unused")));
}

/// A fake Bedrock Runtime: `converse` answers sound, with a malformed
/// `inputTokens` when the prompt says "malformed", and without
/// `output.message` (a payload fault) when it says "broken".
async fn bedrock_upstream() -> Upstream {
    Upstream::start(|request| {
        let text = String::from_utf8_lossy(&request.body);
        let target = request.target.as_str();
        if !target.ends_with("/converse") {
            return Reply::json(404, format!(r#"{{"message": "no {target}"}}"#))
                .header("x-amzn-errortype", "UnknownOperationException");
        }
        let input = if text.contains("malformed") { r#""12""# } else { "12" };
        let output = if text.contains("broken") {
            r#"{"message": null}"#
        } else {
            r#"{"message": {"role": "assistant", "content": [{"text": "Hello! How can I help you today?"}]}}"#
        };
        Reply::json(
            200,
            format!(
                r#"{{"output": {output}, "stopReason": "end_turn", "usage": {{"inputTokens": {input}, "outputTokens": 9, "totalTokens": 21}}, "metrics": {{"latencyMs": 412}}}}"#
            ),
        )
    })
    .await
}

/// A route with `aws_region` signs every request anew with SigV4 (service
/// `bedrock`) and the AWS credentials of probity's environment: boto3
/// signs with dummy ones, the upstream gets probity's signature, which
/// botocore's own signer, run again over the received request, verifies
/// (the session token included).
#[tokio::test]
async fn boto3_converse_on_a_sigv4_route_is_signed_by_probity() {
    if !can_run(
        "boto3_converse_on_a_sigv4_route_is_signed_by_probity",
        &missing_python(&["boto3"]),
        "python3 -m pip install boto3",
    ) {
        return;
    }
    let upstream = bedrock_upstream().await;
    let aws = [
        ("AWS_ACCESS_KEY_ID", "AKIAPROBITYTEST0001"),
        (
            "AWS_SECRET_ACCESS_KEY",
            "probity/test/secret+key/0123456789abcdef",
        ),
        ("AWS_SESSION_TOKEN", "probity-session-token-0123"),
    ];
    let probity = Probity::start_with_env(
        &config(
            "",
            &route(
                "bedrock",
                "/bedrock",
                &upstream.url(),
                "bedrock",
                "aws_region = \"eu-west-3\"",
            ),
        ),
        &aws,
    );
    let seen = client_script("bedrock.py", &[], probity.url("/bedrock")).await;
    assert_eq!(seen[0]["text"], "Hello! How can I help you today?");
    assert_eq!(seen[1]["usage"]["inputTokens"], serde_json::Value::Null);
    assert_eq!(seen[2]["code"], "provider_invalid_response");

    let requests = upstream.requests();
    let recorded: Vec<serde_json::Value> = requests
        .iter()
        .map(|r| {
            let headers: serde_json::Map<String, serde_json::Value> = r
                .headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_str().unwrap().into()))
                .collect();
            serde_json::json!({
                "method": r.method,
                "url": format!("{}{}", upstream.url(), r.target),
                "headers": headers,
                "body": base64(&r.body),
            })
        })
        .collect();
    // The same request with one byte of its body changed: the check can fail.
    let mut recorded = recorded;
    let mut tampered = recorded[0].clone();
    tampered["body"] = base64(&[&requests[0].body[..], b" "].concat()).into();
    recorded.push(tampered);
    let file = temp_path(".json");
    std::fs::write(&file, serde_json::to_vec(&recorded).unwrap()).unwrap();
    let verified = tokio::task::spawn_blocking(move || {
        let mut command = Command::new("python3");
        command
            .arg(format!(
                "{}/tests/clients/sigv4_verify.py",
                env!("CARGO_MANIFEST_DIR")
            ))
            .arg(&file);
        for (name, value) in aws {
            command.env(name, value);
        }
        command.output().unwrap()
    })
    .await
    .unwrap();
    assert!(verified.status.success(), "{verified:?}");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&verified.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), requests.len() + 1);
    assert_eq!(requests.len(), 3, "one request a call, retries off");
    assert_eq!(
        lines[requests.len()]["valid"],
        false,
        "a changed body verifies"
    );
    for (line, request) in lines.iter().zip(&requests) {
        assert_eq!(line["valid"], true, "{line} for {}", request.target);
        assert_eq!(line["region"], "eu-west-3");
        assert_eq!(line["service"], "bedrock");
        assert_eq!(line["token"], "probity-session-token-0123");
        let signed: Vec<&str> = line["signed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        for header in ["host", "x-amz-date", "content-type", "x-amz-security-token"] {
            assert!(signed.contains(&header), "{header} unsigned: {signed:?}");
        }
        let authorization = request.header("authorization").unwrap();
        assert!(
            authorization.contains("Credential=AKIAPROBITYTEST0001/"),
            "the client's dummy key reached the upstream: {authorization}"
        );
    }
}
