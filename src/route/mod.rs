//! Routing: the second step of a request (`server` → **`route`** → `forward`).
//!
//! A request's path alone picks its route: the longest configured prefix that
//! matches on whole path segments. Nothing else the client sends (an
//! absolute-form target, a `Host` header) can change where it goes, so probity
//! is never an open proxy.

mod clients;

use std::sync::Arc;
use std::time::Duration;

pub(crate) use clients::{AdminCrossing, AdminRefusal, AdminToken, Clients, Refused};

use crate::config::{Config, ContractConfig, Problem, Problems, RouteConfig, UpstreamUrl};
use crate::forward::{Credential, Limits, Upstream};
use probity_judge::figures::Convention;
use probity_judge::inspect::{self, Dialect};

/// A configured route, ready to serve.
pub(crate) struct Route {
    /// The `route` label on metrics and logs.
    pub(crate) name: Arc<str>,
    pub(crate) prefix: String,
    pub(crate) upstream: Upstream,
    pub(crate) dialect: &'static dyn Dialect,
    /// The route's output contract, for what a schema cannot say.
    pub(crate) contract: Option<Arc<ContractConfig>>,
    /// Embedding batches above this many inputs are chunked.
    pub(crate) max_batch_inputs: Option<usize>,
    pub(crate) max_chunk_concurrency: usize,
    /// `retry_invalid_response`: the `x-should-retry` of a rejection.
    pub(crate) retry_invalid: bool,
    /// `upstream_compression`: answers read whole are always asked for
    /// compressed.
    pub(crate) upstream_compression: bool,
    /// Whose relations between figures its answers are judged by.
    pub(crate) convention: Convention,
    /// Which of its exchanges are captured.
    pub(crate) capture: crate::config::CapturePolicy,
    /// `model_families`: model ids mapped to the endpoint of their family.
    pub(crate) families: Vec<(String, &'static inspect::Endpoint)>,
}

impl Route {
    /// The endpoint a POST to `path` (as sent upstream) is, by the
    /// dialect's table or the route's `model_families`.
    pub(crate) fn endpoint(&self, path: &str) -> Option<&'static inspect::Endpoint> {
        self.dialect.endpoint(path).or_else(|| {
            let model = self.dialect.model(path)?;
            self.families
                .iter()
                .find(|(id, _)| *id == model)
                .and_then(|(_, endpoint)| self.dialect.family_at(endpoint, path))
        })
    }
}

/// A configured route, as the admin page names it (never its credential).
#[derive(Debug, Clone)]
pub(crate) struct RouteSummary {
    pub(crate) name: String,
    pub(crate) prefix: String,
    pub(crate) upstream: String,
    pub(crate) dialect: &'static str,
}

/// What matched: the route and the rest of the path after its prefix.
pub struct Matched<'a> {
    pub(crate) route: &'a Arc<Route>,
    /// Empty or starting with `/`.
    pub(crate) rest: &'a str,
}

/// No configured prefix matches the path; the request is never forwarded.
#[derive(Debug, thiserror::Error)]
#[error("no route matches {path}")]
pub struct NoRoute {
    pub(crate) path: String,
    /// The configured prefixes, so the error can tell the client what exists.
    pub(crate) prefixes: Vec<String>,
}

/// All routes, longest prefix first so the first match is the most specific.
pub struct RouteTable {
    routes: Vec<Arc<Route>>,
    /// `[[clients]]`: who may use these routes.
    pub(crate) clients: Clients,
    /// `[admin]`: who may read captures or reload on the admin listener
    /// (read with the clients, so a reload rotates it too).
    pub(crate) admin: AdminToken,
}

