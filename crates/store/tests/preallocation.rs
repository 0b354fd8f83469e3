//! Preallocated CommitLog space (`commitlog::preallocation`): commits write inside space the
//! active segment file already has, a crash leaves zeros after the log that recovery and
//! `--check` know to be space (no cut reported), and zeros or bytes outside the recorded space
//! are still reported as before.
//!
//! These are the `fallocate` path's tests, so they run with zeroed space off
//! (`StoreConfig::zeroed_space`, the SYNC_FLUSH default; its tests are `tests/zeroed_space.rs`).

mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;

use ferromq_protocol::BLANK_MAGIC;
use ferromq_store::commitlog::preallocation::{PREALLOCATION_STEP_BYTES, RECORD_FILE};
use ferromq_store::{check_store, CheckScope, MessageStore, StoreConfig};

use common::{
    bodies_in_t0, draft, locate, numbered, put_numbered, read_all, segment_files, set_len,
    test_config,
};

/// Segments large enough that a preallocation is a whole step ahead.
const SEGMENT_BYTES: u64 = 64 << 20;

fn config(root: &Path) -> StoreConfig {
    let mut config = test_config(root);
    config.segment_size_bytes = SEGMENT_BYTES;
    config.zeroed_space = false;
    config
}

fn open(config: &StoreConfig) -> MessageStore {
    MessageStore::open(config.clone()).expect("open")
}

/// Puts `count` numbered messages to T/0 and returns the log end.
fn put_messages(store: &MessageStore, from: usize, count: usize) -> u64 {
    put_numbered(store, from..from + count)
}

fn bodies(store: &MessageStore) -> Vec<String> {
    bodies_in_t0(store)
}

fn expected(count: usize) -> Vec<String> {
    numbered(0..count)
}

fn last_file_len(root: &Path) -> u64 {
    let (_, path) = segment_files(root).pop().expect("a segment");
    std::fs::metadata(path).expect("stat").len()
}

#[test]
fn commits_write_inside_preallocated_space_and_a_crash_reports_no_cut() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = config(dir.path());
    let store = open(&config);
    let end = put_messages(&store, 0, 50);
    let file_len = last_file_len(dir.path());
    assert!(
        file_len > end && (PREALLOCATION_STEP_BYTES..=SEGMENT_BYTES).contains(&file_len),
        "file {file_len} bytes for a log ending at {end}"
    );
    assert!(dir.path().join(RECORD_FILE).exists());
    store.abandon();

    let check = check_store(&config, CheckScope::Full).expect("check");
    assert_eq!(check.would_cut, None, "{check:?}");
    assert_eq!(check.scan.tail, None, "space is not a torn tail");
    assert!(check.scan.damaged.is_empty());
    assert_eq!(check.scan.end, end);

    let store = open(&config);
    let report = store.recovery_report().clone();
    assert!(!report.clean_shutdown);
    assert_eq!(report.cut, None, "{report:?}");
    assert_eq!(report.preallocated_trimmed, file_len - end);
    assert_eq!(report.log_end, end);
    assert_eq!(store.stats().bytes_cut, 0);
    assert_eq!(bodies(&store), expected(50));

    // The log continues at its end, inside fresh preallocated space.
    let next = put_messages(&store, 50, 10);
    assert!(last_file_len(dir.path()) >= end + PREALLOCATION_STEP_BYTES);
    assert!(last_file_len(dir.path()) > next);
    store.close().expect("close");
    let store = open(&config);
    assert_eq!(store.recovery_report().cut, None);
    assert_eq!(bodies(&store), expected(60));
}

#[test]
fn a_clean_close_leaves_files_that_end_at_their_data() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = config(dir.path());
    let store = open(&config);
    let end = put_messages(&store, 0, 20);
    assert!(last_file_len(dir.path()) > end);
    store.close().expect("close");
    assert_eq!(last_file_len(dir.path()), end);

    let store = open(&config);
    let report = store.recovery_report().clone();
    assert!(report.clean_shutdown);
    assert_eq!((report.cut, report.preallocated_trimmed), (None, 0));
    assert_eq!(bodies(&store), expected(20));
}

