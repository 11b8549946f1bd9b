//! A route's Google credential (`google_credentials`): a service-account
//! key exchanged at its `token_uri` (a fake token endpoint that verifies
//! the signed assertion), or the metadata server's token (a fake one named
//! by `GCE_METADATA_HOST`, set for the probity child alone). The upstream
//! sees `Authorization: Bearer <token>`; a short-lived token is refreshed
//! before it lapses by one fetch under a burst; a token endpoint that is
//! down or refuses is a clear `upstream_unreachable`; no token and no
//! assertion reaches the logs.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;

use crate::support::{
    can_run, config, part, route, send, temp_path, Before, Got, Probity, Recorded, Reply, Upstream,
};

/// A Vertex AI generateContent path, as google-genai with `vertexai=True` calls it.
const VERTEX_PATH: &str =
    "/vertex/v1/projects/probity-test/locations/us-central1/publishers/google/models/gemini-2.0-flash:generateContent";

/// A sound Gemini answer.
const ANSWER: &[u8] = br#"{"candidates":[{"content":{"role":"model","parts":[{"text":"Hello."}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":2,"totalTokenCount":5,"trafficType":"ON_DEMAND"},"modelVersion":"gemini-2.0-flash"}"#;

const QUESTION: &str = r#"{"contents":[{"role":"user","parts":[{"text":"Hi"}]}]}"#;

/// A throwaway RSA key made for this test run (`openssl genpkey`), written
/// as a service-account key file whose `token_uri` is `token_uri`, and the
/// public key (PKCS#1 DER) the fake token endpoint verifies with.
struct TestKey {
    path: std::path::PathBuf,
    public: Vec<u8>,
}

const CLIENT_EMAIL: &str = "probity@probity-test.iam.gserviceaccount.com";

fn test_key(test: &str, token_uri: &str) -> Option<TestKey> {
    let openssl = std::process::Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    let missing: &[&str] = if openssl { &[] } else { &["openssl"] };
    if !can_run(test, missing, "apt-get install openssl") {
        return None;
    }
    let pem = temp_path(".pem");
    let der = temp_path(".der");
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let (pem_s, der_s) = (pem.to_str().unwrap(), der.to_str().unwrap());
    run(&[
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
        "-out",
        pem_s,
    ]);
    run(&[
        "rsa",
        "-in",
        pem_s,
        "-RSAPublicKey_out",
        "-outform",
        "DER",
        "-out",
        der_s,
    ]);
    let key = serde_json::json!({
        "type": "service_account",
        "project_id": "probity-test",
        "private_key_id": "0123456789abcdef",
        "private_key": std::fs::read_to_string(&pem).unwrap(),
        "client_email": CLIENT_EMAIL,
        "client_id": "100000000000000000000",
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": token_uri,
        "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
    });
    let path = temp_path(".json");
    std::fs::write(&path, key.to_string()).unwrap();
    let public = std::fs::read(&der).unwrap();
    let _ = std::fs::remove_file(pem);
    let _ = std::fs::remove_file(der);
    Some(TestKey { path, public })
}

fn base64url(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'-' => 62,
        b'_' => 63,
        _ => panic!("not base64url: {text}"),
    };
    let bits: Vec<u8> = text.bytes().filter(|&c| c != b'=').map(value).collect();
    let mut out = Vec::new();
    for chunk in bits.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &v)| n | (u32::from(v) << (18 - 6 * i)));
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

/// The form value of `name` in a urlencoded body.
fn form(body: &[u8], name: &str) -> Option<String> {
    std::str::from_utf8(body).ok()?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == name).then(|| {
            v.replace("%3A", ":")
                .replace("%2F", "/")
                .replace("%3D", "=")
        })
    })
}

/// What the fake token endpoint answers: the assertion checked (RS256 over
/// the key's public half; RFC 7523's claims), then the next token.
struct TokenEndpoint {
    /// The key's public half, once the key (which names this endpoint) is made.
    public: Arc<std::sync::OnceLock<(Vec<u8>, String)>>,
    expires_in: u64,
    delay: Duration,
    /// The assertions it was sent, to look for in the logs.
    assertions: Arc<Mutex<Vec<String>>>,
    issued: std::sync::atomic::AtomicUsize,
}

