//! Writing captures off the request path: a bounded queue, a bounded number
//! of writes at once, each with a timeout; retention after each write and
//! on a timer. When the store is slow, full or down a capture is dropped,
//! counted and logged (once per interval): a request never waits for it.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{mpsc, watch, Notify, Semaphore};

use super::index::{Bounds, Index, Key};
use super::store::{Objects, Store};
use crate::telemetry;

/// One capture to write.
pub(crate) struct Job {
    pub(crate) key: Key,
    pub(crate) objects: Objects,
    pub(crate) meta: bytes::Bytes,
    pub(crate) body: bytes::Bytes,
}

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
pub(crate) struct Shared {
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
}

impl Shared {
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

    /// Applies retention; the evicted captures are removed from the store.
    pub(crate) async fn retain(&self) {
        let evicted = match self.index.lock() {
            Ok(mut index) => index.evict(self.bounds, SystemTime::now()),
            Err(_) => return,
        };
        for entry in evicted {
            // A capture still being written is removed by its writer.
            if entry.pending.is_none() {
                self.store.remove(&entry.objects).await;
            }
        }
    }
}

/// Writes what the queue holds, `concurrency` at a time, for the process's life.
pub(crate) async fn run(shared: Arc<Shared>, mut queue: mpsc::Receiver<Job>, concurrency: usize) {
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

async fn write(shared: &Shared, job: Job) {
    let started = Instant::now();
    let put = shared.store.put(&job.objects, job.meta, job.body);
    let failure = match tokio::time::timeout(shared.write_timeout, put).await {
        Ok(Ok(())) => None,
        Ok(Err(err)) => Some((DropReason::StoreError, err.to_string())),
        Err(_) => Some((DropReason::Timeout, "write timed out".to_string())),
    };
    telemetry::capture_written(failure.is_none(), started.elapsed());
    let kept = match shared.index.lock() {
        Ok(mut index) => {
            if failure.is_some() {
                index.remove(job.key);
                false
            } else {
                index.written(job.key)
            }
        }
        Err(_) => false,
    };
    match failure {
        Some((reason, detail)) => {
            shared.drops.dropped(reason, 1, &detail);
            // Half a capture (a body alone) is never listed; remove it.
            shared.store.remove(&job.objects).await;
        }
        // Evicted while it was being written.
        None if !kept => shared.store.remove(&job.objects).await,
        None => shared.retain().await,
    }
}

/// Indexes what the store holds, then applies `max_age` while no capture
/// comes to trigger it.
pub(crate) async fn index_then_age_out(shared: Arc<Shared>, store: String) {
    let started = Instant::now();
    match shared.store.scan().await {
        Ok(found) => {
            if let Ok(mut index) = shared.index.lock() {
                index.merge(found);
            }
        }
        Err(err) => {
            tracing::warn!(error = %err, store, "captures in the store could not be listed")
        }
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
