//! OpenTelemetry traces: one span per proxied request (kind `SERVER`) and
//! one child span per upstream call (kind `CLIENT`; a chunked batch has one
//! per chunk), with the GenAI semantic conventions' attributes.
//!
//! A request's span is *rendered* when the request ends, from what was
//! judged (`finish`), never from the upstream's raw bytes: a figure that was
//! malformed is absent from the span, as it is `null` in the response. The
//! span joins the client's trace (`traceparent`), and the upstream call
//! carries probity's call span as its parent.
//!
//! With tracing off no [`RequestSpan`] exists, and every hook is a `None`.

mod context;
mod export;
#[cfg(feature = "otlp")]
mod otlp;

// The OTLP exporter when built in (`otlp.rs`), else the refusal (`export.rs`).
#[cfg(not(feature = "otlp"))]
use export::start as start_export;
#[cfg(feature = "otlp")]
use otlp::start as start_export;

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use http::{HeaderMap, Method};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SpanData, SpanEvents, SpanLinks};

pub(crate) use export::{describe, ExportError};

use crate::config::TelemetryConfig;
use probity_judge::inspect::Findings;
use probity_judge::violation::Invariant;

/// Makes request spans and sends them to the export queue.
#[derive(Debug)]
pub(crate) struct Tracer {
    queue: export::Queue,
    ids: RandomIdGenerator,
    scope: InstrumentationScope,
}

impl Tracer {
    /// The tracer the configuration asks for, or `None` when tracing is off.
    pub(crate) fn start(config: &TelemetryConfig) -> Result<Option<Arc<Self>>, ExportError> {
        if !export::enabled(config) {
            return Ok(None);
        }
        let queue = start_export(config)?;
        tracing::info!(
            endpoint = export::endpoint(config)
                .as_deref()
                .unwrap_or("from OTEL_EXPORTER_OTLP_*"),
            "exporting spans (OTLP/HTTP)"
        );
        Ok(Some(Arc::new(Self {
            queue,
            ids: RandomIdGenerator::default(),
            scope: InstrumentationScope::builder("probity")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
        })))
    }

    /// A span for a request that has just arrived, in the client's trace
    /// when it sent one. A caller that chose not to sample gets none.
    pub(crate) fn request(
        self: &Arc<Self>,
        headers: &HeaderMap,
        method: &Method,
    ) -> Option<Arc<RequestSpan>> {
        let parent = context::extract(headers);
        if parent.as_ref().is_some_and(|p| !p.flags.is_sampled()) {
            return None;
        }
        let trace_id = parent
            .as_ref()
            .map_or_else(|| self.ids.new_trace_id(), |p| p.trace_id);
        let span_id = self.ids.new_span_id();
        Some(Arc::new(RequestSpan {
            tracer: self.clone(),
            trace_id,
            span_id,
            parent,
            start: SystemTime::now(),
            state: Mutex::new(State {
                attributes: vec![KeyValue::new("http.request.method", method.to_string())],
                ..State::default()
            }),
        }))
    }

    /// Exports what is queued, within `within` (at shutdown).
    pub(crate) async fn flush(&self, within: std::time::Duration) {
        self.queue.flush(within).await;
    }
}

/// One request's span, filled in as the request passes each phase.
#[derive(Debug)]
pub(crate) struct RequestSpan {
    tracer: Arc<Tracer>,
    trace_id: TraceId,
    span_id: SpanId,
    parent: Option<context::Parent>,
    start: SystemTime,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    attributes: Vec<KeyValue>,
    operation: Option<&'static str>,
    model: Option<String>,
    route: Option<String>,
    server_address: Option<String>,
    /// `error.type`, when the request ended in an error.
    error: Option<&'static str>,
    calls: Vec<CallSpan>,
}

/// One upstream call of the request.
#[derive(Debug)]
struct CallSpan {
    span_id: SpanId,
    method: Method,
    start: SystemTime,
    end: Option<SystemTime>,
    attributes: Vec<KeyValue>,
    error: Option<Cow<'static, str>>,
}

/// Which upstream call a span id belongs to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallId(SpanId);

/// What the route says about a request: where it goes and as what.
pub(crate) struct Routed<'a> {
    pub(crate) route: &'a str,
    pub(crate) client: Option<&'a str>,
    pub(crate) provider: &'static str,
    pub(crate) server_address: &'a str,
    pub(crate) server_port: Option<u16>,
}

impl RequestSpan {
    fn with_state(&self, change: impl FnOnce(&mut State)) {
        if let Ok(mut state) = self.state.lock() {
            change(&mut state);
        }
    }

