//! Hugging Face text-embeddings-inference: `/embed` and `/rerank` answer bare
//! arrays; `/v1/embeddings` and `/embeddings` are OpenAI's shape. Its figures
//! are response headers.

use super::{held, Dialect, Endpoint, Field, RequestShape, Response};
use crate::batch::{BatchSpec, Item, Vectors};
use crate::figures::HeaderFigure;
use crate::invariants::{self, Echo, EchoedDocument, Expect, Fault, Form, Ranking};
use crate::json::{Kind, Object};
use crate::violation::Invariant;

pub(super) struct Tei;

const HEADERS: &[HeaderFigure] = &[
    crate::figures::header_figure!("x-compute-tokens", tokens = "input"),
    crate::figures::header_figure!("x-compute-characters"),
    crate::figures::header_figure!("x-compute-time"),
    crate::figures::header_figure!("x-total-time"),
    crate::figures::header_figure!("x-tokenization-time"),
    crate::figures::header_figure!("x-queue-time"),
    crate::figures::header_figure!("x-inference-time"),
];

/// `/embed`: `inputs` a string or an array (of strings or token ids),
/// `dimensions` (TEI's serde types make every optional one nullable).
const EMBED_REQUEST: RequestShape = RequestShape {
    body: true,
    fields: &[
        Field::required("inputs", &[Kind::String, Kind::Array]),
        Field::optional("dimensions", &[Kind::Number]),
    ],
};

/// `/rerank`: the `texts` ranked, `return_text`.
const RERANK_REQUEST: RequestShape = RequestShape {
    body: true,
    fields: &[
        Field::required("texts", &[Kind::Array]),
        Field::optional("return_text", &[Kind::Bool]),
    ],
};

const EMBED: Endpoint = Endpoint {
    operation: "embeddings",
    request: &EMBED_REQUEST,
    check: embed,
    invariants: &[
        held(Invariant::PayloadMissing, "the body is an array of vectors"),
        held(
            Invariant::EmbeddingCountMismatch,
            "one vector per input (`inputs`: a string is 1, an array its length)",
        ),
        held(
            Invariant::EmbeddingValueInvalid,
            "every element of a vector is a finite number",
        ),
        held(
            Invariant::EmbeddingDimensionMismatch,
            "every vector has one length, `dimensions` when the request sets it",
        ),
    ],
    figures: &[],
    relations: &[],
    header_figures: HEADERS,
    stream: None,
    output: None,
    batch: Some(BatchSpec {
        inputs: &["inputs"],
        vectors: Vectors {
            list: "",
            item: Item::Vector,
            by_type: false,
            echoed: &[],
        },
        request: &EMBED_REQUEST,
    }),
};

const RERANK: Endpoint = Endpoint {
    operation: "rerank",
    request: &RERANK_REQUEST,
    check: rerank,
    invariants: &[
        held(Invariant::PayloadMissing, "the body is an array of results"),
        held(
            Invariant::RerankCountExceeded,
            "at most one result per text of `texts`",
        ),
        held(
            Invariant::RerankResultInvalid,
            "each result is an object with a non-negative integer `index`",
        ),
        held(
            Invariant::RerankIndexOutOfRange,
            "each `index` names a text of the request",
        ),
        held(
            Invariant::RerankIndexDuplicate,
            "no two results rank the same text",
        ),
        held(
            Invariant::RerankScoreInvalid,
            "each `score` is a finite number",
        ),
        held(
            Invariant::RerankDocumentInvalid,
            "with `return_text: true`, each result echoes its `text` as a string",
        ),
    ],
    figures: &[],
    relations: &[],
    header_figures: HEADERS,
    stream: None,
    output: None,
    batch: None,
};

const OPENAI_EMBEDDINGS: Endpoint = Endpoint {
    operation: "embeddings",
    request: &super::openai::EMBEDDINGS_REQUEST,
    check: super::openai::embeddings,
    invariants: super::openai::EMBEDDINGS_HELD,
    figures: super::openai::FIGURES,
    relations: &[],
    header_figures: HEADERS,
    stream: None,
    output: None,
    batch: Some(BatchSpec {
        inputs: &["input"],
        vectors: Vectors::OPENAI_DATA,
        request: &super::openai::EMBEDDINGS_REQUEST,
    }),
};

impl Dialect for Tei {
    fn name(&self) -> &'static str {
        "tei"
    }

    fn error_envelope(&self) -> super::Envelope {
        super::Envelope::Flat {
            message: "error",
            kind: Some("error_type"),
        }
    }

    fn unreachable_hint(&self) -> &'static str {
        "is text-embeddings-inference running? Start it, e.g. \
         `text-embeddings-router --model-id BAAI/bge-small-en-v1.5 --port 8081`, \
         or set this route's upstream to where it listens"
    }

    fn endpoints(&self) -> super::Endpoints {
        &[
            ("/embeddings", &OPENAI_EMBEDDINGS),
            ("/embed", &EMBED),
            ("/rerank", &RERANK),
        ]
    }
}

/// The body is the list of vectors itself.
fn embed(request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let expect = Expect {
        count: invariants::count_inputs(request.present("inputs"))?,
        dimension: invariants::optional_count(request, "dimensions")?,
    };
    invariants::vector_list("the body", Some(response.root), expect, Form::Float)?;
    Ok(())
}

/// The body is the list of results, at most one per text.
fn rerank(request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let echo = if invariants::flag(request, "return_text", false)? {
        Echo::Required(EchoedDocument::String)
    } else {
        Echo::Unchecked
    };
    let expect = Ranking {
        documents: invariants::count_array(request, "texts")?,
        limit: None,
        score: "score",
        document: "text",
        echo,
    };
    invariants::ranking("the body", Some(response.root), expect)?;
    Ok(())
}
