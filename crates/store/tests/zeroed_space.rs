//! Zeroed space under SYNC_FLUSH (`StoreConfig::zeroed_space`, `store::zero_ahead`): a thread
//! writes zeros ahead of the commits, commits overwrite them, a crash leaves zeros that
//! recovery and `--check` know to be space, and no zero ever lands on a record, whatever the
//! interleaving with concurrent commits and segment rolls.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use ferromq_store::commitlog::preallocation::ZEROING_COMMIT_MAX_BYTES;
use ferromq_store::{check_store, CheckScope, MessageStore, StoreConfig};

use common::{bodies_in_t0, draft, numbered, put_numbered, segment_files, test_config};

fn config(root: &Path, segment_bytes: u64) -> StoreConfig {
    let mut config = test_config(root);
    config.segment_size_bytes = segment_bytes;
    config.consume_queue_entries_per_file = 100_000;
    config.zeroed_space = true;
    config
}

/// Zeros past the log once the thread has looked (`store::zero_ahead`): rounds start when
/// less than 7.5 MiB is left and reach 8 MiB past the committed end.
const ZEROS_AT_LEAST: u64 = (8 << 20) - (512 << 10);

fn open(config: &StoreConfig) -> MessageStore {
    MessageStore::open(config.clone()).expect("open")
}

fn last_file_len(root: &Path) -> u64 {
    let (_, path) = segment_files(root).pop().expect("a segment");
    std::fs::metadata(path).expect("stat").len()
}

/// Waits (at most 10 s) until the last segment file is longer than `len`.
fn wait_for_zeros_past(root: &Path, len: u64) -> u64 {
    let started = Instant::now();
    loop {
        let now = last_file_len(root);
        if now > len {
            return now;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no zeros written past {len} (file {now} bytes)"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn commits_overwrite_zeroed_space_and_a_crash_reports_no_cut() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = config(dir.path(), 64 << 20);
    let store = open(&config);
    let first = put_numbered(&store, 0..50);
    let zeroed = wait_for_zeros_past(dir.path(), first + ZEROS_AT_LEAST - 1);
    assert!(zeroed <= first + (8 << 20), "at most 8 MiB ahead: {zeroed}");
    let end = put_numbered(&store, 50..100);
    assert!(end < zeroed, "the second puts land inside the zeros");
    store.abandon();
    let zeroed = last_file_len(dir.path());
    assert!(zeroed >= end + ZEROS_AT_LEAST, "{zeroed}");

    let check = check_store(&config, CheckScope::Full).expect("check");
    assert_eq!(check.would_cut, None, "{check:?}");
    assert_eq!(check.scan.tail, None, "zeroed space is not a torn tail");
    assert!(check.scan.damaged.is_empty());
    assert_eq!(check.scan.end, end);

    let store = open(&config);
    let report = store.recovery_report().clone();
    assert_eq!(report.cut, None, "{report:?}");
    assert_eq!(report.preallocated_trimmed, zeroed - end);
    assert_eq!(report.log_end, end);
    assert_eq!(bodies_in_t0(&store), numbered(0..100));
    store.close().expect("close");
    assert_eq!(
        last_file_len(dir.path()),
        end,
        "a clean close trims the zeros"
    );
}

/// Puts `count` commits of eight 14 KiB records each (one commit per put under SYNC_FLUSH).
fn put_large_commits(store: &MessageStore, count: usize) -> u64 {
    let body = vec![b'b'; 14 << 10];
    let drafts: Vec<_> = (0..8).map(|_| draft("Large", 0, &body, b"")).collect();
    for _ in 0..count {
        store.put(&drafts).expect("put a large commit");
    }
    store.stats().written_end
}

/// Commits averaging more than `ZEROING_COMMIT_MAX_BYTES` (batches) stop the zeros: once the
/// zeroed space is used up they append, and the file ends at the log. Small commits start
/// the zeros again.
#[test]
fn large_commits_stop_the_zeros_and_small_ones_resume_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = config(dir.path(), 64 << 20);
    let store = open(&config);
    let start = put_numbered(&store, 0..10);
    wait_for_zeros_past(dir.path(), start);
    // 12 MiB of ~112 KiB commits: past the 8 MiB the thread zeroed while commits were small.
    let large = 112 << 10;
    assert!(large > ZEROING_COMMIT_MAX_BYTES);
    let end = put_large_commits(&store, (12 << 20) / large as usize);
    assert!(end > start + (8 << 20), "past the zeros: {end}");
    std::thread::sleep(Duration::from_millis(300)); // several rounds of the zeroing thread
    assert_eq!(
        last_file_len(dir.path()),
        end,
        "large commits append; no zeros ahead of them"
    );
    let small_end = put_numbered(&store, 10..60);
    let zeroed = wait_for_zeros_past(dir.path(), small_end + ZEROS_AT_LEAST - 1);
    assert!(
        zeroed <= small_end + (8 << 20),
        "at most 8 MiB ahead: {zeroed}"
    );
    store.abandon();
    let store = open(&config);
    assert_eq!(store.recovery_report().cut, None);
    assert_eq!(store.recovery_report().log_end, small_end);
    assert_eq!(bodies_in_t0(&store), numbered(0..60));
}

/// A round that fails (a full disk, injected) never fails a commit: it is counted once, no
/// round is tried again before the log passes it, and the commits append.
#[test]
fn a_failed_zeroing_round_is_counted_once_and_the_commits_append() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = config(dir.path(), 64 << 20);
    let store = open(&config);
    store.faults().fail_preallocations(1_000);
    put_numbered(&store, 0..100);
    let started = Instant::now();
    while store.stats().preallocation_failures == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no zeroing round"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(300)); // several rounds of the zeroing thread
    let end = put_numbered(&store, 100..200);
    assert_eq!(store.stats().preallocation_failures, 1);
    assert!(store.stats().poisoned.is_none());
    store.abandon();
    assert_eq!(
        last_file_len(dir.path()),
        end,
        "no zeros: the commits appended"
    );

    let store = open(&config);
    assert_eq!(store.recovery_report().cut, None);
    assert_eq!(bodies_in_t0(&store), numbered(0..200));
    assert_eq!(
        store.stats().preallocation_failures,
        0,
        "counted since open"
    );
}

/// Four writers put concurrently into small segments (the zeros reach each segment's end,
/// and the log rolls often) while the thread zeroes ahead; after a crash every record is
/// there, intact, and nothing is reported damaged or cut.
#[test]
fn zeros_never_land_on_records() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = config(dir.path(), 128 << 10);
    let store = open(&config);
    const WRITERS: usize = 4;
    const PER_WRITER: usize = 1_500;
    std::thread::scope(|scope| {
        for writer in 0..WRITERS {
            let store = &store;
            scope.spawn(move || {
                let from = writer * PER_WRITER;
                put_numbered(store, from..from + PER_WRITER);
            });
        }
    });
    let end = store.stats().written_end;
    assert!(
        segment_files(dir.path()).len() >= 4,
        "the log rolled several times"
    );
    store.abandon();

    let check = check_store(&config, CheckScope::Full).expect("check");
    assert!(check.scan.damaged.is_empty(), "{check:?}");
    assert_eq!(check.would_cut, None, "{check:?}");
    assert_eq!(check.scan.end, end);
    let store = open(&config);
    assert_eq!(store.recovery_report().cut, None);
    let mut bodies = bodies_in_t0(&store);
    bodies.sort();
    let mut expected = numbered(0..WRITERS * PER_WRITER);
    expected.sort();
    assert_eq!(bodies, expected);
}
