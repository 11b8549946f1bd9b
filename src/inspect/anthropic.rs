//! Anthropic's Messages API: the credential goes in `x-api-key`, and the API
//! refuses a request without `anthropic-version`.

use http::header::{HeaderName, HeaderValue, InvalidHeaderValue};

use super::Dialect;
use crate::config::DialectName;

pub(super) struct Anthropic;

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
}
