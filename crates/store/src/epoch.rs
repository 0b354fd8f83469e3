//! The epoch file: which master term wrote which part of the log (invariant 6).
//!
//! Each entry `(epoch, start)` says that the master of `epoch` wrote the log from `start` up
//! to the next entry's start (or the log end). A master that begins a term appends
//! `(epoch, its log end)`; a replica records its master's entries as its log passes their
//! starts. Comparing two brokers' entries ([`last_common_point`]) tells where their logs
//! stop being the same log, which is where a replica that follows a new master cuts its
//! divergent suffix (Kafka KIP-101/KIP-279, RocketMQ's `EpochFileCache`).
//!
//! # Format
//! RocketMQ's text layout, written with [`fsutil::write_atomic`] (temp, fsync, rename,
//! fsync(dir)):
//!
//! ```text
//! <count>\n
//! <CRC32 of the entry lines, decimal>\n
//! <epoch>-<start>\n        (count lines, oldest first)
//! ```
//!
//! # Invariants (checked on load and on every change)
//! 1. Epochs strictly increase and are above 0 (epoch 0 is the implicit term of a log
//!    written before epochs: it covers `[0, first start)`).
//! 2. Starts never decrease.
//! 3. At most [`EPOCH_ENTRIES_MAX`] entries (a bigger file is refused, not read whole).
//! 4. The file on disk always equals the in-memory entries after a change returns `Ok`.

use std::path::{Path, PathBuf};

use crate::error::FileError;
use crate::fsutil;

/// The epoch file's name under the store's root directory.
pub const EPOCH_FILE_NAME: &str = "epochFileCheckpoint";
/// Most entries an epoch file holds.
pub const EPOCH_ENTRIES_MAX: usize = 65_536;
/// Longest epoch file accepted: the count and CRC lines plus [`EPOCH_ENTRIES_MAX`] lines of two
/// 20-digit numbers.
const EPOCH_FILE_BYTES_MAX: u64 = 64 + (EPOCH_ENTRIES_MAX as u64) * 42;

/// One master term: `epoch` wrote the log from `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EpochEntry {
    /// The master epoch (above 0).
    pub epoch: u64,
    /// The CommitLog offset where that master's first record of the term is (or would be).
    pub start: u64,
}

/// Why an epoch file could not be read or changed.
#[derive(Debug, thiserror::Error)]
pub enum EpochError {
    /// The file exists but is not a valid epoch file (torn writes cannot happen: it is
    /// written atomically, so this is damage or a foreign file).
    #[error("epoch file {path} is corrupt: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A new entry would break the invariants.
    #[error("epoch entry (epoch {epoch}, start {start}) refused: {reason}")]
    Refused {
        /// The epoch asked for.
        epoch: u64,
        /// Its start.
        start: u64,
        /// Why.
        reason: String,
    },
    /// Reading or writing the file failed.
    #[error(transparent)]
    File(#[from] FileError),
}

/// The path of the epoch file under `root`.
pub fn epoch_file(root: &Path) -> PathBuf {
    root.join(EPOCH_FILE_NAME)
}

/// Checks invariants 1–3 over `entries`; the reason for the first violation.
pub fn validate(entries: &[EpochEntry]) -> Result<(), String> {
    if entries.len() > EPOCH_ENTRIES_MAX {
        return Err(format!(
            "{} entries, at most {EPOCH_ENTRIES_MAX}",
            entries.len()
        ));
    }
    if let Some(first) = entries.first() {
        if first.epoch == 0 {
            return Err("epoch 0 is implicit and never recorded".into());
        }
    }
    for pair in entries.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if b.epoch <= a.epoch {
            return Err(format!(
                "epoch {} follows epoch {}: epochs must increase",
                b.epoch, a.epoch
            ));
        }
        if b.start < a.start {
            return Err(format!(
                "epoch {} starts at {}, before epoch {}'s start {}",
                b.epoch, b.start, a.epoch, a.start
            ));
        }
    }
    Ok(())
}

/// Encodes entries in the file format.
pub fn encode(entries: &[EpochEntry]) -> Vec<u8> {
    let lines: String = entries
        .iter()
        .map(|e| format!("{}-{}\n", e.epoch, e.start))
        .collect();
    let crc = crc32fast::hash(lines.as_bytes());
    format!("{}\n{crc}\n{lines}", entries.len()).into_bytes()
}

