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
use http::header::{
    HeaderName, HeaderValue, CONNECTION, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE,
};
use http::{Response, StatusCode};
use serde_json::{json, Value};

use crate::forward::{ForwardError, X_REQUEST_ID};
use crate::route::{AdminCrossing, AdminRefusal, NoRoute};
use probity_judge::inspect::Envelope;
use probity_judge::violation::Violation;

/// Faults in the client's request, found by `server` before forwarding.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RequestError {
    #[error("request body is larger than server.max_request_bytes ({limit} bytes)")]
    TooLarge { limit: u64 },
    #[error("the request body could not be read: {cause}")]
    Unreadable { cause: String },
    #[error("probity is at server.max_connections ({limit})")]
    Overloaded { limit: u64 },
    /// Too many bytes of inspected answers wait for slow readers.
    #[error(
        "probity holds {held} bytes of answers its clients are still reading \
         (server.max_held_response_bytes: {limit})"
    )]
    Saturated { held: u64, limit: u64 },
    /// One client holds its whole share of that budget: only it is refused.
    #[error(
        "{holder} holds {held} bytes of answers it is still reading or awaiting: its own share of the \
         held answers' budget is spent (server.max_held_share: {fraction} of \
         server.max_held_response_bytes {limit} = {share} bytes); other clients are still served"
    )]
    ShareSpent {
        holder: String,
        held: u64,
        share: u64,
        fraction: f64,
        limit: u64,
    },
    #[error("the request body did not arrive within server.body_read_timeout_ms ({after_ms} ms)")]
    BodyTimeout { after_ms: u64 },
    /// A protocol upgrade probity does not tunnel: anything but a Realtime
    /// WebSocket on a dialect that has one.
    #[error(
        "probity tunnels only Realtime WebSocket sessions (GET …/realtime on an openai route), \
         not this upgrade (Upgrade: {protocol})"
    )]
    Upgrade { protocol: String },
    /// `[[clients]]` are configured and none of their tokens was presented.
    #[error("no client token was presented in {header}")]
    Unauthenticated {
        header: &'static str,
        prefix: &'static str,
    },
    /// The admin listener: captures read, or state changed, without the
    /// admin token.
    #[error("this admin endpoint needs the admin token")]
    AdminUnauthenticated {
        refusal: AdminRefusal,
        variable: String,
    },
    /// The admin listener: a request a browser sent for another site, or
    /// that names a host other than this one, for data or a change.
    #[error("{}", crossing.what())]
    AdminCrossSite { crossing: AdminCrossing },
    /// A head the servers behind probity could frame differently.
    #[error("the request head is ambiguous: {what}")]
    Malformed { what: &'static str },
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
    /// The admin listener: an answer not ready within its deadline (a
    /// capture store slower than it, most likely): never the client's fault.
    #[error("the admin listener did not answer within {} s", after.as_secs())]
    AdminTimeout { after: std::time::Duration },
}

/// Seconds a client should wait before retrying an overloaded proxy.
const RETRY_AFTER_SECONDS: &str = "1";

/// Seconds before asking a slow admin listener again (a capture store
/// that is slow now is seldom fast a second later).
const ADMIN_RETRY_AFTER_SECONDS: &str = "5";

/// Whether a client should retry: read by the openai and anthropic SDKs.
pub(crate) const X_SHOULD_RETRY: HeaderName = HeaderName::from_static("x-should-retry");

/// The code of an AWS JSON-protocol error (Bedrock's).
pub(crate) const X_AMZN_ERROR_TYPE: HeaderName = HeaderName::from_static("x-amzn-errortype");

/// Where an error is answered, and how.
#[derive(Clone, Copy)]
pub(crate) struct Answering<'a> {
    /// The route's name, when one matched.
    pub(crate) route: Option<&'a str>,
    pub(crate) request_id: &'a HeaderValue,
    /// The error shape of the dialect the app speaks.
    pub(crate) envelope: Envelope,
    /// The route's `retry_invalid_response`: whether a client should retry
    /// a response that broke an invariant.
    pub(crate) retry_invalid: bool,
    /// The error ends a stream whose start already went out.
    pub(crate) mid_stream: bool,
}

