//! Validation: the rules a parsed [`Config`] must meet before anything binds.

use std::collections::HashMap;
use std::net::SocketAddr;

/// hyper's smallest HTTP/1 read buffer, which bounds a request head.
const MIN_HEADER_BYTES: u64 = 8192;

use http::uri::{Authority, Scheme};
use http::Uri;

use super::{Config, Problem, RouteConfig, ServerConfig};

/// An upstream URL taken apart: what forwarding needs to build each request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamUrl {
    /// `http` or `https`.
    pub scheme: Scheme,
    /// Host and port.
    pub authority: Authority,
    /// The base path without a trailing slash: `""` or `/v1`.
    pub base_path: String,
}

impl UpstreamUrl {
    /// Accepts `http(s)://host[:port][/base/path]`, nothing more: no
    /// credentials in the URL (they would end up in logs), no query, no fragment.
    pub fn parse(text: &str) -> Result<Self, String> {
        const EXPECTED: &str = "not an http(s) URL (expected http(s)://host[:port][/base/path])";
        let uri: Uri = text.parse().map_err(|_| EXPECTED.to_string())?;
        let scheme = uri.scheme().cloned().ok_or(EXPECTED)?;
        if scheme != Scheme::HTTP && scheme != Scheme::HTTPS {
            return Err(EXPECTED.into());
        }
        let authority = uri.authority().cloned().ok_or(EXPECTED)?;
        if authority.host().is_empty() {
            return Err(EXPECTED.into());
        }
        if authority.as_str().contains('@') {
            return Err("must not carry credentials: use api_key_env".into());
        }
        if uri.query().is_some() || text.contains('#') {
            return Err("must not have a query or fragment".into());
        }
        Ok(Self {
            scheme,
            authority,
            base_path: uri.path().trim_end_matches('/').to_string(),
        })
    }
}

impl ServerConfig {
    /// The problems of `[server]`.
    fn validate(&self, problems: &mut Vec<Problem>) {
        let listen = socket_addr("server.listen", &self.listen, problems);
        let admin = socket_addr("server.admin_listen", &self.admin_listen, problems);
        if let (Some(listen), Some(admin)) = (listen, admin) {
            if listen == admin && listen.port() != 0 {
                problems.push(Problem::new(
                    "server.admin_listen",
                    "must differ from server.listen: metrics and captures never share the proxy port",
                ));
            }
        }
        for (key, value) in [
            ("server.max_request_bytes", self.max_request_bytes),
            ("server.max_connections", self.max_connections),
            ("server.header_read_timeout_ms", self.header_read_timeout_ms),
            ("server.body_read_timeout_ms", self.body_read_timeout_ms),
            ("server.max_header_count", self.max_header_count),
            (
                "server.max_held_response_bytes",
                self.max_held_response_bytes,
            ),
            ("server.send_timeout_ms", self.send_timeout_ms),
        ] {
            positive(key, value, problems);
        }
        // Written so that NaN fails too.
        if !(self.max_held_share > 0.0 && self.max_held_share <= 1.0) {
            problems.push(Problem::new(
                "server.max_held_share",
                format!(
                    "is {}: must be a fraction of server.max_held_response_bytes, more than 0 \
                     and at most 1 (0.25: one client may hold a quarter of it)",
                    self.max_held_share
                ),
            ));
        }
        if self.max_header_bytes < MIN_HEADER_BYTES {
            problems.push(Problem::new(
                "server.max_header_bytes",
                format!(
                    "is {}: must be at least {MIN_HEADER_BYTES} (the smallest read buffer the HTTP/1 server takes)",
                    self.max_header_bytes
                ),
            ));
        }
    }
}

