//! Writing captures off the request path: a bounded queue, a bounded number
//! of writes at once, each with a timeout; retention after each write and
//! on a timer. When the store is slow, full or down a capture is dropped,
//! counted and logged (once per interval): a request never waits for it.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{mpsc, watch, Notify, Semaphore};

use super::index::{Bounds, Entry, Index, Key, Pending};
use super::store::{Found, Objects, Store};
use super::{sha256_hex, Meta};
use crate::telemetry;

/// One capture to write: its metadata is serialized, and its body hashed,
/// here, off the request path.
pub(crate) struct Job {
    pub(crate) key: Key,
    pub(crate) name: Box<str>,
    pub(crate) objects: Objects,
    /// The capture, as the index holds it until it is written.
    pub(crate) pending: Arc<Pending>,
}

/// How far before the last look at a bucket the next one starts: a capture
/// is stamped when queued and lands up to a write later, and the clocks of
/// a fleet differ a little.
const REFRESH_OVERLAP: Duration = Duration::from_secs(300);

/// The longest a listing or a lookup waits on a bucket for what other
/// instances wrote: a stalled bucket then costs the admin page (which
/// refreshes every few seconds) this, not the bucket client's 30 s.
const REFRESH_WAIT: Duration = Duration::from_secs(3);

/// Why a capture was dropped: the `reason` label.
#[derive(Debug, Clone, Copy)]
pub(crate) enum DropReason {
    /// The queue was full: the store is slower than the captures come.
    QueueFull,
    /// The store refused the write.
    StoreError,
    /// The write took longer than `write_timeout_ms`.
    Timeout,
    /// Still queued when the drain ended, or captured after it began.
    Shutdown,
}

impl DropReason {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::QueueFull => "queue_full",
            Self::StoreError => "store_error",
            Self::Timeout => "timeout",
            Self::Shutdown => "shutdown",
        }
    }
}

/// Counts drops; logs them at most once per interval.
#[derive(Default)]
pub(crate) struct Drops {
    unlogged: AtomicU64,
    last_log: Mutex<Option<Instant>>,
}

/// The least time between two log lines about dropped captures.
const DROP_LOG_INTERVAL: Duration = Duration::from_secs(10);

impl Drops {
    pub(crate) fn dropped(&self, reason: DropReason, n: u64, detail: &str) {
        if n == 0 {
            return;
        }
        telemetry::capture_dropped(reason.label(), n);
        let unlogged = self.unlogged.fetch_add(n, Ordering::Relaxed) + n;
        let Ok(mut last) = self.last_log.lock() else {
            return;
        };
        if last.is_some_and(|at| at.elapsed() < DROP_LOG_INTERVAL) {
            return;
        }
        *last = Some(Instant::now());
        self.unlogged.fetch_sub(unlogged, Ordering::Relaxed);
        tracing::warn!(
            dropped = unlogged,
            reason = reason.label(),
            detail,
            "captures dropped (the requests were answered as usual)"
        );
    }
}

/// What the writers share with the handle that queues captures.
pub(crate) struct StoreState {
    pub(crate) store: Store,
    pub(crate) index: Mutex<Index>,
    /// Whether the start-up scan is in the index.
    pub(crate) indexed: watch::Sender<bool>,
    pub(crate) bounds: Bounds,
    pub(crate) drops: Drops,
    /// Queued or being written.
    pub(crate) outstanding: AtomicUsize,
    pub(crate) settled: Notify,
    pub(crate) closed: AtomicBool,
    pub(crate) write_timeout: Duration,
    /// When a bucket was last looked at for other instances' captures.
    pub(crate) refreshed: Mutex<SystemTime>,
}

