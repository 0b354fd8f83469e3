//! Topic names reach file paths only after `ferromq_protocol::names::validate`: the store
//! refuses to append a record whose topic breaks the rules or forges offsets, never creates a
//! ConsumeQueue for such a name, and a log that already holds such a record (written before
//! names were checked) opens with the record quarantined while dispatch goes on.

mod common;

use std::io::Write;
use std::path::Path;

use common::{draft, read_all, segment_files, test_config};
use ferromq_protocol::names::NameRule;
use ferromq_protocol::Properties;
use ferromq_store::{AppendError, MessageStore, QuarantineKind, StoreError};

/// Everything directly under `dir`, sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn append_refuses_invalid_topics_and_the_offsets_topic() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("data");
    let store = MessageStore::open(test_config(&root)).unwrap();
    let long = "t".repeat(300);
    for bad in ["../../x", "a/b", "", long.as_str(), "x y"] {
        let refused = store.put(&[draft(bad, 0, b"m", b"")]).unwrap_err();
        assert!(
            matches!(refused, StoreError::Append(AppendError::InvalidName(_))),
            "{bad:?}: {refused:?}"
        );
    }
    let refused = store.put(&[draft("RMQ_SYS_FERROMQ_OFFSETS", 0, b"{}", b"")]);
    assert!(
        matches!(
            refused,
            Err(StoreError::Append(AppendError::ReservedTopic { .. }))
        ),
        "{refused:?}"
    );
    // A batch holding one bad record is refused whole: nothing of it is stored.
    let batch = store.put(&[draft("Good", 0, b"a", b""), draft("../x", 0, b"b", b"")]);
    assert!(batch.is_err());
    assert_eq!(store.stats().records_appended, 0);
    store.put(&[draft("Good", 0, b"ok", b"")]).unwrap();
    assert_eq!(read_all(&store, "Good", 0).len(), 1);
    store.close().unwrap();
    assert_eq!(entries(dir.path()), vec!["data".to_string()]);
    assert_eq!(
        entries(&root.join("consumequeue")),
        vec!["Good".to_string()]
    );
}

/// Appends a record to the end of the CommitLog's last segment without the store, the way a
/// broker that did not check names wrote it: encoded, placed and sealed like any record.
fn append_raw(root: &Path, topic: &str, queue_offset: u64, body: &[u8]) -> u64 {
    let (start, path) = segment_files(root).pop().expect("a segment");
    let at = start + std::fs::metadata(&path).unwrap().len();
    let properties = Properties::encode([("KEYS", "forged")]);
    let mut record = draft(topic, 0, body, &properties).encode().unwrap();
    record.finalize(queue_offset, at, 1_700_000_000_000);
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    file.write_all(record.as_bytes()).unwrap();
    file.sync_all().unwrap();
    at
}

#[test]
fn a_log_holding_unindexable_topics_opens_with_them_quarantined() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("data");
    let config = test_config(&root);
    let store = MessageStore::open(config.clone()).unwrap();
    store.put(&[draft("Before", 0, b"b0", b"")]).unwrap();
    store.close().unwrap();

    // What the delay scheduler once re-appended for `REAL_TOPIC` values it did not check.
    let long = "t".repeat(300);
    let poison_long = append_raw(&root, &long, 0, b"poison-1");
    let poison_path = append_raw(&root, "../../x", 0, b"poison-2");
    let poison_again = append_raw(&root, &long, 1, b"poison-3");

    let store = MessageStore::open(config.clone()).expect("the store opens");
    let quarantined = store.quarantined();
    let offsets: Vec<u64> = quarantined.ranges.iter().map(|r| r.phys_offset).collect();
    assert_eq!(offsets, vec![poison_long, poison_path, poison_again]);
    assert!(quarantined
        .ranges
        .iter()
        .all(|r| r.kind == QuarantineKind::Undispatchable && r.reason.contains("invalid topic")));
    assert_eq!(store.stats().undispatchable_records, 3);
    assert_eq!(store.recovery_report().cut, None, "nothing is cut");

    // Dispatch goes on past them: older and newer records are served.
    store.put(&[draft("After", 0, b"a0", b"")]).unwrap();
    assert_eq!(read_all(&store, "Before", 0).len(), 1);
    assert_eq!(read_all(&store, "After", 0).len(), 1);
    let stats = store.stats();
    assert_eq!(stats.dispatched_end, stats.written_end);
    store.close().unwrap();

    // It opens again (and again finds them), and nothing was ever created outside the root.
    let store = MessageStore::open(config).expect("the store opens again");
    assert_eq!(read_all(&store, "After", 0).len(), 1);
    store.close().unwrap();
    assert_eq!(entries(dir.path()), vec!["data".to_string()]);
    assert_eq!(
        entries(&root.join("consumequeue")),
        vec!["After".to_string(), "Before".to_string()]
    );
}

#[test]
fn invalid_names_are_refused_with_the_rule_they_break() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(test_config(dir.path())).unwrap();
    let long = "t".repeat(128);
    match store.append(&[draft(&long, 0, b"m", b"")]) {
        Err(AppendError::InvalidName(error)) => {
            assert_eq!(error.rule, NameRule::TooLong { len: 128, max: 127 })
        }
        other => panic!("expected InvalidName, got {other:?}"),
    }
    store.close().unwrap();
}