impl TokenEndpoint {
    fn answer(&self, request: &Recorded) -> Reply {
        let bad = |why: &str| {
            Reply::json(
                400,
                format!(r#"{{"error":"invalid_grant","error_description":"{why}"}}"#),
            )
        };
        let (public, token_uri) = self.public.get().unwrap();
        if form(&request.body, "grant_type").as_deref()
            != Some("urn:ietf:params:oauth:grant-type:jwt-bearer")
        {
            return bad("grant_type");
        }
        let Some(assertion) = form(&request.body, "assertion") else {
            return bad("no assertion");
        };
        self.assertions.lock().unwrap().push(assertion.clone());
        let parts: Vec<&str> = assertion.split('.').collect();
        let [head, claims, signature] = parts[..] else {
            return bad("not a JWT");
        };
        let key = ring::signature::UnparsedPublicKey::new(
            &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            public,
        );
        let signed = format!("{head}.{claims}");
        if key
            .verify(signed.as_bytes(), &base64url(signature))
            .is_err()
        {
            return bad("Invalid JWT Signature.");
        }
        let head: serde_json::Value = serde_json::from_slice(&base64url(head)).unwrap();
        let claims: serde_json::Value = serde_json::from_slice(&base64url(claims)).unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let sound = head["alg"] == "RS256"
            && claims["iss"] == CLIENT_EMAIL
            && claims["aud"] == token_uri.as_str()
            && claims["scope"] == "https://www.googleapis.com/auth/cloud-platform"
            && claims["iat"]
                .as_u64()
                .is_some_and(|iat| iat.abs_diff(now) < 60)
            && claims["exp"].as_u64() > claims["iat"].as_u64();
        if !sound {
            return bad(&format!("claims {claims}"));
        }
        let issued = self
            .issued
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1;
        let body = format!(
            r#"{{"access_token":"ya29.test-token-{issued}","expires_in":{},"token_type":"Bearer"}}"#,
            self.expires_in
        );
        Reply::stream(
            "application/json",
            vec![part(Before::Pause(self.delay), body)],
        )
    }
}

/// A fake token endpoint on 127.0.0.1 and the key file that points at it.
async fn token_endpoint(
    test: &str,
    expires_in: u64,
    delay: Duration,
) -> Option<(Upstream, TestKey, Arc<Mutex<Vec<String>>>)> {
    let public = Arc::new(std::sync::OnceLock::new());
    let assertions = Arc::new(Mutex::new(Vec::new()));
    let endpoint = TokenEndpoint {
        public: public.clone(),
        expires_in,
        delay,
        assertions: assertions.clone(),
        issued: std::sync::atomic::AtomicUsize::new(0),
    };
    let upstream = Upstream::start(move |request| endpoint.answer(request)).await;
    let token_uri = format!("{}/token", upstream.url());
    let key = test_key(test, &token_uri)?;
    public.set((key.public.clone(), token_uri)).unwrap();
    Some((upstream, key, assertions))
}

fn vertex_route(upstream: &Upstream, extra: &str) -> String {
    config(
        "",
        &route("vertex", "/vertex", &upstream.url(), "gemini", extra),
    )
}

/// A generateContent call as an SDK makes it, with a credential of its
/// own that probity must replace.
async fn ask(probity: &Probity) -> Got {
    send(
        Request::post(probity.url(&format!("{VERTEX_PATH}?alt=json&key=client-query-key")))
            .header("content-type", "application/json")
            .header("authorization", "Bearer client-own-token")
            .header("x-goog-api-key", "client-own-key")
            .body(Full::new(Bytes::from_static(QUESTION.as_bytes())))
            .unwrap(),
    )
    .await
}

/// What the upstream was authorized with, request by request.
fn bearers(upstream: &Upstream) -> Vec<String> {
    upstream
        .requests()
        .iter()
        .map(|r| r.header("authorization").unwrap_or("-").to_string())
        .collect()
}

/// Neither a token nor an assertion in anything the process wrote.
fn assert_no_secret_logged(probity: &Probity, assertions: &[String]) {
    let text = format!("{}\n{}", probity.log_text(), probity.stderr_text());
    assert!(!text.contains("ya29."), "a token was logged:\n{text}");
    for assertion in assertions {
        assert!(
            !text.contains(assertion.as_str()),
            "an assertion was logged"
        );
    }
}

#[tokio::test]
async fn a_key_files_token_replaces_the_clients_credential() {
    let test = "a_key_files_token_replaces_the_clients_credential";
    let Some((tokens, key, assertions)) = token_endpoint(test, 3599, Duration::ZERO).await else {
        return;
    };
    let upstream = Upstream::json(ANSWER).await;
    let extra = format!("google_credentials = {:?}", key.path.to_str().unwrap());
    let probity =
        Probity::start_with_env(&vertex_route(&upstream, &extra), &[("RUST_LOG", "trace")]);
    for _ in 0..3 {
        let got = ask(&probity).await;
        assert_eq!(got.status, 200, "{}", got.text());
        assert_eq!(got.body, ANSWER);
    }
    assert_eq!(bearers(&upstream), ["Bearer ya29.test-token-1"; 3]);
    let seen = &upstream.requests()[0];
    assert_eq!(
        seen.header("x-goog-api-key"),
        None,
        "the client's key is removed"
    );
    assert_eq!(
        tokens.requests().len(),
        1,
        "one token serves until it is due"
    );
    assert_no_secret_logged(&probity, &assertions.lock().unwrap());
}

#[tokio::test]
async fn a_short_lived_token_is_refreshed_before_it_lapses_by_one_fetch() {
    let test = "a_short_lived_token_is_refreshed_before_it_lapses_by_one_fetch";
    // 4 s to live: due for refresh at half its life. The endpoint takes
    // 300 ms, so each burst arrives while a fetch is in flight.
    let delay = Duration::from_millis(300);
    let Some((tokens, key, assertions)) = token_endpoint(test, 4, delay).await else {
        return;
    };
    let upstream = Upstream::json(ANSWER).await;
    let extra = format!("google_credentials = {:?}", key.path.to_str().unwrap());
    let probity =
        Probity::start_with_env(&vertex_route(&upstream, &extra), &[("RUST_LOG", "debug")]);
    let burst = || async {
        let asks = (0..8).map(|_| ask(&probity));
        for got in futures_util::future::join_all(asks).await {
            assert_eq!(got.status, 200, "{}", got.text());
        }
    };
    let first = Instant::now();
    burst().await;
    assert_eq!(
        tokens.requests().len(),
        1,
        "a burst on a cold route makes one fetch"
    );
    burst().await;
    assert_eq!(tokens.requests().len(), 1, "a fresh token is reused");
    assert!(
        first.elapsed() < Duration::from_millis(1500),
        "the test ran too slowly to judge"
    );
    tokio::time::sleep(Duration::from_millis(2500).saturating_sub(first.elapsed())).await;
    burst().await;
    assert_eq!(
        tokens.requests().len(),
        2,
        "one refresh for the whole burst"
    );
    let seen = bearers(&upstream);
    assert_eq!(seen[..16], ["Bearer ya29.test-token-1"; 16]);
    assert_eq!(
        seen[16..],
        ["Bearer ya29.test-token-2"; 8],
        "the new token, before the old lapsed"
    );
    assert_no_secret_logged(&probity, &assertions.lock().unwrap());
}

#[tokio::test]
async fn the_metadata_servers_token_is_used_where_gce_metadata_host_points() {
    let metadata = Upstream::start(|request| {
        let path = "/computeMetadata/v1/instance/service-accounts/default/token";
        if request.header("metadata-flavor") != Some("Google") || !request.target.starts_with(path)
        {
            return Reply::json(403, r#"{"error":"Missing Metadata-Flavor:Google header."}"#);
        }
        Reply::json(
            200,
            r#"{"access_token":"ya29.metadata-token","expires_in":3599,"token_type":"Bearer"}"#,
        )
    })
    .await;
    let upstream = Upstream::json(ANSWER).await;
    let host = metadata.addr.to_string();
    let probity = Probity::start_with_env(
        &vertex_route(&upstream, "google_credentials = \"metadata\""),
        &[("GCE_METADATA_HOST", &host), ("RUST_LOG", "trace")],
    );
    for _ in 0..2 {
        let got = ask(&probity).await;
        assert_eq!(got.status, 200, "{}", got.text());
    }
    assert_eq!(bearers(&upstream), ["Bearer ya29.metadata-token"; 2]);
    let asked = metadata.requests();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(asked[0].target.contains("scopes="), "{}", asked[0].target);
    assert_no_secret_logged(&probity, &[]);
}

#[tokio::test]
async fn a_token_endpoint_that_is_down_is_a_clear_error_at_once() {
    let test = "a_token_endpoint_that_is_down_is_a_clear_error_at_once";
    // A port nothing listens on.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let Some(key) = test_key(test, &format!("http://{addr}/token")) else {
        return;
    };
    let upstream = Upstream::json(ANSWER).await;
    let extra = format!("google_credentials = {:?}", key.path.to_str().unwrap());
    let probity = Probity::start(&vertex_route(&upstream, &extra));
    let started = Instant::now();
    let got = ask(&probity).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let error = got.error(502, "upstream_unreachable");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("http://{addr}/token")),
        "{message}"
    );
    assert!(message.contains("google_credentials key file"), "{message}");
    assert!(
        upstream.requests().is_empty(),
        "nothing is sent without a token"
    );
}

