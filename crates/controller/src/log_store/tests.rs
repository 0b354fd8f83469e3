//! Recovery tests of the on-disk Raft log.

use openraft::{CommittedLeaderId, EntryPayload};

use super::*;
use crate::state::Command;

fn entry(index: u64) -> Entry {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 0), index),
        payload: EntryPayload::Normal(Command::CleanBrokerData {
            cluster_name: "c".into(),
            broker_name: format!("b{index}"),
            broker_ids: vec![],
        }),
    }
}

fn append(store: &LogStore, range: std::ops::Range<u64>) {
    store
        .lock()
        .guarded(|files| files.append(range.map(entry).collect()))
        .unwrap();
}

fn indexes(store: &LogStore) -> Vec<u64> {
    store.lock().entries.keys().copied().collect()
}

#[test]
fn restart_recovers_entries_vote_and_purge_point() {
    let dir = tempfile::tempdir().unwrap();
    let store = LogStore::open(dir.path()).unwrap();
    append(&store, 0..10);
    store.lock().guarded(|f| f.truncate(8)).unwrap();
    store
        .lock()
        .guarded(|f| f.purge(*entry(2).get_log_id()))
        .unwrap();
    append(&store, 8..12);
    drop(store);
    let store = LogStore::open(dir.path()).unwrap();
    assert_eq!(indexes(&store), (3..12).collect::<Vec<_>>());
    assert_eq!(store.lock().meta.last_purged.map(|l| l.index), Some(2));
}

#[test]
fn a_torn_tail_is_cut_and_appends_continue_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = LogStore::open(dir.path()).unwrap();
    append(&store, 0..3);
    drop(store);
    let path = dir.path().join("log.dat");
    let mut bytes = fs::read(&path).unwrap();
    let whole = bytes.len();
    bytes.truncate(whole - 5);
    bytes.extend_from_slice(b"\x00\x00");
    fs::write(&path, &bytes).unwrap();
    let store = LogStore::open(dir.path()).unwrap();
    assert_eq!(indexes(&store), vec![0, 1]);
    append(&store, 2..4);
    drop(store);
    let store = LogStore::open(dir.path()).unwrap();
    assert_eq!(indexes(&store), vec![0, 1, 2, 3]);
}

#[test]
fn garbage_after_the_last_entry_is_cut_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let store = LogStore::open(dir.path()).unwrap();
    append(&store, 0..2);
    drop(store);
    let path = dir.path().join("log.dat");
    let mut file = OpenOptions::new().append(true).open(&path).unwrap();
    file.write_all(&[0xff; 37]).unwrap();
    drop(file);
    let store = LogStore::open(dir.path()).unwrap();
    assert_eq!(indexes(&store), vec![0, 1]);
}

#[test]
fn damage_inside_the_log_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = LogStore::open(dir.path()).unwrap();
    append(&store, 0..3);
    drop(store);
    let path = dir.path().join("log.dat");
    let mut bytes = fs::read(&path).unwrap();
    bytes[12] ^= 0x55;
    fs::write(&path, &bytes).unwrap();
    let error = LogStore::open(dir.path()).unwrap_err();
    assert!(
        matches!(error, StoreError::Corrupt { position: 0, .. }),
        "{error}"
    );
    assert!(error.to_string().contains("log.dat"), "{error}");
}

#[test]
fn a_corrupt_vote_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("vote.json"), b"{not json").unwrap();
    let error = LogStore::open(dir.path()).unwrap_err();
    assert!(error.to_string().contains("vote.json"), "{error}");
}

#[test]
fn a_large_purged_prefix_is_compacted_out_of_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = LogStore::open(dir.path()).unwrap();
    let count = COMPACT_PURGED_ENTRIES_MIN + 5;
    append(&store, 0..count);
    let before = fs::metadata(dir.path().join("log.dat")).unwrap().len();
    store
        .lock()
        .guarded(|f| f.purge(*entry(COMPACT_PURGED_ENTRIES_MIN - 1).get_log_id()))
        .unwrap();
    let after = fs::metadata(dir.path().join("log.dat")).unwrap().len();
    assert!(after < before / 10, "{after} vs {before}");
    append(&store, count..count + 1);
    drop(store);
    let store = LogStore::open(dir.path()).unwrap();
    let expected: Vec<u64> = (COMPACT_PURGED_ENTRIES_MIN..=count).collect();
    assert_eq!(indexes(&store), expected);
}

#[test]
fn appends_after_a_purge_past_the_tail_recover_even_if_compaction_was_missed() {
    let dir = tempfile::tempdir().unwrap();
    let store = LogStore::open(dir.path()).unwrap();
    append(&store, 0..4);
    // A snapshot at 29 was installed: the purge goes past every entry in the file.
    store
        .lock()
        .guarded(|f| f.purge(*entry(29).get_log_id()))
        .unwrap();
    append(&store, 30..33);
    drop(store);
    let store = LogStore::open(dir.path()).unwrap();
    assert_eq!(indexes(&store), vec![30, 31, 32]);
    drop(store);

    // The same with the compaction lost in a crash: meta says 29, the file still holds 0..4.
    let dir = tempfile::tempdir().unwrap();
    let store = LogStore::open(dir.path()).unwrap();
    append(&store, 0..4);
    {
        let mut files = store.lock();
        files.meta.last_purged = Some(*entry(29).get_log_id());
        files.write_meta().unwrap();
        files.entries.clear();
    }
    append(&store, 30..32);
    drop(store);
    let store = LogStore::open(dir.path()).unwrap();
    assert_eq!(indexes(&store), vec![30, 31]);
}
