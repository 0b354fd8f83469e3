//! The Raft log, vote and commit point on disk.
//!
//! Files in `<controllerStorePath>/raft/`:
//! - `log.dat`: append-only frames (see `frame`), one openraft entry each, in index order;
//! - `vote.json`: the vote, replaced atomically (`fsutil::write_atomic`);
//! - `meta.json`: the committed log id and the last purged log id, replaced atomically.
//!
//! Write paths and their crash points:
//! 1. Append: frames are written, then `sync_data`, then openraft's `LogFlushed` callback
//!    fires. A crash before the sync leaves at most a torn tail, cut on recovery; nothing
//!    torn was ever reported flushed.
//! 2. Truncate (conflicting suffix): the file is cut and synced before returning.
//! 3. Purge: `meta.json` records the purge point first (entries at or below it are ignored
//!    on recovery); when the purged prefix passes [`COMPACT_PURGED_ENTRIES_MIN`] the file is
//!    rewritten without it (temp, fsync, rename, fsync dir), so a crash leaves either file.
//!    A purge past the last entry (a snapshot installed from the leader) empties the file
//!    at once; if a crash comes first, recovery accepts the next append at purge point + 1
//!    after the stale purged frames.
//!
//! Invariants: the in-memory map holds exactly the entries after the purge point that are
//! in the file, with consecutive indexes; a failed write or fsync poisons the store (every
//! later write fails) because the file's durable content is then unknown.

mod frame;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{AnyError, RaftLogId, RaftLogReader, StorageIOError, Vote};
use serde::{Deserialize, Serialize};

use crate::error::StoreError;
use crate::fsutil;
use crate::raft_types::{Entry, LogId, RaftStorageError, TypeConfig};

pub use frame::FRAME_PAYLOAD_MAX;

/// A purged prefix of at least this many entries is compacted out of `log.dat`.
pub const COMPACT_PURGED_ENTRIES_MIN: u64 = 1000;

/// Entries by index, with the position of their frame in `log.dat`.
type PlacedEntries = BTreeMap<u64, (Entry, u64)>;

/// `meta.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct LogMeta {
    committed: Option<LogId>,
    last_purged: Option<LogId>,
    /// Entries at or below `last_purged` still in `log.dat` (compaction pending).
    purged_in_file: u64,
}

#[derive(Debug)]
struct LogFiles {
    dir: PathBuf,
    file: File,
    entries: PlacedEntries,
    file_len: u64,
    vote: Option<Vote<u64>>,
    meta: LogMeta,
    poisoned: bool,
}

/// The on-disk Raft log store; clones share the same files (reader and writer).
#[derive(Debug, Clone)]
pub struct LogStore {
    files: Arc<Mutex<LogFiles>>,
}

fn log_path(dir: &Path) -> PathBuf {
    dir.join("log.dat")
}

fn storage_error(error: &StoreError) -> RaftStorageError {
    StorageIOError::write_logs(AnyError::new(error)).into()
}

impl LogStore {
    /// Opens (creating) the store in `dir`, recovering the log: a torn tail is cut; other
    /// damage is a [`StoreError::Corrupt`].
    pub fn open(dir: &Path) -> Result<LogStore, StoreError> {
        fs::create_dir_all(dir).map_err(|e| StoreError::io("create directory", dir, e))?;
        let vote = fsutil::read_json::<Vote<u64>>(&dir.join("vote.json"))?;
        let meta = fsutil::read_json::<LogMeta>(&dir.join("meta.json"))?.unwrap_or_default();
        let path = log_path(dir);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(StoreError::io("read", &path, e)),
        };
        let (entries, valid_len) = recover_entries(&path, &bytes, meta.last_purged)?;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| StoreError::io("open", &path, e))?;
        if valid_len < bytes.len() as u64 {
            tracing::warn!(path = %path.display(), valid_len, file_len = bytes.len(),
                "cutting a torn tail off the controller's raft log");
            file.set_len(valid_len)
                .map_err(|e| StoreError::io("truncate", &path, e))?;
            file.sync_all()
                .map_err(|e| StoreError::io("fsync", &path, e))?;
        }
        Ok(LogStore {
            files: Arc::new(Mutex::new(LogFiles {
                dir: dir.to_owned(),
                file,
                entries,
                file_len: valid_len,
                vote,
                meta,
                poisoned: false,
            })),
        })
    }

    fn lock(&self) -> MutexGuard<'_, LogFiles> {
        self.files.lock().expect("log store lock")
    }

    /// Number of entries held (after the purge point).
    pub fn entry_count(&self) -> usize {
        self.lock().entries.len()
    }
}

