//! The store's replication paths: a replica that appends its master's chunks holds a
//! byte-identical log, the same ConsumeQueues and the same offset view; bad bytes are refused
//! whole; the prefix check names the first differing record; the replication bound caps what
//! consumers see.

mod common;

use std::time::Duration;

use ferromq_store::offsets::{OffsetCommand, OffsetEntry, OffsetKind};
use ferromq_store::{
    FlushDiskType, LogSample, MessageStore, PrefixCheck, ReplicaAppendError, StoreConfig,
};

use common::{draft, read_all, segment_files, test_config};

const CHUNK: usize = 4096;
/// `test_config`'s segment size.
const SEGMENT: u64 = 64 * 1024;

fn commit(group: &str, queue_id: u32, offset: u64) -> OffsetCommand {
    OffsetCommand {
        kind: OffsetKind::Commit,
        group: group.into(),
        client_id: "replica-test".into(),
        generation: None,
        entries: vec![OffsetEntry {
            topic: "T".into(),
            queue_id,
            offset,
        }],
        fenced_clients: Vec::new(),
        access_key: None,
    }
}

fn config(root: &std::path::Path, policy: FlushDiskType) -> StoreConfig {
    let mut config = test_config(root);
    config.flush_disk_type = policy;
    config
}

/// Copies everything the master has committed to the replica, chunk by chunk, as the HA
/// stream does; returns the number of chunks.
fn catch_up(master: &MessageStore, replica: &MessageStore) -> usize {
    let mut chunks = 0;
    loop {
        let from = replica.appended_end();
        match master.replication_chunk(from, CHUNK).expect("chunk") {
            Some(chunk) => {
                let bytes = &chunk.bytes;
                assert!(
                    bytes.len() <= CHUNK.max(16 * 1024 + 1024),
                    "{}",
                    bytes.len()
                );
                let ticket = replica.append_replicated(from, bytes, 0).expect("append");
                assert_eq!(
                    ticket.end, chunk.next,
                    "replica and master agree where it ends"
                );
                replica
                    .wait_acknowledgeable(ticket.end, ticket.epoch)
                    .expect("replica durable");
                chunks += 1;
            }
            None => return chunks,
        }
    }
}

fn fill(master: &MessageStore) {
    for i in 0..400u32 {
        let body = vec![b'a' + (i % 26) as u8; 100 + (i as usize * 37) % 900];
        master.put(&[draft("T", i % 4, &body, b"")]).expect("put");
        if i % 50 == 49 {
            master
                .commit_offsets(&commit("G", i % 4, u64::from(i / 8)))
                .expect("commit");
        }
    }
}

