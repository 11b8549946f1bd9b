//! Inspection around the checks themselves: the capture store's bounds,
//! what reaches logs and metrics, and which responses are read whole.

use crate::support::*;

const EMBEDDINGS_REQUEST: &str = r#"{"model": "m", "input": ["a", "b"]}"#;

fn embeddings_body(prompt_tokens: &str) -> String {
    format!(
        r#"{{"object": "list", "data": [{{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}}, {{"object": "embedding", "index": 1, "embedding": [0.3, 0.4]}}], "model": "m", "usage": {{"prompt_tokens": {prompt_tokens}, "total_tokens": 4}}}}"#
    )
}

#[tokio::test]
async fn a_malformed_value_never_reaches_logs_or_metrics() {
    let body = embeddings_body(r#""4711-SECRET""#);
    let upstream = Upstream::start(move |_| Reply::json(200, body.clone())).await;
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &upstream.url(), "openai", ""),
    ));
    let got = post(&probity.url("/openai/v1/embeddings"), EMBEDDINGS_REQUEST).await;
    assert_eq!(got.status, 200);
    assert_eq!(
        got.header("probity-normalized"),
        Some("/usage/prompt_tokens")
    );
    assert_eq!(got.text(), embeddings_body("null"));
    let id = got.header("x-request-id").unwrap();
    assert_eq!(got.header("probity-capture"), Some(id));
    let line = probity.request_log(id).await;
    assert_eq!(line["captured"], true);
    assert_eq!(line["outcome"], "normalized");

    let metrics = get(&probity.admin_url("/metrics")).await.text();
    assert!(!metrics.contains("4711"), "{metrics}");
    assert!(!probity.log_text().contains("4711"));
    let sample = |s: &str| metric_value(&metrics, s);
    assert_eq!(
        sample(r#"probity_tokens_total{route="openai",kind="total"}"#),
        Some(4.0)
    );
    assert_eq!(
        sample(r#"probity_tokens_total{route="openai",kind="input"}"#),
        None
    );
    assert_eq!(
        sample(r#"probity_malformed_figures_total{route="openai",figure="/usage/prompt_tokens"}"#),
        Some(1.0)
    );
}

#[tokio::test]
async fn the_capture_store_keeps_the_verbatim_response_within_its_bounds() {
    let small = embeddings_body("-4");
    let large = format!("{}{}", embeddings_body("true"), " ".repeat(3000));
    let upstream = Upstream::start(move |request| {
        let body = if request.target.contains("large") {
            large.clone()
        } else {
            small.clone()
        };
        Reply::json(200, body).header("openai-processing-ms", "12")
    })
    .await;
    let routes = route("openai", "/openai", &upstream.url(), "openai", "");
    let probity = Probity::start(&config(
        "",
        &format!("{routes}\n[capture]\nmax_entries = 2\nmax_bytes = 2048\n"),
    ));

    let mut ids = Vec::new();
    for path in [
        "/openai/a/embeddings",
        "/openai/b/embeddings",
        "/openai/c/embeddings",
        "/openai/large/embeddings",
    ] {
        let got = post(&probity.url(path), EMBEDDINGS_REQUEST).await;
        assert_eq!(got.status, 200, "{}", got.text());
        ids.push(got.header("x-request-id").unwrap().to_string());
    }
    let listing = probity.admin_get("/captures").await.json();
    let entries = listing["captures"].as_array().unwrap();
    let listed: Vec<&str> = entries
        .iter()
        .map(|e| e["request_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        listed,
        [ids[3].as_str(), ids[2].as_str()],
        "newest first, oldest evicted"
    );
    let large_entry = &entries[0];
    assert_eq!(large_entry["body_captured"], false);
    assert!(large_entry["body_bytes"].as_u64().unwrap() > 2048);
    assert_eq!(large_entry["outcome"], "normalized");
    assert_eq!(
        large_entry["pointers"],
        serde_json::json!(["/usage/prompt_tokens"])
    );
    assert_eq!(large_entry["endpoint"], "/large/embeddings");
    assert_eq!(large_entry["route"], "openai");
    assert!(large_entry["time"].as_str().unwrap().ends_with('Z'));

    let kept = probity.admin_get(&format!("/captures/{}", ids[2])).await;
    assert_eq!(kept.status, 200);
    assert_eq!(
        kept.text(),
        embeddings_body("-4"),
        "the verbatim upstream body"
    );
    assert_eq!(kept.header("content-type"), Some("application/json"));
    assert_eq!(kept.header("probity-upstream-status"), Some("200"));
    assert_eq!(
        kept.header("probity-upstream-openai-processing-ms"),
        Some("12")
    );
    let omitted = probity.admin_get(&format!("/captures/{}", ids[3])).await;
    assert!(omitted
        .header("probity-capture-body")
        .unwrap()
        .starts_with("omitted"));
    assert_eq!(
        probity
            .admin_get(&format!("/captures/{}", ids[0]))
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn with_capture_disabled_nothing_is_kept_or_announced() {
    let body = embeddings_body(r#""4""#);
    let upstream = Upstream::start(move |_| Reply::json(200, body.clone())).await;
    let routes = route("openai", "/openai", &upstream.url(), "openai", "");
    let probity = Probity::start(&config(
        "",
        &format!("{routes}\n[capture]\nenabled = false\n"),
    ));
    let got = post(&probity.url("/openai/v1/embeddings"), EMBEDDINGS_REQUEST).await;
    assert_eq!(
        got.header("probity-normalized"),
        Some("/usage/prompt_tokens")
    );
    assert_eq!(got.header("probity-capture"), None);
    let listing = probity.admin_get("/captures").await.json();
    assert_eq!(listing["captures"], serde_json::json!([]));
}

#[tokio::test]
async fn a_checked_endpoint_is_read_whole_whatever_its_framing() {
    // Chunked, no length, a non-JSON content type: still inspected.
    let upstream = Upstream::start(|_| {
        let body = r#"{"data": [{"index": 0, "embedding": [0.1]}], "usage": {"prompt_tokens": 1, "total_tokens": 1}}"#;
        let (head, tail) = body.split_at(20);
        Reply::stream("text/plain", vec![part(Before::Now, head), part(Before::Now, tail)])
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &upstream.url(), "openai", ""),
    ));
    let got = post(&probity.url("/openai/v1/embeddings"), EMBEDDINGS_REQUEST).await;
    let error = got.error(502, "provider_invalid_response");
    assert_eq!(error["code"], "embedding_count_mismatch");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("expected 2 vectors for 2 inputs, got 1"),
        "{error}"
    );
    assert_eq!(got.header("probity-capture"), got.header("x-request-id"));
    let metrics = get(&probity.admin_url("/metrics")).await.text();
    let sample = r#"probity_provider_invalid_response_total{route="openai",invariant="embedding_count_mismatch"}"#;
    assert_eq!(metric_value(&metrics, sample), Some(1.0));
}

#[tokio::test]
async fn requests_probity_cannot_read_pass_unchecked_and_are_counted() {
    let upstream = Upstream::json(b"{\"data\": \"whatever\"}").await;
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &upstream.url(), "openai", ""),
    ));
    let got = post(&probity.url("/openai/v1/embeddings"), "input=a&input=b").await;
    assert_eq!(got.status, 200);
    assert_eq!(got.text(), "{\"data\": \"whatever\"}");
    let got = post(&probity.url("/openai/v1/embeddings"), r#"{"input": 42}"#).await;
    assert_eq!(got.status, 200);
    let metrics = get(&probity.admin_url("/metrics")).await.text();
    let sample = |reason: &str| {
        metric_value(
            &metrics,
            &format!(r#"probity_uninspected_total{{route="openai",reason="{reason}"}}"#),
        )
    };
    assert_eq!(sample("request_not_json"), Some(1.0));
    assert_eq!(sample("request_shape"), Some(1.0));
}

/// The fuzzer's seed 5 (issue 35): a chat answer with three choices to a
/// request whose body is empty, or whose fields have the wrong type, was
/// rejected `choice_count_mismatch` ("expected 1 choices (n = 1)") while
/// the same answer to a body that is not JSON passed. Each is unreadable
/// alike now: passed unchanged, counted by its reason.
#[tokio::test]
async fn an_empty_or_wrong_typed_request_is_unreadable_as_one_that_is_not_json() {
    let answer = r#"{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"a"},"finish_reason":"stop"},{"index":1,"message":{"role":"assistant","content":"b"},"finish_reason":"stop"},{"index":2,"message":{"role":"assistant","content":"c"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":3,"total_tokens":4}}"#;
    let upstream = Upstream::json(answer.as_bytes()).await;
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &upstream.url(), "openai", ""),
    ));
    let chat = probity.url("/openai/v1/chat/completions");
    for request in [
        "",
        "not json",
        r#"{"model":"m","messages":5}"#,
        r#"{"model":"m","messages":[],"n":"3"}"#,
    ] {
        let got = post(&chat, request).await;
        assert_eq!(got.status, 200, "{request:?}: {}", got.text());
        assert_eq!(got.text(), answer, "{request:?}");
    }
    // Read, the same answer is what it is: three choices for one asked.
    let got = post(
        &chat,
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
    )
    .await;
    assert_eq!(
        got.error(502, "provider_invalid_response")["code"],
        "choice_count_mismatch"
    );
    let metrics = get(&probity.admin_url("/metrics")).await.text();
    let sample = |reason: &str| {
        metric_value(
            &metrics,
            &format!(r#"probity_uninspected_total{{route="openai",reason="{reason}"}}"#),
        )
    };
    assert_eq!(sample("request_not_json"), Some(2.0));
    assert_eq!(sample("request_shape"), Some(2.0));
}

/// A body is scanned frame by frame as it arrives: wherever the frames cut
/// it (inside a number, a string, an escape, a literal, between a key and
/// its colon), the answer is the one the whole body gets.
#[tokio::test]
async fn a_body_in_pieces_is_judged_as_the_whole_body() {
    let bodies = [
        embeddings_body("4"),
        embeddings_body(r#""four""#),
        embeddings_body("4").replace("0.4]", "1e999]"),
        embeddings_body("4").replace("0.3, 0.4", "0.3"),
        embeddings_body("4").replace(r#""m""#, r#""m\u00e9\"""#),
        format!("\u{feff}{}  \n", embeddings_body("true")),
        embeddings_body("4")[..150].to_string(),
        embeddings_body("4").replace("0.2", "0.2.5"),
    ];
    let cases: Vec<(String, usize)> = bodies
        .iter()
        .flat_map(|body| [0, 1, 7, 16].map(|size| (body.clone(), size)))
        .collect();
    let replies = cases.clone();
    let upstream = Upstream::start(move |request| {
        let n: usize = request.target.rsplit('=').next().unwrap().parse().unwrap();
        let (body, size) = &replies[n];
        if *size == 0 {
            return Reply::json(200, body.clone());
        }
        let parts = body
            .as_bytes()
            .chunks(*size)
            .map(|piece| part(Before::Pause(std::time::Duration::from_millis(1)), piece))
            .collect();
        Reply::stream("application/json", parts)
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &upstream.url(), "openai", ""),
    ));
    let mut whole = None;
    for (n, (body, size)) in cases.iter().enumerate() {
        let url = probity.url(&format!("/openai/v1/embeddings?case={n}"));
        let got = post(&url, EMBEDDINGS_REQUEST).await;
        let seen = (
            got.status,
            got.header("probity-normalized").map(str::to_string),
            if got.status == 200 {
                got.text()
            } else {
                let error = probity_error(&got.json()).unwrap();
                format!("{} {}", error["code"], error["invariant"])
            },
        );
        match size {
            0 => whole = Some(seen),
            _ => assert_eq!(Some(&seen), whole.as_ref(), "{body:?} in pieces of {size}"),
        }
    }
}

/// xAI's consistent answer (vercel/ai #11487: prompt 279, completion 6,
/// reasoning 89, total 374; xAI counts reasoning outside completion and
/// inside total). On a route set to xAI's convention it passes byte for
/// byte; on a route that judges by OpenAI's definitions its four figures
/// contradict each other and are not reported, counted by relation; a
/// total that is not xAI's sum is caught under xAI's convention too.
#[tokio::test]
async fn a_route_set_to_xais_convention_judges_by_it() {
    let answer = |total: u64| {
        format!(
            r#"{{"id":"c-xai","object":"chat.completion","created":1,"model":"grok-4-fast-reasoning","choices":[{{"index":0,"message":{{"role":"assistant","content":"Hi"}},"finish_reason":"stop"}}],"usage":{{"prompt_tokens":279,"completion_tokens":6,"total_tokens":{total},"prompt_tokens_details":{{"text_tokens":279,"audio_tokens":0,"image_tokens":0,"cached_tokens":4}},"completion_tokens_details":{{"reasoning_tokens":89,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"num_sources_used":0}}}}"#
        )
    };
    let upstream = Upstream::start(move |request| {
        let total = if request.target.contains("/off-sum/") {
            375
        } else {
            374
        };
        Reply::json(200, answer(total))
    })
    .await;
    let routes = [
        route(
            "grok",
            "/grok",
            &upstream.url(),
            "openai",
            "relations = \"xai\"",
        ),
        route("openai", "/openai", &upstream.url(), "openai", ""),
    ]
    .concat();
    let probity = Probity::start(&config("", &routes));
    let request =
        r#"{"model":"grok-4-fast-reasoning","messages":[{"role":"user","content":"hi"}]}"#;
    let got = post(&probity.url("/grok/v1/chat/completions"), request).await;
    assert_eq!(got.status, 200);
    assert_eq!(
        got.text(),
        answer(374),
        "xAI's consistent answer passes byte for byte"
    );
    assert!(got.header("probity-normalized").is_none());

    let got = post(&probity.url("/openai/v1/chat/completions"), request).await;
    assert_eq!(got.status, 200);
    assert_eq!(
        got.header("probity-normalized"),
        Some("/usage/prompt_tokens,/usage/completion_tokens,/usage/total_tokens,/usage/completion_tokens_details/reasoning_tokens")
    );
    let body = got.json();
    for figure in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        assert!(body["usage"][figure].is_null(), "{figure}: {body}");
    }
    assert_eq!(body["usage"]["prompt_tokens_details"]["cached_tokens"], 4);

    let got = post(&probity.url("/grok/off-sum/chat/completions"), request).await;
    assert_eq!(
        got.header("probity-normalized"),
        Some("/usage/prompt_tokens,/usage/completion_tokens,/usage/total_tokens,/usage/completion_tokens_details/reasoning_tokens")
    );

    let metrics = get(&probity.admin_url("/metrics")).await.text();
    let count = |route: &str, relation: &str| {
        metric_value(
            &metrics,
            &format!(
                r#"probity_figure_contradictions_total{{route="{route}",relation="{relation}"}}"#
            ),
        )
    };
    assert_eq!(
        count("openai", "total_tokens=prompt_tokens+completion_tokens"),
        Some(1.0)
    );
    assert_eq!(
        count("openai", "reasoning_tokens<=completion_tokens"),
        Some(1.0)
    );
    assert_eq!(
        count(
            "grok",
            "total_tokens=prompt_tokens+completion_tokens+reasoning_tokens"
        ),
        Some(1.0)
    );
    assert_eq!(count("grok", "reasoning_tokens<=completion_tokens"), None);
    // Type errors are counted apart: none here.
    assert!(
        !metrics.contains("probity_malformed_figures_total{route=\"openai\""),
        "{metrics}"
    );
}

/// `relations` is checked with the configuration: a name that is no
/// convention, and one the route's dialect does not take.
#[test]
fn check_config_refuses_a_convention_a_route_cannot_take() {
    let path = temp_path(".toml");
    let check = |b: &str| {
        let routes = [
            route(
                "a",
                "/a",
                "http://127.0.0.1:9",
                "anthropic",
                "relations = \"xai\"",
            ),
            route("b", "/b", "http://127.0.0.1:9", "openai", b),
        ]
        .concat();
        std::fs::write(&path, config("", &routes)).unwrap();
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_probity"))
            .args(["check-config"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(!output.status.success());
        String::from_utf8_lossy(&output.stderr).into_owned()
            + &String::from_utf8_lossy(&output.stdout)
    };
    let said = check("relations = \"whatever\"");
    assert!(
        said.contains("routes[1].relations") && said.contains("whatever"),
        "{said}"
    );
    let said = check("relations = \"off\"");
    assert!(
        said.contains("routes[0].relations") && said.contains("anthropic"),
        "{said}"
    );
    let _ = std::fs::remove_file(&path);
}
