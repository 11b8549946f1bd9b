//! The shape of the code, checked like behaviour: imports between the
//! top-level modules of the workspace's crates, and between any two of
//! their files, only go one way (no cycle), and no function
//! outside tests is longer than a reader can hold (80 lines). Read from the
//! source text, so a new cycle or a grown function fails CI with its name.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Longest function body, in lines, outside `#[cfg(test)]` code.
const MAX_FUNCTION_LINES: usize = 80;

/// The workspace's library crates, by the name their paths use, and the
/// folder of each one's sources.
fn crates() -> Vec<(String, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = vec![("probity".to_string(), root.join("src"))];
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().replace('-', "_");
        out.push((name, dir.join("src")));
    }
    out.sort();
    assert!(
        out.iter().any(|(name, _)| name == "probity_judge"),
        "{out:?}"
    );
    out
}

fn sources() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = crates()
        .iter()
        .flat_map(|(_, src)| crate::support::files_under(src, "rs"))
        .collect();
    out.sort();
    out
}

/// A file's module path, its crate first: `src/server/exchange.rs` →
/// `probity::server::exchange`, `crates/probity-judge/src/inspect/mod.rs`
/// → `probity_judge::inspect`, `src/lib.rs` → `probity`.
fn module_path(path: &Path) -> Vec<String> {
    let (name, src) = crates()
        .into_iter()
        .find(|(_, src)| path.starts_with(src))
        .unwrap();
    let relative = path.strip_prefix(&src).unwrap().with_extension("");
    let mut segments: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().to_string())
        .collect();
    if segments.last().is_some_and(|s| s == "mod")
        || matches!(&segments[..], [s] if s == "lib" || s == "main")
    {
        segments.pop();
    }
    segments.insert(0, name);
    segments
}

/// A file's text without its `#[cfg(test)]` module (by convention the last
/// item of a file).
fn non_test_text(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// The modules (files) a file's text names through `crate::…`, `super::…`
/// and other crates' `probity_judge::…` paths, `use` groups included: for
/// each path, the longest prefix that is a file of `known`.
fn file_imports(
    module: &[String],
    text: &str,
    known: &BTreeSet<Vec<String>>,
) -> BTreeSet<Vec<String>> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut roots = vec![
        ("crate::".to_string(), module[..1].to_vec()),
        (
            "super::".to_string(),
            module[..module.len().saturating_sub(1)].to_vec(),
        ),
    ];
    for (name, _) in crates() {
        roots.push((format!("{name}::"), vec![name]));
    }
    let mut found = BTreeSet::new();
    for (root, base) in roots {
        let mut rest = text;
        while let Some(at) = rest.find(root.as_str()) {
            let before = rest[..at].chars().last();
            rest = &rest[at + root.len()..];
            if before.is_some_and(|c| ident(c) || c == ':') {
                continue; // `xsuper::` or `a::probity::`, not a path of ours
            }
            // `crate::a::b::C`, or a group `crate::{a::b, c}`: each path in it.
            let paths: Vec<&str> = match rest.strip_prefix('{') {
                Some(group) => group[..group.find('}').unwrap_or(group.len())]
                    .split(',')
                    .collect(),
                None => vec![
                    &rest[..rest
                        .find(|c: char| !ident(c) && c != ':')
                        .unwrap_or(rest.len())],
                ],
            };
            for path in paths {
                let mut target = base.clone();
                target.extend(
                    path.trim()
                        .split("::")
                        .take_while(|s| s.chars().next().is_some_and(|c| c.is_ascii_lowercase()))
                        .map(str::to_string),
                );
                while !target.is_empty() && !known.contains(&target) {
                    target.pop();
                }
                found.insert(target);
            }
        }
    }
    found
}

/// Every file's imports, as edges between module paths: `depth` segments
/// of each (2: a crate's top-level modules; 0: whole paths, files).
fn import_graph(depth: usize) -> BTreeMap<String, BTreeSet<String>> {
    let cut = |m: &[String]| {
        m[..if depth == 0 {
            m.len()
        } else {
            m.len().min(depth)
        }]
            .to_vec()
    };
    let files: Vec<(Vec<String>, String)> = sources()
        .iter()
        .map(|path| (module_path(path), non_test_text(path)))
        .collect();
    let known: BTreeSet<Vec<String>> = files.iter().map(|(m, _)| m.clone()).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, text) in &files {
        let mut edges: BTreeSet<Vec<String>> = file_imports(module, text, &known);
        // A parent names its children (`mod x;` then `x::f`).
        for child in known
            .iter()
            .filter(|c| c.len() == module.len() + 1 && c.starts_with(module))
        {
            let name = child.last().unwrap();
            if text.contains(&format!("{name}::")) {
                edges.insert(child.clone());
            }
        }
        let from = cut(module);
        // A child naming what its parents hold for all of their files
        // (`super::Shared`) is not a circle: the parent owns its children.
        // A crate's root (lib.rs, main.rs) only declares and re-exports.
        let edges: BTreeSet<Vec<String>> = edges
            .iter()
            .filter(|target| **target != *module && !module.starts_with(target))
            .map(|target| cut(target))
            .filter(|target| *target != from && target.len() > 1)
            .collect();
        if from.len() < 2 {
            continue;
        }
        graph
            .entry(from.join("::"))
            .or_default()
            .extend(edges.iter().map(|t| t.join("::")));
    }
    graph
}

