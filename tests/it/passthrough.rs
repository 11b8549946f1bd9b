//! Endpoints probity does not inspect work as through a plain reverse
//! proxy: a file upload or download streams through both ways as it
//! arrives, larger than every limit that bounds what probity must hold to
//! judge (`max_request_bytes`, `max_response_bytes`), with flat memory.

use std::time::Duration;

use crate::support::*;
use bytes::Bytes;
use http::Request;
use http_body_util::BodyExt;

const MIB: usize = 1024 * 1024;

/// 64-bit FNV-1a: the fake upstream and the test agree on the bytes.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A deterministic body of `len` bytes that is not all one byte.
fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

#[tokio::test]
async fn uploads_and_downloads_larger_than_every_limit_stream_through() {
    let download = payload(80 * MIB);
    let download_hash = fnv(&download);
    let upstream = Upstream::start(move |request| {
        if request.method == "POST" {
            // The file upload: say what arrived.
            let answer = format!(
                r#"{{"id": "file-1", "object": "file", "bytes": {}, "fnv": "{:x}"}}"#,
                request.body.len(),
                fnv(&request.body)
            );
            return Reply::json(200, answer);
        }
        // The file's content, with its length, a megabyte at a time.
        let parts = download
            .chunks(MIB)
            .map(|c| part(Before::Now, c.to_vec()))
            .collect();
        Reply::stream("application/octet-stream", parts)
            .header("content-length", &download.len().to_string())
    })
    .await;
    let limits = "max_response_bytes = 16777216";
    let probity = Probity::start(&config(
        "max_request_bytes = 16777216",
        &route("openai", "/openai", &upstream.url(), "openai", limits),
    ));
    let idle = probity.peak_rss();

    // A 24 MiB multipart upload, over max_request_bytes (16 MiB).
    let file = payload(24 * MIB);
    let boundary = "probity-boundary";
    let mut body = format!(
        "--{boundary}\r\ncontent-disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n\
         --{boundary}\r\ncontent-disposition: form-data; name=\"file\"; filename=\"batch.jsonl\"\r\n\
         content-type: application/octet-stream\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(&file);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let sent = fnv(&body);
    let got = tokio::time::timeout(
        Duration::from_secs(60),
        send_raw(
            Request::post(probity.url("/openai/v1/files"))
                .header(
                    "content-type",
                    format!("multipart/form-data; boundary={boundary}"),
                )
                .body(http_body_util::Full::new(Bytes::from(body.clone())))
                .unwrap(),
        ),
    )
    .await
    .expect("upload within 60 s");
    assert_eq!(got.status, 200, "{}", got.text());
    let answer = got.json();
    assert_eq!(answer["bytes"], body.len());
    assert_eq!(answer["fnv"], format!("{sent:x}"), "every byte arrived");

    // An 80 MiB download, over max_response_bytes (16 MiB), with its length.
    let got = tokio::time::timeout(
        Duration::from_secs(60),
        send_raw(
            Request::get(probity.url("/openai/v1/files/file-1/content"))
                .body(http_body_util::Full::new(Bytes::new()))
                .unwrap(),
        ),
    )
    .await
    .expect("download within 60 s");
    assert_eq!(got.status, 200, "{}", got.headers.len());
    assert_eq!(
        got.header("content-length"),
        Some((80 * MIB).to_string().as_str())
    );
    assert_eq!(got.body.len(), 80 * MIB);
    assert_eq!(fnv(&got.body), download_hash, "every byte came back");

    // Neither body was held: probity's peak memory grew by far less than
    // either (the upload is 24 MiB, the download 80 MiB).
    let grown = probity.peak_rss().saturating_sub(idle);
    eprintln!(
        "probity peak RSS: {} MiB idle, {} MiB after 104 MiB passed through (+{} MiB)",
        idle / MIB as u64,
        probity.peak_rss() / MIB as u64,
        grown / MIB as u64
    );
    assert!(
        grown < 20 * MIB as u64,
        "peak RSS grew by {} MiB while passing 104 MiB",
        grown / MIB as u64
    );
}

/// Sends a request and reads the whole response (no per-step timeout: the
/// bodies are large).
async fn send_raw(request: Request<http_body_util::Full<Bytes>>) -> Got {
    let response = client().request(request).await.expect("request failed");
    let (parts, body) = response.into_parts();
    let body = body.collect().await.expect("body failed").to_bytes();
    Got {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}
