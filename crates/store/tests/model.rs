//! Model test of the store: random sequences of puts, offset commits and resets,
//! truncations, clean restarts, simulated crashes and checkpoints, checked after every step
//! against an in-memory model of what was acknowledged.
//!
//! The model keeps every acknowledged record (messages and offset records) in log order. Its
//! offsets, generations and queue lengths are always a replay of those records through an
//! independent re-implementation of the offset rules, so after a truncation they are exactly
//! what the surviving log says. On a failure the message lists the operations as they were
//! resolved against the model (concrete offsets, generations and cut points); proptest
//! prints the minimal failing sequence of raw operations.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use ferromq_protocol::{property_names, Properties, RecordView};
use ferromq_store::offsets::{
    CommitRejection, OffsetCommand, OffsetEntry, OffsetKind, StoredOffset, Verdict,
};
use ferromq_store::{GetStatus, MessageStore, OffsetEvent, Placement, StoreConfig, TagFilter};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;

const TOPICS: [&str; 2] = ["TopicA", "TopicB"];
const GROUPS: [&str; 2] = ["GroupA", "GroupB"];
const QUEUES: u32 = 3;
const KEYS: [&str; 3] = ["key-0", "key-1", "key-2"];
/// The smallest segment the store accepts; bodies up to 12 KB roll it every few puts.
const SEGMENT_SIZE: u64 = 64 * 1024;
const BODY_LEN_MAX: usize = 12_000;
/// Bytes of the BLANK marker that ends a segment.
const BLANK_LEN: u64 = 8;
const COMMIT_CLIENT: &str = "model-client";
const RESET_CLIENT: &str = "model-admin";

/// Which generation a commit carries.
#[derive(Debug, Clone, Copy)]
enum GenerationChoice {
    /// A legacy client: no generation check.
    None,
    /// The (group, topic)'s current generation.
    Current,
    /// One older than current; one newer (never issued) when current is 0.
    Stale,
}

#[derive(Debug, Clone)]
enum Op {
    Put {
        topic: usize,
        queue: u32,
        body_len: usize,
        key: usize,
    },
    /// Commits `base + delta` (at least 0), where the base is the model's queue length or
    /// its stored offset (the queue length when none is stored).
    Commit {
        group: usize,
        topic: usize,
        queue: u32,
        from_stored: bool,
        delta: i64,
        generation: GenerationChoice,
    },
    /// Resets each (queue, `max + delta`) of one topic.
    Reset {
        group: usize,
        topic: usize,
        offsets: Vec<(u32, i64)>,
    },
    /// Cuts the log at one of the model's record boundaries, or at its end: one of the last
    /// few when `near_end` (so the log still grows over a sequence), any one otherwise.
    Truncate {
        near_end: bool,
        pick: Index,
    },
    Reopen,
    Crash,
    Checkpoint,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let generation = prop_oneof![
        1 => Just(GenerationChoice::None),
        2 => Just(GenerationChoice::Current),
        1 => Just(GenerationChoice::Stale),
    ];
    prop_oneof![
        8 => (0..TOPICS.len(), 0..QUEUES, 0..BODY_LEN_MAX, 0..KEYS.len()).prop_map(
            |(topic, queue, body_len, key)| Op::Put {
                topic,
                queue,
                body_len,
                key,
            }
        ),
        4 => (
            0..GROUPS.len(),
            0..TOPICS.len(),
            0..QUEUES,
            any::<bool>(),
            -2i64..=1,
            generation
        )
            .prop_map(|(group, topic, queue, from_stored, delta, generation)| Op::Commit {
                group,
                topic,
                queue,
                from_stored,
                delta,
                generation,
            }
        ),
        1 => (0..GROUPS.len(), 0..TOPICS.len(), vec((0..QUEUES, -6i64..=1), 1..=3)).prop_map(
            |(group, topic, offsets)| Op::Reset {
                group,
                topic,
                offsets,
            }
        ),
        1 => (prop::bool::weighted(0.75), any::<Index>())
            .prop_map(|(near_end, pick)| Op::Truncate { near_end, pick }),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
        1 => Just(Op::Checkpoint),
    ]
}

