//! Finished spans leave through a bounded queue to one background task that
//! batches them and hands each batch to the OTLP/HTTP exporter of
//! `opentelemetry-otlp`, sent with probity's own hyper client.
//!
//! Not the SDK's `BatchSpanProcessor`: that one runs its own OS thread and
//! counts what it drops only in its own log line, where probity must count
//! every dropped span on `/metrics` and never let a slow collector grow
//! memory or reach a request.

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

use crate::config::TelemetryConfig;

pub(crate) const DROPPED_SPANS_TOTAL: &str = "probity_telemetry_dropped_spans_total";
pub(crate) const EXPORTED_SPANS_TOTAL: &str = "probity_telemetry_exported_spans_total";

/// Describes the exporter's metrics (with the others, at start).
pub(crate) fn describe() {
    metrics::describe_counter!(
        DROPPED_SPANS_TOTAL,
        "Spans not exported, by reason: queue_full, export_failed, timeout."
    );
    metrics::describe_counter!(EXPORTED_SPANS_TOTAL, "Spans the OTLP endpoint accepted.");
}

/// Spans lost before the collector got them.
fn dropped(reason: &'static str, n: u64) {
    metrics::counter!(DROPPED_SPANS_TOTAL, "reason" => reason).increment(n);
}

/// A batch is sent when it has this many spans, or a second after its
/// first span, whichever comes first (the SDK's defaults).
const BATCH: usize = 512;
const BATCH_DELAY: Duration = Duration::from_secs(1);

/// The largest collector answer read (its partial-success message).
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Where the exporter was told to send spans, or why it cannot.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExportError {
    /// `opentelemetry-otlp` refused the endpoint or the variables.
    #[error("cannot export spans ({0}): check telemetry.otlp_endpoint and the OTEL_EXPORTER_OTLP_* variables")]
    Build(String),
}

/// The sending end of the span queue.
#[derive(Debug)]
pub(crate) struct Queue {
    spans: mpsc::Sender<Message>,
}

enum Message {
    Span(Box<SpanData>),
    /// Export what is queued, then answer.
    Flush(oneshot::Sender<()>),
}

impl Queue {
    /// Queues a finished span; never waits. A full queue drops it.
    pub(crate) fn send(&self, span: SpanData) {
        if self.spans.try_send(Message::Span(Box::new(span))).is_err() {
            dropped("queue_full", 1);
        }
    }

    /// Exports what is queued, waiting at most `within` (at shutdown).
    pub(crate) async fn flush(&self, within: Duration) {
        let (done, flushed) = oneshot::channel();
        if self.spans.try_send(Message::Flush(done)).is_ok() {
            let _ = tokio::time::timeout(within, flushed).await;
        }
    }
}

/// The OTLP endpoint in force: the configured base URL with the traces
/// path, or `None` to let the exporter read the `OTEL_*` variables.
pub(crate) fn endpoint(config: &TelemetryConfig) -> Option<String> {
    let base = config.otlp_endpoint.trim_end_matches('/');
    (!base.is_empty()).then(|| format!("{base}/v1/traces"))
}

/// Whether spans are made at all: an endpoint is configured or named by
/// the environment, and the SDK is not disabled (the spec's variables).
pub(crate) fn enabled(config: &TelemetryConfig) -> bool {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"))
        || std::env::var("OTEL_TRACES_EXPORTER").is_ok_and(|v| v.eq_ignore_ascii_case("none"));
    !disabled
        && (!config.otlp_endpoint.is_empty()
            || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            || set("OTEL_EXPORTER_OTLP_ENDPOINT"))
}

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
