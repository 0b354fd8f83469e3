//! Pull reads take nearby records of a queue with one read (`CommitLog::read_span`): the
//! messages are the same as one read per record would give, whatever the layout (runs of one
//! queue between other queues' records, records of two queues alternating, runs across
//! segment ends, pulls with small byte limits), and a damaged record inside a run is still
//! found, with the good records before it returned first.

mod common;

use ferromq_protocol::{Properties, RecordView};
use ferromq_store::{GetStatus, MessageStore, ReadError, TagFilter};

use common::{body_of, draft, flip_bit, locate, read_all, test_config};

const TOPIC: &str = "spans";

/// The body of message `i`: its index, then filler of a size that varies with it.
fn body(i: usize) -> Vec<u8> {
    let mut body = format!("m{i:05}-").into_bytes();
    body.resize(100 + (i * 53) % 1500, b'0' + (i % 10) as u8);
    body
}

/// Puts runs of messages: `run` back-to-back records on queue 0 (one put), then one on
/// queue 1, `count` messages on queue 0 in all. Returns queue 0's bodies in order.
fn fill(store: &MessageStore, count: usize, run: usize) -> Vec<Vec<u8>> {
    let props = Properties::encode([("TAGS", "t")]);
    let mut bodies = Vec::new();
    let other = b"other queue".to_vec();
    while bodies.len() < count {
        let batch: Vec<Vec<u8>> = (bodies.len()..(bodies.len() + run).min(count))
            .map(body)
            .collect();
        let drafts: Vec<_> = batch.iter().map(|b| draft(TOPIC, 0, b, &props)).collect();
        store.put(&drafts).unwrap();
        store.put(&[draft(TOPIC, 1, &other, &props)]).unwrap();
        bodies.extend(batch);
    }
    bodies
}

/// Every message of queue 0 through pulls of at most `max_count` messages and `max_bytes`.
fn pull_all(store: &MessageStore, max_count: usize, max_bytes: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut next = 0;
    loop {
        let got = store
            .get_messages(TOPIC, 0, next, max_count, max_bytes, &TagFilter::All)
            .unwrap();
        if got.status != GetStatus::Found {
            assert_eq!(got.status, GetStatus::OffsetOverflowOne, "at {next}");
            return out;
        }
        assert!(got.messages.len() <= max_count);
        for message in &got.messages {
            assert_eq!(message.queue_offset, next, "dense queue offsets");
            let view = RecordView::parse(&message.bytes).expect("a verified record");
            assert_eq!(view.queue_id, 0);
            assert_eq!(view.queue_offset, next);
            out.push(body_of(message));
            next += 1;
        }
        assert_eq!(got.next_begin_offset, next);
    }
}

/// The store under `root`, pull reads copying out of segment maps (`mapped`) or reading
/// spans with `pread`: both paths must give the same messages.
fn open_store(root: &std::path::Path, mapped: bool) -> MessageStore {
    let mut config = test_config(root);
    config.mapped_reads = mapped;
    MessageStore::open(config).unwrap()
}

#[test]
fn runs_of_back_to_back_records_read_the_same_as_one_read_each() {
    for mapped in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let store = open_store(dir.path(), mapped);
        let bodies = fill(&store, 300, 7);
        assert!(
            store.stats().written_end > 4 * 64 * 1024,
            "runs cross several segment ends"
        );
        pulls_read_as_one_read_each(&store, &bodies);
    }
}

#[test]
fn alternating_queues_read_the_same_as_one_read_each() {
    for mapped in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let store = open_store(dir.path(), mapped);
        let bodies = fill(&store, 300, 1);
        pulls_read_as_one_read_each(&store, &bodies);
    }
}

fn pulls_read_as_one_read_each(store: &MessageStore, bodies: &[Vec<u8>]) {
    let one_each: Vec<Vec<u8>> = read_all(store, TOPIC, 0).iter().map(body_of).collect();
    assert_eq!(one_each, bodies);
    for (max_count, max_bytes) in [(32, usize::MAX), (5, usize::MAX), (64, 3_000), (1, 1)] {
        assert_eq!(
            pull_all(store, max_count, max_bytes),
            bodies,
            "pulls of {max_count} messages / {max_bytes} bytes"
        );
    }
}

#[test]
fn a_damaged_record_inside_a_run_is_found_after_the_good_ones_before_it() {
    for mapped in [true, false] {
        damaged_record_inside_a_run(mapped);
    }
}

fn damaged_record_inside_a_run(mapped: bool) {
    let dir = tempfile::tempdir().unwrap();
    let segment_size = test_config(dir.path()).segment_size_bytes;
    let store = open_store(dir.path(), mapped);
    fill(&store, 10, 10);
    let messages = read_all(&store, TOPIC, 0);
    // Damage the body of queue offset 4, in the middle of the one run of ten.
    let target = &messages[4];
    let (path, at) = locate(dir.path(), segment_size, target.phys_offset);
    let body_at = target.bytes.len() as u64 / 2;
    flip_bit(&path, at + body_at, 3);

    let got = store
        .get_messages(TOPIC, 0, 0, 32, usize::MAX, &TagFilter::All)
        .unwrap();
    let offsets: Vec<u64> = got.messages.iter().map(|m| m.queue_offset).collect();
    assert_eq!(offsets, [0, 1, 2, 3], "the good records before the damage");
    assert_eq!(got.next_begin_offset, 4);
    match store.get_messages(TOPIC, 0, 4, 32, usize::MAX, &TagFilter::All) {
        Err(ReadError::Damaged { queue_offset, .. }) => assert_eq!(queue_offset, 4),
        other => panic!("expected the damaged record at 4, got {other:?}"),
    }
    let after = store
        .get_messages(TOPIC, 0, 5, 32, usize::MAX, &TagFilter::All)
        .unwrap();
    let offsets: Vec<u64> = after.messages.iter().map(|m| m.queue_offset).collect();
    assert_eq!(offsets, [5, 6, 7, 8, 9], "the rest of the run reads");
}
