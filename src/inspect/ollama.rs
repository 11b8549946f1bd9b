//! Ollama's native API: `/api/embed`, the legacy `/api/embeddings`, and its
//! OpenAI-compatible `/v1/embeddings` (checked as OpenAI's).

use super::{Dialect, Endpoint, Response};
use crate::config::DialectName;
use crate::figures::Figure;
use crate::inspect::json::Object;
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
        if path.ends_with("/api/embed") {
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
