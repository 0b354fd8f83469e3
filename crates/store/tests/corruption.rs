//! Damaged and foreign files (invariant 5), truncation (invariant 6) and bad input.
//!
//! Each test builds a store, damages its files the way a crash, a disk or an operator would,
//! reopens it and checks both the resulting state and what `recovery_report()` says it did.
//! Bad input must give an error naming the file, never a panic.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use ferromq_protocol::{Properties, RecordView};
use ferromq_store::consume_queue::CqError;
use ferromq_store::offsets::{OffsetCommand, OffsetEntry, OffsetKind, Verdict, OFFSET_TOPIC};
use ferromq_store::{
    GetStatus, MessageStore, OpenError, Placement, StoreConfig, TagFilter, TruncateError,
};

use common::{
    body_of, checkpoint_files, draft, flip_bit, locate, numbered_files, read_all, read_with_damage,
    segment_files, set_len, test_config, Seen,
};

/// Offset of BODY inside a record with IPv4 hosts (after BODYLEN at 84).
const BODY_AT: u64 = 88;
/// Offset of QUEUEOFFSET inside a record.
const QUEUE_OFFSET_AT: u64 = 20;

fn open(config: &StoreConfig) -> MessageStore {
    MessageStore::open(config.clone())
        .unwrap_or_else(|e| panic!("open {}: {e}", config.root_dir.display()))
}

fn open_err(config: &StoreConfig) -> OpenError {
    MessageStore::open(config.clone()).expect_err("open must fail")
}

fn body(topic: &str, queue_id: u32, i: usize) -> String {
    format!("{topic}/{queue_id} message {i} {}", "x".repeat(i % 7 * 50))
}

/// Puts message `i` of (topic, queue) with key `k<i>` and returns where it landed.
fn put(store: &MessageStore, topic: &str, queue_id: u32, i: usize) -> Placement {
    let body = body(topic, queue_id, i);
    let key = format!("{topic}-k{i}");
    let properties = Properties::encode([("KEYS", key.as_str()), ("TAGS", "a")]);
    let receipt = store
        .put(&[draft(topic, queue_id, body.as_bytes(), &properties)])
        .expect("put");
    receipt.placements[0].clone()
}

fn command(
    kind: OffsetKind,
    group: &str,
    topic: &str,
    queue_id: u32,
    offset: u64,
) -> OffsetCommand {
    OffsetCommand {
        kind,
        group: group.to_string(),
        client_id: "test-client".to_string(),
        generation: None,
        entries: vec![OffsetEntry {
            topic: topic.to_string(),
            queue_id,
            offset,
        }],
        fenced_clients: Vec::new(),
        access_key: None,
    }
}

fn commit(store: &MessageStore, group: &str, topic: &str, queue_id: u32, offset: u64) {
    let outcome = store
        .commit_offsets(&command(OffsetKind::Commit, group, topic, queue_id, offset))
        .expect("commit");
    assert_eq!(
        outcome.verdicts,
        vec![Verdict::Applied],
        "commit {group} {topic}/{queue_id} -> {offset}"
    );
}

fn offset_of(store: &MessageStore, group: &str, topic: &str, queue_id: u32) -> Option<u64> {
    store
        .consumer_offset(group, topic, queue_id)
        .expect("offset view")
        .map(|o| o.offset)
}

/// Bodies of a queue, in order.
fn bodies(store: &MessageStore, topic: &str, queue_id: u32) -> Vec<String> {
    read_all(store, topic, queue_id)
        .iter()
        .map(|m| String::from_utf8(body_of(m)).expect("utf8 body"))
        .collect()
}

fn expected_bodies(topic: &str, queue_id: u32, count: usize) -> Vec<String> {
    (0..count).map(|i| body(topic, queue_id, i)).collect()
}

fn wait_all_dispatched(store: &MessageStore) {
    let end = store.stats().written_end;
    assert_eq!(
        store.wait_dispatched(end, Duration::from_secs(5)),
        end,
        "dispatch did not catch up"
    );
}

/// Dispatches everything and writes a checkpoint; returns its position (the log end).
fn checkpoint_now(store: &MessageStore) -> u64 {
    wait_all_dispatched(store);
    store.checkpoint().expect("checkpoint");
    let position = store.stats().checkpoint_position;
    assert_eq!(
        position,
        store.stats().written_end,
        "checkpoint at the dispatched end"
    );
    position
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
        .len()
}

fn segment_end(root: &Path) -> u64 {
    let (start, path) = segment_files(root).pop().expect("a segment");
    start + file_len(&path)
}

/// Where the bytes in the last segment file end, less the zeros after them: a running
/// SYNC_FLUSH store's zeroing thread keeps zeros past the log (`StoreConfig::zeroed_space`).
fn segment_data_end(root: &Path) -> u64 {
    let (start, path) = segment_files(root).pop().expect("a segment");
    let bytes = std::fs::read(&path).expect("read the last segment");
    start
        + bytes
            .iter()
            .rposition(|&b| b != 0)
            .map_or(0, |at| at as u64 + 1)
}

/// A store that keeps its files' lengths to the log while it runs (no zeroed space), for
/// the tests that check recovery cut the file itself.
fn exact_length_config(root: &Path) -> StoreConfig {
    let mut config = test_config(root);
    config.zeroed_space = false;
    config
}

