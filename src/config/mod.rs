//! Configuration: the TOML schema as plain serde structs with their defaults.
//!
//! Loading is two steps, like every config in this codebase: *parse* the text
//! into these structs (see [`load`]), then [`Config::validate`] the values.
//! Both steps collect every problem with its key path, so a user fixes a file
//! in one pass, and the process exits before it binds a port.

mod load;
pub mod reference;
mod validate;

pub use load::{load, load_file, Problem, Problems};
pub(crate) use validate::parse_age;
pub use validate::{Location, UpstreamUrl, UNKNOWN_CLIENT};
// An output contract's settings belong to the judging core, which also
// validates them; `[routes.contract]` is read into them here.
pub use probity_judge::contract::{CitationsConfig, ContractConfig, OnInvalid, DEFAULT_DEGRADED};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The configuration compiled into the binary: the text of `config/probity.toml`.
pub const DEFAULT_TOML: &str = include_str!("../../config/probity.toml");

/// A probity configuration file: its tables.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// `[server]`.
    pub server: ServerConfig,
    /// `[[routes]]`.
    pub routes: Vec<RouteConfig>,
    /// `[capture]`.
    pub capture: CaptureConfig,
    /// `[[clients]]`.
    pub clients: Vec<ClientConfig>,
    /// `[telemetry]`.
    pub telemetry: TelemetryConfig,
    /// `[admin]`.
    pub admin: AdminConfig,
}

/// `[admin]`: who may read what probity keeps (captures, the admin page's
/// data) or change its state (`POST /reload`) on the admin listener.
/// `/metrics`, `/healthz` and `/readyz` are open to every caller.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// The environment variable holding the admin token (never the token
    /// itself); while it is unset, those endpoints are refused to everyone.
    pub token_env: String,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            token_env: "PROBITY_ADMIN_TOKEN".into(),
        }
    }
}

/// `[telemetry]`: where spans go. Read at start only (a reload keeps the
/// exporter it has).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The OTLP/HTTP base URL (`http://collector:4318`; spans go to its
    /// `/v1/traces`). Empty: the `OTEL_EXPORTER_OTLP_*` variables decide,
    /// and without them no span is made.
    pub otlp_endpoint: String,
    /// Finished spans waiting to be exported; past it, new ones are dropped.
    pub queue: u64,
    /// The longest one export may take before its spans are dropped.
    pub export_timeout_ms: u64,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            otlp_endpoint: String::new(),
            queue: 4096,
            export_timeout_ms: 10_000,
        }
    }
}

/// One `[[clients]]` table: an app allowed in, and where its token is.
/// When any is configured, only requests presenting one of their tokens
/// are proxied.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ClientConfig {
    /// The `client` label on metrics and logs.
    pub name: String,
    /// The environment variable holding the client's token (never the
    /// token itself: a configuration file is read by more people).
    pub token_env: String,
}

/// `[server]`: the listeners and limits that apply to every request.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// The proxy listener, `ip:port`.
    pub listen: String,
    /// Metrics, health and captures; never the proxy port.
    pub admin_listen: String,
    /// The largest request body read (the body probity must hold).
    pub max_request_bytes: u64,
    /// Connections served at once; more are answered 503.
    pub max_connections: u64,
    /// How long a client may take to send its request head.
    pub header_read_timeout_ms: u64,
    /// How long a client may take to send an inspected request's body.
    pub body_read_timeout_ms: u64,
    /// The most header lines a request head may have; more get 431.
    pub max_header_count: u64,
    /// The largest request head, in bytes (at least 8192); larger get 431.
    pub max_header_bytes: u64,
    /// How long requests in flight may take to finish on shutdown.
    pub drain_timeout_ms: u64,
    /// How many proxies in front of probity are trusted to have appended
    /// to `X-Forwarded-For`; addresses further left are dropped.
    pub trusted_hops: u32,
    /// The most bytes of inspected answers held for clients still reading
    /// them; past it, new inspected requests get 503 until readers catch up.
    pub max_held_response_bytes: u64,
    /// The most of that budget one client (its `[[clients]]` name, else
    /// its address) may hold, as a fraction: 0 < x <= 1. Past it only that
    /// client's inspected requests get 503.
    pub max_held_share: f64,
    /// How long a client may take to read an inspected answer held for it;
    /// then its connection is closed.
    pub send_timeout_ms: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".into(),
            admin_listen: "127.0.0.1:9464".into(),
            max_request_bytes: 16 * 1024 * 1024,
            max_connections: 4096,
            header_read_timeout_ms: 10_000,
            body_read_timeout_ms: 30_000,
            max_header_count: 100,
            max_header_bytes: 32 * 1024,
            drain_timeout_ms: 30_000,
            trusted_hops: 0,
            max_held_response_bytes: 256 * 1024 * 1024,
            max_held_share: 0.25,
            send_timeout_ms: 60_000,
        }
    }
}

