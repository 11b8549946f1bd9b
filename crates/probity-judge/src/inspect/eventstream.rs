//! AWS's binary event-stream framing (`application/vnd.amazon.eventstream`,
//! Bedrock's `converse-stream`), decoded and encoded without I/O: part of
//! `inspect::stream`, which splits a stream into frames with
//! [`next_frame`] as bytes arrive and reads each with [`decode`].
//!
//! A frame (a "message" in AWS's words) is
//! `[total length u32][headers length u32][prelude CRC32]` (the prelude),
//! then the headers, the payload and the CRC32 of everything before it, all
//! big-endian; CRC32 is IEEE's (the zlib one). A header is `[name length
//! u8][name][type u8][value]`, the value's layout set by its type.
//!
//! Hand-written rather than `aws-smithy-eventstream`: a rewritten frame
//! must keep every header byte as received (that crate re-encodes the
//! headers it parsed), the faults (a cut frame, either CRC, a length out of
//! bounds) must be told apart to name them, and the judging core must not
//! depend on the SDK's runtime crates. The format is small and fixed.

use std::ops::Range;

/// The prelude: the two lengths and their CRC.
pub(crate) const PRELUDE: usize = 12;
/// The smallest frame: a prelude and a message CRC, nothing between.
const MIN_FRAME: usize = PRELUDE + 4;
/// The largest frame the format allows: 128 KiB of headers and 16 MiB of
/// payload (AWS's limits), with its prelude and CRC.
pub(crate) const MAX_FRAME: usize = PRELUDE + 128 * 1024 + 16 * 1024 * 1024 + 4;

/// What is wrong with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FrameFault {
    /// The stream ended inside it.
    Cut,
    /// Its prelude's CRC does not match: its lengths cannot be trusted.
    PreludeCrc,
    /// Its message CRC does not match.
    MessageCrc,
    /// Its total length is below the smallest frame, above the largest, or
    /// its headers' length does not fit in it.
    Length,
    /// Its headers cannot be read.
    Headers,
}

impl FrameFault {
    /// What the fault is, for a violation's message.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            FrameFault::Cut => "the stream ended inside an event-stream frame",
            FrameFault::PreludeCrc => "an event-stream frame's prelude CRC does not match",
            FrameFault::MessageCrc => "an event-stream frame's message CRC does not match",
            FrameFault::Length => "an event-stream frame declares a length out of bounds",
            FrameFault::Headers => "an event-stream frame's headers cannot be read",
        }
    }
}

/// A header's value: the types of the format (booleans, integers of four
/// widths, byte arrays, strings, timestamps in ms, UUIDs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value<'a> {
    Bool(bool),
    Byte(i8),
    Short(i16),
    Int(i32),
    Long(i64),
    Bytes(&'a [u8]),
    String(&'a str),
    Timestamp(i64),
    Uuid(&'a [u8]),
}

/// One decoded frame, borrowed from its bytes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Frame<'a> {
    pub(crate) headers: Vec<(&'a str, Value<'a>)>,
    pub(crate) payload: &'a [u8],
}

impl<'a> Frame<'a> {
    /// A string header's value (`:event-type`, `:message-type`...).
    pub(crate) fn text(&self, name: &str) -> Option<&'a str> {
        self.headers.iter().find_map(|(n, v)| match v {
            Value::String(text) if *n == name => Some(*text),
            _ => None,
        })
    }
}

/// CRC32 (IEEE 802.3, reflected, as zlib's), one table lookup per byte.
pub(crate) fn crc32(bytes: &[u8]) -> u32 {
    crc32_update(0, bytes)
}

/// [`crc32`] continued over more bytes.
fn crc32_update(crc: u32, bytes: &[u8]) -> u32 {
    let mut crc = !crc;
    for byte in bytes {
        let index = usize::from((crc as u8) ^ byte);
        crc = (crc >> 8) ^ CRC_TABLE.get(index).copied().unwrap_or_default();
    }
    !crc
}

#[expect(
    clippy::indexing_slicing,
    reason = "a const block: i < 256 is the loop's own bound, checked at compile time"
)]
const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

