//! Checkpoint failures never poison the store: a checkpoint that fails (the fault of a process
//! out of descriptors) is retried, counted and shown in `StoreStats` while sends keep
//! succeeding, and succeeds once the cause clears; a failed fsync of derived state stops
//! checkpoints (not sends) until a restart rebuilds derived state from the log. A poisoned
//! store's close reports the poison. A slow fsync of derived state does not hold dispatch
//! (consumers keep seeing new messages while a checkpoint syncs).

mod common;

use std::time::{Duration, Instant};

use ferromq_store::{MessageStore, StoreConfig, StoreError};

use common::{body_of, draft, read_all, test_config};

/// Bound on every wait for the checkpointer.
const WAIT: Duration = Duration::from_secs(10);

/// [`test_config`] with the background checkpointer ticking every 20 ms.
fn config(root: &std::path::Path) -> StoreConfig {
    let mut config = test_config(root);
    config.checkpoint_interval_ms = 20;
    config
}

fn put(store: &MessageStore, body: &str) {
    store
        .put(&[draft("T", 0, body.as_bytes(), b"")])
        .unwrap_or_else(|e| panic!("put {body}: {e}"));
}

/// Waits until `done` holds for the store's stats (panics after [`WAIT`]).
fn wait_until(store: &MessageStore, what: &str, done: impl Fn(&ferromq_store::StoreStats) -> bool) {
    let deadline = Instant::now() + WAIT;
    loop {
        let stats = store.stats();
        if done(&stats) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what} within {WAIT:?}: {stats:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn bodies(store: &MessageStore) -> Vec<String> {
    read_all(store, "T", 0)
        .iter()
        .map(|m| String::from_utf8(body_of(m)).unwrap())
        .collect()
}

#[test]
fn failed_checkpoints_are_retried_and_reported_and_never_poison() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    put(&store, "before");
    store.faults().fail_checkpoints(3);
    wait_until(&store, "three checkpoint failures", |s| {
        s.checkpoint_failures >= 3
    });
    let failing = store.stats();
    assert_eq!(
        failing.poisoned, None,
        "a failed checkpoint does not poison"
    );
    let last = failing.last_checkpoint_failure.clone().unwrap_or_default();
    assert!(
        last.contains("Too many open files") && last.contains("checkpoint"),
        "{last}"
    );
    // Sends keep succeeding while checkpoints fail and after.
    put(&store, "during");
    wait_until(&store, "a checkpoint once the fault clears", |s| {
        s.last_checkpoint_failure.is_none() && s.checkpoint_position == s.dispatched_end
    });
    let healthy = store.stats();
    assert_eq!(healthy.checkpoint_failures, 3, "exactly the armed failures");
    assert!(healthy.checkpoint_position >= failing.written_end);
    put(&store, "after");
    assert_eq!(bodies(&store), ["before", "during", "after"]);
    store
        .close()
        .expect("a store whose checkpoints recovered closes cleanly");
    let store = MessageStore::open(config(dir.path())).unwrap();
    assert!(store.recovery_report().clean_shutdown);
    assert_eq!(bodies(&store), ["before", "during", "after"]);
}

#[test]
fn a_failed_derived_fsync_stops_checkpoints_not_sends_until_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    put(&store, "one");
    wait_until(&store, "a first checkpoint", |s| {
        s.checkpoint_position == s.dispatched_end && s.dispatched_end > 0
    });
    let covered = store.stats().checkpoint_position;
    store.faults().fail_derived_syncs(1);
    wait_until(&store, "the failed fsync", |s| s.checkpoint_failures >= 1);
    put(&store, "two");
    wait_until(&store, "more refused checkpoints", |s| {
        s.checkpoint_failures >= 3
    });
    let stats = store.stats();
    assert_eq!(stats.poisoned, None);
    assert_eq!(
        stats.checkpoint_position, covered,
        "no checkpoint vouches for it"
    );
    assert!(
        stats
            .last_checkpoint_failure
            .as_deref()
            .is_some_and(|f| f.contains("stopped until restart")),
        "{stats:?}"
    );
    let error = store
        .close()
        .expect_err("the final checkpoint is refused too");
    assert!(
        matches!(error, StoreError::CheckpointsStopped(_)),
        "{error:?}"
    );
    let store = MessageStore::open(config(dir.path())).unwrap();
    assert!(!store.recovery_report().clean_shutdown);
    assert_eq!(store.recovery_report().checkpoint_position, Some(covered));
    assert_eq!(bodies(&store), ["one", "two"]);
}

#[test]
fn closing_a_poisoned_store_reports_the_poison() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    put(&store, "kept");
    store.faults().arm(0, 1);
    store
        .put(&[draft("T", 0, b"not durable", b"")])
        .expect_err("the fsync fails");
    let error = store
        .close()
        .expect_err("a poisoned store does not close cleanly");
    match &error {
        StoreError::Poisoned(reason) => assert!(reason.contains("fsync"), "{reason}"),
        other => panic!("expected Poisoned, got {other:?}"),
    }
    assert!(error.to_string().contains("poisoned"), "{error}");
    let store = MessageStore::open(config(dir.path())).unwrap();
    assert!(!store.recovery_report().clean_shutdown);
    // The acknowledged record is kept; the unacknowledged one may or may not have landed.
    assert_eq!(bodies(&store)[0], "kept");
}

#[test]
fn a_slow_derived_fsync_does_not_hold_dispatch() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    put(&store, "before");
    store.faults().stall_derived_syncs(true);
    put(&store, "dirty");
    // The checkpointer is now held inside its fsync of derived state.
    let deadline = Instant::now() + WAIT;
    while store.faults().stalled_now() == 0 {
        assert!(Instant::now() < deadline, "a checkpoint reaches the stall");
        std::thread::sleep(Duration::from_millis(1));
    }
    // `put` returns once acknowledged; readers see the message once dispatched. Before the
    // checkpoint released the `derived` lock for its fsyncs, dispatch waited for the stall.
    let deadline = Instant::now() + Duration::from_secs(2);
    put(&store, "during");
    while bodies(&store) != ["before", "dirty", "during"] {
        assert!(
            Instant::now() < deadline,
            "dispatch went on while the checkpoint synced: {:?} (stalled {})",
            bodies(&store),
            store.faults().stalled_now()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // A read that waited for dispatch until the stall ended would also get here: time it.
    assert!(
        Instant::now() < deadline,
        "the send and its dispatch took {:?} while a checkpoint synced",
        Instant::now() + Duration::from_secs(2) - deadline
    );
    assert_eq!(
        store.faults().stalled_now(),
        1,
        "the checkpoint is still held"
    );
    store.faults().stall_derived_syncs(false);
    wait_until(&store, "a checkpoint after the stall", |s| {
        s.checkpoint_position == s.dispatched_end && s.last_checkpoint_failure.is_none()
    });
    store.close().unwrap();
}
