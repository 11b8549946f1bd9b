//! The fake provider of the load benchmark (`benches/load/run`): an
//! OpenAI-shaped upstream that answers from bodies generated once at start,
//! so that what a load run measures is the proxy in front of it.
//!
//! `cargo build --release --example load-provider`, then
//! `load-provider [--listen 127.0.0.1:0] [--huge-mb 100]`. It prints one JSON
//! line on stdout once it listens (its address, each body's size and how
//! many inputs each embeddings request must carry) and serves:
//!
//! - `POST …/chat/completions`: a chat completion of about 1.4 KB; with
//!   `"stream": true` in the request, an SSE stream of chat chunks ending
//!   `data: [DONE]`, written at once, or one event a second for N seconds
//!   when the request carries `x-bench-slow: N`;
//! - `POST …/embeddings`: 16 vectors of 1536 floats (about 540 KB), the answer
//!   to a request of 16 inputs; compressed once at start, sent in zstd or
//!   gzip to a request whose `Accept-Encoding` names it (zstd first), as a
//!   provider behind a compressing front does;
//! - `POST …/huge/embeddings`: `--huge-mb` MB of the same vectors, the answer
//!   to a request of `huge_inputs` inputs;
//! - `POST …/normalize10/embeddings`: the embeddings answer, but every tenth
//!   one (the 10th, 20th, … of the process) carries `"prompt_tokens"` as a
//!   string, a malformed figure probity normalizes and captures.
//!
//! Bodies are never checked: the benchmark sends the matching requests.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "tests and benches fail loudly: the request path's lints do not apply"
)]

use std::convert::Infallible;
use std::fmt::Write as _;
use std::io::Write as _;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::time::{Interval, MissedTickBehavior};

const DIMENSIONS: usize = 1536;
const EMBEDDINGS_INPUTS: usize = 16;
const STREAM_TOKENS: usize = 20;

/// Every body, generated once.
struct Bodies {
    chat: Bytes,
    embeddings: Bytes,
    /// `embeddings` in gzip (level 6) and in zstd (level 3), the codings'
    /// usual server defaults.
    embeddings_gzip: Bytes,
    embeddings_zstd: Bytes,
    /// `embeddings` with its `prompt_tokens` as a string.
    malformed: Bytes,
    /// Answers of `…/normalize10/embeddings` so far.
    normalize10: AtomicU64,
    huge: Option<Bytes>,
    /// role chunk, `STREAM_TOKENS` content chunks, finish, usage, `[DONE]`.
    stream: Vec<Bytes>,
}

/// xorshift64: deterministic values, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Roughly normal, standard deviation about 0.023 (what unit-length
    /// 1536-dimension vectors hold), never below 1e-4 in magnitude, so that
    /// the shortest round-trip form is a plain decimal as OpenAI writes it
    /// (`-0.0069292834`).
    fn component(&mut self) -> f32 {
        let sum: f64 = (0..4)
            .map(|_| (self.next() >> 11) as f64 / (1u64 << 53) as f64)
            .sum();
        let v = ((sum - 2.0) * 0.04) as f32;
        if v.abs() < 1e-4 {
            v.signum() * (v.abs() + 1e-3)
        } else {
            v
        }
    }
}

/// One `data` item, pretty-printed as the API writes it.
fn push_vector(body: &mut String, rng: &mut Rng, index: usize) {
    let _ = write!(
        body,
        "    {{\n      \"object\": \"embedding\",\n      \"index\": {index},\n      \"embedding\": [\n"
    );
    for d in 0..DIMENSIONS {
        let sep = if d + 1 < DIMENSIONS { "," } else { "" };
        let _ = writeln!(body, "        {}{sep}", rng.component());
    }
    body.push_str("      ]\n    }");
}

