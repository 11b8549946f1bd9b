//! Embedding batches larger than a provider takes: split into chunks of at
//! most `max_batch_inputs`, sent concurrently (`server`), and stitched back
//! into one response here, honestly.
//!
//! Honest stitching: a stitched figure is the sum over chunks only when
//! every chunk reported it well-formed; otherwise it is `null`, because a
//! partial sum understates the truth and looks like a real number. The id
//! is the first chunk's, or `null`, never a later chunk's.

use std::collections::HashMap;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue};

use crate::figures::{self, Domain, Figure, HeaderFigure};
use crate::json::{base64_len, scan_numbers, Document, Elements, Json, Kind, Object, Scanner};
use crate::request::RequestShape;
use crate::violation::{Invariant, Violation};

/// Where an endpoint's inputs and vectors are.
#[derive(Debug, Clone, Copy)]
pub struct BatchSpec {
    /// The request members that may hold the inputs; the first present is split.
    pub inputs: &'static [&'static str],
    pub(crate) vectors: Vectors,
    /// The endpoint's request shape: an unreadable request is not split.
    pub(crate) request: &'static RequestShape,
}

/// Where the vectors of a response are, as data: adding a provider adds a
/// value, not a case to the stitching.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Vectors {
    /// The root member holding the list (`""`: the body is the list).
    pub(crate) list: &'static str,
    /// What each item of the list is.
    pub(crate) item: Item,
    /// The list may instead be an object of lists, one per embedding type
    /// (Cohere's `embedding_types`).
    pub(crate) by_type: bool,
    /// Root lists echoed one entry per input, stitched like the vectors
    /// (Cohere's `texts`).
    pub(crate) echoed: &'static [&'static str],
}

/// What one item of a vector list is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Item {
    /// The vector itself (an array of numbers, or base64).
    Vector,
    /// An object holding its vector in `vector` and, if any, its position
    /// in `index` (renumbered when stitched).
    Object {
        vector: &'static str,
        index: Option<&'static str>,
    },
}

impl Vectors {
    /// OpenAI's `data: [{index, embedding}]` (also Jina, Voyage, TEI's `/v1`).
    pub(crate) const OPENAI_DATA: Vectors = Vectors {
        list: "data",
        item: Item::Object {
            vector: "embedding",
            index: Some("index"),
        },
        by_type: false,
        echoed: &[],
    };
}

/// Splits a request into chunk requests when it has more than `max` inputs.
/// Each chunk is the request's own bytes with only the inputs' slice
/// changed: every other member keeps its exact text (a `seed` beyond f64,
/// key order, spacing), and each input keeps its text too (a lone
/// surrogate escape included).
/// A request probity cannot read (`RequestShape::read`) goes whole.
pub fn split(body: &[u8], spec: &BatchSpec, max: usize) -> Option<Vec<Bytes>> {
    let readable = spec.request.read(body).ok()?;
    let request = readable.object();
    let key = spec.inputs.iter().find(|k| request.present(k).is_some())?;
    let inputs = request.present(key)?.array()?;
    // An array of token ids is one input.
    if inputs.len() <= max || inputs.first().is_some_and(|i| i.kind() == Kind::Number) {
        return None;
    }
    // Everything before the first input (the request up to `[` and any
    // space) and after the last (any space, `]`, the rest) is kept.
    let before = body.get(..inputs.first()?.span(body).start)?;
    let after = body.get(inputs.last()?.span(body).end..)?;
    inputs
        .chunks(max)
        .map(|slice| {
            let written = slice.first()?.span(body).start..slice.last()?.span(body).end;
            let mut chunk = BytesMut::with_capacity(before.len() + written.len() + after.len());
            chunk.extend_from_slice(before);
            chunk.extend_from_slice(body.get(written)?);
            chunk.extend_from_slice(after);
            Some(chunk.freeze())
        })
        .collect()
}

/// One chunk's checked answer, with the scan its check made of it.
pub struct Part {
    /// The chunk's response headers.
    pub headers: HeaderMap,
    /// The chunk's response body, as checked.
    pub body: Bytes,
    /// The scan its check made of the body, so stitching does not scan again.
    pub scan: Scanner,
}

/// The stitched response.
pub struct Stitched {
    /// The stitched body.
    pub body: Bytes,
    /// The stitched headers (header figures summed).
    pub headers: HeaderMap,
    /// Stitched pointers that became `null` (and `header:<name>` removed).
    pub nulled: Vec<String>,
}

/// A chunk's parsed answer: its root, and the root's members.
type Doc<'a> = (Json<'a>, Option<Object<'a>>);

fn mismatch(message: String) -> Violation {
    Violation {
        invariant: Invariant::ChunkDimensionMismatch,
        message,
    }
}

