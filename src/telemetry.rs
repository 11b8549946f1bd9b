//! Metrics and logs, emitted together: each event below is one function that
//! both counts and logs, so the two can never tell different stories.
//!
//! Label values come only from the configuration (route names) or from closed
//! sets (status codes, error kinds), so cardinality stays bounded. Logs carry
//! no bodies, no query strings and no credentials.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::HeaderValue;
use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Counter,
    Histogram, Unit,
};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::config::UNKNOWN_CLIENT;
use crate::context::RequestContext;
use crate::forward::ForwardError;

pub(crate) const REQUESTS_TOTAL: &str = "probity_requests_total";
pub(crate) const REQUEST_DURATION_SECONDS: &str = "probity_request_duration_seconds";
pub(crate) const UPSTREAM_ERRORS_TOTAL: &str = "probity_upstream_errors_total";
pub(crate) const OVERLOAD_REJECTIONS_TOTAL: &str = "probity_overload_rejections_total";
pub(crate) const PROVIDER_INVALID_RESPONSE_TOTAL: &str = "probity_provider_invalid_response_total";
pub(crate) const MALFORMED_FIGURES_TOTAL: &str = "probity_malformed_figures_total";
pub(crate) const FIGURE_CONTRADICTIONS_TOTAL: &str = "probity_figure_contradictions_total";
pub(crate) const TOKENS_TOTAL: &str = "probity_tokens_total";
pub(crate) const REALTIME_ERRORS_TOTAL: &str = "probity_realtime_errors_total";
pub(crate) const UPSTREAM_STREAM_ERRORS_TOTAL: &str = "probity_upstream_stream_errors_total";
pub(crate) const UNINSPECTED_TOTAL: &str = "probity_uninspected_total";
pub(crate) const CLIENT_GONE_TOTAL: &str = "probity_client_gone_total";
pub(crate) const TIME_TO_FIRST_BYTE_SECONDS: &str = "probity_time_to_first_byte_seconds";
pub(crate) const OVERHEAD_SECONDS: &str = "probity_overhead_seconds";
pub(crate) const MODEL_INVALID_OUTPUT_TOTAL: &str = "probity_model_invalid_output_total";
pub(crate) const MODEL_OUTPUTS_TOTAL: &str = "probity_model_outputs_total";
pub(crate) const CHUNKED_REQUESTS_TOTAL: &str = "probity_chunked_requests_total";
pub(crate) const RUNTIME_ALIVE_TASKS: &str = "probity_runtime_alive_tasks";
pub(crate) const SEND_TIMEOUTS_TOTAL: &str = "probity_send_timeouts_total";
pub(crate) const CHUNKS_TOTAL: &str = "probity_chunks_total";
pub(crate) const INTERNAL_ERRORS_TOTAL: &str = "probity_internal_errors_total";
pub(crate) const CONFIG_RELOADS_TOTAL: &str = "probity_config_reloads_total";
pub(crate) const CAPTURE_DROPPED_TOTAL: &str = "probity_capture_dropped_total";
pub(crate) const CAPTURE_WRITES_TOTAL: &str = "probity_capture_writes_total";
pub(crate) const CAPTURE_WRITE_SECONDS: &str = "probity_capture_write_seconds";
pub(crate) const BUILD_INFO: &str = "probity_build_info";

/// Buckets for request durations: model calls range from a millisecond
/// (a cached embedding) to minutes (a long generation).
const DURATION_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
];

/// Buckets for probity's own share of an exchange: tens of microseconds
/// for a small answer, milliseconds for a large body's scan; the last two
/// make a stall (a blocked worker) stand apart from a slow scan.
const OVERHEAD_BUCKETS: &[f64] = &[
    0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
    1.0,
];

