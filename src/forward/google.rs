//! A route's Google credential (`google_credentials`, for Vertex AI): an
//! OAuth 2 access token presented as `Authorization: Bearer`, from a
//! service-account key file (a signed JWT assertion exchanged at the key's
//! `token_uri`, RFC 7523) or from the metadata server (GKE's workload
//! identity, a VM's service account). The flows are `yup-oauth2`'s, over
//! probity's own connector; the caching is here: a token is fetched on the
//! route's first request, reused, and refreshed ahead of its expiry by one
//! fetch however many requests are waiting for it (single flight). The
//! token is never logged, and its header is marked sensitive.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use futures_util::FutureExt;
use http::header::{HeaderValue, AUTHORIZATION};
use http::HeaderMap;
use hyper_util::client::legacy::Client;
use yup_oauth2::authenticator::{ApplicationDefaultCredentialsTypes, Authenticator};
use yup_oauth2::{
    ApplicationDefaultCredentialsAuthenticator, ApplicationDefaultCredentialsFlowOpts,
    CustomHyperClientBuilder, HyperClientBuilder, ServiceAccountAuthenticator,
};

use crate::connector::Connector;

/// The `google_credentials` value that names the metadata server.
const METADATA: &str = "metadata";
/// Where Google's libraries look for another metadata server (a test's,
/// an emulator's): `host[:port]`.
const METADATA_HOST_VAR: &str = "GCE_METADATA_HOST";
/// The metadata server's own name.
const METADATA_HOST: &str = "metadata.google.internal";
/// Read by Google's own default-credentials lookup, which the metadata flow
/// would then take instead of the metadata server.
const KEY_FILE_VAR: &str = "GOOGLE_APPLICATION_CREDENTIALS";
/// The query parameter Google's APIs take an API key in: a client's own
/// is removed, as its `Authorization` is.
pub(crate) const KEY_PARAMETER: &str = "key";
/// Vertex AI's scope (the one Google's SDKs ask for it).
const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// A token is refreshed when less than this is left of it (or half its
/// life, for a token that lives less than twice this).
const REFRESH_AHEAD: Duration = Duration::from_secs(5 * 60);
/// A token whose answer gave no `expires_in` is refreshed after this.
const UNDATED_LIFE: Duration = Duration::from_secs(5 * 60);
/// No token is kept longer (Google's live an hour, at most 12): an
/// `expires_in` past it is not believed.
const LONGEST_LIFE: Duration = Duration::from_secs(12 * 3600);
/// The longest one token fetch may take: a request never hangs on it.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// After a refresh failed while the old token still holds, the next
/// attempt waits this long (the old token serves meanwhile).
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// What a remedy says, by where tokens come from.
const KEY_FILE_HINT: &str = "the route's google_credentials key file could not be exchanged for \
     an access token at its token_uri: check that the key is not deleted or disabled (IAM → \
     Service accounts → Keys) and that probity can reach the token_uri (an egress proxy: \
     HTTPS_PROXY)";
const METADATA_HINT: &str = "the route's google_credentials = \"metadata\" got no access token \
     from the metadata server: run probity with a service account (GKE: Workload Identity on \
     its Kubernetes service account), and let it reach metadata.google.internal (NO_PROXY)";

/// Where a route's tokens come from, as its configuration says.
enum TokenSource {
    /// A service-account key file, read and parsed at start.
    KeyFile,
    /// The metadata server's token endpoint.
    Metadata,
}

/// A route's Google credential: the flow, and the token it holds.
pub(crate) struct GoogleCredential {
    source: TokenSource,
    /// The token endpoint, as error messages name it.
    endpoint: String,
    authenticator: Authenticator<Connector>,
    state: Mutex<TokenState>,
    /// Held by the one fetch in flight; others wait for its outcome.
    refreshing: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for GoogleCredential {
    /// Never the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GoogleCredential")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// The token held, and the last attempt's outcome.
#[derive(Default)]
struct TokenState {
    token: Option<HeldToken>,
    /// When the last fetch ended, and its failure if it failed.
    last: Option<(Instant, Option<String>)>,
}

/// A token, as the header that presents it.
#[derive(Clone)]
struct HeldToken {
    header: HeaderValue,
    /// From then on, the next request fetches a new one.
    refresh_at: Instant,
    /// From then on, it is no longer sent.
    expires_at: Instant,
}

/// Why a credential could not be built from the configuration.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GoogleSetupError {
    #[error("cannot read the service-account key file {path}: {cause}")]
    Unreadable { path: String, cause: String },
    #[error(
        "{path} is not a service-account key ({cause}): download one as JSON from IAM → Service \
         accounts → Keys (it has client_email, private_key and token_uri)"
    )]
    Malformed { path: String, cause: String },
    #[error(
        "{KEY_FILE_VAR} is set in probity's environment, and Google's metadata flow would take \
         its key file instead of the metadata server: unset it, or name the key file in \
         google_credentials"
    )]
    KeyFileVariable,
    #[error("cannot set up the metadata server's flow at {0}")]
    Metadata(String),
}