    /// The route matched.
    pub(crate) fn routed(&self, routed: &Routed<'_>) {
        self.with_state(|state| {
            let a = &mut state.attributes;
            a.push(KeyValue::new("probity.route", routed.route.to_string()));
            a.push(KeyValue::new(
                "probity.client",
                routed
                    .client
                    .unwrap_or(crate::config::UNKNOWN_CLIENT)
                    .to_string(),
            ));
            a.push(KeyValue::new("gen_ai.provider.name", routed.provider));
            a.push(KeyValue::new(
                "server.address",
                routed.server_address.to_string(),
            ));
            if let Some(port) = routed.server_port {
                a.push(KeyValue::new("server.port", i64::from(port)));
            }
            state.server_address = Some(routed.server_address.to_string());
            state.route = Some(routed.route.to_string());
        });
    }

    /// An inspected request was read: what it asks (`operation`), and of
    /// which model: the body's `model`, or a path's `models/{model}:{method}`
    /// (Gemini).
    pub(crate) fn requested(&self, operation: &'static str, body: &[u8], path: &str) {
        // serde skips every other member without building it: a tenth of
        // what parsing the whole request into a document costs.
        #[derive(serde::Deserialize)]
        struct Asked<'a> {
            #[serde(borrow)]
            model: Option<Cow<'a, str>>,
        }
        let from_body = serde_json::from_slice::<Asked<'_>>(body)
            .ok()
            .and_then(|asked| asked.model)
            .filter(|model| !model.is_empty())
            .map(Cow::into_owned);
        let model = from_body.or_else(|| {
            let (_, rest) = path.split_once("/models/")?;
            let model = rest.split([':', '/']).next()?;
            (!model.is_empty()).then(|| model.to_string())
        });
        self.with_state(|state| {
            let a = &mut state.attributes;
            a.push(KeyValue::new("gen_ai.operation.name", operation));
            if let Some(model) = &model {
                a.push(KeyValue::new("gen_ai.request.model", model.clone()));
            }
            state.operation = Some(operation);
            state.model = model;
        });
    }

    /// An upstream call is about to be sent: its span starts, and the
    /// request carries it as the upstream's parent.
    pub(crate) fn call(
        &self,
        headers: &mut HeaderMap,
        method: &Method,
        chunk: Option<usize>,
    ) -> CallId {
        let span_id = self.tracer.ids.new_span_id();
        let state = self
            .parent
            .as_ref()
            .map(|p| p.state.header())
            .unwrap_or_default();
        context::inject(headers, self.trace_id, span_id, &state);
        // Never the URL: a query string may carry a credential (`?key=`).
        let mut attributes = vec![KeyValue::new("http.request.method", method.to_string())];
        if let Some(index) = chunk {
            attributes.push(KeyValue::new("probity.chunk", index as i64));
        }
        self.with_state(|s| {
            s.calls.push(CallSpan {
                span_id,
                method: method.clone(),
                start: SystemTime::now(),
                end: None,
                attributes,
                error: None,
            });
        });
        CallId(span_id)
    }

    /// The upstream answered with `status`. A whole answer's call ends
    /// here; a stream's ends with the request.
    pub(crate) fn answered(&self, id: CallId, status: u16, whole: bool) {
        self.with_call(id, |call| {
            call.attributes.push(KeyValue::new(
                "http.response.status_code",
                i64::from(status),
            ));
            if status >= 500 {
                call.error = Some(status.to_string().into());
            }
            if whole {
                call.end = Some(SystemTime::now());
            }
        });
    }

    /// The upstream call failed (`kind`: `timeout`, `unreachable`...).
    pub(crate) fn call_failed(&self, id: CallId, kind: &'static str) {
        self.with_call(id, |call| {
            call.error = Some(kind.into());
            call.end = Some(SystemTime::now());
        });
    }

    fn with_call(&self, id: CallId, change: impl FnOnce(&mut CallSpan)) {
        self.with_state(|state| {
            if let Some(call) = state.calls.iter_mut().find(|c| c.span_id == id.0) {
                change(call);
            }
        });
    }

    /// What inspection concluded (from the one finishing path).
    pub(crate) fn judged(&self, findings: &Findings) {
        self.with_state(|state| {
            let a = &mut state.attributes;
            a.push(KeyValue::new(
                "probity.outcome",
                findings.outcome().as_str(),
            ));
            for (kind, count) in &findings.tokens {
                let key = match *kind {
                    "input" => "gen_ai.usage.input_tokens",
                    "output" => "gen_ai.usage.output_tokens",
                    _ => continue,
                };
                if let Ok(count) = i64::try_from(*count) {
                    a.push(KeyValue::new(key, count));
                }
            }
            if !findings.pointers.is_empty() {
                a.push(KeyValue::new(
                    "probity.normalized",
                    strings(findings.pointers.iter().map(String::as_str)),
                ));
            }
            if let Some(invariant) = findings.rejected.map(Invariant::as_str) {
                a.push(KeyValue::new("probity.invariant", invariant));
            }
            if !findings.reasons().is_empty() {
                a.push(KeyValue::new(
                    "probity.output.reasons",
                    strings(findings.reasons().iter().map(|r| r.as_str())),
                ));
            }
            if let Some(model) = findings.identity.model.as_deref() {
                a.push(KeyValue::new("gen_ai.response.model", model.to_string()));
            }
            if let Some(id) = findings.identity.id.as_deref() {
                a.push(KeyValue::new("gen_ai.response.id", id.to_string()));
            }
        });
    }

    /// The request was answered with probity's error `code`.
    pub(crate) fn failed(&self, code: &'static str) {
        self.with_state(|state| state.error = Some(code));
    }

    /// The response has ended: the spans are rendered and queued.
    /// `cut`: the upstream fault that ended a stream early; `client_gone`:
    /// the client left before the end.
    pub(crate) fn end(&self, status: u16, cut: Option<&'static str>, client_gone: bool) {
        let end = SystemTime::now();
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        let state = std::mem::take(&mut *state);
        let trace_state = self
            .parent
            .as_ref()
            .map(|p| p.state.clone())
            .unwrap_or_default();
        for call in state.calls {
            let name = format!(
                "{} {}",
                call.method,
                state.server_address.as_deref().unwrap_or("upstream")
            );
            let mut attributes = call.attributes;
            if let Some(address) = &state.server_address {
                attributes.push(KeyValue::new("server.address", address.clone()));
            }
            self.tracer.queue.send(self.span_data(SpanParts {
                span_id: call.span_id,
                parent: self.span_id,
                parent_remote: false,
                kind: SpanKind::Client,
                name: name.into(),
                start: call.start,
                end: call.end.unwrap_or(end),
                attributes,
                error: call.error,
                trace_state: trace_state.clone(),
            }));
        }
        // A 5xx without a named cause: its status code, as the HTTP
        // conventions say.
        let error: Option<Cow<'static, str>> = match state.error.or(cut) {
            Some(named) => Some(named.into()),
            None => (status >= 500).then(|| status.to_string().into()),
        };
        let mut attributes = state.attributes;
        attributes.push(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
        if client_gone {
            attributes.push(KeyValue::new("probity.client_gone", true));
        }
        let name: Cow<'static, str> = match (state.operation, &state.model, &state.route) {
            (Some(operation), Some(model), _) => format!("{operation} {model}").into(),
            (Some(operation), None, _) => operation.into(),
            (None, _, Some(route)) => format!("proxy {route}").into(),
            (None, _, None) => "proxy".into(),
        };
        self.tracer.queue.send(self.span_data(SpanParts {
            span_id: self.span_id,
            parent: self.parent.as_ref().map_or(SpanId::INVALID, |p| p.span_id),
            parent_remote: self.parent.is_some(),
            kind: SpanKind::Server,
            name,
            start: self.start,
            end,
            attributes,
            error,
            trace_state,
        }));
    }

    fn span_data(&self, parts: SpanParts) -> SpanData {
        let mut attributes = parts.attributes;
        if let Some(error) = &parts.error {
            attributes.push(KeyValue::new("error.type", error.clone()));
        }
        SpanData {
            span_context: SpanContext::new(
                self.trace_id,
                parts.span_id,
                TraceFlags::SAMPLED,
                false,
                parts.trace_state,
            ),
            parent_span_id: parts.parent,
            parent_span_is_remote: parts.parent_remote,
            span_kind: parts.kind,
            name: parts.name,
            start_time: parts.start,
            end_time: parts.end,
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: match parts.error {
                Some(error) => Status::error(error),
                None => Status::Unset,
            },
            instrumentation_scope: self.tracer.scope.clone(),
        }
    }
}

struct SpanParts {
    span_id: SpanId,
    parent: SpanId,
    parent_remote: bool,
    kind: SpanKind,
    name: Cow<'static, str>,
    start: SystemTime,
    end: SystemTime,
    attributes: Vec<KeyValue>,
    /// `error.type`, also the span's error status.
    error: Option<Cow<'static, str>>,
    trace_state: TraceState,
}

fn strings<'a>(items: impl Iterator<Item = &'a str>) -> Value {
    Value::Array(opentelemetry::Array::String(
        items.map(|s| s.to_string().into()).collect(),
    ))
}
