//! Consumer offsets: commits, resets and corrections as log records (invariant 1), the view
//! they build, and their history.
//!
//! A command is checked against the writer's view (which includes records appended but not
//! yet dispatched) under the append lock, so the order of records in the log decides every
//! conflict. Only accepted entries are written; rejected ones are returned to the caller with
//! their reason (invariant 3) and counted. The dispatcher applies the same rules to the same
//! records and reaches the same view, here and on every replica.

use std::sync::atomic::Ordering;

use ferromq_protocol::{DraftRecord, RecordView};

use super::{AckTicket, MessageStore, StoreError};
use crate::commitlog::writer::{Placement, WriterState};
use crate::error::{AppendError, ReadError};
use crate::offsets::{
    CommitRejection, OffsetCommand, OffsetKind, StoredOffset, Verdict, OFFSET_TOPIC,
};

/// Result of [`MessageStore::commit_offsets`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitOutcome {
    /// One verdict per entry of the command, in order.
    pub verdicts: Vec<Verdict>,
    /// The generation a reset or correction established (the current one for commits).
    pub generation: Option<u64>,
    /// Where the offset record landed; `None` when no entry needed writing.
    pub record: Option<Placement>,
}

impl CommitOutcome {
    /// Whether every entry was applied or already held that value.
    pub fn all_accepted(&self) -> bool {
        self.verdicts
            .iter()
            .all(|v| !matches!(v, Verdict::Rejected(_)))
    }
}

/// One change of a consumer offset, as recorded in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetEvent {
    /// Store time of the record.
    pub timestamp_ms: i64,
    /// Commit, reset or correction.
    pub kind: OffsetKind,
    /// Who sent it.
    pub client_id: String,
    /// With ACL on: the access key the request was granted to; `None` otherwise (and in
    /// records written before access keys were recorded).
    pub access_key: Option<String>,
    /// The generation it carried (commits) or established (resets, corrections).
    pub generation: Option<u64>,
    /// Topic.
    pub topic: String,
    /// Queue.
    pub queue_id: u32,
    /// The offset set.
    pub offset: u64,
    /// Where the record is in the CommitLog.
    pub phys_offset: u64,
}

impl MessageStore {
    /// Records an offset commit, reset or correction; returns when it is acknowledgeable under
    /// the flush policy (the same rule as a message): [`MessageStore::append_offsets`], then
    /// the blocking wait. Blocking: not for async contexts, which use
    /// [`MessageStore::commit_offsets_acknowledged`].
    ///
    /// # Errors
    /// As [`MessageStore::commit_offsets_acknowledged`].
    pub fn commit_offsets(&self, command: &OffsetCommand) -> Result<CommitOutcome, StoreError> {
        let (outcome, ticket) = self.judge_and_append(command, None)?;
        self.wait_acknowledgeable(ticket.end, ticket.epoch)?;
        Ok(outcome)
    }

    /// Blocking form of [`MessageStore::correct_offsets_acknowledged`]: not for async
    /// contexts.
    ///
    /// # Errors
    /// As [`MessageStore::commit_offsets_acknowledged`].
    ///
    /// # Panics
    /// As [`MessageStore::append_correction`].
    pub fn correct_offsets(
        &self,
        command: &OffsetCommand,
        expected: &[Option<u64>],
    ) -> Result<CommitOutcome, StoreError> {
        check_correction(command, expected);
        let (outcome, ticket) = self.judge_and_append(command, Some(expected))?;
        self.wait_acknowledgeable(ticket.end, ticket.epoch)?;
        Ok(outcome)
    }

    /// Records an offset commit, reset or correction and resolves once it is acknowledgeable
    /// under the flush policy: [`MessageStore::append_offsets`], then
    /// [`MessageStore::acknowledged`]. Never blocks the calling thread.
    ///
    /// # Errors
    /// The record could not be written ([`StoreError::Append`]) or made acknowledgeable in
    /// time ([`StoreError::Durability`], including `Timeout` after `sync_flush_timeout_ms`);
    /// nothing was acknowledged.
    ///
    /// # Cancel safety
    /// Dropping the future after the append leaves the record in the log, unacknowledged:
    /// it may still become durable, like a message whose reply was lost.
    pub async fn commit_offsets_acknowledged(
        &self,
        command: &OffsetCommand,
    ) -> Result<CommitOutcome, StoreError> {
        let (outcome, ticket) = self.judge_and_append(command, None)?;
        self.acknowledged(ticket).await?;
        Ok(outcome)
    }