/// Joins checked chunk answers into the first chunk's shape: the vectors
/// (and echoed lists) concatenated in input order with their exact text,
/// the figures summed honestly, every other member the first chunk's.
pub(crate) fn stitch(
    parts: &[&Part],
    spec: &BatchSpec,
    (table, related): (&[Figure], figures::Related<'_>),
    header_table: &[HeaderFigure],
) -> Result<Stitched, Violation> {
    let parsed: Vec<Document<'_>> = parts
        .iter()
        .map(|p| Document::scanned(&p.body, p.scan.clone()))
        .collect::<Result<_, _>>()
        .map_err(|e| mismatch(format!("a chunk is not JSON ({e})")))?;
    let docs: Vec<Doc<'_>> = parsed.iter().map(|d| (d.root(), d.object())).collect();
    let first = docs
        .first()
        .ok_or_else(|| mismatch("no chunk answered".into()))?;
    let vectors = spec.vectors;
    let mut overrides: HashMap<String, String> = HashMap::new();
    overrides.insert(pointer(vectors.list), stitch_vectors(&docs, &vectors)?);
    for echoed in vectors.echoed {
        let texts = concat(&docs, |root| member(root, echoed).and_then(|t| t.array()));
        overrides.insert(pointer(echoed), format!("[{}]", texts.join(",")));
    }
    // A chunk whose figures contradict each other did not report them:
    // the seed rule then leaves their sum not reported.
    let unreported: Vec<Vec<String>> = parts
        .iter()
        .zip(&docs)
        .map(|(part, (_, object))| match object {
            Some(object) => figures::judge(&part.body, object, table, related).pointers,
            None => Vec::new(),
        })
        .collect();
    let mut nulled = stitch_figures(&docs, (table, &unreported), &mut overrides);
    collapse_records(table, &mut overrides, &mut nulled);
    let body = match (&first.1, overrides.get("")) {
        (_, Some(root)) => root.clone(),
        (Some(object), None) => rebuild(object, "", &overrides),
        (None, None) => return Err(mismatch("the first chunk is not an object".into())),
    };
    let headers = stitch_headers(parts, header_table, &mut nulled);
    Ok(Stitched {
        body: Bytes::from(body),
        headers,
        nulled,
    })
}

/// A root member's JSON pointer (`""` for the root itself).
fn pointer(member: &str) -> String {
    if member.is_empty() {
        String::new()
    } else {
        format!("/{member}")
    }
}

/// A root member of a document (the root itself for `""`).
fn member<'a>(doc: &Doc<'a>, name: &str) -> Option<Json<'a>> {
    if name.is_empty() {
        Some(doc.0)
    } else {
        doc.1.as_ref()?.present(name)
    }
}

/// The texts of every chunk's list, in order.
fn concat<'a>(docs: &[Doc<'a>], list: impl Fn(&Doc<'a>) -> Option<Vec<Json<'a>>>) -> Vec<&'a str> {
    docs.iter()
        .flat_map(|doc| list(doc).unwrap_or_default())
        .map(|v| v.text())
        .collect()
}

