//! Captures: the verbatim upstream response (status, headers, body) of
//! every exchange probity rewrote, rejected or was asked to keep, in a store
//! that outlives the process (a directory) or in memory.
//!
//! [`Captures::keep`] is all the request path does: it queues the capture
//! (the body is the `Bytes` already read: a reference count, not a copy)
//! and indexes it, readable at once; writers put it in the store later.
//! Layout and reads: `store` (and `buckets`, the cloud backends); the
//! index: `index`; the queue, the writers and retention: `writer`.

mod buckets;
mod index;
mod store;
mod writer;

use crate::config::Location;
pub(crate) use store::OpenError;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch, Notify};

use crate::config::{CaptureConfig, CaptureMode, CapturePolicy};
use index::{Bounds, Entry, Index, Key, Pending, Summary};
use probity_judge::outcome::Outcome;
use store::Store;
use writer::{DropReason, Drops, Job};

/// Whether an exchange that came to `outcome` is captured, by its route's
/// policy: anything but a pass, and a sample of passes under `capture =
/// "all"`; `request_id` draws the sample.
pub(crate) fn chosen(policy: CapturePolicy, outcome: Outcome, request_id: &[u8]) -> bool {
    match (policy.mode, outcome) {
        (CaptureMode::Off, _) => false,
        (CaptureMode::Anomalies, Outcome::Passed) => false,
        (CaptureMode::All, Outcome::Passed) => sampled(policy.sample, request_id),
        (_, _) => true,
    }
}

/// Whether a valid exchange falls in a sample of this share: a hash of its
/// request id, keyed per process, is uniform enough and needs no generator.
fn sampled(share: f64, request_id: &[u8]) -> bool {
    use std::hash::{BuildHasher, Hasher};
    if share >= 1.0 {
        return true;
    }
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write(request_id);
    (hasher.finish() as f64 / u64::MAX as f64) < share
}

/// One captured exchange.
#[derive(Debug)]
pub(crate) struct Capture {
    pub(crate) request_id: String,
    pub(crate) time: SystemTime,
    pub(crate) route: Arc<str>,
    /// The path sent upstream.
    pub(crate) endpoint: String,
    pub(crate) dialect: &'static str,
    pub(crate) outcome: Outcome,
    /// What became `null`, whatever the outcome (a rejected stream may
    /// have had figures nulled before it broke).
    pub(crate) pointers: Vec<String>,
    /// The relations between figures that broke (their figures are among
    /// the pointers), by name.
    pub(crate) contradicted: Vec<&'static str>,
    /// The broken invariant (rejected), or the fault that cut the stream.
    pub(crate) invariant: Option<&'static str>,
    /// The reasons the answer was invalid (none when it was valid).
    pub(crate) reasons: Vec<probity_judge::contract::Reason>,
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    /// The whole body's size; of a chunked exchange, its chunks' total.
    pub(crate) body_bytes: usize,
    /// A chunked exchange's answers, in input order (then `body` is empty).
    pub(crate) chunks: Vec<ChunkAnswer>,
}

/// One chunk's verbatim answer.
#[derive(Debug)]
pub(crate) struct ChunkAnswer {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

/// A chunk of a chunked exchange, in its capture's metadata.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ChunkMeta {
    pub(crate) status: u16,
    /// Never a credential.
    pub(crate) headers: Vec<(String, String)>,
    /// Its body object, beside the metadata: `{request_id}.chunk-{n}.body`.
    pub(crate) body: String,
    pub(crate) body_bytes: u64,
    pub(crate) body_sha256: Option<String>,
}

/// A capture's metadata object: what `GET /captures` lists and what a query
/// over the store reads.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Meta {
    pub(crate) request_id: String,
    pub(crate) time: String,
    pub(crate) instance: String,
    pub(crate) route: String,
    pub(crate) endpoint: String,
    pub(crate) dialect: String,
    pub(crate) outcome: String,
    pub(crate) pointers: Vec<String>,
    /// The relations between figures that broke, by name (absent when
    /// none did).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) relations: Vec<String>,
    pub(crate) invariant: Option<String>,
    pub(crate) reasons: Vec<String>,
    pub(crate) upstream_status: u16,
    /// Name and value, in the upstream's order; never a credential.
    pub(crate) upstream_headers: Vec<(String, String)>,
    pub(crate) body_bytes: u64,
    pub(crate) body_captured: bool,
    /// Of the body object (hex); `null` when the body was not kept.
    pub(crate) body_sha256: Option<String>,
    /// The body object, beside this one; of a chunked exchange, none (its
    /// chunks' are in `chunks`).
    pub(crate) body: String,
    /// A chunked exchange's chunks, in input order; absent otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) chunks: Vec<ChunkMeta>,
}

