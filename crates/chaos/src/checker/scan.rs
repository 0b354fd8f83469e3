//! The single pass over a history: per-value, per-queue, per-slot and per-session state, and
//! the properties that are decided in history order (K4, K5, K7 mid-session, K3 slot
//! conflicts, duplicate attribution). End-of-run verdicts live in `verdict.rs`.

use std::collections::{HashMap, HashSet};

use super::cluster::{AckOrder, FailoverState, Watermark};
use super::report::{
    CommitPastMax, CommitRegression, DuplicateCauses, FloorSource, Listed, OffsetConflict,
    PastWatermark, PollSkip, RegressionRule, RoleCounts,
};
use super::Durability;
use crate::history::{ConsumerId, Event, Fault, NodeRole, Op, Queue, Value};

/// Every role, in report order.
const ROLES: [NodeRole; 5] = [
    NodeRole::Standalone,
    NodeRole::Master,
    NodeRole::Slave,
    NodeRole::Controller,
    NodeRole::Namesrv,
];

/// Index of a queue in `Scan::queues` (queues are interned: keys stay small).
pub(super) type QueueIndex = u32;

/// A (queue, offset) pair.
pub(super) type Slot = (QueueIndex, u64);

/// What the history says about one value.
#[derive(Debug, Default)]
pub(super) struct ValueState {
    /// Any send operation named it.
    pub attempted: bool,
    /// Event index of its first `SendInvoke`.
    pub invoked_at: Option<usize>,
    /// `SendOk`: the acked slot and the event index of the (first) ack.
    pub ack: Option<(Slot, usize)>,
    pub failed: bool,
    pub indeterminate: bool,
    /// Number of `Deliver`s.
    pub deliveries: u64,
    /// The session and event index of its latest `Deliver`.
    pub last_delivery: Option<(ConsumerId, usize)>,
    /// The first slot it was observed at (ack or delivery).
    pub position: Option<Slot>,
    /// A second, different slot it was observed at.
    pub other_position: Option<Slot>,
}

/// One (queue, offset) slot: the value there now and since when.
#[derive(Debug)]
pub(super) struct SlotState {
    pub value: Value,
    /// Event index of the first observation of `value` at this slot.
    pub first_seen: usize,
    /// A conflict was reported for this slot (each slot is reported once).
    pub conflicted: bool,
}

/// Per-queue state.
#[derive(Debug, Default)]
pub(super) struct QueueState {
    /// Offsets below this are known to exist (K5).
    pub known_max: u64,
    /// Highest offset any consumer delivered.
    pub max_delivered: Option<u64>,
    /// K4: after each commit observation or reset of this queue (event index), the highest
    /// committed offset since the last baseline. Appended in history order.
    pub commit_maxima: Vec<(usize, u64)>,
    /// The highest reset generation seen for this queue.
    pub generation: Option<u64>,
    /// The last `CommitOk` or `Reset` offset (the restart bound's `C`).
    pub last_commit: Option<u64>,
    /// Index of the last event that reset this queue.
    pub last_reset: Option<usize>,
    /// Index of the last `QueueStart` that followed a reset whose `Reset` op was recorded
    /// later ([`reset_follows`]): a K6 cause, recorded as early as the consumer acted.
    pub reset_follow: Option<usize>,
    /// Index of the last rebalance of this queue.
    pub last_rebalance: Option<usize>,
    /// Consumer of the last `QueueStop`.
    pub last_stopped_by: Option<u32>,
    /// Consumer sessions holding the queue (`QueueStart` without `QueueStop` yet).
    pub holders: Vec<ConsumerId>,
    /// Offsets of every `Reset` of this queue, in order (K7 jump targets).
    pub reset_targets: Vec<u64>,
    /// `[from, to)` ranges a forward reset skipped.
    pub skipped: Vec<(u64, u64)>,
    /// Index of the last event whose `Observe` showed a new reset generation.
    pub generation_changed: Option<usize>,
    /// The last `Failover` of the queue's group: (event index, index into `Scan::failovers`).
    pub failover: Option<(usize, usize)>,
    /// K5 against the replicated watermark.
    pub watermark: Watermark,
    /// K4 by acknowledgement order.
    pub acks: AckOrder,
}

/// Per (consumer session, queue) reading position (K7).
#[derive(Debug, Default)]
struct Reading {
    /// Event index of the `QueueStart` (K4 reference for the session's first commit).
    started_at: Option<usize>,
    /// The `QueueStart` offset, until the first delivery.
    start: Option<u64>,
    /// The offset the next delivery must have.
    next: Option<u64>,
    /// Reset targets of the queue before this index were already used or predate the start.
    resets_seen: usize,
}

