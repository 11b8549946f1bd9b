//! Jina AI's `/v1/embeddings` (OpenAI's shape, plus packed binary types) and
//! `/v1/rerank` (which echoes documents by default).

use super::hosted::{self, Hosted};
use super::{Endpoint, Field, HeldInvariant, RequestShape, Response};
use crate::figures::Figure;
use crate::invariants::{self, EchoedDocument, Expect, Fault, Form, INT8, UINT8};
use crate::json::{Kind, Object};

/// `usage` is required in Jina's API schema.
const FIGURES: &[Figure] = &[
    Figure::required("/usage"),
    Figure::count("/usage/total_tokens").tokens("total"),
    Figure::count("/usage/prompt_tokens").tokens("input"),
];

/// `/v1/embeddings`: `input` (strings, or `{text}`/`{image}` objects),
/// `dimensions`, `embedding_type` (one type, or a list of them).
const EMBEDDINGS_REQUEST: RequestShape = RequestShape {
    body: true,
    fields: &[
        Field::required("input", &[Kind::String, Kind::Array]),
        Field::optional("dimensions", &[Kind::Number]),
        Field::optional("embedding_type", &[Kind::String, Kind::Array]),
    ],
};

/// `/v1/rerank`: `documents`, `top_n`, `return_documents`.
const RERANK_REQUEST: RequestShape = RequestShape {
    body: true,
    fields: &[
        Field::required("documents", &[Kind::Array]),
        Field::optional("top_n", &[Kind::Number]),
        Field::optional("return_documents", &[Kind::Bool]),
    ],
};

/// What `embeddings` holds (`invariants::openai_data`).
const EMBEDDINGS_HELD: &[HeldInvariant] = &super::data_held(
    "`data` holds one item per input (`input`: a string is 1, an array its length)",
    "every element is a finite number, or an integer in range for the integer and packed binary types",
    "a `base64` vector is padded base64 of whole float32s",
    "every vector has one length, `dimensions` when set (a packed binary one an eighth of it)",
);

/// What `rerank` holds (`invariants::ranking`).
const RERANK_HELD: &[HeldInvariant] = &super::ranking_held(
    "the body has a `results` array",
    "at most one result per document, and at most `top_n` when set",
    "by default (`return_documents` unset or `true`), each result echoes its `document` as `{\"text\": …}`",
);

const EMBEDDINGS: Endpoint =
    hosted::embeddings(&EMBEDDINGS_REQUEST, (embeddings, EMBEDDINGS_HELD), FIGURES);
const RERANK: Endpoint = hosted::rerank(&RERANK_REQUEST, (rerank, RERANK_HELD), FIGURES);

pub(super) const JINA: Hosted = Hosted {
    name: "jina",
    endpoints: &[("/embeddings", &EMBEDDINGS), ("/rerank", &RERANK)],
};

/// `embedding_type` picks the form: floats, base64 of float32, or packed
/// binary (8 dimensions per element).
fn embeddings(request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let dimensions = invariants::optional_count(request, "dimensions")?;
    let kind = invariants::text(request, "embedding_type")?;
    let (form, dimension) = match kind.as_deref() {
        None | Some("float") => (Form::FloatOrBase64, dimensions),
        Some("base64") => (Form::Base64 { bytes_per_dim: 4 }, dimensions),
        Some("binary") => (INT8, dimensions.map(|d| d / 8)),
        Some("ubinary") => (UINT8, dimensions.map(|d| d / 8)),
        Some(_) => return Err(Fault::Uninspectable(invariants::REQUEST_SHAPE)),
    };
    let expect = Expect {
        count: invariants::count_inputs(request.present("input"))?,
        dimension,
    };
    invariants::openai_data(response.object()?, expect, form)?;
    Ok(())
}

fn rerank(request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let expect = invariants::document_ranking(request, "top_n", true, EchoedDocument::Object)?;
    invariants::ranking("results", response.object()?.get("results"), expect)?;
    Ok(())
}
