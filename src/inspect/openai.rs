//! OpenAI and OpenAI-compatible servers (vLLM, llama.cpp, Ollama's `/v1`).

use super::Dialect;
use crate::config::DialectName;

pub(super) struct OpenAi;

impl Dialect for OpenAi {
    fn name(&self) -> DialectName {
        DialectName::Openai
    }

    fn unreachable_hint(&self) -> &'static str {
        "for the hosted API, check this machine's DNS and outbound HTTPS access; for a local \
         OpenAI-compatible server (vLLM, llama.cpp, Ollama's /v1), start it at that address"
    }
}
