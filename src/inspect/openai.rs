//! OpenAI and OpenAI-compatible servers (vLLM, llama.cpp, LM Studio, Ollama's
//! and TEI's `/v1`): `/v1/embeddings`, and the Jina-style `/rerank` that vLLM
//! and llama.cpp serve.

use super::{Dialect, Endpoint, Response};
use crate::config::DialectName;
use crate::figures::Figure;
use crate::inspect::json::Object;
use crate::invariants::{self, Document, Echo, Expect, Fault, Form, Ranking};

pub(super) struct OpenAi;

/// Figures of `/v1/embeddings` and `/rerank` (`/id` is vLLM's).
pub(super) const FIGURES: &[Figure] = &[
    Figure::id("/id"),
    Figure::count("/usage/prompt_tokens").tokens("input"),
    Figure::count("/usage/total_tokens").tokens("total"),
];

pub(super) const EMBEDDINGS: Endpoint = Endpoint {
    check: embeddings,
    figures: FIGURES,
    header_figures: &[],
};

const RERANK: Endpoint = Endpoint {
    check: rerank,
    figures: FIGURES,
    header_figures: &[],
};

impl Dialect for OpenAi {
    fn name(&self) -> DialectName {
        DialectName::Openai
    }

    fn unreachable_hint(&self) -> &'static str {
        "for the hosted API, check this machine's DNS and outbound HTTPS access; for a local \
         OpenAI-compatible server (vLLM, llama.cpp, Ollama's /v1), start it at that address"
    }

    fn endpoint(&self, path: &str) -> Option<&'static Endpoint> {
        if path.ends_with("/embeddings") {
            Some(&EMBEDDINGS)
        } else if path.ends_with("/rerank") {
            Some(&RERANK)
        } else {
            None
        }
    }
}

/// `data` holds one vector per input, floats or (with `encoding_format:
/// "base64"`) base64 of little-endian float32.
pub(super) fn embeddings(request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let expect = Expect {
        count: invariants::count_inputs(request.present("input"))?,
        dimension: invariants::optional_count(request, "dimensions")?,
    };
    invariants::openai_data(response.object()?, expect, Form::FloatOrBase64)?;
    Ok(())
}

/// vLLM / llama.cpp rerank: `results` like Jina's; documents echoed as
/// objects when they are echoed at all (llama.cpp does not).
fn rerank(request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let expect = Ranking {
        documents: invariants::count_array(request, "documents")?,
        limit: invariants::optional_count(request, "top_n")?,
        score: "relevance_score",
        document: "document",
        echo: Echo::Optional(Document::Object),
    };
    invariants::ranking("results", response.object()?.get("results"), expect)?;
    Ok(())
}
