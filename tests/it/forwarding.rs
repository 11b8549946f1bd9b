//! Forwarding over real sockets: what reaches the upstream, what comes back.

use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use tokio::sync::Notify;

#[tokio::test]
async fn a_json_body_passes_through_byte_for_byte() {
    let body = fixture("openai_embeddings.json");
    let reply_body = body.clone();
    let upstream = Upstream::start(move |_| {
        Reply::json(200, reply_body.clone())
            .header("openai-processing-ms", "41")
            .header("x-ratelimit-remaining-requests", "4999")
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &upstream.url(), "openai", ""),
    ));

    let request = br#"{"input": ["a", "b"], "model": "text-embedding-3-small"}"#;
    let got = post(&probity.url("/openai/v1/embeddings"), &request[..]).await;

    assert_eq!(got.status, 200);
    assert_eq!(got.body, body, "the body must arrive unchanged");
    assert_eq!(got.header("content-type"), Some("application/json"));
    assert_eq!(got.header("openai-processing-ms"), Some("41"));
    assert_eq!(got.header("x-ratelimit-remaining-requests"), Some("4999"));
    assert_eq!(
        got.header("content-length"),
        Some(body.len().to_string().as_str())
    );
    let seen = upstream.only_request();
    assert_eq!(seen.method, "POST");
    assert_eq!(seen.target, "/v1/embeddings");
    assert_eq!(
        &seen.body[..],
        &request[..],
        "the request body must arrive unchanged"
    );
    assert_eq!(seen.header("content-type"), Some("application/json"));
}

#[tokio::test]
async fn a_stream_is_relayed_chunk_by_chunk() {
    let gate = Arc::new(Notify::new());
    let stream = fixture("ollama_chat_stream.ndjson");
    let lines: Vec<Vec<u8>> = stream
        .split_inclusive(|b| *b == b'\n')
        .map(<[u8]>::to_vec)
        .collect();
    let (first, rest) = (lines[0].clone(), lines[1..].concat());
    let upstream_gate = gate.clone();
    let upstream = Upstream::start(move |_| {
        Reply::stream(
            "application/x-ndjson",
            vec![
                part(Before::Now, first.clone()),
                part(Before::Gate(upstream_gate.clone()), rest.clone()),
            ],
        )
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route("ollama", "/ollama", &upstream.url(), "ollama", ""),
    ));

    let request = Request::post(probity.url("/ollama/api/chat"))
        .body(Full::new(Bytes::from_static(
            br#"{"model":"llama3.2:3b","messages":[]}"#,
        )))
        .unwrap();
    let response = within("stream head", client().request(request))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
    let mut body = response.into_body();

    // The upstream holds its second chunk until the first reached the client.
    let frame = within("first chunk", body.frame()).await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), lines[0]);
    gate.notify_one();
    let mut received = lines[0].clone();
    while let Some(frame) = within("next chunk", body.frame()).await {
        received.extend_from_slice(&frame.unwrap().into_data().unwrap());
    }
    assert_eq!(received, stream, "the stream must arrive unchanged");
}

#[tokio::test]
async fn an_sse_stream_passes_through_unchanged() {
    let stream = fixture("openai_chat_stream.sse");
    let parts: Vec<Vec<u8>> = stream.chunks(97).map(<[u8]>::to_vec).collect();
    let upstream = Upstream::start(move |_| {
        let parts = parts
            .iter()
            .map(|p| part(Before::Pause(Duration::from_millis(5)), p.clone()))
            .collect();
        Reply::stream("text/event-stream; charset=utf-8", parts)
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &upstream.url(), "openai", ""),
    ));
    let got = post(
        &probity.url("/openai/v1/chat/completions"),
        r#"{"stream":true}"#,
    )
    .await;
    assert_eq!(got.status, 200);
    assert_eq!(
        got.header("content-type"),
        Some("text/event-stream; charset=utf-8")
    );
    assert_eq!(got.body, stream);
}

