//! Micro-benchmarks of the per-request work probity does before and after
//! the upstream call: route lookup, header filtering, and the inspection of
//! a 16 × 1536 embeddings response.
//!
//! `cargo bench --bench pipeline`. The end-to-end latency comparison against
//! a direct call and nginx is a separate load benchmark.

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use http::{HeaderMap, Method, StatusCode};
use probity::config::DialectName;
use probity::config::{load, DEFAULT_TOML};
use probity::contract::SchemaCache;
use probity::forward::remove_hop_by_hop;
use probity::inspect::{self, Contracts, Exchange, Verdict};
use probity::route::RouteTable;
use std::hint::black_box;

fn route_lookup(c: &mut Criterion) {
    let config = load(DEFAULT_TOML).expect("default config");
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

/// An OpenAI embeddings response: 16 inputs of 1536 floats, as the API
/// writes them (about 540 KB).
fn embeddings_body() -> (Vec<u8>, Vec<u8>) {
    let inputs: Vec<String> = (0..16).map(|i| format!("document number {i}")).collect();
    let request = serde_json::json!({"model": "text-embedding-3-small", "input": inputs});
    let mut body = String::from("{\n  \"object\": \"list\",\n  \"data\": [\n");
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for i in 0..16 {
        body.push_str(&format!(
            "    {{\n      \"object\": \"embedding\",\n      \"index\": {i},\n      \"embedding\": [\n"
        ));
        for d in 0..1536 {
            // xorshift: deterministic values with realistic digit counts.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = (x % 2_000_000) as f64 / 1e7 - 0.1;
            let sep = if d + 1 < 1536 { "," } else { "" };
            body.push_str(&format!("        {v:.18}{sep}\n"));
        }
        body.push_str(if i + 1 < 16 {
            "      ]\n    },\n"
        } else {
            "      ]\n    }\n"
        });
    }
    body.push_str("  ],\n  \"model\": \"text-embedding-3-small\",\n  \"usage\": {\n    \"prompt_tokens\": 64,\n    \"total_tokens\": 64\n  }\n}\n");
    (request.to_string().into_bytes(), body.into_bytes())
}

fn embeddings_inspection(c: &mut Criterion) {
    let (request, body) = embeddings_body();
    let (request, body) = (Bytes::from(request), Bytes::from(body));
    let method = Method::POST;
    let headers = HeaderMap::new();
    let dialect = inspect::dialect(DialectName::Openai);
    let cache = SchemaCache::new(16);
    let contracts = Contracts {
        config: None,
        cache: &cache,
    };
    let exchange = Exchange {
        method: &method,
        path: "/v1/embeddings",
        request_headers: &headers,
        request_body: &request,
        status: StatusCode::OK,
        response_headers: &headers,
        response_body: &body,
    };
    assert!(matches!(
        inspect::inspect(dialect, &exchange, &contracts),
        Verdict::Checked(_)
    ));
    let mut group = c.benchmark_group("inspect");
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function("openai embeddings 16 x 1536 floats", |b| {
        b.iter(|| inspect::inspect(dialect, black_box(&exchange), &contracts))
    });
    group.finish();
}

criterion_group!(
    benches,
    route_lookup,
    header_filtering,
    embeddings_inspection
);
criterion_main!(benches);
