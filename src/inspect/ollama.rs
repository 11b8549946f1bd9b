//! Ollama's native API (`/api/*`).

use super::Dialect;
use crate::config::DialectName;

pub(super) struct Ollama;

impl Dialect for Ollama {
    fn name(&self) -> DialectName {
        DialectName::Ollama
    }

    fn unreachable_hint(&self) -> &'static str {
        "is Ollama running? Start it with `ollama serve` (it listens on 127.0.0.1:11434), \
         or set this route's upstream to where it listens"
    }
}
