//! Every error probity itself answers with, and the one place where each is
//! turned into an HTTP response.
//!
//! Each layer has its own error type (`route::NoRoute`,
//! `server::RequestError`, `forward::ForwardError`, `violation::Violation`);
//! [`ProxyError`] gathers them and [`ProxyError::respond`] maps them to the
//! single JSON shape, in the OpenAI error layout so that SDKs display it:
//!
//! ```json
//! {"error": {"type": "...", "code": "...", "message": "...", "route": "...", "request_id": "..."}}
//! ```
//!
//! Messages say what happened and what to do; they never carry a body or a
//! credential.

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{Response, StatusCode};

use crate::forward::{ForwardError, X_REQUEST_ID};
use crate::route::NoRoute;
use crate::violation::Violation;

/// Faults in the client's request, found by `server` before forwarding.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RequestError {
    #[error("request body is larger than server.max_request_bytes ({limit} bytes)")]
    TooLarge { limit: u64 },
    #[error("the request body could not be read: {cause}")]
    Unreadable { cause: String },
    #[error("probity is at server.max_connections ({limit})")]
    Overloaded { limit: u64 },
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ProxyError {
    #[error(transparent)]
    NoRoute(#[from] NoRoute),
    #[error(transparent)]
    Request(#[from] RequestError),
    #[error(transparent)]
    Forward(#[from] ForwardError),
    #[error(transparent)]
    InvalidResponse(#[from] Violation),
    /// probity's own fault (a panic caught while serving the request): never
    /// the provider's, so never counted against it.
    #[error("probity failed while handling this request: {what}")]
    Internal { what: String },
}

/// Seconds a client should wait before retrying an overloaded proxy.
const RETRY_AFTER_SECONDS: &str = "1";

impl ProxyError {
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            ProxyError::NoRoute(_) => StatusCode::NOT_FOUND,
            ProxyError::Request(RequestError::TooLarge { .. }) => StatusCode::PAYLOAD_TOO_LARGE,
            ProxyError::Request(RequestError::Unreadable { .. }) => StatusCode::BAD_REQUEST,
            ProxyError::Request(RequestError::Overloaded { .. }) => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::Forward(ForwardError::Timeout { .. }) => StatusCode::GATEWAY_TIMEOUT,
            ProxyError::Forward(_) | ProxyError::InvalidResponse(_) => StatusCode::BAD_GATEWAY,
            ProxyError::Internal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The `type` member: a fixed set an app can match on.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            ProxyError::NoRoute(_) => "no_route",
            ProxyError::Request(RequestError::TooLarge { .. }) => "request_too_large",
            ProxyError::Request(RequestError::Unreadable { .. }) => "bad_request",
            ProxyError::Request(RequestError::Overloaded { .. }) => "overloaded",
            ProxyError::Forward(ForwardError::Unreachable { .. }) => "upstream_unreachable",
            ProxyError::Forward(ForwardError::Timeout { .. }) => "upstream_timeout",
            ProxyError::Forward(ForwardError::Reset { .. }) => "upstream_reset",
            ProxyError::Forward(ForwardError::TooLarge { .. }) => "upstream_response_too_large",
            ProxyError::InvalidResponse(_) => "provider_invalid_response",
            ProxyError::Internal { .. } => "internal_error",
        }
    }

    /// The `code` member: the broken invariant for an invalid response, the
    /// limit's configuration key for a timeout, else the type again.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            ProxyError::InvalidResponse(violation) => violation.invariant,
            ProxyError::Forward(ForwardError::Timeout { key, .. }) => key,
            _ => self.kind(),
        }
    }

    /// What happened, then what to do about it.
    pub(crate) fn message(&self, route: Option<&str>) -> String {
        let route = route.unwrap_or("-");
        match self {
            ProxyError::NoRoute(NoRoute { path, prefixes }) => format!(
                "no route matches the path {}; the configured prefixes are {}: put one of them \
                 at the start of the client's base URL path, e.g. http://<probity>{}",
                truncate(path, 200),
                prefixes.join(", "),
                prefixes.first().map_or("/ollama", String::as_str),
            ),
            ProxyError::Request(err @ RequestError::TooLarge { .. }) => {
                format!("{err}: send a smaller body, or raise server.max_request_bytes")
            }
            ProxyError::Request(err @ RequestError::Unreadable { .. }) => {
                format!("{err}: resend the request")
            }
            ProxyError::Request(err @ RequestError::Overloaded { .. }) => format!(
                "{err}: retry after {RETRY_AFTER_SECONDS} s, or raise server.max_connections"
            ),
            ProxyError::Forward(ForwardError::Unreachable {
                upstream,
                cause,
                hint,
            }) => format!("cannot reach upstream {upstream} of route {route} ({cause}): {hint}"),
            ProxyError::Forward(ForwardError::Timeout {
                upstream,
                waited_for,
                after,
                key,
            }) => format!(
                "upstream {upstream} of route {route} sent no {waited_for} within {} ms \
                 ({key}): retry later, or raise the route's {key} if the model is slow \
                 (a cold model load can take a minute)",
                after.as_millis()
            ),
            ProxyError::Forward(err @ ForwardError::Reset { .. }) => format!(
                "{err}: retry the request; if it keeps happening, check the upstream's logs \
                 (route {route})"
            ),
            ProxyError::Forward(err @ ForwardError::TooLarge { .. }) => format!(
                "{err}: ask for less (fewer inputs, fewer tokens), or raise the \
                 max_response_bytes of route {route}"
            ),
            ProxyError::InvalidResponse(violation) => format!(
                "the provider's response broke the invariant {}: {}; the response was \
                 not passed on. Retry, or report it to the provider",
                violation.invariant, violation.message
            ),
            ProxyError::Internal { .. } => format!(
                "{self}; this is a fault in probity, not in the provider: retry the request, \
                 and report it with this request id and probity's log (route {route})"
            ),
        }
    }

    fn fields<'a>(&self, route: Option<&'a str>, request_id: &'a HeaderValue) -> ErrorFields<'a> {
        ErrorFields {
            kind: self.kind(),
            code: self.code(),
            message: self.message(route),
            route,
            request_id: request_id.to_str().unwrap_or_default(),
        }
    }

    /// The `error` object alone, for a stream that can only end with an
    /// error event in its own format (its status line is already sent).
    pub(crate) fn error_object(
        &self,
        route: Option<&str>,
        request_id: &HeaderValue,
    ) -> serde_json::Value {
        serde_json::to_value(self.fields(route, request_id)).unwrap_or_default()
    }

    /// The error response: the one mapping from error to HTTP.
    pub(crate) fn respond(&self, route: Option<&str>, request_id: &HeaderValue) -> Response<Bytes> {
        let body = ErrorBody {
            error: self.fields(route, request_id),
        };
        // Serializing two plain structs of strings cannot fail.
        let json = serde_json::to_vec(&body).unwrap_or_default();
        let mut response = Response::new(Bytes::from(json));
        *response.status_mut() = self.status();
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(X_REQUEST_ID, request_id.clone());
        if let ProxyError::Request(RequestError::Overloaded { .. }) = self {
            headers.insert(RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECONDS));
        }
        response
    }
}