fn be32(bytes: &[u8], at: usize) -> Option<u32> {
    let b: [u8; 4] = bytes.get(at..at + 4)?.try_into().ok()?;
    Some(u32::from_be_bytes(b))
}

/// The length of the frame at the start of `buffer`, once it is all
/// there; `None` while it is incomplete. A prelude that cannot be trusted
/// (its CRC, or a length out of bounds) makes the whole rest one frame,
/// judged at once as broken: nothing after it can be framed.
pub(crate) fn next_frame(buffer: &[u8]) -> Option<usize> {
    let total = be32(buffer, 0)?;
    let (Some(headers), Some(crc)) = (be32(buffer, 4), be32(buffer, 8)) else {
        return None;
    };
    let total = usize::try_from(total).unwrap_or(usize::MAX);
    let sound = crc32(buffer.get(..8)?) == crc
        && (MIN_FRAME..=MAX_FRAME).contains(&total)
        && (headers as usize) <= total - MIN_FRAME;
    if !sound {
        return Some(buffer.len());
    }
    (buffer.len() >= total).then_some(total)
}

/// Reads one whole frame (as [`next_frame`] delimits it, or the rest of a
/// stream that ended inside one).
pub(crate) fn decode(raw: &[u8]) -> Result<Frame<'_>, FrameFault> {
    let (Some(total), Some(headers_len), Some(prelude_crc)) =
        (be32(raw, 0), be32(raw, 4), be32(raw, 8))
    else {
        return Err(FrameFault::Cut);
    };
    if crc32(raw.get(..8).unwrap_or_default()) != prelude_crc {
        return Err(FrameFault::PreludeCrc);
    }
    let (total, headers_len) = (total as usize, headers_len as usize);
    if !(MIN_FRAME..=MAX_FRAME).contains(&total) || headers_len > total - MIN_FRAME {
        return Err(FrameFault::Length);
    }
    if raw.len() < total {
        return Err(FrameFault::Cut);
    }
    let body = raw.get(..total - 4).ok_or(FrameFault::Cut)?;
    if be32(raw, total - 4) != Some(crc32(body)) {
        return Err(FrameFault::MessageCrc);
    }
    let headers = raw
        .get(PRELUDE..PRELUDE + headers_len)
        .ok_or(FrameFault::Length)?;
    Ok(Frame {
        headers: read_headers(headers).ok_or(FrameFault::Headers)?,
        payload: raw
            .get(PRELUDE + headers_len..total - 4)
            .unwrap_or_default(),
    })
}

/// Where a whole frame's payload is in its bytes.
pub(crate) fn payload_range(raw: &[u8]) -> Option<Range<usize>> {
    let total = be32(raw, 0)? as usize;
    let headers = be32(raw, 4)? as usize;
    (total <= raw.len() && PRELUDE + headers + 4 <= total).then(|| PRELUDE + headers..total - 4)
}

fn read_headers(mut bytes: &[u8]) -> Option<Vec<(&str, Value<'_>)>> {
    let mut headers = Vec::new();
    while let Some((&name_len, rest)) = bytes.split_first() {
        let (name, rest) = rest.split_at_checked(usize::from(name_len))?;
        let name = std::str::from_utf8(name).ok()?;
        let (&kind, rest) = rest.split_first()?;
        let (value, rest) = read_value(kind, rest)?;
        headers.push((name, value));
        bytes = rest;
    }
    Some(headers)
}