/// The stitched vector list's text, in the first chunk's form.
fn stitch_vectors(docs: &[Doc<'_>], vectors: &Vectors) -> Result<String, Violation> {
    let first = docs.first().and_then(|d| member(d, vectors.list));
    if vectors.by_type && first.is_some_and(|l| l.kind() == Kind::Object) {
        return stitch_by_type(docs, vectors.list);
    }
    match vectors.item {
        Item::Vector => stitch_plain(docs, vectors.list),
        Item::Object { vector, index } => stitch_items(docs, vectors.list, vector, index),
    }
}

/// The shape every chunk's vectors must share: base64 or not, and dimension.
struct VectorShape(Option<(bool, usize)>);

impl VectorShape {
    fn agree(&mut self, label: &str, vector: Json<'_>) -> Result<(), Violation> {
        let found = match vector.kind() {
            Kind::String => (
                true,
                vector.string().and_then(|s| base64_len(&s)).unwrap_or(0) / 4,
            ),
            _ => (false, scan_numbers(vector, Elements::Float).unwrap_or(0)),
        };
        let first = *self.0.get_or_insert(found);
        if first == found {
            return Ok(());
        }
        let base64 = |b: bool| if b { " (base64)" } else { "" };
        Err(mismatch(format!(
            "{label} has {} dimensions{}, the first chunk {} dimensions{}",
            found.1,
            base64(found.0),
            first.1,
            base64(first.0)
        )))
    }
}

/// A list of bare vectors (Ollama's `embeddings`, TEI's body, Cohere v1).
fn stitch_plain(docs: &[Doc<'_>], list: &str) -> Result<String, Violation> {
    let mut shape = VectorShape(None);
    let mut vectors = Vec::new();
    for (c, doc) in docs.iter().enumerate() {
        for vector in member(doc, list)
            .and_then(|v| v.array())
            .unwrap_or_default()
        {
            shape.agree(&format!("chunk {c}"), vector)?;
            vectors.push(vector.text());
        }
    }
    Ok(format!("[{}]", vectors.join(",")))
}

/// A list of objects each holding a vector and its index (OpenAI's
/// `data`): in index order within each chunk, renumbered 0..n-1.
fn stitch_items(
    docs: &[Doc<'_>],
    list: &str,
    vector: &str,
    index: Option<&str>,
) -> Result<String, Violation> {
    let mut shape = VectorShape(None);
    let mut items = Vec::new();
    let mut offset = 0;
    for (c, doc) in docs.iter().enumerate() {
        let objects = member(doc, list)
            .and_then(|d| d.objects())
            .unwrap_or_default();
        let position = |item: &Object<'_>| index.and_then(|i| item.present(i)?.count());
        let mut ordered: Vec<(u64, &Object<'_>)> = objects
            .iter()
            .flatten()
            .enumerate()
            .map(|(at, item)| (position(item).unwrap_or(at as u64), item))
            .collect();
        ordered.sort_by_key(|(i, _)| *i);
        for (at, item) in &ordered {
            if let Some(values) = item.present(vector) {
                shape.agree(&format!("chunk {c}, item {at}"), values)?;
            }
            let renumbered = index
                .map(|i| (format!("/{i}"), (offset + at).to_string()))
                .into_iter()
                .collect();
            items.push(rebuild(item, "", &renumbered));
        }
        offset += ordered.len() as u64;
    }
    Ok(format!("[{}]", items.join(",")))
}

/// Cohere's embeddings keyed by type: each type's lists concatenated, each
/// type's vectors of one length.
fn stitch_by_type(docs: &[Doc<'_>], list: &str) -> Result<String, Violation> {
    fn by_type<'a>(doc: &Doc<'a>, list: &str) -> Option<Object<'a>> {
        member(doc, list)?.object()
    }
    let types: Vec<String> = docs
        .first()
        .and_then(|doc| by_type(doc, list))
        .map(|f| f.keys().map(str::to_string).collect())
        .unwrap_or_default();
    let mut stitched = Vec::new();
    for kind in &types {
        let mut vectors = Vec::new();
        let mut dims: Option<usize> = None;
        for (c, doc) in docs.iter().enumerate() {
            let vectors_of = by_type(doc, list).and_then(|e| e.present(kind)?.array());
            for vector in vectors_of.unwrap_or_default() {
                let dim = match vector.kind() {
                    Kind::String => vector.string().and_then(|s| base64_len(&s)).unwrap_or(0),
                    _ => scan_numbers(vector, ANY_INTEGER)
                        .or_else(|_| scan_numbers(vector, Elements::Float))
                        .unwrap_or(0),
                };
                let expected = *dims.get_or_insert(dim);
                if expected != dim {
                    return Err(mismatch(format!(
                        "chunk {c}: {kind} vectors of {dim}, expected {expected}"
                    )));
                }
                vectors.push(vector.text());
            }
        }
        let key = serde_json::to_string(kind).unwrap_or_default();
        stitched.push(format!("{key}:[{}]", vectors.join(",")));
    }
    Ok(format!("{{{}}}", stitched.join(",")))
}

const ANY_INTEGER: Elements = Elements::Integer {
    min: i64::MIN,
    max: i64::MAX,
};

/// The stitched figures, as overrides of the first chunk's: a sum only
/// when every chunk reported the figure well-formed, the first chunk's id,
/// else `null`. Returns the pointers that became `null`.
fn stitch_figures(
    docs: &[Doc<'_>],
    (table, unreported): (&[Figure], &[Vec<String>]),
    overrides: &mut HashMap<String, String>,
) -> Vec<String> {
    let mut nulled = Vec::new();
    for figure in table.iter().filter(|f| f.domain != Domain::Required) {
        let mut contradicted = false;
        let values: Vec<Option<Json<'_>>> = docs
            .iter()
            .enumerate()
            .map(|(i, (_, o))| {
                let value = o.as_ref().and_then(|o| lookup(o, figure.pointer))?;
                // Not reported by its chunk: it is not there to sum.
                let unsound = unreported
                    .get(i)
                    .is_some_and(|pointers| pointers.iter().any(|p| p == figure.pointer));
                contradicted |= unsound;
                (!unsound).then_some(value)
            })
            .collect();
        if values.iter().all(Option::is_none) && !contradicted {
            continue;
        }
        let stitched = match figure.domain {
            Domain::Id => values
                .first()
                .copied()
                .flatten()
                .filter(|v| v.string().is_some_and(|s| !s.is_empty()))
                .map(|v| v.text().to_string()),
            Domain::Count => sum_counts(&values),
            Domain::Number => sum_numbers(&values),
            Domain::Required => None,
        };
        let exists = docs
            .first()
            .and_then(|(_, o)| lookup_any(o.as_ref()?, figure.pointer))
            .is_some();
        match stitched {
            Some(text) => {
                overrides.insert(figure.pointer.to_string(), text);
            }
            None if exists => {
                overrides.insert(figure.pointer.to_string(), "null".into());
                nulled.push(figure.pointer.to_string());
            }
            None => {}
        }
    }
    nulled
}

/// The sum of counts, when every one is well-formed and it fits.
fn sum_counts(values: &[Option<Json<'_>>]) -> Option<String> {
    values
        .iter()
        .map(|v| v.and_then(|v| v.count()))
        .try_fold(0u64, |sum, n| n.and_then(|n| sum.checked_add(n)))
        .map(|n| n.to_string())
}

/// The sum of non-negative numbers, when every one is well-formed.
fn sum_numbers(values: &[Option<Json<'_>>]) -> Option<String> {
    values
        .iter()
        .map(|v| {
            v.filter(|v| !v.text().starts_with('-'))
                .and_then(|v| v.number())
                .filter(|n| *n >= 0.0)
        })
        .try_fold(0f64, |sum, n| n.map(|n| sum + n))
        .map(|n| {
            if n.fract() == 0.0 && n < 1e15 {
                (n as u64).to_string()
            } else {
                n.to_string()
            }
        })
}

/// A record whose every stitched figure became `null` collapses to `null`
/// as a whole, as a single call's does.
fn collapse_records(
    table: &[Figure],
    overrides: &mut HashMap<String, String>,
    nulled: &mut Vec<String>,
) {
    let mut records: Vec<&str> = Vec::new();
    for record in table.iter().map(|f| f.record()) {
        if !record.is_empty() && !records.contains(&record) {
            records.push(record);
        }
    }
    for record in records.into_iter().filter(|r| !figures::required(table, r)) {
        let mut figures = table
            .iter()
            .filter(|f| f.record() == record)
            .filter_map(|f| overrides.get(f.pointer))
            .peekable();
        if figures.peek().is_some() && figures.all(|text| text == "null") {
            overrides.insert(record.to_string(), "null".into());
            nulled.push(record.to_string());
        }
    }
}

/// The first chunk's headers, with header figures summed honestly (or
/// removed) and no stale length.
fn stitch_headers(
    parts: &[&Part],
    header_table: &[HeaderFigure],
    nulled: &mut Vec<String>,
) -> HeaderMap {
    let mut headers = parts.first().map(|p| p.headers.clone()).unwrap_or_default();
    headers.remove(http::header::CONTENT_LENGTH);
    for figure in header_table {
        if parts.iter().all(|p| !p.headers.contains_key(figure.name)) {
            continue;
        }
        let sum = parts
            .iter()
            .map(|p| {
                p.headers
                    .get(figure.name)
                    .and_then(|v| v.to_str().ok())
                    .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|v| v.parse::<u64>().ok())
            })
            .try_fold(0u64, |sum, n| n.and_then(|n| sum.checked_add(n)));
        match sum {
            Some(sum) => {
                headers.insert(figure.name, HeaderValue::from(sum));
            }
            None => {
                headers.remove(figure.name);
                nulled.push(figure.label.to_string());
            }
        }
    }
    headers
}

/// The value at a pointer, when present and not null.
fn lookup<'a>(root: &Object<'a>, pointer: &str) -> Option<Json<'a>> {
    lookup_any(root, pointer).filter(|v| !v.is_null())
}

/// The value at a pointer, `null` included.
fn lookup_any<'a>(root: &Object<'a>, pointer: &str) -> Option<Json<'a>> {
    let mut segments = pointer.split('/').skip(1);
    let mut value = root.get(segments.next()?)?;
    for segment in segments {
        value = value.object()?.get(segment)?;
    }
    Some(value)
}

/// The text of `object` with the values at some pointers (under `prefix`)
/// replaced; every other member keeps its exact text.
fn rebuild(object: &Object<'_>, prefix: &str, overrides: &HashMap<String, String>) -> String {
    let mut out = String::from("{");
    for (i, key) in object.keys().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let path = format!("{prefix}/{key}");
        out.push_str(&serde_json::to_string(key).unwrap_or_default());
        out.push(':');
        let value = object.get(key);
        match overrides.get(&path) {
            Some(text) => out.push_str(text),
            None => {
                let nested = overrides
                    .keys()
                    .any(|p| p.starts_with(&path) && p[path.len()..].starts_with('/'));
                match (nested, value.and_then(|v| v.object())) {
                    (true, Some(inner)) => out.push_str(&rebuild(&inner, &path, overrides)),
                    _ => out.push_str(value.map_or("null", |v| v.text())),
                }
            }
        }
    }
    out.push('}');
    out
}
