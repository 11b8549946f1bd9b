//! The properties the fuzz targets in `fuzz/` check, and the replay of
//! their seeds in `tests/it/fuzz_corpus.rs` checks too: a crate of its
//! own, outside the shipped library, that judges only through
//! `probity-judge`'s public API (and loads configurations through
//! `probity`'s), so what is fuzzed is what an app or the server calls.
//!
//! Each function takes the fuzzer's bytes, drives the judging core, and
//! checks a property of what it returns. `Err` means a property broke; an
//! input that is merely rejected (not JSON, a payload violation, a bad
//! configuration) is `Ok`.
//!
//! An input is a list of parts joined by the byte `0xFF` (see [`pack`]),
//! which never occurs in UTF-8 text. The first part is a header line
//! `<dialect> <path>` naming the endpoint (the stitch target adds the
//! batch size: `<dialect> <path> <max>`); the others are per target.
//!
//! The property every inspector target asserts is the one
//! `tests/it/property.rs` asserts over sockets: the answer is the upstream's
//! bytes, or those bytes with exactly the listed figure spans replaced by
//! `null`, or a rejection.

use std::collections::VecDeque;
use std::ops::Range;

use bytes::Bytes;
use http::HeaderMap;

use probity::config;
use probity::route::RouteTable;
use probity_judge::batch::{self, Part};
use probity_judge::contract::{Reason, SchemaCache};
use probity_judge::inspect::stream::{self, Framing};
use probity_judge::inspect::{self, Contracts, Dialect, Endpoint, Exchange, Sound, Verdict};
use probity_judge::json::{Document, Scanner};

/// The byte between the parts of an input.
pub const SEPARATOR: u8 = 0xFF;

/// Joins parts into one fuzz input (the seeds' format).
pub fn pack(parts: &[&[u8]]) -> Vec<u8> {
    parts.join(&SEPARATOR)
}

fn unpack(input: &[u8]) -> Vec<&[u8]> {
    input.split(|b| *b == SEPARATOR).collect()
}

/// The dialect and endpoint a header line `<dialect> <path> ...` names.
fn endpoint_of(header: &[u8]) -> Option<(&'static dyn Dialect, &'static Endpoint, &str)> {
    let header = std::str::from_utf8(header).ok()?;
    let mut words = header.split(' ');
    let dialect = inspect::dialect(words.next()?)?;
    let path = words.next()?;
    Some((dialect, dialect.endpoint(path)?, path))
}

/// Which inspector target an endpoint belongs to, by its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Embeddings,
    Rerank,
    /// Every other inspected endpoint: chat, completions, messages,
    /// generate.
    Chat,
}

fn kind(path: &str) -> Target {
    let path = path.to_ascii_lowercase();
    if path.contains("rerank") {
        Target::Rerank
    } else if path.contains("embed") {
        Target::Embeddings
    } else {
        Target::Chat
    }
}

/// The inspector target (`embeddings`, `rerank` or `chat`) whose input
/// starts with this header line, if its endpoint is inspected.
pub fn inspector(header: &str) -> Option<&'static str> {
    let (_, _, path) = endpoint_of(header.as_bytes())?;
    Some(match kind(path) {
        Target::Embeddings => "embeddings",
        Target::Rerank => "rerank",
        Target::Chat => "chat",
    })
}

/// `inspect` of a 200 answer to a POST, without headers or contracts: the
/// only rewrite possible is figures replaced by `null`.
fn inspect_body(endpoint: &Endpoint, request: &Bytes, response: &Bytes) -> Verdict {
    let cache = SchemaCache::new(4);
    let contracts = Contracts {
        config: None,
        cache: &cache,
        convention: Default::default(),
    };
    let headers = HeaderMap::new();
    let exchange = Exchange::answered(request, &headers, response);
    inspect::inspect(endpoint, &exchange, &contracts)
}