/// A first delivery after `QueueStart` not at the start offset: a skip when any value is ever
/// observed at the start slot, decided at the end.
#[derive(Debug)]
pub(super) struct StartMismatch {
    pub skip: PollSkip,
    pub slot: Slot,
}

/// One consumer restart and the duplicates attributed to it.
#[derive(Debug)]
pub(super) struct Restart {
    pub consumer: u32,
    pub session: Option<u32>,
    pub at_ms: u64,
    /// Per queue index at the restart: (highest delivered offset, last committed offset).
    pub snapshot: Vec<(Option<u64>, Option<u64>)>,
    /// Duplicates attributed to this restart per queue.
    pub duplicates: HashMap<QueueIndex, u64>,
}

#[derive(Debug, Default)]
struct ConsumerState {
    session: u32,
    /// Index into `Scan::restarts` of its latest restart.
    restart: Option<usize>,
    /// Event index of that restart, for attribution.
    restart_at: Option<usize>,
    /// The latest restart came from a fault and awaits its new session.
    awaiting_session: bool,
}

/// A `Kill` fault of a master-log node (standalone or master).
#[derive(Debug)]
pub(super) struct Kill {
    pub index: usize,
    pub at_ms: u64,
    pub node: String,
    pub role: NodeRole,
}

/// State of the pass; `verdict::finish` turns it into a report.
#[derive(Debug)]
pub(super) struct Scan {
    pub durability: Durability,
    pub events: u64,
    pub queues: Vec<Queue>,
    queue_index: HashMap<Queue, QueueIndex>,
    pub queue_states: Vec<QueueState>,
    pub values: HashMap<Value, ValueState>,
    pub slots: HashMap<Slot, SlotState>,
    readings: HashMap<(ConsumerId, QueueIndex), Reading>,
    consumers: HashMap<u32, ConsumerState>,
    pub restarts: Vec<Restart>,
    /// Kills of master-log nodes: the only kills that may lose acknowledged data.
    pub kills: Vec<Kill>,
    pub kills_by_role: RoleCounts,
    pub pauses_by_role: RoleCounts,
    /// Index of the last `Kill` per role of the killed node.
    last_kill_by_role: HashMap<NodeRole, usize>,
    /// Index of the last `Kill` or `Restart` of a master-log node.
    last_broker_fault: Option<usize>,
    pub failovers: Vec<FailoverState>,
    /// Queues per broker group (the queue's `broker`), in interning order.
    group_queues: HashMap<String, Vec<QueueIndex>>,
    /// Index of the last `Failover` per broker group.
    group_failover: HashMap<String, usize>,
    /// `Observe` events so far (the watermark floors' epochs).
    observes: u64,
    /// Index of the last `Reset` fault (the op is per queue).
    last_reset_fault: Option<usize>,
    /// `QueueStart` events that followed a reset before its op was recorded
    /// ([`reset_follows`]).
    reset_follows: HashSet<usize>,
    /// A `Reset` fault was recorded and its `Reset` op not yet.
    reset_pending: bool,
    /// A `ResetUnsettled` was recorded and no `Reset` op since: the reset may still land, so
    /// `reset_pending` stays set across later faults.
    reset_unsettled: bool,
    /// Per consumer session, the index of its last `CommitOk`/`CommitFail`.
    last_commit_event: HashMap<ConsumerId, usize>,
    /// Index of the last `Observe` (the observer reads one queue after another).
    last_observe: Option<usize>,
    pub deliveries: u64,
    pub causes: DuplicateCauses,
    pub conflicts: Listed<OffsetConflict>,
    pub reuses: Listed<OffsetConflict>,
    pub regressions: Listed<CommitRegression>,
    pub ack_order_regressions: u64,
    pub commit_rollbacks: u64,
    pub past_max: Listed<CommitPastMax>,
    pub past_watermark: Listed<PastWatermark>,
    pub watermark_rollbacks: u64,
    pub poll_skips: Listed<PollSkip>,
    pub start_mismatches: Vec<StartMismatch>,
    pub drain_complete: Option<bool>,
}

/// The `QueueStart` events (by index) that followed a reset the harness recorded only later:
/// recorded while a reset was pending (its `Fault::Reset` recorded, its `Reset` op not yet),
/// at the very offset that op then names for the queue. The harness records the op once the
/// reset is acknowledged, and the broker pushes the reset to the consumers before it answers,
/// so a push consumer may restart the queue at the reset offset — and deliver again from
/// there — before the op is in the history. Those duplicates are the reset's, not those of
/// an earlier consumer restart (ha seeds 3014 and 3016: a reset retried for seconds while a
/// new master refused it, with a consumer restart in between).
pub(super) fn reset_follows(events: &[Event]) -> HashSet<usize> {
    let mut follows = HashSet::new();
    let mut pending: Option<Vec<(usize, &Queue, u64)>> = None;
    for (index, event) in events.iter().enumerate() {
        match &event.op {
            Op::Fault(Fault::Reset) => pending = Some(Vec::new()),
            Op::QueueStart { queue, offset, .. } => {
                if let Some(starts) = pending.as_mut() {
                    starts.push((index, queue, *offset));
                }
            }
            Op::Reset { offsets, .. } => {
                for (start, queue, offset) in pending.take().unwrap_or_default() {
                    if offsets.iter().any(|(q, o)| q == queue && *o == offset) {
                        follows.insert(start);
                    }
                }
            }
            _ => {}
        }
    }
    follows
}