fn cq_file(root: &Path, topic: &str, queue_id: u32, first_entry: u64) -> PathBuf {
    root.join("consumequeue")
        .join(topic)
        .join(queue_id.to_string())
        .join(format!("{:020}", first_entry * 20))
}

fn assert_names(error: &OpenError, path: &Path) {
    let text = error.to_string();
    assert!(
        text.contains(&path.display().to_string()),
        "error {text:?} does not name {}",
        path.display()
    );
}

// ---------------------------------------------------------------------------------------------
// Damaged CommitLog
// ---------------------------------------------------------------------------------------------

#[test]
fn torn_tail_is_cut_and_reported() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = exact_length_config(dir.path());
    let store = open(&config);
    let placements: Vec<Placement> = (0..10).map(|i| put(&store, "T", 0, i)).collect();
    let end = store.stats().written_end;
    store.close().expect("close");

    // A torn write: the first 100 bytes of a record (a copy of record 3) at the end.
    let (segment, at) = locate(
        dir.path(),
        config.segment_size_bytes,
        placements[3].phys_offset,
    );
    let bytes = std::fs::read(&segment).expect("read segment");
    let mut torn = bytes.clone();
    torn.extend_from_slice(&bytes[at as usize..at as usize + 100]);
    std::fs::write(&segment, torn).expect("write torn tail");

    let store = open(&config);
    let report = store.recovery_report().clone();
    assert!(report.clean_shutdown, "{report:?}");
    assert_eq!(report.checkpoint_position, Some(end), "{report:?}");
    assert_eq!(report.scanned_from, end);
    let cut = report.cut.clone().expect("the torn tail is reported");
    assert_eq!(cut.phys_offset, end);
    assert_eq!(cut.bytes_cut, 100);
    assert!(cut.reason.contains("torn"), "reason {:?}", cut.reason);
    assert_eq!(report.log_end, end);
    assert_eq!(report.queues_rebuilt, None);
    assert_eq!(store.stats().bytes_cut, 100);
    assert_eq!(store.stats().written_end, end);
    assert_eq!(segment_end(dir.path()), end, "the file itself is cut");
    assert_eq!(bodies(&store, "T", 0), expected_bodies("T", 0, 10));

    // The log continues where the good records end.
    let next = put(&store, "T", 0, 10);
    assert_eq!((next.phys_offset, next.queue_offset), (end, 10));
    store.close().expect("close");
    let store = open(&config);
    assert_eq!(store.recovery_report().cut, None);
    assert_eq!(bodies(&store, "T", 0), expected_bodies("T", 0, 11));
}

#[test]
fn zero_filled_tail_is_cut_and_reported() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = exact_length_config(dir.path());
    let store = open(&config);
    for i in 0..5 {
        put(&store, "T", 0, i);
    }
    let end = store.stats().written_end;
    store.close().expect("close");
    let (segment, at) = locate(dir.path(), config.segment_size_bytes, end);
    set_len(&segment, at + 4096);

    let store = open(&config);
    let cut = store
        .recovery_report()
        .cut
        .clone()
        .expect("zeroed tail is reported");
    assert_eq!((cut.phys_offset, cut.bytes_cut), (end, 4096), "{cut:?}");
    assert_eq!(store.stats().bytes_cut, 4096);
    assert_eq!(bodies(&store, "T", 0), expected_bodies("T", 0, 5));
    assert_eq!(segment_end(dir.path()), end);
}

/// The common power-loss shape: records written after the last checkpoint, then a stretch of
/// zeros (the file grew but its data never reached the disk). The records before the zeros
/// are kept; only the zeros are cut.
#[test]
fn zero_filled_tail_after_records_keeps_the_records() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(dir.path());
    let store = open(&config);
    for i in 0..5 {
        put(&store, "T", 0, i);
    }
    let first = checkpoint_now(&store);
    for i in 5..10 {
        put(&store, "T", 0, i);
    }
    let end = store.stats().written_end;
    store.close().expect("close");
    for (position, path) in checkpoint_files(dir.path()) {
        if position != first {
            std::fs::remove_file(path).expect("remove checkpoint");
        }
    }
    let (segment, at) = locate(dir.path(), config.segment_size_bytes, end);
    set_len(&segment, at + 4096);

    let store = open(&config);
    let report = store.recovery_report().clone();
    assert_eq!(report.checkpoint_position, Some(first), "{report:?}");
    let cut = report.cut.clone().expect("zeroed tail is reported");
    assert_eq!((cut.phys_offset, cut.bytes_cut), (end, 4096), "{cut:?}");
    assert_eq!(store.stats().bytes_cut, 4096);
    assert_eq!(bodies(&store, "T", 0), expected_bodies("T", 0, 10));
}

/// A bit flip in the middle of the log, with no checkpoint: the scan covers the whole log and
/// stops at the damaged record; everything from there on is cut, including offset commits.
/// What a reader of (topic, queue) sees for `count` messages, with the message indexes in
/// `damaged` lost to damage.
fn expected_seen(topic: &str, queue_id: u32, count: usize, damaged: &[usize]) -> Vec<Seen> {
    (0..count)
        .map(|i| {
            if damaged.contains(&i) {
                Err(i as u64)
            } else {
                Ok(body(topic, queue_id, i).into_bytes())
            }
        })
        .collect()
}

