//! The key index: finds messages by `KEYS` words and by `UNIQ_KEY`.
//!
//! One file per CommitLog segment, `index/<20-digit segment start>`, holding 16-byte entries
//! `hash(topic#key): u64, phys_offset: u64` in log order. A lookup scans files newest first and
//! returns candidate offsets; the caller reads each record and checks the key itself, so a
//! hash collision costs a read, never a wrong answer. Retention drops a segment's index file
//! with the segment.
//!
//! Invariants:
//! 1. Entries are derived state: recovery cuts every entry at or after the checkpoint position
//!    and re-dispatches from there, so each record is indexed exactly once.
//! 2. Entries within a file are sorted by physical offset (dispatch follows the log).

use std::path::Path;

use crate::error::{FileError, OpenError};
use crate::file_set::{DirtyFile, FileSet};
use crate::fsutil;

const ENTRY_SIZE: u64 = 16;
const PENDING_BYTES_MAX: usize = 64 * 1024;

/// FNV-1a's offset basis: the state before any byte.
const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a over `topic#key`: stable across versions and platforms (it is stored on disk).
pub fn key_hash(topic: &str, key: &str) -> u64 {
    fnv1a(topic_prefix_state(topic), key.as_bytes())
}

/// The FNV-1a state after `topic#`, which every key of `topic` continues from.
fn topic_prefix_state(topic: &str) -> u64 {
    fnv1a(fnv1a(FNV_OFFSET_BASIS, topic.as_bytes()), b"#")
}

