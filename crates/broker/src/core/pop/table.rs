//! The pop table of one master term: for each (group, topic, queue) consumed with receive and
//! ack, which offsets are in flight (with their delivery attempt, invisibility deadline and
//! current handle), which are done above the committed offset, and where fresh messages
//! start. It is changed only by the operations of this module, each mirroring one pop record
//! (`super::record`), and rebuilt from those records by [`Table::replay`].
//!
//! Invariants (per queue state):
//! 1. `base <= next`; every slot and every done offset lies in `[base, next)`; offsets at or
//!    past `next` were never delivered.
//! 2. `next - base <= window_max`: the in-flight and done sets are bounded by the window.
//! 3. An offset in `[base, next)` that is neither a slot nor done (a delivery whose record
//!    was never acknowledged) is made a slot of attempt 0 that is already visible
//!    ([`Table::fill_gaps`]), so it is delivered again, never skipped.
//! 4. A slot marked `busy` has a record being written for it (a delivery, an ack or a
//!    renewal): no other operation touches it until that write ends, so the log order of the
//!    records of one slot is the order of the changes made here.
//! 5. A handle is never reused within a master term, and handles of a later term are above
//!    every handle of an earlier one ([`Table::new`] starts at `epoch << 32`).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::record::{PopOp, PopRecord};

/// A consumed queue: (group, topic, queue).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// Consumer group.
    pub group: String,
    /// Topic.
    pub topic: String,
    /// Queue.
    pub queue_id: u32,
}

/// One delivered (or to-be-redelivered) offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Deliveries so far (0: delivered by no acknowledged record yet).
    pub attempt: u32,
    /// When it becomes visible again (ms since the Unix epoch).
    pub deadline_ms: i64,
    /// The handle of its current delivery.
    pub handle: u64,
    /// A record about it is being written.
    pub busy: bool,
}

/// The state of one consumed queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueState {
    /// The offsets' reset generation this state belongs to.
    pub generation: u64,
    /// Everything below is consumed (the committed offset this state derives).
    pub base: u64,
    /// The first offset never delivered.
    pub next: u64,
    /// In-flight offsets.
    pub slots: BTreeMap<u64, Slot>,
    /// Offsets consumed above `base`.
    pub done: BTreeSet<u64>,
}

impl QueueState {
    fn new(generation: u64, base: u64) -> QueueState {
        QueueState {
            generation,
            base,
            next: base,
            slots: BTreeMap::new(),
            done: BTreeSet::new(),
        }
    }

    /// Moves `base` up to `to` (a committed offset learnt from the offset view), dropping
    /// what lies below.
    pub fn raise_base(&mut self, to: u64) {
        if to <= self.base {
            return;
        }
        self.base = to;
        self.next = self.next.max(to);
        self.slots = self.slots.split_off(&to);
        self.done = self.done.split_off(&to);
    }

    /// Moves `base` over the done offsets that follow it; returns whether it moved.
    pub fn advance(&mut self) -> bool {
        let before = self.base;
        while self.done.remove(&self.base) {
            self.base += 1;
        }
        self.base != before
    }

    /// Whether any slot is invisible at `now_ms` or busy (a FIFO queue then delivers nothing).
    pub fn has_invisible(&self, now_ms: i64) -> bool {
        self.slots
            .values()
            .any(|s| s.busy || (s.attempt > 0 && s.deadline_ms > now_ms))
    }

    /// The visible slots at `now_ms`, in offset order, at most `max`.
    pub fn visible(&self, now_ms: i64, max: usize) -> Vec<u64> {
        self.slots
            .iter()
            .filter(|(_, s)| !s.busy && (s.attempt == 0 || s.deadline_ms <= now_ms))
            .take(max)
            .map(|(o, _)| *o)
            .collect()
    }

    /// The earliest deadline of an invisible slot.
    pub fn next_deadline(&self) -> Option<i64> {
        self.slots
            .values()
            .filter(|s| !s.busy && s.attempt > 0)
            .map(|s| s.deadline_ms)
            .min()
    }
}

/// Why a handle is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandleError {
    /// No such delivery now: acked, redelivered since, made void by a reset, or never given.
    Expired,
    /// Another request about this delivery is being written.
    Busy,
}

