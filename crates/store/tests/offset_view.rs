//! `MessageStore::offset_view`: the async offset read. It covers every commit acknowledged
//! before the call, fails (never answers stale) when the dispatcher cannot catch up, and waits
//! without blocking the runtime's worker.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferromq_store::offsets::{OffsetCommand, OffsetKind};
use ferromq_store::{FlushDiskType, MessageStore, ReadError, StoreConfig};

use common::{draft, test_config};

fn config(root: &Path, policy: FlushDiskType, timeout_ms: u64) -> StoreConfig {
    let mut config = test_config(root);
    config.flush_disk_type = policy;
    config.sync_flush_timeout_ms = timeout_ms;
    config
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
}

fn commit(offset: u64) -> OffsetCommand {
    common::commit_t0("offset-view", offset)
}

fn open_with_messages(config: StoreConfig, count: usize) -> MessageStore {
    let store = MessageStore::open(config).expect("open");
    for _ in 0..count {
        store.put(&[draft("T", 0, b"m", b"")]).expect("put");
    }
    store
}

#[test]
fn offset_view_shows_a_commit_right_after_its_acknowledgement() {
    for policy in [FlushDiskType::SyncFlush, FlushDiskType::AsyncFlush] {
        let dir = tempfile::tempdir().unwrap();
        let store = open_with_messages(config(dir.path(), policy, 5_000), 5);
        runtime().block_on(async {
            for offset in 1..=4 {
                store
                    .commit_offsets_acknowledged(&commit(offset))
                    .await
                    .expect("commit");
                let view = store.offset_view().await.expect("view");
                let stored = view.consumer_offset("G", "T", 0).expect("stored");
                assert_eq!(stored.offset, offset, "{policy:?}");
                assert_eq!(view.generation("G", "T"), 0);
                assert_eq!(view.groups(), ["G"]);
                assert_eq!(view.group_offsets("G"), [("T".to_string(), 0, stored)]);
                assert_eq!(view.consumer_offset("G", "T", 1), None);
            }
        });
        store.close().expect("close");
    }
}

/// While dispatch fails, a commit acknowledged a moment ago is not in the view: the read is
/// an error — `ViewBehind` once the bound passes, `DispatchStalled` once the stall is
/// declared — never an answer without it; the blocking reads say the same. Once dispatch
/// resumes, the view has the commit.
#[test]
fn offset_view_fails_instead_of_answering_stale_while_dispatch_fails() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with_messages(config(dir.path(), FlushDiskType::SyncFlush, 300), 5);
    let runtime = runtime();
    store.commit_offsets(&commit(1)).expect("first commit");

    store.faults().fail_dispatches(u32::MAX);
    store
        .commit_offsets(&commit(3))
        .expect("acknowledged, not dispatched");
    let started = Instant::now();
    let behind = runtime.block_on(store.offset_view()).unwrap_err();
    match behind {
        ReadError::ViewBehind {
            dispatched,
            target,
            waited_ms,
        } => {
            assert!(dispatched < target, "{dispatched} < {target}");
            assert!(waited_ms >= 250, "waited {waited_ms} ms for a 300 ms bound");
        }
        other => panic!("expected ViewBehind, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(store.consumer_offset("G", "T", 0).is_err(), "blocking read");

    let deadline = Instant::now() + Duration::from_secs(5);
    while store.stats().dispatch_failure.is_none() {
        assert!(
            Instant::now() < deadline,
            "the stall is declared within 5 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let stalled = runtime.block_on(store.offset_view()).unwrap_err();
    assert!(
        matches!(stalled, ReadError::DispatchStalled(_)),
        "{stalled:?}"
    );
    for error in [
        store.offset_generation("G", "T").unwrap_err(),
        store.groups().unwrap_err(),
        store.group_offsets("G").unwrap_err(),
        store.offset_history("G", "T", None).unwrap_err(),
    ] {
        assert!(matches!(error, ReadError::DispatchStalled(_)), "{error:?}");
    }

    store.faults().fail_dispatches(0);
    // A declared stall is answered at once; it clears with the next pass that succeeds.
    let deadline = Instant::now() + Duration::from_secs(5);
    while store.stats().dispatch_failure.is_some() {
        assert!(Instant::now() < deadline, "dispatch resumes within 5 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    let view = runtime
        .block_on(store.offset_view())
        .expect("dispatch resumed");
    assert_eq!(view.consumer_offset("G", "T", 0).map(|s| s.offset), Some(3));
    store.close().expect("close");
}

/// A view that must wait (dispatch fails for a few hundred passes after a commit) waits on a
/// current-thread runtime without blocking it: a task spawned before the wait runs before
/// the view is ready.
#[test]
fn offset_view_waits_without_blocking_a_current_thread_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with_messages(config(dir.path(), FlushDiskType::SyncFlush, 5_000), 5);
    store.faults().fail_dispatches(300);
    store.commit_offsets(&commit(4)).expect("commit");
    let stats = store.stats();
    assert!(
        stats.dispatched_end < stats.flushed_end,
        "the commit is not dispatched yet, so the view must wait"
    );
    let ran = Arc::new(AtomicBool::new(false));
    let view_offset = runtime().block_on(async {
        let flag = ran.clone();
        let other = tokio::spawn(async move { flag.store(true, Ordering::Release) });
        let view = store.offset_view().await.expect("view catches up");
        let ran_first = ran.load(Ordering::Acquire);
        other.await.expect("task");
        assert!(ran_first, "the spawned task ran while offset_view waited");
        view.consumer_offset("G", "T", 0).map(|s| s.offset)
    });
    assert_eq!(view_offset, Some(4));
    store.close().expect("close");
}

/// A conditional correction through the async path: refused when the stored offset moved,
/// applied at a new generation (visible in the view at once) when it did not.
#[test]
fn correct_offsets_acknowledged_judges_like_correct_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with_messages(config(dir.path(), FlushDiskType::AsyncFlush, 5_000), 5);
    let mut correction = commit(1);
    correction.kind = OffsetKind::Correction;
    runtime().block_on(async {
        store
            .commit_offsets_acknowledged(&commit(4))
            .await
            .expect("commit");
        let moved = store
            .correct_offsets_acknowledged(&correction, &[Some(3)])
            .await
            .expect("judged");
        assert!(!moved.all_accepted() && moved.record.is_none(), "{moved:?}");
        let landed = store
            .correct_offsets_acknowledged(&correction, &[Some(4)])
            .await
            .expect("corrected");
        assert!(
            landed.all_accepted() && landed.record.is_some(),
            "{landed:?}"
        );
        let view = store.offset_view().await.expect("view");
        let stored = view.consumer_offset("G", "T", 0).expect("stored");
        assert_eq!((stored.offset, stored.generation), (1, 1));
        assert_eq!(view.generation("G", "T"), 1);
    });
    store.close().expect("close");
}