/// Installs the process-wide Prometheus recorder and describes every metric.
pub fn install() -> Result<PrometheusHandle, metrics_exporter_prometheus::BuildError> {
    let mut builder = PrometheusBuilder::new();
    for seconds in [
        REQUEST_DURATION_SECONDS,
        TIME_TO_FIRST_BYTE_SECONDS,
        CAPTURE_WRITE_SECONDS,
    ] {
        builder =
            builder.set_buckets_for_metric(Matcher::Full(seconds.into()), DURATION_BUCKETS)?;
    }
    builder =
        builder.set_buckets_for_metric(Matcher::Full(OVERHEAD_SECONDS.into()), OVERHEAD_BUCKETS)?;
    let handle = builder.install_recorder()?;
    describe_requests();
    describe_counter!(
        UPSTREAM_ERRORS_TOTAL,
        "Upstream faults by kind: unreachable, timeout, reset, too_large."
    );
    describe_counter!(
        CLIENT_GONE_TOTAL,
        "Answers whose client closed its connection before their last byte (a stream before \
         its end), by route: neither the upstream's fault nor probity's."
    );
    describe_counter!(
        OVERLOAD_REJECTIONS_TOTAL,
        "Requests refused with 503 and Retry-After, by the limit reached (limit): \
         max_connections, max_held_response_bytes, max_held_share."
    );
    describe_counter!(
        PROVIDER_INVALID_RESPONSE_TOTAL,
        "Responses refused with 502 because a payload invariant was broken, by invariant."
    );
    describe_figures();
    describe_counter!(
        TOKENS_TOTAL,
        "Tokens as reported by providers, counted only from well-formed figures."
    );
    describe_tunnels();
    describe_histogram!(
        TIME_TO_FIRST_BYTE_SECONDS,
        Unit::Seconds,
        "For streams: time from the request's arrival to the first byte sent."
    );
    describe_counter!(
        MODEL_INVALID_OUTPUT_TOTAL,
        "Model answers that broke their output contract, by task and reason (one per reason)."
    );
    describe_counter!(
        MODEL_OUTPUTS_TOTAL,
        "Model answers judged against an output contract, by task and verdict (valid, invalid)."
    );
    describe_counter!(
        CHUNKED_REQUESTS_TOTAL,
        "Embedding batches split into chunks."
    );
    describe_counter!(CHUNKS_TOTAL, "Chunks sent for split embedding batches.");
    describe_counter!(
        CONFIG_RELOADS_TOTAL,
        "Configuration reloads (SIGHUP or POST /reload), by result: applied or rejected."
    );
    describe_limits();
    describe_counter!(
        INTERNAL_ERRORS_TOTAL,
        "Faults in probity itself (a panic caught while serving a request), by route."
    );
    describe_captures();
    crate::trace::describe();
    describe_counter!(
        UNINSPECTED_TOTAL,
        "Responses passed unchecked because the request could not be read, by reason."
    );
    build_info();
    Ok(handle)
}

/// Every request's count, duration and probity's share of it.
fn describe_requests() {
    describe_counter!(
        REQUESTS_TOTAL,
        "Requests answered, by route, client and HTTP status sent."
    );
    describe_histogram!(
        REQUEST_DURATION_SECONDS,
        Unit::Seconds,
        "Time from the request's arrival to the last byte of its response."
    );
    describe_histogram!(
        OVERHEAD_SECONDS,
        Unit::Seconds,
        "The part of probity_request_duration_seconds that was probity's own: the exchange's \
         time less its waits on the upstream and on the client (Realtime sessions excluded)."
    );
}

/// What is counted of figures not reported.
fn describe_figures() {
    describe_counter!(
        MALFORMED_FIGURES_TOTAL,
        "Ancillary figures found malformed and nulled, by the figure's pointer."
    );
    describe_counter!(
        FIGURE_CONTRADICTIONS_TOTAL,
        "Relations between figures that an answer's figures broke (their figures nulled), \
         by the relation's name from the dialect's table."
    );
}

/// Which version is running: 1, labelled with it, from start to exit (a
/// dashboard shows it; a rollout shows as two versions side by side).
fn build_info() {
    describe_gauge!(
        BUILD_INFO,
        "Always 1, labelled with the running probity version."
    );
    gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
}

/// The upstream's own error events inside a stream or a tunnel.
fn describe_tunnels() {
    describe_counter!(
        REALTIME_ERRORS_TOTAL,
        "Realtime `error` events the upstream sent through a WebSocket tunnel, by route."
    );
    describe_counter!(
        UPSTREAM_STREAM_ERRORS_TOTAL,
        "Error events the upstream sent inside a stream (a chat `error` chunk, an Anthropic \
         `error` event, a Bedrock exception frame), relayed as they came, by route."
    );
}

/// What shows a limit at work, or a leak.
fn describe_limits() {
    describe_counter!(
        SEND_TIMEOUTS_TOTAL,
        "Connections closed because their client did not read an inspected answer within send_timeout_ms."
    );
    describe_gauge!(
        RUNTIME_ALIVE_TASKS,
        "Tasks alive in probity's runtime when /metrics was read: back to its idle level once requests end, else something leaks."
    );
}

