//! Reset fences: after a reset (or a correction) of a group's offsets, the consumers that were
//! online still hold positions and in-flight commits from before it. Remoting commits carry no
//! generation, so the core fences those **clients** (by client id, not by connection) per
//! queue:
//!
//! 1. A reset fences the clients online *before* its record is appended (the fence is pending
//!    while the record becomes durable) and activates the fence once it is. A commit reads the
//!    group's generation before it looks at the fences and is appended with that generation,
//!    so a commit racing with the reset either lands before the reset record (and the reset
//!    overrides it) or is rejected: by the fence, or by the store as stale.
//! 2. A commit from a fenced client is refused unless it equals the stored offset (it changes
//!    nothing): a running consumer can never undo a reset (invariant 3, offset pitfalls A2 and
//!    C8). A commit from a connection that has not identified its client (no heartbeat) is
//!    refused on a queue that fences anyone: it may be a fenced client, reconnected.
//! 3. A fenced client's first pull of the queue after the reset is durable lifts its fence: a
//!    pull at the group's stored offset shows the client follows it; any other offset is
//!    answered "offset moved" with the stored offset, which clients adopt. While the reset is
//!    pending, pulls are served and the fence stays.
//! 4. Clients that arrive after the reset are never fenced: they read the stored offset.
//! 5. A fence belongs to the client, not to its connection: a reconnect (same client id, new
//!    connection) is still fenced. The reset record names the fenced clients and the store's
//!    offset view keeps each queue's fence until the client commits there, so the fences are
//!    rebuilt from the log after a restart ([`ResetFences::recover`]) and replicate with it.
//!
//! Bounds: one fence per (group, topic, queue) moved by a reset, each holding at most
//! [`FENCED_CLIENTS_MAX`] clients (the union of the clients online at each move not yet
//! followed).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use ferromq_store::offsets::OffsetFence;
pub use ferromq_store::offsets::FENCED_CLIENTS_MAX;

#[derive(Debug, Clone)]
struct Fence {
    /// The offset the reset set (for remarks; pulls are redirected to the stored offset).
    offset: u64,
    /// The generation the reset established; 0 while pending.
    generation: u64,
    /// True until the reset record is durable.
    pending: bool,
    /// The installation this fence belongs to.
    token: u64,
    clients: BTreeSet<String>,
    /// The fence this one replaced, restored if its reset is withdrawn.
    replaced: Option<Box<Fence>>,
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

/// Why a commit is blocked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocked {
    /// The offset the reset set.
    pub offset: u64,
    /// The generation it established (0 while the reset is pending).
    pub generation: u64,
}

fn key(group: &str, topic: &str, queue_id: u32) -> QueueKey {
    (group.to_string(), topic.to_string(), queue_id)
}

impl ResetFences {
    /// Rebuilds the fences the log recorded (at start, before any request is served).
    pub fn recover(&self, recorded: Vec<OffsetFence>) {
        let mut fences = self.fences.lock().expect("fences lock");
        for fence in recorded {
            fences.insert(
                key(&fence.group, &fence.topic, fence.queue_id),
                Fence {
                    offset: fence.offset,
                    generation: fence.generation,
                    pending: false,
                    token: 0,
                    clients: fence.clients.into_iter().collect(),
                    replaced: None,
                },
            );
        }
    }

    /// Fences `clients` on every `(queue_id, offset)` of (group, topic) before a reset record
    /// is written, keeping the clients an earlier fence of the queue still holds; the fences
    /// block commits at once and lift on pulls only once activated. Returns the clients each
    /// queue now fences, for the record, with the token.
    pub fn install_pending(
        &self,
        group: &str,
        topic: &str,
        queues: &[(u32, u64)],
        clients: &[String],
    ) -> (FenceToken, Vec<String>) {
        let token = self.next_token.fetch_add(1, Ordering::Relaxed) + 1;
        let mut fences = self.fences.lock().expect("fences lock");
        let mut all = BTreeSet::new();
        for &(queue_id, offset) in queues {
            let key = key(group, topic, queue_id);
            let replaced = fences.remove(&key);
            let mut fenced: BTreeSet<String> = clients.iter().cloned().collect();
            if let Some(previous) = &replaced {
                for client in &previous.clients {
                    if fenced.len() >= FENCED_CLIENTS_MAX {
                        break;
                    }
                    fenced.insert(client.clone());
                }
            }
            while fenced.len() > FENCED_CLIENTS_MAX {
                fenced.pop_last();
            }
            if fenced.is_empty() {
                // Nobody to fence (and no earlier fence): the store's generation rule alone
                // protects the reset.
                continue;
            }
            all.extend(fenced.iter().cloned());
            fences.insert(
                key,
                Fence {
                    offset,
                    generation: 0,
                    pending: true,
                    token,
                    clients: fenced,
                    replaced: replaced.map(Box::new),
                },
            );
        }
        (FenceToken(token), all.into_iter().collect())
    }

    /// The reset of `token` is durable (or its outcome unknown): its fences now lift on pulls.
    pub fn activate(&self, token: FenceToken, generation: u64) {
        let mut fences = self.fences.lock().expect("fences lock");
        for fence in fences.values_mut().filter(|f| f.token == token.0) {
            fence.pending = false;
            fence.generation = generation;
            fence.replaced = None;
        }
    }

