//! OpenAI's Realtime API events, as a WebSocket tunnel (`server::tunnel`)
//! passes them from the upstream to the client: each text frame judged on
//! its own, bytes in, verdict and rewritten bytes out, with no I/O here.
//!
//! A `response.done` event carries the response's figures under
//! `/response` (its `id` and `usage`, whose `*_token_details` are singular
//! here, unlike the Responses API's); a malformed one is nulled in the
//! frame's text, every other byte of it unchanged. An `error` event is
//! named so that it is counted. Any other event, and a frame that is not a
//! JSON object, passes as it came: a session is not cut for one odd frame.

use super::Findings;
use crate::figures::{self, Convention, Figure, Related, Relation};
use crate::json::{self, Document};

/// The figures of a `response.done` event. `/response` holds the whole
/// response (its output, its status): it is never nulled for its figures'
/// sake. `cached_tokens_details` is a record of counts of its own.
pub(crate) const FIGURES: &[Figure] = &[
    Figure::required("/response"),
    Figure::id("/response/id"),
    Figure::count("/response/usage/total_tokens").tokens("total"),
    Figure::count("/response/usage/input_tokens").tokens("input"),
    Figure::count("/response/usage/output_tokens").tokens("output"),
    Figure::count("/response/usage/input_token_details/*"),
    Figure::count("/response/usage/input_token_details/cached_tokens_details/*"),
    Figure::count("/response/usage/output_token_details/*"),
];

/// What openai-python's `types/realtime/realtime_response_usage*.py`
/// define: "Cached tokens here are counted as a subset of input tokens",
/// the input's text, audio and image tokens are of it, the cached ones'
/// details of the cached tokens, the output's text and audio of it.
pub(crate) const RELATIONS: &[Relation] = &[
    Relation::at_most(
        "cached_tokens<=input_tokens",
        "/response/usage/input_token_details/cached_tokens",
        "/response/usage/input_tokens",
    ),
    Relation::at_most(
        "input_token_details.text_tokens<=input_tokens",
        "/response/usage/input_token_details/text_tokens",
        "/response/usage/input_tokens",
    ),
    Relation::at_most(
        "input_token_details.audio_tokens<=input_tokens",
        "/response/usage/input_token_details/audio_tokens",
        "/response/usage/input_tokens",
    ),
    Relation::at_most(
        "input_token_details.image_tokens<=input_tokens",
        "/response/usage/input_token_details/image_tokens",
        "/response/usage/input_tokens",
    ),
    Relation::parts_at_most(
        "cached_tokens_details<=cached_tokens",
        &[
            "/response/usage/input_token_details/cached_tokens_details/text_tokens",
            "/response/usage/input_token_details/cached_tokens_details/audio_tokens",
            "/response/usage/input_token_details/cached_tokens_details/image_tokens",
        ],
        "/response/usage/input_token_details/cached_tokens",
    ),
    Relation::at_most(
        "output_token_details.text_tokens<=output_tokens",
        "/response/usage/output_token_details/text_tokens",
        "/response/usage/output_tokens",
    ),
    Relation::at_most(
        "output_token_details.audio_tokens<=output_tokens",
        "/response/usage/output_token_details/audio_tokens",
        "/response/usage/output_tokens",
    ),
];

/// What a server event is, as far as the tunnel counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// `response.done`: its figures were judged.
    ResponseDone,
    /// `error`: the provider's own error, relayed.
    Error,
    /// Any other event, or not an event at all.
    Other,
}

/// One server text frame, judged.
#[derive(Debug)]
pub struct JudgedFrame {
    /// What the event is.
    pub kind: EventKind,
    /// What judging its figures found (nothing but for `response.done`):
    /// its well-formed tokens, malformed figures and their pointers.
    pub findings: Findings,
    /// The frame's text with its malformed figures nulled, when any was.
    pub rewritten: Option<Vec<u8>>,
}

