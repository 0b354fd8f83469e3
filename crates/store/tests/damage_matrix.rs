//! The corruption matrix: {flipped byte, zeroed 4 KiB block, truncated file} × {before, after
//! the checkpoint recovery uses} × {clean, crashed shutdown}. For each cell: what the
//! read-only check reports (and that it changes no file), what recovery reports, which
//! records a reader gets (the others named as damaged), and where the group's offset is.
//!
//! Policy under test (store::scan): bad bytes with nothing valid after them are a torn tail
//! and are cut; bad bytes with valid records after them are quarantined and nothing valid is
//! cut. Damage before the checkpoint is not rescanned by a start: a read finds it (and names
//! it), and a full check (`CheckScope::Full`) reports it.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ferromq_protocol::Properties;
use ferromq_store::offsets::Verdict;
use ferromq_store::{check_store, CheckReport, CheckScope, MessageStore, Placement, StoreConfig};

use common::{
    checkpoint_files, draft, flip_bit, locate, read_with_damage, set_len, test_config, Seen,
};

const MESSAGES: usize = 30;
/// The checkpoint kept is taken after this many messages.
const CHECKPOINT_AFTER: usize = 15;
/// Damaged message "before the checkpoint" and "after" it.
const BEFORE: usize = 5;
const AFTER: usize = 22;
/// Commits of group G: to 5 after message 9, to 20 after message 28.
const COMMITS: [(usize, u64); 2] = [(9, 5), (28, 20)];
const ZERO_BLOCK: u64 = 4096;
/// Offset of BODY inside a record with IPv4 hosts.
const BODY_AT: u64 = 88;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Damage {
    Flip,
    ZeroBlock,
    Truncate,
}

fn body(i: usize) -> Vec<u8> {
    let mut body = format!("message {i} ").into_bytes();
    body.resize(900 + i * 7, b'a' + (i % 26) as u8);
    body
}

fn commit(store: &MessageStore, offset: u64) {
    let command = common::commit_t0("matrix", offset);
    let outcome = store.commit_offsets(&command).expect("commit");
    assert_eq!(outcome.verdicts, vec![Verdict::Applied]);
}

/// Writes the messages and commits, checkpointing after `CHECKPOINT_AFTER`; returns the
/// placements and the checkpoint position. Only that checkpoint is kept, so damage past it
/// is what a crash before the next checkpoint would leave for recovery to scan.
fn build(config: &StoreConfig) -> (Vec<Placement>, u64) {
    let store = MessageStore::open(config.clone()).expect("open");
    let mut placements = Vec::new();
    let mut checkpoint = 0;
    let properties = Properties::encode([("TAGS", "a")]);
    for i in 0..MESSAGES {
        let body = body(i);
        let receipt = store
            .put(&[draft("T", 0, &body, &properties)])
            .expect("put");
        placements.push(receipt.placements[0].clone());
        if let Some((_, offset)) = COMMITS.iter().find(|(after, _)| *after == i) {
            commit(&store, *offset);
        }
        if i + 1 == CHECKPOINT_AFTER {
            let end = store.stats().written_end;
            assert_eq!(store.wait_dispatched(end, Duration::from_secs(5)), end);
            store.checkpoint().expect("checkpoint");
            checkpoint = store.stats().checkpoint_position;
            assert_eq!(checkpoint, end);
        }
    }
    store.close().expect("close");
    for (position, path) in checkpoint_files(&config.root_dir) {
        if position != checkpoint {
            std::fs::remove_file(path).expect("remove checkpoint");
        }
    }
    (placements, checkpoint)
}

/// Damages message `target`; returns the messages whose bytes the damage touched.
fn damage(
    config: &StoreConfig,
    placements: &[Placement],
    damage: Damage,
    target: usize,
) -> Vec<usize> {
    let start = placements[target].phys_offset;
    let (segment, at) = locate(&config.root_dir, config.segment_size_bytes, start);
    match damage {
        Damage::Flip => {
            flip_bit(&segment, at + BODY_AT + 3, 2);
            vec![target]
        }
        Damage::ZeroBlock => {
            let from = at + 10;
            let mut bytes = std::fs::read(&segment).expect("read segment");
            for byte in &mut bytes[from as usize..(from + ZERO_BLOCK) as usize] {
                *byte = 0;
            }
            std::fs::write(&segment, bytes).expect("write segment");
            let zero_end = start + 10 + ZERO_BLOCK;
            (target..MESSAGES)
                .filter(|i| placements[*i].phys_offset < zero_end)
                .collect()
        }
        Damage::Truncate => {
            set_len(&segment, at + 10);
            (target..MESSAGES).collect()
        }
    }
}

