//! The manual's examples run (docs/src): every whole TOML block passes
//! `probity check-config`, every file of config/examples/ does too, and the
//! getting-started walk's `console` blocks run as written, each output
//! compared with the one the page shows.
//!
//! The walk runs verbatim, on the addresses it names (127.0.0.1:8080, :9464,
//! :8000), in a network namespace of its own (`unshare --net`), so neither a
//! developer's own probity nor another test holds those ports.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{can_run, files_under, temp_path, PROXY_VARIABLES};

/// A fenced code block of a page.
struct Block {
    /// The info string: `toml`, `console`, `rust,ignore`...
    info: String,
    text: String,
    /// The line of its opening fence (1-based).
    line: usize,
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The fenced blocks of a Markdown page (``` fences, not nested).
fn blocks(page: &str) -> Vec<Block> {
    let mut found = Vec::new();
    let mut open: Option<Block> = None;
    for (at, line) in page.lines().enumerate() {
        let fence = line.trim_start().strip_prefix("```");
        match (open.take(), fence) {
            (None, Some(info)) => {
                open = Some(Block {
                    info: info.trim().to_string(),
                    text: String::new(),
                    line: at + 1,
                })
            }
            (Some(block), Some(_)) => found.push(block),
            (Some(mut block), None) => {
                block.text.push_str(line);
                block.text.push('\n');
                open = Some(block);
            }
            (None, None) => {}
        }
    }
    found
}

