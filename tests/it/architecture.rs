//! The shape of the code, checked like behaviour: imports between the
//! top-level modules of `src/`, and between any two of its files, only go
//! one way (no cycle), and no function
//! outside tests is longer than a reader can hold (80 lines). Read from the
//! source text, so a new cycle or a grown function fails CI with its name.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Longest function body, in lines, outside `#[cfg(test)]` code.
const MAX_FUNCTION_LINES: usize = 80;

fn sources() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut out);
    out.sort();
    out
}

/// The top-level module a file belongs to (`src/inspect/openai.rs` → `inspect`).
fn module_of(path: &Path) -> String {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let relative = path.strip_prefix(&src).unwrap();
    let first = relative.components().next().unwrap().as_os_str();
    first.to_string_lossy().trim_end_matches(".rs").to_string()
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

/// The `crate::<module>` names a text uses.
fn imports(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            found.insert(name);
        }
    }
    found
}

#[test]
fn imports_between_top_level_modules_have_no_cycle() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in sources() {
        let module = module_of(&path);
        if matches!(module.as_str(), "lib" | "main") {
            continue;
        }
        let used = imports(&non_test_text(&path));
        let edges = graph.entry(module.clone()).or_default();
        edges.extend(used.into_iter().filter(|m| *m != module));
    }
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "an import cycle between top-level modules: {}\nthe graph: {graph:#?}",
            cycle.join(" -> ")
        );
    }
    assert!(graph.contains_key("inspect") && graph["server"].contains("inspect"));
}

/// A file's module path: `src/server/exchange.rs` → `server::exchange`,
/// `src/server/mod.rs` → `server`, `src/lib.rs` → the crate root (empty).
fn module_path(path: &Path) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
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
    segments
}

/// The modules (files) a file's text names through `crate::…` and
/// `super::…` paths, `use` groups included: for each path, the longest
/// prefix that is a file of `known`.
fn file_imports(
    module: &[String],
    text: &str,
    known: &BTreeSet<Vec<String>>,
) -> BTreeSet<Vec<String>> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut found = BTreeSet::new();
    for (root, base) in [
        ("crate::", Vec::new()),
        ("super::", module[..module.len().saturating_sub(1)].to_vec()),
    ] {
        let mut rest = text;
        while let Some(at) = rest.find(root) {
            let before = rest[..at].chars().last();
            rest = &rest[at + root.len()..];
            if before.is_some_and(ident) {
                continue; // `xsuper::`, not a path of ours
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

#[test]
fn imports_between_files_have_no_cycle() {
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
        // A child naming what its parents hold for all of their files
        // (`super::Shared`) is not a circle: the parent owns its children.
        edges.retain(|target| target != module && !module.starts_with(target));
        graph
            .entry(module.join("::"))
            .or_default()
            .extend(edges.iter().map(|t| t.join("::")));
    }
    if let Some(cycle) = find_cycle(&graph) {
        panic!("an import cycle between files: {}", cycle.join(" -> "));
    }
    assert!(
        graph["server::exchange"].contains("server::chunks"),
        "{graph:#?}"
    );
    assert!(
        graph["server::chunks"].contains("server::inspected"),
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

/// The README is the reference: every metric, every error type, every
/// configuration key and every invariant code the source defines appears
/// in it, so the documentation cannot drift from the code.
#[test]
fn the_readme_names_every_metric_error_type_key_and_invariant() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
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
    // Every `invariant: "..."` / `violation("...", ...)` code in src/.
    let mut invariants = BTreeSet::new();
    for path in sources() {
        let source = std::fs::read_to_string(&path).unwrap();
        for marker in ["invariant: \"", "violation(\"", "violation(\n"] {
            for (at, _) in source.match_indices(marker) {
                let rest = &source[at + marker.len()..];
                let rest = rest.trim_start().trim_start_matches('"');
                let code: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                if code.contains('_') {
                    invariants.insert(code);
                }
            }
        }
    }
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
            if !readme.contains(&format!("`{name}")) && !readme.contains(&name) {
                missing.push(format!("{what} {name}"));
            }
        }
    }
    assert!(missing.is_empty(), "not in README.md: {missing:?}");
}

/// Every reason an answer or a tool call can be invalid for, and every
/// outcome, is in the README: read from the types themselves, not from the
/// source text.
#[test]
fn the_readme_names_every_reason() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let missing: Vec<&str> = probity::contract::Reason::ALL
        .iter()
        .map(|r| r.as_str())
        .filter(|r| !readme.contains(&format!("`{r}`")))
        .collect();
    assert!(missing.is_empty(), "the README does not name {missing:?}");
}
