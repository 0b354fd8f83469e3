//! `AsyncFlush` acknowledgement: a record is acknowledged only once its bytes are in the
//! segment files (the page cache), never while they sit in the appender's in-memory tail. The
//! tests hold the background committers (`Faults::hold_background_commits`), so whatever is
//! in the files when an acknowledgement returns was written by the acknowledgement itself, and
//! read the files with `std::fs` — a crash of the process cannot lose what they hold.

mod common;

use std::path::Path;
use std::sync::Arc;

use ferromq_protocol::RecordView;
use ferromq_store::offsets::{OffsetCommand, OffsetEntry, OffsetKind, OFFSET_TOPIC};
use ferromq_store::{
    AppendError, DurabilityError, FlushDiskType, MessageStore, Placement, StoreConfig, StoreError,
};

use common::{body_of, draft, read_all, test_config};

fn async_config(root: &Path) -> StoreConfig {
    let mut config = test_config(root);
    config.flush_disk_type = FlushDiskType::AsyncFlush;
    // No interval fsync during a test: acknowledgement must not depend on one.
    config.flush_interval_ms = 3_600_000;
    config
}

/// An `AsyncFlush` store whose background committers are held.
fn open_held(root: &Path) -> MessageStore {
    let store = MessageStore::open(async_config(root)).expect("open");
    store.faults().hold_background_commits(true);
    store
}

/// The bytes of the record at `placement` as the segment file holds them now, read with
/// `std::fs`; `None` when the file does not reach the record's end.
fn in_file(root: &Path, placement: &Placement) -> Option<Vec<u8>> {
    let segment_size = async_config(root).segment_size_bytes;
    let start = placement.phys_offset - placement.phys_offset % segment_size;
    let path = root.join("commitlog").join(format!("{start:020}"));
    let bytes = std::fs::read(&path).unwrap_or_default();
    let from = (placement.phys_offset - start) as usize;
    // Space preallocated ahead of the writes reads as zeros: not written yet either.
    bytes
        .get(from..from + placement.size as usize)
        .filter(|record| record.iter().any(|&b| b != 0))
        .map(<[u8]>::to_vec)
}

/// The body of the record at `placement` in its segment file; panics if it is not there.
fn body_in_file(root: &Path, placement: &Placement, what: &str) -> Vec<u8> {
    let bytes = in_file(root, placement)
        .unwrap_or_else(|| panic!("{what}: acknowledged but not in the segment file"));
    let view = RecordView::parse(&bytes)
        .unwrap_or_else(|e| panic!("{what}: the file holds a bad record: {e}"));
    assert_eq!(view.phys_offset, placement.phys_offset, "{what}: offset");
    view.body.to_vec()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
}

#[test]
fn async_acknowledgement_means_the_record_is_in_the_segment_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let store = open_held(root);

    // Appended but not waited for: still only in memory (the hold works).
    let appended = store
        .append(&[draft("T", 0, b"appended only", b"")])
        .unwrap();
    let placement = &appended.placements[0];
    assert_eq!(in_file(root, placement), None, "nothing commits it yet");
    // The blocking wait writes it.
    store
        .wait_acknowledgeable(appended.end_offset, appended.truncation_epoch)
        .unwrap();
    assert_eq!(body_in_file(root, placement, "waited"), b"appended only");

    // put = append + wait.
    let put = store.put(&[draft("T", 1, b"put", b"")]).unwrap();
    assert_eq!(body_in_file(root, &put.placements[0], "put"), b"put");

    // The async form, as the broker's send path uses it.
    let sent = store.append(&[draft("T", 2, b"async", b"")]).unwrap();
    assert_eq!(in_file(root, &sent.placements[0]), None);
    runtime()
        .block_on(store.acknowledged(sent.ticket()))
        .unwrap();
    assert_eq!(body_in_file(root, &sent.placements[0], "async"), b"async");

    // Offset commands follow the same rule.
    let command = OffsetCommand {
        kind: OffsetKind::Commit,
        group: "G".into(),
        client_id: "c".into(),
        generation: None,
        entries: vec![OffsetEntry {
            topic: "T".into(),
            queue_id: 0,
            offset: 1,
        }],
        fenced_clients: Vec::new(),
        access_key: None,
    };
    let outcome = store.commit_offsets(&command).unwrap();
    let record = outcome.record.expect("the commit was written");
    let body = body_in_file(root, &record, "offset commit");
    assert_eq!(OffsetCommand::decode(&body).unwrap(), command);
    let bytes = in_file(root, &record).unwrap();
    assert_eq!(
        RecordView::parse(&bytes).unwrap().topic,
        OFFSET_TOPIC.as_bytes()
    );

    let stats = store.stats();
    assert_eq!(
        stats.committed_end, stats.written_end,
        "nothing left in memory"
    );
    assert_eq!(stats.flushed_end, 0, "acknowledged without an fsync");
    store.faults().hold_background_commits(false);
    store.close().unwrap();
}

