//! Payload invariants: the shape of the result the app asked for. Breaking
//! one means the result is corrupt (a vector missing, a ranking pointing at a
//! document that does not exist), so the call fails with
//! `provider_invalid_response` rather than handing it to the app.
//!
//! These are the building blocks; each dialect (`inspect/<provider>.rs`)
//! composes them for its endpoints. Score order and score range are not
//! invariants: raw logits and unsorted results are legitimate in the wild.

use std::collections::HashSet;

use crate::json::{base64_len, scan_numbers, Elements, Json, Kind, NumberFault, Object};
use crate::violation::{Invariant, Violation};

/// Why a check did not produce a verdict on the payload.
#[derive(Debug)]
pub(crate) enum Fault {
    /// The payload is corrupt.
    Invalid(Violation),
    /// The request has a shape probity cannot read (the provider will reject
    /// it); the response passes unchecked. The reason is a metric label.
    Uninspectable(&'static str),
}

impl From<Violation> for Fault {
    fn from(violation: Violation) -> Self {
        Fault::Invalid(violation)
    }
}

pub(crate) fn violation(invariant: Invariant, message: String) -> Violation {
    Violation { invariant, message }
}

/// The reason label for a request whose fields cannot be read.
pub(crate) const REQUEST_SHAPE: &str = "request_shape";

/// The reason label for a request that is not a JSON object (an empty body
/// included, where the endpoint takes one).
pub(crate) const REQUEST_NOT_JSON: &str = "request_not_json";

// ------------------------------------------------------------------ request

/// The number of inputs, counted the OpenAI way: a string is one input, an
/// array its length, except that an array of token ids (`int[]`) is one.
pub(crate) fn count_inputs(value: Option<Json<'_>>) -> Result<usize, Fault> {
    let value = value.ok_or(Fault::Uninspectable(REQUEST_SHAPE))?;
    match value.kind() {
        Kind::String => Ok(1),
        Kind::Array => {
            let items = value.array().ok_or(Fault::Uninspectable(REQUEST_SHAPE))?;
            match items.first() {
                Some(first) if first.kind() == Kind::Number => Ok(1),
                _ => Ok(items.len()),
            }
        }
        _ => Err(Fault::Uninspectable(REQUEST_SHAPE)),
    }
}

/// The length of an array member, e.g. `documents`.
pub(crate) fn count_array(request: &Object<'_>, key: &str) -> Result<usize, Fault> {
    request
        .present(key)
        .and_then(|v| v.array())
        .map(|a| a.len())
        .ok_or(Fault::Uninspectable(REQUEST_SHAPE))
}

/// An optional non-negative integer member, e.g. `dimensions` or `top_n`.
pub(crate) fn optional_count(request: &Object<'_>, key: &str) -> Result<Option<usize>, Fault> {
    match request.present(key) {
        None => Ok(None),
        Some(value) => value
            .count()
            .and_then(|n| usize::try_from(n).ok())
            .map(Some)
            .ok_or(Fault::Uninspectable(REQUEST_SHAPE)),
    }
}

/// An optional boolean member with its default.
pub(crate) fn flag(request: &Object<'_>, key: &str, default: bool) -> Result<bool, Fault> {
    match request.present(key) {
        None => Ok(default),
        Some(value) => value.boolean().ok_or(Fault::Uninspectable(REQUEST_SHAPE)),
    }
}

/// An optional string member.
pub(crate) fn text<'a>(
    request: &Object<'a>,
    key: &str,
) -> Result<Option<std::borrow::Cow<'a, str>>, Fault> {
    match request.present(key) {
        None => Ok(None),
        Some(value) => value
            .string()
            .map(Some)
            .ok_or(Fault::Uninspectable(REQUEST_SHAPE)),
    }
}

// ------------------------------------------------------------------ vectors

