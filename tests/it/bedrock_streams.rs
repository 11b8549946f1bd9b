//! Bedrock's `converse-stream` over real sockets: AWS's binary event-stream
//! frames relayed as they arrive, judged frame by frame; a `metadata` frame
//! with a malformed figure rewritten alone (its CRCs anew); a frame that
//! cannot be read (either CRC, a cut frame) ending the stream with
//! probity's own exception frame; and boto3's `converse_stream` reading all
//! of it.

use crate::support::eventstream::{event, frames, read};
use crate::support::*;

const PATH: &str = "/bedrock/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream";
const REQUEST: &str = r#"{"messages": [{"role": "user", "content": [{"text": "Say hello"}]}]}"#;

/// A sound Converse stream, its metadata's `inputTokens` as given.
fn stream(input_tokens: &str) -> Vec<Vec<u8>> {
    vec![
        event("messageStart", r#"{"p":"abcd","role":"assistant"}"#),
        event(
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"text":"Hello!"},"p":"abcdef"}"#,
        ),
        event(
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"text":" How can I help?"},"p":"ab"}"#,
        ),
        event(
            "contentBlockStop",
            r#"{"contentBlockIndex":0,"p":"abcdefgh"}"#,
        ),
        event(
            "messageStop",
            r#"{"p":"abcdefghij","stopReason":"end_turn"}"#,
        ),
        event(
            "metadata",
            &format!(
                r#"{{"metrics":{{"latencyMs":412}},"p":"abc","usage":{{"inputTokens":{input_tokens},"outputTokens":9,"totalTokens":21}}}}"#
            ),
        ),
    ]
}

