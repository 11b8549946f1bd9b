//! Compressed answers (issue 25, part 3): what the upstream is asked for,
//! what is judged (the decoded bytes), and what the client gets (the
//! provider's own compressed bytes when nothing was rewritten and it
//! accepts their coding, else the decoded body).

use std::io::Write;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;

use crate::support::*;

const FIXTURE: &str = include_str!("../fixtures/openai_embeddings.json");
/// The same answer in brotli (quality 5, Python's `brotli`): probity only
/// decodes br, so the fixture is made once.
const FIXTURE_BR: &[u8] = include_bytes!("../fixtures/openai_embeddings.json.br");
const REQUEST: &str = r#"{"model": "text-embedding-3-small", "input": ["a", "b"]}"#;

fn gzip(body: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(body).unwrap();
    encoder.finish().unwrap()
}

fn zstd(body: &[u8]) -> Vec<u8> {
    zstd::stream::encode_all(body, 3).unwrap()
}

/// An upstream answering `body`, already compressed as `coding`.
async fn compressing(body: Vec<u8>, coding: &'static str) -> Upstream {
    Upstream::start(move |_| {
        Reply::json(200, body.clone())
            .header("content-encoding", coding)
            .header("vary", "Accept-Encoding")
            .header("etag", "\"v1\"")
    })
    .await
}

async fn embed(probity: &Probity, accept: Option<&str>) -> Got {
    let mut request = Request::post(probity.url("/openai/v1/embeddings"))
        .header("content-type", "application/json");
    if let Some(accept) = accept {
        request = request.header("accept-encoding", accept);
    }
    send(
        request
            .body(Full::new(Bytes::from_static(REQUEST.as_bytes())))
            .unwrap(),
    )
    .await
}

fn openai(upstream: &Upstream, extra: &str) -> Probity {
    Probity::start(&config(
        "",
        &route("openai", "/openai", &upstream.url(), "openai", extra),
    ))
}

#[tokio::test]
async fn a_sound_gzip_answer_reaches_a_client_that_accepts_gzip_as_the_provider_sent_it() {
    let packed = gzip(FIXTURE.as_bytes());
    let upstream = compressing(packed.clone(), "gzip").await;
    let probity = openai(&upstream, "");
    let got = embed(&probity, Some("gzip, deflate, br")).await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(
        got.body, packed,
        "the provider's compressed bytes, unchanged"
    );
    assert_eq!(got.header("content-encoding"), Some("gzip"));
    assert_eq!(
        got.header("content-length"),
        Some(&*packed.len().to_string())
    );
    assert_eq!(
        got.header("etag"),
        Some("\"v1\""),
        "the upstream's own validator"
    );
    // Asked for what the client accepts of what probity decodes.
    assert_eq!(
        upstream.only_request().header("accept-encoding"),
        Some("gzip, br")
    );
    // Judged decoded: its tokens are counted.
    let tokens = r#"probity_tokens_total{route="openai",kind="total"}"#;
    assert_eq!(probity.metric(tokens).await, Some(8.0));
}