/// Zeros past the recorded space (the file grew further, and its data never reached the
/// disk) are a reported cut; the preallocated zeros before them are not counted in it.
#[test]
fn zeros_past_the_recorded_space_are_still_a_reported_cut() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = config(dir.path());
    let store = open(&config);
    let end = put_messages(&store, 0, 30);
    store.abandon();
    let (segment, _) = locate(dir.path(), SEGMENT_BYTES, end);
    let file_len = last_file_len(dir.path());
    set_len(&segment, file_len + 4096);

    let check = check_store(&config, CheckScope::Recovery).expect("check");
    let cut = check
        .would_cut
        .expect("the zeros past the space are reported");
    assert_eq!((cut.phys_offset, cut.bytes_cut), (end, 4096));

    let store = open(&config);
    let report = store.recovery_report().clone();
    assert_eq!(report.cut, Some(cut), "{report:?}");
    assert_eq!(report.preallocated_trimmed, file_len - end);
    assert_eq!(store.stats().bytes_cut, 4096);
    assert_eq!(
        last_file_len(dir.path()),
        end,
        "everything after the log is gone"
    );
    assert_eq!(bodies(&store), expected(30));
}

/// A torn record written into the preallocated space: its bytes are the cut, the zeros after
/// them are space (zeros at the end of the torn bytes count as space too: they cannot be told
/// apart).
#[test]
fn a_torn_record_inside_the_space_is_cut_alone() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = config(dir.path());
    let store = open(&config);
    let first = store
        .put(&[draft("T", 0, b"message 0", b"")])
        .expect("put")
        .placements[0]
        .clone();
    let end = put_messages(&store, 1, 9);
    store.abandon();
    let (segment, at) = locate(dir.path(), SEGMENT_BYTES, end);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&segment)
        .expect("open segment");
    let mut head = vec![0u8; 40];
    file.read_exact_at(&mut head, first.phys_offset)
        .expect("read a record's head");
    // Trailing zeros of a torn write cannot be told from the space after it; end on a byte
    // that is not zero so the whole torn write is what the cut must count.
    head[39] = 0xAB;
    file.write_all_at(&head, at).expect("write a torn record");

    let store = open(&config);
    let report = store.recovery_report().clone();
    let cut = report.cut.clone().expect("the torn record is reported");
    assert_eq!((cut.phys_offset, cut.bytes_cut), (end, 40), "{cut:?}");
    assert!(report.preallocated_trimmed > 0);
    assert_eq!(bodies(&store), expected(10));
}

/// Without a record that verifies, nothing is known to be space: the zeros are reported, the
/// safe side.
#[test]
fn a_damaged_record_makes_the_zeros_a_reported_cut() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = config(dir.path());
    let store = open(&config);
    let end = put_messages(&store, 0, 10);
    store.abandon();
    let file_len = last_file_len(dir.path());
    let record = dir.path().join(RECORD_FILE);
    let mut bytes = std::fs::read(&record).expect("read record");
    bytes[3] ^= 1;
    std::fs::write(&record, bytes).expect("write record");

    let store = open(&config);
    let cut = store.recovery_report().cut.clone().expect("reported");
    assert_eq!((cut.phys_offset, cut.bytes_cut), (end, file_len - end));
    assert_eq!(bodies(&store), expected(10));
}

/// Small segments: the space never runs past a segment, rolled segments keep their data, and
/// a crash in any of them recovers everything with no cut.
#[test]
fn space_stops_at_the_segment_end_across_rolls() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(dir.path());
    let store = open(&config);
    let body = vec![b'x'; 1000];
    for _ in 0..200 {
        store.put(&[draft("T", 0, &body, b"")]).expect("put");
    }
    let end = store.stats().written_end;
    let segments = segment_files(dir.path());
    assert!(segments.len() >= 3, "{segments:?}");
    for (start, path) in &segments {
        let len = std::fs::metadata(path).expect("stat").len();
        assert!(len <= config.segment_size_bytes, "{start}: {len}");
    }
    // A rolled segment's file ends at its end marker: its space was trimmed at the roll.
    for (start, path) in &segments[..segments.len() - 1] {
        let bytes = std::fs::read(path).expect("read segment");
        let magic = u32::from_be_bytes(bytes[bytes.len() - 4..].try_into().expect("4 bytes"));
        assert_eq!(magic, BLANK_MAGIC, "segment {start} ends at its marker");
    }
    store.abandon();

    let store = open(&config);
    let report = store.recovery_report().clone();
    assert_eq!(report.cut, None, "{report:?}");
    assert_eq!(report.log_end, end);
    assert_eq!(read_all(&store, "T", 0).len(), 200);
}