/// How a vector is written, and so how its dimension is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// An array of finite numbers.
    Float,
    /// An array of integers in a range (Cohere/Voyage int8, uint8 and the
    /// packed binary/ubinary forms).
    Integer { min: i64, max: i64 },
    /// A padded base64 string of `bytes_per_dim`-byte elements (float32: 4).
    Base64 { bytes_per_dim: usize },
    /// Either an array of numbers or base64 of float32, judged per vector:
    /// servers that ignore `encoding_format` are tolerated by clients too.
    FloatOrBase64,
}

pub(crate) const INT8: Form = Form::Integer {
    min: -128,
    max: 127,
};
pub(crate) const UINT8: Form = Form::Integer { min: 0, max: 255 };

/// The dimension of one vector, checking each element.
pub(crate) fn dimension(
    vector: Json<'_>,
    form: Form,
    label: &dyn Fn() -> String,
) -> Result<usize, Violation> {
    let form = match (form, vector.kind()) {
        (Form::FloatOrBase64, Kind::String) => Form::Base64 { bytes_per_dim: 4 },
        (Form::FloatOrBase64, _) => Form::Float,
        (form, _) => form,
    };
    match form {
        Form::Float | Form::Integer { .. } | Form::FloatOrBase64 => {
            let elements = match form {
                Form::Integer { min, max } => Elements::Integer { min, max },
                _ => Elements::Float,
            };
            scan_numbers(vector, elements).map_err(|fault| {
                let what = match fault {
                    NumberFault::NotArray => "is not an array of numbers".to_string(),
                    NumberFault::NotNumber(i) => format!("element {i} is not a number"),
                    NumberFault::NotFinite(i) => format!("element {i} is not a finite number"),
                    NumberFault::OutOfRange(i) => {
                        format!("element {i} is not an integer in the type's range")
                    }
                };
                violation(
                    Invariant::EmbeddingValueInvalid,
                    format!("{}: {what}", label()),
                )
            })
        }
        Form::Base64 { bytes_per_dim } => {
            let decoded = vector.string().and_then(|s| base64_len(&s));
            match decoded {
                Some(len) if len > 0 && len % bytes_per_dim == 0 => Ok(len / bytes_per_dim),
                Some(len) => Err(violation(
                    Invariant::EmbeddingBase64Invalid,
                    format!(
                        "{}: decodes to {len} bytes, not a non-zero multiple of {bytes_per_dim}",
                        label()
                    ),
                )),
                None => Err(violation(
                    Invariant::EmbeddingBase64Invalid,
                    format!("{}: is not padded standard base64", label()),
                )),
            }
        }
    }
}

/// What a list of vectors must hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expect {
    /// One vector per input.
    pub(crate) count: usize,
    /// The dimension every vector must have, when the request fixed it.
    pub(crate) dimension: Option<usize>,
}

/// Checks a list of vectors: one per input, each well formed, all of one
/// dimension (the requested one, if any). Returns that dimension.
pub(crate) fn vector_list(
    name: &str,
    list: Option<Json<'_>>,
    expect: Expect,
    form: Form,
) -> Result<Option<usize>, Violation> {
    let vectors = list.and_then(|l| l.array()).ok_or_else(|| {
        violation(
            Invariant::PayloadMissing,
            format!("the response has no array of vectors at {name}"),
        )
    })?;
    count_matches(vectors.len(), expect.count)?;
    let mut first: Option<usize> = None;
    for (i, vector) in vectors.iter().enumerate() {
        let dim = dimension(*vector, form, &|| format!("{name}[{i}]"))?;
        same_dimension(&mut first, dim, expect.dimension, &|| {
            format!("{name}[{i}]")
        })?;
    }
    Ok(first)
}

pub(crate) fn count_matches(found: usize, inputs: usize) -> Result<(), Violation> {
    if found == inputs {
        Ok(())
    } else {
        Err(violation(
            Invariant::EmbeddingCountMismatch,
            format!("expected {inputs} vectors for {inputs} inputs, got {found}"),
        ))
    }
}