impl Config {
    /// Every semantic problem of an already parsed file, with its key path.
    pub fn validate(&self, dialects: &[&str]) -> Vec<Problem> {
        let mut problems = Vec::new();
        self.server.validate(&mut problems);

        if self.routes.is_empty() {
            problems.push(Problem::new(
                "routes",
                "no route configured: add at least one [[routes]] table",
            ));
        }
        let mut names: HashMap<&str, usize> = HashMap::new();
        let mut prefixes: HashMap<&str, usize> = HashMap::new();
        for (i, route) in self.routes.iter().enumerate() {
            let path = format!("routes[{i}]");
            route.validate(&path, dialects, &mut problems);
            if !route.name.is_empty() {
                if let Some(first) = names.insert(&route.name, i) {
                    problems.push(Problem::new(
                        format!("{path}.name"),
                        format!("\"{}\" is already the name of routes[{first}]", route.name),
                    ));
                }
            }
            if !route.prefix.is_empty() {
                if let Some(first) = prefixes.insert(&route.prefix, i) {
                    problems.push(Problem::new(
                        format!("{path}.prefix"),
                        format!(
                            "\"{}\" is already the prefix of routes[{first}]",
                            route.prefix
                        ),
                    ));
                }
            }
        }
        validate_clients(&self.clients, &mut problems);
        self.capture.validate(&mut problems);
        self.telemetry.validate(&mut problems);
        if self.admin.token_env.is_empty() {
            problems.push(Problem::new(
                "admin.token_env",
                "empty: the environment variable holding the admin token, e.g. \
                 \"PROBITY_ADMIN_TOKEN\" (leave it unset to refuse the admin endpoints \
                 that read captures or reload)",
            ));
        } else if let Some(i) = self
            .clients
            .iter()
            .position(|c| c.token_env == self.admin.token_env)
        {
            problems.push(Problem::new(
                "admin.token_env",
                format!(
                    "{} is also the token of clients[{i}]: an app's token must not read \
                     captures; give the admin its own",
                    self.admin.token_env
                ),
            ));
        }
        problems
    }
}

impl super::TelemetryConfig {
    /// The problems of `[telemetry]`.
    fn validate(&self, problems: &mut Vec<Problem>) {
        if !self.otlp_endpoint.is_empty() {
            if let Err(why) = otlp_endpoint(&self.otlp_endpoint) {
                problems.push(Problem::new("telemetry.otlp_endpoint", why));
            }
        }
        positive("telemetry.queue", self.queue, problems);
        positive(
            "telemetry.export_timeout_ms",
            self.export_timeout_ms,
            problems,
        );
    }
}

/// An OTLP/HTTP base URL: `http(s)://host[:port][/path]`, no query.
pub(crate) fn otlp_endpoint(text: &str) -> Result<http::Uri, String> {
    let uri: http::Uri = text
        .parse()
        .map_err(|err| format!("{text:?} is not a URL ({err}): write http://host:4318"))?;
    match (uri.scheme_str(), uri.host(), uri.query()) {
        (Some("http" | "https"), Some(_), None) => Ok(uri),
        _ => Err(format!(
            "{text:?} must be http(s)://host[:port][/path] (OTLP over HTTP), e.g. http://127.0.0.1:4318"
        )),
    }
}

impl super::CaptureConfig {
    /// The problems of `[capture]`.
    fn validate(&self, problems: &mut Vec<Problem>) {
        if let Err(why) = Location::parse(&self.store) {
            problems.push(Problem::new("capture.store", why));
        }
        if let Err(why) = parse_age(&self.max_age) {
            problems.push(Problem::new("capture.max_age", why));
        }
        for (key, value) in [
            ("capture.max_entries", self.max_entries),
            ("capture.max_bytes", self.max_bytes()),
            ("capture.queue", self.queue),
            ("capture.write_concurrency", self.write_concurrency),
            ("capture.write_timeout_ms", self.write_timeout_ms),
        ] {
            positive(key, value, problems);
        }
    }
}

/// Where captures go, as `[capture] store` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A directory on this machine.
    Dir(std::path::PathBuf),
    /// This process's memory: lost on exit.
    Memory,
    /// A bucket, as its URL: `s3://bucket/prefix`, `gs://…` or `az://…`.
    Bucket(String),
}