/// The wire shape; a struct (not `json!`) so members keep this order.
#[derive(serde::Serialize)]
struct ErrorBody<'a> {
    error: ErrorFields<'a>,
}

#[derive(serde::Serialize)]
struct ErrorFields<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    code: &'static str,
    message: String,
    route: Option<&'a str>,
    request_id: &'a str,
}

fn truncate(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn body(err: ProxyError) -> (StatusCode, serde_json::Value) {
        let response = err.respond(Some("ollama"), &HeaderValue::from_static("rid-1"));
        let json = serde_json::from_slice(response.body()).unwrap();
        (response.status(), json)
    }

    #[test]
    fn every_error_has_the_one_shape() {
        let (status, json) = body(
            ForwardError::Timeout {
                upstream: "http://127.0.0.1:11434".into(),
                waited_for: "response",
                after: Duration::from_millis(1500),
                key: "timeout_ms",
            }
            .into(),
        );
        assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
        let error = &json["error"];
        assert_eq!(error["type"], "upstream_timeout");
        assert_eq!(error["code"], "timeout_ms");
        assert_eq!(error["route"], "ollama");
        assert_eq!(error["request_id"], "rid-1");
        assert!(error["message"]
            .as_str()
            .unwrap()
            .contains("within 1500 ms"));
        assert_eq!(json.as_object().unwrap().len(), 1);
        assert_eq!(error.as_object().unwrap().len(), 5);
    }

    #[test]
    fn an_invalid_response_names_its_invariant() {
        let (status, json) = body(
            Violation {
                invariant: "embedding_count_mismatch",
                message: "expected 16 vectors for 16 inputs, got 15".into(),
            }
            .into(),
        );
        assert_eq!(status, StatusCode::BAD_GATEWAY);
        assert_eq!(json["error"]["type"], "provider_invalid_response");
        assert_eq!(json["error"]["code"], "embedding_count_mismatch");
    }

    #[test]
    fn overload_says_when_to_retry() {
        let response = ProxyError::from(RequestError::Overloaded { limit: 4 })
            .respond(None, &HeaderValue::from_static("r"));
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[RETRY_AFTER], "1");
    }
}