/// The pop table of one master term.
#[derive(Debug)]
pub struct Table {
    queues: HashMap<Key, QueueState>,
    next_handle: u64,
    /// Live records: queue offset in the pop topic → (key, generation, most offset named).
    records: BTreeMap<u64, (Key, u64, u64)>,
    /// The pop topic's end as far as this table has seen.
    records_end: u64,
    /// Most offsets between a queue's base and next.
    pub window_max: u64,
    /// Most queues tracked.
    pub queues_max: usize,
}

impl Table {
    /// An empty table of master term `epoch`, whose records start at `low`.
    pub fn new(epoch: u64, low: u64, window_max: u64, queues_max: usize) -> Table {
        Table {
            queues: HashMap::new(),
            next_handle: (epoch << 32).max(1),
            records: BTreeMap::new(),
            records_end: low,
            window_max,
            queues_max,
        }
    }

    /// A fresh handle.
    pub fn handle(&mut self) -> u64 {
        self.next_handle += 1;
        self.next_handle
    }

    /// Number of queues tracked.
    pub fn len(&self) -> usize {
        self.queues.len()
    }

    /// Whether no queue is tracked.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// The state of `key` for reset generation `generation` and committed offset
    /// `committed` (the queue's start when `None`): created when missing, started over when
    /// the generation changed (a reset made its deliveries void), raised to `committed`.
    /// `None` when the table tracks `queues_max` queues already.
    pub fn state(&mut self, key: &Key, generation: u64, committed: u64) -> Option<&mut QueueState> {
        if !self.queues.contains_key(key) && self.queues.len() >= self.queues_max {
            return None;
        }
        let state = self
            .queues
            .entry(key.clone())
            .or_insert_with(|| QueueState::new(generation, committed));
        if state.generation != generation {
            *state = QueueState::new(generation, committed);
        }
        state.raise_base(committed);
        Some(state)
    }

    /// The state of `key` as it is (no view consulted).
    pub fn get_mut(&mut self, key: &Key) -> Option<&mut QueueState> {
        self.queues.get_mut(key)
    }

    /// Notes that record `record` landed at `position` in the pop topic.
    pub fn note_record(&mut self, position: u64, record: &PopRecord) {
        let key = Key {
            group: record.group.clone(),
            topic: record.topic.clone(),
            queue_id: record.queue_id,
        };
        self.records
            .insert(position, (key, record.generation, record.max_offset()));
        self.records_end = self.records_end.max(position + 1);
    }

    /// The first pop-topic position whose record still matters: records below it name only
    /// consumed offsets or a void generation, so a rebuild may start there.
    pub fn low_watermark(&mut self) -> u64 {
        while let Some(entry) = self.records.first_entry() {
            let (key, generation, max_offset) = entry.get();
            let obsolete = self
                .queues
                .get(key)
                .is_none_or(|s| s.generation != *generation || s.base > *max_offset);
            if !obsolete {
                return *entry.key();
            }
            entry.remove();
        }
        self.records_end
    }

    /// Applies a record read back from the log (the rebuild), with the reset generation and
    /// committed offset the offset view holds for its queue now.
    pub fn replay(&mut self, position: u64, record: &PopRecord, generation: u64, committed: u64) {
        if record.generation != generation {
            return;
        }
        let key = Key {
            group: record.group.clone(),
            topic: record.topic.clone(),
            queue_id: record.queue_id,
        };
        self.note_record(position, record);
        let Some(state) = self.state(&key, generation, committed) else {
            return;
        };
        let mut highest = 0;
        match &record.op {
            PopOp::Receive {
                scan_from,
                scan_to,
                deadline_ms,
                handle,
                entries,
            } => {
                highest = *handle;
                for offset in (*scan_from..*scan_to).filter(|o| *o >= state.base) {
                    state.done.insert(offset);
                }
                for (offset, attempt) in entries.iter().filter(|(o, _)| *o >= state.base) {
                    state.done.remove(offset);
                    state.slots.insert(
                        *offset,
                        Slot {
                            attempt: *attempt,
                            deadline_ms: *deadline_ms,
                            handle: *handle,
                            busy: false,
                        },
                    );
                }
                state.next = state.next.max(*scan_to);
                if let Some(last) = entries.iter().map(|(o, _)| *o).max() {
                    state.next = state.next.max(last + 1);
                }
            }
            PopOp::Ack { entries } => {
                for (offset, handle) in entries {
                    if state.slots.get(offset).is_some_and(|s| s.handle == *handle) {
                        state.slots.remove(offset);
                        state.done.insert(*offset);
                    }
                }
            }
            PopOp::Renew {
                offset,
                handle,
                new_handle,
                deadline_ms,
            } => {
                highest = *new_handle;
                if let Some(slot) = state.slots.get_mut(offset).filter(|s| s.handle == *handle) {
                    slot.handle = *new_handle;
                    slot.deadline_ms = *deadline_ms;
                }
            }
        }
        state.advance();
        self.next_handle = self.next_handle.max(highest);
    }

