//! Realtime over WebSocket: `GET …/realtime` with `Upgrade: websocket` on an
//! `openai` route is tunnelled to a fake upstream speaking the Realtime
//! events (a tokio-tungstenite server on 127.0.0.1), through the real
//! binary. The openai SDK's own Realtime client drives one test; the others
//! speak raw WebSocket to see each frame's bytes: the credential swap, client
//! tokens, a nulled figure with every other byte kept, binary frames and
//! pings untouched, closes from either side, a reset, an oversize frame,
//! drain, and the upgrades still refused. The fixtures of
//! `tests/fixtures/openai_realtime/` (valid, each malformed figure) run
//! here too.

#![expect(
    clippy::result_large_err,
    reason = "the upstream's handshake callback returns tungstenite's own large error type"
)]

use crate::support::missing_python;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::{can_run, client_script, config, raw, route, within, Probity};
use futures_util::{SinkExt, StreamExt};
use http::HeaderMap;
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

type Ws = WebSocketStream<TcpStream>;
type ClientWs = Ws;

/// The handshake a fake upstream received.
#[derive(Clone, Debug)]
struct Seen {
    uri: String,
    headers: HeaderMap,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }
}

/// A WebSocket upstream: each connection's handshake is recorded, then
/// `script` runs on it.
struct WsUpstream {
    addr: std::net::SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl WsUpstream {
    async fn start<F, Fut>(script: F) -> Self
    where
        F: Fn(Ws, Seen) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let record = seen.clone();
        let script = Arc::new(script);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (record, script) = (record.clone(), script.clone());
                tokio::spawn(async move {
                    let got: Arc<Mutex<Option<Seen>>> = Arc::default();
                    let keep = got.clone();
                    let callback = move |request: &Request, mut response: Response| {
                        // A real server picks one of the subprotocols offered.
                        let offered = request.headers().get("sec-websocket-protocol");
                        if let Some(first) =
                            offered.and_then(|v| v.to_str().unwrap().split(',').next())
                        {
                            let chosen = first.trim().parse().unwrap();
                            response
                                .headers_mut()
                                .insert("sec-websocket-protocol", chosen);
                        }
                        *keep.lock().unwrap() = Some(Seen {
                            uri: request.uri().to_string(),
                            headers: request.headers().clone(),
                        });
                        Ok(response)
                    };
                    let Ok(ws) = tokio_tungstenite::accept_hdr_async(stream, callback).await else {
                        return;
                    };
                    let seen = got.lock().unwrap().clone().unwrap();
                    record.lock().unwrap().push(seen.clone());
                    script(ws, seen).await;
                });
            }
        });
        Self { addr, seen }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// The usage of a sound `response.done`.
const USAGE: &str = r#"{"total_tokens":30,"input_tokens":12,"output_tokens":18,"input_token_details":{"cached_tokens":4,"text_tokens":12,"audio_tokens":0,"image_tokens":0,"cached_tokens_details":{"text_tokens":4,"audio_tokens":0,"image_tokens":0}},"output_token_details":{"text_tokens":18,"audio_tokens":0}}"#;

fn response_done(usage: &str) -> String {
    format!(
        r#"{{"type":"response.done","event_id":"event_4","response":{{"object":"realtime.response","id":"resp_1","status":"completed","status_details":null,"output":[{{"id":"item_2","type":"message","object":"realtime.item","status":"completed","role":"assistant","content":[{{"type":"output_text","text":"Hi there"}}]}}],"conversation_id":"conv_1","output_modalities":["text"],"max_output_tokens":"inf","audio":null,"usage":{usage}}}}}"#
    )
}