    /// [`MessageStore::append_correction`], then [`MessageStore::acknowledged`].
    ///
    /// # Errors
    /// As [`MessageStore::commit_offsets_acknowledged`].
    ///
    /// # Panics
    /// As [`MessageStore::append_correction`].
    ///
    /// # Cancel safety
    /// As [`MessageStore::commit_offsets_acknowledged`].
    pub async fn correct_offsets_acknowledged(
        &self,
        command: &OffsetCommand,
        expected: &[Option<u64>],
    ) -> Result<CommitOutcome, StoreError> {
        check_correction(command, expected);
        let (outcome, ticket) = self.judge_and_append(command, Some(expected))?;
        self.acknowledged(ticket).await?;
        Ok(outcome)
    }

    /// Judges an offset commit, reset or correction and appends its accepted entries as one
    /// record, without waiting: the acknowledgement is the caller's, through
    /// [`MessageStore::acknowledged`] with the returned ticket.
    ///
    /// For a reset or correction the store assigns the new generation (current + 1); the
    /// command's own `generation` is ignored. Entries are judged one by one against the
    /// writer's view (which includes records appended but not yet acknowledged): accepted
    /// ones are written together in one record, rejected ones are reported in the outcome.
    ///
    /// The ticket is the written record's, or, when nothing was written, the log end at
    /// judgement: the verdicts rest on every record appended so far (an entry "already held"
    /// by a commit not yet fsynced or not yet replicated), so they may be acknowledged only
    /// once those are. The caller always waits on it, even when the flush policy already
    /// covers it: a replicated broker must still wait for its in-sync replicas (a ticket
    /// withheld because the local write was done let a master acknowledge commits no replica
    /// held, found by `ferromq chaos` seed 2006).
    ///
    /// # Errors
    /// The record could not be encoded or appended; nothing was written.
    pub fn append_offsets(
        &self,
        command: &OffsetCommand,
    ) -> Result<(CommitOutcome, AckTicket), StoreError> {
        self.judge_and_append(command, None)
    }

    /// Like [`MessageStore::append_offsets`] for a correction, applied only to the entries
    /// whose stored offset is still the one the caller judged it against: `expected[i]` is
    /// entry i's stored offset as the caller saw it (`None`: no offset stored). The comparison
    /// happens under the append lock against the writer's view, so a commit that lands
    /// between the caller's judgement and this call is never undone; such an entry is
    /// rejected as [`CommitRejection::Moved`]. Otherwise exactly `append_offsets` (new
    /// generation, one record).
    ///
    /// # Errors
    /// As [`MessageStore::append_offsets`].
    ///
    /// # Panics
    /// When `command` is not a correction or `expected` does not have one value per entry
    /// (a caller bug, not input).
    pub fn append_correction(
        &self,
        command: &OffsetCommand,
        expected: &[Option<u64>],
    ) -> Result<(CommitOutcome, AckTicket), StoreError> {
        check_correction(command, expected);
        self.judge_and_append(command, Some(expected))
    }

    /// The one judging path of every offset write: judges `command` (and `expected`, for a
    /// conditional correction) under the writer lock and appends the accepted entries.
    /// Returns the outcome and the ticket that acknowledges it (the record's, or the log end
    /// at judgement when nothing was written).
    fn judge_and_append(
        &self,
        command: &OffsetCommand,
        expected: Option<&[Option<u64>]>,
    ) -> Result<(CommitOutcome, AckTicket), StoreError> {
        let inner = &self.inner;
        // A poisoned store refuses every offset command, also one that would write nothing:
        // its answer could rest on records that are not durable, and every write kind gets
        // the same answer after the failure.
        if let Some(reason) = inner.poisoned() {
            return Err(StoreError::Append(AppendError::Poisoned(reason)));
        }
        let mut command = command.clone();
        let mut writer = inner.writer.lock().expect("writer lock");
        let generation = assign_generation(&writer, &mut command);
        let verdicts = judge(&writer, &command, expected);
        let rejected = verdicts
            .iter()
            .filter(|v| matches!(v, Verdict::Rejected(_)))
            .count();
        inner
            .commits_rejected
            .fetch_add(rejected as u64, Ordering::Relaxed);
        let accepted = accepted_part(&command, &verdicts);
        if accepted.entries.is_empty() {
            // Nothing to write, but the verdicts rest on the writer's view: they are
            // acknowledgeable once everything appended so far is.
            let ticket = AckTicket {
                end: writer.write_pos(),
                epoch: inner.flush.epoch(),
            };
            let outcome = CommitOutcome {
                verdicts,
                generation,
                record: None,
            };
            return Ok((outcome, ticket));
        }
        let receipt = self.append_offset_record(&mut writer, &accepted)?;
        let outcome = CommitOutcome {
            verdicts,
            generation,
            record: Some(receipt.placements[0].clone()),
        };
        Ok((outcome, receipt.ticket()))
    }

