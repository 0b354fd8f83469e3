//! Reset fences: after an administrator resets a group's offsets, the consumers that were
//! online still hold positions and in-flight commits from before the reset. Remoting commits
//! carry no generation, so the broker fences those connections per queue instead:
//!
//! 1. A reset fences the connections online *before* its record is appended (the fence is
//!    pending while the record becomes durable) and activates the fence once it is. A commit
//!    reads the group's generation before it looks at the fences and is appended with that
//!    generation, so a commit racing with the reset either lands before the reset record (and
//!    the reset overrides it) or is rejected: by the fence, or by the store as stale.
//! 2. A commit (UPDATE_CONSUMER_OFFSET or the one a pull carries) from a fenced connection is
//!    stale and rejected (COMMIT_STALE_GENERATION) unless it equals the stored offset (it
//!    changes nothing): a running consumer can never undo a reset (invariant 3, offset
//!    pitfalls A2 and C8).
//! 3. A fenced connection's first pull of the queue after the reset is durable lifts its
//!    fence: a pull at the group's stored offset shows the client follows it; any other offset
//!    is answered PULL_OFFSET_MOVED with the stored offset (the reset offset, or the progress
//!    other members made since), which clients adopt. While the reset is pending, pulls are
//!    served and the fence stays.
//! 4. Connections that arrive after the reset are never fenced: they read the stored offset.
//!    A closed connection's fences go with it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

#[derive(Debug)]
struct Fence {
    /// The offset the reset set (for remarks; pulls are redirected to the stored offset).
    offset: u64,
    /// The generation the reset established; 0 while pending.
    generation: u64,
    /// True until the reset record is durable.
    pending: bool,
    /// The installation this fence belongs to.
    token: u64,
    channels: HashSet<u64>,
}

type QueueKey = (String, String, u32);

/// The fences of every reset queue.
#[derive(Debug, Default)]
pub struct ResetFences {
    fences: Mutex<HashMap<QueueKey, Fence>>,
    next_token: AtomicU64,
}

/// One reset's fences, installed before its record is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a pending fence must be activated or withdrawn"]
pub struct FenceToken(u64);

/// What a pull from a fenced connection must answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoveTo {
    /// The group's stored offset for the queue.
    pub offset: u64,
}

/// Why a commit from a connection is blocked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocked {
    /// The offset the reset set.
    pub offset: u64,
    /// The generation it established (0 while the reset is pending).
    pub generation: u64,
}

impl ResetFences {
    /// Fences `channels` on every `(queue_id, offset)` of (group, topic) before a reset record
    /// is written; the fences block commits at once and lift on pulls only once activated.
    pub fn install_pending(
        &self,
        group: &str,
        topic: &str,
        queues: &[(u32, u64)],
        channels: &[u64],
    ) -> FenceToken {
        let token = self.next_token.fetch_add(1, Ordering::Relaxed) + 1;
        let mut fences = self.fences.lock().expect("fences lock");
        for &(queue_id, offset) in queues {
            let key = (group.to_string(), topic.to_string(), queue_id);
            if channels.is_empty() {
                fences.remove(&key);
                continue;
            }
            fences.insert(
                key,
                Fence {
                    offset,
                    generation: 0,
                    pending: true,
                    token,
                    channels: channels.iter().copied().collect(),
                },
            );
        }
        FenceToken(token)
    }

    /// The reset of `token` is durable (or its outcome unknown): its fences now lift on pulls.
    pub fn activate(&self, token: FenceToken, generation: u64) {
        let mut fences = self.fences.lock().expect("fences lock");
        for fence in fences.values_mut().filter(|f| f.token == token.0) {
            fence.pending = false;
            fence.generation = generation;
        }
    }

    /// The reset of `token` was refused and nothing was written: drop its fences.
    pub fn withdraw(&self, token: FenceToken) {
        let mut fences = self.fences.lock().expect("fences lock");
        fences.retain(|_, fence| fence.token != token.0);
    }

    /// Fences `channels` on (group, topic, queue) after a durable move of its offset to
    /// `offset` at `generation` (a correction).
    pub fn install(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
        offset: u64,
        generation: u64,
        channels: impl IntoIterator<Item = u64>,
    ) {
        let channels: Vec<u64> = channels.into_iter().collect();
        let token = self.install_pending(group, topic, &[(queue_id, offset)], &channels);
        self.activate(token, generation);
    }