#[tokio::test]
async fn prefixes_are_stripped_and_the_upstream_base_path_put_first() {
    let upstream = Upstream::json(b"{}").await;
    let routes = [
        route(
            "gw",
            "/gw",
            &format!("{}/base/v1", upstream.url()),
            "openai",
            "",
        ),
        route(
            "gw-deep",
            "/gw/deep",
            &format!("{}/other", upstream.url()),
            "openai",
            "",
        ),
        route(
            "root",
            "/root",
            &format!("{}/", upstream.url()),
            "passthrough",
            "",
        ),
    ]
    .concat();
    let probity = Probity::start(&config("", &routes));

    for (path, expected) in [
        (
            "/gw/embeddings?api-version=2024-02-01&x=%20y",
            "/base/v1/embeddings?api-version=2024-02-01&x=%20y",
        ),
        ("/gw", "/base/v1"),
        ("/gw/deep/rerank", "/other/rerank"),
        ("/gw/deeper", "/base/v1/deeper"),
        ("/root", "/"),
        ("/root/api/tags?", "/api/tags?"),
    ] {
        let got = get(&probity.url(path)).await;
        assert_eq!(got.status, 200, "{path}: {}", got.text());
        let seen = upstream.requests().pop().unwrap();
        assert_eq!(seen.target, expected, "{path}");
    }
}

#[tokio::test]
async fn a_path_without_a_route_is_404_and_never_forwarded() {
    let upstream = Upstream::json(b"{}").await;
    let probity = Probity::start(&config(
        "",
        &route("ollama", "/ollama", &upstream.url(), "ollama", ""),
    ));
    for path in [
        "/",
        "/ollamax/api/tags",
        "/v1/chat/completions",
        "/OLLAMA/api/tags",
    ] {
        let got = get(&probity.url(path)).await;
        let error = got.error(404, "no_route");
        assert_eq!(error["code"], "no_route");
        assert!(error["route"].is_null());
        assert!(
            error["message"].as_str().unwrap().contains("/ollama"),
            "{error}"
        );
    }
    assert!(upstream.requests().is_empty());
}

#[tokio::test]
async fn an_absolute_form_target_or_a_forged_host_never_changes_the_upstream() {
    let upstream = Upstream::json(b"{}").await;
    let elsewhere = Upstream::json(b"{\"elsewhere\":true}").await;
    let probity = Probity::start(&config(
        "",
        &route("ollama", "/ollama", &upstream.url(), "ollama", ""),
    ));

    // Absolute form naming another host (here a real one, so a leak would show).
    let absolute = format!(
        "GET http://{}/ollama/api/tags HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        elsewhere.addr, elsewhere.addr
    );
    let reply = raw(probity.addr, absolute.as_bytes()).await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    // An absolute form whose path matches no route goes nowhere.
    let stray = format!(
        "GET http://{}/api/tags HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        elsewhere.addr
    );
    assert!(raw(probity.addr, stray.as_bytes())
        .await
        .starts_with("HTTP/1.1 404"));
    // A forged Host header.
    let forged = format!(
        "GET /ollama/api/tags HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        elsewhere.addr
    );
    assert!(raw(probity.addr, forged.as_bytes())
        .await
        .starts_with("HTTP/1.1 200"));
    // CONNECT is no tunnel.
    let connect = format!(
        "CONNECT {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        elsewhere.addr, elsewhere.addr
    );
    assert!(raw(probity.addr, connect.as_bytes())
        .await
        .starts_with("HTTP/1.1 404"));

    assert!(
        elsewhere.requests().is_empty(),
        "a request leaked to another host"
    );
    let seen = upstream.requests();
    assert_eq!(seen.len(), 2);
    for request in seen {
        assert_eq!(request.target, "/api/tags");
        assert_eq!(
            request.header("host"),
            Some(upstream.addr.to_string().as_str())
        );
    }
}

