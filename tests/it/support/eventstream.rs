//! AWS's event-stream framing as the tests write it, apart from probity's
//! own encoder: a frame of string headers and a payload, its CRCs computed
//! bit by bit (probity's uses a table).

/// CRC32 (IEEE, reflected), one bit at a time.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for byte in bytes {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (0xEDB8_8320 & mask);
        }
    }
    !crc
}

/// One frame with these string headers (type 7) and this payload.
pub fn frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut head = Vec::new();
    for (name, value) in headers {
        head.push(name.len() as u8);
        head.extend_from_slice(name.as_bytes());
        head.push(7);
        head.extend_from_slice(&(value.len() as u16).to_be_bytes());
        head.extend_from_slice(value.as_bytes());
    }
    let total = 16 + head.len() + payload.len();
    let mut out = Vec::new();
    out.extend_from_slice(&(total as u32).to_be_bytes());
    out.extend_from_slice(&(head.len() as u32).to_be_bytes());
    let prelude = crc32(&out);
    out.extend_from_slice(&prelude.to_be_bytes());
    out.extend_from_slice(&head);
    out.extend_from_slice(payload);
    let crc = crc32(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

/// A Converse stream event frame.
pub fn event(kind: &str, payload: &str) -> Vec<u8> {
    frame(
        &[
            (":event-type", kind),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        payload.as_bytes(),
    )
}

/// A sound Converse stream as Bedrock sends it, each event's type and
/// payload in order (the payloads padded with `p`, as Bedrock pads them):
/// "Hello!" and " How can I help?", `end_turn`, 12 + 9 = 21 tokens, 412 ms.
pub const CONVERSE_STREAM: [(&str, &str); 6] = [
    ("messageStart", r#"{"p":"abcd","role":"assistant"}"#),
    (
        "contentBlockDelta",
        r#"{"contentBlockIndex":0,"delta":{"text":"Hello!"},"p":"abcdef"}"#,
    ),
    (
        "contentBlockDelta",
        r#"{"contentBlockIndex":0,"delta":{"text":" How can I help?"},"p":"ab"}"#,
    ),
    (
        "contentBlockStop",
        r#"{"contentBlockIndex":0,"p":"abcdefgh"}"#,
    ),
    (
        "messageStop",
        r#"{"p":"abcdefghij","stopReason":"end_turn"}"#,
    ),
    (
        "metadata",
        r#"{"metrics":{"latencyMs":412},"p":"abc","usage":{"inputTokens":12,"outputTokens":9,"totalTokens":21}}"#,
    ),
];

/// A frame's string headers, by name and value.
pub type Headers = Vec<(String, String)>;

/// A frame's headers (string ones) and payload, read back; `None` when its
/// CRCs do not hold.
pub fn read(raw: &[u8]) -> Option<(Headers, Vec<u8>)> {
    let total = u32::from_be_bytes(raw.get(0..4)?.try_into().ok()?) as usize;
    let head = u32::from_be_bytes(raw.get(4..8)?.try_into().ok()?) as usize;
    let prelude = u32::from_be_bytes(raw.get(8..12)?.try_into().ok()?);
    let crc = u32::from_be_bytes(raw.get(total - 4..total)?.try_into().ok()?);
    if crc32(&raw[..8]) != prelude || crc32(&raw[..total - 4]) != crc {
        return None;
    }
    let mut headers = Vec::new();
    let mut at = 12;
    while at < 12 + head {
        let len = raw[at] as usize;
        let name = String::from_utf8(raw[at + 1..at + 1 + len].to_vec()).ok()?;
        at += 1 + len;
        let kind = raw[at];
        at += 1;
        if kind != 7 {
            return None;
        }
        let vlen = u16::from_be_bytes(raw[at..at + 2].try_into().ok()?) as usize;
        let value = String::from_utf8(raw[at + 2..at + 2 + vlen].to_vec()).ok()?;
        at += 2 + vlen;
        headers.push((name, value));
    }
    Some((headers, raw[12 + head..total - 4].to_vec()))
}

/// Splits a stream into its frames by their declared lengths.
pub fn frames(mut bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while bytes.len() >= 4 {
        let total = u32::from_be_bytes(bytes[0..4].try_into().unwrap()) as usize;
        let total = total.min(bytes.len());
        out.push(bytes[..total].to_vec());
        bytes = &bytes[total..];
    }
    out
}
