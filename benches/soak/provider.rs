//! The fake provider of the soak run (`benches/soak/run`): four dialects on
//! one port, each answer chosen by the request, each body unique to its
//! request, and every body's SHA-256 sent beside it, so that the client can
//! tell, request by request, whether the bytes that reached it through
//! probity are the bytes the upstream sent.
//!
//! `cargo build --release --example soak-provider`, then
//! `soak-provider [--listen 127.0.0.1:0]`. It prints one JSON line on stdout
//! once it listens. Paths (wire formats as the providers write them, see
//! `tests/fixtures/`):
//!
//! - `…/v1/chat/completions`: OpenAI chat, whole, or SSE with `"stream": true`;
//! - `…/v1/embeddings`: OpenAI, one vector per input (`EMBED_INPUTS`);
//! - `…/v1/messages`: Anthropic messages, always SSE;
//! - `…/v2/embed`, `…/v2/rerank`: Cohere v2 (`EMBED_INPUTS` texts; rerank
//!   of `RERANK_DOCUMENTS` documents, `top_n` `RERANK_TOP_N`);
//! - `…/api/embed`: Ollama embeddings; `…/api/chat`: Ollama NDJSON stream.
//!
//! The request's `x-soak-id` (a number) seeds the body; `x-soak-case` picks
//! what the upstream does:
//!
//! - `ok`: a valid body;
//! - `malformed`: a valid body with one malformed figure (named in
//!   `x-soak-pointers`; `x-soak-nulled-sha256` is the body with that figure
//!   `null`, what probity must send);
//! - `broken`: a payload invariant broken (probity: 502);
//! - `reset`: the head, half the declared body, then the connection closed;
//! - `hang`: nothing for `HANG` (past the route's `timeout_ms`);
//! - `truncated`: the JSON cut, its `content-length` right;
//! - `cut` (streams): a few events, then the connection closed.
//!
//! Every answer carries `x-soak-sha256` (of the body as sent) and
//! `x-soak-id` (echoed).

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "tests and benches fail loudly: the request path's lints do not apply"
)]

use std::convert::Infallible;
use std::fmt::Write as _;
use std::future::Future as _;
use std::io::Write as _;
use std::pin::Pin;
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

const EMBED_INPUTS: usize = 8;
const DIMENSIONS: usize = 256;
const RERANK_DOCUMENTS: usize = 5;
const RERANK_TOP_N: usize = 3;
const STREAM_WORDS: usize = 12;
/// Longer than the soak routes' `timeout_ms`.
const HANG: Duration = Duration::from_secs(3);

type Boxed = http_body_util::combinators::UnsyncBoxBody<Bytes, std::io::Error>;

/// xorshift64, seeded by the request id: every body is unique to its request.
struct Rng(u64);