/// A flipped body byte in the middle of the log, no checkpoint: the record is quarantined,
/// nothing is cut, and every acknowledged record and commit after it stays (mid-log damage
/// policy; the torn-tail cut applies only when nothing valid follows).
#[test]
fn bad_crc_in_the_middle_is_quarantined_and_what_follows_stays() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(dir.path());
    let store = open(&config);
    let mut placements = Vec::new();
    for i in 0..40 {
        placements.push(put(&store, "T", (i % 2) as u32, i / 2));
        if i == 10 {
            commit(&store, "G", "T", 0, 3);
        }
        if i == 30 {
            commit(&store, "G", "T", 0, 12);
        }
    }
    let end = store.stats().written_end;
    store.close().expect("close");
    for (_, path) in checkpoint_files(dir.path()) {
        std::fs::remove_file(path).expect("remove checkpoint");
    }
    let bad = placements[25].phys_offset;
    let bad_len = placements[26].phys_offset - bad;
    let (segment, at) = locate(dir.path(), config.segment_size_bytes, bad);
    flip_bit(&segment, at + BODY_AT + 2, 3);

    let store = open(&config);
    let report = store.recovery_report().clone();
    assert_eq!(report.checkpoint_position, None, "{report:?}");
    assert_eq!(report.scanned_from, 0);
    assert_eq!(report.cut, None, "nothing valid is cut: {report:?}");
    assert_eq!(report.log_end, end);
    assert_eq!(report.scanned_bytes, end - bad_len);
    assert_eq!(report.quarantined.len(), 1, "{report:?}");
    let range = &report.quarantined[0];
    assert_eq!((range.phys_offset, range.len), (bad, bad_len), "{range:?}");
    assert!(range.reason.contains("CRC"), "reason {:?}", range.reason);
    // 39 messages and both offset records are dispatched.
    assert_eq!(report.records_dispatched, 41);
    assert_eq!(store.stats().bytes_cut, 0);
    assert_eq!(store.quarantined().total, 1);

    // Record 25 is message 12 of T/1: readers get 0..12, then the damage named, then the rest.
    assert_eq!(bodies(&store, "T", 0), expected_bodies("T", 0, 20));
    assert_eq!(
        read_with_damage(&store, "T", 1),
        expected_seen("T", 1, 20, &[12])
    );
    assert_eq!(store.queue_bounds("T", 1), Some((0, 20)));
    // The commit after the damaged record survives with it.
    assert_eq!(offset_of(&store, "G", "T", 0), Some(12));
    assert_eq!(store.queue_bounds(OFFSET_TOPIC, 0), Some((0, 2)));
    assert_eq!(
        store
            .messages_by_key("T", "T-k13", 10)
            .expect("lookup")
            .len(),
        2,
        "records 26 and 27 (message 13 of each queue) are indexed"
    );

    // Idempotent: a second recovery cuts nothing and readers see the same.
    store.close().expect("close");
    let store = open(&config);
    assert_eq!(store.recovery_report().cut, None);
    assert_eq!(
        read_with_damage(&store, "T", 1),
        expected_seen("T", 1, 20, &[12])
    );
    assert_eq!(offset_of(&store, "G", "T", 0), Some(12));
}

/// The whole-record CRC catches damage the body CRC cannot see: a flipped queue offset. The
/// record is quarantined; the queue keeps its offsets dense and the records after it.
#[test]
fn flipped_header_field_is_caught_by_record_crc() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(dir.path());
    let store = open(&config);
    let placements: Vec<Placement> = (0..10).map(|i| put(&store, "T", 0, i)).collect();
    store.close().expect("close");
    for (_, path) in checkpoint_files(dir.path()) {
        std::fs::remove_file(path).expect("remove checkpoint");
    }
    let bad = placements[6].phys_offset;
    let (segment, at) = locate(dir.path(), config.segment_size_bytes, bad);
    flip_bit(&segment, at + QUEUE_OFFSET_AT + 7, 0);

    let store = open(&config);
    let report = store.recovery_report().clone();
    assert_eq!(report.cut, None, "{report:?}");
    let range = report.quarantined.first().expect("quarantined");
    assert_eq!(range.phys_offset, bad, "{range:?}");
    assert!(range.reason.contains("CRC"), "reason {:?}", range.reason);
    assert_eq!(
        read_with_damage(&store, "T", 0),
        expected_seen("T", 0, 10, &[6])
    );
}

