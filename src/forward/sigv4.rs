//! AWS Signature Version 4 for routes with `aws_region` (Bedrock): each
//! upstream request is signed anew, over the exact method, URI, headers and
//! body bytes probity sends, with the AWS credentials probity read from its
//! environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, optional
//! `AWS_SESSION_TOKEN`). The signing itself is `aws-sigv4`'s.

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use http::Request;

/// The variables the credentials are read from.
pub(crate) const ACCESS_KEY_VAR: &str = "AWS_ACCESS_KEY_ID";
pub(crate) const SECRET_KEY_VAR: &str = "AWS_SECRET_ACCESS_KEY";
pub(crate) const SESSION_TOKEN_VAR: &str = "AWS_SESSION_TOKEN";

/// A route's signer: the region, the service and the credentials.
pub(crate) struct Signer {
    region: String,
    service: &'static str,
    credentials: Credentials,
}

impl std::fmt::Debug for Signer {
    /// Never the credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("region", &self.region)
            .field("service", &self.service)
            .finish_non_exhaustive()
    }
}

/// Why a request could not be signed (a header or URI `aws-sigv4` cannot
/// read): probity's fault, answered as such.
#[derive(Debug, thiserror::Error)]
#[error("cannot sign the upstream request with SigV4: {0}")]
pub(crate) struct SignError(String);

impl Signer {
    /// A signer for `service` in `region` with these credentials.
    pub(crate) fn new(
        region: &str,
        service: &'static str,
        access_key: String,
        secret_key: String,
        session_token: Option<String>,
    ) -> Self {
        Self {
            region: region.to_string(),
            service,
            credentials: Credentials::new(access_key, secret_key, session_token, None, "probity"),
        }
    }

    /// The credentials of `env` (`None` for each variable unset or empty),
    /// or the variables that are missing.
    pub(crate) fn from_env(
        region: &str,
        service: &'static str,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<Self, Vec<&'static str>> {
        let read = |var| env(var).filter(|v: &String| !v.is_empty());
        match (read(ACCESS_KEY_VAR), read(SECRET_KEY_VAR)) {
            (Some(access), Some(secret)) => Ok(Self::new(
                region,
                service,
                access,
                secret,
                read(SESSION_TOKEN_VAR),
            )),
            (access, secret) => Err([(ACCESS_KEY_VAR, access), (SECRET_KEY_VAR, secret)]
                .into_iter()
                .filter(|(_, value)| value.is_none())
                .map(|(var, _)| var)
                .collect()),
        }
    }

    /// Signs `request` over `body`, the bytes it will carry: adds
    /// `Authorization`, `X-Amz-Date` and, with a session token,
    /// `X-Amz-Security-Token`. Every header present is signed (`Host`
    /// from the URI), except those `aws-sigv4` never signs.
    pub(crate) fn sign<B>(&self, request: &mut Request<B>, body: &[u8]) -> Result<(), SignError> {
        let identity = self.credentials.clone().into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(self.service)
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|err| SignError(err.to_string()))?
            .into();
        let uri = request.uri().to_string();
        let headers = request
            .headers()
            .iter()
            .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)));
        let signable = SignableRequest::new(
            request.method().as_str(),
            &uri,
            headers,
            SignableBody::Bytes(body),
        )
        .map_err(|err| SignError(err.to_string()))?;
        let (instructions, _signature) = sign(signable, &params)
            .map_err(|err| SignError(err.to_string()))?
            .into_parts();
        instructions.apply_to_request_http1x(request);
        for name in ["authorization", "x-amz-security-token"] {
            if let Some(value) = request.headers_mut().get_mut(name) {
                value.set_sensitive(true);
            }
        }
        Ok(())
    }
}