impl StoreState {
    fn settle(&self) {
        if self.outstanding.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.settled.notify_waiters();
        }
    }

    /// Waits for the start-up scan (reads before it would miss captures).
    pub(crate) async fn until_indexed(&self) {
        let mut indexed = self.indexed.subscribe();
        let _ = indexed.wait_for(|done| *done).await;
    }

    /// Applies retention: the evicted captures are removed from a
    /// directory; a bucket's are only forgotten by the index (its
    /// lifecycle rule deletes them, and they may be another instance's).
    pub(crate) async fn retain(&self) {
        let evicted = match self.index.lock() {
            Ok(mut index) => index.evict(self.bounds, SystemTime::now()),
            Err(_) => return,
        };
        self.remove(&evicted).await;
    }

    /// Removes captures the index dropped, in the background.
    pub(crate) fn forget(self: &Arc<Self>, entries: Vec<Entry>) {
        if self.store.is_bucket() || entries.iter().all(|e| e.pending.is_some()) {
            return;
        }
        let shared = self.clone();
        tokio::spawn(async move { shared.remove(&entries).await });
    }

    async fn remove(&self, entries: &[Entry]) {
        if self.store.is_bucket() {
            return;
        }
        // A capture still being written is removed by its writer.
        for entry in entries.iter().filter(|e| e.pending.is_none()) {
            self.store.remove(&entry.objects).await;
        }
    }

    /// The index entry of a capture name.
    pub(crate) fn entry(&self, name: &str) -> Option<Entry> {
        let index = self.index.lock().ok()?;
        let key = index.key_of(name)?;
        index.get(key).cloned()
    }

    /// Merges what a scan found; removes what it superseded.
    async fn merge(&self, found: Vec<Found>) {
        let superseded = match self.index.lock() {
            Ok(mut index) => index.merge(found),
            Err(_) => return,
        };
        self.remove(&superseded).await;
    }

    /// On a bucket, adds to the index what other instances wrote since the
    /// last look (the partitions of the last hours, newest first).
    pub(crate) async fn refresh(&self) -> Result<(), String> {
        if !self.store.is_bucket() {
            return Ok(());
        }
        let started = SystemTime::now();
        let Some(since) = self
            .refreshed
            .lock()
            .ok()
            .and_then(|at| at.checked_sub(REFRESH_OVERLAP + self.write_timeout))
        else {
            return Ok(());
        };
        let scanned = tokio::time::timeout(REFRESH_WAIT, self.store.scan_since(since)).await;
        let Ok(scanned) = scanned else {
            tracing::warn!(
                waited_ms = REFRESH_WAIT.as_millis(),
                "capture bucket slow to list: the listing shows what was indexed"
            );
            return Err(format!("the bucket was not listed within {REFRESH_WAIT:?}"));
        };
        match scanned {
            Ok(found) => {
                self.merge(found).await;
                if let Ok(mut at) = self.refreshed.lock() {
                    *at = (*at).max(started);
                }
                self.retain().await;
                Ok(())
            }
            Err(err) => {
                tracing::warn!(error = %err, "capture bucket not listed: the listing shows what was indexed");
                Err(err.to_string())
            }
        }
    }
}

/// Writes what the queue holds, `concurrency` at a time, for the process's life.
pub(crate) async fn run(
    shared: Arc<StoreState>,
    mut queue: mpsc::Receiver<Job>,
    concurrency: usize,
) {
    let permits = Arc::new(Semaphore::new(concurrency.max(1)));
    while let Some(job) = queue.recv().await {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            write(&shared, job).await;
            drop(permit);
            shared.settle();
        });
    }
}

