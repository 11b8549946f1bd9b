//! Cohere's API (`/v1`, `/v2`).

use super::Dialect;
use crate::config::DialectName;

pub(super) struct Cohere;

impl Dialect for Cohere {
    fn name(&self) -> DialectName {
        DialectName::Cohere
    }

    fn unreachable_hint(&self) -> &'static str {
        super::HOSTED_HINT
    }
}