    /// Appends the accepted entries as one offset record under the writer lock and applies
    /// them to the writer's view.
    fn append_offset_record(
        &self,
        writer: &mut WriterState,
        accepted: &OffsetCommand,
    ) -> Result<super::PutReceipt, StoreError> {
        let inner = &self.inner;
        let body = accepted.encode().map_err(AppendError::from)?;
        let draft = DraftRecord {
            topic: OFFSET_TOPIC,
            queue_id: 0,
            flag: 0,
            sys_flag: 0,
            born_timestamp_ms: inner.clock.now_ms(),
            born_host: inner.config.store_host,
            store_host: inner.config.store_host,
            reconsume_times: 0,
            prepared_tx_offset: 0,
            body: &body,
            properties: &[],
        };
        let mut records = vec![(OFFSET_TOPIC, draft.encode().map_err(AppendError::from)?)];
        let receipt = inner.append_locked(writer, &mut records)?;
        let applied = {
            let WriterStateParts { offsets, queue_max } = split(writer);
            offsets.apply(
                accepted,
                receipt.placements[0].store_timestamp_ms,
                &queue_max,
            )
        };
        debug_assert!(
            applied.iter().all(|v| *v == Verdict::Applied),
            "check and apply agree"
        );
        Ok(receipt)
    }

    /// The stored offset of (group, topic, queue): `Ok(None)` when the group never committed
    /// one. Reflects every commit acknowledged before the call.
    ///
    /// Blocking (waits for the dispatcher, bounded): not for async contexts, use
    /// [`MessageStore::offset_view`].
    ///
    /// # Errors
    /// [`ReadError::ViewBehind`] or [`ReadError::DispatchStalled`] when the view could not
    /// catch up: never a stale answer.
    pub fn consumer_offset(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
    ) -> Result<Option<StoredOffset>, ReadError> {
        self.catch_up_dispatch()?;
        Ok(OffsetView::new(self).consumer_offset(group, topic, queue_id))
    }

    /// Current reset generation of (group, topic). Blocking, as
    /// [`MessageStore::consumer_offset`].
    ///
    /// # Errors
    /// As [`MessageStore::consumer_offset`].
    pub fn offset_generation(&self, group: &str, topic: &str) -> Result<u64, ReadError> {
        self.catch_up_dispatch()?;
        Ok(OffsetView::new(self).generation(group, topic))
    }

    /// Every stored offset of a group: (topic, queue, offset). Blocking, as
    /// [`MessageStore::consumer_offset`].
    ///
    /// # Errors
    /// As [`MessageStore::consumer_offset`].
    pub fn group_offsets(
        &self,
        group: &str,
    ) -> Result<Vec<(String, u32, StoredOffset)>, ReadError> {
        self.catch_up_dispatch()?;
        Ok(OffsetView::new(self).group_offsets(group))
    }

    /// Groups with stored offsets. Blocking, as [`MessageStore::consumer_offset`].
    ///
    /// # Errors
    /// As [`MessageStore::consumer_offset`].
    pub fn groups(&self) -> Result<Vec<String>, ReadError> {
        self.catch_up_dispatch()?;
        Ok(OffsetView::new(self).groups())
    }