/// FNV-1a of `bytes` continued from `state`.
fn fnv1a(state: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(state, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The hash state after `topic#` for the last topic indexed. FNV-1a takes one dependent
/// multiplication per byte, and a topic is often half of `topic#key` (a 32-digit `UNIQ_KEY`
/// after a 20-odd byte topic); records of one topic come in runs, so the dispatcher
/// continues from this state instead of hashing the topic again for every key.
#[derive(Debug, Default)]
struct TopicPrefix {
    /// The topic's bytes (the buffer is reused when the topic changes).
    topic: Vec<u8>,
    state: u64,
}

impl TopicPrefix {
    /// The state after `topic#`, computed again only when `topic` differs from the last.
    fn state_for(&mut self, topic: &str) -> u64 {
        if self.topic != topic.as_bytes() || self.topic.is_empty() {
            self.topic.clear();
            self.topic.extend_from_slice(topic.as_bytes());
            self.state = topic_prefix_state(topic);
        }
        self.state
    }
}

/// The key index of a store.
#[derive(Debug)]
pub struct KeyIndex {
    segment_size: u64,
    /// Files keyed by the segment start they index.
    files: FileSet,
    /// Entries not yet written, with the segment they belong to.
    pending: Vec<(u64, [u8; ENTRY_SIZE as usize])>,
    /// The hash state of the last topic indexed.
    prefix: TopicPrefix,
}

impl KeyIndex {
    /// Opens the index files in `dir`, cutting a torn last entry of each.
    pub fn open(dir: &Path, segment_size: u64) -> Result<KeyIndex, OpenError> {
        fsutil::create_dir_all(dir)?;
        let mut files = FileSet::new(dir, 1);
        let listing = std::fs::read_dir(dir).map_err(|e| FileError::new("list", dir, e))?;
        for item in listing {
            let item = item.map_err(|e| FileError::new("list", dir, e))?;
            let name = item.file_name().to_string_lossy().into_owned();
            let Some(start) =
                fsutil::parse_offset_file_name(&name).filter(|s| s % segment_size == 0)
            else {
                return Err(OpenError::ForeignFile {
                    path: item.path(),
                    reason: "not an index file (expected a 20-digit segment start)".into(),
                });
            };
            files.open_existing(start)?;
            let len = files.len_of(start)?;
            if len % ENTRY_SIZE != 0 {
                files.truncate(start, len - len % ENTRY_SIZE)?;
            }
        }
        Ok(KeyIndex {
            segment_size,
            files,
            pending: Vec::new(),
            prefix: TopicPrefix::default(),
        })
    }

    /// Indexes `key` of `topic` for the record at `phys_offset`.
    pub fn add(&mut self, topic: &str, key: &str, phys_offset: u64) -> Result<(), FileError> {
        let mut entry = [0u8; ENTRY_SIZE as usize];
        let hash = fnv1a(self.prefix.state_for(topic), key.as_bytes());
        entry[..8].copy_from_slice(&hash.to_be_bytes());
        entry[8..].copy_from_slice(&phys_offset.to_be_bytes());
        let segment = phys_offset - phys_offset % self.segment_size;
        self.pending.push((segment, entry));
        if self.pending.len() * ENTRY_SIZE as usize >= PENDING_BYTES_MAX {
            self.write_out()?;
        }
        Ok(())
    }

    /// Writes pending entries to their files (not fsynced).
    pub fn write_out(&mut self) -> Result<(), FileError> {
        let pending = std::mem::take(&mut self.pending);
        let mut at = 0;
        while at < pending.len() {
            let segment = pending[at].0;
            let run = pending[at..]
                .iter()
                .take_while(|(s, _)| *s == segment)
                .count();
            let bytes: Vec<u8> = pending[at..at + run].iter().flat_map(|(_, e)| *e).collect();
            let end = self.files.len_of(segment)?;
            self.files.write_at(segment, end, &bytes)?;
            at += run;
        }
        Ok(())
    }

    /// Writes out and fsyncs changed files.
    pub fn sync(&mut self) -> Result<(), FileError> {
        self.write_out()?;
        self.files.sync_dirty()
    }

    /// Writes out and returns the files changed since the last sync, for the caller to fsync
    /// without holding the index (a checkpoint, outside the `derived` lock).
    pub(crate) fn write_out_for_sync(&mut self) -> Result<Vec<DirtyFile>, FileError> {
        self.write_out()?;
        Ok(self.files.take_dirty())
    }

    /// Candidate record offsets for `key` in `topic`, newest first, at most `max_count`.
    pub fn lookup(&self, topic: &str, key: &str, max_count: usize) -> Result<Vec<u64>, FileError> {
        let hash = key_hash(topic, key).to_be_bytes();
        let mut found: Vec<u64> = self
            .pending
            .iter()
            .rev()
            .filter(|(_, e)| e[..8] == hash)
            .map(|(_, e)| u64::from_be_bytes(e[8..].try_into().expect("8 bytes")))
            .take(max_count)
            .collect();
        for segment in self.files.keys().rev() {
            if found.len() >= max_count {
                break;
            }
            let mut bytes = vec![0u8; self.files.len_of(segment)? as usize];
            self.files.read_exact_at(segment, 0, &mut bytes)?;
            for entry in bytes.chunks_exact(ENTRY_SIZE as usize).rev() {
                if entry[..8] == hash {
                    found.push(u64::from_be_bytes(entry[8..].try_into().expect("8 bytes")));
                    if found.len() >= max_count {
                        break;
                    }
                }
            }
        }
        Ok(found)
    }

    /// Removes every entry for records at or after `phys_offset`, durably.
    pub fn truncate_from_phys(&mut self, phys_offset: u64) -> Result<(), FileError> {
        self.write_out()?;
        let segment = phys_offset - phys_offset % self.segment_size;
        self.files.remove_range(segment + 1..)?;
        let len = self.files.len_of(segment)?;
        // Entries are sorted by offset: find the first at or after the cut.
        let (mut low, mut high) = (0, len / ENTRY_SIZE);
        while low < high {
            let mid = low + (high - low) / 2;
            let mut phys = [0u8; 8];
            self.files
                .read_exact_at(segment, mid * ENTRY_SIZE + 8, &mut phys)?;
            if u64::from_be_bytes(phys) < phys_offset {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        if low * ENTRY_SIZE < len {
            self.files.truncate(segment, low * ENTRY_SIZE)?;
        }
        Ok(())
    }

    /// Drops the files of segments that end at or below `log_min`.
    pub fn delete_below(&mut self, log_min: u64) -> Result<(), FileError> {
        // Segment `start` ends at `start + segment_size`; it goes when that is ≤ log_min.
        match log_min.checked_sub(self.segment_size) {
            Some(last_doomed) => self.files.remove_below(last_doomed + 1),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hash is stored on disk: it stays FNV-1a over `topic#key` (values from a plain
    /// byte-by-byte FNV-1a), and entries added through the per-topic state carry the same
    /// hash, whatever topic came before (empty topics included).
    #[test]
    fn key_hash_is_fnv1a_of_topic_hash_key_and_add_stores_it() {
        assert_eq!(fnv1a(FNV_OFFSET_BASIS, b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(key_hash("TopicA", "order-1"), 0xda7c_c6d6_dbc8_2986);
        assert_eq!(key_hash("", "k"), 0x07c9_5507_b492_303b);
        let dir = tempfile::tempdir().unwrap();
        let mut index = KeyIndex::open(dir.path(), 1000).unwrap();
        let adds = [
            ("TopicA", "order-1"),
            ("", "k"),
            ("", "k"),
            ("TopicA", "order-1"),
            ("B", "k"),
        ];
        for (at, (topic, key)) in adds.iter().enumerate() {
            index.add(topic, key, at as u64).unwrap();
        }
        let stored: Vec<u64> = index
            .pending
            .iter()
            .map(|(_, entry)| u64::from_be_bytes(entry[..8].try_into().unwrap()))
            .collect();
        let expected: Vec<u64> = adds.iter().map(|(t, k)| key_hash(t, k)).collect();
        assert_eq!(stored, expected);
    }

    #[test]
    fn lookup_finds_newest_first_and_survives_truncate_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = KeyIndex::open(dir.path(), 1000).unwrap();
        for phys in [10, 500, 1200, 2500] {
            index.add("T", "order-1", phys).unwrap();
            index.add("T", "other", phys + 1).unwrap();
        }
        index.add("U", "order-1", 2600).unwrap();
        assert_eq!(
            index.lookup("T", "order-1", 10).unwrap(),
            vec![2500, 1200, 500, 10]
        );
        index.sync().unwrap();
        index.truncate_from_phys(1200).unwrap();
        drop(index);
        let index = KeyIndex::open(dir.path(), 1000).unwrap();
        assert_eq!(index.lookup("T", "order-1", 10).unwrap(), vec![500, 10]);
        assert_eq!(index.lookup("T", "order-1", 1).unwrap(), vec![500]);
        assert!(index.lookup("U", "order-1", 10).unwrap().is_empty());
    }

    #[test]
    fn delete_below_drops_whole_segments() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = KeyIndex::open(dir.path(), 1000).unwrap();
        index.add("T", "k", 10).unwrap();
        index.add("T", "k", 1010).unwrap();
        index.sync().unwrap();
        index.delete_below(1000).unwrap();
        assert_eq!(index.lookup("T", "k", 10).unwrap(), vec![1010]);
    }
}
