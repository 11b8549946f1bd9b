//! A broken payload invariant: the verdict `invariants` and the stream
//! judges give, and the `code` of a `provider_invalid_response` error. A
//! leaf module, so that every layer can name it without importing another.

/// A broken payload invariant, e.g. `embedding_count_mismatch`.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Violation {
    /// The invariant's name: the `code` of the error and a metric label.
    pub invariant: &'static str,
    /// Expected versus found, e.g. `expected 16 vectors for 16 inputs, got 15`.
    pub message: String,
}