#[tokio::test]
async fn hop_by_hop_headers_are_removed_both_ways() {
    let upstream = Upstream::start(|_| {
        Reply::json(200, "{}")
            .header("connection", "x-upstream-hop")
            .header("x-upstream-hop", "1")
            .header("keep-alive", "timeout=5")
            .header("proxy-authenticate", "Basic")
            .header("x-end-to-end", "kept")
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route("ollama", "/ollama", &upstream.url(), "ollama", ""),
    ));

    let request = Request::post(probity.url("/ollama/api/show"))
        .header("connection", "keep-alive, X-Client-Hop")
        .header("x-client-hop", "secret-of-this-hop")
        .header("keep-alive", "timeout=5")
        .header("te", "trailers")
        .header("trailer", "x-checksum")
        .header("upgrade", "websocket")
        .header("proxy-authorization", "Basic dXNlcjpwYXNz")
        .header("x-end-to-end", "kept")
        .header("accept-encoding", "gzip, br")
        .body(Full::new(Bytes::from_static(b"{\"input\":\"x\"}")))
        .unwrap();
    let got = send(request).await;
    assert_eq!(got.status, 200);

    let seen = upstream.only_request();
    for name in [
        "x-client-hop",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "proxy-authorization",
    ] {
        assert!(seen.header(name).is_none(), "{name} reached the upstream");
    }
    // hyper's own connection management may add `connection: keep-alive`
    // upstream; the client's value must not be what arrives.
    assert_ne!(seen.header("connection"), Some("keep-alive, X-Client-Hop"));
    assert_eq!(seen.header("x-end-to-end"), Some("kept"));
    // End to end, not hop by hop: asked as the client asked, of what
    // probity decodes (compression.rs has the rest).
    assert_eq!(seen.header("accept-encoding"), Some("gzip, br"));
    assert_eq!(seen.header("content-length"), Some("13"));

    for name in ["x-upstream-hop", "keep-alive", "proxy-authenticate"] {
        assert!(got.header(name).is_none(), "{name} reached the client");
    }
    assert_eq!(got.header("x-end-to-end"), Some("kept"));
}

#[tokio::test]
async fn a_configured_key_is_injected_and_replaces_the_clients() {
    let upstream = Upstream::json(b"{}").await;
    let routes = [
        route(
            "openai",
            "/openai",
            &upstream.url(),
            "openai",
            "api_key_env = \"TEST_OPENAI_KEY\"",
        ),
        route(
            "anthropic",
            "/anthropic",
            &upstream.url(),
            "anthropic",
            "api_key_env = \"TEST_ANTHROPIC_KEY\"",
        ),
        route(
            "own",
            "/own",
            &upstream.url(),
            "openai",
            "api_key_env = \"TEST_UNSET_KEY\"",
        ),
        route("plain", "/plain", &upstream.url(), "cohere", ""),
    ]
    .concat();
    let probity = Probity::start_with_env(
        &config("", &routes),
        &[
            ("TEST_OPENAI_KEY", "sk-proj-REALKEY123"),
            ("TEST_ANTHROPIC_KEY", "sk-ant-REALKEY456"),
        ],
    );
    let with_client_key = |path: &str| {
        Request::post(probity.url(path))
            .header("authorization", "Bearer sk-client-DUMMY")
            .header("x-api-key", "client-x-api-key")
            .body(Full::new(Bytes::from_static(b"{}")))
            .unwrap()
    };

    send(with_client_key("/openai/v1/embeddings")).await;
    let seen = upstream.requests().pop().unwrap();
    assert_eq!(
        seen.header("authorization"),
        Some("Bearer sk-proj-REALKEY123")
    );
    assert_eq!(seen.header("x-api-key"), None);

    send(with_client_key("/anthropic/v1/messages")).await;
    let seen = upstream.requests().pop().unwrap();
    assert_eq!(seen.header("x-api-key"), Some("sk-ant-REALKEY456"));
    assert_eq!(seen.header("authorization"), None);
    assert_eq!(seen.header("anthropic-version"), Some("2023-06-01"));
    // A version the client chose is kept.
    let mut request = with_client_key("/anthropic/v1/messages");
    request
        .headers_mut()
        .insert("anthropic-version", "2024-10-22".parse().unwrap());
    send(request).await;
    assert_eq!(
        upstream
            .requests()
            .pop()
            .unwrap()
            .header("anthropic-version"),
        Some("2024-10-22")
    );

    // Variable unset, or no api_key_env: the client's own credential passes.
    for path in ["/own/v1/embeddings", "/plain/v2/embed"] {
        send(with_client_key(path)).await;
        let seen = upstream.requests().pop().unwrap();
        assert_eq!(
            seen.header("authorization"),
            Some("Bearer sk-client-DUMMY"),
            "{path}"
        );
        assert_eq!(seen.header("x-api-key"), Some("client-x-api-key"), "{path}");
    }

    let logs = probity.log_text();
    for secret in [
        "REALKEY123",
        "REALKEY456",
        "sk-client-DUMMY",
        "client-x-api-key",
    ] {
        assert!(!logs.contains(secret), "a credential reached the logs");
    }
}

