//! Live reload: SIGHUP or `POST /reload` reads the configuration again. A
//! valid one replaces the routes for the next requests while requests in
//! flight finish on theirs; an invalid one is refused and the old one keeps
//! serving; both are counted.

use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use http_body_util::BodyExt;
use tokio::sync::Notify;

fn one_route(upstream: &str) -> String {
    config("", &route("models", "/m", upstream, "passthrough", ""))
}

/// Sends GETs until one reaches `upstream` (the reload has landed).
async fn until_served_by(probity: &Probity, upstream: &Upstream) {
    within("the reload takes effect", async {
        loop {
            let before = upstream.requests().len();
            let got = get(&probity.url("/m/v1/models")).await;
            assert_eq!(got.status, 200);
            if upstream.requests().len() > before {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

async fn reloads(probity: &Probity, result: &str) -> f64 {
    let sample = format!("probity_config_reloads_total{{result=\"{result}\"}}");
    probity.metric(&sample).await.unwrap_or(0.0)
}

#[tokio::test]
async fn sighup_swaps_the_routes_and_a_stream_in_flight_finishes_on_its_own() {
    let gate = Arc::new(Notify::new());
    let first = {
        let gate = gate.clone();
        Upstream::start(move |request| {
            if request.target.ends_with("/stream") {
                Reply::stream(
                    "text/event-stream",
                    vec![
                        part(Before::Now, "data: one\n\n"),
                        part(Before::Gate(gate.clone()), "data: two\n\n"),
                    ],
                )
            } else {
                Reply::json(200, r#"{"from": "first"}"#)
            }
        })
        .await
    };
    let second = Upstream::json(br#"{"from": "second"}"#).await;
    let probity = Probity::start(&one_route(&first.url()));

    // A stream starts on the first upstream and stays open across the reload.
    let request = http::Request::get(probity.url("/m/stream"))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    let response = within("stream head", client().request(request))
        .await
        .unwrap();
    let mut body = response.into_body();
    let frame = within("first event", body.frame()).await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "data: one\n\n");

    probity.rewrite_config(&one_route(&second.url()));
    probity.signal("HUP");
    until_served_by(&probity, &second).await;
    assert_eq!(reloads(&probity, "applied").await, 1.0);

    // The stream finishes on the route it started with.
    gate.notify_one();
    let rest = within("stream end", body.collect())
        .await
        .unwrap()
        .to_bytes();
    assert_eq!(rest, "data: two\n\n");
}

#[tokio::test]
async fn an_invalid_configuration_is_refused_and_the_old_one_serves_on() {
    let first = Upstream::json(br#"{"from": "first"}"#).await;
    let second = Upstream::json(br#"{"from": "second"}"#).await;
    let probity = Probity::start(&one_route(&first.url()));

    probity.rewrite_config("[server]\nmax_connections = \"lots\"\n");
    probity.signal("HUP");
    within("the refusal is counted", async {
        while reloads(&probity, "rejected").await < 1.0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // The log line is read from stdout by another thread: wait for it too.
    within("the refusal is logged", async {
        while !probity.log_text().contains("server.max_connections") {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    until_served_by(&probity, &first).await;

    // POST /reload says what it did.
    let refused = probity.admin_post("/reload", "").await;
    assert_eq!(refused.status, 422, "{}", refused.text());
    assert!(refused.text().contains("server.max_connections"));
    probity.rewrite_config(&one_route(&second.url()));
    let applied = probity.admin_post("/reload", "").await;
    assert_eq!(applied.status, 200, "{}", applied.text());
    assert_eq!(applied.text(), "reloaded: 1 routes\n");
    until_served_by(&probity, &second).await;
    assert_eq!(reloads(&probity, "rejected").await, 2.0);
    assert_eq!(reloads(&probity, "applied").await, 1.0);
    assert_eq!(probity.admin_get("/reload").await.status, 405);
}
