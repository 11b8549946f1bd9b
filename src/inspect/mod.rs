//! Response inspection, per provider dialect: the step after `forward` on the
//! way back (`forward` → **`inspect`** → `server`).
//!
//! A [`Dialect`] is handed a complete exchange (the request and the upstream
//! response) and returns a [`Verdict`]: pass the bytes on untouched, rewrite
//! them, or reject them as a payload violation. Each provider lives in its own
//! file; adding one means adding a file and a line in [`dialect`], never
//! touching the pipeline. Until a dialect's inspection lands, its verdict is
//! always [`Verdict::Pass`].

mod anthropic;
mod cohere;
mod jina;
mod ollama;
mod openai;
mod passthrough;
mod tei;
mod voyage;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, InvalidHeaderValue, AUTHORIZATION};
use http::{HeaderMap, Method, StatusCode};

use crate::config::DialectName;

/// The dialect table: one line per provider.
pub fn dialect(name: DialectName) -> &'static dyn Dialect {
    match name {
        DialectName::Openai => &openai::OpenAi,
        DialectName::Ollama => &ollama::Ollama,
        DialectName::Cohere => &cohere::Cohere,
        DialectName::Jina => &jina::Jina,
        DialectName::Tei => &tei::Tei,
        DialectName::Voyage => &voyage::Voyage,
        DialectName::Anthropic => &anthropic::Anthropic,
        DialectName::Passthrough => &passthrough::Passthrough,
    }
}

/// How one provider speaks: how it takes a credential, what to tell a user
/// who cannot reach it, and how its responses are judged.
pub trait Dialect: Send + Sync {
    fn name(&self) -> DialectName;

    /// The headers that present a configured credential. Most providers take
    /// `Authorization: Bearer`.
    fn credential_headers(
        &self,
        key: &str,
    ) -> Result<Vec<(HeaderName, HeaderValue)>, InvalidHeaderValue> {
        Ok(vec![(
            AUTHORIZATION,
            HeaderValue::try_from(format!("Bearer {key}"))?,
        )])
    }

    /// Headers set beside a configured credential, only when the client did
    /// not send them.
    fn default_headers(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    /// The remedy named in `upstream_unreachable` errors.
    fn unreachable_hint(&self) -> &'static str;

    /// Judges a complete (non-streaming) response.
    fn inspect(&self, _exchange: &Exchange<'_>) -> Verdict {
        Verdict::Pass
    }
}

/// A complete exchange, as a dialect sees it: borrowed, never copied.
pub struct Exchange<'a> {
    pub method: &'a Method,
    /// The path sent upstream, after the route prefix was stripped.
    pub path: &'a str,
    pub request_headers: &'a HeaderMap,
    pub request_body: &'a Bytes,
    pub status: StatusCode,
    pub response_headers: &'a HeaderMap,
    pub response_body: &'a Bytes,
}

/// What a dialect decided about a response.
#[derive(Debug)]
pub enum Verdict {
    /// The upstream bytes go to the client as they came.
    Pass,
    /// The client gets this body instead; the verbatim one is kept for captures.
    Rewrite(Bytes),
    /// The payload is corrupt: the client gets a `provider_invalid_response` error.
    Reject(Violation),
}

/// A broken payload invariant, e.g. `embedding_count_mismatch`.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Violation {
    /// The invariant's name: the `code` of the error and a metric label.
    pub invariant: &'static str,
    /// Expected versus found, e.g. `expected 16 vectors for 16 inputs, got 15`.
    pub message: String,
}

/// The hint for providers reached over the public internet.
const HOSTED_HINT: &str = "check this machine's DNS and outbound HTTPS access (egress proxy, \
                           firewall), then the provider's status page";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_maps_every_name_to_its_own_dialect() {
        for name in DialectName::ALL {
            assert_eq!(dialect(name).name(), name);
        }
    }

    #[test]
    fn credentials_are_presented_in_each_providers_header() {
        let bearer = dialect(DialectName::Openai)
            .credential_headers("sk-1")
            .unwrap();
        assert_eq!(
            bearer,
            vec![(AUTHORIZATION, HeaderValue::from_static("Bearer sk-1"))]
        );
        let anthropic = dialect(DialectName::Anthropic)
            .credential_headers("sk-ant")
            .unwrap();
        assert_eq!(anthropic[0].0.as_str(), "x-api-key");
        assert_eq!(anthropic[0].1, "sk-ant");
        assert_eq!(
            dialect(DialectName::Anthropic).default_headers(),
            &[("anthropic-version", "2023-06-01")]
        );
    }
}