#[tokio::test]
async fn the_request_id_is_kept_or_generated_and_sent_both_ways() {
    let upstream = Upstream::json(b"{}").await;
    let probity = Probity::start(&config(
        "",
        &route("tei", "/tei", &upstream.url(), "tei", ""),
    ));

    let request = Request::get(probity.url("/tei/info"))
        .header("x-request-id", "client-chosen-7")
        .body(Full::default())
        .unwrap();
    let got = send(request).await;
    assert_eq!(got.header("x-request-id"), Some("client-chosen-7"));
    assert_eq!(
        upstream.requests().pop().unwrap().header("x-request-id"),
        Some("client-chosen-7")
    );

    let got = get(&probity.url("/tei/info")).await;
    let generated = got.header("x-request-id").unwrap().to_string();
    assert_eq!(generated.len(), 32);
    assert_eq!(
        upstream.requests().pop().unwrap().header("x-request-id"),
        Some(generated.as_str())
    );
    let line = probity.request_log(&generated).await;
    assert_eq!(line["route"], "tei");

    // Errors carry it too.
    let got = get(&probity.url("/nowhere")).await;
    let id = got.header("x-request-id").unwrap();
    assert_eq!(got.error(404, "no_route")["request_id"], id);
}

#[tokio::test]
async fn upstream_errors_pass_through_unchanged() {
    let unauthorized = fixture("openai_error_401.json");
    let body = unauthorized.clone();
    let upstream = Upstream::start(move |request| match request.target.as_str() {
        "/v1/models" => Reply::json(401, body.clone()).header("www-authenticate", "Bearer"),
        "/v1/overloaded" => Reply::json(
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ),
        _ => Reply {
            status: 503,
            headers: vec![
                ("content-type".into(), "text/plain".into()),
                ("retry-after".into(), "7".into()),
            ],
            body: ReplyBody::Whole(b"upstream busy\n".to_vec()),
        },
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &route("openai", "/openai", &upstream.url(), "openai", ""),
    ));

    let got = get(&probity.url("/openai/v1/models")).await;
    assert_eq!(got.status, 401);
    assert_eq!(got.body, unauthorized);
    assert_eq!(got.header("www-authenticate"), Some("Bearer"));
    let got = get(&probity.url("/openai/v1/overloaded")).await;
    assert_eq!(got.status.as_u16(), 529);
    assert_eq!(got.json()["error"]["type"], "overloaded_error");
    let got = get(&probity.url("/openai/v1/other")).await;
    assert_eq!(got.status, 503);
    assert_eq!(got.header("retry-after"), Some("7"));
    assert_eq!(got.text(), "upstream busy\n");
}

#[tokio::test]
async fn http2_prior_knowledge_clients_are_served() {
    let upstream = Upstream::json(b"{\"ok\":true}").await;
    let probity = Probity::start(&config(
        "",
        &route("ollama", "/ollama", &upstream.url(), "ollama", ""),
    ));
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build(hyper_util::client::legacy::connect::HttpConnector::new());
    let request = Request::post(probity.url("/ollama/api/show"))
        .body(Full::new(Bytes::from_static(b"{\"input\":\"x\"}")))
        .unwrap();
    let response = within("h2 response", client.request(request))
        .await
        .unwrap();
    assert_eq!(response.version(), http::Version::HTTP_2);
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"{\"ok\":true}");
    assert_eq!(upstream.only_request().body, "{\"input\":\"x\"}");
}

#[tokio::test]
async fn each_request_logs_one_line_without_query_or_credentials() {
    let upstream = Upstream::json(b"{\"response\":\"RESPSECRET\",\"done\":true}").await;
    let probity = Probity::start(&config(
        "",
        &route("ollama", "/ollama", &upstream.url(), "ollama", ""),
    ));
    let request = Request::post(probity.url("/ollama/api/generate?key=QUERYSECRET"))
        .header("authorization", "Bearer HEADERSECRET")
        .body(Full::new(Bytes::from_static(
            b"{\"prompt\":\"BODYSECRET\"}",
        )))
        .unwrap();
    let got = send(request).await;
    let id = got.header("x-request-id").unwrap();
    let line = probity.request_log(id).await;
    assert_eq!(line["route"], "ollama");
    assert_eq!(line["method"], "POST");
    assert_eq!(line["path"], "/ollama/api/generate");
    assert_eq!(line["status"], 200);
    assert_eq!(line["upstream_status"], 200);
    assert_eq!(line["bytes"], 37);
    assert!(line["duration_ms"].as_f64().unwrap() >= 0.0);
    let count = probity
        .logs()
        .iter()
        .filter(|l| l["request_id"] == id && l["message"] == "request")
        .count();
    assert_eq!(count, 1);
    let text = probity.log_text();
    for secret in ["QUERYSECRET", "HEADERSECRET", "BODYSECRET", "RESPSECRET"] {
        assert!(!text.contains(secret), "{secret} reached the logs");
    }
}

