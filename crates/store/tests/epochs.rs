//! Master epochs on the store: the epoch file through open and close, `begin_epoch`,
//! `record_epoch`, the replicated-append fence, and `truncate_diverged` — including R9: a
//! process killed right after or in the middle of a truncation comes back without the
//! truncated suffix in the log, the ConsumeQueue and the offset view, and with no epoch
//! entry past the log end. The R9 test with a killed child process is in `epochs_sigkill.rs`.

mod common;

use std::path::Path;

use ferromq_store::epoch;
use ferromq_store::{EpochError, MessageStore, OpenError, ReplicaAppendError};

use common::terms::{assert_cut, e, put, two_terms};
use common::{read_all, test_config};

#[test]
fn epoch_file_round_trips_through_open_and_close() {
    let dir = tempfile::tempdir().unwrap();
    let (cut, _) = two_terms(dir.path());
    let store = MessageStore::open(test_config(dir.path())).unwrap();
    assert_eq!(store.epochs(), vec![e(1, 0), e(2, cut)]);
    assert_eq!(store.last_epoch(), 2);
    let text = std::fs::read_to_string(epoch::epoch_file(dir.path())).unwrap();
    assert!(text.starts_with("2\n"), "{text}");
    assert!(text.ends_with(&format!("1-0\n2-{cut}\n")), "{text}");
}

#[test]
fn a_store_without_epochs_is_epoch_zero() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(test_config(dir.path())).unwrap();
    put(&store, 2, "x");
    assert_eq!(store.last_epoch(), 0);
    assert!(store.epochs().is_empty());
    assert!(!epoch::epoch_file(dir.path()).exists());
}

#[test]
fn corrupt_epoch_file_is_a_clear_open_error() {
    let dir = tempfile::tempdir().unwrap();
    two_terms(dir.path());
    let path = epoch::epoch_file(dir.path());
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 2;
    bytes[last] = b'7';
    std::fs::write(&path, &bytes).unwrap();
    match MessageStore::open(test_config(dir.path())) {
        Err(OpenError::Epoch(EpochError::Corrupt { reason, .. })) => {
            assert!(reason.contains("CRC"), "{reason}")
        }
        other => panic!("expected a corrupt epoch file, got {other:?}"),
    }
    // The read-only check reports it the same way.
    assert!(matches!(
        ferromq_store::check_store(
            &test_config(dir.path()),
            ferromq_store::CheckScope::Recovery
        ),
        Err(OpenError::Epoch(_))
    ));
    std::fs::write(&path, b"garbage").unwrap();
    assert!(matches!(
        MessageStore::open(test_config(dir.path())),
        Err(OpenError::Epoch(EpochError::Corrupt { .. }))
    ));
}

#[test]
fn entries_past_the_log_end_are_dropped_durably() {
    let dir = tempfile::tempdir().unwrap();
    let (cut, end) = two_terms(dir.path());
    // A crash lost the log past `cut` but the file names a term past it (and at the end).
    epoch::store(dir.path(), &[e(1, 0), e(2, cut), e(3, end + 100)]).unwrap();
    let report = ferromq_store::check_store(
        &test_config(dir.path()),
        ferromq_store::CheckScope::Recovery,
    )
    .unwrap();
    assert_eq!(report.epochs_past_end, vec![e(3, end + 100)]);
    assert!(!report.is_clean());
    let store = MessageStore::open(test_config(dir.path())).unwrap();
    assert_eq!(store.epochs(), vec![e(1, 0), e(2, cut)]);
    drop(store);
    assert_eq!(
        epoch::load(dir.path()).unwrap(),
        vec![e(1, 0), e(2, cut)],
        "dropped on disk too"
    );
}

#[test]
fn begin_epoch_refuses_old_epochs_and_record_epoch_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(test_config(dir.path())).unwrap();
    assert!(matches!(
        store.begin_epoch(0),
        Err(EpochError::Refused { .. })
    ));
    assert_eq!(store.begin_epoch(3).unwrap(), 0);
    put(&store, 3, "x");
    let end = store.stats().written_end;
    for stale in [1, 3] {
        assert!(matches!(
            store.begin_epoch(stale),
            Err(EpochError::Refused { .. })
        ));
    }
    assert_eq!(store.epochs(), vec![e(3, 0)]);
    assert!(store.record_epoch(e(5, end)).unwrap());
    assert!(!store.record_epoch(e(5, end)).unwrap(), "already there");
    assert!(
        store.record_epoch(e(4, end)).is_err(),
        "older than the last"
    );
    assert!(
        store.record_epoch(e(6, 1)).is_err(),
        "starts before the last"
    );
    assert_eq!(store.begin_epoch(6).unwrap(), end);
    assert_eq!(store.last_epoch(), 6);
}

