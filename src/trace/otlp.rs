//! The OTLP/HTTP exporter (cargo's `otlp` feature, on by default): the
//! export task batches the queued spans and sends them through
//! `opentelemetry-otlp` over probity's own hyper client. A sidecar built
//! with `--no-default-features` compiles none of it (nor prost and the
//! OTLP protobuf types).

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use opentelemetry::KeyValue;
use opentelemetry_http::{HttpClient, HttpError};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};
use opentelemetry_sdk::Resource;
use tokio::sync::{mpsc, oneshot};

use super::export::{dropped, endpoint, ExportError, Message, Queue, EXPORTED_SPANS_TOTAL};
use crate::config::TelemetryConfig;

/// A batch is sent when it has this many spans, or a second after its
/// first span, whichever comes first (the SDK's defaults).
const BATCH: usize = 512;
const BATCH_DELAY: Duration = Duration::from_secs(1);

/// The largest collector answer read (its partial-success message).
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Starts the export task; spans queued on the returned [`Queue`] reach the
/// collector in batches.
pub(crate) fn start(config: &TelemetryConfig) -> Result<Queue, ExportError> {
    let timeout = Duration::from_millis(config.export_timeout_ms);
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_timeout(timeout)
        .with_http_client(OtlpCollector::new(timeout));
    if let Some(endpoint) = endpoint(config) {
        builder = builder.with_endpoint(endpoint);
    }
    let mut exporter = builder
        .build()
        .map_err(|err| ExportError::Build(err.to_string()))?;
    exporter.set_resource(&resource());
    let capacity = usize::try_from(config.queue).unwrap_or(usize::MAX).max(1);
    let (spans, received) = mpsc::channel(capacity);
    // A batch is no larger than the queue: what is held waiting is at most
    // twice `queue` spans, however slow the collector.
    tokio::spawn(export(exporter, received, timeout, capacity.min(BATCH)));
    Ok(Queue { spans })
}

/// `service.name` is `probity` unless `OTEL_SERVICE_NAME` or
/// `OTEL_RESOURCE_ATTRIBUTES` name it (the SDK reads both).
fn resource() -> Resource {
    let named = std::env::var_os("OTEL_SERVICE_NAME").is_some()
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| v.contains("service.name="));
    let builder = Resource::builder()
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    if named {
        builder.build()
    } else {
        builder.with_service_name("probity").build()
    }
}

/// The export task: collects a batch, exports it, counts what is lost.
async fn export(
    exporter: opentelemetry_otlp::SpanExporter,
    mut received: mpsc::Receiver<Message>,
    timeout: Duration,
    most: usize,
) {
    let mut batch: Vec<SpanData> = Vec::with_capacity(most);
    let mut flushed: Vec<oneshot::Sender<()>> = Vec::new();
    while let Some(first) = received.recv().await {
        take(first, &mut batch, &mut flushed);
        let deadline = tokio::time::Instant::now() + BATCH_DELAY;
        while batch.len() < most && flushed.is_empty() {
            match tokio::time::timeout_at(deadline, received.recv()).await {
                Ok(Some(message)) => take(message, &mut batch, &mut flushed),
                Ok(None) | Err(_) => break,
            }
        }
        if !batch.is_empty() {
            let spans = std::mem::replace(&mut batch, Vec::with_capacity(most));
            let count = spans.len() as u64;
            match tokio::time::timeout(timeout, exporter.export(spans)).await {
                Ok(Ok(())) => metrics::counter!(EXPORTED_SPANS_TOTAL).increment(count),
                Ok(Err(err)) => export_failed("export_failed", count, &err.to_string()),
                Err(_) => export_failed("timeout", count, "no answer in export_timeout_ms"),
            }
        }
        for done in flushed.drain(..) {
            let _ = done.send(());
        }
    }
}

fn take(message: Message, batch: &mut Vec<SpanData>, flushed: &mut Vec<oneshot::Sender<()>>) {
    match message {
        Message::Span(span) => batch.push(*span),
        Message::Flush(done) => flushed.push(done),
    }
}

/// Lost spans are counted; the warning is rate-limited by the caller's
/// batch interval (one line per failed batch at most).
fn export_failed(reason: &'static str, count: u64, why: &str) {
    dropped(reason, count);
    tracing::warn!(
        reason,
        spans = count,
        error = why,
        "spans not exported: check the collector at the OTLP endpoint"
    );
}

/// The exporter's HTTP client: hyper, as toward the providers, with the
/// web PKI roots for an `https://` collector (Langfuse, Grafana Cloud).
#[derive(Debug, Clone)]
struct OtlpCollector {
    client: Client<crate::connector::Connector, Full<Bytes>>,
    timeout: Duration,
}

impl OtlpCollector {
    fn new(timeout: Duration) -> Self {
        let https = crate::connector::https(timeout);
        let client = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_max_idle_per_host(2)
            .build(https);
        Self { client, timeout }
    }
}

#[async_trait::async_trait]
impl HttpClient for OtlpCollector {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let request = request.map(Full::new);
        let response = tokio::time::timeout(self.timeout, self.client.request(request))
            .await
            .map_err(|_| "the collector did not answer in time")??;
        let (parts, body) = response.into_parts();
        let body = Limited::new(body, MAX_ANSWER_BYTES)
            .collect()
            .await?
            .to_bytes();
        Ok(Response::from_parts(parts, body))
    }
}
