//! Who may come in (`[[clients]]`): only a configured token in the route
//! dialect's credential header is admitted, the token is swapped for the
//! route's provider key, a refused request forwards nothing and leaves
//! nothing on its connection, and no credential ends up in a log line, a
//! metric, a capture or an error body, even at `RUST_LOG=debug`.

use crate::support::*;
use http::Request;
use http_body_util::Full;

/// Canaries: if any of these shows up where it must not, it leaked.
const PROVIDER_KEY: &str = "sk-canary-provider-7f3a9c1e5b2d4680";
const SEARCH_TOKEN: &str = "pt-canary-search-ui-1b9e7d3c5a";
const BATCH_TOKEN: &str = "pt-canary-batch-job-2c8f6e4a0d";
const WRONG_TOKEN: &str = "pt-canary-wrong-guess-9a8b7c6d5e";
const CANARIES: [&str; 4] = [PROVIDER_KEY, SEARCH_TOKEN, BATCH_TOKEN, WRONG_TOKEN];

fn reply(recorded: &Recorded) -> Reply {
    let body = match recorded.target.as_str() {
        t if t.ends_with("/v1/embeddings") => fixture("openai/embeddings_pass/response.json"),
        // `reasoning_tokens` is a string: nulled, and the response captured.
        t if t.ends_with("/v1/chat/completions") => {
            fixture("openai/gen_chat_reasoning_tokens_string/response.json")
        }
        t if t.ends_with("/v1/messages") => fixture("anthropic/gen_messages_pass/response.json"),
        _ => br#"{"models": []}"#.to_vec(),
    };
    Reply::json(200, body)
}

async fn setup(log_level: &str) -> (Upstream, Probity) {
    let upstream = Upstream::start(reply).await;
    let url = upstream.url();
    let key = "api_key_env = \"PROVIDER_KEY\"";
    let routes = [
        route("openai", "/openai", &url, "openai", key),
        route("anthropic", "/anthropic", &url, "anthropic", key),
        route("gemini", "/gemini", &url, "gemini", key),
        // No provider key: a local model server.
        route("local", "/local", &url, "openai", ""),
        route(
            "gone",
            "/gone",
            &format!("http://127.0.0.1:{}", closed_port()),
            "openai",
            key,
        ),
        "[[clients]]\nname = \"search-ui\"\ntoken_env = \"T_SEARCH\"\n".into(),
        "[[clients]]\nname = \"batch\"\ntoken_env = \"T_BATCH\"\n".into(),
    ]
    .concat();
    let env = [
        ("PROVIDER_KEY", PROVIDER_KEY),
        ("T_SEARCH", SEARCH_TOKEN),
        ("T_BATCH", BATCH_TOKEN),
        ("RUST_LOG", log_level),
    ];
    let probity = Probity::start_with_env(&config("", &routes), &env);
    (upstream, probity)
}

async fn call(probity: &Probity, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Got {
    let mut request = Request::post(probity.url(path)).header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    send(request.body(Full::new(body.to_vec().into())).unwrap()).await
}

/// A call: path, headers, body.
type Call<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a [u8]);
/// A call, and the header the upstream must get the provider key in.
type Admitted<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a [u8], &'a str);

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

