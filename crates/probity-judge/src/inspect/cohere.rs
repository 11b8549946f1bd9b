//! Cohere's embed (`/v1/embed`, `/v2/embed`), rerank (`/v1/rerank`,
//! `/v2/rerank`) and chat (`/v2/chat`, in `chat`). Cohere types its `meta`
//! and `usage` figures as numbers, so a non-negative finite number is
//! well-formed there.

mod chat;

use super::{held, Dialect, Endpoint, Field, HeldInvariant, RequestShape, Response};
use crate::batch::{BatchSpec, Item, Vectors};
use crate::figures::Figure;
use crate::invariants::{self, EchoedDocument, Expect, Fault, Form, INT8, UINT8};
use crate::json::{Kind, Object};
use crate::violation::Invariant;

/// `embeddings`: a plain `float[][]` (v1 without `embedding_types`) or
/// lists keyed by type; `texts` echoed one per input.
const COHERE_VECTORS: Vectors = Vectors {
    list: "embeddings",
    item: Item::Vector,
    by_type: true,
    echoed: &["texts"],
};

pub(super) struct Cohere;

pub(super) const EMBED_FIGURES: &[Figure] = &[
    Figure::id("/id"),
    Figure::number("/meta/billed_units/input_tokens").tokens("billed_input"),
    Figure::number("/meta/billed_units/images"),
    Figure::number("/meta/billed_units/image_tokens").tokens("billed_image"),
    Figure::number("/meta/tokens/input_tokens").tokens("input"),
    Figure::number("/meta/tokens/output_tokens").tokens("output"),
];

/// `/embed` (v1 and v2, and Bedrock's `invoke` on Cohere Embed): the
/// inputs in `texts`, `images` or `inputs`, `output_dimension`, the
/// `embedding_types` asked.
pub(super) const EMBED_REQUEST: RequestShape = RequestShape {
    body: true,
    fields: &[
        Field::optional("texts", &[Kind::Array]),
        Field::optional("images", &[Kind::Array]),
        Field::optional("inputs", &[Kind::Array]),
        Field::optional("output_dimension", &[Kind::Number]),
        Field::optional("embedding_types", &[Kind::Array]),
    ],
};

/// `/rerank`: `documents` (strings or objects), `top_n`, `return_documents`.
const RERANK_REQUEST: RequestShape = RequestShape {
    body: true,
    fields: &[
        Field::required("documents", &[Kind::Array]),
        Field::optional("top_n", &[Kind::Number]),
        Field::optional("return_documents", &[Kind::Bool]),
    ],
};

/// What `embed` holds: `embeddings` a list of vectors (v1 without
/// `embedding_types`) or an object of one list per asked type. Bedrock's
/// `invoke` on Cohere Embed holds it too.
pub(super) const EMBED_HELD: &[HeldInvariant] = &[
    held(
        Invariant::PayloadMissing,
        "`embeddings` is a list of vectors (v1 without `embedding_types`), else an object with a list per asked type",
    ),
    held(
        Invariant::EmbeddingCountMismatch,
        "each list holds one vector per input of `texts`, `images` or `inputs`",
    ),
    held(
        Invariant::EmbeddingValueInvalid,
        "each element is a finite number (`float`), an integer in range (`int8`, `uint8`, `binary`, `ubinary`)",
    ),
    held(Invariant::EmbeddingBase64Invalid, "a `base64` vector is padded base64 of whole float32s"),
    held(
        Invariant::EmbeddingDimensionMismatch,
        "every vector has one length, `output_dimension` when set (a packed binary one an eighth of it), across the types too",
    ),
];

const EMBED_V1: Endpoint = Endpoint {
    operation: "embeddings",
    request: &EMBED_REQUEST,
    check: |request, response| embed(request, response, true),
    invariants: EMBED_HELD,
    figures: EMBED_FIGURES,
    relations: &[],
    header_figures: &[],
    stream: None,
    output: None,
    batch: Some(BatchSpec {
        inputs: &["texts", "inputs", "images"],
        vectors: COHERE_VECTORS,
        request: &EMBED_REQUEST,
    }),
};

const EMBED: Endpoint = Endpoint {
    operation: "embeddings",
    request: &EMBED_REQUEST,
    check: |request, response| embed(request, response, false),
    invariants: EMBED_HELD,
    figures: EMBED_FIGURES,
    relations: &[],
    header_figures: &[],
    stream: None,
    output: None,
    batch: Some(BatchSpec {
        inputs: &["texts", "inputs", "images"],
        vectors: COHERE_VECTORS,
        request: &EMBED_REQUEST,
    }),
};

