//! A directory of files keyed by the offset each one starts at, with the bookkeeping the
//! ConsumeQueue and the key index share: create a file on its first write (and fsync the
//! directory so it survives a crash), remember which files were written since the last sync
//! and fsync exactly those, cut and remove files durably.
//!
//! Files are shared handles so a checkpoint can take the set of written files under the
//! store's `derived` lock and fsync them after releasing it ([`DirtyFile`]): the dispatcher
//! (and so every consumer) does not wait for ConsumeQueue fsyncs.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::ops::RangeBounds;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::FileError;
use crate::fsutil;

/// Files of one directory by key.
#[derive(Debug)]
pub(crate) struct FileSet {
    dir: PathBuf,
    /// A file's name is `key * name_scale` in 20 digits (ConsumeQueues name files by byte
    /// offset and key them by queue offset; the index names and keys them by segment start).
    name_scale: u64,
    files: BTreeMap<u64, Arc<File>>,
    dirty: BTreeSet<u64>,
}

/// A file written since the last sync, taken out of its set to be fsynced without the set's
/// lock. Syncing a file removed meanwhile (retention) is harmless.
#[derive(Debug)]
pub(crate) struct DirtyFile {
    path: PathBuf,
    file: Arc<File>,
}

impl DirtyFile {
    /// fsyncs the file's data.
    pub(crate) fn sync(&self) -> Result<(), FileError> {
        self.file
            .sync_data()
            .map_err(|e| FileError::new("fsync", &self.path, e))
    }
}

impl FileSet {
    pub(crate) fn new(dir: &Path, name_scale: u64) -> FileSet {
        FileSet {
            dir: dir.to_path_buf(),
            name_scale,
            files: BTreeMap::new(),
            dirty: BTreeSet::new(),
        }
    }

    /// Opens an existing file for `key` (at start-up).
    pub(crate) fn open_existing(&mut self, key: u64) -> Result<(), FileError> {
        let path = self.path(key);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| FileError::new("open", &path, e))?;
        self.files.insert(key, Arc::new(file));
        Ok(())
    }

    pub(crate) fn path(&self, key: u64) -> PathBuf {
        self.dir
            .join(fsutil::offset_file_name(key * self.name_scale))
    }

    pub(crate) fn keys(&self) -> impl DoubleEndedIterator<Item = u64> + '_ {
        self.files.keys().copied()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    pub(crate) fn len_of(&self, key: u64) -> Result<u64, FileError> {
        let Some(file) = self.files.get(&key) else {
            return Ok(0);
        };
        file.metadata()
            .map(|m| m.len())
            .map_err(|e| FileError::new("stat", self.path(key), e))
    }

    /// Reads exactly `buf.len()` bytes at `pos`; `Ok(false)` when the file is absent or shorter.
    pub(crate) fn read_exact_at(
        &self,
        key: u64,
        pos: u64,
        buf: &mut [u8],
    ) -> Result<bool, FileError> {
        let Some(file) = self.files.get(&key) else {
            return Ok(false);
        };
        match file.read_exact_at(buf, pos) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
            Err(e) => Err(FileError::new("read", self.path(key), e)),
        }
    }

    /// Writes `bytes` at `pos` of the file for `key`, creating it (durably) if needed.
    pub(crate) fn write_at(&mut self, key: u64, pos: u64, bytes: &[u8]) -> Result<(), FileError> {
        if !self.files.contains_key(&key) {
            let path = self.path(key);
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(|e| FileError::new("create", &path, e))?;
            fsutil::sync_dir(&self.dir)?;
            self.files.insert(key, Arc::new(file));
        }
        self.files[&key]
            .write_all_at(bytes, pos)
            .map_err(|e| FileError::new("write", self.path(key), e))?;
        self.dirty.insert(key);
        Ok(())
    }

    /// fsyncs every file written since the last sync.
    pub(crate) fn sync_dirty(&mut self) -> Result<(), FileError> {
        self.take_dirty().iter().try_for_each(DirtyFile::sync)
    }

    /// The files written since the last sync, for the caller to fsync (they count as synced
    /// from now on: a failed fsync stops checkpoints, see `store::checkpoint_health`).
    pub(crate) fn take_dirty(&mut self) -> Vec<DirtyFile> {
        std::mem::take(&mut self.dirty)
            .into_iter()
            .filter_map(|key| {
                let file = self.files.get(&key)?.clone();
                Some(DirtyFile {
                    path: self.path(key),
                    file,
                })
            })
            .collect()
    }

    /// Cuts the file for `key` to `len` bytes, durably.
    pub(crate) fn truncate(&self, key: u64, len: u64) -> Result<(), FileError> {
        if let Some(file) = self.files.get(&key) {
            file.set_len(len)
                .and_then(|()| file.sync_data())
                .map_err(|e| FileError::new("truncate", self.path(key), e))?;
        }
        Ok(())
    }

    /// Removes the files whose keys fall in `range`, durably.
    pub(crate) fn remove_range(&mut self, range: impl RangeBounds<u64>) -> Result<(), FileError> {
        let doomed: Vec<u64> = self.files.range(range).map(|(key, _)| *key).collect();
        for key in doomed {
            self.files.remove(&key);
            self.dirty.remove(&key);
            fsutil::remove_file(&self.path(key))?;
        }
        Ok(())
    }
}