/// Response headers that may carry a credential: never stored.
const CREDENTIAL_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
];

impl Meta {
    /// The metadata of a capture; its body's SHA-256 is left to the writer
    /// (off the request path).
    fn of(capture: &Capture, instance: &str, files: (String, Vec<String>), kept: bool) -> Self {
        let (body_file, chunk_files) = files;
        let chunks = capture
            .chunks
            .iter()
            .zip(chunk_files)
            .map(|(chunk, body)| ChunkMeta {
                status: chunk.status.as_u16(),
                headers: shown(&chunk.headers),
                body,
                body_bytes: chunk.body.len() as u64,
                body_sha256: None,
            })
            .collect();
        Self {
            request_id: capture.request_id.clone(),
            time: rfc3339(capture.time),
            instance: instance.to_string(),
            route: capture.route.to_string(),
            endpoint: capture.endpoint.clone(),
            dialect: capture.dialect.to_string(),
            outcome: capture.outcome.to_string(),
            pointers: capture.pointers.clone(),
            relations: capture.contradicted.iter().map(|r| r.to_string()).collect(),
            invariant: capture.invariant.map(str::to_string),
            reasons: capture.reasons.iter().map(|r| r.to_string()).collect(),
            upstream_status: capture.status.as_u16(),
            upstream_headers: shown(&capture.headers),
            body_bytes: capture.body_bytes as u64,
            body_captured: kept,
            body_sha256: None,
            body: body_file,
            chunks,
        }
    }
}

/// Headers as stored: name and value, in order, credentials left out.
fn shown(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(name, _)| !CREDENTIAL_HEADERS.contains(&name.as_str()))
        .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_string())))
        .collect()
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// A capture read back: its metadata and body (a chunked exchange's: its
/// chunks' bodies, in input order, and an empty `body`).
#[derive(Debug)]
pub(crate) struct Stored {
    pub(crate) meta: Meta,
    pub(crate) body: Bytes,
    pub(crate) chunks: Vec<Bytes>,
}

/// Filters and paging of a listing.
#[derive(Debug, Default)]
pub(crate) struct Query {
    pub(crate) route: Option<String>,
    pub(crate) outcome: Option<String>,
    /// Only captures at or after this time.
    pub(crate) since: Option<SystemTime>,
    /// Only captures older than this request id's.
    pub(crate) before: Option<String>,
    pub(crate) limit: usize,
}

/// A page of a listing, the newest first; `next` continues it.
#[derive(Debug)]
pub(crate) struct Page {
    pub(crate) captures: Vec<Meta>,
    pub(crate) next: Option<String>,
    /// Captures left out because the store did not give their metadata
    /// in time (a bucket down or stalled); they are listed again later.
    pub(crate) unread: usize,
}

/// The longest a listing waits for one capture's metadata; after one such
/// miss it reads no more from the store, so a stalled bucket costs a
/// listing this once, not the bucket client's 30 s per capture.
const META_WAIT: Duration = Duration::from_secs(2);

/// What a listing made of one indexed capture.
enum Listed {
    Shown(Box<Meta>),
    /// Filtered out, or broken (never listed again).
    Skipped,
    /// The store did not answer: left out of this page only.
    Unread,
}

/// A listing could not be answered.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ListError {
    /// `before` names no capture in the store.
    #[error("before={0}: no such capture (evicted, or never captured)")]
    UnknownCursor(String),
}

/// A capture could not be read back.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    /// The store failed or did not answer (a bucket down or stalled); the
    /// capture may well be there.
    #[error("the capture store did not give it back ({0}): retry, or check the store")]
    Store(String),
}

/// One object of a capture: `None` when the store no longer has it (a
/// lifecycle rule, an eviction), an error when the store failed.
async fn object(
    store: &Store,
    path: &object_store::path::Path,
) -> Result<Option<Bytes>, ReadError> {
    match store.read(path).await {
        Ok(bytes) => Ok(Some(bytes)),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(err) => Err(ReadError::Store(err.to_string())),
    }
}

