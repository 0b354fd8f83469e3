//! SYNC_FLUSH group commit: the flusher writes the records appended while an fsync ran (the
//! next group) before it wakes the writers that fsync answered, so the next fsync can start
//! without a write of its own; and a group nobody waits for yet is written, not fsynced.

mod common;

use std::time::{Duration, Instant};

use ferromq_store::MessageStore;

use common::{draft, test_config};

/// Bound of every wait in this test.
const BOUND: Duration = Duration::from_secs(10);

fn wait_until(what: &str, done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < BOUND, "{what} within {BOUND:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn the_next_group_is_written_before_the_fsynced_one_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(test_config(dir.path())).unwrap();
    store.faults().stall_syncs(true);
    std::thread::scope(|scope| {
        // The first group: one put, held in its fsync by the stall.
        let first = scope.spawn(|| {
            let receipt = store.put(&[draft("T", 0, b"first", b"")]).expect("put");
            // Answered: the record appended during that fsync is already in the files.
            (receipt.end_offset, store.stats().committed_end)
        });
        wait_until("the first fsync stalls", || {
            store.faults().stalled_now() == 1
        });
        // The next group: appended while that fsync runs; nobody waits for it yet.
        let next = store
            .append(&[draft("T", 0, b"next", b"")])
            .expect("append");
        assert!(
            store.stats().committed_end < next.end_offset,
            "an append alone is not written under SYNC_FLUSH"
        );
        store.faults().stall_syncs(false);
        let (first_end, committed_when_answered) = first.join().expect("first writer");
        assert!(first_end < next.end_offset);
        assert!(
            committed_when_answered >= next.end_offset,
            "the next group ({}) was written before the first ({first_end}) was answered; \
             committed end then {committed_when_answered}",
            next.end_offset
        );
        // Written, not flushed: no one asked for it, so no fsync ran for it.
        assert!(store.stats().flushed_end < next.end_offset);
        store
            .wait_acknowledgeable(next.end_offset, next.truncation_epoch)
            .expect("the next group is flushed once asked for");
        assert!(store.stats().flushed_end >= next.end_offset);
    });
    store.close().unwrap();
}