/// The input with `nulls` (sorted, disjoint, in range) replaced by `null`.
fn nulled(input: &[u8], nulls: &[Range<usize>]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(input.len());
    let mut at = 0;
    for range in nulls {
        if range.start < at || range.start >= range.end || range.end > input.len() {
            return Err(format!(
                "null spans not sorted, disjoint, in range: {nulls:?}"
            ));
        }
        out.extend_from_slice(input.get(at..range.start).unwrap_or_default());
        out.extend_from_slice(b"null");
        at = range.end;
    }
    out.extend_from_slice(input.get(at..).unwrap_or_default());
    Ok(out)
}

/// A sound answer's body is the input, or the input with the listed spans
/// replaced by `null`; that body is JSON again.
fn check_rewrite(input: &[u8], sound: &Sound) -> Result<(), String> {
    let expected = nulled(input, &sound.nulls)?;
    let body = sound.body.as_deref().unwrap_or(input);
    if body != expected.as_slice() {
        return Err(format!(
            "the answer is not the input with {:?} nulled: {}",
            sound.nulls,
            String::from_utf8_lossy(body)
        ));
    }
    Document::parse(body)
        .map(|_| ())
        .map_err(|e| format!("the rewritten body is not JSON ({e})"))
}

fn whole_body(input: &[u8], wanted: Target) -> Result<(), String> {
    let parts = unpack(input);
    let [header, request, response, ..] = parts.as_slice() else {
        return Ok(());
    };
    let Some((_, endpoint, path)) = endpoint_of(header) else {
        return Ok(());
    };
    if kind(path) != wanted {
        return Ok(());
    }
    let request = Bytes::copy_from_slice(request);
    let response = Bytes::copy_from_slice(response);
    let Verdict::Sound(sound) = inspect_body(endpoint, &request, &response) else {
        return Ok(());
    };
    check_rewrite(&response, &sound)?;
    // What was rewritten is judged sound, with nothing left to null.
    if let Some(body) = &sound.body {
        match inspect_body(endpoint, &request, body) {
            Verdict::Sound(again) if again.nulls.is_empty() => {}
            again => return Err(format!("the rewritten body, judged again: {again:?}")),
        }
    }
    Ok(())
}

/// Embeddings inspectors: `<dialect> <path>`, request, response.
pub fn embeddings(input: &[u8]) -> Result<(), String> {
    whole_body(input, Target::Embeddings)
}

/// Rerank inspectors: `<dialect> <path>`, request, response.
pub fn rerank(input: &[u8]) -> Result<(), String> {
    whole_body(input, Target::Rerank)
}

/// Chat (and completions, messages, generate) inspectors: `<dialect>
/// <path>`, request, response.
pub fn chat(input: &[u8]) -> Result<(), String> {
    whole_body(input, Target::Chat)
}

/// The body's bytes in pieces: each byte of `cuts` is the length of the
/// next piece less one; the rest is the last piece.
fn pieces<'a>(body: &'a [u8], cuts: &[u8]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut rest = body;
    for cut in cuts {
        let (piece, after) = rest.split_at(rest.len().min(usize::from(*cut) + 1));
        out.push(piece);
        rest = after;
    }
    out.push(rest);
    out
}

/// The complete events at the start of `buffer`, and where the rest starts.
fn take_events(
    framing: Framing,
    buffer: &[u8],
    at_end: bool,
) -> Result<(Vec<&[u8]>, usize), String> {
    let mut events = Vec::new();
    let mut at = 0;
    while let Some(len) = stream::next_event(framing, buffer.get(at..).unwrap_or_default(), at_end)
    {
        let event = buffer
            .get(at..at + len)
            .filter(|e| !e.is_empty())
            .ok_or_else(|| format!("next_event gave {len} at {at} of {}", buffer.len()))?;
        events.push(event);
        at += len;
    }
    Ok((events, at))
}

