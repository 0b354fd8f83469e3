//! A check the harness makes on top of the checker: an acknowledged reset is not undone.
//!
//! After `resetOffsetByTime` moved queue `q` to `r` (an acknowledged `Op::Reset`), the group's
//! committed offset of `q` may only grow past `r` as consumers re-read the queue from `r`: a
//! committed offset `v > r` means "everything below `v` was consumed", so every offset in
//! `[r, v)` must have been delivered after the reset was invoked. An observed committed offset
//! beyond that contiguous frontier is a commit made from a position held before the reset —
//! the reset was undone (offset pitfalls A2/C8; DESIGN invariant 3).
//!
//! The rule is checked on `Observe` events only (they read the broker's state), from
//! [`OBSERVE_GRACE_MS`] after the reset's acknowledgement (an observation recorded just after
//! the reset may have been read before it), until the next reset of the queue.

use std::collections::{BTreeMap, BTreeSet};

use crate::history::{Fault, History, Op, Queue};

/// Observations this soon after a reset's acknowledgement are not judged.
pub const OBSERVE_GRACE_MS: u64 = 2_500;

/// One undone reset: the committed offset observed beyond what was re-read since the reset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UndoneReset {
    /// The queue.
    pub queue: Queue,
    /// The offset the reset set.
    pub reset_to: u64,
    /// When the reset was acknowledged (ms into the run).
    pub reset_at_ms: u64,
    /// The committed offset observed.
    pub committed: u64,
    /// The highest offset `f` such that `[reset_to, f)` was delivered since the reset.
    pub frontier: u64,
    /// When it was observed.
    pub observed_at_ms: u64,
}

struct Watch {
    reset_to: u64,
    reset_at_ms: u64,
    delivered: BTreeSet<u64>,
    frontier: u64,
    reported: bool,
}

/// Every queue whose acknowledged reset was undone (at most one report per reset and queue).
pub fn undone_resets(history: &History) -> Vec<UndoneReset> {
    // Deliveries since the last reset invocation, per queue, until the reset is acknowledged.
    let mut pending: BTreeMap<Queue, BTreeSet<u64>> = BTreeMap::new();
    let mut invoked = false;
    // An unsettled attempt may land any time before the acknowledged retry: deliveries since
    // the first attempt count as re-reads.
    let mut unsettled = false;
    let mut watches: BTreeMap<Queue, Watch> = BTreeMap::new();
    let mut undone = Vec::new();
    for event in &history.events {
        match &event.op {
            Op::Fault(Fault::Reset) => {
                if !unsettled {
                    pending.clear();
                }
                invoked = true;
            }
            Op::ResetUnsettled { .. } => unsettled = true,
            Op::Reset { offsets, .. } => {
                for (queue, offset) in offsets {
                    let delivered = pending.remove(queue).unwrap_or_default();
                    let mut watch = Watch {
                        reset_to: *offset,
                        reset_at_ms: event.at_ms,
                        delivered,
                        frontier: *offset,
                        reported: false,
                    };
                    advance(&mut watch);
                    watches.insert(queue.clone(), watch);
                }
                invoked = false;
                unsettled = false;
            }
            Op::Deliver { queue, offset, .. } => {
                if invoked {
                    pending.entry(queue.clone()).or_default().insert(*offset);
                }
                if let Some(watch) = watches.get_mut(queue) {
                    watch.delivered.insert(*offset);
                    advance(watch);
                }
            }
            Op::Observe {
                queue,
                committed: Some(committed),
                ..
            } => {
                let Some(watch) = watches.get_mut(queue) else {
                    continue;
                };
                if watch.reported || event.at_ms < watch.reset_at_ms + OBSERVE_GRACE_MS {
                    continue;
                }
                if *committed > watch.frontier {
                    watch.reported = true;
                    undone.push(UndoneReset {
                        queue: queue.clone(),
                        reset_to: watch.reset_to,
                        reset_at_ms: watch.reset_at_ms,
                        committed: *committed,
                        frontier: watch.frontier,
                        observed_at_ms: event.at_ms,
                    });
                }
            }
            _ => {}
        }
    }
    undone
}

fn advance(watch: &mut Watch) {
    while watch.delivered.contains(&watch.frontier) {
        watch.frontier += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{ConsumerId, Value};

    fn queue() -> Queue {
        Queue {
            broker: "broker-a".into(),
            queue_id: 0,
        }
    }

    fn deliver(history: &mut History, at_ms: u64, offset: u64) {
        history.push(
            at_ms,
            Op::Deliver {
                consumer: ConsumerId {
                    consumer: 0,
                    session: 0,
                },
                queue: queue(),
                offset,
                value: Value::new(0, offset),
            },
        );
    }

    fn observe(history: &mut History, at_ms: u64, committed: u64) {
        history.push(
            at_ms,
            Op::Observe {
                queue: queue(),
                committed: Some(committed),
                max_offset: 1_000,
                generation: None,
            },
        );
    }

    fn reset(history: &mut History, at_ms: u64, to: u64) {
        history.push(at_ms, Op::Fault(Fault::Reset));
        history.push(
            at_ms + 10,
            Op::Reset {
                offsets: vec![(queue(), to)],
                generation: Some(1),
            },
        );
    }

    #[test]
    fn a_reset_followed_by_rereading_is_kept() {
        let mut history = History::new();
        observe(&mut history, 0, 10);
        reset(&mut history, 100, 4);
        for offset in 4..12 {
            deliver(&mut history, 200 + offset, offset);
        }
        observe(&mut history, 5_000, 12);
        assert!(undone_resets(&history).is_empty());
    }

    #[test]
    fn a_commit_from_before_the_reset_undoes_it_and_is_reported() {
        let mut history = History::new();
        reset(&mut history, 100, 4);
        // The consumer carried on from its old position 10 as if nothing happened.
        for offset in 10..14 {
            deliver(&mut history, 200 + offset, offset);
        }
        observe(&mut history, 1_000, 14); // within the grace period: not judged
        observe(&mut history, 5_000, 14);
        observe(&mut history, 6_000, 14);
        let undone = undone_resets(&history);
        assert_eq!(undone.len(), 1, "{undone:?}");
        assert_eq!(
            (undone[0].reset_to, undone[0].committed, undone[0].frontier),
            (4, 14, 4)
        );
    }
}