/// The bucket schemes, each with the cargo feature that builds it and
/// whether this binary was built with it.
const BUCKETS: &[(&str, &str, bool)] = &[
    ("s3", "s3", cfg!(feature = "s3")),
    ("gs", "gcs", cfg!(feature = "gcs")),
    ("az", "azure", cfg!(feature = "azure")),
];

impl Location {
    /// `memory:`, `file:///abs/path`, or a plain (absolute or relative) path.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text == "memory:" {
            return Ok(Self::Memory);
        }
        if let Some(path) = text.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(format!("\"{text}\": a file URL needs an absolute path (file:///var/lib/probity/captures)"));
            }
            return Ok(Self::Dir(std::path::PathBuf::from(path)));
        }
        if let Some((scheme, rest)) = text.split_once("://") {
            return Self::bucket(text, scheme, rest);
        }
        if text.is_empty() {
            return Err("missing: a directory, file:///path or memory:".into());
        }
        Ok(Self::Dir(std::path::PathBuf::from(text)))
    }

    /// `scheme://bucket[/prefix]`, when this binary has the scheme's backend.
    fn bucket(text: &str, scheme: &str, rest: &str) -> Result<Self, String> {
        let Some((_, feature, built)) = BUCKETS.iter().find(|(s, _, _)| *s == scheme) else {
            return Err(format!(
                "\"{scheme}://\" is not a capture store: a directory, file:///path, memory:, s3://, gs:// or az://"
            ));
        };
        if !built {
            return Err(format!(
                "\"{scheme}://\" needs the `{feature}` cargo feature, which this binary was built without (cargo build --release --features {feature})"
            ));
        }
        if rest.split('/').next().is_none_or(str::is_empty) {
            return Err(format!(
                "\"{text}\": no bucket name ({scheme}://bucket/prefix)"
            ));
        }
        Ok(Self::Bucket(text.to_string()))
    }
}

/// `30s`, `15m`, `12h` or `7d`, as a duration.
pub(crate) fn parse_age(text: &str) -> Result<std::time::Duration, String> {
    let expected =
        || format!("\"{text}\" is not an age: a whole number then s, m, h or d (e.g. \"7d\")");
    let split = text.len().saturating_sub(1);
    let (number, unit) = (
        text.get(..split).unwrap_or(""),
        text.get(split..).unwrap_or(""),
    );
    let number: u64 = number.parse().map_err(|_| expected())?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(expected()),
    };
    if number == 0 {
        return Err("must be greater than 0".into());
    }
    Ok(std::time::Duration::from_secs(
        number.saturating_mul(seconds),
    ))
}

/// The label `client` takes when no client is configured or none was
/// admitted; no client may be called so.
pub const UNKNOWN_CLIENT: &str = "unknown";

fn validate_clients(clients: &[super::ClientConfig], problems: &mut Vec<Problem>) {
    let mut names: HashMap<&str, usize> = HashMap::new();
    let mut vars: HashMap<&str, usize> = HashMap::new();
    for (i, client) in clients.iter().enumerate() {
        let path = format!("clients[{i}]");
        if let Err(why) = check_name(&client.name) {
            problems.push(Problem::new(format!("{path}.name"), why));
        } else if client.name == UNKNOWN_CLIENT {
            problems.push(Problem::new(
                format!("{path}.name"),
                "\"unknown\" is the label of requests no client was admitted for: choose another",
            ));
        } else if let Some(first) = names.insert(&client.name, i) {
            problems.push(Problem::new(
                format!("{path}.name"),
                format!(
                    "\"{}\" is already the name of clients[{first}]",
                    client.name
                ),
            ));
        }
        if client.token_env.is_empty() {
            problems.push(Problem::new(
                format!("{path}.token_env"),
                "missing (required): the environment variable holding this client's token, \
                 e.g. \"PROBITY_TOKEN_SEARCH_UI\"",
            ));
        } else if let Some(first) = vars.insert(&client.token_env, i) {
            problems.push(Problem::new(
                format!("{path}.token_env"),
                format!(
                    "{} is already the token of clients[{first}]: each client needs its own",
                    client.token_env
                ),
            ));
        }
    }
}

