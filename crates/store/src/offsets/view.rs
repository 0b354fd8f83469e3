//! [`OffsetView`]: the consumer-offset table materialised from offset records.
//!
//! The rules it enforces are listed in the module header of `offsets`. Snapshot layout of
//! format version 1 (big-endian; strings are u64-length-prefixed UTF-8, so any name a view
//! can hold is encodable and `encode_into` cannot fail):
//!
//! ```text
//! u8  version = 1
//! u64 group count, groups in ascending order, each:
//!     str group
//!     u64 topic count, topics in ascending order, each:
//!         str topic
//!         u64 generation
//!         u64 queue count, queues in ascending queue_id order, each:
//!             u32 queue_id, u64 offset, u64 generation, i64 updated_ms
//! ```
//!
//! Format version 2 (written only when the view holds at least one fence) adds, after each
//! topic's queues: `u64 fence count`, fences in ascending queue_id order, each `u32 queue_id,
//! u64 offset, u64 generation, u64 client count, str client...` (clients ascending).

use std::collections::{BTreeMap, BTreeSet};

use thiserror::Error;

use super::command::{
    OffsetCodecError, OffsetCommand, OffsetKind, Reader, OFFSET_FORMAT_VERSION,
    OFFSET_FORMAT_VERSION_FENCES,
};

/// Most clients one queue's fence holds. A reset's fence is the union of the clients it names
/// and those an earlier fence still holds; past this bound the earlier ones (which have had
/// the longest to follow) are dropped first.
pub const FENCED_CLIENTS_MAX: usize = 4096;

/// A reset's or correction's fence on one queue, as the log recorded it: the consumers online
/// at the move that have not yet committed since. The broker refuses their commits on the
/// queue until they pull it (see the broker's `core::fences`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetFence {
    /// Consumer group.
    pub group: String,
    /// Topic.
    pub topic: String,
    /// Queue.
    pub queue_id: u32,
    /// The offset the move set.
    pub offset: u64,
    /// The generation it established.
    pub generation: u64,
    /// Fenced client ids, ascending.
    pub clients: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct QueueFence {
    offset: u64,
    generation: u64,
    clients: BTreeSet<String>,
}

/// Why one entry of an offset command was not applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum CommitRejection {
    /// offset < stored offset within the same generation (a stale client would roll progress back)
    #[error("offset {proposed} is below the stored offset {stored}: progress may not move backwards without a reset")]
    Regression { stored: u64, proposed: u64 },
    /// commit carries an older generation than the current one (sent before a reset/correction)
    #[error("generation {proposed} is stale: the current reset generation is {current}")]
    StaleGeneration { current: u64, proposed: u64 },
    /// commit carries a generation newer than any the store issued
    #[error("generation {proposed} was never issued: the current reset generation is {current}")]
    UnknownGeneration { current: u64, proposed: u64 },
    /// offset beyond the queue's max offset (next offset to be written)
    #[error("offset {proposed} is past the queue's max offset {max}")]
    PastMax { max: u64, proposed: u64 },
    /// A reset or correction names more than one topic; generations are per (group, topic),
    /// so such a command would have no single generation to establish. Every entry of the
    /// command is rejected.
    #[error("a reset or correction must name exactly one topic")]
    MixedTopics,
    /// A reset or correction read back from the log carries no generation; the store must
    /// assign one (current + 1) before appending it. Every entry of the command is rejected.
    #[error("a stored reset or correction carries no generation")]
    MissingGeneration,
    /// A conditional correction ([`crate::MessageStore::correct_offsets`]) found the stored
    /// offset changed since the broker judged the correction justified; nothing was written
    /// for the entry, so a concurrent commit is never undone.
    #[error(
        "the stored offset moved from {expected:?} to {stored:?} after the correction was judged"
    )]
    Moved {
        expected: Option<u64>,
        stored: Option<u64>,
    },
}

/// The outcome for one entry of an offset command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The entry is (or would be) stored.
    Applied,
    /// A commit equal to the stored offset: nothing changes, not even the timestamp.
    Unchanged,
    /// The entry is (or would be) skipped, for the given reason.
    Rejected(CommitRejection),
}

/// The stored progress of one (group, topic, queue).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredOffset {
    /// The next queue offset to consume.
    pub offset: u64,
    /// The (group, topic) reset generation in force when this offset was stored.
    pub generation: u64,
    /// Timestamp of the log record that stored this offset, in milliseconds.
    pub updated_ms: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct TopicOffsets {
    generation: u64,
    queues: BTreeMap<u32, StoredOffset>,
    /// Fences of the latest moves, by queue; a queue's entry exists only while it fences
    /// someone.
    fences: BTreeMap<u32, QueueFence>,
}

/// Consumer offsets per (group, topic, queue) plus the reset generation per (group, topic),
/// materialised by applying offset records in log order.
///
/// A group or topic is present only while it holds at least one stored offset, so equal
/// histories give equal views and equal encodings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OffsetView {
    groups: BTreeMap<String, BTreeMap<String, TopicOffsets>>,
}

struct Evaluation {
    verdicts: Vec<Verdict>,
    /// For a reset or correction with at least one applied entry: the generation its
    /// topic moves to.
    established: Option<u64>,
}

impl OffsetView {
    /// An empty view: no offsets, every generation 0.
    pub fn new() -> Self {
        Self::default()
    }

    fn topic(&self, group: &str, topic: &str) -> Option<&TopicOffsets> {
        self.groups.get(group)?.get(topic)
    }

    /// The stored progress of (group, topic, queue_id), or `None` if nothing was ever
    /// stored for it.
    pub fn get(&self, group: &str, topic: &str, queue_id: u32) -> Option<StoredOffset> {
        self.topic(group, topic)?.queues.get(&queue_id).copied()
    }

    /// current reset generation of (group, topic); 0 if never reset
    pub fn generation(&self, group: &str, topic: &str) -> u64 {
        self.topic(group, topic).map_or(0, |t| t.generation)
    }

    /// The generation a new Reset/Correction of (group, topic) would establish: generation(group, topic) + 1.
    ///
    /// Saturates at `u64::MAX`, where any further reset is rejected as stale.
    pub fn next_generation(&self, group: &str, topic: &str) -> u64 {
        self.generation(group, topic).saturating_add(1)
    }

    /// Verdict per entry (same order as cmd.entries) WITHOUT mutating. `queue_max(topic, queue_id)` gives the queue's max offset (next offset to be written).
    ///
    /// The verdicts are those [`OffsetView::apply`] would return, except that a reset or
    /// correction without a generation is judged as if the store had assigned
    /// [`OffsetView::next_generation`], so only its topic and `PastMax` rules are checked.
    pub fn check(&self, cmd: &OffsetCommand, queue_max: &dyn Fn(&str, u32) -> u64) -> Vec<Verdict> {
        self.evaluate(cmd, queue_max, true).verdicts
    }

    /// Applies a command (as read back from the log) at `timestamp_ms`: entries whose verdict is Applied are stored; Unchanged ones touch nothing; Rejected ones are skipped. Returns the verdicts.
    ///
    /// A reset or correction with at least one applied entry also moves its topic's
    /// generation to the command's generation.
    pub fn apply(
        &mut self,
        cmd: &OffsetCommand,
        timestamp_ms: i64,
        queue_max: &dyn Fn(&str, u32) -> u64,
    ) -> Vec<Verdict> {
        let Evaluation {
            verdicts,
            established,
        } = self.evaluate(cmd, queue_max, false);
        for (entry, verdict) in cmd.entries.iter().zip(&verdicts) {
            if *verdict != Verdict::Applied {
                continue;
            }
            let topic = self
                .groups
                .entry(cmd.group.clone())
                .or_default()
                .entry(entry.topic.clone())
                .or_default();
            if let Some(g) = established {
                topic.generation = g;
            }
            let stored = StoredOffset {
                offset: entry.offset,
                generation: topic.generation,
                updated_ms: timestamp_ms,
            };
            topic.queues.insert(entry.queue_id, stored);
            match cmd.kind {
                OffsetKind::Commit => lift_fence(&mut topic.fences, entry.queue_id, &cmd.client_id),
                OffsetKind::Reset | OffsetKind::Correction => raise_fence(
                    &mut topic.fences,
                    entry.queue_id,
                    entry.offset,
                    topic.generation,
                    &cmd.fenced_clients,
                ),
            }
        }
        verdicts
    }