impl Scan {
    /// Marks the `QueueStart` events of [`reset_follows`].
    pub fn with_reset_follows(mut self, follows: HashSet<usize>) -> Scan {
        self.reset_follows = follows;
        self
    }

    pub fn new(durability: Durability) -> Scan {
        Scan {
            durability,
            events: 0,
            queues: Vec::new(),
            queue_index: HashMap::new(),
            queue_states: Vec::new(),
            values: HashMap::new(),
            slots: HashMap::new(),
            readings: HashMap::new(),
            consumers: HashMap::new(),
            restarts: Vec::new(),
            kills: Vec::new(),
            kills_by_role: RoleCounts::default(),
            pauses_by_role: RoleCounts::default(),
            last_kill_by_role: HashMap::new(),
            last_broker_fault: None,
            failovers: Vec::new(),
            group_queues: HashMap::new(),
            group_failover: HashMap::new(),
            observes: 0,
            last_reset_fault: None,
            reset_follows: HashSet::new(),
            reset_pending: false,
            reset_unsettled: false,
            last_commit_event: HashMap::new(),
            last_observe: None,
            deliveries: 0,
            causes: DuplicateCauses::default(),
            conflicts: Listed::default(),
            reuses: Listed::default(),
            regressions: Listed::default(),
            ack_order_regressions: 0,
            commit_rollbacks: 0,
            past_max: Listed::default(),
            past_watermark: Listed::default(),
            watermark_rollbacks: 0,
            poll_skips: Listed::default(),
            start_mismatches: Vec::new(),
            drain_complete: None,
        }
    }

    /// Folds one event into the state.
    pub fn observe(&mut self, index: usize, event: &Event) {
        self.events += 1;
        let at_ms = event.at_ms;
        match &event.op {
            Op::SendInvoke { value } => {
                let state = self.value(*value);
                state.attempted = true;
                state.invoked_at.get_or_insert(index);
            }
            Op::SendOk {
                value,
                queue,
                offset,
            } => self.send_ok(index, at_ms, *value, queue, *offset),
            Op::SendFail { value, .. } => {
                let state = self.value(*value);
                state.attempted = true;
                state.failed = true;
            }
            Op::SendInfo { value, .. } => {
                let state = self.value(*value);
                state.attempted = true;
                state.indeterminate = true;
            }
            Op::QueueStart {
                consumer,
                queue,
                offset,
                ..
            } => self.queue_start(index, at_ms, *consumer, queue, *offset),
            Op::QueueStop { consumer, queue } => self.queue_stop(index, at_ms, *consumer, queue),
            Op::Deliver {
                consumer,
                queue,
                offset,
                value,
            } => self.deliver(index, at_ms, *consumer, queue, *offset, *value),
            Op::CommitOk {
                consumer,
                queue,
                offset,
                sent_ms,
            } => self.commit_ok(index, at_ms, *consumer, queue, (*offset, *sent_ms)),
            Op::CommitFail { consumer, .. } => {
                self.note_session(index, at_ms, *consumer);
                self.last_commit_event.insert(*consumer, index);
            }
            Op::Failover {
                group,
                master,
                epoch,
            } => self.failover(index, at_ms, group, master, *epoch),
            Op::Observe {
                queue,
                committed,
                max_offset,
                generation,
            } => {
                let seen = (*committed, *generation);
                self.observation(index, at_ms, queue, *max_offset, seen);
            }
            Op::Reset {
                offsets,
                generation,
            } => self.reset(index, offsets, *generation),
            Op::ResetUnsettled { .. } => {
                self.reset_unsettled = true;
                self.reset_pending = true;
            }
            Op::Fault(fault) => self.fault(index, at_ms, fault),
            Op::DrainStart => {}
            Op::DrainEnd { complete } => self.drain_complete = Some(*complete),
        }
    }