/// An OpenAI embeddings response of `vectors` vectors, or, with `vectors`
/// 0, of as many as reach `min_bytes`. Returns the body and its vector count.
fn embeddings_body(vectors: usize, min_bytes: usize, seed: u64) -> (Bytes, usize) {
    let mut rng = Rng(seed);
    let mut body = String::with_capacity(min_bytes.max(vectors * DIMENSIONS * 24) + 4096);
    body.push_str("{\n  \"object\": \"list\",\n  \"data\": [\n");
    let mut count = 0;
    while (vectors > 0 && count < vectors) || (vectors == 0 && body.len() < min_bytes) {
        if count > 0 {
            body.push_str(",\n");
        }
        push_vector(&mut body, &mut rng, count);
        count += 1;
    }
    let tokens = count * 4;
    let _ = write!(
        body,
        "\n  ],\n  \"model\": \"text-embedding-3-small\",\n  \"usage\": {{\n    \"prompt_tokens\": {tokens},\n    \"total_tokens\": {tokens}\n  }}\n}}\n"
    );
    (Bytes::from(body), count)
}

const ANSWER: &str = "The sky looks blue because the molecules of the air scatter short \
wavelengths of sunlight far more strongly than long ones. This is Rayleigh scattering: its \
strength grows as the inverse fourth power of the wavelength, so blue light is scattered about \
five times more than red and reaches the eye from every direction of the sky. At sunset the \
light crosses much more air, most of the blue is scattered away before it arrives, and what is \
left looks orange and red. Violet is scattered even more than blue, but sunlight carries less \
of it and the eye is less sensitive to it, so the sky looks blue rather than violet.";

/// A chat completion as the API writes it (pretty-printed), about 1.4 KB.
fn chat_body() -> Bytes {
    let content = serde_json::to_string(ANSWER).unwrap();
    Bytes::from(format!(
        r#"{{
  "id": "chatcmpl-CZ4kQ2bF7yqU1nR0aX9vT3mL8pWd",
  "object": "chat.completion",
  "created": 1764410400,
  "model": "gpt-4o-mini-2024-07-18",
  "choices": [
    {{
      "index": 0,
      "message": {{
        "role": "assistant",
        "content": {content},
        "refusal": null,
        "annotations": []
      }},
      "logprobs": null,
      "finish_reason": "stop"
    }}
  ],
  "usage": {{
    "prompt_tokens": 31,
    "completion_tokens": 118,
    "total_tokens": 149,
    "prompt_tokens_details": {{
      "cached_tokens": 0,
      "audio_tokens": 0
    }},
    "completion_tokens_details": {{
      "reasoning_tokens": 0,
      "audio_tokens": 0,
      "accepted_prediction_tokens": 0,
      "rejected_prediction_tokens": 0
    }}
  }},
  "service_tier": "default",
  "system_fingerprint": "fp_560af6e559"
}}
"#
    ))
}

/// A streamed chat completion with usage (`stream_options.include_usage`).
fn stream_events() -> Vec<Bytes> {
    const HEAD: &str = r#""id":"chatcmpl-CZ5aB1cD2eF3gH4iJ5kL6mN7oP8q","object":"chat.completion.chunk","created":1764410460,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_560af6e559""#;
    let event = |rest: String| Bytes::from(format!("data: {{{HEAD},{rest}}}\n\n"));
    let mut events = vec![event(
        r#""choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null"#.into(),
    )];
    for (i, word) in ANSWER.split(' ').take(STREAM_TOKENS).enumerate() {
        let word = serde_json::to_string(&if i == 0 {
            word.to_string()
        } else {
            format!(" {word}")
        })
        .unwrap();
        events.push(event(format!(
            r#""choices":[{{"index":0,"delta":{{"content":{word}}},"logprobs":null,"finish_reason":null}}],"usage":null"#
        )));
    }
    events.push(event(
        r#""choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null"#
            .into(),
    ));
    events.push(event(format!(
        r#""choices":[],"usage":{{"prompt_tokens":12,"completion_tokens":{STREAM_TOKENS},"total_tokens":{},"prompt_tokens_details":{{"cached_tokens":0,"audio_tokens":0}},"completion_tokens_details":{{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}}"#,
        12 + STREAM_TOKENS
    )));
    events.push(Bytes::from_static(b"data: [DONE]\n\n"));
    events
}

