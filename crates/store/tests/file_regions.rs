//! Reads for zero-copy sending (`get_message_regions`): the regions hold exactly the bytes
//! the copying read returns, under the same statuses and filters; a truncation after the check
//! makes a region refuse to be sent; a damaged head or tail is found like the copying read
//! finds it.

mod common;

use ferromq_protocol::Properties;
use ferromq_store::{GetStatus, MessageStore, ReadError, RegionError, TagFilter};

use common::{draft, read_all, test_config};

const TOPIC: &str = "regions";

/// Puts `count` messages on queue 0, tags alternating `a`, `b`, `c`, bodies of varying size.
fn fill(store: &MessageStore, count: usize) {
    for i in 0..count {
        let tag = ["a", "b", "c"][i % 3];
        let props = Properties::encode([("TAGS", tag)]);
        let body = vec![(i % 251) as u8; 200 + (i * 37) % 3000];
        store.put(&[draft(TOPIC, 0, &body, &props)]).unwrap();
    }
    read_all(store, TOPIC, 0);
}

fn bytes_of(regions: &[ferromq_store::StoredRegion]) -> Vec<Vec<u8>> {
    regions.iter().map(|m| m.region.read().unwrap()).collect()
}

#[test]
fn regions_hold_the_bytes_the_copying_read_returns() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(test_config(dir.path())).unwrap();
    fill(&store, 200);
    assert!(
        store.stats().written_end > 4 * 64 * 1024,
        "spans several segments"
    );
    for filter in [
        TagFilter::All,
        TagFilter::parse("a || c"),
        TagFilter::parse("b"),
    ] {
        let mut offset = 0;
        let mut pulls = 0;
        loop {
            let copied = store
                .get_messages(TOPIC, 0, offset, 13, 40_000, &filter)
                .unwrap();
            let regions = store
                .get_message_regions(TOPIC, 0, offset, 13, 40_000, &filter)
                .unwrap();
            assert_eq!(regions.status, copied.status);
            assert_eq!(regions.next_begin_offset, copied.next_begin_offset);
            assert_eq!(
                (regions.min_offset, regions.max_offset),
                (copied.min_offset, copied.max_offset)
            );
            let expected: Vec<Vec<u8>> = copied.messages.iter().map(|m| m.bytes.to_vec()).collect();
            assert_eq!(
                bytes_of(&regions.messages),
                expected,
                "{filter:?} at {offset}"
            );
            for (r, c) in regions.messages.iter().zip(&copied.messages) {
                assert_eq!(
                    (r.queue_offset, r.phys_offset),
                    (c.queue_offset, c.phys_offset)
                );
            }
            if copied.status == GetStatus::OffsetOverflowOne {
                break;
            }
            offset = copied.next_begin_offset;
            pulls += 1;
            assert!(pulls < 1_000, "no progress");
        }
    }
}

#[test]
fn adjacent_regions_merge_within_a_segment_only() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(test_config(dir.path())).unwrap();
    fill(&store, 120);
    let read = store
        .get_message_regions(TOPIC, 0, 0, 64, usize::MAX, &TagFilter::All)
        .unwrap();
    let mut merged: Vec<ferromq_store::FileRegion> = Vec::new();
    for message in &read.messages {
        let joined = merged
            .last_mut()
            .is_some_and(|last| last.try_merge(&message.region));
        if !joined {
            merged.push(message.region.clone());
        }
    }
    assert!(merged.len() > 1, "the batch crosses a segment end");
    assert!(
        merged.len() < read.messages.len() / 4,
        "records of a segment merge"
    );
    let joined: Vec<u8> = merged.iter().flat_map(|r| r.read().unwrap()).collect();
    let expected: Vec<u8> = bytes_of(&read.messages).concat();
    assert_eq!(joined, expected);
    // Records filtered out in between leave a gap: no merge across it.
    let filtered = store
        .get_message_regions(TOPIC, 0, 0, 8, usize::MAX, &TagFilter::parse("a"))
        .unwrap();
    let (first, second) = (&filtered.messages[0].region, &filtered.messages[1].region);
    assert!(!first.clone().try_merge(second));
}

#[test]
fn a_truncation_after_the_check_stops_the_region() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(test_config(dir.path())).unwrap();
    fill(&store, 120);
    let read = store
        .get_message_regions(TOPIC, 0, 0, 120, usize::MAX, &TagFilter::All)
        .unwrap();
    let last = read.messages.last().unwrap();
    let cut_at = read.messages[read.messages.len() - 3].phys_offset;
    let last_segment = last.region.segment().start;
    for message in &read.messages {
        message.region.check_intact().unwrap();
    }
    store.truncate(cut_at).unwrap();
    for message in &read.messages {
        let result = message.region.check_intact();
        if message.region.segment().start == last_segment {
            // Every region of the cut segment: even bytes below the cut were checked
            // before a truncation began, and are not vouched for any more.
            assert!(
                matches!(result, Err(RegionError::Truncated { .. })),
                "{result:?}"
            );
            assert!(message.region.read().is_err());
        } else {
            result.unwrap();
        }
    }
    // A fresh read after the cut hands out valid regions again, ending at the cut.
    let again = store
        .get_message_regions(TOPIC, 0, 0, 120, usize::MAX, &TagFilter::All)
        .unwrap();
    assert_eq!(again.messages.len(), read.messages.len() - 3);
    for message in &again.messages {
        message.region.check_intact().unwrap();
    }
}

#[test]
fn a_damaged_head_is_found_without_reading_the_body() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(test_config(dir.path())).unwrap();
    fill(&store, 10);
    let read = store
        .get_message_regions(TOPIC, 0, 0, 10, usize::MAX, &TagFilter::All)
        .unwrap();
    let victim = &read.messages[4];
    // Flip a byte of its QUEUEOFFSET field in the file.
    let path = victim.region.segment().path().to_path_buf();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[victim.region.pos() as usize + 27] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    let again = store
        .get_message_regions(TOPIC, 0, 0, 10, usize::MAX, &TagFilter::All)
        .unwrap();
    assert_eq!(
        again.messages.len(),
        4,
        "the good records before the damage"
    );
    let error = store
        .get_message_regions(TOPIC, 0, 4, 10, usize::MAX, &TagFilter::All)
        .unwrap_err();
    assert!(
        matches!(
            error,
            ReadError::Damaged {
                queue_offset: 4,
                ..
            }
        ),
        "{error}"
    );
}