    /// An `Observe` of `queue`: K5 (watermark, then the known max), and K4 and K5 for its
    /// committed offset (with its `generation`) when it read one.
    fn observation(
        &mut self,
        index: usize,
        at_ms: u64,
        queue: &Queue,
        max_offset: u64,
        (committed, generation): (Option<u64>, Option<u64>),
    ) {
        let queue = self.intern(queue);
        self.check_watermark(at_ms, queue, max_offset);
        let state = &mut self.queue_states[queue as usize];
        state.known_max = state.known_max.max(max_offset);
        let reference = self.last_observe.replace(index);
        if let Some(committed) = committed {
            let seen = CommitSeen {
                offset: committed,
                generation,
                at_ms,
                sent_ms: None,
                by: None,
                reference,
            };
            self.check_commit(index, queue, &seen);
        }
    }

    /// A `CommitOk` of `offset`, sent at `sent_ms` when known: K4 (both rules), K5, and the
    /// watermark floor and restart/failover bounds' `C`.
    fn commit_ok(
        &mut self,
        index: usize,
        at_ms: u64,
        consumer: ConsumerId,
        queue: &Queue,
        (offset, sent_ms): (u64, Option<u64>),
    ) {
        self.note_session(index, at_ms, consumer);
        let queue = self.intern(queue);
        self.queue_states[queue as usize].last_commit = Some(offset);
        self.raise_watermark(queue, offset, FloorSource::Committed);
        let reference = self.commit_reference(consumer, queue);
        self.last_commit_event.insert(consumer, index);
        let seen = CommitSeen {
            offset,
            generation: None,
            at_ms,
            sent_ms,
            by: Some(consumer),
            reference,
        };
        let earlier = self.check_ack_order(index, queue, &seen);
        let regressed = self.check_commit(index, queue, &seen);
        if let (Some(from), false) = (earlier, regressed) {
            self.ack_order_regressions += 1;
            self.regressions.push(CommitRegression {
                queue: self.queues[queue as usize].clone(),
                from,
                to: offset,
                at_ms,
                by: Some(consumer),
                rule: RegressionRule::AckOrder,
                sent_ms,
            });
        }
    }

    /// K4 by acknowledgement order: the highest offset of a `CommitOk` of the queue
    /// acknowledged strictly before this commit was sent, when this commit is below it and
    /// nothing since that acknowledgement excuses it (a `Reset` fault, a `Reset` op naming the
    /// queue, a pending reset, a new generation seen by an `Observe`, or in async mode a kill
    /// of a master-log node). The commit then joins the queue's window.
    fn check_ack_order(
        &mut self,
        index: usize,
        queue: QueueIndex,
        seen: &CommitSeen,
    ) -> Option<u64> {
        let global = self.last_reset_fault.max(self.async_kill());
        let pending = self.reset_pending;
        let state = &mut self.queue_states[queue as usize];
        let excuse = global.max(state.last_reset).max(state.generation_changed);
        state.acks.settle(excuse, index);
        let earlier = seen
            .sent_ms
            .filter(|_| !pending)
            .and_then(|sent_ms| state.acks.highest_before(sent_ms))
            .filter(|earlier| seen.offset < *earlier);
        state.acks.push(seen.at_ms, seen.offset);
        earlier
    }

    /// The index of the last kill of a master-log node in async mode (the kills that may lose
    /// acknowledged data and excuse what follows from that); `None` in sync mode.
    fn async_kill(&self) -> Option<usize> {
        if self.durability == Durability::Async {
            self.kills.last().map(|kill| kill.index)
        } else {
            None
        }
    }

    /// Raises the queue's K5 watermark floor (what its max offset must reach from the next
    /// observation on).
    fn raise_watermark(&mut self, queue: QueueIndex, value: u64, source: FloorSource) {
        let kill = self.async_kill();
        let watermark = &mut self.queue_states[queue as usize].watermark;
        watermark.settle_kill(kill);
        watermark.floor.raise(self.observes, value, source);
    }

    /// K5 against the replicated watermark: an observed `max_offset` must reach every
    /// delivered offset + 1 and acknowledged commit of the queue recorded before the previous
    /// `Observe` (since the last master-log kill in async mode, where a lower max offset than
    /// what came before that kill becomes the new baseline).
    fn check_watermark(&mut self, at_ms: u64, queue: QueueIndex, max_offset: u64) {
        let kill = self.async_kill();
        let epoch = self.observes;
        self.observes += 1;
        let watermark = &mut self.queue_states[queue as usize].watermark;
        watermark.settle_kill(kill);
        let (floor, source) = watermark.floor.at(epoch);
        if max_offset < floor {
            self.past_watermark.push(PastWatermark {
                queue: self.queues[queue as usize].clone(),
                max_offset,
                floor,
                source,
                at_ms,
            });
        } else if max_offset < watermark.before_kill {
            // Only in async mode: `before_kill` stays 0 in sync mode.
            self.watermark_rollbacks += 1;
            watermark.before_kill = max_offset;
            watermark
                .floor
                .raise(epoch, max_offset, FloorSource::Baseline);
        }
    }

