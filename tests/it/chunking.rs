//! Embedding batches larger than the provider takes: split, sent
//! concurrently, stitched honestly.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::*;

const LIMIT: usize = 96;
const LATENCY: Duration = Duration::from_millis(50);

/// What the fake provider saw: the inputs of each call and when it came.
#[derive(Default)]
struct Calls {
    inputs: Vec<Vec<String>>,
    arrivals: Vec<Instant>,
}

impl Calls {
    /// Calls whose answers overlapped (each takes `LATENCY`).
    fn max_in_flight(&self) -> usize {
        self.arrivals
            .iter()
            .map(|t| {
                self.arrivals
                    .iter()
                    .filter(|u| *u <= t && t.duration_since(**u) < LATENCY)
                    .count()
            })
            .max()
            .unwrap_or(0)
    }
}

/// How a fake answer departs from a sound one, per call number.
#[derive(Clone, Copy, Default)]
struct Faults {
    /// This call's `prompt_tokens` is a string.
    malformed_usage: Option<usize>,
    /// This call omits `total_tokens`.
    missing_total: Option<usize>,
    /// This call's `prompt_tokens` is above its `total_tokens`: each is
    /// well-formed, and together they contradict each other.
    contradicting: Option<usize>,
    /// This call's id is a number.
    malformed_id: Option<usize>,
    /// This call drops its last vector.
    short: Option<usize>,
    /// This call never answers.
    silent: Option<usize>,
}