impl RouteTable {
    /// Builds the routes of a validated configuration. `env` reads the
    /// credential variables; a variable that is set but cannot be a header
    /// value is a problem; one that is unset lets the client's own
    /// credential pass (said in one INFO line for all such routes), one set
    /// but empty is a warning.
    pub fn build(config: &Config, env: impl Fn(&str) -> Option<String>) -> Result<Self, Problems> {
        let mut problems = Vec::new();
        let mut routes = Vec::with_capacity(config.routes.len());
        for (i, route) in config.routes.iter().enumerate() {
            match Self::build_one(route, &env) {
                Ok(built) => routes.push(Arc::new(built)),
                Err((key, why)) => problems.push(Problem::new(format!("routes[{i}].{key}"), why)),
            }
        }
        let clients = Clients::build(&config.clients, &env).unwrap_or_else(|found| {
            problems.extend(found);
            Clients::default()
        });
        let admin = AdminToken::build(config, &env).map_err(|problem| problems.push(problem));
        let (false, Ok(admin)) = (!problems.is_empty(), admin) else {
            return Err(Problems(problems));
        };
        if !admin.configured() {
            tracing::info!(
                variable = admin.variable(),
                "no admin token: /captures, /status.json, /view.json and POST /reload are \
                 served only on an admin listener bound to loopback, to this host (set the \
                 variable to open them to its holder alone); /metrics, /healthz and /readyz \
                 are open"
            );
        }
        let passing: Vec<&str> = routes
            .iter()
            .filter(|r| {
                r.upstream.credential.is_none()
                    && r.upstream.signer.is_none()
                    && r.upstream.google.is_none()
            })
            .map(|r| &*r.name)
            .collect();
        if !passing.is_empty() {
            tracing::info!(
                routes = %passing.join(","),
                "client credentials pass through on these routes (no api_key_env, or its \
                 variable unset)"
            );
        }
        routes.sort_by_key(|r| std::cmp::Reverse(r.prefix.len()));
        Ok(Self {
            routes,
            clients,
            admin,
        })
    }

