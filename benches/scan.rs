//! The JSON scanner fed a body as it arrives: every byte so far at each
//! read, as `forward` feeds an answer it holds. A read's scan goes on at
//! the byte the last one stopped at, even inside a string or number, so
//! the time per MB is the same at 1 MB as at 64 MB, and a hostile upstream
//! that picks a string's length and trickles it gains nothing.
//!
//! Three bodies, 1 to 64 MB, fed in reads of 4 KiB and 64 KiB (and of one
//! byte up to 4 MB): one string of `\u0078` escapes (the case that was
//! quadratic: an unfinished string was scanned again from its opening
//! quote at every read), many short strings, and deep nesting (blocks of
//! 256 levels of `{"a": [`).
//!
//! `cargo bench --bench scan -- --warm-up-time 1 --measurement-time 3`.
//! On the 2-core development machine (MB/s, release build):
//!
//! | body | read | 1 MB | 4 MB | 16 MB | 64 MB |
//! |---|---|---|---|---|---|
//! | one string | 1 B | 25 | 27 | | |
//! | | 4 KiB | 374 | 398 | 331 | 326 |
//! | | 64 KiB | 530 | 442 | 326 | 310 |
//! | many strings | 1 B | 23 | 23 | | |
//! | | 4 KiB | 200 | 201 | 134 | 148 |
//! | | 64 KiB | 179 | 204 | 161 | 169 |
//! | deep nesting | 1 B | 26 | 24 | | |
//! | | 4 KiB | 98 | 65 | 105 | 86 |
//! | | 64 KiB | 104 | 76 | 115 | 90 |
//!
//! (2026-12-01, load average about 5 on 2 cores: ±20 % between runs.) Flat
//! within that from 1 to 64 MB; before, one string in 4 KiB reads took
//! time quadratic in its length. What drops past 4 MB is the tape outgrowing
//! the caches, not a second reading.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use probity_judge::json::{Document, Scanner};

const MB: usize = 1 << 20;

/// A body of about `size` bytes of the shape `kind`.
fn body(kind: &str, size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(size + 4096);
    match kind {
        "one string" => {
            out.extend_from_slice(b"{\"embedding\": \"");
            while out.len() < size {
                out.extend_from_slice(br"\u0078");
            }
            out.extend_from_slice(b"\"}");
        }
        "many strings" => {
            out.extend_from_slice(b"[");
            while out.len() < size {
                out.extend_from_slice(br#""ab\ncd", "xyz", "#);
            }
            out.extend_from_slice(b"\"end\"]");
        }
        "deep nesting" => {
            let block = format!("{}1{}, ", "{\"a\": [".repeat(256), "]}".repeat(256));
            out.extend_from_slice(b"[");
            while out.len() < size {
                out.extend_from_slice(block.as_bytes());
            }
            out.extend_from_slice(b"0]");
        }
        _ => unreachable!(),
    }
    out
}

/// Scans `body` fed in reads of `read` bytes, as the server feeds an
/// answer while it arrives (every byte so far, each time), then finishes
/// it; `false` when it is not JSON.
fn scan_in_reads(body: &[u8], read: usize) -> bool {
    let mut scanner = Scanner::default();
    let mut end = 0;
    while end < body.len() {
        end = end.saturating_add(read.max(1)).min(body.len());
        scanner.feed(body.get(..end).unwrap_or_default());
    }
    Document::scanned(body, scanner).is_ok()
}

fn scan(c: &mut Criterion) {
    let mut group = c.benchmark_group("scan");
    group.sample_size(10);
    for kind in ["one string", "many strings", "deep nesting"] {
        for size in [1, 4, 16, 64] {
            let body = body(kind, size * MB);
            assert!(scan_in_reads(&body, body.len()), "{kind} is JSON");
            group.throughput(Throughput::Bytes(body.len() as u64));
            for read in [1, 4096, 65536] {
                if read == 1 && size > 4 {
                    continue; // millions of reads: long enough at 4 MB
                }
                let id = BenchmarkId::new(format!("{kind}/{read} B reads"), format!("{size} MB"));
                group.bench_with_input(id, &body, |b, body| {
                    b.iter(|| scan_in_reads(black_box(body), read))
                });
            }
        }
    }
    group.finish();
}

criterion_group!(benches, scan);
criterion_main!(benches);
