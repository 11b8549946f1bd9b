//! Streams, event by event: framing (SSE, NDJSON and AWS's binary event
//! stream, `eventstream`), and the per-dialect
//! [`EventCheck`] that judges each complete event as it passes.
//!
//! The splitter works like mini-redis's frame parser: given the bytes so far,
//! it returns the next complete event, or says the rest is *incomplete* (an
//! event split across network reads) so the caller waits for more. Nothing
//! waits for the end of the stream.

use std::borrow::Cow;
use std::ops::Range;

use super::eventstream::{self, FrameFault};
use crate::contract::{StreamedAnswer, StreamedCalls};
use crate::figures::{Convention, FigureFindings};
use crate::invariants;
use crate::json::{self, Kind};
use crate::violation::{Invariant, Violation};

/// How a stream's events are delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Server-sent events: lines, an event ended by a blank line; `data:`
    /// lines carry the payload, `event:` names it, `:` starts a comment.
    Sse,
    /// One JSON document per line.
    Ndjson,
    /// AWS's binary frames (`application/vnd.amazon.eventstream`): an
    /// event is a frame, named by its `:event-type` header.
    EventStream,
}

/// One complete event.
#[derive(Debug)]
pub struct Event<'a> {
    /// The event's bytes as received, terminator included.
    pub raw: &'a [u8],
    /// SSE: the `event:` field; an event-stream frame: `:event-type`.
    pub name: Option<&'a str>,
    /// The payload: SSE `data:` lines joined with `\n` (`None` when there is
    /// no data line: a comment or keep-alive); NDJSON: the line; an
    /// event-stream frame: its payload.
    pub data: Option<Cow<'a, [u8]>>,
    /// An event-stream frame that cannot be read: the stream is broken.
    pub(crate) fault: Option<FrameFault>,
    /// An event-stream exception frame: its `:exception-type`.
    pub exception: Option<&'a str>,
}

impl Event<'_> {
    /// An event-stream frame that cannot be read (a CRC, a length, a cut):
    /// the stream is broken here.
    pub fn is_broken(&self) -> bool {
        self.fault.is_some()
    }
}

/// Finds the next complete event at the start of `buffer`: its length, or
/// `None` when the rest is incomplete. `at_end`: no more bytes will come, so
/// a `\r` at the very end is a whole line end, not half of `\r\n`.
pub fn next_event(framing: Framing, buffer: &[u8], at_end: bool) -> Option<usize> {
    match framing {
        Framing::Ndjson => buffer.iter().position(|b| *b == b'\n').map(|i| i + 1),
        // A cut frame at the end is the caller's rest, judged as a final event.
        Framing::EventStream => eventstream::next_frame(buffer),
        Framing::Sse => {
            // Lines end in \r\n, \n or \r; an empty line ends the event.
            let mut line_start = 0;
            loop {
                let (_, end) = next_line(buffer, line_start, at_end)?;
                if end.start == line_start {
                    return Some(end.end);
                }
                line_start = end.end;
            }
        }
    }
}

/// The next line from `start`: its content's end and its terminator's
/// range; `None` when no terminator is complete yet.
fn next_line(buffer: &[u8], start: usize, at_end: bool) -> Option<(usize, Range<usize>)> {
    let at = start
        + buffer
            .get(start..)?
            .iter()
            .position(|b| matches!(b, b'\r' | b'\n'))?;
    let end = match (buffer.get(at), buffer.get(at + 1)) {
        (Some(b'\r'), Some(b'\n')) => at + 2,
        // A \r at the very end may be half of \r\n: wait, unless it is the end.
        (Some(b'\r'), None) if !at_end => return None,
        _ => at + 1,
    };
    Some((at, at..end))
}

/// The non-empty lines of an SSE event, as ranges of `raw` without their
/// terminators (the last may have none).
fn sse_lines(raw: &[u8]) -> impl Iterator<Item = Range<usize>> + '_ {
    let mut start = 0;
    std::iter::from_fn(move || loop {
        if start >= raw.len() {
            return None;
        }
        let line = match next_line(raw, start, true) {
            Some((content_end, terminator)) => {
                let line = start..content_end;
                start = terminator.end;
                line
            }
            None => {
                let line = start..raw.len();
                start = raw.len();
                line
            }
        };
        if !line.is_empty() {
            return Some(line);
        }
    })
}

/// An SSE line's field name and the range of its value (one leading space
/// dropped); `None` for a comment.
fn sse_field(raw: &[u8], line: Range<usize>) -> Option<(&[u8], Range<usize>)> {
    let text = raw.get(line.clone())?;
    match text.iter().position(|b| *b == b':') {
        Some(0) => None,
        Some(i) => {
            let value = line.start + i + 1;
            let value = value + usize::from(raw.get(value) == Some(&b' ') && value < line.end);
            Some((text.get(..i)?, value..line.end))
        }
        None => Some((text, line.end..line.end)),
    }
}

