//! OpenAI on Azure (`openai.AzureOpenAI`, Node `AzureOpenAI`):
//! `/openai/deployments/{deployment}/chat/completions?api-version=…`,
//! `/completions`, `/embeddings`, and the v1 paths `/openai/v1/…`. The
//! bodies are OpenAI's and are judged as the `openai` dialect judges them;
//! what differs is the key (`api-key`, no prefix) and Azure's filter
//! chunks in a stream.

use super::openai::{self, ChatEvents};
use super::{CredentialSpec, Dialect, Endpoint, StreamSpec};
use crate::contract;
use crate::figures::Figure;
use crate::json::Object;

pub(super) struct Azure;

/// `api-key: <key>`, as Azure OpenAI's reference takes a resource key
/// (learn.microsoft.com, "Azure OpenAI in Azure AI Foundry Models REST API
/// reference", Authentication). A client's own `api-key` or Entra
/// `Authorization: Bearer` passes through when the route holds no key.
const API_KEY: CredentialSpec = CredentialSpec {
    header: "api-key",
    prefix: "",
    defaults: &[],
    also: &[],
    query: None,
    signed: &[],
};

/// A chunk's figures, the id apart: what a filter chunk is judged by.
const FILTER_CHUNK_FIGURES: &[Figure] = match openai::GENERATION_FIGURES.split_first() {
    Some((_id, usage)) => usage,
    None => &[],
};

/// Whether a chunk is one of Azure's filter chunks, which name no
/// completion: `object` is `""` (as are `id` and `model`, `created` 0),
/// and it carries the prompt's `prompt_filter_results` (the first chunk),
/// or choices holding only `content_filter_results` and, with the
/// asynchronous filter, `content_filter_offsets`, without a `delta`
/// (learn.microsoft.com, "Content filtering", annotations in streaming, and
/// "Content streaming", asynchronous filter). openai-python's stream
/// helper tells them from completion chunks by that empty `object` and
/// skips them (`lib/streaming/chat/_completions.py`,
/// `_is_valid_chat_completion_chunk_weak`): their empty `id` is Azure's
/// documented shape, not a malformed id, and `ChatCompletionChunk.id: str`
/// takes it as it comes (a `null` there is what would break the type).
fn filter_chunk(chunk: &Object<'_>) -> bool {
    let object = chunk.get("object").and_then(|o| o.string());
    if object.as_deref() != Some("") {
        return false;
    }
    if chunk.present("prompt_filter_results").is_some() {
        return true;
    }
    let choices = chunk
        .present("choices")
        .and_then(|c| c.objects())
        .unwrap_or_default();
    !choices.is_empty()
        && choices.iter().all(|choice| {
            choice.as_ref().is_some_and(|c| {
                c.present("delta").is_none()
                    && (c.present("content_filter_results").is_some()
                        || c.present("content_filter_offsets").is_some())
            })
        })
}

/// The table a chunk of an Azure stream is read by.
fn chunk_figures(chunk: &Object<'_>) -> &'static [Figure] {
    if filter_chunk(chunk) {
        FILTER_CHUNK_FIGURES
    } else {
        openai::GENERATION_FIGURES
    }
}

/// OpenAI's chat endpoint, its stream knowing Azure's filter chunks.
const CHAT: Endpoint = Endpoint {
    stream: Some(StreamSpec {
        start: |request| {
            let tools = contract::declared_functions(request).is_some();
            let choices = openai::choices_of(request, false)?;
            Ok(Box::new(
                ChatEvents::new(choices, tools).judged_by(chunk_figures),
            ))
        },
        unread: || Box::new(ChatEvents::new(usize::MAX, false).judged_by(chunk_figures)),
        ..openai::CHAT_STREAM
    }),
    ..openai::CHAT
};

/// OpenAI's completions endpoint, its stream knowing Azure's filter chunks.
const COMPLETIONS: Endpoint = Endpoint {
    stream: Some(StreamSpec {
        start: |request| {
            let choices = openai::choices_of(request, true)?;
            Ok(Box::new(
                ChatEvents::new(choices, false).judged_by(chunk_figures),
            ))
        },
        unread: || Box::new(ChatEvents::new(usize::MAX, false).judged_by(chunk_figures)),
        ..openai::COMPLETIONS_STREAM
    }),
    ..openai::COMPLETIONS
};

impl Dialect for Azure {
    fn name(&self) -> &'static str {
        "azure"
    }

    /// OpenTelemetry's `gen_ai.provider.name` for Azure OpenAI.
    fn provider(&self) -> &'static str {
        "azure.ai.openai"
    }

    fn credential(&self) -> &'static CredentialSpec {
        &API_KEY
    }

    fn unreachable_hint(&self) -> &'static str {
        "check the route's upstream (https://<resource>.openai.azure.com), this machine's DNS \
         and outbound HTTPS access, then Azure's status page"
    }

    /// The paths `openai.AzureOpenAI` calls that probity judges, by
    /// suffix: a deployment's path (`lib/azure.py`,
    /// `_deployments_endpoints`) and the v1 path end alike.
    fn endpoints(&self) -> super::Endpoints {
        &[
            ("/chat/completions", &CHAT),
            ("/completions", &COMPLETIONS),
            ("/embeddings", &openai::EMBEDDINGS),
            // `client.responses` (`/openai/v1/responses`, or
            // `/openai/responses?api-version=…`): OpenAI's Responses API.
            ("/responses", &super::responses::CREATE),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::figures::Domain;
    use crate::json::Document;

    fn is_filter_chunk(text: &str) -> bool {
        let doc = Document::parse(text.as_bytes()).unwrap();
        filter_chunk(&doc.object().unwrap())
    }

    #[test]
    fn the_key_is_sent_as_api_key_without_a_prefix() {
        let spec = Azure.credential();
        assert_eq!((spec.header, spec.prefix), ("api-key", ""));
        assert!(super::super::credential_headers()
            .iter()
            .any(|h| h == "api-key"));
    }

    #[test]
    fn a_filter_chunk_is_read_without_its_id() {
        assert_eq!(openai::GENERATION_FIGURES[0].domain, Domain::Id);
        assert!(FILTER_CHUNK_FIGURES.iter().all(|f| f.domain != Domain::Id));
        assert_eq!(
            FILTER_CHUNK_FIGURES.len() + 1,
            openai::GENERATION_FIGURES.len()
        );
    }

    #[test]
    fn filter_chunks_are_told_by_their_empty_object_and_filter_results() {
        let prompt = r#"{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{}}]}"#;
        let offsets = r#"{"id":"","object":"","created":0,"model":"","choices":[{"index":0,"finish_reason":null,"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}},"content_filter_offsets":{"check_offset":44,"start_offset":44,"end_offset":198}}]}"#;
        assert!(is_filter_chunk(prompt));
        assert!(is_filter_chunk(offsets));
        // A completion chunk with an empty id is not one: its id is nulled.
        let content = r#"{"id":"","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"},"content_filter_results":{}}]}"#;
        assert!(!is_filter_chunk(content));
        let delta = r#"{"id":"","object":"","choices":[{"index":0,"delta":{"content":"Hi"},"content_filter_results":{}}]}"#;
        assert!(!is_filter_chunk(delta));
        let bare = r#"{"id":"","object":"","choices":[]}"#;
        assert!(!is_filter_chunk(bare));
    }
}