    fn build_one(
        route: &RouteConfig,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<Route, (&'static str, String)> {
        let url = UpstreamUrl::parse(&route.upstream).map_err(|why| ("upstream", why))?;
        let name = route.dialect.as_deref().unwrap_or_default();
        let dialect =
            inspect::dialect(name).ok_or(("dialect", format!("unknown dialect \"{name}\"")))?;
        let signer = signer(route, env)?;
        let google = google(route, env)?;
        let families = families(route, dialect)?;
        let convention = convention(route, dialect, &url)?;
        let credential = match &route.api_key_env {
            None => None,
            Some(var) => match env(var) {
                Some(key) if !key.is_empty() => Some(credential(dialect, &key).map_err(|_| {
                    let why = format!("{var} holds characters that cannot be sent in a header");
                    ("api_key_env", why)
                })?),
                // Set but empty is probably a mistake (a secret not mounted);
                // unset is the supported mode of the client's own key.
                Some(_) => {
                    tracing::warn!(
                        route = %route.name,
                        variable = %var,
                        "credential variable is set but empty: the client's own credential \
                         passes through"
                    );
                    None
                }
                None => None,
            },
        };
        if (credential.is_some() || signer.is_some() || google.is_some())
            && url.scheme == http::uri::Scheme::HTTP
            && !loopback(&url)
        {
            tracing::warn!(
                route = %route.name,
                upstream = %route.upstream,
                "the provider key is sent in clear text to a plain-HTTP upstream beyond this \
                 host: use https://, or keep the upstream on loopback"
            );
        }
        let limits = Limits {
            timeout: Duration::from_millis(route.timeout_ms),
            idle_timeout: Duration::from_millis(route.idle_timeout_ms),
            max_response_bytes: route.max_response_bytes,
        };
        let mut upstream = Upstream::new(
            url,
            route.upstream.clone(),
            Duration::from_millis(route.connect_timeout_ms),
            limits,
            dialect.unreachable_hint(),
        );
        upstream.credential = credential;
        upstream.signer = signer;
        upstream.google = google;
        Ok(Route {
            name: route.name.as_str().into(),
            prefix: route.prefix.clone(),
            upstream,
            dialect,
            contract: route.contract.clone().map(Arc::new),
            max_batch_inputs: route
                .max_batch_inputs
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            max_chunk_concurrency: usize::try_from(route.max_chunk_concurrency)
                .unwrap_or(usize::MAX),
            retry_invalid: route.retry_invalid_response,
            upstream_compression: route.upstream_compression,
            convention,
            capture: crate::config::CapturePolicy {
                mode: route.capture,
                sample: route.capture_sample,
            },
            families,
        })
    }

    /// The route of this name.
    pub(crate) fn named(&self, name: &str) -> Option<&Arc<Route>> {
        self.routes.iter().find(|r| &*r.name == name)
    }

    /// Each route as the admin page lists it, in the order routes are
    /// tried (longest prefix first).
    pub(crate) fn summaries(&self) -> Vec<RouteSummary> {
        self.routes
            .iter()
            .map(|route| RouteSummary {
                name: route.name.to_string(),
                prefix: route.prefix.clone(),
                upstream: route.upstream.display.clone(),
                dialect: route.dialect.name(),
            })
            .collect()
    }

    /// The route for a request path, and what is left of the path after its prefix.
    pub fn find<'a>(&'a self, path: &'a str) -> Result<Matched<'a>, NoRoute> {
        // `*` (OPTIONS) and authority-form (CONNECT) targets have no path to route.
        let routable = path.starts_with('/');
        for route in self.routes.iter().filter(|_| routable) {
            if let Some(rest) = strip_prefix(path, &route.prefix) {
                return Ok(Matched { route, rest });
            }
        }
        Err(NoRoute {
            path: path.to_string(),
            prefixes: self.prefixes(),
        })
    }

    pub(crate) fn prefixes(&self) -> Vec<String> {
        let mut prefixes: Vec<String> = self.routes.iter().map(|r| r.prefix.clone()).collect();
        prefixes.sort();
        prefixes
    }
}

/// `/ollama` matches `/ollama` and `/ollama/api/chat`, never `/ollamax`.
fn strip_prefix<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    if prefix == "/" {
        return Some(path);
    }
    let rest = path.strip_prefix(prefix)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

/// Whether an upstream is on this host: a key sent there in clear text
/// never crosses a network.
fn loopback(url: &UpstreamUrl) -> bool {
    let host = url
        .authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// A route's `model_families`, each family one its dialect judges.
fn families(
    route: &RouteConfig,
    dialect: &'static dyn Dialect,
) -> Result<Vec<(String, &'static inspect::Endpoint)>, (&'static str, String)> {
    route
        .model_families
        .iter()
        .map(|(id, name)| match dialect.family(name) {
            Some(endpoint) => Ok((id.clone(), endpoint)),
            None if dialect.families().is_empty() => Err((
                "model_families",
                format!("the {} dialect has no model families", dialect.name()),
            )),
            None => Err((
                "model_families",
                format!(
                    "{id:?} = {name:?}: not a model family; one of {}",
                    dialect.families().join(", ")
                ),
            )),
        })
        .collect()
}

/// The SigV4 signer of a route with `aws_region`, from the AWS variables.
fn signer(
    route: &RouteConfig,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Option<crate::forward::Signer>, (&'static str, String)> {
    let Some(region) = &route.aws_region else {
        return Ok(None);
    };
    crate::forward::Signer::from_env(region, "bedrock", env)
        .map(Some)
        .map_err(|missing| {
            let why = format!(
                "SigV4 signing needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in probity's \
                 environment ({} unset or empty; AWS_SESSION_TOKEN is optional)",
                missing.join(" and ")
            );
            ("aws_region", why)
        })
}

/// The Google credential of a route with `google_credentials` (its key
/// file read now, so that `check-config` reports a bad one).
fn google(
    route: &RouteConfig,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Option<crate::forward::GoogleCredential>, (&'static str, String)> {
    let Some(configured) = &route.google_credentials else {
        return Ok(None);
    };
    let connect_timeout = Duration::from_millis(route.connect_timeout_ms);
    crate::forward::GoogleCredential::new(configured, connect_timeout, env)
        .map(Some)
        .map_err(|err: crate::forward::GoogleSetupError| ("google_credentials", err.to_string()))
}

/// The credential a route injects, presented as its dialect takes it.
fn credential(
    dialect: &dyn Dialect,
    key: &str,
) -> Result<Credential, http::header::InvalidHeaderValue> {
    let spec = dialect.credential();
    Credential::new(
        http::header::HeaderName::from_static(spec.header),
        &format!("{}{key}", spec.prefix),
        spec.defaults,
        inspect::credential_headers(),
        spec.query,
    )
}

/// A route's `relations`: a convention its dialect takes, or by default the
/// one of its upstream's host.
fn convention(
    route: &RouteConfig,
    dialect: &'static dyn Dialect,
    url: &UpstreamUrl,
) -> Result<Convention, (&'static str, String)> {
    let Some(name) = &route.relations else {
        return Ok(dialect.convention_of(url.authority.host()));
    };
    let taken = dialect.conventions();
    match Convention::named(name) {
        Some(convention) if taken.contains(&convention) => Ok(convention),
        _ => Err((
            "relations",
            format!(
                "the {} dialect counts its figures by {}, not \"{name}\"",
                dialect.name(),
                taken
                    .iter()
                    .map(|c| format!("\"{}\"", c.name()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load;

    fn table(prefixes: &[&str]) -> RouteTable {
        let mut text = String::new();
        for (i, prefix) in prefixes.iter().enumerate() {
            text.push_str(&format!(
                "[[routes]]\nname = \"r{i}\"\nprefix = \"{prefix}\"\nupstream = \"http://127.0.0.1:{}\"\ndialect = \"passthrough\"\n",
                1000 + i
            ));
        }
        RouteTable::build(
            &load(&text, &probity_judge::inspect::names()).unwrap(),
            |_| None,
        )
        .unwrap()
    }

    fn find<'a>(table: &'a RouteTable, path: &'a str) -> Option<(String, &'a str)> {
        table
            .find(path)
            .ok()
            .map(|m| (m.route.prefix.clone(), m.rest))
    }

    #[test]
    fn a_route_to_xais_api_counts_by_xais_convention_unless_it_says() {
        let convention = |upstream: &str, relations: &str| {
            let text = format!(
                "[[routes]]\nname = \"x\"\nprefix = \"/x\"\nupstream = \"{upstream}\"\ndialect = \"openai\"\n{relations}\n"
            );
            let config = load(&text, &probity_judge::inspect::names()).unwrap();
            let table = RouteTable::build(&config, |_| None).unwrap();
            table.named("x").map(|r| r.convention)
        };
        assert_eq!(convention("https://api.x.ai/v1", ""), Some(Convention::Xai));
        assert_eq!(convention("https://API.X.AI/v1", ""), Some(Convention::Xai));
        assert_eq!(
            convention("https://api.openai.com/v1", ""),
            Some(Convention::Provider)
        );
        assert_eq!(
            convention("https://api.x.ai/v1", "relations = \"provider\""),
            Some(Convention::Provider)
        );
        assert_eq!(
            convention("https://gw.example/v1", "relations = \"xai\""),
            Some(Convention::Xai)
        );
    }

    #[test]
    fn matches_whole_segments_and_strips_the_prefix() {
        let t = table(&["/ollama"]);
        assert_eq!(find(&t, "/ollama"), Some(("/ollama".into(), "")));
        assert_eq!(
            find(&t, "/ollama/api/chat"),
            Some(("/ollama".into(), "/api/chat"))
        );
        assert_eq!(find(&t, "/ollama/"), Some(("/ollama".into(), "/")));
        assert_eq!(find(&t, "/ollamax/api"), None);
        assert_eq!(find(&t, "/"), None);
        assert_eq!(find(&t, "*"), None);
    }

    #[test]
    fn the_longest_prefix_wins_whatever_the_order() {
        let t = table(&["/a", "/a/b", "/"]);
        assert_eq!(find(&t, "/a/b/c"), Some(("/a/b".into(), "/c")));
        assert_eq!(find(&t, "/a/bc"), Some(("/a".into(), "/bc")));
        assert_eq!(find(&t, "/z"), Some(("/".into(), "/z")));
        assert_eq!(find(&t, "*"), None);
        assert_eq!(find(&t, ""), None);
    }

    #[test]
    fn no_route_lists_the_prefixes() {
        let t = table(&["/b", "/a"]);
        let err = t.find("/c").err().unwrap();
        assert_eq!(err.prefixes, ["/a", "/b"]);
    }

    #[test]
    fn a_sigv4_route_needs_the_aws_variables_and_no_api_key() {
        let text = |extra: &str| {
            format!(
                "[[routes]]\nname = \"b\"\nprefix = \"/b\"\nupstream = \"https://bedrock-runtime.us-east-1.amazonaws.com\"\ndialect = \"bedrock\"\n{extra}\n"
            )
        };
        let config = load(
            &text("aws_region = \"us-east-1\""),
            &probity_judge::inspect::names(),
        )
        .unwrap();
        let err = RouteTable::build(&config, |_| None).err().unwrap();
        assert_eq!(err.0[0].path, "routes[0].aws_region");
        let message = &err.0[0].message;
        assert!(
            message.contains("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY unset"),
            "{message}"
        );
        let only_key = |var: &str| (var == "AWS_ACCESS_KEY_ID").then(|| "AKID".to_string());
        let err = RouteTable::build(&config, only_key).err().unwrap();
        assert!(
            err.0[0].message.contains("(AWS_SECRET_ACCESS_KEY unset"),
            "{}",
            err.0[0].message
        );
        let both = |var: &str| var.starts_with("AWS_").then(|| "x".to_string());
        let table = RouteTable::build(&config, both).unwrap();
        assert!(table.named("b").unwrap().upstream.signer.is_some());

        let both_ways =
            text("aws_region = \"us-east-1\"\napi_key_env = \"AWS_BEARER_TOKEN_BEDROCK\"");
        let err = load(&both_ways, &probity_judge::inspect::names())
            .err()
            .unwrap();
        assert_eq!(err.0[0].path, "routes[0].aws_region");
        assert!(
            err.0[0].message.contains("not both"),
            "{}",
            err.0[0].message
        );
        let openai = text("aws_region = \"us-east-1\"").replace("\"bedrock\"", "\"openai\"");
        let err = load(&openai, &probity_judge::inspect::names())
            .err()
            .unwrap();
        assert!(
            err.0[0].message.contains("Bedrock only"),
            "{}",
            err.0[0].message
        );
        let err = load(
            &text("aws_region = \"US East\""),
            &probity_judge::inspect::names(),
        )
        .err()
        .unwrap();
        assert!(
            err.0[0].message.contains("not an AWS region"),
            "{}",
            err.0[0].message
        );
    }

    #[test]
    fn a_credential_that_cannot_be_a_header_is_a_problem() {
        let config = load(
            "[[routes]]\nname = \"o\"\nprefix = \"/o\"\nupstream = \"https://api.openai.com\"\ndialect = \"openai\"\napi_key_env = \"K\"\n",
        &probity_judge::inspect::names(),
        )
        .unwrap();
        let key = |value: &'static str| move |var: &str| (var == "K").then(|| value.to_string());
        let err = RouteTable::build(&config, key("sk-\nbad")).err().unwrap();
        assert_eq!(err.0[0].path, "routes[0].api_key_env");
        assert!(err.0[0].message.contains("K holds characters"));
        assert!(RouteTable::build(&config, key("sk-good")).is_ok());
        assert!(RouteTable::build(&config, |_| None).is_ok());
    }
}