/// Reads the fields of one complete event.
pub fn parse_event(framing: Framing, raw: &[u8]) -> Event<'_> {
    match framing {
        Framing::Ndjson => {
            let line = raw.strip_suffix(b"\n").unwrap_or(raw);
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let blank = line.iter().all(|b| b.is_ascii_whitespace());
            Event {
                raw,
                name: None,
                data: (!blank).then_some(Cow::Borrowed(line)),
                fault: None,
                exception: None,
            }
        }
        Framing::EventStream => match eventstream::decode(raw) {
            Ok(frame) => {
                let exception = frame.text(":message-type") == Some("exception");
                Event {
                    raw,
                    name: frame.text(":event-type"),
                    data: Some(Cow::Borrowed(frame.payload)),
                    fault: None,
                    exception: exception.then(|| frame.text(":exception-type").unwrap_or("")),
                }
            }
            Err(fault) => Event {
                raw,
                name: None,
                data: None,
                fault: Some(fault),
                exception: None,
            },
        },
        Framing::Sse => {
            let mut name = None;
            let mut data: Option<Cow<'_, [u8]>> = None;
            for line in sse_lines(raw) {
                let Some((field, value)) = sse_field(raw, line) else {
                    continue; // a comment
                };
                let value = raw.get(value).unwrap_or_default();
                match field {
                    b"event" => name = std::str::from_utf8(value).ok(),
                    b"data" => {
                        data = Some(match data {
                            None => Cow::Borrowed(value),
                            Some(before) => {
                                let mut joined = before.into_owned();
                                joined.push(b'\n');
                                joined.extend_from_slice(value);
                                Cow::Owned(joined)
                            }
                        })
                    }
                    _ => {}
                }
            }
            Event {
                raw,
                name,
                data,
                fault: None,
                exception: None,
            }
        }
    }
}

/// Rewrites one event with the ranges of its data (as [`Event::data`]
/// joins it) replaced by `null` (a range over several data lines keeps
/// their line breaks: see [`data_pieces`]). Every other byte of the event stays as
/// received: its other fields (`id:`, `retry:`, `event:`), comments, line
/// endings, an unterminated last line. For SSE, `comment` goes first as a
/// comment line ending the way the event's lines do.
pub fn rewrite(
    framing: Framing,
    raw: &[u8],
    nulls: &[Range<usize>],
    comment: Option<&str>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len() + 64);
    let mut replacements: Vec<(Range<usize>, &[u8])> = match framing {
        // A frame has no comments; its payload is spliced and the frame
        // made anew around its very header bytes.
        Framing::EventStream => return eventstream::rewrite(raw, nulls),
        // The line's data starts at its first byte.
        Framing::Ndjson => nulls.iter().map(|r| (r.clone(), &b"null"[..])).collect(),
        Framing::Sse => {
            if let Some(comment) = comment {
                let eol = match raw.iter().position(|b| matches!(b, b'\r' | b'\n')) {
                    Some(at) => match (raw.get(at), raw.get(at + 1)) {
                        (Some(b'\r'), Some(b'\n')) => "\r\n",
                        (Some(b'\r'), _) => "\r",
                        _ => "\n",
                    },
                    None => "\n",
                };
                out.extend_from_slice(b": ");
                out.extend_from_slice(comment.as_bytes());
                out.extend_from_slice(eol.as_bytes());
            }
            // Where each data line's value sits in `raw`, and in the joined data.
            let mut values = Vec::new();
            let mut joined = 0;
            for line in sse_lines(raw) {
                if let Some((b"data", value)) = sse_field(raw, line) {
                    values.push((joined, value.clone()));
                    joined += value.len() + 1;
                }
            }
            nulls.iter().flat_map(|r| data_pieces(&values, r)).collect()
        }
    };
    out.extend_from_slice(&crate::json::replace(raw, &mut replacements));
    out
}

