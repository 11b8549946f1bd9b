//! Bedrock's `InvokeModel` over real sockets, what the fixtures cannot say:
//! an Anthropic Messages body (a cross-region profile's id), an
//! application inference profile the route's `model_families` maps, and
//! boto3's `invoke_model`. Titan's and Cohere's embeddings, their header
//! figures and the unknown families are the conformance fixtures'
//! (`tests/fixtures/bedrock/invoke_*`, `tests/it/conformance.rs`).

use crate::support::*;

const CLAUDE: &str = "/model/us.anthropic.claude-3-5-haiku-20241022-v1%3A0/invoke";
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
async fn an_anthropic_body_is_judged_and_a_mapped_profile_too() {
    let upstream = upstream().await;
    let probity = start(&upstream);
    let cases: [(&str, &str, &str, u16, &str); 3] = [
        (
            CLAUDE,
            r#"{"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}]}"#,
            MESSAGE,
            200,
            "",
        ),
        (
            CLAUDE,
            r#"{"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}]}"#,
            &MESSAGE.replace(r#""role":"assistant""#, r#""role":"user""#),
            502,
            "role_invalid",
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

/// boto3's `invoke_model` for Titan and Cohere embeddings through a route
/// that holds a Bedrock API key: answered unchanged, a short vector raised
/// as boto3's `ClientError` with probity's code and message.
///
/// (A probity client token cannot ride in boto3's Bedrock API key here:
/// botocore refuses Bearer authorization to a plain-HTTP endpoint,
/// `InvalidEndpointConfigurationError`; see the README.)
#[tokio::test]
async fn boto3_invoke_model_embeddings() {
    if !can_run(
        "boto3_invoke_model_embeddings",
        &missing_python(&["boto3"]),
        "python3 -m pip install boto3",
    ) {
        return;
    }
    let upstream = Upstream::start(|request| {
        let text = String::from_utf8_lossy(&request.body);
        let body = if request.target.contains("cohere") {
            r#"{"embeddings":[[0.1,0.2],[0.3,0.4]],"id":"e1","response_type":"embeddings_floats","texts":["a","b"]}"#
        } else if text.contains("short") {
            r#"{"embedding":[0.1,0.2],"inputTextTokenCount":2}"#
        } else {
            r#"{"embedding":[0.1,-0.2,0.3],"inputTextTokenCount":2}"#
        };
        Reply::json(200, body.to_string()).header("x-amzn-bedrock-invocation-latency", "212")
    })
    .await;
    let probity = Probity::start_with_env(
        &config(
            "",
            &route(
                "bedrock",
                "/bedrock",
                &upstream.url(),
                "bedrock",
                "api_key_env = \"PROBITY_TEST_BEDROCK_KEY\"",
            ),
        ),
        &[("PROBITY_TEST_BEDROCK_KEY", "bedrock-api-key-0123")],
    );
    let seen = client_script("bedrock_invoke.py", &[], probity.url("/bedrock")).await;
    assert_eq!(
        seen[0]["body"]["embedding"],
        serde_json::json!([0.1, -0.2, 0.3]),
        "{seen:?}"
    );
    assert_eq!(seen[0]["latency"], "212");
    assert_eq!(seen[1]["code"], "provider_invalid_response", "{seen:?}");
    assert_eq!(seen[1]["status"], 502);
    assert!(seen[1]["message"]
        .as_str()
        .unwrap()
        .contains("embedding_dimension_mismatch"));
    assert_eq!(
        seen[2]["body"]["embeddings"][1],
        serde_json::json!([0.3, 0.4]),
        "{seen:?}"
    );
    for request in upstream.requests() {
        assert_eq!(
            request.header("authorization"),
            Some("Bearer bedrock-api-key-0123")
        );
        assert_eq!(request.header("x-amz-date"), None);
    }
}