impl RequestError {
    /// What was wrong with the request, then what to do about it.
    fn advice(&self) -> String {
        match self {
            err @ RequestError::TooLarge { .. } => {
                format!("{err}: send a smaller body, or raise server.max_request_bytes")
            }
            err @ RequestError::Unreadable { .. } => {
                format!("{err}: resend the request")
            }
            err @ RequestError::BodyTimeout { .. } => format!(
                "{err}: nothing was forwarded; send the body at once, or raise \
                 server.body_read_timeout_ms"
            ),
            err @ RequestError::Upgrade { .. } => format!(
                "{err}: nothing was forwarded; connect to the provider's WebSocket endpoint \
                 directly, or use its HTTP API through probity"
            ),
            err @ RequestError::Malformed { .. } => format!(
                "{err}: nothing was forwarded; fix the client (or the proxy in front of probity) \
                 that sent it"
            ),
            err @ RequestError::Overloaded { .. } => format!(
                "{err}: retry after {RETRY_AFTER_SECONDS} s, or raise server.max_connections"
            ),
            err @ RequestError::Saturated { .. } => format!(
                "{err}: nothing was forwarded; retry after {RETRY_AFTER_SECONDS} s, or raise \
                 server.max_held_response_bytes"
            ),
            err @ RequestError::AdminUnauthenticated { refusal, variable } => {
                let open = "/metrics, /healthz and /readyz need none";
                match refusal {
                    AdminRefusal::NotConfigured => format!(
                        "{err}, and none is configured: set {variable} in probity's environment \
                         to a random token of at least 16 characters (e.g. `openssl rand -hex \
                         24`), restart probity (or send it SIGHUP), and send it as \
                         `Authorization: Bearer <token>` (or bind admin_listen to 127.0.0.1 to \
                         read them from this host without one); {open}"
                    ),
                    AdminRefusal::Missing => format!(
                        "{err}: send `Authorization: Bearer <token>` with the value of \
                         {variable}; {open}"
                    ),
                    AdminRefusal::Wrong => {
                        format!("{err}: the token sent is not the value of {variable}; {open}")
                    }
                }
            }
            err @ RequestError::AdminCrossSite { crossing } => {
                format!("{err}: {}", crossing.remedy())
            }
            err @ RequestError::ShareSpent { .. } => format!(
                "{err}; nothing was forwarded: read the answers already sent to this client \
                 and retry after {RETRY_AFTER_SECONDS} s, or raise server.max_held_share"
            ),
            err @ RequestError::Unauthenticated { header, prefix } => format!(
                "{err}: nothing was forwarded; send the token probity holds for this app (its \
                 [[clients]] token_env) as `{header}: {prefix}<token>`, where the provider's \
                 API key would go"
            ),
        }
    }
}

