//! The index of the captures in the store, in memory: rebuilt at start-up
//! from one listing of the store, then kept by this process's writes and
//! evictions. It orders captures by time (listing newest first, retention
//! oldest first) and finds one by request id without walking the store.
//!
//! An entry holds its location and size, and, until its write completes,
//! the capture itself, so that a capture is readable the moment its
//! response is answered.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;

use super::store::{Found, Objects};
use super::Meta;

/// Orders entries by time; the counter breaks ties in arrival order.
pub(crate) type Key = (SystemTime, u64);

/// A capture not yet in the store: what the store will hold.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) meta: Meta,
    pub(crate) body: Bytes,
    /// A chunked exchange's bodies.
    pub(crate) chunks: Vec<Bytes>,
}

/// What filters need of a capture's metadata, once read.
#[derive(Debug, Clone)]
pub(crate) enum Summary {
    /// Not read yet (found by the start-up scan).
    Unread,
    /// Its route and outcome.
    Known { route: Arc<str>, outcome: Arc<str> },
    /// Its metadata is unreadable: never listed.
    Broken,
}

/// One capture.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) name: Box<str>,
    pub(crate) objects: Objects,
    /// The body's bytes, as counted by `max_bytes`.
    pub(crate) bytes: u64,
    pub(crate) pending: Option<Arc<Pending>>,
    pub(crate) summary: Summary,
}

/// The bounds retention keeps the store within.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    pub(crate) max_entries: usize,
    pub(crate) max_bytes: u64,
    pub(crate) max_age: Duration,
}

#[derive(Debug, Default)]
pub(crate) struct Index {
    by_time: BTreeMap<Key, Entry>,
    by_name: HashMap<Box<str>, Key>,
    bytes: u64,
    counter: u64,
}

impl Index {
    /// Adds what a scan found. A request id found twice (a client reused
    /// it, in another hour or by another instance) is the newest capture's;
    /// what lost is returned, for a store that deletes it.
    pub(crate) fn merge(&mut self, found: Vec<Found>) -> Vec<Entry> {
        let mut superseded = Vec::new();
        for found in found {
            let entry = Entry {
                name: found.name,
                objects: found.objects,
                bytes: found.bytes,
                pending: None,
                summary: Summary::Unread,
            };
            match self.by_name.get(&entry.name).copied() {
                None => {}
                Some(key)
                    if self
                        .by_time
                        .get(&key)
                        .is_some_and(|e| e.objects.json == entry.objects.json) =>
                {
                    continue
                }
                Some(key) if key.0 >= found.time => {
                    superseded.push(entry);
                    continue;
                }
                Some(_) => {}
            }
            superseded.extend(self.insert(found.time, entry).1);
        }
        superseded
    }

    /// Adds an entry; its key, and the entry of the same name it replaced.
    pub(crate) fn insert(&mut self, time: SystemTime, entry: Entry) -> (Key, Option<Entry>) {
        let replaced = match self.by_name.get(&entry.name).copied() {
            Some(old) => self.remove(old),
            None => None,
        };
        self.counter += 1;
        let key = (time, self.counter);
        self.bytes += entry.bytes;
        self.by_name.insert(entry.name.clone(), key);
        self.by_time.insert(key, entry);
        (key, replaced)
    }

    /// Whether `json` is the metadata object of the entry named `name`.
    pub(crate) fn holds(&self, name: &str, json: &object_store::path::Path) -> bool {
        self.by_name
            .get(name)
            .and_then(|key| self.by_time.get(key))
            .is_some_and(|entry| &entry.objects.json == json)
    }

    /// Removes an entry; what it was.
    pub(crate) fn remove(&mut self, key: Key) -> Option<Entry> {
        let entry = self.by_time.remove(&key)?;
        self.bytes = self.bytes.saturating_sub(entry.bytes);
        if self.by_name.get(&entry.name) == Some(&key) {
            self.by_name.remove(&entry.name);
        }
        Some(entry)
    }

    /// Marks an entry written: its capture is in the store now.
    pub(crate) fn written(&mut self, key: Key) -> bool {
        match self.by_time.get_mut(&key) {
            Some(entry) => {
                if let Some(pending) = entry.pending.take() {
                    entry.summary = Summary::Known {
                        route: pending.meta.route.as_str().into(),
                        outcome: pending.meta.outcome.as_str().into(),
                    };
                }
                true
            }
            None => false,
        }
    }

    pub(crate) fn summarize(&mut self, key: Key, summary: Summary) {
        if let Some(entry) = self.by_time.get_mut(&key) {
            entry.summary = summary;
        }
    }

    pub(crate) fn key_of(&self, name: &str) -> Option<Key> {
        self.by_name.get(name).copied()
    }

    pub(crate) fn get(&self, key: Key) -> Option<&Entry> {
        self.by_time.get(&key)
    }

    /// Up to `n` entries older than `before` (all, when `None`), newest first.
    pub(crate) fn older(&self, before: Option<Key>, n: usize) -> Vec<(Key, Entry)> {
        let range = match before {
            Some(key) => self.by_time.range(..key),
            None => self.by_time.range(..),
        };
        range
            .rev()
            .take(n)
            .map(|(key, entry)| (*key, entry.clone()))
            .collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.by_time.len()
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Removes the oldest entries until the bounds hold; what was removed
    /// (the store still holds it).
    pub(crate) fn evict(&mut self, bounds: Bounds, now: SystemTime) -> Vec<Entry> {
        let oldest_kept = now.checked_sub(bounds.max_age);
        let mut evicted = Vec::new();
        while let Some((&key, _)) = self.by_time.first_key_value() {
            let over = self.by_time.len() > bounds.max_entries
                || self.bytes > bounds.max_bytes
                || oldest_kept.is_some_and(|oldest| key.0 < oldest);
            if !over {
                break;
            }
            if let Some(entry) = self.remove(key) {
                evicted.push(entry);
            }
        }
        evicted
    }
}