/// A provider that refuses more than `LIMIT` inputs, answers in `LATENCY`,
/// and gives input `t<i>` the vector `[i, 0.5]`.
async fn provider(calls: Arc<Mutex<Calls>>, faults: Faults) -> Upstream {
    Upstream::start(move |request| {
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        let key = ["input", "texts", "inputs"].into_iter().find(|k| body.get(k).is_some()).unwrap();
        let inputs: Vec<String> = body[key].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
        let n = {
            let mut calls = calls.lock().unwrap();
            calls.inputs.push(inputs.clone());
            calls.arrivals.push(Instant::now());
            calls.inputs.len() - 1
        };
        if inputs.len() > LIMIT {
            return Reply::json(400, r#"{"error": {"message": "too many inputs"}}"#);
        }
        let mut vectors: Vec<String> =
            inputs.iter().map(|t| format!("[{}, 0.5]", t.trim_start_matches('t'))).collect();
        if faults.short == Some(n) {
            vectors.pop();
        }
        let tokens = inputs.len() * 2;
        let usage = match (faults.malformed_usage == Some(n), faults.missing_total == Some(n)) {
            (true, _) => format!(r#"{{"prompt_tokens": "{tokens}", "total_tokens": {tokens}}}"#),
            (_, true) => format!(r#"{{"prompt_tokens": {tokens}}}"#),
            _ if faults.contradicting == Some(n) => {
                format!(r#"{{"prompt_tokens": {}, "total_tokens": {tokens}}}"#, tokens + 1)
            }
            _ => format!(r#"{{"prompt_tokens": {tokens}, "total_tokens": {tokens}}}"#),
        };
        let id = if faults.malformed_id == Some(n) { "7".to_string() } else { format!("\"emb-{}\"", inputs[0]) };
        let body = match request.target.as_str() {
            "/api/embed" => format!(r#"{{"model": "m", "embeddings": [{}], "prompt_eval_count": {tokens}}}"#, vectors.join(", ")),
            "/v2/embed" => format!(
                r#"{{"id": {id}, "embeddings": {{"float": [{}]}}, "texts": {}, "meta": {{"billed_units": {{"input_tokens": {tokens}}}}}, "response_type": "embeddings_by_type"}}"#,
                vectors.join(", "),
                serde_json::to_string(&inputs).unwrap()
            ),
            "/embed" => format!("[{}]", vectors.join(", ")),
            _ => {
                let data: Vec<String> = vectors
                    .iter()
                    .enumerate()
                    .map(|(i, v)| format!(r#"{{"object": "embedding", "index": {i}, "embedding": {v}}}"#))
                    .collect();
                format!(r#"{{"id": {id}, "object": "list", "data": [{}], "model": "m", "usage": {usage}}}"#, data.join(", "))
            }
        };
        let pause = if faults.silent == Some(n) { Duration::from_secs(30) } else { LATENCY };
        let mut reply = Reply::stream("application/json", vec![part(Before::Pause(pause), body)]);
        if request.target == "/embed" {
            reply = reply.header("x-compute-tokens", &tokens.to_string());
        }
        reply
    })
    .await
}

fn batch(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("t{i}")).collect()
}

fn probity_for(upstream: &Upstream, dialect: &str, extra: &str) -> Probity {
    let settings = format!("max_batch_inputs = {LIMIT}\nmax_chunk_concurrency = 2\n{extra}");
    Probity::start(&config(
        "",
        &route(
            dialect,
            &format!("/{dialect}"),
            &upstream.url(),
            dialect,
            &settings,
        ),
    ))
}

#[tokio::test]
async fn a_batch_of_250_becomes_three_calls_stitched_in_order() {
    let calls = Arc::new(Mutex::new(Calls::default()));
    let upstream = provider(calls.clone(), Faults::default()).await;
    let probity = probity_for(&upstream, "openai", "");
    let request =
        serde_json::json!({"model": "text-embedding-3-small", "input": batch(250)}).to_string();
    let got = post(&probity.url("/openai/v1/embeddings"), request).await;
    assert_eq!(got.status, 200, "{}", got.text());

    let (inputs, in_flight) = {
        let calls = calls.lock().unwrap();
        (calls.inputs.clone(), calls.max_in_flight())
    };
    let sizes: Vec<usize> = inputs.iter().map(Vec::len).collect();
    let mut sorted = sizes.clone();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(sorted, [96, 96, 58]);
    let mut seen: Vec<String> = inputs.iter().flatten().cloned().collect();
    seen.sort_by_key(|t| t[1..].parse::<usize>().unwrap());
    assert_eq!(
        seen,
        batch(250),
        "every input sent once, in consecutive slices"
    );
    assert!(inputs
        .iter()
        .any(|c| c.first().map(String::as_str) == Some("t192") && c.len() == 58));
    assert!(in_flight <= 2, "concurrency {in_flight} over the setting");

    let body = got.json();
    let data = body["data"].as_array().unwrap();
    assert_eq!(data.len(), 250);
    for (i, item) in data.iter().enumerate() {
        assert_eq!(item["index"], i, "indices renumbered 0..n-1");
        assert_eq!(item["embedding"][0], i, "vectors in input order");
    }
    assert_eq!(
        body["usage"],
        serde_json::json!({"prompt_tokens": 500, "total_tokens": 500})
    );
    assert_eq!(body["id"], "emb-t0", "the first chunk's id");
    assert_eq!(got.header("probity-normalized"), None);
    let id = got.header("x-request-id").unwrap();
    assert_eq!(got.header("probity-capture"), Some(id));
    let capture = probity.admin_get(&format!("/captures/{id}")).await;
    assert_eq!(capture.header("probity-capture-shape"), Some("chunks"));
    let chunks = capture.json()["chunks"].as_array().unwrap().clone();
    assert_eq!(chunks.len(), 3);
    assert_eq!(chunks[0]["status"], 200);
    let first: serde_json::Value =
        serde_json::from_str(chunks[0]["body"].as_str().unwrap()).unwrap();
    assert_eq!(first["data"].as_array().unwrap().len(), 96);
    let metrics = get(&probity.admin_url("/metrics")).await.text();
    assert_eq!(
        metric_value(
            &metrics,
            r#"probity_chunked_requests_total{route="openai"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        metric_value(&metrics, r#"probity_chunks_total{route="openai"}"#),
        Some(3.0)
    );
}

#[tokio::test]
async fn a_figure_malformed_or_missing_in_one_chunk_is_null_never_a_partial_sum() {
    let calls = Arc::new(Mutex::new(Calls::default()));
    let faults = Faults {
        malformed_usage: Some(1),
        missing_total: Some(2),
        ..Faults::default()
    };
    let upstream = provider(calls.clone(), faults).await;
    // One chunk at a time, so call numbers follow input order.
    let settings = format!("max_batch_inputs = {LIMIT}\nmax_chunk_concurrency = 1\n");
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &upstream.url(), "openai", &settings),
    ));
    let request = serde_json::json!({"input": batch(250)}).to_string();
    let got = post(&probity.url("/openai/v1/embeddings"), request).await;
    assert_eq!(got.status, 200, "{}", got.text());
    let body = got.json();
    assert!(
        body["usage"]["prompt_tokens"].is_null(),
        "no partial sum: {}",
        body["usage"]
    );
    assert!(
        body["usage"]["total_tokens"].is_null(),
        "one chunk omitted it: {}",
        body["usage"]
    );
    // No sound figure is left in the stitched record, but OpenAI's schema
    // requires `usage`: it keeps its object, as a single call's would.
    assert!(body["usage"].is_object(), "{}", body["usage"]);
    assert_eq!(
        got.header("probity-normalized"),
        Some("/usage/prompt_tokens,/usage/total_tokens")
    );
    assert_eq!(
        body["data"].as_array().unwrap().len(),
        250,
        "sound vectors are kept"
    );
}

/// A chunk whose figures contradict each other (prompt_tokens above
/// total_tokens) reported neither: their stitched sums are not reported,
/// though every other chunk's were sound and the sums would be too.
#[tokio::test]
async fn a_chunk_whose_figures_contradict_each_other_reports_none_to_the_sum() {
    let calls = Arc::new(Mutex::new(Calls::default()));
    let faults = Faults {
        contradicting: Some(1),
        ..Faults::default()
    };
    let upstream = provider(calls.clone(), faults).await;
    let settings = format!("max_batch_inputs = {LIMIT}\nmax_chunk_concurrency = 1\n");
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &upstream.url(), "openai", &settings),
    ));
    let request = serde_json::json!({"input": batch(250)}).to_string();
    let got = post(&probity.url("/openai/v1/embeddings"), request).await;
    assert_eq!(got.status, 200, "{}", got.text());
    let body = got.json();
    assert!(
        body["usage"]["prompt_tokens"].is_null(),
        "{}",
        body["usage"]
    );
    assert!(body["usage"]["total_tokens"].is_null(), "{}", body["usage"]);
    assert_eq!(
        got.header("probity-normalized"),
        Some("/usage/prompt_tokens,/usage/total_tokens")
    );
    assert_eq!(body["data"].as_array().unwrap().len(), 250);
    let metrics = get(&probity.admin_url("/metrics")).await.text();
    assert_eq!(
        metric_value(
            &metrics,
            r#"probity_figure_contradictions_total{route="openai",relation="prompt_tokens<=total_tokens"}"#
        ),
        Some(1.0)
    );
}

#[tokio::test]
async fn the_id_is_the_first_chunks_or_null() {
    let calls = Arc::new(Mutex::new(Calls::default()));
    let upstream = provider(
        calls,
        Faults {
            malformed_id: Some(0),
            ..Faults::default()
        },
    )
    .await;
    let settings = format!("max_batch_inputs = {LIMIT}\nmax_chunk_concurrency = 1\n");
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &upstream.url(), "openai", &settings),
    ));
    let got = post(
        &probity.url("/openai/v1/embeddings"),
        serde_json::json!({"input": batch(200)}).to_string(),
    )
    .await;
    assert_eq!(got.status, 200);
    assert!(got.json()["id"].is_null(), "never a later chunk's id");
    assert_eq!(got.header("probity-normalized"), Some("/id"));
}