impl ProxyError {
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            ProxyError::NoRoute(_) => StatusCode::NOT_FOUND,
            ProxyError::Request(RequestError::TooLarge { .. }) => StatusCode::PAYLOAD_TOO_LARGE,
            ProxyError::Request(
                RequestError::Unreadable { .. } | RequestError::Malformed { .. },
            ) => StatusCode::BAD_REQUEST,
            ProxyError::Request(
                RequestError::Overloaded { .. }
                | RequestError::Saturated { .. }
                | RequestError::ShareSpent { .. },
            ) => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::Request(RequestError::BodyTimeout { .. }) => StatusCode::REQUEST_TIMEOUT,
            ProxyError::Request(RequestError::Upgrade { .. }) => StatusCode::NOT_IMPLEMENTED,
            ProxyError::Request(
                RequestError::Unauthenticated { .. } | RequestError::AdminUnauthenticated { .. },
            ) => StatusCode::UNAUTHORIZED,
            ProxyError::Request(RequestError::AdminCrossSite { .. }) => StatusCode::FORBIDDEN,
            ProxyError::Forward(ForwardError::Timeout { .. }) => StatusCode::GATEWAY_TIMEOUT,
            ProxyError::Forward(_) | ProxyError::InvalidResponse(_) => StatusCode::BAD_GATEWAY,
            ProxyError::Internal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            ProxyError::AdminTimeout { .. } => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The `type` member: a fixed set an app can match on.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            ProxyError::NoRoute(_) => "no_route",
            ProxyError::Request(RequestError::TooLarge { .. }) => "request_too_large",
            ProxyError::Request(
                RequestError::Unreadable { .. } | RequestError::Malformed { .. },
            ) => "bad_request",
            ProxyError::Request(
                RequestError::Overloaded { .. }
                | RequestError::Saturated { .. }
                | RequestError::ShareSpent { .. },
            ) => "overloaded",
            ProxyError::Request(RequestError::BodyTimeout { .. }) => "request_timeout",
            ProxyError::Request(RequestError::Upgrade { .. }) => "upgrade_not_supported",
            ProxyError::Request(
                RequestError::Unauthenticated { .. } | RequestError::AdminUnauthenticated { .. },
            ) => "unauthenticated",
            ProxyError::Request(RequestError::AdminCrossSite { .. }) => "forbidden",
            ProxyError::Forward(ForwardError::Unreachable { .. }) => "upstream_unreachable",
            ProxyError::Forward(ForwardError::Timeout { .. }) => "upstream_timeout",
            ProxyError::Forward(ForwardError::Reset { .. }) => "upstream_reset",
            ProxyError::Forward(ForwardError::TooLarge { .. }) => "upstream_response_too_large",
            ProxyError::InvalidResponse(_) => "provider_invalid_response",
            ProxyError::Internal { .. } => "internal_error",
            ProxyError::AdminTimeout { .. } => "admin_timeout",
        }
    }

    /// The `code` member: the broken invariant for an invalid response, the
    /// limit's configuration key for a timeout, else the type again.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            ProxyError::InvalidResponse(violation) => violation.invariant.as_str(),
            ProxyError::Forward(ForwardError::Timeout { key, .. }) => key,
            ProxyError::Request(RequestError::AdminUnauthenticated { .. }) => {
                "admin_token_required"
            }
            ProxyError::Request(RequestError::AdminCrossSite { crossing }) => crossing.as_str(),
            _ => self.kind(),
        }
    }

    /// What happened, then what to do about it.
    pub(crate) fn message(&self, at: &Answering<'_>) -> String {
        let route = at.route.unwrap_or("-");
        match self {
            ProxyError::NoRoute(NoRoute { path, prefixes }) if prefixes.is_empty() => format!(
                "no route matches the path {}: check the client's base URL (the configured \
                 prefixes are listed to a client that presents its token)",
                truncate(path, 200),
            ),
            ProxyError::NoRoute(NoRoute { path, prefixes }) => format!(
                "no route matches the path {}; the configured prefixes are {}: put one of them \
                 at the start of the client's base URL path, e.g. http://<probity>{}",
                truncate(path, 200),
                prefixes.join(", "),
                prefixes.first().map_or("/ollama", String::as_str),
            ),
            ProxyError::Request(err) => err.advice(),
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
            ProxyError::InvalidResponse(violation) => {
                let fate = if at.mid_stream {
                    "the stream was cut here: what came before this event was passed on"
                } else {
                    "the response was not passed on"
                };
                let advice = if at.retry_invalid {
                    "Retry, or report it to the provider".to_string()
                } else {
                    format!(
                        "Report it to the provider (route {route} advises no retry: set \
                         retry_invalid_response = true to let clients retry)"
                    )
                };
                format!(
                    "the provider's response broke the invariant {}: {}; {fate}. {advice}",
                    violation.invariant, violation.message
                )
            }
            ProxyError::Internal { .. } => format!(
                "{self}; this is a fault in probity, not in the provider: retry the request, \
                 and report it with this request id and probity's log (route {route})"
            ),
            ProxyError::AdminTimeout { .. } => format!(
                "{self}: retry after {ADMIN_RETRY_AFTER_SECONDS} s; if it keeps happening, check \
                 the capture store's health (a bucket's latency, a full or slow disk)"
            ),
        }
    }

    /// The error object of a stream's final error event (its status line
    /// is already sent): probity's fields, in the OpenAI layout.
    pub(crate) fn error_object(&self, at: &Answering<'_>) -> Value {
        json!({
            "type": self.kind(),
            "code": self.code(),
            "message": self.message(at),
            "route": at.route,
            "request_id": at.request_id.to_str().unwrap_or_default(),
        })
    }

    /// The error body in the envelope of the dialect the app speaks, so
    /// that its SDK puts probity's message into its exception; probity's
    /// own fields go wherever the envelope has room.
    fn body(&self, at: &Answering<'_>) -> Value {
        let (kind, code, message) = (self.kind(), self.code(), self.message(at));
        let request_id = at.request_id.to_str().unwrap_or_default();
        match at.envelope {
            Envelope::Nested => json!({"error": {
                "message": message, "type": kind, "param": null, "code": code,
                "route": at.route, "request_id": request_id,
            }}),
            Envelope::Typed => json!({"type": "error", "error": {
                "type": kind, "message": message, "code": code,
                "route": at.route, "request_id": request_id,
            }}),
            Envelope::Flat {
                message: member,
                kind: kind_member,
            } => {
                let mut body = serde_json::Map::new();
                body.insert(member.into(), Value::from(message));
                body.insert(kind_member.unwrap_or("type").into(), Value::from(kind));
                body.insert("code".into(), Value::from(code));
                body.insert("route".into(), json!(at.route));
                body.insert("request_id".into(), Value::from(request_id));
                Value::Object(body)
            }
            Envelope::Amazon => json!({
                "message": message, "type": kind, "code": code,
                "route": at.route, "request_id": request_id,
            }),
            Envelope::Google => json!({"error": {
                "code": self.status().as_u16(),
                "message": message,
                "status": google_status(self.status()),
                "details": [{
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": code,
                    "domain": "probity",
                    "metadata": {"type": kind, "route": at.route, "request_id": request_id},
                }],
            }}),
        }
    }

    /// The error response: the one mapping from error to HTTP.
    pub(crate) fn respond(&self, at: &Answering<'_>) -> Response<Bytes> {
        // Serializing a JSON value cannot fail.
        let json = serde_json::to_vec(&self.body(at)).unwrap_or_default();
        let mut response = Response::new(Bytes::from(json));
        *response.status_mut() = self.status();
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(X_REQUEST_ID, at.request_id.clone());
        if at.envelope == Envelope::Amazon {
            // botocore and the JS SDK take the error's code from here (its
            // exception class name for AWS's own errors): probity's type.
            headers.insert(X_AMZN_ERROR_TYPE, HeaderValue::from_static(self.kind()));
        }
        match self {
            ProxyError::Request(
                RequestError::Overloaded { .. }
                | RequestError::Saturated { .. }
                | RequestError::ShareSpent { .. },
            ) => {
                headers.insert(RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECONDS));
            }
            // Whatever followed the head on this connection (an ambiguous
            // head's rest, a body left unread) is not to be read as another
            // request.
            ProxyError::Request(
                RequestError::Malformed { .. }
                | RequestError::Unreadable { .. }
                | RequestError::TooLarge { .. }
                | RequestError::BodyTimeout { .. }
                | RequestError::Upgrade { .. },
            ) => {
                headers.insert(CONNECTION, HeaderValue::from_static("close"));
            }
            // The body of a refused request is never read: not another request.
            ProxyError::Request(RequestError::Unauthenticated { .. }) => {
                headers.insert(CONNECTION, HeaderValue::from_static("close"));
                headers.insert(
                    WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"probity\""),
                );
            }
            ProxyError::Request(RequestError::AdminUnauthenticated { .. }) => {
                headers.insert(
                    WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"probity admin\""),
                );
            }
            ProxyError::AdminTimeout { .. } => {
                headers.insert(
                    RETRY_AFTER,
                    HeaderValue::from_static(ADMIN_RETRY_AFTER_SECONDS),
                );
            }
            // SDKs retry a 5xx by default: each retry of a corrupt answer is
            // billed again, so the route decides.
            ProxyError::InvalidResponse(_) => {
                let advice = if at.retry_invalid { "true" } else { "false" };
                headers.insert(X_SHOULD_RETRY, HeaderValue::from_static(advice));
            }
            _ => {}
        }
        response
    }
}

