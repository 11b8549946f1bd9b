//! Every connection says what it speaks and what it asks within
//! `header_read_timeout_ms` of its accept, or is closed, whatever it sends
//! or does not send: an HTTP/1 request head, or HTTP/2's preface and the
//! SETTINGS frame after it. Each slow client here holds a connection open
//! and is timed to its close; the connection limit is shown to hold.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::*;

const TIMEOUT_MS: u64 = 600;

/// HTTP/2's client preface.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

async fn setup(extra: &str) -> (Upstream, Probity) {
    let upstream = Upstream::json(b"{}").await;
    let probity = Probity::start(&config(
        &format!("header_read_timeout_ms = {TIMEOUT_MS}\n{extra}"),
        &route("ollama", "/ollama", &upstream.url(), "ollama", ""),
    ));
    (upstream, probity)
}

/// Sends `opening`, then a byte of `trickle` every `pace` (none when empty),
/// and waits for the close: how long after the connect it came.
async fn closed_after(
    addr: std::net::SocketAddr,
    opening: &[u8],
    trickle: &[u8],
    pace: Duration,
) -> Duration {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let connected = Instant::now();
    stream.write_all(opening).await.unwrap();
    let mut buf = [0u8; 1024];
    let mut trickle = trickle.iter();
    let closed = async {
        loop {
            tokio::select! {
                read = stream.read(&mut buf) => match read {
                    // The close, or what came before it (an HTTP/2 server's
                    // SETTINGS and GOAWAY): read on to the end.
                    Ok(0) | Err(_) => return,
                    Ok(_) => continue,
                },
                () = tokio::time::sleep(pace) => {
                    if let Some(byte) = trickle.next() {
                        if stream.write_all(&[*byte]).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), closed)
        .await
        .expect("the slow connection was still open after 20 s");
    connected.elapsed()
}

fn settings_frame() -> Vec<u8> {
    // A SETTINGS frame of one setting (INITIAL_WINDOW_SIZE), stream 0.
    vec![0, 0, 6, 0x4, 0, 0, 0, 0, 0, 0, 4, 0, 1, 0, 0]
}

#[tokio::test]
async fn every_kind_of_slow_opening_is_closed_at_the_timeout() {
    let (upstream, probity) = setup("").await;
    let mut preface_and_half_settings = PREFACE.to_vec();
    preface_and_half_settings.extend_from_slice(&settings_frame()[..11]);
    let slow = Duration::from_millis(150);
    let never = Duration::from_secs(60);
    let cases: Vec<(&str, Vec<u8>, &[u8], Duration)> = vec![
        ("nothing at all", vec![], b"", never),
        ("P", b"P".to_vec(), b"", never),
        ("PR", b"PR".to_vec(), b"", never),
        (
            "PRI * HTTP/2.0\\r\\n",
            b"PRI * HTTP/2.0\r\n".to_vec(),
            b"",
            never,
        ),
        ("the whole preface", PREFACE.to_vec(), b"", never),
        (
            "the preface and half a SETTINGS frame",
            preface_and_half_settings,
            b"",
            never,
        ),
        ("G", b"G".to_vec(), b"", never),
        (
            "half a POST head",
            b"POST /ollama/api/embed HTTP/1.1\r\nHost: p\r\n".to_vec(),
            b"",
            never,
        ),
        (
            "a GET head a byte at a time",
            vec![],
            b"GET /ollama/api/tags HTTP/1.1\r\nHost: p\r\n\r\n",
            slow,
        ),
        (
            "a POST head a byte at a time",
            vec![],
            b"POST /ollama/api/embed HTTP/1.1\r\nHost: p\r\n\r\n",
            slow,
        ),
        ("the preface a byte at a time", vec![], PREFACE, slow),
    ];
    let timed = cases.iter().map(|(name, opening, trickle, pace)| {
        let addr = probity.addr;
        async move { (*name, closed_after(addr, opening, trickle, *pace).await) }
    });
    let timeout = Duration::from_millis(TIMEOUT_MS);
    for (name, after) in futures_util::future::join_all(timed).await {
        assert!(
            after >= timeout - Duration::from_millis(50)
                && after < timeout + Duration::from_millis(900),
            "{name}: closed after {after:?}, the timeout is {timeout:?}"
        );
    }
    assert!(upstream.requests().is_empty(), "{:?}", upstream.requests());
}

/// A client that opens with HTTP/2's preface and its SETTINGS in time is
/// served: the wait is for the opening, not for more than it.
#[tokio::test]
async fn a_prompt_http2_client_and_a_prompt_post_are_served() {
    let (upstream, probity) = setup("").await;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let response = client
        .request(
            http::Request::get(probity.url("/ollama/api/tags"))
                .body(Default::default())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.version(), http::Version::HTTP_2);
    // A POST whose first segment is its first byte alone.
    let mut stream = TcpStream::connect(probity.addr).await.unwrap();
    stream.write_all(b"P").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    stream
        .write_all(b"OST /ollama/api/tags HTTP/1.1\r\nHost: p\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut reply = Vec::new();
    within("the split POST's answer", stream.read_to_end(&mut reply))
        .await
        .unwrap();
    assert!(
        reply.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    assert_eq!(upstream.requests().len(), 2);
}

/// Slow clients take every slot under `max_connections`: a prompt client
/// is refused 503 while they hold them, every one is closed at the
/// timeout, and the prompt client is served after. Those over the limit
/// that stall are closed by the same timeout.
#[tokio::test]
async fn the_connection_limit_holds_against_slow_openings() {
    let (_upstream, probity) = setup("max_connections = 4").await;
    let addr = probity.addr;
    let openings: [&[u8]; 4] = [b"P", PREFACE, b"PRI * HTTP/2.0\r\n", b"G"];
    let mut holders = Vec::new();
    for opening in openings {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(opening).await.unwrap();
        holders.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let refused = raw(
        addr,
        b"GET /ollama/api/tags HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    // Over the limit too, and silent after its first byte.
    let over = closed_after(addr, b"P", b"", Duration::from_secs(60));
    let held = async {
        for stream in &mut holders {
            let mut buf = [0u8; 256];
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => continue,
                }
            }
        }
    };
    let started = Instant::now();
    let (over, ()) = tokio::join!(over, within("every holder closed", held));
    let timeout = Duration::from_millis(TIMEOUT_MS);
    assert!(
        started.elapsed() < timeout + Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    assert!(
        over < timeout + Duration::from_millis(900),
        "over the limit: {over:?}"
    );
    let served = raw(
        addr,
        b"GET /ollama/api/tags HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(served.starts_with("HTTP/1.1 200"), "{served}");
}

/// The admin listener gives a connection as long as a scraper needs (10 s)
/// to send its head, and closes a `P` that stalls then.
#[tokio::test]
async fn a_slow_admin_connection_is_closed() {
    let (_upstream, probity) = setup("").await;
    let after = closed_after(probity.admin, b"P", b"", Duration::from_secs(60)).await;
    assert!(
        after >= Duration::from_secs(9) && after < Duration::from_secs(12),
        "{after:?}"
    );
}
