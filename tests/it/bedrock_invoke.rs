//! Bedrock's `InvokeModel` over real sockets, what the fixtures cannot say:
//! an application inference profile the route's `model_families` maps to
//! a family, judged as that family. Titan's and Cohere's embeddings, their
//! header figures and the unknown families are the conformance fixtures'
//! (`tests/fixtures/bedrock/invoke_*`, `tests/it/conformance.rs`), Anthropic
//! bodies the generation fixtures' (`gen_invoke_messages_*`), boto3's
//! `invoke_model` the SDK matrix's.

use crate::support::*;

const PROFILE: &str = "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/a1b2c3";
const PROFILE_PATH: &str =
    "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Aapplication-inference-profile%2Fa1b2c3/invoke";

const MESSAGE: &str = r#"{"id":"msg_bdrk_01","type":"message","role":"assistant","model":"claude-3-5-haiku-20241022","content":[{"type":"text","text":"Hello!"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":4}}"#;

/// The upstream answers each request with the body its `x-answer` header
/// names, and Bedrock's header figures (a malformed one when asked).
async fn upstream() -> Upstream {
    Upstream::start(|request| {
        let body = request.header("x-answer").unwrap_or("{}").to_string();
        let latency = request.header("x-latency").unwrap_or("212").to_string();
        Reply::json(200, body)
            .header("x-amzn-bedrock-input-token-count", "5")
            .header("x-amzn-bedrock-invocation-latency", &latency)
    })
    .await
}

fn start(upstream: &Upstream) -> Probity {
    Probity::start(&config(
        "",
        &route(
            "bedrock",
            "/bedrock",
            &upstream.url(),
            "bedrock",
            &format!("[routes.model_families]\n\"{PROFILE}\" = \"anthropic\"\n"),
        ),
    ))
}

async fn invoke(probity: &Probity, path: &str, request: &str, answer: &str, latency: &str) -> Got {
    send(
        http::Request::post(probity.url(&format!("/bedrock{path}")))
            .header("content-type", "application/json")
            .header("x-answer", answer)
            .header("x-latency", latency)
            .body(http_body_util::Full::new(bytes::Bytes::from(
                request.to_string(),
            )))
            .unwrap(),
    )
    .await
}

fn code(got: &Got) -> String {
    let json: serde_json::Value = serde_json::from_slice(&got.body).unwrap_or_default();
    json["code"].as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn a_mapped_application_profile_is_judged_as_its_family() {
    let upstream = upstream().await;
    let probity = start(&upstream);
    let cases: [(&str, &str, &str, u16, &str); 2] = [
        (
            PROFILE_PATH,
            r#"{"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}]}"#,
            MESSAGE,
            200,
            "",
        ),
        (
            PROFILE_PATH,
            r#"{"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}]}"#,
            &MESSAGE.replace(r#""role":"assistant""#, r#""role":"user""#),
            502,
            "role_invalid",
        ),
    ];
    for (path, request, answer, status, invariant) in cases {
        let got = invoke(&probity, path, request, answer, "212").await;
        assert_eq!(
            got.status.as_u16(),
            status,
            "{path} {answer}: {:?}",
            got.body
        );
        if status == 200 {
            assert_eq!(&got.body[..], answer.as_bytes(), "{path}: unchanged");
        } else {
            assert_eq!(code(&got), invariant, "{path} {answer}");
            assert_eq!(
                got.headers.get("x-amzn-errortype").unwrap(),
                "provider_invalid_response"
            );
        }
    }
}