/// The capture store's metrics.
fn describe_captures() {
    describe_counter!(
        CAPTURE_DROPPED_TOTAL,
        "Captures not stored, by reason: queue_full, store_error, timeout, shutdown (the requests were answered as usual)."
    );
    describe_counter!(
        CAPTURE_WRITES_TOTAL,
        "Captures written to the store, by result: ok or error."
    );
    describe_histogram!(
        CAPTURE_WRITE_SECONDS,
        Unit::Seconds,
        "Time to write one capture (body and metadata) to the store."
    );
}

/// How a response ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// The last byte went out.
    Complete,
    /// An upstream fault cut a stream after its status line.
    Cut(&'static str),
    /// The client went away before the end.
    ClientGone,
}

impl Ending {
    fn as_str(self) -> &'static str {
        match self {
            Ending::Complete => "complete",
            Ending::Cut(_) => "cut",
            Ending::ClientGone => "client_gone",
        }
    }
}

/// A response has ended: one log line and the request metrics.
pub(crate) fn request_finished(ctx: &RequestContext, bytes: u64, ending: Ending) {
    let route = ctx.route_label();
    let elapsed = ctx.started.elapsed();
    let overhead = ctx.waited.overhead(elapsed);
    let status = ctx.status.as_u16();
    let client = ctx.client.as_deref().unwrap_or(UNKNOWN_CLIENT);
    with_series(route, |series| {
        series.count_request(route, client, status);
        let failed = status >= 500 || matches!(ending, Ending::Cut(_));
        series.page(route).answered(status, failed);
        series
            .histogram(REQUEST_DURATION_SECONDS, route)
            .record(elapsed.as_secs_f64());
        if let Some(overhead) = overhead {
            series
                .histogram(OVERHEAD_SECONDS, route)
                .record(overhead.as_secs_f64());
        }
    });
    use crate::logs::LineValue as Value;
    // Filtered by `RUST_LOG` as tracing's own lines are, under this module.
    if tracing::enabled!(tracing::Level::INFO) {
        crate::logs::request(
            module_path!(),
            &[
                (
                    "request_id",
                    Some(Value::Text(ctx.request_id.to_str().unwrap_or("-"))),
                ),
                ("route", Some(Value::Text(route))),
                ("client", Some(Value::Text(client))),
                ("method", Some(Value::Text(ctx.method.as_str()))),
                ("path", Some(Value::Text(&ctx.path))),
                ("status", Some(Value::Count(u64::from(status)))),
                (
                    "upstream_status",
                    ctx.upstream_status
                        .map(|s| Value::Count(u64::from(s.as_u16()))),
                ),
                ("duration_ms", Some(Value::Millis(elapsed))),
                ("overhead_ms", overhead.map(Value::Millis)),
                ("bytes", Some(Value::Count(bytes))),
                ("ending", Some(Value::Text(ending.as_str()))),
                ("outcome", ctx.outcome.map(|o| Value::Text(o.as_str()))),
                ("captured", Some(Value::Flag(ctx.captured))),
            ],
        );
    }
    if ending == Ending::ClientGone {
        counter!(CLIENT_GONE_TOTAL, "route" => route.to_string()).increment(1);
    }
    if let Some(span) = &ctx.span {
        let cut = match ending {
            Ending::Cut(kind) => Some(kind),
            Ending::Complete | Ending::ClientGone => None,
        };
        span.end(status, cut, ending == Ending::ClientGone);
    }
}

// ------------------------------------------------------- per-route series

/// One route's series on the request path, by metric and second label.
#[derive(Default)]
struct RouteSeries {
    counters: HashMap<(&'static str, &'static str), Counter>,
    histograms: HashMap<&'static str, Histogram>,
    /// `probity_requests_total`, by status and client.
    requests: HashMap<u16, Vec<(Box<str>, Counter)>>,
    /// The admin page's figures of this route, shared by every thread.
    page: Option<Arc<RouteFigures>>,
}

impl RouteSeries {
    /// Counts one request; clients are few, so a list per status serves.
    fn count_request(&mut self, route: &str, client: &str, status: u16) {
        let by_client = self.requests.entry(status).or_default();
        if let Some((_, counter)) = by_client.iter().find(|(name, _)| &**name == client) {
            counter.increment(1);
            return;
        }
        let counter = counter!(REQUESTS_TOTAL, "route" => route.to_string(),
            "client" => client.to_string(), "status" => status.to_string());
        counter.increment(1);
        by_client.push((client.into(), counter));
    }

