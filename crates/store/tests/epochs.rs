//! Master epochs on the store: the epoch file through open and close, `begin_epoch`,
//! `record_epoch`, the replicated-append fence, and `truncate_diverged` — including R9: a
//! process killed right after or in the middle of a truncation comes back without the
//! truncated suffix in the log, the ConsumeQueue and the offset view, and with no epoch
//! entry past the log end.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ferromq_store::epoch::{self, EpochEntry};
use ferromq_store::offsets::{OffsetCommand, OffsetEntry, OffsetKind};
use ferromq_store::{EpochError, MessageStore, OpenError, ReplicaAppendError};

use common::{draft, read_all, test_config};

const CHILD_DIR_ENV: &str = "FERROMQ_R9_CHILD_DIR";
const CHILD_CUT_ENV: &str = "FERROMQ_R9_CHILD_CUT";

fn e(epoch: u64, start: u64) -> EpochEntry {
    EpochEntry { epoch, start }
}

fn commit(offset: u64) -> OffsetCommand {
    OffsetCommand {
        kind: OffsetKind::Commit,
        group: "G".into(),
        client_id: "epochs".into(),
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

fn put(store: &MessageStore, n: usize, tag: &str) {
    for i in 0..n {
        let body = format!("{tag}-{i}");
        store
            .put(&[draft("T", 0, body.as_bytes(), b"")])
            .expect("put");
    }
}

/// A store with epoch 1 from 0 (10 messages, commit 10) and epoch 2 from `cut` (8 more
/// messages, commit 18); returns `(cut, end)`.
fn two_terms(root: &Path) -> (u64, u64) {
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
fn assert_cut(root: &Path, cut: u64) {
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

/// R9 with a real process: a child opens the store and runs `truncate_diverged`; the parent
/// SIGKILLs it right after the call returns, or as soon as it starts (in the middle, or
/// before anything happened). On restart the store is either untouched (the kill came
/// before the intent) or cut exactly — never the suffix back in the log, the ConsumeQueue or
/// the offset view, and never an epoch entry past the log end.
#[test]
fn r9_truncate_diverged_survives_sigkill() {
    for (round, wait_for) in ["DONE", "TRUNCATING", "TRUNCATING", "TRUNCATING"]
        .into_iter()
        .enumerate()
    {
        let dir = tempfile::tempdir().unwrap();
        let (cut, end) = two_terms(dir.path());
        let mut child = Command::new(std::env::current_exe().expect("test executable"))
            .args([
                "--ignored",
                "--exact",
                "r9_child_process",
                "--nocapture",
                "--test-threads=1",
                "-q",
            ])
            .env(CHILD_DIR_ENV, dir.path())
            .env(CHILD_CUT_ENV, cut.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("stdout");
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut seen = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let line = line.expect("child output");
            seen.push(line.clone());
            if line == wait_for || line.starts_with("ERR") || Instant::now() > deadline {
                break;
            }
        }
        child.kill().expect("SIGKILL child");
        child.wait().expect("reap child");
        assert!(
            seen.iter().any(|l| l == wait_for),
            "round {round}: child said {seen:?}"
        );
        let store = MessageStore::open(test_config(dir.path())).expect("reopen");
        let log_end = store.stats().committed_end;
        assert!(
            store.epochs().iter().all(|x| x.start <= log_end),
            "round {round}: an epoch entry past the log end {log_end}: {:?}",
            store.epochs()
        );
        drop(store);
        if wait_for == "DONE" || log_end != end {
            assert_cut(dir.path(), cut);
        } else {
            // Killed before the intent: nothing changed.
            let store = MessageStore::open(test_config(dir.path())).unwrap();
            assert_eq!(store.epochs(), vec![e(1, 0), e(2, cut)]);
            assert_eq!(read_all(&store, "T", 0).len(), 18);
        }
    }
}

/// The child of `r9_truncate_diverged_survives_sigkill` (runs only when the parent sets
/// the environment): opens, truncates, says so, and waits to be killed.
#[test]
#[ignore = "child process of r9_truncate_diverged_survives_sigkill"]
fn r9_child_process() {
    let Ok(dir) = std::env::var(CHILD_DIR_ENV) else {
        return;
    };
    let cut: u64 = std::env::var(CHILD_CUT_ENV)
        .expect("cut")
        .parse()
        .expect("cut number");
    let say = |line: &str| {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "\n{line}");
        let _ = out.flush();
    };
    let store = match MessageStore::open(test_config(Path::new(&dir))) {
        Ok(store) => store,
        Err(error) => return say(&format!("ERR open {error}")),
    };
    say("TRUNCATING");
    match store.truncate_diverged(cut) {
        Ok(_) => say("DONE"),
        Err(error) => say(&format!("ERR truncate {error}")),
    }
    std::thread::sleep(Duration::from_secs(60));
}