fn same_dimension(
    first: &mut Option<usize>,
    dim: usize,
    requested: Option<usize>,
    label: &dyn Fn() -> String,
) -> Result<(), Violation> {
    if let Some(requested) = requested {
        if dim != requested {
            return Err(violation(
                Invariant::EmbeddingDimensionMismatch,
                format!(
                    "expected {requested} dimensions as requested, {} has {dim}",
                    label()
                ),
            ));
        }
    }
    match *first {
        None => *first = Some(dim),
        Some(d) if d != dim => {
            return Err(violation(
                Invariant::EmbeddingDimensionMismatch,
                format!(
                    "vectors differ in length: the first has {d} dimensions, {} has {dim}",
                    label()
                ),
            ))
        }
        Some(_) => {}
    }
    Ok(())
}

/// The OpenAI embeddings payload: `data` holds one `{index, embedding}` item
/// per input, each index in `0..n` exactly once.
pub(crate) fn openai_data(root: &Object<'_>, expect: Expect, form: Form) -> Result<(), Violation> {
    let items = root
        .present("data")
        .and_then(|d| d.objects())
        .ok_or_else(|| {
            violation(
                Invariant::PayloadMissing,
                "the response has no `data` array".into(),
            )
        })?;
    count_matches(items.len(), expect.count)?;
    let mut seen = vec![false; items.len()];
    let mut first: Option<usize> = None;
    for (i, item) in items.iter().enumerate() {
        let item = item.as_ref().ok_or_else(|| {
            violation(
                Invariant::EmbeddingItemInvalid,
                format!("data[{i}] is not an object"),
            )
        })?;
        let index = item.present("index").and_then(|v| v.count());
        match index.and_then(|x| usize::try_from(x).ok()) {
            Some(x) if seen.get(x) == Some(&false) => {
                if let Some(slot) = seen.get_mut(x) {
                    *slot = true;
                }
            }
            Some(x) if x < seen.len() => {
                return Err(violation(
                    Invariant::EmbeddingIndexInvalid,
                    format!("data[{i}].index {x} appears twice"),
                ))
            }
            _ => {
                return Err(violation(
                    Invariant::EmbeddingIndexInvalid,
                    format!(
                        "data[{i}].index is {}, expected an integer in 0..{}",
                        item.get("index").map_or("absent", |v| v.text()),
                        items.len()
                    ),
                ))
            }
        }
        let vector = item.present("embedding").ok_or_else(|| {
            violation(
                Invariant::EmbeddingItemInvalid,
                format!("data[{i}] has no embedding"),
            )
        })?;
        let label = || format!("data[{i}].embedding");
        let dim = dimension(vector, form, &label)?;
        same_dimension(&mut first, dim, expect.dimension, &label)?;
    }
    Ok(())
}

// ------------------------------------------------------------------ generation