fn model_config(root: &std::path::Path) -> StoreConfig {
    let mut config = common::test_config(root);
    config.segment_size_bytes = SEGMENT_SIZE;
    config.max_message_size_bytes = 16 * 1024;
    config.consume_queue_entries_per_file = 8;
    config.checkpoint_interval_ms = 20;
    config.retention_max_age_ms = None;
    config.retention_max_log_bytes = None;
    config
}

/// Where the writer puts a record of `size` bytes when the log ends at `end`: a record that
/// does not fit with a BLANK marker after it goes to the next segment.
fn expected_phys(end: u64, size: u32) -> u64 {
    let used = end % SEGMENT_SIZE;
    if used + u64::from(size) + BLANK_LEN > SEGMENT_SIZE {
        end + (SEGMENT_SIZE - used)
    } else {
        end
    }
}

fn relative(max: u64, delta: i64) -> u64 {
    u64::try_from((max as i64 + delta).max(0)).expect("not negative")
}

/// One acknowledged record.
#[derive(Debug, Clone)]
enum Event {
    Message {
        phys: u64,
        topic: usize,
        queue: u32,
        queue_offset: u64,
        body: Vec<u8>,
        key: usize,
    },
    /// An offset record: the accepted entries, with the generation as stored.
    Offsets {
        phys: u64,
        timestamp_ms: i64,
        command: OffsetCommand,
    },
}

impl Event {
    fn phys(&self) -> u64 {
        match self {
            Event::Message { phys, .. } | Event::Offsets { phys, .. } => *phys,
        }
    }
}

/// Consumer progress and queue lengths as a replay of the log gives them.
#[derive(Debug, Clone, Default)]
struct View {
    counts: BTreeMap<(String, u32), u64>,
    offsets: BTreeMap<(String, String, u32), StoredOffset>,
    generations: BTreeMap<(String, String), u64>,
}

impl View {
    fn count(&self, topic: &str, queue: u32) -> u64 {
        self.counts
            .get(&(topic.to_string(), queue))
            .copied()
            .unwrap_or(0)
    }

    fn generation(&self, group: &str, topic: &str) -> u64 {
        self.generations
            .get(&(group.to_string(), topic.to_string()))
            .copied()
            .unwrap_or(0)
    }

    fn offset(&self, group: &str, topic: &str, queue: u32) -> Option<StoredOffset> {
        self.offsets
            .get(&(group.to_string(), topic.to_string(), queue))
            .copied()
    }

