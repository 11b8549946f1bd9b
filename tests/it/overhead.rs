//! `probity_overhead_seconds{route}`: the time probity adds to an exchange,
//! its duration less the waits on the upstream and on the client. A slow
//! upstream shows in the duration and not in the overhead, whatever path
//! the answer took; a request refused before any upstream call is all
//! overhead.

use std::time::Duration;

use crate::support::fixtures::measure;
use crate::support::*;
use tokio::io::AsyncWriteExt;

const DURATION: &str = "probity_request_duration_seconds";
const OVERHEAD: &str = "probity_overhead_seconds";
const UPSTREAM_DELAY: Duration = Duration::from_millis(300);

/// A debug build's own work on one small exchange is a few milliseconds:
/// an overhead this large can only be a wait counted as probity's.
const MOST_OVERHEAD: f64 = 0.1;

/// The sum and count of `metric`'s histogram for `route`.
fn histogram(metrics: &str, metric: &str, route: &str) -> (f64, f64) {
    let labels = [("route", route)];
    (
        measure(metrics, &format!("{metric}_sum"), &labels),
        measure(metrics, &format!("{metric}_count"), &labels),
    )
}

/// The one exchange `got` answered is counted once in both histograms: the
/// duration took at least `waited` and the overhead stayed under
/// [`MOST_OVERHEAD`] yet above nothing (a wait counted twice would leave
/// none).
async fn slow_upstream_is_not_overhead(probity: &Probity, got: &Got, waited: Duration) {
    let route = "openai";
    // Logged after it is counted: once the line is there, so is the count.
    let line = probity
        .request_log(got.header("x-request-id").unwrap())
        .await;
    let logged = line["overhead_ms"].as_f64().unwrap();
    assert!(logged < MOST_OVERHEAD * 1e3, "{line}");
    let metrics = get(&probity.admin_url("/metrics")).await.text();
    let (duration, exchanges) = histogram(&metrics, DURATION, route);
    let (overhead, counted) = histogram(&metrics, OVERHEAD, route);
    assert_eq!(exchanges, 1.0, "{metrics}");
    assert_eq!(counted, 1.0, "one overhead per exchange: {metrics}");
    assert!(
        duration >= waited.as_secs_f64(),
        "duration {duration} under the upstream's {waited:?}"
    );
    assert!(
        overhead > 0.0 && overhead < MOST_OVERHEAD,
        "overhead {overhead} of a {duration} s exchange"
    );
}

const EMBEDDING: &str = r#"{"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}], "model": "m", "usage": {"prompt_tokens": 2, "total_tokens": 2}}"#;
const EMBED_REQUEST: &str = r#"{"model": "m", "input": "x"}"#;

#[tokio::test]
async fn a_whole_answer_the_upstream_took_300_ms_to_head_costs_probity_little() {
    let (addr, _) = raw_upstream(|mut socket| async move {
        tokio::time::sleep(UPSTREAM_DELAY).await;
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            EMBEDDING.len()
        );
        let _ = socket.write_all(head.as_bytes()).await;
        let _ = socket.write_all(EMBEDDING.as_bytes()).await;
    })
    .await;
    let upstream = format!("http://{addr}");
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &upstream, "openai", ""),
    ));
    let got = post(&probity.url("/openai/v1/embeddings"), EMBED_REQUEST).await;
    assert_eq!(got.status, 200, "{}", got.text());
    slow_upstream_is_not_overhead(&probity, &got, UPSTREAM_DELAY).await;
}

#[tokio::test]
async fn a_whole_body_whose_bytes_come_late_costs_probity_little() {
    // The head at once, the body 300 ms later: read whole, then judged.
    let upstream = Upstream::start(|_| {
        Reply::stream(
            "application/json",
            vec![part(Before::Pause(UPSTREAM_DELAY), EMBEDDING)],
        )
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &upstream.url(), "openai", ""),
    ));
    let got = post(&probity.url("/openai/v1/embeddings"), EMBED_REQUEST).await;
    assert_eq!(got.status, 200, "{}", got.text());
    slow_upstream_is_not_overhead(&probity, &got, UPSTREAM_DELAY).await;
}

const CHAT_STREAM: &str = r#"{"model": "gpt-4o-mini", "stream": true, "stream_options": {"include_usage": true}, "messages": [{"role": "user", "content": "Hi"}]}"#;

#[tokio::test]
async fn a_stream_whose_upstream_pauses_between_events_costs_probity_little() {
    let stream = fixture("openai_chat_stream.sse");
    let parts: Vec<Vec<u8>> = stream
        .chunks(stream.len().div_ceil(4))
        .map(<[u8]>::to_vec)
        .collect();
    assert_eq!(parts.len(), 4);
    let pause = Duration::from_millis(100);
    let upstream = Upstream::start(move |_| {
        let parts = parts
            .iter()
            .map(|p| part(Before::Pause(pause), p.clone()))
            .collect();
        Reply::stream("text/event-stream", parts)
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &upstream.url(), "openai", ""),
    ));
    let got = post(&probity.url("/openai/v1/chat/completions"), CHAT_STREAM).await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(got.body, stream, "passed as it came");
    slow_upstream_is_not_overhead(&probity, &got, pause * 4).await;
}

