//! Bedrock's `converse-stream` over real sockets: AWS's binary event-stream
//! frames relayed as they arrive, judged frame by frame; a `metadata` frame
//! with a malformed figure rewritten alone (its CRCs anew); a frame that
//! cannot be read (either CRC, a cut frame) ending the stream with
//! probity's own exception frame. What the SDKs make of these streams is
//! the SDK matrix's (`sdks.rs`, rows `converse-stream.*`).

use crate::support::eventstream::{event, frames, read, CONVERSE_STREAM};
use crate::support::*;

const PATH: &str = "/bedrock/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream";
const REQUEST: &str = r#"{"messages": [{"role": "user", "content": [{"text": "Say hello"}]}]}"#;

/// A sound Converse stream, its metadata's `inputTokens` as given.
fn stream(input_tokens: &str) -> Vec<Vec<u8>> {
    let input = format!(r#""inputTokens":{input_tokens}"#);
    CONVERSE_STREAM
        .iter()
        .map(|(kind, payload)| event(kind, &payload.replace(r#""inputTokens":12"#, &input)))
        .collect()
}

async fn bedrock_upstream() -> Upstream {
    Upstream::start(|request| {
        let text = String::from_utf8_lossy(&request.body);
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