/// Decodes the file format and checks the invariants; the reason when it is not valid.
pub fn decode(bytes: &[u8]) -> Result<Vec<EpochEntry>, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    let (count_line, rest) = text.split_once('\n').ok_or("no count line")?;
    let (crc_line, lines) = rest.split_once('\n').ok_or("no CRC line")?;
    let count: usize = count_line
        .parse()
        .map_err(|_| format!("bad count line {count_line:?}"))?;
    if count > EPOCH_ENTRIES_MAX {
        return Err(format!("count {count} above {EPOCH_ENTRIES_MAX}"));
    }
    let crc: u32 = crc_line
        .parse()
        .map_err(|_| format!("bad CRC line {crc_line:?}"))?;
    let actual = crc32fast::hash(lines.as_bytes());
    if actual != crc {
        return Err(format!(
            "CRC of the entries is {actual}, the file says {crc}"
        ));
    }
    if !lines.is_empty() && !lines.ends_with('\n') {
        return Err("the last entry line is not terminated".into());
    }
    let mut entries = Vec::with_capacity(count);
    for line in lines.lines() {
        let parsed = line
            .split_once('-')
            .and_then(|(e, s)| Some((e.parse().ok()?, s.parse().ok()?)));
        let Some((epoch, start)) = parsed else {
            return Err(format!("bad entry line {line:?}"));
        };
        entries.push(EpochEntry { epoch, start });
        if entries.len() > count {
            break;
        }
    }
    if entries.len() != count {
        return Err(format!(
            "the count line says {count} entries, the file holds {}",
            entries.len()
        ));
    }
    validate(&entries)?;
    Ok(entries)
}

/// Reads the epoch file under `root`; no file is no entries.
///
/// # Errors
/// [`EpochError::Corrupt`] for a file that does not decode (never a panic), or I/O.
pub fn load(root: &Path) -> Result<Vec<EpochEntry>, EpochError> {
    let path = epoch_file(root);
    let corrupt = |reason: String| EpochError::Corrupt {
        path: path.clone(),
        reason,
    };
    match std::fs::metadata(&path) {
        Ok(meta) if meta.len() > EPOCH_FILE_BYTES_MAX => {
            return Err(corrupt(format!(
                "{} bytes, at most {EPOCH_FILE_BYTES_MAX}",
                meta.len()
            )))
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(FileError::new("stat", &path, e).into()),
    }
    let bytes = std::fs::read(&path).map_err(|e| FileError::new("read", &path, e))?;
    decode(&bytes).map_err(corrupt)
}

/// Writes `entries` as the epoch file under `root`, atomically and durably.
///
/// # Errors
/// The entries break the invariants (nothing written), or I/O.
pub fn store(root: &Path, entries: &[EpochEntry]) -> Result<(), EpochError> {
    validate(entries).map_err(|reason| EpochError::Corrupt {
        path: epoch_file(root),
        reason: format!("refusing to write invalid entries: {reason}"),
    })?;
    fsutil::write_atomic(&epoch_file(root), &encode(entries))?;
    Ok(())
}

/// The newest epoch (0 when there are no entries: a log written before epochs).
pub fn last_epoch(entries: &[EpochEntry]) -> u64 {
    entries.last().map_or(0, |e| e.epoch)
}

/// The entries after a master begins a term of `epoch` at `start` (its log end): pure rule of
/// [`crate::MessageStore::begin_epoch`], so the simulation applies the same rule.
///
/// # Errors
/// The reason `epoch` is refused: it is not above the last epoch.
pub fn begin(entries: &[EpochEntry], epoch: u64, start: u64) -> Result<Vec<EpochEntry>, String> {
    let last = last_epoch(entries);
    if epoch <= last {
        return Err(format!("not above the last epoch {last}"));
    }
    let mut new = entries.to_vec();
    new.push(EpochEntry { epoch, start });
    Ok(new)
}

/// The entries after a replica records its master's `entry`; `None` when it is recorded
/// already (a no-op). Pure rule of [`crate::MessageStore::record_epoch`].
///
/// # Errors
/// The reason the entry is refused: not newer than the last entry, starting before it, or
/// epoch 0.
pub fn record(
    entries: &[EpochEntry],
    entry: EpochEntry,
) -> Result<Option<Vec<EpochEntry>>, String> {
    if entries.contains(&entry) {
        return Ok(None);
    }
    if let Some(last) = entries.last() {
        if entry.epoch <= last.epoch || entry.start < last.start {
            return Err(format!(
                "the last entry is (epoch {}, start {})",
                last.epoch, last.start
            ));
        }
    }
    if entry.epoch == 0 {
        return Err("epoch 0 is implicit".into());
    }
    let mut new = entries.to_vec();
    new.push(entry);
    Ok(Some(new))
}

/// The entries that survive a cut of the log at `offset`: those starting before it (and at it
/// unless `inclusive`). Pure rule of truncation and of the open-time clean-up.
pub fn kept_below(entries: &[EpochEntry], offset: u64, inclusive: bool) -> Vec<EpochEntry> {
    entries
        .iter()
        .copied()
        .filter(|e| e.start < offset || (!inclusive && e.start == offset))
        .collect()
}

/// The entries with the implicit epoch 0 `[0, first start)` made explicit.
fn with_epoch_zero(entries: &[EpochEntry]) -> Vec<EpochEntry> {
    let mut all = Vec::with_capacity(entries.len() + 1);
    if entries.first().is_none_or(|first| first.start > 0) {
        all.push(EpochEntry { epoch: 0, start: 0 });
    }
    all.extend_from_slice(entries);
    all
}

/// Where entry `i` of `entries` ends: the next entry's start, or `log_end` (never below
/// the entry's own start).
fn end_of(entries: &[EpochEntry], i: usize, log_end: u64) -> u64 {
    let end = entries.get(i + 1).map_or(log_end, |next| next.start);
    end.min(log_end).max(entries[i].start.min(log_end))
}

/// How far two logs are the same log, judged by their epochs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommonPoint {
    /// Both logs hold the same bytes below this offset.
    At(u64),
    /// No epoch of the replica is an epoch of the master with the same start: they share
    /// only the empty prefix `[0, 0)`. A replica with bytes must drop all of them (or be
    /// rebuilt, when the master no longer keeps offset 0).
    Disjoint,
}

