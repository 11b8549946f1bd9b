//! OpenAI and OpenAI-compatible servers (vLLM, llama.cpp, LM Studio, Ollama's
//! and TEI's `/v1`): `/v1/chat/completions`, `/v1/completions`,
//! `/v1/embeddings`, and the Jina-style `/rerank` that vLLM and llama.cpp serve.

use super::{Dialect, Endpoint, Response};
use crate::config::DialectName;
use crate::figures::Figure;
use crate::inspect::json::{Kind, Object};
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

/// Figures of `/v1/chat/completions` and `/v1/completions`.
const GENERATION_FIGURES: &[Figure] = &[
    Figure::id("/id"),
    Figure::count("/usage/prompt_tokens").tokens("input"),
    Figure::count("/usage/completion_tokens").tokens("output"),
    Figure::count("/usage/total_tokens").tokens("total"),
    Figure::count("/usage/prompt_tokens_details/*"),
    Figure::count("/usage/completion_tokens_details/*"),
];

pub(super) const CHAT: Endpoint = Endpoint {
    check: chat,
    figures: GENERATION_FIGURES,
    header_figures: &[],
};

const COMPLETIONS: Endpoint = Endpoint {
    check: completions,
    figures: GENERATION_FIGURES,
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
        if path.ends_with("/chat/completions") {
            Some(&CHAT)
        } else if path.ends_with("/completions") {
            Some(&COMPLETIONS)
        } else if path.ends_with("/embeddings") {
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

/// `choices` holds `n` choices (default 1), each with a `message` object.
/// What the model wrote is not checked here: that is the output contract's.
pub(super) fn chat(request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let n = invariants::optional_count(request, "n")?.unwrap_or(1);
    invariants::choices(response.object()?, n, &format!("n = {n}"), |i, choice| {
        let at = || format!("choices[{i}].message");
        invariants::member(choice, "message", Kind::Object, "choice_invalid", &at).map(|_| ())
    })?;
    Ok(())
}

/// `choices` holds `n` choices per prompt, each with a `text` string.
fn completions(request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let n = invariants::optional_count(request, "n")?.unwrap_or(1);
    let prompts = match request.present("prompt") {
        None => 1,
        prompt => invariants::count_inputs(prompt)?,
    };
    let what = format!("n = {n} for {prompts} prompts");
    invariants::choices(response.object()?, n * prompts, &what, |i, choice| {
        let at = || format!("choices[{i}].text");
        invariants::member(choice, "text", Kind::String, "choice_invalid", &at).map(|_| ())
    })?;
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