    /// Every change of (group, topic[, queue]) still in the log, oldest first: the answer to
    /// "why did my offset move?". Records older than the log's retention are gone; their
    /// effect lives on in the view.
    ///
    /// Blocking (waits for the dispatcher, bounded, then reads the log): not for async
    /// contexts.
    ///
    /// # Errors
    /// A read failed, or the dispatcher could not catch up ([`ReadError::ViewBehind`],
    /// [`ReadError::DispatchStalled`]), so the history could miss an acknowledged change.
    pub fn offset_history(
        &self,
        group: &str,
        topic: &str,
        queue_id: Option<u32>,
    ) -> Result<Vec<OffsetEvent>, ReadError> {
        self.catch_up_dispatch()?;
        let (min, max) = self.queue_bounds(OFFSET_TOPIC, 0).unwrap_or((0, 0));
        let mut events = Vec::new();
        let mut offset = min;
        while offset < max {
            let result = self.get_messages(
                OFFSET_TOPIC,
                0,
                offset,
                256,
                usize::MAX,
                &Default::default(),
            )?;
            if result.messages.is_empty() {
                break;
            }
            for message in &result.messages {
                let view = RecordView::parse(&message.bytes).expect("verified by get_messages");
                let Ok(command) = OffsetCommand::decode(view.body) else {
                    continue;
                };
                if command.group != group {
                    continue;
                }
                for entry in &command.entries {
                    if entry.topic == topic && queue_id.is_none_or(|q| q == entry.queue_id) {
                        events.push(OffsetEvent {
                            timestamp_ms: view.store_timestamp_ms,
                            kind: command.kind,
                            client_id: command.client_id.clone(),
                            access_key: command.access_key.clone(),
                            generation: command.generation,
                            topic: entry.topic.clone(),
                            queue_id: entry.queue_id,
                            offset: entry.offset,
                            phys_offset: message.phys_offset,
                        });
                    }
                }
            }
            offset = result.next_begin_offset;
        }
        Ok(events)
    }
}

/// Sets the generation a reset or correction establishes (current + 1, ignoring the
/// command's own); a commit keeps the one it carries.
fn assign_generation(writer: &WriterState, command: &mut OffsetCommand) -> Option<u64> {
    match command.kind {
        OffsetKind::Commit => command.generation,
        OffsetKind::Reset | OffsetKind::Correction => {
            let topic = command.entries.first().map_or("", |e| e.topic.as_str());
            let next = writer.offsets.next_generation(&command.group, topic);
            command.generation = Some(next);
            Some(next)
        }
    }
}

/// One verdict per entry against the writer's view; with `expected` (a conditional
/// correction), an entry whose stored offset moved since the caller's judgement is rejected
/// as [`CommitRejection::Moved`].
fn judge(
    writer: &WriterState,
    command: &OffsetCommand,
    expected: Option<&[Option<u64>]>,
) -> Vec<Verdict> {
    let queue_max = |topic: &str, queue_id: u32| writer.queue_max(topic, queue_id);
    let mut verdicts = writer.offsets.check(command, &queue_max);
    let Some(expected) = expected else {
        return verdicts;
    };
    for ((entry, verdict), expected) in command.entries.iter().zip(&mut verdicts).zip(expected) {
        let stored = writer
            .offsets
            .get(&command.group, &entry.topic, entry.queue_id)
            .map(|s| s.offset);
        if stored != *expected && *verdict == Verdict::Applied {
            *verdict = Verdict::Rejected(CommitRejection::Moved {
                expected: *expected,
                stored,
            });
        }
    }
    verdicts
}

/// The command with only its applied entries.
fn accepted_part(command: &OffsetCommand, verdicts: &[Verdict]) -> OffsetCommand {
    let mut accepted = command.clone();
    accepted.entries = command
        .entries
        .iter()
        .zip(verdicts)
        .filter(|(_, v)| **v == Verdict::Applied)
        .map(|(e, _)| e.clone())
        .collect();
    accepted
}

/// Refuses (as a caller bug) a conditional correction that is not one.
fn check_correction(command: &OffsetCommand, expected: &[Option<u64>]) {
    assert_eq!(
        command.kind,
        OffsetKind::Correction,
        "correct_offsets takes a correction"
    );
    assert_eq!(
        command.entries.len(),
        expected.len(),
        "one expected offset per entry"
    );
}

/// The offset view as of [`MessageStore::offset_view`]: it covers every offset commit
/// acknowledged before that call, and answers at once, without waiting (each answer reads the
/// view as it is then, which only grows past that point).
#[derive(Debug, Clone, Copy)]
pub struct OffsetView<'a> {
    store: &'a MessageStore,
}

