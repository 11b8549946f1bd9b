//! The bucket backends, each built only with its cargo feature (`s3`,
//! `gcs`, `azure`): configuration validation refuses a scheme this binary
//! lacks, naming the feature, before anything opens.
//!
//! Endpoint, region and credentials come from each cloud's standard
//! variables, read by `object_store` (`AWS_ENDPOINT_URL`, `AWS_REGION`,
//! `AWS_ACCESS_KEY_ID`…); they never reach a log line or a metric.

use std::sync::Arc;

use object_store::ObjectStore;

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

/// TLS for the buckets' client: rustls with ring, as the upstream client
/// uses (the client is built without a provider of its own).
#[cfg(any(feature = "s3", feature = "gcs", feature = "azure"))]
fn tls() {
    // Already installed (a second bucket, a test) is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
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
    tls();
    let allow_http = plain_http(&["AWS_ENDPOINT_URL", "AWS_ENDPOINT", "AWS_ENDPOINT_URL_S3"]);
    let store = object_store::aws::AmazonS3Builder::from_env()
        .with_url(url)
        .with_allow_http(allow_http)
        .with_retry(retry())
        .build()
        .map_err(|err| err.to_string())?;
    Ok(Arc::new(store))
}

#[cfg(feature = "gcs")]
fn gcs(url: &str) -> Result<Arc<dyn ObjectStore>, String> {
    tls();
    let store = object_store::gcp::GoogleCloudStorageBuilder::from_env()
        .with_url(url)
        .with_retry(retry())
        .build()
        .map_err(|err| err.to_string())?;
    Ok(Arc::new(store))
}

#[cfg(feature = "azure")]
fn azure(url: &str) -> Result<Arc<dyn ObjectStore>, String> {
    tls();
    let allow_http = plain_http(&["AZURE_STORAGE_ENDPOINT", "AZURE_ENDPOINT"]);
    let store = object_store::azure::MicrosoftAzureBuilder::from_env()
        .with_url(url)
        .with_allow_http(allow_http)
        .with_retry(retry())
        .build()
        .map_err(|err| err.to_string())?;
    Ok(Arc::new(store))
}