/// `[capture]`: where the verbatim upstream responses of inspected
/// exchanges are kept, and how much of them.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct CaptureConfig {
    /// Whether exchanges are captured at all.
    pub enabled: bool,
    /// A directory (`path` or `file:///path`), or `memory:` (lost on exit).
    pub store: String,
    /// The most captures kept; the oldest go first.
    pub max_entries: u64,
    /// The total of the bodies kept; a single larger body is listed, not
    /// kept. Unset: 1 GiB on disk or in a bucket, 64 MiB in `memory:` (the
    /// process's own memory).
    pub max_bytes: Option<u64>,
    /// Captures older than this are evicted: `30s`, `15m`, `12h`, `7d`.
    pub max_age: String,
    /// Captures waiting to be written; past it, new ones are dropped.
    pub queue: u64,
    /// Writes to the store at once.
    pub write_concurrency: u64,
    /// The longest one write may take before its capture is dropped.
    pub write_timeout_ms: u64,
}

impl Default for CaptureConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            store: "probity-captures".into(),
            max_entries: 100_000,
            max_bytes: None,
            max_age: "7d".into(),
            queue: 1024,
            write_concurrency: 4,
            write_timeout_ms: 10_000,
        }
    }
}

impl CaptureConfig {
    /// `max_bytes`, or by default 1 GiB on disk or in a bucket and 64 MiB
    /// in `memory:`, where the bodies are the process's own memory: a
    /// container sized for proxying would be killed long before 1 GiB.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes.unwrap_or_else(|| {
            if matches!(Location::parse(&self.store), Ok(Location::Memory)) {
                64 * 1024 * 1024
            } else {
                1024 * 1024 * 1024
            }
        })
    }
}

/// A route's `capture` and `capture_sample`, as the request path reads them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CapturePolicy {
    pub(crate) mode: CaptureMode,
    pub(crate) sample: f64,
}

/// A route's `capture`: which of its inspected exchanges are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema, Default)]
#[serde(rename_all = "lowercase")]
pub enum CaptureMode {
    /// Normalized, rejected, cut, output-invalid and stitched exchanges.
    #[default]
    Anomalies,
    /// Every inspected exchange (valid ones sampled by `capture_sample`).
    All,
    /// None.
    Off,
}