#[test]
fn imports_between_top_level_modules_have_no_cycle() {
    let graph = import_graph(2);
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "an import cycle between top-level modules: {}\nthe graph: {graph:#?}",
            cycle.join(" -> ")
        );
    }
    assert!(
        graph["probity::server"].contains("probity_judge::inspect"),
        "{graph:#?}"
    );
}

#[test]
fn imports_between_files_have_no_cycle() {
    let graph = import_graph(0);
    if let Some(cycle) = find_cycle(&graph) {
        panic!("an import cycle between files: {}", cycle.join(" -> "));
    }
    assert!(
        graph["probity::server::exchange"].contains("probity::server::chunks"),
        "{graph:#?}"
    );
    assert!(
        graph["probity::server::chunks"].contains("probity::server::inspected"),
        "{graph:#?}"
    );
    assert!(
        graph["probity_judge::inspect::openai"].contains("probity_judge::figures"),
        "{graph:#?}"
    );
    assert!(
        graph["probity::server::inspected"].contains("probity_judge::inspect::stream_judge")
            || graph["probity::server::inspected"].contains("probity_judge::inspect"),
        "{graph:#?}"
    );
}

/// A cycle of the graph, by a depth-first search (a back edge), as its path.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, bool>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(node) {
            Some(true) => return None,
            Some(false) => {
                let from = path.iter().position(|n| n == node).unwrap_or(0);
                let mut cycle = path[from..].to_vec();
                cycle.push(node.to_string());
                return Some(cycle);
            }
            None => {}
        }
        state.insert(node.to_string(), false);
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, state, path) {
                return Some(cycle);
            }
        }
        path.pop();
        state.insert(node.to_string(), true);
        None
    }
    let mut state = BTreeMap::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut state, &mut Vec::new()))
}

