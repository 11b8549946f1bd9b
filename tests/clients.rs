//! Real client libraries through probity: a normalized response must still
//! be one the SDK accepts, and a rejected one an error it reports.

mod support;

use std::process::Command;

use support::*;

/// Standard padded base64, as the OpenAI API encodes float32 vectors.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn python_has(module: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .status()
        .is_ok_and(|s| s.success())
}

/// The openai SDK asks for base64 unless told otherwise; the upstream
/// answers in kind, with a malformed `prompt_tokens` (a gateway that
/// stringifies numbers). The SDK must get the vectors and `None` for the
/// figure; a list one vector short must reach it as a 502 error.
#[tokio::test]
async fn the_openai_sdk_accepts_a_normalized_embeddings_response() {
    if !python_has("openai") {
        assert!(
            std::env::var_os("CI").is_none(),
            "the openai package must be installed in CI (.ci/run)"
        );
        eprintln!("python3 -m pip install openai to run this test: skipped");
        return;
    }
    let vectors: [[f32; 3]; 2] = [[0.25, -1.5, 3.0], [0.5, 0.125, -0.75]];
    let upstream = Upstream::start(move |request| {
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        let base64_asked = body["encoding_format"] == "base64";
        let data: Vec<String> = vectors
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let embedding = if base64_asked {
                    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                    format!("\"{}\"", base64(&bytes))
                } else {
                    format!("[{}, {}, {}]", v[0], v[1], v[2])
                };
                format!(r#"{{"object": "embedding", "index": {i}, "embedding": {embedding}}}"#)
            })
            .collect();
        Reply::json(
            200,
            format!(
                r#"{{"object": "list", "data": [{}], "model": "text-embedding-3-small", "usage": {{"prompt_tokens": "6", "total_tokens": 6}}}}"#,
                data.join(", ")
            ),
        )
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &upstream.url(), "openai", ""),
    ));

    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/openai_embeddings.py"
    );
    let url = probity.url("/openai/v1");
    let output = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .arg(script)
            .env("PROBE_BASE_URL", url)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut lines = stdout.lines();
    let seen: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(
        seen["vectors"],
        serde_json::json!([[0.25, -1.5, 3.0], [0.5, 0.125, -0.75]])
    );
    assert_eq!(seen["indexes"], serde_json::json!([0, 1]));
    assert!(seen["prompt_tokens"].is_null(), "{seen}");
    assert_eq!(seen["total_tokens"], 6);
    assert_eq!(seen["normalized"], "/usage/prompt_tokens");
    let short: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(short["short_list"], 502, "{short}");
    assert_eq!(
        upstream.requests()[0].header("authorization"),
        Some("Bearer sk-app")
    );
}