/// The bytes of `raw` a span of the joined data covers, line by line:
/// `null` in the line where it starts, the covered values of the data
/// lines after it removed. The lines themselves stay, and so does every
/// line between them that is not data (`event:`, `id:`, a comment): a
/// span over several lines becomes `null` and the line breaks it held.
/// `values`: each data line's offset in the joined data and its value's
/// range in `raw`.
fn data_pieces(
    values: &[(usize, Range<usize>)],
    span: &Range<usize>,
) -> Vec<(Range<usize>, &'static [u8])> {
    let mut pieces: Vec<(Range<usize>, &'static [u8])> = Vec::new();
    for (at, value) in values {
        // The part of this line's value (and its line break) the span covers.
        let (from, to) = (span.start.max(*at), span.end.min(at + value.len()));
        let starts_here = span.start >= *at && span.start <= at + value.len();
        if from > to || (pieces.is_empty() && !starts_here) || (from == to && !pieces.is_empty()) {
            continue;
        }
        let covered = value.start + (from - at)..value.start + (to - at);
        pieces.push((covered, if pieces.is_empty() { b"null" } else { b"" }));
    }
    pieces
}

/// Writes an event carrying `data` in the stream's framing, keeping the
/// event's name; for SSE, `comment` goes first as a comment line.
pub(crate) fn write_event(
    framing: Framing,
    name: Option<&str>,
    data: &[u8],
    comment: Option<&str>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 64);
    match framing {
        Framing::Ndjson => {
            out.extend_from_slice(data);
            out.push(b'\n');
        }
        // An event frame; a dialect's error frame is its own (exceptions
        // carry more headers: `eventstream::encode`).
        Framing::EventStream => {
            let headers = [
                (":event-type", name.unwrap_or_default()),
                (":content-type", "application/json"),
                (":message-type", "event"),
            ];
            out = eventstream::encode(&headers, data);
        }
        Framing::Sse => {
            if let Some(comment) = comment {
                out.extend_from_slice(b": ");
                out.extend_from_slice(comment.as_bytes());
                out.push(b'\n');
            }
            if let Some(name) = name {
                out.extend_from_slice(b"event: ");
                out.extend_from_slice(name.as_bytes());
                out.push(b'\n');
            }
            for line in data.split(|b| *b == b'\n') {
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(line);
                out.push(b'\n');
            }
            out.push(b'\n');
        }
    }
    out
}

/// An event's data as a document whose root is an object, or the
/// violation it is.
pub(super) fn event_object(data: &[u8]) -> Result<json::Document<'_>, Violation> {
    match json::Document::parse(data) {
        Ok(doc) if doc.root().kind() == Kind::Object => Ok(doc),
        Ok(_) => Err(invariants::violation(
            Invariant::InvalidJson,
            "a stream event is JSON but not an object".into(),
        )),
        Err(err) => Err(invariants::violation(
            Invariant::InvalidJson,
            format!("a stream event is not valid JSON ({err})"),
        )),
    }
}

/// What a dialect's check saw in one sound event.
#[derive(Debug)]
pub(crate) enum Seen {
    /// Nothing to note: it passes as it came.
    Nothing,
    /// Its figures, judged (spans relative to `event.data`).
    Figures(FigureFindings),
    /// The upstream's own error event (a chat `error` chunk, an Anthropic
    /// `error` event, a Bedrock exception frame): it passes as it came, so
    /// that the SDK raises it, and is counted.
    UpstreamError,
}

