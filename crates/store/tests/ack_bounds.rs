//! The acknowledgement future is bounded: a wedged disk (a stalled fsync under `SyncFlush`,
//! a stalled tail write under `AsyncFlush`) makes `MessageStore::acknowledged` and
//! `commit_offsets_acknowledged` answer `Timeout` after `sync_flush_timeout_ms`, on a
//! current-thread runtime (so neither blocks its only worker), and the store serves again
//! once the disk does. An fsync failure reaches the waiter with the I/O error's text.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use ferromq_store::offsets::OffsetCommand;
use ferromq_store::{DurabilityError, FlushDiskType, MessageStore, StoreConfig, StoreError};

use common::{draft, test_config};

/// The acknowledgement bound of these tests.
const TIMEOUT_MS: u64 = 200;

fn config(root: &Path, policy: FlushDiskType) -> StoreConfig {
    let mut config = test_config(root);
    config.flush_disk_type = policy;
    config.sync_flush_timeout_ms = TIMEOUT_MS;
    // No interval fsync or commit of its own during a test.
    config.flush_interval_ms = 3_600_000;
    config
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
}

fn commit(offset: u64) -> OffsetCommand {
    common::commit_t0("ack-bounds", offset)
}

/// A store holding `count` acknowledged messages in T/0.
fn store_with_messages(root: &Path, policy: FlushDiskType, count: usize) -> MessageStore {
    let store = MessageStore::open(config(root, policy)).expect("open");
    for _ in 0..count {
        store.put(&[draft("T", 0, b"m", b"")]).expect("put");
    }
    store
}

/// Asserts a timeout of the configured bound, reached after about that long (not at once,
/// not after the stall ended).
fn assert_timed_out(error: &DurabilityError, started: Instant) {
    assert!(
        matches!(error, DurabilityError::Timeout { timeout_ms } if *timeout_ms == TIMEOUT_MS),
        "{error:?}"
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(TIMEOUT_MS - 20) && waited < Duration::from_secs(5),
        "timed out after {waited:?}"
    );
}

/// The durability error inside a failed offset commit.
fn durability(error: StoreError) -> DurabilityError {
    match error {
        StoreError::Durability(error) => error,
        other => panic!("expected a durability error, got {other:?}"),
    }
}

/// Waits (bounded) until a stall holds a store thread.
fn wait_until_stalled(store: &MessageStore) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while store.faults().stalled_now() == 0 {
        assert!(Instant::now() < deadline, "a committer reaches the stall");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Under `flush`, with `stall` armed: a put's acknowledgement and an offset commit both time
/// out after the flush timeout, and both succeed again once the stall is released.
/// `wait_for_stall` waits until a committer is held before the put is awaited.
fn stalled_acknowledgements_time_out(
    flush: FlushDiskType,
    stall: fn(&ferromq_store::faults::Faults, bool),
    wait_for_stall: bool,
) {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_messages(dir.path(), flush, 3);
    let runtime = runtime();
    stall(store.faults(), true);

    let sent = store.append(&[draft("T", 0, b"stalled", b"")]).unwrap();
    if wait_for_stall {
        wait_until_stalled(&store);
    }
    let started = Instant::now();
    let error = runtime
        .block_on(store.acknowledged(sent.ticket()))
        .unwrap_err();
    assert_timed_out(&error, started);

    let started = Instant::now();
    let error = runtime
        .block_on(store.commit_offsets_acknowledged(&commit(2)))
        .unwrap_err();
    assert_timed_out(&durability(error), started);

    stall(store.faults(), false);
    let after = store.append(&[draft("T", 0, b"after", b"")]).unwrap();
    runtime
        .block_on(store.acknowledged(after.ticket()))
        .expect("acknowledged once the disk works again");
    let outcome = runtime
        .block_on(store.commit_offsets_acknowledged(&commit(3)))
        .expect("offset commits succeed again");
    assert!(outcome.all_accepted(), "{outcome:?}");
    store.close().expect("close");
}

#[test]
fn sync_flush_stalled_fsync_times_out_puts_and_offset_commits() {
    stalled_acknowledgements_time_out(
        FlushDiskType::SyncFlush,
        ferromq_store::faults::Faults::stall_syncs,
        false,
    );
}

#[test]
fn async_flush_stalled_write_times_out_puts_and_offset_commits() {
    // The dispatcher's tick takes the commit lock and stalls in the write: the waiter must
    // wait for it without blocking its (only) worker, or the timeout could never fire.
    stalled_acknowledgements_time_out(
        FlushDiskType::AsyncFlush,
        ferromq_store::faults::Faults::stall_writes,
        true,
    );
}

#[test]
fn acknowledged_keeps_the_text_of_a_failed_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_messages(dir.path(), FlushDiskType::SyncFlush, 1);
    store.faults().arm(0, 1);
    let sent = store.append(&[draft("T", 0, b"lost", b"")]).unwrap();
    let error = runtime()
        .block_on(store.acknowledged(sent.ticket()))
        .unwrap_err();
    match &error {
        DurabilityError::FlushFailed(cause) => {
            assert!(cause.contains("injected fsync failure"), "{cause}")
        }
        other => panic!("expected FlushFailed, got {other:?}"),
    }
}

#[test]
fn closing_the_store_releases_a_stall() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_messages(dir.path(), FlushDiskType::SyncFlush, 1);
    store.faults().stall_syncs(true);
    let sent = store.append(&[draft("T", 0, b"pending", b"")]).unwrap();
    let error = runtime()
        .block_on(store.acknowledged(sent.ticket()))
        .unwrap_err();
    assert!(
        matches!(error, DurabilityError::Timeout { .. }),
        "{error:?}"
    );
    wait_until_stalled(&store);
    let started = Instant::now();
    store
        .close()
        .expect("close flushes once the stall is released");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "close waited {:?} for a stall",
        started.elapsed()
    );
}

/// `append_offsets` returns without waiting; its ticket is the written record's, and for a
/// commit that writes nothing the log end at judgement (its "unchanged" verdict may be
/// acknowledged only once the record it was judged against is). The ticket is handed back
/// also when the flush already covers it: a replicated broker still waits for its replicas.
#[test]
fn append_offsets_hands_back_the_ticket_its_verdicts_rest_on() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_messages(dir.path(), FlushDiskType::SyncFlush, 5);
    let runtime = runtime();
    store.faults().stall_syncs(true);
    let (written, ticket) = store.append_offsets(&commit(2)).expect("appended");
    assert!(written.record.is_some() && written.all_accepted());
    let (same, pending) = store.append_offsets(&commit(2)).expect("judged");
    assert_eq!(same.verdicts, [ferromq_store::offsets::Verdict::Unchanged]);
    assert!(same.record.is_none(), "nothing written");
    assert_eq!(pending, ticket, "rests on the record not yet durable");
    let error = runtime.block_on(store.acknowledged(ticket)).unwrap_err();
    assert!(
        matches!(error, DurabilityError::Timeout { .. }),
        "{error:?}"
    );

    store.faults().stall_syncs(false);
    runtime
        .block_on(store.acknowledged(ticket))
        .expect("durable once the disk syncs");
    let (again, settled) = store.append_offsets(&commit(2)).expect("judged");
    assert!(again.record.is_none());
    assert_eq!(settled, ticket, "nothing written since: the same log end");
    runtime
        .block_on(store.acknowledged(settled))
        .expect("acknowledgeable at once");
    store.close().expect("close");
}