fn read_value(kind: u8, bytes: &[u8]) -> Option<(Value<'_>, &[u8])> {
    let fixed = |n: usize| bytes.split_at_checked(n);
    Some(match kind {
        0 => (Value::Bool(true), bytes),
        1 => (Value::Bool(false), bytes),
        2 => {
            let (v, rest) = fixed(1)?;
            (Value::Byte(i8::from_be_bytes(v.try_into().ok()?)), rest)
        }
        3 => {
            let (v, rest) = fixed(2)?;
            (Value::Short(i16::from_be_bytes(v.try_into().ok()?)), rest)
        }
        4 => {
            let (v, rest) = fixed(4)?;
            (Value::Int(i32::from_be_bytes(v.try_into().ok()?)), rest)
        }
        5 | 8 => {
            let (v, rest) = fixed(8)?;
            let n = i64::from_be_bytes(v.try_into().ok()?);
            (
                if kind == 5 {
                    Value::Long(n)
                } else {
                    Value::Timestamp(n)
                },
                rest,
            )
        }
        6 | 7 => {
            let (len, rest) = fixed(2)?;
            let len = u16::from_be_bytes(len.try_into().ok()?);
            let (v, rest) = rest.split_at_checked(usize::from(len))?;
            match kind {
                6 => (Value::Bytes(v), rest),
                _ => (Value::String(std::str::from_utf8(v).ok()?), rest),
            }
        }
        9 => {
            let (v, rest) = fixed(16)?;
            (Value::Uuid(v), rest)
        }
        _ => return None,
    })
}

/// A frame of these string headers and this payload, CRCs computed.
pub(crate) fn encode(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut encoded = Vec::new();
    for (name, value) in headers {
        // Header names are at most 255 bytes, string values 65535: longer
        // ones are cut (probity's own headers are short).
        let name = name.get(..name.len().min(255)).unwrap_or_default();
        let value = value
            .get(..value.len().min(u16::MAX as usize))
            .unwrap_or_default();
        encoded.push(name.len() as u8);
        encoded.extend_from_slice(name.as_bytes());
        encoded.push(7);
        encoded.extend_from_slice(&(value.len() as u16).to_be_bytes());
        encoded.extend_from_slice(value.as_bytes());
    }
    framed(&encoded, payload)
}

/// A frame around these header bytes (kept as they are) and this payload.
fn framed(headers: &[u8], payload: &[u8]) -> Vec<u8> {
    let total = MIN_FRAME + headers.len() + payload.len();
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&(total as u32).to_be_bytes());
    out.extend_from_slice(&(headers.len() as u32).to_be_bytes());
    let prelude_crc = crc32(&out);
    out.extend_from_slice(&prelude_crc.to_be_bytes());
    out.extend_from_slice(headers);
    out.extend_from_slice(payload);
    let crc = crc32(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

/// A whole frame with its payload replaced by `payload`: every header byte
/// as received, both lengths and both CRCs computed anew.
pub(crate) fn reframed(raw: &[u8], payload: &[u8]) -> Vec<u8> {
    let Some(range) = payload_range(raw) else {
        return raw.to_vec();
    };
    framed(raw.get(PRELUDE..range.start).unwrap_or_default(), payload)
}

/// The standard base64 alphabet (RFC 4648 §4), in which a Bedrock
/// `chunk`'s `bytes` (a blob in AWS's model) travel inside its JSON.
const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Padded standard base64 decoded; `None` for anything else.
pub(crate) fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    if bytes.len() % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    let quads = bytes.chunks_exact(4);
    let last = quads.len().saturating_sub(1);
    for (i, quad) in quads.enumerate() {
        let pad = quad.iter().rev().take_while(|b| **b == b'=').count();
        if pad > 2 || (pad > 0 && i != last) {
            return None;
        }
        let mut n = 0u32;
        for byte in quad.iter().take(4 - pad) {
            let sextet = BASE64.iter().position(|c| c == byte)?;
            n = (n << 6) | sextet as u32;
        }
        n <<= 6 * pad as u32;
        let [_, a, b, c] = n.to_be_bytes();
        out.extend_from_slice([a, b, c].get(..3 - pad).unwrap_or_default());
    }
    Some(out)
}

/// `bytes` in padded standard base64.
pub(crate) fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for group in bytes.chunks(3) {
        let mut n = 0u32;
        for (i, byte) in group.iter().enumerate() {
            n |= u32::from(*byte) << (16 - 8 * i);
        }
        for i in 0..4 {
            let sextet = (n >> (18 - 6 * i)) & 0x3f;
            match BASE64.get(sextet as usize) {
                Some(c) if i <= group.len() => out.push(char::from(*c)),
                _ => out.push('='),
            }
        }
    }
    out
}

