//! Jina AI's `/v1/embeddings` (OpenAI's shape, plus packed binary types) and
//! `/v1/rerank` (which echoes documents by default).

use super::{Dialect, Endpoint, Response};
use crate::batch::{BatchSpec, Vectors};
use crate::figures::Figure;
use crate::invariants::{self, Document, Expect, Fault, Form, INT8, UINT8};
use crate::json::Object;

pub(super) struct Jina;

/// `usage` is required in Jina's API schema.
const FIGURES: &[Figure] = &[
    Figure::required("/usage"),
    Figure::count("/usage/total_tokens").tokens("total"),
    Figure::count("/usage/prompt_tokens").tokens("input"),
];

const EMBEDDINGS: Endpoint = Endpoint {
    operation: "embeddings",
    check: embeddings,
    figures: FIGURES,
    header_figures: &[],
    stream: None,
    output: None,
    batch: Some(BatchSpec {
        inputs: &["input"],
        vectors: Vectors::OPENAI_DATA,
    }),
};

const RERANK: Endpoint = Endpoint {
    operation: "rerank",
    check: rerank,
    figures: FIGURES,
    header_figures: &[],
    stream: None,
    output: None,
    batch: None,
};

impl Dialect for Jina {
    fn name(&self) -> &'static str {
        "jina"
    }

    fn error_envelope(&self) -> super::Envelope {
        super::Envelope::Flat {
            message: "detail",
            kind: None,
        }
    }

    fn unreachable_hint(&self) -> &'static str {
        super::HOSTED_HINT
    }

    fn endpoints(&self) -> super::Endpoints {
        &[("/embeddings", &EMBEDDINGS), ("/rerank", &RERANK)]
    }
}

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
    let expect = invariants::document_ranking(request, "top_n", true, Document::Object)?;
    invariants::ranking("results", response.object()?.get("results"), expect)?;
    Ok(())
}
