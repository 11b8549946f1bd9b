//! The durable capture store, over real sockets with the real binary: a
//! directory that survives a restart (byte-identical bodies), retention by
//! bytes and by age, torn files never listed, 100,000 captures listed newest
//! first (timed), a failing store that no request notices, per-route
//! `capture = "all" | "off"`, and a DuckDB query over the directory.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::*;

const EMBEDDINGS_REQUEST: &str = r#"{"model": "m", "input": ["a", "b"]}"#;

fn embeddings_body(prompt_tokens: &str) -> String {
    format!(
        r#"{{"object": "list", "data": [{{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}}, {{"object": "embedding", "index": 1, "embedding": [0.3, 0.4]}}], "model": "m", "usage": {{"prompt_tokens": {prompt_tokens}, "total_tokens": 4}}}}"#
    )
}

/// A directory removed when the test ends.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let path = temp_path(".captures");
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    /// In memory where the machine has a tmpfs: 200,000 files cost minutes
    /// of a virtual disk's time, and what is measured is probity's listing.
    fn in_memory() -> Self {
        let shm = Path::new("/dev/shm");
        if !shm.is_dir() {
            return Self::new();
        }
        let name = temp_path(".captures");
        let path = shm.join(name.file_name().unwrap());
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    fn store(&self) -> String {
        self.0.display().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Every file under `dir` whose name ends with `suffix`.
fn files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files(&path, suffix));
        } else if path.to_string_lossy().ends_with(suffix) {
            out.push(path);
        }
    }
    out
}