/// Gemini takes its key in `x-goog-api-key`, with no prefix: a configured
/// key replaces the client's there and in every other credential header,
/// and a client's `?key=` query parameter (in any spelling Google reads as
/// `key`) is removed, so one key reaches Google. Without a configured key
/// the query passes as sent. Neither is ever logged.
#[tokio::test]
async fn a_gemini_key_goes_in_x_goog_api_key_and_the_clients_query_key_is_removed() {
    let upstream = Upstream::json(b"{}").await;
    let probity = Probity::start_with_env(
        &config(
            "",
            &format!(
                "{}{}",
                route(
                    "gemini",
                    "/gemini",
                    &upstream.url(),
                    "gemini",
                    "api_key_env = \"TEST_GEMINI_KEY\"",
                ),
                route("own", "/own", &upstream.url(), "gemini", ""),
            ),
        ),
        &[("TEST_GEMINI_KEY", "AIzaREALKEY789")],
    );
    for (query, forwarded) in [
        ("?key=client-query-key", ""),
        ("?alt=sse&key=client-query-key", "?alt=sse"),
        (
            "?KEY=client-query-key&alt=sse&k%65y=client-query-key",
            "?alt=sse",
        ),
    ] {
        let request = Request::post(probity.url(&format!(
            "/gemini/v1beta/models/gemini-2.5-flash:countTokens{query}"
        )))
        .header("x-goog-api-key", "client-goog-key")
        .header("authorization", "Bearer sk-client-DUMMY")
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
        send(request).await;
        let seen = upstream.requests().pop().unwrap();
        assert_eq!(seen.header("x-goog-api-key"), Some("AIzaREALKEY789"));
        assert_eq!(seen.header("authorization"), None);
        assert_eq!(
            seen.target,
            format!("/v1beta/models/gemini-2.5-flash:countTokens{forwarded}"),
            "{query}"
        );
    }
    let own = Request::post(
        probity.url("/own/v1beta/models/gemini-2.5-flash:countTokens?key=client-own-key"),
    )
    .body(Full::new(Bytes::from_static(b"{}")))
    .unwrap();
    send(own).await;
    let seen = upstream.requests().pop().unwrap();
    assert!(
        seen.target.ends_with("?key=client-own-key"),
        "{}",
        seen.target
    );
    let logs = probity.log_text();
    for secret in [
        "AIzaREALKEY789",
        "client-goog-key",
        "client-query-key",
        "client-own-key",
    ] {
        assert!(!logs.contains(secret), "a credential reached the logs");
    }
}

