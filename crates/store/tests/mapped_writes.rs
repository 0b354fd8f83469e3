//! Mapped writes under ASYNC_FLUSH (`commitlog::mapping`): an acknowledged record is in the
//! segment file (another descriptor reads it) before any flush, a crash keeps every
//! acknowledged record and reports the preallocated zeros as space, not a cut; truncations,
//! segment rolls, large commits and a failed extension all keep the log whole.

mod common;

use std::path::Path;

use ferromq_store::commitlog::preallocation::RECORD_FILE;
use ferromq_store::{FlushDiskType, MessageStore, StoreConfig};

use common::{
    bodies_in_t0, draft, numbered, numbered_body, put_numbered, segment_files, test_config,
};

/// Segments large enough for one extension step (32 MiB) and room after it.
const SEGMENT_BYTES: u64 = 64 << 20;

/// ASYNC_FLUSH with no background flush during a test: only the commits put bytes in the
/// files.
fn config(root: &Path) -> StoreConfig {
    let mut config = test_config(root);
    config.flush_disk_type = FlushDiskType::AsyncFlush;
    config.flush_interval_ms = 3_600_000;
    config.segment_size_bytes = SEGMENT_BYTES;
    config
}

fn open(config: &StoreConfig) -> MessageStore {
    MessageStore::open(config.clone()).expect("open")
}

fn body(i: usize) -> String {
    numbered_body(i)
}

fn put_messages(store: &MessageStore, from: usize, to: usize) -> u64 {
    put_numbered(store, from..to)
}

fn bodies(store: &MessageStore) -> Vec<String> {
    bodies_in_t0(store)
}

fn expected(range: std::ops::Range<usize>) -> Vec<String> {
    numbered(range)
}

/// Every segment file's length, in log order.
fn file_lens(root: &Path) -> Vec<u64> {
    segment_files(root)
        .iter()
        .map(|(_, path)| std::fs::metadata(path).expect("stat").len())
        .collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn acknowledged_records_are_in_the_file_before_any_flush_and_survive_a_crash() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = config(dir.path());
    let store = open(&config);
    let end = put_messages(&store, 0, 200);
    assert_eq!(store.stats().committed_end, end);
    let (_, path) = segment_files(dir.path()).pop().expect("a segment");
    // Another descriptor reads the page cache the map copied into.
    let bytes = std::fs::read(&path).expect("read the segment");
    assert!(
        bytes.len() as u64 > end,
        "mapped writes go into preallocated space: file {} bytes, log end {end}",
        bytes.len()
    );
    for i in [0, 99, 199] {
        assert!(
            contains(&bytes[..end as usize], body(i).as_bytes()),
            "message {i}"
        );
    }
    assert!(
        bytes[end as usize..].iter().all(|&b| b == 0),
        "space reads as zeros"
    );
    assert!(dir.path().join(RECORD_FILE).exists());
    store.abandon();

    let store = open(&config);
    let report = store.recovery_report().clone();
    assert!(!report.clean_shutdown);
    assert_eq!(report.cut, None, "space is not a cut: {report:?}");
    assert!(report.preallocated_trimmed > 0, "{report:?}");
    assert_eq!(report.log_end, end);
    assert_eq!(bodies(&store), expected(0..200));
    // The store goes on writing through a new map after recovery.
    let end = put_messages(&store, 200, 300);
    store.close().expect("close");
    assert_eq!(
        file_lens(dir.path()),
        vec![end],
        "a clean close trims the space"
    );
    let store = open(&config);
    assert_eq!(bodies(&store), expected(0..300));
}

#[test]
fn plain_writes_when_mapped_writes_are_off() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = config(dir.path());
    config.mapped_writes = false;
    let store = open(&config);
    let end = put_messages(&store, 0, 50);
    assert_eq!(
        file_lens(dir.path()),
        vec![end],
        "no space without mapped writes"
    );
    assert!(!dir.path().join(RECORD_FILE).exists());
    store.abandon();
    let store = open(&config);
    assert_eq!(store.recovery_report().cut, None);
    assert_eq!(bodies(&store), expected(0..50));
}