impl RouteConfig {
    /// `aws_region`: a region name, on a `bedrock` route, without
    /// `api_key_env` (the route signs, or sends a key: one of the two).
    fn validate_aws_region(&self, problem: &mut impl FnMut(&str, String)) {
        let Some(region) = &self.aws_region else {
            return;
        };
        let valid = !region.is_empty()
            && region
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !valid {
            problem(
                "aws_region",
                format!("{region:?} is not an AWS region name such as \"us-east-1\""),
            );
        } else if self.api_key_env.is_some() {
            problem(
                "aws_region",
                "beside api_key_env: a route takes either a Bedrock API key (api_key_env) or \
                 SigV4 signing with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (aws_region), \
                 not both"
                    .into(),
            );
        } else if self.dialect.as_deref() != Some("bedrock") {
            problem(
                "aws_region",
                "signs for Amazon Bedrock only: set dialect = \"bedrock\", or remove it".into(),
            );
        }
    }

    /// How the route presents its credential: SigV4 or a Google token
    /// (`api_key_env` alone is a name, checked with the other keys).
    fn validate_credentials(&self, problem: &mut impl FnMut(&str, String)) {
        self.validate_aws_region(problem);
        self.validate_google_credentials(problem);
    }

    /// `google_credentials`: `metadata` or a path, the route's one
    /// credential (its key file is read when the routes are built).
    fn validate_google_credentials(&self, problem: &mut impl FnMut(&str, String)) {
        let Some(credentials) = &self.google_credentials else {
            return;
        };
        if credentials.is_empty() {
            problem(
                "google_credentials",
                "empty: \"metadata\" (the metadata server's token) or the path of a \
                 service-account key file"
                    .into(),
            );
        }
        for (key, set, what) in [
            ("api_key_env", self.api_key_env.is_some(), "an API key"),
            ("aws_region", self.aws_region.is_some(), "SigV4 signing"),
        ] {
            if set {
                problem(
                    "google_credentials",
                    format!(
                        "beside {key}: a route presents one credential, a Google access \
                         token (google_credentials) or {what} ({key}), not both"
                    ),
                );
            }
        }
    }

    /// `relations`: a convention's name (which ones a route's dialect
    /// takes is the route table's to say).
    fn validate_relations(&self, problem: &mut impl FnMut(&str, String)) {
        use probity_judge::figures::Convention;
        let Some(name) = &self.relations else {
            return;
        };
        if Convention::named(name).is_none() {
            problem(
                "relations",
                format!(
                    "unknown convention \"{name}\": one of {}",
                    Convention::NAMES.join(", ")
                ),
            );
        }
    }

    fn validate(&self, path: &str, dialects: &[&str], problems: &mut Vec<Problem>) {
        let mut problem = |key: &str, message: String| {
            problems.push(Problem::new(format!("{path}.{key}"), message));
        };
        if let Err(why) = check_name(&self.name) {
            problem("name", why.into());
        }
        if !(0.0..=1.0).contains(&self.capture_sample) {
            problem(
                "capture_sample",
                format!("{} is not a share: 0.0 to 1.0", self.capture_sample),
            );
        }

        if self.prefix.is_empty() {
            problem("prefix", "missing (required): e.g. \"/ollama\"".into());
        } else if let Err(why) = check_prefix(&self.prefix) {
            problem("prefix", why.into());
        }

        if self.upstream.is_empty() {
            problem(
                "upstream",
                "missing (required): e.g. \"http://127.0.0.1:11434\"".into(),
            );
        } else if let Err(why) = UpstreamUrl::parse(&self.upstream) {
            problem("upstream", why);
        }

        match &self.dialect {
            None => problem(
                "dialect",
                format!("missing (required): one of {}", dialects.join(", ")),
            ),
            Some(name) if !dialects.contains(&name.as_str()) => problem(
                "dialect",
                format!("unknown dialect \"{name}\": one of {}", dialects.join(", ")),
            ),
            Some(_) => {}
        }

        if let Some(var) = &self.api_key_env {
            let valid = var
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                problem(
                    "api_key_env",
                    "must be an environment variable name such as OPENAI_API_KEY".into(),
                );
            }
        }