const RERANK: Endpoint = Endpoint {
    operation: "rerank",
    request: &RERANK_REQUEST,
    check: rerank,
    invariants: &super::ranking_held(
        "the body has a `results` array",
        "at most one result per document, and at most `top_n` when set",
        "with `return_documents: true`, each result echoes its `document` as `{\"text\": …}`",
    ),
    figures: &[
        Figure::id("/id"),
        Figure::number("/meta/billed_units/search_units"),
        Figure::number("/meta/tokens/input_tokens").tokens("input"),
        Figure::number("/meta/tokens/output_tokens").tokens("output"),
    ],
    relations: &[],
    header_figures: &[],
    stream: None,
    output: None,
    batch: None,
};

impl Dialect for Cohere {
    fn name(&self) -> &'static str {
        "cohere"
    }

    fn error_envelope(&self) -> super::Envelope {
        super::Envelope::Flat {
            message: "message",
            kind: None,
        }
    }

    fn unreachable_hint(&self) -> &'static str {
        super::HOSTED_HINT
    }

    fn endpoints(&self) -> super::Endpoints {
        &[
            ("/v1/embed", &EMBED_V1),
            ("/embed", &EMBED),
            ("/rerank", &RERANK),
            ("/v2/chat", &chat::CHAT),
        ]
    }
}

/// One vector per text (or image, or v2 input) for each requested embedding
/// type. v1 without `embedding_types` answers a plain `float[][]`
/// (`embeddings_floats`); otherwise `embeddings` is keyed by type.
pub(super) fn embed(request: &Object<'_>, response: &Response<'_>, v1: bool) -> Result<(), Fault> {
    let count = ["texts", "images", "inputs"]
        .iter()
        .find_map(|key| {
            request
                .present(key)
                .and_then(|v| v.array())
                .map(|a| a.len())
        })
        .ok_or(Fault::Uninspectable(invariants::REQUEST_SHAPE))?;
    let dimension = invariants::optional_count(request, "output_dimension")?;
    let plain = v1 && request.present("embedding_types").is_none();
    let types: Vec<String> = match request.present("embedding_types") {
        None => vec!["float".into()],
        Some(list) => list
            .array()
            .ok_or(Fault::Uninspectable(invariants::REQUEST_SHAPE))?
            .iter()
            .map(|t| t.string().map(|s| s.into_owned()))
            .collect::<Option<_>>()
            .ok_or(Fault::Uninspectable(invariants::REQUEST_SHAPE))?,
    };
    let embeddings = response.object()?.present("embeddings");
    if plain {
        let expect = Expect { count, dimension };
        invariants::vector_list("embeddings", embeddings, expect, Form::Float)?;
        return Ok(());
    }
    let by_type = embeddings.and_then(|e| e.object()).ok_or_else(|| {
        invariants::violation(
            Invariant::PayloadMissing,
            "the response has no `embeddings` object keyed by embedding type".into(),
        )
    })?;
    // Packed binary types hold 8 dimensions per element.
    let mut full: Option<usize> = None;
    let mut packed: Option<usize> = None;
    for kind in &types {
        let (form, is_packed) = match kind.as_str() {
            "float" => (Form::Float, false),
            "int8" => (INT8, false),
            "uint8" => (UINT8, false),
            "binary" => (INT8, true),
            "ubinary" => (UINT8, true),
            "base64" => (Form::Base64 { bytes_per_dim: 4 }, false),
            _ => return Err(Fault::Uninspectable(invariants::REQUEST_SHAPE)),
        };
        let expect = Expect {
            count,
            dimension: dimension.map(|d| if is_packed { d / 8 } else { d }),
        };
        let name = format!("embeddings.{kind}");
        let dim = invariants::vector_list(&name, by_type.get(kind), expect, form)?;
        if is_packed {
            packed = packed.or(dim);
        } else {
            full = full.or(dim);
        }
    }
    if let (Some(full), Some(packed)) = (full, packed) {
        if full / 8 != packed {
            return Err(invariants::violation(
                Invariant::EmbeddingDimensionMismatch,
                format!(
                    "binary vectors have {packed} bytes, expected {} for {full} dimensions",
                    full / 8
                ),
            )
            .into());
        }
    }
    Ok(())
}

/// `results` point at distinct documents; v1 echoes `document: {text}` when
/// `return_documents` is set (it defaults to false).
fn rerank(request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let expect = invariants::document_ranking(request, "top_n", false, EchoedDocument::Object)?;
    invariants::ranking("results", response.object()?.get("results"), expect)?;
    Ok(())
}