/// A drop-in proxy never gives up before the app's SDK would (openai and
/// anthropic wait 600 s): on a route with the default limits, a whole answer
/// whose head comes after 45 s, and a stream whose first event comes after
/// 45 s (a reasoning phase), both arrive as sent.
#[tokio::test]
async fn the_default_route_waits_for_a_slow_answer_as_the_sdk_would() {
    const THINKING: Duration = Duration::from_secs(45);
    const WHOLE: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"o3","choices":[{"index":0,"message":{"role":"assistant","content":"done"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#;
    const EVENT: &str = r#"data: {"id":"chatcmpl-2","object":"chat.completion.chunk","created":1,"model":"o3","choices":[{"index":0,"delta":{"content":"done"},"finish_reason":"stop"}]}"#;
    let (whole, _) = raw_upstream(|mut stream| async move {
        use tokio::io::AsyncWriteExt;
        tokio::time::sleep(THINKING).await;
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            WHOLE.len()
        );
        let _ = stream.write_all(format!("{head}{WHOLE}").as_bytes()).await;
    })
    .await;
    let (streamed, _) = raw_upstream(|mut stream| async move {
        use tokio::io::AsyncWriteExt;
        let head =
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
        tokio::time::sleep(THINKING).await;
        let _ = stream
            .write_all(format!("{head}{EVENT}\n\ndata: [DONE]\n\n").as_bytes())
            .await;
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &format!(
            "{}{}",
            route(
                "whole",
                "/whole",
                &format!("http://{whole}/v1"),
                "openai",
                ""
            ),
            route(
                "streamed",
                "/streamed",
                &format!("http://{streamed}/v1"),
                "openai",
                ""
            ),
        ),
    ));
    let ask = |path: &str, body: &'static str| {
        let request = Request::post(probity.url(path))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(body.as_bytes())))
            .unwrap();
        async move {
            let response = tokio::time::timeout(Duration::from_secs(90), async {
                let response = client().request(request).await.unwrap();
                let status = response.status();
                let body = response.into_body().collect().await.unwrap().to_bytes();
                (status, body)
            });
            response.await.expect("no answer within 90 s")
        }
    };
    let (got_whole, got_stream) = tokio::join!(
        ask(
            "/whole/v1/chat/completions",
            r#"{"model":"o3","messages":[{"role":"user","content":"think"}]}"#
        ),
        ask(
            "/streamed/v1/chat/completions",
            r#"{"model":"o3","stream":true,"messages":[{"role":"user","content":"think"}]}"#
        ),
    );
    assert_eq!(got_whole.0, 200, "{:?}", got_whole.1);
    assert_eq!(got_whole.1, WHOLE.as_bytes());
    assert_eq!(got_stream.0, 200, "{:?}", got_stream.1);
    assert_eq!(
        got_stream.1,
        format!("{EVENT}\n\ndata: [DONE]\n\n").as_bytes()
    );
}

/// An upstream that closes its connection after every answer without
/// saying so (`Connection: close`), as simple servers and serverless
/// runtimes do: back to back, a request was once written into a parked
/// connection whose FIN the kernel held but hyper had not read, and was
/// lost (14 of 300). Every request is answered, and reaches the upstream
/// exactly once: a request that may have left is never sent again.
#[tokio::test]
async fn an_upstream_that_closes_after_every_answer_loses_no_request() {
    use std::collections::HashMap;
    use std::sync::Mutex;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const REQUESTS: usize = 2000;
    const CLIENTS: usize = 8;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (kept, opened) = (seen.clone(), connections.clone());
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            opened.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let kept = kept.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&head).to_lowercase();
                let id = text
                    .lines()
                    .find_map(|l| l.strip_prefix("x-n: "))
                    .unwrap_or("-")
                    .trim()
                    .to_string();
                *kept.lock().unwrap().entry(id).or_insert(0) += 1;
                let body = br#"{"ok": true}"#;
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(reply.as_bytes()).await;
                let _ = stream.write_all(body).await;
                // Closed at once, unannounced.
            });
        }
    });
    let probity = Probity::start(&config(
        "",
        &route("p", "/p", &format!("http://{addr}"), "passthrough", ""),
    ));
    // Clients side by side, each back to back: a connection parked by one
    // answer is taken by another client's request at once.
    let url = probity.url("/p/v1/things");
    let workers = (0..CLIENTS).map(|worker| {
        let url = url.clone();
        tokio::spawn(async move {
            let client = client();
            let mut failed = Vec::new();
            for n in (worker..REQUESTS).step_by(CLIENTS) {
                let request = Request::post(&url)
                    .header("content-type", "application/json")
                    .header("x-n", n.to_string())
                    .body(Full::new(Bytes::from_static(b"{\"a\": 1}")))
                    .unwrap();
                let response = client.request(request).await.unwrap();
                let status = response.status();
                let body = response.into_body().collect().await.unwrap().to_bytes();
                if status != 200 {
                    failed.push((n, status, String::from_utf8_lossy(&body).into_owned()));
                }
            }
            failed
        })
    });
    let mut failed = Vec::new();
    for worker in futures_util::future::join_all(workers).await {
        failed.extend(worker.unwrap());
    }
    let seen = seen.lock().unwrap();
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        failed.is_empty(),
        "{} of {REQUESTS} lost: {:?}",
        failed.len(),
        failed.first()
    );
    assert!(twice.is_empty(), "sent twice: {twice:?}");
    assert_eq!(seen.len(), REQUESTS);
}
