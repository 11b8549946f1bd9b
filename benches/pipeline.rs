//! Micro-benchmarks of the per-request work probity does before and after
//! the upstream call: route lookup, header filtering, and the inspection of
//! a 16 × 1536 embeddings response.
//!
//! `cargo bench --bench pipeline`. The end-to-end latency comparison against
//! a direct call and nginx is a separate load benchmark.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    unreachable_pub,
    reason = "tests and benches fail loudly: the request path's lints do not apply"
)]

#[path = "../tests/it/support/base64.rs"]
mod base64;
#[path = "../tests/it/support/eventstream.rs"]
#[expect(dead_code, reason = "the bench uses the encoder only")]
mod eventstream;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use http::HeaderMap;
use probity::config::{load, DEFAULT_TOML};
use probity::config::{CitationsConfig, ContractConfig};
use probity::forward::remove_hop_by_hop;
use probity::route::RouteTable;
use probity_judge::contract::{Contract, Requested, SchemaCache};
use probity_judge::figures::Convention;
use probity_judge::inspect::{self, Contracts, Exchange, Verdict};
use std::hint::black_box;
use std::sync::Arc;

fn route_lookup(c: &mut Criterion) {
    let config = load(DEFAULT_TOML, &inspect::names()).expect("default config");
    let routes = RouteTable::build(&config, |_| None).expect("routes");
    c.bench_function("route/find (7 routes, hit)", |b| {
        b.iter(|| {
            routes
                .find(black_box("/openai/v1/chat/completions"))
                .is_ok()
        })
    });
    c.bench_function("route/find (7 routes, miss)", |b| {
        b.iter(|| routes.find(black_box("/gemini/v1beta/models")).is_err())
    });
}

fn typical_request_headers() -> HeaderMap {
    [
        ("host", "127.0.0.1:8080"),
        ("user-agent", "OpenAI/Python 1.54.0"),
        ("accept", "application/json"),
        ("content-type", "application/json"),
        ("authorization", "Bearer sk-test"),
        ("x-stainless-lang", "python"),
        ("x-stainless-package-version", "1.54.0"),
        ("content-length", "182"),
        ("connection", "keep-alive"),
    ]
    .into_iter()
    .map(|(k, v)| (k.parse().unwrap(), v.parse().unwrap()))
    .collect()
}

fn header_filtering(c: &mut Criterion) {
    let headers = typical_request_headers();
    c.bench_function("headers/remove_hop_by_hop (9 headers)", |b| {
        b.iter(|| {
            let mut headers = headers.clone();
            remove_hop_by_hop(&mut headers);
            headers
        })
    });
}

/// How an embeddings response is written.
#[derive(Clone, Copy)]
enum Layout {
    /// Indented, one number per line, as the OpenAI API writes it.
    Pretty,
    /// No whitespace at all, as many OpenAI-compatible servers write it.
    Compact,
    /// `encoding_format: "base64"`: each vector one string.
    Base64,
}

/// An OpenAI embeddings response: 16 inputs of 1536 floats (about 540 KB
/// pretty-printed), and its request.
fn embeddings_body(layout: Layout) -> (Vec<u8>, Vec<u8>) {
    let inputs: Vec<String> = (0..16).map(|i| format!("document number {i}")).collect();
    let mut request = serde_json::json!({"model": "text-embedding-3-small", "input": inputs});
    if matches!(layout, Layout::Base64) {
        request["encoding_format"] = "base64".into();
    }
    let pretty = matches!(layout, Layout::Pretty);
    let nl = if pretty { "\n" } else { "" };
    let indent = |n: usize| if pretty { " ".repeat(n) } else { String::new() };
    let mut body = format!(
        "{{{nl}{}\"object\": \"list\",{nl}{}\"data\": [{nl}",
        indent(2),
        indent(2)
    );
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for i in 0..16 {
        body.push_str(&format!(
            "{}{{{nl}{}\"object\": \"embedding\",{nl}{}\"index\": {i},{nl}{}\"embedding\": ",
            indent(4),
            indent(6),
            indent(6),
            indent(6)
        ));
        let mut floats = Vec::with_capacity(1536);
        for _ in 0..1536 {
            // xorshift: deterministic values with realistic digit counts.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            floats.push((x % 2_000_000) as f64 / 1e7 - 0.1);
        }
        if matches!(layout, Layout::Base64) {
            let bytes: Vec<u8> = floats
                .iter()
                .flat_map(|v| (*v as f32).to_le_bytes())
                .collect();
            body.push_str(&format!("\"{}\"", base64::base64(&bytes)));
        } else {
            let items: Vec<String> = floats
                .iter()
                .map(|v| format!("{}{v:.18}", indent(8)))
                .collect();
            body.push_str(&format!(
                "[{nl}{}{nl}{}]",
                items.join(&format!(",{nl}")),
                indent(6)
            ));
        }
        let close = if i + 1 < 16 { "}," } else { "}" };
        body.push_str(&format!("{nl}{}{close}{nl}", indent(4)));
    }
    body.push_str(&format!(
        "{}],{nl}{}\"model\": \"text-embedding-3-small\",{nl}{}\"usage\": {{\"prompt_tokens\": 64, \"total_tokens\": 64}}{nl}}}{nl}",
        indent(2),
        indent(2),
        indent(2)
    ));
    (request.to_string().into_bytes(), body.into_bytes())
}