/// An SSE body: one frame per event, the first `paced` events one `pace`
/// apart (the first at once), the rest as fast as the reader takes them.
struct Events {
    frames: std::vec::IntoIter<Bytes>,
    pace: Option<Interval>,
    paced: usize,
}

impl Body for Events {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        if this.paced > 0 {
            if let Some(pace) = this.pace.as_mut() {
                if pace.poll_tick(cx).is_pending() {
                    return Poll::Pending;
                }
                this.paced -= 1;
            }
        }
        Poll::Ready(this.frames.next().map(|b| Ok(Frame::data(b))))
    }
}

/// An SSE stream: `slow` seconds of one event a second (role and content
/// chunks, as many as the stream has), then the rest at once.
fn sse(
    bodies: &Bodies,
    slow: u64,
) -> Response<http_body_util::combinators::UnsyncBoxBody<Bytes, Infallible>> {
    let mut frames = Vec::new();
    if slow > 0 {
        // Repeat content chunks so that a long stream has `slow` paced events.
        let content = &bodies.stream[1..=STREAM_TOKENS];
        frames.push(bodies.stream[0].clone());
        frames.extend(content.iter().cycle().take(slow as usize).cloned());
        frames.extend(bodies.stream[STREAM_TOKENS + 1..].iter().cloned());
    } else {
        frames.extend(bodies.stream.iter().cloned());
    }
    let pace = (slow > 0).then(|| {
        let mut pace = tokio::time::interval(Duration::from_secs(1));
        pace.set_missed_tick_behavior(MissedTickBehavior::Delay);
        pace
    });
    let body = Events {
        frames: frames.into_iter(),
        pace,
        paced: slow as usize + 1,
    };
    Response::builder()
        .header("content-type", "text/event-stream; charset=utf-8")
        .header("cache-control", "no-cache")
        // What SSE servers send so that an nginx in front passes each event
        // at once instead of filling its buffer first.
        .header("x-accel-buffering", "no")
        .body(body.boxed_unsync())
        .unwrap()
}

fn whole(body: Bytes) -> Response<http_body_util::combinators::UnsyncBoxBody<Bytes, Infallible>> {
    Response::builder()
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(body).boxed_unsync())
        .unwrap()
}

/// The coding a request's `Accept-Encoding` asks that this provider sends.
fn coding(accept: &str) -> Option<&'static str> {
    let named = |coding: &str| accept.split(',').any(|c| c.trim().starts_with(coding));
    if named("zstd") {
        Some("zstd")
    } else if named("gzip") {
        Some("gzip")
    } else {
        None
    }
}

fn answer(
    bodies: &Bodies,
    path: &str,
    (slow, accept): (u64, &str),
    request: &[u8],
) -> Response<http_body_util::combinators::UnsyncBoxBody<Bytes, Infallible>> {
    let streamed = || {
        request.windows(13).any(|w| w == b"\"stream\":true")
            || request.windows(14).any(|w| w == b"\"stream\": true")
    };
    if path.ends_with("/chat/completions") {
        if streamed() {
            sse(bodies, slow)
        } else {
            whole(bodies.chat.clone())
        }
    } else if path.ends_with("/huge/embeddings") {
        match &bodies.huge {
            Some(huge) => whole(huge.clone()),
            None => status(StatusCode::NOT_FOUND),
        }
    } else if path.ends_with("/normalize10/embeddings") {
        let n = bodies.normalize10.fetch_add(1, Ordering::Relaxed) + 1;
        whole(if n % 10 == 0 {
            bodies.malformed.clone()
        } else {
            bodies.embeddings.clone()
        })
    } else if path.ends_with("/embeddings") {
        let (body, coding) = match coding(accept) {
            Some("zstd") => (bodies.embeddings_zstd.clone(), "zstd"),
            Some(_) => (bodies.embeddings_gzip.clone(), "gzip"),
            None => return whole(bodies.embeddings.clone()),
        };
        let mut response = whole(body);
        let value = http::HeaderValue::from_static(coding);
        response.headers_mut().insert("content-encoding", value);
        response
    } else if path == "/v1/traces" {
        // probity's OTLP export in the `probity-traced` runs: an empty
        // ExportTraceServiceResponse is an empty protobuf message.
        Response::builder()
            .header("content-type", "application/x-protobuf")
            .body(http_body_util::Empty::new().boxed_unsync())
            .unwrap()
    } else {
        status(StatusCode::NOT_FOUND)
    }
}

