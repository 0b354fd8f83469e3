//! One record size limit (`StoreConfig::record_size_max`) for the writer, the recovery
//! scanner, the dispatcher and the readers: a record of the largest size a send may produce
//! is acknowledged only if it also recovers after a crash.
//!
//! Regression: a 4 MiB body (or 4 MiB - 1000 with 5 KB of properties) was acknowledged, and
//! after a kill -9 recovery read it in 4 MiB chunks, called it torn ("needs 4194469 bytes,
//! 4194304 available") and cut the log there, losing it and every acknowledged message after.
//!
//! A crash is imaged by abandoning the store (its threads stop, nothing more is written: the
//! abort marker stays and no checkpoint is taken past the records) and copying its files;
//! after `SyncFlush` puts everything acknowledged is in them, exactly what a kill -9 leaves.
//! Copying while the store runs would not be a crash: its threads (the zeroing one under
//! `SyncFlush`) go on writing between the copies of two files.

mod common;

use std::path::Path;

use ferromq_protocol::{record_size_max, Properties};
use ferromq_store::{AppendError, MessageStore, StoreConfig, StoreError};
use proptest::prelude::*;

use common::{body_of, draft, read_all, test_config};

const MIB: usize = 1024 * 1024;

/// The default `maxMessageSize` (4 MiB) on a segment large enough for it.
fn big_config(root: &Path) -> StoreConfig {
    let mut config = test_config(root);
    config.segment_size_bytes = 64 * MIB as u64;
    config.max_message_size_bytes = 4 * MIB;
    config
}

/// Copies every file of the store at `from` into `to`, as a kill -9 would leave them.
fn crash_image(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create image dir");
    for item in std::fs::read_dir(from).expect("list store") {
        let item = item.expect("dir entry");
        let target = to.join(item.file_name());
        if item.file_type().expect("file type").is_dir() {
            crash_image(&item.path(), &target);
        } else {
            std::fs::copy(item.path(), &target).expect("copy store file");
        }
    }
}

fn body(i: usize, len: usize) -> Vec<u8> {
    let mut body = format!("message {i} ").into_bytes();
    body.resize(len, b'a' + (i % 26) as u8);
    body.truncate(len);
    body
}

/// Properties of about `len` bytes (one `P` property plus its separators).
fn properties_of(len: usize) -> Vec<u8> {
    if len == 0 {
        return Vec::new();
    }
    Properties::encode([("P", "v".repeat(len.saturating_sub(4)).as_str())])
}

fn put(store: &MessageStore, i: usize, body_len: usize, properties_len: usize) {
    let body = body(i, body_len);
    let properties = properties_of(properties_len);
    store
        .put(&[draft("Big", 0, &body, &properties)])
        .unwrap_or_else(|e| panic!("put {i} ({body_len} B body, {properties_len} B props): {e}"));
}

/// Puts the records, images a crash, reopens the image and checks every record is back.
fn assert_recovers(config: &StoreConfig, image: &Path, records: &[(usize, usize)]) {
    let store = MessageStore::open(config.clone()).expect("open");
    for (i, (body_len, properties_len)) in records.iter().enumerate() {
        put(&store, i, *body_len, *properties_len);
    }
    store.abandon();
    crash_image(&config.root_dir, image);
    let mut reopened = config.clone();
    reopened.root_dir = image.to_path_buf();
    let store = MessageStore::open(reopened).expect("recovery opens the crash image");
    let report = store.recovery_report().clone();
    assert!(!report.clean_shutdown, "the image is a crash: {report:?}");
    assert_eq!(report.cut, None, "nothing acknowledged is cut: {report:?}");
    assert!(report.quarantined.is_empty(), "{report:?}");
    let messages = read_all(&store, "Big", 0);
    assert_eq!(messages.len(), records.len(), "{report:?}");
    for (i, (message, (body_len, _))) in messages.iter().zip(records).enumerate() {
        assert_eq!(body_of(message), body(i, *body_len), "message {i}");
    }
}

/// The repro: 1 KB, a 4 MiB body, 200 small messages; crash; all 202 come back.
#[test]
fn four_mib_body_recovers_after_a_crash_with_everything_after_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let image = tempfile::tempdir().expect("image dir");
    let config = big_config(&dir.path().join("store"));
    let mut records = vec![(1024, 0), (4 * MIB, 0)];
    records.extend((0..200).map(|_| (100, 0)));
    assert_recovers(&config, &image.path().join("store"), &records);
}

/// 4 MiB - 1000 of body with 5 KB of properties: the record is larger than 4 MiB.
#[test]
fn body_under_the_limit_with_large_properties_recovers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let image = tempfile::tempdir().expect("image dir");
    let config = big_config(&dir.path().join("store"));
    let records = [(1024, 0), (4 * MIB - 1000, 5 * 1024), (10, 0)];
    assert_recovers(&config, &image.path().join("store"), &records);
}

/// Exactly at the boundary: one byte under, at, and (refused, never written) one over the
/// body limit, the largest with ~32 KB of properties too; every accepted one recovers.
#[test]
fn records_at_the_size_boundary_recover_and_one_over_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let image = tempfile::tempdir().expect("image dir");
    let config = big_config(&dir.path().join("store"));
    let max = config.max_message_size_bytes;
    {
        let store = MessageStore::open(config.clone()).expect("open");
        let over = body(0, max + 1);
        let error = store
            .put(&[draft("Big", 0, &over, &[])])
            .expect_err("one byte over maxMessageSize is refused");
        assert!(
            matches!(
                error,
                StoreError::Append(AppendError::MessageTooLarge { size, max: limit })
                    if size == max + 1 && limit == max
            ),
            "{error:?}"
        );
        assert_eq!(
            store.stats().written_end,
            0,
            "nothing written for a refused record"
        );
        store.close().expect("close");
    }
    let records = [(max - 1, 0), (max, 0), (max, 32_000), (1, 0)];
    assert_recovers(&config, &image.path().join("store"), &records);
    // The largest record a send may produce stays within the one limit.
    assert!(max + 32_000 + 200 <= config.record_size_max());
    assert_eq!(config.record_size_max(), record_size_max(max));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Any mix of sizes up to the limit, including records larger than the scanner's 4 MiB
    /// chunk and ones straddling chunk borders, recovers whole after a crash.
    #[test]
    fn any_record_sizes_up_to_the_limit_recover(
        sizes in prop::collection::vec(
            (prop_oneof![0usize..4096, (4 * MIB - 70_000)..=(6 * MIB)], 0usize..32_000),
            1..5,
        )
    ) {
        let dir = tempfile::tempdir().expect("temp dir");
        let image = tempfile::tempdir().expect("image dir");
        let mut config = big_config(&dir.path().join("store"));
        config.max_message_size_bytes = 6 * MIB;
        assert_recovers(&config, &image.path().join("store"), &sizes);
    }
}

/// `maxMessageSize = 0` can hold no message: refused when the store opens.
#[test]
fn zero_max_message_size_is_refused_at_open() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = test_config(dir.path());
    config.max_message_size_bytes = 0;
    let error = MessageStore::open(config).expect_err("maxMessageSize = 0 is refused");
    assert!(error.to_string().contains("maxMessageSize"), "{error}");
}