    /// Verdicts for a command and the generation the store reports (and stores): the one the
    /// commit carries, or the one a reset establishes (assigned as current + 1 when absent).
    fn judge(&self, command: &OffsetCommand) -> (Vec<Verdict>, Option<u64>) {
        match command.kind {
            OffsetKind::Commit => {
                let mut pending: BTreeMap<(String, u32), u64> = BTreeMap::new();
                let mut verdicts = Vec::new();
                for entry in &command.entries {
                    let current = self.generation(&command.group, &entry.topic);
                    let verdict = match command.generation {
                        Some(proposed) if proposed < current => {
                            Verdict::Rejected(CommitRejection::StaleGeneration {
                                current,
                                proposed,
                            })
                        }
                        Some(proposed) if proposed > current => {
                            Verdict::Rejected(CommitRejection::UnknownGeneration {
                                current,
                                proposed,
                            })
                        }
                        _ => {
                            let max = self.count(&entry.topic, entry.queue_id);
                            let key = (entry.topic.clone(), entry.queue_id);
                            let stored = pending.get(&key).copied().or_else(|| {
                                self.offset(&command.group, &entry.topic, entry.queue_id)
                                    .map(|s| s.offset)
                            });
                            if entry.offset > max {
                                Verdict::Rejected(CommitRejection::PastMax {
                                    max,
                                    proposed: entry.offset,
                                })
                            } else if stored.is_some_and(|s| entry.offset < s) {
                                Verdict::Rejected(CommitRejection::Regression {
                                    stored: stored.expect("checked"),
                                    proposed: entry.offset,
                                })
                            } else if stored == Some(entry.offset) {
                                Verdict::Unchanged
                            } else {
                                pending.insert(key, entry.offset);
                                Verdict::Applied
                            }
                        }
                    };
                    verdicts.push(verdict);
                }
                (verdicts, command.generation)
            }
            OffsetKind::Reset | OffsetKind::Correction => {
                let topic = &command.entries[0].topic;
                assert!(
                    command.entries.iter().all(|e| &e.topic == topic),
                    "the model only generates single-topic resets"
                );
                let current = self.generation(&command.group, topic);
                let proposed = command.generation.unwrap_or(current + 1);
                let all = |rejection| vec![Verdict::Rejected(rejection); command.entries.len()];
                if proposed <= current {
                    return (
                        all(CommitRejection::StaleGeneration { current, proposed }),
                        Some(proposed),
                    );
                }
                if proposed != current + 1 {
                    return (
                        all(CommitRejection::UnknownGeneration { current, proposed }),
                        Some(proposed),
                    );
                }
                let verdicts = command
                    .entries
                    .iter()
                    .map(|entry| {
                        let max = self.count(&entry.topic, entry.queue_id);
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
                (verdicts, Some(proposed))
            }
        }
    }

    /// Applies a stored command (accepted entries only, generation as stored).
    fn apply(&mut self, command: &OffsetCommand, timestamp_ms: i64) {
        for entry in &command.entries {
            let topic_key = (command.group.clone(), entry.topic.clone());
            let generation = match command.kind {
                OffsetKind::Commit => self.generation(&command.group, &entry.topic),
                OffsetKind::Reset | OffsetKind::Correction => {
                    let generation = command.generation.expect("stored resets carry one");
                    self.generations.insert(topic_key, generation);
                    generation
                }
            };
            self.offsets.insert(
                (command.group.clone(), entry.topic.clone(), entry.queue_id),
                StoredOffset {
                    offset: entry.offset,
                    generation,
                    updated_ms: timestamp_ms,
                },
            );
        }
    }
}

#[derive(Debug, Default)]
struct Model {
    /// Acknowledged records in log order.
    events: Vec<Event>,
    /// The log end.
    end: u64,
}

impl Model {
    /// Replays the records; every stored command must be accepted whole again.
    fn view(&self) -> Result<View, String> {
        let mut view = View::default();
        for event in &self.events {
            match event {
                Event::Message { topic, queue, .. } => {
                    *view
                        .counts
                        .entry((TOPICS[*topic].to_string(), *queue))
                        .or_default() += 1;
                }
                Event::Offsets {
                    phys,
                    timestamp_ms,
                    command,
                } => {
                    let (verdicts, generation) = view.judge(command);
                    if verdicts.iter().any(|v| *v != Verdict::Applied)
                        || generation != command.generation
                    {
                        return Err(format!(
                            "model replay rejected the stored command at {phys}: {verdicts:?}"
                        ));
                    }
                    view.apply(command, *timestamp_ms);
                }
            }
        }
        Ok(view)
    }

    fn messages(&self, topic: usize, queue: u32) -> Vec<(u64, u64, Vec<u8>, String)> {
        self.events
            .iter()
            .filter_map(|event| match event {
                Event::Message {
                    phys,
                    topic: t,
                    queue: q,
                    queue_offset,
                    body,
                    key,
                    ..
                } if *t == topic && *q == queue => {
                    Some((*queue_offset, *phys, body.clone(), KEYS[*key].to_string()))
                }
                _ => None,
            })
            .collect()
    }

    /// Records of `topic` carrying `key`, newest first, as (phys, body).
    fn by_key(&self, topic: usize, key: usize) -> Vec<(u64, Vec<u8>)> {
        self.events
            .iter()
            .rev()
            .filter_map(|event| match event {
                Event::Message {
                    phys,
                    topic: t,
                    key: k,
                    body,
                    ..
                } if *t == topic && *k == key => Some((*phys, body.clone())),
                _ => None,
            })
            .collect()
    }

    fn history(&self, group: &str, topic: &str) -> Vec<OffsetEvent> {
        let mut out = Vec::new();
        for event in &self.events {
            let Event::Offsets {
                phys,
                timestamp_ms,
                command,
            } = event
            else {
                continue;
            };
            if command.group != group {
                continue;
            }
            for entry in command.entries.iter().filter(|e| e.topic == topic) {
                out.push(OffsetEvent {
                    timestamp_ms: *timestamp_ms,
                    kind: command.kind,
                    client_id: command.client_id.clone(),
                    access_key: command.access_key.clone(),
                    generation: command.generation,
                    topic: entry.topic.clone(),
                    queue_id: entry.queue_id,
                    offset: entry.offset,
                    phys_offset: *phys,
                });
            }
        }
        out
    }
}

macro_rules! check_eq {
    ($observed:expr, $expected:expr, $($context:tt)+) => {{
        let (observed, expected) = (&$observed, &$expected);
        if observed != expected {
            return Err(format!(
                "{}:\n  store: {:?}\n  model: {:?}",
                format!($($context)+),
                observed,
                expected
            ));
        }
    }};
}

fn failed<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> String + '_ {
    move |error| format!("{what} failed: {error}")
}

struct Harness {
    store: Option<MessageStore>,
    model: Model,
    puts: usize,
    config: StoreConfig,
    _dir: tempfile::TempDir,
}

impl Harness {
    fn new() -> Result<Harness, String> {
        let dir = tempfile::tempdir().map_err(failed("tempdir"))?;
        let config = model_config(dir.path());
        let store = MessageStore::open(config.clone()).map_err(failed("open"))?;
        Ok(Harness {
            store: Some(store),
            model: Model::default(),
            puts: 0,
            config,
            _dir: dir,
        })
    }