fn status(
    code: StatusCode,
) -> Response<http_body_util::combinators::UnsyncBoxBody<Bytes, Infallible>> {
    Response::builder()
        .status(code)
        .body(http_body_util::Empty::new().boxed_unsync())
        .unwrap()
}

fn main() {
    let mut listen = "127.0.0.1:0".to_string();
    let mut huge_mb: usize = 0;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--listen" => listen = args.next().expect("--listen ADDR"),
            "--huge-mb" => {
                huge_mb = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--huge-mb N")
            }
            other => {
                eprintln!("usage: load-provider [--listen ADDR] [--huge-mb N] (got {other:?})");
                std::process::exit(2);
            }
        }
    }
    let (embeddings, _) = embeddings_body(EMBEDDINGS_INPUTS, 0, 0x2545_f491_4f6c_dd1d);
    let (huge, huge_inputs) = if huge_mb > 0 {
        let (body, count) = embeddings_body(0, huge_mb * 1_000_000, 0x9e37_79b9_7f4a_7c15);
        (Some(body), count)
    } else {
        (None, 0)
    };
    let tokens = format!("\"prompt_tokens\": {}", EMBEDDINGS_INPUTS * 4);
    let malformed = String::from_utf8_lossy(&embeddings).replacen(
        &tokens,
        &format!("\"prompt_tokens\": \"{}\"", EMBEDDINGS_INPUTS * 4),
        1,
    );
    assert_ne!(
        malformed.as_bytes(),
        &embeddings[..],
        "no prompt_tokens to malform"
    );
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
    gzip.write_all(&embeddings).unwrap();
    let embeddings_gzip = Bytes::from(gzip.finish().unwrap());
    let embeddings_zstd = Bytes::from(zstd::stream::encode_all(&embeddings[..], 3).unwrap());
    let bodies = Arc::new(Bodies {
        chat: chat_body(),
        embeddings_gzip,
        embeddings_zstd,
        malformed: Bytes::from(malformed),
        normalize10: AtomicU64::new(0),
        embeddings,
        huge,
        stream: stream_events(),
    });
    // One thread: it shares its core with the load generator.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(serve(listen, bodies, huge_inputs));
}

async fn serve(listen: String, bodies: Arc<Bodies>, huge_inputs: usize) {
    let listener = TcpListener::bind(&listen).await.unwrap();
    let ready = serde_json::json!({
        "listen": listener.local_addr().unwrap().to_string(),
        "chat_bytes": bodies.chat.len(),
        "embeddings_bytes": bodies.embeddings.len(),
        "embeddings_gzip_bytes": bodies.embeddings_gzip.len(),
        "embeddings_zstd_bytes": bodies.embeddings_zstd.len(),
        "embeddings_inputs": EMBEDDINGS_INPUTS,
        "huge_bytes": bodies.huge.as_ref().map_or(0, Bytes::len),
        "huge_inputs": huge_inputs,
        "stream_events": bodies.stream.len(),
    });
    let mut stdout = std::io::stdout();
    writeln!(stdout, "{ready}").unwrap();
    stdout.flush().unwrap();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of descriptors, say: let some close.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let bodies = bodies.clone();
        let service = service_fn(move |request: Request<Incoming>| {
            let bodies = bodies.clone();
            async move {
                let path = request.uri().path().to_string();
                let slow = request
                    .headers()
                    .get("x-bench-slow")
                    .and_then(|v| v.to_str().ok()?.parse().ok())
                    .unwrap_or(0u64);
                let accept = request
                    .headers()
                    .get("accept-encoding")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                let body = match request.into_body().collect().await {
                    Ok(body) => body.to_bytes(),
                    Err(_) => Bytes::new(),
                };
                Ok::<_, Infallible>(answer(&bodies, &path, (slow, &accept), &body))
            }
        });
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