/// One `[[routes]]` table: requests whose path starts with `prefix` go to
/// `upstream`, judged by `dialect`. Routes are tried by longest prefix.
// `name`, `prefix`, `upstream` and `dialect` are required; serde defaults
// them to empty only so that one missing key does not hide the problems of
// the others: validation reports them as missing (and the reference, which
// asks validation, marks them required).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RouteConfig {
    /// The `route` label on metrics and logs.
    pub name: String,
    /// Matched on whole path segments; the longest prefix wins.
    pub prefix: String,
    /// `http(s)://host[:port][/base/path]`.
    pub upstream: String,
    /// How answers are judged: a name from the judging core's dialect table.
    #[schemars(extend("enum" = probity_judge::inspect::names()))]
    pub dialect: Option<String>,
    /// The environment variable holding the provider credential.
    pub api_key_env: Option<String>,
    /// A `bedrock` route's AWS region: requests are signed with SigV4
    /// (service `bedrock`) with the `AWS_*` credentials of probity's
    /// environment, instead of an API key.
    pub aws_region: Option<String>,
    /// A Google credential for Vertex AI, on a route of any dialect:
    /// `"metadata"` (the metadata server's token: GKE Workload Identity, a
    /// VM's service account; `GCE_METADATA_HOST` names another server) or
    /// the path of a service-account key file (JSON), read at start.
    /// Requests carry its access token as `Authorization: Bearer`,
    /// refreshed 5 minutes before it expires; instead of `api_key_env` or
    /// `aws_region`.
    pub google_credentials: Option<String>,
    /// A `bedrock` route's model ids (as the path names them, decoded: an
    /// application inference profile's ARN) mapped to the model family
    /// whose `invoke` body they take: `anthropic`, `titan-embed-text-v2`,
    /// `cohere-embed`.
    pub model_families: std::collections::BTreeMap<String, String>,
    /// How long opening a connection to the upstream may take.
    pub connect_timeout_ms: u64,
    /// Whole response for a non-streaming call; first byte for a stream.
    pub timeout_ms: u64,
    /// Longest silence inside a streaming response.
    pub idle_timeout_ms: u64,
    /// The largest upstream response read or relayed.
    pub max_response_bytes: u64,
    /// `[routes.contract]`.
    pub contract: Option<ContractConfig>,
    /// Embedding requests with more inputs are split into chunks of this
    /// many; absent: no chunking.
    pub max_batch_inputs: Option<u64>,
    /// Chunks of one request in flight at once.
    pub max_chunk_concurrency: u64,
    /// Whether a client should retry a response that broke a payload
    /// invariant (`x-should-retry`); off by default, since every retry of a
    /// corrupt answer is billed again.
    pub retry_invalid_response: bool,
    /// Ask the upstream for gzip, br or zstd on every answer read whole,
    /// whatever the client accepts (decoded for a client that accepts
    /// none); off: only the codings the client accepts are asked.
    pub upstream_compression: bool,
    /// Whose definitions the relations between figures are judged by:
    /// `provider` (the dialect's provider's own), `xai` (an `openai` route
    /// to xAI's convention: reasoning outside `completion_tokens`, inside
    /// `total_tokens`) or `off` (each figure alone); absent: the
    /// provider's, or xAI's for an upstream at `api.x.ai`.
    #[schemars(extend("enum" = probity_judge::figures::Convention::NAMES))]
    pub relations: Option<String>,
    /// Which exchanges are captured: `anomalies`, `all` or `off`.
    pub capture: CaptureMode,
    /// Under `capture = "all"`: the share (0.0 to 1.0) of valid exchanges kept.
    pub capture_sample: f64,
}

impl Default for RouteConfig {
    fn default() -> Self {
        Self {
            name: String::new(),
            prefix: String::new(),
            upstream: String::new(),
            dialect: None,
            api_key_env: None,
            aws_region: None,
            google_credentials: None,
            model_families: std::collections::BTreeMap::new(),
            connect_timeout_ms: 2_000,
            // The SDKs' own: openai and anthropic wait 600 s for a response
            // and 600 s between its bytes (google-genai, ollama, voyageai
            // none, cohere 300 s); a proxy never gives up first.
            timeout_ms: 600_000,
            idle_timeout_ms: 600_000,
            max_response_bytes: 64 * 1024 * 1024,
            contract: None,
            max_batch_inputs: None,
            max_chunk_concurrency: 4,
            retry_invalid_response: false,
            upstream_compression: false,
            relations: None,
            capture: CaptureMode::Anomalies,
            capture_sample: 1.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_default_is_valid_and_serves_every_documented_route() {
        let config = load(DEFAULT_TOML, &probity_judge::inspect::names())
            .expect("embedded default must validate");
        assert_eq!(config.server.listen, "127.0.0.1:8080");
        assert_eq!(config.server.admin_listen, "127.0.0.1:9464");
        let prefixes: Vec<&str> = config.routes.iter().map(|r| r.prefix.as_str()).collect();
        assert_eq!(
            prefixes,
            [
                "/ollama",
                "/openai",
                "/anthropic",
                "/cohere",
                "/jina",
                "/voyage",
                "/tei",
                "/gemini",
                "/bedrock"
            ]
        );
        assert_eq!(config.server.listen, "127.0.0.1:8080");
        assert_eq!(config.server.admin_listen, "127.0.0.1:9464");
    }

    #[test]
    fn omitted_keys_take_their_defaults() {
        let config = load(
            r#"
            [[routes]]
            name = "a"
            prefix = "/a"
            upstream = "http://127.0.0.1:1"
            dialect = "passthrough"
            "#,
            &probity_judge::inspect::names(),
        )
        .unwrap();
        let route = &config.routes[0];
        assert_eq!(route.timeout_ms, 600_000);
        assert_eq!(route.idle_timeout_ms, 600_000);
        assert_eq!(route.connect_timeout_ms, 2_000);
        assert_eq!(route.max_response_bytes, 67_108_864);
        assert_eq!(route.api_key_env, None);
        assert_eq!(config.server.max_connections, 4096);
    }
}
