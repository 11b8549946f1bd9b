//! Streams, event by event: framing (SSE and NDJSON), and the per-dialect
//! [`EventCheck`] that judges each complete event as it passes.
//!
//! The splitter works like mini-redis's frame parser: given the bytes so far,
//! it returns the next complete event, or says the rest is *incomplete* (an
//! event split across network reads) so the caller waits for more. Nothing
//! waits for the end of the stream.

use std::borrow::Cow;

use crate::contract::StreamedAnswer;
use crate::figures::Judgement;
use crate::inspect::Violation;

/// How a stream's events are delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Server-sent events: lines, an event ended by a blank line; `data:`
    /// lines carry the payload, `event:` names it, `:` starts a comment.
    Sse,
    /// One JSON document per line.
    Ndjson,
}

/// One complete event.
#[derive(Debug)]
pub struct Event<'a> {
    /// The event's bytes as received, terminator included.
    pub raw: &'a [u8],
    /// SSE: the `event:` field.
    pub name: Option<&'a str>,
    /// The payload: SSE `data:` lines joined with `\n` (`None` when there is
    /// no data line: a comment or keep-alive); NDJSON: the line.
    pub data: Option<Cow<'a, [u8]>>,
}

/// Finds the next complete event at the start of `buffer`: its length, or
/// `None` when the rest is incomplete.
pub fn next_event(framing: Framing, buffer: &[u8]) -> Option<usize> {
    match framing {
        Framing::Ndjson => buffer.iter().position(|b| *b == b'\n').map(|i| i + 1),
        Framing::Sse => {
            // Lines end in \r\n, \n or \r; an empty line ends the event.
            let mut at = 0;
            let mut line_start = 0;
            while at < buffer.len() {
                let end = match buffer[at] {
                    b'\n' => at + 1,
                    b'\r' if at + 1 < buffer.len() => {
                        if buffer[at + 1] == b'\n' {
                            at + 2
                        } else {
                            at + 1
                        }
                    }
                    // A \r at the very end may be half of \r\n: wait.
                    b'\r' => return None,
                    _ => {
                        at += 1;
                        continue;
                    }
                };
                if at == line_start {
                    return Some(end);
                }
                at = end;
                line_start = end;
            }
            None
        }
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
            }
        }
        Framing::Sse => {
            let mut name = None;
            let mut data: Option<Cow<'_, [u8]>> = None;
            for line in sse_lines(raw) {
                let (field, value) = match line.iter().position(|b| *b == b':') {
                    Some(0) => continue, // a comment
                    Some(i) => {
                        let value = &line[i + 1..];
                        (&line[..i], value.strip_prefix(b" ").unwrap_or(value))
                    }
                    None => (line, &b""[..]),
                };
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
            Event { raw, name, data }
        }
    }
}

/// The non-empty lines of an SSE event, without their terminators.
fn sse_lines(raw: &[u8]) -> impl Iterator<Item = &[u8]> {
    raw.split(|b| *b == b'\n')
        .flat_map(|l| l.split(|b| *b == b'\r'))
        .filter(|l| !l.is_empty())
}

/// Writes an event carrying `data` in the stream's framing, keeping the
/// event's name; for SSE, `comment` goes first as a comment line.
pub fn write_event(
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

/// A dialect's judge of one stream, made per stream from its request.
pub trait EventCheck: Send {
    /// Judges one complete event: `Ok(None)` passes it as it came,
    /// `Ok(Some(judgement))` its figures (spans relative to `event.data`),
    /// `Err` a broken stream.
    fn event(&mut self, event: &Event<'_>) -> Result<Option<Judgement>, Violation>;

    /// The final event that ends a stream after a fault, in this stream's
    /// own error format, from the error's JSON object.
    fn error_event(&self, error: &serde_json::Value) -> Vec<u8>;

    /// Whether this event ends the stream (OpenAI's `[DONE]`, Anthropic's
    /// `message_stop`): the output verdict goes right before it.
    fn ends(&self, _event: &Event<'_>) -> bool {
        false
    }

    /// The model's answer gathered from the deltas so far, for the output
    /// contract's verdict at the end of the stream.
    fn answer(&self) -> Option<&StreamedAnswer> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(framing: Framing, mut buffer: &[u8]) -> (Vec<&[u8]>, &[u8]) {
        let mut events = Vec::new();
        while let Some(len) = next_event(framing, buffer) {
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
            next_event(Framing::Sse, b"data: x\r\n\r"),
            None,
            "\\r may be half of \\r\\n"
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
