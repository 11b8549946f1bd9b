//! One capture as the admin page shows it: the verbatim upstream body and
//! what the client received, as runs of text, each nulled figure its own
//! run. Offsets would be bytes here and UTF-16 units in the browser; runs
//! need no conversion, and the page only ever sets them as text.

use std::ops::Range;

use serde_json::{json, Value};

use crate::capture::Meta;
use probity_judge::json::{Document, Json};

/// Bodies larger than this are not laid out (the page links the raw one).
const MAX_VIEW_BYTES: usize = 4 << 20;

const NOT_FOUND: &str = "not found in the body";
const STREAMED: &str = "a stream (or not one JSON document): its pointers are listed; \
                        the delivered body is rebuilt for whole JSON responses";

/// The view of one capture: `verbatim` and `delivered` runs
/// (`{"text", "pointer"}`; `pointer` is set on a nulled figure), the
/// pointers not found in the body, and whether `delivered` is exact.
pub(super) fn view(meta: &Meta, body: &[u8]) -> Value {
    let shown = |verbatim: Vec<Value>, delivered: Option<Vec<Value>>, note: Option<String>| {
        json!({
            "verbatim": verbatim,
            "exact": delivered.is_some(),
            "delivered": delivered,
            "unlocated": [],
            "note": note,
        })
    };
    if !meta.body_captured {
        let note = "the body was larger than capture.max_bytes: not kept";
        return shown(Vec::new(), None, Some(note.into()));
    }
    if body.len() > MAX_VIEW_BYTES {
        let note = "the body is too large to lay out here: open the raw body";
        return shown(Vec::new(), None, Some(note.into()));
    }
    let plain = vec![run(body, None)];
    match meta.outcome.as_str() {
        "normalized" => nulled(meta, body),
        "passed" => shown(plain.clone(), Some(plain), None),
        _ => shown(plain, None, Some(undelivered(meta))),
    }
}

/// What the client received instead of a body the page does not rebuild.
fn undelivered(meta: &Meta) -> String {
    match meta.outcome.as_str() {
        "rejected" => format!(
            "the client received a 502 provider_invalid_response error ({}), not this body",
            meta.invariant.as_deref().unwrap_or("-")
        ),
        "cut" => "the stream was cut by an upstream fault: the client received what came \
                  before it, then an error"
            .into(),
        "stitched" => "a batch sent as chunks: this is each chunk's verbatim answer; the client \
                       received them stitched into one, each pointer null"
            .into(),
        _ => format!(
            "the answer broke its output contract ({}): the client received it annotated \
             (or degraded) as the route's contract says",
            meta.reasons.join(", ")
        ),
    }
}

/// A normalized capture: each pointer's value in the body, and the body
/// with each of them `null`, as the client received it.
fn nulled(meta: &Meta, body: &[u8]) -> Value {
    let Ok(document) = Document::parse(body) else {
        // A stream: each event's figures were nulled in that event, and
        // the capture lists the pointers, not the events.
        let why = "in a streamed event";
        return json!({
            "verbatim": [run(body, None)],
            "delivered": null,
            "unlocated": meta.pointers.iter().map(|p| unlocated(p, why)).collect::<Vec<_>>(),
            "exact": false,
            "note": STREAMED,
        });
    };
    let root = document.root();
    let mut spans: Vec<(Range<usize>, &str)> = Vec::new();
    let mut missing = Vec::new();
    for pointer in &meta.pointers {
        if pointer.starts_with("header:") {
            missing.push(unlocated(pointer, "a response header: removed"));
            continue;
        }
        match resolve(root, pointer) {
            Some(value) => spans.push((value.span(body), pointer)),
            None => missing.push(unlocated(pointer, NOT_FOUND)),
        }
    }
    // An outer record nulled whole holds its inner figures: one run.
    spans.sort_by_key(|(range, _)| (range.start, std::cmp::Reverse(range.end)));
    let mut outer: Vec<(Range<usize>, &str)> = Vec::new();
    for (range, pointer) in spans {
        if outer.last().is_none_or(|(last, _)| range.start >= last.end) {
            outer.push((range, pointer));
        }
    }
    let exact = missing.iter().all(|m| m["why"] != NOT_FOUND);
    let (verbatim, delivered) = runs(body, &outer);
    json!({
        "verbatim": verbatim,
        "delivered": delivered,
        "unlocated": missing,
        "exact": exact,
        "note": (!exact).then_some("some pointers were not found: the delivered body may differ"),
    })
}