#[test]
fn a_truncation_then_appends_rewrite_the_cut_span_through_the_map() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = config(dir.path());
    let store = open(&config);
    let keep = put_messages(&store, 0, 100);
    put_messages(&store, 100, 200);
    store.truncate(keep).expect("truncate");
    assert_eq!(store.stats().written_end, keep);
    assert_eq!(bodies(&store), expected(0..100));
    // The cut lowered the map's room to the file's new end: the next commits extend the
    // file again before copying, so the bytes after the cut are the new records.
    let end = put_messages(&store, 1_000, 1_050);
    let mut want = expected(0..100);
    want.extend(expected(1_000..1_050));
    assert_eq!(bodies(&store), want);
    store.abandon();

    let store = open(&config);
    assert_eq!(store.recovery_report().cut, None);
    assert_eq!(store.stats().written_end, end);
    assert_eq!(bodies(&store), want);
}

#[test]
fn full_segments_end_at_their_data_and_large_commits_share_the_space() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = config(dir.path());
    config.segment_size_bytes = 256 * 1024;
    config.max_message_size_bytes = 64 * 1024;
    let store = open(&config);
    let mut sent = Vec::new();
    for i in 0..40 {
        // Alternate small records (copied through the map) with 40 KiB ones (written
        // with pwrite, larger than a mapped copy may be), across several segment rolls.
        let text = if i % 2 == 0 {
            body(i)
        } else {
            format!("{}{}", body(i), "x".repeat(40 * 1024))
        };
        store
            .put(&[draft("T", 0, text.as_bytes(), b"")])
            .expect("put");
        sent.push(text);
    }
    let lens = file_lens(dir.path());
    assert!(lens.len() >= 4, "several segments: {lens:?}");
    for len in &lens[..lens.len() - 1] {
        assert!(*len <= 256 * 1024, "{lens:?}");
    }
    store.abandon();
    let store = open(&config);
    assert_eq!(store.recovery_report().cut, None);
    assert_eq!(bodies(&store), sent);
}

#[test]
fn a_failed_extension_falls_back_to_plain_writes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = config(dir.path());
    let store = open(&config);
    store.faults().fail_preallocations(1_000);
    let end = put_messages(&store, 0, 100);
    assert_eq!(store.stats().preallocation_failures, 1, "once per step");
    assert_eq!(
        file_lens(dir.path()),
        vec![end],
        "no space: the commits appended"
    );
    assert!(store.stats().poisoned.is_none());
    store.abandon();
    let store = open(&config);
    assert_eq!(store.recovery_report().cut, None);
    assert_eq!(bodies(&store), expected(0..100));
}