    fn store(&self) -> &MessageStore {
        self.store.as_ref().expect("store open")
    }

    /// Runs one operation; returns it as resolved against the model.
    fn step(&mut self, op: &Op) -> Result<String, String> {
        match op {
            Op::Put {
                topic,
                queue,
                body_len,
                key,
            } => self.put(*topic, *queue, *body_len, *key),
            Op::Commit {
                group,
                topic,
                queue,
                from_stored,
                delta,
                generation,
            } => {
                let view = self.model.view()?;
                let (group, topic) = (GROUPS[*group], TOPICS[*topic]);
                let max = view.count(topic, *queue);
                let base = match view.offset(group, topic, *queue) {
                    Some(stored) if *from_stored => stored.offset,
                    _ => max,
                };
                let offset = relative(base, *delta);
                let current = view.generation(group, topic);
                let generation = match generation {
                    GenerationChoice::None => None,
                    GenerationChoice::Current => Some(current),
                    GenerationChoice::Stale => Some(current.checked_sub(1).unwrap_or(1)),
                };
                let command = OffsetCommand {
                    kind: OffsetKind::Commit,
                    group: group.into(),
                    client_id: COMMIT_CLIENT.into(),
                    generation,
                    entries: vec![OffsetEntry {
                        topic: topic.into(),
                        queue_id: *queue,
                        offset,
                    }],
                    fenced_clients: Vec::new(),
                    access_key: None,
                };
                let resolved =
                    format!("commit {group} {topic}/{queue} = {offset} gen {generation:?}");
                self.offsets(&view, command)
                    .map(|v| format!("{resolved} -> {v}"))
            }
            Op::Reset {
                group,
                topic,
                offsets,
            } => {
                let view = self.model.view()?;
                let (group, topic) = (GROUPS[*group], TOPICS[*topic]);
                let entries: Vec<OffsetEntry> = offsets
                    .iter()
                    .map(|(queue, delta)| OffsetEntry {
                        topic: topic.into(),
                        queue_id: *queue,
                        offset: relative(view.count(topic, *queue), *delta),
                    })
                    .collect();
                let resolved = format!(
                    "reset {group} {topic} {:?}",
                    entries
                        .iter()
                        .map(|e| (e.queue_id, e.offset))
                        .collect::<Vec<_>>()
                );
                let command = OffsetCommand {
                    kind: OffsetKind::Reset,
                    group: group.into(),
                    client_id: RESET_CLIENT.into(),
                    generation: None,
                    entries,
                    fenced_clients: Vec::new(),
                    access_key: None,
                };
                self.offsets(&view, command)
                    .map(|v| format!("{resolved} -> {v}"))
            }
            Op::Truncate { near_end, pick } => {
                let mut boundaries: Vec<u64> = self.model.events.iter().map(Event::phys).collect();
                boundaries.push(self.model.end);
                let skip = if *near_end {
                    boundaries.len().saturating_sub(4)
                } else {
                    0
                };
                let boundaries = &boundaries[skip..];
                let cut = boundaries[pick.index(boundaries.len())];
                let report = self.store().truncate(cut).map_err(failed("truncate"))?;
                check_eq!(report.phys_offset, cut, "truncate({cut}) report position");
                check_eq!(
                    report.bytes_cut,
                    self.model.end - cut,
                    "truncate({cut}) bytes cut"
                );
                let survivors = self.model.events.iter().filter(|e| e.phys() < cut).count();
                let resolved = format!(
                    "truncate to {cut} (end {}; keeps {survivors} of {} records)",
                    self.model.end,
                    self.model.events.len()
                );
                self.model.events.truncate(survivors);
                self.model.end = cut;
                Ok(resolved)
            }
            Op::Reopen => {
                let store = self.store.take().expect("store open");
                store.close().map_err(failed("close"))?;
                self.store =
                    Some(MessageStore::open(self.config.clone()).map_err(failed("reopen"))?);
                Ok("reopen".into())
            }
            Op::Crash => {
                self.store.take().expect("store open").abandon();
                self.store = Some(
                    MessageStore::open(self.config.clone()).map_err(failed("open after crash"))?,
                );
                Ok("crash".into())
            }
            Op::Checkpoint => {
                self.store().checkpoint().map_err(failed("checkpoint"))?;
                Ok("checkpoint".into())
            }
        }
    }