    /// Every fence the view holds, in (group, topic, queue) order.
    pub fn fences(&self) -> Vec<OffsetFence> {
        let mut out = Vec::new();
        for (group, topics) in &self.groups {
            for (topic, t) in topics {
                for (queue_id, fence) in &t.fences {
                    out.push(OffsetFence {
                        group: group.clone(),
                        topic: topic.clone(),
                        queue_id: *queue_id,
                        offset: fence.offset,
                        generation: fence.generation,
                        clients: fence.clients.iter().cloned().collect(),
                    });
                }
            }
        }
        out
    }

    fn has_fences(&self) -> bool {
        self.groups
            .values()
            .flat_map(|topics| topics.values())
            .any(|t| !t.fences.is_empty())
    }

    fn evaluate(
        &self,
        cmd: &OffsetCommand,
        queue_max: &dyn Fn(&str, u32) -> u64,
        assume_next_generation: bool,
    ) -> Evaluation {
        match cmd.kind {
            OffsetKind::Commit => Evaluation {
                verdicts: self.evaluate_commit(cmd, queue_max),
                established: None,
            },
            OffsetKind::Reset | OffsetKind::Correction => {
                self.evaluate_reset(cmd, queue_max, assume_next_generation)
            }
        }
    }

    fn evaluate_commit(
        &self,
        cmd: &OffsetCommand,
        queue_max: &dyn Fn(&str, u32) -> u64,
    ) -> Vec<Verdict> {
        // Offsets applied by earlier entries of this command, so that a queue named twice
        // is judged exactly as two consecutive commits would be.
        let mut pending: BTreeMap<(&str, u32), u64> = BTreeMap::new();
        let mut verdicts = Vec::with_capacity(cmd.entries.len());
        for entry in &cmd.entries {
            let proposed = entry.offset;
            let current = self.generation(&cmd.group, &entry.topic);
            let verdict = match cmd.generation {
                Some(g) if g < current => Verdict::Rejected(CommitRejection::StaleGeneration {
                    current,
                    proposed: g,
                }),
                Some(g) if g > current => Verdict::Rejected(CommitRejection::UnknownGeneration {
                    current,
                    proposed: g,
                }),
                _ => {
                    let max = queue_max(&entry.topic, entry.queue_id);
                    let key = (entry.topic.as_str(), entry.queue_id);
                    let stored = pending.get(&key).copied().or_else(|| {
                        self.get(&cmd.group, &entry.topic, entry.queue_id)
                            .map(|s| s.offset)
                    });
                    if proposed > max {
                        Verdict::Rejected(CommitRejection::PastMax { max, proposed })
                    } else {
                        match stored {
                            Some(stored) if proposed < stored => {
                                Verdict::Rejected(CommitRejection::Regression { stored, proposed })
                            }
                            Some(stored) if proposed == stored => Verdict::Unchanged,
                            _ => {
                                pending.insert(key, proposed);
                                Verdict::Applied
                            }
                        }
                    }
                }
            };
            verdicts.push(verdict);
        }
        verdicts
    }

    fn evaluate_reset(
        &self,
        cmd: &OffsetCommand,
        queue_max: &dyn Fn(&str, u32) -> u64,
        assume_next_generation: bool,
    ) -> Evaluation {
        let reject_all = |rejection| Evaluation {
            verdicts: vec![Verdict::Rejected(rejection); cmd.entries.len()],
            established: None,
        };
        let Some(first) = cmd.entries.first() else {
            return reject_all(CommitRejection::MixedTopics);
        };
        if cmd.entries.iter().any(|e| e.topic != first.topic) {
            return reject_all(CommitRejection::MixedTopics);
        }
        let current = self.generation(&cmd.group, &first.topic);
        let proposed = match cmd.generation {
            Some(g) => g,
            None if assume_next_generation => self.next_generation(&cmd.group, &first.topic),
            None => return reject_all(CommitRejection::MissingGeneration),
        };
        if proposed <= current {
            return reject_all(CommitRejection::StaleGeneration { current, proposed });
        }
        if Some(proposed) != current.checked_add(1) {
            return reject_all(CommitRejection::UnknownGeneration { current, proposed });
        }
        let verdicts: Vec<Verdict> = cmd
            .entries
            .iter()
            .map(|entry| {
                let max = queue_max(&entry.topic, entry.queue_id);
                if entry.offset > max {
                    Verdict::Rejected(CommitRejection::PastMax {
                        max,
                        proposed: entry.offset,
                    })
                } else {
                    Verdict::Applied
                }
            })
            .collect();
        let established = verdicts.contains(&Verdict::Applied).then_some(proposed);
        Evaluation {
            verdicts,
            established,
        }
    }

    /// The groups holding at least one stored offset, in ascending order.
    pub fn groups(&self) -> Vec<String> {
        self.groups.keys().cloned().collect()
    }

    /// all (topic, queue_id, StoredOffset) of a group, sorted
    pub fn group_offsets(&self, group: &str) -> Vec<(String, u32, StoredOffset)> {
        let Some(topics) = self.groups.get(group) else {
            return Vec::new();
        };
        topics
            .iter()
            .flat_map(|(topic, t)| {
                t.queues
                    .iter()
                    .map(move |(queue_id, stored)| (topic.clone(), *queue_id, *stored))
            })
            .collect()
    }

    /// The number of stored (group, topic, queue) offsets.
    pub fn len(&self) -> usize {
        self.groups
            .values()
            .flat_map(|topics| topics.values())
            .map(|t| t.queues.len())
            .sum()
    }