/// The body's runs, verbatim and with each span `null`.
fn runs(body: &[u8], spans: &[(Range<usize>, &str)]) -> (Vec<Value>, Vec<Value>) {
    let (mut verbatim, mut delivered) = (Vec::new(), Vec::new());
    let mut at = 0;
    for (range, pointer) in spans {
        let before = body.get(at..range.start).unwrap_or_default();
        verbatim.push(run(before, None));
        delivered.push(run(before, None));
        verbatim.push(run(
            body.get(range.clone()).unwrap_or_default(),
            Some(pointer),
        ));
        delivered.push(run(b"null", Some(pointer)));
        at = range.end;
    }
    let rest = body.get(at..).unwrap_or_default();
    verbatim.push(run(rest, None));
    delivered.push(run(rest, None));
    (verbatim, delivered)
}

fn run(bytes: &[u8], pointer: Option<&str>) -> Value {
    json!({ "text": String::from_utf8_lossy(bytes), "pointer": pointer })
}

fn unlocated(pointer: &str, why: &str) -> Value {
    json!({ "pointer": pointer, "why": why })
}

/// The value an RFC 6901 pointer names.
fn resolve<'a>(root: Json<'a>, pointer: &str) -> Option<Json<'a>> {
    let mut value = root;
    for token in pointer.strip_prefix('/')?.split('/') {
        let token = token.replace("~1", "/").replace("~0", "~");
        value = match value.object() {
            Some(object) => object.get(&token)?,
            None => {
                let index: usize = token.parse().ok()?;
                value.array()?.get(index).copied()?
            }
        };
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(outcome: &str, pointers: &[&str]) -> Meta {
        serde_json::from_value(json!({
            "request_id": "r", "time": "t", "instance": "i", "route": "r",
            "endpoint": "/", "dialect": "openai", "outcome": outcome,
            "pointers": pointers, "invariant": null, "reasons": [],
            "upstream_status": 200, "upstream_headers": [], "body_bytes": 0,
            "body_captured": true, "body_sha256": null, "body": "r.body",
        }))
        .unwrap()
    }

    fn text(runs: &Value) -> String {
        runs.as_array()
            .unwrap()
            .iter()
            .map(|r| r["text"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn each_pointer_is_nulled_in_delivered_alone() {
        let body = r#"{"a": [1, {"n": "4"}], "u": {"x~/y": -1, "k": 2}, "é": 1}"#.as_bytes();
        let view = view(&meta("normalized", &["/a/1/n", "/u/x~0~1y", "/gone"]), body);
        assert_eq!(text(&view["verbatim"]), std::str::from_utf8(body).unwrap());
        assert_eq!(
            text(&view["delivered"]),
            r#"{"a": [1, {"n": null}], "u": {"x~/y": null, "k": 2}, "é": 1}"#
        );
        let nulled: Vec<_> = view["verbatim"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| !r["pointer"].is_null())
            .map(|r| r["text"].as_str().unwrap())
            .collect();
        assert_eq!(nulled, [r#""4""#, "-1"]);
        assert_eq!(view["unlocated"][0]["pointer"], "/gone");
        assert_eq!(view["exact"], false);
    }

    #[test]
    fn a_record_nulled_whole_is_one_run() {
        let body = br#"{"usage": {"p": "x", "q": "y"}}"#;
        let view = view(&meta("normalized", &["/usage/p", "/usage"]), body);
        assert_eq!(text(&view["delivered"]), r#"{"usage": null}"#);
        assert_eq!(view["exact"], true);
    }
}