    fn put(
        &mut self,
        topic: usize,
        queue: u32,
        body_len: usize,
        key: usize,
    ) -> Result<String, String> {
        self.puts += 1;
        let seed = self.puts;
        let body: Vec<u8> = (0..body_len).map(|i| (seed * 31 + i) as u8).collect();
        let properties = Properties::encode([(property_names::KEYS, KEYS[key])]);
        let receipt = self
            .store()
            .put(&[common::draft(TOPICS[topic], queue, &body, &properties)])
            .map_err(failed("put"))?;
        let view = self.model.view()?;
        check_eq!(receipt.placements.len(), 1, "put placements");
        let placement = receipt.placements[0].clone();
        let queue_offset = view.count(TOPICS[topic], queue);
        check_eq!(
            placement.queue_offset,
            queue_offset,
            "put: queue offset of {}/{queue}",
            TOPICS[topic]
        );
        check_eq!(placement.queue_id, queue, "put: queue id");
        check_eq!(
            placement.phys_offset,
            expected_phys(self.model.end, placement.size),
            "put: phys offset after log end {}",
            self.model.end
        );
        let end = placement.phys_offset + u64::from(placement.size);
        check_eq!(receipt.end_offset, end, "put: end offset");
        self.model.events.push(Event::Message {
            phys: placement.phys_offset,
            topic,
            queue,
            queue_offset,
            body,
            key,
        });
        self.model.end = end;
        Ok(format!(
            "put {}/{queue} {body_len} B {} -> q{queue_offset} at {}",
            TOPICS[topic], KEYS[key], placement.phys_offset
        ))
    }

