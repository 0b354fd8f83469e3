//! Checkpoints: the log position up to which derived state is durable, with the offset view
//! and the queue-offset table at that position.
//!
//! A checkpoint file is `checkpoint/<20-digit position>`:
//!
//! ```text
//! magic "FMQCKPT1" | position u64 | last_store_timestamp i64 | queue count u32
//! | (topic_len u16, topic, queue_id u32, next_offset u64)* | offset view (see offsets::view)
//! | crc32 u32 of every byte before it
//! ```
//!
//! Invariants:
//! 1. A checkpoint at position P is written only after the CommitLog is durable up to P and
//!    every ConsumeQueue and index entry for records below P is fsynced.
//! 2. Files are written temp + fsync + rename + fsync(dir) (invariant 5); a torn or corrupt file
//!    fails its CRC and recovery falls back to the previous checkpoint.
//! 3. Several checkpoints are kept, so a truncation below the newest one can restart from an
//!    older one; a truncation deletes every checkpoint past the cut before cutting the log.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::{FileError, OpenError};
use crate::fsutil;
use crate::offsets::OffsetView;

const MAGIC: &[u8; 8] = b"FMQCKPT1";

/// Derived state as of one log position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// Every record below this position is reflected; recovery re-dispatches from here.
    pub position: u64,
    /// Store time of the last record below `position`.
    pub last_store_timestamp_ms: i64,
    /// Next queue offset of every queue at `position`.
    pub queue_offsets: BTreeMap<(String, u32), u64>,
    /// The consumer offset view at `position`.
    pub view: OffsetView,
}

impl Checkpoint {
    /// Serialises the checkpoint with its CRC.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.queue_offsets.len() * 32);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.position.to_be_bytes());
        out.extend_from_slice(&self.last_store_timestamp_ms.to_be_bytes());
        out.extend_from_slice(&(self.queue_offsets.len() as u32).to_be_bytes());
        for ((topic, queue_id), next) in &self.queue_offsets {
            out.extend_from_slice(&(topic.len() as u16).to_be_bytes());
            out.extend_from_slice(topic.as_bytes());
            out.extend_from_slice(&queue_id.to_be_bytes());
            out.extend_from_slice(&next.to_be_bytes());
        }
        self.view.encode_into(&mut out);
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    /// Parses and verifies a checkpoint; the error says what is wrong.
    pub fn decode(bytes: &[u8]) -> Result<Checkpoint, String> {
        if bytes.len() < MAGIC.len() + 24 + 4 {
            return Err(format!("file is too short ({} bytes)", bytes.len()));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        let stored = u32::from_be_bytes(crc.try_into().expect("4 bytes"));
        let computed = crc32fast::hash(body);
        if stored != computed {
            return Err(format!(
                "CRC mismatch: stored {stored:#010x}, computed {computed:#010x}"
            ));
        }
        if &body[..8] != MAGIC {
            return Err("bad magic".into());
        }
        let mut reader = Reader { bytes: body, at: 8 };
        let position = reader.u64()?;
        let last_store_timestamp_ms = reader.u64()? as i64;
        let count = reader.u32()?;
        let mut queue_offsets = BTreeMap::new();
        for _ in 0..count {
            let len = reader.u16()? as usize;
            let topic =
                String::from_utf8(reader.take(len)?.to_vec()).map_err(|_| "topic is not UTF-8")?;
            let queue_id = reader.u32()?;
            queue_offsets.insert((topic, queue_id), reader.u64()?);
        }
        let (view, used) = OffsetView::decode(&body[reader.at..]).map_err(|e| e.to_string())?;
        if reader.at + used != body.len() {
            return Err("trailing bytes after the offset view".into());
        }
        Ok(Checkpoint {
            position,
            last_store_timestamp_ms,
            queue_offsets,
            view,
        })
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(len)
            .filter(|end| *end <= self.bytes.len());
        let end = end.ok_or_else(|| format!("truncated at byte {}", self.at))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }
    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_be_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_be_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
}

/// The checkpoint files of a store.
#[derive(Debug, Clone)]
pub struct CheckpointDir {
    dir: PathBuf,
}

impl CheckpointDir {
    /// Opens (creates) the directory and removes leftover temp files.
    pub fn open(dir: &Path) -> Result<CheckpointDir, OpenError> {
        fsutil::create_dir_all(dir)?;
        let this = CheckpointDir {
            dir: dir.to_path_buf(),
        };
        for (path, position) in this.list()? {
            if position.is_none() {
                if path.extension().is_some_and(|e| e == "tmp") {
                    fsutil::remove_file(&path)?;
                } else {
                    return Err(OpenError::ForeignFile {
                        path,
                        reason: "not a checkpoint (expected a 20-digit position)".into(),
                    });
                }
            }
        }
        Ok(this)
    }