/// Checks `choices`: exactly `expected` objects, each `index` in
/// `0..expected` once, each passing `each` (its own shape).
pub(crate) fn choices(
    root: &Object<'_>,
    expected: usize,
    what: &str,
    each: impl Fn(usize, &Object<'_>) -> Result<(), Violation>,
) -> Result<(), Violation> {
    let choices = root
        .present("choices")
        .and_then(|c| c.objects())
        .ok_or_else(|| {
            violation(
                Invariant::PayloadMissing,
                "the response has no `choices` array".into(),
            )
        })?;
    if choices.len() != expected {
        return Err(violation(
            Invariant::ChoiceCountMismatch,
            format!(
                "expected {expected} choices ({what}), got {}",
                choices.len()
            ),
        ));
    }
    let mut seen = vec![false; expected];
    for (i, choice) in choices.iter().enumerate() {
        let choice = choice.as_ref().ok_or_else(|| {
            violation(
                Invariant::ChoiceInvalid,
                format!("choices[{i}] is not an object"),
            )
        })?;
        match choice
            .present("index")
            .and_then(|v| v.count())
            .map(|x| x as usize)
        {
            Some(x) if x < expected && seen.get(x) == Some(&false) => {
                if let Some(slot) = seen.get_mut(x) {
                    *slot = true;
                }
            }
            _ => {
                return Err(violation(
                    Invariant::ChoiceIndexInvalid,
                    format!(
                        "choices[{i}].index is {}, expected each of 0..{expected} once",
                        choice.get("index").map_or("absent", |v| v.text())
                    ),
                ))
            }
        }
        each(i, choice)?;
    }
    Ok(())
}

/// A member that must be present with a kind, else `payload_missing`.
pub(crate) fn member<'a>(
    object: &Object<'a>,
    key: &str,
    kind: Kind,
    invariant: Invariant,
    at: &dyn Fn() -> String,
) -> Result<Json<'a>, Violation> {
    match object.get(key) {
        Some(value) if value.kind() == kind => Ok(value),
        found => {
            let wanted = match kind {
                Kind::Object => "an object",
                Kind::Array => "an array",
                Kind::String => "a string",
                Kind::Number => "a number",
                Kind::Bool => "a boolean",
                Kind::Null => "null",
            };
            let found = found.map_or("absent".to_string(), |v| {
                format!("{:?}", v.kind()).to_lowercase()
            });
            Err(violation(
                invariant,
                format!("{} should be {wanted}, found {found}", at()),
            ))
        }
    }
}

// ------------------------------------------------------------------ rerank

/// How a result echoes its document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Echo {
    /// Not requested: whatever is there is not looked at.
    Unchecked,
    /// May be there; when it is, it has this form.
    Optional(EchoedDocument),
    /// Requested: every result carries it in this form.
    Required(EchoedDocument),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EchoedDocument {
    /// `{"text": ...}` (Cohere v1, Jina, vLLM).
    Object,
    /// A plain string (Voyage, TEI's `text`).
    String,
}

/// What a rerank response must hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ranking {
    /// Documents in the request: every index points at one of them.
    pub(crate) documents: usize,
    /// `top_n` / `top_k`, when set (0 means all).
    pub(crate) limit: Option<usize>,
    /// The member holding the score: `relevance_score`, or TEI's `score`.
    pub(crate) score: &'static str,
    /// The member holding the echoed document: `document`, or TEI's `text`.
    pub(crate) document: &'static str,
    pub(crate) echo: Echo,
}

/// What the usual rerank request asks for: its `documents`, a limit
/// (`top_n`, or Voyage's `top_k`), and with `return_documents` (whose
/// default differs by provider) an echo of each document in `form`.
pub(crate) fn document_ranking(
    request: &Object<'_>,
    limit: &str,
    echoed_by_default: bool,
    form: EchoedDocument,
) -> Result<Ranking, Fault> {
    let echo = if flag(request, "return_documents", echoed_by_default)? {
        Echo::Required(form)
    } else {
        Echo::Unchecked
    };
    Ok(Ranking {
        documents: count_array(request, "documents")?,
        limit: optional_count(request, limit)?,
        score: "relevance_score",
        document: "document",
        echo,
    })
}

