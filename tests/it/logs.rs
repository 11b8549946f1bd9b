//! The text log format, as an operator tailing a file reads it: logfmt with
//! one quoting style, no colour codes off a terminal, and a start-up line
//! that lists each route (prefix -> upstream, dialect).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::support::*;

#[tokio::test]
async fn text_lines_are_logfmt_without_colour_and_name_every_route() {
    let upstream = Upstream::json(br#"{"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.5]}], "model": "m", "usage": {"prompt_tokens": "1", "total_tokens": 1}}"#).await;
    let config_path = temp_path(".toml");
    std::fs::write(
        &config_path,
        config(
            "",
            &format!(
                "{}{}",
                route("openai", "/openai", &upstream.url(), "openai", ""),
                route("cohere", "/cohere", "http://127.0.0.1:9", "cohere", "")
            ),
        ),
    )
    .unwrap();
    let workdir = temp_path(".d");
    std::fs::create_dir_all(&workdir).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_probity"))
        .current_dir(&workdir)
        .arg("--config")
        .arg(&config_path)
        .env_remove("PROBITY_LOG_FORMAT")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, lines) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let _ = tx.send(line.unwrap());
        }
    });
    let next = |what: &str| loop {
        let line = lines
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("no {what} line"));
        assert!(
            !line.contains('\u{1b}'),
            "a colour code off a terminal: {line:?}"
        );
        if line.contains(what) {
            return line;
        }
    };

    let listening = next("probity listening");
    let routes = format!(
        "routes=\"/openai -> {} (openai), /cohere -> http://127.0.0.1:9 (cohere)\"",
        upstream.url()
    );
    assert!(listening.contains(&routes), "{listening}");
    let proxy = listening
        .split(' ')
        .find_map(|field| field.strip_prefix("proxy="))
        .unwrap();

    let got = post(
        &format!("http://{proxy}/openai/v1/embeddings"),
        r#"{"model": "m", "input": "a"}"#,
    )
    .await;
    assert_eq!(got.status, 200);
    let normalized = next("malformed figures nulled");
    assert!(normalized.contains(" route=openai "), "{normalized}");
    let request = next(" request ");
    // `&str` and `%display` fields alike: bare when they can be.
    for field in [
        " route=openai ",
        " client=unknown ",
        " method=POST ",
        " path=/openai/v1/embeddings ",
        " ending=complete ",
        " outcome=normalized ",
        // Numbers and booleans, written straight to the line.
        " status=200 ",
        " upstream_status=200 ",
        " captured=true",
    ] {
        assert!(request.contains(field), "{field} in {request}");
    }
    let duration = request
        .split(' ')
        .find_map(|field| field.strip_prefix("duration_ms="))
        .unwrap();
    assert!(
        duration.parse::<f64>().is_ok_and(|ms| ms >= 0.0),
        "{request}"
    );
    assert!(!request.contains("=\"openai\""), "{request}");
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = std::fs::remove_dir_all(&workdir);
    let _ = std::fs::remove_file(&config_path);
}
