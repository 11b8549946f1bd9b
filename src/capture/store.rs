//! The store's layout, through `object_store` (one interface for a
//! directory, memory and buckets):
//! `{prefix}/dt=YYYY-MM-DD/hour=HH/{instance}/{name}.json` and `.body`.
//!
//! The body is written before the metadata, and each object is written to a
//! temporary name then renamed (`object_store`'s local backend does so; a
//! bucket's put is atomic), so a listed `.json` always has its whole `.body`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures_util::StreamExt;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::{Path, PathPart};
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt, PutPayload};

use super::{parse_time, rfc3339};
use crate::config::Location;

/// The store could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("capture.store {path}: {source}")]
pub(crate) struct OpenError {
    path: String,
    source: std::io::Error,
}

/// One capture's objects: its metadata and its body, or (a chunked
/// exchange) one body per chunk, `{name}.chunk-{n}.body`.
#[derive(Debug, Clone)]
pub(crate) struct Objects {
    pub(crate) json: Path,
    pub(crate) body: Path,
    pub(crate) chunks: Vec<Path>,
}

/// A capture found in the store by a scan.
#[derive(Debug)]
pub(crate) struct Found {
    pub(crate) name: Box<str>,
    pub(crate) time: SystemTime,
    pub(crate) bytes: u64,
    pub(crate) objects: Objects,
}

/// A capture store behind `object_store`, and the prefix its layout starts at.
pub(crate) struct Store {
    objects: Arc<dyn ObjectStore>,
    prefix: Path,
    /// A bucket: shared by a fleet, bounded by its lifecycle rule.
    bucket: bool,
}

/// Captures hold model outputs verbatim: every file and folder probity
/// creates from now on is its user's alone (files 0600, folders 0700),
/// whatever umask it was started with. `object_store` creates the files,
/// so the mask is the one place to say so; probity writes nothing else.
fn owner_only() {
    // SAFETY: `umask` only sets the process's file mode creation mask.
    #[cfg(unix)]
    unsafe {
        libc::umask(0o077);
    }
}

/// The store's own folder, made owner-only if it was there before (a
/// folder created by an older probity, or by hand with a wider mode).
fn restrict(dir: &std::path::Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir).map(|m| m.permissions().mode() & 0o777);
        if mode.is_ok_and(|mode| mode & 0o077 != 0) {
            let owner_only = std::fs::Permissions::from_mode(0o700);
            if let Err(err) = std::fs::set_permissions(dir, owner_only) {
                tracing::warn!(error = %err, store = %dir.display(), "the capture store's folder is readable by others, and could not be made owner-only");
            }
        }
    }
}

impl Store {
    /// Opens the configured store. A directory that cannot be created now
    /// is not fatal: its writes fail, are counted, and start to succeed
    /// once it can be (a volume mounted late, a permission fixed).
    pub(crate) fn open(location: &Location) -> Result<Self, OpenError> {
        let dir = match location {
            Location::Memory => return Ok(Self::memory()),
            Location::Bucket(url) => return Self::bucket(url),
            Location::Dir(dir) => dir,
        };
        owner_only();
        if let Err(err) = std::fs::create_dir_all(dir) {
            tracing::warn!(error = %err, store = %dir.display(), "capture store not writable: captures will be dropped until it is");
        }
        restrict(dir);
        let absolute = std::fs::canonicalize(dir)
            .or_else(|_| std::path::absolute(dir))
            .map_err(|source| OpenError {
                path: dir.display().to_string(),
                source,
            })?;
        let prefix = Path::from_absolute_path(&absolute).map_err(|err| OpenError {
            path: dir.display().to_string(),
            source: std::io::Error::other(err.to_string()),
        })?;
        Ok(Self {
            objects: Arc::new(LocalFileSystem::new()),
            prefix,
            bucket: false,
        })
    }

    /// A bucket, from its URL and the standard variables of its cloud
    /// (`AWS_ENDPOINT_URL`, `AWS_REGION`, keys…). Nothing is fetched yet: a
    /// bucket that is down makes writes fail, counted, not the start.
    fn bucket(url: &str) -> Result<Self, OpenError> {
        let failed = |err: String| OpenError {
            path: url.to_string(),
            source: std::io::Error::other(err),
        };
        let (_, rest) = url.split_once("://").unwrap_or(("", url));
        let prefix = rest.split_once('/').map_or("", |(_, prefix)| prefix);
        let prefix = Path::parse(prefix.trim_matches('/')).map_err(|e| failed(e.to_string()))?;
        let objects = super::buckets::open(url).map_err(failed)?;
        Ok(Self {
            objects,
            prefix,
            bucket: true,
        })
    }

