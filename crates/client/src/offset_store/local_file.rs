//! [`LocalFileOffsetStore`]: broadcasting-mode offsets in one JSON file per group, replaced
//! atomically (write temp, fsync, rename, fsync directory).

use std::path::{Path, PathBuf};

use ferromq_protocol::remoting::body::misc::MessageQueue;
use serde::{Deserialize, Serialize};

use super::memory::{read_through, Counters, Table};
use super::{BoxFuture, OffsetStore, OffsetStoreStats, PersistReport, ReadMode};
use crate::error::OffsetError;

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct OffsetFile {
    group: String,
    offsets: Vec<FileEntry>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FileEntry {
    topic: String,
    broker_name: String,
    queue_id: i32,
    offset: u64,
}

/// Broadcasting-mode offsets in one JSON file per group under a directory.
#[derive(Debug)]
pub struct LocalFileOffsetStore {
    group: String,
    dir: PathBuf,
    path: PathBuf,
    table: Table,
    counters: Counters,
    /// Serialises file replacements so an older snapshot never overwrites a newer one.
    write_lock: tokio::sync::Mutex<()>,
}

impl LocalFileOffsetStore {
    /// Opens the store of `group` under `dir` (created if missing) and loads its file.
    ///
    /// # Errors
    /// [`OffsetError::Io`] when the directory or file cannot be read,
    /// [`OffsetError::Corrupt`] when the file cannot be parsed.
    pub fn open(dir: impl Into<PathBuf>, group: &str) -> Result<Self, OffsetError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|source| OffsetError::Io {
            path: dir.clone(),
            source,
        })?;
        let path = dir.join(format!("{}.offsets.json", file_stem(group)));
        let store = LocalFileOffsetStore {
            group: group.to_string(),
            dir,
            path,
            table: Table::default(),
            counters: Counters::default(),
            write_lock: tokio::sync::Mutex::new(()),
        };
        for (queue, offset) in read_file(&store.path)?.unwrap_or_default() {
            store.table.seed(&queue, offset);
        }
        Ok(store)
    }

    /// The file holding this group's offsets.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes every in-memory offset to the file; returns the snapshot written.
    async fn write_all(&self) -> Result<Vec<(MessageQueue, u64)>, OffsetError> {
        let _guard = self.write_lock.lock().await;
        let snapshot: Vec<(MessageQueue, u64)> = self
            .table
            .lock()
            .iter()
            .map(|(q, e)| (q.clone(), e.offset))
            .collect();
        let file = OffsetFile {
            group: self.group.clone(),
            offsets: snapshot
                .iter()
                .map(|(q, o)| FileEntry {
                    topic: q.topic.clone(),
                    broker_name: q.broker_name.clone(),
                    queue_id: q.queue_id,
                    offset: *o,
                })
                .collect(),
        };
        let bytes = serde_json::to_vec_pretty(&file).map_err(|e| OffsetError::Corrupt {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        let (dir, path) = (self.dir.clone(), self.path.clone());
        let result = tokio::task::spawn_blocking(move || write_atomically(&dir, &path, &bytes))
            .await
            .unwrap_or_else(|join| {
                Err(OffsetError::Io {
                    path: self.path.clone(),
                    source: std::io::Error::other(join.to_string()),
                })
            });
        self.counters.persist_outcome(&result);
        result?;
        for (queue, offset) in &snapshot {
            self.table.mark_persisted(queue, *offset);
        }
        Ok(snapshot)
    }
}

/// A file-name-safe form of a group name: `[A-Za-z0-9._-]` kept, anything else `%XX`.
fn file_stem(group: &str) -> String {
    let mut out = String::new();
    for b in group.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if out.starts_with('.') {
        out.replace_range(0..1, "%2E");
    }
    out
}

fn read_file(path: &Path) -> Result<Option<Vec<(MessageQueue, u64)>>, OffsetError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(OffsetError::Io {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let file: OffsetFile = serde_json::from_slice(&bytes).map_err(|e| OffsetError::Corrupt {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok(Some(
        file.offsets
            .into_iter()
            .map(|e| {
                (
                    MessageQueue {
                        topic: e.topic,
                        broker_name: e.broker_name,
                        queue_id: e.queue_id,
                    },
                    e.offset,
                )
            })
            .collect(),
    ))
}

/// Replaces `path` with `bytes`: write a temp file, fsync it, rename it over `path`, fsync
/// the directory.
fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), OffsetError> {
    use std::io::Write;
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| OffsetError::Io { path: p, source }
    };
    let tmp = path.with_extension("json.tmp");
    {
        let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(bytes).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
    }
    std::fs::rename(&tmp, path).map_err(io(path))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))?;
    Ok(())
}