fn embeddings_inspection(c: &mut Criterion) {
    let endpoint = inspect::dialect("openai")
        .expect("openai is a dialect")
        .endpoint("/v1/embeddings")
        .expect("OpenAI embeddings are inspected");
    let cache = SchemaCache::new(16);
    let contracts = Contracts {
        config: None,
        cache: &cache,
        convention: Default::default(),
    };
    let headers = HeaderMap::new();
    let mut group = c.benchmark_group("inspect");
    for (name, layout) in [
        ("openai embeddings 16 x 1536 floats, pretty", Layout::Pretty),
        (
            "openai embeddings 16 x 1536 floats, compact",
            Layout::Compact,
        ),
        ("openai embeddings 16 x 1536 base64", Layout::Base64),
    ] {
        let (request, body) = embeddings_body(layout);
        let (request, body) = (Bytes::from(request), Bytes::from(body));
        let exchange = Exchange::answered(&request, &headers, &body);
        assert!(
            matches!(
                inspect::inspect(endpoint, &exchange, &contracts),
                Verdict::Sound(_)
            ),
            "{name}: sound"
        );
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| inspect::inspect(endpoint, black_box(&exchange), &contracts))
        });
    }
    group.finish();
}

/// A typical grounded answer (about 1 KB) checked against a cached schema
/// and the grounded-answer route contract.
fn contract_validation(c: &mut Criterion) {
    let sources: Vec<serde_json::Value> = (1..=4)
        .map(|i| serde_json::json!({"id": format!("s{i}"), "text": format!("Source {i}: Rayleigh scattering makes short wavelengths scatter more, so the sky looks blue.")}))
        .collect();
    let prompt =
        serde_json::json!({"question": "Why is the sky blue?", "sources": sources}).to_string();
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "answer": {"type": "string", "maxLength": 3000},
            "sufficient": {"type": "boolean"},
            "citations": {"type": "array", "items": {"type": "string"}},
            "quotes": {"type": "array", "items": {"type": "string"}},
            "confidence": {"enum": ["low", "medium", "high"]}
        },
        "required": ["answer", "sufficient", "citations"],
        "additionalProperties": false
    });
    let answer = serde_json::json!({
        "answer": "The sky looks blue because air molecules scatter short (blue) wavelengths of sunlight much more strongly than long (red) ones. This is Rayleigh scattering: its strength grows with the inverse fourth power of the wavelength, so blue light is scattered about five times more than red and reaches the eye from every direction of the sky. At sunset the light crosses far more air, the blue is scattered away before it arrives, and the remaining light looks red and orange. Violet is scattered even more than blue, but sunlight holds less of it and our eyes are less sensitive to it, so the sky looks blue rather than violet.",
        "sufficient": true,
        "citations": ["s1", "s3"],
        "quotes": ["Rayleigh scattering makes short wavelengths scatter more"],
        "confidence": "high"
    })
    .to_string();
    let config = Arc::new(ContractConfig {
        task: "grounded_answer".into(),
        prose: vec!["/answer".into()],
        min_chars: 12,
        max_chars: 3000,
        citations: Some(CitationsConfig {
            output: "/citations".into(),
            sources: "/sources".into(),
            required: true,
            quotes: Some("/quotes".into()),
        }),
        ..ContractConfig::default()
    });
    let cache = SchemaCache::new(16);
    let contract = Contract::resolve(
        Requested::Schema(schema),
        Some(&config),
        "ollama_generate",
        Some(prompt),
        &cache,
    )
    .expect("a contract");
    assert!(contract.judge_text(&answer, false, false).valid());
    let mut group = c.benchmark_group("contract");
    group.throughput(Throughput::Bytes(answer.len() as u64));
    group.bench_function("grounded answer, cached schema", |b| {
        b.iter(|| contract.judge_text(black_box(&answer), false, false))
    });
    group.finish();
}