    /// Sends a commit or reset and checks the outcome against the model's verdicts.
    fn offsets(&mut self, view: &View, command: OffsetCommand) -> Result<String, String> {
        let outcome = self
            .store()
            .commit_offsets(&command)
            .map_err(failed("commit_offsets"))?;
        let (verdicts, generation) = view.judge(&command);
        check_eq!(outcome.verdicts, verdicts, "verdicts of {command:?}");
        check_eq!(
            outcome.generation,
            generation,
            "outcome generation of {command:?}"
        );
        let mut accepted = command.clone();
        accepted.generation = generation;
        accepted.entries = command
            .entries
            .iter()
            .zip(&verdicts)
            .filter(|(_, v)| **v == Verdict::Applied)
            .map(|(e, _)| e.clone())
            .collect();
        match (&outcome.record, accepted.entries.is_empty()) {
            (None, true) => {}
            (Some(placement), false) => self.record_offsets(placement, accepted)?,
            (record, _) => {
                return Err(format!(
                    "record of {command:?} with verdicts {verdicts:?}: store wrote {record:?}"
                ))
            }
        }
        Ok(format!("{verdicts:?}"))
    }

    fn record_offsets(
        &mut self,
        placement: &Placement,
        accepted: OffsetCommand,
    ) -> Result<(), String> {
        check_eq!(
            placement.phys_offset,
            expected_phys(self.model.end, placement.size),
            "offset record: phys offset after log end {}",
            self.model.end
        );
        self.model.events.push(Event::Offsets {
            phys: placement.phys_offset,
            timestamp_ms: placement.store_timestamp_ms,
            command: accepted,
        });
        self.model.end = placement.phys_offset + u64::from(placement.size);
        Ok(())
    }

    /// Compares everything observable with the model.
    fn check(&self) -> Result<(), String> {
        let store = self.store();
        let view = self.model.view()?;
        let written_end = store.stats().written_end;
        check_eq!(written_end, self.model.end, "log end");
        let dispatched = store.wait_dispatched(written_end, Duration::from_secs(5));
        check_eq!(dispatched, written_end, "dispatched end within 5 s");
        for (t, topic) in TOPICS.iter().enumerate() {
            for queue in 0..QUEUES {
                self.check_queue(t, queue, view.count(topic, queue))?;
            }
            for (k, key) in KEYS.iter().enumerate() {
                let found: Vec<(u64, Vec<u8>)> = store
                    .messages_by_key(topic, key, 1000)
                    .map_err(failed("messages_by_key"))?
                    .iter()
                    .map(|bytes| {
                        let record = RecordView::parse(bytes).expect("verified by the store");
                        (record.phys_offset, record.body.to_vec())
                    })
                    .collect();
                check_eq!(
                    found.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
                    self.model
                        .by_key(t, k)
                        .iter()
                        .map(|(p, _)| *p)
                        .collect::<Vec<_>>(),
                    "messages_by_key({topic}, {key}) positions, newest first"
                );
                check_eq!(
                    found,
                    self.model.by_key(t, k),
                    "messages_by_key({topic}, {key}) bodies"
                );
            }
            for group in GROUPS {
                check_eq!(
                    store.offset_generation(group, topic).expect("offset view"),
                    view.generation(group, topic),
                    "offset_generation({group}, {topic})"
                );
                for queue in 0..QUEUES {
                    check_eq!(
                        store
                            .consumer_offset(group, topic, queue)
                            .expect("offset view"),
                        view.offset(group, topic, queue),
                        "consumer_offset({group}, {topic}, {queue})"
                    );
                }
                let history = store
                    .offset_history(group, topic, None)
                    .map_err(failed("offset_history"))?;
                check_eq!(
                    history,
                    self.model.history(group, topic),
                    "offset_history({group}, {topic})"
                );
            }
        }
        Ok(())
    }

