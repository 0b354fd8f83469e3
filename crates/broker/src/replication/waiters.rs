//! SYNC_MASTER writes waiting for their replicas, ordered by the log end each one needs, so an
//! acknowledgement wakes exactly the writes it completes — never every waiter (a wake-up storm
//! that would cost more CPU than the replication itself under load).
//!
//! Invariants:
//! 1. A waiter is released once, with success when every in-sync replica holds its end, or
//!    with the in-sync shortage when the set falls below `minInSyncReplicas`.
//! 2. At most [`SYNC_WAITERS_MAX`] writes wait at once; past it a write is answered at once
//!    as not replicated (it may still be, later), never queued without bound.

use std::collections::BTreeMap;

use tokio::sync::oneshot;

/// Most SYNC_MASTER writes waiting at once.
pub const SYNC_WAITERS_MAX: usize = 1 << 20;

/// Fewest waiters at which `add` looks for abandoned ones (writes whose sender stopped
/// waiting, after its timeout); see `SyncWaiters::prune_at`.
const PRUNE_FLOOR: usize = 1024;

/// Why a waiter was released without success: (members, needed).
pub type Shortage = (usize, usize);

/// The waiting writes.
#[derive(Debug, Default)]
pub struct SyncWaiters {
    next_id: u64,
    queue: BTreeMap<(u64, u64), oneshot::Sender<Result<(), Shortage>>>,
    /// The queue length at which `add` next drops abandoned waiters: twice the length left by
    /// the last pass (at least [`PRUNE_FLOOR`]), so the passes cost O(1) per `add` amortised
    /// instead of a scan of every waiter per write.
    prune_at: usize,
}

impl SyncWaiters {
    /// Registers a write ending at `end`; `None` when [`SYNC_WAITERS_MAX`] wait already.
    pub fn add(&mut self, end: u64) -> Option<oneshot::Receiver<Result<(), Shortage>>> {
        if self.queue.len() >= self.prune_at.clamp(PRUNE_FLOOR, SYNC_WAITERS_MAX) {
            self.queue.retain(|_, sender| !sender.is_closed());
            self.prune_at = self.queue.len().saturating_mul(2);
        }
        if self.queue.len() >= SYNC_WAITERS_MAX {
            return None;
        }
        let (sender, receiver) = oneshot::channel();
        self.next_id += 1;
        self.queue.insert((end, self.next_id), sender);
        Some(receiver)
    }

    /// Releases the waiters the in-sync state now decides: all of them with the shortage, or
    /// those whose end every in-sync replica holds (`replicated`: `None` = no replica in the
    /// set, so every end is held).
    pub fn release(&mut self, state: Result<Option<u64>, Shortage>) {
        match state {
            Err(shortage) => {
                for (_, sender) in std::mem::take(&mut self.queue) {
                    let _ = sender.send(Err(shortage));
                }
            }
            Ok(replicated) => {
                let held = replicated.unwrap_or(u64::MAX);
                let rest = match held.checked_add(1) {
                    Some(next) => self.queue.split_off(&(next, 0)),
                    None => BTreeMap::new(),
                };
                for (_, sender) in std::mem::replace(&mut self.queue, rest) {
                    let _ = sender.send(Ok(()));
                }
            }
        }
    }

    /// Writes waiting now.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_acknowledgement_releases_exactly_the_writes_it_completes() {
        let mut waiters = SyncWaiters::default();
        let mut low = waiters.add(10).unwrap();
        let mut mid = waiters.add(20).unwrap();
        let mut high = waiters.add(30).unwrap();
        waiters.release(Ok(Some(20)));
        assert_eq!(low.try_recv().unwrap(), Ok(()));
        assert_eq!(mid.try_recv().unwrap(), Ok(()));
        assert!(high.try_recv().is_err(), "30 is not held yet");
        assert_eq!(waiters.len(), 1);
        waiters.release(Err((1, 2)));
        assert_eq!(high.try_recv().unwrap(), Err((1, 2)));
        assert!(waiters.is_empty());
        let mut alone = waiters.add(u64::MAX).unwrap();
        waiters.release(Ok(None));
        assert_eq!(
            alone.try_recv().unwrap(),
            Ok(()),
            "no replica in the set holds back nothing"
        );
    }

    /// Abandoned waiters (their write timed out) are dropped once the queue doubles, not on
    /// every write, and never hold a place the bound needs.
    #[test]
    fn abandoned_waiters_are_dropped_when_the_queue_doubles() {
        let mut waiters = SyncWaiters::default();
        let abandoned: Vec<_> = (0..PRUNE_FLOOR as u64)
            .map(|end| waiters.add(end))
            .collect();
        drop(abandoned);
        assert_eq!(waiters.len(), PRUNE_FLOOR, "no pass below the floor");
        let mut kept = waiters.add(5_000).unwrap();
        assert_eq!(
            waiters.len(),
            1,
            "the pass at the floor dropped the abandoned"
        );
        let live: Vec<_> = (0..PRUNE_FLOOR as u64)
            .map(|end| waiters.add(end))
            .collect();
        assert_eq!(waiters.len(), PRUNE_FLOOR + 1, "live waiters are kept");
        waiters.release(Ok(Some(u64::MAX - 1)));
        assert_eq!(kept.try_recv().unwrap(), Ok(()));
        assert!(live.into_iter().all(|w| w.is_some()));
    }
}