/// The events of a stream fed in `pieces`, held the way the checked stream
/// holds an incomplete one; at the end a last `\r` ends its line and an
/// unterminated rest is a final event.
fn events_fed(framing: Framing, pieces: &[&[u8]]) -> Result<Vec<Vec<u8>>, String> {
    let mut events = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    for piece in pieces {
        pending.extend_from_slice(piece);
        let (found, used) = take_events(framing, &pending, false)?;
        events.extend(found.into_iter().map(<[u8]>::to_vec));
        pending.drain(..used);
    }
    let (found, used) = take_events(framing, &pending, true)?;
    events.extend(found.into_iter().map(<[u8]>::to_vec));
    if let Some(rest) = pending.get(used..).filter(|r| !r.is_empty()) {
        events.push(rest.to_vec());
    }
    Ok(events)
}

/// The lines of an SSE event that are not data lines, as received.
fn other_lines(raw: &[u8]) -> Vec<&[u8]> {
    raw.split(|b| matches!(b, b'\r' | b'\n'))
        .filter(|line| !line.is_empty() && !line.starts_with(b"data"))
        .collect()
}

/// Nulling a member of an event's data changes that member alone: the
/// rewritten event's data is the data with the span replaced by `null`
/// (followed by the line breaks the span held), and every other line of
/// the event (`event:`, `id:`, comments) stays as it came.
fn check_event_rewrite(framing: Framing, raw: &[u8]) -> Result<(), String> {
    let event = stream::parse_event(framing, raw);
    if stream::rewrite(framing, raw, &[], None) != raw {
        return Err("a rewrite with nothing to null changed the event".into());
    }
    let Some(data) = event.data.as_deref() else {
        return Ok(());
    };
    let doc = Document::parse(data).ok();
    let Some(object) = doc.as_ref().and_then(Document::object) else {
        return Ok(());
    };
    for (_, value, _) in object.members() {
        let span = value.span(data);
        let rewritten = stream::rewrite(framing, raw, std::slice::from_ref(&span), None);
        let again = stream::parse_event(framing, &rewritten);
        let breaks = data
            .get(span.clone())
            .unwrap_or_default()
            .iter()
            .filter(|b| **b == b'\n');
        let mut expected = data.get(..span.start).unwrap_or_default().to_vec();
        expected.extend_from_slice(b"null");
        expected.extend(breaks);
        expected.extend_from_slice(data.get(span.end..).unwrap_or_default());
        if again.data.as_deref() != Some(expected.as_slice())
            || again.name != event.name
            || (framing == Framing::Sse && other_lines(&rewritten) != other_lines(raw))
        {
            return Err(format!(
                "nulling {span:?} of {:?} gave {:?}",
                String::from_utf8_lossy(raw),
                String::from_utf8_lossy(&rewritten)
            ));
        }
    }
    Ok(())
}

/// The event-stream splitter: the frames of a stream fed in pieces are
/// those of the stream fed whole, they are its bytes, up to the first frame
/// that cannot be read (where the stream is cut: that one may hold more
/// or less of the rest, but is broken either way); a sound frame rewritten
/// with nothing to null is the same bytes, and nulling a member of its
/// payload changes that member alone, both CRCs made anew.
fn check_frames(body: &[u8], cuts: &[u8]) -> Result<(), String> {
    let framing = Framing::EventStream;
    let broken = |event: &[u8]| stream::parse_event(framing, event).is_broken();
    let judged = |events: Vec<Vec<u8>>| {
        let sound: Vec<Vec<u8>> = events.iter().take_while(|e| !broken(e)).cloned().collect();
        let cut = sound.len() < events.len();
        (sound, cut)
    };
    let whole = judged(events_fed(framing, &[body])?);
    let fed = judged(events_fed(framing, &pieces(body, cuts))?);
    if whole != fed {
        return Err(format!("event stream: in pieces {fed:?}, whole {whole:?}"));
    }
    if !body.starts_with(&whole.0.concat()) {
        return Err("event stream: the frames are not the stream's bytes".into());
    }
    for event in &whole.0 {
        check_event_rewrite(framing, event)?;
    }
    Ok(())
}