#[tokio::test]
async fn only_a_configured_token_in_the_dialects_header_gets_in() {
    let (upstream, probity) = setup("info").await;
    let embed = fixture("openai/embeddings_pass/request.json");
    let messages = fixture("anthropic/gen_messages_pass/request.json");
    let (search, wrong) = (bearer(SEARCH_TOKEN), bearer(WRONG_TOKEN));
    let refused: Vec<Call<'_>> = vec![
        ("/openai/v1/embeddings", vec![], &embed),
        (
            "/openai/v1/embeddings",
            vec![("authorization", &wrong)],
            &embed,
        ),
        // The token without its scheme, in another dialect's header, or in
        // a header of probity's own: none of them authenticates.
        (
            "/openai/v1/embeddings",
            vec![("authorization", SEARCH_TOKEN)],
            &embed,
        ),
        (
            "/openai/v1/embeddings",
            vec![("x-api-key", SEARCH_TOKEN)],
            &embed,
        ),
        (
            "/openai/v1/embeddings",
            vec![("probity-authorization", &search)],
            &embed,
        ),
        (
            "/anthropic/v1/messages",
            vec![("authorization", &search)],
            &messages,
        ),
        (
            "/anthropic/v1/messages",
            vec![("x-api-key", WRONG_TOKEN)],
            &messages,
        ),
        (
            "/gemini/v1beta/models",
            vec![("authorization", &search)],
            b"",
        ),
    ];
    for (path, headers, body) in &refused {
        let got = call(&probity, path, headers, body).await;
        let error = got.error(401, "unauthenticated");
        assert!(
            error["message"].as_str().unwrap().contains("token"),
            "{error}"
        );
        assert_eq!(
            got.header("connection"),
            Some("close"),
            "{path} {headers:?}"
        );
        assert!(got.header("www-authenticate").is_some());
    }
    // Each SDK finds the message where it looks.
    let anthropic = call(&probity, "/anthropic/v1/messages", &[], &messages).await;
    assert_eq!(anthropic.json()["error"]["type"], "unauthenticated");
    let gemini = call(&probity, "/gemini/v1beta/models", &[], b"").await;
    assert_eq!(gemini.json()["error"]["status"], "UNAUTHENTICATED");
    assert!(upstream.requests().is_empty(), "{:?}", upstream.requests());

    // Each call, and the header the provider key must reach the upstream in.
    let admitted: Vec<Admitted<'_>> = vec![
        (
            "/openai/v1/embeddings",
            vec![("authorization", &search)],
            &embed,
            "authorization",
        ),
        (
            "/openai/v1/embeddings",
            vec![("api-key", BATCH_TOKEN)],
            &embed,
            "authorization",
        ),
        (
            "/anthropic/v1/messages",
            vec![("x-api-key", SEARCH_TOKEN)],
            &messages,
            "x-api-key",
        ),
        (
            "/gemini/v1beta/models",
            vec![("x-goog-api-key", BATCH_TOKEN)],
            b"",
            "x-goog-api-key",
        ),
    ];
    for (path, headers, body, _) in &admitted {
        let got = call(&probity, path, headers, body).await;
        assert_eq!(got.status, 200, "{path}: {}", got.text());
    }
    let recorded = upstream.requests();
    assert_eq!(recorded.len(), admitted.len());
    // Without a provider key to put in its place, the token is still removed.
    let local = call(
        &probity,
        "/local/v1/embeddings",
        &[("authorization", &search)],
        &embed,
    )
    .await;
    assert_eq!(local.status, 200);
    let last = upstream.requests().pop().unwrap();
    assert_eq!(last.header("authorization"), None, "{:?}", last.headers);
    for (request, (path, _, _, header)) in recorded.iter().zip(&admitted) {
        // The provider's key replaces the token; the token reaches no upstream.
        let expected = match *header {
            "authorization" => bearer(PROVIDER_KEY),
            _ => PROVIDER_KEY.to_string(),
        };
        assert_eq!(request.header(header), Some(expected.as_str()), "{path}");
        for (name, value) in &request.headers {
            let value = value.to_str().unwrap();
            assert!(
                !value.contains(SEARCH_TOKEN) && !value.contains(BATCH_TOKEN),
                "{path}: {name}"
            );
        }
    }

    // The client is a label, from configuration.
    let metric = |client: &str, route: &str, status: &str| {
        format!(
            "probity_requests_total{{client=\"{client}\",route=\"{route}\",status=\"{status}\"}}"
        )
    };
    assert_eq!(
        probity.metric(&metric("search-ui", "openai", "200")).await,
        Some(1.0)
    );
    assert_eq!(
        probity.metric(&metric("batch", "openai", "200")).await,
        Some(1.0)
    );
    assert_eq!(
        probity.metric(&metric("batch", "gemini", "200")).await,
        Some(1.0)
    );
    assert_eq!(
        probity.metric(&metric("unknown", "openai", "401")).await,
        Some(5.0)
    );
    let line = probity.request_log(got_id(&probity).await.as_str()).await;
    assert_eq!(line["client"], "search-ui", "{line}");
}

/// The request id of a fresh admitted call, for its log line.
async fn got_id(probity: &Probity) -> String {
    let got = call(
        probity,
        "/openai/v1/embeddings",
        &[
            ("authorization", &bearer(SEARCH_TOKEN)),
            ("x-request-id", "admitted-1"),
        ],
        &fixture("openai/embeddings_pass/request.json"),
    )
    .await;
    got.header("x-request-id").unwrap().to_string()
}