        self.validate_credentials(&mut problem);
        self.validate_relations(&mut problem);
        if let Some(contract) = &self.contract {
            contract.validate(&mut |key: &str, message: String| {
                problem(&format!("contract.{key}"), message);
            });
        }
        if self.max_batch_inputs == Some(0) {
            problem(
                "max_batch_inputs",
                "must be greater than 0 (leave it out for no chunking)".into(),
            );
        }
        for (key, value) in [
            ("max_chunk_concurrency", self.max_chunk_concurrency),
            ("connect_timeout_ms", self.connect_timeout_ms),
            ("timeout_ms", self.timeout_ms),
            ("idle_timeout_ms", self.idle_timeout_ms),
            ("max_response_bytes", self.max_response_bytes),
        ] {
            if value == 0 {
                problem(key, "must be greater than 0".into());
            }
        }
    }
}

/// A route name is a metric label: short, plain, and present.
fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("missing (required): it is a label on metrics and logs");
    }
    let plain = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
    if plain {
        Ok(())
    } else {
        Err(
            "must be 1 to 64 characters of A-Z, a-z, 0-9, '_', '-', '.', starting with a \
             letter or digit (it is a metric label)",
        )
    }
}

/// A prefix is a path of whole segments: `/` or `/a/b`, never `/a/`.
fn check_prefix(prefix: &str) -> Result<(), &'static str> {
    if prefix == "/" {
        return Ok(());
    }
    if !prefix.starts_with('/') {
        return Err("must start with '/'");
    }
    if prefix.ends_with('/') {
        return Err("must not end with '/': it is matched on whole path segments");
    }
    let bad_segment = prefix[1..]
        .split('/')
        .any(|s| s.is_empty() || s == "." || s == "..");
    if bad_segment {
        return Err("must not contain empty, '.' or '..' segments");
    }
    if prefix
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '?' || c == '#' || c == '%')
    {
        return Err("must be a plain path: no whitespace, '?', '#' or '%'");
    }
    Ok(())
}

fn socket_addr(path: &str, text: &str, problems: &mut Vec<Problem>) -> Option<SocketAddr> {
    match text.parse() {
        Ok(addr) => Some(addr),
        Err(_) => {
            problems.push(Problem::new(
                path,
                format!("not an ip:port such as 127.0.0.1:8080 or [::]:8080 (got \"{text}\")"),
            ));
            None
        }
    }
}