/// `text` with mdBook's `{{#include path}}` lines replaced by the files
/// they name, relative to the page's folder.
fn included(text: &str, folder: &Path) -> String {
    let mut out = String::new();
    for line in text.lines() {
        match line
            .trim()
            .strip_prefix("{{#include ")
            .and_then(|rest| rest.strip_suffix("}}"))
        {
            Some(path) => {
                let file = folder.join(path.trim());
                let body = std::fs::read_to_string(&file)
                    .unwrap_or_else(|e| panic!("{line}: {}: {e}", file.display()));
                out.push_str(&body);
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// Every page of the manual, under docs/src.
fn pages() -> Vec<PathBuf> {
    files_under(&root().join("docs/src"), "md")
}

/// `probity check-config` on one file: its problems, if any. Each client
/// token the file names is set, as the reader who copies it sets them
/// (check-config refuses a client that could never be admitted).
fn check_config(path: &Path) -> Result<(), String> {
    let mut command = Command::new(env!("CARGO_BIN_EXE_probity"));
    command
        .arg("check-config")
        .arg(path)
        .env_remove("PROBITY_CONFIG");
    let text = std::fs::read_to_string(path).unwrap();
    if let Ok(file) = toml::from_str::<toml::Table>(&text) {
        let clients = file.get("clients").and_then(toml::Value::as_array);
        for (n, client) in clients.into_iter().flatten().enumerate() {
            if let Some(variable) = client.get("token_env").and_then(toml::Value::as_str) {
                command.env(
                    variable,
                    format!("client-{n}-token-of-the-manual-0123456789"),
                );
            }
        }
    }
    let out = command.output().unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// A `toml` block is a whole configuration file (a fragment is marked
/// `toml,ignore`), so a reader can copy it and run it.
#[test]
fn every_toml_block_of_the_manual_is_a_valid_configuration() {
    let mut checked = 0;
    let mut failed = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let folder = page.parent().unwrap();
        for block in blocks(&text).into_iter().filter(|b| b.info == "toml") {
            let file = temp_path(".toml");
            std::fs::write(&file, included(&block.text, folder)).unwrap();
            if let Err(problems) = check_config(&file) {
                let at = page.strip_prefix(root()).unwrap().display();
                failed.push(format!("{at}:{}:\n{problems}", block.line));
            }
            let _ = std::fs::remove_file(&file);
            checked += 1;
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    assert!(checked >= 1, "no toml block was found in docs/src");
}

/// Each example setup a user copies is valid as it stands.
#[test]
fn every_example_configuration_is_valid() {
    let mut failed = Vec::new();
    let mut names = Vec::new();
    for entry in std::fs::read_dir(root().join("config/examples")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            names.push(path.file_name().unwrap().to_string_lossy().into_owned());
            if let Err(problems) = check_config(&path) {
                failed.push(format!("{}:\n{problems}", path.display()));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    assert!(names.len() >= 5, "config/examples holds only {names:?}");
}

/// One command of a walk and the output the page shows for it.
struct Step {
    command: String,
    expected: Vec<String>,
    line: usize,
}

/// The `$ ` commands of a page's `console` blocks, in order, each with the
/// lines shown under it.
fn steps(page: &str) -> Vec<Step> {
    let mut found: Vec<Step> = Vec::new();
    for block in blocks(page).into_iter().filter(|b| b.info == "console") {
        for (at, line) in block.text.lines().enumerate() {
            match line.strip_prefix("$ ") {
                Some(command) => found.push(Step {
                    command: command.to_string(),
                    expected: Vec::new(),
                    line: block.line + 1 + at,
                }),
                None => found
                    .last_mut()
                    .expect("a console block starts with a `$ ` command")
                    .expected
                    .push(line.to_string()),
            }
        }
    }
    found
}

/// Whether `line` fits `pattern`, where `[..]` stands for any text.
fn fits(pattern: &str, line: &str) -> bool {
    let mut parts = pattern.split("[..]");
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = line.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// Whether `got` fits `expected` line by line, where a line `...` stands
/// for any number of lines.
fn matches(expected: &[String], got: &[&str]) -> bool {
    match expected.split_first() {
        None => got.is_empty(),
        Some((first, rest)) if first == "..." => {
            (0..=got.len()).any(|skip| matches(rest, &got[skip..]))
        }
        Some((first, rest)) => match got.split_first() {
            Some((line, more)) => fits(first, line) && matches(rest, more),
            None => false,
        },
    }
}

/// The shell script of a walk: each command between markers carrying its
/// number and exit status; at the end, its background jobs are stopped.
fn script(steps: &[Step]) -> String {
    let mut script = String::from("ip link set lo up || exit 97\n");
    for (n, step) in steps.iter().enumerate() {
        script.push_str(&format!(
            "printf '\\n@@step {n}\\n'\n{{ {}\n}} 2>&1\nprintf '\\n@@status {n} %d\\n' \"$?\"\n",
            step.command
        ));
    }
    script.push_str("kill $(jobs -p) 2>/dev/null\nwait\n");
    script
}

/// What each step printed and its exit status, from the script's output.
fn outcomes(output: &str, count: usize) -> Vec<Option<(String, i32)>> {
    let mut found = vec![None; count];
    let mut rest = output;
    for (n, slot) in found.iter_mut().enumerate() {
        let begin = format!("\n@@step {n}\n");
        let Some(start) = rest.find(&begin) else {
            break;
        };
        let after = &rest[start + begin.len()..];
        let end = format!("\n@@status {n} ");
        let Some(stop) = after.find(&end) else {
            break;
        };
        let status = after[stop + end.len()..]
            .lines()
            .next()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(-1);
        *slot = Some((after[..stop].to_string(), status));
        rest = &after[stop..];
    }
    found
}

/// Runs `script` in a network namespace of its own, in `dir`, with the
/// tested `probity` first on the PATH; stopped after `limit`.
fn run_walk(script: &str, dir: &Path, limit: Duration) -> String {
    use std::os::unix::process::CommandExt;
    let bin = Path::new(env!("CARGO_BIN_EXE_probity")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let file = dir.join("walk.sh");
    std::fs::write(&file, script).unwrap();
    let out = dir.join("walk.out");
    let mut command = Command::new("unshare");
    command
        .args(["--net", "bash"])
        .arg(&file)
        .current_dir(dir)
        .env("PATH", path)
        .env_remove("PROBITY_CONFIG")
        .env_remove("PROBITY_ADMIN_TOKEN")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(Stdio::inherit())
        .process_group(0);
    for variable in PROXY_VARIABLES {
        command.env_remove(variable);
    }
    let mut child = command.spawn().unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            // The whole group: the walk's background servers too.
            let _ = Command::new("kill")
                .args(["-KILL", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::read_to_string(&out).unwrap()
}

/// Whether this machine can make a network namespace (root, or user
/// namespaces) and bring its loopback up.
fn namespaces_work() -> bool {
    Command::new("unshare")
        .args(["--net", "ip", "link", "set", "lo", "up"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The getting-started walk (docs/src/getting-started.md), run as a reader
/// runs it: from the repository's root (here a folder holding its `docs`
/// and `config`, so the capture store lands outside the clone).
#[test]
fn the_getting_started_walk_runs_as_written() {
    let missing: Vec<&str> = [
        ("unshare and ip", namespaces_work()),
        ("curl", which("curl")),
    ]
    .into_iter()
    .filter(|(_, there)| !there)
    .map(|(name, _)| name)
    .collect();
    if !can_run(
        "the walk",
        &missing,
        "util-linux, iproute2 and curl, as root",
    ) {
        return;
    }
    let page = root().join("docs/src/getting-started.md");
    let steps = steps(&std::fs::read_to_string(&page).unwrap());
    assert!(steps.len() >= 10, "{} steps", steps.len());
    let dir = temp_path(".walk");
    std::fs::create_dir_all(&dir).unwrap();
    for folder in ["docs", "config"] {
        std::os::unix::fs::symlink(root().join(folder), dir.join(folder)).unwrap();
    }
    let output = run_walk(&script(&steps), &dir, Duration::from_secs(120));
    let mut failed = Vec::new();
    for (step, outcome) in steps.iter().zip(outcomes(&output, steps.len())) {
        let at = format!("getting-started.md:{}: $ {}", step.line, step.command);
        let Some((printed, status)) = outcome else {
            failed.push(format!("{at}\n  did not run (the walk stopped):\n{output}"));
            break;
        };
        let got: Vec<&str> = printed.lines().collect();
        if status != 0 || !matches(&step.expected, &got) {
            failed.push(format!(
                "{at}\n  exit {status}; expected:\n{}\n  got:\n{printed}",
                step.expected.join("\n")
            ));
        }
    }
    if failed.is_empty() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

/// The routes the snippets' base URLs name, all to the walk's fake
/// provider (which speaks each one's wire format for the snippets' calls).
const SNIPPET_ROUTES: &str = r#"
[server]
listen = "127.0.0.1:8080"
admin_listen = "127.0.0.1:9464"

[[routes]]
name = "openai"
prefix = "/openai"
upstream = "http://127.0.0.1:8000"
dialect = "openai"

[[routes]]
name = "anthropic"
prefix = "/anthropic"
upstream = "http://127.0.0.1:8000"
dialect = "anthropic"

[[routes]]
name = "ollama"
prefix = "/ollama"
upstream = "http://127.0.0.1:8000"
dialect = "ollama"
"#;

/// A step that must exit 0, whatever it prints.
fn quiet(command: &str) -> Step {
    Step {
        command: command.to_string(),
        expected: vec!["...".to_string()],
        line: 0,
    }
}

/// The SDK snippets the manual shows (docs/snippets, included into its
/// pages) are the code this test runs, verbatim, on the addresses they
/// name: each SDK gets the fake provider's answer through probity and
/// reads its figures.
#[test]
fn the_sdk_snippets_of_the_manual_run_as_written() {
    let snippets_dir = root().join("docs/snippets");
    let mut snippets: Vec<PathBuf> = std::fs::read_dir(&snippets_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    snippets.sort();
    let manual: String = pages()
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
    let unshown: Vec<String> = snippets
        .iter()
        .map(|p| name(p))
        .filter(|n| !manual.contains(&format!("snippets/{n}}}}}")))
        .collect();
    assert!(unshown.is_empty(), "snippets no page includes: {unshown:?}");
    let mut missing = crate::support::missing_python(&["openai", "anthropic", "ollama"]);
    let node_modules = root().join("tests/sdks/node/node_modules");
    if !node_modules.join("openai").exists() || !which("node") {
        missing.push("node and tests/sdks/node's packages");
    }
    if !namespaces_work() {
        missing.push("unshare and ip");
    }
    let install = "pip install openai anthropic ollama; npm ci --prefix tests/sdks/node";
    if !can_run("the SDK snippets", &missing, install) {
        return;
    }
    let dir = temp_path(".snippets");
    std::fs::create_dir_all(&dir).unwrap();
    for folder in ["docs", "config"] {
        std::os::unix::fs::symlink(root().join(folder), dir.join(folder)).unwrap();
    }
    // Node resolves an ES module's imports from its folder upwards.
    std::os::unix::fs::symlink(&node_modules, dir.join("node_modules")).unwrap();
    std::fs::write(dir.join("snippets.toml"), SNIPPET_ROUTES).unwrap();
    let retry = "curl -s --retry 10 --retry-connrefused --retry-delay 1";
    let mut steps = vec![
        quiet("python3 docs/getting-started/fake_provider.py 127.0.0.1:8000 > provider.log 2>&1 &"),
        quiet("probity --config snippets.toml > probity.log 2>&1 &"),
        quiet(&format!("{retry} http://127.0.0.1:8000/v1/models")),
        quiet(&format!("{retry} http://127.0.0.1:9464/readyz")),
    ];
    let setup = steps.len();
    for snippet in &snippets {
        // Each in a copy beside node_modules; the keys are any value (the
        // SDKs refuse to start without one).
        let file = name(snippet);
        let keys = "OPENAI_API_KEY=sk-any ANTHROPIC_API_KEY=sk-ant-any";
        let run = match snippet.extension().and_then(|e| e.to_str()) {
            Some("mjs") => format!("cp docs/snippets/{file} . && {keys} node {file}"),
            _ => format!("{keys} python3 docs/snippets/{file}"),
        };
        steps.push(Step {
            command: run,
            expected: vec![
                "Hello! How can I help?".to_string(),
                "[..]: [..]".to_string(),
            ],
            line: 0,
        });
    }
    let output = run_walk(&script(&steps), &dir, Duration::from_secs(120));
    let mut failed = Vec::new();
    for (n, (step, outcome)) in steps.iter().zip(outcomes(&output, steps.len())).enumerate() {
        let what = if n < setup { "setup" } else { "snippet" };
        match outcome {
            Some((printed, 0)) if matches(&step.expected, &printed.lines().collect::<Vec<_>>()) => {
                // The figure the SDK read is the fake's sound count.
                if n >= setup && !printed.trim_end().ends_with(['7', '2']) {
                    failed.push(format!(
                        "{what} {}: read no figure:\n{printed}",
                        step.command
                    ));
                }
            }
            Some((printed, status)) => failed.push(format!(
                "{what} {} (exit {status}):\n{printed}",
                step.command
            )),
            None => failed.push(format!("{what} {}: did not run:\n{output}", step.command)),
        }
    }
    if failed.is_empty() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
    assert!(snippets.len() >= 5, "{snippets:?}");
}

/// The anchor mdBook gives a heading: lowercase, spaces to `-`, only
/// alphanumerics, `-` and `_` kept (its `normalize_id`).
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            c if c.is_whitespace() => Some('-'),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings (outside code blocks), and of the
/// pages it includes.
fn anchors(page: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(page).unwrap_or_default();
    let text = included(&text, page.parent().unwrap());
    let mut found = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            let heading = line.trim_start_matches('#').replace('`', "");
            found.push(anchor(&heading));
        }
    }
    found
}

/// Every relative link of the manual and of the README, `[text](page.md#anchor)`,
/// reaches a page that exists and a heading it has: mdBook builds a book
/// whose links are broken without a word.
#[test]
fn every_link_between_pages_of_the_manual_lands() {
    let mut broken = Vec::new();
    for page in pages().into_iter().chain([root().join("README.md")]) {
        let text = std::fs::read_to_string(&page).unwrap();
        let mut fenced = false;
        for (at, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
            }
            if fenced {
                continue;
            }
            for target in line.split("](").skip(1).filter_map(|t| t.split(')').next()) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (file, fragment) = target.split_once('#').unwrap_or((target, ""));
                let to = if file.is_empty() {
                    page.clone()
                } else {
                    page.parent().unwrap().join(file)
                };
                let other_file = !file.is_empty() && !file.ends_with(".md");
                let lands = to.exists()
                    && (fragment.is_empty()
                        || other_file
                        || anchors(&to).iter().any(|a| a == fragment));
                if !lands {
                    let from = page.strip_prefix(root()).unwrap().display();
                    broken.push(format!("{from}:{}: {target}", at + 1));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links that land nowhere:\n{}",
        broken.join("\n")
    );
}

fn which(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

#[test]
fn the_output_patterns_say_what_they_say() {
    assert!(fits("x-request-id: [..]", "x-request-id: 12ab"));
    assert!(fits("[..]\"usage\":1}", "{\"a\":2,\"usage\":1}"));
    assert!(!fits("ready", "ready now"));
    assert!(fits("a[..]b[..]c", "a--b--c"));
    assert!(!fits("a[..]b[..]c", "a--c--b"));
    let got = ["HTTP/1.1 200 OK", "server: x", "date: y", "", "{}"];
    let expected = |lines: &[&str]| lines.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    assert!(matches(
        &expected(&["HTTP/1.1 200 OK", "...", "", "{}"]),
        &got
    ));
    assert!(!matches(&expected(&["HTTP/1.1 200 OK", "", "{}"]), &got));
    assert!(matches(&expected(&["...", "{}"]), &got));
    assert_eq!(anchor("The figure grammar"), "the-figure-grammar");
    assert_eq!(
        anchor("`probity inspect`: judge offline"),
        "probity-inspect-judge-offline"
    );
}