impl Rng {
    fn new(id: u64) -> Self {
        Self(id.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A component in (-0.1, 0.1), never tiny (so it prints as a plain decimal).
    fn component(&mut self) -> f32 {
        let v = ((self.next() >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 0.2;
        let v = v as f32;
        if v.abs() < 1e-3 {
            0.0123
        } else {
            v
        }
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn sha256_hex(data: &[u8]) -> String {
    let digest = sha256(data);
    let mut out = String::with_capacity(64);
    for b in digest {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// FIPS 180-4 SHA-256 (no dependency: the example stays inside the crate's
/// own dependency set).
fn sha256(data: &[u8]) -> [u8; 32] {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];
    let mut message = data.to_vec();
    let bits = (data.len() as u64).wrapping_mul(8);
    message.push(0x80);
    while message.len() % 64 != 56 {
        message.push(0);
    }
    message.extend_from_slice(&bits.to_be_bytes());
    for block in message.chunks_exact(64) {
        let mut w = [0u32; 64];
        for (i, word) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (slot, v) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *slot = slot.wrapping_add(v);
        }
    }
    let mut out = [0u8; 32];
    for (i, v) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&v.to_be_bytes());
    }
    out
}

/// A body with one figure slot: `{FIG}` in `template` is the sound or the
/// malformed value; `null` there is what probity must send for the latter.
struct Doc {
    template: String,
    sound: String,
    malformed: &'static str,
    pointer: &'static str,
}

impl Doc {
    fn render(&self, value: &str) -> Bytes {
        Bytes::from(self.template.replacen("{FIG}", value, 1))
    }
}

fn vector(rng: &mut Rng, out: &mut String) {
    out.push('[');
    for d in 0..DIMENSIONS {
        if d > 0 {
            out.push(',');
        }
        let _ = write!(out, "{}", rng.component());
    }
    out.push(']');
}

/// OpenAI embeddings, pretty-printed as the API writes them; `vectors`
/// may be short of the inputs (`broken`).
fn openai_embeddings(id: u64, vectors: usize) -> Doc {
    let mut rng = Rng::new(id);
    let mut t = String::from("{\n  \"object\": \"list\",\n  \"data\": [\n");
    for i in 0..vectors {
        if i > 0 {
            t.push_str(",\n");
        }
        let _ = write!(
            t,
            "    {{\n      \"object\": \"embedding\",\n      \"index\": {i},\n      \"embedding\": "
        );
        vector(&mut rng, &mut t);
        t.push_str("\n    }");
    }
    let tokens = 3 + rng.below(40);
    let _ = write!(
        t,
        "\n  ],\n  \"model\": \"text-embedding-3-small\",\n  \"usage\": {{\n    \"prompt_tokens\": {{FIG}},\n    \"total_tokens\": {tokens}\n  }}\n}}\n"
    );
    Doc {
        template: t,
        sound: tokens.to_string(),
        malformed: "\"8\"",
        pointer: "/usage/prompt_tokens",
    }
}

fn openai_chat(id: u64, broken: bool) -> Doc {
    let mut rng = Rng::new(id);
    let completion = 5 + rng.below(200);
    let choices = if broken {
        // A choice that is not an object: `choice_not_object`.
        "[\"stop\"]".to_string()
    } else {
        format!(
            r#"[
    {{
      "index": 0,
      "message": {{
        "role": "assistant",
        "content": "Answer {id}: the sky is blue because air scatters short wavelengths ({completion} tokens).",
        "refusal": null,
        "annotations": []
      }},
      "logprobs": null,
      "finish_reason": "stop"
    }}
  ]"#
        )
    };
    let template = format!(
        r#"{{
  "id": "chatcmpl-soak{id}",
  "object": "chat.completion",
  "created": 1764410400,
  "model": "gpt-4o-mini-2024-07-18",
  "choices": {choices},
  "usage": {{
    "prompt_tokens": 31,
    "completion_tokens": {{FIG}},
    "total_tokens": {}
  }},
  "service_tier": "default",
  "system_fingerprint": "fp_560af6e559"
}}
"#,
        31 + completion
    );
    Doc {
        template,
        sound: completion.to_string(),
        malformed: "-5",
        pointer: "/usage/completion_tokens",
    }
}

fn cohere_embed(id: u64, vectors: usize) -> Doc {
    let mut rng = Rng::new(id);
    let mut t = format!("{{\"id\":\"soak-{id}\",\"embeddings\":{{\"float\":[");
    for i in 0..vectors {
        if i > 0 {
            t.push(',');
        }
        vector(&mut rng, &mut t);
    }
    t.push_str("]},\"texts\":[");
    for i in 0..EMBED_INPUTS {
        if i > 0 {
            t.push(',');
        }
        let _ = write!(t, "\"text {i}\"");
    }
    let tokens = 8 + rng.below(50);
    t.push_str("],\"meta\":{\"api_version\":{\"version\":\"2\"},\"billed_units\":{\"input_tokens\":{FIG},\"images\":0}},\"response_type\":\"embeddings_by_type\"}");
    Doc {
        template: t,
        sound: tokens.to_string(),
        malformed: "-2",
        pointer: "/meta/billed_units/input_tokens",
    }
}

fn cohere_rerank(id: u64, broken: bool) -> Doc {
    let mut rng = Rng::new(id);
    let mut t = String::from("{\"results\":[");
    let mut indices: Vec<usize> = (0..RERANK_DOCUMENTS).collect();
    for i in (1..indices.len()).rev() {
        indices.swap(i, rng.below(i as u64 + 1) as usize);
    }
    if broken {
        indices[1] = indices[0]; // `rerank_index_duplicate`
    }
    let mut score = 0.999;
    for (n, index) in indices.iter().take(RERANK_TOP_N).enumerate() {
        if n > 0 {
            t.push(',');
        }
        score *= 0.5 + (rng.below(400) as f64) / 1000.0;
        let _ = write!(t, "{{\"index\":{index},\"relevance_score\":{score:.7}}}");
    }
    t.push_str("],\"id\":{FIG},\"meta\":{\"api_version\":{\"version\":\"2\"},\"billed_units\":{\"search_units\":1}}}");
    Doc {
        template: t,
        sound: format!("\"soak-{id}\""),
        malformed: "\"\"",
        pointer: "/id",
    }
}

fn ollama_embed(id: u64, ragged: bool) -> Doc {
    let mut rng = Rng::new(id);
    let mut t = String::from("{\"model\":\"nomic-embed-text\",\"embeddings\":[");
    for i in 0..EMBED_INPUTS {
        if i > 0 {
            t.push(',');
        }
        vector(&mut rng, &mut t);
        if ragged && i == 1 {
            t.pop();
            t.push_str(",0.5]"); // one dimension more: `embedding_dimension_mismatch`
        }
    }
    let count = 8 + rng.below(30);
    t.push_str(
        "],\"total_duration\":14143917,\"load_duration\":1019500,\"prompt_eval_count\":{FIG}}",
    );
    Doc {
        template: t,
        sound: count.to_string(),
        malformed: "\"4\"",
        pointer: "/prompt_eval_count",
    }
}

/// An OpenAI chat stream with usage; the slot is in the usage chunk.
fn openai_stream(id: u64) -> (Vec<String>, Doc) {
    let head = format!(
        r#""id":"chatcmpl-soak{id}","object":"chat.completion.chunk","created":1764410460,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_560af6e559""#
    );
    let event = |rest: &str| format!("data: {{{head},{rest}}}\n\n");
    let mut events = vec![event(
        r#""choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null"#,
    )];
    for w in 0..STREAM_WORDS {
        events.push(event(&format!(
            r#""choices":[{{"index":0,"delta":{{"content":" word{w}-{id}"}},"logprobs":null,"finish_reason":null}}],"usage":null"#
        )));
    }
    events.push(event(
        r#""choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null"#,
    ));
    events.push(event(&format!(
        r#""choices":[],"usage":{{"prompt_tokens":{{FIG}},"completion_tokens":{STREAM_WORDS},"total_tokens":{}}}"#,
        12 + STREAM_WORDS
    )));
    events.push("data: [DONE]\n\n".into());
    let template = events.concat();
    (
        events,
        Doc {
            template,
            sound: "12".into(),
            malformed: "\"12\"",
            pointer: "/usage/prompt_tokens",
        },
    )
}

fn anthropic_stream(id: u64) -> (Vec<String>, Doc) {
    let mut events = vec![
        format!("event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"msg_soak{id}\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{{\"input_tokens\":25,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":1}}}}}}\n\n"),
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n".into(),
        "event: ping\ndata: {\"type\": \"ping\"}\n\n".into(),
    ];
    for w in 0..STREAM_WORDS {
        events.push(format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\" word{w}-{id}\"}}}}\n\n"));
    }
    events.push(
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n".into(),
    );
    events.push("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":{FIG}}}\n\n".into());
    events.push("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n".into());
    let template = events.concat();
    (
        events,
        Doc {
            template,
            sound: (STREAM_WORDS + 3).to_string(),
            malformed: "\"15\"",
            pointer: "/usage/output_tokens",
        },
    )
}

