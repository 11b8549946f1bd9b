//! Who may come in: the apps of `[[clients]]` and their tokens.
//!
//! With no client configured every request is proxied, labelled `unknown`
//! (probity is then a sidecar on a path only its app reaches). With any, a
//! request must present one client's token in the credential header of its
//! route's dialect (`Authorization: Bearer`, Anthropic's `x-api-key`,
//! Gemini's `x-goog-api-key`); otherwise it is answered 401 and nothing is
//! forwarded. The token is then removed from the request, and the route's
//! provider key (if configured) takes its place, so an app never holds the
//! provider's key and the provider never sees the app's token.
//!
//! Tokens are compared in constant time (`subtle`), against every client
//! whatever matched first, so the time to answer does not say how much of
//! a guess was right. A `probity-*` header is removed before this step
//! (`server::head::clean`), so none can authenticate.

use std::sync::Arc;

use http::HeaderMap;
use subtle::{ConditionallySelectable, ConstantTimeEq};

use crate::config::{ClientConfig, Problem};
use probity_judge::inspect::{self, CredentialSpec};

/// The shortest token accepted: a guessable token is no gate.
const MIN_TOKEN_CHARS: usize = 16;

/// Why a token read from `var` is no gate, if it is not one.
fn weakness(var: &str, token: &str) -> Option<String> {
    if token.chars().count() < MIN_TOKEN_CHARS {
        Some(format!(
            "{var} holds fewer than {MIN_TOKEN_CHARS} characters: use a random token \
             (e.g. `openssl rand -hex 24`)"
        ))
    } else if !token.bytes().all(|b| b.is_ascii_graphic()) {
        Some(format!(
            "{var} holds spaces or characters that cannot be sent in a header"
        ))
    } else {
        None
    }
}

/// Who may read what probity keeps (captures, the admin page's data) or
/// change its state (`POST /reload`) on the admin listener: whoever presents
/// the admin token as `Authorization: Bearer`. Without one configured, no
/// one may: captures hold model outputs verbatim.
pub(crate) struct AdminToken {
    /// `[admin] token_env`, named in refusals.
    variable: String,
    token: Option<Box<[u8]>>,
}

/// Why the admin listener refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AdminRefusal {
    /// No admin token is configured: nobody may.
    NotConfigured,
    /// No `Authorization: Bearer` was sent.
    Missing,
    /// A token was sent, and it is not the admin's.
    Wrong,
}

/// Why a request from this host to an admin listener with no token is not
/// this host's own to make (`admin`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AdminCrossing {
    /// Its `Host` names no loopback address: a name that resolved here
    /// for a page of another site (DNS rebinding).
    ForeignHost,
    /// A browser sent it for a page of another origin (`Origin`, or
    /// `Sec-Fetch-Site` other than `same-origin` or `none`).
    OtherOrigin,
}

impl AdminCrossing {
    /// The error's `code`, and the log line's `refusal`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            AdminCrossing::ForeignHost => "admin_foreign_host",
            AdminCrossing::OtherOrigin => "admin_cross_site",
        }
    }

    pub(crate) fn what(self) -> &'static str {
        match self {
            AdminCrossing::ForeignHost => {
                "this admin endpoint answers this host without a token only under a loopback \
                 name, and the request's Host is not one"
            }
            AdminCrossing::OtherOrigin => {
                "this admin endpoint does not answer a request a browser sent for another site"
            }
        }
    }

    pub(crate) fn remedy(self) -> &'static str {
        match self {
            AdminCrossing::ForeignHost => {
                "open it as http://127.0.0.1:<port> or http://localhost:<port>, or configure \
                 the admin token ([admin] token_env) and send it as `Authorization: Bearer \
                 <token>`"
            }
            AdminCrossing::OtherOrigin => {
                "open the admin page itself (its own requests are same-origin), or call the \
                 endpoint from a tool, which sends no Origin"
            }
        }
    }
}

impl AdminRefusal {
    /// For the log line: which refusal, never the token.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            AdminRefusal::NotConfigured => "not_configured",
            AdminRefusal::Missing => "missing",
            AdminRefusal::Wrong => "wrong",
        }
    }
}