    /// Invariant 3, after a rebuild: offsets between a queue's base and next that no record
    /// accounts for are delivered again.
    pub fn fill_gaps(&mut self) {
        for state in self.queues.values_mut() {
            for offset in state.base..state.next {
                if !state.slots.contains_key(&offset) && !state.done.contains(&offset) {
                    state.slots.insert(
                        offset,
                        Slot {
                            attempt: 0,
                            deadline_ms: 0,
                            handle: 0,
                            busy: false,
                        },
                    );
                }
            }
        }
    }

    /// Marks the delivery `handle` of `offset` busy for an ack or a renewal.
    ///
    /// # Errors
    /// [`HandleError`] when the handle is not the offset's current delivery.
    pub fn claim(&mut self, key: &Key, offset: u64, handle: u64) -> Result<(), HandleError> {
        let slot = self
            .queues
            .get_mut(key)
            .and_then(|s| s.slots.get_mut(&offset))
            .filter(|s| s.handle == handle && s.attempt > 0)
            .ok_or(HandleError::Expired)?;
        if slot.busy {
            return Err(HandleError::Busy);
        }
        slot.busy = true;
        Ok(())
    }

    /// Ends a claim whose record was not written: the slot is as before.
    pub fn release(&mut self, key: &Key, offset: u64, handle: u64) {
        if let Some(slot) = self
            .queues
            .get_mut(key)
            .and_then(|s| s.slots.get_mut(&offset))
            .filter(|s| s.handle == handle)
        {
            slot.busy = false;
        }
    }

    /// An ack record of claimed slots was written: they are done. Returns whether the queue's
    /// base moved.
    pub fn acked(&mut self, key: &Key, entries: &[(u64, u64)]) -> bool {
        let Some(state) = self.queues.get_mut(key) else {
            return false;
        };
        for (offset, handle) in entries {
            if state.slots.get(offset).is_some_and(|s| s.handle == *handle) {
                state.slots.remove(offset);
                state.done.insert(*offset);
            }
        }
        state.advance()
    }