#[test]
fn a_replica_holds_the_masters_bytes_queues_and_offsets() {
    for policy in [FlushDiskType::SyncFlush, FlushDiskType::AsyncFlush] {
        let (m_dir, r_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let master = MessageStore::open(config(m_dir.path(), policy)).expect("master");
        let replica = MessageStore::open(config(r_dir.path(), policy)).expect("replica");
        fill(&master);
        let chunks = catch_up(&master, &replica);
        assert!(chunks > 10, "streamed in {chunks} chunks");
        let end = master.committed_end();
        assert!(end > 3 * 64 * 1024, "the log spans several segments: {end}");
        assert_eq!(replica.appended_end(), end);
        replica.wait_dispatched(end, Duration::from_secs(5));
        for queue in 0..4 {
            let (a, b) = (
                read_all(&master, "T", queue),
                read_all(&replica, "T", queue),
            );
            assert_eq!(a.len(), 100);
            assert_eq!(
                a.iter().map(|m| &m.bytes).collect::<Vec<_>>(),
                b.iter().map(|m| &m.bytes).collect::<Vec<_>>()
            );
            assert_eq!(
                master
                    .consumer_offset("G", "T", queue)
                    .expect("master offset"),
                replica
                    .consumer_offset("G", "T", queue)
                    .expect("replica offset"),
            );
        }
        assert!(replica.consumer_offset("G", "T", 1).unwrap().is_some());
        drop((master, replica));
        assert_eq!(
            segments_of(m_dir.path()),
            segments_of(r_dir.path()),
            "logs differ"
        );
    }
}

/// Each segment file's name and bytes.
fn segments_of(root: &std::path::Path) -> Vec<(u64, Vec<u8>)> {
    segment_files(root)
        .into_iter()
        .map(|(start, path)| (start, std::fs::read(path).expect("segment")))
        .collect()
}

#[test]
fn a_replica_restarted_continues_where_its_log_ends_and_its_tail_matches() {
    let (m_dir, r_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let master = MessageStore::open(config(m_dir.path(), FlushDiskType::AsyncFlush)).unwrap();
    fill(&master);
    {
        let replica = MessageStore::open(config(r_dir.path(), FlushDiskType::AsyncFlush)).unwrap();
        let from = replica.appended_end();
        let chunk = master.replication_chunk(from, 64 * 1024).unwrap().unwrap();
        replica.append_replicated(from, &chunk.bytes, 0).unwrap();
    }
    let replica = MessageStore::open(config(r_dir.path(), FlushDiskType::AsyncFlush)).unwrap();
    let (end, samples) = replica.log_tail().expect("tail");
    assert!(end > 0 && !samples.is_empty(), "{end} {samples:?}");
    let last = samples.last().unwrap();
    let last_end = last.offset + u64::from(last.size);
    // The chunk may have ended a segment: the log then continues at the next one.
    assert!(
        last_end == end || end % (64 * 1024) == 0,
        "{last_end} {end}"
    );
    assert_eq!(
        master.check_prefix(end, &samples).unwrap(),
        PrefixCheck::Prefix
    );
    catch_up(&master, &replica);
    assert_eq!(replica.committed_end(), master.committed_end());
    drop((master, replica));
    assert_eq!(segments_of(m_dir.path()), segments_of(r_dir.path()));
}

#[test]
fn bad_replicated_bytes_are_refused_whole() {
    let (m_dir, r_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let master = MessageStore::open(config(m_dir.path(), FlushDiskType::AsyncFlush)).unwrap();
    let replica = MessageStore::open(config(r_dir.path(), FlushDiskType::AsyncFlush)).unwrap();
    fill(&master);
    let good = master
        .replication_chunk(0, CHUNK)
        .unwrap()
        .unwrap()
        .bytes
        .to_vec();
    // Not at the replica's end.
    assert!(matches!(
        replica.append_replicated(100, &good, 0),
        Err(ReplicaAppendError::NotAtEnd {
            expected: 0,
            got: 100
        })
    ));
    // A flipped byte in the last record: nothing of the batch is appended.
    let mut flipped = good.clone();
    let at = flipped.len() - 30;
    flipped[at] ^= 0x40;
    assert!(matches!(
        replica.append_replicated(0, &flipped, 0),
        Err(ReplicaAppendError::BadRecord { .. })
    ));
    assert_eq!(replica.appended_end(), 0);
    // Torn at the end.
    assert!(matches!(
        replica.append_replicated(0, &good[..good.len() - 5], 0),
        Err(ReplicaAppendError::Partial { .. })
    ));
    // Records of another log position (shifted by a record): the stored offset disagrees.
    let first = u32::from_be_bytes(good[..4].try_into().unwrap()) as usize;
    replica
        .append_replicated(0, &good[..first], 0)
        .expect("first record");
    assert!(matches!(
        replica.append_replicated(first as u64, &good[..first], 0),
        Err(ReplicaAppendError::BadRecord { .. })
    ));
    assert_eq!(replica.appended_end(), first as u64);
    replica
        .append_replicated(first as u64, &good[first..], 0)
        .expect("the rest");
    assert_eq!(replica.appended_end(), good.len() as u64);
}

#[test]
fn the_prefix_check_names_the_first_differing_record() {
    let (m_dir, o_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let master = MessageStore::open(config(m_dir.path(), FlushDiskType::AsyncFlush)).unwrap();
    let other = MessageStore::open(config(o_dir.path(), FlushDiskType::AsyncFlush)).unwrap();
    for i in 0..20u8 {
        master.put(&[draft("T", 0, &[i; 64], b"")]).unwrap();
        // Same sizes, different bodies from the 10th record on.
        let body = if i < 10 { [i; 64] } else { [i + 100; 64] };
        other.put(&[draft("T", 0, &body, b"")]).unwrap();
    }
    // Store times differ between the two stores, so compare tails of the same store first.
    let (end, samples) = master.log_tail().unwrap();
    assert_eq!(
        master.check_prefix(end, &samples).unwrap(),
        PrefixCheck::Prefix
    );
    assert_eq!(
        master.check_prefix(end + 1, &samples).unwrap(),
        PrefixCheck::Ahead { end }
    );
    // The samples start at the newest dispatched record, so how many there are depends on
    // how far the dispatcher got: change one in the middle of whatever was sampled.
    assert!(!samples.is_empty());
    let k = samples.len() / 2;
    let mut changed: Vec<LogSample> = samples.clone();
    changed[k].crc ^= 1;
    assert_eq!(
        master.check_prefix(end, &changed).unwrap(),
        PrefixCheck::DiffersAt(samples[k].offset)
    );
    let (other_end, other_samples) = other.log_tail().unwrap();
    assert!(matches!(
        master.check_prefix(other_end, &other_samples).unwrap(),
        PrefixCheck::DiffersAt(_)
    ));
}

#[test]
fn the_replication_bound_caps_what_consumers_see() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path(), FlushDiskType::SyncFlush)).unwrap();
    let first = store.put(&[draft("T", 0, b"one", b"")]).unwrap();
    store.set_replication_bound(Some(first.end_offset));
    store.put(&[draft("T", 0, b"two", b"")]).unwrap();
    store.wait_dispatched(first.end_offset, Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(store.stats().dispatched_end, first.end_offset);
    assert_eq!(store.queue_bounds("T", 0), Some((0, 1)));
    store.set_replication_bound(None);
    let end = store.stats().written_end;
    assert_eq!(store.wait_dispatched(end, Duration::from_secs(5)), end);
    assert_eq!(store.queue_bounds("T", 0), Some((0, 2)));
}

mod interleavings {
    //! Random interleavings of writes on a master and partial replication steps (random chunk
    //! sizes, random watermarks) against a replica: the replica never exposes past the bound
    //! it was given, never holds bytes the master does not, and once caught up holds exactly
    //! the master's queues and offsets. The production append, chunk and bound code runs; only
    //! the network between them is a loop.

    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Step {
        Put { queue: u32, len: usize },
        Commit { queue: u32, back: u64 },
        Reset { queue: u32 },
        Replicate { max: usize, watermark_lag: u64 },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (0u32..3, 1usize..3000).prop_map(|(queue, len)| Step::Put { queue, len }),
            2 => (0u32..3, 0u64..3).prop_map(|(queue, back)| Step::Commit { queue, back }),
            1 => (0u32..3).prop_map(|queue| Step::Reset { queue }),
            3 => (1usize..20_000, 0u64..5_000).prop_map(|(max, watermark_lag)| Step::Replicate { max, watermark_lag }),
        ]
    }

    fn command(kind: OffsetKind, queue: u32, offset: u64) -> OffsetCommand {
        OffsetCommand {
            kind,
            ..commit("G", queue, offset)
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
        #[test]
        fn a_replica_follows_any_interleaving_and_ends_equal(steps in proptest::collection::vec(step(), 1..120)) {
            let (m_dir, r_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
            let master = MessageStore::open(config(m_dir.path(), FlushDiskType::AsyncFlush)).unwrap();
            let replica = MessageStore::open(config(r_dir.path(), FlushDiskType::AsyncFlush)).unwrap();
            replica.set_replication_bound(Some(0));
            for step in steps {
                match step {
                    Step::Put { queue, len } => {
                        master.put(&[draft("T", queue, &vec![b'x'; len], b"")]).unwrap();
                    }
                    Step::Commit { queue, back } => {
                        let max = master.queue_bounds("T", queue).map_or(0, |(_, max)| max);
                        let _ = master.commit_offsets(&commit("G", queue, max.saturating_sub(back)));
                    }
                    Step::Reset { queue } => {
                        let _ = master.commit_offsets(&command(OffsetKind::Reset, queue, 0));
                    }
                    Step::Replicate { max, watermark_lag } => {
                        let from = replica.appended_end();
                        if let Some(chunk) = master.replication_chunk(from, max).unwrap() {
                            let ticket = replica.append_replicated(from, &chunk.bytes, 0).unwrap();
                            prop_assert_eq!(ticket.end, chunk.next);
                            // As the slave does before it acknowledges.
                            replica.wait_acknowledgeable(ticket.end, ticket.epoch).unwrap();
                        }
                        let bound = replica.appended_end().saturating_sub(watermark_lag);
                        let bound = replica.replication_bound().map_or(bound, |b| b.max(bound));
                        replica.set_replication_bound(Some(bound));
                        // A pause for the dispatcher (the bound may fall inside a record, which
                        // then waits), not a condition.
                        replica.wait_dispatched(bound, Duration::from_millis(5));
                        // Past the bound only by skipping a segment's blank end (no record there).
                        let dispatched = replica.stats().dispatched_end;
                        let blank_skip = dispatched.is_multiple_of(SEGMENT)
                            && dispatched.saturating_sub(bound) < 20 * 1024;
                        prop_assert!(dispatched <= bound || blank_skip, "dispatched {} past the bound {}", dispatched, bound);
                    }
                }
                prop_assert!(replica.appended_end() <= master.committed_end());
            }
            catch_up(&master, &replica);
            replica.set_replication_bound(None);
            let end = master.committed_end();
            prop_assert_eq!(replica.committed_end(), end);
            master.wait_dispatched(end, Duration::from_secs(5));
            replica.wait_dispatched(end, Duration::from_secs(5));
            for queue in 0..3 {
                prop_assert_eq!(master.queue_bounds("T", queue), replica.queue_bounds("T", queue));
                prop_assert_eq!(
                    master.consumer_offset("G", "T", queue).unwrap(),
                    replica.consumer_offset("G", "T", queue).unwrap()
                );
            }
            prop_assert_eq!(master.offset_fences().unwrap(), replica.offset_fences().unwrap());
        }
    }
}

/// Offset records of every format version (1: plain, 2: fencing clients, 3: naming the ACL
/// access key) in one log: the replica's dispatcher and the master's recovery read them all,
/// and the history keeps who moved what.
#[test]
fn offset_records_of_every_version_replicate_and_survive_a_restart() {
    let (m_dir, r_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let expected = {
        let master = MessageStore::open(config(m_dir.path(), FlushDiskType::SyncFlush)).unwrap();
        let replica = MessageStore::open(config(r_dir.path(), FlushDiskType::SyncFlush)).unwrap();
        for _ in 0..10 {
            master.put(&[draft("T", 0, b"m", b"")]).expect("put");
        }
        let mut keyed = commit("G", 0, 4);
        keyed.access_key = Some("user01".into());
        let mut fencing_reset = commit("G", 0, 2);
        fencing_reset.kind = OffsetKind::Reset;
        fencing_reset.fenced_clients = vec!["c1".into()];
        let mut keyed_reset = fencing_reset.clone();
        keyed_reset.entries[0].offset = 1;
        keyed_reset.access_key = Some("admin01".into());
        let mut keyed_commit = commit("G", 0, 3);
        keyed_commit.generation = Some(2);
        keyed_commit.access_key = Some("user01".into());
        for command in [
            commit("G", 0, 1),
            keyed,
            fencing_reset,
            keyed_reset,
            keyed_commit,
        ] {
            let outcome = master.commit_offsets(&command).expect("commit");
            assert!(outcome.all_accepted(), "{command:?}: {outcome:?}");
        }
        catch_up(&master, &replica);
        replica.wait_dispatched(master.committed_end(), Duration::from_secs(5));
        let history = |store: &MessageStore| -> Vec<(OffsetKind, u64, Option<String>)> {
            store
                .offset_history("G", "T", Some(0))
                .expect("history")
                .into_iter()
                .map(|e| (e.kind, e.offset, e.access_key))
                .collect()
        };
        let expected = vec![
            (OffsetKind::Commit, 1, None),
            (OffsetKind::Commit, 4, Some("user01".to_string())),
            (OffsetKind::Reset, 2, None),
            (OffsetKind::Reset, 1, Some("admin01".to_string())),
            (OffsetKind::Commit, 3, Some("user01".to_string())),
        ];
        assert_eq!(history(&master), expected);
        assert_eq!(
            history(&replica),
            expected,
            "the replica reads every version"
        );
        assert_eq!(
            replica
                .consumer_offset("G", "T", 0)
                .unwrap()
                .map(|o| o.offset),
            Some(3)
        );
        expected
    };
    // Recovery replays the same records after a restart.
    let master = MessageStore::open(config(m_dir.path(), FlushDiskType::SyncFlush)).unwrap();
    let history: Vec<(OffsetKind, u64, Option<String>)> = master
        .offset_history("G", "T", Some(0))
        .expect("history")
        .into_iter()
        .map(|e| (e.kind, e.offset, e.access_key))
        .collect();
    assert_eq!(history, expected);
    assert_eq!(
        master
            .consumer_offset("G", "T", 0)
            .unwrap()
            .map(|o| o.offset),
        Some(3)
    );
}