    /// A `Failover` of broker group `group`: snapshots the group's queues for the failover's
    /// duplicate bound and makes it their latest duplicate cause candidate.
    fn failover(&mut self, index: usize, at_ms: u64, group: &str, master: &str, epoch: u64) {
        let id = self.failovers.len();
        let mut snapshot = HashMap::new();
        for queue in self.group_queues.get(group).into_iter().flatten() {
            let state = &mut self.queue_states[*queue as usize];
            snapshot.insert(*queue, (state.max_delivered, state.last_commit));
            state.failover = Some((index, id));
        }
        self.group_failover.insert(group.to_owned(), index);
        if self.durability == Durability::Async {
            // ASYNC_MASTER: however the old master was deposed (killed, paused, cut off), the
            // tail it had not replicated is cut from the group's log at the failover, exactly
            // as a kill of it may lose it.
            self.kills.push(Kill {
                index,
                at_ms,
                node: format!("failover of {group} to {master}"),
                role: NodeRole::Master,
            });
        }
        self.failovers.push(FailoverState {
            group: group.to_owned(),
            master: master.to_owned(),
            epoch,
            at_ms,
            snapshot,
            duplicates: HashMap::new(),
        });
    }

    fn intern(&mut self, queue: &Queue) -> QueueIndex {
        if let Some(index) = self.queue_index.get(queue) {
            return *index;
        }
        let index = self.queues.len() as QueueIndex;
        self.group_queues
            .entry(queue.broker.clone())
            .or_default()
            .push(index);
        self.queues.push(queue.clone());
        self.queue_states.push(QueueState::default());
        self.queue_index.insert(queue.clone(), index);
        index
    }

    fn value(&mut self, value: Value) -> &mut ValueState {
        self.values.entry(value).or_default()
    }

    fn send_ok(&mut self, index: usize, at_ms: u64, value: Value, queue: &Queue, offset: u64) {
        let queue = self.intern(queue);
        let slot = (queue, offset);
        let state = self.value(value);
        state.attempted = true;
        if state.ack.is_none() {
            state.ack = Some((slot, index));
        }
        self.observe_slot(index, slot, value, at_ms);
    }

    /// Records that `value` was seen at `slot`: the value's positions (K3 two positions), the
    /// slot's value (K3 two values, async reuse) and the queue's known max (K5).
    fn observe_slot(&mut self, index: usize, slot: Slot, value: Value, at_ms: u64) {
        let state = self.values.entry(value).or_default();
        match state.position {
            None => state.position = Some(slot),
            Some(position) if position != slot && state.other_position.is_none() => {
                state.other_position = Some(slot);
            }
            Some(_) => {}
        }
        let queue_state = &mut self.queue_states[slot.0 as usize];
        queue_state.known_max = queue_state.known_max.max(slot.1 + 1);
        let Some(existing) = self.slots.get(&slot) else {
            self.slots.insert(
                slot,
                SlotState {
                    value,
                    first_seen: index,
                    conflicted: false,
                },
            );
            return;
        };
        if existing.value == value {
            return;
        }
        let (old, first_seen) = (existing.value, existing.first_seen);
        // The old value may have been stored from its invocation on (its ack can be
        // recorded after a kill that it preceded: the reply was already on its way).
        let stored_from = self
            .values
            .get(&old)
            .and_then(|old| old.invoked_at)
            .map_or(first_seen, |invoked| invoked.min(first_seen));
        let conflict = self.conflict(slot, (old, value), at_ms, stored_from);
        // Only a kill of a master-log node in async mode loses the old value.
        let lost = self.async_kill().is_some_and(|kill| kill > stored_from);
        let Some(existing) = self.slots.get_mut(&slot) else {
            return;
        };
        if lost {
            self.reuses.push(conflict);
            existing.value = value;
            existing.first_seen = index;
        } else if !existing.conflicted {
            existing.conflicted = true;
            self.conflicts.push(conflict);
        }
    }

    /// The K3 conflict of `first` then `second` at `slot`, with the kills (by role) and the
    /// failover of the queue's group recorded since event `since`.
    fn conflict(
        &self,
        slot: Slot,
        (first, second): (Value, Value),
        at_ms: u64,
        since: usize,
    ) -> OffsetConflict {
        let queue = self.queues[slot.0 as usize].clone();
        let after = |at: Option<&usize>| at.is_some_and(|at| *at > since);
        let kills_between = ROLES
            .into_iter()
            .filter(|role| after(self.last_kill_by_role.get(role)))
            .collect();
        let failover_between = after(self.group_failover.get(&queue.broker));
        OffsetConflict {
            queue,
            offset: slot.1,
            first,
            second,
            at_ms,
            kills_between,
            failover_between,
        }
    }