/// Why a request got no token: answered `upstream_unreachable`.
#[derive(Debug, thiserror::Error)]
#[error("no Google access token from {endpoint}: {cause}")]
pub(crate) struct TokenError {
    pub(crate) endpoint: String,
    pub(crate) cause: String,
    pub(crate) hint: &'static str,
}

impl GoogleCredential {
    /// The credential `google_credentials` names (`metadata` or a key
    /// file's path), reading the key file now so that `check-config`
    /// reports a bad one; `env` reads `GCE_METADATA_HOST`.
    pub(crate) fn new(
        configured: &str,
        connect_timeout: Duration,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<Self, GoogleSetupError> {
        let client = CustomHyperClientBuilder::from(
            Client::builder(hyper_util::rt::TokioExecutor::new())
                .build::<_, String>(crate::connector::https(connect_timeout)),
        )
        .with_timeout(FETCH_TIMEOUT);
        let (source, endpoint, authenticator) = if configured == METADATA {
            let (url, authenticator) = metadata(client, env)?;
            (TokenSource::Metadata, url, authenticator)
        } else {
            let (token_uri, authenticator) = key_file(configured, client)?;
            (TokenSource::KeyFile, token_uri, authenticator)
        };
        Ok(Self {
            source,
            endpoint,
            authenticator,
            state: Mutex::new(TokenState::default()),
            refreshing: tokio::sync::Mutex::new(()),
        })
    }

    /// Sets `Authorization: Bearer <token>` on an upstream request: the
    /// token held, or a new one when it is due for refresh.
    pub(crate) async fn authorize(&self, headers: &mut HeaderMap) -> Result<(), TokenError> {
        let header = self.header().await?;
        headers.insert(AUTHORIZATION, header);
        Ok(())
    }

    /// The header of a token that holds, fetched if none is fresh.
    async fn header(&self) -> Result<HeaderValue, TokenError> {
        let arrived = Instant::now();
        if let Some(held) = self.held().filter(|held| arrived < held.refresh_at) {
            return Ok(held.header);
        }
        let _flight = self.refreshing.lock().await;
        // The fetch this request waited for may have settled it.
        let now = Instant::now();
        let (held, last) = self.snapshot();
        if let Some(held) = held.as_ref().filter(|held| now < held.refresh_at) {
            return Ok(held.header.clone());
        }
        // A fetch that failed while this request waited is its answer too:
        // a burst during an outage makes one fetch, not one each in turn.
        if let Some((_, Some(cause))) = last.filter(|(ended, _)| *ended >= arrived) {
            return Err(self.error(cause));
        }
        self.refresh(held).await
    }

    /// One fetch; on failure, the old token while it holds.
    async fn refresh(&self, old: Option<HeldToken>) -> Result<HeaderValue, TokenError> {
        let fetched = tokio::time::timeout(FETCH_TIMEOUT, self.fetch()).await;
        let outcome = match fetched {
            Ok(Ok(held)) => Ok(held),
            Ok(Err(cause)) => Err(cause),
            Err(_) => Err(format!("no answer within {} s", FETCH_TIMEOUT.as_secs())),
        };
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match outcome {
            Ok(held) => {
                tracing::debug!(
                    endpoint = %self.endpoint,
                    "fetched a Google access token"
                );
                state.last = Some((now, None));
                state.token = Some(held.clone());
                Ok(held.header)
            }
            Err(cause) => {
                state.last = Some((now, Some(cause.clone())));
                match old.filter(|old| now < old.expires_at) {
                    Some(mut old) => {
                        tracing::warn!(
                            endpoint = %self.endpoint,
                            cause = %cause,
                            "could not refresh the Google access token: the current one \
                             serves until it expires"
                        );
                        old.refresh_at = (now + RETRY_AFTER).min(old.expires_at);
                        state.token = Some(old.clone());
                        Ok(old.header)
                    }
                    None => Err(self.error(cause)),
                }
            }
        }
    }

    /// A new token from the flow, with when to refresh it.
    async fn fetch(&self) -> Result<HeldToken, String> {
        let asked = Instant::now();
        let token = self
            .authenticator
            .force_refreshed_token(&[SCOPE])
            .await
            .map_err(|err| err.to_string())?;
        let secret = token
            .token()
            .filter(|t| !t.is_empty())
            .ok_or("the answer held no access_token")?;
        let mut header = HeaderValue::try_from(format!("Bearer {secret}"))
            .map_err(|_| "the access token cannot be sent in a header".to_string())?;
        header.set_sensitive(true);
        let life = match token.expiration_time() {
            Some(at) => {
                let now = SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_secs();
                let left = at.unix_timestamp().saturating_sub_unsigned(now);
                Duration::from_secs(u64::try_from(left).unwrap_or(0))
            }
            None => UNDATED_LIFE,
        }
        .min(LONGEST_LIFE);
        let ahead = REFRESH_AHEAD.min(life / 2);
        Ok(HeldToken {
            header,
            refresh_at: asked + life.saturating_sub(ahead),
            expires_at: asked + life,
        })
    }

    fn held(&self) -> Option<HeldToken> {
        self.snapshot().0
    }

    fn snapshot(&self) -> (Option<HeldToken>, Option<(Instant, Option<String>)>) {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        (state.token.clone(), state.last.clone())
    }

    fn error(&self, cause: String) -> TokenError {
        TokenError {
            endpoint: self.endpoint.clone(),
            cause,
            hint: match self.source {
                TokenSource::KeyFile => KEY_FILE_HINT,
                TokenSource::Metadata => METADATA_HINT,
            },
        }
    }
}

type Flow = Authenticator<Connector>;
type FlowClient = CustomHyperClientBuilder<Connector>;

// Neither flow's build waits on anything (a key in hand, tokens kept in
// memory): `now_or_never` has it at once, and an error is the key's.

/// The metadata server's flow: its token URL (`GCE_METADATA_HOST`'s
/// server, else Google's), and the flow.
fn metadata(
    client: FlowClient,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<(String, Flow), GoogleSetupError> {
    if env(KEY_FILE_VAR).is_some_and(|v| !v.is_empty()) {
        return Err(GoogleSetupError::KeyFileVariable);
    }
    let host = env(METADATA_HOST_VAR)
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| METADATA_HOST.to_string());
    let url = format!("http://{host}/computeMetadata/v1/instance/service-accounts/default/token");
    let opts = ApplicationDefaultCredentialsFlowOpts {
        metadata_url: Some(url.clone()),
    };
    let built = match ApplicationDefaultCredentialsAuthenticator::with_client(opts, client)
        .now_or_never()
    {
        Some(ApplicationDefaultCredentialsTypes::InstanceMetadata(builder)) => {
            builder.build().now_or_never()
        }
        // GOOGLE_APPLICATION_CREDENTIALS was set between the two reads.
        _ => return Err(GoogleSetupError::KeyFileVariable),
    };
    match built {
        Some(Ok(flow)) => Ok((url, flow)),
        _ => Err(GoogleSetupError::Metadata(url)),
    }
}

/// A key file's flow: its `token_uri`, and the flow.
fn key_file(path: &str, client: FlowClient) -> Result<(String, Flow), GoogleSetupError> {
    let bytes = std::fs::read(path).map_err(|err| GoogleSetupError::Unreadable {
        path: path.to_string(),
        cause: err.to_string(),
    })?;
    let malformed = |cause: String| GoogleSetupError::Malformed {
        path: path.to_string(),
        cause,
    };
    let key =
        yup_oauth2::parse_service_account_key(bytes).map_err(|err| malformed(err.to_string()))?;
    let uri: Result<http::Uri, _> = key.token_uri.parse();
    if !uri.is_ok_and(|u| matches!(u.scheme_str(), Some("http" | "https"))) {
        return Err(malformed(format!(
            "its token_uri {:?} is not an http(s) URL",
            key.token_uri
        )));
    }
    let token_uri = key.token_uri.clone();
    match ServiceAccountAuthenticator::with_client(key, client)
        .build()
        .now_or_never()
    {
        Some(Ok(flow)) => Ok((token_uri, flow)),
        Some(Err(err)) => Err(malformed(format!("its private_key: {err}"))),
        None => Err(malformed("its flow was not ready at once".into())),
    }
}
