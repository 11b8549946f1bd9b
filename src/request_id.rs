//! The request id: the client's `x-request-id` when it sent a usable one,
//! otherwise a fresh one. It ties the client's response, the upstream call,
//! the log line and the capture store together.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use http::{HeaderMap, HeaderValue};

use crate::forward::X_REQUEST_ID;

/// Longest client id kept; longer ones are replaced rather than cut, since a
/// cut id would no longer match the client's records.
const MAX_LEN: usize = 128;

pub(crate) fn request_id(headers: &HeaderMap) -> HeaderValue {
    match headers.get(X_REQUEST_ID) {
        Some(id) if usable(id) => id.clone(),
        _ => generate(),
    }
}

/// Printable ASCII without spaces: safe in a log line and a header.
fn usable(id: &HeaderValue) -> bool {
    let bytes = id.as_bytes();
    !bytes.is_empty() && bytes.len() <= MAX_LEN && bytes.iter().all(|b| b.is_ascii_graphic())
}

/// 32 hex digits: two SipHash outputs under per-process random keys over a
/// counter, so ids are unique within a process and unguessable across them.
fn generate() -> HeaderValue {
    static KEYS: OnceLock<RandomState> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let keys = KEYS.get_or_init(RandomState::new);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let half = |salt: u64| {
        let mut hasher = keys.build_hasher();
        hasher.write_u64(n);
        hasher.write_u64(salt);
        hasher.finish()
    };
    // Written into the one buffer the value then owns: one allocation.
    let mut text = bytes::BytesMut::with_capacity(32);
    let _ = std::fmt::Write::write_fmt(&mut text, format_args!("{:016x}{:016x}", half(0), half(1)));
    HeaderValue::from_maybe_shared(text.freeze()).unwrap_or_else(|_| HeaderValue::from_static("-"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_a_usable_client_id_and_replaces_others() {
        let mut headers = HeaderMap::new();
        headers.insert(X_REQUEST_ID, HeaderValue::from_static("client-42"));
        assert_eq!(request_id(&headers), "client-42");
        headers.insert(X_REQUEST_ID, HeaderValue::from_static("has space"));
        assert_ne!(request_id(&headers), "has space");
        headers.insert(
            X_REQUEST_ID,
            HeaderValue::try_from("x".repeat(129)).unwrap(),
        );
        assert_eq!(request_id(&headers).len(), 32);
    }

    #[test]
    fn generated_ids_are_distinct_hex() {
        let a = request_id(&HeaderMap::new());
        let b = request_id(&HeaderMap::new());
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(a.to_str().unwrap().chars().all(|c| c.is_ascii_hexdigit()));
    }
}