#[tokio::test]
async fn a_chunk_one_vector_short_fails_the_whole_call() {
    let calls = Arc::new(Mutex::new(Calls::default()));
    let upstream = provider(
        calls,
        Faults {
            short: Some(1),
            ..Faults::default()
        },
    )
    .await;
    let settings = format!("max_batch_inputs = {LIMIT}\nmax_chunk_concurrency = 1\n");
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &upstream.url(), "openai", &settings),
    ));
    let got = post(
        &probity.url("/openai/v1/embeddings"),
        serde_json::json!({"input": batch(250)}).to_string(),
    )
    .await;
    let error = got.error(502, "provider_invalid_response");
    assert_eq!(error["code"], "embedding_count_mismatch");
    assert!(error["message"]
        .as_str()
        .unwrap()
        .contains("expected 96 vectors for 96 inputs, got 95"));
}

#[tokio::test]
async fn a_chunk_that_times_out_fails_the_call_and_the_rest_are_cancelled() {
    let calls = Arc::new(Mutex::new(Calls::default()));
    let upstream = provider(
        calls.clone(),
        Faults {
            silent: Some(0),
            ..Faults::default()
        },
    )
    .await;
    let settings =
        format!("max_batch_inputs = {LIMIT}\nmax_chunk_concurrency = 1\ntimeout_ms = 400\n");
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &upstream.url(), "openai", &settings),
    ));
    let started = Instant::now();
    let got = post(
        &probity.url("/openai/v1/embeddings"),
        serde_json::json!({"input": batch(250)}).to_string(),
    )
    .await;
    got.error(504, "upstream_timeout");
    assert!(started.elapsed() < Duration::from_secs(5));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        calls.lock().unwrap().inputs.len(),
        1,
        "the chunks after the failed one were never sent"
    );
}

