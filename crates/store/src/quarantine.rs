//! Quarantine: CommitLog ranges the store keeps but cannot serve.
//!
//! Two kinds of range end up here instead of stopping the store or cutting acknowledged data:
//! - [`QuarantineKind::Damaged`]: bytes in the middle of the log that fail verification (a
//!   flipped byte, a zeroed block) while valid records follow them. The torn-tail cut applies
//!   only when nothing valid follows; a damaged range with valid records after it stays in the
//!   log, is listed here, and the records after it stay readable.
//! - [`QuarantineKind::Undispatchable`]: a record that verifies but that the dispatcher cannot
//!   index (a topic name no ConsumeQueue file can carry, written before names were checked).
//!   Dispatch skips it and goes on.
//!
//! The list is bounded by [`QUARANTINE_LIST_MAX`]: past it, ranges are still counted (and
//! still skipped) but no longer listed one by one. It is derived state: recovery, a read, or a
//! full verification finds the same ranges again after a restart.

use std::collections::BTreeMap;

/// Ranges listed one by one at most; more are counted only. Recovery never needs more: a
/// log with more damaged ranges than this is refused (`OpenError::TooDamaged`), so every
/// damaged range the dispatcher must jump over is listed.
pub const QUARANTINE_LIST_MAX: usize = 4096;

/// Why a range is quarantined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuarantineKind {
    /// The bytes fail verification; valid records follow them.
    Damaged,
    /// A valid record the dispatcher cannot index.
    Undispatchable,
}

impl QuarantineKind {
    /// A stable lower-case name for reports and metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            QuarantineKind::Damaged => "damaged",
            QuarantineKind::Undispatchable => "undispatchable",
        }
    }
}

/// One quarantined CommitLog range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuarantinedRange {
    /// Where the range starts in the CommitLog.
    pub phys_offset: u64,
    /// Its length in bytes (for an undispatchable record, the record's size).
    pub len: u64,
    /// Why it is quarantined.
    pub kind: QuarantineKind,
    /// What verification or dispatch said about it.
    pub reason: String,
}

impl QuarantinedRange {
    /// First position after the range.
    pub fn end(&self) -> u64 {
        self.phys_offset + self.len
    }
}

/// The quarantined ranges of one store, by start offset.
#[derive(Debug, Clone, Default)]
pub struct Quarantine {
    ranges: BTreeMap<u64, QuarantinedRange>,
    total: u64,
    not_listed: u64,
    /// Undispatchable records found since the store opened (never decremented: a counter for
    /// metrics, unlike `total`, which follows cuts and retention).
    undispatchable_found: u64,
}

impl Quarantine {
    /// Adds a range; returns `false` when a range at that offset was already known.
    pub fn add(&mut self, range: QuarantinedRange) -> bool {
        if self.ranges.contains_key(&range.phys_offset) {
            return false;
        }
        self.total += 1;
        if range.kind == QuarantineKind::Undispatchable {
            self.undispatchable_found += 1;
        }
        if self.ranges.len() >= QUARANTINE_LIST_MAX {
            self.not_listed += 1;
            return true;
        }
        self.ranges.insert(range.phys_offset, range);
        true
    }

    /// The listed range that covers `phys_offset`, if any.
    pub fn covering(&self, phys_offset: u64) -> Option<&QuarantinedRange> {
        self.ranges
            .range(..=phys_offset)
            .next_back()
            .map(|(_, range)| range)
            .filter(|range| phys_offset < range.end())
    }

    /// The first damaged range starting at or after `phys_offset` (the dispatcher stops its
    /// reads there and jumps over it).
    pub fn damaged_at_or_after(&self, phys_offset: u64) -> Option<&QuarantinedRange> {
        self.ranges
            .range(phys_offset..)
            .map(|(_, range)| range)
            .find(|range| range.kind == QuarantineKind::Damaged)
    }

    /// The first damaged range starting in `[from, to)`: a queue whose offsets jump across
    /// it lost the records in between to the damage.
    pub fn damaged_between(&self, from: u64, to: u64) -> Option<&QuarantinedRange> {
        self.damaged_at_or_after(from)
            .filter(|range| range.phys_offset < to)
    }

    /// Forgets ranges that end at or below `phys_offset` (retention deleted them).
    pub fn delete_below(&mut self, phys_offset: u64) {
        let before = self.ranges.len();
        self.ranges.retain(|_, range| range.end() > phys_offset);
        self.total -= (before - self.ranges.len()) as u64;
    }

    /// What is quarantined now.
    pub fn snapshot(&self) -> QuarantineSnapshot {
        QuarantineSnapshot {
            total: self.total,
            not_listed: self.not_listed,
            ranges: self.ranges.values().cloned().collect(),
        }
    }

    /// Ranges known (listed or only counted).
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Undispatchable records found since the store opened.
    pub fn undispatchable_found(&self) -> u64 {
        self.undispatchable_found
    }
}

/// A copy of the quarantine for reports, metrics and the admin command.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuarantineSnapshot {
    /// Ranges quarantined since the store opened (listed or not).
    pub total: u64,
    /// Ranges counted but not listed because the list was full.
    pub not_listed: u64,
    /// The listed ranges, by offset.
    pub ranges: Vec<QuarantinedRange>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(phys_offset: u64, len: u64) -> QuarantinedRange {
        QuarantinedRange {
            phys_offset,
            len,
            kind: QuarantineKind::Damaged,
            reason: "test".into(),
        }
    }

    #[test]
    fn covering_finds_the_range_holding_an_offset() {
        let mut quarantine = Quarantine::default();
        assert!(quarantine.add(range(100, 50)));
        assert!(!quarantine.add(range(100, 50)));
        assert_eq!(quarantine.covering(99), None);
        assert_eq!(quarantine.covering(100).map(|r| r.phys_offset), Some(100));
        assert_eq!(quarantine.covering(149).map(|r| r.phys_offset), Some(100));
        assert_eq!(quarantine.covering(150), None);
        assert_eq!(quarantine.total(), 1);
    }

    #[test]
    fn retention_forgets_ranges_it_deleted() {
        let mut quarantine = Quarantine::default();
        quarantine.add(range(0, 10));
        quarantine.add(range(20, 10));
        quarantine.delete_below(25);
        let snapshot = quarantine.snapshot();
        assert_eq!(snapshot.total, 1);
        assert_eq!(snapshot.ranges, vec![range(20, 10)]);
    }

    #[test]
    fn list_is_bounded_but_counting_goes_on() {
        let mut quarantine = Quarantine::default();
        for i in 0..(QUARANTINE_LIST_MAX as u64 + 5) {
            quarantine.add(range(i * 10, 5));
        }
        let snapshot = quarantine.snapshot();
        assert_eq!(snapshot.ranges.len(), QUARANTINE_LIST_MAX);
        assert_eq!(snapshot.not_listed, 5);
        assert_eq!(snapshot.total, QUARANTINE_LIST_MAX as u64 + 5);
    }
}