/// Decodes the valid frames of `bytes`, skipping purged entries; returns them with the
/// length of the valid prefix.
fn recover_entries(
    path: &Path,
    bytes: &[u8],
    last_purged: Option<LogId>,
) -> Result<(PlacedEntries, u64), StoreError> {
    let scan = frame::scan(bytes).map_err(|c| StoreError::Corrupt {
        path: path.to_owned(),
        position: c.position,
        why: c.why,
    })?;
    let purged_index = last_purged.map(|l| l.index);
    let mut entries = BTreeMap::new();
    let mut previous: Option<u64> = None;
    for scanned in scan.frames {
        let entry: Entry =
            serde_json::from_slice(scanned.payload).map_err(|e| StoreError::Corrupt {
                path: path.to_owned(),
                position: scanned.position,
                why: format!("entry with a valid CRC does not decode: {e}"),
            })?;
        let index = entry.get_log_id().index;
        if let Some(before) = previous {
            // Past a purge that went beyond the file's tail (a snapshot installed from the
            // leader), appends resume at the purge point + 1 after older, purged frames.
            let resumes_after_purge = purged_index.is_some_and(|p| before <= p && index == p + 1);
            if index != before + 1 && !resumes_after_purge {
                return Err(StoreError::Corrupt {
                    path: path.to_owned(),
                    position: scanned.position,
                    why: format!("entry index {index} follows {before}"),
                });
            }
        }
        previous = Some(index);
        if purged_index.is_some_and(|p| index <= p) {
            continue;
        }
        entries.insert(index, (entry, scanned.position));
    }
    Ok((entries, scan.valid_len))
}

impl LogFiles {
    fn check_writable(&self) -> Result<(), StoreError> {
        if self.poisoned {
            return Err(StoreError::io(
                "write (after an earlier failed write or fsync; restart to recover)",
                log_path(&self.dir),
                std::io::Error::other("raft log poisoned"),
            ));
        }
        Ok(())
    }

    /// Runs a write, poisoning the store if it fails.
    fn guarded<T>(
        &mut self,
        write: impl FnOnce(&mut Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.check_writable()?;
        let result = write(self);
        if result.is_err() {
            self.poisoned = true;
        }
        result
    }

    fn append(&mut self, entries: Vec<Entry>) -> Result<(), StoreError> {
        let path = log_path(&self.dir);
        let mut buffer = Vec::new();
        let mut placed = Vec::with_capacity(entries.len());
        for entry in entries {
            let payload = serde_json::to_vec(&entry)
                .map_err(|e| StoreError::io("encode entry for", &path, std::io::Error::other(e)))?;
            if payload.len() > FRAME_PAYLOAD_MAX {
                return Err(StoreError::io(
                    "append to",
                    &path,
                    std::io::Error::other("log entry above FRAME_PAYLOAD_MAX"),
                ));
            }
            let position = self.file_len + buffer.len() as u64;
            frame::encode_frame(&payload, &mut buffer);
            placed.push((entry, position));
        }
        self.file
            .write_all(&buffer)
            .map_err(|e| StoreError::io("append to", &path, e))?;
        self.file
            .sync_data()
            .map_err(|e| StoreError::io("fsync", &path, e))?;
        self.file_len += buffer.len() as u64;
        for (entry, position) in placed {
            self.entries
                .insert(entry.get_log_id().index, (entry, position));
        }
        Ok(())
    }

    fn truncate(&mut self, index: u64) -> Result<(), StoreError> {
        let path = log_path(&self.dir);
        let Some((_, position)) = self.entries.get(&index).map(|(e, p)| (e.clone(), *p)) else {
            return Ok(());
        };
        self.file
            .set_len(position)
            .map_err(|e| StoreError::io("truncate", &path, e))?;
        self.file
            .sync_all()
            .map_err(|e| StoreError::io("fsync", &path, e))?;
        self.file_len = position;
        self.entries.split_off(&index);
        Ok(())
    }

    fn purge(&mut self, log_id: LogId) -> Result<(), StoreError> {
        let kept = self.entries.split_off(&(log_id.index + 1));
        let removed = self.entries.len() as u64;
        self.entries = kept;
        self.meta.last_purged = Some(log_id);
        self.meta.purged_in_file += removed;
        self.write_meta()?;
        // Nothing left (a snapshot from the leader covered the whole log): the file is
        // rewritten empty at once, so new appends never follow stale purged frames.
        let nothing_kept = self.entries.is_empty() && self.file_len > 0;
        if nothing_kept || self.meta.purged_in_file >= COMPACT_PURGED_ENTRIES_MIN {
            self.compact()?;
        }
        Ok(())
    }

    fn write_meta(&self) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(&self.meta).map_err(|e| {
            StoreError::io(
                "encode",
                self.dir.join("meta.json"),
                std::io::Error::other(e),
            )
        })?;
        fsutil::write_atomic(&self.dir.join("meta.json"), &bytes)
    }