    /// A renewal of a claimed slot was written.
    pub fn renewed(
        &mut self,
        key: &Key,
        offset: u64,
        handle: u64,
        new_handle: u64,
        deadline_ms: i64,
    ) {
        if let Some(slot) = self
            .queues
            .get_mut(key)
            .and_then(|s| s.slots.get_mut(&offset))
            .filter(|s| s.handle == handle)
        {
            slot.handle = new_handle;
            slot.deadline_ms = deadline_ms;
            slot.busy = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        Key {
            group: "g".into(),
            topic: "t".into(),
            queue_id: 0,
        }
    }

    fn receive(from: u64, to: u64, handle: u64, entries: Vec<(u64, u32)>) -> PopRecord {
        PopRecord {
            group: "g".into(),
            topic: "t".into(),
            queue_id: 0,
            generation: 0,
            op: PopOp::Receive {
                scan_from: from,
                scan_to: to,
                deadline_ms: 1_000,
                handle,
                entries,
            },
        }
    }

    fn ack(entries: Vec<(u64, u64)>) -> PopRecord {
        PopRecord {
            op: PopOp::Ack { entries },
            ..receive(0, 0, 0, vec![])
        }
    }

    #[test]
    fn replay_keeps_unacked_deliveries_and_skips_filtered_offsets() {
        let mut t = Table::new(1, 0, 100, 10);
        // Offsets 0..4 scanned, 1 filtered out; 0, 2, 3 delivered with handle 5.
        t.replay(0, &receive(0, 4, 5, vec![(0, 1), (2, 1), (3, 1)]), 0, 0);
        t.replay(1, &ack(vec![(0, 5), (3, 5)]), 0, 0);
        let s = t.get_mut(&key()).unwrap();
        assert_eq!(s.base, 2, "0 acked and 1 filtered: base moves over both");
        assert_eq!(s.slots.keys().copied().collect::<Vec<_>>(), vec![2]);
        assert_eq!(s.done.iter().copied().collect::<Vec<_>>(), vec![3]);
        assert_eq!(s.next, 4);
        assert!(t.handle() > 5, "handles continue past every replayed one");
    }

    #[test]
    fn an_ack_with_a_stale_handle_is_refused_and_changes_nothing() {
        let mut t = Table::new(1, 0, 100, 10);
        t.replay(0, &receive(0, 1, 5, vec![(0, 1)]), 0, 0);
        assert_eq!(t.claim(&key(), 0, 4), Err(HandleError::Expired));
        t.replay(
            1,
            &PopRecord {
                op: PopOp::Renew {
                    offset: 0,
                    handle: 5,
                    new_handle: 9,
                    deadline_ms: 7,
                },
                ..receive(0, 0, 0, vec![])
            },
            0,
            0,
        );
        assert_eq!(t.claim(&key(), 0, 5), Err(HandleError::Expired));
        assert_eq!(t.claim(&key(), 0, 9), Ok(()));
        assert_eq!(t.claim(&key(), 0, 9), Err(HandleError::Busy));
        assert!(t.acked(&key(), &[(0, 9)]));
        assert_eq!(t.claim(&key(), 0, 9), Err(HandleError::Expired));
    }

    #[test]
    fn records_of_a_void_generation_are_ignored_and_a_reset_starts_over() {
        let mut t = Table::new(1, 0, 100, 10);
        t.replay(0, &receive(0, 2, 5, vec![(0, 1), (1, 1)]), 1, 7);
        assert!(
            t.get_mut(&key()).is_none(),
            "generation 0 record under generation 1"
        );
        t.replay(1, &receive(0, 2, 5, vec![(0, 1), (1, 1)]), 0, 0);
        let s = t.state(&key(), 1, 7).unwrap();
        assert_eq!((s.base, s.next, s.slots.len()), (7, 7, 0));
    }

    #[test]
    fn gaps_left_by_unwritten_deliveries_are_delivered_again() {
        let mut t = Table::new(1, 0, 100, 10);
        // A receive of 0..2 was never acknowledged; a later one of 2..4 was.
        t.replay(0, &receive(2, 4, 5, vec![(2, 1), (3, 1)]), 0, 0);
        t.fill_gaps();
        let s = t.get_mut(&key()).unwrap();
        assert_eq!(s.visible(0, 10), vec![0, 1]);
        assert!(s.has_invisible(0));
    }

    #[test]
    fn the_low_watermark_passes_records_that_name_only_consumed_offsets() {
        let mut t = Table::new(1, 10, 100, 10);
        t.replay(10, &receive(0, 2, 5, vec![(0, 1), (1, 1)]), 0, 0);
        t.replay(11, &ack(vec![(0, 5)]), 0, 0);
        assert_eq!(t.low_watermark(), 10, "offset 1 is still in flight");
        t.replay(12, &ack(vec![(1, 5)]), 0, 0);
        assert_eq!(t.low_watermark(), 13);
    }

    #[test]
    fn raising_the_base_drops_what_lies_below_and_the_queue_bound_holds() {
        let mut t = Table::new(1, 0, 100, 1);
        t.replay(0, &receive(0, 3, 5, vec![(0, 1), (1, 1), (2, 1)]), 0, 0);
        let s = t.state(&key(), 0, 2).unwrap();
        assert_eq!(s.slots.keys().copied().collect::<Vec<_>>(), vec![2]);
        let other = Key {
            queue_id: 1,
            ..key()
        };
        assert!(t.state(&other, 0, 0).is_none(), "one queue at most");
    }
}
