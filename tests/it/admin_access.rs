//! Who the admin listener answers. With no admin token, a listener on
//! loopback serves the captures and the reload to this host: its browser
//! included, which runs other sites' pages. A page that rebinds its name to
//! 127.0.0.1 sends its own `Host`; a cross-site form or fetch carries an
//! `Origin` and `Sec-Fetch-Site`. Each header is tried on each guarded
//! endpoint.

use bytes::Bytes;
use http::Request;
use http_body_util::Full;

use crate::support::*;

fn start(token: &str) -> (Probity, String) {
    let probity = Probity::start_with_env(
        &config(
            "",
            &route("ollama", "/ollama", "http://127.0.0.1:9", "ollama", ""),
        ),
        &[("PROBITY_ADMIN_TOKEN", token)],
    );
    let own = format!("http://{}", probity.admin);
    (probity, own)
}

async fn call(probity: &Probity, method: &str, path: &str, headers: &[(&str, &str)]) -> Got {
    let mut request = Request::builder()
        .method(method)
        .uri(probity.admin_url(path));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    send(request.body(Full::new(Bytes::new())).unwrap()).await
}

const GUARDED: [&str; 4] = [
    "/status.json",
    "/captures",
    "/view.json?id=none",
    "/captures/none",
];

/// A refusal in probity's error shape: 403 `forbidden`, with its code.
fn forbidden(got: &Got, code: &str, what: &str) {
    assert_eq!(got.status, 403, "{what}: {}", got.text());
    let error = got.error(403, "forbidden");
    assert_eq!(error["code"], code, "{what}: {error}");
}

#[tokio::test]
async fn without_a_token_only_this_hosts_own_requests_are_answered() {
    let (probity, own) = start("");
    let port = probity.admin.port();
    for path in GUARDED {
        // A tool on this host: no Origin, a loopback Host.
        for host in [
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            "localhost".into(),
        ] {
            let got = call(&probity, "GET", path, &[("host", &host)]).await;
            assert_ne!(got.status, 403, "{path} as {host}: {}", got.text());
            assert_ne!(got.status, 401, "{path} as {host}: {}", got.text());
        }
        // The admin page's own fetches.
        let got = call(
            &probity,
            "GET",
            path,
            &[("sec-fetch-site", "same-origin"), ("origin", &own)],
        )
        .await;
        assert!(
            got.status != 403 && got.status != 401,
            "{path}: {}",
            got.text()
        );
        // DNS rebinding: the attacker's name, resolved to 127.0.0.1.
        for host in [
            "attacker.example",
            "attacker.example:9090",
            "127.0.0.1.nip.io",
        ] {
            let got = call(&probity, "GET", path, &[("host", host)]).await;
            forbidden(&got, "admin_foreign_host", &format!("{path} Host {host}"));
        }
        // A browser's request for another origin.
        let crossings: [&[(&str, &str)]; 6] = [
            &[("origin", "http://attacker.example")],
            &[("origin", "null")],
            &[("origin", "http://localhost:3000")],
            &[("sec-fetch-site", "cross-site")],
            &[("sec-fetch-site", "same-site")],
            &[
                ("sec-fetch-site", "cross-site"),
                ("origin", "http://attacker.example"),
            ],
        ];
        for headers in crossings {
            let got = call(&probity, "GET", path, headers).await;
            forbidden(&got, "admin_cross_site", &format!("{path} {headers:?}"));
        }
    }
    // The open endpoints stay open to anyone who reaches the port.
    for path in ["/metrics", "/healthz", "/readyz", "/"] {
        let got = call(
            &probity,
            "GET",
            path,
            &[
                ("host", "attacker.example"),
                ("origin", "http://attacker.example"),
            ],
        )
        .await;
        assert_eq!(got.status, 200, "{path}");
    }
    // The refusal is logged, naming why, with nothing of the request's.
    let log = probity.log_text();
    assert!(
        log.contains("admin_foreign_host") && log.contains("admin_cross_site"),
        "{log}"
    );
}

#[tokio::test]
async fn a_reload_is_never_another_sites_to_ask_for() {
    for token in ["", ADMIN_TOKEN] {
        let (probity, own) = start(token);
        let bearer = format!("Bearer {ADMIN_TOKEN}");
        let auth: Vec<(&str, &str)> = match token {
            "" => vec![],
            _ => vec![("authorization", bearer.as_str())],
        };
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut headers = auth.clone();
            headers.extend_from_slice(extra);
            headers
        };
        // A cross-site form post, with and without the token.
        for extra in [
            &[
                ("origin", "http://attacker.example"),
                ("sec-fetch-site", "cross-site"),
            ][..],
            &[("origin", "http://attacker.example")],
            &[("sec-fetch-site", "cross-site")],
            &[("origin", "null")],
        ] {
            let got = call(&probity, "POST", "/reload", &with(extra)).await;
            forbidden(
                &got,
                "admin_cross_site",
                &format!("token {token:?} {extra:?}"),
            );
        }
        // Never on a GET.
        assert_eq!(call(&probity, "GET", "/reload", &auth).await.status, 405);
        // The page's own POST, and a tool's.
        let page = [("origin", own.as_str()), ("sec-fetch-site", "same-origin")];
        let mut headers = auth.clone();
        headers.extend_from_slice(&page);
        let got = call(&probity, "POST", "/reload", &headers).await;
        assert_eq!(got.status, 200, "token {token:?}: {}", got.text());
        assert_eq!(call(&probity, "POST", "/reload", &auth).await.status, 200);
    }
}

/// With a token, the token decides: a rebound name that carries it is
/// answered (only the admin has it), one without is 401 as before.
#[tokio::test]
async fn with_a_token_the_token_decides_what_is_read() {
    let (probity, _) = start(ADMIN_TOKEN);
    let bearer = format!("Bearer {ADMIN_TOKEN}");
    let got = call(
        &probity,
        "GET",
        "/status.json",
        &[("host", "attacker.example"), ("authorization", &bearer)],
    )
    .await;
    assert_eq!(got.status, 200, "{}", got.text());
    let got = call(
        &probity,
        "GET",
        "/status.json",
        &[("host", "attacker.example")],
    )
    .await;
    assert_eq!(got.status, 401, "{}", got.text());
}
