//! Ollama's native API: `/api/chat`, `/api/generate`, `/api/embed`, the
//! legacy `/api/embeddings`, and its OpenAI-compatible `/v1/chat/completions`
//! and `/v1/embeddings` (checked as OpenAI's).

use super::{Dialect, Endpoint, Response};
use crate::config::DialectName;
use crate::figures::Figure;
use crate::inspect::json::{Kind, Object};
use crate::invariants::{self, Expect, Fault, Form};

pub(super) struct Ollama;

/// Ollama omits zero counts (`omitempty`), so absent figures are normal.
const EMBED: Endpoint = Endpoint {
    check: embed,
    figures: &[
        Figure::count("/prompt_eval_count").tokens("input"),
        Figure::count("/total_duration"),
        Figure::count("/load_duration"),
    ],
    header_figures: &[],
};

/// Generation figures sit on the final (`done: true`) object.
const GENERATION_FIGURES: &[Figure] = &[
    Figure::count("/prompt_eval_count").tokens("input"),
    Figure::count("/eval_count").tokens("output"),
    Figure::count("/total_duration"),
    Figure::count("/load_duration"),
    Figure::count("/prompt_eval_duration"),
    Figure::count("/eval_duration"),
];

const CHAT: Endpoint = Endpoint {
    check: chat,
    figures: GENERATION_FIGURES,
    header_figures: &[],
};

const GENERATE: Endpoint = Endpoint {
    check: generate,
    figures: GENERATION_FIGURES,
    header_figures: &[],
};

const LEGACY_EMBEDDINGS: Endpoint = Endpoint {
    check: legacy_embeddings,
    figures: &[],
    header_figures: &[],
};

impl Dialect for Ollama {
    fn name(&self) -> DialectName {
        DialectName::Ollama
    }

    fn unreachable_hint(&self) -> &'static str {
        "is Ollama running? Start it with `ollama serve` (it listens on 127.0.0.1:11434), \
         or set this route's upstream to where it listens"
    }

    fn endpoint(&self, path: &str) -> Option<&'static Endpoint> {
        if path.ends_with("/api/chat") {
            Some(&CHAT)
        } else if path.ends_with("/api/generate") {
            Some(&GENERATE)
        } else if path.ends_with("/v1/chat/completions") {
            Some(&super::openai::CHAT)
        } else if path.ends_with("/api/embed") {
            Some(&EMBED)
        } else if path.ends_with("/api/embeddings") {
            Some(&LEGACY_EMBEDDINGS)
        } else if path.ends_with("/v1/embeddings") {
            Some(&super::openai::EMBEDDINGS)
        } else {
            None
        }
    }
}

/// `embeddings` holds one float vector per input.
fn embed(request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let expect = Expect {
        count: invariants::count_inputs(request.present("input"))?,
        dimension: invariants::optional_count(request, "dimensions")?,
    };
    let list = response.object()?.get("embeddings");
    invariants::vector_list("embeddings", list, expect, Form::Float)?;
    Ok(())
}

/// A `message` object and a boolean `done`.
fn chat(_request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let root = response.object()?;
    invariants::member(root, "message", Kind::Object, "payload_missing", &|| {
        "message".into()
    })?;
    invariants::member(root, "done", Kind::Bool, "payload_missing", &|| {
        "done".into()
    })?;
    Ok(())
}

/// A `response` string and a boolean `done`.
fn generate(_request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let root = response.object()?;
    invariants::member(root, "response", Kind::String, "payload_missing", &|| {
        "response".into()
    })?;
    invariants::member(root, "done", Kind::Bool, "payload_missing", &|| {
        "done".into()
    })?;
    Ok(())
}

/// One prompt, one non-empty `embedding`.
fn legacy_embeddings(_request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let vector = response.object()?.present("embedding").ok_or_else(|| {
        invariants::violation("payload_missing", "the response has no `embedding`".into())
    })?;
    let dim = invariants::dimension(vector, Form::Float, &|| "embedding".into())?;
    if dim == 0 {
        return Err(invariants::violation(
            "embedding_dimension_mismatch",
            "expected a non-empty embedding, got 0 dimensions".into(),
        )
        .into());
    }
    Ok(())
}
