//! Hugging Face text-embeddings-inference (TEI).

use super::Dialect;
use crate::config::DialectName;

pub(super) struct Tei;

impl Dialect for Tei {
    fn name(&self) -> DialectName {
        DialectName::Tei
    }

    fn unreachable_hint(&self) -> &'static str {
        "is text-embeddings-inference running? Start it, e.g. \
         `text-embeddings-router --model-id BAAI/bge-small-en-v1.5 --port 8081`, \
         or set this route's upstream to where it listens"
    }
}