#[tokio::test]
async fn each_dialect_splits_its_own_input_field() {
    for (dialect, path, request) in [
        (
            "ollama",
            "/ollama/api/embed",
            serde_json::json!({"model": "m", "input": batch(150)}),
        ),
        (
            "cohere",
            "/cohere/v2/embed",
            serde_json::json!({"model": "embed-v4.0", "texts": batch(150), "input_type": "search_document", "embedding_types": ["float"]}),
        ),
        (
            "tei",
            "/tei/embed",
            serde_json::json!({"inputs": batch(150)}),
        ),
        (
            "voyage",
            "/voyage/v1/embeddings",
            serde_json::json!({"model": "voyage-3", "input": batch(150)}),
        ),
        (
            "jina",
            "/jina/v1/embeddings",
            serde_json::json!({"model": "jina-embeddings-v3", "input": batch(150)}),
        ),
    ] {
        let calls = Arc::new(Mutex::new(Calls::default()));
        let upstream = provider(calls.clone(), Faults::default()).await;
        let probity = probity_for(&upstream, dialect, "");
        let got = post(&probity.url(path), request.to_string()).await;
        assert_eq!(got.status, 200, "{dialect}: {}", got.text());
        let mut sizes: Vec<usize> = calls.lock().unwrap().inputs.iter().map(Vec::len).collect();
        sizes.sort_unstable();
        assert_eq!(sizes, [54, 96], "{dialect}");
        let body = got.json();
        let first_components: Vec<serde_json::Value> = match dialect {
            "ollama" => body["embeddings"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v[0].clone())
                .collect(),
            "cohere" => body["embeddings"]["float"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v[0].clone())
                .collect(),
            "tei" => body
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v[0].clone())
                .collect(),
            _ => body["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["embedding"][0].clone())
                .collect(),
        };
        let expected: Vec<serde_json::Value> = (0..150).map(serde_json::Value::from).collect();
        assert_eq!(
            first_components, expected,
            "{dialect}: vectors in input order"
        );
        match dialect {
            "ollama" => assert_eq!(body["prompt_eval_count"], 300),
            "cohere" => {
                assert_eq!(body["meta"]["billed_units"]["input_tokens"], 300);
                assert_eq!(body["texts"].as_array().unwrap().len(), 150);
                assert_eq!(body["id"], "emb-t0");
            }
            "tei" => assert_eq!(got.header("x-compute-tokens"), Some("300")),
            _ => assert_eq!(body["usage"]["total_tokens"], 300),
        }
    }
}