/// The splitter alone, in both framings: the events of a stream fed in
/// pieces are the events of the stream fed whole, they are its bytes,
/// and a rewrite of one changes only the nulled span.
fn check_splitter(body: &[u8], cuts: &[u8]) -> Result<(), String> {
    for framing in [Framing::Sse, Framing::Ndjson] {
        let whole = events_fed(framing, &[body])?;
        let fed = events_fed(framing, &pieces(body, cuts))?;
        if whole != fed {
            return Err(format!("{framing:?}: in pieces {fed:?}, whole {whole:?}"));
        }
        if whole.concat() != body {
            return Err(format!(
                "{framing:?}: the events are not the stream's bytes"
            ));
        }
        for event in &whole {
            check_event_rewrite(framing, event)?;
        }
    }
    check_frames(body, cuts)?;
    Ok(())
}

/// What the stream judge sends for a body arriving in `pieces`: its
/// bytes (a broken stream ending with its error event), the invariant that
/// broke it, what became `null`, and whether an output verdict was given.
/// `None`: the endpoint has no stream judge.
type Relayed = (Vec<u8>, Option<&'static str>, Vec<String>, bool);

fn relay(endpoint: &Endpoint, request: &[u8], pieces: &[&[u8]]) -> Option<Relayed> {
    let cache = SchemaCache::new(4);
    let contracts = Contracts {
        config: None,
        cache: &cache,
        convention: Default::default(),
    };
    let mut judge = inspect::stream_judge(endpoint, request, &contracts).ok()?;
    let mut out = VecDeque::new();
    let mut broke = None;
    for piece in pieces {
        if let Err(violation) = judge.feed(&Bytes::copy_from_slice(piece), &mut out) {
            broke = Some(violation);
            break;
        }
    }
    if broke.is_none() {
        broke = judge.end(&mut out).err();
    }
    if let Some(violation) = &broke {
        let error = serde_json::json!({"error": {"type": "provider_invalid_response",
            "code": violation.invariant, "message": violation.message}});
        out.push_back(judge.end_with(&error));
    }
    let findings = judge.findings();
    Some((
        out.iter().flat_map(|b| b.iter().copied()).collect(),
        broke.map(|v| v.invariant.as_str()),
        findings.pointers.clone(),
        findings.output.is_some(),
    ))
}

/// Streams: `<dialect> <path>`, request, stream body, cuts (one byte per
/// piece: its length less one). The splitter in both framings, then the
/// endpoint's checked stream: fed in pieces it sends what it sends fed
/// whole, and a stream it finds sound passes as the same bytes.
pub fn stream(input: &[u8]) -> Result<(), String> {
    let parts = unpack(input);
    let (header, request, body, cuts) = match parts.as_slice() {
        [header, request, body] => (*header, *request, *body, &b""[..]),
        [header, request, body, cuts, ..] => (*header, *request, *body, *cuts),
        _ => return Ok(()),
    };
    check_splitter(body, cuts)?;
    let Some((_, endpoint, _)) = endpoint_of(header) else {
        return Ok(());
    };
    let Some(whole) = relay(endpoint, request, &[body]) else {
        return Ok(());
    };
    let fed = relay(endpoint, request, &pieces(body, cuts));
    if fed.as_ref() != Some(&whole) {
        return Err(format!(
            "in pieces {fed:?}, whole {whole:?} ({:?})",
            String::from_utf8_lossy(&whole.0)
        ));
    }
    let (out, rejected, pointers, verdict) = whole;
    if rejected.is_none() && pointers.is_empty() && !verdict && out != body {
        return Err(format!(
            "a sound stream changed: {:?}",
            String::from_utf8_lossy(&out)
        ));
    }
    Ok(())
}

/// One route named `fuzz` of `dialect`, with `extra` appended to its table.
fn route_config(dialect: &str, extra: &str) -> String {
    format!(
        "[[routes]]\nname = \"fuzz\"\nprefix = \"/fuzz\"\nupstream = \"http://127.0.0.1:9\"\n\
         dialect = \"{dialect}\"\n{extra}\n"
    )
}

/// The contract validator: `<dialect> <path>`, request, the route's
/// `[routes.contract]` TOML (may be empty), the answer text, flags (bit 0
/// truncated, bit 1 refusal). The verdict names known reasons once each in
/// their order, is the same when asked twice, names `truncated`,
/// `refusal` and `invalid_json` when they apply, and its degraded answer
/// is JSON.
pub fn contract(input: &[u8]) -> Result<(), String> {
    let parts = unpack(input);
    let [header, request, route_toml, answer, rest @ ..] = parts.as_slice() else {
        return Ok(());
    };
    let flags = rest.first().and_then(|f| f.first()).copied().unwrap_or(0);
    let (truncated, refusal) = (flags & 1 != 0, flags & 2 != 0);
    let (Ok(header), Ok(route_toml), Ok(answer)) = (
        std::str::from_utf8(header),
        std::str::from_utf8(route_toml),
        std::str::from_utf8(answer),
    ) else {
        return Ok(());
    };
    let Some((dialect, path)) = header.split_once(' ') else {
        return Ok(());
    };
    let names = inspect::names();
    let Ok(loaded) = config::load(&route_config(dialect, route_toml), &names) else {
        return Ok(());
    };
    let Some(endpoint) = inspect::dialect(dialect).and_then(|d| d.endpoint(path)) else {
        return Ok(());
    };
    // The route's contract as the loaded (and validated) file has it.
    let contract = loaded
        .routes
        .first()
        .and_then(|r| r.contract.clone())
        .map(std::sync::Arc::new);
    let cache = SchemaCache::new(4);
    let contracts = Contracts {
        config: contract.as_ref(),
        cache: &cache,
        convention: Default::default(),
    };
    let Ok(judge) = inspect::stream_judge(endpoint, request, &contracts) else {
        return Ok(());
    };
    let Some(contract) = judge.contract() else {
        return Ok(());
    };
    let verdict = contract.judge_text(answer, truncated, refusal);
    let order: Vec<usize> = verdict
        .reasons
        .iter()
        .filter_map(|r| Reason::ALL.iter().position(|known| known == r))
        .collect();
    if order.len() != verdict.reasons.len()
        || !order.windows(2).all(|w| w.first() < w.last())
        || verdict.sentences.len() != verdict.reasons.len()
    {
        return Err(format!(
            "reasons out of order, unknown or repeated: {verdict:?}"
        ));
    }
    if contract.judge_text(answer, truncated, refusal) != verdict {
        return Err(format!("a second verdict differs from {verdict:?}"));
    }
    let parsed = serde_json::from_str::<serde_json::Value>(answer).is_ok();
    let named = |reason: &str| verdict.reasons.iter().any(|r| *r == reason);
    if named("truncated") != truncated
        || named("refusal") != refusal
        || named("invalid_json") == parsed
    {
        return Err(format!("flags {flags}, parsed {parsed}: {verdict:?}"));
    }
    if !verdict.valid() {
        let degraded = contract.degraded(&verdict);
        if serde_json::from_str::<serde_json::Value>(&degraded).is_err() {
            return Err(format!("the degraded answer is not JSON: {degraded}"));
        }
    }
    Ok(())
}

/// Batch splitting and stitching: `<dialect> <path> <max>`, the request,
/// then the chunks' answers (the last one answers every later chunk).
/// The chunks hold the request's inputs, in order, at most `max` each;
/// when every answer passes its chunk's check, the stitched body is JSON
/// that passes the whole request's check, with no figure left to null.
pub fn stitch(input: &[u8]) -> Result<(), String> {
    let parts = unpack(input);
    let [header, request, answers @ ..] = parts.as_slice() else {
        return Ok(());
    };
    let Some((_, endpoint, _)) = endpoint_of(header) else {
        return Ok(());
    };
    let max = std::str::from_utf8(header)
        .ok()
        .and_then(|h| h.split(' ').nth(2)?.parse::<usize>().ok())
        .unwrap_or(2)
        .clamp(1, 64);
    let Some(spec) = endpoint.batch() else {
        return Ok(());
    };
    let Some(chunks) = batch::split(request, spec, max) else {
        return Ok(());
    };
    check_split(request, &chunks, spec.inputs, max)?;
    let Some(last) = answers.last() else {
        return Ok(());
    };
    let mut parts = Vec::with_capacity(chunks.len());
    for (i, chunk) in chunks.iter().enumerate() {
        let answer = Bytes::copy_from_slice(answers.get(i).unwrap_or(last));
        let Some(part) = checked_part(endpoint, chunk, answer) else {
            return Ok(()); // a rejected chunk fails the request: nothing to stitch
        };
        parts.push(part);
    }
    let parts: Vec<&Part> = parts.iter().collect();
    let Ok(stitched) = endpoint.stitch(&parts, Default::default()) else {
        return Ok(());
    };
    let request = Bytes::copy_from_slice(request);
    match inspect_body(endpoint, &request, &stitched.body) {
        Verdict::Sound(sound) if sound.nulls.is_empty() => Ok(()),
        verdict => Err(format!(
            "the stitched body {:?}, judged against the whole request: {verdict:?}",
            String::from_utf8_lossy(&stitched.body)
        )),
    }
}

/// A chunk's answer as the server keeps it once checked; `None` when the
/// check rejects it.
fn checked_part(endpoint: &Endpoint, chunk: &Bytes, answer: Bytes) -> Option<Part> {
    let cache = SchemaCache::new(1);
    let contracts = Contracts {
        config: None,
        cache: &cache,
        convention: Default::default(),
    };
    let headers = HeaderMap::new();
    let exchange = Exchange::answered(chunk, &headers, &answer);
    match inspect::inspect_keeping(endpoint, &exchange, &contracts, Scanner::default()) {
        (Verdict::Reject(_), _) => None,
        (_, scan) => Some(Part {
            headers,
            body: answer,
            scan,
        }),
    }
}

/// The texts of the inputs of a request (the first present member).
fn input_texts(body: &[u8], keys: &[&str]) -> Option<Vec<String>> {
    let doc = Document::parse(body).ok()?;
    let request = doc.object()?;
    let key = keys.iter().find(|k| request.present(k).is_some())?;
    let inputs = request.present(key)?.array()?;
    Some(inputs.iter().map(|i| i.text().to_string()).collect())
}

/// Every chunk is JSON holding at most `max` inputs, and together they
/// hold the request's inputs in order.
fn check_split(request: &[u8], chunks: &[Bytes], keys: &[&str], max: usize) -> Result<(), String> {
    let mut joined = Vec::new();
    for chunk in chunks {
        let texts = input_texts(chunk, keys)
            .ok_or_else(|| format!("a chunk has no inputs: {}", String::from_utf8_lossy(chunk)))?;
        if texts.is_empty() || texts.len() > max {
            return Err(format!("a chunk has {} inputs, max {max}", texts.len()));
        }
        joined.extend(texts);
    }
    if input_texts(request, keys) != Some(joined) {
        return Err("the chunks do not hold the request's inputs in order".into());
    }
    Ok(())
}

/// The configuration: any TOML text loads or is refused with at least one
/// problem, never a panic; a loaded one builds its route table or says why.
pub fn config(input: &[u8]) -> Result<(), String> {
    let Ok(text) = std::str::from_utf8(input) else {
        return Ok(());
    };
    match config::load(text, &inspect::names()) {
        Ok(loaded) => match RouteTable::build(&loaded, |_| Some("sk-fuzz".into())) {
            Err(problems) if problems.0.is_empty() => Err("refused with no problem".into()),
            _ => Ok(()),
        },
        Err(problems) if problems.0.is_empty() => Err("refused with no problem".into()),
        Err(_) => Ok(()),
    }
}