/// A bit flip after the newest usable checkpoint: recovery starts there, keeps it,
/// quarantines the damaged record and re-dispatches everything else after the checkpoint.
#[test]
fn bit_flip_after_checkpoint_is_quarantined_from_the_checkpoint() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(dir.path());
    let store = open(&config);
    let mut placements: Vec<Placement> = (0..20).map(|i| put(&store, "T", 0, i)).collect();
    let first = checkpoint_now(&store);
    placements.extend((20..40).map(|i| put(&store, "T", 0, i)));
    store.close().expect("close");
    let positions: Vec<u64> = checkpoint_files(dir.path())
        .iter()
        .map(|(p, _)| *p)
        .collect();
    assert_eq!(positions.first(), Some(&first), "{positions:?}");
    // Keep only the checkpoint at `first`, as if the crash came before the next one.
    for (position, path) in checkpoint_files(dir.path()) {
        if position != first {
            std::fs::remove_file(path).expect("remove checkpoint");
        }
    }
    let bad = placements[30].phys_offset;
    let (segment, at) = locate(dir.path(), config.segment_size_bytes, bad);
    flip_bit(&segment, at + BODY_AT + 5, 6);

    let store = open(&config);
    let report = store.recovery_report().clone();
    assert_eq!(report.checkpoint_position, Some(first), "{report:?}");
    assert_eq!(report.scanned_from, first);
    assert_eq!(report.cut, None, "{report:?}");
    assert_eq!(
        report
            .quarantined
            .iter()
            .map(|r| r.phys_offset)
            .collect::<Vec<_>>(),
        vec![bad]
    );
    assert_eq!(report.queues_rebuilt, None, "{report:?}");
    assert_eq!(
        report.records_dispatched, 19,
        "records 20..40 but 30 re-dispatched"
    );
    assert_eq!(
        read_with_damage(&store, "T", 0),
        expected_seen("T", 0, 40, &[30])
    );
    assert_eq!(store.queue_bounds("T", 0), Some((0, 40)));
}

// ---------------------------------------------------------------------------------------------
// Damaged ConsumeQueues
// ---------------------------------------------------------------------------------------------

/// 30 messages in T/0 (4 ConsumeQueue files of 8 entries) and 5 in T/1, closed cleanly.
fn store_with_queues(config: &StoreConfig) -> (Vec<Placement>, u64) {
    let store = open(config);
    let placements: Vec<Placement> = (0..30).map(|i| put(&store, "T", 0, i)).collect();
    for i in 0..5 {
        put(&store, "T", 1, i);
    }
    let end = store.stats().written_end;
    store.close().expect("close");
    (placements, end)
}

fn assert_queues_intact(store: &MessageStore, placements: &[Placement]) {
    let q0 = read_all(store, "T", 0);
    assert_eq!(
        q0.iter().map(|m| m.phys_offset).collect::<Vec<_>>(),
        placements.iter().map(|p| p.phys_offset).collect::<Vec<_>>()
    );
    assert_eq!(bodies(store, "T", 0), expected_bodies("T", 0, 30));
    assert_eq!(bodies(store, "T", 1), expected_bodies("T", 1, 5));
}

#[test]
fn truncated_consume_queue_is_rebuilt() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(dir.path());
    let (placements, end) = store_with_queues(&config);
    let second_file = cq_file(dir.path(), "T", 0, 8);
    assert_eq!(file_len(&second_file), 160);
    set_len(&second_file, 50);

    let store = open(&config);
    let report = store.recovery_report().clone();
    assert_eq!(report.checkpoint_position, Some(end), "{report:?}");
    assert!(
        report
            .queues_rebuilt
            .as_deref()
            .is_some_and(|r| r.contains("T/0")),
        "{report:?}"
    );
    assert_eq!(report.cut, None);
    assert_queues_intact(&store, &placements);
    store.close().expect("close");
    assert_eq!(file_len(&second_file), 160, "the short file is rewritten");
}

#[test]
fn torn_consume_queue_tail_is_reported_and_repaired() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(dir.path());
    let (placements, _) = store_with_queues(&config);
    let last_file = cq_file(dir.path(), "T", 0, 24);
    assert_eq!(file_len(&last_file), 6 * 20);
    set_len(&last_file, 6 * 20 - 10);

    let store = open(&config);
    let report = store.recovery_report().clone();
    assert_eq!(
        report.queue_torn_tails,
        vec![("T/0".to_string(), 10)],
        "{report:?}"
    );
    assert!(
        report
            .queues_rebuilt
            .as_deref()
            .is_some_and(|r| r.contains("T/0")),
        "{report:?}"
    );
    assert_queues_intact(&store, &placements);
}

#[test]
fn missing_consume_queues_are_rebuilt() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(dir.path());
    let (placements, _) = store_with_queues(&config);
    std::fs::remove_dir_all(dir.path().join("consumequeue").join("T")).expect("remove queues");

    let store = open(&config);
    let report = store.recovery_report().clone();
    assert!(report.queues_rebuilt.is_some(), "{report:?}");
    assert_eq!(report.records_dispatched, 35, "{report:?}");
    assert_queues_intact(&store, &placements);
}

// ---------------------------------------------------------------------------------------------
// Damaged or missing checkpoints
// ---------------------------------------------------------------------------------------------

/// 20 messages, a commit, checkpoint A; 20 more, another commit, a clean close (checkpoint B).
fn store_with_two_checkpoints(config: &StoreConfig) -> (u64, u64) {
    let store = open(config);
    for i in 0..20 {
        put(&store, "T", 0, i);
    }
    commit(&store, "G", "T", 0, 10);
    let first = checkpoint_now(&store);
    for i in 20..40 {
        put(&store, "T", 0, i);
    }
    commit(&store, "G", "T", 0, 30);
    let end = store.stats().written_end;
    store.close().expect("close");
    let positions: Vec<u64> = checkpoint_files(&config.root_dir)
        .iter()
        .map(|(p, _)| *p)
        .collect();
    assert_eq!(positions, vec![first, end]);
    (first, end)
}

