//! Helpers shared by the store's integration tests: configuration, drafts, full queue reads
//! and direct file access (the tests damage files the way a crash or an operator would).
#![allow(dead_code)]

pub mod terms;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use ferromq_protocol::{DraftRecord, RecordView};
use ferromq_store::offsets::{OffsetCommand, OffsetEntry, OffsetKind};
use ferromq_store::{
    FlushDiskType, GetStatus, MessageStore, StoreConfig, StoredMessage, TagFilter,
};

/// A commit of `offset` for group `G` on queue 0 of topic `T`, by `client_id`.
pub fn commit_t0(client_id: &str, offset: u64) -> OffsetCommand {
    OffsetCommand {
        kind: OffsetKind::Commit,
        group: "G".into(),
        client_id: client_id.into(),
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

/// A small store: 64 KiB segments, 8 ConsumeQueue entries per file, `SyncFlush`, no
/// background checkpoints or retention during a test (tests checkpoint explicitly).
pub fn test_config(root: &Path) -> StoreConfig {
    let mut config = StoreConfig::new(root);
    config.segment_size_bytes = 64 * 1024;
    config.max_message_size_bytes = 16 * 1024;
    config.consume_queue_entries_per_file = 8;
    config.flush_disk_type = FlushDiskType::SyncFlush;
    config.checkpoint_interval_ms = 3_600_000;
    config.retention_max_age_ms = None;
    config.retention_max_log_bytes = None;
    config
}

pub fn host() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 40_000))
}

/// A draft with the given topic, queue, body and encoded properties.
pub fn draft<'a>(
    topic: &'a str,
    queue_id: u32,
    body: &'a [u8],
    properties: &'a [u8],
) -> DraftRecord<'a> {
    DraftRecord::plain(topic, queue_id, body, properties, host(), 1_700_000_000_000)
}

/// Every message of a queue from its min to its max (after dispatch caught up), checking that queue offsets are dense
/// and that each record verifies and says it is where it was found.
pub fn read_all(store: &MessageStore, topic: &str, queue_id: u32) -> Vec<StoredMessage> {
    // Reads see dispatched records only; let the dispatcher catch up with the written log.
    let end = store.stats().written_end;
    let dispatched = store.wait_dispatched(end, std::time::Duration::from_secs(5));
    assert_eq!(
        dispatched, end,
        "dispatch did not reach the log end within 5 s"
    );
    let Some((min, max)) = store.queue_bounds(topic, queue_id) else {
        return Vec::new();
    };
    let mut out: Vec<StoredMessage> = Vec::new();
    let mut next = min;
    while next < max {
        let result = store
            .get_messages(topic, queue_id, next, 128, usize::MAX, &TagFilter::All)
            .unwrap_or_else(|e| panic!("read {topic}/{queue_id} at {next}: {e}"));
        assert_eq!(
            result.status,
            GetStatus::Found,
            "{topic}/{queue_id} at {next} of [{min}, {max})"
        );
        for message in &result.messages {
            let expected = min + out.len() as u64;
            assert_eq!(
                message.queue_offset, expected,
                "{topic}/{queue_id}: offsets not dense"
            );
            let view = RecordView::parse(&message.bytes).unwrap_or_else(|e| {
                panic!("{topic}/{queue_id} at {expected}: record does not verify: {e}")
            });
            assert_eq!(
                view.queue_offset, expected,
                "{topic}/{queue_id}: record's QUEUEOFFSET"
            );
            assert_eq!(
                view.phys_offset, message.phys_offset,
                "{topic}/{queue_id} at {expected}: PHYSICALOFFSET"
            );
            assert_eq!(
                view.topic,
                topic.as_bytes(),
                "{topic}/{queue_id} at {expected}: TOPIC"
            );
            assert_eq!(
                view.queue_id, queue_id,
                "{topic}/{queue_id} at {expected}: QUEUEID"
            );
            out.push(message.clone());
        }
        assert!(
            result.next_begin_offset > next,
            "{topic}/{queue_id}: read made no progress at {next}"
        );
        next = result.next_begin_offset;
    }
    assert_eq!(
        out.len() as u64,
        max - min,
        "{topic}/{queue_id}: read count vs bounds [{min}, {max})"
    );
    out
}