#[test]
fn async_acknowledged_records_survive_an_abandoned_store() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let store = Arc::new(open_held(root));
    let writers: Vec<_> = (0..4u32)
        .map(|queue| {
            let store = store.clone();
            std::thread::spawn(move || {
                (0..50)
                    .map(|i| {
                        let body = format!("w{queue}-{i}");
                        let receipt = store
                            .put(&[draft("T", queue, body.as_bytes(), b"")])
                            .unwrap();
                        (receipt.placements[0].clone(), body)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let acked: Vec<(Placement, String)> = writers
        .into_iter()
        .flat_map(|w| w.join().expect("writer"))
        .collect();
    // One record never waited for: abandoning the store (a simulated process crash) loses it.
    let unacked = store.append(&[draft("T", 0, b"unacked", b"")]).unwrap();
    Arc::into_inner(store).expect("writers done").abandon();

    let store = MessageStore::open(async_config(root)).unwrap();
    assert!(!store.recovery_report().clean_shutdown);
    assert_eq!(
        store.stats().written_end,
        unacked.placements[0].phys_offset,
        "the log ends where the unacknowledged record would have started"
    );
    for queue in 0..4u32 {
        let messages = read_all(&store, "T", queue);
        let expected: Vec<(u64, Vec<u8>)> = acked
            .iter()
            .filter(|(p, _)| p.queue_id == queue)
            .map(|(p, body)| (p.phys_offset, body.clone().into_bytes()))
            .collect();
        let found: Vec<(u64, Vec<u8>)> = messages
            .iter()
            .map(|m| (m.phys_offset, body_of(m)))
            .collect();
        assert_eq!(found, expected, "queue {queue}");
    }
}

#[test]
fn async_write_failure_fails_every_waiter_with_not_written() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let store = open_held(root);
    let ok = store.put(&[draft("T", 0, b"ok", b"")]).unwrap();
    // a is much larger than b, so a write that stops halfway through [a, b] tears a.
    let a = store.append(&[draft("T", 0, &[b'a'; 600], b"")]).unwrap();
    let b = store.append(&[draft("T", 0, b"b", b"")]).unwrap();
    // The disk fills halfway through the commit of [a, b].
    store.faults().arm(1, 0);
    let error = runtime()
        .block_on(store.acknowledged(b.ticket()))
        .unwrap_err();
    match &error {
        DurabilityError::NotWritten(cause) => {
            assert!(cause.contains("No space left"), "{cause}")
        }
        other => panic!("expected NotWritten, got {other:?}"),
    }
    let error = store
        .wait_acknowledgeable(a.end_offset, a.truncation_epoch)
        .unwrap_err();
    assert!(matches!(error, DurabilityError::NotWritten(_)), "{error:?}");
    assert!(store.stats().poisoned.is_some(), "a failed write poisons");
    let refused = store.put(&[draft("T", 0, b"refused", b"")]).unwrap_err();
    assert!(
        matches!(refused, StoreError::Append(AppendError::Poisoned(_))),
        "{refused:?}"
    );
    // An acknowledgement from before the failure stands.
    store
        .wait_acknowledgeable(ok.end_offset, ok.truncation_epoch)
        .unwrap();
    store.faults().hold_background_commits(false);
    drop(store);

    let store = MessageStore::open(async_config(root)).unwrap();
    let cut = store.recovery_report().cut.clone().expect("torn bytes cut");
    assert_eq!(cut.phys_offset, ok.end_offset);
    let bodies: Vec<Vec<u8>> = read_all(&store, "T", 0).iter().map(body_of).collect();
    assert_eq!(bodies, vec![b"ok".to_vec()]);
}

#[test]
fn async_waiter_of_a_truncated_record_gets_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_held(dir.path());
    let a = store.put(&[draft("T", 0, b"a", b"")]).unwrap();
    let b = store.append(&[draft("T", 0, b"b", b"")]).unwrap();
    let c = store.append(&[draft("T", 0, b"c", b"")]).unwrap();
    let cut_at = b.placements[0].phys_offset;
    store.truncate(cut_at).unwrap();
    let truncated = |error: DurabilityError| {
        assert!(
            matches!(error, DurabilityError::Truncated { truncated_to } if truncated_to == cut_at),
            "{error:?}"
        )
    };
    truncated(
        store
            .wait_acknowledgeable(c.end_offset, c.truncation_epoch)
            .unwrap_err(),
    );
    truncated(
        runtime()
            .block_on(store.acknowledged(b.ticket()))
            .unwrap_err(),
    );
    // Below the cut: still acknowledged.
    store
        .wait_acknowledgeable(a.end_offset, a.truncation_epoch)
        .unwrap();
    // New records reuse the cut offsets and are committed past c's end: c stays cut.
    let d = store.put(&[draft("T", 0, b"d", b"")]).unwrap();
    let e = store.put(&[draft("T", 0, b"e", b"")]).unwrap();
    assert_eq!(d.placements[0].phys_offset, cut_at);
    assert!(e.end_offset >= c.end_offset && store.stats().committed_end >= c.end_offset);
    truncated(
        store
            .wait_acknowledgeable(c.end_offset, c.truncation_epoch)
            .unwrap_err(),
    );
    let offsets: Vec<u64> = read_all(&store, "T", 0)
        .iter()
        .map(|m| m.queue_offset)
        .collect();
    assert_eq!(offsets, vec![0, 1, 2]);
    store.faults().hold_background_commits(false);
    store.close().unwrap();
}