/// A chat stream and a Responses stream of the same length: `EVENTS`
/// deltas of one token each, plus each dialect's framing events (chat: a
/// role chunk, a finish chunk, the usage chunk and `[DONE]`; Responses:
/// created, in_progress, the item and part events, and completed with the
/// whole response and its usage), judged as the proxy judges a stream.
fn stream_inspection(c: &mut Criterion) {
    const EVENTS: usize = 200;
    let config = load(DEFAULT_TOML, &inspect::names()).expect("default config");
    let routes = RouteTable::build(&config, |_| None).expect("routes");
    // The same routes judging no relation between figures: what relations
    // cost is the difference.
    let mut unrelated = config.clone();
    for route in &mut unrelated.routes {
        route.relations = Some("off".into());
    }
    let unrelated = RouteTable::build(&unrelated, |_| None).expect("routes");
    let mut chat = String::from("data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1764410400,\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}],\"usage\":null}\n\n");
    for i in 0..EVENTS {
        chat.push_str(&format!("data: {{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1764410400,\"model\":\"gpt-4o-mini\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"token{i} \"}},\"finish_reason\":null}}],\"usage\":null}}\n\n"));
    }
    chat.push_str("data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1764410400,\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n");
    chat.push_str("data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1764410400,\"model\":\"gpt-4o-mini\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":200,\"total_tokens\":212,\"prompt_tokens_details\":{\"cached_tokens\":0},\"completion_tokens_details\":{\"reasoning_tokens\":0}}}\n\ndata: [DONE]\n\n");

    let text: String = (0..EVENTS).map(|i| format!("token{i} ")).collect();
    let response = |status: &str, output: &str, usage: &str| {
        format!("{{\"id\":\"resp_bench\",\"object\":\"response\",\"created_at\":1764410400,\"status\":\"{status}\",\"model\":\"gpt-4.1-mini\",\"output\":[{output}],\"usage\":{usage}}}")
    };
    let item = format!("{{\"id\":\"msg_bench\",\"type\":\"message\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{{\"type\":\"output_text\",\"annotations\":[],\"text\":\"{text}\"}}]}}");
    let mut events = vec![
        ("response.created", format!("\"response\":{}", response("in_progress", "", "null"))),
        ("response.in_progress", format!("\"response\":{}", response("in_progress", "", "null"))),
        ("response.output_item.added", "\"output_index\":0,\"item\":{\"id\":\"msg_bench\",\"type\":\"message\",\"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]}".to_string()),
        ("response.content_part.added", "\"item_id\":\"msg_bench\",\"output_index\":0,\"content_index\":0,\"part\":{\"type\":\"output_text\",\"annotations\":[],\"text\":\"\"}".to_string()),
    ];
    for i in 0..EVENTS {
        events.push(("response.output_text.delta", format!("\"item_id\":\"msg_bench\",\"output_index\":0,\"content_index\":0,\"delta\":\"token{i} \",\"logprobs\":[]")));
    }
    events.push((
        "response.output_item.done",
        format!("\"output_index\":0,\"item\":{item}"),
    ));
    events.push(("response.completed", format!("\"response\":{}", response("completed", &item, "{\"input_tokens\":12,\"input_tokens_details\":{\"cached_tokens\":0},\"output_tokens\":200,\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":212}"))));
    let responses: String = events
        .iter()
        .enumerate()
        .map(|(n, (kind, rest))| {
            format!(
                "event: {kind}\ndata: {{\"type\":\"{kind}\",{rest},\"sequence_number\":{n}}}\n\n"
            )
        })
        .collect();

    // The same answer as Anthropic's SSE and as Bedrock's binary frames.
    let mut anthropic = String::from("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_bench\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"stop_reason\":null,\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
    let mut converse = eventstream::event(
        "messageStart",
        r#"{"p":"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ","role":"assistant"}"#,
    );
    for i in 0..EVENTS {
        anthropic.push_str(&format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"token{i} \"}}}}\n\n"));
        converse.extend(eventstream::event(
            "contentBlockDelta",
            &format!(r#"{{"contentBlockIndex":0,"delta":{{"text":"token{i} "}},"p":"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKL"}}"#),
        ));
    }
    anthropic.push_str("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":200}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    converse.extend(eventstream::event(
        "contentBlockStop",
        r#"{"contentBlockIndex":0,"p":"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRS"}"#,
    ));
    converse.extend(eventstream::event(
        "messageStop",
        r#"{"p":"abcdefghijklmnopqrstuvwxyzABCDEFGH","stopReason":"end_turn"}"#,
    ));
    converse.extend(eventstream::event("metadata", r#"{"metrics":{"latencyMs":412},"p":"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN","usage":{"inputTokens":12,"outputTokens":200,"totalTokens":212}}"#));

    let mut group = c.benchmark_group("stream inspection (200 deltas)");
    let streams: [(&str, &str, &str, &str, Vec<u8>); 4] = [
        (
            "anthropic messages",
            "anthropic",
            "/v1/messages",
            r#"{"model":"m","max_tokens":512,"stream":true,"messages":[]}"#,
            anthropic.into_bytes(),
        ),
        (
            "bedrock converse-stream",
            "bedrock",
            "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream",
            r#"{"messages":[]}"#,
            converse,
        ),
        (
            "chat completions",
            "openai",
            "/v1/chat/completions",
            r#"{"model":"m","stream":true,"messages":[]}"#,
            chat.into_bytes(),
        ),
        (
            "responses",
            "openai",
            "/v1/responses",
            r#"{"model":"m","stream":true,"input":"hi"}"#,
            responses.into_bytes(),
        ),
    ];
    for (name, route, path, request, body) in streams {
        for (table, relations) in [(&routes, ""), (&unrelated, ", relations off")] {
            let judged =
                probity::saved_answer::judge(table, route, path, request.as_bytes(), &body, false)
                    .unwrap();
            assert_eq!(judged.outcome, "passed", "{name}");
            group.throughput(Throughput::Bytes(body.len() as u64));
            group.bench_function(format!("{name}{relations}"), |b| {
                b.iter(|| {
                    probity::saved_answer::judge(
                        table,
                        route,
                        path,
                        request.as_bytes(),
                        black_box(&body),
                        false,
                    )
                })
            });
        }
    }
    group.finish();
}

/// A whole chat answer (the pass fixture: full usage, both details
/// records), judged with its relations and without.
fn chat_inspection(c: &mut Criterion) {
    let endpoint = inspect::dialect("openai")
        .expect("openai is a dialect")
        .endpoint("/v1/chat/completions")
        .expect("chat is inspected");
    let root = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/openai/gen_chat_pass"
    );
    let read = |file: &str| Bytes::from(std::fs::read(format!("{root}/{file}")).expect("fixture"));
    let (request, body) = (read("request.json"), read("response.json"));
    let cache = SchemaCache::new(16);
    let headers = HeaderMap::new();
    let mut group = c.benchmark_group("inspect");
    group.throughput(Throughput::Bytes(body.len() as u64));
    for (name, convention) in [
        ("openai chat answer", Convention::Provider),
        ("openai chat answer, relations off", Convention::Off),
    ] {
        let contracts = Contracts {
            config: None,
            cache: &cache,
            convention,
        };
        let exchange = Exchange::answered(&request, &headers, &body);
        assert!(matches!(
            inspect::inspect(endpoint, &exchange, &contracts),
            Verdict::Sound(_)
        ));
        group.bench_function(name, |b| {
            b.iter(|| inspect::inspect(endpoint, black_box(&exchange), &contracts))
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    chat_inspection,
    route_lookup,
    header_filtering,
    embeddings_inspection,
    contract_validation,
    stream_inspection
);
criterion_main!(benches);