/// Commits of many blocks gain nothing from preallocated space (converting reserved blocks
/// costs as much as growing the file), so a run of them appends plainly.
#[test]
fn large_commits_append_without_space() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = config(dir.path());
    let store = open(&config);
    let body = vec![b'y'; 1000];
    let batch: Vec<_> = (0..32).map(|_| draft("T", 0, &body, b"")).collect();
    for _ in 0..20 {
        store.put(&batch).expect("put a batch");
    }
    let end = store.stats().written_end;
    assert_eq!(last_file_len(dir.path()), end, "no space past the data");
    store.abandon();
    let store = open(&config);
    let report = store.recovery_report().clone();
    assert_eq!((report.cut, report.preallocated_trimmed), (None, 0));
    assert_eq!(read_all(&store, "T", 0).len(), 640);
}

/// Under ASYNC_FLUSH with plain writes no commit waits for an fsync, so nothing gains from
/// the space: the files end at their data while the store runs (mapped writes, the
/// default, preallocate for their own reason: `tests/mapped_writes.rs`).
#[test]
fn an_async_flush_store_with_plain_writes_does_not_preallocate() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = config(dir.path());
    config.flush_disk_type = ferromq_store::FlushDiskType::AsyncFlush;
    config.mapped_writes = false;
    let store = open(&config);
    let end = put_messages(&store, 0, 50);
    assert_eq!(last_file_len(dir.path()), end);
    assert!(!dir.path().join(RECORD_FILE).exists());
    drop(store);
}

/// A SYNC_FLUSH run that crashed, then an ASYNC_FLUSH run: recovery cut the space and the
/// record says so, so zeros the second run leaves at the end (writes lost with the machine)
/// are reported, not taken for space.
#[test]
fn after_recovery_the_record_covers_no_space() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = config(dir.path());
    let store = open(&config);
    let end = put_messages(&store, 0, 20);
    store.abandon();

    let mut async_config = config.clone();
    async_config.flush_disk_type = ferromq_store::FlushDiskType::AsyncFlush;
    let store = open(&async_config);
    assert!(store.recovery_report().preallocated_trimmed > 0);
    assert_eq!(store.stats().written_end, end);
    store.abandon();
    let (segment, at) = locate(dir.path(), SEGMENT_BYTES, end);
    set_len(&segment, at + 4096);

    let store = open(&async_config);
    let cut = store.recovery_report().cut.clone().expect("reported");
    assert_eq!((cut.phys_offset, cut.bytes_cut), (end, 4096));
    assert_eq!(bodies(&store), expected(20));
}

/// A preallocation that fails (a full disk) never fails a write: the commits append, the
/// failure is counted once for the step it wanted (not once per commit), and the records
/// survive a crash with nothing reported.
#[test]
fn a_failed_preallocation_is_counted_once_and_the_writes_go_on() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = config(dir.path());
    let store = open(&config);
    store.faults().fail_preallocations(1_000);
    let end = put_messages(&store, 0, 100);
    assert_eq!(store.stats().preallocation_failures, 1);
    assert_eq!(
        last_file_len(dir.path()),
        end,
        "no space: the commits appended"
    );
    assert!(store.stats().poisoned.is_none());
    store.abandon();

    let store = open(&config);
    assert_eq!(store.recovery_report().cut, None);
    assert_eq!(bodies(&store), expected(100));
    assert_eq!(
        store.stats().preallocation_failures,
        0,
        "counted since open"
    );
}