#[test]
fn replicated_bytes_of_an_older_master_are_fenced() {
    let master_dir = tempfile::tempdir().unwrap();
    let replica_dir = tempfile::tempdir().unwrap();
    let master = MessageStore::open(test_config(master_dir.path())).unwrap();
    master.begin_epoch(1).unwrap();
    put(&master, 4, "m");
    let chunk = master.replication_chunk(0, 1 << 20).unwrap().unwrap();
    let replica = MessageStore::open(test_config(replica_dir.path())).unwrap();
    replica.record_epoch(e(1, 0)).unwrap();
    // The replica is promoted to epoch 2: the old master's bytes no longer land.
    replica.begin_epoch(2).unwrap();
    assert!(matches!(
        replica.append_replicated(0, &chunk.bytes, 1),
        Err(ReplicaAppendError::Fenced {
            stream_epoch: 1,
            store_epoch: 2
        })
    ));
    assert_eq!(replica.stats().written_end, 0);
    // From a master of epoch 2 (or newer) they would.
    replica.append_replicated(0, &chunk.bytes, 2).unwrap();
}

#[test]
fn truncate_diverged_then_reopen_has_no_tail() {
    let dir = tempfile::tempdir().unwrap();
    let (cut, end) = two_terms(dir.path());
    let store = MessageStore::open(test_config(dir.path())).unwrap();
    store.set_replication_bound(Some(end));
    let report = store.truncate_diverged(cut).unwrap();
    assert_eq!(report.bytes_cut, end - cut);
    assert_eq!(store.epochs(), vec![e(1, 0)]);
    assert_eq!(store.replication_bound(), Some(cut));
    // A bad offset cuts nothing and keeps the entries.
    assert!(store.truncate_diverged(cut + 1).is_err());
    assert_eq!(store.epochs(), vec![e(1, 0)]);
    store.close().unwrap();
    assert_cut(dir.path(), cut);
}

#[test]
fn a_plain_truncation_drops_the_entries_past_the_cut() {
    let dir = tempfile::tempdir().unwrap();
    let (cut, _) = two_terms(dir.path());
    let store = MessageStore::open(test_config(dir.path())).unwrap();
    store.truncate(cut).unwrap();
    // The term starting exactly at the cut may still write there: kept.
    assert_eq!(store.epochs(), vec![e(1, 0), e(2, cut)]);
    let first = read_all(&store, "T", 0)[1].phys_offset;
    store.truncate(first).unwrap();
    assert_eq!(store.epochs(), vec![e(1, 0)]);
    drop(store);
    assert_eq!(epoch::load(dir.path()).unwrap(), vec![e(1, 0)]);
}

/// The state a crash leaves after the intent is written but before the epoch file is
/// rewritten: recovery finishes the cut, open drops the entry at the cut.
#[test]
fn r9_crash_after_the_intent_before_the_epoch_file() {
    let dir = tempfile::tempdir().unwrap();
    let (cut, _) = two_terms(dir.path());
    write_intent(dir.path(), cut);
    assert_cut(dir.path(), cut);
}

/// The state a crash leaves after the epoch file is rewritten but before any byte is cut.
#[test]
fn r9_crash_after_the_epoch_file_before_the_cut() {
    let dir = tempfile::tempdir().unwrap();
    let (cut, _) = two_terms(dir.path());
    write_intent(dir.path(), cut);
    epoch::store(dir.path(), &[e(1, 0)]).unwrap();
    assert_cut(dir.path(), cut);
}

/// Writes `truncate.intent` as `MessageStore::truncate` does (offset BE + CRC32 BE).
fn write_intent(root: &Path, at: u64) {
    let mut bytes = at.to_be_bytes().to_vec();
    bytes.extend_from_slice(&crc32fast::hash(&bytes).to_be_bytes());
    std::fs::write(root.join("truncate.intent"), bytes).unwrap();
}