/// A whole frame with its payload's `nulls` (ranges of the payload) made
/// `null`: every header byte as received, both lengths and both CRCs
/// computed anew.
pub(crate) fn rewrite(raw: &[u8], nulls: &[Range<usize>]) -> Vec<u8> {
    let Some(payload) = payload_range(raw) else {
        return raw.to_vec();
    };
    let headers = raw.get(PRELUDE..payload.start).unwrap_or_default();
    let body = raw.get(payload).unwrap_or_default();
    let mut replacements: Vec<(Range<usize>, &[u8])> =
        nulls.iter().map(|r| (r.clone(), &b"null"[..])).collect();
    let spliced = crate::json::replace(body, &mut replacements);
    framed(headers, &spliced)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: &str, payload: &str) -> Vec<u8> {
        encode(
            &[
                (":event-type", kind),
                (":content-type", "application/json"),
                (":message-type", "event"),
            ],
            payload.as_bytes(),
        )
    }

    proptest::proptest! {
        /// Any split of a stream's bytes gives the same frames, decoded to
        /// the same events; a corrupted byte breaks the stream at the same
        /// frame whatever the split.
        #[test]
        fn any_split_gives_the_same_events(
            payloads in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..40), 1..6),
            cuts in proptest::collection::vec(0usize..400, 0..12),
            corrupt in proptest::option::of(0usize..400),
        ) {
            let mut body: Vec<u8> = payloads
                .iter()
                .flat_map(|p| encode(&[(":event-type", "contentBlockDelta"), (":message-type", "event")], p))
                .collect();
            if let Some(at) = corrupt {
                let at = at % body.len();
                body[at] ^= 0x40;
            }
            type Decoded = Result<(Option<String>, Vec<u8>), FrameFault>;
            let events = |pieces: &[&[u8]]| -> Vec<Decoded> {
                let mut out = Vec::new();
                let mut pending = Vec::new();
                let mut take = |pending: &mut Vec<u8>, at_end: bool| -> bool {
                    loop {
                        let len = match next_frame(pending) {
                            Some(len) => len,
                            None if at_end && !pending.is_empty() => pending.len(),
                            None => return false,
                        };
                        let frame: Vec<u8> = pending.drain(..len).collect();
                        let decoded = decode(&frame)
                            .map(|f| (f.text(":event-type").map(str::to_string), f.payload.to_vec()));
                        let broken = decoded.is_err();
                        out.push(decoded);
                        if broken {
                            return true;
                        }
                    }
                };
                for piece in pieces {
                    pending.extend_from_slice(piece);
                    if take(&mut pending, false) {
                        return out;
                    }
                }
                take(&mut pending, true);
                out
            };
            let whole = events(&[&body]);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (body.len() + 1)).collect();
            cuts.sort_unstable();
            let mut pieces: Vec<&[u8]> = Vec::new();
            let mut at = 0;
            for cut in cuts {
                pieces.push(&body[at..cut]);
                at = cut;
            }
            pieces.push(&body[at..]);
            let fed = events(&pieces);
            proptest::prop_assert_eq!(whole.len(), fed.len());
            for (w, f) in whole.iter().zip(&fed) {
                match (w, f) {
                    (Ok(w), Ok(f)) => proptest::prop_assert_eq!(w, f),
                    (Err(_), Err(_)) => {}
                    _ => proptest::prop_assert!(false, "{w:?} whole, {f:?} in pieces"),
                }
            }
            if corrupt.is_none() {
                proptest::prop_assert_eq!(whole.len(), payloads.len());
                for (event, payload) in whole.iter().zip(&payloads) {
                    proptest::prop_assert_eq!(event.as_ref().ok().map(|e| &e.1), Some(payload));
                }
            }
        }
    }

    #[test]
    fn base64_round_trips_and_refuses_what_is_not_it() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64_encode(plain.as_bytes()), encoded, "RFC 4648 §10");
            assert_eq!(base64_decode(encoded).unwrap(), plain.as_bytes());
        }
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(base64_decode(&base64_encode(&all)).unwrap(), all);
        for bad in [
            "Zg=",
            "Zg=a",
            "Z===",
            "Zm9v!A==",
            "Zg==Zg==",
            "eyJ0eXBlIjoi bWVzc2FnZSJ9",
        ] {
            assert_eq!(base64_decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn crc32_is_zlibs() {
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32_update(crc32(b"1234"), b"56789"), 0xCBF4_3926);
    }

    /// AWS's test vector `int32_header`: one header `event-type` of type
    /// int32 (0x0000A00C), payload `{'foo':'bar'}`.
    #[test]
    fn decodes_awss_test_vector() {
        let vector: &[u8] = &[
            0x00, 0x00, 0x00, 0x2D, 0x00, 0x00, 0x00, 0x10, 0x41, 0xC4, 0x24, 0xB8, 0x0A, 0x65,
            0x76, 0x65, 0x6E, 0x74, 0x2D, 0x74, 0x79, 0x70, 0x65, 0x04, 0x00, 0x00, 0xA0, 0x0C,
            0x7B, 0x27, 0x66, 0x6F, 0x6F, 0x27, 0x3A, 0x27, 0x62, 0x61, 0x72, 0x27, 0x7D, 0x36,
            0xF4, 0x80, 0xA0,
        ];
        let frame = decode(vector).unwrap();
        assert_eq!(frame.headers, [("event-type", Value::Int(0xA00C))]);
        assert_eq!(frame.payload, b"{'foo':'bar'}");
        assert_eq!(next_frame(vector), Some(vector.len()));
    }

    #[test]
    fn frames_round_trip_and_faults_are_told_apart() {
        let raw = event("contentBlockDelta", r#"{"delta":{"text":"Hi"}}"#);
        let frame = decode(&raw).unwrap();
        assert_eq!(frame.text(":event-type"), Some("contentBlockDelta"));
        assert_eq!(frame.payload, br#"{"delta":{"text":"Hi"}}"#);
        for cut in 0..raw.len() {
            assert_eq!(next_frame(&raw[..cut]), None, "incomplete at {cut}");
            if cut >= PRELUDE {
                assert_eq!(decode(&raw[..cut]), Err(FrameFault::Cut));
            }
        }
        let mut bad = raw.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert_eq!(decode(&bad), Err(FrameFault::MessageCrc));
        let mut bad = raw.clone();
        bad[20] ^= 1;
        assert_eq!(decode(&bad), Err(FrameFault::MessageCrc));
        let mut bad = raw.clone();
        bad[3] ^= 1;
        assert_eq!(decode(&bad), Err(FrameFault::PreludeCrc));
        assert_eq!(next_frame(&bad[..PRELUDE]), Some(PRELUDE), "judged at once");
        let huge = framed_prelude(u32::MAX, 0);
        assert_eq!(decode(&huge), Err(FrameFault::Length));
        assert_eq!(next_frame(&huge), Some(huge.len()));
    }

    fn framed_prelude(total: u32, headers: u32) -> Vec<u8> {
        let mut out = total.to_be_bytes().to_vec();
        out.extend_from_slice(&headers.to_be_bytes());
        let crc = crc32(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    #[test]
    fn a_rewrite_keeps_the_headers_and_recomputes_both_crcs() {
        let raw = event("metadata", r#"{"usage":{"inputTokens":"12"}}"#);
        let at = raw.windows(4).position(|w| w == b"\"12\"").unwrap();
        let start = at - payload_range(&raw).unwrap().start;
        let rewritten = rewrite(&raw, std::slice::from_ref(&(start..start + 4)));
        let frame = decode(&rewritten).unwrap();
        assert_eq!(frame.payload, br#"{"usage":{"inputTokens":null}}"#);
        assert_eq!(frame.headers, decode(&raw).unwrap().headers);
        let headers = payload_range(&raw).unwrap().start;
        assert_eq!(rewritten[PRELUDE..headers], raw[PRELUDE..headers][..]);
        assert_eq!(rewrite(&raw, &[]), raw, "nothing nulled: the same bytes");
    }
}
