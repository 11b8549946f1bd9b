//! Shared by the fixture-driven conformance suites (through their runner,
//! [`super::conformance`]) and the property tests: a JSON span finder that
//! edits a body surgically whatever its layout, byte comparison for failure
//! messages, the Prometheus text reader for metric deltas, and a request with
//! time limits.

use std::ops::Range;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;

use super::{Got, STEP};

// ---------------------------------------------------------------- JSON spans

/// Where a value sits in a JSON text: the value's bytes, and, for an object
/// member, the bytes from its key to the end of its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub value: Range<usize>,
    pub member: Option<Range<usize>>,
}

pub fn skip_ws(text: &[u8], mut at: usize) -> usize {
    while at < text.len() && matches!(text[at], b' ' | b'\t' | b'\n' | b'\r') {
        at += 1;
    }
    at
}

/// The end of the string opening at `at`.
pub fn string_end(text: &[u8], at: usize) -> Option<usize> {
    if text.get(at) != Some(&b'"') {
        return None;
    }
    let mut i = at + 1;
    loop {
        match text.get(i)? {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
}

/// The end of the value starting at `at`.
pub fn value_end(text: &[u8], at: usize) -> Option<usize> {
    match *text.get(at)? {
        b'"' => string_end(text, at),
        open @ (b'{' | b'[') => {
            let close = if open == b'{' { b'}' } else { b']' };
            let mut i = skip_ws(text, at + 1);
            if text.get(i) == Some(&close) {
                return Some(i + 1);
            }
            loop {
                if open == b'{' {
                    i = skip_ws(text, string_end(text, i)?);
                    if text.get(i) != Some(&b':') {
                        return None;
                    }
                    i = skip_ws(text, i + 1);
                }
                i = skip_ws(text, value_end(text, i)?);
                match *text.get(i)? {
                    b',' => i = skip_ws(text, i + 1),
                    c if c == close => return Some(i + 1),
                    _ => return None,
                }
            }
        }
        _ => {
            let end = text[at..]
                .iter()
                .position(|b| matches!(b, b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r'))
                .map_or(text.len(), |n| at + n);
            (end > at).then_some(end)
        }
    }
}

/// Walks the JSON text to an RFC 6901 pointer, never parsing more than it
/// must, so spans hold whatever the formatting. Where an object repeats a
/// key, the first one.
pub fn find(text: &[u8], pointer: &str) -> Option<Span> {
    locate(text, pointer, false)
}

/// As [`find`], but where an object repeats a key, the last one (as a JSON
/// reader that keeps the last does).
pub fn find_last(text: &[u8], pointer: &str) -> Option<Span> {
    locate(text, pointer, true)
}

fn locate(text: &[u8], pointer: &str, last: bool) -> Option<Span> {
    let mut at = skip_ws(text, 0);
    let mut member = None;
    if !pointer.is_empty() && !pointer.starts_with('/') {
        return None;
    }
    for raw in pointer.split('/').skip(1) {
        let token = raw.replace("~1", "/").replace("~0", "~");
        match *text.get(at)? {
            b'{' => {
                let mut i = skip_ws(text, at + 1);
                if text.get(i) == Some(&b'}') {
                    return None;
                }
                let mut hit = None;
                loop {
                    let key_end = string_end(text, i)?;
                    let key: String = serde_json::from_slice(&text[i..key_end]).ok()?;
                    let colon = skip_ws(text, key_end);
                    if text.get(colon) != Some(&b':') {
                        return None;
                    }
                    let start = skip_ws(text, colon + 1);
                    let end = value_end(text, start)?;
                    if key == token {
                        hit = Some((i..end, start));
                        if !last {
                            break;
                        }
                    }
                    i = skip_ws(text, end);
                    if text.get(i) != Some(&b',') {
                        break;
                    }
                    i = skip_ws(text, i + 1);
                }
                let (span, start) = hit?;
                member = Some(span);
                at = start;
            }
            b'[' => {
                let wanted: usize = token.parse().ok()?;
                let mut i = skip_ws(text, at + 1);
                if text.get(i) == Some(&b']') {
                    return None;
                }
                let mut index = 0;
                loop {
                    let end = value_end(text, i)?;
                    if index == wanted {
                        member = None;
                        at = i;
                        break;
                    }
                    index += 1;
                    i = skip_ws(text, end);
                    if text.get(i) != Some(&b',') {
                        return None;
                    }
                    i = skip_ws(text, i + 1);
                }
            }
            _ => return None,
        }
    }
    let end = value_end(text, at)?;
    Some(Span {
        value: at..end,
        member,
    })
}

/// The bytes to cut to remove an object member, with one of its commas.
pub fn removal(text: &[u8], member: Range<usize>) -> Range<usize> {
    let after = skip_ws(text, member.end);
    if text.get(after) == Some(&b',') {
        return member.start..skip_ws(text, after + 1);
    }
    let mut before = member.start;
    while before > 0 && text[before - 1].is_ascii_whitespace() {
        before -= 1;
    }
    if before > 0 && text[before - 1] == b',' {
        before - 1..member.end
    } else {
        member
    }
}

/// Replaces disjoint ranges (in any order) with new bytes.
pub fn splice(text: &[u8], edits: &[(Range<usize>, &[u8])]) -> Vec<u8> {
    let mut edits: Vec<_> = edits.to_vec();
    edits.sort_by_key(|(range, _)| std::cmp::Reverse(range.start));
    let mut out = text.to_vec();
    for (range, with) in edits {
        out.splice(range, with.iter().copied());
    }
    out
}

/// The members of the object at `pointer`, in document order: each key
/// (unescaped) with its span. `None` when there is no object there.
pub fn members(text: &[u8], pointer: &str) -> Option<Vec<(String, Span)>> {
    let at = find(text, pointer)?.value.start;
    if text.get(at) != Some(&b'{') {
        return None;
    }
    let mut out = Vec::new();
    let mut i = skip_ws(text, at + 1);
    if text.get(i) == Some(&b'}') {
        return Some(out);
    }
    loop {
        let key_end = string_end(text, i)?;
        let key: String = serde_json::from_slice(&text[i..key_end]).ok()?;
        let colon = skip_ws(text, key_end);
        if text.get(colon) != Some(&b':') {
            return None;
        }
        let start = skip_ws(text, colon + 1);
        let end = value_end(text, start)?;
        out.push((
            key,
            Span {
                value: start..end,
                member: Some(i..end),
            },
        ));
        i = skip_ws(text, end);
        match text.get(i) {
            Some(b',') => i = skip_ws(text, i + 1),
            Some(b'}') => return Some(out),
            _ => return None,
        }
    }
}

// ---------------------------------------------------------------- exchanges

/// Sends a request and reads the whole response, each step within [`STEP`].
pub async fn exchange(
    client: &Client<HttpConnector, Full<Bytes>>,
    request: Request<Full<Bytes>>,
) -> Result<Got, String> {
    let response = tokio::time::timeout(STEP, client.request(request))
        .await
        .map_err(|_| format!("no response within {STEP:?}"))?
        .map_err(|err| format!("request failed: {err}"))?;
    let (parts, body) = response.into_parts();
    let body = tokio::time::timeout(STEP, body.collect())
        .await
        .map_err(|_| format!("no whole body within {STEP:?}"))?
        .map_err(|err| format!("body failed: {err}"))?
        .to_bytes();
    Ok(Got {
        status: parts.status,
        headers: parts.headers,
        body,
    })
}

// ---------------------------------------------------------------- failure messages

/// A body cut short for a failure message.
pub fn short(text: &str) -> String {
    match text.char_indices().nth(240) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text.to_string(),
    }
}

/// `None` when equal; otherwise where the bytes part, with context.
pub fn differ(what: &str, got: &[u8], want: &[u8]) -> Option<String> {
    if got == want {
        return None;
    }
    let at = got
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    let show = |b: &[u8]| {
        String::from_utf8_lossy(&b[at.saturating_sub(40)..(at + 60).min(b.len())]).into_owned()
    };
    Some(format!(
        "{what} differs at byte {at} ({} bytes, want {}):\n      got:  {:?}\n      want: {:?}",
        got.len(),
        want.len(),
        show(got),
        show(want)
    ))
}

// ---------------------------------------------------------------- metrics text

/// The sum of every sample of `name` whose labels include `labels`.
pub fn measure(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (series_name, series_labels) = match series.split_once('{') {
                Some((n, l)) => (n, l.strip_suffix('}')?),
                None => (series, ""),
            };
            if series_name != name {
                return None;
            }
            let have = parse_labels(series_labels);
            labels
                .iter()
                .all(|(k, v)| have.iter().any(|(hk, hv)| hk == k && hv == v))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

/// `a="x",b="y\"z"` as pairs, unescaped.
pub fn parse_labels(text: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() || chars.next() != Some('"') {
            return pairs;
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(other) => value.push(other),
                    None => {}
                },
                '"' => break,
                c => value.push(c),
            }
        }
        pairs.push((key.trim().to_string(), value));
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
}

/// A counter (summed over the series that carry these labels) and how far a
/// case must move it (0: not at all).
pub type Probe = (&'static str, Vec<(&'static str, String)>, f64);

/// The probes that did not move by exactly their delta from `before` to
/// `after`, and whether one moved too little (a counter may move just after
/// the response, so the caller may read the metrics again).
pub fn unmet(before: &str, after: &str, probes: &[Probe]) -> (Vec<String>, bool) {
    let mut lagging = false;
    let wrong = probes
        .iter()
        .filter_map(|(name, labels, delta)| {
            let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let moved = measure(after, name, &labels) - measure(before, name, &labels);
            lagging |= moved < *delta;
            let sample = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{v}\""))
                .collect::<Vec<_>>()
                .join(",");
            (moved != *delta).then(|| format!("{name}{{{sample}}} moved by {moved}, want {delta}"))
        })
        .collect();
    (wrong, lagging)
}

/// An SSE stream without probity's output-verdict comment events (`:
/// probity-output …`, before the terminal event when the request declares
/// tools or a format): the figure and invariant suites compare the rest;
/// the contract and tool-call suites judge the verdict.
pub fn without_verdict(stream: &[u8]) -> Vec<u8> {
    const VERDICT: &[u8] = b": probity-output ";
    let mut out = Vec::with_capacity(stream.len());
    let mut at = 0;
    while at < stream.len() {
        let starts_event = at == 0 || stream[..at].ends_with(b"\n\n");
        if starts_event && stream[at..].starts_with(VERDICT) {
            let end = stream[at..]
                .windows(2)
                .position(|w| w == b"\n\n")
                .map_or(stream.len(), |p| at + p + 2);
            at = end;
            continue;
        }
        out.push(stream[at]);
        at += 1;
    }
    out
}
