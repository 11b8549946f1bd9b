//! The reference of what probity checks, checked in: `probity checks
//! --write` writes `checks.md`, `checks/<dialect>.md` and `checks.json`
//! from the judging core's tables, and docs/src/reference/ must hold
//! exactly that. A stale copy fails, naming the file and its first
//! differing line; `UPDATE_REFERENCE=1 cargo test --test it reference`
//! writes the checked-in copies instead.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::temp_path;

/// Where the manual's reference pages are.
fn checked_in() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/src/reference")
}

/// The reference as the binary writes it now, in a fresh directory.
fn written() -> PathBuf {
    let dir = temp_path("-checks");
    let out = Command::new(env!("CARGO_BIN_EXE_probity"))
        .arg("checks")
        .arg("--write")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "probity checks --write: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

/// The reference's files under `dir`, relative to it.
fn pages(dir: &Path) -> BTreeSet<String> {
    let mut found: BTreeSet<String> = ["checks.md", "checks.json"]
        .into_iter()
        .filter(|name| dir.join(name).is_file())
        .map(str::to_owned)
        .collect();
    if let Ok(entries) = std::fs::read_dir(dir.join("checks")) {
        for entry in entries {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            found.insert(format!("checks/{name}"));
        }
    }
    found
}

/// How `stale` differs from `fresh`: the first line that does, or `None`.
fn first_difference(fresh: &str, stale: &str) -> Option<String> {
    let (mut fresh_lines, mut stale_lines) = (fresh.lines(), stale.lines());
    for number in 1.. {
        match (fresh_lines.next(), stale_lines.next()) {
            (None, None) => return None,
            (want, got) if want == got => continue,
            (want, got) => {
                return Some(format!(
                    "line {number}: checked in {:?}, written {:?}",
                    got.unwrap_or("<end of file>"),
                    want.unwrap_or("<end of file>")
                ))
            }
        }
    }
    None
}

fn update(fresh: &Path, docs: &Path) {
    for stale in pages(docs).difference(&pages(fresh)) {
        std::fs::remove_file(docs.join(stale)).unwrap();
    }
    std::fs::create_dir_all(docs.join("checks")).unwrap();
    for page in pages(fresh) {
        std::fs::copy(fresh.join(&page), docs.join(&page)).unwrap();
    }
}

#[test]
fn the_checked_in_reference_is_what_probity_checks_writes() {
    let fresh = written();
    let docs = checked_in();
    if std::env::var_os("UPDATE_REFERENCE").is_some_and(|v| v == "1") {
        update(&fresh, &docs);
        return;
    }
    let mut stale = Vec::new();
    for page in pages(&fresh) {
        let want = std::fs::read_to_string(fresh.join(&page)).unwrap();
        let at = docs.join(&page);
        match std::fs::read_to_string(&at) {
            Err(_) => stale.push(format!("{} is missing", at.display())),
            Ok(got) => {
                if let Some(difference) = first_difference(&want, &got) {
                    stale.push(format!("{} differs at {difference}", at.display()));
                }
            }
        }
    }
    for gone in pages(&docs).difference(&pages(&fresh)) {
        stale.push(format!(
            "{} is not written any more",
            docs.join(gone).display()
        ));
    }
    std::fs::remove_dir_all(&fresh).ok();
    assert!(
        stale.is_empty(),
        "the checked-in reference is stale:\n  {}\nregenerate it: UPDATE_REFERENCE=1 cargo test --test it reference",
        stale.join("\n  ")
    );
}

#[test]
fn every_dialect_has_a_page_and_no_page_is_for_a_dialect_that_is_gone() {
    if std::env::var_os("UPDATE_REFERENCE").is_some() {
        return; // the pages are being written
    }
    let dialects: BTreeSet<String> = probity_judge::inspect::names()
        .into_iter()
        .map(|name| format!("checks/{name}.md"))
        .collect();
    let pages: BTreeSet<String> = pages(&checked_in())
        .into_iter()
        .filter(|page| page.starts_with("checks/"))
        .collect();
    let missing: Vec<_> = dialects.difference(&pages).collect();
    let gone: Vec<_> = pages.difference(&dialects).collect();
    assert!(
        missing.is_empty() && gone.is_empty(),
        "dialects without a page: {missing:?}; pages of no dialect: {gone:?}"
    );
    // The index links every dialect's page (the manual's, which includes
    // the generated part).
    let index = std::fs::read_to_string(checked_in().join("checks.md")).unwrap();
    for name in probity_judge::inspect::names() {
        let link = format!("](../dialects/{name}.md)");
        assert!(index.contains(&link), "checks.md links {link}");
    }
}
