//! A broken payload invariant: the verdict `invariants` and the stream
//! judges give, and the `code` of a `provider_invalid_response` error. A
//! leaf module, so that every layer can name it without importing another.

use std::fmt;

/// A broken payload invariant, e.g. `embedding_count_mismatch`.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Violation {
    /// The invariant: the `code` of the error and a metric label.
    pub invariant: Invariant,
    /// Expected versus found, e.g. `expected 16 vectors for 16 inputs, got 15`.
    pub message: String,
}

/// Declares [`Invariant`]: each variant, its code and what breaking it
/// means, in one list, so the codes, [`Invariant::ALL`] and the docs cannot
/// drift apart.
macro_rules! invariants {
    ($($variant:ident = $code:literal: $doc:literal,)+) => {
        /// A payload invariant, by its code (`provider_invalid_response`'s
        /// `code`, the `invariant` label of
        /// `probity_provider_invalid_response_total`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Invariant {
            $(#[doc = $doc] $variant,)+
        }

        impl Invariant {
            /// Every invariant, in the order of this list.
            pub const ALL: &'static [Invariant] = &[$(Invariant::$variant,)+];

            /// Its code, e.g. `embedding_count_mismatch`.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Invariant::$variant => $code,)+
                }
            }

            /// What breaking it means, in general (each endpoint's rule
            /// is its own: `inspect::HeldInvariant`).
            pub fn meaning(self) -> &'static str {
                match self {
                    $(Invariant::$variant => $doc,)+
                }
            }
        }
    };
}

invariants! {
    InvalidJson = "invalid_json": "The body (or an event's data) is not JSON.",
    InvalidEncoding = "invalid_encoding": "A compressed body (`Content-Encoding` gzip, br or zstd) does not decode.",
    PayloadMissing = "payload_missing": "The result the request asked for is absent, or not the type it must be.",
    EmbeddingCountMismatch = "embedding_count_mismatch": "Not one vector per input.",
    EmbeddingDimensionMismatch = "embedding_dimension_mismatch": "Vectors of unequal lengths, or not the dimensions asked.",
    EmbeddingIndexInvalid = "embedding_index_invalid": "A vector's `index` is not an integer in range, once each.",
    EmbeddingItemInvalid = "embedding_item_invalid": "An item of the vector list is not the shape its dialect gives.",
    EmbeddingValueInvalid = "embedding_value_invalid": "A vector holds a value that is not a finite number (or out of its type's range).",
    EmbeddingBase64Invalid = "embedding_base64_invalid": "A base64 vector does not decode to the asked type's bytes.",
    RerankResultInvalid = "rerank_result_invalid": "A ranking's result is not an object of the dialect's shape.",
    RerankCountExceeded = "rerank_count_exceeded": "More results than documents, or than `top_n`/`top_k` asked.",
    RerankIndexOutOfRange = "rerank_index_out_of_range": "A result's index names no document of the request.",
    RerankIndexDuplicate = "rerank_index_duplicate": "Two results rank the same document.",
    RerankScoreInvalid = "rerank_score_invalid": "A relevance score is not a finite number.",
    RerankDocumentInvalid = "rerank_document_invalid": "An echoed document is not the type the dialect gives.",
    ChunkDimensionMismatch = "chunk_dimension_mismatch": "The chunks of a split batch answered in shapes that cannot be stitched.",
    ChoiceCountMismatch = "choice_count_mismatch": "Not the number of choices the request asked (`n`).",
    ChoiceIndexInvalid = "choice_index_invalid": "A choice's `index` is not an integer in range, once each.",
    ChoiceInvalid = "choice_invalid": "A choice is not an object of the dialect's shape.",
    RoleInvalid = "role_invalid": "The answer's role is not the assistant's.",
    ContentBlockInvalid = "content_block_invalid": "A content block (or its delta) is not an object of a known shape.",
    ToolArgumentsType = "tool_arguments_type": "A tool call's arguments are not the type its dialect gives (an object, or a JSON string).",
    ResponseObjectInvalid = "response_object_invalid": "A Responses API response object is not of its shape.",
    ResponseStatusInvalid = "response_status_invalid": "A response's `status` is not one the API defines.",
    ResponseItemInvalid = "response_item_invalid": "An output item is not an object with a type.",
    ResponseContentInvalid = "response_content_invalid": "A message item's content is not of its shape.",
    ResponseFunctionCallInvalid = "response_function_call_invalid": "A function call item lacks its call id, name or string arguments.",
    ResponseEventInvalid = "response_event_invalid": "A Responses API stream event is not of its shape.",
    ResponseSequenceInvalid = "response_sequence_invalid": "A stream's `sequence_number`s do not rise one by one.",
    StreamAfterDone = "stream_after_done": "Events arrived after the stream's terminal event.",
    EventStreamInvalid = "event_stream_invalid": "An AWS event-stream frame cannot be read (a CRC, a length, a cut).",
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Tests and callers compare against the code as text.
impl PartialEq<&str> for Invariant {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// As its code, the way error bodies and capture records carry it.
impl serde::Serialize for Invariant {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}