impl CommonPoint {
    /// The offset below which both logs agree (`0` when disjoint).
    pub fn offset(self) -> u64 {
        match self {
            CommonPoint::At(at) => at,
            CommonPoint::Disjoint => 0,
        }
    }
}

/// The last common point of a replica's log and its master's (pure).
///
/// Walks the replica's epochs newest to oldest; at the first epoch the master also has with
/// the same start, the logs agree up to the smaller of the two ends of that epoch (an epoch
/// ends at the next entry's start, or at the log end). Both lists get the implicit epoch 0
/// `[0, first start)` (a log written before epochs is epoch 0 from offset 0), so two
/// pre-epoch logs agree up to the shorter end — the sampled-CRC prefix check then tells
/// whether they really do. A replica without entries and a master whose first entry starts
/// at `S > 0` share `[0, S)` as epoch 0.
///
/// Entries whose start is past their log's end are treated as ending where they start
/// (clamped to the log end).
pub fn last_common_point(
    replica: &[EpochEntry],
    replica_end: u64,
    master: &[EpochEntry],
    master_end: u64,
) -> CommonPoint {
    match shared_term(replica, replica_end, master, master_end) {
        Some(shared) => CommonPoint::At(shared.common),
        None => CommonPoint::Disjoint,
    }
}

/// The newest term both logs hold (same epoch, same start) and where they stop agreeing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedTerm {
    /// The term's epoch (0 for the implicit pre-epoch term).
    pub epoch: u64,
    /// Whether it is the master's current (newest) term: then the master's end of it is its
    /// log end, and a replica past that point is ahead of the master in the master's own
    /// term (the master lost its tail), not on a deposed master's branch.
    pub masters_current: bool,
    /// The last common point (see [`last_common_point`]).
    pub common: u64,
}