/// The handle on the capture store that requests and the admin listener use.
pub(crate) struct Captures {
    enabled: bool,
    /// How much of a body is kept; a larger one is listed, not kept.
    max_body: u64,
    instance: String,
    shared: Arc<writer::StoreState>,
    queue: mpsc::Sender<Job>,
}

impl Captures {
    /// Opens the store, indexes what it holds and starts the writers; on a
    /// runtime.
    pub(crate) async fn start(config: &CaptureConfig) -> Result<Arc<Self>, OpenError> {
        let location = Location::parse(&config.store).unwrap_or(Location::Memory);
        let location = if config.enabled {
            location
        } else {
            Location::Memory
        };
        let store = Store::open(&location)?;
        let bounds = Bounds {
            max_entries: usize::try_from(config.max_entries).unwrap_or(usize::MAX),
            max_bytes: config.max_bytes(),
            max_age: crate::config::parse_age(&config.max_age).unwrap_or(Duration::MAX),
        };
        let (queue, jobs) = mpsc::channel(usize::try_from(config.queue).unwrap_or(1).max(1));
        let shared = Arc::new(writer::StoreState {
            store,
            index: Mutex::new(Index::default()),
            indexed: watch::channel(false).0,
            bounds,
            drops: Drops::default(),
            outstanding: AtomicUsize::new(0),
            settled: Notify::new(),
            closed: AtomicBool::new(false),
            write_timeout: Duration::from_millis(config.write_timeout_ms),
            refreshed: Mutex::new(SystemTime::now()),
        });
        let concurrency = usize::try_from(config.write_concurrency).unwrap_or(1);
        tokio::spawn(writer::run(shared.clone(), jobs, concurrency));
        // Indexed in the background: a large store never delays serving.
        tokio::spawn(writer::index_then_age_out(
            shared.clone(),
            config.store.clone(),
        ));
        Ok(Arc::new(Self {
            enabled: config.enabled,
            max_body: config.max_bytes(),
            instance: store::segment(&instance_name()),
            shared,
            queue,
        }))
    }

    /// How much of a stream's verbatim bytes to hold for its capture.
    pub(crate) fn retain_limit(&self) -> usize {
        if self.enabled {
            usize::try_from(self.max_body).unwrap_or(usize::MAX)
        } else {
            0
        }
    }

    /// Queues a capture for the store; whether it was taken (a full queue
    /// or a drain drops it, counted).
    pub(crate) fn keep(&self, capture: Capture) -> bool {
        if !self.enabled {
            return false;
        }
        if self.shared.closed.load(Ordering::SeqCst) {
            self.shared
                .drops
                .dropped(DropReason::Shutdown, 1, "draining");
            return false;
        }
        let kept = capture.body_bytes as u64 <= self.max_body;
        let name = store::segment(&capture.request_id);
        let objects =
            self.shared
                .store
                .objects(capture.time, &self.instance, &name, capture.chunks.len());
        let file =
            |path: &object_store::path::Path| path.filename().unwrap_or_default().to_string();
        let files = if objects.chunks.is_empty() {
            (file(&objects.body), Vec::new())
        } else {
            (String::new(), objects.chunks.iter().map(file).collect())
        };
        let meta = Meta::of(&capture, &self.instance, files, kept);
        let (body, chunks) = if kept {
            let chunks = capture.chunks.into_iter().map(|c| c.body).collect();
            (capture.body, chunks)
        } else {
            (Bytes::new(), Vec::new())
        };
        let Ok(permit) = self.queue.try_reserve() else {
            self.shared.drops.dropped(
                DropReason::QueueFull,
                1,
                "the store is slower than captures come",
            );
            return false;
        };
        // Shared by the index (readable at once) and the writer: no copy.
        let pending = Arc::new(Pending { meta, body, chunks });
        let entry = Entry {
            name: name.as_str().into(),
            objects: objects.clone(),
            bytes: pending.meta.body_bytes * u64::from(kept),
            pending: Some(pending.clone()),
            summary: Summary::Unread,
        };
        let Ok(mut index) = self.shared.index.lock() else {
            return false;
        };
        let (key, replaced) = index.insert(capture.time, entry);
        let mut evicted = index.evict(self.shared.bounds, SystemTime::now());
        drop(index);
        // A reused request id: the newest capture wins, the older one's
        // objects go (unless they are the same objects, rewritten now).
        evicted.extend(replaced.filter(|old| old.objects.json != objects.json));
        self.shared.outstanding.fetch_add(1, Ordering::SeqCst);
        permit.send(Job {
            key,
            name: name.into(),
            objects,
            pending,
        });
        self.shared.forget(evicted);
        true
    }

