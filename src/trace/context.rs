//! W3C Trace Context (`traceparent`, `tracestate`): how a request joins the
//! app's trace, and how the upstream call joins probity's.
//!
//! Parsed by hand: the format is one fixed-width line, and the
//! propagator crates would parse it into a `Context` only for us to take
//! the same four fields back out.

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::trace::{SpanId, TraceFlags, TraceId, TraceState};

pub(crate) const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
pub(crate) const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// The caller's span, as its `traceparent` named it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Parent {
    pub(crate) trace_id: TraceId,
    pub(crate) span_id: SpanId,
    pub(crate) flags: TraceFlags,
    pub(crate) state: TraceState,
}

/// The client's trace context, if it sent a valid one. An invalid one is
/// ignored, as the spec says: probity starts a new trace.
pub(crate) fn extract(headers: &HeaderMap) -> Option<Parent> {
    let mut values = headers.get_all(TRACEPARENT).iter();
    let value = values.next()?;
    // Two traceparent headers: which one is meant is unknown.
    if values.next().is_some() {
        return None;
    }
    let (trace_id, span_id, flags) = parse(value.to_str().ok()?)?;
    let state = headers
        .get(TRACESTATE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<TraceState>().ok())
        .unwrap_or_default();
    Some(Parent {
        trace_id,
        span_id,
        flags,
        state,
    })
}

/// `version-traceid-parentid-flags`, lower-case hex. A version above 00 may
/// append fields (the spec's forward compatibility); 00 may not.
fn parse(text: &str) -> Option<(TraceId, SpanId, TraceFlags)> {
    let mut fields = text.trim().split('-');
    let version = fields.next()?;
    let trace = fields.next()?;
    let span = fields.next()?;
    let flags = fields.next()?;
    let more = fields.next().is_some();
    let hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if !hex(version, 2) || version == "ff" || (version == "00" && more) {
        return None;
    }
    if !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
        return None;
    }
    let flags = u8::from_str_radix(flags, 16).ok()?;
    Some((trace_id, span_id, TraceFlags::new(flags & 1)))
}

/// Sets the upstream request's trace context: probity's call span is the
/// upstream's parent; the caller's `tracestate` goes on unchanged.
pub(crate) fn inject(headers: &mut HeaderMap, trace_id: TraceId, span_id: SpanId, state: &str) {
    let line = format!("00-{trace_id}-{span_id}-01");
    if let Ok(value) = HeaderValue::from_str(&line) {
        headers.insert(TRACEPARENT, value);
    }
    headers.remove(TRACESTATE);
    if !state.is_empty() {
        if let Ok(value) = HeaderValue::from_str(state) {
            headers.insert(TRACESTATE, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(traceparent: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(TRACEPARENT, traceparent.parse().unwrap());
        headers
    }

    #[test]
    fn the_spec_example_is_read() {
        let parent = extract(&headers(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ))
        .unwrap();
        assert_eq!(
            parent.trace_id,
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap()
        );
        assert_eq!(
            parent.span_id,
            SpanId::from_hex("00f067aa0ba902b7").unwrap()
        );
        assert!(parent.flags.is_sampled());
    }

    #[test]
    fn malformed_lines_start_a_new_trace() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
            "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(extract(&headers(bad)), None, "{bad:?}");
        }
    }

    #[test]
    fn a_later_version_may_append_fields() {
        let line = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-later";
        let parent = extract(&headers(line)).unwrap();
        assert!(!parent.flags.is_sampled());
    }

    #[test]
    fn the_upstream_gets_probitys_span_as_parent() {
        let mut headers = headers("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        let trace = TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap();
        let span = SpanId::from_hex("1111111111111111").unwrap();
        inject(&mut headers, trace, span, "congo=t61rcWkgMzE");
        assert_eq!(
            headers[TRACEPARENT],
            "00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01"
        );
        assert_eq!(headers[TRACESTATE], "congo=t61rcWkgMzE");
    }
}