    fn page(&mut self, route: &str) -> &RouteFigures {
        self.page.get_or_insert_with(|| route_figures_of(route))
    }

    fn counter(
        &mut self,
        metric: &'static str,
        route: &str,
        label: (&'static str, &'static str),
    ) -> &Counter {
        self.counters
            .entry((metric, label.1))
            .or_insert_with(|| counter!(metric, "route" => route.to_string(), label.0 => label.1))
    }

    fn histogram(&mut self, metric: &'static str, route: &str) -> &Histogram {
        self.histograms
            .entry(metric)
            .or_insert_with(|| histogram!(metric, "route" => route.to_string()))
    }
}

thread_local! {
    /// Handles of the series every request touches, kept per worker thread.
    /// `counter!` with labels allocates each label and looks the series up
    /// in the registry on every call: a quarter of the chat path's
    /// allocations. Routes and label values are bounded sets, so these maps
    /// are too.
    static SERIES: RefCell<HashMap<Box<str>, RouteSeries>> = RefCell::new(HashMap::new());
}

fn with_series(route: &str, use_series: impl FnOnce(&mut RouteSeries)) {
    SERIES.with(|cell| {
        let Ok(mut map) = cell.try_borrow_mut() else {
            return use_series(&mut RouteSeries::default());
        };
        if !map.contains_key(route) {
            map.insert(route.into(), RouteSeries::default());
        }
        if let Some(series) = map.get_mut(route) {
            use_series(series);
        }
    });
}

/// An upstream fault, before the status line (`streaming` false, the client
/// got an error response) or inside a stream that was then cut.
pub(crate) fn upstream_fault(
    route: &str,
    request_id: &HeaderValue,
    err: &ForwardError,
    streaming: bool,
) {
    counter!(UPSTREAM_ERRORS_TOTAL, "route" => route.to_string(), "kind" => err.kind())
        .increment(1);
    tracing::warn!(
        request_id = request_id.to_str().unwrap_or("-"),
        route,
        kind = err.kind(),
        streaming,
        error = %err,
        "upstream fault"
    );
}

/// A connection over `max_connections` was answered 503.
pub(crate) fn overload_rejected(max_connections: u64) {
    counter!(OVERLOAD_REJECTIONS_TOTAL, "limit" => "max_connections").increment(1);
    tracing::warn!(
        max_connections,
        "over max_connections: request refused with 503"
    );
}

/// An inspected request was refused with 503 while the held answers'
/// budget was spent. Each refusal is in the request log already: no warning
/// per refusal (a crowd of slow readers retrying would flood the log).
pub(crate) fn held_budget_spent(max_held_response_bytes: u64) {
    counter!(OVERLOAD_REJECTIONS_TOTAL, "limit" => "max_held_response_bytes").increment(1);
    tracing::debug!(
        max_held_response_bytes,
        "held answers' budget spent: inspected request refused with 503"
    );
}

/// An inspected request was refused with 503: its client holds its whole
/// share of the held answers' budget (the others are still admitted).
pub(crate) fn held_share_spent(share: u64) {
    counter!(OVERLOAD_REJECTIONS_TOTAL, "limit" => "max_held_share").increment(1);
    tracing::debug!(
        share,
        "a client's share of held answers spent: its inspected request refused with 503"
    );
}

fn millis(duration: Duration) -> f64 {
    (duration.as_secs_f64() * 1e6).round() / 1e3
}

/// A payload invariant was broken: the client gets a 502.
pub(crate) fn invalid_response(route: &str, request_id: &HeaderValue, invariant: &'static str) {
    counter!(PROVIDER_INVALID_RESPONSE_TOTAL, "route" => route.to_string(), "invariant" => invariant)
        .increment(1);
    tracing::warn!(
        request_id = request_id.to_str().unwrap_or("-"),
        route,
        invariant,
        "provider response rejected: payload invariant broken"
    );
}