/// The body of a stored record.
pub fn body_of(message: &StoredMessage) -> Vec<u8> {
    RecordView::parse(&message.bytes)
        .expect("stored record verifies")
        .body
        .to_vec()
}

/// Segment files of the CommitLog, oldest first, with their start offsets.
pub fn segment_files(root: &Path) -> Vec<(u64, PathBuf)> {
    numbered_files(&root.join("commitlog"))
}

/// Checkpoint files, oldest first, with their positions.
pub fn checkpoint_files(root: &Path) -> Vec<(u64, PathBuf)> {
    numbered_files(&root.join("checkpoint"))
}

/// Files named by a 20-digit number in `dir`, sorted by that number.
pub fn numbered_files(dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut out = Vec::new();
    for item in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("list {}: {e}", dir.display())) {
        let item = item.expect("dir entry");
        let name = item.file_name().to_string_lossy().into_owned();
        if name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit()) {
            out.push((name.parse().expect("digits"), item.path()));
        }
    }
    out.sort();
    out
}

/// Path of the segment file holding `phys_offset` and the offset inside it.
pub fn locate(root: &Path, segment_size: u64, phys_offset: u64) -> (PathBuf, u64) {
    let start = phys_offset - phys_offset % segment_size;
    (
        root.join("commitlog").join(format!("{start:020}")),
        phys_offset - start,
    )
}

/// Flips one bit of the file at `at`.
pub fn flip_bit(path: &Path, at: u64, bit: u8) {
    let mut bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    bytes[at as usize] ^= 1 << bit;
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// Sets the length of a file.
pub fn set_len(path: &Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.set_len(len))
        .unwrap_or_else(|e| panic!("set_len {}: {e}", path.display()));
}

/// One queue offset as a consumer sees it: the record's body, or the offset of a damaged
/// (quarantined) record that the read stopped at.
pub type Seen = Result<Vec<u8>, u64>;

/// Reads a queue from its min to its max the way a consumer would after an admin moves it
/// past each damaged record: every readable record's body, and `Err(queue_offset)` for each
/// damaged one. Asserts that reads return the good records before a damaged one and then
/// name exactly that offset.
pub fn read_with_damage(store: &MessageStore, topic: &str, queue_id: u32) -> Vec<Seen> {
    let end = store.stats().written_end;
    store.wait_dispatched(end, std::time::Duration::from_secs(5));
    let Some((min, max)) = store.queue_bounds(topic, queue_id) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut next = min;
    while next < max {
        match store.get_messages(topic, queue_id, next, 128, usize::MAX, &TagFilter::All) {
            Ok(result) => {
                assert_eq!(
                    result.status,
                    GetStatus::Found,
                    "{topic}/{queue_id} at {next}"
                );
                for message in &result.messages {
                    assert_eq!(
                        message.queue_offset,
                        min + out.len() as u64,
                        "offsets dense"
                    );
                    out.push(Ok(body_of(message)));
                }
                assert!(result.next_begin_offset > next, "no progress at {next}");
                next = result.next_begin_offset;
            }
            Err(ferromq_store::ReadError::Damaged { queue_offset, .. }) => {
                assert_eq!(
                    queue_offset, next,
                    "the damaged offset named is the one read"
                );
                out.push(Err(queue_offset));
                next += 1;
            }
            Err(error) => panic!("read {topic}/{queue_id} at {next}: {error}"),
        }
    }
    out
}

/// The body of numbered message `i` (`tests/preallocation.rs`, `tests/mapped_writes.rs`).
pub fn numbered_body(i: usize) -> String {
    format!("message {i}")
}

/// Puts numbered messages `range` to T/0, one per put (each acknowledged), and returns the
/// log end.
pub fn put_numbered(store: &MessageStore, range: std::ops::Range<usize>) -> u64 {
    for i in range {
        store
            .put(&[draft("T", 0, numbered_body(i).as_bytes(), b"")])
            .expect("put");
    }
    store.stats().written_end
}

/// The bodies in T/0, as text.
pub fn bodies_in_t0(store: &MessageStore) -> Vec<String> {
    read_all(store, "T", 0)
        .iter()
        .map(|m| String::from_utf8(body_of(m)).expect("utf8"))
        .collect()
}

/// The bodies of numbered messages `range`.
pub fn numbered(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(numbered_body).collect()
}
