//! Finished spans leave through a bounded queue to one background task that
//! batches them and hands each batch to the OTLP/HTTP exporter of
//! `opentelemetry-otlp`, sent with probity's own hyper client.
//!
//! Not the SDK's `BatchSpanProcessor`: that one runs its own OS thread and
//! counts what it drops only in its own log line, where probity must count
//! every dropped span on `/metrics` and never let a slow collector grow
//! memory or reach a request.

use std::time::Duration;

use opentelemetry_sdk::trace::SpanData;
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
pub(super) fn dropped(reason: &'static str, n: u64) {
    metrics::counter!(DROPPED_SPANS_TOTAL, "reason" => reason).increment(n);
}

/// Where the exporter was told to send spans, or why it cannot.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExportError {
    /// `opentelemetry-otlp` refused the endpoint or the variables.
    #[cfg(feature = "otlp")]
    #[error("cannot export spans ({0}): check telemetry.otlp_endpoint and the OTEL_EXPORTER_OTLP_* variables")]
    Build(String),
    /// This binary was built without the `otlp` feature.
    #[cfg(not(feature = "otlp"))]
    #[error("this probity was built without OTLP export (cargo's `otlp` feature, on by default): rebuild with it, or unset telemetry.otlp_endpoint and OTEL_EXPORTER_OTLP_ENDPOINT")]
    NotBuilt,
}

/// The sending end of the span queue.
#[derive(Debug)]
pub(crate) struct Queue {
    pub(super) spans: mpsc::Sender<Message>,
}

#[cfg_attr(
    not(feature = "otlp"),
    expect(dead_code, reason = "built without OTLP export, no queue is made")
)]
pub(super) enum Message {
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

/// Built without OTLP export: a configured endpoint is refused at start,
/// never ignored.
#[cfg(not(feature = "otlp"))]
pub(crate) fn start(_config: &TelemetryConfig) -> Result<Queue, ExportError> {
    Err(ExportError::NotBuilt)
}