/// Checks ranked results: at most `limit` and `documents` of them, each an
/// object whose index points at a distinct document, with a finite score
/// and, when echoed, a document of the right form.
pub(crate) fn ranking(
    name: &str,
    results: Option<Json<'_>>,
    expect: Ranking,
) -> Result<(), Violation> {
    let results = results.and_then(|r| r.objects()).ok_or_else(|| {
        violation(
            Invariant::PayloadMissing,
            format!("the response has no array of results at {name}"),
        )
    })?;
    let limit = match expect.limit {
        Some(n) if n > 0 => n.min(expect.documents),
        _ => expect.documents,
    };
    if results.len() > limit {
        return Err(violation(
            Invariant::RerankCountExceeded,
            format!(
                "expected at most {limit} results ({} documents, top {}), got {}",
                expect.documents,
                expect.limit.map_or("unset".to_string(), |n| n.to_string()),
                results.len()
            ),
        ));
    }
    let mut seen = HashSet::with_capacity(results.len());
    for (i, result) in results.iter().enumerate() {
        let result = result.as_ref().ok_or_else(|| {
            violation(
                Invariant::RerankResultInvalid,
                format!("{name}[{i}] is not an object"),
            )
        })?;
        let index = result
            .present("index")
            .and_then(|v| v.count())
            .ok_or_else(|| {
                violation(
                    Invariant::RerankResultInvalid,
                    format!("{name}[{i}].index is not a non-negative integer"),
                )
            })?;
        if index >= expect.documents as u64 {
            return Err(violation(
                Invariant::RerankIndexOutOfRange,
                format!(
                    "{name}[{i}].index is {index}, expected 0..{} (one per document)",
                    expect.documents
                ),
            ));
        }
        if !seen.insert(index) {
            return Err(violation(
                Invariant::RerankIndexDuplicate,
                format!("{name}[{i}].index {index} ranks the same document twice"),
            ));
        }
        if result
            .present(expect.score)
            .and_then(|s| s.number())
            .is_none()
        {
            return Err(violation(
                Invariant::RerankScoreInvalid,
                format!("{name}[{i}].{} is not a finite number", expect.score),
            ));
        }
        echoed_document(name, i, result, &expect)?;
    }
    Ok(())
}