    /// Rewrites `log.dat` without the purged prefix.
    fn compact(&mut self) -> Result<(), StoreError> {
        let path = log_path(&self.dir);
        let mut buffer = Vec::new();
        let mut positions = Vec::new();
        for (index, (entry, _)) in &self.entries {
            let payload = serde_json::to_vec(entry)
                .map_err(|e| StoreError::io("encode entry for", &path, std::io::Error::other(e)))?;
            positions.push((*index, buffer.len() as u64));
            frame::encode_frame(&payload, &mut buffer);
        }
        fsutil::write_atomic(&path, &buffer)?;
        self.file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| StoreError::io("open", &path, e))?;
        self.file_len = buffer.len() as u64;
        for (index, position) in positions {
            if let Some(slot) = self.entries.get_mut(&index) {
                slot.1 = position;
            }
        }
        self.meta.purged_in_file = 0;
        self.write_meta()
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, RaftStorageError> {
        let files = self.lock();
        Ok(files
            .entries
            .range(range)
            .map(|(_, (entry, _))| entry.clone())
            .collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, RaftStorageError> {
        let files = self.lock();
        let last_purged_log_id = files.meta.last_purged;
        let last_log_id = files
            .entries
            .values()
            .next_back()
            .map(|(entry, _)| *entry.get_log_id())
            .or(last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), RaftStorageError> {
        let mut files = self.lock();
        let vote = *vote;
        files
            .guarded(|files| {
                let path = files.dir.join("vote.json");
                let bytes = serde_json::to_vec(&vote)
                    .map_err(|e| StoreError::io("encode", &path, std::io::Error::other(e)))?;
                fsutil::write_atomic(&path, &bytes)?;
                files.vote = Some(vote);
                Ok(())
            })
            .map_err(|e| StorageIOError::write_vote(AnyError::new(&e)).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, RaftStorageError> {
        Ok(self.lock().vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), RaftStorageError> {
        let mut files = self.lock();
        files
            .guarded(|files| {
                files.meta.committed = committed;
                files.write_meta()
            })
            .map_err(|e| storage_error(&e))
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, RaftStorageError> {
        Ok(self.lock().meta.committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), RaftStorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let result = self.lock().guarded(|files| files.append(entries));
        match result {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(error) => {
                callback.log_io_completed(Err(std::io::Error::other(error.to_string())));
                Err(storage_error(&error))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), RaftStorageError> {
        self.lock()
            .guarded(|files| files.truncate(log_id.index))
            .map_err(|e| storage_error(&e))
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), RaftStorageError> {
        self.lock()
            .guarded(|files| files.purge(log_id))
            .map_err(|e| storage_error(&e))
    }
}

#[cfg(test)]
mod tests;