    /// A store in memory.
    pub(crate) fn memory() -> Self {
        Self {
            objects: Arc::new(InMemory::new()),
            prefix: Path::default(),
            bucket: false,
        }
    }

    /// Whether this is a bucket: other instances write to it, and its
    /// lifecycle rule, not probity, deletes what it holds.
    pub(crate) fn is_bucket(&self) -> bool {
        self.bucket
    }

    /// Where a capture of `time` by `instance` named `name` (of `chunks`
    /// chunks, or 0) is stored.
    pub(crate) fn objects(
        &self,
        time: SystemTime,
        instance: &str,
        name: &str,
        chunks: usize,
    ) -> Objects {
        let stamp = rfc3339(time);
        let (day, hour) = (
            stamp.get(..10).unwrap_or(""),
            stamp.get(11..13).unwrap_or(""),
        );
        let dir = self
            .prefix
            .clone()
            .join(PathPart::from(format!("dt={day}")))
            .join(PathPart::from(format!("hour={hour}")))
            .join(PathPart::from(instance));
        Objects {
            json: dir.clone().join(PathPart::from(format!("{name}.json"))),
            body: dir.clone().join(PathPart::from(format!("{name}.body"))),
            chunks: (0..chunks)
                .map(|n| dir.clone().join(PathPart::from(chunk_file(name, n))))
                .collect(),
        }
    }

    /// Writes the body (or each chunk's), then the metadata that points at it.
    pub(crate) async fn put(
        &self,
        objects: &Objects,
        meta: Bytes,
        body: Bytes,
        chunks: Vec<Bytes>,
    ) -> object_store::Result<()> {
        if objects.chunks.is_empty() {
            self.objects
                .put(&objects.body, PutPayload::from_bytes(body))
                .await?;
        }
        for (path, chunk) in objects.chunks.iter().zip(chunks) {
            self.objects
                .put(path, PutPayload::from_bytes(chunk))
                .await?;
        }
        self.objects
            .put(&objects.json, PutPayload::from_bytes(meta))
            .await?;
        Ok(())
    }

    /// One object's bytes.
    pub(crate) async fn read(&self, path: &Path) -> object_store::Result<Bytes> {
        self.objects.get(path).await?.bytes().await
    }

    /// Removes a capture: the metadata first, so it is never listed without
    /// its body.
    pub(crate) async fn remove(&self, objects: &Objects) {
        let bodies = std::iter::once(&objects.body).chain(&objects.chunks);
        for path in std::iter::once(&objects.json).chain(bodies) {
            match self.objects.delete(path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(err) => tracing::warn!(error = %err, %path, "capture not removed"),
            }
        }
    }

    /// Every complete capture in the store: a `.json` in the layout with
    /// its `.body` beside it. Anything else (temporary files, a metadata
    /// object alone, other files) is left out.
    pub(crate) async fn scan(&self) -> object_store::Result<Vec<Found>> {
        let listed = self.objects.list(Some(&self.prefix));
        self.complete(listed).await
    }

    /// The complete captures of the partitions whose hour ends after
    /// `since`, walked newest first (`dt=`, then `hour=`): what a bucket's
    /// other writers added lately, without listing the whole bucket.
    pub(crate) async fn scan_since(&self, since: SystemTime) -> object_store::Result<Vec<Found>> {
        let mut found = Vec::new();
        for hour in self.partitions(since).await? {
            let listed = self.objects.list(Some(&hour));
            found.extend(self.complete(listed).await?);
        }
        Ok(found)
    }

    /// The `dt=…/hour=…` partitions whose hour ends after `since`, newest first.
    async fn partitions(&self, since: SystemTime) -> object_store::Result<Vec<Path>> {
        let mut out = Vec::new();
        for day in self.children(&self.prefix, "dt=").await? {
            let Some(day_start) = partition_start(day.filename().unwrap_or(""), "hour=00") else {
                continue;
            };
            if day_start + Duration::from_secs(86_400) <= since {
                break;
            }
            let day_name = day.filename().unwrap_or("").to_string();
            for hour in self.children(&day, "hour=").await? {
                let start = partition_start(&day_name, hour.filename().unwrap_or(""));
                match start {
                    Some(start) if start + Duration::from_secs(3600) > since => out.push(hour),
                    Some(_) => break,
                    None => {}
                }
            }
        }
        Ok(out)
    }

