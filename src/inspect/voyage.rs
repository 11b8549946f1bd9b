//! Voyage AI's embeddings and rerank API.

use super::Dialect;
use crate::config::DialectName;

pub(super) struct Voyage;

impl Dialect for Voyage {
    fn name(&self) -> DialectName {
        DialectName::Voyage
    }

    fn unreachable_hint(&self) -> &'static str {
        super::HOSTED_HINT
    }
}