/// Waits until `files(dir, suffix)` has `n` entries.
async fn until_files(dir: &Path, suffix: &str, n: usize) -> Vec<PathBuf> {
    let started = Instant::now();
    loop {
        let found = files(dir, suffix);
        if found.len() == n {
            return found;
        }
        assert!(
            started.elapsed() < STEP,
            "{} {suffix} files, not {n}: {found:?}",
            found.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One capture's metadata, as probity writes it.
fn meta(id: &str, time: &str, route: &str, outcome: &str, body: &[u8]) -> String {
    serde_json::json!({
        "request_id": id, "time": time, "instance": "planted", "route": route,
        "endpoint": "/v1/embeddings", "dialect": "openai", "outcome": outcome,
        "pointers": [], "invariant": null, "reasons": [], "upstream_status": 200,
        "upstream_headers": [["content-type", "application/json"]],
        "body_bytes": body.len(), "body_captured": true, "body_sha256": null,
        "body": format!("{id}.body"),
    })
    .to_string()
}

/// Plants a capture in the layout, as another process would have written it.
fn plant(store: &Path, day: &str, hour: u32, id: &str, route: &str, outcome: &str) -> PathBuf {
    let dir = store.join(format!("dt={day}/hour={hour:02}/planted"));
    std::fs::create_dir_all(&dir).unwrap();
    let body = format!("body of {id}");
    let time = format!("{day}T{hour:02}:00:00.000Z");
    std::fs::write(dir.join(format!("{id}.body")), &body).unwrap();
    std::fs::write(
        dir.join(format!("{id}.json")),
        meta(id, &time, route, outcome, body.as_bytes()),
    )
    .unwrap();
    dir
}

async fn normalizing_upstream() -> Upstream {
    let body = embeddings_body(r#""4""#);
    Upstream::start(move |_| Reply::json(200, body.clone()).header("x-upstream", "kept")).await
}

fn with_store(upstream: &Upstream, route_extra: &str, capture: &str) -> String {
    let routes = route("openai", "/openai", &upstream.url(), "openai", route_extra);
    config("", &format!("{routes}\n[capture]\n{capture}\n"))
}

#[tokio::test]
async fn a_capture_survives_a_restart_byte_for_byte() {
    let dir = TempDir::new();
    let upstream = normalizing_upstream().await;
    let config = with_store(&upstream, "", &format!("store = \"{}\"", dir.store()));
    let mut probity = Probity::start(&config);
    let got = post(&probity.url("/openai/v1/embeddings"), EMBEDDINGS_REQUEST).await;
    assert_eq!(
        got.header("probity-normalized"),
        Some("/usage/prompt_tokens")
    );
    let id = got.header("x-request-id").unwrap().to_string();
    assert_eq!(got.header("probity-capture"), Some(id.as_str()));
    // SIGTERM drains the queue: the capture is on disk when the process ends.
    probity.signal("TERM");
    assert_eq!(probity.exit_code().await, Some(0));

    let json = files(&dir.0, ".json");
    assert_eq!(json.len(), 1, "{json:?}");
    let path = json[0].to_string_lossy().to_string();
    assert!(
        path.contains("/dt=") && path.contains("/hour=") && path.ends_with(&format!("/{id}.json")),
        "{path}"
    );
    let stored: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json[0]).unwrap()).unwrap();
    assert_eq!(stored["outcome"], "normalized");
    assert_eq!(stored["dialect"], "openai");
    assert_eq!(stored["route"], "openai");
    assert_eq!(stored["body_sha256"].as_str().unwrap().len(), 64);
    assert!(!stored["instance"].as_str().unwrap().is_empty());

    let probity = Probity::start(&config);
    let capture = probity.admin_get(&format!("/captures/{id}")).await;
    assert_eq!(capture.status, 200);
    assert_eq!(
        capture.body,
        embeddings_body(r#""4""#).as_bytes(),
        "byte-identical"
    );
    assert_eq!(capture.header("probity-upstream-x-upstream"), Some("kept"));
    assert_eq!(capture.header("probity-upstream-status"), Some("200"));
    let listing = probity.admin_get("/captures").await.json();
    assert_eq!(capture_ids(&listing), [id]);
}

#[tokio::test]
async fn the_oldest_captures_are_evicted_by_bytes_and_by_age() {
    let dir = TempDir::new();
    // A week-old capture, written before this process: past max_age.
    plant(&dir.0, "2020-01-01", 0, "ancient", "openai", "rejected");
    let upstream = normalizing_upstream().await;
    let body_bytes = embeddings_body(r#""4""#).len();
    let capture = format!(
        "store = \"{}\"\nmax_bytes = {}\nmax_age = \"1d\"",
        dir.store(),
        body_bytes * 2
    );
    let probity = Probity::start(&with_store(&upstream, "", &capture));
    let mut sent = Vec::new();
    for _ in 0..4 {
        let got = post(&probity.url("/openai/v1/embeddings"), EMBEDDINGS_REQUEST).await;
        sent.push(got.header("x-request-id").unwrap().to_string());
    }
    // Once all four are written (before, the files on disk are a moment
    // of the writers' work, not the outcome), two bodies fit: the two
    // newest stay, on disk and listed.
    within("four captures written", async {
        let written = r#"probity_capture_writes_total{result="ok"}"#;
        while probity.metric(written).await != Some(4.0) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let mut left: Vec<String> = until_files(&dir.0, ".json", 2)
        .await
        .iter()
        .map(|p| p.file_stem().unwrap().to_string_lossy().to_string())
        .collect();
    left.sort();
    let mut newest = vec![sent[2].clone(), sent[3].clone()];
    newest.sort();
    assert_eq!(
        left, newest,
        "the oldest evicted first; the ancient one by age"
    );
    until_files(&dir.0, ".body", 2).await;
    let listing = probity.admin_get("/captures").await.json();
    assert_eq!(capture_ids(&listing), [sent[3].clone(), sent[2].clone()]);
    let gone = probity.admin_get("/captures/ancient").await;
    assert_eq!(gone.status, 404);
}

#[tokio::test]
async fn a_torn_capture_is_never_listed() {
    let dir = TempDir::new();
    let part = plant(&dir.0, "2026-11-30", 10, "whole", "openai", "normalized");
    // A write cut short at each step: a temporary file, a metadata object
    // without its body, a truncated metadata object.
    std::fs::write(part.join("temp.json#12345"), "{").unwrap();
    std::fs::write(part.join("temp.body#12346"), "x").unwrap();
    let lone = meta(
        "lone",
        "2026-11-30T10:00:00.000Z",
        "openai",
        "rejected",
        b"",
    );
    std::fs::write(part.join("lone.json"), lone).unwrap();
    std::fs::write(part.join("cut.body"), "body of cut").unwrap();
    let whole = meta(
        "cut",
        "2026-11-30T10:00:00.000Z",
        "openai",
        "rejected",
        b"x",
    );
    std::fs::write(part.join("cut.json"), &whole[..whole.len() / 2]).unwrap();

    let upstream = normalizing_upstream().await;
    let capture = format!("store = \"{}\"\nmax_age = \"3650d\"", dir.store());
    let probity = Probity::start(&with_store(&upstream, "", &capture));
    let listing = probity.admin_get("/captures").await.json();
    assert_eq!(capture_ids(&listing), ["whole"]);
    for id in ["lone", "cut", "temp"] {
        let got = probity.admin_get(&format!("/captures/{id}")).await;
        assert_eq!(got.status, 404, "{id}");
    }
    let whole = probity.admin_get("/captures/whole").await;
    assert_eq!(whole.text(), "body of whole");
}

#[tokio::test]
async fn a_hundred_thousand_captures_are_listed_newest_first_quickly() {
    const N: usize = 100_000;
    const HOURS: usize = 1000;
    let dir = TempDir::in_memory();
    let wrote = Instant::now();
    // Spread over 1,000 hours (about six weeks), 100 an hour; four writers.
    std::thread::scope(|scope| {
        for writer in 0..4 {
            let dir = &dir.0;
            scope.spawn(move || {
                for hour in (writer..HOURS).step_by(4) {
                    plant_hour(dir, hour, N / HOURS);
                }
            });
        }
    });
    eprintln!("wrote {N} captures in {:?}", wrote.elapsed());

    let upstream = normalizing_upstream().await;
    let capture = format!("store = \"{}\"\nmax_age = \"36500d\"", dir.store());
    let started = Instant::now();
    let probity = Probity::start(&with_store(&upstream, "", &capture));
    let start_up = started.elapsed();
    // Serving does not wait for the index; listing does.
    let indexed = loop {
        let line = probity
            .logs()
            .into_iter()
            .find(|l| l["message"] == "capture store indexed");
        if let Some(line) = line {
            break line;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "not indexed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(indexed["captures"], N);

    let listed = Instant::now();
    let page = probity.admin_get("/captures?limit=50").await.json();
    let first_page = listed.elapsed();
    let got = capture_ids(&page);
    assert_eq!(got.len(), 50);
    assert!(
        got[0].starts_with(&format!("c{:04}-", HOURS - 1)),
        "{got:?}"
    );
    let next = page["next"].as_str().unwrap().to_string();
    assert_eq!(next, got[49]);

    let listed = Instant::now();
    let url = format!("/captures?limit=50&before={next}&route=openai&outcome=rejected");
    let filtered = probity.admin_get(&url).await.json();
    let filtered_page = listed.elapsed();
    assert_eq!(capture_ids(&filtered).len(), 50);
    assert!(filtered["captures"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["route"] == "openai" && c["outcome"] == "rejected"));
    eprintln!(
        "{N} captures: listening after {start_up:?}, indexed in {} ms, first page of 50 in {first_page:?}, \
         a filtered page (1 in 20 match) in {filtered_page:?}",
        indexed["index_ms"]
    );
    assert!(first_page < Duration::from_secs(2), "{first_page:?}");
    assert!(filtered_page < Duration::from_secs(5), "{filtered_page:?}");
    drop(probity);
    let removed = Instant::now();
    drop(dir);
    eprintln!(
        "removed in {:?}; the test took {:?}",
        removed.elapsed(),
        wrote.elapsed()
    );
}

/// Plants `n` captures in hour `hour` after 2024-10-04 00:00 (day 20,000).
fn plant_hour(dir: &Path, hour: usize, n: usize) {
    let day = civil(20_000 + (hour / 24) as i64);
    let folder = dir.join(format!("dt={day}/hour={:02}/planted", hour % 24));
    std::fs::create_dir_all(&folder).unwrap();
    for i in 0..n {
        let id = format!("c{hour:04}-{i:03}");
        let route = if i % 2 == 0 { "openai" } else { "ollama" };
        let outcome = if i % 10 == 0 {
            "rejected"
        } else {
            "normalized"
        };
        let time = format!("{day}T{:02}:00:00.000Z", hour % 24);
        std::fs::write(folder.join(format!("{id}.body")), &id).unwrap();
        let json = meta(&id, &time, route, outcome, id.as_bytes());
        std::fs::write(folder.join(format!("{id}.json")), json).unwrap();
    }
}

/// `YYYY-MM-DD` of days since 1970-01-01.
fn civil(days: i64) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[tokio::test]
async fn a_failing_store_changes_no_answer() {
    let dir = TempDir::new();
    let store = dir.0.join("store");
    let upstream = normalizing_upstream().await;
    let capture = format!("store = \"{}\"", store.display());
    let probity = Probity::start(&with_store(&upstream, "", &capture));
    let before = post(&probity.url("/openai/v1/embeddings"), EMBEDDINGS_REQUEST).await;
    until_files(&store, ".json", 1).await;
    // The directory becomes a file: every write fails from now on.
    std::fs::remove_dir_all(&store).unwrap();
    std::fs::write(&store, "not a directory").unwrap();
    for _ in 0..20 {
        let got = post(&probity.url("/openai/v1/embeddings"), EMBEDDINGS_REQUEST).await;
        assert_eq!(got.status, before.status);
        assert_eq!(got.body, before.body);
        assert_eq!(
            got.header("probity-normalized"),
            before.header("probity-normalized")
        );
    }
    let sample = r#"probity_capture_dropped_total{reason="store_error"}"#;
    let started = Instant::now();
    while probity.metric(sample).await != Some(20.0) {
        assert!(
            started.elapsed() < STEP,
            "{:?}",
            probity.metric(sample).await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let errors = probity
        .metric(r#"probity_capture_writes_total{result="error"}"#)
        .await;
    assert_eq!(errors, Some(20.0));
    assert_eq!(
        probity
            .metric(r#"probity_capture_writes_total{result="ok"}"#)
            .await,
        Some(1.0)
    );
    assert_eq!(get(&probity.admin_url("/readyz")).await.status, 200);
    // The listing still answers; no failed capture is in it.
    let listing = probity.admin_get("/captures").await;
    assert_eq!(listing.status, 200);
    assert!(capture_ids(&listing.json()).len() <= 1);
}

#[tokio::test]
async fn a_route_captures_all_or_nothing_as_configured() {
    let valid = embeddings_body("2");
    let normalizing = embeddings_body(r#""2""#);
    let upstream = Upstream::start(move |request| {
        let body = if request.target.contains("bad") {
            normalizing.clone()
        } else {
            valid.clone()
        };
        Reply::json(200, body)
    })
    .await;
    let routes = format!(
        "{}{}",
        route(
            "all",
            "/all",
            &upstream.url(),
            "openai",
            "capture = \"all\"\ncapture_sample = 1.0"
        ),
        route(
            "off",
            "/off",
            &upstream.url(),
            "openai",
            "capture = \"off\""
        ),
    );
    let probity = Probity::start(&config(
        "",
        &format!("{routes}\n[capture]\nstore = \"memory:\"\n"),
    ));
    let valid = post(&probity.url("/all/v1/embeddings"), EMBEDDINGS_REQUEST).await;
    let id = valid.header("x-request-id").unwrap().to_string();
    assert_eq!(valid.header("probity-capture"), Some(id.as_str()));
    let bad = post(&probity.url("/off/bad/embeddings"), EMBEDDINGS_REQUEST).await;
    assert_eq!(
        bad.header("probity-normalized"),
        Some("/usage/prompt_tokens")
    );
    assert_eq!(bad.header("probity-capture"), None);
    let listing = probity.admin_get("/captures").await.json();
    assert_eq!(capture_ids(&listing), std::slice::from_ref(&id));
    assert_eq!(listing["captures"][0]["outcome"], "passed");
    let passed = probity
        .admin_get("/captures?outcome=passed&route=all")
        .await
        .json();
    assert_eq!(capture_ids(&passed), [id]);
    let none = probity.admin_get("/captures?outcome=rejected").await.json();
    assert_eq!(capture_ids(&none).len(), 0);
}

#[tokio::test]
async fn duckdb_counts_outcomes_per_route_and_day_over_the_directory() {
    let has_duckdb = std::process::Command::new("python3")
        .args(["-c", "import duckdb"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        has_duckdb,
        "the duckdb Python package is missing: install it (python3 -m pip install duckdb; .ci/run does)"
    );
    let dir = TempDir::new();
    let upstream = Upstream::start(move |request| {
        let body = if request.target.contains("bad") {
            embeddings_body(r#""4""#)
        } else {
            r#"{"data": []}"#.to_string()
        };
        Reply::json(200, body)
    })
    .await;
    let capture = format!("store = \"{}\"", dir.store());
    let probity = Probity::start(&with_store(&upstream, "", &capture));
    for path in ["bad", "bad", "bad", "broken"] {
        let url = probity.url(&format!("/openai/{path}/embeddings"));
        post(&url, EMBEDDINGS_REQUEST).await;
    }
    until_files(&dir.0, ".json", 4).await;
    let query = format!(
        "SELECT route, outcome, CAST(dt AS VARCHAR) AS day, count(*) AS n \
         FROM read_json('{}/dt=*/hour=*/*/*.json', hive_partitioning = true) \
         GROUP BY ALL ORDER BY outcome",
        dir.store()
    );
    let script =
        format!("import duckdb, json\nprint(json.dumps(duckdb.sql({query:?}).fetchall()))");
    let output = std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let rows: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let today = &files(&dir.0, ".json")[0];
    let day = today
        .ancestors()
        .filter_map(|p| {
            p.file_name()?
                .to_str()?
                .strip_prefix("dt=")
                .map(str::to_string)
        })
        .next()
        .unwrap();
    assert_eq!(
        rows,
        serde_json::json!([
            ["openai", "normalized", day, 3],
            ["openai", "rejected", day, 1]
        ])
    );
}

#[tokio::test]
async fn a_reused_request_id_is_its_newest_capture_after_a_write_and_a_restart() {
    let dir = TempDir::new();
    // One request id captured in two hours (a client reused it): the newer
    // wins when the index is rebuilt, and the older one's files go.
    let older = plant(&dir.0, "2026-11-30", 9, "reused", "openai", "rejected");
    let newer = plant(&dir.0, "2026-11-30", 10, "reused", "openai", "normalized");
    std::fs::write(newer.join("reused.body"), "the newer body").unwrap();
    let upstream = normalizing_upstream().await;
    let capture = format!("store = \"{}\"\nmax_age = \"3650d\"", dir.store());
    let config = with_store(&upstream, "", &capture);
    let probity = Probity::start(&config);
    let got = probity.admin_get("/captures/reused").await;
    assert_eq!(got.text(), "the newer body");
    assert!(
        !older.join("reused.json").exists(),
        "the older capture stays"
    );
    let listing = probity.admin_get("/captures").await.json();
    assert_eq!(capture_ids(&listing), ["reused"]);

    // Reused once more, now: the newest capture is this one, here and
    // after a restart, and the older files are gone.
    let request = http::Request::post(probity.url("/openai/v1/embeddings"))
        .header("content-type", "application/json")
        .header("x-request-id", "reused")
        .body(http_body_util::Full::new(bytes::Bytes::from(
            EMBEDDINGS_REQUEST,
        )))
        .unwrap();
    let sent = send(request).await;
    assert_eq!(sent.header("probity-capture"), Some("reused"));
    within("the new capture written, the older removed", async {
        loop {
            let json = files(&dir.0, ".json");
            let body = files(&dir.0, ".body");
            let moved = |found: &[PathBuf]| found.len() == 1 && !found[0].starts_with(&newer);
            if moved(&json) && moved(&body) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let expected = embeddings_body(r#""4""#);
    let got = probity.admin_get("/captures/reused").await;
    assert_eq!(got.text(), expected);
    drop(probity);

    let probity = Probity::start(&config);
    let got = probity.admin_get("/captures/reused").await;
    assert_eq!(got.text(), expected);
    let listing = probity.admin_get("/captures").await.json();
    assert_eq!(capture_ids(&listing), ["reused"]);
}

#[tokio::test]
async fn a_chunked_exchange_keeps_one_body_per_chunk_across_a_restart() {
    let dir = TempDir::new();
    // Each chunk's answer is distinct (its input in the model name) and
    // its usage malformed, so the stitched response is captured.
    let upstream = Upstream::start(|request| {
        let sent: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        let input = sent["input"][0].as_str().unwrap().to_string();
        let body = format!(
            r#"{{"object": "list", "data": [{{"object": "embedding", "index": 0, "embedding": [0.5]}}], "model": "m-{input}", "usage": {{"prompt_tokens": "1", "total_tokens": 1}}}}"#
        );
        Reply::json(200, body).header("x-chunk", &input)
    })
    .await;
    let capture = format!("store = \"{}\"", dir.store());
    let config = with_store(&upstream, "max_batch_inputs = 1", &capture);
    let mut probity = Probity::start(&config);
    let got = post(&probity.url("/openai/v1/embeddings"), EMBEDDINGS_REQUEST).await;
    assert_eq!(got.status, 200, "{}", got.text());
    let id = got.header("x-request-id").unwrap().to_string();
    assert_eq!(got.header("probity-capture"), Some(id.as_str()));
    probity.signal("TERM");
    assert_eq!(probity.exit_code().await, Some(0));

    let mut bodies: Vec<String> = files(&dir.0, ".body")
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().to_string())
        .collect();
    bodies.sort();
    assert_eq!(
        bodies,
        [format!("{id}.chunk-0.body"), format!("{id}.chunk-1.body")]
    );
    let json = files(&dir.0, ".json");
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json[0]).unwrap()).unwrap();
    assert_eq!(meta["outcome"], "stitched");
    let chunks = meta["chunks"].as_array().unwrap();
    assert_eq!(chunks.len(), 2);
    assert_eq!(chunks[1]["body"], format!("{id}.chunk-1.body"));
    assert_eq!(chunks[1]["body_sha256"].as_str().unwrap().len(), 64);
    assert_eq!(chunks[1]["status"], 200);

    let probity = Probity::start(&config);
    let whole = probity.admin_get(&format!("/captures/{id}")).await;
    assert_eq!(whole.header("probity-capture-shape"), Some("chunks"));
    let listed = whole.json()["chunks"].as_array().unwrap().clone();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0]["headers"]["x-chunk"], "a");
    let second = probity.admin_get(&format!("/captures/{id}/chunks/1")).await;
    assert_eq!(second.status, 200);
    let on_disk = std::fs::read(json[0].with_file_name(format!("{id}.chunk-1.body"))).unwrap();
    assert_eq!(second.body, on_disk, "byte-identical");
    assert!(
        second.text().contains(r#""model": "m-b""#),
        "{}",
        second.text()
    );
    assert_eq!(second.header("probity-upstream-x-chunk"), Some("b"));
    assert_eq!(second.header("probity-upstream-status"), Some("200"));
    let none = probity.admin_get(&format!("/captures/{id}/chunks/2")).await;
    assert_eq!(none.status, 404);
}

/// Every mode under `dir`, the folder itself included: (path, mode & 0o777).
fn modes(dir: &Path) -> Vec<(PathBuf, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = vec![(
        dir.to_path_buf(),
        std::fs::metadata(dir).unwrap().permissions().mode() & 0o777,
    )];
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(modes(&path));
        } else {
            let mode = entry.metadata().unwrap().permissions().mode() & 0o777;
            out.push((path, mode));
        }
    }
    out
}

/// Captures hold model outputs verbatim: readable by probity's user alone,
/// files 0600 and folders 0700, whatever umask it was started with (0 gives
/// every file 0666 by default), and a store folder made wider before is
/// narrowed at start.
#[tokio::test]
async fn captures_at_rest_are_readable_by_probitys_user_alone() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new();
    std::fs::create_dir_all(&dir.0).unwrap();
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let upstream = normalizing_upstream().await;
    let config = with_store(&upstream, "", &format!("store = \"{}\"", dir.store()));
    for mask in [0o000, 0o022] {
        let probity = Probity::start_with_umask(&config, mask);
        let got = post(&probity.url("/openai/v1/embeddings"), EMBEDDINGS_REQUEST).await;
        assert!(got.header("probity-capture").is_some());
        let id = got.header("x-request-id").unwrap().to_string();
        until_files(&dir.0, &format!("{id}.json"), 1).await;
        let found = modes(&dir.0);
        assert!(found.len() >= 4, "{found:?}");
        for (path, mode) in &found {
            let want = if path.is_dir() { 0o700 } else { 0o600 };
            assert_eq!(
                *mode,
                want,
                "umask {mask:o}: {} is {mode:o}",
                path.display()
            );
        }
    }
}
