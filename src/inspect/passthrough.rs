//! Any HTTP upstream: forwarded, never inspected.

use super::Dialect;
use crate::config::DialectName;

pub(super) struct Passthrough;

impl Dialect for Passthrough {
    fn name(&self) -> DialectName {
        DialectName::Passthrough
    }

    fn unreachable_hint(&self) -> &'static str {
        "check that the upstream is running and listening at that address"
    }
}