    /// One capture by request id, from memory while it is being written,
    /// else from the store; `None` when there is none (valid, evicted).
    pub(crate) async fn get(&self, request_id: &str) -> Result<Option<Stored>, ReadError> {
        self.shared.until_indexed().await;
        let name = store::segment(request_id);
        let entry = match self.shared.entry(&name) {
            Some(entry) => entry,
            // Another instance may have written it to a shared bucket.
            None if self.shared.store.is_bucket() => {
                // Not found in a bucket that could not be listed is not gone.
                self.shared.refresh().await.map_err(ReadError::Store)?;
                let Some(entry) = self.shared.entry(&name) else {
                    return Ok(None);
                };
                entry
            }
            None => return Ok(None),
        };
        if let Some(pending) = &entry.pending {
            return Ok(Some(Stored {
                meta: pending.meta.clone(),
                body: pending.body.clone(),
                chunks: pending.chunks.clone(),
            }));
        }
        let store = &self.shared.store;
        let Some(meta) = object(store, &entry.objects.json).await? else {
            return Ok(None);
        };
        // A torn or foreign metadata object is no capture of this id.
        let Ok(meta) = serde_json::from_slice::<Meta>(&meta) else {
            return Ok(None);
        };
        if meta.request_id != request_id {
            return Ok(None);
        }
        let mut chunks = Vec::with_capacity(entry.objects.chunks.len());
        for chunk in &entry.objects.chunks {
            let Some(bytes) = object(store, chunk).await? else {
                return Ok(None);
            };
            chunks.push(bytes);
        }
        let body = if chunks.is_empty() {
            let Some(body) = object(store, &entry.objects.body).await? else {
                return Ok(None);
            };
            body
        } else {
            Bytes::new()
        };
        Ok(Some(Stored { meta, body, chunks }))
    }

    /// A page of captures, the newest first.
    pub(crate) async fn list(&self, query: &Query) -> Result<Page, ListError> {
        self.shared.until_indexed().await;
        // A bucket that cannot be listed leaves the listing to the index.
        let _ = self.shared.refresh().await;
        let mut before = match &query.before {
            Some(id) => {
                let key = self
                    .shared
                    .index
                    .lock()
                    .ok()
                    .and_then(|index| index.key_of(&store::segment(id)));
                Some(key.ok_or_else(|| ListError::UnknownCursor(id.clone()))?)
            }
            None => None,
        };
        let mut page = Page {
            captures: Vec::new(),
            next: None,
            unread: 0,
        };
        loop {
            let batch = match self.shared.index.lock() {
                Ok(index) => index.older(before, 256),
                Err(_) => Vec::new(),
            };
            let Some(last) = batch.last().map(|(key, _)| *key) else {
                return Ok(page);
            };
            for (key, entry) in batch {
                if query.since.is_some_and(|since| key.0 < since) {
                    return Ok(page);
                }
                // After one miss the store is not asked again this page.
                let store_answers = page.unread == 0;
                match self.meta_if(key, &entry, query, store_answers).await {
                    Listed::Shown(meta) => page.captures.push(*meta),
                    Listed::Skipped => continue,
                    Listed::Unread => {
                        page.unread += 1;
                        continue;
                    }
                }
                if page.captures.len() >= query.limit {
                    page.next = page.captures.last().map(|m| m.request_id.clone());
                    return Ok(page);
                }
            }
            before = Some(last);
        }
    }