async fn write(shared: &StoreState, job: Job) {
    let started = Instant::now();
    let pending = &job.pending;
    let meta = match serde_json::to_vec(&hashed(pending)) {
        Ok(bytes) => bytes::Bytes::from(bytes),
        Err(err) => {
            shared.index.lock().map(|mut i| i.remove(job.key)).ok();
            shared
                .drops
                .dropped(DropReason::StoreError, 1, &err.to_string());
            return;
        }
    };
    let put = shared.store.put(
        &job.objects,
        meta,
        pending.body.clone(),
        pending.chunks.clone(),
    );
    let failure = match tokio::time::timeout(shared.write_timeout, put).await {
        Ok(Ok(())) => None,
        Ok(Err(err)) => Some((DropReason::StoreError, err.to_string())),
        Err(_) => Some((DropReason::Timeout, "write timed out".to_string())),
    };
    telemetry::capture_written(failure.is_none(), started.elapsed());
    let (kept, rewritten) = match shared.index.lock() {
        Ok(mut index) => {
            let kept = if failure.is_some() {
                index.remove(job.key);
                false
            } else {
                index.written(job.key)
            };
            // A reused request id queued again in the same hour: the same
            // objects are the newer capture's now.
            (kept, index.holds(&job.name, &job.objects.json))
        }
        Err(_) => (false, false),
    };
    match failure {
        Some((reason, detail)) => {
            shared.drops.dropped(reason, 1, &detail);
            // Half a capture (a body alone) is never listed; remove it.
            if !rewritten {
                shared.store.remove(&job.objects).await;
            }
        }
        // Evicted (or superseded) while it was being written.
        None if !kept && !rewritten && !shared.store.is_bucket() => {
            shared.store.remove(&job.objects).await
        }
        None => shared.retain().await,
    }
}

/// A capture's metadata with its body's SHA-256 (or each chunk's).
fn hashed(pending: &Pending) -> Meta {
    let mut meta = pending.meta.clone();
    if meta.body_captured {
        if meta.chunks.is_empty() {
            meta.body_sha256 = Some(sha256_hex(&pending.body));
        }
        for (chunk, body) in meta.chunks.iter_mut().zip(&pending.chunks) {
            chunk.body_sha256 = Some(sha256_hex(body));
        }
    }
    meta
}

/// Adds what the store holds to the index; false when it could not be
/// listed (a bucket down at start).
async fn index_what_is_stored(shared: &StoreState, store: &str) -> bool {
    let scanned = if shared.store.is_bucket() {
        // Only the partitions within max_age: a fleet's bucket is large.
        let since = SystemTime::now()
            .checked_sub(shared.bounds.max_age)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        shared.store.scan_since(since).await
    } else {
        shared.store.scan().await
    };
    match scanned {
        Ok(found) => {
            shared.merge(found).await;
            true
        }
        Err(err) => {
            tracing::warn!(
                error = %err,
                store,
                "captures in the store could not be listed: trying again; until then \
                 the listing and lookups miss what was captured before this start"
            );
            false
        }
    }
}

/// Lists the store again, 1 s, 2 s, 4 s… apart (a minute at most), until
/// it answers: a store down when probity starts must not hide, until the
/// next start, everything captured before it.
async fn index_once_listed(shared: Arc<StoreState>, store: String) {
    let mut wait = Duration::from_secs(1);
    loop {
        tokio::time::sleep(wait).await;
        if index_what_is_stored(&shared, &store).await {
            let captures = shared.index.lock().map_or(0, |index| index.len());
            tracing::info!(store, captures, "capture store indexed once it answered");
            return;
        }
        wait = (wait * 2).min(Duration::from_secs(60));
    }
}

/// Indexes what the store holds, then applies `max_age` while no capture
/// comes to trigger it.
pub(crate) async fn index_then_age_out(shared: Arc<StoreState>, store: String) {
    let started = Instant::now();
    if shared.store.is_bucket() {
        tracing::info!(
            store,
            "captures in a bucket are deleted by its lifecycle rule, never by probity: \
             max_entries, max_bytes and max_age bound only what this instance indexes"
        );
    }
    if !index_what_is_stored(&shared, &store).await {
        tokio::spawn(index_once_listed(shared.clone(), store.clone()));
    }
    let (captures, bytes) = match shared.index.lock() {
        Ok(index) => (index.len(), index.bytes()),
        Err(_) => (0, 0),
    };
    tracing::info!(
        store,
        captures,
        bytes,
        index_ms = started.elapsed().as_millis() as u64,
        "capture store indexed"
    );
    shared.indexed.send_replace(true);
    let every = (shared.bounds.max_age / 10).clamp(Duration::from_secs(1), Duration::from_secs(60));
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        shared.retain().await;
    }
}