/// A dialect's judge of one stream, made per stream from its request.
pub(crate) trait EventCheck: Send {
    /// Judges one complete event: what it saw in a sound one ([`Seen`]),
    /// `Err` a broken stream.
    fn event(&mut self, event: &Event<'_>, convention: Convention) -> Result<Seen, Violation>;

    /// The final event that ends a stream after a fault, in this stream's
    /// own error format, from the error's JSON object.
    fn error_event(&self, error: &serde_json::Value) -> Vec<u8>;

    /// The JSON document an event carries, as this check reads it: its
    /// data, or a document carried inside it (a Bedrock `chunk`'s
    /// decoded `bytes`). A span reads the answer's model and id from it.
    fn document<'e>(&self, event: &'e Event<'_>) -> Option<Cow<'e, [u8]>> {
        event.data.as_deref().map(Cow::Borrowed)
    }

    /// One event with `nulls` (ranges of the data this check judged) made
    /// `null`, as [`rewrite`] does it; a check that judged a document
    /// carried inside the data (a Bedrock `chunk`'s base64 `bytes`)
    /// rewrites it there.
    fn rewrite(
        &self,
        framing: Framing,
        raw: &[u8],
        nulls: &[Range<usize>],
        comment: Option<&str>,
    ) -> Vec<u8> {
        rewrite(framing, raw, nulls, comment)
    }

    /// Whether this event ends the stream (OpenAI's `[DONE]`, Anthropic's
    /// `message_stop`): the output verdict goes right before it.
    fn ends(&self, _event: &Event<'_>) -> bool {
        false
    }

    /// Reads what the final event says of the answer, right before the
    /// verdict on it (a Responses stream's `incomplete_details`: the
    /// answer was cut).
    fn closing(&mut self, _event: &Event<'_>) {}

    /// The model's answer gathered from the deltas so far, for the output
    /// contract's verdict at the end of the stream.
    fn answer(&self) -> Option<&StreamedAnswer> {
        None
    }

    /// The tool calls gathered from the events so far, judged with the
    /// answer at the end of the stream.
    fn calls(&self) -> Option<&StreamedCalls> {
        None
    }

    /// The document ids the answer's own citations named so far (Cohere's
    /// `citation-start`), judged with the answer at the end of the stream.
    fn cited(&self) -> &[String] {
        &[]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(framing: Framing, mut buffer: &[u8]) -> (Vec<&[u8]>, &[u8]) {
        let mut events = Vec::new();
        while let Some(len) = next_event(framing, buffer, false) {
            events.push(&buffer[..len]);
            buffer = &buffer[len..];
        }
        (events, buffer)
    }

    #[test]
    fn sse_events_end_at_a_blank_line_whatever_the_line_ends() {
        let stream =
            b"data: {\"a\":1}\n\n: ping\n\ndata: x\r\n\r\nevent: e\rdata: y\r\rdata: partial";
        let (events, rest) = split(Framing::Sse, stream);
        assert_eq!(
            events,
            [
                &b"data: {\"a\":1}\n\n"[..],
                b": ping\n\n",
                b"data: x\r\n\r\n",
                b"event: e\rdata: y\r\r"
            ]
        );
        assert_eq!(rest, b"data: partial");
        assert_eq!(
            next_event(Framing::Sse, b"data: x\r\n\r", false),
            None,
            "\\r may be half of \\r\\n"
        );
        assert_eq!(
            next_event(Framing::Sse, b"data: x\r\r", true),
            Some(9),
            "at the end, a last \\r ends its line"
        );
    }

    #[test]
    fn sse_fields_are_read() {
        let event = parse_event(
            Framing::Sse,
            b": note\nevent: message_delta\ndata: {\"a\":\ndata:1}\n\n",
        );
        assert_eq!(event.name, Some("message_delta"));
        assert_eq!(event.data.as_deref(), Some(&b"{\"a\":\n1}"[..]));
        let comment = parse_event(Framing::Sse, b": OPENROUTER PROCESSING\n\n");
        assert!(comment.data.is_none());
    }

    #[test]
    fn ndjson_lines() {
        let (events, rest) = split(Framing::Ndjson, b"{\"a\":1}\n{\"b\":2}\r\n{\"c\"");
        assert_eq!(events.len(), 2);
        assert_eq!(rest, b"{\"c\"");
        let event = parse_event(Framing::Ndjson, b"{\"b\":2}\r\n");
        assert_eq!(event.data.as_deref(), Some(&b"{\"b\":2}"[..]));
        assert!(parse_event(Framing::Ndjson, b"\n").data.is_none());
    }

    #[test]
    #[expect(clippy::single_range_in_vec_init, reason = "one span to null")]
    fn a_rewrite_changes_only_the_nulled_spans() {
        let raw = b"id: 7\r\nretry: 1000\r\ndata: {\"u\":\"x\"}\r\n\r\n";
        let event = parse_event(Framing::Sse, raw);
        let data = event.data.as_deref().unwrap();
        assert_eq!(data, b"{\"u\":\"x\"}");
        let out = rewrite(Framing::Sse, raw, &[5..8], Some("probity-normalized /u"));
        assert_eq!(
            out,
            b": probity-normalized /u\r\nid: 7\r\nretry: 1000\r\ndata: {\"u\":null}\r\n\r\n"
        );
        // Data over two lines: spans map into each line's value.
        let raw = b"event: e\rdata: {\"a\":1,\rdata:\"u\":\"x\"}\r\r";
        let event = parse_event(Framing::Sse, raw);
        assert_eq!(event.data.as_deref().unwrap(), b"{\"a\":1,\n\"u\":\"x\"}");
        let out = rewrite(Framing::Sse, raw, &[12..15], Some("c"));
        assert_eq!(out, b": c\revent: e\rdata: {\"a\":1,\rdata:\"u\":null}\r\r");
        // NDJSON: the line's ending stays, or its lack of one.
        let out = rewrite(Framing::Ndjson, b"{\"n\":\"x\"}\r\n", &[5..8], Some("c"));
        assert_eq!(out, b"{\"n\":null}\r\n");
        let out = rewrite(Framing::Ndjson, b"{\"n\":\"x\"}", &[5..8], None);
        assert_eq!(out, b"{\"n\":null}");
    }

    #[test]
    fn events_are_written_in_their_framing() {
        let sse = write_event(
            Framing::Sse,
            Some("message_delta"),
            b"{\"u\":null}",
            Some("probity-normalized /u"),
        );
        assert_eq!(
            sse,
            b": probity-normalized /u\nevent: message_delta\ndata: {\"u\":null}\n\n"
        );
        assert_eq!(
            write_event(Framing::Ndjson, None, b"{}", Some("x")),
            b"{}\n"
        );
    }
}
