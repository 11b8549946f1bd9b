//! Regression tests for the defects a differential fuzzer found, one test (or
//! a small group) per numbered defect, plus the decided behaviours and the
//! figure grammar. Each runs the real binary over real sockets against fake
//! upstreams and asserts the *intended* behaviour, so a test here that fails
//! names a defect still open.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

// ---------------------------------------------------------------- helpers

/// What a body with the figure `"key":value` becomes: itself when the value
/// is sound, else the value nulled and the pointer listed.
fn judged(
    body: &str,
    key: &str,
    value: &str,
    sound: bool,
    pointer: &str,
) -> (String, Option<String>) {
    if sound {
        return (body.to_string(), None);
    }
    let nulled = body.replacen(
        &format!(r#""{key}":{value}"#),
        &format!(r#""{key}":null"#),
        1,
    );
    (nulled, Some(pointer.to_string()))
}

const CHAT: &str = "/openai/v1/chat/completions";
const EMBEDDINGS: &str = "/openai/v1/embeddings";
const CHAT_REQUEST: &str = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
const CHAT_STREAM_REQUEST: &str = r#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}"#;
const CONTENT_CHUNK: &str = r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]}"#;
const BAD_USAGE_CHUNK: &str = r#"{"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":"x","completion_tokens":1,"total_tokens":2}}"#;

/// A probity with one route `name` at `/name` of the given dialect.
fn probity(name: &str, dialect: &str, upstream: &str, extra: &str) -> Probity {
    Probity::start(&config(
        "",
        &route(name, &format!("/{name}"), upstream, dialect, extra),
    ))
}

/// A probity whose `openai` route (dialect `openai`) goes to `upstream`.
fn openai(upstream: &Upstream) -> Probity {
    probity("openai", "openai", &upstream.url(), "")
}

/// An upstream answering every request with the body currently in `next`.
async fn switchable(next: Arc<Mutex<Vec<u8>>>) -> Upstream {
    Upstream::start(move |_| Reply::json(200, next.lock().unwrap().clone())).await
}

/// A reply with exactly these headers (none added but `content-length`).
fn whole(headers: &[(&str, &str)], body: impl Into<Vec<u8>>) -> Reply {
    Reply {
        status: 200,
        headers: headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
        body: ReplyBody::Whole(body.into()),
    }
}

/// A chunked reply (no `content-length`) with exactly these headers.
fn chunked(headers: &[(&str, &str)], body: impl Into<Vec<u8>>) -> Reply {
    Reply {
        status: 200,
        headers: headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
        body: ReplyBody::Parts(vec![part(Before::Now, body)]),
    }
}

fn sse(body: impl Into<Vec<u8>>) -> Reply {
    chunked(&[("content-type", "text/event-stream")], body)
}

/// A response read to its end; a body error (a cut stream) is kept, not fatal.
struct Read {
    got: Got,
    body_error: Option<String>,
}

/// POSTs `body` with extra headers, reading whatever body arrives.
async fn post_with(url: &str, body: impl Into<Bytes>, headers: &[(&str, &str)]) -> Read {
    let mut request = Request::post(url).header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Full::new(body.into())).unwrap();
    within("response", async {
        let response = client().request(request).await.unwrap_or_else(|err| {
            panic!("no response: the connection closed (a panic in probity?): {err:?}")
        });
        let (parts, mut body) = response.into_parts();
        let mut bytes = Vec::new();
        let mut body_error = None;
        loop {
            match body.frame().await {
                None => break,
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        bytes.extend_from_slice(&data);
                    }
                }
                Some(Err(err)) => {
                    body_error = Some(err.to_string());
                    break;
                }
            }
        }
        Read {
            got: Got {
                status: parts.status,
                headers: parts.headers,
                body: Bytes::from(bytes),
            },
            body_error,
        }
    })
    .await
}

/// A header's value, lossily (values are not always ASCII).
fn header(got: &Got, name: &str) -> Option<String> {
    got.headers
        .get(name)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

/// `text` with the last occurrence of `from` replaced by `to`.
fn replace_last(text: &str, from: &str, to: &str) -> String {
    let at = text
        .rfind(from)
        .unwrap_or_else(|| panic!("{from} not in {text}"));
    format!("{}{to}{}", &text[..at], &text[at + from.len()..])
}

async fn metrics(probity: &Probity) -> String {
    get(&probity.admin_url("/metrics")).await.text()
}

/// A sample's value, polled briefly: some counters move as the body ends.
async fn metric_settled(probity: &Probity, sample: &str, want: f64) -> Option<f64> {
    let mut value = None;
    for _ in 0..40 {
        value = probity.metric(sample).await;
        if value == Some(want) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    value
}

/// The samples of a metric for a route.
fn samples_for(text: &str, name: &str, route: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| l.contains(&format!("route=\"{route}\"")))
        .map(str::to_string)
        .collect()
}

/// The capture listing's entry for a request id.
async fn capture_entry(probity: &Probity, request_id: &str) -> Value {
    let listing = probity.admin_get("/captures").await.json();
    listing["captures"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["request_id"] == request_id)
        .cloned()
        .unwrap_or_else(|| panic!("no capture for {request_id} in {listing}"))
}

/// The `error` object of the last SSE `data: {"error": ...}` event in `body`.
fn last_error_event(body: &str) -> Value {
    let at = body
        .rfind("data: {\"error\"")
        .unwrap_or_else(|| panic!("no error event at the end of {body:?}"));
    let line = &body[at + "data: ".len()..];
    let end = line.find(['\r', '\n']).unwrap_or(line.len());
    let event: Value = serde_json::from_str(&line[..end])
        .unwrap_or_else(|e| panic!("error event is not JSON ({e}): {body:?}"));
    event["error"].clone()
}

/// What is wrong with `got` as a 502 `provider_invalid_response` with
/// this `code`, if anything.
fn not_rejected(got: &Got, code: &str) -> Option<String> {
    let json: Value = serde_json::from_slice(&got.body).unwrap_or_default();
    let error = &probity_error(&json).unwrap_or_default();
    let ok = got.status == 502
        && header(got, "content-type").as_deref() == Some("application/json")
        && error["type"] == "provider_invalid_response"
        && error["code"] == code
        && ["message", "request_id"]
            .iter()
            .all(|m| error[m].is_string());
    let text = got.text();
    (!ok).then(|| {
        format!(
            "want 502 {code}, got {} {}",
            got.status,
            &text[..text.len().min(300)]
        )
    })
}

/// Asserts a 502 `provider_invalid_response` with this `code`.
fn assert_rejected(got: &Got, code: &str, case: &str) {
    if let Some(failure) = not_rejected(got, code) {
        panic!("{case}: {failure}");
    }
}

/// What is wrong with `got` as a 200 carrying `upstream` byte for byte,
/// unannotated, if anything.
fn not_untouched(got: &Got, upstream: &[u8]) -> Option<String> {
    let normalized = header(got, "probity-normalized");
    let ok = got.status == 200 && got.body == upstream && normalized.is_none();
    let text = got.text();
    (!ok).then(|| {
        format!(
            "want 200 with the upstream bytes, got {} (probity-normalized {normalized:?}) {}",
            got.status,
            &text[..text.len().min(300)]
        )
    })
}

/// A bare upstream that writes `response` (head and body) on every
/// connection, then drains the request until probity closes its side.
async fn raw_reply(response: Vec<u8>) -> SocketAddr {
    let response = Arc::new(response);
    let (addr, _) = raw_upstream(move |mut stream: TcpStream| {
        let response = response.clone();
        async move {
            let _ = stream.write_all(&response).await;
            let _ = stream.shutdown().await;
            let mut sink = [0u8; 4096];
            let drain = async { while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {} };
            let _ = tokio::time::timeout(Duration::from_secs(5), drain).await;
        }
    })
    .await;
    addr
}

/// One HTTP/1.1 exchange over a bare socket, read until the server closes.
async fn raw_bytes(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    within("raw exchange", async {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(request).await.unwrap();
        let mut out = Vec::new();
        let _ = stream.read_to_end(&mut out).await;
        out
    })
    .await
}

/// The framed body of a raw HTTP/1.1 response: `content-length` bytes,
/// the chunked decoding, or everything up to the close.
fn framed_body(response: &[u8]) -> (String, Vec<u8>) {
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&response[..split]).to_ascii_lowercase();
    let rest = &response[split + 4..];
    let field = |name: &str| {
        head.lines().find_map(|l| {
            l.strip_prefix(&format!("{name}:"))
                .map(|v| v.trim().to_string())
        })
    };
    if let Some(length) = field("content-length") {
        let length: usize = length.parse().unwrap();
        return (head, rest[..length.min(rest.len())].to_vec());
    }
    if field("transfer-encoding").is_some_and(|t| t.contains("chunked")) {
        let mut body = Vec::new();
        let mut at = 0;
        while let Some(eol) = rest[at..].windows(2).position(|w| w == b"\r\n") {
            let size_line = String::from_utf8_lossy(&rest[at..at + eol]).into_owned();
            let size = usize::from_str_radix(size_line.split(';').next().unwrap().trim(), 16)
                .unwrap_or_else(|_| panic!("bad chunk size line {size_line:?}"));
            at += eol + 2;
            if size == 0 {
                break;
            }
            body.extend_from_slice(&rest[at..(at + size).min(rest.len())]);
            at += size + 2;
            if at > rest.len() {
                break;
            }
        }
        return (head, body);
    }
    (head, rest.to_vec())
}

