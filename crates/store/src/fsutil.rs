//! Crash-safe file helpers (invariant 5).
//!
//! Metadata is replaced by write-temp, fsync, rename, fsync(dir): after a crash the name
//! points at either the complete old file or the complete new one, never a torn mix.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::FileError;

/// Atomically replaces `path` with `bytes`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    let tmp = path.with_extension("tmp");
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(|e| FileError::new("create", &tmp, e))?;
    file.write_all(bytes)
        .map_err(|e| FileError::new("write", &tmp, e))?;
    file.sync_all()
        .map_err(|e| FileError::new("fsync", &tmp, e))?;
    drop(file);
    fs::rename(&tmp, path).map_err(|e| FileError::new("rename", path, e))?;
    sync_parent(path)
}

/// fsyncs the directory holding `path`, making a create, rename or unlink durable.
pub fn sync_parent(path: &Path) -> Result<(), FileError> {
    match path.parent() {
        // A relative path with one component ("data") lives in the working directory.
        Some(dir) if dir.as_os_str().is_empty() => sync_dir(Path::new(".")),
        Some(dir) => sync_dir(dir),
        None => Ok(()),
    }
}

/// fsyncs a directory.
pub fn sync_dir(dir: &Path) -> Result<(), FileError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| FileError::new("fsync dir", dir, e))
}

/// Creates a directory and its parents, not yet durably: returns the directories that
/// gained an entry (the parent of each directory created), which the caller fsyncs before
/// anything depends on the new directories surviving a crash.
pub fn create_dir_all_deferred(dir: &Path) -> Result<Vec<PathBuf>, FileError> {
    let mut missing = Vec::new();
    let mut at = dir;
    while !at.is_dir() {
        missing.push(at.to_path_buf());
        match at.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => at = parent,
            _ => break,
        }
    }
    if missing.is_empty() {
        return Ok(Vec::new());
    }
    fs::create_dir_all(dir).map_err(|e| FileError::new("create dir", dir, e))?;
    Ok(missing
        .iter()
        .map(|created| match created.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        })
        .collect())
}

/// Creates a directory and its parents, durably: every directory that gained an entry
/// (the parent of each one created) is fsynced.
pub fn create_dir_all(dir: &Path) -> Result<(), FileError> {
    create_dir_all_deferred(dir)?
        .iter()
        .try_for_each(|parent| sync_dir(parent))
}

/// Removes a file durably; a missing file is not an error.
pub fn remove_file(path: &Path) -> Result<(), FileError> {
    unlink(path)?;
    sync_parent(path)
}

/// Removes a file, not yet durably (the caller fsyncs its directory when that matters); a
/// missing file is not an error.
pub fn unlink(path: &Path) -> Result<(), FileError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(FileError::new("remove", path, e)),
    }
}

/// Name of a file that starts at `offset`: 20 zero-padded digits, as RocketMQ names them.
pub fn offset_file_name(offset: u64) -> String {
    format!("{offset:020}")
}

/// Parses a 20-digit offset file name.
pub fn parse_offset_file_name(name: &str) -> Option<u64> {
    if name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit()) {
        name.parse().ok()
    } else {
        None
    }
}