/// The Realtime events of a short text turn, as OpenAI sends them: the
/// session first, then on `response.create` the response's events; the
/// `bad-usage` model's `input_tokens` is a string.
async fn realtime_session(mut ws: Ws, seen: Seen) {
    let created = r#"{"type":"session.created","event_id":"event_1","session":{"type":"realtime","object":"realtime.session","id":"sess_1","model":"gpt-realtime","output_modalities":["text"]}}"#;
    ws.send(Message::text(created)).await.unwrap();
    let usage = if seen.uri.contains("bad-usage") {
        USAGE.replace(r#""input_tokens":12"#, r#""input_tokens":"12""#)
    } else {
        USAGE.to_string()
    };
    while let Some(Ok(message)) = ws.next().await {
        let Message::Text(text) = message else {
            continue;
        };
        if !text.contains(r#""response.create""#) {
            continue;
        }
        for event in [
            r#"{"type":"response.created","event_id":"event_2","response":{"object":"realtime.response","id":"resp_1","status":"in_progress","output":[],"usage":null}}"#.to_string(),
            r#"{"type":"response.output_text.delta","event_id":"event_3","response_id":"resp_1","item_id":"item_2","output_index":0,"content_index":0,"delta":"Hi "}"#.to_string(),
            r#"{"type":"response.output_text.delta","event_id":"event_3b","response_id":"resp_1","item_id":"item_2","output_index":0,"content_index":0,"delta":"there"}"#.to_string(),
            response_done(&usage),
        ] {
            ws.send(Message::text(event)).await.unwrap();
        }
    }
}

/// An upstream that echoes every frame back as it came, until a close.
async fn echo(mut ws: Ws, _seen: Seen) {
    while let Some(Ok(message)) = ws.next().await {
        if message.is_close() {
            break;
        }
        if message.is_ping() || message.is_pong() {
            continue;
        }
        if ws.send(message).await.is_err() {
            break;
        }
    }
    while ws.next().await.is_some() {}
}

fn realtime_route(upstream: &WsUpstream, extra: &str) -> String {
    route("openai", "/openai", &upstream.url(), "openai", extra)
}

/// A raw WebSocket client to probity at `path`, with `headers`.
async fn connect(probity: &Probity, path: &str, headers: &[(&str, &str)]) -> ClientWs {
    let url = format!("ws://{}{path}", probity.addr);
    let mut request = url.into_client_request().unwrap();
    for (name, value) in headers {
        request.headers_mut().insert(
            http::HeaderName::try_from(*name).unwrap(),
            value.parse().unwrap(),
        );
    }
    let stream = TcpStream::connect(probity.addr).await.unwrap();
    let (ws, response) = within(
        "the handshake",
        tokio_tungstenite::client_async(request, stream),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 101);
    ws
}

/// The next frame that is not a pong, within a step.
async fn next(ws: &mut ClientWs) -> Message {
    loop {
        let message = within("a frame", ws.next()).await.unwrap().unwrap();
        if !message.is_pong() {
            return message;
        }
    }
}

async fn metric(probity: &Probity, sample: &str) -> f64 {
    probity.metric(sample).await.unwrap_or(0.0)
}

/// Waits until `sample` reaches `want` (the request is counted when its
/// tunnel ends, a moment after the close).
async fn metric_reaches(probity: &Probity, sample: &str, want: f64) {
    for _ in 0..100 {
        if metric(probity, sample).await == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "{sample} never reached {want}: {}",
        metric(probity, sample).await
    );
}

// ------------------------------------------------------------ the SDK

/// The app's view through the openai SDK's `client.realtime.connect`: the
/// events as the upstream sent them, the usage read as the SDK types it,
/// and a malformed `input_tokens` read as `None` alone.
#[tokio::test]
async fn the_openai_sdk_realtime_client_works_through_probity() {
    let missing = missing_python(&["openai", "websockets"]);
    if !can_run(
        "the_openai_sdk_realtime_client_works_through_probity",
        &missing,
        "python3 -m pip install openai websockets",
    ) {
        return;
    }
    let upstream = WsUpstream::start(realtime_session).await;
    let probity = Probity::start_with_env(
        &config(
            "",
            &realtime_route(&upstream, "api_key_env = \"TEST_REALTIME_KEY\""),
        ),
        &[("TEST_REALTIME_KEY", "sk-upstream-secret")],
    );
    let printed = client_script("openai_realtime.py", &[], probity.url("/openai/v1")).await;
    let [seen] = printed.as_slice() else {
        panic!("one JSON line: {printed:?}");
    };
    let types = serde_json::json!([
        "session.created",
        "response.created",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.done"
    ]);
    let good = &seen["gpt-realtime"];
    assert_eq!(good["types"], types, "{seen}");
    assert_eq!(good["text"], "Hi there");
    assert_eq!(good["id"], "resp_1");
    assert_eq!(
        good["usage"],
        serde_json::json!({"total_tokens": 30, "input_tokens": 12, "output_tokens": 18, "cached_text_tokens": 4})
    );
    let bad = &seen["gpt-realtime-bad-usage"];
    assert_eq!(bad["types"], types, "{seen}");
    assert_eq!(
        bad["usage"],
        serde_json::json!({"total_tokens": 30, "input_tokens": null, "output_tokens": 18, "cached_text_tokens": 4})
    );
    // The SDK's key never reached the upstream; the route's did.
    let handshakes = upstream.seen();
    assert_eq!(handshakes.len(), 2);
    for handshake in &handshakes {
        assert_eq!(
            handshake.header("authorization"),
            Some("Bearer sk-upstream-secret")
        );
        assert!(
            handshake.uri.starts_with("/v1/realtime?model=gpt-realtime"),
            "{}",
            handshake.uri
        );
    }
    // Each session is one request, counted when it ended; usage counted
    // from the sound figures only.
    let requests = r#"probity_requests_total{route="openai",client="unknown",status="101"}"#;
    metric_reaches(&probity, requests, 2.0).await;
    let tokens = |kind: &str| format!(r#"probity_tokens_total{{route="openai",kind="{kind}"}}"#);
    assert_eq!(metric(&probity, &tokens("input")).await, 12.0);
    assert_eq!(metric(&probity, &tokens("output")).await, 36.0);
    assert_eq!(metric(&probity, &tokens("total")).await, 60.0);
    let malformed =
        r#"probity_malformed_figures_total{route="openai",figure="/response/usage/input_tokens"}"#;
    assert_eq!(metric(&probity, malformed).await, 1.0);
    let lines: Vec<serde_json::Value> = probity
        .logs()
        .into_iter()
        .filter(|l| l["message"] == "request")
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines.iter().all(|l| l["status"] == 101), "{lines:?}");
    assert!(!probity.log_text().contains("sk-client-own-key"));
    assert!(!probity.log_text().contains("sk-upstream-secret"));
}

// ------------------------------------------------------------ raw frames

/// The route's key replaces the client's, in the header and in the
/// subprotocol a browser carries it in; the query and the other headers
/// pass.
#[tokio::test]
async fn the_credential_is_injected_and_the_clients_removed() {
    let upstream = WsUpstream::start(echo).await;
    let probity = Probity::start_with_env(
        &config(
            "",
            &realtime_route(&upstream, "api_key_env = \"TEST_REALTIME_KEY\""),
        ),
        &[("TEST_REALTIME_KEY", "sk-upstream-secret")],
    );
    let mut ws = connect(
        &probity,
        "/openai/v1/realtime?model=gpt-realtime",
        &[
            ("authorization", "Bearer sk-client-own"),
            ("openai-beta", "realtime=v1"),
            (
                "sec-websocket-protocol",
                "realtime, openai-insecure-api-key.sk-client-own",
            ),
        ],
    )
    .await;
    ws.send(Message::text(r#"{"type":"session.update"}"#))
        .await
        .unwrap();
    assert_eq!(
        next(&mut ws).await,
        Message::text(r#"{"type":"session.update"}"#)
    );
    let seen = upstream.seen().remove(0);
    assert_eq!(seen.uri, "/v1/realtime?model=gpt-realtime");
    assert_eq!(
        seen.header("authorization"),
        Some("Bearer sk-upstream-secret")
    );
    assert_eq!(seen.header("openai-beta"), Some("realtime=v1"));
    assert_eq!(seen.header("sec-websocket-protocol"), Some("realtime"));
    assert!(seen.header("sec-websocket-extensions").is_none());
    assert!(!format!("{:?}", seen.headers).contains("sk-client-own"));
    ws.close(None).await.unwrap();
}

/// With `[[clients]]`, a handshake without a client token is answered 401
/// and nothing reaches the upstream; with one, the tunnel opens and the
/// token goes no further.
#[tokio::test]
async fn a_client_token_is_required_when_clients_exist() {
    let upstream = WsUpstream::start(echo).await;
    let clients = "[[clients]]\nname = \"voice-app\"\ntoken_env = \"T_VOICE\"\n";
    let probity = Probity::start_with_env(
        &config(
            "",
            &format!(
                "{}{clients}",
                realtime_route(&upstream, "api_key_env = \"TEST_REALTIME_KEY\"")
            ),
        ),
        &[
            ("TEST_REALTIME_KEY", "sk-upstream-secret"),
            ("T_VOICE", "client-token-voice-0123456789"),
        ],
    );
    let url = format!("ws://{}/openai/v1/realtime?model=m", probity.addr);
    let stream = TcpStream::connect(probity.addr).await.unwrap();
    let refused = tokio_tungstenite::client_async(url.as_str(), stream).await;
    match refused {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 401)
        }
        other => panic!("expected a 401, got {other:?}"),
    }
    assert!(upstream.seen().is_empty());
    let mut ws = connect(
        &probity,
        "/openai/v1/realtime?model=m",
        &[("authorization", "Bearer client-token-voice-0123456789")],
    )
    .await;
    ws.send(Message::text("{}")).await.unwrap();
    assert_eq!(next(&mut ws).await, Message::text("{}"));
    let seen = upstream.seen().remove(0);
    assert_eq!(
        seen.header("authorization"),
        Some("Bearer sk-upstream-secret")
    );
    ws.close(None).await.unwrap();
    let requests = r#"probity_requests_total{route="openai",client="voice-app",status="101"}"#;
    metric_reaches(&probity, requests, 1.0).await;
}

/// A malformed usage figure is nulled in the frame, every other byte of
/// its text as the upstream sent it (spacing and member order included);
/// the events around it pass as they came.
#[tokio::test]
async fn a_malformed_usage_figure_is_nulled_and_the_rest_of_the_frame_kept() {
    let sent = r#"{"type":"response.done" , "event_id":"e9","response":{"id":"resp_9","usage":{ "output_tokens" : 18,"input_tokens":-3,"total_tokens":30.5,"input_token_details":{"cached_tokens":"4"}},"status":"completed"}}"#;
    let want = r#"{"type":"response.done" , "event_id":"e9","response":{"id":"resp_9","usage":{ "output_tokens" : 18,"input_tokens":null,"total_tokens":null,"input_token_details":null},"status":"completed"}}"#;
    let upstream = WsUpstream::start(move |mut ws: Ws, _| async move {
        ws.send(Message::text(r#"{"type":"session.created"}"#)).await.unwrap();
        ws.send(Message::text(sent)).await.unwrap();
        ws.send(Message::text(r#"{"type":"error","event_id":"e10","error":{"type":"invalid_request_error","code":"x","message":"no"}}"#)).await.unwrap();
        while ws.next().await.is_some() {}
    })
    .await;
    let probity = Probity::start(&config("", &realtime_route(&upstream, "")));
    let mut ws = connect(&probity, "/openai/v1/realtime", &[]).await;
    assert_eq!(
        next(&mut ws).await,
        Message::text(r#"{"type":"session.created"}"#)
    );
    assert_eq!(next(&mut ws).await, Message::text(want));
    let error = next(&mut ws).await;
    assert!(error.to_text().unwrap().contains("invalid_request_error"));
    let figure =
        |f: &str| format!(r#"probity_malformed_figures_total{{route="openai",figure="{f}"}}"#);
    assert_eq!(
        metric(&probity, &figure("/response/usage/input_tokens")).await,
        1.0
    );
    assert_eq!(
        metric(&probity, &figure("/response/usage/total_tokens")).await,
        1.0
    );
    assert_eq!(
        metric(&probity, &figure("/response/usage/input_token_details/*")).await,
        1.0
    );
    let tokens = r#"probity_tokens_total{route="openai",kind="output"}"#;
    assert_eq!(metric(&probity, tokens).await, 18.0);
    assert_eq!(
        metric(
            &probity,
            r#"probity_tokens_total{route="openai",kind="input"}"#
        )
        .await,
        0.0
    );
    assert_eq!(
        metric(&probity, r#"probity_realtime_errors_total{route="openai"}"#).await,
        1.0
    );
    ws.close(None).await.unwrap();
}

/// Binary frames and pings pass as they are, both ways; so do client
/// text frames, even ones that look like a malformed `response.done`.
#[tokio::test]
async fn binary_frames_pings_and_client_frames_pass_untouched() {
    let upstream = WsUpstream::start(|mut ws: Ws, _| async move {
        // What the client sends comes back as a binary frame of its bytes,
        // and each ping is answered by a ping of the same payload.
        while let Some(Ok(message)) = ws.next().await {
            let reply = match message {
                Message::Text(text) => Message::binary(text.as_bytes().to_vec()),
                Message::Binary(bytes) => Message::Binary(bytes),
                Message::Ping(payload) => Message::Ping(payload),
                Message::Close(_) => break,
                _ => continue,
            };
            ws.send(reply).await.unwrap();
        }
        while ws.next().await.is_some() {}
    })
    .await;
    let probity = Probity::start(&config("", &realtime_route(&upstream, "")));
    let mut ws = connect(&probity, "/openai/v1/realtime", &[]).await;
    let audio: Vec<u8> = (0..=255u8).cycle().take(40_000).collect();
    ws.send(Message::binary(audio.clone())).await.unwrap();
    assert_eq!(next(&mut ws).await, Message::binary(audio));
    let client_text = r#"{"type":"response.done","response":{"usage":{"input_tokens":"12"}}}"#;
    ws.send(Message::text(client_text)).await.unwrap();
    assert_eq!(
        next(&mut ws).await,
        Message::binary(client_text.as_bytes().to_vec())
    );
    ws.send(Message::Ping(b"are you there".to_vec().into()))
        .await
        .unwrap();
    assert_eq!(
        next(&mut ws).await,
        Message::Ping(b"are you there".to_vec().into())
    );
    assert_eq!(
        metric(&probity, r#"probity_malformed_figures_total{route="openai",figure="/response/usage/input_tokens"}"#).await,
        0.0
    );
    ws.close(None).await.unwrap();
}

/// A client's close reaches the upstream with its code and reason, and
/// the upstream's answer ends the session: one log line, status 101.
#[tokio::test]
async fn a_close_from_the_client_is_relayed() {
    let closes: Arc<Mutex<Vec<Option<CloseFrame>>>> = Arc::default();
    let record = closes.clone();
    let upstream = WsUpstream::start(move |mut ws: Ws, _| {
        let record = record.clone();
        async move {
            while let Some(Ok(message)) = ws.next().await {
                if let Message::Close(frame) = message {
                    record.lock().unwrap().push(frame);
                }
            }
        }
    })
    .await;
    let probity = Probity::start(&config("", &realtime_route(&upstream, "")));
    let mut ws = connect(&probity, "/openai/v1/realtime", &[]).await;
    ws.close(Some(CloseFrame {
        code: CloseCode::Normal,
        reason: "bye".into(),
    }))
    .await
    .unwrap();
    // The client's close is answered, and the connection then ends.
    let answer = next(&mut ws).await;
    assert!(
        matches!(answer, Message::Close(Some(ref f)) if f.code == CloseCode::Normal),
        "{answer:?}"
    );
    assert!(within("the end", ws.next()).await.is_none());
    let requests = r#"probity_requests_total{route="openai",client="unknown",status="101"}"#;
    metric_reaches(&probity, requests, 1.0).await;
    let frames = closes.lock().unwrap().clone();
    assert_eq!(frames.len(), 1);
    let frame = frames[0].clone().unwrap();
    assert_eq!(
        (frame.code, frame.reason.as_str()),
        (CloseCode::Normal, "bye")
    );
    // Counted, then logged: the line may come a moment after the count.
    within("the request's line", async {
        while !probity.logs().iter().any(|l| l["message"] == "request") {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let lines: Vec<serde_json::Value> = probity
        .logs()
        .into_iter()
        .filter(|l| l["message"] == "request")
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["status"], 101);
    assert_eq!(lines[0]["ending"], "complete");
    // A session's length is no overhead of probity's: none is recorded.
    assert_eq!(lines[0].get("overhead_ms"), None, "{lines:?}");
    let overhead = r#"probity_overhead_seconds_count{route="openai"}"#;
    assert_eq!(probity.metric(overhead).await, None);
}

/// The upstream's close reaches the client with its code and reason.
#[tokio::test]
async fn a_close_from_the_upstream_is_relayed() {
    let upstream = WsUpstream::start(|mut ws: Ws, _| async move {
        ws.send(Message::text(r#"{"type":"session.created"}"#))
            .await
            .unwrap();
        ws.close(Some(CloseFrame {
            code: CloseCode::Library(4000),
            reason: "session expired".into(),
        }))
        .await
        .unwrap();
        while ws.next().await.is_some() {}
    })
    .await;
    let probity = Probity::start(&config("", &realtime_route(&upstream, "")));
    let mut ws = connect(&probity, "/openai/v1/realtime", &[]).await;
    assert_eq!(
        next(&mut ws).await,
        Message::text(r#"{"type":"session.created"}"#)
    );
    let Message::Close(Some(frame)) = next(&mut ws).await else {
        panic!("no close frame");
    };
    assert_eq!(
        (frame.code, frame.reason.as_str()),
        (CloseCode::Library(4000), "session expired")
    );
    let requests = r#"probity_requests_total{route="openai",client="unknown",status="101"}"#;
    metric_reaches(&probity, requests, 1.0).await;
}

/// An upstream that drops its connection without a close frame: the
/// client gets a close frame saying so (1011), counted as a
/// reset; a client that drops its own closes the upstream's (1001).
#[tokio::test]
async fn a_reset_on_either_side_closes_the_other() {
    let closes: Arc<Mutex<Vec<Option<CloseFrame>>>> = Arc::default();
    let record = closes.clone();
    let upstream = WsUpstream::start(move |mut ws: Ws, seen| {
        let record = record.clone();
        async move {
            if seen.uri.contains("reset") {
                ws.send(Message::text("{}")).await.unwrap();
                drop(ws); // no close frame
                return;
            }
            while let Some(Ok(message)) = ws.next().await {
                if let Message::Close(frame) = message {
                    record.lock().unwrap().push(frame);
                }
            }
        }
    })
    .await;
    let probity = Probity::start(&config("", &realtime_route(&upstream, "")));
    let mut ws = connect(&probity, "/openai/v1/realtime?model=reset", &[]).await;
    assert_eq!(next(&mut ws).await, Message::text("{}"));
    let Message::Close(Some(frame)) = next(&mut ws).await else {
        panic!("no close frame");
    };
    assert_eq!(frame.code, CloseCode::Error);
    assert!(frame.reason.contains("reset"), "{}", frame.reason);
    // The client answers the close, and the session ends.
    assert!(within("the end", ws.next()).await.is_none());
    let reset = r#"probity_upstream_errors_total{route="openai",kind="reset"}"#;
    metric_reaches(&probity, reset, 1.0).await;

    // The client's TCP connection goes away mid-session.
    let ws = connect(&probity, "/openai/v1/realtime?model=calm", &[]).await;
    drop(ws);
    for _ in 0..100 {
        if !closes.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let frame = closes
        .lock()
        .unwrap()
        .first()
        .cloned()
        .flatten()
        .expect("upstream closed");
    assert_eq!(frame.code, CloseCode::Away);
    let lines: Vec<serde_json::Value> = probity
        .logs()
        .into_iter()
        .filter(|l| l["message"] == "request")
        .collect();
    let endings: Vec<&str> = lines
        .iter()
        .map(|l| l["ending"].as_str().unwrap())
        .collect();
    assert!(
        endings.contains(&"cut") && endings.contains(&"client_gone"),
        "{endings:?}"
    );
}

/// A frame over the route's `max_response_bytes` closes the tunnel with a
/// close frame saying why (1009), counted as `too_large`; frames within it
/// pass.
#[tokio::test]
async fn a_frame_over_max_response_bytes_closes_the_tunnel() {
    let closes: Arc<Mutex<Vec<Option<CloseFrame>>>> = Arc::default();
    let record = closes.clone();
    let upstream = WsUpstream::start(move |mut ws: Ws, _| {
        let record = record.clone();
        async move {
            ws.send(Message::text("x".repeat(1000))).await.unwrap();
            ws.send(Message::text("x".repeat(5000))).await.unwrap();
            while let Some(Ok(message)) = ws.next().await {
                if let Message::Close(frame) = message {
                    record.lock().unwrap().push(frame);
                }
            }
        }
    })
    .await;
    let probity = Probity::start(&config(
        "",
        &realtime_route(&upstream, "max_response_bytes = 4096"),
    ));
    let mut ws = connect(&probity, "/openai/v1/realtime", &[]).await;
    assert_eq!(next(&mut ws).await, Message::text("x".repeat(1000)));
    let Message::Close(Some(frame)) = next(&mut ws).await else {
        panic!("no close frame");
    };
    assert_eq!(frame.code, CloseCode::Size);
    assert!(
        frame.reason.contains("max_response_bytes (4096 bytes)"),
        "{}",
        frame.reason
    );
    let too_large = r#"probity_upstream_errors_total{route="openai",kind="too_large"}"#;
    metric_reaches(&probity, too_large, 1.0).await;
    let upstream_close = closes.lock().unwrap().first().cloned().flatten().unwrap();
    assert_eq!(upstream_close.code, CloseCode::Size);
}

/// On SIGTERM an open tunnel goes on relaying until its client closes it,
/// within `drain_timeout_ms`; one still open then is closed (1001).
#[tokio::test]
async fn drain_waits_for_an_open_tunnel() {
    let upstream = WsUpstream::start(echo).await;
    let probity = Probity::start(&config(
        "drain_timeout_ms = 10000",
        &realtime_route(&upstream, ""),
    ));
    let mut ws = connect(&probity, "/openai/v1/realtime", &[]).await;
    probity.signal("TERM");
    tokio::time::sleep(Duration::from_millis(300)).await;
    ws.send(Message::text(r#"{"type":"still here"}"#))
        .await
        .unwrap();
    assert_eq!(
        next(&mut ws).await,
        Message::text(r#"{"type":"still here"}"#)
    );
    ws.close(None).await.unwrap();
    let mut probity = probity;
    assert_eq!(probity.exit_code().await, Some(0));
    let lines: Vec<serde_json::Value> = probity
        .logs()
        .into_iter()
        .filter(|l| l["message"] == "request")
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");

    // Past the drain timeout, the tunnel is closed with a close frame.
    let upstream = WsUpstream::start(echo).await;
    let probity = Probity::start(&config(
        "drain_timeout_ms = 500",
        &realtime_route(&upstream, ""),
    ));
    let mut ws = connect(&probity, "/openai/v1/realtime", &[]).await;
    probity.signal("TERM");
    let Message::Close(Some(frame)) = next(&mut ws).await else {
        panic!("no close frame");
    };
    assert_eq!(frame.code, CloseCode::Away);
    let mut probity = probity;
    assert_eq!(probity.exit_code().await, Some(0));
}

/// Every other upgrade keeps its 501: a WebSocket to any other endpoint of
/// an openai route, and any upgrade on a passthrough route.
#[tokio::test]
async fn other_upgrades_are_still_refused() {
    let upstream = WsUpstream::start(echo).await;
    let probity = Probity::start(&config(
        "",
        &format!(
            "{}{}",
            realtime_route(&upstream, ""),
            route("plain", "/plain", &upstream.url(), "passthrough", "")
        ),
    ));
    let handshake = |path: &str| {
        format!("GET {path} HTTP/1.1\r\nHost: p\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nConnection: close\r\n\r\n")
    };
    for path in ["/openai/v1/chat/completions", "/plain/v1/realtime"] {
        let reply = raw(probity.addr, handshake(path).as_bytes()).await;
        assert!(reply.starts_with("HTTP/1.1 501"), "{path}: {reply}");
        assert!(reply.contains("upgrade_not_supported"), "{reply}");
    }
    let other = "GET /openai/v1/realtime HTTP/1.1\r\nHost: p\r\nConnection: Upgrade\r\nUpgrade: IRC/6.9\r\nConnection: close\r\n\r\n";
    let reply = raw(probity.addr, other.as_bytes()).await;
    assert!(reply.starts_with("HTTP/1.1 501"), "{reply}");
    assert!(upstream.seen().is_empty());
}

// ------------------------------------------------------------ fixtures

/// Each case of `tests/fixtures/openai_realtime/` (files, not folders:
/// the HTTP suites read every folder of a dialect as an exchange):
/// the upstream sends the text frames of `<case>.frames.jsonl` (one a
/// line), the client must get exactly `<case>.expected.jsonl` (the same
/// frames when absent), and `<case>.expect.json` names the figures
/// counted malformed and the tokens counted.
#[tokio::test]
async fn realtime_fixtures_conform() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/openai_realtime");
    let mut cases: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter_map(|name| name.strip_suffix(".frames.jsonl").map(str::to_string))
        .collect();
    cases.sort();
    assert!(cases.len() >= 10, "{cases:?}");
    let lines_of = |file: String| -> Vec<String> {
        std::fs::read_to_string(dir.join(&file))
            .unwrap_or_else(|e| panic!("{file}: {e}"))
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    };
    let mut failures = Vec::new();
    for case in &cases {
        let frames = lines_of(format!("{case}.frames.jsonl"));
        let expected = match dir.join(format!("{case}.expected.jsonl")).exists() {
            true => lines_of(format!("{case}.expected.jsonl")),
            false => frames.clone(),
        };
        let expect: serde_json::Value = serde_json::from_slice(
            &std::fs::read(dir.join(format!("{case}.expect.json"))).unwrap(),
        )
        .unwrap();
        let sent = frames.clone();
        let upstream = WsUpstream::start(move |mut ws: Ws, _| {
            let sent = sent.clone();
            async move {
                for frame in sent {
                    ws.send(Message::text(frame)).await.unwrap();
                }
                while ws.next().await.is_some() {}
            }
        })
        .await;
        let probity = Probity::start(&config("", &realtime_route(&upstream, "")));
        let mut ws = connect(&probity, "/openai/v1/realtime", &[]).await;
        for (i, want) in expected.iter().enumerate() {
            let got = next(&mut ws).await;
            if got.to_text().unwrap() != want {
                failures.push(format!("{case}: frame {i}\n  got  {got}\n  want {want}"));
            }
        }
        ws.close(None).await.unwrap();
        let pointers: Vec<&str> = expect["malformed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap())
            .collect();
        for pointer in &pointers {
            let sample =
                format!(r#"probity_malformed_figures_total{{route="openai",figure="{pointer}"}}"#);
            if metric(&probity, &sample).await < 1.0 {
                failures.push(format!("{case}: {pointer} not counted"));
            }
        }
        for kind in ["input", "output", "total"] {
            let want = expect["tokens"][kind].as_f64().unwrap_or(0.0);
            let sample = format!(r#"probity_tokens_total{{route="openai",kind="{kind}"}}"#);
            let got = metric(&probity, &sample).await;
            if got != want {
                failures.push(format!("{case}: {kind} tokens {got}, want {want}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