    fn check_queue(&self, t: usize, queue: u32, count: u64) -> Result<(), String> {
        let store = self.store();
        let topic = TOPICS[t];
        let bounds = store.queue_bounds(topic, queue);
        if count == 0 {
            if !matches!(bounds, None | Some((0, 0))) {
                return Err(format!(
                    "queue_bounds({topic}, {queue}): store {bounds:?}, model holds nothing"
                ));
            }
            return Ok(());
        }
        check_eq!(bounds, Some((0, count)), "queue_bounds({topic}, {queue})");
        let mut got = Vec::new();
        let mut next = 0;
        while next < count {
            let result = store
                .get_messages(topic, queue, next, 1000, usize::MAX, &TagFilter::All)
                .map_err(failed("get_messages"))?;
            check_eq!(
                result.status,
                GetStatus::Found,
                "get_messages({topic}, {queue}, {next}) status"
            );
            check_eq!(
                result.max_offset,
                count,
                "get_messages({topic}, {queue}) max offset"
            );
            for message in &result.messages {
                let record = RecordView::parse(&message.bytes).map_err(failed("parse"))?;
                check_eq!(
                    record.queue_offset,
                    message.queue_offset,
                    "record's queue offset"
                );
                check_eq!(
                    record.phys_offset,
                    message.phys_offset,
                    "record's phys offset"
                );
                check_eq!(record.topic, topic.as_bytes(), "record's topic");
                check_eq!(record.queue_id, queue, "record's queue");
                got.push((
                    message.queue_offset,
                    message.phys_offset,
                    record.body.to_vec(),
                    record
                        .properties
                        .get_str(property_names::KEYS)
                        .unwrap_or_default()
                        .to_string(),
                ));
            }
            if result.next_begin_offset <= next {
                return Err(format!(
                    "get_messages({topic}, {queue}, {next}) made no progress"
                ));
            }
            next = result.next_begin_offset;
        }
        check_eq!(
            got,
            self.model.messages(t, queue),
            "messages of {topic}/{queue}"
        );
        let past = store
            .get_messages(topic, queue, count, 10, usize::MAX, &TagFilter::All)
            .map_err(failed("get_messages"))?;
        check_eq!(
            past.status,
            GetStatus::OffsetOverflowOne,
            "get_messages({topic}, {queue}) at max"
        );
        Ok(())
    }
}

fn run_case(ops: &[Op]) -> Result<(), String> {
    let mut harness = Harness::new()?;
    let mut trace = Vec::new();
    let mut result = harness.check().map_err(|e| format!("before any op: {e}"));
    for (n, op) in ops.iter().enumerate() {
        if result.is_err() {
            break;
        }
        result = harness.step(op).and_then(|resolved| {
            trace.push(format!("{n:3}: {resolved}"));
            harness.check()
        });
        if result.is_err() && trace.len() == n {
            trace.push(format!("{n:3}: {op:?} (failed)"));
        }
    }
    if let Some(store) = harness.store.take() {
        let closed = store.close().map_err(failed("final close"));
        result = result.and(closed);
    }
    result.map_err(|error| format!("{error}\nops as resolved:\n{}", trace.join("\n")))
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 24,
        max_shrink_iters: 256,
        max_shrink_time: 60_000,
        ..ProptestConfig::default()
    })]

    #[test]
    fn store_matches_the_model(ops in vec(op_strategy(), 1..=60)) {
        run_case(&ops).map_err(TestCaseError::fail)?;
    }
}
