//! The admin listener's tower-http layers, over real sockets with the real
//! binary: a scrape or a capture download is gzipped for a client that
//! accepts it (Prometheus's scraper does) and decodes to the bytes a plain
//! one gets; without `Accept-Encoding` nothing changes; over HTTP/2 too;
//! the guard's refusal keeps probity's error shape through the gzip.

use std::io::Read;
use std::time::Instant;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};

use crate::support::*;

/// An embeddings answer long enough to be worth compressing, whose
/// `prompt_tokens` is a string: normalized, so captured.
fn embeddings_body() -> String {
    let vector = vec!["0.125"; 200].join(", ");
    format!(
        r#"{{"object": "list", "data": [{{"object": "embedding", "index": 0, "embedding": [{vector}]}}], "model": "m", "usage": {{"prompt_tokens": "4", "total_tokens": 4}}}}"#
    )
}

async fn admin(probity: &Probity, path: &str, gzip: bool, token: bool) -> Got {
    let mut request = Request::get(probity.admin_url(path));
    if gzip {
        request = request.header("accept-encoding", "gzip");
    }
    if token {
        request = request.header("authorization", format!("Bearer {ADMIN_TOKEN}"));
    }
    send(request.body(Full::default()).unwrap()).await
}

fn gunzip(got: &Got) -> Vec<u8> {
    assert_eq!(
        got.header("content-encoding"),
        Some("gzip"),
        "{}",
        got.text()
    );
    let mut decoded = Vec::new();
    flate2::read::GzDecoder::new(&got.body[..])
        .read_to_end(&mut decoded)
        .unwrap();
    decoded
}

/// A scrape's families (help, type and series), without the values (the
/// runtime's gauges move between two scrapes), in name order (the
/// exporter renders them in no fixed order).
fn families(text: &str) -> Vec<Vec<&str>> {
    let mut families: Vec<Vec<&str>> = text
        .split("\n\n")
        .map(|family| {
            family
                .lines()
                .map(|line| match line.starts_with('#') {
                    true => line,
                    false => line.rsplit_once(' ').map_or(line, |(series, _)| series),
                })
                .collect()
        })
        .collect();
    families.sort();
    families
}

#[tokio::test]
async fn a_gzip_scrape_decodes_to_the_plain_one() {
    let upstream = Upstream::json(br#"{"object": "list", "data": []}"#).await;
    let routes = route("openai", "/openai", &upstream.url(), "openai", "");
    let probity = Probity::start(&config("", &routes));
    for _ in 0..3 {
        post(&probity.url("/openai/v1/embeddings"), r#"{"input": "a"}"#).await;
    }
    // A family can appear between two scrapes (a capture written, the
    // histograms' upkeep every 5 s): a pair that differs is taken again.
    let mut pair = None;
    for _ in 0..3 {
        let plain = admin(&probity, "/metrics", false, false).await;
        let zipped = admin(&probity, "/metrics", true, false).await;
        let decoded = String::from_utf8(gunzip(&zipped)).unwrap();
        let same = families(&decoded) == families(&plain.text());
        pair = Some((plain, zipped));
        if same {
            break;
        }
    }
    let (plain, zipped) = pair.unwrap();
    assert_eq!(plain.status, 200);
    assert_eq!(plain.header("content-encoding"), None);
    let content_type = "text/plain; version=0.0.4; charset=utf-8";
    assert_eq!(plain.header("content-type"), Some(content_type));
    assert_eq!(zipped.header("content-type"), Some(content_type));
    let decoded = String::from_utf8(gunzip(&zipped)).unwrap();
    assert_eq!(families(&decoded), families(&plain.text()));
    assert!(decoded.contains("probity_requests_total{"), "{decoded}");
    assert!(
        zipped.body.len() * 4 < plain.body.len(),
        "gzip {} bytes, plain {}",
        zipped.body.len(),
        plain.body.len()
    );
}

#[tokio::test]
async fn a_gzip_capture_download_decodes_to_the_stored_bytes() {
    let body = embeddings_body();
    let answer = body.clone();
    let upstream = Upstream::start(move |_| Reply::json(200, answer.clone())).await;
    let routes = route("openai", "/openai", &upstream.url(), "openai", "");
    let probity = Probity::start(&config("", &routes));
    let got = post(&probity.url("/openai/v1/embeddings"), r#"{"input": "a"}"#).await;
    let id = got.header("probity-capture").unwrap().to_string();
    let path = format!("/captures/{id}");
    // The capture is written after the answer: wait for it.
    let started = Instant::now();
    let plain = loop {
        let plain = admin(&probity, &path, false, true).await;
        if plain.status == 200 || started.elapsed() > STEP {
            break plain;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(plain.status, 200, "{}", plain.text());
    assert_eq!(plain.header("content-encoding"), None);
    assert_eq!(plain.body, body.as_bytes());
    let zipped = admin(&probity, &path, true, true).await;
    assert_eq!(zipped.status, 200);
    assert_eq!(gunzip(&zipped), body.as_bytes());
    // The upstream's headers still ride beside the body, untouched.
    assert_eq!(zipped.header("probity-upstream-status"), Some("200"));
    assert_eq!(zipped.header("content-type"), plain.header("content-type"));
    // A listing and the page's data, likewise.
    for path in ["/captures", "/status.json"] {
        let plain = admin(&probity, path, false, true).await;
        let zipped = admin(&probity, path, true, true).await;
        assert_eq!(plain.status, 200, "{path}");
        let decoded: serde_json::Value = serde_json::from_slice(&gunzip(&zipped)).unwrap();
        assert!(decoded.is_object(), "{path}: {decoded}");
    }
}

#[tokio::test]
async fn a_refusal_keeps_its_error_shape_through_the_gzip() {
    let upstream = Upstream::json(b"{}").await;
    let routes = route("openai", "/openai", &upstream.url(), "openai", "");
    let probity = Probity::start(&config("", &routes));
    let refused = admin(&probity, "/captures", true, false).await;
    assert_eq!(refused.status, 401);
    let decoded = Got {
        status: refused.status,
        headers: refused.headers.clone(),
        body: Bytes::from(gunzip(&refused)),
    };
    let error = decoded.error(401, "unauthenticated");
    assert_eq!(error["code"], "admin_token_required");
    assert_eq!(
        refused.header("www-authenticate"),
        Some("Bearer realm=\"probity admin\"")
    );
}

#[tokio::test]
async fn an_http2_scrape_is_gzipped_too() {
    let upstream = Upstream::json(b"{}").await;
    let routes = route("openai", "/openai", &upstream.url(), "openai", "");
    let probity = Probity::start(&config("", &routes));
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<Bytes>>();
    let request = Request::get(probity.admin_url("/metrics"))
        .header("accept-encoding", "gzip")
        .body(Full::default())
        .unwrap();
    let response = within("an HTTP/2 scrape", client.request(request))
        .await
        .unwrap();
    assert_eq!(response.version(), http::Version::HTTP_2);
    let (parts, body) = response.into_parts();
    let got = Got {
        status: parts.status,
        headers: parts.headers,
        body: body.collect().await.unwrap().to_bytes(),
    };
    assert_eq!(got.status, 200);
    let text = String::from_utf8(gunzip(&got)).unwrap();
    assert!(text.contains("# TYPE probity_build_info gauge"), "{text}");
}
