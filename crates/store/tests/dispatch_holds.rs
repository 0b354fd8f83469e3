//! The dispatcher indexes a long stretch of log in bounded holds of the derived-state lock
//! (`DISPATCH_HOLD_BYTES_MAX` each), so a reader (a pull, a queue-bounds poll on the broker's
//! runtime) waits at most one hold; and dispatching in holds loses or reorders nothing.

mod common;

use std::time::{Duration, Instant};

use ferromq_store::{FlushDiskType, MessageStore, DISPATCH_HOLD_BYTES_MAX};

use common::{draft, read_all, test_config};

/// Bound of every wait in this test.
const BOUND: Duration = Duration::from_secs(20);
const QUEUES: u32 = 4;
const RECORDS: usize = 6_000;
const BODY: usize = 1_000;

fn open(root: &std::path::Path, flush: FlushDiskType) -> MessageStore {
    let mut config = test_config(root);
    config.flush_disk_type = flush;
    config.segment_size_bytes = 64 * 1024 * 1024;
    config.consume_queue_entries_per_file = 1_024;
    MessageStore::open(config).unwrap()
}

/// Appends the backlog without waiting for it; returns its end, truncation epoch and the
/// largest record's size.
fn append_backlog(store: &MessageStore) -> (u64, u64, u64) {
    let mut largest = 0;
    let mut last = None;
    for i in 0..RECORDS {
        let body = format!("{i:0width$}", width = BODY);
        let receipt = store
            .append(&[draft("H", i as u32 % QUEUES, body.as_bytes(), b"")])
            .expect("append");
        largest = largest.max(u64::from(receipt.placements[0].size));
        last = Some(receipt);
    }
    let last = last.expect("records");
    (last.end_offset, last.truncation_epoch, largest)
}

/// Waits until everything below `end` is dispatched; returns the holds it took.
fn holds_to_dispatch(store: &MessageStore, end: u64, epoch: u64, holds_before: u64) -> u64 {
    store
        .wait_acknowledgeable(end, epoch)
        .expect("acknowledged");
    let started = Instant::now();
    while store.stats().dispatched_end < end {
        assert!(started.elapsed() < BOUND, "dispatched within {BOUND:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
    store.stats().dispatch_holds - holds_before
}

/// Every record is indexed once, in order, in its queue.
fn assert_every_record_dispatched(store: &MessageStore) {
    for queue_id in 0..QUEUES {
        let messages = read_all(store, "H", queue_id);
        let expected = (0..RECORDS)
            .filter(|i| *i as u32 % QUEUES == queue_id)
            .count();
        assert_eq!(messages.len(), expected, "queue {queue_id}");
        for (at, message) in messages.iter().enumerate() {
            let i = at * QUEUES as usize + queue_id as usize;
            let body = common::body_of(message);
            assert_eq!(body, format!("{i:0width$}", width = BODY).into_bytes());
        }
    }
}

fn assert_bounded_holds(flush: FlushDiskType, hold_commits: bool) {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), flush);
    if hold_commits {
        // ASYNC_FLUSH: nothing is committed (so nothing is dispatchable) until released, and
        // then the backlog arrives as a few large committed chunks.
        store.faults().hold_background_commits(true);
    }
    let start = store.stats().written_end;
    let (end, epoch, largest) = append_backlog(&store);
    let holds_before = store.stats().dispatch_holds;
    assert!(
        store.stats().dispatched_end <= start + largest,
        "backlog held back"
    );
    store.faults().hold_background_commits(false);
    let holds = holds_to_dispatch(&store, end, epoch, holds_before);
    // Each hold covers at most its bytes plus the record that crosses them.
    let least = (end - start) / (DISPATCH_HOLD_BYTES_MAX + largest);
    assert!(
        holds >= least,
        "{} bytes dispatched in {holds} holds of the derived lock (at least {least} expected)",
        end - start
    );
    assert_every_record_dispatched(&store);
    store.close().unwrap();
}

/// SYNC_FLUSH: a backlog nobody waited for becomes dispatchable by one fsync.
#[test]
fn a_backlog_made_durable_at_once_is_dispatched_in_bounded_holds() {
    assert_bounded_holds(FlushDiskType::SyncFlush, false);
}

/// ASYNC_FLUSH: committed chunks larger than a hold are dispatched across holds from memory.
#[test]
fn committed_chunks_larger_than_a_hold_are_dispatched_across_holds() {
    assert_bounded_holds(FlushDiskType::AsyncFlush, true);
}
