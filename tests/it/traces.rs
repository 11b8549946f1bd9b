//! OpenTelemetry traces over real sockets: the real binary exports OTLP/HTTP
//! protobuf to a receiver run here, which decodes it with the
//! `opentelemetry-proto` types. The spans carry the GenAI conventions'
//! attributes, join the client's `traceparent`, parent the upstream call,
//! and never carry a malformed figure; a collector that is down or slow
//! costs spans (counted), never a request.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::{status::StatusCode, Span};
use prost::Message;
use tokio::net::TcpListener;

use crate::support::*;

const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// An OTLP/HTTP receiver: decodes every export, keeps the spans and the
/// raw bodies; while `hang` is set it never answers.
struct Receiver {
    addr: std::net::SocketAddr,
    spans: Arc<Mutex<Vec<Span>>>,
    raw: Arc<Mutex<Vec<u8>>>,
    paths: Arc<Mutex<Vec<String>>>,
    hang: Arc<AtomicBool>,
}

impl Receiver {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let receiver = Self {
            addr: listener.local_addr().unwrap(),
            spans: Arc::default(),
            raw: Arc::default(),
            paths: Arc::default(),
            hang: Arc::default(),
        };
        let (spans, raw, paths, hang) = (
            receiver.spans.clone(),
            receiver.raw.clone(),
            receiver.paths.clone(),
            receiver.hang.clone(),
        );
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (spans, raw, paths, hang) =
                    (spans.clone(), raw.clone(), paths.clone(), hang.clone());
                let service = service_fn(move |request: Request<Incoming>| {
                    let (spans, raw, paths, hang) =
                        (spans.clone(), raw.clone(), paths.clone(), hang.clone());
                    async move {
                        if hang.load(Ordering::SeqCst) {
                            tokio::time::sleep(Duration::from_secs(3600)).await;
                        }
                        paths.lock().unwrap().push(request.uri().path().to_string());
                        assert_eq!(request.headers()["content-type"], "application/x-protobuf");
                        let body = request.into_body().collect().await.unwrap().to_bytes();
                        raw.lock().unwrap().extend_from_slice(&body);
                        let export = ExportTraceServiceRequest::decode(body).unwrap();
                        let mut kept = spans.lock().unwrap();
                        for resource in export.resource_spans {
                            let service = resource
                                .resource
                                .iter()
                                .flat_map(|r| &r.attributes)
                                .find(|kv| kv.key == "service.name")
                                .and_then(|kv| kv.value.clone()?.value);
                            assert_eq!(service, Some(Value::StringValue("probity".into())));
                            for scope in resource.scope_spans {
                                kept.extend(scope.spans);
                            }
                        }
                        let answer = ExportTraceServiceResponse::default().encode_to_vec();
                        Ok::<_, Infallible>(
                            Response::builder()
                                .header("content-type", "application/x-protobuf")
                                .body(Full::new(Bytes::from(answer)))
                                .unwrap(),
                        )
                    }
                });
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        receiver
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Waits until `n` spans have arrived (batches leave every second).
    async fn spans(&self, n: usize) -> Vec<Span> {
        let start = Instant::now();
        loop {
            let spans = self.spans.lock().unwrap().clone();
            if spans.len() >= n {
                return spans;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{} of {n} spans arrived",
                spans.len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attr(span: &Span, key: &str) -> Option<Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.clone()?.value)
}

fn text(span: &Span, key: &str) -> Option<String> {
    match attr(span, key)? {
        Value::StringValue(s) => Some(s),
        other => panic!("{key} is not a string: {other:?}"),
    }
}

fn int(span: &Span, key: &str) -> Option<i64> {
    match attr(span, key)? {
        Value::IntValue(n) => Some(n),
        other => panic!("{key} is not an integer: {other:?}"),
    }
}

fn strings(span: &Span, key: &str) -> Vec<String> {
    match attr(span, key) {
        Some(Value::ArrayValue(array)) => array
            .values
            .into_iter()
            .map(|v| match v.value {
                Some(Value::StringValue(s)) => s,
                other => panic!("{key}: {other:?}"),
            })
            .collect(),
        None => Vec::new(),
        other => panic!("{key} is not an array: {other:?}"),
    }
}

fn server_span(spans: &[Span]) -> &Span {
    let servers: Vec<&Span> = spans
        .iter()
        .filter(|s| s.kind == SpanKind::Server as i32)
        .collect();
    assert_eq!(servers.len(), 1, "{spans:#?}");
    servers[0]
}

fn calls(spans: &[Span]) -> Vec<&Span> {
    spans
        .iter()
        .filter(|s| s.kind == SpanKind::Client as i32)
        .collect()
}

fn traced(receiver: &Receiver, upstream: &Upstream, dialect: &str, extra: &str) -> Probity {
    let telemetry = format!("[telemetry]\notlp_endpoint = \"{}\"\n", receiver.endpoint());
    Probity::start(&config(
        "",
        &format!(
            "{}{telemetry}",
            route(
                dialect,
                &format!("/{dialect}"),
                &upstream.url(),
                dialect,
                extra
            )
        ),
    ))
}

fn chat_request() -> Vec<u8> {
    fixture("openai/gen_chat_pass/request.json")
}

/// The pass fixture with its `prompt_tokens` replaced.
fn chat_answer(prompt_tokens: &str, id: &str) -> Vec<u8> {
    let body = String::from_utf8(fixture("openai/gen_chat_pass/response.json")).unwrap();
    body.replace(
        "\"prompt_tokens\": 24",
        &format!("\"prompt_tokens\": {prompt_tokens}"),
    )
    .replace("\"chatcmpl-CZ4kQ2bF7yqU1nR0aX9vT3mL8pWd\"", id)
    .into_bytes()
}

async fn post_traced(url: &str, body: Vec<u8>) -> Got {
    let request = Request::post(url)
        .header("content-type", "application/json")
        .header("traceparent", format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"))
        .header("tracestate", "congo=t61rcWkgMzE")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    send(request).await
}

#[tokio::test]
async fn a_normalized_answer_joins_the_clients_trace_without_its_malformed_figure() {
    let receiver = Receiver::start().await;
    let answer = chat_answer(
        "\"9731-canary\"",
        "\"chatcmpl-CZ4kQ2bF7yqU1nR0aX9vT3mL8pWd\"",
    );
    let upstream = Upstream::start(move |_| Reply::json(200, answer.clone())).await;
    let probity = traced(&receiver, &upstream, "openai", "");

    let got = post_traced(&probity.url("/openai/v1/chat/completions"), chat_request()).await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(
        got.header("probity-normalized"),
        Some("/usage/prompt_tokens")
    );

    let spans = receiver.spans(2).await;
    let server = server_span(&spans);
    assert_eq!(
        hex(&server.trace_id),
        CLIENT_TRACE,
        "the span joins the app's trace"
    );
    assert_eq!(hex(&server.parent_span_id), CLIENT_SPAN);
    assert_eq!(server.name, "chat gpt-4o-mini");
    assert_eq!(
        text(server, "gen_ai.operation.name").as_deref(),
        Some("chat")
    );
    assert_eq!(
        text(server, "gen_ai.provider.name").as_deref(),
        Some("openai")
    );
    assert_eq!(
        text(server, "gen_ai.request.model").as_deref(),
        Some("gpt-4o-mini")
    );
    assert_eq!(
        text(server, "gen_ai.response.model").as_deref(),
        Some("gpt-4o-mini-2024-07-18")
    );
    assert_eq!(
        text(server, "gen_ai.response.id").as_deref(),
        Some("chatcmpl-CZ4kQ2bF7yqU1nR0aX9vT3mL8pWd")
    );
    assert_eq!(int(server, "gen_ai.usage.output_tokens"), Some(2));
    assert_eq!(
        attr(server, "gen_ai.usage.input_tokens"),
        None,
        "a malformed figure is absent, never a substitute"
    );
    assert_eq!(
        text(server, "probity.outcome").as_deref(),
        Some("normalized")
    );
    assert_eq!(
        strings(server, "probity.normalized"),
        ["/usage/prompt_tokens"]
    );
    assert_eq!(int(server, "http.response.status_code"), Some(200));
    assert_eq!(text(server, "server.address").as_deref(), Some("127.0.0.1"));
    assert_eq!(text(server, "probity.route").as_deref(), Some("openai"));
    assert_eq!(text(server, "error.type"), None);
    let raw = receiver.raw.lock().unwrap().clone();
    assert!(
        !raw.windows(6).any(|w| w == b"canary"),
        "the malformed value reached an exported span"
    );

    // The upstream call: a child of probity's span, and the upstream's parent.
    let call = calls(&spans);
    assert_eq!(call.len(), 1);
    assert_eq!(call[0].parent_span_id, server.span_id);
    assert_eq!(call[0].trace_id, server.trace_id);
    assert_eq!(int(call[0], "http.response.status_code"), Some(200));
    let sent = upstream.only_request();
    assert_eq!(
        sent.header("traceparent"),
        Some(format!("00-{CLIENT_TRACE}-{}-01", hex(&call[0].span_id)).as_str())
    );
    assert_eq!(sent.header("tracestate"), Some("congo=t61rcWkgMzE"));
    assert_eq!(receiver.paths.lock().unwrap()[0], "/v1/traces");
}

#[tokio::test]
async fn a_malformed_response_id_is_absent_and_a_new_trace_starts_without_traceparent() {
    let receiver = Receiver::start().await;
    let answer = chat_answer("24", "5");
    let upstream = Upstream::start(move |_| Reply::json(200, answer.clone())).await;
    let probity = traced(&receiver, &upstream, "openai", "");

    let got = post(&probity.url("/openai/v1/chat/completions"), chat_request()).await;
    assert_eq!(got.status, 200);
    let spans = receiver.spans(2).await;
    let server = server_span(&spans);
    assert!(server.parent_span_id.is_empty(), "a root span");
    assert_eq!(attr(server, "gen_ai.response.id"), None);
    assert_eq!(int(server, "gen_ai.usage.input_tokens"), Some(24));
    assert_eq!(strings(server, "probity.normalized"), ["/id"]);
    let sent = upstream.only_request();
    let traceparent = sent.header("traceparent").unwrap();
    assert!(traceparent.starts_with(&format!("00-{}-", hex(&server.trace_id))));
}

#[tokio::test]
async fn a_rejected_answer_names_its_invariant_and_error_type() {
    let receiver = Receiver::start().await;
    let upstream = Upstream::start(|_| {
        Reply::json(200, fixture("openai/embeddings_count_short/response.json"))
    })
    .await;
    let probity = traced(&receiver, &upstream, "openai", "");
    let got = post(
        &probity.url("/openai/v1/embeddings"),
        fixture("openai/embeddings_count_short/request.json"),
    )
    .await;
    assert_eq!(got.status, 502);
    let spans = receiver.spans(2).await;
    let server = server_span(&spans);
    assert_eq!(text(server, "probity.outcome").as_deref(), Some("rejected"));
    assert_eq!(
        text(server, "gen_ai.operation.name").as_deref(),
        Some("embeddings")
    );
    assert!(text(server, "probity.invariant").is_some());
    assert_eq!(
        text(server, "error.type").as_deref(),
        Some("provider_invalid_response")
    );
    assert_eq!(int(server, "http.response.status_code"), Some(502));
    assert_eq!(
        server.status.as_ref().unwrap().code,
        StatusCode::Error as i32
    );
}

#[tokio::test]
async fn an_unreachable_upstream_fails_the_call_span_and_the_request_span() {
    let receiver = Receiver::start().await;
    let telemetry = format!("[telemetry]\notlp_endpoint = \"{}\"\n", receiver.endpoint());
    let upstream = format!("http://127.0.0.1:{}", closed_port());
    let probity = Probity::start(&config(
        "",
        &format!(
            "{}{telemetry}",
            route("openai", "/openai", &upstream, "openai", "")
        ),
    ));
    let got = post(&probity.url("/openai/v1/chat/completions"), chat_request()).await;
    assert_eq!(got.status, 502);
    let spans = receiver.spans(2).await;
    let server = server_span(&spans);
    assert_eq!(
        text(server, "error.type").as_deref(),
        Some("upstream_unreachable")
    );
    assert_eq!(
        text(calls(&spans)[0], "error.type").as_deref(),
        Some("unreachable")
    );
}

#[tokio::test]
async fn each_chunk_of_a_split_batch_is_a_call_span() {
    let receiver = Receiver::start().await;
    let upstream = Upstream::start(|request| {
        let asked: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        let data: Vec<String> = (0..asked["input"].as_array().unwrap().len())
            .map(|i| format!(r#"{{"object": "embedding", "index": {i}, "embedding": [0.5, 0.25]}}"#))
            .collect();
        Reply::json(
            200,
            format!(
                r#"{{"object": "list", "data": [{}], "model": "m", "usage": {{"prompt_tokens": 3, "total_tokens": 3}}}}"#,
                data.join(", ")
            ),
        )
    })
    .await;
    let probity = traced(&receiver, &upstream, "openai", "max_batch_inputs = 2\n");
    let input: Vec<String> = (0..5).map(|i| format!("t{i}")).collect();
    let body = serde_json::json!({"model": "m", "input": input}).to_string();
    let got = post(&probity.url("/openai/v1/embeddings"), body).await;
    assert_eq!(got.status, 200, "{}", got.text());
    let spans = receiver.spans(4).await;
    let server = server_span(&spans);
    let mut chunks: Vec<i64> = calls(&spans)
        .iter()
        .map(|c| {
            assert_eq!(c.parent_span_id, server.span_id);
            int(c, "probity.chunk").unwrap()
        })
        .collect();
    chunks.sort_unstable();
    assert_eq!(chunks, [0, 1, 2]);
    assert_eq!(int(server, "gen_ai.usage.input_tokens"), Some(9));
}

#[tokio::test]
async fn a_stream_reports_its_final_usage_and_its_call_lasts_as_long() {
    let receiver = Receiver::start().await;
    let stream = fixture("openai/gen_chat_stream_include_usage_pass/response.sse");
    let upstream = Upstream::start(move |_| {
        Reply::stream(
            "text/event-stream",
            vec![part(
                Before::Pause(Duration::from_millis(200)),
                stream.clone(),
            )],
        )
    })
    .await;
    let probity = traced(&receiver, &upstream, "openai", "");
    let got = post_traced(
        &probity.url("/openai/v1/chat/completions"),
        fixture("openai/gen_chat_stream_include_usage_pass/request.json"),
    )
    .await;
    assert_eq!(got.status, 200);
    let spans = receiver.spans(2).await;
    let server = server_span(&spans);
    assert_eq!(text(server, "probity.outcome").as_deref(), Some("passed"));
    assert!(int(server, "gen_ai.usage.output_tokens").is_some());
    assert_eq!(
        text(server, "gen_ai.response.model").as_deref(),
        Some("gpt-4o-mini-2024-07-18")
    );
    assert!(text(server, "gen_ai.response.id").is_some_and(|id| id.starts_with("chatcmpl-")));
    let call = calls(&spans)[0];
    assert!(
        call.end_time_unix_nano - call.start_time_unix_nano >= 200_000_000,
        "the call span covers the stream"
    );
}

#[tokio::test]
async fn a_collector_that_hangs_costs_spans_never_requests() {
    let receiver = Receiver::start().await;
    receiver.hang.store(true, Ordering::SeqCst);
    let upstream = Upstream::json(br#"{"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.5]}], "model": "m", "usage": {"prompt_tokens": 1, "total_tokens": 1}}"#).await;
    let telemetry = format!(
        "[telemetry]\notlp_endpoint = \"{}\"\nqueue = 4\nexport_timeout_ms = 300\n",
        receiver.endpoint()
    );
    let probity = Probity::start(&config(
        "",
        &format!(
            "{}{telemetry}",
            route("openai", "/openai", &upstream.url(), "openai", "")
        ),
    ));
    let started = Instant::now();
    for _ in 0..40 {
        let got = post(
            &probity.url("/openai/v1/embeddings"),
            r#"{"model": "m", "input": "a"}"#,
        )
        .await;
        assert_eq!(got.status, 200);
    }
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "{took:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let full = probity
            .metric("probity_telemetry_dropped_spans_total{reason=\"queue_full\"}")
            .await
            .unwrap_or(0.0);
        // Whichever gives up first, the client's or the export's clock.
        let mut given_up = 0.0;
        for reason in ["timeout", "export_failed"] {
            given_up += probity
                .metric(&format!(
                    "probity_telemetry_dropped_spans_total{{reason=\"{reason}\"}}"
                ))
                .await
                .unwrap_or(0.0);
        }
        if full > 0.0 && given_up > 0.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "queue_full {full}, timeout or export_failed {given_up}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_standard_variable_turns_tracing_on_and_without_it_traceparent_passes_untouched() {
    let receiver = Receiver::start().await;
    let answer = chat_answer("24", "\"chatcmpl-1\"");
    let upstream = Upstream::start(move |_| Reply::json(200, answer.clone())).await;
    let routes = route("openai", "/openai", &upstream.url(), "openai", "");

    let plain = Probity::start(&config("", &routes));
    let got = post_traced(&plain.url("/openai/v1/chat/completions"), chat_request()).await;
    assert_eq!(got.status, 200);
    let sent = upstream.only_request();
    assert_eq!(
        sent.header("traceparent"),
        Some(format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01").as_str())
    );

    let by_env = Probity::start_with_env(
        &config("", &routes),
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint())],
    );
    let got = post_traced(&by_env.url("/openai/v1/chat/completions"), chat_request()).await;
    assert_eq!(got.status, 200);
    let spans = receiver.spans(2).await;
    assert_eq!(hex(&server_span(&spans).trace_id), CLIENT_TRACE);
    assert_eq!(receiver.paths.lock().unwrap()[0], "/v1/traces");
    assert!(
        by_env
            .metric("probity_telemetry_exported_spans_total")
            .await
            .unwrap()
            >= 2.0
    );
}

#[tokio::test]
async fn an_anthropic_stream_names_its_model_and_its_id_unless_the_id_was_nulled() {
    for (case, id) in [
        ("gen_messages_stream_pass", true),
        ("gen_messages_stream_start_id_empty", false),
    ] {
        let receiver = Receiver::start().await;
        let stream = fixture(&format!("anthropic/{case}/response.sse"));
        let upstream = Upstream::start(move |_| {
            Reply::stream("text/event-stream", vec![part(Before::Now, stream.clone())])
        })
        .await;
        let probity = traced(&receiver, &upstream, "anthropic", "");
        let got = post(
            &probity.url("/anthropic/v1/messages"),
            fixture(&format!("anthropic/{case}/request.json")),
        )
        .await;
        assert_eq!(got.status, 200, "{case}");
        let spans = receiver.spans(2).await;
        let server = server_span(&spans);
        assert_eq!(
            text(server, "gen_ai.provider.name").as_deref(),
            Some("anthropic")
        );
        assert_eq!(
            text(server, "gen_ai.operation.name").as_deref(),
            Some("chat")
        );
        assert!(text(server, "gen_ai.request.model").is_some(), "{case}");
        assert_eq!(
            text(server, "gen_ai.response.id").is_some(),
            id,
            "{case}: {server:#?}"
        );
        // The model is sound in both: a nulled id beside it does not hide it.
        assert!(
            text(server, "gen_ai.response.model").is_some_and(|m| m.starts_with("claude-")),
            "{case}: {server:#?}"
        );
        if !id {
            assert_eq!(
                strings(server, "probity.normalized"),
                ["/message/id"],
                "{case}"
            );
        }
    }
}

/// One ranking (crates/probity-judge/src/outcome.rs): an answer with a nulled figure whose
/// content also breaks its contract is `output_invalid` in its span and in
/// its capture alike, and the capture keeps both what was nulled and why
/// the answer was invalid.
#[tokio::test]
async fn an_answer_both_normalized_and_invalid_has_one_outcome_in_its_span_and_its_capture() {
    let receiver = Receiver::start().await;
    let answer = chat_answer("\"abc\"", "\"chatcmpl-CZ4kQ2bF7yqU1nR0aX9vT3mL8pWd\"");
    let upstream = Upstream::start(move |_| Reply::json(200, answer.clone())).await;
    let probity = traced(&receiver, &upstream, "openai", "");
    let mut request: serde_json::Value = serde_json::from_slice(&chat_request()).unwrap();
    request["response_format"] = serde_json::json!({"type": "json_object"});
    let got = post_traced(
        &probity.url("/openai/v1/chat/completions"),
        serde_json::to_vec(&request).unwrap(),
    )
    .await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(got.header("probity-output"), Some("invalid"));
    assert_eq!(
        got.header("probity-normalized"),
        Some("/usage/prompt_tokens")
    );
    let reason = got.header("probity-output-reason").unwrap().to_string();

    let spans = receiver.spans(2).await;
    let server = server_span(&spans);
    assert_eq!(
        text(server, "probity.outcome").as_deref(),
        Some("output_invalid")
    );
    assert_eq!(
        strings(server, "probity.output.reasons"),
        std::slice::from_ref(&reason)
    );
    assert_eq!(
        strings(server, "probity.normalized"),
        ["/usage/prompt_tokens"]
    );

    let listing = probity.admin_get("/captures").await.json();
    let capture = &listing["captures"][0];
    assert_eq!(capture["outcome"], "output_invalid", "{listing}");
    assert_eq!(
        capture["pointers"],
        serde_json::json!(["/usage/prompt_tokens"])
    );
    assert_eq!(capture["reasons"], serde_json::json!([reason]));
}

/// How an answer ended, for every way one can: the same on its log line,
/// its span and the metrics. hyper's server writes a body of known length
/// to its last byte and polls it no more, so an answer whose upstream sent
/// no last frame after its bytes (it closed, or spoke HTTP/1.0) was once
/// logged `client_gone` though the client read every byte.
#[tokio::test]
async fn every_way_an_answer_ends_is_recorded_as_it_ended() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const KEEP: Duration = Duration::from_secs(3);
    // (route, method, what the upstream writes, whether it then closes,
    // the ending, whether the client leaves after the first bytes)
    type Case = (
        &'static str,
        &'static str,
        &'static [u8],
        bool,
        &'static str,
        bool,
    );
    let cases: [Case; 11] = [
        (
            "length",
            "GET",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            false,
            "complete",
            false,
        ),
        (
            "length_then_close",
            "GET",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            true,
            "complete",
            false,
        ),
        (
            "connection_close",
            "GET",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
            true,
            "complete",
            false,
        ),
        (
            "http10_keep_alive",
            "GET",
            b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhello",
            false,
            "complete",
            false,
        ),
        (
            "chunked",
            "GET",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            false,
            "complete",
            false,
        ),
        (
            "eof",
            "GET",
            b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nhello",
            true,
            "complete",
            false,
        ),
        (
            "no_content",
            "GET",
            b"HTTP/1.1 204 No Content\r\n\r\n",
            false,
            "complete",
            false,
        ),
        (
            "not_modified",
            "GET",
            b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\n\r\n",
            false,
            "complete",
            false,
        ),
        (
            "head",
            "HEAD",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
            false,
            "complete",
            false,
        ),
        (
            "upstream_cut",
            "GET",
            b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhello",
            true,
            "cut",
            false,
        ),
        (
            "client_gone",
            "GET",
            b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhello",
            false,
            "client_gone",
            true,
        ),
    ];
    let receiver = Receiver::start().await;
    let mut routes = String::new();
    for (name, _, reply, closes, _, _) in cases {
        let (addr, _) = raw_upstream(move |mut stream| async move {
            let _ = stream.write_all(reply).await;
            // For the client who leaves, more bytes now and then: a write
            // is what shows hyper its client has gone.
            let started = Instant::now();
            while !closes && started.elapsed() < KEEP {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if name == "client_gone" && stream.write_all(b"more.").await.is_err() {
                    return;
                }
            }
        })
        .await;
        routes.push_str(&route(
            name,
            &format!("/{name}"),
            &format!("http://{addr}"),
            "passthrough",
            "",
        ));
    }
    routes.push_str(&format!(
        "[telemetry]\notlp_endpoint = \"{}\"\n",
        receiver.endpoint()
    ));
    let probity = Probity::start(&config("", &routes));
    for (name, method, _, _, _, leaves) in cases {
        let mut client = tokio::net::TcpStream::connect(probity.addr).await.unwrap();
        let head = format!("{method} /{name}/x HTTP/1.1\r\nHost: p\r\n\r\n");
        client.write_all(head.as_bytes()).await.unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 1024];
        // Read what comes: the whole answer (kept alive: up to its end),
        // or the first bytes of a body and then leave.
        let read = async {
            loop {
                let n = client.read(&mut buf).await.unwrap_or(0);
                seen.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&seen);
                let body_started =
                    text.contains("\r\n\r\nhello") || text.contains("\r\n\r\n5\r\nhello");
                let whole = match text.split_once("\r\n\r\n") {
                    Some((head, _))
                        if head.contains(" 204 ") || head.contains(" 304 ") || method == "HEAD" =>
                    {
                        true
                    }
                    Some((_, body))
                        if text.contains("Transfer-Encoding: chunked")
                            || text.contains("transfer-encoding: chunked") =>
                    {
                        body.ends_with("0\r\n\r\n")
                    }
                    Some((_, body)) => body.len() >= 5,
                    None => false,
                };
                if n == 0 || (leaves && body_started) || (!leaves && whole) {
                    return;
                }
            }
        };
        within(name, read).await;
        drop(client);
    }
    // Each line, once its answer ended (a cut stream's upstream closed;
    // the client who left is seen at the next write or its close).
    let started = Instant::now();
    let lines = loop {
        let lines: Vec<serde_json::Value> = probity
            .logs()
            .into_iter()
            .filter(|l| l["ending"].is_string())
            .collect();
        if lines.len() >= cases.len() || started.elapsed() > Duration::from_secs(10) {
            break lines;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let spans = receiver.spans(cases.len()).await;
    let metrics = get(&probity.admin_url("/metrics")).await.text();
    for (name, _, _, _, ending, _) in cases {
        let line = lines
            .iter()
            .find(|l| l["route"] == name)
            .unwrap_or_else(|| panic!("{name}: no log line in {lines:?}"));
        assert_eq!(line["ending"], ending, "{name}: {line}");
        let span = spans
            .iter()
            .filter(|s| s.kind == SpanKind::Server as i32)
            .find(|s| text(s, "probity.route").as_deref() == Some(name))
            .unwrap_or_else(|| panic!("{name}: no span"));
        let gone = attr(span, "probity.client_gone");
        assert_eq!(gone.is_some(), ending == "client_gone", "{name}: {gone:?}");
        let counted = |metric: &str| -> f64 {
            let route = format!("route=\"{name}\"");
            metrics
                .lines()
                .filter(|l| l.starts_with(&format!("{metric}{{")) && l.contains(&route))
                .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
                .sum()
        };
        let one_if = |yes: bool| f64::from(u8::from(yes));
        assert_eq!(
            counted("probity_client_gone_total"),
            one_if(ending == "client_gone"),
            "{name}"
        );
        assert_eq!(
            counted("probity_upstream_errors_total"),
            one_if(ending == "cut"),
            "{name}"
        );
    }
}
