//! Bedrock's `InvokeModel` over real sockets: the model family is read from
//! the percent-decoded model id of the path (a cross-region profile, an
//! inference-profile ARN), and the model's own body judged: Titan Text
//! Embeddings v2, Cohere Embed, an Anthropic Messages body. An id of no
//! known family passes uninspected, counted with its reason, unless the
//! route's `model_families` maps it.

use crate::support::*;

const TITAN: &str = "/model/amazon.titan-embed-text-v2%3A0/invoke";
const COHERE: &str = "/model/cohere.embed-english-v3/invoke";
const CLAUDE: &str = "/model/us.anthropic.claude-3-5-haiku-20241022-v1%3A0/invoke";
const PROFILE: &str = "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/a1b2c3";
const PROFILE_PATH: &str =
    "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Aapplication-inference-profile%2Fa1b2c3/invoke";
const LLAMA: &str = "/model/meta.llama3-8b-instruct-v1%3A0/invoke";

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
async fn each_family_is_judged_by_its_own_body() {
    let upstream = upstream().await;
    let probity = start(&upstream);
    let titan = r#"{"inputText": "hello", "dimensions": 3}"#;
    let cases: [(&str, &str, &str, u16, &str); 11] = [
        (
            TITAN,
            titan,
            r#"{"embedding":[0.1,-0.2,0.3],"inputTextTokenCount":2}"#,
            200,
            "",
        ),
        (
            TITAN,
            titan,
            r#"{"embedding":[0.1,-0.2],"inputTextTokenCount":2}"#,
            502,
            "embedding_dimension_mismatch",
        ),
        (
            TITAN,
            titan,
            r#"{"embedding":[0.1,"x",0.3],"inputTextTokenCount":2}"#,
            502,
            "embedding_value_invalid",
        ),
        (
            TITAN,
            titan,
            r#"{"inputTextTokenCount":2}"#,
            502,
            "payload_missing",
        ),
        (
            TITAN,
            r#"{"inputText": "hello", "dimensions": 2, "embeddingTypes": ["float", "binary"]}"#,
            r#"{"embedding":[0.1,0.2],"embeddingsByType":{"float":[0.1,0.2]},"inputTextTokenCount":2}"#,
            502,
            "payload_missing",
        ),
        (
            TITAN,
            r#"{"inputText": "hello", "dimensions": 2, "embeddingTypes": ["binary"]}"#,
            r#"{"embeddingsByType":{"binary":[1,0]},"inputTextTokenCount":2}"#,
            200,
            "",
        ),
        (
            COHERE,
            r#"{"texts": ["a", "b"], "input_type": "search_document"}"#,
            r#"{"embeddings":[[0.1,0.2],[0.3,0.4]],"id":"e1","response_type":"embeddings_floats","texts":["a","b"]}"#,
            200,
            "",
        ),
        (
            COHERE,
            r#"{"texts": ["a", "b"], "input_type": "search_document"}"#,
            r#"{"embeddings":[[0.1,0.2]],"id":"e1","response_type":"embeddings_floats","texts":["a","b"]}"#,
            502,
            "embedding_count_mismatch",
        ),
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

#[tokio::test]
async fn a_malformed_header_figure_is_removed_and_counted() {
    let upstream = upstream().await;
    let probity = start(&upstream);
    let answer = r#"{"embedding":[0.1,-0.2,0.3],"inputTextTokenCount":2}"#;
    let got = invoke(&probity, TITAN, r#"{"inputText": "hi"}"#, answer, "-4").await;
    assert_eq!(got.status, 200);
    assert_eq!(&got.body[..], answer.as_bytes());
    assert!(got
        .headers
        .get("x-amzn-bedrock-invocation-latency")
        .is_none());
    assert_eq!(
        got.headers.get("x-amzn-bedrock-input-token-count").unwrap(),
        "5"
    );
    let metric = probity
        .metric(r#"probity_malformed_figures_total{route="bedrock",figure="header:x-amzn-bedrock-invocation-latency"}"#)
        .await;
    assert_eq!(metric, Some(1.0));
}

#[tokio::test]
async fn an_unknown_family_passes_uninspected_and_is_counted() {
    let upstream = upstream().await;
    let probity = start(&upstream);
    let broken = r#"{"generation": 5}"#;
    for path in [
        LLAMA,
        "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Aapplication-inference-profile%2Fzz/invoke",
    ] {
        let got = invoke(&probity, path, r#"{"prompt": "hi"}"#, broken, "212").await;
        assert_eq!(got.status, 200, "{path}");
        assert_eq!(&got.body[..], broken.as_bytes());
    }
    let counted = probity
        .metric(r#"probity_uninspected_total{route="bedrock",reason="model_family_unknown"}"#)
        .await;
    assert_eq!(counted, Some(2.0));
}
