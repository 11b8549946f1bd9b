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
    if total < 16 || 12 + head > total - 4 {
        return None;
    }
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

/// Where a readable frame's payload lies in it.
pub fn payload_range(raw: &[u8]) -> Option<std::ops::Range<usize>> {
    read(raw)?;
    let total = u32::from_be_bytes(raw[0..4].try_into().unwrap()) as usize;
    let head = u32::from_be_bytes(raw[4..8].try_into().unwrap()) as usize;
    Some(12 + head..total - 4)
}

/// An exception frame, its headers in the order probity writes its own.
pub fn exception(kind: &str, payload: &str) -> Vec<u8> {
    frame(
        &[
            (":exception-type", kind),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        ],
        payload.as_bytes(),
    )
}

/// A frame with its payload replaced (headers as they were, both CRCs
/// anew): how probity's rewritten frames must read. `None`: unreadable.
pub fn reframed(raw: &[u8], payload: &[u8]) -> Option<Vec<u8>> {
    let (headers, _) = read(raw)?;
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    Some(frame(&headers, payload))
}

/// Padded standard base64 decoded, one sextet at a time (`None`: not
/// that): a Bedrock `chunk`'s `bytes`.
pub fn unbase64(text: &str) -> Option<Vec<u8>> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let text = text.as_bytes();
    if text.len() % 4 != 0 {
        return None;
    }
    let body = text
        .strip_suffix(b"==")
        .or_else(|| text.strip_suffix(b"="))
        .unwrap_or(text);
    let mut bits = Vec::new();
    for byte in body {
        let sextet = ALPHABET.iter().position(|c| c == byte)?;
        bits.extend((0..6).rev().map(|i| (sextet >> i) & 1 == 1));
    }
    let out: Vec<u8> = bits
        .chunks_exact(8)
        .map(|byte| byte.iter().fold(0u8, |n, bit| (n << 1) | u8::from(*bit)))
        .collect();
    Some(out)
}

/// A Bedrock `chunk` frame carrying one model event: `{"bytes": base64}`.
pub fn chunk(event: &[u8]) -> Vec<u8> {
    let payload = format!(r#"{{"bytes":"{}"}}"#, super::base64::base64(event));
    self::event("chunk", &payload)
}

/// A `chunk` frame with its event replaced by `event`: the new base64 in
/// place of the old, every other byte of the payload as it was, the frame
/// written anew. `None`: not a readable chunk.
pub fn rechunked(raw: &[u8], event: &[u8]) -> Option<Vec<u8>> {
    let (_, payload) = read(raw)?;
    let text = String::from_utf8(payload).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    let old = format!("\"{}\"", value.get("bytes")?.as_str()?);
    let new = format!("\"{}\"", super::base64::base64(event));
    reframed(raw, text.replacen(&old, &new, 1).as_bytes())
}

/// Where each frame of a stream ends, as a reader that trusts only a
/// prelude whose CRC holds would split it: by its declared length, a
/// prelude that does not hold (or declares a length below 16 bytes or
/// above AWS's 16 MiB + 128 KiB) ends at once, a cut frame at the end.
pub fn split(body: &[u8]) -> Vec<std::ops::Range<usize>> {
    const MAX: usize = 12 + 128 * 1024 + 16 * 1024 * 1024 + 4;
    let mut out = Vec::new();
    let mut at = 0;
    while at < body.len() {
        let rest = &body[at..];
        let len = match rest.get(..12) {
            None => rest.len(),
            Some(prelude) => {
                let total = u32::from_be_bytes(prelude[0..4].try_into().unwrap()) as usize;
                let crc = u32::from_be_bytes(prelude[8..12].try_into().unwrap());
                if crc32(&prelude[..8]) != crc || !(16..=MAX).contains(&total) {
                    12
                } else {
                    total.min(rest.len())
                }
            }
        };
        out.push(at..at + len);
        at += len;
    }
    out
}

/// A stream written as text (the fixtures' `response.events` and
/// `expected.events`), one frame per line:
///
/// - `<event-type> <payload>`: an event frame, as [`event`];
/// - `exception <exception-type> <payload>`: an exception frame;
/// - `chunk-of <event>`: a Bedrock `chunk` frame whose `bytes` are the
///   base64 of `<event>` (as [`chunk`]);
/// - a fault before either: `!crc ` (its message CRC wrong), `!prelude-crc `
///   (its prelude CRC wrong), `!cut ` (only its first half sent: the last
///   line); or the line `!length` alone (a prelude, its CRC sound, that
///   declares a frame of 4 GiB).
///
/// Blank lines and lines starting with `#` are not frames.
pub fn from_text(text: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        if line == "!length" {
            let mut prelude = u32::MAX.to_be_bytes().to_vec();
            prelude.extend_from_slice(&0u32.to_be_bytes());
            let crc = crc32(&prelude);
            prelude.extend_from_slice(&crc.to_be_bytes());
            out.extend_from_slice(&prelude);
            continue;
        }
        let (fault, rest) = match line.strip_prefix('!') {
            Some(faulted) => faulted
                .split_once(' ')
                .ok_or_else(|| format!("a fault without a frame: {line:?}"))?,
            None => ("", line),
        };
        let (kind, rest) = rest
            .split_once(' ')
            .ok_or_else(|| format!("no payload: {line:?}"))?;
        let mut raw = match kind {
            "exception" => {
                let (kind, payload) = rest
                    .split_once(' ')
                    .ok_or_else(|| format!("no exception type: {line:?}"))?;
                exception(kind, payload)
            }
            "chunk-of" => chunk(rest.as_bytes()),
            _ => event(kind, rest),
        };
        match fault {
            "" => {}
            "crc" => *raw.last_mut().unwrap() ^= 0x5a,
            "prelude-crc" => raw[8] ^= 0x5a,
            "cut" => raw.truncate(raw.len() / 2),
            other => return Err(format!("unknown fault !{other}")),
        }
        out.extend_from_slice(&raw);
    }
    Ok(out)
}

/// A stream as [`from_text`] writes it, for failure messages: a frame that
/// cannot be read shows as `!unreadable <bytes>`.
pub fn to_text(body: &[u8]) -> String {
    let mut out = String::new();
    for range in split(body) {
        let raw = &body[range];
        let line = match read(raw) {
            Some((headers, payload)) => {
                let header = |name: &str| {
                    headers
                        .iter()
                        .find(|(n, _)| n == name)
                        .map_or("", |(_, v)| v.as_str())
                };
                let decoded = serde_json::from_slice::<serde_json::Value>(&payload)
                    .ok()
                    .and_then(|p| unbase64(p.get("bytes")?.as_str()?));
                let payload = String::from_utf8_lossy(&payload);
                match header(":message-type") {
                    "exception" => format!("exception {} {payload}", header(":exception-type")),
                    _ if header(":event-type") == "chunk" && decoded.is_some() => {
                        let decoded = decoded.unwrap_or_default();
                        format!("chunk-of {}", String::from_utf8_lossy(&decoded))
                    }
                    _ => format!("{} {payload}", header(":event-type")),
                }
            }
            None => format!("!unreadable {raw:?}"),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}
