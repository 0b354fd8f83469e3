//! A queue read takes its entries under the store's lock and reads the records they lead to
//! after releasing it. A truncation in between (a deposed master cutting its diverged tail)
//! cuts those records, and new records written over the cut put other bytes at the same
//! offsets. The read must not take that for damage: quarantined "damage" over good records
//! made dispatch skip records written there later (acknowledged, never indexed) and made the
//! next truncation's re-dispatch jump into the middle of a record and poison the store.
//!
//! The read stall (`Faults::stall_reads`) holds the reader in exactly that window, so the
//! race is certain, not lucky.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferromq_protocol::{Properties, RecordView};
use ferromq_store::{MessageStore, ReadError, TagFilter};

use common::{body_of, draft, read_all, test_config};

/// How long a test waits for the reader to reach the stall.
const STALL_WAIT_MAX: Duration = Duration::from_secs(10);

/// Body of message `i` of `round`, sized by both, so a round written over a cut puts its
/// record boundaries elsewhere than the round it replaced.
fn body(round: usize, i: usize) -> Vec<u8> {
    let mut body = format!("r{round}-m{i:03}-").into_bytes();
    body.resize(150 + (i * 37 + round * 211) % 700, b'x');
    body
}

fn put_round(store: &MessageStore, round: usize, count: usize) {
    let props = Properties::encode([("TAGS", "t")]);
    for i in 0..count {
        store
            .put(&[draft("T", 0, &body(round, i), &props)])
            .expect("put");
    }
}

fn wait_all_dispatched(store: &MessageStore) {
    let end = store.stats().written_end;
    assert_eq!(
        store.wait_dispatched(end, Duration::from_secs(10)),
        end,
        "dispatch did not reach the log end"
    );
}

/// Holds a reader of T/0 from `from` between its entries and its records, runs `cut` (which
/// truncates and writes over the cut), then lets the reader go and returns what it read.
fn read_across(
    store: &Arc<MessageStore>,
    from: u64,
    cut: impl FnOnce(),
) -> Result<Vec<(u64, Vec<u8>)>, ReadError> {
    store.faults().stall_reads(true);
    let reader = {
        let store = store.clone();
        std::thread::spawn(move || {
            store
                .get_messages("T", 0, from, 32, usize::MAX, &TagFilter::All)
                .map(|result| {
                    let messages = result.messages.iter();
                    messages
                        .map(|m| {
                            let view = RecordView::parse(&m.bytes).expect("a verified record");
                            assert_eq!(view.queue_offset, m.queue_offset);
                            (m.queue_offset, body_of(m))
                        })
                        .collect()
                })
        })
    };
    let started = Instant::now();
    while store.faults().stalled_now() == 0 {
        assert!(
            started.elapsed() < STALL_WAIT_MAX,
            "the reader never reached the stall"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    cut();
    store.faults().stall_reads(false);
    reader.join().expect("the reader panicked")
}

#[test]
fn a_read_the_cut_overtook_reads_the_new_log_and_quarantines_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Arc::new(MessageStore::open(test_config(dir.path())).expect("open"));
    put_round(&store, 0, 40);
    wait_all_dispatched(&store);
    let old = read_all(&store, "T", 0);
    let cut = old[10].phys_offset;

    let read = read_across(&store, 20, || {
        store.truncate(cut).expect("truncate under the reader");
        put_round(&store, 1, 40);
        wait_all_dispatched(&store);
    })
    .expect("a read the cut overtook reads again, it is not damage");

    // Queue offsets 20.. now name round 1's messages 10.. (the cut kept offsets 0..10).
    assert!(!read.is_empty(), "the read returned nothing");
    for (queue_offset, got) in &read {
        let i = *queue_offset as usize - 10;
        assert_eq!(got, &body(1, i), "queue offset {queue_offset}");
    }
    let quarantined = store.quarantined();
    assert!(
        quarantined.ranges.is_empty(),
        "good records were quarantined: {quarantined:?}"
    );
    // Dispatch skipped nothing: every message of the queue is the one written last there.
    let t0 = read_all(&store, "T", 0);
    assert_eq!(t0.len(), 50);
    for (at, message) in t0.iter().enumerate() {
        let expected = if at < 10 {
            body(0, at)
        } else {
            body(1, at - 10)
        };
        assert_eq!(body_of(message), expected, "queue offset {at}");
    }
    // And the log can be cut again below the read's old offsets, then written and read.
    store.truncate(t0[15].phys_offset).expect("a second cut");
    put_round(&store, 2, 5);
    wait_all_dispatched(&store);
    assert_eq!(read_all(&store, "T", 0).len(), 20);
}

#[test]
fn a_read_over_real_damage_still_quarantines_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Arc::new(MessageStore::open(test_config(dir.path())).expect("open"));
    put_round(&store, 0, 20);
    wait_all_dispatched(&store);
    let old = read_all(&store, "T", 0);
    let damaged = &old[12];

    // No cut this time: a byte of record 12's body flips on disk under the reader.
    let error = read_across(&store, 10, || {
        let segment = dir.path().join("commitlog").join(format!("{:020}", 0));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&segment)
            .expect("open the segment");
        let at = damaged.phys_offset + damaged.bytes.len() as u64 - 20;
        std::os::unix::fs::FileExt::write_all_at(&file, b"#", at).expect("flip a byte");
    });
    let read = error.expect("the records before the damage");
    assert_eq!(
        read.iter().map(|(offset, _)| *offset).collect::<Vec<_>>(),
        [10, 11]
    );
    let next = store.get_messages("T", 0, 12, 32, usize::MAX, &TagFilter::All);
    assert!(
        matches!(
            next,
            Err(ReadError::Damaged {
                queue_offset: 12,
                ..
            })
        ),
        "{next:?}"
    );
    let quarantined = store.quarantined();
    assert_eq!(quarantined.ranges.len(), 1, "{quarantined:?}");
    assert_eq!(quarantined.ranges[0].phys_offset, damaged.phys_offset);
}