    fn queue_stop(&mut self, index: usize, at_ms: u64, consumer: ConsumerId, queue: &Queue) {
        self.note_session(index, at_ms, consumer);
        let queue = self.intern(queue);
        self.readings.remove(&(consumer, queue));
        let state = &mut self.queue_states[queue as usize];
        state.last_stopped_by = Some(consumer.consumer);
        state.holders.retain(|holder| *holder != consumer);
    }

    fn queue_start(
        &mut self,
        index: usize,
        at_ms: u64,
        consumer: ConsumerId,
        queue: &Queue,
        offset: u64,
    ) {
        self.note_session(index, at_ms, consumer);
        let follows_reset = self.reset_follows.contains(&index);
        let queue = self.intern(queue);
        let state = &mut self.queue_states[queue as usize];
        if follows_reset {
            state.reset_follow = Some(index);
        }
        // The queue moves between consumers: it was last stopped by another one, or another
        // one still holds it (both took it while membership changed).
        let other = |id: u32| id != consumer.consumer;
        if state.last_stopped_by.is_some_and(other)
            || state.holders.iter().any(|holder| other(holder.consumer))
        {
            state.last_rebalance = Some(index);
        }
        if !state.holders.contains(&consumer) {
            state.holders.push(consumer);
        }
        let resets_seen = state.reset_targets.len();
        self.readings.insert(
            (consumer, queue),
            Reading {
                started_at: Some(index),
                start: Some(offset),
                next: None,
                resets_seen,
            },
        );
    }

    fn deliver(
        &mut self,
        index: usize,
        at_ms: u64,
        consumer: ConsumerId,
        queue: &Queue,
        offset: u64,
        value: Value,
    ) {
        self.note_session(index, at_ms, consumer);
        let queue = self.intern(queue);
        self.deliveries += 1;
        let state = self.value(value);
        state.deliveries += 1;
        if let Some(previous) = state.last_delivery.replace((consumer, index)) {
            self.attribute_duplicate(consumer, queue, previous);
        }
        let queue_state = &mut self.queue_states[queue as usize];
        queue_state.max_delivered = queue_state.max_delivered.max(Some(offset));
        self.raise_watermark(queue, offset + 1, FloorSource::Delivered);
        self.observe_slot(index, (queue, offset), value, at_ms);
        self.check_contiguous(at_ms, consumer, queue, offset);
    }

    /// K7: the delivery is at the start offset (first after `QueueStart`) or right after the
    /// previous one, or at a reset target of the queue not yet used by this reading.
    fn check_contiguous(
        &mut self,
        at_ms: u64,
        consumer: ConsumerId,
        queue: QueueIndex,
        offset: u64,
    ) {
        let targets = &self.queue_states[queue as usize].reset_targets;
        let reading = self.readings.entry((consumer, queue)).or_default();
        let expected = reading.start.take().map(|start| (start, true));
        let expected = expected.or(reading.next.map(|next| (next, false)));
        reading.next = Some(offset + 1);
        let Some((expected, at_start)) = expected else {
            // No QueueStart recorded for this reading: nothing to hold the first delivery to.
            return;
        };
        if offset == expected {
            return;
        }
        if let Some(position) = targets[reading.resets_seen..]
            .iter()
            .position(|target| *target == offset)
        {
            reading.resets_seen += position + 1;
            return;
        }
        let skip = PollSkip {
            consumer,
            queue: self.queues[queue as usize].clone(),
            expected,
            delivered: offset,
            at_ms,
            at_start,
        };
        if at_start {
            self.start_mismatches.push(StartMismatch {
                skip,
                slot: (queue, expected),
            });
        } else {
            self.poll_skips.push(skip);
        }
    }