    /// True when no offset is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends a deterministic binary encoding (versioned) of the whole view to `out`; `decode` reads it back, returning (view, bytes consumed) or an error (never panics on garbage).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let with_fences = self.has_fences();
        out.push(if with_fences {
            OFFSET_FORMAT_VERSION_FENCES
        } else {
            OFFSET_FORMAT_VERSION
        });
        put_u64(out, self.groups.len());
        for (group, topics) in &self.groups {
            put_str64(out, group);
            put_u64(out, topics.len());
            for (topic, t) in topics {
                put_str64(out, topic);
                out.extend_from_slice(&t.generation.to_be_bytes());
                put_u64(out, t.queues.len());
                for (queue_id, stored) in &t.queues {
                    out.extend_from_slice(&queue_id.to_be_bytes());
                    out.extend_from_slice(&stored.offset.to_be_bytes());
                    out.extend_from_slice(&stored.generation.to_be_bytes());
                    out.extend_from_slice(&stored.updated_ms.to_be_bytes());
                }
                if with_fences {
                    encode_fences(out, &t.fences);
                }
            }
        }
    }

    /// Reads a view written by [`OffsetView::encode_into`] from the start of `bytes`,
    /// returning it and the number of bytes it occupied (bytes after it are left alone).
    ///
    /// Accepts only canonical encodings: keys strictly ascending, no empty group or topic,
    /// no queue stamped with a generation above its topic's. So `decode` then `encode_into`
    /// reproduces the input exactly.
    pub fn decode(bytes: &[u8]) -> Result<(OffsetView, usize), OffsetCodecError> {
        let mut r = Reader::new(bytes);
        let version = r.u8("view version")?;
        if version != OFFSET_FORMAT_VERSION && version != OFFSET_FORMAT_VERSION_FENCES {
            return Err(OffsetCodecError::UnknownVersion {
                found: version,
                supported: OFFSET_FORMAT_VERSION_FENCES,
            });
        }
        let mut groups: BTreeMap<String, BTreeMap<String, TopicOffsets>> = BTreeMap::new();
        let group_count = r.u64("group count")?;
        for _ in 0..group_count {
            let at = r.pos();
            let group = str64(&mut r, "group")?;
            if groups
                .last_key_value()
                .is_some_and(|(last, _)| *last >= group)
            {
                return Err(non_canonical("groups not strictly ascending", at));
            }
            let at = r.pos();
            let topic_count = r.u64("topic count")?;
            if topic_count == 0 {
                return Err(non_canonical("group with no topics", at));
            }
            let mut topics: BTreeMap<String, TopicOffsets> = BTreeMap::new();
            for _ in 0..topic_count {
                let at = r.pos();
                let topic = str64(&mut r, "topic")?;
                if topics
                    .last_key_value()
                    .is_some_and(|(last, _)| *last >= topic)
                {
                    return Err(non_canonical("topics not strictly ascending", at));
                }
                let generation = r.u64("topic generation")?;
                let at = r.pos();
                let queue_count = r.u64("queue count")?;
                if queue_count == 0 {
                    return Err(non_canonical("topic with no queues", at));
                }
                let mut queues: BTreeMap<u32, StoredOffset> = BTreeMap::new();
                for _ in 0..queue_count {
                    let at = r.pos();
                    let queue_id = r.u32("queue_id")?;
                    let stored = StoredOffset {
                        offset: r.u64("offset")?,
                        generation: r.u64("queue generation")?,
                        updated_ms: r.i64("updated_ms")?,
                    };
                    if queues
                        .last_key_value()
                        .is_some_and(|(last, _)| *last >= queue_id)
                    {
                        return Err(non_canonical("queue ids not strictly ascending", at));
                    }
                    if stored.generation > generation {
                        return Err(non_canonical(
                            "queue generation above its topic's generation",
                            at,
                        ));
                    }
                    queues.insert(queue_id, stored);
                }
                let fences = if version == OFFSET_FORMAT_VERSION_FENCES {
                    decode_fences(&mut r, generation)?
                } else {
                    BTreeMap::new()
                };
                topics.insert(
                    topic,
                    TopicOffsets {
                        generation,
                        queues,
                        fences,
                    },
                );
            }
            groups.insert(group, topics);
        }
        let view = OffsetView { groups };
        if version == OFFSET_FORMAT_VERSION_FENCES && !view.has_fences() {
            return Err(non_canonical("version 2 view without fences", r.pos()));
        }
        Ok((view, r.pos()))
    }
}

/// A reset or correction moved `queue_id` to `offset` at `generation`: `clients` join the
/// fence (those of an earlier fence stay: they have not followed either move).
fn raise_fence(
    fences: &mut BTreeMap<u32, QueueFence>,
    queue_id: u32,
    offset: u64,
    generation: u64,
    clients: &[String],
) {
    let mut kept: BTreeSet<String> = clients.iter().cloned().collect();
    if let Some(previous) = fences.remove(&queue_id) {
        for client in previous.clients {
            if kept.len() >= FENCED_CLIENTS_MAX {
                break;
            }
            kept.insert(client);
        }
    }
    while kept.len() > FENCED_CLIENTS_MAX {
        kept.pop_last();
    }
    if !kept.is_empty() {
        fences.insert(
            queue_id,
            QueueFence {
                offset,
                generation,
                clients: kept,
            },
        );
    }
}

/// An applied commit from `client` shows it follows the latest move of `queue_id`.
fn lift_fence(fences: &mut BTreeMap<u32, QueueFence>, queue_id: u32, client: &str) {
    if let Some(fence) = fences.get_mut(&queue_id) {
        fence.clients.remove(client);
        if fence.clients.is_empty() {
            fences.remove(&queue_id);
        }
    }
}

fn encode_fences(out: &mut Vec<u8>, fences: &BTreeMap<u32, QueueFence>) {
    put_u64(out, fences.len());
    for (queue_id, fence) in fences {
        out.extend_from_slice(&queue_id.to_be_bytes());
        out.extend_from_slice(&fence.offset.to_be_bytes());
        out.extend_from_slice(&fence.generation.to_be_bytes());
        put_u64(out, fence.clients.len());
        for client in &fence.clients {
            put_str64(out, client);
        }
    }
}

fn decode_fences(
    r: &mut Reader<'_>,
    topic_generation: u64,
) -> Result<BTreeMap<u32, QueueFence>, OffsetCodecError> {
    let mut fences = BTreeMap::new();
    let count = r.u64("fence count")?;
    for _ in 0..count {
        let at = r.pos();
        let queue_id = r.u32("fence queue_id")?;
        if fences
            .last_key_value()
            .is_some_and(|(last, _): (&u32, _)| *last >= queue_id)
        {
            return Err(non_canonical("fence queue ids not strictly ascending", at));
        }
        let offset = r.u64("fence offset")?;
        let generation = r.u64("fence generation")?;
        if generation > topic_generation {
            return Err(non_canonical("fence generation above its topic's", at));
        }
        let client_count = r.u64("fenced client count")?;
        if client_count == 0 || client_count > FENCED_CLIENTS_MAX as u64 {
            return Err(non_canonical("fence client count out of range", at));
        }
        let mut clients = BTreeSet::new();
        for _ in 0..client_count {
            let at = r.pos();
            let client = str64(r, "fenced client")?;
            if clients.last().is_some_and(|last: &String| *last >= client) {
                return Err(non_canonical("fenced clients not strictly ascending", at));
            }
            clients.insert(client);
        }
        fences.insert(
            queue_id,
            QueueFence {
                offset,
                generation,
                clients,
            },
        );
    }
    Ok(fences)
}

fn non_canonical(reason: &'static str, at: usize) -> OffsetCodecError {
    OffsetCodecError::NonCanonical { reason, at }
}

fn put_u64(out: &mut Vec<u8>, n: usize) {
    // usize is at most 64 bits on every target Rust supports, so this is lossless.
    out.extend_from_slice(&(n as u64).to_be_bytes());
}