#[test]
fn no_function_outside_tests_is_longer_than_a_reader_can_hold() {
    let mut long = Vec::new();
    for path in sources() {
        let text = non_test_text(&path);
        let lines: Vec<&str> = text.lines().collect();
        for (at, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            let is_fn = [
                "fn ",
                "pub fn ",
                "pub(crate) fn ",
                "pub(super) fn ",
                "async fn ",
            ]
            .iter()
            .chain(&[
                "pub async fn ",
                "pub(crate) async fn ",
                "pub(super) async fn ",
            ])
            .chain(&["const fn ", "pub const fn "])
            .any(|start| trimmed.starts_with(start));
            if !is_fn || trimmed.ends_with(';') {
                continue;
            }
            // rustfmt closes a function at its own indentation.
            let indent = &line[..line.len() - trimmed.len()];
            let close = format!("{indent}}}");
            let Some(end) = lines[at..].iter().position(|l| *l == close) else {
                continue;
            };
            if end + 1 > MAX_FUNCTION_LINES {
                let name = trimmed.split('(').next().unwrap_or(trimmed);
                let file = path.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap();
                long.push(format!(
                    "{}:{} `{name}`: {} lines",
                    file.display(),
                    at + 1,
                    end + 1
                ));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines:\n{}",
        long.join("\n")
    );
}

/// The manual's text: every page under docs/src, the generated reference
/// pages included, as one string.
fn manual() -> String {
    let pages = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src");
    crate::support::files_under(&pages, "md")
        .iter()
        .map(|page| std::fs::read_to_string(page).unwrap() + "\n")
        .collect()
}

/// The manual is the reference: every metric, every error type, every
/// configuration key and every invariant code (from `Invariant::ALL`)
/// appears in it, so the documentation cannot drift from the code.
#[test]
fn the_manual_names_every_metric_error_type_key_and_invariant() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manual = manual();
    let text = |path: &str| std::fs::read_to_string(root.join(path)).unwrap();
    // `"..."` literals of a file that look like snake_case names.
    let names = |source: &str, keep: &dyn Fn(&str) -> bool| -> BTreeSet<String> {
        source
            .split('"')
            .skip(1)
            .step_by(2)
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
            .filter(|s| keep(s))
            .map(str::to_string)
            .collect()
    };
    let mut missing = Vec::new();
    let mut metrics = BTreeSet::new();
    for path in sources() {
        let source = std::fs::read_to_string(&path).unwrap();
        metrics.extend(names(&source, &|s| s.starts_with("probity_")));
    }
    assert!(metrics.len() >= 15, "{metrics:?}");
    let errors = text("src/error.rs");
    let kinds = names(&errors[..errors.find("fn code(").unwrap()], &|s| {
        s.contains('_') || ["overloaded"].contains(&s)
    });
    assert!(kinds.len() >= 10, "{kinds:?}");
    // Every invariant, from the type itself.
    let invariants: BTreeSet<String> = probity_judge::violation::Invariant::ALL
        .iter()
        .map(|i| i.as_str().to_string())
        .collect();
    assert!(invariants.len() >= 20, "{invariants:?}");
    // Every configuration key the default file documents.
    let keys: BTreeSet<String> = text("config/probity.toml")
        .lines()
        .map(|l| l.trim_start_matches('#').trim())
        .filter_map(|l| l.split_once(" = ").map(|(k, _)| k.trim().to_string()))
        .filter(|k| k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
        .collect();
    assert!(keys.len() >= 15, "{keys:?}");
    for (what, set) in [
        ("metric", metrics),
        ("error type", kinds),
        ("invariant", invariants),
        ("configuration key", keys),
    ] {
        for name in set {
            if !manual.contains(&format!("`{name}")) && !manual.contains(&name) {
                missing.push(format!("{what} {name}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not in the manual (docs/src): {missing:?}"
    );
}

/// Every reason an answer or a tool call can be invalid for is in the
/// manual: read from the type itself, not from the source text.
#[test]
fn the_manual_names_every_reason() {
    let manual = manual();
    let missing: Vec<&str> = probity_judge::contract::Reason::ALL
        .iter()
        .map(|r| r.as_str())
        .filter(|r| !manual.contains(&format!("`{r}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "the manual (docs/src) does not name {missing:?}"
    );
}

/// The judging core does no I/O, so an app can call it in-process and
/// `probity inspect` needs no runtime: its dependency tree (from the lock
/// file) holds no async runtime, HTTP stack or TLS.
#[test]
fn the_judging_core_depends_on_no_runtime_or_network() {
    let tree = std::process::Command::new(env!("CARGO"))
        .args(["tree", "-p", "probity-judge", "-e", "normal,build"])
        .args(["--prefix", "none", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let text = String::from_utf8(tree.stdout).unwrap();
    assert!(
        tree.status.success(),
        "{}",
        String::from_utf8_lossy(&tree.stderr)
    );
    let crates: BTreeSet<&str> = text.lines().filter_map(|l| l.split(' ').next()).collect();
    assert!(
        crates.contains("serde_json") && crates.contains("jsonschema"),
        "{crates:?}"
    );
    let io: Vec<&&str> = crates
        .iter()
        .filter(|name| {
            ["tokio", "hyper", "h2", "rustls", "mio", "socket2"]
                .iter()
                .any(|f| **name == *f || name.starts_with(&format!("{f}-")))
        })
        .collect();
    assert!(io.is_empty(), "the judging core depends on {io:?}");
}

/// One name per thing: no two types of the workspace (outside tests) share
/// a name, so a reader never asks which `Frame` a file means.
#[test]
fn no_two_types_share_a_name() {
    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for path in sources() {
        let module = module_path(&path).join("::");
        for line in non_test_text(&path).lines() {
            // Module-level items only: associated types and a function's
            // own structs are indented.
            let item = ["pub(crate) ", "pub(super) ", "pub "]
                .iter()
                .fold(line, |l, p| l.strip_prefix(p).unwrap_or(l));
            let Some(rest) = ["struct ", "enum ", "trait ", "type "]
                .iter()
                .find_map(|k| item.strip_prefix(k))
            else {
                continue;
            };
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            seen.entry(name).or_default().push(module.clone());
        }
    }
    assert!(seen.len() > 100, "{}", seen.len());
    let twice: Vec<String> = seen
        .iter()
        .filter(|(_, modules)| modules.len() > 1)
        .map(|(name, modules)| format!("{name}: {}", modules.join(", ")))
        .collect();
    assert!(twice.is_empty(), "types of one name:\n{}", twice.join("\n"));
}