impl<'a> OffsetView<'a> {
    pub(super) fn new(store: &'a MessageStore) -> OffsetView<'a> {
        OffsetView { store }
    }

    fn read<R>(&self, answer: impl FnOnce(&crate::offsets::OffsetView) -> R) -> R {
        answer(&self.store.inner.derived.lock().view)
    }

    /// The stored offset of (group, topic, queue); `None` when the group never committed one.
    pub fn consumer_offset(&self, group: &str, topic: &str, queue_id: u32) -> Option<StoredOffset> {
        self.read(|view| view.get(group, topic, queue_id))
    }

    /// Current reset generation of (group, topic).
    pub fn generation(&self, group: &str, topic: &str) -> u64 {
        self.read(|view| view.generation(group, topic))
    }

    /// Every stored offset of a group: (topic, queue, offset).
    pub fn group_offsets(&self, group: &str) -> Vec<(String, u32, StoredOffset)> {
        self.read(|view| view.group_offsets(group))
    }

    /// Groups with stored offsets.
    pub fn groups(&self) -> Vec<String> {
        self.read(|view| view.groups())
    }
}

pub(super) struct WriterStateParts<'a, F: Fn(&str, u32) -> u64> {
    pub(super) offsets: &'a mut crate::offsets::OffsetView,
    pub(super) queue_max: F,
}

pub(super) fn split(
    writer: &mut WriterState,
) -> WriterStateParts<'_, impl Fn(&str, u32) -> u64 + '_> {
    let (offsets, queues) = writer.split_offsets();
    WriterStateParts {
        offsets,
        queue_max: move |topic: &str, queue_id: u32| {
            queues
                .get(topic)
                .and_then(|q| q.get(&queue_id))
                .copied()
                .unwrap_or(0)
        },
    }
}

#[cfg(test)]
mod tests {
    use ferromq_protocol::DraftRecord;

    use super::*;
    use crate::offsets::OffsetEntry;
    use crate::StoreConfig;

    fn store(dir: &std::path::Path) -> MessageStore {
        let mut config = StoreConfig::new(dir);
        config.segment_size_bytes = 64 * 1024;
        config.max_message_size_bytes = 16 * 1024;
        MessageStore::open(config).expect("store opens")
    }

    fn command(kind: OffsetKind, offset: u64) -> OffsetCommand {
        OffsetCommand {
            kind,
            group: "G".into(),
            client_id: "test".into(),
            generation: None,
            entries: vec![OffsetEntry {
                topic: "T".into(),
                queue_id: 0,
                offset,
            }],
            fenced_clients: Vec::new(),
            access_key: None,
        }
    }

    fn put(store: &MessageStore, count: usize) {
        let host = "127.0.0.1:10911".parse().unwrap();
        for _ in 0..count {
            let draft = DraftRecord {
                topic: "T",
                queue_id: 0,
                flag: 0,
                sys_flag: 0,
                born_timestamp_ms: 1,
                born_host: host,
                store_host: host,
                reconsume_times: 0,
                prepared_tx_offset: 0,
                body: b"m",
                properties: &[],
            };
            store.put(&[draft]).expect("put");
        }
    }

    #[test]
    fn correction_lands_only_while_the_stored_offset_is_the_judged_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        put(&store, 10);
        store
            .commit_offsets(&command(OffsetKind::Commit, 8))
            .unwrap();
        let before = store.offset_generation("G", "T").expect("offset view");
        // Judged against 5, but 8 is stored: a commit landed in between.
        let moved = store
            .correct_offsets(&command(OffsetKind::Correction, 3), &[Some(5)])
            .unwrap();
        assert_eq!(
            moved.verdicts,
            vec![Verdict::Rejected(CommitRejection::Moved {
                expected: Some(5),
                stored: Some(8)
            })]
        );
        assert!(moved.record.is_none());
        assert_eq!(
            store
                .consumer_offset("G", "T", 0)
                .expect("offset view")
                .unwrap()
                .offset,
            8
        );
        assert_eq!(
            store.offset_generation("G", "T").expect("offset view"),
            before
        );
        // Judged against what is stored: a new generation at the corrected offset.
        let landed = store
            .correct_offsets(&command(OffsetKind::Correction, 3), &[Some(8)])
            .unwrap();
        assert_eq!(landed.verdicts, vec![Verdict::Applied]);
        assert_eq!(landed.generation, Some(before + 1));
        let stored = store
            .consumer_offset("G", "T", 0)
            .expect("offset view")
            .unwrap();
        assert_eq!((stored.offset, stored.generation), (3, before + 1));
        assert_eq!(
            store.offset_generation("G", "T").expect("offset view"),
            before + 1
        );
    }
}