fn ollama_stream(id: u64) -> (Vec<String>, Doc) {
    let mut events = Vec::new();
    for w in 0..STREAM_WORDS {
        events.push(format!("{{\"model\":\"llama3.2:3b\",\"created_at\":\"2026-11-29T10:00:00.{w:06}Z\",\"message\":{{\"role\":\"assistant\",\"content\":\" word{w}-{id}\"}},\"done\":false}}\n"));
    }
    events.push("{\"model\":\"llama3.2:3b\",\"created_at\":\"2026-11-29T10:00:01.000000Z\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done_reason\":\"stop\",\"done\":true,\"total_duration\":1523456789,\"load_duration\":12345678,\"prompt_eval_count\":26,\"prompt_eval_duration\":98765432,\"eval_count\":{FIG},\"eval_duration\":123456789}\n".to_string());
    let template = events.concat();
    (
        events,
        Doc {
            template,
            sound: STREAM_WORDS.to_string(),
            malformed: "\"12\"",
            pointer: "/eval_count",
        },
    )
}

/// A body sent in frames, optionally failing after `fail_after` frames (the
/// connection is then closed mid-body, `CUT_PAUSE` after the last frame, so
/// that what came before it is on the wire first).
struct Frames {
    frames: std::vec::IntoIter<Bytes>,
    fail_after: Option<usize>,
    pause: Option<Pin<Box<tokio::time::Sleep>>>,
}