impl OffsetStore for LocalFileOffsetStore {
    fn update(&self, queue: &MessageQueue, offset: u64) {
        self.table.update(queue, offset);
    }

    fn correct<'a>(
        &'a self,
        queue: &'a MessageQueue,
        offset: u64,
    ) -> BoxFuture<'a, Result<(), OffsetError>> {
        Box::pin(async move {
            self.table.update(queue, offset);
            self.write_all().await.map(|_| ())
        })
    }

    fn persist<'a>(&'a self, queue: &'a MessageQueue) -> BoxFuture<'a, Result<(), OffsetError>> {
        Box::pin(async move {
            match self.table.get(queue) {
                Some(e) if e.persisted != Some(e.offset) => self.write_all().await.map(|_| ()),
                _ => Ok(()),
            }
        })
    }

    fn persist_all(&self) -> BoxFuture<'_, Result<PersistReport, OffsetError>> {
        Box::pin(async move {
            let dirty = self
                .table
                .lock()
                .values()
                .filter(|e| e.persisted != Some(e.offset))
                .count();
            let total = self.table.lock().len();
            if dirty == 0 {
                return Ok(PersistReport {
                    unchanged: total,
                    ..PersistReport::default()
                });
            }
            let written = self.write_all().await?;
            Ok(PersistReport {
                persisted: written,
                unchanged: 0,
                failed: Vec::new(),
            })
        })
    }

    fn read<'a>(
        &'a self,
        queue: &'a MessageQueue,
        mode: ReadMode,
    ) -> BoxFuture<'a, Result<Option<u64>, OffsetError>> {
        let from_file = async move {
            let path = self.path.clone();
            let entries = tokio::task::spawn_blocking(move || read_file(&path))
                .await
                .unwrap_or_else(|join| {
                    Err(OffsetError::Io {
                        path: self.path.clone(),
                        source: std::io::Error::other(join.to_string()),
                    })
                })?;
            Ok(entries
                .unwrap_or_default()
                .into_iter()
                .find(|(q, _)| q == queue)
                .map(|(_, o)| o))
        };
        Box::pin(read_through(
            &self.table,
            &self.counters,
            queue,
            mode,
            from_file,
        ))
    }

    fn remove(&self, queue: &MessageQueue) {
        self.table.lock().remove(queue);
    }

    fn reports_acknowledged(&self) -> bool {
        true
    }

    fn acknowledged(&self, queue: &MessageQueue) -> Option<u64> {
        self.table.acknowledged(queue)
    }

    fn stats(&self) -> OffsetStoreStats {
        self.counters.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(id: i32) -> MessageQueue {
        MessageQueue {
            topic: "T".into(),
            broker_name: "b".into(),
            queue_id: id,
        }
    }

    #[test]
    fn file_stems_are_safe() {
        assert_eq!(file_stem("G_1-a.b"), "G_1-a.b");
        assert_eq!(file_stem("a/b"), "a%2Fb");
        assert_eq!(file_stem(".."), "%2E.");
    }

    #[tokio::test]
    async fn local_store_round_trips_and_reports_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalFileOffsetStore::open(dir.path(), "G").unwrap();
        assert_eq!(store.read(&q(0), ReadMode::Store).await.unwrap(), None);
        store.update(&q(0), 5);
        store.update(&q(1), 7);
        let report = store.persist_all().await.unwrap();
        assert_eq!(report.persisted.len(), 2);
        let again = LocalFileOffsetStore::open(dir.path(), "G").unwrap();
        assert_eq!(again.read(&q(1), ReadMode::Memory).await.unwrap(), Some(7));
        std::fs::write(store.path(), b"{not json").unwrap();
        assert!(matches!(
            store.read(&q(0), ReadMode::Store).await,
            Err(OffsetError::Corrupt { .. })
        ));
        assert!(matches!(
            LocalFileOffsetStore::open(dir.path(), "G"),
            Err(OffsetError::Corrupt { .. })
        ));
        assert_eq!(store.stats().reads_failed, 1);
    }
}