#[test]
fn corrupt_newest_checkpoint_falls_back_to_older() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(dir.path());
    let (first, newest) = store_with_two_checkpoints(&config);
    let path = dir.path().join("checkpoint").join(format!("{newest:020}"));
    let len = file_len(&path);
    flip_bit(&path, len / 2, 1);

    let store = open(&config);
    let report = store.recovery_report().clone();
    assert!(report.clean_shutdown);
    assert_eq!(report.checkpoint_position, Some(first), "{report:?}");
    assert_eq!(report.checkpoints_rejected.len(), 1, "{report:?}");
    let rejected = &report.checkpoints_rejected[0];
    assert!(
        rejected.contains(&path.display().to_string()) && rejected.contains("CRC"),
        "{rejected:?}"
    );
    assert_eq!(report.queues_rebuilt, None, "{report:?}");
    assert_eq!(report.records_dispatched, 21, "{report:?}");
    assert_eq!(bodies(&store, "T", 0), expected_bodies("T", 0, 40));
    assert_eq!(
        offset_of(&store, "G", "T", 0),
        Some(30),
        "the later commit is replayed from the log"
    );
    assert_eq!(store.stats().checkpoint_position, first);
}

#[test]
fn torn_newest_checkpoint_falls_back_to_older() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(dir.path());
    let (first, newest) = store_with_two_checkpoints(&config);
    let path = dir.path().join("checkpoint").join(format!("{newest:020}"));
    set_len(&path, file_len(&path) / 2);

    let store = open(&config);
    let report = store.recovery_report().clone();
    assert_eq!(report.checkpoint_position, Some(first), "{report:?}");
    assert_eq!(report.checkpoints_rejected.len(), 1, "{report:?}");
    assert!(
        report.checkpoints_rejected[0].contains(&path.display().to_string()),
        "{report:?}"
    );
    assert_eq!(bodies(&store, "T", 0), expected_bodies("T", 0, 40));
    assert_eq!(offset_of(&store, "G", "T", 0), Some(30));
}

#[test]
fn checkpoint_past_the_log_end_is_rejected() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(dir.path());
    let (_, newest) = store_with_two_checkpoints(&config);
    let source = dir.path().join("checkpoint").join(format!("{newest:020}"));
    let bogus = dir
        .path()
        .join("checkpoint")
        .join(format!("{:020}", newest + 4096));
    std::fs::copy(&source, &bogus).expect("copy checkpoint");

    let store = open(&config);
    let report = store.recovery_report().clone();
    assert_eq!(report.checkpoint_position, Some(newest), "{report:?}");
    assert_eq!(report.checkpoints_rejected.len(), 1, "{report:?}");
    assert!(
        report.checkpoints_rejected[0].contains("outside the log"),
        "{report:?}"
    );
    assert_eq!(offset_of(&store, "G", "T", 0), Some(30));
}

#[test]
fn missing_checkpoints_rebuild_from_log() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(dir.path());
    let store = open(&config);
    for i in 0..30 {
        put(&store, "T", (i % 2) as u32, i / 2);
    }
    commit(&store, "G", "T", 0, 7);
    commit(&store, "G", "T", 1, 9);
    let reset = store
        .commit_offsets(&command(OffsetKind::Reset, "H", "T", 1, 2))
        .expect("reset");
    assert_eq!(
        (reset.verdicts.clone(), reset.generation),
        (vec![Verdict::Applied], Some(1))
    );
    let mut after_reset = command(OffsetKind::Commit, "H", "T", 1, 5);
    after_reset.generation = Some(1);
    assert_eq!(
        store.commit_offsets(&after_reset).expect("commit").verdicts,
        vec![Verdict::Applied]
    );
    let before = (
        bodies(&store, "T", 0),
        bodies(&store, "T", 1),
        store.group_offsets("G").expect("offset view"),
        store.group_offsets("H").expect("offset view"),
        store.offset_generation("H", "T").expect("offset view"),
    );
    let end = store.stats().written_end;
    store.close().expect("close");
    for (_, path) in checkpoint_files(dir.path()) {
        std::fs::remove_file(path).expect("remove checkpoint");
    }

    let store = open(&config);
    let report = store.recovery_report().clone();
    assert_eq!(report.checkpoint_position, None, "{report:?}");
    assert!(report.checkpoints_rejected.is_empty(), "{report:?}");
    assert!(
        report
            .queues_rebuilt
            .as_deref()
            .is_some_and(|r| r.contains("no usable checkpoint")),
        "{report:?}"
    );
    assert_eq!(report.cut, None);
    assert_eq!(
        (report.scanned_from, report.scanned_bytes, report.log_end),
        (0, end, end)
    );
    assert_eq!(
        report.records_dispatched, 34,
        "30 messages and 4 offset records"
    );
    let after = (
        bodies(&store, "T", 0),
        bodies(&store, "T", 1),
        store.group_offsets("G").expect("offset view"),
        store.group_offsets("H").expect("offset view"),
        store.offset_generation("H", "T").expect("offset view"),
    );
    assert_eq!(after, before);
    assert_eq!(offset_of(&store, "H", "T", 1), Some(5));
    assert_eq!(
        store
            .messages_by_key("T", "T-k3", 10)
            .expect("lookup")
            .len(),
        2,
        "T/0 and T/1 both have k3"
    );
}

