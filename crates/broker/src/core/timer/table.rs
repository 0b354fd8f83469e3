//! The table of pending timer messages of one master term: which timer records (by queue
//! offset in `RMQ_SYS_FERROMQ_TIMER`) are due when, and which op records (fired, recalled,
//! dead-lettered) still matter for a rebuild.
//!
//! Invariants:
//! 1. `pending` and `by_offset` hold the same entries.
//! 2. At most `tracked_max` entries: [`TimerTable::insert`] refuses more (the send is refused,
//!    never dropped).
//! 3. An offset below [`TimerTable::timer_low`] is settled; an op record below
//!    [`TimerTable::op_low`] names only settled offsets, so a rebuild may start at the two
//!    watermarks.

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Pending timer messages.
#[derive(Debug)]
pub struct TimerTable {
    pending: BTreeSet<(i64, u64)>,
    by_offset: HashMap<u64, i64>,
    /// Offsets being fired or recalled now (a record for them is being written).
    busy: BTreeSet<u64>,
    /// Op records: position in the op queue → timer offset it settles.
    ops: BTreeMap<u64, u64>,
    /// The timer queue's end as far as this table has seen.
    timer_end: u64,
    op_end: u64,
    /// Most entries.
    pub tracked_max: usize,
}

impl TimerTable {
    /// An empty table whose queues start at `timer_low` and `op_low`.
    pub fn new(timer_low: u64, op_low: u64, tracked_max: usize) -> TimerTable {
        TimerTable {
            pending: BTreeSet::new(),
            by_offset: HashMap::new(),
            busy: BTreeSet::new(),
            ops: BTreeMap::new(),
            timer_end: timer_low,
            op_end: op_low,
            tracked_max,
        }
    }

    /// Number of pending entries.
    pub fn len(&self) -> usize {
        self.by_offset.len()
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.by_offset.is_empty()
    }

    /// Whether another entry fits.
    pub fn has_room(&self) -> bool {
        self.by_offset.len() < self.tracked_max
    }

    /// Tracks the timer record at `offset`, due at `due_ms`; `false` when full. Idempotent.
    pub fn insert(&mut self, offset: u64, due_ms: i64) -> bool {
        if self.by_offset.contains_key(&offset) {
            return true;
        }
        if !self.has_room() {
            return false;
        }
        self.timer_end = self.timer_end.max(offset + 1);
        self.by_offset.insert(offset, due_ms);
        self.pending.insert((due_ms, offset));
        true
    }

    /// Notes an op record at `position` settling `offset`, and settles it.
    pub fn settle(&mut self, position: u64, offset: u64) {
        self.ops.insert(position, offset);
        self.op_end = self.op_end.max(position + 1);
        self.remove(offset);
    }

    /// Drops the entry of a timer record that was not acknowledged (its send failed).
    pub fn forget(&mut self, offset: u64) {
        self.remove(offset);
    }

    /// Tracks a timer record found by a rebuild, whatever the bound (it was accepted under
    /// it, perhaps with another setting): never drops one.
    pub fn insert_recovered(&mut self, offset: u64, due_ms: i64) {
        self.timer_end = self.timer_end.max(offset + 1);
        if self.by_offset.insert(offset, due_ms).is_none() {
            self.pending.insert((due_ms, offset));
        }
    }

    fn remove(&mut self, offset: u64) {
        if let Some(due) = self.by_offset.remove(&offset) {
            self.pending.remove(&(due, offset));
        }
        self.busy.remove(&offset);
    }

    /// Up to `max` due entries at `now_ms` that nobody is firing, marked busy.
    pub fn take_due(&mut self, now_ms: i64, max: usize) -> Vec<u64> {
        let due: Vec<u64> = self
            .pending
            .iter()
            .take_while(|(due, _)| *due <= now_ms)
            .map(|(_, offset)| *offset)
            .filter(|offset| !self.busy.contains(offset))
            .take(max)
            .collect();
        self.busy.extend(due.iter().copied());
        due
    }

    /// Marks `offset` busy for a recall; `false` when it is not pending or is busy.
    pub fn claim(&mut self, offset: u64) -> bool {
        self.by_offset.contains_key(&offset) && self.busy.insert(offset)
    }

    /// Ends a claim whose op record was not written.
    pub fn release(&mut self, offset: u64) {
        self.busy.remove(&offset);
    }

    /// The due time of a pending entry.
    pub fn due_of(&self, offset: u64) -> Option<i64> {
        self.by_offset.get(&offset).copied()
    }

    /// Invariant 3: where a rebuild may start reading the timer queue.
    pub fn timer_low(&self) -> u64 {
        self.by_offset
            .keys()
            .min()
            .copied()
            .unwrap_or(self.timer_end)
    }

    /// Invariant 3: where a rebuild may start reading the op queue (dropping op records that
    /// name only settled offsets).
    pub fn op_low(&mut self) -> u64 {
        let timer_low = self.timer_low();
        while let Some(entry) = self.ops.first_entry() {
            if *entry.get() >= timer_low {
                return *entry.key();
            }
            entry.remove();
        }
        self.op_end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_entries_come_in_time_order_once_and_settle() {
        let mut t = TimerTable::new(0, 0, 10);
        assert!(t.insert(0, 300));
        assert!(t.insert(1, 100));
        assert!(t.insert(2, 200));
        assert!(t.insert(1, 100), "idempotent");
        assert_eq!(t.take_due(250, 10), vec![1, 2]);
        assert_eq!(
            t.take_due(250, 10),
            Vec::<u64>::new(),
            "busy ones are not taken twice"
        );
        t.settle(0, 1);
        t.release(2);
        assert_eq!(t.take_due(1_000, 10), vec![2, 0]);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn the_bound_refuses_more_and_watermarks_pass_settled_offsets() {
        let mut t = TimerTable::new(5, 7, 2);
        assert!(t.insert(5, 10) && t.insert(6, 20));
        assert!(!t.insert(7, 5), "full");
        assert_eq!(t.timer_low(), 5);
        t.settle(7, 5);
        assert_eq!(
            (t.timer_low(), t.op_low()),
            (6, 8),
            "the op for 5 is obsolete"
        );
        assert!(t.claim(6));
        assert!(!t.claim(6));
        t.settle(8, 6);
        assert_eq!((t.timer_low(), t.op_low()), (7, 9));
    }
}