    /// The sub-folders of `parent` named `{tag}…`, the greatest name first.
    async fn children(&self, parent: &Path, tag: &str) -> object_store::Result<Vec<Path>> {
        let listed = self.objects.list_with_delimiter(Some(parent)).await?;
        let mut children: Vec<Path> = listed
            .common_prefixes
            .into_iter()
            .filter(|p| p.filename().is_some_and(|name| name.starts_with(tag)))
            .collect();
        children.sort_by(|a, b| b.cmp(a));
        Ok(children)
    }

    /// The complete captures of a listing.
    async fn complete(
        &self,
        mut listed: futures_util::stream::BoxStream<'static, object_store::Result<ObjectMeta>>,
    ) -> object_store::Result<Vec<Found>> {
        let mut jsons = Vec::new();
        let mut bodies: HashMap<Path, u64> = HashMap::new();
        while let Some(meta) = listed.next().await {
            let meta = meta?;
            match meta.location.extension() {
                Some("json") => jsons.push(meta),
                Some("body") => {
                    bodies.insert(meta.location, meta.size);
                }
                _ => {}
            }
        }
        let depth = self.prefix.parts().count();
        Ok(jsons
            .into_iter()
            .filter_map(|meta| found(&meta, depth, &bodies))
            .collect())
    }
}

/// A metadata object of the layout, with its body found beside it.
fn found(meta: &ObjectMeta, depth: usize, bodies: &HashMap<Path, u64>) -> Option<Found> {
    let parts: Vec<PathPart<'_>> = meta.location.parts().skip(depth).collect();
    let [day, hour, _instance, file] = parts.as_slice() else {
        return None;
    };
    let start = partition_start(day.as_ref(), hour.as_ref())?;
    let name = file.as_ref().strip_suffix(".json")?;
    let body_path = sibling(&meta.location, &format!("{name}.body"));
    // A chunked exchange's bodies: `.chunk-0.body` onwards, while they last.
    let chunks: Vec<(Path, u64)> = (0..)
        .map(|n| sibling(&meta.location, &chunk_file(name, n)))
        .map_while(|path| Some((path.clone(), *bodies.get(&path)?)))
        .collect();
    let (bytes, chunks) = match bodies.get(&body_path) {
        Some(bytes) => (*bytes, Vec::new()),
        None if !chunks.is_empty() => (chunks.iter().map(|(_, bytes)| bytes).sum(), chunks),
        None => return None,
    };
    let modified = UNIX_EPOCH
        + Duration::from_millis(u64::try_from(meta.last_modified.timestamp_millis()).ok()?);
    // The file's time is the capture's when it was written in its hour (or
    // the next: a write queued at :59); a file copied or planted later
    // takes its hour's start.
    let time = if modified >= start && modified < start + Duration::from_secs(7200) {
        modified
    } else {
        start
    };
    Some(Found {
        name: name.into(),
        time,
        bytes,
        objects: Objects {
            json: meta.location.clone(),
            body: body_path,
            chunks: chunks.into_iter().map(|(path, _)| path).collect(),
        },
    })
}

/// The body object of a chunked exchange's chunk `n` (from 0, input order).
fn chunk_file(name: &str, n: usize) -> String {
    format!("{name}.chunk-{n}.body")
}

/// `name` in the same directory as `path`.
fn sibling(path: &Path, name: &str) -> Path {
    let parts: Vec<PathPart<'_>> = path.parts().collect();
    let dir = parts.len().saturating_sub(1);
    Path::from_iter(parts.into_iter().take(dir)).join(PathPart::from(name))
}

/// The start of a `dt=YYYY-MM-DD` / `hour=HH` partition.
fn partition_start(day: &str, hour: &str) -> Option<SystemTime> {
    let day = day.strip_prefix("dt=")?;
    let hour = hour.strip_prefix("hour=")?;
    if day.len() != 10 || hour.len() != 2 {
        return None;
    }
    parse_time(&format!("{day}T{hour}:00:00Z"))
}

/// A path segment from any text: `[A-Za-z0-9._-]` kept, the rest `_`
/// (a request id or a host name never escapes its directory).
pub(crate) fn segment(text: &str) -> String {
    let mut out: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.starts_with('.') {
        out.insert(0, '_');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_and_segments() {
        let t = partition_start("dt=2026-12-01", "hour=22").unwrap();
        assert_eq!(rfc3339(t), "2026-12-01T22:00:00.000Z");
        assert!(partition_start("dt=2026-13-01", "hour=22").is_none());
        assert_eq!(segment("a/b..c"), "a_b..c");
        assert_eq!(segment("../x"), "_.._x");
        assert_eq!(segment(""), "_");
    }
}
