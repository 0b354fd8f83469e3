//! The `ferromq` binary end to end: `bench store --json` and `standalone --check` print the
//! JSON that scripts rely on, and bad flags fail with a one-line error and a non-zero status.

mod common;

use std::process::{Command, Output};

use serde_json::Value;

fn ferromq(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferromq"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("running the ferromq binary")
}

fn last_json_line(output: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().last().expect("stdout has a line");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("last line {last:?} is not JSON: {e}"))
}

/// Runs `ferromq bench store --seconds 1 --json --dir <dir>` with `flags`, asserts it
/// succeeded and left `dir` empty, and returns its stderr and the JSON result.
fn bench_store_ok(dir: &std::path::Path, flags: &[&str]) -> (String, Value) {
    let mut args = vec!["bench", "store", "--seconds", "1", "--json", "--dir"];
    args.push(dir.to_str().unwrap());
    args.extend_from_slice(flags);
    let output = ferromq(&args);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{flags:?}: {stderr}");
    let leftovers: Vec<_> = std::fs::read_dir(dir).unwrap().collect();
    assert!(
        leftovers.is_empty(),
        "scratch directory not removed: {leftovers:?}"
    );
    (stderr, last_json_line(&output))
}

/// ASYNC_FLUSH runs through both commit paths, mapped copies and `pwrite`, and says which.
#[test]
fn bench_store_async_runs_with_mapped_and_plain_writes() {
    for writes in ["mapped", "pwrite"] {
        let dir = tempfile::tempdir().unwrap();
        let (stderr, result) =
            bench_store_ok(dir.path(), &["--flush", "async", "--writes", writes]);
        assert_eq!(result["writes"], writes);
        assert!(
            result["fsync_mean_us"].is_null(),
            "a sync-only figure: {result}"
        );
        assert!(
            result["baseline_before_msgs_per_sec"].as_f64().unwrap() > 0.0,
            "the warm-up baseline ran: {result}"
        );
        assert!(
            result["ratio_to_before"].as_f64().unwrap() > 0.0,
            "{result}"
        );
        assert_eq!(result["errors"], 0);
        assert!(result["msgs_per_sec"].as_f64().unwrap() > 0.0, "{result}");
        assert!(
            stderr.contains(&format!("flush async ({writes} writes)")),
            "{stderr}"
        );
    }
}

#[test]
fn bench_store_sync_prints_json_with_positive_rates() {
    let dir = tempfile::tempdir().unwrap();
    let (_, result) = bench_store_ok(dir.path(), &["--writers", "2", "--flush", "sync"]);
    for key in [
        "msgs_per_sec",
        "mb_per_sec",
        "p50_us",
        "p99_us",
        "p999_us",
        "max_us",
        "errors",
        "baseline_msgs_per_sec",
        "ratio",
        "flush",
        "writers",
        "record_size",
        "records_per_fsync",
    ] {
        assert!(result.get(key).is_some(), "key {key} missing from {result}");
    }
    assert!(result["msgs_per_sec"].as_f64().unwrap() > 0.0);
    assert!(result["baseline_msgs_per_sec"].as_f64().unwrap() > 0.0);
    assert!(result["ratio"].as_f64().unwrap() > 0.0);
    assert!(result["records_per_fsync"].as_f64().unwrap() >= 1.0);
    // The flusher's cycle: its fsyncs and the time outside them fill the phase.
    let fsync_mean = result["fsync_mean_us"].as_f64().unwrap();
    let between = result["between_fsyncs_mean_us"].as_f64().unwrap();
    let fsyncs = result["fsync_count"].as_f64().unwrap();
    let phase_us = result["seconds"].as_f64().unwrap() * 1e6;
    assert!(fsync_mean > 0.0 && between >= 0.0, "{result}");
    let covered = (fsync_mean + between) * fsyncs;
    assert!(
        covered >= phase_us * 0.98 && covered <= phase_us * 1.02 + fsync_mean,
        "fsyncs and the time between them ({covered} us) make up the phase ({phase_us} us): {result}"
    );
    assert_eq!(result["errors"], 0);
    assert_eq!(result["flush"], "sync");
    assert_eq!(result["writers"], 2);
    assert_eq!(result["record_size"], 1024);
    // Sync: the baseline's write + fdatasync cycles are timed one by one, p50 to p50.
    common::assert_p50_ratio(
        &result,
        "p50_ratio",
        "p50_us",
        "baseline_p50_us",
        "baseline_p99_us",
    );
}