fn positive(path: &str, value: u64, problems: &mut Vec<Problem>) {
    if value == 0 {
        problems.push(Problem::new(path, "must be greater than 0"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_bytes_defaults_by_store_and_a_set_value_wins() {
        let store = |store: &str, max_bytes| crate::config::CaptureConfig {
            store: store.into(),
            max_bytes,
            ..Default::default()
        };
        assert_eq!(store("memory:", None).max_bytes(), 64 << 20);
        assert_eq!(store("probity-captures", None).max_bytes(), 1 << 30);
        assert_eq!(store("s3://bucket/p", None).max_bytes(), 1 << 30);
        assert_eq!(store("memory:", Some(1 << 30)).max_bytes(), 1 << 30);
        let mut problems = Vec::new();
        store("memory:", Some(0)).validate(&mut problems);
        assert_eq!(problems.len(), 1, "{problems:?}");
    }

    #[test]
    fn store_urls_are_parsed() {
        assert_eq!(Location::parse("memory:"), Ok(Location::Memory));
        assert_eq!(
            Location::parse("file:///var/lib/probity/captures"),
            Ok(Location::Dir("/var/lib/probity/captures".into()))
        );
        assert_eq!(
            Location::parse("probity-captures"),
            Ok(Location::Dir("probity-captures".into()))
        );
        assert_eq!(
            Location::parse("s3://bucket/prefix").is_ok(),
            cfg!(feature = "s3")
        );
        let unbuilt = Location::parse("az://container/prefix");
        if !cfg!(feature = "azure") {
            assert!(unbuilt.unwrap_err().contains("`azure` cargo feature"));
        }
        assert!(Location::parse("ftp://host/x").is_err());
        if cfg!(feature = "s3") {
            assert!(Location::parse("s3:///prefix").is_err());
        }
        assert!(Location::parse("file://relative").is_err());
        assert!(Location::parse("").is_err());
    }

    use crate::config::load;

    #[test]
    fn upstream_urls_are_taken_apart() {
        let url = UpstreamUrl::parse("http://127.0.0.1:11434").unwrap();
        assert_eq!(url.authority.as_str(), "127.0.0.1:11434");
        assert_eq!(url.base_path, "");
        let url = UpstreamUrl::parse("https://gateway.example/v1/").unwrap();
        assert_eq!(url.scheme, Scheme::HTTPS);
        assert_eq!(url.base_path, "/v1");
        for bad in [
            "127.0.0.1:11434",
            "ftp://x",
            "http://",
            "http://u:p@host",
            "http://h/?q=1",
            "/path",
        ] {
            assert!(UpstreamUrl::parse(bad).is_err(), "{bad} must be refused");
        }
    }

    #[test]
    fn prefixes_are_whole_segments() {
        assert!(check_prefix("/").is_ok());
        assert!(check_prefix("/a/b").is_ok());
        for bad in ["a", "/a/", "/a//b", "/a/../b", "/a?x", "/a b"] {
            assert!(check_prefix(bad).is_err(), "{bad} must be refused");
        }
    }

    #[test]
    fn clients_need_a_label_name_and_their_own_token_variable() {
        let problems = load(
            r#"
            [[routes]]
            name = "a"
            prefix = "/a"
            upstream = "http://127.0.0.1:1"
            dialect = "openai"

            [[clients]]
            name = "unknown"
            token_env = "T1"
            [[clients]]
            name = "ui"
            token_env = "T1"
            [[clients]]
            name = "ui"
            [[clients]]
            name = "has space"
            token_env = "T4"
            [[clients]]
            token = "inline"
            "#,
            &["openai"],
        )
        .unwrap_err();
        let paths: Vec<&str> = problems.0.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "clients[4].token",
                "clients[0].name",
                "clients[1].token_env",
                "clients[2].name",
                "clients[2].token_env",
                "clients[3].name",
                "clients[4].name",
                "clients[4].token_env",
            ],
            "{problems}"
        );
    }

    #[test]
    fn duplicates_missing_keys_and_zero_limits_are_all_reported() {
        let problems = load(
            r#"
            [server]
            listen = "127.0.0.1:8080"
            admin_listen = "127.0.0.1:8080"
            max_request_bytes = 0

            [[routes]]
            name = "a"
            prefix = "/a"
            upstream = "http://127.0.0.1:1"
            dialect = "openai"
            api_key_env = "not a var"

            [[routes]]
            name = "a"
            prefix = "/a"
            upstream = "http://127.0.0.1:2"
            dialect = "openai"
            idle_timeout_ms = 0

            [[routes]]
            prefix = "/c/"
            "#,
            &probity_judge::inspect::names(),
        )
        .unwrap_err();
        let found: Vec<String> = problems.0.iter().map(ToString::to_string).collect();
        let expect = [
            "server.admin_listen: must differ",
            "server.max_request_bytes: must be greater than 0",
            "routes[0].api_key_env: must be an environment variable name",
            "routes[1].idle_timeout_ms: must be greater than 0",
            "routes[1].name: \"a\" is already the name of routes[0]",
            "routes[1].prefix: \"/a\" is already the prefix of routes[0]",
            "routes[2].name: missing",
            "routes[2].prefix: must not end with '/'",
            "routes[2].upstream: missing",
            "routes[2].dialect: missing",
        ];
        for e in expect {
            assert!(
                found.iter().any(|f| f.starts_with(e)),
                "no {e:?} in {found:#?}"
            );
        }
        assert_eq!(found.len(), expect.len(), "{found:#?}");
    }
}
