//! The table of half messages the checker tracks: every half from the checker's low watermark
//! on, pending or decided, rebuilt from the log (`load`) and kept current by sends, ENDs and
//! checks. Pure data: no I/O, no clock.
//!
//! Invariants:
//! 1. An entry is keyed by the half's queue offset in `RMQ_SYS_TRANS_HALF_TOPIC`; its state
//!    only moves forward: `Pending` → `Deciding` → `Decided`, or back from `Deciding` to
//!    `Pending` when the decision's write failed. A decided entry never becomes pending.
//! 2. The low watermark (`half_low`) is the queue offset of the first entry that is not
//!    decided (or the end of the half queue): every half below it is decided, so it is
//!    forgotten, and the op records below `op_low` all concern halves below `half_low`.
//!    A half being stored (appended, not yet inserted) holds a reservation at the table's
//!    end when it started; the low watermark never passes a reservation, so a half is never
//!    below the watermark when it is inserted, whatever order concurrent sends finish in.
//! 3. At most `tracked_max` entries are held; at the bound a new half is refused
//!    ([`Table::has_room`]), never dropped, so the table cannot grow without bound.
//! 4. The decisions of the last [`FORGOTTEN_MAX`] forgotten halves are kept (oldest dropped
//!    first) so a late END for one is answered with its decision.
//! 5. Inserting an entry that is already there changes nothing (a rebuild and a send may both
//!    report one half).

use std::collections::{BTreeMap, HashMap, VecDeque};

/// Decisions of forgotten halves (below the low watermark) kept to answer a late END.
pub const FORGOTTEN_MAX: usize = 65_536;

/// How a half message ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Committed: the real message was written to its topic.
    Commit,
    /// Rolled back: never exposed.
    Rollback,
    /// Checked `transactionCheckMax` times without an answer: moved to
    /// `TRANS_CHECK_MAX_TIME_TOPIC`, never exposed.
    Discard,
}

impl Decision {
    /// The op record's (and the metric label's) name.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Commit => "commit",
            Decision::Rollback => "rollback",
            Decision::Discard => "discard",
        }
    }
}

/// Where a half stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HalfState {
    /// Undecided.
    Pending,
    /// A decision is being written; other decisions wait for its outcome.
    Deciding(Decision),
    /// Decided, in the log.
    Decided(Decision),
}

/// One tracked half message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HalfEntry {
    /// CommitLog offset of the half record.
    pub phys_offset: u64,
    /// Producer group (`PGROUP`).
    pub producer_group: String,
    /// When the half was stored, ms since the epoch.
    pub store_timestamp_ms: i64,
    /// No check-back before `store_timestamp_ms + immunity_ms`.
    pub immunity_ms: u64,
    /// Check-backs recorded in the log so far.
    pub checks: u32,
    /// When the last check-back was recorded, ms (0: never).
    pub last_check_ms: i64,
    /// State.
    pub state: HalfState,
    /// Queue offset (in `RMQ_SYS_TRANS_OP_HALF_TOPIC`) of the first op record about this half.
    pub first_op_offset: Option<u64>,
    /// Loaded from the log by a rebuild (not sent to this master in its current term): a
    /// commit first looks for a copy already written (a crash between the copy and its op).
    pub recovered: bool,
    /// An "unknown" answer was recorded for this half since its last check.
    pub unknown_recorded: bool,
}

/// The tracked halves and the watermarks.
#[derive(Debug, Clone, Default)]
pub struct Table {
    entries: BTreeMap<u64, HalfEntry>,
    /// Every half below this queue offset is decided and forgotten.
    pub half_low: u64,
    /// Every op record below this queue offset concerns a half below `half_low`.
    pub op_low: u64,
    /// The op queue's next offset, as far as the table knows.
    pub op_end: u64,
    /// The half queue's next offset, as far as the table knows (a half acknowledged but not
    /// yet inserted is at or past it, so the low watermark never passes it).
    pub half_end: u64,
    /// The watermarks last committed to the log.
    pub committed: (u64, u64),
    tracked_max: usize,
    /// Entries not decided (kept with every change, so reading it is O(1)).
    undecided: usize,
    /// Halves being stored, by the table's end when they started (invariant 2).
    reservations: BTreeMap<u64, usize>,
    forgotten: HashMap<u64, Decision>,
    forgotten_order: VecDeque<u64>,
}

impl Table {
    /// An empty table starting at the given watermarks, holding at most `tracked_max` entries.
    pub fn new(half_low: u64, op_low: u64, tracked_max: usize) -> Table {
        Table {
            entries: BTreeMap::new(),
            half_low,
            op_low,
            op_end: op_low,
            half_end: half_low,
            committed: (half_low, op_low),
            tracked_max,
            undecided: 0,
            reservations: BTreeMap::new(),
            forgotten: HashMap::new(),
            forgotten_order: VecDeque::new(),
        }
    }

    /// Whether a new half may be tracked (invariant 3).
    pub fn has_room(&self) -> bool {
        self.entries.len() < self.tracked_max
    }