    /// An entry's metadata when it passes the query's filters; read from
    /// the store only while `store_answers`.
    async fn meta_if(&self, key: Key, entry: &Entry, query: &Query, store_answers: bool) -> Listed {
        let passes = |route: &str, outcome: &str| {
            query.route.as_deref().is_none_or(|r| r == route)
                && query.outcome.as_deref().is_none_or(|o| o == outcome)
        };
        if let Some(pending) = &entry.pending {
            let meta = &pending.meta;
            return match passes(&meta.route, &meta.outcome) {
                true => Listed::Shown(Box::new(meta.clone())),
                false => Listed::Skipped,
            };
        }
        match &entry.summary {
            Summary::Broken => return Listed::Skipped,
            Summary::Known { route, outcome } if !passes(route, outcome) => return Listed::Skipped,
            _ => {}
        }
        if !store_answers {
            return Listed::Unread;
        }
        let read = tokio::time::timeout(META_WAIT, self.shared.store.read(&entry.objects.json));
        // A store that fails or stalls says nothing of the capture: it is
        // not marked broken, only left out of this page.
        let bytes = match read.await {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "capture metadata not read: left out of the listing");
                return Listed::Unread;
            }
            Err(_) => {
                tracing::warn!(
                    waited_ms = META_WAIT.as_millis(),
                    "capture store slow to read: the listing leaves captures out"
                );
                return Listed::Unread;
            }
        };
        let meta = serde_json::from_slice::<Meta>(&bytes).ok();
        let summary = match &meta {
            Some(meta) => Summary::Known {
                route: meta.route.as_str().into(),
                outcome: meta.outcome.as_str().into(),
            },
            None => Summary::Broken,
        };
        if let Ok(mut index) = self.shared.index.lock() {
            index.summarize(key, summary);
        }
        match meta.filter(|meta| passes(&meta.route, &meta.outcome)) {
            Some(meta) => Listed::Shown(Box::new(meta)),
            None => Listed::Skipped,
        }
    }

    /// Stops taking captures and waits, until `deadline`, for the queued
    /// ones to be written; what is left is counted as dropped.
    pub(crate) async fn drain(&self, deadline: tokio::time::Instant) {
        self.shared.closed.store(true, Ordering::SeqCst);
        loop {
            let settled = self.shared.settled.notified();
            if self.shared.outstanding.load(Ordering::SeqCst) == 0 {
                return;
            }
            if tokio::time::timeout_at(deadline, settled).await.is_err() {
                break;
            }
        }
        let left = self.shared.outstanding.load(Ordering::SeqCst) as u64;
        tracing::warn!(
            captures = left,
            "drain timeout reached: captures not written"
        );
        self.shared
            .drops
            .dropped(DropReason::Shutdown, left, "drain timeout");
    }
}

/// This instance's name in the layout: `HOSTNAME` (a pod's name), else the
/// host name.
fn instance_name() -> String {
    if let Some(name) = std::env::var("HOSTNAME").ok().filter(|n| !n.is_empty()) {
        return name;
    }
    let mut buffer = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most
    // that many bytes.
    let got = unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) };
    let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
    match (got, buffer.get(..end)) {
        (0, Some(name)) if !name.is_empty() => String::from_utf8_lossy(name).into_owned(),
        _ => "probity".into(),
    }
}

/// `2026-12-01`, `2026-12-01T22:45:03Z` or `2026-12-01T22:45:03.120Z`
/// (a date is its midnight, UTC).
pub(crate) fn parse_time(text: &str) -> Option<SystemTime> {
    match text.len() {
        10 => humantime::parse_rfc3339(&format!("{text}T00:00:00Z")).ok(),
        _ => humantime::parse_rfc3339(text).ok(),
    }
}

/// RFC 3339 in UTC with milliseconds, e.g. `2026-11-29T22:45:03.120Z`.
pub(crate) fn rfc3339(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn times_are_rfc3339() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_796_165_103_120);
        assert_eq!(rfc3339(t), "2026-12-01T22:45:03.120Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000Z");
        assert_eq!(parse_time("2026-12-01T22:45:03.120Z"), Some(t));
        assert_eq!(parse_time("2000-02-29"), Some(leap));
        assert_eq!(parse_time("2000-02-29T"), None);
        assert_eq!(parse_time("2000-02-30"), None);
        assert_eq!(
            parse_time("2026-12-01T22:45:03Z"),
            Some(t - Duration::from_millis(120))
        );
        assert_eq!(parse_time("2026-12-01T24:00:00Z"), None);
    }

    #[test]
    fn a_body_hash_is_sha256() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