/// Every file under `root` with its bytes.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for item in std::fs::read_dir(&dir).expect("list") {
            let path = item.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                out.insert(path.clone(), std::fs::read(&path).expect("read"));
            }
        }
    }
    out
}

fn check(config: &StoreConfig, scope: CheckScope) -> CheckReport {
    let before = snapshot(&config.root_dir);
    let report = check_store(config, scope).expect("check");
    assert!(
        before == snapshot(&config.root_dir),
        "the check changed a file"
    );
    report
}

fn expected_seen(lost: &[usize], survivors: usize) -> Vec<Seen> {
    (0..survivors)
        .map(|i| {
            if lost.contains(&i) {
                Err(i as u64)
            } else {
                Ok(body(i))
            }
        })
        .collect()
}

fn run_cell(kind: Damage, target: usize, crashed: bool) {
    let cell = format!("{kind:?} × message {target} × crashed={crashed}");
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(dir.path());
    let (placements, checkpoint) = build(&config);
    let lost = damage(&config, &placements, kind, target);
    if crashed {
        std::fs::write(dir.path().join("abort"), b"running\n").expect("abort marker");
    }
    let after_checkpoint = placements[target].phys_offset >= checkpoint;
    let damaged_start = placements[target].phys_offset;
    let resync = lost
        .last()
        .map(|last| placements.get(last + 1).map(|p| p.phys_offset));

    let quick = check(&config, CheckScope::Recovery);
    let full = check(&config, CheckScope::Full);
    assert_eq!(quick.clean_shutdown, !crashed, "{cell}");
    assert!(
        !full.is_clean(),
        "{cell}: the full check sees the damage: {full:?}"
    );
    for report in [&quick, &full] {
        assert!(
            report.checkpoints_rejected.is_empty() || kind == Damage::Truncate,
            "{cell}"
        );
    }

    let store = MessageStore::open(config.clone()).expect("recovery opens");
    let report = store.recovery_report().clone();
    assert_eq!(report.clean_shutdown, !crashed, "{cell}");
    match kind {
        Damage::Flip | Damage::ZeroBlock => {
            let range_end = resync.flatten().expect("a valid record follows");
            let expected_range = (damaged_start, range_end - damaged_start);
            assert_eq!(report.cut, None, "{cell}: nothing valid is cut: {report:?}");
            // Both checks name the range recovery quarantines (the quick one only when
            // recovery scans it, i.e. after the checkpoint).
            let ranges = |r: &CheckReport| {
                r.scan
                    .damaged
                    .iter()
                    .map(|d| (d.phys_offset, d.len))
                    .collect::<Vec<_>>()
            };
            assert_eq!(ranges(&full), vec![expected_range], "{cell}");
            if after_checkpoint {
                assert_eq!(ranges(&quick), vec![expected_range], "{cell}");
                let quarantined: Vec<_> = report
                    .quarantined
                    .iter()
                    .map(|d| (d.phys_offset, d.len))
                    .collect();
                assert_eq!(quarantined, vec![expected_range], "{cell}");
            } else {
                assert!(quick.is_clean() || crashed, "{cell}: {quick:?}");
                assert!(
                    report.quarantined.is_empty(),
                    "{cell}: not rescanned at start"
                );
            }
            assert_eq!(
                read_with_damage(&store, "T", 0),
                expected_seen(&lost, MESSAGES),
                "{cell}"
            );
            assert!(
                store.quarantined().total >= 1,
                "{cell}: reads quarantine what they find"
            );
            assert_eq!(
                store
                    .consumer_offset("G", "T", 0)
                    .expect("offset view")
                    .map(|o| o.offset),
                Some(20),
                "{cell}"
            );
        }
        Damage::Truncate => {
            let cut = report.cut.clone().expect("the torn tail is cut");
            assert_eq!(cut.phys_offset, damaged_start, "{cell}: {cut:?}");
            assert_eq!(cut.bytes_cut, 10, "{cell}");
            assert_eq!(quick.would_cut, Some(cut.clone()), "{cell}");
            assert_eq!(full.would_cut, Some(cut), "{cell}");
            assert!(report.quarantined.is_empty(), "{cell}");
            if !after_checkpoint {
                assert_eq!(
                    report.checkpoint_position, None,
                    "{cell}: checkpoint past the end"
                );
                assert_eq!(report.checkpoints_rejected.len(), 1, "{cell}");
            }
            assert_eq!(
                read_with_damage(&store, "T", 0),
                expected_seen(&[], target),
                "{cell}"
            );
            let offset = COMMITS
                .iter()
                .rfind(|(after, _)| *after < target)
                .map(|(_, offset)| *offset);
            assert_eq!(
                store
                    .consumer_offset("G", "T", 0)
                    .expect("offset view")
                    .map(|o| o.offset),
                offset,
                "{cell}"
            );
        }
    }
    store.close().expect("close");
}