#[tokio::test]
async fn a_refused_assertion_is_one_error_for_a_whole_burst() {
    let test = "a_refused_assertion_is_one_error_for_a_whole_burst";
    let Some((_, key, _)) = token_endpoint(test, 3599, Duration::ZERO).await else {
        return;
    };
    // Another key's signature: the endpoint verifies with the first key.
    let refusing = Upstream::start(|_| {
        Reply::stream(
            "application/json",
            vec![part(
                Before::Pause(Duration::from_millis(300)),
                r#"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#,
            )],
        )
    })
    .await;
    let text = std::fs::read_to_string(&key.path).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["token_uri"] = format!("{}/token", refusing.url()).into();
    std::fs::write(&key.path, json.to_string()).unwrap();
    let upstream = Upstream::json(ANSWER).await;
    let extra = format!("google_credentials = {:?}", key.path.to_str().unwrap());
    let probity = Probity::start(&vertex_route(&upstream, &extra));
    let asks = (0..5).map(|_| ask(&probity));
    for got in futures_util::future::join_all(asks).await {
        let error = got.error(502, "upstream_unreachable");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains("Invalid JWT Signature"), "{message}");
    }
    assert_eq!(refusing.requests().len(), 1, "the burst shared one refusal");
    assert!(upstream.requests().is_empty());
}