// ---------------------------------------------------------------------------------------------
// Truncation
// ---------------------------------------------------------------------------------------------

/// T/0 gets messages 0..20 with keys; G commits 4 after message 9 and 15 after message 19;
/// checkpoints after message 5 and after message 15. Returns (phys of message 10, end,
/// first checkpoint).
fn store_for_truncation(store: &MessageStore) -> (u64, u64, u64) {
    let mut cut = 0;
    let mut first_checkpoint = 0;
    for i in 0..20 {
        let placement = put(store, "T", 0, i);
        if i == 10 {
            cut = placement.phys_offset;
        }
        if i == 5 {
            first_checkpoint = checkpoint_now(store);
        }
        if i == 15 {
            checkpoint_now(store);
        }
        if i == 9 {
            commit(store, "G", "T", 0, 4);
        }
    }
    commit(store, "G", "T", 0, 15);
    (cut, store.stats().written_end, first_checkpoint)
}

/// The state after cutting at message 10: messages 0..10, G at 4, no later keys.
fn assert_cut_at_message_10(store: &MessageStore, cut: u64) {
    assert_eq!(store.stats().written_end, cut);
    assert_eq!(store.queue_bounds("T", 0), Some((0, 10)));
    assert_eq!(bodies(store, "T", 0), expected_bodies("T", 0, 10));
    let read = store
        .get_messages("T", 0, 10, 1, usize::MAX, &TagFilter::All)
        .expect("read");
    assert_eq!(read.status, GetStatus::OffsetOverflowOne);
    assert_eq!(
        offset_of(store, "G", "T", 0),
        Some(4),
        "the commit after the cut is gone"
    );
    let history = store.offset_history("G", "T", Some(0)).expect("history");
    assert_eq!(
        history.iter().map(|e| e.offset).collect::<Vec<_>>(),
        vec![4]
    );
    assert_eq!(store.queue_bounds(OFFSET_TOPIC, 0), Some((0, 1)));
    assert_eq!(
        store
            .messages_by_key("T", "T-k9", 10)
            .expect("lookup")
            .len(),
        1
    );
    for i in 10..20 {
        let key = format!("T-k{i}");
        assert!(
            store
                .messages_by_key("T", &key, 10)
                .expect("lookup")
                .is_empty(),
            "{key} survived the cut"
        );
    }
    assert!(
        checkpoint_files(&store.config().root_dir)
            .iter()
            .all(|(p, _)| *p <= cut),
        "a checkpoint past the cut"
    );
    assert_eq!(
        segment_data_end(&store.config().root_dir),
        cut,
        "segment files hold nothing past the cut"
    );
}

#[test]
fn truncate_cuts_log_queues_index_and_offsets() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(dir.path());
    let store = open(&config);
    let (cut, end, first_checkpoint) = store_for_truncation(&store);

    let report = store.truncate(cut).expect("truncate");
    assert_eq!(report.phys_offset, cut);
    assert_eq!(report.bytes_cut, end - cut);
    assert_eq!(
        report.checkpoint_position,
        Some(first_checkpoint),
        "{report:?}"
    );
    assert_eq!(
        report.records_dispatched, 5,
        "messages 6..10 and the first commit"
    );
    assert_eq!(store.stats().bytes_cut, end - cut);
    assert_eq!(store.stats().poisoned, None);
    assert_cut_at_message_10(&store, cut);

    // The log continues at the cut with the next queue offset; commits are judged against it.
    let next = put(&store, "T", 0, 10);
    assert_eq!((next.phys_offset, next.queue_offset), (cut, 10));
    let past = store
        .commit_offsets(&command(OffsetKind::Commit, "G", "T", 0, 15))
        .expect("commit");
    assert!(matches!(past.verdicts[0], Verdict::Rejected(_)), "{past:?}");
    commit(&store, "G", "T", 0, 11);
    store.close().expect("close");

    let store = open(&config);
    let report = store.recovery_report().clone();
    assert!(
        report.clean_shutdown && report.cut.is_none() && report.completed_truncation.is_none(),
        "{report:?}"
    );
    assert_eq!(bodies(&store, "T", 0), expected_bodies("T", 0, 11));
    assert_eq!(offset_of(&store, "G", "T", 0), Some(11));
}

#[test]
fn truncate_rejects_offsets_that_are_not_record_boundaries() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(dir.path());
    let store = open(&config);
    let placements: Vec<Placement> = (0..5).map(|i| put(&store, "T", 0, i)).collect();
    let end = store.stats().written_end;
    for bad in [placements[2].phys_offset + 1, end + 100] {
        match store.truncate(bad) {
            Err(TruncateError::BadOffset { phys_offset, .. }) => assert_eq!(phys_offset, bad),
            other => panic!("truncate({bad}) gave {other:?}"),
        }
    }
    assert_eq!(
        store.stats().poisoned,
        None,
        "a refused truncation changes nothing"
    );
    assert_eq!(store.stats().written_end, end);
    assert_eq!(put(&store, "T", 0, 5).phys_offset, end);
    assert_eq!(bodies(&store, "T", 0), expected_bodies("T", 0, 6));
}

