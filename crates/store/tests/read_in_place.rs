//! Pull reads copy records out of a read-only map of each segment (`commitlog::read_map`).
//! A map faults (`SIGBUS`, which would kill the test process) where a `pread` returns short,
//! so every cut of a file must exclude them: these tests truncate the log, again and again,
//! while readers pull from the queue being cut, and check that every message a reader gets is
//! whole and is the one its queue offset names, before and after the cuts. The race it
//! stresses is narrow and may pass by luck; the deterministic guard is the unit test
//! `segment::tests::read_map_copies_committed_bytes_and_never_past_a_cut` (which faults
//! when a cut does not exclude the map reads).

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferromq_protocol::{Properties, RecordView};
use ferromq_store::{FlushDiskType, MessageStore, TagFilter};

use common::{body_of, draft, read_all, test_config};

/// Rounds of put-then-truncate the writer does at most (the test's time bound is the other).
const ROUNDS_MAX: usize = 200;
/// How long the writer keeps cutting the log under the readers.
const CUTTING_FOR: Duration = Duration::from_secs(2);

/// Body of message `i` of round `round`: the reader can tell which write it got.
fn body(round: usize, i: usize) -> Vec<u8> {
    let mut body = format!("r{round:04}-m{i:04}-").into_bytes();
    body.resize(200 + (i * 37) % 900, b'x');
    body
}

/// Puts `count` messages of `round` on T/0, each followed by one on T/1 (so T/0's records
/// interleave with another queue's, as on a busy broker).
fn put_round(store: &MessageStore, round: usize, count: usize) {
    let props = Properties::encode([("TAGS", "t")]);
    for i in 0..count {
        let body = body(round, i);
        store.put(&[draft("T", 0, &body, &props)]).expect("put");
        store.put(&[draft("T", 1, b"other", &props)]).expect("put");
    }
}

/// A reader pulling T/0 from its start until told to stop; returns how many messages it
/// checked. Each message must parse, verify and carry the queue offset it was read at; a
/// read error (a record cut while being read) is allowed, a wrong message is not.
fn reader(store: Arc<MessageStore>, stop: Arc<AtomicBool>, checked: Arc<AtomicU64>) {
    let mut next = 0;
    while !stop.load(Ordering::Relaxed) {
        match store.get_messages("T", 0, next, 32, usize::MAX, &TagFilter::All) {
            Ok(result) => {
                for message in &result.messages {
                    let view = RecordView::parse(&message.bytes).expect("a whole, verified record");
                    assert_eq!(view.queue_offset, message.queue_offset);
                    assert_eq!(view.topic, b"T");
                    assert_eq!(view.queue_id, 0);
                    checked.fetch_add(1, Ordering::Relaxed);
                }
                next = if result.messages.is_empty()
                    || result.next_begin_offset >= result.max_offset
                {
                    result.min_offset
                } else {
                    result.next_begin_offset
                };
            }
            Err(_) => next = 0,
        }
    }
}

#[test]
fn reads_from_the_map_survive_truncations_under_them_and_see_the_new_bytes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = test_config(dir.path());
    config.flush_disk_type = FlushDiskType::AsyncFlush;
    let store = Arc::new(MessageStore::open(config).expect("open"));
    put_round(&store, 0, 120);
    let stop = Arc::new(AtomicBool::new(false));
    let checked = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (store, stop, checked) = (store.clone(), stop.clone(), checked.clone());
            std::thread::spawn(move || reader(store, stop, checked))
        })
        .collect();
    let started = Instant::now();
    let mut round = 1;
    while round < ROUNDS_MAX && started.elapsed() < CUTTING_FOR {
        let end = store.stats().written_end;
        assert_eq!(
            store.wait_dispatched(end, Duration::from_secs(5)),
            end,
            "dispatch did not reach the log end in round {round}"
        );
        // Cut somewhere in the second half of T/0 (a record boundary), then write a new round
        // over the cut: the bytes at the same offsets change under the readers.
        let t0 = read_all(&store, "T", 0);
        let cut = t0[t0.len() / 2 + round % (t0.len() / 4)].phys_offset;
        store.truncate(cut).expect("truncate");
        put_round(&store, round, 40);
        round += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for reader in readers {
        reader.join().expect("a reader failed");
    }
    assert!(round > 5, "only {round} rounds of cuts in {CUTTING_FOR:?}");
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    let commitlog = dir.path().join("commitlog");
    let read_only_maps = maps
        .lines()
        .filter(|line| line.contains(" r--s ") && line.contains(commitlog.to_str().unwrap()))
        .count();
    assert!(
        read_only_maps > 0,
        "the reads did not map a segment:\n{maps}"
    );
    assert!(
        checked.load(Ordering::Relaxed) > 1000,
        "readers checked {checked:?}"
    );
    // A read that a cut overtook is not damage (`cut_under_read.rs` forces that race).
    let quarantined = store.quarantined();
    assert!(
        quarantined.ranges.is_empty(),
        "reads racing the cuts quarantined good records: {quarantined:?}"
    );
    // After the last cut, the queue holds exactly what was written last at every offset.
    let t0 = read_all(&store, "T", 0);
    let tail: Vec<Vec<u8>> = t0[t0.len() - 40..].iter().map(body_of).collect();
    let expected: Vec<Vec<u8>> = (0..40).map(|i| body(round - 1, i)).collect();
    assert_eq!(tail, expected);
}