fn raw_post(path: &str, body: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nhost: probity\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// An OpenAI embeddings answer with one `[0.1]` vector and this `usage`.
fn embedding_body(usage: &str) -> String {
    format!(
        r#"{{"object":"list","data":[{{"object":"embedding","index":0,"embedding":[0.1]}}],"model":"m","usage":{usage}}}"#
    )
}

/// A chat completion with this `usage`.
fn chat_body(usage: &str) -> String {
    format!(
        r#"{{"id":"c","object":"chat.completion","choices":[{{"index":0,"message":{{"role":"assistant","content":"hi"}},"finish_reason":"stop"}}],"usage":{usage}}}"#
    )
}

// ---------------------------------------------------------------- 1: duplicate keys, panics

const DUPLICATE: &str = r#"{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"x"}}],"usage":{"prompt_tokens":1,"prompt_tokens_details":{"audio_tokens":0,"cached_tokens":1,"cached_tokens":"x"}}}"#;

// Defect 1: a duplicated key in a wildcard record; the last copy wins and is nulled.
#[tokio::test]
async fn defect01_duplicate_key_in_a_wildcard_record_nulls_the_last_copy() {
    let upstream = Upstream::json(DUPLICATE.as_bytes()).await;
    let probity = openai(&upstream);
    let read = post_with(&probity.url(CHAT), CHAT_REQUEST, &[]).await;
    let got = read.got;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(got.text(), replace_last(DUPLICATE, "\"x\"", "null"));
    assert_eq!(
        header(&got, "probity-normalized").as_deref(),
        Some("/usage/prompt_tokens_details/cached_tokens")
    );
}

// Defect 1: a long duplicated value is nulled whole like a short one.
#[tokio::test]
async fn defect01_long_duplicate_value_is_nulled() {
    let long = format!("\"{}\"", "v".repeat(10_000));
    let body = DUPLICATE.replace(
        r#""cached_tokens":"x""#,
        &format!(r#""cached_tokens":{long}"#),
    );
    let upstream = Upstream::start({
        let body = body.clone();
        move |_| Reply::json(200, body.clone())
    })
    .await;
    let probity = openai(&upstream);
    let got = post_with(&probity.url(CHAT), CHAT_REQUEST, &[]).await.got;
    assert_eq!(
        got.status,
        200,
        "{}",
        &got.text()[..got.text().len().min(300)]
    );
    assert!(
        got.text() == body.replace(&long, "null"),
        "the 10,000-char duplicate is not exactly nulled: {}",
        &got.text()[..got.text().len().min(300)]
    );
    assert_eq!(
        header(&got, "probity-normalized").as_deref(),
        Some("/usage/prompt_tokens_details/cached_tokens")
    );
}

// Defect 1: the same duplicate keys inside one SSE chunk.
#[tokio::test]
async fn defect01_duplicate_key_in_a_stream_event_is_rewritten() {
    let chunk = r#"{"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":1,"prompt_tokens_details":{"audio_tokens":0,"cached_tokens":1,"cached_tokens":"x"}}}"#;
    let stream = format!("data: {chunk}\n\ndata: [DONE]\n\n");
    let upstream = Upstream::start(move |_| sse(stream.clone())).await;
    let probity = openai(&upstream);
    let read = post_with(&probity.url(CHAT), CHAT_STREAM_REQUEST, &[]).await;
    assert_eq!(read.got.status, 200);
    assert_eq!(read.body_error, None, "the stream was cut");
    let want = format!(
        ": probity-normalized /usage/prompt_tokens_details/cached_tokens\ndata: {}\n\ndata: [DONE]\n\n",
        replace_last(chunk, "\"x\"", "null")
    );
    assert_eq!(read.got.text(), want);
}

// Defect 1: a panic while handling a request is a 500 internal_error, and the process survives.
#[tokio::test]
async fn defect01_panic_in_the_exchange_is_an_internal_error() {
    let upstream = Upstream::json(
        br#"{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"x"}}]}"#,
    )
    .await;
    let probity = Probity::start_with_env(
        &config(
            "",
            &route("openai", "/openai", &upstream.url(), "openai", ""),
        ),
        &[("PROBITY_TEST_PANIC", "exchange")],
    );
    let got = post_with(
        &probity.url(CHAT),
        CHAT_REQUEST,
        &[("x-request-id", "panic-test")],
    )
    .await
    .got;
    let error = got.error(500, "internal_error");
    assert_eq!(error["code"], "internal_error");
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{error}"
    );
    assert_eq!(error["route"], "openai");
    assert_eq!(error["request_id"], "panic-test");
    assert_eq!(
        metric_settled(
            &probity,
            r#"probity_internal_errors_total{route="openai"}"#,
            1.0
        )
        .await,
        Some(1.0)
    );
    let text = metrics(&probity).await;
    for name in [
        "probity_provider_invalid_response_total",
        "probity_upstream_errors_total",
    ] {
        assert_eq!(samples_for(&text, name, "openai"), Vec::<String>::new());
    }
    let after = post_with(&probity.url(CHAT), CHAT_REQUEST, &[]).await.got;
    assert_eq!(
        after.status,
        200,
        "probity did not survive: {}",
        after.text()
    );
}

// Defect 1: a panic inside a checked stream ends it with an SSE error event.
#[tokio::test]
async fn defect01_panic_in_a_stream_ends_it_with_an_error_event() {
    let stream = format!(
        "data: {CONTENT_CHUNK}\n\ndata: {}\n\ndata: [DONE]\n\n",
        CONTENT_CHUNK.replace("\"hi\"", "\" there\"")
    );
    let upstream = Upstream::start(move |_| sse(stream.clone())).await;
    let probity = Probity::start_with_env(
        &config(
            "",
            &route("openai", "/openai", &upstream.url(), "openai", ""),
        ),
        &[("PROBITY_TEST_PANIC", "stream")],
    );
    let read = post_with(
        &probity.url(CHAT),
        CHAT_STREAM_REQUEST,
        &[("x-request-id", "panic-test")],
    )
    .await;
    assert_eq!(read.got.status, 200);
    let body = read.got.text();
    assert!(
        body.ends_with("}\n\n") && read.body_error.is_none(),
        "the stream does not end with an error event (cut: {:?}): {body:?}",
        read.body_error
    );
    let error = last_error_event(&body);
    assert_eq!(error["type"], "internal_error", "{body}");
    assert_eq!(error["code"], "internal_error", "{body}");
    assert_eq!(error["request_id"], "panic-test", "{body}");
    assert_eq!(
        metric_settled(
            &probity,
            r#"probity_internal_errors_total{route="openai"}"#,
            1.0
        )
        .await,
        Some(1.0)
    );
    let after = post_with(&probity.url(CHAT), CHAT_STREAM_REQUEST, &[]).await;
    assert_eq!(after.got.status, 200);
    assert!(
        after.got.text().ends_with("data: [DONE]\n\n"),
        "probity did not survive: {}",
        after.got.text()
    );
}

// ---------------------------------------------------------------- 2: overflowing floats

// Defect 2: a float literal that rounds to infinity is not a finite vector element.
#[tokio::test]
async fn defect02_overflowing_floats_in_vectors_are_rejected() {
    let next = Arc::new(Mutex::new(Vec::new()));
    let upstream = switchable(next.clone()).await;
    let probity = openai(&upstream);
    let body = |value: &str| {
        format!(
            r#"{{"object":"list","data":[{{"object":"embedding","index":0,"embedding":[0.5,{value}]}}],"usage":{{"prompt_tokens":1,"total_tokens":1}}}}"#
        )
    };
    let huge = format!("1{}e60", "0".repeat(250));
    let mut failures = Vec::new();
    for (value, finite) in [
        (huge.as_str(), false),
        ("1.7976931348623159e308", false),
        ("1.7976931348623157e308", true),
        ("1.7976931348623158e308", true),
        ("1e-400", true),
        ("0.00001e312", true),
    ] {
        let upstream_body = body(value);
        *next.lock().unwrap() = upstream_body.clone().into_bytes();
        let got = post_with(
            &probity.url(EMBEDDINGS),
            r#"{"model":"m","input":"a"}"#,
            &[],
        )
        .await
        .got;
        let failure = if finite {
            not_untouched(&got, upstream_body.as_bytes())
        } else {
            not_rejected(&got, "embedding_value_invalid")
        };
        if let Some(failure) = failure {
            failures.push(format!("{}: {failure}", &value[..value.len().min(40)]));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

// Defect 2: the same overflow in Ollama's `/api/embed`.
#[tokio::test]
async fn defect02_ollama_overflowing_float_is_rejected() {
    let body = format!(
        r#"{{"model":"m","embeddings":[[0.1,{}e20]]}}"#,
        "9".repeat(289)
    );
    let upstream = Upstream::start(move |_| Reply::json(200, body.clone())).await;
    let probity = probity("ollama", "ollama", &upstream.url(), "");
    let got = post_with(
        &probity.url("/ollama/api/embed"),
        r#"{"model":"m","input":"a"}"#,
        &[],
    )
    .await
    .got;
    assert_rejected(&got, "embedding_value_invalid", "ollama 9…9e20");
}

// ---------------------------------------------------------------- 3: CR-only SSE

// Defect 3: a CR-only final event is judged (figure nulled, announced, counted).
#[tokio::test]
async fn defect03_cr_only_sse_final_event_is_judged() {
    let usage = r#"{"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":"x","total_tokens":5}}"#;
    let stream = format!("data: {CONTENT_CHUNK}\r\rdata: {usage}\r\r");
    let upstream = Upstream::start(move |_| sse(stream.clone())).await;
    let probity = openai(&upstream);
    let read = post_with(&probity.url(CHAT), CHAT_STREAM_REQUEST, &[]).await;
    let body = read.got.text();
    assert!(body.contains(r#""prompt_tokens":null"#), "{body:?}");
    assert!(!body.contains(r#""x""#), "{body:?}");
    let want = format!(
        "data: {CONTENT_CHUNK}\r\r: probity-normalized /usage/prompt_tokens\rdata: {}\r\r",
        usage.replace(r#""x""#, "null")
    );
    assert_eq!(body, want);
    assert_eq!(
        metric_settled(
            &probity,
            r#"probity_malformed_figures_total{route="openai",figure="/usage/prompt_tokens"}"#,
            1.0
        )
        .await,
        Some(1.0)
    );
}

// Defect 3: an event after [DONE] in a CR-only stream breaks it.
#[tokio::test]
async fn defect03_cr_only_sse_event_after_done_breaks_the_stream() {
    let stream = format!(
        "data: {CONTENT_CHUNK}\r\rdata: [DONE]\r\rdata: {{\"choices\":[{{\"index\":7}}]}}\r\r"
    );
    let upstream = Upstream::start(move |_| sse(stream.clone())).await;
    let probity = openai(&upstream);
    let read = post_with(&probity.url(CHAT), CHAT_STREAM_REQUEST, &[]).await;
    let body = read.got.text();
    assert!(
        !body.contains(r#"{"choices":[{"index":7}]}"#),
        "the event after [DONE] was relayed: {body:?}"
    );
    let error = last_error_event(&body);
    assert_eq!(error["code"], "stream_after_done", "{body:?}");
    assert_eq!(
        metric_settled(
            &probity,
            r#"probity_provider_invalid_response_total{route="openai",invariant="stream_after_done"}"#,
            1.0
        )
        .await,
        Some(1.0)
    );
}

// ---------------------------------------------------------------- 4: the request decides

// Defect 4a: an embeddings answer labelled text/event-stream is still checked as a document.
#[tokio::test]
async fn defect04a_embeddings_answered_as_event_stream_are_checked() {
    let body = r#"{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,0.2]}],"usage":{"prompt_tokens":-1,"total_tokens":2}}"#;
    let upstream =
        Upstream::start(move |_| whole(&[("content-type", "text/event-stream")], body)).await;
    let probity = openai(&upstream);
    let got = post_with(
        &probity.url(EMBEDDINGS),
        r#"{"model":"m","input":["a","b"]}"#,
        &[],
    )
    .await
    .got;
    assert_rejected(
        &got,
        "embedding_count_mismatch",
        "openai as text/event-stream",
    );
}

// Defect 4b: every dialect's embed/rerank answer labelled NDJSON is still checked.
#[tokio::test]
async fn defect04b_other_dialects_answered_as_ndjson_are_checked() {
    let upstream = Upstream::start(|request| {
        let body = match request.target.as_str() {
            "/v2/embed" => r#"{"id":"e","embeddings":{"float":[[0.1,0.2]]},"texts":["a","b"],"meta":{"billed_units":{"input_tokens":2}},"response_type":"embeddings_by_type"}"#,
            "/v2/rerank" => r#"{"id":"r","results":[{"index":5,"relevance_score":0.5}],"meta":{"billed_units":{"search_units":1}}}"#,
            "/embed" => "[[0.1,0.2]]",
            _ => r#"{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,0.2]}],"model":"m","usage":{"prompt_tokens":2,"total_tokens":2}}"#,
        };
        whole(&[("content-type", "application/x-ndjson")], body)
    })
    .await;
    let routes: String = ["cohere", "tei", "voyage", "jina"]
        .iter()
        .map(|d| route(d, &format!("/{d}"), &upstream.url(), d, ""))
        .collect();
    let probity = Probity::start(&config("", &routes));
    let embed = r#"{"model":"m","input":["a","b"]}"#;
    let mut failures = Vec::new();
    for (path, request, code) in [
        (
            "/cohere/v2/embed",
            r#"{"model":"m","texts":["a","b"],"input_type":"search_document","embedding_types":["float"]}"#,
            "embedding_count_mismatch",
        ),
        (
            "/tei/embed",
            r#"{"inputs":["a","b"]}"#,
            "embedding_count_mismatch",
        ),
        ("/voyage/v1/embeddings", embed, "embedding_count_mismatch"),
        ("/jina/v1/embeddings", embed, "embedding_count_mismatch"),
        (
            "/cohere/v2/rerank",
            r#"{"model":"m","query":"q","documents":["a","b"]}"#,
            "rerank_index_out_of_range",
        ),
    ] {
        let got = post_with(&probity.url(path), request, &[]).await.got;
        if let Some(failure) = not_rejected(&got, code) {
            failures.push(format!("{path}: {failure}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

// Defect 4c: a streamed chat request's answer is judged as SSE whatever its content type says.
#[tokio::test]
async fn defect04c_stream_request_with_odd_content_types_is_judged_as_sse() {
    let stream = format!("data: {CONTENT_CHUNK}\n\ndata: {BAD_USAGE_CHUNK}\n\ndata: [DONE]\n\n");
    let upstream = Upstream::start(move |request| {
        let kind = request.header("x-case").unwrap_or_default();
        let headers: &[(&str, &str)] = match kind {
            "mixed-case" => &[("content-type", "Text/Event-Stream")],
            "stream+json" => &[("content-type", "application/stream+json")],
            _ => &[],
        };
        chunked(headers, stream.clone())
    })
    .await;
    let probity = openai(&upstream);
    let sample = r#"probity_malformed_figures_total{route="openai",figure="/usage/prompt_tokens"}"#;
    let mut failures = Vec::new();
    for (n, case) in ["mixed-case", "stream+json", "no content-type"]
        .into_iter()
        .enumerate()
    {
        let read = post_with(&probity.url(CHAT), CHAT_STREAM_REQUEST, &[("x-case", case)]).await;
        let body = read.got.text();
        if read.got.status != 200
            || !body.contains(r#""prompt_tokens":null"#)
            || body.contains(r#""prompt_tokens":"x""#)
            || !body.contains("data: [DONE]")
        {
            failures.push(format!("{case}: status {}, body {body:?}", read.got.status));
        }
        let counted = metric_settled(&probity, sample, (n + 1) as f64).await;
        if counted != Some((n + 1) as f64) {
            failures.push(format!(
                "{case}: malformed-figure count {counted:?}, want {}",
                n + 1
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

// Defect 4d: a non-stream chat request answered as text/event-stream is judged as a document.
#[tokio::test]
async fn defect04d_non_stream_request_answered_as_event_stream_is_a_document() {
    let body = chat_body(r#"{"prompt_tokens":"x","completion_tokens":1,"total_tokens":2}"#);
    let upstream = Upstream::start({
        let body = body.clone();
        move |_| whole(&[("content-type", "text/event-stream")], body.clone())
    })
    .await;
    let probity = openai(&upstream);
    let got = post_with(&probity.url(CHAT), CHAT_REQUEST, &[]).await.got;
    assert_eq!(got.status, 200);
    assert_eq!(got.text(), body.replace(r#""x""#, "null"));
    assert_eq!(
        header(&got, "probity-normalized").as_deref(),
        Some("/usage/prompt_tokens")
    );
    assert_eq!(
        header(&got, "content-length"),
        Some(got.body.len().to_string())
    );
}

// Defect 4e: a stream request answered with a JSON document is judged as a document.
#[tokio::test]
async fn defect04e_stream_request_answered_with_a_json_document_is_a_document() {
    let body = chat_body(r#"{"prompt_tokens":"x","completion_tokens":1,"total_tokens":2}"#);
    let upstream = Upstream::start({
        let body = body.clone();
        move |_| Reply::json(200, body.clone())
    })
    .await;
    let probity = openai(&upstream);
    let got = post_with(&probity.url(CHAT), CHAT_STREAM_REQUEST, &[])
        .await
        .got;
    assert_eq!(got.status, 200);
    assert_eq!(got.text(), body.replace(r#""x""#, "null"));
    assert_eq!(
        header(&got, "probity-normalized").as_deref(),
        Some("/usage/prompt_tokens")
    );
}

// ---------------------------------------------------------------- 5: rewrites keep bytes

// Defect 5: a rewritten SSE event keeps its CRLF, `id:` and `retry:` fields.
#[tokio::test]
async fn defect05_rewritten_sse_event_keeps_every_other_byte() {
    let event = format!("id: 7\r\nretry: 1000\r\ndata: {BAD_USAGE_CHUNK}\r\n\r\n");
    let stream = format!("{event}data: [DONE]\r\n\r\n");
    let upstream = Upstream::start(move |_| sse(stream.clone())).await;
    let probity = openai(&upstream);
    let read = post_with(&probity.url(CHAT), CHAT_STREAM_REQUEST, &[]).await;
    let want = format!(
        ": probity-normalized /usage/prompt_tokens\r\n{}data: [DONE]\r\n\r\n",
        event.replace(r#""x""#, "null")
    );
    assert_eq!(read.got.text(), want);
}

const OLLAMA_STREAM_REQUEST: &str =
    r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}"#;
const OLLAMA_FIRST: &str =
    r#"{"model":"m","created_at":"t","message":{"role":"assistant","content":"hi"},"done":false}"#;
const OLLAMA_LAST: &str = r#"{"model":"m","created_at":"t","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":3,"eval_count":"x"}"#;

async fn ollama_stream(stream: String) -> Read {
    let upstream = Upstream::start(move |_| {
        chunked(&[("content-type", "application/x-ndjson")], stream.clone())
    })
    .await;
    let probity = probity("ollama", "ollama", &upstream.url(), "");
    post_with(&probity.url("/ollama/api/chat"), OLLAMA_STREAM_REQUEST, &[]).await
}

// Defect 5: a rewritten NDJSON line keeps its `\r\n`, with no comment line.
#[tokio::test]
async fn defect05_rewritten_ndjson_line_keeps_crlf() {
    let stream = format!("{OLLAMA_FIRST}\r\n{OLLAMA_LAST}\r\n");
    let read = ollama_stream(stream.clone()).await;
    assert_eq!(read.got.text(), stream.replace(r#""x""#, "null"));
}

// Defect 5: an unterminated last NDJSON line stays unterminated when rewritten.
#[tokio::test]
async fn defect05_unterminated_ndjson_line_stays_unterminated() {
    let stream = format!("{OLLAMA_FIRST}\n{OLLAMA_LAST}");
    let read = ollama_stream(stream.clone()).await;
    assert_eq!(read.got.text(), stream.replace(r#""x""#, "null"));
}

// ---------------------------------------------------------------- 6: bounded header

// Defect 6: `probity-normalized` stays under 4 KiB, the capture keeps every pointer.
#[tokio::test]
async fn defect06_normalized_header_is_bounded() {
    let members: Vec<String> = (0..3000).map(|i| format!(r#""k{i}":"x""#)).collect();
    let body = chat_body(&format!(
        r#"{{"prompt_tokens":1,"prompt_tokens_details":{{{}}}}}"#,
        members.join(",")
    ));
    let upstream = Upstream::start(move |_| Reply::json(200, body.clone())).await;
    let probity = openai(&upstream);
    let id = "many-pointers";
    let got = post_with(&probity.url(CHAT), CHAT_REQUEST, &[("x-request-id", id)])
        .await
        .got;
    assert_eq!(got.status, 200, "{}", got.text());
    assert!(got.json()["usage"]["prompt_tokens_details"].is_null());

    let mut all: Vec<String> = (0..3000)
        .map(|i| format!("/usage/prompt_tokens_details/k{i}"))
        .collect();
    all.push("/usage/prompt_tokens_details".into());

    // Every sub-check is run, so one report names everything still wrong.
    let mut failures = Vec::new();
    let value = header(&got, "probity-normalized").unwrap_or_default();
    if value.len() > 4096 {
        failures.push(format!("probity-normalized is {} bytes", value.len()));
    }
    let tail = value.rsplit_once(";+").and_then(|(shown, more)| {
        let left_out: usize = more.strip_suffix(" more")?.parse().ok()?;
        Some((shown.split(',').collect::<Vec<&str>>(), left_out))
    });
    match tail {
        None => failures.push("probity-normalized does not end with `;+N more`".into()),
        Some((shown, left_out)) => {
            if shown.len() + left_out != all.len() {
                failures.push(format!(
                    "{} shown + {left_out} more is not {}",
                    shown.len(),
                    all.len()
                ));
            }
            if shown[..] != all[..shown.len().min(all.len())] {
                failures.push("the shown pointers are not the first ones, in order".into());
            }
        }
    }

    let entry = capture_entry(&probity, id).await;
    if entry["pointers"] != json!(all) {
        failures.push(format!(
            "the capture lists {} pointers, not all {}",
            entry["pointers"].as_array().map_or(0, Vec::len),
            all.len()
        ));
    }

    // A stock HTTP client must be able to read the response.
    let script = "import sys, urllib.request\n\
        r = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(), headers={'content-type': 'application/json'})\n\
        print(urllib.request.urlopen(r, timeout=8).status)";
    let url = probity.url(CHAT);
    let python = within(
        "python3 http.client",
        tokio::task::spawn_blocking(move || {
            std::process::Command::new("python3")
                .args(["-c", script, &url, CHAT_REQUEST])
                .output()
        }),
    )
    .await
    .unwrap();
    match python {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("python3 missing: http.client sub-check skipped")
        }
        Err(err) => failures.push(format!("python3: {err}")),
        Ok(out) => {
            if !out.status.success() || String::from_utf8_lossy(&out.stdout).trim() != "200" {
                let stderr = String::from_utf8_lossy(&out.stderr);
                failures.push(format!(
                    "python's http.client cannot read the response: {}",
                    stderr.lines().last().unwrap_or_default()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

// ---------------------------------------------------------------- 7: Content-Length

// Defect 7: a rewritten stream does not keep the upstream's Content-Length.
#[tokio::test]
async fn defect07_rewritten_stream_does_not_keep_content_length() {
    let body = format!("data: {CONTENT_CHUNK}\n\ndata: {BAD_USAGE_CHUNK}\n\ndata: [DONE]\n\n");
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let addr = raw_reply([head.into_bytes(), body.into_bytes()].concat()).await;
    let probity = probity("openai", "openai", &format!("http://{addr}"), "");

    let read = post_with(&probity.url(CHAT), CHAT_STREAM_REQUEST, &[]).await;
    let text = read.got.text();
    if let Some(length) = header(&read.got, "content-length") {
        assert_eq!(length, read.got.body.len().to_string(), "{text:?}");
    }
    assert!(text.contains(r#""prompt_tokens":null"#), "{text:?}");
    assert!(
        text.contains("data: [DONE]"),
        "[DONE] never arrived (the rewritten stream was framed by the upstream's length): {text:?}"
    );

    let response = raw_bytes(probity.addr, &raw_post(CHAT, CHAT_STREAM_REQUEST)).await;
    let (head, framed) = framed_body(&response);
    let framed = String::from_utf8_lossy(&framed);
    assert!(
        framed.contains("data: [DONE]"),
        "[DONE] is outside the framed body ({head}): {framed:?}"
    );
}

// Defect 7: a rewritten whole document carries its own Content-Length.
#[tokio::test]
async fn defect07_rewritten_document_content_length_is_the_body_length() {
    let body = chat_body(r#"{"prompt_tokens":"x","completion_tokens":1,"total_tokens":2}"#);
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let addr = raw_reply([head.into_bytes(), body.clone().into_bytes()].concat()).await;
    let probity = probity("openai", "openai", &format!("http://{addr}"), "");

    let got = post_with(&probity.url(CHAT), CHAT_REQUEST, &[]).await.got;
    assert_eq!(got.text(), body.replace(r#""x""#, "null"));
    assert_eq!(
        header(&got, "content-length"),
        Some(got.body.len().to_string())
    );

    let response = raw_bytes(probity.addr, &raw_post(CHAT, CHAT_REQUEST)).await;
    let (head, framed) = framed_body(&response);
    assert_eq!(
        String::from_utf8_lossy(&framed),
        body.replace(r#""x""#, "null"),
        "{head}"
    );
}

// ---------------------------------------------------------------- 8: unreadable requests

const UNREADABLE: &str = r#"{"model":"m","input":5}"#;

// Defect 8: a 2xx answer that is not JSON is invalid_json, whatever the request.
#[tokio::test]
async fn defect08_unreadable_request_non_json_answer_is_invalid_json() {
    let upstream = Upstream::json(br#"{"data": ["#).await;
    let probity = openai(&upstream);
    let got = post_with(&probity.url(EMBEDDINGS), UNREADABLE, &[])
        .await
        .got;
    assert_rejected(&got, "invalid_json", "input: 5");
    // A request that is not JSON at all is unreadable the same way.
    let got = post_with(&probity.url(EMBEDDINGS), "input=a&model=m", &[])
        .await
        .got;
    assert_rejected(&got, "invalid_json", "a form-encoded request");
}

// Defect 8: figures are judged even when the request cannot be read.
#[tokio::test]
async fn defect08_unreadable_request_figures_are_still_judged() {
    let body = r#"{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1]}],"usage":{"prompt_tokens":"x","total_tokens":1}}"#;
    let upstream = Upstream::json(body.as_bytes()).await;
    let probity = openai(&upstream);
    let got = post_with(&probity.url(EMBEDDINGS), UNREADABLE, &[])
        .await
        .got;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(got.text(), body.replace(r#""x""#, "null"));
    assert_eq!(
        header(&got, "probity-normalized").as_deref(),
        Some("/usage/prompt_tokens")
    );
    let uninspected: f64 = samples_for(
        &metrics(&probity).await,
        "probity_uninspected_total",
        "openai",
    )
    .iter()
    .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
    .sum();
    assert_eq!(
        uninspected, 1.0,
        "probity_uninspected_total for route openai"
    );
}

// ---------------------------------------------------------------- 9-14: chunking

/// What the fake provider makes of one chunk's inputs.
type Answer = fn(&[String]) -> Reply;

/// The inputs of a chunk request (a lone surrogate escape read as `?`).
fn inputs_of(body: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(body).replace("\\ud800", "?");
    let json: Value = serde_json::from_str(&text).unwrap_or_default();
    json["input"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| v.as_str().unwrap_or_default().to_string())
        .collect()
}

/// An embeddings answer with one `[0.1,0.2]` vector per input (`vectors`
/// of them) and this `usage`.
fn vectors_answer(vectors: usize, usage: &str) -> Reply {
    let data: Vec<String> = (0..vectors)
        .map(|i| format!(r#"{{"object":"embedding","index":{i},"embedding":[0.1,0.2]}}"#))
        .collect();
    Reply::json(
        200,
        format!(
            r#"{{"object":"list","data":[{}],"model":"m","usage":{usage}}}"#,
            data.join(",")
        ),
    )
}

fn sound_usage(inputs: &[String]) -> Reply {
    let n = inputs.len();
    vectors_answer(n, &format!(r#"{{"prompt_tokens":{n},"total_tokens":{n}}}"#))
}

/// A route `openai` with `max_batch_inputs = 3` in front of a provider.
async fn chunking(answer: Answer, extra: &str) -> (Upstream, Probity) {
    let upstream = Upstream::start(move |request| answer(&inputs_of(&request.body))).await;
    let settings = format!("max_batch_inputs = 3\n{extra}");
    let probity = probity("openai", "openai", &upstream.url(), &settings);
    (upstream, probity)
}

const FOUR: &str = r#"{"model":"m","input":["a","b","c","d"]}"#;

// Defect 9: a stitched answer's token counts reach the metrics.
#[tokio::test]
async fn defect09_stitched_tokens_are_counted() {
    let (_upstream, probity) = chunking(sound_usage, "").await;
    let got = post_with(&probity.url(EMBEDDINGS), FOUR, &[]).await.got;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(
        got.json()["usage"],
        json!({"prompt_tokens": 4, "total_tokens": 4})
    );
    for kind in ["input", "total"] {
        let sample = format!(r#"probity_tokens_total{{route="openai",kind="{kind}"}}"#);
        assert_eq!(
            metric_settled(&probity, &sample, 4.0).await,
            Some(4.0),
            "{sample}"
        );
    }
}

// Defect 10: a chunk's malformed figure is counted on the metric.
#[tokio::test]
async fn defect10_a_chunks_malformed_figure_is_counted() {
    let (_upstream, probity) = chunking(
        |inputs| match inputs {
            [d] if d == "d" => vectors_answer(1, r#"{"prompt_tokens":"1","total_tokens":1}"#),
            _ => sound_usage(inputs),
        },
        "",
    )
    .await;
    let got = post_with(&probity.url(EMBEDDINGS), FOUR, &[]).await.got;
    assert_eq!(got.status, 200, "{}", got.text());
    assert!(
        got.json()["usage"]["prompt_tokens"].is_null(),
        "{}",
        got.text()
    );
    let listed = header(&got, "probity-normalized").unwrap_or_default();
    assert!(
        listed.split(',').any(|p| p == "/usage/prompt_tokens"),
        "probity-normalized: {listed:?}"
    );
    assert_eq!(
        metric_settled(
            &probity,
            r#"probity_malformed_figures_total{route="openai",figure="/usage/prompt_tokens"}"#,
            1.0
        )
        .await,
        Some(1.0)
    );
}

// Defect 11: a chunk's broken payload is captured and the error says so.
#[tokio::test]
async fn defect11_a_rejected_chunk_is_captured() {
    let (_upstream, probity) = chunking(
        |inputs| match inputs {
            [d] if d == "d" => vectors_answer(2, r#"{"prompt_tokens":1,"total_tokens":1}"#),
            _ => sound_usage(inputs),
        },
        "",
    )
    .await;
    let id = "chunk-rejected";
    let got = post_with(&probity.url(EMBEDDINGS), FOUR, &[("x-request-id", id)])
        .await
        .got;
    assert_rejected(&got, "embedding_count_mismatch", "chunk [d] with 2 vectors");
    assert_eq!(header(&got, "probity-capture").as_deref(), Some(id));
    assert_eq!(capture_entry(&probity, id).await["outcome"], "rejected");
}

// Defect 12: a request with a lone surrogate escape is still chunked, its bytes copied.
#[tokio::test]
async fn defect12_lone_surrogate_request_is_chunked() {
    let (upstream, probity) = chunking(sound_usage, "").await;
    let request = r#"{"model":"m","input":["a","b","c","d\ud800"]}"#;
    let got = post_with(&probity.url(EMBEDDINGS), request, &[]).await.got;
    assert_eq!(got.status, 200, "{}", got.text());
    let mut bodies: Vec<String> = upstream
        .requests()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect();
    bodies.sort_by_key(|b| std::cmp::Reverse(b.len()));
    assert_eq!(bodies.len(), 2, "{bodies:#?}");
    assert_eq!(inputs_of(bodies[0].as_bytes()).len(), 3, "{bodies:#?}");
    assert_eq!(bodies[1], r#"{"model":"m","input":["d\ud800"]}"#);
    assert_eq!(
        probity
            .metric(r#"probity_chunked_requests_total{route="openai"}"#)
            .await,
        Some(1.0)
    );
}

// Defect 13: a streamed answer over 1 MiB is judged whole (valid JSON object).
#[tokio::test]
async fn defect13_streamed_answer_over_one_mib_is_valid() {
    let half = "a".repeat(550_000);
    let delta = |text: &str| {
        let chunk = json!({"id": "c", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": text}}]});
        format!("data: {chunk}\n\n")
    };
    let stream = format!(
        "{}{}data: {}\n\ndata: [DONE]\n\n",
        delta(&format!("{{\"answer\":\"{half}")),
        delta(&format!("{half}\"}}")),
        r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#
    );
    let upstream = Upstream::start(move |_| sse(stream.clone())).await;
    let probity = openai(&upstream);
    let request = r#"{"model":"m","stream":true,"response_format":{"type":"json_object"},"messages":[{"role":"user","content":"answer in JSON"}]}"#;
    let read = post_with(&probity.url(CHAT), request, &[]).await;
    let body = read.got.text();
    let verdict = body
        .lines()
        .find(|l| l.starts_with(": probity-output"))
        .unwrap_or("no verdict");
    assert_eq!(verdict, ": probity-output valid");
    assert_eq!(
        metric_settled(
            &probity,
            r#"probity_model_outputs_total{task="chat_completions",verdict="valid"}"#,
            1.0
        )
        .await,
        Some(1.0)
    );
}

/// The chunk bodies the upstream received, shortest last.
fn chunk_bodies(upstream: &Upstream) -> Vec<String> {
    let mut bodies: Vec<String> = upstream
        .requests()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect();
    bodies.sort_by_key(|b| std::cmp::Reverse(b.len()));
    bodies
}

// Defect 14: a chunk's request is a copy of the original bytes, not re-serialised.
#[tokio::test]
async fn defect14_chunk_requests_are_copied_byte_for_byte() {
    let (upstream, probity) = chunking(sound_usage, "").await;
    let request = r#"{"model":"m","input":["a","b","c","d"],"seed":12345678901234567890123}"#;
    let got = post_with(&probity.url(EMBEDDINGS), request, &[]).await.got;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(
        chunk_bodies(&upstream),
        [
            r#"{"model":"m","input":["a","b","c"],"seed":12345678901234567890123}"#,
            r#"{"model":"m","input":["d"],"seed":12345678901234567890123}"#,
        ]
    );
}

// Defect 14: whitespace outside and between the kept inputs is kept.
#[tokio::test]
async fn defect14_chunk_requests_keep_whitespace() {
    let (upstream, probity) = chunking(sound_usage, "").await;
    let request = r#"{ "input" : [ "a", "b", "c", "d" ], "model": "m" }"#;
    let got = post_with(&probity.url(EMBEDDINGS), request, &[]).await.got;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(
        chunk_bodies(&upstream),
        [
            r#"{ "input" : [ "a", "b", "c" ], "model": "m" }"#,
            r#"{ "input" : [ "d" ], "model": "m" }"#,
        ]
    );
}

// Decided: a stitched record is judged like a single call's. OpenAI's
// embeddings `usage` is required by its schema, so with every figure
// malformed it keeps its object, each figure null (issue 10).
#[tokio::test]
async fn decided_stitched_usage_with_only_malformed_figures_is_kept_like_a_single_calls() {
    let (_upstream, probity) = chunking(
        |inputs| vectors_answer(inputs.len(), r#"{"prompt_tokens":"x","total_tokens":"y"}"#),
        "",
    )
    .await;
    let got = post_with(&probity.url(EMBEDDINGS), FOUR, &[]).await.got;
    assert_eq!(got.status, 200, "{}", got.text());
    assert!(
        got.text()
            .contains(r#""usage":{"prompt_tokens":null,"total_tokens":null}"#),
        "usage not kept with its figures null: {}",
        got.text()
    );
    assert_eq!(
        header(&got, "probity-normalized").as_deref(),
        Some("/usage/prompt_tokens,/usage/total_tokens")
    );
}

// Decided: probity_chunks_total counts the chunks actually sent.
#[tokio::test]
async fn decided_chunks_total_counts_chunks_actually_sent() {
    let (upstream, probity) = chunking(
        |_| Reply::json(400, r#"{"error":{"message":"no"}}"#),
        "max_chunk_concurrency = 1",
    )
    .await;
    let got = post_with(&probity.url(EMBEDDINGS), FOUR, &[]).await.got;
    assert_eq!(got.status, 400, "{}", got.text());
    assert_eq!(upstream.requests().len(), 1, "the second chunk was sent");
    assert_eq!(
        probity
            .metric(r#"probity_chunks_total{route="openai"}"#)
            .await,
        Some(1.0)
    );
}

// ---------------------------------------------------------------- figure grammar

/// Runs each `(usage prompt_tokens text, sound)` case through the openai
/// embeddings endpoint; returns the failures. `total_tokens` is the
/// largest count, so that no count under test breaks `prompt_tokens <=
/// total_tokens`: only the grammar decides.
async fn grammar_cases(
    probity: &Probity,
    next: &Mutex<Vec<u8>>,
    cases: &[(&str, bool)],
) -> Vec<String> {
    let mut failures = Vec::new();
    for (value, sound) in cases {
        let body = embedding_body(&format!(
            r#"{{"prompt_tokens":{value},"total_tokens":{}}}"#,
            u64::MAX
        ));
        *next.lock().unwrap() = body.clone().into_bytes();
        let got = post_with(
            &probity.url(EMBEDDINGS),
            r#"{"model":"m","input":"a"}"#,
            &[],
        )
        .await
        .got;
        let (want_body, want_header) = judged(
            &body,
            "prompt_tokens",
            value,
            *sound,
            "/usage/prompt_tokens",
        );
        let found_header = header(&got, "probity-normalized");
        if got.status != 200 || got.text() != want_body || found_header != want_header {
            failures.push(format!(
                "prompt_tokens {value}: want {} ({want_header:?}), got {} {:?} ({found_header:?})",
                if *sound { "sound" } else { "null" },
                got.status,
                got.text()
            ));
        }
    }
    failures
}

// Grammar: a count is a non-negative integer that fits u64, written as one.
#[tokio::test]
async fn grammar_count_figures() {
    let next = Arc::new(Mutex::new(Vec::new()));
    let upstream = switchable(next.clone()).await;
    let probity = openai(&upstream);
    let failures = grammar_cases(
        &probity,
        &next,
        &[
            ("18446744073709551615", true),
            ("18446744073709551616", false),
            ("8.0", false),
            ("1e3", false),
            ("-0", false),
            ("1e400", false),
            ("-1", false),
            (r#""8""#, false),
        ],
    )
    .await;
    assert!(failures.is_empty(), "{failures:#?}");
}

// Grammar and relations apart: the largest count is well-formed alone, yet
// above the `total_tokens` it is a part of, so neither is reported. That is a
// contradiction, not a malformed figure: counted apart.
#[tokio::test]
async fn a_sound_count_above_its_whole_is_a_contradiction() {
    let body = embedding_body(&format!(
        r#"{{"prompt_tokens":{},"total_tokens":1}}"#,
        u64::MAX
    ));
    let upstream = Upstream::start({
        let body = body.clone();
        move |_| Reply::json(200, body.clone())
    })
    .await;
    let probity = openai(&upstream);
    let got = post_with(
        &probity.url(EMBEDDINGS),
        r#"{"model":"m","input":"a"}"#,
        &[],
    )
    .await
    .got;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(
        got.text(),
        embedding_body(r#"{"prompt_tokens":null,"total_tokens":null}"#),
        "both figures of the breached relation are nulled, the usage kept"
    );
    assert_eq!(
        header(&got, "probity-normalized").as_deref(),
        Some("/usage/prompt_tokens,/usage/total_tokens")
    );
    assert_eq!(
        probity
            .metric(
                r#"probity_figure_contradictions_total{route="openai",relation="prompt_tokens<=total_tokens"}"#
            )
            .await,
        Some(1.0)
    );
    for figure in ["/usage/prompt_tokens", "/usage/total_tokens"] {
        let sample =
            format!(r#"probity_malformed_figures_total{{route="openai",figure="{figure}"}}"#);
        assert_eq!(
            probity.metric(&sample).await,
            None,
            "{figure} counted malformed"
        );
    }
    for kind in ["input", "total"] {
        let sample = format!(r#"probity_tokens_total{{route="openai",kind="{kind}"}}"#);
        assert!(
            probity.metric(&sample).await.unwrap_or(0.0) == 0.0,
            "a contradicted {kind} count was summed"
        );
    }
}

// Grammar: Cohere's Number figures take any non-negative finite number.
#[tokio::test]
async fn grammar_cohere_number_figures() {
    let next = Arc::new(Mutex::new(Vec::new()));
    let upstream = switchable(next.clone()).await;
    let probity = probity("cohere", "cohere", &upstream.url(), "");
    let request =
        r#"{"model":"m","texts":["a"],"input_type":"search_document","embedding_types":["float"]}"#;
    let mut failures = Vec::new();
    for (value, sound) in [
        ("8.0", true),
        ("1e3", true),
        ("-0", false),
        ("-1", false),
        ("1e400", false),
    ] {
        let body = format!(
            r#"{{"id":"e","embeddings":{{"float":[[0.1,0.2]]}},"texts":["a"],"meta":{{"billed_units":{{"input_tokens":{value},"images":0}}}},"response_type":"embeddings_by_type"}}"#
        );
        *next.lock().unwrap() = body.clone().into_bytes();
        let got = post_with(&probity.url("/cohere/v2/embed"), request, &[])
            .await
            .got;
        let (want_body, want_header) = judged(
            &body,
            "input_tokens",
            value,
            sound,
            "/meta/billed_units/input_tokens",
        );
        let found_header = header(&got, "probity-normalized");
        if got.status != 200 || got.text() != want_body || found_header != want_header {
            failures.push(format!(
                "input_tokens {value}: want {want_header:?}, got {} {:?} ({found_header:?})",
                got.status,
                got.text()
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

// Grammar: a record that is not an object is malformed whole.
#[tokio::test]
async fn grammar_record_that_is_not_an_object_is_nulled() {
    let body = embedding_body(r#""n/a""#);
    let upstream = Upstream::start({
        let body = body.clone();
        move |_| Reply::json(200, body.clone())
    })
    .await;
    let probity = openai(&upstream);
    let got = post_with(
        &probity.url(EMBEDDINGS),
        r#"{"model":"m","input":"a"}"#,
        &[],
    )
    .await
    .got;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(got.text(), body.replace(r#""n/a""#, "null"));
    assert_eq!(
        header(&got, "probity-normalized").as_deref(),
        Some("/usage")
    );
}

// Grammar: lone UTF-16 surrogate escapes are valid JSON and change nothing.
#[tokio::test]
async fn grammar_lone_surrogate_escapes_pass_untouched() {
    let next = Arc::new(Mutex::new(Vec::new()));
    let upstream = switchable(next.clone()).await;
    let probity = openai(&upstream);
    let sound = r#"{"prompt_tokens":1,"total_tokens":1}"#;
    let cases = [
        (
            "key in usage",
            embedding_body(r#"{"prompt_tokens":1,"total_tokens":1,"x\ud800":1}"#),
        ),
        (
            "id",
            embedding_body(sound).replacen('{', r#"{"id":"emb-\ud800","#, 1),
        ),
        (
            "root key",
            embedding_body(sound).replacen('{', r#"{"\udc00":1,"#, 1),
        ),
        (
            "key in a data item",
            embedding_body(sound).replace(r#""index":0,"#, r#""index":0,"\ud800":1,"#),
        ),
    ];
    let mut failures = Vec::new();
    for (case, body) in cases {
        *next.lock().unwrap() = body.clone().into_bytes();
        let got = post_with(
            &probity.url(EMBEDDINGS),
            r#"{"model":"m","input":"a"}"#,
            &[],
        )
        .await
        .got;
        if got.status != 200 || got.text() != body || header(&got, "probity-normalized").is_some() {
            failures.push(format!(
                "{case}: got {} {:?} normalized {:?}",
                got.status,
                got.text(),
                header(&got, "probity-normalized")
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

// Grammar: a UTF-8 byte-order mark before the body is kept, and figures still judged.
#[tokio::test]
async fn grammar_byte_order_mark_is_kept() {
    let next = Arc::new(Mutex::new(Vec::new()));
    let upstream = switchable(next.clone()).await;
    let probity = openai(&upstream);
    let bom = |text: &str| [&b"\xEF\xBB\xBF"[..], text.as_bytes()].concat();

    let valid = bom(&embedding_body(r#"{"prompt_tokens":1,"total_tokens":1}"#));
    *next.lock().unwrap() = valid.clone();
    let got = post_with(
        &probity.url(EMBEDDINGS),
        r#"{"model":"m","input":"a"}"#,
        &[],
    )
    .await
    .got;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(got.body.as_ref(), valid.as_slice(), "valid body with a BOM");
    assert_eq!(header(&got, "probity-normalized"), None);

    let malformed = embedding_body(r#"{"prompt_tokens":"x","total_tokens":1}"#);
    *next.lock().unwrap() = bom(&malformed);
    let got = post_with(
        &probity.url(EMBEDDINGS),
        r#"{"model":"m","input":"a"}"#,
        &[],
    )
    .await
    .got;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(
        got.body.as_ref(),
        bom(&malformed.replace(r#""x""#, "null")).as_slice(),
        "malformed body with a BOM: {:?}",
        got.text()
    );
    assert_eq!(
        header(&got, "probity-normalized").as_deref(),
        Some("/usage/prompt_tokens")
    );
}

// Grammar: a header figure sent twice is malformed and removed.
#[tokio::test]
async fn grammar_tei_header_figure_sent_twice_is_removed() {
    let upstream = Upstream::start(|_| {
        Reply::json(200, "[[0.1,0.2]]")
            .header("x-compute-tokens", "3")
            .header("x-compute-tokens", "3")
    })
    .await;
    let probity = probity("tei", "tei", &upstream.url(), "");
    let got = post_with(&probity.url("/tei/embed"), r#"{"inputs":["a"]}"#, &[])
        .await
        .got;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(got.text(), "[[0.1,0.2]]");
    assert_eq!(got.headers.get_all("x-compute-tokens").iter().count(), 0);
    assert_eq!(
        header(&got, "probity-normalized").as_deref(),
        Some("header:x-compute-tokens")
    );
}

// Grammar: wildcard members with odd keys get RFC 6901 pointers, percent-encoded in the header.
#[tokio::test]
async fn grammar_wildcard_member_keys_are_escaped() {
    let body = chat_body(
        r#"{"prompt_tokens":1,"prompt_tokens_details":{"caché":"x","a/b":"x","t~":"x","ok":1}}"#,
    );
    let upstream = Upstream::start({
        let body = body.clone();
        move |_| Reply::json(200, body.clone())
    })
    .await;
    let probity = openai(&upstream);
    let id = "odd-keys";
    let got = post_with(&probity.url(CHAT), CHAT_REQUEST, &[("x-request-id", id)])
        .await
        .got;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(got.text(), body.replace(r#""x""#, "null"));
    assert_eq!(
        header(&got, "probity-normalized").as_deref(),
        Some("/usage/prompt_tokens_details/cach%C3%A9,/usage/prompt_tokens_details/a~1b,/usage/prompt_tokens_details/t~0")
    );
    assert_eq!(
        capture_entry(&probity, id).await["pointers"],
        json!([
            "/usage/prompt_tokens_details/caché",
            "/usage/prompt_tokens_details/a~1b",
            "/usage/prompt_tokens_details/t~0"
        ])
    );
}
