//! Anthropic's Messages API (`/v1/messages`): the credential goes in
//! `x-api-key`, and the API refuses a request without `anthropic-version`.

use http::header::{HeaderName, HeaderValue, InvalidHeaderValue};

use super::{Dialect, Endpoint, Response};
use crate::config::DialectName;
use crate::figures::Figure;
use crate::inspect::json::{Kind, Object};
use crate::invariants::{self, Fault};

pub(super) struct Anthropic;

/// `usage` of a message (and, in a stream, of `message_start.message` and
/// `message_delta`).
pub(super) const FIGURES: &[Figure] = &[
    Figure::id("/id"),
    Figure::count("/usage/input_tokens").tokens("input"),
    Figure::count("/usage/output_tokens").tokens("output"),
    Figure::count("/usage/cache_creation_input_tokens"),
    Figure::count("/usage/cache_read_input_tokens"),
    Figure::count("/usage/server_tool_use/*"),
];

const MESSAGES: Endpoint = Endpoint {
    check: messages,
    figures: FIGURES,
    header_figures: &[],
};

impl Dialect for Anthropic {
    fn name(&self) -> DialectName {
        DialectName::Anthropic
    }

    fn credential_headers(
        &self,
        key: &str,
    ) -> Result<Vec<(HeaderName, HeaderValue)>, InvalidHeaderValue> {
        Ok(vec![(
            HeaderName::from_static("x-api-key"),
            HeaderValue::try_from(key)?,
        )])
    }

    fn default_headers(&self) -> &'static [(&'static str, &'static str)] {
        &[("anthropic-version", "2023-06-01")]
    }

    fn unreachable_hint(&self) -> &'static str {
        super::HOSTED_HINT
    }

    fn endpoint(&self, path: &str) -> Option<&'static Endpoint> {
        path.ends_with("/v1/messages").then_some(&MESSAGES)
    }
}

/// `content` is an array of typed blocks, and the `role` is `assistant`.
fn messages(_request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let root = response.object()?;
    let content = invariants::member(root, "content", Kind::Array, "payload_missing", &|| {
        "content".into()
    })?;
    for (i, block) in content.objects().unwrap_or_default().iter().enumerate() {
        let at = || format!("content[{i}].type");
        match block {
            Some(block) => {
                invariants::member(block, "type", Kind::String, "content_block_invalid", &at)?;
            }
            None => {
                return Err(invariants::violation(
                    "content_block_invalid",
                    format!("content[{i}] is not an object"),
                )
                .into())
            }
        }
    }
    let role = root.get("role").and_then(|r| r.string());
    if role.as_deref() != Some("assistant") {
        return Err(invariants::violation(
            "role_invalid",
            format!(
                "role should be \"assistant\", found {}",
                root.get("role").map_or("nothing", |r| r.text())
            ),
        )
        .into());
    }
    Ok(())
}
