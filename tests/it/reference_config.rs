//! The configuration reference is the binary's: `probity config reference`
//! and `probity config schema` print it from the configuration's own
//! definitions, and the checked-in copies under docs/src/reference/ must be
//! what they print. `UPDATE_REFERENCE=1 cargo test --test it reference`
//! writes them instead. The default file's keys are all in it, and the
//! configuration files the repository ships validate against the schema.

use std::path::Path;
use std::process::Command;

const PAGE: &str = "docs/src/reference/config.md";
const SCHEMA: &str = "docs/src/reference/probity.schema.json";

fn repo(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// What `probity config <what>` prints.
fn printed(what: &str) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_probity"))
        .args(["config", what])
        .env_remove("PROBITY_CONFIG")
        .output()
        .unwrap();
    assert!(output.status.success(), "probity config {what}: {output:?}");
    String::from_utf8(output.stdout).unwrap()
}

/// Fails naming the file and its first line that differs from `generated`;
/// with `UPDATE_REFERENCE=1`, writes `generated` there instead.
fn assert_current(path: &str, generated: &str) {
    let file = repo(path);
    if std::env::var_os("UPDATE_REFERENCE").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, generated).unwrap();
        return;
    }
    let checked_in = std::fs::read_to_string(&file).unwrap_or_default();
    if checked_in == generated {
        return;
    }
    let mut old = checked_in.lines();
    let mut new = generated.lines();
    let mut line = 1;
    loop {
        match (old.next(), new.next()) {
            (Some(a), Some(b)) if a == b => line += 1,
            (a, b) => panic!(
                "{path} is stale: line {line} differs\n  checked in: {}\n  generated:  {}\n\
                 regenerate with: UPDATE_REFERENCE=1 cargo test --test it reference",
                a.unwrap_or("(end of file)"),
                b.unwrap_or("(end of file)"),
            ),
        }
    }
}

#[test]
fn the_configuration_reference_page_is_what_the_binary_prints() {
    assert_current(PAGE, &printed("reference"));
}

#[test]
fn the_configuration_schema_is_what_the_binary_prints() {
    assert_current(SCHEMA, &printed("schema"));
}

#[test]
fn the_page_is_one_manual_page_with_every_table() {
    let page = printed("reference");
    let titles: Vec<&str> = page.lines().filter(|l| l.starts_with("# ")).collect();
    assert_eq!(titles, ["# Configuration reference"]);
    let sections: Vec<&str> = page.lines().filter(|l| l.starts_with("## ")).collect();
    assert_eq!(
        sections,
        [
            "## `[server]`",
            "## `[[routes]]`",
            "## `[routes.contract]`",
            "## `[routes.contract.citations]`",
            "## `[capture]`",
            "## `[[clients]]`",
            "## `[telemetry]`",
            "## `[admin]`",
        ]
    );
    // The keys validation requires though serde defaults them, and the
    // ones serde itself requires.
    for key in [
        "routes.name",
        "routes.prefix",
        "routes.upstream",
        "routes.dialect",
        "routes.contract.citations.output",
        "clients.token_env",
    ] {
        let heading = format!("### `{key}`\n\n");
        let at = page.find(&heading).unwrap_or_else(|| panic!("no {key}"));
        let fact = page[at + heading.len()..].lines().next().unwrap();
        assert!(fact.ends_with("; required."), "{key}: {fact}");
    }
    assert!(page.contains("### `routes.model_families`\n\ntable of strings; default `{}`."));
    assert!(page.contains("### `capture.max_bytes`\n\ninteger; default none."));
    assert!(page.contains("### `server.listen`\n\nstring; default `\"127.0.0.1:8080\"`."));
}

/// `[table]` or `[[table]]` (commented out or not) of a line of the file.
fn header(line: &str) -> Option<&str> {
    let line = line.trim_start_matches('#').trim();
    let inner = line.strip_prefix('[')?.split(']').next()?;
    let name = inner.trim_start_matches('[');
    name.chars()
        .all(|c| c.is_ascii_lowercase() || c == '_' || c == '.')
        .then_some(name)
}

/// The key a line sets, commented out or not: `max_bytes = ...` (prose in
/// a comment, `endpoint_url="..."`, sets none).
fn key(line: &str) -> Option<&str> {
    let line = line.trim_start_matches('#').trim_start();
    let (key, _) = line.split_once(" = ")?;
    let key = key.trim_end();
    (!key.is_empty() && key.chars().all(|c| c.is_ascii_lowercase() || c == '_')).then_some(key)
}

#[test]
fn every_key_the_default_file_documents_is_in_the_reference() {
    let page = printed("reference");
    let default = std::fs::read_to_string(repo("config/probity.toml")).unwrap();
    let mut table = None;
    let mut seen = 0;
    for line in default.lines() {
        if let Some(name) = header(line) {
            let documented = [
                format!("## `[{name}]`"),
                format!("## `[[{name}]]`"),
                format!("### `{name}`"),
            ];
            assert!(
                documented.iter().any(|d| page.contains(d.as_str())),
                "[{name}] is not in the reference"
            );
            table = Some(name);
        } else if let (Some(table), Some(key)) = (table, key(line)) {
            assert!(
                page.contains(&format!("### `{table}.{key}`\n")),
                "{table}.{key} (config/probity.toml) is not in the reference"
            );
            seen += 1;
        }
    }
    assert!(seen > 40, "only {seen} keys read from config/probity.toml");
}

#[test]
fn the_shipped_configurations_validate_against_the_schema() {
    let schema: serde_json::Value = serde_json::from_str(&printed("schema")).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let mut files = vec![
        repo("config/probity.toml"),
        repo("deploy/container/probity.toml"),
    ];
    if let Ok(examples) = std::fs::read_dir(repo("config/examples")) {
        files.extend(
            examples
                .map(|entry| entry.unwrap().path())
                .filter(|path| path.extension().is_some_and(|e| e == "toml")),
        );
    }
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let value: serde_json::Value = toml::from_str(&text).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{}: {errors:#?}", file.display());
    }
    // And the schema refuses what check-config refuses of the same kinds: an
    // unknown key, a route without its required keys, a wrong type.
    for (bad, why) in [
        ("[server]\nlisten_on = \"x\"\n", "unknown key"),
        ("[[routes]]\nprefix = \"/a\"\n", "route without a name"),
        ("[capture]\nmax_entries = \"many\"\n", "string for an integer"),
        ("[[routes]]\nname = \"a\"\nprefix = \"/a\"\nupstream = \"http://h\"\ndialect = \"openai\"\ncapture = \"some\"\n", "unknown capture mode"),
    ] {
        let value: serde_json::Value = toml::from_str(bad).unwrap();
        assert!(!validator.is_valid(&value), "the schema accepts a {why}");
    }
}