const CUT_PAUSE: Duration = Duration::from_millis(20);

impl Body for Frames {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if let Some(left) = self.fail_after.as_mut() {
            if *left == 0 {
                let pause = self
                    .pause
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(CUT_PAUSE)));
                if pause.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                return Poll::Ready(Some(Err(std::io::Error::other("injected reset"))));
            }
            *left -= 1;
        }
        Poll::Ready(self.frames.next().map(|b| Ok(Frame::data(b))))
    }
}

struct Answer {
    status: StatusCode,
    content_type: &'static str,
    /// `Some(len)`: a content-length (possibly more than is sent: `reset`).
    length: Option<usize>,
    frames: Vec<Bytes>,
    fail_after: Option<usize>,
    sha: String,
    nulled: Option<(String, &'static str)>,
}

fn respond(id: &str, answer: Answer) -> Response<Boxed> {
    let mut builder = Response::builder()
        .status(answer.status)
        .header("content-type", answer.content_type)
        .header("x-soak-id", id)
        .header("x-soak-sha256", answer.sha);
    if let Some((nulled, pointer)) = answer.nulled {
        builder = builder
            .header("x-soak-nulled-sha256", nulled)
            .header("x-soak-pointers", pointer);
    }
    if let Some(length) = answer.length {
        builder = builder.header("content-length", length);
    }
    let body = Frames {
        frames: answer.frames.into_iter(),
        fail_after: answer.fail_after,
        pause: None,
    };
    builder.body(body.boxed_unsync()).unwrap()
}

/// A whole JSON body for `case`.
fn whole(doc: Doc, case: &str) -> Answer {
    let body = if case == "malformed" {
        doc.render(doc.malformed)
    } else {
        doc.render(&doc.sound)
    };
    let sha = sha256_hex(&body);
    let nulled = (case == "malformed").then(|| (sha256_hex(&doc.render("null")), doc.pointer));
    let len = body.len();
    let mut answer = Answer {
        status: StatusCode::OK,
        content_type: "application/json",
        length: Some(len),
        frames: vec![body.clone()],
        fail_after: None,
        sha,
        nulled,
    };
    match case {
        "reset" => {
            answer.frames = vec![body.slice(..len / 2), body.slice(len / 2..)];
            answer.fail_after = Some(1);
        }
        "truncated" => {
            let cut = body.slice(..len / 2);
            answer.length = Some(cut.len());
            answer.sha = sha256_hex(&cut);
            answer.frames = vec![cut];
        }
        _ => {}
    }
    answer
}

fn streamed(events: Vec<String>, doc: Doc, case: &str, content_type: &'static str) -> Answer {
    let value = if case == "malformed" {
        doc.malformed
    } else {
        doc.sound.as_str()
    };
    let frames: Vec<Bytes> = events
        .iter()
        .map(|e| Bytes::from(e.replacen("{FIG}", value, 1)))
        .collect();
    let sha = sha256_hex(&doc.render(value));
    let nulled = (case == "malformed").then(|| (sha256_hex(&doc.render("null")), doc.pointer));
    let fail_after = (case == "cut").then_some(frames.len() / 2);
    Answer {
        status: StatusCode::OK,
        content_type,
        length: None,
        frames,
        fail_after,
        sha,
        nulled,
    }
}

fn answer(path: &str, case: &str, id: u64, streaming: bool) -> Option<Answer> {
    let broken = case == "broken";
    let short = |n: usize| if broken { n - 1 } else { n };
    Some(if path.ends_with("/v1/chat/completions") {
        if streaming {
            let (events, doc) = openai_stream(id);
            streamed(events, doc, case, "text/event-stream; charset=utf-8")
        } else {
            whole(openai_chat(id, broken), case)
        }
    } else if path.ends_with("/v1/embeddings") {
        whole(openai_embeddings(id, short(EMBED_INPUTS)), case)
    } else if path.ends_with("/v1/messages") {
        let (events, doc) = anthropic_stream(id);
        streamed(events, doc, case, "text/event-stream; charset=utf-8")
    } else if path.ends_with("/v2/embed") {
        whole(cohere_embed(id, short(EMBED_INPUTS)), case)
    } else if path.ends_with("/v2/rerank") {
        whole(cohere_rerank(id, broken), case)
    } else if path.ends_with("/api/embed") {
        whole(ollama_embed(id, broken), case)
    } else if path.ends_with("/api/chat") {
        let (events, doc) = ollama_stream(id);
        streamed(events, doc, case, "application/x-ndjson")
    } else {
        return None;
    })
}

fn main() {
    let mut listen = "127.0.0.1:0".to_string();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--listen" => listen = args.next().expect("--listen ADDR"),
            other => {
                eprintln!("usage: soak-provider [--listen ADDR] (got {other:?})");
                std::process::exit(2);
            }
        }
    }
    // One thread: it shares the machine with the proxy and the client.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(serve(listen));
}