#[tokio::test]
async fn a_batch_within_the_limit_is_sent_as_is() {
    let calls = Arc::new(Mutex::new(Calls::default()));
    let upstream = provider(calls.clone(), Faults::default()).await;
    let probity = probity_for(&upstream, "openai", "");
    let got = post(
        &probity.url("/openai/v1/embeddings"),
        serde_json::json!({"input": batch(96)}).to_string(),
    )
    .await;
    assert_eq!(got.status, 200);
    assert_eq!(got.header("probity-capture"), None);
    assert_eq!(calls.lock().unwrap().inputs.len(), 1);
}

/// Gemini's batchEmbedContents: `requests` split into calls of at most 100
/// (Google refuses more), `embeddings` stitched in order without an index,
/// `usageMetadata` summed only when every call reported it well-formed.
#[tokio::test]
async fn gemini_batches_split_on_requests_and_stitch_embeddings() {
    let calls = Arc::new(Mutex::new(Calls::default()));
    let seen = calls.clone();
    let upstream = Upstream::start(move |request| {
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        let requests = body["requests"].as_array().unwrap();
        if requests.len() > 100 {
            return Reply::json(
                400,
                r#"{"error": {"code": 400, "message": "* BatchEmbedContentsRequest.requests: at most 100 requests can be in one batch\n", "status": "INVALID_ARGUMENT"}}"#,
            );
        }
        let texts: Vec<String> = requests
            .iter()
            .map(|r| r["content"]["parts"][0]["text"].as_str().unwrap().to_string())
            .collect();
        let n = {
            let mut calls = seen.lock().unwrap();
            calls.inputs.push(texts.clone());
            calls.inputs.len()
        };
        let embeddings: Vec<String> = texts
            .iter()
            .map(|t| format!(r#"{{"values": [{}, 0.5, -0.25]}}"#, &t[1..]))
            .collect();
        // The second call (in arrival order) stringifies its prompt count.
        let prompt = if n == 2 {
            format!("\"{}\"", texts.len())
        } else {
            texts.len().to_string()
        };
        Reply::json(
            200,
            format!(
                r#"{{"embeddings": [{}], "usageMetadata": {{"promptTokenCount": {prompt}, "totalTokenCount": {}}}}}"#,
                embeddings.join(", "),
                texts.len()
            ),
        )
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route(
            "gemini",
            "/gemini",
            &upstream.url(),
            "gemini",
            "max_batch_inputs = 100\n",
        ),
    ));
    let requests: Vec<serde_json::Value> = batch(250)
        .into_iter()
        .map(|t| {
            serde_json::json!({"model": "models/gemini-embedding-001", "content": {"parts": [{"text": t}]}, "outputDimensionality": 3})
        })
        .collect();
    let got = post(
        &probity.url("/gemini/v1beta/models/gemini-embedding-001:batchEmbedContents"),
        serde_json::json!({ "requests": requests }).to_string(),
    )
    .await;
    assert_eq!(got.status, 200, "{}", got.text());
    let mut sizes: Vec<usize> = calls.lock().unwrap().inputs.iter().map(Vec::len).collect();
    sizes.sort_unstable();
    assert_eq!(sizes, [50, 100, 100]);
    let body = got.json();
    let embeddings = body["embeddings"].as_array().unwrap();
    assert_eq!(embeddings.len(), 250);
    for (i, item) in embeddings.iter().enumerate() {
        assert_eq!(item["values"][0], i, "vectors in input order");
        assert!(item.get("index").is_none(), "no index is invented");
    }
    assert_eq!(
        body["usageMetadata"],
        serde_json::json!({"promptTokenCount": null, "totalTokenCount": 250}),
        "a malformed count in one call is null, never a partial sum"
    );
    assert_eq!(
        got.header("probity-normalized"),
        Some("/usageMetadata/promptTokenCount")
    );
}

/// A provider for the chunk race: a chunk whose first input is `fail` is
/// refused (400) after `fail_after`; every other chunk answers sound
/// vectors after `ok_after`.
async fn racing_provider(fail: &'static str, fail_after: Duration, ok_after: Duration) -> Upstream {
    Upstream::start(move |request| {
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        let inputs: Vec<String> = body["input"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
        if inputs[0] == fail {
            let refusal = r#"{"error":{"message":"chunk refused","code":400}}"#;
            let mut reply = Reply::stream("application/json", vec![part(Before::Pause(fail_after), refusal)]);
            reply.status = 400;
            return reply;
        }
        let data: Vec<String> = inputs
            .iter()
            .enumerate()
            .map(|(i, _)| format!(r#"{{"object": "embedding", "index": {i}, "embedding": [0.5, 0.5]}}"#))
            .collect();
        let body = format!(
            r#"{{"object": "list", "data": [{}], "model": "m", "usage": {{"prompt_tokens": 3, "total_tokens": 3}}}}"#,
            data.join(", ")
        );
        Reply::stream("application/json", vec![part(Before::Pause(ok_after), body)])
    })
    .await
}

/// The first failure in input order is the answer, never a sibling that was
/// cancelled because of it (which once came back as a 500 "task was
/// cancelled", counted as probity's own fault). Each case is sent 50
/// times, 10 at a time, beside other batches in flight.
#[tokio::test]
async fn a_failing_chunk_is_the_answer_never_a_sibling_cancelled_for_it() {
    // (failing chunk's first input, its delay, the others' delay)
    let cases = [
        ("a3", 10, 80), // the middle chunk fails first, the last still running
        ("a0", 10, 80), // the first chunk fails, both later ones running
        ("a6", 10, 80), // the last chunk fails first
        ("a6", 80, 10), // the last chunk fails after the others answered
        ("a0", 80, 10), // the first fails after the later ones answered
    ];
    for concurrency in [1, 2, 3] {
        for (fail, fail_ms, ok_ms) in cases {
            let upstream = racing_provider(
                fail,
                Duration::from_millis(fail_ms),
                Duration::from_millis(ok_ms),
            )
            .await;
            let settings = format!("max_batch_inputs = 3\nmax_chunk_concurrency = {concurrency}\n");
            let probity = Probity::start(&config(
                "",
                &route("openai", "/openai", &upstream.url(), "openai", &settings),
            ));
            let url = probity.url("/openai/v1/embeddings");
            let inputs: Vec<String> = (0..9).map(|i| format!("a{i}")).collect();
            let request = serde_json::json!({"model": "m", "input": inputs}).to_string();
            // Load: sound batches of the same route in flight meanwhile.
            let sound: Vec<String> = (0..9).map(|i| format!("b{i}")).collect();
            let sound = serde_json::json!({"model": "m", "input": sound}).to_string();
            for _ in 0..5 {
                let mut runs = tokio::task::JoinSet::new();
                for _ in 0..10 {
                    let (to, request) = (url.clone(), request.clone());
                    runs.spawn(async move { post(&to, request).await });
                    let (to, sound) = (url.clone(), sound.clone());
                    runs.spawn(async move { post(&to, sound).await });
                }
                let mut refused = 0;
                while let Some(got) = runs.join_next().await {
                    let got = got.unwrap();
                    match got.status.as_u16() {
                        200 => {}
                        400 => {
                            assert_eq!(
                                got.text(),
                                r#"{"error":{"message":"chunk refused","code":400}}"#,
                                "the provider's own refusal, as it came"
                            );
                            refused += 1;
                        }
                        other => panic!(
                            "fail {fail} ({fail_ms} ms, others {ok_ms} ms), concurrency \
                             {concurrency}: {other} {}",
                            got.text()
                        ),
                    }
                }
                assert_eq!(refused, 10, "every failing batch answered by its failure");
            }
            assert_eq!(
                probity
                    .metric(r#"probity_internal_errors_total{route="openai"}"#)
                    .await
                    .unwrap_or(0.0),
                0.0,
                "a chunk's failure is never counted as probity's own"
            );
        }
    }
}