    /// The reset a commit from `channel` would undo, while the connection has not followed it.
    pub fn blocks_commit(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
        channel: u64,
    ) -> Option<Blocked> {
        let fences = self.fences.lock().expect("fences lock");
        let fence = fences.get(&(group.to_string(), topic.to_string(), queue_id))?;
        fence.channels.contains(&channel).then_some(Blocked {
            offset: fence.offset,
            generation: fence.generation,
        })
    }

    /// A pull from `channel` at `offset`. Once the reset is durable this lifts the
    /// connection's fence and says where it must move when it pulled anywhere but the group's
    /// stored offset (`stored`, asked only when needed; the reset offset when there is none).
    pub fn on_pull(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
        channel: u64,
        offset: u64,
        stored: impl FnOnce() -> Option<u64>,
    ) -> Option<MoveTo> {
        let key = (group.to_string(), topic.to_string(), queue_id);
        let reset_offset = {
            let mut fences = self.fences.lock().expect("fences lock");
            let fence = fences.get_mut(&key)?;
            if fence.pending || !fence.channels.remove(&channel) {
                return None;
            }
            let reset_offset = fence.offset;
            if fence.channels.is_empty() {
                fences.remove(&key);
            }
            reset_offset
        };
        // Read outside the lock: the store may wait briefly for its dispatcher.
        let target = stored().unwrap_or(reset_offset);
        (offset != target).then_some(MoveTo { offset: target })
    }

    /// Drops a closed connection from every fence.
    pub fn channel_closed(&self, channel: u64) {
        let mut fences = self.fences.lock().expect("fences lock");
        for fence in fences.values_mut() {
            fence.channels.remove(&channel);
        }
        fences.retain(|_, fence| !fence.channels.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_blocks_commits_until_the_connection_pulls() {
        let fences = ResetFences::default();
        fences.install("G", "T", 0, 3, 2, [7, 8]);
        assert_eq!(
            fences.blocks_commit("G", "T", 0, 7),
            Some(Blocked {
                offset: 3,
                generation: 2
            })
        );
        assert_eq!(
            fences.blocks_commit("G", "T", 1, 7),
            None,
            "other queues are free"
        );
        assert_eq!(
            fences.blocks_commit("G", "T", 0, 9),
            None,
            "later connections are free"
        );
        assert_eq!(
            fences.on_pull("G", "T", 0, 7, 10, || Some(3)),
            Some(MoveTo { offset: 3 })
        );
        assert_eq!(fences.blocks_commit("G", "T", 0, 7), None);
        assert_eq!(
            fences.on_pull("G", "T", 0, 8, 3, || Some(3)),
            None,
            "already at the stored offset"
        );
        assert_eq!(fences.blocks_commit("G", "T", 0, 8), None);
        fences.install("G", "T", 0, 5, 3, [7]);
        fences.channel_closed(7);
        assert_eq!(fences.blocks_commit("G", "T", 0, 7), None);
    }

    #[test]
    fn a_pending_fence_blocks_commits_but_does_not_lift_on_pulls() {
        let fences = ResetFences::default();
        let token = fences.install_pending("G", "T", &[(0, 4), (1, 9)], &[7]);
        assert!(fences.blocks_commit("G", "T", 1, 7).is_some());
        assert_eq!(
            fences.on_pull("G", "T", 0, 7, 20, || panic!("not asked while pending")),
            None
        );
        assert!(
            fences.blocks_commit("G", "T", 0, 7).is_some(),
            "still fenced"
        );
        fences.activate(token, 5);
        assert_eq!(
            fences.blocks_commit("G", "T", 0, 7),
            Some(Blocked {
                offset: 4,
                generation: 5
            })
        );
        // Another member advanced the queue since the reset: the pull follows the stored
        // offset, not the (older) reset offset.
        assert_eq!(
            fences.on_pull("G", "T", 0, 7, 20, || Some(11)),
            Some(MoveTo { offset: 11 })
        );
        assert_eq!(fences.on_pull("G", "T", 1, 7, 9, || Some(9)), None);
        assert!(fences.blocks_commit("G", "T", 1, 7).is_none());
    }

    #[test]
    fn a_withdrawn_reset_leaves_no_fence_and_spares_later_ones() {
        let fences = ResetFences::default();
        let first = fences.install_pending("G", "T", &[(0, 4)], &[7]);
        let second = fences.install_pending("G", "T", &[(1, 2)], &[7]);
        fences.withdraw(first);
        assert!(fences.blocks_commit("G", "T", 0, 7).is_none());
        assert!(fences.blocks_commit("G", "T", 1, 7).is_some());
        fences.activate(second, 1);
        assert_eq!(fences.on_pull("G", "T", 1, 7, 2, || None), None);
    }
}
