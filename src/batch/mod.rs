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
use http::{HeaderMap, HeaderValue, StatusCode};
use serde_json::Value;

use crate::figures::{Domain, Figure, HeaderFigure};
use crate::json::{base64_len, scan_numbers, Elements, Json, Kind, Object};
use crate::violation::Violation;

/// Where an endpoint's inputs and vectors are.
#[derive(Debug, Clone, Copy)]
pub struct BatchSpec {
    /// The request members that may hold the inputs; the first present is split.
    pub inputs: &'static [&'static str],
    pub vectors: Vectors,
}

/// Where the vectors of a response are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vectors {
    /// `data: [{index, embedding}]` (OpenAI, Jina, Voyage, TEI's `/v1`).
    OpenAiData,
    /// An array of vectors in a root member (Ollama's `embeddings`).
    Member(&'static str),
    /// Cohere's `embeddings`, plain or keyed by type, with `texts` echoed.
    Cohere,
    /// The body is the array of vectors (TEI's `/embed`).
    Root,
}

/// Splits a request into chunk requests when it has more than `max` inputs.
/// Each chunk is the request's own bytes with only the inputs' slice
/// changed: every other member keeps its exact text (a `seed` beyond f64,
/// key order, spacing), and each input keeps its text too (a lone
/// surrogate escape included).
pub fn split(body: &[u8], spec: &BatchSpec, max: usize) -> Option<Vec<Bytes>> {
    let (_, Some(request)) = Json::parse_document(body).ok()? else {
        return None;
    };
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

/// The capture of a chunked exchange: every chunk's verbatim answer, in
/// input order, as one JSON document:
/// `{"chunks": [{"status": 200, "headers": {...}, "body": "..."}]}`.
pub fn capture_body(answers: &[(StatusCode, &Part)]) -> Bytes {
    let chunks: Vec<Value> = answers
        .iter()
        .map(|(status, part)| {
            let headers: serde_json::Map<String, Value> = part
                .headers
                .iter()
                .filter_map(|(k, v)| Some((k.to_string(), Value::from(v.to_str().ok()?))))
                .collect();
            serde_json::json!({
                "status": status.as_u16(),
                "headers": headers,
                "body": String::from_utf8_lossy(&part.body),
            })
        })
        .collect();
    Bytes::from(serde_json::json!({ "chunks": chunks }).to_string())
}

/// One chunk's checked answer.
pub struct Part {
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// The stitched response.
pub struct Stitched {
    pub body: Bytes,
    pub headers: HeaderMap,
    /// Stitched pointers that became `null` (and `header:<name>` removed).
    pub nulled: Vec<String>,
}

fn mismatch(message: String) -> Violation {
    Violation {
        invariant: "chunk_dimension_mismatch",
        message,
    }
}

/// Joins checked chunk answers into the first chunk's shape.
pub fn stitch(
    parts: &[&Part],
    spec: &BatchSpec,
    table: &[Figure],
    header_table: &[HeaderFigure],
) -> Result<Stitched, Violation> {
    let docs: Vec<(Json<'_>, Option<Object<'_>>)> = parts
        .iter()
        .map(|p| Json::parse_document(&p.body))
        .collect::<Result<_, _>>()
        .map_err(|e| mismatch(format!("a chunk is not JSON ({e})")))?;
    let mut overrides: HashMap<String, String> = HashMap::new();
    let mut shape: Option<(bool, usize)> = None;
    let mut agree = |label: &str, base64: bool, dim: usize| -> Result<(), Violation> {
        match shape {
            None => shape = Some((base64, dim)),
            Some(first) if first != (base64, dim) => {
                return Err(mismatch(format!(
                    "{label} has {dim} dimensions{}, the first chunk {} dimensions{}",
                    if base64 { " (base64)" } else { "" },
                    first.1,
                    if first.0 { " (base64)" } else { "" }
                )))
            }
            Some(_) => {}
        }
        Ok(())
    };
    let dimension = |vector: Json<'_>| -> (bool, usize) {
        match vector.kind() {
            Kind::String => (
                true,
                vector.string().and_then(|s| base64_len(&s)).unwrap_or(0) / 4,
            ),
            _ => (false, scan_numbers(vector, Elements::Float).unwrap_or(0)),
        }
    };

    // Ollama's list, or Cohere's when it is a plain `float[][]` (v1).
    let plain = match spec.vectors {
        Vectors::Member(member) => Some(member),
        Vectors::Cohere => Some("embeddings").filter(|m| is_plain(&docs, m)),
        _ => None,
    };
    match spec.vectors {
        Vectors::OpenAiData => {
            let mut items = Vec::new();
            let mut offset = 0;
            for (c, (_, object)) in docs.iter().enumerate() {
                let data = object
                    .as_ref()
                    .and_then(|o| o.present("data"))
                    .and_then(|d| d.objects())
                    .unwrap_or_default();
                let mut ordered: Vec<(u64, &Object<'_>)> = data
                    .iter()
                    .flatten()
                    .map(|item| {
                        (
                            item.present("index").and_then(|i| i.count()).unwrap_or(0),
                            item,
                        )
                    })
                    .collect();
                ordered.sort_by_key(|(i, _)| *i);
                for (index, item) in &ordered {
                    if let Some(vector) = item.present("embedding") {
                        let (base64, dim) = dimension(vector);
                        agree(&format!("chunk {c}, item {index}"), base64, dim)?;
                    }
                    items.push(rebuild(
                        item,
                        "",
                        &HashMap::from([("/index".to_string(), (offset + index).to_string())]),
                    ));
                }
                offset += ordered.len() as u64;
            }
            overrides.insert("/data".into(), format!("[{}]", items.join(",")));
        }
        Vectors::Member(_) | Vectors::Cohere if plain.is_some() => {
            let member = plain.unwrap_or("embeddings");
            let mut vectors = Vec::new();
            for (c, (_, object)) in docs.iter().enumerate() {
                for vector in object
                    .as_ref()
                    .and_then(|o| o.present(member))
                    .and_then(|v| v.array())
                    .unwrap_or_default()
                {
                    let (base64, dim) = dimension(vector);
                    agree(&format!("chunk {c}"), base64, dim)?;
                    vectors.push(vector.text());
                }
            }
            overrides.insert(format!("/{member}"), format!("[{}]", vectors.join(",")));
        }
        Vectors::Member(_) | Vectors::Cohere => {
            // Cohere keyed by type: each type's lists, concatenated.
            let first = docs[0]
                .1
                .as_ref()
                .and_then(|o| o.present("embeddings"))
                .and_then(|e| e.object());
            let types: Vec<String> = first
                .map(|f| f.keys().map(str::to_string).collect())
                .unwrap_or_default();
            let mut by_type = Vec::new();
            for kind in &types {
                let mut vectors = Vec::new();
                let mut dims: Option<usize> = None;
                for (c, (_, object)) in docs.iter().enumerate() {
                    let list = object
                        .as_ref()
                        .and_then(|o| o.present("embeddings"))
                        .and_then(|e| e.object())
                        .and_then(|e| e.present(kind))
                        .and_then(|l| l.array())
                        .unwrap_or_default();
                    for vector in list {
                        let dim = match vector.kind() {
                            Kind::String => {
                                vector.string().and_then(|s| base64_len(&s)).unwrap_or(0)
                            }
                            _ => scan_numbers(
                                vector,
                                Elements::Integer {
                                    min: i64::MIN,
                                    max: i64::MAX,
                                },
                            )
                            .or_else(|_| scan_numbers(vector, Elements::Float))
                            .unwrap_or(0),
                        };
                        if *dims.get_or_insert(dim) != dim {
                            return Err(mismatch(format!(
                                "chunk {c}: {kind} vectors of {dim}, expected {}",
                                dims.unwrap_or(0)
                            )));
                        }
                        vectors.push(vector.text());
                    }
                }
                by_type.push(format!(
                    "{}:[{}]",
                    serde_json::to_string(kind).unwrap_or_default(),
                    vectors.join(",")
                ));
            }
            overrides.insert("/embeddings".into(), format!("{{{}}}", by_type.join(",")));
        }
        Vectors::Root => {
            let mut vectors = Vec::new();
            for (c, (root, _)) in docs.iter().enumerate() {
                for vector in root.array().unwrap_or_default() {
                    let (base64, dim) = dimension(vector);
                    agree(&format!("chunk {c}"), base64, dim)?;
                    vectors.push(vector.text());
                }
            }
            overrides.insert(String::new(), format!("[{}]", vectors.join(",")));
        }
    }
    if spec.vectors == Vectors::Cohere {
        // Cohere echoes the texts: they are stitched like the vectors.
        let texts: Vec<&str> = docs
            .iter()
            .flat_map(|(_, o)| {
                o.as_ref()
                    .and_then(|o| o.present("texts"))
                    .and_then(|t| t.array())
                    .unwrap_or_default()
            })
            .map(|t| t.text())
            .collect();
        overrides.insert("/texts".into(), format!("[{}]", texts.join(",")));
    }

    // Figures: summed only when every chunk reported them well-formed.
    let mut nulled = Vec::new();
    for figure in table {
        let values: Vec<Option<Json<'_>>> = docs
            .iter()
            .map(|(_, o)| o.as_ref().and_then(|o| lookup(o, figure.pointer)))
            .collect();
        if values.iter().all(Option::is_none) {
            continue;
        }
        let stitched = match figure.domain {
            Domain::Id => values[0]
                .filter(|v| v.string().is_some_and(|s| !s.is_empty()))
                .map(|v| v.text().to_string()),
            Domain::Count => values
                .iter()
                .map(|v| v.and_then(|v| v.count()))
                .try_fold(0u64, |sum, n| n.and_then(|n| sum.checked_add(n)))
                .map(|n| n.to_string()),
            Domain::Number => values
                .iter()
                .map(|v| {
                    v.and_then(|v| v.number())
                        .filter(|n| *n >= 0.0 && !v.is_some_and(|v| v.text().starts_with('-')))
                })
                .try_fold(0f64, |sum, n| n.map(|n| sum + n))
                .map(|n| {
                    if n.fract() == 0.0 && n < 1e15 {
                        (n as u64).to_string()
                    } else {
                        n.to_string()
                    }
                }),
        };
        let exists = docs[0]
            .1
            .as_ref()
            .and_then(|o| lookup_any(o, figure.pointer))
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
    // A record whose every stitched figure became `null` collapses to
    // `null` as a whole, as a single call's does.
    let mut records: Vec<&str> = Vec::new();
    for record in table.iter().map(|f| f.record()) {
        if !record.is_empty() && !records.contains(&record) {
            records.push(record);
        }
    }
    for record in records {
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
    let body = match (&docs[0].1, overrides.get("")) {
        (_, Some(root)) => root.clone(),
        (Some(first), None) => rebuild(first, "", &overrides),
        (None, None) => return Err(mismatch("the first chunk is not an object".into())),
    };

    let mut headers = parts[0].headers.clone();
    headers.remove(http::header::CONTENT_LENGTH);
    for figure in header_table {
        let values: Vec<Option<u64>> = parts
            .iter()
            .map(|p| {
                p.headers
                    .get(figure.name)
                    .and_then(|v| v.to_str().ok())
                    .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|v| v.parse().ok())
            })
            .collect();
        if parts.iter().all(|p| !p.headers.contains_key(figure.name)) {
            continue;
        }
        match values
            .iter()
            .try_fold(0u64, |sum, n| n.and_then(|n| sum.checked_add(n)))
        {
            Some(sum) => {
                headers.insert(figure.name, HeaderValue::from(sum));
            }
            None => {
                headers.remove(figure.name);
                nulled.push(format!("header:{}", figure.name));
            }
        }
    }
    Ok(Stitched {
        body: Bytes::from(body),
        headers,
        nulled,
    })
}

/// Whether the vectors member is a plain array (not Cohere's by-type object).
fn is_plain(docs: &[(Json<'_>, Option<Object<'_>>)], member: &str) -> bool {
    docs[0]
        .1
        .as_ref()
        .and_then(|o| o.present(member))
        .is_some_and(|m| m.kind() == Kind::Array)
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