#[tokio::test]
async fn a_passthrough_answer_that_comes_late_costs_probity_little() {
    // A model list is not inspected: relayed live as it comes.
    let upstream = Upstream::start(|_| {
        Reply::stream(
            "application/json",
            vec![
                part(Before::Pause(UPSTREAM_DELAY), r#"{"object": "list", "#),
                part(Before::Pause(UPSTREAM_DELAY), r#""data": []}"#),
            ],
        )
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &upstream.url(), "openai", ""),
    ));
    let got = get(&probity.url("/openai/v1/models")).await;
    assert_eq!(got.text(), r#"{"object": "list", "data": []}"#);
    slow_upstream_is_not_overhead(&probity, &got, UPSTREAM_DELAY * 2).await;
    // Nothing judged it: its line names no outcome.
    let line = probity
        .request_log(got.header("x-request-id").unwrap())
        .await;
    assert_eq!(line.get("outcome"), None, "{line}");
}

#[tokio::test]
async fn a_client_that_reads_slowly_is_the_clients_time_not_probitys() {
    // 4 MiB at once from the upstream, relayed (a passthrough) to a client
    // with a small receive buffer that takes 16 KiB every 5 ms: probity
    // waits on it for a second or more.
    let piece = vec![b'x'; 64 * 1024];
    let upstream = Upstream::start(move |_| {
        let parts = (0..64).map(|_| part(Before::Now, piece.clone())).collect();
        Reply::stream("application/octet-stream", parts)
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &upstream.url(), "openai", ""),
    ));
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(8 * 1024).unwrap();
    let addr = probity
        .url("")
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    let head = "GET /openai/v1/files/f/content HTTP/1.1\r\nhost: probity\r\nconnection: close\r\nx-request-id: slow-reader\r\n\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut received = 0;
    let mut buf = vec![0; 16 * 1024];
    loop {
        let n = tokio::io::AsyncReadExt::read(&mut stream, &mut buf)
            .await
            .unwrap();
        if n == 0 {
            break;
        }
        received += n;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(received > 4 * 1024 * 1024, "{received} bytes");
    let line = probity.request_log("slow-reader").await;
    let (duration, overhead) = (
        line["duration_ms"].as_f64().unwrap(),
        line["overhead_ms"].as_f64().unwrap(),
    );
    assert!(duration >= 500.0, "{line}");
    assert!(overhead < MOST_OVERHEAD * 1e3, "{line}");
}

#[tokio::test]
async fn a_batch_sent_as_chunks_counts_the_upstream_once_however_many_run_at_a_time() {
    // Three chunks, two at a time, each answered in 200 ms: the upstream
    // holds the batch about 400 ms of wall time, 600 ms of chunk time.
    let latency = Duration::from_millis(200);
    let upstream = Upstream::start(move |request| {
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        let inputs = body["input"].as_array().unwrap().len();
        let data: Vec<String> = (0..inputs)
            .map(|i| format!(r#"{{"object": "embedding", "index": {i}, "embedding": [0.5]}}"#))
            .collect();
        let answer = format!(
            r#"{{"object": "list", "data": [{}], "model": "m", "usage": {{"prompt_tokens": {inputs}, "total_tokens": {inputs}}}}}"#,
            data.join(", ")
        );
        Reply::stream("application/json", vec![part(Before::Pause(latency), answer)])
    })
    .await;
    let settings = "max_batch_inputs = 10\nmax_chunk_concurrency = 2";
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &upstream.url(), "openai", settings),
    ));
    let inputs: Vec<String> = (0..30).map(|i| format!("t{i}")).collect();
    let request = serde_json::json!({"model": "m", "input": inputs}).to_string();
    let got = post(&probity.url("/openai/v1/embeddings"), request).await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(upstream.requests().len(), 3);
    // The sum of the chunks' waits (600 ms) would exceed the exchange and
    // leave no overhead at all: `> 0` in the check says it was not summed.
    slow_upstream_is_not_overhead(&probity, &got, latency * 2).await;
}

#[tokio::test]
async fn an_upstream_that_times_out_is_the_upstreams_time_not_probitys() {
    let (addr, _) = raw_upstream(|socket| async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        drop(socket);
    })
    .await;
    let upstream = format!("http://{addr}");
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &upstream, "openai", "timeout_ms = 300"),
    ));
    let got = post(&probity.url("/openai/v1/embeddings"), EMBED_REQUEST).await;
    got.error(504, "upstream_timeout");
    slow_upstream_is_not_overhead(&probity, &got, UPSTREAM_DELAY).await;
}

#[tokio::test]
async fn a_request_refused_before_any_upstream_call_is_all_overhead() {
    let upstream = Upstream::json(b"{}").await;
    let probity = Probity::start(&config(
        "max_request_bytes = 1024",
        &route("openai", "/openai", &upstream.url(), "openai", ""),
    ));
    get(&probity.url("/nowhere")).await;
    post(&probity.url("/openai/v1/embeddings"), vec![b'x'; 4096])
        .await
        .error(413, "request_too_large");
    assert!(upstream.requests().is_empty());
    let metrics = get(&probity.admin_url("/metrics")).await.text();
    for route in ["-", "openai"] {
        let (duration, exchanges) = histogram(&metrics, DURATION, route);
        let (overhead, counted) = histogram(&metrics, OVERHEAD, route);
        assert_eq!((exchanges, counted), (1.0, 1.0), "{route}: {metrics}");
        // Nothing was waited on: the overhead is the duration, to the bit.
        assert_eq!(overhead, duration, "{route}");
    }
}
