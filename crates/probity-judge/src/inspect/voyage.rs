//! Voyage AI's `/v1/embeddings` (OpenAI's shape; `output_dtype` sets the
//! element type) and `/v1/rerank` (results under `data`, documents echoed
//! as strings).

use super::hosted::{self, Hosted};
use super::{Endpoint, Field, HeldInvariant, RequestShape, Response};
use crate::figures::Figure;
use crate::invariants::{self, EchoedDocument, Expect, Fault, Form, INT8, UINT8};
use crate::json::{Kind, Object};

/// `usage` is required: the voyageai SDK reads `usage.total_tokens`.
const FIGURES: &[Figure] = &[
    Figure::required("/usage"),
    Figure::count("/usage/total_tokens").tokens("total"),
];

/// `/v1/embeddings`: `input` a string or a list, `output_dimension`,
/// `output_dtype`, `encoding_format`.
const EMBEDDINGS_REQUEST: RequestShape = RequestShape {
    body: true,
    fields: &[
        Field::required("input", &[Kind::String, Kind::Array]),
        Field::optional("output_dimension", &[Kind::Number]),
        Field::optional("output_dtype", &[Kind::String]),
        Field::optional("encoding_format", &[Kind::String]),
    ],
};

/// `/v1/rerank`: `documents`, `top_k`, `return_documents`.
const RERANK_REQUEST: RequestShape = RequestShape {
    body: true,
    fields: &[
        Field::required("documents", &[Kind::Array]),
        Field::optional("top_k", &[Kind::Number]),
        Field::optional("return_documents", &[Kind::Bool]),
    ],
};

/// What `embeddings` holds (`invariants::openai_data`).
const EMBEDDINGS_HELD: &[HeldInvariant] = &super::data_held(
    "`data` holds one item per input (`input`: a string is 1, an array its length)",
    "every element is a finite number, or an integer in range for the integer and packed binary types",
    "a base64 vector (`encoding_format: \"base64\"`) is padded base64 of whole elements of `output_dtype`",
    "every vector has one length, `output_dimension` when set (a packed binary one an eighth of it)",
);

/// What `rerank` holds (`invariants::ranking`).
const RERANK_HELD: &[HeldInvariant] = &super::ranking_held(
    "the body has a `data` array",
    "at most one result per document, and at most `top_k` when set",
    "with `return_documents: true`, each result echoes its `document` as a string",
);

const EMBEDDINGS: Endpoint =
    hosted::embeddings(&EMBEDDINGS_REQUEST, (embeddings, EMBEDDINGS_HELD), FIGURES);
const RERANK: Endpoint = hosted::rerank(&RERANK_REQUEST, (rerank, RERANK_HELD), FIGURES);

pub(super) const VOYAGE: Hosted = Hosted {
    name: "voyage",
    endpoints: &[("/embeddings", &EMBEDDINGS), ("/rerank", &RERANK)],
};

/// With `encoding_format: "base64"`, a vector decodes to float32 (4 bytes a
/// dimension) or one byte per element for the integer types; binary types
/// pack 8 dimensions per byte.
fn embeddings(request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let dimensions = invariants::optional_count(request, "output_dimension")?;
    let dtype = invariants::text(request, "output_dtype")?;
    let base64 = invariants::text(request, "encoding_format")?.as_deref() == Some("base64");
    let (element, packed, bytes) = match dtype.as_deref() {
        None | Some("float") => (Form::Float, false, 4),
        Some("int8") => (INT8, false, 1),
        Some("uint8") => (UINT8, false, 1),
        Some("binary") => (INT8, true, 1),
        Some("ubinary") => (UINT8, true, 1),
        Some(_) => return Err(Fault::Uninspectable(invariants::REQUEST_SHAPE)),
    };
    let form = if base64 {
        Form::Base64 {
            bytes_per_dim: bytes,
        }
    } else {
        element
    };
    let expect = Expect {
        count: invariants::count_inputs(request.present("input"))?,
        dimension: dimensions.map(|d| if packed { d / 8 } else { d }),
    };
    invariants::openai_data(response.object()?, expect, form)?;
    Ok(())
}

fn rerank(request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let expect = invariants::document_ranking(request, "top_k", false, EchoedDocument::String)?;
    invariants::ranking("data", response.object()?.get("data"), expect)?;
    Ok(())
}