    /// Attributes a duplicate delivery by `consumer` on `queue` to the latest candidate cause.
    ///
    /// The most recent candidate event wins, except that a rebalance does not beat the
    /// delivering consumer's own restart when the value's previous delivery was by an older
    /// session of that consumer before the restart: the restart is what moved the queue, and
    /// the duplicate is the old session's uncommitted in-flight message.
    fn attribute_duplicate(
        &mut self,
        consumer: ConsumerId,
        queue: QueueIndex,
        (previous_by, previous_at): (ConsumerId, usize),
    ) {
        let consumer_state = self.consumers.get(&consumer.consumer);
        let queue_state = &self.queue_states[queue as usize];
        let last_reset = queue_state
            .last_reset
            .max(self.last_reset_fault)
            .max(queue_state.reset_follow);
        let restart_at = consumer_state.and_then(|state| state.restart_at);
        let own_restart = previous_by.consumer == consumer.consumer
            && previous_by.session < consumer.session
            && restart_at.is_some_and(|at| at > previous_at);
        let failover = queue_state.failover;
        let candidates = [
            (restart_at, 0),
            (self.last_broker_fault, 1),
            (queue_state.last_rebalance, 2),
            (last_reset, 3),
            (failover.map(|(at, _)| at), 4),
        ];
        let cause = candidates
            .iter()
            .filter(|(_, cause)| !(own_restart && *cause == 2))
            .filter_map(|(at, cause)| at.map(|at| (at, *cause)))
            .max()
            .map(|(_, cause)| cause);
        match cause {
            Some(0) => {
                self.causes.consumer_restart += 1;
                let restart = consumer_state.and_then(|state| state.restart);
                if let Some(restart) = restart {
                    *self.restarts[restart].duplicates.entry(queue).or_default() += 1;
                }
            }
            Some(1) => self.causes.broker_restart += 1,
            Some(2) => self.causes.rebalance += 1,
            Some(3) => self.causes.reset += 1,
            Some(4) => {
                self.causes.failover += 1;
                if let Some((_, id)) = failover {
                    *self.failovers[id].duplicates.entry(queue).or_default() += 1;
                }
            }
            _ => self.causes.other += 1,
        }
    }

    /// Notes the session of `consumer`; a new session is a restart (joined with a pending
    /// `RestartConsumer` fault when there is one).
    fn note_session(&mut self, index: usize, at_ms: u64, consumer: ConsumerId) {
        let Some(state) = self.consumers.get_mut(&consumer.consumer) else {
            self.consumers.insert(
                consumer.consumer,
                ConsumerState {
                    session: consumer.session,
                    ..ConsumerState::default()
                },
            );
            return;
        };
        if consumer.session <= state.session {
            return;
        }
        state.session = consumer.session;
        state.restart_at = Some(index);
        self.release(consumer.consumer, consumer.session);
        let state = self.consumers.entry(consumer.consumer).or_default();
        if state.awaiting_session {
            state.awaiting_session = false;
            if let Some(restart) = state.restart {
                self.restarts[restart].session = Some(consumer.session);
            }
            return;
        }
        let restart = self.new_restart(consumer.consumer, Some(consumer.session), at_ms);
        let state = self.consumers.entry(consumer.consumer).or_default();
        state.restart = Some(restart);
    }

    /// The sessions of `consumer` below `session` are gone (restarted): their queues count as
    /// stopped by it.
    fn release(&mut self, consumer: u32, session: u32) {
        for state in &mut self.queue_states {
            let held = state.holders.len();
            state
                .holders
                .retain(|holder| holder.consumer != consumer || holder.session >= session);
            if state.holders.len() < held {
                state.last_stopped_by = Some(consumer);
            }
        }
    }

    fn new_restart(&mut self, consumer: u32, session: Option<u32>, at_ms: u64) -> usize {
        let snapshot = self
            .queue_states
            .iter()
            .map(|state| (state.max_delivered, state.last_commit))
            .collect();
        self.restarts.push(Restart {
            consumer,
            session,
            at_ms,
            snapshot,
            duplicates: HashMap::new(),
        });
        self.restarts.len() - 1
    }

    fn fault(&mut self, index: usize, at_ms: u64, fault: &Fault) {
        // The harness records `Fault::Reset` before asking for the reset and `Op::Reset` once
        // it is acknowledged; the next fault closes the window when the reset was refused,
        // but not while an unsettled one may still land (the harness asks again until one
        // attempt is acknowledged).
        self.reset_pending = matches!(fault, Fault::Reset) || self.reset_unsettled;
        match fault {
            Fault::Kill { node, role } => {
                self.kills_by_role.add(*role);
                self.last_kill_by_role.insert(*role, index);
                if role.holds_master_log() {
                    self.last_broker_fault = Some(index);
                    self.kills.push(Kill {
                        index,
                        at_ms,
                        node: node.clone(),
                        role: *role,
                    });
                }
            }
            Fault::Restart { role, .. } => {
                if role.holds_master_log() {
                    self.last_broker_fault = Some(index);
                }
            }
            Fault::Pause { role, .. } => self.pauses_by_role.add(*role),
            Fault::RestartConsumer { consumer } => {
                self.release(*consumer, u32::MAX);
                let restart = self.new_restart(*consumer, None, at_ms);
                let state = self.consumers.entry(*consumer).or_default();
                state.restart = Some(restart);
                state.restart_at = Some(index);
                state.awaiting_session = true;
            }
            Fault::Reset => self.last_reset_fault = Some(index),
            Fault::Resume { .. } | Fault::Partition { .. } | Fault::Heal { .. } => {}
        }
    }