/// Judges one server-to-client text frame, its figures' relations under
/// the route's `convention`.
pub fn judge_server_text(text: &[u8], convention: Convention) -> JudgedFrame {
    let other = || JudgedFrame {
        kind: EventKind::Other,
        findings: Findings::default(),
        rewritten: None,
    };
    let Ok(doc) = Document::parse(text) else {
        return other();
    };
    let Some(event) = doc.object() else {
        return other();
    };
    let kind = match event.get("type").and_then(|t| t.string()).as_deref() {
        Some("response.done") => EventKind::ResponseDone,
        Some("error") => EventKind::Error,
        _ => return other(),
    };
    if kind == EventKind::Error {
        return JudgedFrame { kind, ..other() };
    }
    let related = Related {
        relations: RELATIONS,
        convention,
    };
    let figures_found = figures::judge(text, &event, FIGURES, related);
    let rewritten = (!figures_found.nulls.is_empty()).then(|| {
        let mut replacements: Vec<(std::ops::Range<usize>, &[u8])> = figures_found
            .nulls
            .iter()
            .map(|range| (range.clone(), &b"null"[..]))
            .collect();
        json::replace(text, &mut replacements).to_vec()
    });
    let (findings, _, _) = Findings::of_figures(figures_found);
    JudgedFrame {
        kind,
        findings,
        rewritten,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DONE: &str = r#"{"type":"response.done","event_id":"event_1","response":{"object":"realtime.response","id":"resp_1","status":"completed","output":[],"usage":{"total_tokens":30,"input_tokens":12,"output_tokens":18,"input_token_details":{"cached_tokens":0,"text_tokens":12,"audio_tokens":0,"cached_tokens_details":{"text_tokens":0,"audio_tokens":0}},"output_token_details":{"text_tokens":18,"audio_tokens":0}}}}"#;

    fn judged(text: &str) -> (JudgedFrame, String) {
        let frame = judge_server_text(text.as_bytes(), Convention::Provider);
        let out = frame
            .rewritten
            .clone()
            .map(|b| String::from_utf8(b).unwrap())
            .unwrap_or_else(|| text.to_string());
        (frame, out)
    }

    #[test]
    fn a_sound_response_done_passes_and_counts() {
        let (frame, out) = judged(DONE);
        assert_eq!(frame.kind, EventKind::ResponseDone);
        assert!(frame.rewritten.is_none());
        assert_eq!(out, DONE);
        assert_eq!(
            frame.findings.tokens,
            [("total", 30), ("input", 12), ("output", 18)]
        );
    }

    #[test]
    fn a_malformed_figure_is_nulled_and_nothing_else_changes() {
        let (frame, out) = judged(&DONE.replace(r#""input_tokens":12"#, r#""input_tokens":"12""#));
        assert_eq!(
            out,
            DONE.replace(r#""input_tokens":12"#, r#""input_tokens":null"#)
        );
        assert_eq!(frame.findings.pointers, ["/response/usage/input_tokens"]);
        assert_eq!(frame.findings.tokens, [("total", 30), ("output", 18)]);
    }

    #[test]
    fn a_nested_details_record_is_judged_member_by_member() {
        let bad = DONE.replace(
            r#"{"text_tokens":0,"audio_tokens":0}"#,
            r#"{"text_tokens":-1,"audio_tokens":0}"#,
        );
        let (frame, out) = judged(&bad);
        assert_eq!(
            frame.findings.pointers,
            ["/response/usage/input_token_details/cached_tokens_details/text_tokens"]
        );
        assert_eq!(
            out,
            DONE.replace(
                r#"{"text_tokens":0,"audio_tokens":0}"#,
                r#"{"text_tokens":null,"audio_tokens":0}"#
            )
        );
        // A details record that is not an object is nulled whole, once.
        let bad = DONE.replace(r#"{"text_tokens":0,"audio_tokens":0}"#, r#""none""#);
        let (frame, _) = judged(&bad);
        assert_eq!(
            frame.findings.pointers,
            ["/response/usage/input_token_details/cached_tokens_details"]
        );
    }

    #[test]
    fn the_response_itself_is_never_nulled_for_its_figures() {
        let text = r#"{"type":"response.done","response":{"id":7,"status":"completed"}}"#;
        let (frame, out) = judged(text);
        assert_eq!(
            out,
            r#"{"type":"response.done","response":{"id":null,"status":"completed"}}"#
        );
        assert_eq!(frame.findings.pointers, ["/response/id"]);
    }

    #[test]
    fn other_frames_pass_and_errors_are_named() {
        for text in [
            "not json",
            "[1]",
            r#"{"type":"response.output_text.delta","delta":"hi"}"#,
        ] {
            let (frame, _) = judged(text);
            assert_eq!(frame.kind, EventKind::Other);
            assert!(frame.rewritten.is_none());
        }
        let (frame, _) =
            judged(r#"{"type":"error","error":{"type":"invalid_request_error","message":"no"}}"#);
        assert_eq!(frame.kind, EventKind::Error);
    }
}