/// [`last_common_point`] with the term it was found in; `None` when disjoint.
pub fn shared_term(
    replica: &[EpochEntry],
    replica_end: u64,
    master: &[EpochEntry],
    master_end: u64,
) -> Option<SharedTerm> {
    let replica = with_epoch_zero(replica);
    let master = with_epoch_zero(master);
    for i in (0..replica.len()).rev() {
        let entry = replica[i];
        let Ok(j) = master.binary_search_by_key(&entry.epoch, |e| e.epoch) else {
            continue;
        };
        if master[j].start != entry.start {
            continue;
        }
        let common = end_of(&replica, i, replica_end).min(end_of(&master, j, master_end));
        return Some(SharedTerm {
            epoch: entry.epoch,
            masters_current: j + 1 == master.len(),
            common,
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn e(epoch: u64, start: u64) -> EpochEntry {
        EpochEntry { epoch, start }
    }

    #[test]
    fn begin_record_and_cut_follow_the_rules() {
        let entries = vec![e(1, 0), e(3, 100)];
        assert_eq!(
            begin(&entries, 4, 150),
            Ok(vec![e(1, 0), e(3, 100), e(4, 150)])
        );
        assert!(begin(&entries, 3, 150).unwrap_err().contains("not above"));
        assert_eq!(record(&entries, e(3, 100)), Ok(None), "already recorded");
        assert_eq!(
            record(&entries, e(5, 120)),
            Ok(Some(vec![e(1, 0), e(3, 100), e(5, 120)]))
        );
        assert!(record(&entries, e(2, 120)).is_err(), "older epoch");
        assert!(
            record(&entries, e(5, 90)).is_err(),
            "starts before the last"
        );
        assert!(record(&[], e(0, 0)).is_err(), "epoch 0 is implicit");
        assert_eq!(kept_below(&entries, 100, true), vec![e(1, 0)]);
        assert_eq!(kept_below(&entries, 100, false), entries);
        assert_eq!(kept_below(&entries, 0, true), vec![]);
    }

    #[test]
    fn encode_decode_round_trip_and_format() {
        let entries = vec![e(1, 0), e(2, 100), e(5, 100), e(7, 4096)];
        let bytes = encode(&entries);
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.starts_with("4\n"), "{text}");
        assert!(text.ends_with("1-0\n2-100\n5-100\n7-4096\n"), "{text}");
        assert_eq!(decode(&bytes).unwrap(), entries);
        assert_eq!(decode(&encode(&[])).unwrap(), vec![]);
    }

    #[test]
    fn corrupt_files_are_reasons_not_panics() {
        let good = encode(&[e(1, 0), e(2, 10)]);
        let mut flipped = good.clone();
        let last = flipped.len() - 2;
        flipped[last] ^= 1;
        assert!(decode(&flipped).unwrap_err().contains("CRC"));
        assert!(decode(b"").is_err());
        assert!(decode(b"x\n0\n").unwrap_err().contains("count"));
        assert!(decode(b"9999999\n0\n").unwrap_err().contains("count"));
        let wrong_count = format!("3\n{}\n1-0\n", crc32fast::hash(b"1-0\n"));
        assert!(decode(wrong_count.as_bytes()).unwrap_err().contains("3"));
        let decreasing = encode(&[e(2, 0), e(1, 10)]);
        assert!(decode(&decreasing).unwrap_err().contains("increase"));
        let backwards = encode(&[e(1, 10), e(2, 5)]);
        assert!(decode(&backwards).unwrap_err().contains("before"));
        let zero = encode(&[e(0, 0)]);
        assert!(decode(&zero).unwrap_err().contains("implicit"));
    }

    #[test]
    fn load_and_store_through_the_file() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path()).unwrap(), vec![]);
        store(dir.path(), &[e(1, 0), e(3, 50)]).unwrap();
        assert_eq!(load(dir.path()).unwrap(), vec![e(1, 0), e(3, 50)]);
        std::fs::write(epoch_file(dir.path()), b"1\n5\n1-0\n").unwrap();
        assert!(matches!(load(dir.path()), Err(EpochError::Corrupt { .. })));
        assert!(store(dir.path(), &[e(3, 0), e(2, 0)]).is_err());
    }

    #[test]
    fn common_point_cases() {
        use CommonPoint::{At, Disjoint};
        // Same history, replica behind: it just streams.
        assert_eq!(last_common_point(&[e(1, 0)], 50, &[e(1, 0)], 80), At(50));
        // The replica wrote past the point where the master's epoch 1 ended.
        assert_eq!(
            last_common_point(&[e(1, 0)], 120, &[e(1, 0), e(2, 100)], 300),
            At(100)
        );
        // The replica's own newer epoch is unknown to the master.
        assert_eq!(
            last_common_point(&[e(1, 0), e(3, 90)], 200, &[e(1, 0), e(2, 100)], 300),
            At(90)
        );
        // Same epoch, different start: not the same term; fall back to the older epoch.
        assert_eq!(
            last_common_point(&[e(1, 0), e(2, 40)], 70, &[e(1, 0), e(2, 50)], 90),
            At(40)
        );
        // Pre-epoch replica, master began epoch 1 at 100: they share [0, 100).
        assert_eq!(last_common_point(&[], 150, &[e(1, 100)], 300), At(100));
        assert_eq!(last_common_point(&[], 60, &[e(1, 100)], 300), At(60));
        // Two pre-epoch logs: the shorter end (the CRC check judges the bytes).
        assert_eq!(last_common_point(&[], 60, &[], 30), At(30));
        // Nothing in common.
        assert_eq!(last_common_point(&[e(1, 0)], 60, &[e(2, 0)], 30), Disjoint);
        assert_eq!(Disjoint.offset(), 0);
        let shared = shared_term(&[e(1, 0), e(2, 50)], 90, &[e(1, 0), e(2, 50)], 70).unwrap();
        assert_eq!(
            (shared.epoch, shared.masters_current, shared.common),
            (2, true, 70)
        );
        let shared = shared_term(&[e(1, 0)], 90, &[e(1, 0), e(2, 50)], 70).unwrap();
        assert_eq!(
            (shared.epoch, shared.masters_current, shared.common),
            (1, false, 50)
        );
        assert_eq!(
            shared_term(&[], 9, &[], 5).map(|s| s.masters_current),
            Some(true)
        );
    }

    /// Two logs built from one shared history and then diverging: a random list of terms,
    /// each writing some bytes; the replica shares the first `shared` terms (and a prefix of
    /// the next), then writes its own terms with epochs the master never used.
    fn histories() -> impl Strategy<Value = (Vec<u64>, Vec<u64>, usize, u64, Vec<u64>, Vec<u64>)> {
        (
            prop::collection::vec(0u64..50, 1..6),
            prop::collection::vec(0u64..50, 0..4),
            0usize..6,
            0u64..50,
            prop::collection::vec(0u64..50, 0..4),
            prop::collection::vec(1u64..4, 1..10),
        )
            .prop_map(|(common, master_more, shared, cut, replica_more, gaps)| {
                (common, master_more, shared, cut, replica_more, gaps)
            })
    }

    /// Builds (entries, end) from term lengths with the given epochs.
    fn build(terms: &[(u64, u64)]) -> (Vec<EpochEntry>, u64) {
        let mut entries = Vec::new();
        let mut at = 0;
        for &(epoch, len) in terms {
            entries.push(e(epoch, at));
            at += len;
        }
        (entries, at)
    }

    proptest! {
        /// The common point is at most either end, and exactly the length of the shared
        /// prefix of the two histories (bytes are identified by (epoch, offset)).
        #[test]
        fn common_point_is_the_shared_prefix(
            (common, master_more, shared, cut, replica_more, gaps) in histories()
        ) {
            let shared = shared.min(common.len());
            // Shared terms: epochs 1, 1+g1, ...; the master continues with more terms.
            let mut epoch = 0;
            let mut gaps = gaps.into_iter().cycle();
            let mut shared_terms = Vec::new();
            for len in &common[..shared] {
                epoch += gaps.next().unwrap_or(1);
                shared_terms.push((epoch, *len));
            }
            let mut master_terms = shared_terms.clone();
            let mut master_epoch = epoch;
            for len in common[shared..].iter().chain(&master_more) {
                master_epoch += gaps.next().unwrap_or(1);
                master_terms.push((master_epoch, *len));
            }
            // The replica: the shared terms, then maybe part of the master's next term (it
            // followed that master for a while), then its own terms on odd epochs above
            // everything the master used (never the master's).
            let mut replica_terms = shared_terms.clone();
            if let Some(&(next_epoch, len)) = master_terms.get(shared) {
                replica_terms.push((next_epoch, cut.min(len)));
            }
            let mut own = master_epoch * 2 + 1;
            for len in &replica_more {
                replica_terms.push((own, *len));
                own += 2;
            }
            let (master, master_end) = build(&master_terms);
            let (replica, replica_end) = build(&replica_terms);
            // The true shared prefix: walk both term lists while they agree.
            let mut truth = 0;
            let mut at = 0;
            for (m, r) in master_terms.iter().zip(&replica_terms) {
                if m.0 != r.0 { break; }
                truth = at + m.1.min(r.1);
                if m.1 != r.1 { break; }
                at += m.1;
            }
            let point = last_common_point(&replica, replica_end, &master, master_end).offset();
            prop_assert!(point <= replica_end && point <= master_end);
            // Zero-length terms make several epochs share one start, so equal (epoch, start)
            // pairs are the identity of a term: the walk finds the newest shared one.
            prop_assert_eq!(point, truth, "master {:?} replica {:?}", master, replica);
        }

        /// Any input: no panic, the point never exceeds either end.
        #[test]
        fn common_point_is_bounded(
            r in prop::collection::vec((1u64..20, 0u64..200), 0..8),
            m in prop::collection::vec((1u64..20, 0u64..200), 0..8),
            re in 0u64..300,
            me in 0u64..300,
        ) {
            let norm = |mut v: Vec<(u64, u64)>| {
                v.sort();
                v.dedup_by_key(|x| x.0);
                let mut starts: Vec<u64> = v.iter().map(|x| x.1).collect();
                starts.sort();
                v.iter().zip(starts).map(|(x, s)| e(x.0, s)).collect::<Vec<_>>()
            };
            let (r, m) = (norm(r), norm(m));
            prop_assert!(validate(&r).is_ok());
            let point = last_common_point(&r, re, &m, me).offset();
            prop_assert!(point <= re && point <= me);
        }
    }
}