    /// The reset of `token` was refused and nothing was written: its fences give way to the
    /// ones they replaced.
    pub fn withdraw(&self, token: FenceToken) {
        let mut fences = self.fences.lock().expect("fences lock");
        let keys: Vec<QueueKey> = fences
            .iter()
            .filter(|(_, f)| f.token == token.0)
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            if let Some(fence) = fences.remove(&key) {
                if let Some(previous) = fence.replaced {
                    fences.insert(key, *previous);
                }
            }
        }
    }

    /// The reset a commit from `client` would undo, while the client has not followed it. An
    /// unidentified client (`None`) is blocked by any fence of the queue.
    pub fn blocks_commit(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
        client: Option<&str>,
    ) -> Option<Blocked> {
        let fences = self.fences.lock().expect("fences lock");
        let fence = fences.get(&key(group, topic, queue_id))?;
        let blocked = client.is_none_or(|c| fence.clients.contains(c));
        blocked.then_some(Blocked {
            offset: fence.offset,
            generation: fence.generation,
        })
    }

    /// Whether (group, topic, queue) fences anyone.
    pub fn is_fenced(&self, group: &str, topic: &str, queue_id: u32) -> bool {
        self.fences
            .lock()
            .expect("fences lock")
            .contains_key(&key(group, topic, queue_id))
    }

    /// A pull from `client`: once the reset is durable this lifts the client's fence and
    /// returns the reset offset (the caller compares the pull with the stored offset);
    /// `None` when the client is not fenced there (or the reset is pending).
    pub fn lift_on_pull(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
        client: Option<&str>,
    ) -> Option<u64> {
        let client = client?;
        let mut fences = self.fences.lock().expect("fences lock");
        if fences.is_empty() {
            // Nearly every pull: no reset is in progress, and the key costs two strings.
            return None;
        }
        let key = key(group, topic, queue_id);
        let fence = fences.get_mut(&key)?;
        if fence.pending || !fence.clients.remove(client) {
            return None;
        }
        let reset_offset = fence.offset;
        if fence.clients.is_empty() {
            fences.remove(&key);
        }
        Some(reset_offset)
    }

    /// Number of queues with a fence (metrics, tests).
    pub fn len(&self) -> usize {
        self.fences.lock().expect("fences lock").len()
    }

    /// True when no queue is fenced.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    fn install(fences: &ResetFences, queue: u32, offset: u64, generation: u64, clients: &[&str]) {
        let (token, _) = fences.install_pending("G", "T", &[(queue, offset)], &ids(clients));
        fences.activate(token, generation);
    }

    #[test]
    fn a_fence_blocks_a_clients_commits_until_it_pulls_whatever_its_connection() {
        let fences = ResetFences::default();
        install(&fences, 0, 3, 2, &["a", "b"]);
        let blocked = Some(Blocked {
            offset: 3,
            generation: 2,
        });
        assert_eq!(fences.blocks_commit("G", "T", 0, Some("a")), blocked);
        assert_eq!(fences.blocks_commit("G", "T", 1, Some("a")), None);
        assert_eq!(fences.blocks_commit("G", "T", 0, Some("c")), None);
        assert_eq!(
            fences.blocks_commit("G", "T", 0, None),
            blocked,
            "an unidentified connection may be a fenced client"
        );
        assert_eq!(fences.lift_on_pull("G", "T", 0, Some("a")), Some(3));
        assert_eq!(fences.blocks_commit("G", "T", 0, Some("a")), None);
        assert_eq!(fences.lift_on_pull("G", "T", 0, Some("a")), None);
        assert_eq!(fences.lift_on_pull("G", "T", 0, None), None);
        assert_eq!(fences.lift_on_pull("G", "T", 0, Some("b")), Some(3));
        assert!(fences.is_empty());
    }

    #[test]
    fn a_pending_fence_blocks_commits_but_does_not_lift_on_pulls() {
        let fences = ResetFences::default();
        let (token, fenced) = fences.install_pending("G", "T", &[(0, 4), (1, 9)], &ids(&["a"]));
        assert_eq!(fenced, ids(&["a"]));
        assert!(fences.blocks_commit("G", "T", 1, Some("a")).is_some());
        assert_eq!(fences.lift_on_pull("G", "T", 0, Some("a")), None);
        fences.activate(token, 5);
        assert_eq!(
            fences.blocks_commit("G", "T", 0, Some("a")),
            Some(Blocked {
                offset: 4,
                generation: 5
            })
        );
    }

    #[test]
    fn a_second_reset_keeps_clients_the_first_still_fences_and_a_withdrawn_one_restores_them() {
        let fences = ResetFences::default();
        install(&fences, 0, 4, 1, &["a"]);
        let (token, fenced) = fences.install_pending("G", "T", &[(0, 2)], &ids(&["b"]));
        assert_eq!(fenced, ids(&["a", "b"]));
        fences.withdraw(token);
        assert_eq!(
            fences.blocks_commit("G", "T", 0, Some("a")),
            Some(Blocked {
                offset: 4,
                generation: 1
            })
        );
        assert_eq!(fences.blocks_commit("G", "T", 0, Some("b")), None);
    }

    #[test]
    fn recorded_fences_are_recovered() {
        let fences = ResetFences::default();
        fences.recover(vec![OffsetFence {
            group: "G".into(),
            topic: "T".into(),
            queue_id: 2,
            offset: 7,
            generation: 3,
            clients: ids(&["a"]),
        }]);
        assert_eq!(
            fences.blocks_commit("G", "T", 2, Some("a")),
            Some(Blocked {
                offset: 7,
                generation: 3
            })
        );
        assert_eq!(fences.lift_on_pull("G", "T", 2, Some("a")), Some(7));
    }
}
