//! Any HTTP upstream: forwarded, never inspected.

use super::Dialect;

pub(super) struct Passthrough;

impl Dialect for Passthrough {
    fn name(&self) -> &'static str {
        "passthrough"
    }

    fn unreachable_hint(&self) -> &'static str {
        "check that the upstream is running and listening at that address"
    }
}
