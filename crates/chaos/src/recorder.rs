//! [`Recorder`]: the one place every task of a run appends its operations to.
//!
//! Invariants:
//! 1. Events are stamped and appended under one lock, so the history's order is the order in
//!    which the harness observed them, and `at_ms` never decreases along it.
//! 2. The drain bookkeeping (`pending`: acknowledged, not yet delivered) is updated under the
//!    same lock as the history, so it always agrees with the recorded events: a value leaves
//!    `pending` only through a recorded `Deliver`, and enters it only through a recorded
//!    `SendOk` of a value not delivered before.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use crate::history::{History, Op, Value};

/// Running totals, for the progress line and the summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Sends invoked.
    pub attempted: u64,
    /// Sends acknowledged.
    pub acked: u64,
    /// Sends the broker definitely refused.
    pub failed: u64,
    /// Sends with an unknown outcome.
    pub indeterminate: u64,
    /// Deliveries (duplicates included).
    pub deliveries: u64,
    /// Distinct values delivered.
    pub delivered: u64,
    /// Acknowledged values not delivered yet.
    pub pending: u64,
    /// Commits acknowledged.
    pub commits_ok: u64,
    /// Commits refused or not answered.
    pub commits_failed: u64,
    /// Faults injected (healings not counted).
    pub faults: u64,
}

#[derive(Debug, Default)]
struct State {
    history: History,
    totals: Totals,
    delivered: HashSet<Value>,
    pending: HashSet<Value>,
    fault_kinds: BTreeMap<&'static str, u64>,
}

/// The shared, append-only record of a run.
#[derive(Debug)]
pub struct Recorder {
    started: Instant,
    state: Mutex<State>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

impl Recorder {
    /// An empty record whose clock starts now.
    pub fn new() -> Recorder {
        Recorder {
            started: Instant::now(),
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every critical section is a handful of set and counter updates that cannot leave
        // the state half-changed, so a poisoned lock's data is still consistent.
        self.state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Milliseconds since the run started.
    pub fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Appends `op`, stamped now.
    pub fn record(&self, op: Op) {
        let mut state = self.state();
        let at_ms = self.elapsed_ms();
        let state = &mut *state;
        match &op {
            Op::SendInvoke { .. } => state.totals.attempted += 1,
            Op::SendOk { value, .. } => {
                state.totals.acked += 1;
                if !state.delivered.contains(value) {
                    state.pending.insert(*value);
                }
            }
            Op::SendFail { .. } => state.totals.failed += 1,
            Op::SendInfo { .. } => state.totals.indeterminate += 1,
            Op::Deliver { value, .. } => {
                state.totals.deliveries += 1;
                if state.delivered.insert(*value) {
                    state.totals.delivered += 1;
                }
                state.pending.remove(value);
            }
            Op::CommitOk { .. } => state.totals.commits_ok += 1,
            Op::CommitFail { .. } => state.totals.commits_failed += 1,
            Op::Fault(fault) if is_injection(fault) => {
                state.totals.faults += 1;
                *state.fault_kinds.entry(fault.kind()).or_default() += 1;
            }
            _ => {}
        }
        state.totals.pending = state.pending.len() as u64;
        state.history.push(at_ms, op);
    }

    /// The running totals.
    pub fn totals(&self) -> Totals {
        self.state().totals
    }

    /// Injected faults per kind (`kill`, `pause`, ...).
    pub fn fault_kinds(&self) -> BTreeMap<&'static str, u64> {
        self.state().fault_kinds.clone()
    }

    /// A copy of the history so far.
    pub fn history(&self) -> History {
        self.state().history.clone()
    }
}

/// True for the record of an injection, false for its healing (restart, resume, heal).
fn is_injection(fault: &crate::history::Fault) -> bool {
    use crate::history::Fault;
    matches!(
        fault,
        Fault::Kill { .. }
            | Fault::Pause { .. }
            | Fault::Partition { .. }
            | Fault::RestartConsumer { .. }
            | Fault::Reset
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{ConsumerId, Queue};

    #[test]
    fn pending_follows_acks_and_deliveries_in_any_order() {
        let recorder = Recorder::new();
        let queue = Queue {
            broker: "b".into(),
            queue_id: 0,
        };
        let consumer = ConsumerId {
            consumer: 0,
            session: 0,
        };
        let (a, b) = (Value::new(0, 0), Value::new(0, 1));
        recorder.record(Op::SendInvoke { value: a });
        recorder.record(Op::SendInvoke { value: b });
        // b is delivered before its acknowledgement is recorded.
        recorder.record(Op::Deliver {
            consumer,
            queue: queue.clone(),
            offset: 1,
            value: b,
        });
        recorder.record(Op::SendOk {
            value: a,
            queue: queue.clone(),
            offset: 0,
        });
        recorder.record(Op::SendOk {
            value: b,
            queue: queue.clone(),
            offset: 1,
        });
        assert_eq!(recorder.totals().pending, 1);
        recorder.record(Op::Deliver {
            consumer,
            queue,
            offset: 0,
            value: a,
        });
        let totals = recorder.totals();
        assert_eq!((totals.acked, totals.delivered, totals.pending), (2, 2, 0));
        let history = recorder.history();
        assert_eq!(history.events.len(), 6);
        assert!(history.events.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
    }
}