#[tokio::test]
async fn a_rewritten_answer_goes_out_decoded() {
    let malformed = FIXTURE.replace(r#""prompt_tokens": 8"#, r#""prompt_tokens": "8 tokens""#);
    let upstream = compressing(gzip(malformed.as_bytes()), "gzip").await;
    let probity = openai(&upstream, "");
    let got = embed(&probity, Some("gzip")).await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(got.header("content-encoding"), None);
    assert_eq!(
        got.header("probity-normalized"),
        Some("/usage/prompt_tokens")
    );
    let expected = malformed.replace(r#""8 tokens""#, "null");
    assert_eq!(got.text(), expected);
    assert_eq!(
        got.header("content-length"),
        Some(&*expected.len().to_string())
    );
    // The capture holds the decoded answer, its head saying so.
    let id = got.header("x-request-id").unwrap();
    let capture = probity.admin_get(&format!("/captures/{id}")).await;
    assert_eq!(capture.text(), malformed);
    assert_eq!(capture.header("probity-upstream-content-encoding"), None);
}

#[tokio::test]
async fn with_upstream_compression_a_client_that_accepts_none_gets_the_decoded_answer() {
    let upstream = compressing(zstd(FIXTURE.as_bytes()), "zstd").await;
    let probity = openai(&upstream, "upstream_compression = true\n");
    let got = embed(&probity, None).await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(got.text(), FIXTURE);
    assert_eq!(got.header("content-encoding"), None);
    assert_eq!(
        got.header("content-length"),
        Some(&*FIXTURE.len().to_string())
    );
    // Decoded bytes are only weakly the compressed ones (RFC 9110 §8.8.1).
    assert_eq!(got.header("etag"), Some("W/\"v1\""));
    let asked = upstream.only_request();
    assert_eq!(asked.header("accept-encoding"), Some("gzip, br, zstd"));
}

#[tokio::test]
async fn a_compressed_answer_is_judged_on_its_decoded_payload() {
    // One vector for two inputs, in zstd: rejected as any short answer.
    let short = FIXTURE.replacen(r#""index": 1"#, r#""index": 0"#, 1);
    let upstream = compressing(zstd(short.as_bytes()), "zstd").await;
    let probity = openai(&upstream, "");
    let got = embed(&probity, Some("zstd")).await;
    let error = got.error(502, "provider_invalid_response");
    assert_eq!(error["code"], "embedding_index_invalid", "{}", got.text());
}

#[tokio::test]
async fn an_answer_that_does_not_decode_is_an_invalid_response() {
    let mut packed = gzip(FIXTURE.as_bytes());
    let middle = packed.len() / 2;
    packed[middle] ^= 0xff;
    packed.truncate(packed.len() - 4);
    let upstream = compressing(packed, "gzip").await;
    let probity = openai(&upstream, "");
    let got = embed(&probity, Some("gzip")).await;
    let error = got.error(502, "provider_invalid_response");
    assert_eq!(error["code"], "invalid_encoding", "{}", got.text());
    let counted =
        r#"probity_provider_invalid_response_total{route="openai",invariant="invalid_encoding"}"#;
    assert_eq!(probity.metric(counted).await, Some(1.0));
}

#[tokio::test]
async fn a_decompression_bomb_is_bounded_by_max_response_bytes_decoded() {
    // 8 MiB of spaces after the answer: valid JSON, a few KiB compressed.
    let bomb = format!("{FIXTURE}{}", " ".repeat(8 << 20));
    let packed = zstd(bomb.as_bytes());
    assert!(packed.len() < 64 * 1024, "{}", packed.len());
    let upstream = compressing(packed, "zstd").await;
    let probity = openai(&upstream, "max_response_bytes = 1048576\n");
    let got = embed(&probity, Some("zstd")).await;
    let error = got.error(502, "upstream_response_too_large");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("max_response_bytes"),
        "{}",
        got.text()
    );
}

#[tokio::test]
async fn a_stream_is_asked_for_uncompressed_and_a_passthrough_keeps_the_clients_header() {
    let upstream = Upstream::start(|_| Reply::json(200, r#"{"object": "list", "data": []}"#)).await;
    let probity = openai(&upstream, "");
    let stream = r#"{"model": "m", "messages": [], "stream": true}"#;
    let request = Request::post(probity.url("/openai/v1/chat/completions"))
        .header("accept-encoding", "gzip")
        .body(Full::new(Bytes::from_static(stream.as_bytes())))
        .unwrap();
    send(request).await;
    let models = Request::get(probity.url("/openai/v1/models"))
        .header("accept-encoding", "gzip;q=1.0, deflate")
        .body(Full::default())
        .unwrap();
    send(models).await;
    let seen = upstream.requests();
    // A stream's events are judged as they pass: asked for plain bytes.
    assert_eq!(seen[0].header("accept-encoding"), Some("identity"));
    // Unjudged bytes pass as they came, asked as the client asked.
    assert_eq!(
        seen[1].header("accept-encoding"),
        Some("gzip;q=1.0, deflate")
    );
}

#[tokio::test]
async fn an_error_answer_in_gzip_passes_as_it_came_or_decoded() {
    let error = br#"{"error": {"message": "Invalid API key", "type": "invalid_request_error", "code": "invalid_api_key"}}"#;
    let packed = gzip(error);
    let body = packed.clone();
    let upstream =
        Upstream::start(move |_| Reply::json(401, body.clone()).header("content-encoding", "gzip"))
            .await;
    let probity = openai(&upstream, "upstream_compression = true\n");
    let accepting = embed(&probity, Some("gzip")).await;
    assert_eq!(accepting.status, 401);
    assert_eq!(accepting.body, packed);
    assert_eq!(accepting.header("content-encoding"), Some("gzip"));
    let plain = embed(&probity, None).await;
    assert_eq!(plain.status, 401);
    assert_eq!(plain.body, &error[..]);
    assert_eq!(plain.header("content-encoding"), None);
}

#[tokio::test]
async fn a_brotli_answer_goes_as_it_came_or_decoded_by_what_the_client_accepts() {
    let upstream = compressing(FIXTURE_BR.to_vec(), "br").await;
    let probity = openai(&upstream, "upstream_compression = true\n");
    let accepting = embed(&probity, Some("br")).await;
    assert_eq!(accepting.status, 200, "{}", accepting.text());
    assert_eq!(accepting.body, FIXTURE_BR);
    assert_eq!(accepting.header("content-encoding"), Some("br"));
    let other = embed(&probity, Some("gzip")).await;
    assert_eq!(other.status, 200, "{}", other.text());
    assert_eq!(other.text(), FIXTURE);
    assert_eq!(other.header("content-encoding"), None);
}
