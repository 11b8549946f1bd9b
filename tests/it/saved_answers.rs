//! `probity inspect`, the proxy's judgement offline, over every fixture of
//! every dialect: what it prints is what the proxy sends the client (the
//! fixtures' expected bodies, which the conformance suites hold the proxy
//! to), and its verdict and exit code are the fixture's outcome.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const DIALECTS: [&str; 11] = [
    "openai",
    "ollama",
    "cohere",
    "jina",
    "tei",
    "voyage",
    "anthropic",
    "gemini",
    "bedrock",
    "azure",
    "vertex",
];

#[test]
fn probity_inspect_judges_every_fixture_as_the_proxy_does() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let (mut judged, mut problems) = (0, Vec::new());
    for dialect in DIALECTS {
        let mut cases: Vec<_> = std::fs::read_dir(root.join(dialect))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        cases.sort();
        for case in cases {
            let name = format!("{dialect}/{}", case.file_name().unwrap().to_string_lossy());
            // What inspect cannot see: a status, upstream headers (TEI's
            // header figures), a route of the case's own (contracts).
            if ["status", "response.headers", "route.toml"]
                .iter()
                .any(|f| case.join(f).exists())
            {
                continue;
            }
            let expect: Value =
                serde_json::from_slice(&std::fs::read(case.join("expect.json")).unwrap()).unwrap();
            let endpoint = std::fs::read_to_string(case.join("endpoint")).unwrap();
            let mut response = ["response.json", "response.sse", "response.ndjson"]
                .iter()
                .map(|f| case.join(f))
                .find(|p| p.exists());
            // An event stream is written as text: inspect reads its bytes.
            let events = case.join("response.events");
            if response.is_none() && events.exists() {
                let text = std::fs::read_to_string(&events).unwrap();
                let saved = std::env::temp_dir().join(format!(
                    "probity-offline-{}-{}.bin",
                    std::process::id(),
                    name.replace('/', "-")
                ));
                std::fs::write(
                    &saved,
                    crate::support::eventstream::from_text(&text).unwrap(),
                )
                .unwrap();
                response = Some(saved);
            }
            let response = response.unwrap();
            let mut command = Command::new(env!("CARGO_BIN_EXE_probity"));
            // Azure and Vertex have no default route (each resource, each
            // region has its own host): their example's route judges their
            // fixtures.
            let example = match dialect {
                "azure" => Some("azure-openai.toml"),
                "vertex" => Some("vertex.toml"),
                _ => None,
            };
            if let Some(example) = example {
                let example = Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("config/examples")
                    .join(example);
                command.arg("--config").arg(example);
            }
            let output = command
                .env_remove("PROBITY_CONFIG")
                .args(["inspect", "--json", "--route", dialect, "--path"])
                .arg(endpoint.trim())
                .arg("--request")
                .arg(case.join("request.json"))
                .arg(&response)
                .output()
                .unwrap();
            let code = output.status.code();
            if code == Some(2) {
                // An endpoint the dialect does not inspect.
                let stderr = String::from_utf8_lossy(&output.stderr);
                if !stderr.contains("does not inspect") {
                    problems.push(format!("{name}: {stderr}"));
                }
                continue;
            }
            judged += 1;
            let verdict: Value = serde_json::from_slice(&output.stderr)
                .unwrap_or_else(|e| panic!("{name}: {e}: {:?}", output.stderr));
            let want = expect["outcome"].as_str().unwrap();
            let got = verdict["outcome"].as_str().unwrap();
            let outcome_fits = match want {
                "pass" => got == "passed",
                other => got == other,
            };
            if !outcome_fits {
                problems.push(format!("{name}: {got}, the fixture says {want}"));
                continue;
            }
            match want {
                "rejected" => {
                    if code != Some(1) || verdict["invariant"] != expect["invariant"] {
                        problems.push(format!("{name}: exit {code:?}, {verdict}"));
                    }
                }
                _ => {
                    let client = ["expected.json", "expected.sse", "expected.ndjson"]
                        .iter()
                        .map(|f| case.join(f))
                        .find(|p| p.exists())
                        .unwrap_or(response.clone());
                    // The verdict comment is the contract suites' to judge.
                    let stdout = crate::support::fixtures::without_verdict(&output.stdout);
                    let expected_events = case.join("expected.events");
                    let want_body = match expected_events.exists() {
                        true => crate::support::eventstream::from_text(
                            &std::fs::read_to_string(&expected_events).unwrap(),
                        )
                        .unwrap(),
                        false => std::fs::read(&client).unwrap(),
                    };
                    if code != Some(0) || stdout != want_body {
                        problems.push(format!("{name}: exit {code:?}, the body differs"));
                    }
                    let pointers = expect["pointers"].clone();
                    if want == "normalized" && verdict["pointers"] != pointers {
                        problems.push(format!("{name}: pointers {verdict}, want {pointers}"));
                    }
                }
            }
        }
    }
    assert!(judged >= 300, "only {judged} fixtures judged");
    assert!(
        problems.is_empty(),
        "{} of {judged} fixtures:\n  - {}",
        problems.len(),
        problems.join("\n  - ")
    );
}

/// `--path` takes the path as the app called it, query and all: a query
/// the proxy does not read changes nothing (`?alt=sse`), one it reads
/// decides as it does there (`?stream=true` on a stored response passes
/// unchecked).
#[test]
fn a_path_is_taken_with_its_query() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let inspect = |route: &str, path: &str, case: &str, response: &str| {
        let case = root.join(case);
        Command::new(env!("CARGO_BIN_EXE_probity"))
            .env_remove("PROBITY_CONFIG")
            .args([
                "inspect",
                "--json",
                "--route",
                route,
                "--path",
                path,
                "--request",
            ])
            .arg(case.join("request.json"))
            .arg(case.join(response))
            .output()
            .unwrap()
    };
    let stream = "gemini/gen_stream_prompt_tokens_string";
    let path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent";
    let bare = inspect("gemini", path, stream, "response.sse");
    let queried = inspect("gemini", &format!("{path}?alt=sse"), stream, "response.sse");
    assert_eq!(
        bare.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&bare.stderr)
    );
    assert_eq!(
        (queried.status.code(), &queried.stdout, &queried.stderr),
        (bare.status.code(), &bare.stdout, &bare.stderr),
        "{}",
        String::from_utf8_lossy(&queried.stderr)
    );
    let verdict: Value = serde_json::from_slice(&queried.stderr).unwrap();
    assert_eq!(verdict["outcome"], "normalized", "{verdict}");
    // A stored response, read back: judged as the proxy judges a GET of it.
    let stored = "openai/gen_responses_cancel_pass";
    let id = "/v1/responses/resp_68f0c2a1b3d4e5f60718293a4b5c6d7e";
    let read = inspect("openai", id, stored, "response.json");
    assert_eq!(
        read.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    let verdict: Value = serde_json::from_slice(&read.stderr).unwrap();
    assert_eq!(verdict["outcome"], "passed", "{verdict}");
    let replayed = inspect(
        "openai",
        &format!("{id}?stream=true"),
        stored,
        "response.json",
    );
    assert_eq!(replayed.status.code(), Some(2));
    let said = String::from_utf8_lossy(&replayed.stderr);
    assert!(
        said.contains("does not inspect") && said.contains("?stream=true"),
        "{said}"
    );
}
