//! The capture store: the verbatim upstream response (status, headers, body)
//! of every exchange probity rewrote or rejected, so that nothing it changed
//! is lost. Bounded in entries and bytes, oldest evicted first, in memory.
//!
//! Only rewrites and rejections are captured, so a valid response never
//! touches the store. The body is the `Bytes` already read from the upstream:
//! capturing it costs a reference count, not a copy.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderMap, StatusCode};

use crate::config::CaptureConfig;

/// Why a response was captured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Malformed figures were nulled; these are the pointers.
    Normalized(Vec<String>),
    /// A payload invariant was broken.
    Rejected(&'static str),
    /// A stream ended by an upstream fault (its `kind`).
    Cut(&'static str),
    /// The model's answer broke its output contract, for these reasons.
    OutputInvalid(Vec<&'static str>),
    /// A chunked batch, stitched; these pointers became `null`. The body is
    /// every chunk's verbatim answer, as a JSON list.
    Stitched(Vec<String>),
}

/// One captured exchange.
#[derive(Debug)]
pub(crate) struct Capture {
    pub(crate) request_id: String,
    pub(crate) time: SystemTime,
    pub(crate) route: Arc<str>,
    /// The path sent upstream.
    pub(crate) endpoint: String,
    pub(crate) outcome: Outcome,
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    /// `None` when the body alone was over `max_bytes`.
    pub(crate) body: Option<Bytes>,
    pub(crate) body_bytes: usize,
}

pub(crate) struct CaptureStore {
    config: CaptureConfig,
    entries: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    list: VecDeque<Arc<Capture>>,
    bytes: u64,
}

impl CaptureStore {
    pub(crate) fn new(config: CaptureConfig) -> Self {
        Self {
            config,
            entries: Mutex::new(Entries::default()),
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.config.enabled && self.config.max_entries > 0
    }

    /// Keeps a capture, evicting the oldest to stay within bounds.
    pub(crate) fn keep(&self, mut capture: Capture) {
        if !self.enabled() {
            return;
        }
        let size = capture.body_bytes as u64;
        if size > self.config.max_bytes {
            capture.body = None;
        }
        let kept = capture.body.as_ref().map_or(0, |b| b.len() as u64);
        let Ok(mut entries) = self.entries.lock() else {
            return;
        };
        while !entries.list.is_empty()
            && (entries.list.len() as u64 >= self.config.max_entries
                || entries.bytes + kept > self.config.max_bytes)
        {
            if let Some(old) = entries.list.pop_front() {
                entries.bytes -= old.body.as_ref().map_or(0, |b| b.len() as u64);
            }
        }
        entries.bytes += kept;
        entries.list.push_back(Arc::new(capture));
    }

    /// Every capture, the newest first.
    pub(crate) fn list(&self) -> Vec<Arc<Capture>> {
        match self.entries.lock() {
            Ok(entries) => entries.list.iter().rev().cloned().collect(),
            Err(_) => Vec::new(),
        }
    }

    /// The newest capture of a request id.
    pub(crate) fn get(&self, request_id: &str) -> Option<Arc<Capture>> {
        let entries = self.entries.lock().ok()?;
        entries
            .list
            .iter()
            .rev()
            .find(|c| c.request_id == request_id)
            .cloned()
    }
}

/// RFC 3339 in UTC with milliseconds, e.g. `2026-11-29T22:45:03.120Z`.
pub(crate) fn rfc3339(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn capture(id: &str, body: &'static [u8]) -> Capture {
        Capture {
            request_id: id.into(),
            time: UNIX_EPOCH,
            route: "r".into(),
            endpoint: "/v1/embeddings".into(),
            outcome: Outcome::Rejected("invalid_json"),
            status: StatusCode::OK,
            headers: HeaderMap::new(),
            body: Some(Bytes::from_static(body)),
            body_bytes: body.len(),
        }
    }

    #[test]
    fn keeps_the_newest_within_entries_and_bytes() {
        let store = CaptureStore::new(CaptureConfig {
            enabled: true,
            max_entries: 2,
            max_bytes: 10,
        });
        store.keep(capture("a", b"1234"));
        store.keep(capture("b", b"1234"));
        store.keep(capture("c", b"1234"));
        let ids: Vec<String> = store.list().iter().map(|c| c.request_id.clone()).collect();
        assert_eq!(ids, ["c", "b"]);
        store.keep(capture("d", b"123456789"));
        let ids: Vec<String> = store.list().iter().map(|c| c.request_id.clone()).collect();
        assert_eq!(ids, ["d"], "bytes bound evicts the oldest first");
        store.keep(capture("big", b"12345678901"));
        let big = store.get("big").unwrap();
        assert!(
            big.body.is_none(),
            "a body over max_bytes is listed, not kept"
        );
        assert_eq!(big.body_bytes, 11);
        assert!(store.get("d").is_some());
    }

    #[test]
    fn a_disabled_store_keeps_nothing() {
        let store = CaptureStore::new(CaptureConfig {
            enabled: false,
            ..CaptureConfig::default()
        });
        store.keep(capture("a", b"x"));
        assert!(store.list().is_empty());
    }

    #[test]
    fn times_are_rfc3339() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_796_165_103_120);
        assert_eq!(rfc3339(t), "2026-12-01T22:45:03.120Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000Z");
    }
}
