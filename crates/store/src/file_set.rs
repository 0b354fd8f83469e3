//! A directory of files keyed by the offset each one starts at, with the bookkeeping the
//! ConsumeQueue and the key index share: create a file on its first write (and fsync the
//! directory so it survives a crash), remember which files were written since the last sync
//! and fsync exactly those, cut and remove files durably.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::ops::RangeBounds;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::FileError;
use crate::fsutil;

/// Files of one directory by key.
#[derive(Debug)]
pub(crate) struct FileSet {
    dir: PathBuf,
    /// A file's name is `key * name_scale` in 20 digits (ConsumeQueues name files by byte
    /// offset and key them by queue offset; the index names and keys them by segment start).
    name_scale: u64,
    files: BTreeMap<u64, File>,
    dirty: BTreeSet<u64>,
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
        self.files.insert(key, file);
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
            self.files.insert(key, file);
        }
        self.files[&key]
            .write_all_at(bytes, pos)
            .map_err(|e| FileError::new("write", self.path(key), e))?;
        self.dirty.insert(key);
        Ok(())
    }

    /// fsyncs every file written since the last sync.
    pub(crate) fn sync_dirty(&mut self) -> Result<(), FileError> {
        for key in std::mem::take(&mut self.dirty) {
            if let Some(file) = self.files.get(&key) {
                file.sync_data()
                    .map_err(|e| FileError::new("fsync", self.path(key), e))?;
            }
        }
        Ok(())
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