/// The `google.rpc.Code` name Google's APIs pair with an HTTP status.
fn google_status(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 413 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        404 => "NOT_FOUND",
        500 => "INTERNAL",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => "UNAVAILABLE",
    }
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

    static RID: HeaderValue = HeaderValue::from_static("rid-1");

    fn at(envelope: Envelope) -> Answering<'static> {
        Answering {
            route: Some("ollama"),
            request_id: &RID,
            envelope,
            retry_invalid: false,
            mid_stream: false,
        }
    }

    fn body(err: ProxyError, envelope: Envelope) -> (StatusCode, Value) {
        let response = err.respond(&at(envelope));
        let json = serde_json::from_slice(response.body()).unwrap();
        (response.status(), json)
    }

    fn timeout() -> ProxyError {
        ForwardError::Timeout {
            upstream: "http://127.0.0.1:11434".into(),
            waited_for: "response",
            after: Duration::from_millis(1500),
            key: "timeout_ms",
        }
        .into()
    }

    fn invalid() -> ProxyError {
        Violation {
            invariant: probity_judge::violation::Invariant::EmbeddingCountMismatch,
            message: "expected 16 vectors for 16 inputs, got 15".into(),
        }
        .into()
    }

    #[test]
    fn the_openai_envelope_carries_probitys_fields() {
        let (status, json) = body(timeout(), Envelope::Nested);
        assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
        let error = &json["error"];
        assert_eq!(error["type"], "upstream_timeout");
        assert_eq!(error["code"], "timeout_ms");
        assert_eq!(error["param"], Value::Null);
        assert_eq!(error["route"], "ollama");
        assert_eq!(error["request_id"], "rid-1");
        assert!(error["message"]
            .as_str()
            .unwrap()
            .contains("within 1500 ms"));
        assert_eq!(json.as_object().unwrap().len(), 1);
        let keys: Vec<&String> = error.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            ["message", "type", "param", "code", "route", "request_id"]
        );
    }

    #[test]
    fn each_envelope_puts_the_message_where_its_sdk_reads_it() {
        let message = |json: &Value, pointer: &str| {
            json.pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .contains("embedding_count_mismatch")
        };
        let (_, anthropic) = body(invalid(), Envelope::Typed);
        assert_eq!(anthropic["type"], "error");
        assert!(message(&anthropic, "/error/message"));
        for member in ["error", "message", "detail"] {
            let flat = Envelope::Flat {
                message: member,
                kind: None,
            };
            let (_, json) = body(invalid(), flat);
            assert!(message(&json, &format!("/{member}")), "{json}");
            assert_eq!(json["type"], "provider_invalid_response");
            assert_eq!(json["request_id"], "rid-1");
        }
        let tei = Envelope::Flat {
            message: "error",
            kind: Some("error_type"),
        };
        let (_, json) = body(invalid(), tei);
        assert_eq!(json["error_type"], "provider_invalid_response");
        let (_, google) = body(invalid(), Envelope::Google);
        assert_eq!(google["error"]["code"], 502);
        assert_eq!(google["error"]["status"], "UNAVAILABLE");
        assert!(message(&google, "/error/message"));
        assert_eq!(
            google["error"]["details"][0]["reason"],
            "embedding_count_mismatch"
        );
    }

    #[test]
    fn an_invalid_response_says_whether_to_retry() {
        let response = invalid().respond(&at(Envelope::Nested));
        assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
        assert_eq!(response.headers()[&X_SHOULD_RETRY], "false");
        let text = String::from_utf8(response.body().to_vec()).unwrap();
        assert!(text.contains("advises no retry"), "{text}");
        let retry = Answering {
            retry_invalid: true,
            ..at(Envelope::Nested)
        };
        let response = invalid().respond(&retry);
        assert_eq!(response.headers()[&X_SHOULD_RETRY], "true");
        let text = String::from_utf8(response.body().to_vec()).unwrap();
        assert!(
            text.contains("Retry, or report it to the provider"),
            "{text}"
        );
        let cut = Answering {
            mid_stream: true,
            ..at(Envelope::Nested)
        };
        let object = invalid().error_object(&cut);
        let text = object["message"].as_str().unwrap();
        assert!(text.contains("what came before this event was passed on"));
        assert!(!text.contains("not passed on"), "{text}");
        assert!(timeout()
            .respond(&at(Envelope::Nested))
            .headers()
            .get(&X_SHOULD_RETRY)
            .is_none());
    }

    #[test]
    fn overload_says_when_to_retry() {
        let response =
            ProxyError::from(RequestError::Overloaded { limit: 4 }).respond(&Answering {
                route: None,
                ..at(Envelope::Nested)
            });
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[RETRY_AFTER], "1");
    }
}