    fn reset(&mut self, index: usize, offsets: &[(Queue, u64)], generation: Option<u64>) {
        self.reset_pending = false;
        self.reset_unsettled = false;
        for (queue, offset) in offsets {
            let queue = self.intern(queue);
            let state = &mut self.queue_states[queue as usize];
            let first_unread = state.max_delivered.map_or(0, |max| max + 1);
            if *offset > first_unread {
                state.skipped.push((first_unread, *offset));
            }
            state.reset_targets.push(*offset);
            state.commit_maxima.push((index, *offset));
            state.last_commit = Some(*offset);
            state.last_reset = Some(index);
            state.generation = state.generation.max(generation);
        }
    }

    /// The K4 reference point of a commit by `consumer` on `queue`: an event recorded
    /// certainly before the commit was sent. A session sends its commits one after another,
    /// so its previous `CommitOk`/`CommitFail` qualifies; for its first commit, the
    /// `QueueStart` of the queue (a session commits only queues it started).
    fn commit_reference(&self, consumer: ConsumerId, queue: QueueIndex) -> Option<usize> {
        self.last_commit_event.get(&consumer).copied().or_else(|| {
            self.readings
                .get(&(consumer, queue))
                .and_then(|reading| reading.started_at)
        })
    }

    /// K4 and K5 for one committed offset seen at event `index`.
    ///
    /// K4 compares the offset with the highest committed offset known at the reference point
    /// (not at `index`: a reply recorded late may stand for a commit the broker applied
    /// before others recorded earlier). A reset recorded after the reference point (its
    /// `Fault` or its `Op`), or pending, excuses a lower offset; a new generation, or in async
    /// mode a kill after the reference point, makes the offset the new baseline.
    ///
    /// Returns true when it recorded a regression.
    fn check_commit(&mut self, index: usize, queue: QueueIndex, seen: &CommitSeen) -> bool {
        let after = |at: Option<usize>| move |reference: usize| at.is_some_and(|at| at > reference);
        let killed = seen.reference.is_some_and(after(self.async_kill()));
        let state = &mut self.queue_states[queue as usize];
        let new_generation = seen.generation.is_some() && seen.generation > state.generation;
        state.generation = state.generation.max(seen.generation);
        if new_generation {
            state.generation_changed = Some(index);
        }
        let reset_since = self.reset_pending
            || seen.reference.is_some_and(after(self.last_reset_fault))
            || seen.reference.is_some_and(after(state.last_reset));
        let baseline = seen
            .reference
            .and_then(|reference| maximum_at(&state.commit_maxima, reference));
        let mut regressed = false;
        if let Some(before) = baseline.filter(|before| seen.offset < *before) {
            if new_generation || reset_since {
                // An acknowledged reset moved it: allowed.
            } else if killed {
                self.commit_rollbacks += 1;
            } else {
                regressed = true;
                self.regressions.push(CommitRegression {
                    queue: self.queues[queue as usize].clone(),
                    from: before,
                    to: seen.offset,
                    at_ms: seen.at_ms,
                    by: seen.by,
                    rule: RegressionRule::Reference,
                    sent_ms: seen.sent_ms,
                });
            }
        }
        let running = state.commit_maxima.last().map(|(_, maximum)| *maximum);
        // A reset op recorded after the reference point: the broker applied this offset
        // before the reset record (a commit arriving after it is rejected), so the reset's
        // baseline stands and the late reply does not raise it.
        let before_reset = seen.reference.is_some_and(after(state.last_reset));
        let maximum = match running {
            Some(running) if before_reset && !new_generation => running,
            Some(running) if !(new_generation || killed) => running.max(seen.offset),
            _ => seen.offset,
        };
        state.commit_maxima.push((index, maximum));
        if seen.offset > state.known_max {
            self.past_max.push(CommitPastMax {
                queue: self.queues[queue as usize].clone(),
                committed: seen.offset,
                known_max: state.known_max,
                at_ms: seen.at_ms,
                by: seen.by,
            });
        }
        regressed
    }
}

/// A committed offset seen by a consumer (`CommitOk`) or an observer (`Observe`).
struct CommitSeen {
    offset: u64,
    generation: Option<u64>,
    at_ms: u64,
    /// When a `CommitOk`'s request was sent, when recorded.
    sent_ms: Option<u64>,
    /// `None` for an observer.
    by: Option<ConsumerId>,
    /// An event recorded before the commit was sent or the read was made.
    reference: Option<usize>,
}

/// The running maximum in force at event `index`.
fn maximum_at(maxima: &[(usize, u64)], index: usize) -> Option<u64> {
    let count = maxima.partition_point(|(at, _)| *at <= index);
    count.checked_sub(1).map(|last| maxima[last].1)
}