async fn bedrock_upstream() -> Upstream {
    Upstream::start(|request| {
        let text = String::from_utf8_lossy(&request.body);
        if request.target.ends_with("/converse") {
            let input = if text.contains("malformed") { r#""12""# } else { "12" };
            let output = if text.contains("broken") {
                r#"{"message": null}"#
            } else {
                r#"{"message": {"role": "assistant", "content": [{"text": "Hello! How can I help?"}]}}"#
            };
            return Reply::json(
                200,
                format!(
                    r#"{{"output": {output}, "stopReason": "end_turn", "usage": {{"inputTokens": {input}, "outputTokens": 9, "totalTokens": 21}}, "metrics": {{"latencyMs": 412}}}}"#
                ),
            );
        }
        let mut frames = if text.contains("malformed") {
            stream(r#""12""#)
        } else {
            stream("12")
        };
        if text.contains("broken") {
            // The second delta's message CRC is wrong.
            let last = frames[2].len() - 1;
            frames[2][last] ^= 0x5a;
        }
        if text.contains("cut") {
            // The upstream ends inside the last frame.
            let last = frames.len() - 1;
            frames[last].truncate(20);
        }
        // One frame per write, the third split in two.
        let mut parts = Vec::new();
        for (i, frame) in frames.into_iter().enumerate() {
            if i == 2 {
                parts.push(part(Before::Now, frame[..7].to_vec()));
                parts.push(part(Before::Now, frame[7..].to_vec()));
            } else {
                parts.push(part(Before::Now, frame));
            }
        }
        Reply::stream("application/vnd.amazon.eventstream", parts)
    })
    .await
}

fn probity(upstream: &Upstream) -> Probity {
    Probity::start(&config(
        "",
        &route("bedrock", "/bedrock", &upstream.url(), "bedrock", ""),
    ))
}

async fn converse_stream(probity: &Probity, prompt: &str) -> Got {
    post(&probity.url(PATH), REQUEST.replace("Say hello", prompt)).await
}

#[tokio::test]
async fn a_sound_stream_passes_byte_for_byte_and_a_malformed_figure_is_rewritten_alone() {
    let upstream = bedrock_upstream().await;
    let probity = probity(&upstream);
    let sound = converse_stream(&probity, "Say hello").await;
    assert_eq!(sound.status, 200);
    assert_eq!(sound.body, stream("12").concat(), "byte for byte");
    let before = probity
        .metric(r#"probity_malformed_figures_total{route="bedrock",figure="/usage/inputTokens"}"#)
        .await
        .unwrap_or(0.0);
    let normalized = converse_stream(&probity, "Say hello (malformed)").await;
    let want = stream(r#""12""#);
    let got = frames(&normalized.body);
    assert_eq!(got.len(), want.len());
    assert_eq!(got[..5], want[..5], "the frames before it are untouched");
    let (headers, payload) = read(&got[5]).expect("the rewritten frame's CRCs hold");
    assert_eq!(headers, read(&want[5]).unwrap().0, "its headers unchanged");
    assert_eq!(
        String::from_utf8(payload).unwrap(),
        r#"{"metrics":{"latencyMs":412},"p":"abc","usage":{"inputTokens":null,"outputTokens":9,"totalTokens":21}}"#
    );
    let after = probity
        .metric(r#"probity_malformed_figures_total{route="bedrock",figure="/usage/inputTokens"}"#)
        .await
        .unwrap_or(0.0);
    assert_eq!(after - before, 1.0);
}

#[tokio::test]
async fn a_bad_crc_or_a_cut_frame_ends_the_stream_with_probitys_exception_frame() {
    let upstream = bedrock_upstream().await;
    let probity = probity(&upstream);
    for (prompt, sound_frames, fault) in [
        ("Say hello (broken)", 2, "message CRC"),
        ("Say hello (cut)", 5, "ended inside"),
    ] {
        let got = converse_stream(&probity, prompt).await;
        assert_eq!(got.status, 200);
        let got = frames(&got.body);
        assert_eq!(got.len(), sound_frames + 1, "{prompt}");
        assert_eq!(got[..sound_frames], stream("12")[..sound_frames]);
        let (headers, payload) = read(got.last().unwrap()).unwrap();
        let header = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(header(":message-type"), Some("exception"));
        assert_eq!(header(":exception-type"), Some("modelStreamErrorException"));
        let error: serde_json::Value = serde_json::from_slice(&payload).unwrap();
        assert_eq!(error["type"], "provider_invalid_response");
        assert_eq!(error["code"], "event_stream_invalid");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(fault), "{message}");
    }
}

/// boto3's `converse_stream`: the text and the metadata as sent, a
/// malformed count as absent, and a broken stream raised as boto3's
/// `EventStreamError` with probity's message.
#[tokio::test]
async fn boto3_converse_stream_through_probity() {
    if !can_run(
        "boto3_converse_stream_through_probity",
        &missing_python(&["boto3"]),
        "python3 -m pip install boto3",
    ) {
        return;
    }
    let upstream = bedrock_upstream().await;
    let probity = probity(&upstream);
    let seen = client_script("bedrock_stream.py", &[], probity.url("/bedrock")).await;
    let usage = |input: serde_json::Value| serde_json::json!({"inputTokens": input, "outputTokens": 9, "totalTokens": 21});
    assert_eq!(
        seen[0],
        serde_json::json!({"text": "Hello! How can I help?", "stop": "end_turn", "usage": usage(12.into()), "latency": 412})
    );
    assert_eq!(
        seen[1],
        serde_json::json!({"text": "Hello! How can I help?", "stop": "end_turn", "usage": usage(serde_json::Value::Null), "latency": 412})
    );
    assert_eq!(seen[2]["text"], "Hello!");
    assert_eq!(seen[2]["code"], "modelStreamErrorException");
    let message = seen[2]["message"].as_str().unwrap();
    assert!(
        message.contains("provider_invalid_response") || message.contains("event_stream_invalid"),
        "{message}"
    );
}

/// The AWS SDK for JavaScript v3 (`@aws-sdk/client-bedrock-runtime`, pinned
/// in tests/sdks/node) through probity: `ConverseCommand` and
/// `ConverseStreamCommand` read sound answers as sent, a malformed count
/// as absent, and a broken answer (a whole one's payload fault, a stream's
/// bad CRC) as the SDK's own exception carrying probity's message.
#[tokio::test]
async fn the_js_sdk_converses_through_probity() {
    let dir = format!("{}/tests/sdks/node", env!("CARGO_MANIFEST_DIR"));
    let installed = std::path::Path::new(&format!(
        "{dir}/node_modules/@aws-sdk/client-bedrock-runtime"
    ))
    .exists();
    let missing: &[&str] = if installed {
        &[]
    } else {
        &["@aws-sdk/client-bedrock-runtime"]
    };
    if !can_run(
        "the_js_sdk_converses_through_probity",
        missing,
        "npm ci --prefix tests/sdks/node",
    ) {
        return;
    }
    let upstream = bedrock_upstream().await;
    let probity = probity(&upstream);
    let base = probity.url("");
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("node")
            .arg(format!("{dir}/bedrock_app.mjs"))
            .env("PROBE_URL", base.trim_end_matches('/'))
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rows: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seen = |i: usize| rows[i]["seen"].clone();
    let sound = serde_json::json!({"text": "Hello! How can I help?", "stop": "end_turn", "input": 12, "output": 9, "latency": 412});
    assert_eq!(seen(0), sound, "{rows:?}");
    let mut malformed = sound.clone();
    malformed["input"] = serde_json::Value::Null;
    assert_eq!(seen(1), malformed, "{rows:?}");
    // An error code the SDK has no class for: its service's base exception,
    // `name` the code, `message` probity's.
    assert_eq!(
        rows[2]["raised"], "BedrockRuntimeServiceException",
        "{:?}",
        rows[2]
    );
    let text = rows[2]["text"].as_str().unwrap();
    assert!(text.contains("payload_missing"), "{text}");
    assert_eq!(seen(3), sound, "{rows:?}");
    assert_eq!(seen(4), malformed, "{rows:?}");
    assert_eq!(seen(5)["text"], "Hello!", "{rows:?}");
    assert_eq!(seen(5)["raised"], "ModelStreamErrorException", "{rows:?}");
    let message = seen(5)["message"].as_str().unwrap().to_string();
    assert!(message.contains("event_stream_invalid"), "{message}");
}

/// LangChain's `ChatBedrockConverse` (langchain-aws) through probity:
/// `invoke` and `stream` read a sound answer as sent. A malformed count,
/// which probity nulls (boto3 then leaves the member out), LangChain reads
/// as it reads any missing member: it reports 0 input tokens (its own
/// default, not probity's coercion). Pinned here, so a change shows.
#[tokio::test]
async fn langchain_chat_bedrock_converse_through_probity() {
    if !can_run(
        "langchain_chat_bedrock_converse_through_probity",
        &missing_python(&["langchain_aws"]),
        "python3 -m pip install langchain-aws",
    ) {
        return;
    }
    let upstream = bedrock_upstream().await;
    let probity = probity(&upstream);
    let seen = client_script("langchain_bedrock.py", &[], probity.url("/bedrock")).await;
    let usage = serde_json::json!({"input_tokens": 12, "output_tokens": 9, "total_tokens": 21});
    assert_eq!(seen[0]["text"], "Hello! How can I help?", "{seen:?}");
    assert_eq!(
        seen[0]["usage"]["input_tokens"], usage["input_tokens"],
        "{seen:?}"
    );
    assert_eq!(seen[1]["text"], "Hello! How can I help?", "{seen:?}");
    assert_eq!(
        seen[1]["usage"]["total_tokens"], usage["total_tokens"],
        "{seen:?}"
    );
    for call in &seen[2..4] {
        assert_eq!(call["text"], "Hello! How can I help?", "{call}");
        assert_eq!(call["usage"]["input_tokens"], 0, "{call}");
        assert_eq!(call["usage"]["output_tokens"], 9, "{call}");
    }
}