#[test]
fn flipped_byte_before_and_after_the_checkpoint() {
    for crashed in [false, true] {
        run_cell(Damage::Flip, BEFORE, crashed);
        run_cell(Damage::Flip, AFTER, crashed);
    }
}

#[test]
fn zeroed_block_before_and_after_the_checkpoint() {
    for crashed in [false, true] {
        run_cell(Damage::ZeroBlock, BEFORE, crashed);
        run_cell(Damage::ZeroBlock, AFTER, crashed);
    }
}

#[test]
fn truncated_log_before_and_after_the_checkpoint() {
    for crashed in [false, true] {
        run_cell(Damage::Truncate, BEFORE, crashed);
        run_cell(Damage::Truncate, AFTER, crashed);
    }
}

/// A check refuses a store that a running broker holds, rather than reading files being
/// written; once the broker is gone it reads the same store.
#[test]
fn check_refuses_a_store_in_use() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = test_config(dir.path());
    let store = MessageStore::open(config.clone()).expect("open");
    let error = check_store(&config, CheckScope::Full).expect_err("the store is in use");
    assert!(
        matches!(error, ferromq_store::OpenError::Locked(_)),
        "{error:?}"
    );
    store.close().expect("close");
    let report = check(&config, CheckScope::Full);
    assert!(report.is_clean(), "{report:?}");
}

/// More damaged ranges than the quarantine tracks: recovery refuses to open (naming the
/// check to run) instead of cutting the acknowledged records after them, and the read-only
/// check says where it stopped; no file changes.
#[test]
fn more_damage_than_the_store_tracks_is_refused_not_cut() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = test_config(dir.path());
    config.segment_size_bytes = 8 << 20;
    let limit = ferromq_store::scan::DAMAGED_RANGES_MAX;
    let store = MessageStore::open(config.clone()).expect("open");
    let mut placements = Vec::new();
    for i in 0..(2 * limit + 4) {
        let body = format!("m{i}");
        let receipt = store
            .put(&[draft("T", 0, body.as_bytes(), &[])])
            .expect("put");
        placements.push(receipt.placements[0].phys_offset);
    }
    store.close().expect("close");
    for (_, path) in checkpoint_files(dir.path()) {
        std::fs::remove_file(path).expect("remove checkpoint");
    }
    let (segment, _) = locate(dir.path(), config.segment_size_bytes, 0);
    let mut bytes = std::fs::read(&segment).expect("read");
    // Every other record damaged (its body's first byte), each followed by a good one.
    for phys in placements.iter().step_by(2).take(limit + 1) {
        bytes[(*phys + BODY_AT) as usize] ^= 0x01;
    }
    std::fs::write(&segment, bytes).expect("write");

    let report = check(&config, CheckScope::Full);
    assert_eq!(
        report.scan.damaged.len(),
        limit,
        "{:?}",
        report.scan.stopped_at
    );
    assert_eq!(report.scan.stopped_at, Some(placements[2 * limit]));
    assert_eq!(
        report.would_cut, None,
        "a check never reports a cut recovery would not make"
    );
    assert!(!report.is_clean());
    let before = snapshot(dir.path());
    let error = MessageStore::open(config.clone()).expect_err("too damaged to open");
    assert!(
        matches!(error, ferromq_store::OpenError::TooDamaged { at, .. } if at == placements[2 * limit]),
        "{error:?}"
    );
    let after = snapshot(dir.path());
    let changed: Vec<_> = before
        .iter()
        .filter(|(path, bytes)| after.get(*path) != Some(bytes))
        .map(|(path, _)| path.clone())
        .collect();
    assert!(
        changed
            .iter()
            .all(|p| !p.starts_with(dir.path().join("commitlog"))),
        "the refused open changed the log: {changed:?}"
    );
}