fn check_config(text: &str, env: &[(&str, &str)]) -> (bool, String) {
    let path = temp_path(".toml");
    std::fs::write(&path, text).unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_probity"));
    command
        .arg("check-config")
        .arg(&path)
        .env_remove("GOOGLE_APPLICATION_CREDENTIALS");
    for (key, value) in env {
        command.env(key, value);
    }
    let out = command.output().unwrap();
    let _ = std::fs::remove_file(path);
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn check_config_reports_every_bad_google_credential_at_once() {
    let upstream = "https://us-central1-aiplatform.googleapis.com";
    let (ok, said) = check_config(
        &config(
            "",
            &[
                route("a", "/a", upstream, "gemini", "google_credentials = \"\""),
                route(
                    "b",
                    "/b",
                    upstream,
                    "gemini",
                    "google_credentials = \"metadata\"\napi_key_env = \"GEMINI_API_KEY\"",
                ),
                route(
                    "c",
                    "/c",
                    upstream,
                    "bedrock",
                    "google_credentials = \"metadata\"\naws_region = \"us-east-1\"",
                ),
            ]
            .concat(),
        ),
        &[],
    );
    assert!(!ok, "{said}");
    for expected in [
        "routes[0].google_credentials: empty",
        "routes[1].google_credentials: beside api_key_env",
        "routes[2].google_credentials: beside aws_region",
    ] {
        assert!(said.contains(expected), "no {expected:?} in:\n{said}");
    }

    let malformed = temp_path(".json");
    std::fs::write(
        &malformed,
        r#"{"type":"service_account","client_email":"x@y"}"#,
    )
    .unwrap();
    let bad_pem = temp_path(".json");
    let key = serde_json::json!({
        "type": "service_account", "client_email": CLIENT_EMAIL,
        "private_key": "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n",
        "token_uri": "https://oauth2.googleapis.com/token",
    });
    std::fs::write(&bad_pem, key.to_string()).unwrap();
    let routes = [
        route(
            "a",
            "/a",
            upstream,
            "gemini",
            "google_credentials = \"/nonexistent/key.json\"",
        ),
        route(
            "b",
            "/b",
            upstream,
            "gemini",
            &format!("google_credentials = {malformed:?}"),
        ),
        route(
            "c",
            "/c",
            upstream,
            "gemini",
            &format!("google_credentials = {bad_pem:?}"),
        ),
        route(
            "d",
            "/d",
            upstream,
            "gemini",
            "google_credentials = \"metadata\"",
        ),
    ];
    let (ok, said) = check_config(
        &config("", &routes.concat()),
        &[("GOOGLE_APPLICATION_CREDENTIALS", "/some/key.json")],
    );
    assert!(!ok, "{said}");
    for expected in [
        "routes[0].google_credentials: cannot read the service-account key file /nonexistent/key.json",
        "routes[1].google_credentials: ",
        "is not a service-account key",
        "routes[2].google_credentials: ",
        "its private_key",
        "routes[3].google_credentials: GOOGLE_APPLICATION_CREDENTIALS is set",
    ] {
        assert!(said.contains(expected), "no {expected:?} in:\n{said}");
    }
    assert!(
        !said.contains("not a key"),
        "the key's text is never echoed:\n{said}"
    );

    let _ = (
        std::fs::remove_file(malformed),
        std::fs::remove_file(bad_pem),
    );
    // The metadata server passes: it is asked on the first request only.
    let routes = route(
        "d",
        "/d",
        upstream,
        "gemini",
        "google_credentials = \"metadata\"",
    );
    let (ok, said) = check_config(&config("", &routes), &[]);
    assert!(ok, "{said}");
}

#[tokio::test]
async fn a_failed_refresh_keeps_the_token_that_still_holds_then_says_so() {
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = asked.clone();
    // The first token lives 4 s; every later ask fails.
    let metadata = Upstream::start(move |_| {
        if count.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            Reply::json(
                200,
                r#"{"access_token":"ya29.only-token","expires_in":4,"token_type":"Bearer"}"#,
            )
        } else {
            Reply::json(503, "metadata server unavailable")
        }
    })
    .await;
    let upstream = Upstream::json(ANSWER).await;
    let host = metadata.addr.to_string();
    let probity = Probity::start_with_env(
        &vertex_route(&upstream, "google_credentials = \"metadata\""),
        &[("GCE_METADATA_HOST", &host)],
    );
    let first = Instant::now();
    assert_eq!(ask(&probity).await.status, 200);
    tokio::time::sleep(Duration::from_millis(2500).saturating_sub(first.elapsed())).await;
    let got = ask(&probity).await;
    assert_eq!(got.status, 200, "the old token still holds: {}", got.text());
    assert_eq!(metadata.requests().len(), 2, "the refresh was tried");
    assert_eq!(bearers(&upstream), ["Bearer ya29.only-token"; 2]);
    let warned = probity.logs().iter().any(|line| {
        line["level"] == "WARN"
            && line["message"]
                .as_str()
                .is_some_and(|m| m.contains("could not refresh the Google access token"))
    });
    assert!(warned, "{}", probity.log_text());
    tokio::time::sleep(Duration::from_millis(4500).saturating_sub(first.elapsed())).await;
    let got = ask(&probity).await;
    let error = got.error(502, "upstream_unreachable");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("the metadata server"), "{message}");
    assert!(message.contains(&host), "{message}");
    assert_eq!(
        upstream.requests().len(),
        2,
        "no request goes out with a lapsed token"
    );
    assert_no_secret_logged(&probity, &[]);
}