    /// The checkpoints in `dir` for reading only (`--check`): nothing is created or removed.
    pub fn read_only(dir: &Path) -> CheckpointDir {
        CheckpointDir {
            dir: dir.to_path_buf(),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn list(&self) -> Result<Vec<(PathBuf, Option<u64>)>, FileError> {
        let listing =
            std::fs::read_dir(&self.dir).map_err(|e| FileError::new("list", &self.dir, e))?;
        let mut out = Vec::new();
        for item in listing {
            let item = item.map_err(|e| FileError::new("list", &self.dir, e))?;
            let name = item.file_name().to_string_lossy().into_owned();
            out.push((item.path(), fsutil::parse_offset_file_name(&name)));
        }
        Ok(out)
    }

    /// Positions of the checkpoint files, newest first (none when the directory is absent,
    /// which only a read-only check can see).
    pub fn positions(&self) -> Result<Vec<u64>, FileError> {
        if !self.dir.exists() {
            return Ok(Vec::new());
        }
        let mut positions: Vec<u64> = self.list()?.into_iter().filter_map(|(_, p)| p).collect();
        positions.sort_unstable_by(|a, b| b.cmp(a));
        Ok(positions)
    }

    /// Path of the checkpoint at `position`.
    pub fn path(&self, position: u64) -> PathBuf {
        self.dir.join(fsutil::offset_file_name(position))
    }

    /// Reads the checkpoint at `position`.
    pub fn read(&self, position: u64) -> Result<Checkpoint, String> {
        let path = self.path(position);
        let bytes = std::fs::read(&path).map_err(|e| format!("read {}: {e}", path.display()))?;
        let checkpoint =
            Checkpoint::decode(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        if checkpoint.position != position {
            return Err(format!(
                "{}: holds position {}",
                path.display(),
                checkpoint.position
            ));
        }
        Ok(checkpoint)
    }

    /// Writes a checkpoint durably.
    pub fn write(&self, checkpoint: &Checkpoint) -> Result<(), FileError> {
        fsutil::write_atomic(&self.path(checkpoint.position), &checkpoint.encode())
    }

    /// Deletes every checkpoint past `position`, durably.
    pub fn delete_above(&self, position: u64) -> Result<(), FileError> {
        for p in self.positions()? {
            if p > position {
                fsutil::remove_file(&self.path(p))?;
            }
        }
        Ok(())
    }

    /// Keeps the newest `keep` checkpoints.
    pub fn prune(&self, keep: usize) -> Result<(), FileError> {
        for p in self.positions()?.into_iter().skip(keep) {
            fsutil::remove_file(&self.path(p))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_any_flip_is_caught() {
        let mut queue_offsets = BTreeMap::new();
        queue_offsets.insert(("T".to_string(), 3), 42);
        let checkpoint = Checkpoint {
            position: 4096,
            last_store_timestamp_ms: 7,
            queue_offsets,
            view: OffsetView::new(),
        };
        let bytes = checkpoint.encode();
        assert_eq!(Checkpoint::decode(&bytes).unwrap(), checkpoint);
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x40;
            assert!(Checkpoint::decode(&bad).is_err(), "flip at {at} not caught");
        }
        for len in 0..bytes.len() {
            assert!(Checkpoint::decode(&bytes[..len]).is_err());
        }
    }
}