impl AdminToken {
    /// Reads the token named by `[admin] token_env`: unset leaves the
    /// endpoints closed; set, it must be a gate of its own (no client's).
    pub(crate) fn build(
        config: &crate::config::Config,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<Self, Problem> {
        let variable = config.admin.token_env.clone();
        let token = env(&variable).filter(|t| !t.is_empty());
        if let Some(token) = &token {
            if let Some(why) = weakness(&variable, token) {
                return Err(Problem::new("admin.token_env", why));
            }
            let shared = config
                .clients
                .iter()
                .position(|c| env(&c.token_env).as_deref() == Some(token.as_str()));
            if let Some(i) = shared {
                return Err(Problem::new(
                    "admin.token_env",
                    format!(
                        "{variable} holds the token of clients[{i}]: an app's token must not \
                         read captures; give the admin its own"
                    ),
                ));
            }
        }
        Ok(Self {
            variable,
            token: token.map(|t| t.into_bytes().into_boxed_slice()),
        })
    }

    /// The variable the token is read from.
    pub(crate) fn variable(&self) -> &str {
        &self.variable
    }

    /// Whether one is configured at all.
    pub(crate) fn configured(&self) -> bool {
        self.token.is_some()
    }

    /// Whether `headers` present the admin token (compared in constant time).
    pub(crate) fn permits(&self, headers: &HeaderMap) -> Result<(), AdminRefusal> {
        let Some(token) = &self.token else {
            return Err(AdminRefusal::NotConfigured);
        };
        let presented: Vec<&[u8]> = headers
            .get_all(http::header::AUTHORIZATION)
            .iter()
            .filter_map(|value| {
                let value = value.as_bytes();
                match value.get(..BEARER.len()) {
                    Some(head) if head.eq_ignore_ascii_case(BEARER) => value.get(BEARER.len()..),
                    _ => None,
                }
            })
            .collect();
        if presented.is_empty() {
            return Err(AdminRefusal::Missing);
        }
        let mut found = subtle::Choice::from(0);
        for candidate in presented {
            found |= token.ct_eq(candidate);
        }
        if bool::from(found) {
            Ok(())
        } else {
            Err(AdminRefusal::Wrong)
        }
    }
}

/// The auth scheme before the admin token (case-insensitive, RFC 9110 §11.1).
const BEARER: &[u8] = b"Bearer ";

/// The configured clients, with their tokens read from the environment.
#[derive(Default)]
pub(crate) struct Clients {
    entries: Vec<Client>,
}

struct Client {
    name: Arc<str>,
    token: Box<[u8]>,
}

/// No configured token was presented.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Refused {
    /// The header the route's dialect takes a credential in.
    pub(crate) header: &'static str,
    /// The text before the token in that header (`Bearer `).
    pub(crate) prefix: &'static str,
    /// Whether any credential header was sent at all (a wrong token rather
    /// than none), for the log.
    pub(crate) presented: bool,
}