fn put_str64(out: &mut Vec<u8>, s: &str) {
    put_u64(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

fn str64(r: &mut Reader<'_>, field: &'static str) -> Result<String, OffsetCodecError> {
    let at = r.pos();
    let len = r.u64(field)?;
    match usize::try_from(len) {
        Ok(len) => r.utf8(field, len),
        Err(_) => Err(OffsetCodecError::Truncated {
            field,
            at: at + 8,
            needed: usize::MAX,
            len: at + 8 + r.remaining(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::super::command::OffsetEntry;
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    const MAX: u64 = 100;

    fn qm(_: &str, _: u32) -> u64 {
        MAX
    }

    fn cmd(
        kind: OffsetKind,
        group: &str,
        generation: Option<u64>,
        entries: &[(&str, u32, u64)],
    ) -> OffsetCommand {
        OffsetCommand {
            kind,
            group: group.into(),
            client_id: "client".into(),
            generation,
            entries: entries
                .iter()
                .map(|&(topic, queue_id, offset)| OffsetEntry {
                    topic: topic.into(),
                    queue_id,
                    offset,
                })
                .collect(),
            fenced_clients: Vec::new(),
            access_key: None,
        }
    }

    fn commit(generation: Option<u64>, entries: &[(&str, u32, u64)]) -> OffsetCommand {
        cmd(OffsetKind::Commit, "g", generation, entries)
    }

    fn reset(generation: Option<u64>, entries: &[(&str, u32, u64)]) -> OffsetCommand {
        cmd(OffsetKind::Reset, "g", generation, entries)
    }

    fn offset(view: &OffsetView, topic: &str, queue_id: u32) -> Option<u64> {
        view.get("g", topic, queue_id).map(|s| s.offset)
    }

    fn rejected(r: CommitRejection) -> Verdict {
        Verdict::Rejected(r)
    }

    /// A view with g/t/0 at `at` in generation 0.
    fn view_at(at: u64) -> OffsetView {
        let mut v = OffsetView::new();
        assert_eq!(
            v.apply(&commit(None, &[("t", 0, at)]), 1, &qm),
            [Verdict::Applied]
        );
        v
    }

    fn fenced_reset(generation: u64, queue: u32, offset: u64, clients: &[&str]) -> OffsetCommand {
        let mut c = reset(Some(generation), &[("t", queue, offset)]);
        c.fenced_clients = clients.iter().map(|c| c.to_string()).collect();
        c
    }

    fn commit_from(client: &str, generation: u64, queue: u32, offset: u64) -> OffsetCommand {
        let mut c = commit(Some(generation), &[("t", queue, offset)]);
        c.client_id = client.into();
        c
    }

    #[test]
    fn a_reset_fences_its_clients_until_each_commits_and_the_fences_survive_a_snapshot() {
        let mut v = OffsetView::new();
        v.apply(&commit(None, &[("t", 0, 50), ("t", 1, 50)]), 1, &qm);
        v.apply(&fenced_reset(1, 0, 10, &["b", "a"]), 2, &qm);
        let fences = v.fences();
        assert_eq!(fences.len(), 1);
        assert_eq!(
            (fences[0].queue_id, fences[0].offset, fences[0].generation),
            (0, 10, 1)
        );
        assert_eq!(fences[0].clients, vec!["a".to_string(), "b".to_string()]);
        // Snapshot round trip keeps them (format version 2), byte for byte.
        let mut bytes = Vec::new();
        v.encode_into(&mut bytes);
        assert_eq!(bytes[0], OFFSET_FORMAT_VERSION_FENCES);
        let (decoded, used) = OffsetView::decode(&bytes).unwrap();
        assert_eq!((decoded.clone(), used), (v.clone(), bytes.len()));
        // A commit from "a" (it followed) lifts only its own fence; a commit on another queue
        // lifts nothing.
        v.apply(&commit_from("a", 1, 1, 60), 3, &qm);
        assert_eq!(v.fences()[0].clients.len(), 2);
        v.apply(&commit_from("a", 1, 0, 12), 4, &qm);
        assert_eq!(v.fences()[0].clients, vec!["b".to_string()]);
        // A second reset while "b" is still fenced keeps "b" and adds the new online set.
        v.apply(&fenced_reset(2, 0, 5, &["c"]), 5, &qm);
        assert_eq!(
            v.fences()[0].clients,
            vec!["b".to_string(), "c".to_string()]
        );
        assert_eq!(v.fences()[0].generation, 2);
        v.apply(&commit_from("b", 2, 0, 6), 6, &qm);
        v.apply(&commit_from("c", 2, 0, 7), 7, &qm);
        assert!(v.fences().is_empty());
        let mut bytes = Vec::new();
        v.encode_into(&mut bytes);
        assert_eq!(
            bytes[0], OFFSET_FORMAT_VERSION,
            "no fences: version 1 as before"
        );
    }

    #[test]
    fn a_fenced_command_round_trips_and_a_plain_one_keeps_version_1() {
        let c = fenced_reset(1, 0, 10, &["x"]);
        let bytes = c.encode().unwrap();
        assert_eq!(bytes[0], OFFSET_FORMAT_VERSION_FENCES);
        assert_eq!(OffsetCommand::decode(&bytes).unwrap(), c);
        let plain = commit(Some(1), &[("t", 0, 1)]);
        assert_eq!(plain.encode().unwrap()[0], OFFSET_FORMAT_VERSION);
        // A truncated fence list is an error, not a panic.
        assert!(OffsetCommand::decode(&bytes[..bytes.len() - 1]).is_err());
    }

    #[test]
    fn absent_offset_is_none_and_generation_starts_at_zero() {
        let v = OffsetView::new();
        assert_eq!(v.get("g", "t", 0), None);
        assert_eq!(v.generation("g", "t"), 0);
        assert_eq!(v.next_generation("g", "t"), 1);
        assert!(v.is_empty());
        assert_eq!(v.len(), 0);
        assert!(v.groups().is_empty());
        assert!(v.group_offsets("g").is_empty());
    }

    #[test]
    fn first_commit_is_applied_with_current_generation_and_timestamp() {
        let mut v = OffsetView::new();
        assert_eq!(
            v.apply(&commit(Some(0), &[("t", 3, 7)]), 55, &qm),
            [Verdict::Applied]
        );
        assert_eq!(
            v.get("g", "t", 3),
            Some(StoredOffset {
                offset: 7,
                generation: 0,
                updated_ms: 55
            })
        );
    }

    #[test]
    fn commit_below_stored_offset_is_rejected() {
        let mut v = view_at(10);
        for generation in [None, Some(0)] {
            assert_eq!(
                v.apply(&commit(generation, &[("t", 0, 9)]), 2, &qm),
                [rejected(CommitRejection::Regression {
                    stored: 10,
                    proposed: 9
                })]
            );
        }
        assert_eq!(offset(&v, "t", 0), Some(10));
    }

    #[test]
    fn commit_equal_to_stored_offset_is_unchanged_and_keeps_timestamp() {
        let mut v = view_at(10);
        let before = v.clone();
        assert_eq!(
            v.apply(&commit(Some(0), &[("t", 0, 10)]), 99, &qm),
            [Verdict::Unchanged]
        );
        assert_eq!(v, before);
        assert_eq!(v.get("g", "t", 0).map(|s| s.updated_ms), Some(1));
    }

    #[test]
    fn commit_above_stored_offset_is_applied() {
        let mut v = view_at(10);
        assert_eq!(
            v.apply(&commit(Some(0), &[("t", 0, 11)]), 2, &qm),
            [Verdict::Applied]
        );
        assert_eq!(offset(&v, "t", 0), Some(11));
    }

    #[test]
    fn commit_past_queue_max_is_rejected() {
        let mut v = OffsetView::new();
        assert_eq!(
            v.apply(&commit(None, &[("t", 0, MAX + 1)]), 1, &qm),
            [rejected(CommitRejection::PastMax {
                max: MAX,
                proposed: MAX + 1
            })]
        );
        assert!(v.is_empty());
    }

    #[test]
    fn commit_at_queue_max_is_applied() {
        let mut v = OffsetView::new();
        assert_eq!(
            v.apply(&commit(None, &[("t", 0, MAX)]), 1, &qm),
            [Verdict::Applied]
        );
        assert_eq!(offset(&v, "t", 0), Some(MAX));
    }

    #[test]
    fn queue_max_is_asked_per_topic_and_queue() {
        let mut v = OffsetView::new();
        let max = |topic: &str, queue_id: u32| {
            if topic == "a" {
                5
            } else {
                10 + u64::from(queue_id)
            }
        };
        let verdicts = v.apply(
            &commit(
                None,
                &[("a", 0, 6), ("b", 0, 10), ("b", 1, 11), ("b", 2, 13)],
            ),
            1,
            &max,
        );
        assert_eq!(
            verdicts,
            [
                rejected(CommitRejection::PastMax {
                    max: 5,
                    proposed: 6
                }),
                Verdict::Applied,
                Verdict::Applied,
                rejected(CommitRejection::PastMax {
                    max: 12,
                    proposed: 13
                }),
            ]
        );
    }

    #[test]
    fn commit_with_stale_generation_is_rejected() {
        let mut v = view_at(10);
        v.apply(&reset(Some(1), &[("t", 0, 3)]), 2, &qm);
        assert_eq!(
            v.apply(&commit(Some(0), &[("t", 0, 50)]), 3, &qm),
            [rejected(CommitRejection::StaleGeneration {
                current: 1,
                proposed: 0
            })]
        );
        assert_eq!(offset(&v, "t", 0), Some(3));
    }

    #[test]
    fn commit_with_unknown_generation_is_rejected() {
        let mut v = view_at(10);
        assert_eq!(
            v.apply(&commit(Some(1), &[("t", 0, 50)]), 2, &qm),
            [rejected(CommitRejection::UnknownGeneration {
                current: 0,
                proposed: 1
            })]
        );
        assert_eq!(offset(&v, "t", 0), Some(10));
    }

    #[test]
    fn generation_check_precedes_past_max_and_regression() {
        let mut v = view_at(10);
        assert_eq!(
            v.apply(&commit(Some(5), &[("t", 0, MAX + 1), ("t", 0, 1)]), 2, &qm),
            [rejected(CommitRejection::UnknownGeneration {
                current: 0,
                proposed: 5
            }); 2]
        );
        // PastMax is reported before Regression.
        assert_eq!(
            v.apply(&commit(None, &[("t", 0, MAX + 1)]), 2, &qm),
            [rejected(CommitRejection::PastMax {
                max: MAX,
                proposed: MAX + 1
            })]
        );
    }

    #[test]
    fn commit_without_generation_skips_only_generation_check() {
        let mut v = view_at(10);
        v.apply(&reset(Some(1), &[("t", 0, 3)]), 2, &qm);
        // A legacy commit is accepted across the reset when it moves forward ...
        assert_eq!(
            v.apply(&commit(None, &[("t", 0, 4)]), 3, &qm),
            [Verdict::Applied]
        );
        assert_eq!(
            v.get("g", "t", 0),
            Some(StoredOffset {
                offset: 4,
                generation: 1,
                updated_ms: 3
            })
        );
        // ... but still may not move backwards or past the max.
        assert_eq!(
            v.apply(&commit(None, &[("t", 0, 3), ("t", 0, MAX + 1)]), 4, &qm),
            [
                rejected(CommitRejection::Regression {
                    stored: 4,
                    proposed: 3
                }),
                rejected(CommitRejection::PastMax {
                    max: MAX,
                    proposed: MAX + 1
                })
            ]
        );
    }

    #[test]
    fn late_commit_after_reset_is_rejected_and_reset_offset_stays() {
        // Pitfalls C8 / A2: in-flight results of the previous generation arrive after a reset.
        let mut v = view_at(40);
        v.apply(&reset(Some(1), &[("t", 0, 5)]), 2, &qm);
        assert_eq!(
            v.apply(&commit(Some(0), &[("t", 0, 41)]), 3, &qm),
            [rejected(CommitRejection::StaleGeneration {
                current: 1,
                proposed: 0
            })]
        );
        assert_eq!(offset(&v, "t", 0), Some(5));
        assert_eq!(
            v.apply(&commit(Some(1), &[("t", 0, 6)]), 4, &qm),
            [Verdict::Applied]
        );
    }

    #[test]
    fn rejected_entries_do_not_block_applied_entries_in_same_command() {
        let mut v = view_at(10);
        let verdicts = v.apply(
            &commit(Some(0), &[("t", 0, 5), ("t", 1, 8), ("t", 0, 10)]),
            2,
            &qm,
        );
        assert_eq!(
            verdicts,
            [
                rejected(CommitRejection::Regression {
                    stored: 10,
                    proposed: 5
                }),
                Verdict::Applied,
                Verdict::Unchanged
            ]
        );
        assert_eq!(offset(&v, "t", 1), Some(8));
        assert_eq!(v.len(), 2);
    }

    #[test]
    fn queue_named_twice_in_one_commit_is_judged_in_order() {
        let mut v = OffsetView::new();
        let c = commit(None, &[("t", 0, 5), ("t", 0, 3), ("t", 0, 5), ("t", 0, 7)]);
        let expected = [
            Verdict::Applied,
            rejected(CommitRejection::Regression {
                stored: 5,
                proposed: 3,
            }),
            Verdict::Unchanged,
            Verdict::Applied,
        ];
        assert_eq!(v.check(&c, &qm), expected);
        assert_eq!(v.apply(&c, 1, &qm), expected);
        assert_eq!(offset(&v, "t", 0), Some(7));
    }

    #[test]
    fn reset_moves_offset_backwards_and_bumps_generation() {
        let mut v = view_at(50);
        assert_eq!(v.next_generation("g", "t"), 1);
        assert_eq!(
            v.apply(&reset(Some(1), &[("t", 0, 20), ("t", 7, 0)]), 9, &qm),
            [Verdict::Applied, Verdict::Applied]
        );
        assert_eq!(v.generation("g", "t"), 1);
        assert_eq!(
            v.get("g", "t", 0),
            Some(StoredOffset {
                offset: 20,
                generation: 1,
                updated_ms: 9
            })
        );
        assert_eq!(offset(&v, "t", 7), Some(0));
    }

    #[test]
    fn reset_moves_offset_forwards() {
        let mut v = view_at(10);
        assert_eq!(
            v.apply(&reset(Some(1), &[("t", 0, 60)]), 2, &qm),
            [Verdict::Applied]
        );
        assert_eq!(offset(&v, "t", 0), Some(60));
    }

    #[test]
    fn reset_to_stored_offset_is_applied_and_restamps_generation() {
        let mut v = view_at(10);
        assert_eq!(
            v.apply(&reset(Some(1), &[("t", 0, 10)]), 2, &qm),
            [Verdict::Applied]
        );
        assert_eq!(
            v.get("g", "t", 0),
            Some(StoredOffset {
                offset: 10,
                generation: 1,
                updated_ms: 2
            })
        );
        assert_eq!(v.generation("g", "t"), 1);
    }

    #[test]
    fn correction_behaves_like_reset() {
        let mut v = view_at(50);
        let c = cmd(OffsetKind::Correction, "g", Some(1), &[("t", 0, 30)]);
        assert_eq!(v.apply(&c, 2, &qm), [Verdict::Applied]);
        assert_eq!(v.generation("g", "t"), 1);
        assert_eq!(offset(&v, "t", 0), Some(30));
        assert_eq!(
            v.apply(&c, 3, &qm),
            [rejected(CommitRejection::StaleGeneration {
                current: 1,
                proposed: 1
            })]
        );
    }

    #[test]
    fn reset_without_generation_is_rejected_in_apply() {
        let mut v = view_at(50);
        assert_eq!(
            v.apply(&reset(None, &[("t", 0, 1), ("t", 1, 1)]), 2, &qm),
            [rejected(CommitRejection::MissingGeneration); 2]
        );
        assert_eq!(v, view_at(50));
    }

    #[test]
    fn reset_with_stale_generation_is_rejected() {
        let mut v = view_at(50);
        let r = reset(Some(1), &[("t", 0, 1)]);
        assert_eq!(v.apply(&r, 2, &qm), [Verdict::Applied]);
        let after = v.clone();
        // Replaying the same record, or an older one, changes nothing.
        for g in [0, 1] {
            assert_eq!(
                v.apply(&reset(Some(g), &[("t", 0, 9)]), 3, &qm),
                [rejected(CommitRejection::StaleGeneration {
                    current: 1,
                    proposed: g
                })]
            );
        }
        assert_eq!(v, after);
    }

    #[test]
    fn reset_with_skipped_generation_is_rejected() {
        let mut v = view_at(50);
        assert_eq!(
            v.apply(&reset(Some(2), &[("t", 0, 1)]), 2, &qm),
            [rejected(CommitRejection::UnknownGeneration {
                current: 0,
                proposed: 2
            })]
        );
        assert_eq!(v.generation("g", "t"), 0);
    }

    #[test]
    fn reset_past_queue_max_is_rejected_per_entry() {
        let mut v = view_at(50);
        assert_eq!(
            v.apply(&reset(Some(1), &[("t", 0, MAX + 1), ("t", 1, 4)]), 2, &qm),
            [
                rejected(CommitRejection::PastMax {
                    max: MAX,
                    proposed: MAX + 1
                }),
                Verdict::Applied
            ]
        );
        assert_eq!(offset(&v, "t", 0), Some(50));
        assert_eq!(v.get("g", "t", 0).map(|s| s.generation), Some(0));
        assert_eq!(v.generation("g", "t"), 1);
    }

    #[test]
    fn reset_with_no_applied_entry_keeps_generation() {
        let mut v = view_at(50);
        assert_eq!(
            v.apply(&reset(Some(1), &[("t", 0, MAX + 1)]), 2, &qm),
            [rejected(CommitRejection::PastMax {
                max: MAX,
                proposed: MAX + 1
            })]
        );
        assert_eq!(v.generation("g", "t"), 0);
        assert_eq!(v, view_at(50));
        assert!(v.apply(&reset(Some(1), &[]), 3, &qm).is_empty());
        assert_eq!(v, view_at(50));
    }

    #[test]
    fn reset_naming_several_topics_is_rejected() {
        let mut v = view_at(50);
        let r = reset(Some(1), &[("t", 0, 1), ("u", 0, 1)]);
        assert_eq!(
            v.check(&r, &qm),
            [rejected(CommitRejection::MixedTopics); 2]
        );
        assert_eq!(
            v.apply(&r, 2, &qm),
            [rejected(CommitRejection::MixedTopics); 2]
        );
        assert_eq!(v, view_at(50));
    }

    #[test]
    fn generations_are_per_group_and_topic() {
        let mut v = OffsetView::new();
        for (group, topic) in [("g", "t"), ("g", "u"), ("h", "t")] {
            v.apply(
                &cmd(OffsetKind::Commit, group, None, &[(topic, 0, 10)]),
                1,
                &qm,
            );
        }
        v.apply(&reset(Some(1), &[("t", 0, 2)]), 2, &qm);
        assert_eq!(v.generation("g", "t"), 1);
        assert_eq!(v.generation("g", "u"), 0);
        assert_eq!(v.generation("h", "t"), 0);
        // A generation-0 commit is still current for the untouched pairs.
        for (group, topic) in [("g", "u"), ("h", "t")] {
            assert_eq!(
                v.apply(
                    &cmd(OffsetKind::Commit, group, Some(0), &[(topic, 0, 11)]),
                    3,
                    &qm
                ),
                [Verdict::Applied]
            );
        }
    }

    #[test]
    fn check_does_not_mutate_and_matches_apply() {
        let mut v = view_at(10);
        let commands = [
            commit(
                Some(0),
                &[("t", 0, 9), ("t", 0, 10), ("t", 0, 12), ("t", 1, MAX + 1)],
            ),
            reset(Some(1), &[("t", 0, 3), ("t", 1, MAX + 1)]),
            commit(Some(0), &[("t", 0, 4)]),
            commit(Some(2), &[("t", 0, 4)]),
            commit(Some(1), &[("t", 0, 4)]),
        ];
        for (i, c) in commands.iter().enumerate() {
            let before = v.clone();
            let checked = v.check(c, &qm);
            assert_eq!(v, before);
            assert_eq!(v.apply(c, i as i64, &qm), checked);
        }
    }

    #[test]
    fn check_treats_missing_reset_generation_as_next() {
        let v = view_at(10);
        assert_eq!(
            v.check(&reset(None, &[("t", 0, 3), ("t", 1, MAX + 1)]), &qm),
            [
                Verdict::Applied,
                rejected(CommitRejection::PastMax {
                    max: MAX,
                    proposed: MAX + 1
                })
            ]
        );
        assert_eq!(
            v.check(&reset(Some(5), &[("t", 0, 3)]), &qm),
            [rejected(CommitRejection::UnknownGeneration {
                current: 0,
                proposed: 5
            })]
        );
    }

    #[test]
    fn groups_and_group_offsets_are_sorted() {
        let mut v = OffsetView::new();
        for (group, topic, queue_id) in [("b", "y", 2), ("a", "x", 0), ("b", "x", 5), ("b", "y", 1)]
        {
            v.apply(
                &cmd(OffsetKind::Commit, group, None, &[(topic, queue_id, 3)]),
                7,
                &qm,
            );
        }
        assert_eq!(v.groups(), ["a", "b"]);
        let stored = StoredOffset {
            offset: 3,
            generation: 0,
            updated_ms: 7,
        };
        assert_eq!(
            v.group_offsets("b"),
            [
                ("x".to_string(), 5, stored),
                ("y".to_string(), 1, stored),
                ("y".to_string(), 2, stored)
            ]
        );
        assert_eq!(v.len(), 4);
        assert!(!v.is_empty());
        assert!(v.group_offsets("c").is_empty());
    }

    #[test]
    fn same_sequence_gives_equal_views_and_encodings() {
        let commands = [
            commit(None, &[("t", 1, 4), ("t", 0, 10)]),
            reset(Some(1), &[("t", 0, 2)]),
            cmd(OffsetKind::Commit, "h", Some(0), &[("u", 3, 9)]),
        ];
        let build = || {
            let mut v = OffsetView::new();
            for (i, c) in commands.iter().enumerate() {
                v.apply(c, i as i64, &qm);
            }
            v
        };
        let (a, b) = (build(), build());
        assert_eq!(a, b);
        let (mut ea, mut eb) = (Vec::new(), Vec::new());
        a.encode_into(&mut ea);
        b.encode_into(&mut eb);
        assert_eq!(ea, eb);
        assert_eq!(OffsetView::decode(&ea), Ok((a, ea.len())));
    }

    #[test]
    fn rejection_messages_are_clear() {
        assert_eq!(
            CommitRejection::Regression {
                stored: 10,
                proposed: 9
            }
            .to_string(),
            "offset 9 is below the stored offset 10: progress may not move backwards without a reset"
        );
        assert_eq!(
            CommitRejection::PastMax {
                max: 5,
                proposed: 6
            }
            .to_string(),
            "offset 6 is past the queue's max offset 5"
        );
        let e: &dyn std::error::Error = &CommitRejection::MixedTopics;
        assert!(!e.to_string().is_empty());
    }

    #[test]
    fn view_encoding_appends_and_reports_consumed_bytes() {
        let v = view_at(10);
        let mut out = vec![0xaa, 0xbb];
        v.encode_into(&mut out);
        let len = out.len() - 2;
        out.extend_from_slice(&[1, 2, 3]);
        assert_eq!(OffsetView::decode(&out[2..]), Ok((v, len)));
        let mut empty = Vec::new();
        OffsetView::new().encode_into(&mut empty);
        assert_eq!(empty.len(), 9);
        assert_eq!(OffsetView::decode(&empty), Ok((OffsetView::new(), 9)));
    }

    #[test]
    fn view_decode_rejects_unknown_version() {
        let mut bytes = Vec::new();
        view_at(1).encode_into(&mut bytes);
        bytes[0] = 0;
        assert_eq!(
            OffsetView::decode(&bytes),
            Err(OffsetCodecError::UnknownVersion {
                found: 0,
                supported: 2
            })
        );
    }

    /// (topic, topic generation, [(queue_id, queue generation)]) for [`raw_view`].
    type RawTopic<'a> = (&'a str, u64, &'a [(u32, u64)]);

    /// Hand-built snapshot bytes, to feed `decode` encodings no view would produce.
    fn raw_view(groups: &[(&str, &[RawTopic<'_>])]) -> Vec<u8> {
        let mut out = vec![1u8];
        out.extend_from_slice(&(groups.len() as u64).to_be_bytes());
        for (group, topics) in groups {
            put_str64(&mut out, group);
            out.extend_from_slice(&(topics.len() as u64).to_be_bytes());
            for (topic, generation, queues) in topics.iter() {
                put_str64(&mut out, topic);
                out.extend_from_slice(&generation.to_be_bytes());
                out.extend_from_slice(&(queues.len() as u64).to_be_bytes());
                for (queue_id, queue_generation) in queues.iter() {
                    out.extend_from_slice(&queue_id.to_be_bytes());
                    out.extend_from_slice(&7u64.to_be_bytes());
                    out.extend_from_slice(&queue_generation.to_be_bytes());
                    out.extend_from_slice(&0i64.to_be_bytes());
                }
            }
        }
        out
    }

    #[test]
    fn view_decode_rejects_non_canonical_encodings() {
        let reason = |bytes: Vec<u8>| match OffsetView::decode(&bytes) {
            Err(OffsetCodecError::NonCanonical { reason, .. }) => reason,
            other => panic!("expected NonCanonical, got {other:?}"),
        };
        let ok: &[RawTopic<'_>] = &[("t", 1, &[(0, 1), (1, 0)])];
        assert!(OffsetView::decode(&raw_view(&[("g", ok)])).is_ok());
        assert_eq!(
            reason(raw_view(&[("g", ok), ("g", ok)])),
            "groups not strictly ascending"
        );
        assert_eq!(
            reason(raw_view(&[(
                "g",
                &[("t", 1, &[(0, 1)]), ("s", 1, &[(0, 1)])]
            )])),
            "topics not strictly ascending"
        );
        assert_eq!(
            reason(raw_view(&[("g", &[("t", 1, &[(1, 0), (1, 0)])])])),
            "queue ids not strictly ascending"
        );
        assert_eq!(reason(raw_view(&[("g", &[])])), "group with no topics");
        assert_eq!(
            reason(raw_view(&[("g", &[("t", 0, &[])])])),
            "topic with no queues"
        );
        assert_eq!(
            reason(raw_view(&[("g", &[("t", 0, &[(0, 1)])])])),
            "queue generation above its topic's generation"
        );
    }

    #[test]
    fn view_decode_rejects_bad_utf8_and_huge_lengths() {
        let mut bytes = raw_view(&[("g", &[("t", 0, &[(0, 0)])])]);
        bytes[17] = 0xff; // the group's single byte
        assert_eq!(
            OffsetView::decode(&bytes),
            Err(OffsetCodecError::BadUtf8 {
                field: "group",
                at: 17
            })
        );
        let mut bytes = raw_view(&[("g", &[("t", 0, &[(0, 0)])])]);
        bytes[9..17].copy_from_slice(&u64::MAX.to_be_bytes());
        assert!(matches!(
            OffsetView::decode(&bytes),
            Err(OffsetCodecError::Truncated { field: "group", .. })
        ));
        let mut bytes = raw_view(&[]);
        bytes[1..9].copy_from_slice(&u64::MAX.to_be_bytes());
        assert!(matches!(
            OffsetView::decode(&bytes),
            Err(OffsetCodecError::Truncated { .. })
        ));
    }

    // ---- model-based property test ----

    const GROUPS: [&str; 2] = ["g0", "g1"];
    const TOPICS: [&str; 2] = ["t0", "t1"];
    const QUEUES: u32 = 3;

    /// How a generated command picks its generation, resolved against the model's state
    /// when the command is applied.
    #[derive(Debug, Clone)]
    enum GenChoice {
        None,
        Current,
        Stale,
        Next,
        Future,
        Raw(u64),
    }

    #[derive(Debug, Clone)]
    struct OpSpec {
        kind: OffsetKind,
        group: usize,
        generation: GenChoice,
        single_topic: bool,
        entries: Vec<(usize, u32, u64)>,
    }

    fn arb_op() -> impl Strategy<Value = OpSpec> {
        (
            prop_oneof![
                6 => Just(OffsetKind::Commit),
                2 => Just(OffsetKind::Reset),
                1 => Just(OffsetKind::Correction),
            ],
            0..GROUPS.len(),
            prop_oneof![
                2 => Just(GenChoice::None),
                6 => Just(GenChoice::Current),
                1 => Just(GenChoice::Stale),
                3 => Just(GenChoice::Next),
                1 => Just(GenChoice::Future),
                1 => (0u64..4).prop_map(GenChoice::Raw),
            ],
            prop::bool::weighted(0.8),
            prop::collection::vec(
                (
                    0..TOPICS.len(),
                    0..QUEUES,
                    // Mostly small offsets, so commits often meet, repeat or undercut stored
                    // ones; sometimes past every queue max.
                    prop_oneof![3 => 0u64..8, 2 => 0u64..48],
                ),
                0..5,
            ),
        )
            .prop_map(|(kind, group, generation, single_topic, entries)| OpSpec {
                kind,
                group,
                generation,
                single_topic,
                entries,
            })
    }

    /// Independent reference implementation of the rules, on HashMaps.
    #[derive(Default)]
    struct Model {
        generations: HashMap<(String, String), u64>,
        stored: HashMap<(String, String, u32), StoredOffset>,
    }

    impl Model {
        fn generation(&self, group: &str, topic: &str) -> u64 {
            *self
                .generations
                .get(&(group.to_string(), topic.to_string()))
                .unwrap_or(&0)
        }

        fn apply(
            &mut self,
            c: &OffsetCommand,
            ts: i64,
            max: &dyn Fn(&str, u32) -> u64,
        ) -> Vec<Verdict> {
            let mut out = Vec::new();
            if c.kind == OffsetKind::Commit {
                for e in &c.entries {
                    let cur = self.generation(&c.group, &e.topic);
                    let key = (c.group.clone(), e.topic.clone(), e.queue_id);
                    let m = max(&e.topic, e.queue_id);
                    let v = match (c.generation, self.stored.get(&key)) {
                        (Some(g), _) if g < cur => rejected(CommitRejection::StaleGeneration {
                            current: cur,
                            proposed: g,
                        }),
                        (Some(g), _) if g > cur => rejected(CommitRejection::UnknownGeneration {
                            current: cur,
                            proposed: g,
                        }),
                        _ if e.offset > m => rejected(CommitRejection::PastMax {
                            max: m,
                            proposed: e.offset,
                        }),
                        (_, Some(s)) if e.offset < s.offset => {
                            rejected(CommitRejection::Regression {
                                stored: s.offset,
                                proposed: e.offset,
                            })
                        }
                        (_, Some(s)) if e.offset == s.offset => Verdict::Unchanged,
                        _ => {
                            self.stored.insert(
                                key,
                                StoredOffset {
                                    offset: e.offset,
                                    generation: cur,
                                    updated_ms: ts,
                                },
                            );
                            Verdict::Applied
                        }
                    };
                    out.push(v);
                }
                return out;
            }
            let n = c.entries.len();
            let topics: std::collections::HashSet<&str> =
                c.entries.iter().map(|e| e.topic.as_str()).collect();
            if topics.len() != 1 {
                return vec![rejected(CommitRejection::MixedTopics); n];
            }
            let topic = c.entries[0].topic.clone();
            let cur = self.generation(&c.group, &topic);
            let g = match c.generation {
                None => return vec![rejected(CommitRejection::MissingGeneration); n],
                Some(g) if g <= cur => {
                    return vec![
                        rejected(CommitRejection::StaleGeneration {
                            current: cur,
                            proposed: g
                        });
                        n
                    ]
                }
                Some(g) if g != cur + 1 => {
                    return vec![
                        rejected(CommitRejection::UnknownGeneration {
                            current: cur,
                            proposed: g
                        });
                        n
                    ]
                }
                Some(g) => g,
            };
            for e in &c.entries {
                let m = max(&e.topic, e.queue_id);
                if e.offset > m {
                    out.push(rejected(CommitRejection::PastMax {
                        max: m,
                        proposed: e.offset,
                    }));
                } else {
                    self.stored.insert(
                        (c.group.clone(), e.topic.clone(), e.queue_id),
                        StoredOffset {
                            offset: e.offset,
                            generation: g,
                            updated_ms: ts,
                        },
                    );
                    out.push(Verdict::Applied);
                }
            }
            if out.contains(&Verdict::Applied) {
                self.generations.insert((c.group.clone(), topic), g);
            }
            out
        }
    }

    fn build_command(spec: &OpSpec, model: &Model) -> OffsetCommand {
        let group = GROUPS[spec.group];
        let first_topic = spec.entries.first().map_or(0, |e| e.0);
        let cur = model.generation(group, TOPICS[first_topic]);
        let generation = match spec.generation {
            GenChoice::None => None,
            GenChoice::Current => Some(cur),
            GenChoice::Stale => Some(cur.saturating_sub(1)),
            GenChoice::Next => Some(cur + 1),
            GenChoice::Future => Some(cur + 2),
            GenChoice::Raw(g) => Some(g),
        };
        let entries = spec
            .entries
            .iter()
            .map(|&(t, queue_id, offset)| OffsetEntry {
                topic: TOPICS[if spec.single_topic { first_topic } else { t }].to_string(),
                queue_id,
                offset,
            })
            .collect();
        OffsetCommand {
            kind: spec.kind,
            group: group.to_string(),
            client_id: "c".to_string(),
            generation,
            entries,
            fenced_clients: Vec::new(),
            access_key: None,
        }
    }

    fn all_keys() -> impl Iterator<Item = (&'static str, &'static str, u32)> {
        GROUPS.into_iter().flat_map(|g| {
            TOPICS
                .into_iter()
                .flat_map(move |t| (0..QUEUES).map(move |q| (g, t, q)))
        })
    }

    fn encoded(v: &OffsetView) -> Vec<u8> {
        let mut out = Vec::new();
        v.encode_into(&mut out);
        out
    }

    fn arb_maxes() -> impl Strategy<Value = Vec<u64>> {
        prop::collection::vec(4u64..40, TOPICS.len() * QUEUES as usize)
    }

    fn max_fn(maxes: &[u64]) -> impl Fn(&str, u32) -> u64 + '_ {
        move |topic: &str, queue_id: u32| {
            let t = TOPICS.iter().position(|&x| x == topic).unwrap_or(0);
            maxes[t * QUEUES as usize + queue_id as usize]
        }
    }

    fn build_view(maxes: &[u64], ops: &[OpSpec]) -> OffsetView {
        let max = max_fn(maxes);
        let mut model = Model::default();
        let mut view = OffsetView::new();
        for (i, spec) in ops.iter().enumerate() {
            let c = build_command(spec, &model);
            model.apply(&c, i as i64, &max);
            view.apply(&c, i as i64, &max);
        }
        view
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn view_matches_reference_model(
            maxes in arb_maxes(),
            ops in prop::collection::vec(arb_op(), 1..40),
        ) {
            let max = max_fn(&maxes);
            let mut model = Model::default();
            let mut view = OffsetView::new();
            let mut replica = OffsetView::new();
            for (i, spec) in ops.iter().enumerate() {
                let ts = i as i64 * 10;
                let c = build_command(spec, &model);
                let before = view.clone();

                let checked = view.check(&c, &max);
                prop_assert_eq!(&view, &before, "check mutated the view");
                let expected = model.apply(&c, ts, &max);
                let verdicts = view.apply(&c, ts, &max);
                prop_assert_eq!(&verdicts, &expected, "verdicts differ from the model for {:?}", c);
                if c.kind == OffsetKind::Commit || c.generation.is_some() {
                    prop_assert_eq!(&checked, &verdicts, "check differs from apply for {:?}", c);
                }

                // The log path: a replica applying the decoded record reaches the same view.
                let decoded = OffsetCommand::decode(&c.encode().unwrap()).unwrap();
                replica.apply(&decoded, ts, &max);
                prop_assert_eq!(&replica, &view);

                let mut count = 0;
                for (g, t, q) in all_keys() {
                    let stored = view.get(g, t, q);
                    let modelled = model.stored.get(&(g.to_string(), t.to_string(), q)).copied();
                    prop_assert_eq!(stored, modelled, "stored offset of {}/{}/{}", g, t, q);
                    prop_assert_eq!(view.generation(g, t), model.generation(g, t));
                    prop_assert_eq!(view.next_generation(g, t), model.generation(g, t) + 1);
                    let Some(now) = stored else {
                        prop_assert!(before.get(g, t, q).is_none(), "an offset disappeared");
                        continue;
                    };
                    count += 1;
                    prop_assert!(now.offset <= max(t, q), "stored offset past queue max");
                    prop_assert!(now.generation <= view.generation(g, t));
                    if let Some(prev) = before.get(g, t, q) {
                        if now.offset < prev.offset {
                            prop_assert!(
                                c.kind != OffsetKind::Commit
                                    && view.generation(g, t) > before.generation(g, t),
                                "offset of {}/{}/{} decreased without a reset", g, t, q
                            );
                        }
                    }
                }
                prop_assert_eq!(view.len(), count);
                prop_assert_eq!(view.is_empty(), count == 0);

                let mut bytes = encoded(&view);
                let len = bytes.len();
                bytes.extend_from_slice(&[0xde, 0xad]);
                let (back, consumed) = OffsetView::decode(&bytes).unwrap();
                prop_assert_eq!(consumed, len);
                prop_assert_eq!(&back, &view);
            }
        }

        #[test]
        fn every_truncation_of_a_view_fails_to_decode(
            maxes in arb_maxes(),
            ops in prop::collection::vec(arb_op(), 0..20),
        ) {
            let bytes = encoded(&build_view(&maxes, &ops));
            for cut in 0..bytes.len() {
                let result = OffsetView::decode(&bytes[..cut]);
                prop_assert!(
                    matches!(result, Err(OffsetCodecError::Truncated { .. })),
                    "prefix of {} bytes decoded as {:?}", cut, result
                );
            }
        }

        #[test]
        fn view_decode_of_garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..128)) {
            if let Ok((view, consumed)) = OffsetView::decode(&bytes) {
                prop_assert_eq!(encoded(&view), &bytes[..consumed]);
            }
        }

        #[test]
        fn view_decode_of_corrupted_snapshot_never_panics(
            maxes in arb_maxes(),
            ops in prop::collection::vec(arb_op(), 1..20),
            flips in prop::collection::vec((any::<usize>(), any::<u8>()), 1..4),
        ) {
            let mut bytes = encoded(&build_view(&maxes, &ops));
            for (at, value) in flips {
                let i = at % bytes.len();
                bytes[i] = value;
            }
            if let Ok((view, consumed)) = OffsetView::decode(&bytes) {
                prop_assert_eq!(encoded(&view), &bytes[..consumed]);
            }
        }
    }
}