/// Which prefixes exist is told only to a client that presents its token.
#[tokio::test]
async fn an_unknown_path_lists_the_prefixes_only_to_a_client() {
    let (_upstream, probity) = setup("info").await;
    let stranger = call(&probity, "/nowhere", &[], b"{}").await;
    let message = stranger.error(404, "no_route")["message"].to_string();
    assert!(!message.contains("/openai"), "{message}");
    let client = call(&probity, "/nowhere", &[("x-api-key", BATCH_TOKEN)], b"{}").await;
    let message = client.error(404, "no_route")["message"].to_string();
    assert!(message.contains("/openai"), "{message}");
}

/// A refused POST's body is never read, so a request hidden in it is never
/// answered: one response, the connection closed, nothing forwarded.
#[tokio::test]
async fn a_refused_body_is_not_read_as_a_second_request() {
    let (upstream, probity) = setup("info").await;
    let smuggled = "GET /openai/v1/models HTTP/1.1\r\nHost: p\r\n\r\n";
    let refused = format!(
        "POST /openai/v1/embeddings HTTP/1.1\r\nHost: p\r\nAuthorization: Bearer {WRONG_TOKEN}\r\n\
         Content-Length: {}\r\n\r\n{smuggled}",
        smuggled.len()
    );
    // Too large: announced past `max_request_bytes`, the rest never read.
    let too_large = format!(
        "POST /openai/v1/embeddings HTTP/1.1\r\nHost: p\r\nAuthorization: Bearer {SEARCH_TOKEN}\r\n\
         Content-Length: 999999999\r\n\r\n{smuggled}"
    );
    for (name, head, status) in [("401", refused, "401"), ("413", too_large, "413")] {
        let started = std::time::Instant::now();
        let reply = raw(probity.addr, head.as_bytes()).await;
        assert!(
            reply.starts_with(&format!("HTTP/1.1 {status}")),
            "{name}: {reply}"
        );
        assert_eq!(reply.matches("HTTP/1.1").count(), 1, "{name}: {reply}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "{name}: kept open"
        );
    }
    assert!(upstream.requests().is_empty(), "{:?}", upstream.requests());
}

/// Every path a credential could leak through, at debug level: admitted,
/// refused (a wrong token), rewritten and captured, unreachable, no route.
#[tokio::test]
async fn no_credential_is_ever_logged_counted_captured_or_echoed() {
    let (_upstream, probity) = setup("debug").await;
    let (search, wrong) = (bearer(SEARCH_TOKEN), bearer(WRONG_TOKEN));
    let chat = fixture("openai/gen_chat_reasoning_tokens_string/request.json");
    let embed = fixture("openai/embeddings_pass/request.json");
    let mut seen = Vec::new();
    let calls: Vec<Call<'_>> = vec![
        (
            "/openai/v1/embeddings",
            vec![("authorization", &search)],
            &embed,
        ),
        (
            "/openai/v1/chat/completions",
            vec![("authorization", &search)],
            &chat,
        ),
        (
            "/openai/v1/embeddings",
            vec![("authorization", &wrong)],
            &embed,
        ),
        (
            "/anthropic/v1/messages",
            vec![("x-api-key", WRONG_TOKEN)],
            b"{}",
        ),
        (
            "/gone/v1/embeddings",
            vec![("authorization", &search)],
            &embed,
        ),
        ("/nowhere", vec![("authorization", &wrong)], b"{}"),
        (
            "/gemini/v1beta/models?key=x",
            vec![
                ("x-goog-api-key", BATCH_TOKEN),
                ("x-request-id", "admitted-2"),
            ],
            b"",
        ),
    ];
    let mut captured = None;
    for (path, headers, body) in &calls {
        let got = call(&probity, path, headers, body).await;
        if got.header("probity-capture").is_some() {
            captured = got.header("probity-capture").map(str::to_string);
        }
        seen.push(format!("{path}: {:?} {}", got.headers, got.text()));
    }
    let captured = captured.expect("the chat response was captured");
    for path in ["/metrics", "/captures", &format!("/captures/{captured}")] {
        let got = probity.admin_get(path).await;
        assert_eq!(got.status, 200, "{path}");
        seen.push(format!("{path}: {:?} {}", got.headers, got.text()));
    }
    // Give the last log lines time to be written.
    probity.request_log("admitted-2").await.to_string();
    let logs = probity.log_text();
    assert!(logs.contains("\"DEBUG\""), "not at debug level: {logs}");
    seen.push(logs);
    for text in &seen {
        for canary in CANARIES {
            assert!(!text.contains(canary), "{canary} leaked in: {text}");
        }
    }
}