/// The store's `truncate.intent`: 8-byte big-endian offset + CRC32 of those 8 bytes.
fn write_intent(root: &Path, phys_offset: u64) {
    let mut bytes = phys_offset.to_be_bytes().to_vec();
    bytes.extend_from_slice(&crc32fast::hash(&bytes).to_be_bytes());
    std::fs::write(root.join("truncate.intent"), bytes).expect("write intent");
}

/// A crash right after the intent was recorded (nothing cut yet), and a crash halfway
/// (checkpoints past the cut deleted, log file partly cut, ConsumeQueues untouched): either
/// way recovery completes the truncation and the tail never comes back.
#[test]
fn interrupted_truncate_never_resurrects_tail() {
    for halfway in [false, true] {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = test_config(dir.path());
        let store = open(&config);
        let (cut, end, first_checkpoint) = store_for_truncation(&store);
        store.close().expect("close");
        write_intent(dir.path(), cut);
        if halfway {
            for (position, path) in checkpoint_files(dir.path()) {
                if position > cut {
                    std::fs::remove_file(path).expect("remove checkpoint");
                }
            }
            let (segment, at) = locate(dir.path(), config.segment_size_bytes, cut);
            set_len(&segment, at + (end - cut) / 2 + 3);
        }

        let store = open(&config);
        let report = store.recovery_report().clone();
        assert_eq!(
            report.completed_truncation,
            Some(cut),
            "halfway={halfway}: {report:?}"
        );
        assert_eq!(report.log_end, cut, "halfway={halfway}: {report:?}");
        assert_eq!(report.cut, None, "halfway={halfway}: {report:?}");
        assert_eq!(
            report.checkpoint_position,
            Some(first_checkpoint),
            "halfway={halfway}: {report:?}"
        );
        assert!(
            !dir.path().join("truncate.intent").exists(),
            "halfway={halfway}: intent left behind"
        );
        assert_cut_at_message_10(&store, cut);
        store.close().expect("close");

        let store = open(&config);
        assert_eq!(store.recovery_report().completed_truncation, None);
        assert_cut_at_message_10(&store, cut);
    }
}

#[test]
fn corrupt_truncate_intent_is_named() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(dir.path());
    let store = open(&config);
    put(&store, "T", 0, 0);
    store.close().expect("close");
    let path = dir.path().join("truncate.intent");
    std::fs::write(&path, b"not an intent").expect("write");
    let error = open_err(&config);
    assert!(
        matches!(&error, OpenError::ForeignFile { path: p, .. } if *p == path),
        "{error:?}"
    );
    assert_names(&error, &path);
}

// ---------------------------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------------------------

/// A store with one message, closed.
fn small_store(config: &StoreConfig) {
    let store = open(config);
    put(&store, "T", 0, 0);
    store.close().expect("close");
}

#[test]
fn foreign_file_in_commitlog_is_named() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(dir.path());
    small_store(&config);
    let stray = dir.path().join("commitlog").join("notes.txt");
    std::fs::write(&stray, b"hello").expect("write");
    let error = open_err(&config);
    assert!(
        matches!(&error, OpenError::ForeignFile { path, .. } if *path == stray),
        "{error:?}"
    );
    assert_names(&error, &stray);
}

#[test]
fn misaligned_segment_name_is_named() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(dir.path());
    small_store(&config);
    let stray = dir.path().join("commitlog").join(format!("{:020}", 100));
    std::fs::write(&stray, b"").expect("write");
    let error = open_err(&config);
    assert!(
        matches!(&error, OpenError::ForeignFile { path, .. } if *path == stray),
        "{error:?}"
    );
    assert_names(&error, &stray);
}

#[test]
fn oversized_segment_is_named() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(dir.path());
    small_store(&config);
    let (_, segment) = segment_files(dir.path()).pop().expect("segment");
    set_len(&segment, config.segment_size_bytes + 1);
    let error = open_err(&config);
    assert!(
        matches!(&error, OpenError::ForeignFile { path, .. } if *path == segment),
        "{error:?}"
    );
    assert_names(&error, &segment);
}

#[test]
fn missing_middle_segment_is_named() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(dir.path());
    let store = open(&config);
    let big = vec![b'b'; 8 * 1024];
    for _ in 0..20 {
        store.put(&[draft("T", 0, &big, b"")]).expect("put");
    }
    store.close().expect("close");
    let segments = segment_files(dir.path());
    assert!(segments.len() >= 3, "{segments:?}");
    std::fs::remove_file(&segments[1].1).expect("remove segment");
    let error = open_err(&config);
    assert!(
        matches!(&error, OpenError::ForeignFile { path, reason } if *path == segments[1].1 && reason.contains("missing")),
        "{error:?}"
    );
    assert_names(&error, &segments[1].1);
}

#[test]
fn non_numeric_queue_dir_is_named() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(dir.path());
    small_store(&config);
    let stray = dir.path().join("consumequeue").join("T").join("abc");
    std::fs::create_dir_all(&stray).expect("mkdir");
    let error = open_err(&config);
    assert!(
        matches!(&error, OpenError::ConsumeQueue(CqError::Foreign { path, .. }) if *path == stray),
        "{error:?}"
    );
    assert_names(&error, &stray);
}