async fn serve(listen: String) {
    let listener = TcpListener::bind(&listen).await.unwrap();
    let ready = serde_json::json!({
        "listen": listener.local_addr().unwrap().to_string(),
        "embed_inputs": EMBED_INPUTS,
        "rerank_documents": RERANK_DOCUMENTS,
        "rerank_top_n": RERANK_TOP_N,
    });
    let mut stdout = std::io::stdout();
    writeln!(stdout, "{ready}").unwrap();
    stdout.flush().unwrap();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = service_fn(move |request: Request<Incoming>| async move {
            let path = request.uri().path().to_string();
            let header = |name: &str| {
                request
                    .headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string()
            };
            let (case, id) = (header("x-soak-case"), header("x-soak-id"));
            let body = match request.into_body().collect().await {
                Ok(body) => body.to_bytes(),
                Err(_) => Bytes::new(),
            };
            let streaming = body.windows(13).any(|w| w == b"\"stream\":true")
                || body.windows(14).any(|w| w == b"\"stream\": true");
            if case == "hang" {
                tokio::time::sleep(HANG).await;
            }
            let response = match answer(&path, &case, id.parse().unwrap_or(0), streaming) {
                Some(answer) => respond(&id, answer),
                None => Response::builder()
                    .status(StatusCode::NOT_FOUND)
                    .body(
                        http_body_util::Empty::new()
                            .map_err(|never| match never {})
                            .boxed_unsync(),
                    )
                    .unwrap(),
            };
            Ok::<_, Infallible>(response)
        });
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
