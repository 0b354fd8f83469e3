//! A directory of files keyed by the offset each one starts at, with the bookkeeping the
//! ConsumeQueue and the key index share: create a file on its first write, remember which
//! files were written since the last sync and fsync exactly those (with the directories that
//! gained an entry, so a new file survives a crash), cut and remove files durably.
//!
//! Files are shared handles so a checkpoint can take the set of written files under the
//! store's `derived` lock and fsync them after releasing it ([`DirtyFile`]): the dispatcher
//! (and so every consumer) does not wait for ConsumeQueue fsyncs. That includes the
//! directory fsync a new file needs: made under the lock at each file's creation, it waited
//! behind the CommitLog's writeback for up to 105 ms, and every send waited with it
//! (docs/performance.md, session 20). Nothing depends on a derived file surviving a crash
//! before the checkpoint that covers it, and that checkpoint is written after these fsyncs.

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
    /// Directories that gained an entry (a file created, a directory made) since the last
    /// sync: fsynced with the dirty files, never on the writer's path.
    dirty_dirs: BTreeSet<PathBuf>,
}

/// A file written, or a directory that gained an entry, since the last sync, taken out of
/// its set to be fsynced without the set's lock. Syncing a file removed meanwhile
/// (retention) is harmless.
#[derive(Debug)]
pub(crate) struct DirtyFile {
    path: PathBuf,
    /// The open file; `None` for a directory (opened when synced).
    file: Option<Arc<File>>,
}

impl DirtyFile {
    /// fsyncs the file's data, or the directory.
    pub(crate) fn sync(&self) -> Result<(), FileError> {
        match &self.file {
            Some(file) => file
                .sync_data()
                .map_err(|e| FileError::new("fsync", &self.path, e)),
            // A directory removed meanwhile (its queue deleted) has no entries to keep.
            None if !self.path.exists() => Ok(()),
            None => fsutil::sync_dir(&self.path),
        }
    }
}

impl FileSet {
    pub(crate) fn new(dir: &Path, name_scale: u64) -> FileSet {
        FileSet {
            dir: dir.to_path_buf(),
            name_scale,
            files: BTreeMap::new(),
            dirty: BTreeSet::new(),
            dirty_dirs: BTreeSet::new(),
        }
    }

    /// Adds directories that gained an entry (from `fsutil::create_dir_all_deferred`) to
    /// those the next sync fsyncs.
    pub(crate) fn note_new_entries(&mut self, dirs: impl IntoIterator<Item = PathBuf>) {
        self.dirty_dirs.extend(dirs);
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

    /// Writes `bytes` at `pos` of the file for `key`, creating it if needed (its directory
    /// entry is made durable by the next sync).
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
            self.dirty_dirs.insert(self.dir.clone());
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
        let dirs = std::mem::take(&mut self.dirty_dirs)
            .into_iter()
            .map(|path| DirtyFile { path, file: None });
        let files = std::mem::take(&mut self.dirty)
            .into_iter()
            .filter_map(|key| {
                let file = self.files.get(&key)?.clone();
                Some(DirtyFile {
                    path: self.path(key),
                    file: Some(file),
                })
            });
        dirs.chain(files).collect()
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

    /// Removes the files below `end` (retention: they index only deleted segments); the
    /// directory's fsync is left to the next sync, off the `derived` lock (one per file under
    /// it would stall dispatch, and every send blocked on the lock, behind the CommitLog's
    /// writeback). A crash that brings a file back before then is harmless: recovery deletes
    /// below the log's start again.
    pub(crate) fn remove_below(&mut self, end: u64) -> Result<(), FileError> {
        let doomed: Vec<u64> = self.files.range(..end).map(|(key, _)| *key).collect();
        for key in doomed {
            self.files.remove(&key);
            self.dirty.remove(&key);
            fsutil::unlink(&self.path(key))?;
            self.dirty_dirs.insert(self.dir.clone());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirty_paths(set: &mut FileSet) -> Vec<(PathBuf, bool)> {
        set.take_dirty()
            .into_iter()
            .map(|d| (d.path, d.file.is_none()))
            .collect()
    }

    /// A file's creation leaves its directory's fsync to the next sync (off the writer's
    /// path), ahead of the file's own; a write to an existing file syncs only the file.
    #[test]
    fn a_new_files_directory_entry_is_synced_with_the_dirty_files_not_at_creation() {
        let root = tempfile::tempdir().expect("temp dir");
        let dir = root.path().join("T").join("0");
        let made = fsutil::create_dir_all_deferred(&dir).expect("create");
        assert_eq!(made, vec![root.path().join("T"), root.path().to_path_buf()]);
        assert!(fsutil::create_dir_all_deferred(&dir)
            .expect("again")
            .is_empty());
        let mut set = FileSet::new(&dir, 1);
        set.note_new_entries(made);
        set.write_at(7, 0, b"entry").expect("write");
        let file = set.path(7);
        assert_eq!(
            dirty_paths(&mut set),
            vec![
                (root.path().to_path_buf(), true),
                (root.path().join("T"), true),
                (dir.clone(), true),
                (file.clone(), false),
            ]
        );
        set.write_at(7, 5, b"more").expect("write");
        assert_eq!(dirty_paths(&mut set), vec![(file, false)]);
        assert!(dirty_paths(&mut set).is_empty());
        // Every one of them syncs; a directory removed before the sync is no error.
        set.write_at(8, 0, b"x").expect("write");
        set.note_new_entries([root.path().join("gone")]);
        for dirty in set.take_dirty() {
            dirty.sync().expect("sync");
        }
    }

    /// Retention's removal unlinks at once and leaves the directory's fsync to the next
    /// sync; the files above the bound stay.
    #[test]
    fn files_removed_below_a_bound_leave_their_directory_to_the_next_sync() {
        let root = tempfile::tempdir().expect("temp dir");
        let mut set = FileSet::new(root.path(), 1);
        for key in [0, 10, 20] {
            set.write_at(key, 0, b"entry").expect("write");
        }
        let _ = set.take_dirty();
        std::fs::remove_file(set.path(0)).expect("gone behind the set's back");
        set.remove_below(20).expect("remove");
        assert!(!set.path(10).exists());
        assert!(set.path(20).exists());
        assert_eq!(set.keys().collect::<Vec<_>>(), vec![20]);
        assert_eq!(
            dirty_paths(&mut set),
            vec![(root.path().to_path_buf(), true)]
        );
        set.remove_below(20).expect("nothing more");
        assert!(dirty_paths(&mut set).is_empty());
    }
}
