//! Reset fences: after an administrator resets a group's offsets, the consumers that were
//! online still hold positions and in-flight commits from before the reset. Remoting commits
//! carry no generation, so the broker fences those connections per queue instead:
//!
//! 1. A commit (UPDATE_CONSUMER_OFFSET or the one a pull carries) from a fenced connection is
//!    stale and rejected (COMMIT_STALE_GENERATION), whatever its value: a running consumer can
//!    never undo a reset (invariant 3, offset pitfalls A2 and C8).
//! 2. The fenced connection's next pull of the queue lifts its fence: a pull at the reset
//!    offset shows the client already follows the reset; any other offset is answered
//!    PULL_OFFSET_MOVED with the reset offset, which clients adopt (and persist).
//! 3. Connections that arrive after the reset are never fenced: they read the reset offset.
//!    A closed connection's fences go with it.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

#[derive(Debug)]
struct Fence {
    offset: u64,
    generation: u64,
    channels: HashSet<u64>,
}

type QueueKey = (String, String, u32);

/// The fences of every reset queue.
#[derive(Debug, Default)]
pub struct ResetFences {
    fences: Mutex<HashMap<QueueKey, Fence>>,
}

/// What a pull from a fenced connection must answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoveTo {
    /// The reset offset.
    pub offset: u64,
}

impl ResetFences {
    /// Fences `channels` on (group, topic, queue) after a reset to `offset` at `generation`.
    pub fn install(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
        offset: u64,
        generation: u64,
        channels: impl IntoIterator<Item = u64>,
    ) {
        let channels: HashSet<u64> = channels.into_iter().collect();
        let key = (group.to_string(), topic.to_string(), queue_id);
        let mut fences = self.fences.lock().expect("fences lock");
        if channels.is_empty() {
            fences.remove(&key);
        } else {
            fences.insert(
                key,
                Fence {
                    offset,
                    generation,
                    channels,
                },
            );
        }
    }

    /// The reset a commit from `channel` would undo: `Some((offset, generation))` while the
    /// connection has not seen it.
    pub fn blocks_commit(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
        channel: u64,
    ) -> Option<(u64, u64)> {
        let fences = self.fences.lock().expect("fences lock");
        let fence = fences.get(&(group.to_string(), topic.to_string(), queue_id))?;
        fence
            .channels
            .contains(&channel)
            .then_some((fence.offset, fence.generation))
    }

    /// A pull from `channel` at `offset`: lifts the connection's fence and says where it must
    /// move when it pulled anywhere but the reset offset.
    pub fn on_pull(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
        channel: u64,
        offset: u64,
    ) -> Option<MoveTo> {
        let key = (group.to_string(), topic.to_string(), queue_id);
        let mut fences = self.fences.lock().expect("fences lock");
        let fence = fences.get_mut(&key)?;
        if !fence.channels.remove(&channel) {
            return None;
        }
        let reset_offset = fence.offset;
        if fence.channels.is_empty() {
            fences.remove(&key);
        }
        (offset != reset_offset).then_some(MoveTo {
            offset: reset_offset,
        })
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
        assert_eq!(fences.blocks_commit("G", "T", 0, 7), Some((3, 2)));
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
            fences.on_pull("G", "T", 0, 7, 10),
            Some(MoveTo { offset: 3 })
        );
        assert_eq!(fences.blocks_commit("G", "T", 0, 7), None);
        assert_eq!(
            fences.on_pull("G", "T", 0, 8, 3),
            None,
            "already at the reset offset"
        );
        assert_eq!(fences.blocks_commit("G", "T", 0, 8), None);
        fences.install("G", "T", 0, 5, 3, [7]);
        fences.channel_closed(7);
        assert_eq!(fences.blocks_commit("G", "T", 0, 7), None);
    }
}