#[test]
fn standalone_check_of_a_missing_store_creates_nothing_and_repair_creates_one() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let data_dir = data_dir.to_str().unwrap();
    let output = ferromq(&["standalone", "--check", "--data-dir", data_dir]);
    assert!(
        output.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report = last_json_line(&output);
    assert_eq!(report["read_only"], true, "{report}");
    assert_eq!(report["empty"], true, "{report}");
    assert_eq!(report["clean"], true, "{report}");
    assert_eq!(report["log_end"], 0);
    assert!(report["would_cut"].is_null());
    assert!(!dir.path().join("data").exists(), "--check writes nothing");
    for _ in 0..2 {
        let output = ferromq(&["standalone", "--repair", "--data-dir", data_dir]);
        assert!(output.status.success());
        let report = last_json_line(&output);
        assert_eq!(report["clean_shutdown"], true, "{report}");
        assert!(report["cut"].is_null());
        assert!(report["stats"].is_object());
    }
    assert!(dir.path().join("data/lock").exists());
    assert!(
        !dir.path().join("data/abort").exists(),
        "--repair closes the store cleanly"
    );
}

#[test]
fn bad_flush_value_fails_with_one_line() {
    let output = ferromq(&["bench", "store", "--flush", "sometimes"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "stderr: {stderr}");
    assert!(stderr.contains("--flush"), "stderr: {stderr}");
    assert!(output.stdout.is_empty());
}

#[test]
fn unusable_data_dir_fails_with_one_line_and_status_1() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let output = ferromq(&[
        "standalone",
        "--check",
        "--data-dir",
        file.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let errors: Vec<_> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "stderr: {stderr}");
    assert!(errors[0].contains("not-a-dir"), "stderr: {stderr}");
}

/// `bench codec` times every phase of a send's frames against the copy baseline of the same
/// round, after checking that both frames decode back to the headers they were encoded from.
#[test]
fn bench_codec_reports_each_phase_against_the_copy() {
    let output = ferromq(&[
        "bench",
        "codec",
        "--iterations",
        "2000",
        "--rounds",
        "3",
        "--json",
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let result = last_json_line(&output);
    assert_eq!(result["bench"], "codec");
    assert_eq!(result["rounds"], 3);
    assert!(
        result["request_frame_bytes"].as_u64().unwrap() > 128,
        "{result}"
    );
    assert!(result["copy_ns"].as_f64().unwrap() > 0.0, "{result}");
    assert_eq!(result["copy_to_copy"].as_f64().unwrap(), 1.0, "{result}");
    for phase in [
        "request_encode",
        "request_decode",
        "reply_encode",
        "reply_decode",
    ] {
        let ns = result[format!("{phase}_ns")].as_f64().unwrap();
        let ratio = result[format!("{phase}_to_copy")].as_f64().unwrap();
        assert!(ns > 0.0 && ratio > 0.0, "{phase}: {result}");
        let expected = ns / result["copy_ns"].as_f64().unwrap();
        assert!((ratio - expected).abs() < 1e-6, "{phase}: {result}");
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("request_decode"), "{stdout}");
}

/// A bench codec with no frames to time is refused by its arguments.
#[test]
fn bench_codec_refuses_zero_iterations() {
    let output = ferromq(&["bench", "codec", "--iterations", "0"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--iterations"), "{stderr}");
}
