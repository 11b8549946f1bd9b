//! Jina AI's embeddings and rerank API.

use super::Dialect;
use crate::config::DialectName;

pub(super) struct Jina;

impl Dialect for Jina {
    fn name(&self) -> DialectName {
        DialectName::Jina
    }

    fn unreachable_hint(&self) -> &'static str {
        super::HOSTED_HINT
    }
}