#[test]
fn foreign_files_in_consume_queue_dirs_are_named() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(dir.path());
    small_store(&config);
    let in_queue = dir
        .path()
        .join("consumequeue")
        .join("T")
        .join("0")
        .join("junk.bin");
    std::fs::write(&in_queue, b"junk").expect("write");
    let error = open_err(&config);
    assert!(
        matches!(&error, OpenError::ConsumeQueue(CqError::Foreign { path, .. }) if *path == in_queue),
        "{error:?}"
    );
    assert_names(&error, &in_queue);
    std::fs::remove_file(&in_queue).expect("remove");

    let in_root = dir.path().join("consumequeue").join("README");
    std::fs::write(&in_root, b"readme").expect("write");
    let error = open_err(&config);
    assert!(
        matches!(&error, OpenError::ConsumeQueue(CqError::Foreign { path, .. }) if *path == in_root),
        "{error:?}"
    );
    assert_names(&error, &in_root);
    std::fs::remove_file(&in_root).expect("remove");

    // With the strays gone, the store opens and holds its message.
    let store = open(&config);
    assert_eq!(bodies(&store, "T", 0), expected_bodies("T", 0, 1));
}

#[test]
fn stray_files_in_checkpoint_dir_are_ignored() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(dir.path());
    small_store(&config);
    let checkpoints = dir.path().join("checkpoint");
    let notes = checkpoints.join("notes.txt");
    let backup = checkpoints.join(format!("{:020}~", 0));
    let leftover = checkpoints.join(format!("{:020}.tmp", 0));
    for path in [&notes, &backup, &leftover] {
        std::fs::write(path, b"?").expect("write");
    }
    // Only 20-digit names are checkpoints: the others neither stop the start nor get read.
    let store = open(&config);
    assert!(store.recovery_report().clean_shutdown);
    assert!(
        store.recovery_report().checkpoint_position.is_some(),
        "the real checkpoint is used: {:?}",
        store.recovery_report()
    );
    assert_eq!(bodies(&store, "T", 0), expected_bodies("T", 0, 1));
    assert!(notes.exists() && backup.exists(), "strays are left alone");
    assert!(!leftover.exists(), "a leftover temp file is removed");
    store.close().expect("close");
    let store = open(&config);
    assert!(store.recovery_report().clean_shutdown, "and again");
}

#[test]
fn foreign_store_meta_is_named_and_other_segment_size_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(dir.path());
    small_store(&config);

    let mut other = config.clone();
    other.segment_size_bytes *= 2;
    let error = open_err(&other);
    assert!(
        matches!(&error, OpenError::Config(text) if text.contains("mappedFileSizeCommitLog")),
        "{error:?}"
    );

    let meta = dir.path().join("store.meta");
    std::fs::write(&meta, b"something else entirely\n").expect("write");
    let error = open_err(&config);
    assert!(
        matches!(&error, OpenError::ForeignFile { path, .. } if *path == meta),
        "{error:?}"
    );
    assert_names(&error, &meta);
}

#[test]
fn second_open_of_one_directory_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(dir.path());
    let store = open(&config);
    let error = open_err(&config);
    assert!(
        matches!(&error, OpenError::Locked(path) if path == dir.path()),
        "{error:?}"
    );
    assert_names(&error, dir.path());
    drop(store);
}

#[test]
fn read_only_directory_is_a_clear_error() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(dir.path());
    small_store(&config);
    let commitlog = dir.path().join("commitlog");
    let set_mode = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    set_mode(dir.path(), 0o500);
    set_mode(&commitlog, 0o500);
    let probe = dir.path().join("probe");
    if std::fs::write(&probe, b"").is_ok() {
        // Running as root (or with CAP_DAC_OVERRIDE): permissions are not enforced.
        let _ = std::fs::remove_file(&probe);
        set_mode(&commitlog, 0o755);
        set_mode(dir.path(), 0o755);
        eprintln!("skipped: chmod 0o500 does not prevent writes for this user");
        return;
    }
    let result = MessageStore::open(config.clone());
    set_mode(&commitlog, 0o755);
    set_mode(dir.path(), 0o755);
    let error = result.expect_err("a read-only store directory cannot be opened for writing");
    let text = error.to_string();
    assert!(
        text.contains(&dir.path().display().to_string()),
        "error {text:?} names no file of the store"
    );
    assert!(matches!(error, OpenError::File(_)), "{error:?}");
}

/// A record read through the store matches the bytes on disk at its offset (the tests above
/// rely on this to damage records by offset).
#[test]
fn record_offsets_match_the_segment_files() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(dir.path());
    let store = open(&config);
    let placement = put(&store, "T", 0, 3);
    let (segment, at) = locate(dir.path(), config.segment_size_bytes, placement.phys_offset);
    let on_disk = std::fs::read(&segment).expect("read");
    let record = &on_disk[at as usize..at as usize + placement.size as usize];
    let view = RecordView::parse(record).expect("record on disk verifies");
    assert_eq!(view.body, body("T", 0, 3).as_bytes());
    assert_eq!(
        &record[BODY_AT as usize..BODY_AT as usize + 4],
        &body("T", 0, 3).as_bytes()[..4]
    );
    assert_eq!(
        u64::from_be_bytes(
            record[QUEUE_OFFSET_AT as usize..][..8]
                .try_into()
                .expect("8")
        ),
        0
    );
    assert_eq!(numbered_files(&dir.path().join("commitlog")).len(), 1);
}
