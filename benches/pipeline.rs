//! Micro-benchmarks of the per-request work probity does before and after
//! the upstream call: route lookup, header filtering, request ids.
//!
//! `cargo bench --bench pipeline`. The end-to-end latency comparison against
//! a direct call and nginx is a separate load benchmark.

use criterion::{criterion_group, criterion_main, Criterion};
use http::HeaderMap;
use probity::config::{load, DEFAULT_TOML};
use probity::forward::remove_hop_by_hop;
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

criterion_group!(benches, route_lookup, header_filtering);
criterion_main!(benches);
