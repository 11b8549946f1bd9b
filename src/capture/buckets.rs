//! The bucket backends, each built only with its cargo feature (`s3`,
//! `gcs`, `azure`): configuration validation refuses a scheme this binary
//! lacks, naming the feature, before anything opens.
//!
//! Endpoint, region and credentials come from each cloud's standard
//! variables, read by `object_store` (`AWS_ENDPOINT_URL`, `AWS_REGION`,
//! `AWS_ACCESS_KEY_ID`…); they never reach a log line or a metric.
//!
//! Requests to a bucket go through probity's own hyper client
//! ([`Transport`]), the one that calls the providers, not reqwest:
//! object_store's default client would bring a second HTTP and TLS stack
//! (reqwest, tower, the platform verifier) and rebuild tokio, hyper and
//! rustls with other features.

use std::sync::Arc;

use object_store::ObjectStore;

#[cfg(any(feature = "s3", feature = "gcs", feature = "azure"))]
use transport::Transport;

/// The bucket store of a URL; why not (never a credential: the variables'
/// values are not in `object_store`'s configuration errors).
pub(super) fn open(url: &str) -> Result<Arc<dyn ObjectStore>, String> {
    let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
    match scheme {
        #[cfg(feature = "s3")]
        "s3" => s3(url),
        #[cfg(feature = "gcs")]
        "gs" => gcs(url),
        #[cfg(feature = "azure")]
        "az" => azure(url),
        _ => Err(format!("\"{scheme}://\" is not built into this binary")),
    }
}

/// Retries of one request to a bucket: few and short, since a write has
/// `write_timeout_ms` in all and a listing has a person waiting.
#[cfg(any(feature = "s3", feature = "gcs", feature = "azure"))]
fn retry() -> object_store::RetryConfig {
    object_store::RetryConfig {
        max_retries: 2,
        retry_timeout: std::time::Duration::from_secs(5),
        ..object_store::RetryConfig::default()
    }
}

/// Whether an endpoint variable names a plain-http endpoint (MinIO, a
/// test server): allowed then, refused otherwise.
#[cfg(any(feature = "s3", feature = "azure"))]
fn plain_http(variables: &[&str]) -> bool {
    variables.iter().any(|name| {
        std::env::var(name).is_ok_and(|value| value.to_ascii_lowercase().starts_with("http://"))
    })
}

#[cfg(feature = "s3")]
fn s3(url: &str) -> Result<Arc<dyn ObjectStore>, String> {
    let allow_http = plain_http(&["AWS_ENDPOINT_URL", "AWS_ENDPOINT", "AWS_ENDPOINT_URL_S3"]);
    let store = object_store::aws::AmazonS3Builder::from_env()
        .with_url(url)
        .with_allow_http(allow_http)
        .with_retry(retry())
        .with_http_connector(Transport)
        .build()
        .map_err(|err| err.to_string())?;
    Ok(Arc::new(store))
}

#[cfg(feature = "gcs")]
fn gcs(url: &str) -> Result<Arc<dyn ObjectStore>, String> {
    let store = object_store::gcp::GoogleCloudStorageBuilder::from_env()
        .with_url(url)
        .with_retry(retry())
        .with_http_connector(Transport)
        .build()
        .map_err(|err| err.to_string())?;
    Ok(Arc::new(store))
}

#[cfg(feature = "azure")]
fn azure(url: &str) -> Result<Arc<dyn ObjectStore>, String> {
    let allow_http = plain_http(&["AZURE_STORAGE_ENDPOINT", "AZURE_ENDPOINT"]);
    let store = object_store::azure::MicrosoftAzureBuilder::from_env()
        .with_url(url)
        .with_allow_http(allow_http)
        .with_retry(retry())
        .with_http_connector(Transport)
        .build()
        .map_err(|err| err.to_string())?;
    Ok(Arc::new(store))
}

#[cfg(any(feature = "s3", feature = "gcs", feature = "azure"))]
mod transport {
    use std::time::Duration;

    use http::uri::Scheme;
    use http_body_util::BodyExt;
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::{TokioExecutor, TokioTimer};
    use object_store::client::{
        ClientConfigKey, HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest,
        HttpRequestBody, HttpResponse, HttpResponseBody, HttpService,
    };
    use object_store::ClientOptions;

    /// Connecting to a bucket, as object_store's own client allows.
    const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
    /// One request, its body read whole included (object_store's default).
    const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

    /// Makes the bucket client from object_store's options.
    #[derive(Debug, Clone, Copy)]
    pub(super) struct Transport;

    impl HttpConnector for Transport {
        fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
            let allow_http = options
                .get_config_value(&ClientConfigKey::AllowHttp)
                .is_some_and(|value| value == "true");
            let client = Client::builder(TokioExecutor::new())
                .timer(TokioTimer::new())
                .pool_timer(TokioTimer::new())
                .build(crate::connector::https_system_roots(CONNECT_TIMEOUT));
            Ok(HttpClient::new(Service { client, allow_http }))
        }
    }

    #[derive(Debug)]
    struct Service {
        client: Client<crate::connector::Connector, HttpRequestBody>,
        /// Whether `http://` is allowed: a local endpoint the operator named.
        allow_http: bool,
    }

    /// Why a request to a bucket did not get an answer.
    #[derive(Debug, thiserror::Error)]
    enum Failure {
        #[error(
            "a plain http:// bucket endpoint is allowed only when the endpoint variable names one"
        )]
        PlainHttp,
        #[error("no answer within {0:?}")]
        TimedOut(Duration),
    }

    #[async_trait::async_trait]
    impl HttpService for Service {
        async fn call(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
            if !self.allow_http && request.uri().scheme() != Some(&Scheme::HTTPS) {
                return Err(HttpError::new(HttpErrorKind::Unknown, Failure::PlainHttp));
            }
            // The body is read whole within the deadline: every caller
            // (a listing's XML, a capture's body) reads it whole anyway, and
            // a server that stalls mid-body must not hold a writer forever.
            let answer = async {
                let response = self.client.request(request).await.map_err(|err| {
                    let kind = if err.is_connect() {
                        HttpErrorKind::Connect
                    } else {
                        HttpErrorKind::Request
                    };
                    HttpError::new(kind, err)
                })?;
                let (parts, body) = response.into_parts();
                let body = body
                    .collect()
                    .await
                    .map_err(|err| HttpError::new(HttpErrorKind::Interrupted, err))?;
                Ok(HttpResponse::from_parts(
                    parts,
                    HttpResponseBody::from(body.to_bytes()),
                ))
            };
            tokio::time::timeout(REQUEST_TIMEOUT, answer)
                .await
                .map_err(|_| {
                    HttpError::new(HttpErrorKind::Timeout, Failure::TimedOut(REQUEST_TIMEOUT))
                })?
        }
    }
}
