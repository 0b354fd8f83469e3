//! Durable small-file writes: temp file, fsync, rename, fsync of the directory.
//!
//! Crash points: before the rename the old file is intact; after it the new one is complete
//! (it was synced first); the directory fsync makes the rename itself durable.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

use crate::error::StoreError;

/// Replaces `path` with `bytes` atomically and durably.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let tmp = path.with_extension("tmp");
    let mut file = File::create(&tmp).map_err(|e| StoreError::io("create", &tmp, e))?;
    file.write_all(bytes)
        .map_err(|e| StoreError::io("write", &tmp, e))?;
    file.sync_all()
        .map_err(|e| StoreError::io("fsync", &tmp, e))?;
    drop(file);
    fs::rename(&tmp, path).map_err(|e| StoreError::io("rename", path, e))?;
    sync_dir(path)
}

/// Makes the directory entry of `path` durable.
pub fn sync_dir(path: &Path) -> Result<(), StoreError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let handle = File::open(dir).map_err(|e| StoreError::io("open directory", dir, e))?;
    handle
        .sync_all()
        .map_err(|e| StoreError::io("fsync directory", dir, e))
}

/// Reads and decodes a JSON file, `Ok(None)` when it does not exist.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, StoreError> {
    match fs::read(path) {
        Ok(bytes) => {
            serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|source| StoreError::Decode {
                    path: path.to_owned(),
                    source,
                })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StoreError::io("read", path, e)),
    }
}
