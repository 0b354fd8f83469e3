//! Two master terms on one store, and the state a cut back to the first leaves: shared by
//! the epoch tests and the R9 SIGKILL test. That test has its own binary so that spawning
//! its child never forks while another test of the same process holds a store's lock file
//! open: the fork's copy of that descriptor kept the lock until the child's `exec`, and a
//! reopen right after `close` then failed with `Locked` (about one run in six under
//! `cargo test`, which runs a binary's tests as threads of one process).

use std::path::Path;

use ferromq_store::epoch::EpochEntry;
use ferromq_store::offsets::OffsetCommand;
use ferromq_store::MessageStore;

use super::{draft, read_all, test_config};

pub fn e(epoch: u64, start: u64) -> EpochEntry {
    EpochEntry { epoch, start }
}

pub fn commit(offset: u64) -> OffsetCommand {
    super::commit_t0("epochs", offset)
}

pub fn put(store: &MessageStore, n: usize, tag: &str) {
    for i in 0..n {
        let body = format!("{tag}-{i}");
        store
            .put(&[draft("T", 0, body.as_bytes(), b"")])
            .expect("put");
    }
}

/// A store with epoch 1 from 0 (10 messages, commit 10) and epoch 2 from `cut` (8 more
/// messages, commit 18); returns `(cut, end)`.
pub fn two_terms(root: &Path) -> (u64, u64) {
    let store = MessageStore::open(test_config(root)).expect("open");
    assert_eq!(store.begin_epoch(1).expect("epoch 1"), 0);
    put(&store, 10, "one");
    store.commit_offsets(&commit(10)).expect("commit");
    let cut = store.stats().written_end;
    assert_eq!(store.begin_epoch(2).expect("epoch 2"), cut);
    put(&store, 8, "two");
    store.commit_offsets(&commit(18)).expect("commit");
    let end = store.stats().written_end;
    store.close().expect("close");
    (cut, end)
}

/// The truncated state: the log, queue and offset view of the first term only, and no
/// epoch entry at or past the cut.
pub fn assert_cut(root: &Path, cut: u64) {
    let store = MessageStore::open(test_config(root)).expect("reopen");
    assert_eq!(store.stats().committed_end, cut, "log end");
    let messages = read_all(&store, "T", 0);
    assert_eq!(messages.len(), 10, "ConsumeQueue holds the first term only");
    assert_eq!(store.queue_bounds("T", 0).map(|b| b.1), Some(10));
    let offset = store
        .consumer_offset("G", "T", 0)
        .expect("view")
        .expect("offset");
    assert_eq!(offset.offset, 10, "offset view replays the surviving log");
    assert_eq!(store.epochs(), vec![e(1, 0)]);
    assert!(store.epochs().iter().all(|x| x.start < cut));
    // Offset 10 of T/0 is free again: the next message takes it (R5 on one broker).
    let receipt = store
        .put(&[draft("T", 0, b"new", b"")])
        .expect("put after cut");
    assert_eq!(receipt.placements[0].queue_offset, 10);
    store.close().expect("close");
}