/// A result's echoed document, when documents were requested: present
/// (if required) and of the provider's form.
fn echoed_document(
    name: &str,
    i: usize,
    result: &Object<'_>,
    expect: &Ranking,
) -> Result<(), Violation> {
    let (form, required) = match expect.echo {
        Echo::Unchecked => return Ok(()),
        Echo::Optional(form) => (form, false),
        Echo::Required(form) => (form, true),
    };
    let fits = match (result.present(expect.document), form) {
        (None, _) => !required,
        (Some(d), EchoedDocument::Object) => d.kind() == Kind::Object,
        (Some(d), EchoedDocument::String) => d.kind() == Kind::String,
    };
    if fits {
        return Ok(());
    }
    let wanted = match form {
        EchoedDocument::Object => "an object",
        EchoedDocument::String => "a string",
    };
    Err(violation(
        Invariant::RerankDocumentInvalid,
        format!(
            "{name}[{i}].{} should be {wanted} (documents were requested)",
            expect.document
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(text: &'static str) -> Json<'static> {
        Json::leak(text.as_bytes())
    }

    #[test]
    fn inputs_are_counted_the_openai_way() {
        assert_eq!(count_inputs(Some(json(r#""one""#))).unwrap(), 1);
        assert_eq!(count_inputs(Some(json(r#"["a","b"]"#))).unwrap(), 2);
        assert_eq!(count_inputs(Some(json("[1,2,3]"))).unwrap(), 1);
        assert_eq!(count_inputs(Some(json("[[1],[2]]"))).unwrap(), 2);
        assert!(matches!(
            count_inputs(Some(json("5"))),
            Err(Fault::Uninspectable(_))
        ));
        assert!(matches!(count_inputs(None), Err(Fault::Uninspectable(_))));
    }

    fn code(result: Result<impl std::fmt::Debug, Violation>) -> &'static str {
        result.err().map_or("ok", |v| v.invariant.as_str())
    }

    #[test]
    fn openai_data_checks_count_index_and_dimension() {
        let check = |body: &'static str, n, dim| {
            let root = json(body).object().unwrap();
            code(openai_data(
                &root,
                Expect {
                    count: n,
                    dimension: dim,
                },
                Form::FloatOrBase64,
            ))
        };
        let two =
            r#"{"data":[{"index":1,"embedding":[1,2]},{"index":0,"embedding":"AACAPwAAAEA="}]}"#;
        assert_eq!(check(two, 2, None), "ok");
        assert_eq!(check(two, 2, Some(2)), "ok");
        assert_eq!(check(two, 2, Some(3)), "embedding_dimension_mismatch");
        assert_eq!(check(two, 3, None), "embedding_count_mismatch");
        assert_eq!(
            check(
                r#"{"data":[{"index":0,"embedding":[1]},{"index":0,"embedding":[1]}]}"#,
                2,
                None
            ),
            "embedding_index_invalid"
        );
        assert_eq!(
            check(
                r#"{"data":[{"index":2,"embedding":[1]},{"index":0,"embedding":[1]}]}"#,
                2,
                None
            ),
            "embedding_index_invalid"
        );
        assert_eq!(
            check(
                r#"{"data":[{"index":0,"embedding":[1]},{"index":1,"embedding":[1,2]}]}"#,
                2,
                None
            ),
            "embedding_dimension_mismatch"
        );
        assert_eq!(
            check(r#"{"data":[{"index":0,"embedding":[1,"x"]}]}"#, 1, None),
            "embedding_value_invalid"
        );
        assert_eq!(
            check(r#"{"data":[{"index":0,"embedding":"AAA="}]}"#, 1, None),
            "embedding_base64_invalid"
        );
        assert_eq!(
            check(
                r#"{"data":[{"index":0,"embedding":"not base64!"}]}"#,
                1,
                None
            ),
            "embedding_base64_invalid"
        );
        assert_eq!(
            check(r#"{"data":[{"index":0}]}"#, 1, None),
            "embedding_item_invalid"
        );
        assert_eq!(check(r#"{"data":[7]}"#, 1, None), "embedding_item_invalid");
        assert_eq!(check(r#"{"data":{}}"#, 1, None), "payload_missing");
    }

    #[test]
    fn rankings_check_count_index_score_and_echo() {
        let expect = Ranking {
            documents: 3,
            limit: Some(2),
            score: "relevance_score",
            document: "document",
            echo: Echo::Required(EchoedDocument::Object),
        };
        let check = |body: &'static str, expect: Ranking| {
            code(ranking("results", Some(json(body)), expect))
        };
        let good = r#"[{"index":2,"relevance_score":-3.5,"document":{"text":"c"}},{"index":0,"relevance_score":0.1,"document":{"text":"a"}}]"#;
        assert_eq!(check(good, expect), "ok");
        assert_eq!(
            check(
                good,
                Ranking {
                    limit: Some(1),
                    ..expect
                }
            ),
            "rerank_count_exceeded"
        );
        assert_eq!(
            check(
                good,
                Ranking {
                    documents: 2,
                    limit: None,
                    ..expect
                }
            ),
            "rerank_index_out_of_range"
        );
        assert_eq!(
            check(
                r#"[{"index":1,"relevance_score":1,"document":{}},{"index":1,"relevance_score":1,"document":{}}]"#,
                expect
            ),
            "rerank_index_duplicate"
        );
        assert_eq!(
            check(
                r#"[{"index":1,"relevance_score":"1","document":{}}]"#,
                expect
            ),
            "rerank_score_invalid"
        );
        assert_eq!(
            check(
                r#"[{"index":1,"relevance_score":1,"document":"a"}]"#,
                expect
            ),
            "rerank_document_invalid"
        );
        assert_eq!(
            check(r#"[{"index":1,"relevance_score":1}]"#, expect),
            "rerank_document_invalid"
        );
        assert_eq!(
            check(
                r#"[{"index":1,"relevance_score":1}]"#,
                Ranking {
                    echo: Echo::Optional(EchoedDocument::Object),
                    ..expect
                }
            ),
            "ok"
        );
        assert_eq!(
            check(r#"[{"index":-1,"relevance_score":1}]"#, expect),
            "rerank_result_invalid"
        );
        assert_eq!(check(r#"[5]"#, expect), "rerank_result_invalid");
        assert_eq!(check(r#"{}"#, expect), "payload_missing");
    }
}