impl Clients {
    /// Reads each client's token from `env`. An unset, short or unsendable
    /// token, or one shared by two clients, is a problem: a client that
    /// could never be admitted (or could be taken for another) is a
    /// configuration mistake, not something to find out in production.
    pub(crate) fn build(
        configs: &[ClientConfig],
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<Self, Vec<Problem>> {
        let mut problems = Vec::new();
        let mut entries: Vec<Client> = Vec::with_capacity(configs.len());
        // (index in the file, token) of each token read so far.
        let mut seen: Vec<(usize, String)> = Vec::new();
        for (i, config) in configs.iter().enumerate() {
            let path = format!("clients[{i}].token_env");
            let var = &config.token_env;
            let token = env(var).unwrap_or_default();
            let why = if token.is_empty() {
                Some(format!(
                    "{var} is not set: client \"{}\" could never be admitted; set it, or remove the client",
                    config.name
                ))
            } else if let Some(why) = weakness(var, &token) {
                Some(why)
            } else if let Some((first, _)) = seen.iter().find(|(_, t)| *t == token) {
                Some(format!(
                    "{var} holds the same token as clients[{first}]: each client needs its own"
                ))
            } else {
                None
            };
            if !token.is_empty() {
                seen.push((i, token.clone()));
            }
            match why {
                Some(why) => problems.push(Problem::new(path, why)),
                None => entries.push(Client {
                    name: config.name.as_str().into(),
                    token: token.into_bytes().into_boxed_slice(),
                }),
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(Self { entries })
    }

    /// Whether a token is needed at all.
    pub(crate) fn required(&self) -> bool {
        !self.entries.is_empty()
    }

    /// The client whose token `headers` present in one of `specs`' headers,
    /// with every credential header then removed; `None` when no client is
    /// configured.
    pub(crate) fn admit(
        &self,
        headers: &mut HeaderMap,
        specs: &[&'static CredentialSpec],
    ) -> Result<Option<Arc<str>>, Refused> {
        if !self.required() {
            return Ok(None);
        }
        let found = specs.iter().find_map(|spec| self.presented(headers, spec));
        let Some(index) = found else {
            let spec = specs.first().copied().unwrap_or(&inspect::BEARER);
            return Err(Refused {
                header: spec.header,
                prefix: spec.prefix,
                presented: inspect::credential_headers()
                    .iter()
                    .any(|name| headers.contains_key(name)),
            });
        };
        // Every header any dialect takes a credential in: the token reaches
        // no upstream, whichever header it came in.
        for name in inspect::credential_headers() {
            headers.remove(name);
        }
        Ok(self.entries.get(index).map(|c| c.name.clone()))
    }

    /// The index of the client whose token is in `spec`'s headers.
    fn presented(&self, headers: &HeaderMap, spec: &CredentialSpec) -> Option<usize> {
        let main = headers.get_all(spec.header).iter().map(|value| {
            let value = value.as_bytes();
            // The auth scheme is case-insensitive (RFC 9110 §11.1).
            let prefix = spec.prefix.as_bytes();
            match value.get(..prefix.len()) {
                Some(head) if head.eq_ignore_ascii_case(prefix) => value.get(prefix.len()..),
                _ => None,
            }
        });
        let also = spec
            .also
            .iter()
            .flat_map(|name| headers.get_all(*name).iter())
            .map(|value| Some(value.as_bytes()));
        main.chain(also)
            .flatten()
            .find_map(|presented| self.matching(presented))
    }

    /// Compares `presented` with every token, never stopping early.
    fn matching(&self, presented: &[u8]) -> Option<usize> {
        let mut found = subtle::Choice::from(0);
        let mut index = 0u32;
        for (i, client) in self.entries.iter().enumerate() {
            let equal = client.token.ct_eq(presented);
            index = u32::conditional_select(&index, &u32::try_from(i).unwrap_or(u32::MAX), equal);
            found |= equal;
        }
        bool::from(found).then_some(index as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::HeaderName;
    use http::HeaderValue;

    const SEARCH: &str = "search-ui-token-0123456789";
    const BATCH: &str = "batch-job-token-0123456789";

    fn clients() -> Clients {
        let configs = [
            ClientConfig {
                name: "search-ui".into(),
                token_env: "T_SEARCH".into(),
            },
            ClientConfig {
                name: "batch".into(),
                token_env: "T_BATCH".into(),
            },
        ];
        let env = |var: &str| match var {
            "T_SEARCH" => Some(SEARCH.to_string()),
            "T_BATCH" => Some(BATCH.to_string()),
            _ => None,
        };
        Clients::build(&configs, &env).ok().unwrap_or_default()
    }

    fn admit(headers: &[(&str, &str)], specs: &[&'static CredentialSpec]) -> Option<String> {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        let admitted = clients().admit(&mut map, specs).ok().flatten();
        if admitted.is_some() {
            assert!(map.get("authorization").is_none() && map.get("api-key").is_none());
        }
        admitted.map(|name| name.to_string())
    }

    #[test]
    fn a_token_in_the_dialects_header_names_its_client() {
        let bearer = [&inspect::BEARER];
        let auth = format!("Bearer {BATCH}");
        assert_eq!(
            admit(&[("authorization", &auth)], &bearer).as_deref(),
            Some("batch")
        );
        let lower = format!("bearer {SEARCH}");
        assert_eq!(
            admit(&[("authorization", &lower)], &bearer).as_deref(),
            Some("search-ui")
        );
        assert_eq!(
            admit(&[("api-key", SEARCH)], &bearer).as_deref(),
            Some("search-ui")
        );
    }

    #[test]
    fn anything_else_is_refused() {
        let bearer = [&inspect::BEARER];
        for headers in [
            vec![],
            vec![("authorization", SEARCH)],
            vec![("authorization", "Bearer search-ui-token-012345678")],
            vec![("authorization", "Bearer search-ui-token-01234567890")],
            vec![("authorization", "Basic c2VhcmNoLXVpOng=")],
            vec![("x-api-key", SEARCH)],
        ] {
            assert_eq!(admit(&headers, &bearer), None, "{headers:?}");
        }
    }

    #[test]
    fn unset_short_spaced_and_shared_tokens_are_problems() {
        let configs: Vec<ClientConfig> = ["A", "B", "C", "D", "E"]
            .iter()
            .map(|var| ClientConfig {
                name: format!("c{var}"),
                token_env: (*var).into(),
            })
            .collect();
        let env = |var: &str| match var {
            "B" => Some("short".to_string()),
            "C" => Some("has a space in it, sixteen+".to_string()),
            "D" | "E" => Some(SEARCH.to_string()),
            _ => None,
        };
        let problems = Clients::build(&configs, &env).err().unwrap_or_default();
        let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "clients[0].token_env",
                "clients[1].token_env",
                "clients[2].token_env",
                "clients[4].token_env"
            ]
        );
        assert!(problems.iter().all(|p| !p.message.contains(SEARCH)));
    }
}