/// Malformed figures were nulled. The pointers come from the dialect's
/// fixed table, never from the body, and no value is logged.
pub(crate) fn figures_normalized(route: &str, request_id: &HeaderValue, figures: &[&'static str]) {
    for figure in figures {
        counter!(MALFORMED_FIGURES_TOTAL, "route" => route.to_string(), "figure" => *figure)
            .increment(1);
    }
    tracing::warn!(
        request_id = request_id.to_str().unwrap_or("-"),
        route,
        figures = %figures.join(","),
        "malformed figures nulled"
    );
}

/// Figures that contradicted each other were nulled: the relations they
/// broke, by name from the dialect's table; no value is logged.
pub(crate) fn figures_contradicted(
    route: &str,
    request_id: &HeaderValue,
    relations: &[&'static str],
) {
    for relation in relations {
        counter!(FIGURE_CONTRADICTIONS_TOTAL, "route" => route.to_string(), "relation" => *relation)
            .increment(1);
    }
    tracing::warn!(
        request_id = request_id.to_str().unwrap_or("-"),
        route,
        relations = %relations.join(","),
        "figures that contradict each other nulled"
    );
}

/// Well-formed token figures, by kind.
pub(crate) fn tokens(route: &str, tokens: &[(&'static str, u64)]) {
    with_series(route, |series| {
        for (kind, count) in tokens {
            series
                .counter(TOKENS_TOTAL, route, ("kind", kind))
                .increment(*count);
        }
    });
}

/// A stream's upstream sent error events of its own (relayed as they
/// came; their messages are not logged: they may quote the client's input).
pub(crate) fn upstream_stream_errors(route: &str, count: u32) {
    if count > 0 {
        counter!(UPSTREAM_STREAM_ERRORS_TOTAL, "route" => route.to_string())
            .increment(u64::from(count));
    }
}

/// A Realtime session's upstream sent an `error` event (relayed as it is;
/// its message is not logged: it may quote the client's input).
pub(crate) fn realtime_error(route: &str, request_id: &HeaderValue) {
    counter!(REALTIME_ERRORS_TOTAL, "route" => route.to_string()).increment(1);
    tracing::debug!(
        request_id = request_id.to_str().unwrap_or("-"),
        route,
        "realtime error event relayed"
    );
}

/// A request presented no configured client token: its request line says
/// 401; this says what was looked for (never what was sent).
pub(crate) fn refused(route: &str, request_id: &HeaderValue, refused: &crate::route::Refused) {
    tracing::debug!(
        request_id = request_id.to_str().unwrap_or("-"),
        route,
        header = refused.header,
        credential_sent = refused.presented,
        "no client token admitted the request"
    );
}

/// A client took longer than `send_timeout_ms` to read an answer held for
/// it: its connection was closed.
pub(crate) fn send_timed_out(after: Duration) {
    counter!(SEND_TIMEOUTS_TOTAL).increment(1);
    tracing::info!(
        send_timeout_ms = millis(after),
        "a client did not read its answer within send_timeout_ms: connection closed"
    );
}

/// Samples the runtime for `/metrics`: its alive tasks (every connection,
/// request and pooled upstream connection is one).
pub(crate) fn runtime_sampled() {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        let alive = runtime.metrics().num_alive_tasks();
        gauge!(RUNTIME_ALIVE_TASKS).set(alive as f64);
    }
}

/// A response passed unchecked because its request could not be read.
pub(crate) fn uninspected(route: &str, request_id: &HeaderValue, reason: &'static str) {
    counter!(UNINSPECTED_TOTAL, "route" => route.to_string(), "reason" => reason).increment(1);
    tracing::debug!(
        request_id = request_id.to_str().unwrap_or("-"),
        route,
        reason,
        "response passed uninspected"
    );
}

/// The first byte of a streamed response went out.
pub(crate) fn stream_first_byte(ctx: &RequestContext) {
    let route = ctx.route_label();
    with_series(route, |series| {
        series
            .histogram(TIME_TO_FIRST_BYTE_SECONDS, route)
            .record(ctx.started.elapsed().as_secs_f64());
    });
}

/// A model's answer was judged against its output contract.
pub(crate) fn output_judged(task: &str, valid: bool) {
    let verdict = if valid { "valid" } else { "invalid" };
    counter!(MODEL_OUTPUTS_TOTAL, "task" => task.to_string(), "verdict" => verdict).increment(1);
}

/// A model's answer broke its output contract: one count per reason.
pub(crate) fn output_invalid(
    task: &str,
    client: Option<&str>,
    request_id: &HeaderValue,
    reasons: &[probity_judge::contract::Reason],
) {
    let client = client.unwrap_or(UNKNOWN_CLIENT);
    for reason in reasons {
        counter!(MODEL_INVALID_OUTPUT_TOTAL, "task" => task.to_string(), "reason" => reason.as_str(),
            "client" => client.to_string())
        .increment(1);
    }
    tracing::info!(
        request_id = request_id.to_str().unwrap_or("-"),
        task,
        client,
        reasons = %probity_judge::contract::joined(reasons),
        "model output invalid"
    );
}

/// An embedding batch is being split into chunks.
pub(crate) fn chunked(route: &str) {
    counter!(CHUNKED_REQUESTS_TOTAL, "route" => route.to_string()).increment(1);
}

/// One chunk of a split batch was sent.
pub(crate) fn chunk_sent(route: &str) {
    counter!(CHUNKS_TOTAL, "route" => route.to_string()).increment(1);
}

/// probity's own fault: a panic while serving a request, answered with a
/// 500 (or a stream's error event). `what` is the panic's message, which
/// probity's own code wrote: never a body or a credential.
pub(crate) fn internal_error(route: &str, request_id: &HeaderValue, what: &str) {
    counter!(INTERNAL_ERRORS_TOTAL, "route" => route.to_string()).increment(1);
    tracing::error!(
        request_id = request_id.to_str().unwrap_or("-"),
        route,
        error = what,
        "internal error: a panic while serving a request was caught and answered"
    );
}

/// A configuration reload was applied or refused (with every problem).
pub(crate) fn config_reloaded(trigger: &'static str, applied: bool, routes: usize, problems: &str) {
    let result = if applied { "applied" } else { "rejected" };
    counter!(CONFIG_RELOADS_TOTAL, "result" => result).increment(1);
    if applied {
        tracing::info!(trigger, routes, "configuration reloaded");
    } else {
        tracing::error!(
            trigger,
            problems,
            "configuration reload refused: the previous configuration keeps serving"
        );
    }
}

/// Captures the store did not get.
pub(crate) fn capture_dropped(reason: &'static str, n: u64) {
    counter!(CAPTURE_DROPPED_TOTAL, "reason" => reason).increment(n);
}

/// One write to the capture store, and how long it took.
pub(crate) fn capture_written(ok: bool, took: Duration) {
    let result = if ok { "ok" } else { "error" };
    counter!(CAPTURE_WRITES_TOTAL, "result" => result).increment(1);
    histogram!(CAPTURE_WRITE_SECONDS).record(took.as_secs_f64());
}

// ------------------------------------------------- the admin page's figures

/// One route's figures for the admin page's table, counted in process (the
/// page never parses the Prometheus text).
#[derive(Debug, Default)]
pub(crate) struct RouteFigures {
    /// Responses sent, by status class: 1xx to 5xx.
    pub(crate) classes: [AtomicU64; 5],
    /// Responses sent 5xx, and streams an upstream fault cut.
    pub(crate) errors: AtomicU64,
    pub(crate) normalized: AtomicU64,
    pub(crate) rejected: AtomicU64,
    /// Answers judged against an output contract, and the invalid ones.
    pub(crate) outputs_judged: AtomicU64,
    pub(crate) invalid_outputs: AtomicU64,
}

impl RouteFigures {
    fn answered(&self, status: u16, failed: bool) {
        let class = usize::from(status / 100).saturating_sub(1);
        if let Some(count) = self.classes.get(class) {
            count.fetch_add(1, Relaxed);
        }
        if failed {
            self.errors.fetch_add(1, Relaxed);
        }
    }
}

/// Every route's figures, by name; routes are a bounded set.
static ROUTE_FIGURES: Mutex<BTreeMap<String, Arc<RouteFigures>>> = Mutex::new(BTreeMap::new());

fn route_figures_of(route: &str) -> Arc<RouteFigures> {
    let Ok(mut all) = ROUTE_FIGURES.lock() else {
        return Arc::default();
    };
    all.entry(route.to_string()).or_default().clone()
}

/// Each route's figures, by name.
pub(crate) fn route_figures() -> Vec<(String, Arc<RouteFigures>)> {
    ROUTE_FIGURES
        .lock()
        .map(|all| all.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

/// What inspection found of one response, for the admin page's table.
pub(crate) fn route_judged(route: &str, normalized: bool, rejected: bool, output: Option<bool>) {
    with_series(route, |series| {
        let page = series.page(route);
        if normalized {
            page.normalized.fetch_add(1, Relaxed);
        }
        if rejected {
            page.rejected.fetch_add(1, Relaxed);
        }
        if let Some(valid) = output {
            page.outputs_judged.fetch_add(1, Relaxed);
            if !valid {
                page.invalid_outputs.fetch_add(1, Relaxed);
            }
        }
    });
}
