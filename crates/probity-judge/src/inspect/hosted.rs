//! What Jina AI and Voyage AI share: hosted embeddings and rerank APIs in
//! OpenAI's embeddings shape (batched like OpenAI's `data`), a Bearer key,
//! errors as `{"detail": …}`. One [`Dialect`] serves both; each provider's
//! file gives its name, its figures and its two payload checks.

use super::{
    Check, Dialect, Endpoint, Endpoints, Envelope, HeldInvariant, RequestShape, HOSTED_HINT,
};
use crate::batch::{BatchSpec, Vectors};
use crate::figures::Figure;

/// A hosted embeddings-and-rerank provider.
pub(super) struct Hosted {
    pub(super) name: &'static str,
    pub(super) endpoints: Endpoints,
}

/// `…/embeddings`, batched by `input` like OpenAI's.
pub(super) const fn embeddings(
    request: &'static RequestShape,
    (check, invariants): (Check, &'static [HeldInvariant]),
    figures: &'static [Figure],
) -> Endpoint {
    Endpoint {
        operation: "embeddings",
        request,
        check,
        invariants,
        figures,
        relations: &[],
        header_figures: &[],
        stream: None,
        output: None,
        batch: Some(BatchSpec {
            inputs: &["input"],
            vectors: Vectors::OPENAI_DATA,
            request,
        }),
    }
}

/// `…/rerank`.
pub(super) const fn rerank(
    request: &'static RequestShape,
    (check, invariants): (Check, &'static [HeldInvariant]),
    figures: &'static [Figure],
) -> Endpoint {
    Endpoint {
        operation: "rerank",
        request,
        check,
        invariants,
        figures,
        relations: &[],
        header_figures: &[],
        stream: None,
        output: None,
        batch: None,
    }
}

impl Dialect for Hosted {
    fn name(&self) -> &'static str {
        self.name
    }

    fn error_envelope(&self) -> Envelope {
        Envelope::Flat {
            message: "detail",
            kind: None,
        }
    }

    fn unreachable_hint(&self) -> &'static str {
        HOSTED_HINT
    }

    fn endpoints(&self) -> Endpoints {
        self.endpoints
    }
}