/// The record covers the active segment and the next ones, and half way through each
/// segment it moves to it: the commit that rolls the log writes no record (its fsync waited
/// behind the flusher's writeback), and a crash after rolls reports the new segment's zeros
/// as space.
#[test]
fn a_roll_finds_its_segment_recorded_ahead_and_a_crash_after_it_reports_space() {
    use ferromq_store::commitlog::preallocation::{read_record, Allocation, MAPPED_COVER_SEGMENTS};
    const SEGMENT: u64 = 256 * 1024;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = config(dir.path());
    config.segment_size_bytes = SEGMENT;
    let store = open(&config);
    let record = || read_record(dir.path()).expect("read the record");
    let covering = |segment: u64| Allocation {
        segment_start: segment * SEGMENT,
        len: MAPPED_COVER_SEGMENTS * SEGMENT,
    };
    let text = |i: usize| format!("{}{}", body(i), "y".repeat(2048));
    let mut sent = Vec::new();
    let put_until_segment = |segment: u64, sent: &mut Vec<String>| {
        while store.stats().written_end < segment * SEGMENT + 4096 {
            let next = text(sent.len());
            store
                .put(&[draft("T", 0, next.as_bytes(), b"")])
                .expect("put");
            sent.push(next);
        }
    };
    put_until_segment(0, &mut sent);
    assert_eq!(record(), Some(covering(0)), "the first extension's record");
    // Half way through segment 0 the preparing thread runs (`advance_cover`, then the next
    // file): let it finish before the roll. A thread late past the roll would find segment 1
    // the last and record it, which is right, but not what this step checks.
    while store.stats().written_end < SEGMENT / 2 + 4096 {
        let next = text(sent.len());
        store
            .put(&[draft("T", 0, next.as_bytes(), b"")])
            .expect("put");
        sent.push(next);
    }
    let prepared = dir
        .path()
        .join(ferromq_store::commitlog::next_segment::NEXT_FILE);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !prepared.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "segment 1's file prepared half way through segment 0"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    put_until_segment(1, &mut sent);
    assert_eq!(record(), Some(covering(0)), "the roll wrote no record");
    assert_eq!(file_lens(dir.path()).len(), 2);

    // Half way through the new segment the record moves to it, off the committer's path.
    while store.stats().written_end < SEGMENT + SEGMENT / 2 + 4096 {
        let next = text(sent.len());
        store
            .put(&[draft("T", 0, next.as_bytes(), b"")])
            .expect("put");
        sent.push(next);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while record() != Some(covering(1)) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(
        record(),
        Some(covering(1)),
        "the record moved ahead of the roll"
    );
    put_until_segment(2, &mut sent);
    assert_eq!(
        record(),
        Some(covering(1)),
        "the second roll wrote none either"
    );
    let lens = file_lens(dir.path());
    assert!(lens[2] > 4096, "the new segment has space: {lens:?}");
    store.abandon();

    let store = open(&config);
    let report = store.recovery_report().clone();
    assert_eq!(report.cut, None, "space is not a cut: {report:?}");
    assert!(report.preallocated_trimmed > 0, "{report:?}");
    assert_eq!(bodies(&store), sent);
}

/// Half way through a segment the next segment's file is prepared, its blocks reserved, and
/// the roll takes it, so the committer's extensions of it allocate nothing; the prepared
/// file never counts as a segment, and a crash's leftover one and a clean close's are
/// deleted.
#[test]
fn a_roll_takes_a_segment_file_prepared_ahead_with_its_blocks_reserved() {
    use ferromq_store::commitlog::next_segment::NEXT_FILE;
    use std::os::unix::fs::MetadataExt;
    const SEGMENT: u64 = 256 * 1024;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = config(dir.path());
    config.segment_size_bytes = SEGMENT;
    let prepared = dir.path().join(NEXT_FILE);
    let blocks_of = |path: &Path| std::fs::metadata(path).expect("metadata").blocks() * 512;
    let wait_prepared = || {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !(prepared.exists() && blocks_of(&prepared) >= SEGMENT) {
            assert!(std::time::Instant::now() < deadline, "nothing prepared");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    };
    let store = open(&config);
    let text = |i: usize| format!("{}{}", body(i), "z".repeat(2048));
    let mut sent = Vec::new();
    let put_until = |store: &MessageStore, end: u64, sent: &mut Vec<String>| {
        while store.stats().written_end < end {
            let next = text(sent.len());
            store
                .put(&[draft("T", 0, next.as_bytes(), b"")])
                .expect("put");
            sent.push(next);
        }
    };
    // Half way through segment 0 the file of segment 1 is prepared.
    put_until(&store, SEGMENT / 2 + 4096, &mut sent);
    wait_prepared();
    let prepared_meta = std::fs::metadata(&prepared).expect("meta");
    assert_eq!(prepared_meta.len(), 0, "reads as empty");
    put_until(&store, SEGMENT + 4096, &mut sent);
    let (start, path) = segment_files(dir.path()).pop().expect("segment");
    assert_eq!(start, SEGMENT);
    assert_eq!(
        std::fs::metadata(&path).expect("meta").ino(),
        prepared_meta.ino(),
        "the new segment is the prepared file"
    );
    assert!(blocks_of(&path) >= SEGMENT, "{} bytes", blocks_of(&path));
    put_until(&store, SEGMENT + SEGMENT / 2 + 4096, &mut sent);
    wait_prepared();
    store.abandon();

    assert!(prepared.exists(), "a crash leaves the prepared file");
    let store = open(&config);
    assert!(!prepared.exists(), "deleted at open");
    assert_eq!(store.recovery_report().cut, None);
    assert_eq!(bodies(&store), sent);
    put_until(&store, 2 * SEGMENT + SEGMENT / 2 + 4096, &mut sent);
    wait_prepared();
    store.close().expect("close");
    assert!(!prepared.exists(), "deleted at a clean close");
    let store = open(&config);
    assert_eq!(bodies(&store), sent);
}

/// The active segment is readied at open as the next one is before a roll: a fresh store's
/// first segment is a prepared file with its blocks reserved, a reopened store's active
/// segment gets its blocks reserved past its length (which a crash never sees), and a clean
/// close frees what stayed unused.
#[test]
fn the_active_segments_blocks_are_reserved_at_open_and_freed_at_a_clean_close() {
    use ferromq_store::commitlog::next_segment::NEXT_FILE;
    use std::os::unix::fs::MetadataExt;
    const SEGMENT: u64 = 1 << 20;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = config(dir.path());
    config.segment_size_bytes = SEGMENT;
    let prepared = dir.path().join(NEXT_FILE);
    let blocks_of = |path: &Path| std::fs::metadata(path).expect("metadata").blocks() * 512;

    let store = open(&config);
    assert!(
        segment_files(dir.path()).is_empty(),
        "no segment before a write"
    );
    assert!(
        blocks_of(&prepared) >= SEGMENT,
        "the first segment prepared"
    );
    let inode = std::fs::metadata(&prepared).expect("meta").ino();
    let end = put_messages(&store, 0, 100);
    let (start, path) = segment_files(dir.path()).pop().expect("segment");
    assert_eq!(start, 0);
    assert_eq!(std::fs::metadata(&path).expect("meta").ino(), inode);
    store.abandon();

    let store = open(&config);
    assert_eq!(store.recovery_report().cut, None);
    assert!(!prepared.exists(), "the active segment has a file");
    let len = std::fs::metadata(&path).expect("meta").len();
    assert!(len < SEGMENT, "{len}");
    assert!(blocks_of(&path) >= SEGMENT, "{} bytes", blocks_of(&path));
    let end = end.max(put_messages(&store, 100, 150));
    store.abandon();

    let store = open(&config);
    assert_eq!(
        store.recovery_report().cut,
        None,
        "a reservation is no data"
    );
    assert_eq!(bodies(&store), expected(0..150));
    store.close().expect("close");
    assert_eq!(std::fs::metadata(&path).expect("meta").len(), end);
    assert!(
        blocks_of(&path) < end + 64 * 1024,
        "the unused blocks freed: {} bytes for {end}",
        blocks_of(&path)
    );
}

/// Bodies of about 4 KiB, so a few thousand records cross several 1 MiB map windows.
fn large_body(i: usize) -> String {
    format!("{} {}", numbered_body(i), "x".repeat(4_000))
}

fn put_large(store: &MessageStore, range: std::ops::Range<usize>) {
    for i in range {
        store
            .put(&[draft("T", 0, large_body(i).as_bytes(), b"")])
            .expect("put");
    }
}

/// The populating thread (`commitlog::populate_ahead`) populates windows of the map ahead of
/// the copies, the records are whole after a crash, and with the thread off the committer
/// populates every window itself.
#[test]
fn the_map_is_populated_ahead_by_a_thread_and_by_the_committer_without_it() {
    const RECORDS: usize = 1_600; // about 6.5 MiB: six windows and more
    for populate_ahead in [true, false] {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = config(dir.path());
        config.populate_ahead = populate_ahead;
        let store = open(&config);
        put_large(&store, 0..RECORDS);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let stats = loop {
            let stats = store.stats();
            if !populate_ahead || stats.map_windows_populated_ahead >= 1 {
                break stats;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the thread populated no window"
            );
            std::thread::sleep(std::time::Duration::from_millis(2));
        };
        let (ahead, inline) = (
            stats.map_windows_populated_ahead,
            stats.map_windows_populated_inline,
        );
        if populate_ahead {
            assert!(ahead >= 1, "populated ahead: {ahead}, inline: {inline}");
        } else {
            assert_eq!((ahead, inline), (0, 0), "no thread, nothing counted");
        }
        store.abandon();
        let store = open(&config);
        let want: Vec<String> = (0..RECORDS).map(large_body).collect();
        assert_eq!(bodies(&store), want, "populate_ahead = {populate_ahead}");
        store.close().expect("close");
    }
}