    /// Entries held now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The most entries held.
    pub fn tracked_max(&self) -> usize {
        self.tracked_max
    }

    /// Undecided halves (pending or being decided).
    pub fn pending_count(&self) -> usize {
        debug_assert_eq!(
            self.undecided,
            self.entries
                .values()
                .filter(|e| !matches!(e.state, HalfState::Decided(_)))
                .count()
        );
        self.undecided
    }

    /// Tracks a half at `queue_offset` unless it is tracked already or below the low
    /// watermark (invariant 4). A rebuild may pass the bound: what the log holds is tracked.
    pub fn insert(&mut self, queue_offset: u64, entry: HalfEntry) {
        if queue_offset < self.half_low {
            return;
        }
        self.half_end = self.half_end.max(queue_offset + 1);
        if let std::collections::btree_map::Entry::Vacant(vacant) = self.entries.entry(queue_offset)
        {
            if !matches!(entry.state, HalfState::Decided(_)) {
                self.undecided += 1;
            }
            vacant.insert(entry);
        }
    }

    /// The entry at `queue_offset`.
    pub fn get(&self, queue_offset: u64) -> Option<&HalfEntry> {
        self.entries.get(&queue_offset)
    }

    /// The entry at `queue_offset`, mutable.
    pub fn get_mut(&mut self, queue_offset: u64) -> Option<&mut HalfEntry> {
        self.entries.get_mut(&queue_offset)
    }

    /// Notes an op record at `op_offset` about the half at `queue_offset`.
    pub fn note_op(&mut self, queue_offset: u64, op_offset: u64) {
        self.op_end = self.op_end.max(op_offset + 1);
        if let Some(entry) = self.entries.get_mut(&queue_offset) {
            entry.first_op_offset = Some(
                entry
                    .first_op_offset
                    .map_or(op_offset, |o| o.min(op_offset)),
            );
        }
    }

    /// Applies a decision read from the log or just written (invariant 1: a decided entry
    /// keeps its first decision).
    pub fn decide(&mut self, queue_offset: u64, decision: Decision) {
        if let Some(entry) = self.entries.get_mut(&queue_offset) {
            if !matches!(entry.state, HalfState::Decided(_)) {
                entry.state = HalfState::Decided(decision);
                self.undecided -= 1;
            }
        }
    }

    /// Reserves a place for a half about to be stored; returns the floor to release.
    pub fn reserve(&mut self) -> u64 {
        let floor = self.half_end.max(self.half_low);
        *self.reservations.entry(floor).or_default() += 1;
        floor
    }

    /// Releases a reservation (the half is inserted, or its store failed).
    pub fn release(&mut self, floor: u64) {
        if let std::collections::btree_map::Entry::Occupied(mut held) =
            self.reservations.entry(floor)
        {
            *held.get_mut() -= 1;
            if *held.get() == 0 {
                held.remove();
            }
        }
    }

    /// Forgets the decided prefix below the lowest reservation and moves the half watermark
    /// to the first undecided half (or the table's end), never past a reservation and never
    /// back. O(halves forgotten): called after every decision, so decided halves do not wait
    /// for the checker to leave the table.
    pub fn forget_decided_prefix(&mut self) {
        let floor = self.reservations.keys().next().copied().unwrap_or(u64::MAX);
        while let Some((&offset, entry)) = self.entries.first_key_value() {
            let HalfState::Decided(decision) = entry.state else {
                break;
            };
            if offset >= floor {
                break;
            }
            self.entries.remove(&offset);
            self.forget(offset, decision);
        }
        let candidate = match self.entries.first_key_value() {
            Some((&offset, _)) => offset,
            None => self.half_end,
        };
        self.half_low = self.half_low.max(candidate.min(floor));
    }

    /// Advances both watermarks past the decided prefix (invariant 2), the half watermark at
    /// most to `half_end` (the queue's end as a rebuild read it) or the table's own end.
    /// Returns whether either moved. O(entries): the checker calls it once a run.
    pub fn advance(&mut self, half_end: u64) -> bool {
        let before = (self.half_low, self.op_low);
        self.half_end = self.half_end.max(half_end);
        self.forget_decided_prefix();
        let first_op = self
            .entries
            .values()
            .filter_map(|e| e.first_op_offset)
            .min();
        let op_low = first_op.unwrap_or(self.op_end);
        self.op_low = self.op_low.max(op_low);
        before != (self.half_low, self.op_low)
    }

    fn forget(&mut self, queue_offset: u64, decision: Decision) {
        if self.forgotten_order.len() >= FORGOTTEN_MAX {
            if let Some(oldest) = self.forgotten_order.pop_front() {
                self.forgotten.remove(&oldest);
            }
        }
        self.forgotten.insert(queue_offset, decision);
        self.forgotten_order.push_back(queue_offset);
    }

    /// The decision of a forgotten half, if it is still kept (invariant 4).
    pub fn forgotten(&self, queue_offset: u64) -> Option<Decision> {
        self.forgotten.get(&queue_offset).copied()
    }

    /// Pending entries due for a check at `now_ms` (immunity over, and no check within
    /// `interval_ms`), oldest first, at most `max`.
    pub fn due(&self, now_ms: i64, interval_ms: u64, max: usize) -> Vec<(u64, HalfEntry)> {
        self.entries
            .iter()
            .filter(|(_, e)| e.state == HalfState::Pending)
            .filter(|(_, e)| e.store_timestamp_ms.saturating_add(e.immunity_ms as i64) <= now_ms)
            .filter(|(_, e)| {
                e.last_check_ms == 0 || e.last_check_ms.saturating_add(interval_ms as i64) <= now_ms
            })
            .take(max)
            .map(|(offset, e)| (*offset, e.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn half(phys_offset: u64, store_timestamp_ms: i64) -> HalfEntry {
        HalfEntry {
            phys_offset,
            producer_group: "PG".into(),
            store_timestamp_ms,
            immunity_ms: 1_000,
            checks: 0,
            last_check_ms: 0,
            state: HalfState::Pending,
            first_op_offset: None,
            recovered: false,
            unknown_recorded: false,
        }
    }

    #[test]
    fn watermarks_advance_only_past_the_decided_prefix() {
        let mut table = Table::new(0, 0, 10);
        for q in 0..3 {
            table.insert(q, half(q * 100, 0));
        }
        table.note_op(1, 0);
        table.decide(1, Decision::Commit);
        assert!(!table.advance(3), "half 0 is pending: nothing moves");
        assert_eq!((table.half_low, table.op_low), (0, 0));
        table.note_op(0, 1);
        table.decide(0, Decision::Rollback);
        assert!(table.advance(3));
        assert_eq!(table.forgotten(0), Some(Decision::Rollback));
        assert_eq!(table.forgotten(1), Some(Decision::Commit));
        assert_eq!(
            table.half_low, 2,
            "halves 0 and 1 are decided and forgotten"
        );
        assert_eq!(table.op_low, 2, "both op records concern forgotten halves");
        assert_eq!(table.len(), 1);
        table.decide(2, Decision::Discard);
        table.advance(3);
        assert_eq!((table.half_low, table.len()), (3, 0));
        table.insert(1, half(100, 0));
        assert!(
            table.is_empty(),
            "a half below the low watermark is never tracked again"
        );
    }

    #[test]
    fn a_decided_half_keeps_its_first_decision() {
        let mut table = Table::new(0, 0, 10);
        table.insert(0, half(0, 0));
        table.decide(0, Decision::Commit);
        table.decide(0, Decision::Rollback);
        assert_eq!(
            table.get(0).unwrap().state,
            HalfState::Decided(Decision::Commit)
        );
        let mut again = half(0, 0);
        again.checks = 9;
        table.insert(0, again);
        assert_eq!(
            table.get(0).unwrap().checks,
            0,
            "a second insert changes nothing"
        );
    }

    #[test]
    fn due_respects_immunity_interval_and_batch_bound() {
        let mut table = Table::new(0, 0, 10);
        for q in 0..5 {
            table.insert(q, half(q, 0));
        }
        table.get_mut(1).unwrap().last_check_ms = 1_500;
        table.get_mut(2).unwrap().state = HalfState::Deciding(Decision::Commit);
        assert!(table.due(999, 500, 10).is_empty(), "immune for 1 s");
        let due: Vec<u64> = table
            .due(1_800, 500, 10)
            .into_iter()
            .map(|(q, _)| q)
            .collect();
        assert_eq!(due, vec![0, 3, 4]);
        let due: Vec<u64> = table
            .due(2_000, 500, 2)
            .into_iter()
            .map(|(q, _)| q)
            .collect();
        assert_eq!(due, vec![0, 1]);
    }

    #[test]
    fn the_watermark_never_passes_a_half_being_stored() {
        let mut table = Table::new(0, 0, 10);
        table.insert(0, half(0, 0));
        let slow = table.reserve();
        assert_eq!(slow, 1, "the next half lands at or past the table's end");
        // A later half is stored, tracked and decided before the slow one is inserted.
        table.insert(2, half(2, 0));
        table.decide(0, Decision::Commit);
        table.decide(2, Decision::Commit);
        table.forget_decided_prefix();
        assert_eq!(table.half_low, 1, "held at the reservation");
        assert!(
            table.get(2).is_some(),
            "a decided half above the reservation stays tracked"
        );
        table.insert(1, half(1, 0));
        table.release(slow);
        assert!(table.get(1).is_some(), "the slow half is tracked");
        table.decide(1, Decision::Rollback);
        table.forget_decided_prefix();
        assert_eq!((table.half_low, table.len()), (3, 0));
        assert_eq!(table.forgotten(2), Some(Decision::Commit));
    }

    #[test]
    fn room_ends_at_the_bound() {
        let mut table = Table::new(0, 0, 2);
        table.insert(0, half(0, 0));
        assert!(table.has_room());
        table.insert(1, half(1, 0));
        assert!(!table.has_room());
        assert_eq!(table.tracked_max(), 2);
    }
}
