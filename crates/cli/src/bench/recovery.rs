//! `ferromq bench recovery`: how long a store takes to open after a crash.
//!
//! 1. A child process (`ferromq bench recovery-fill`, hidden) opens an async-flush store,
//!    appends 1 KiB records until the log holds `--log-bytes`, waits until every byte is
//!    fsynced and a checkpoint covers the log end (at most `CHECKPOINT_WAIT`), and exits
//!    without closing the store: the `abort` marker stays, as after a crash. A child is needed
//!    because the store's `Drop` closes it cleanly and its lock lives as long as the process.
//! 2. The parent times `MessageStore::open` on those files: crash recovery from the last
//!    checkpoint (`recovery_ms`). It closes the store, deletes every file under
//!    `checkpoint/`, puts the `abort` marker back, and times `open` again: a crash restart with
//!    no checkpoint, which rescans and re-dispatches the whole log (`full_rescan_ms`).
//! 3. Both opens must find the log end the child made durable; anything else is an error.
//!
//! The page cache is warm (the log was just written), so the figures show CPU and metadata
//! cost rather than cold reads.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use ferromq_store::{FlushDiskType, MessageStore, RecoveryReport, StoreConfig};
use serde_json::{json, Value};

use super::ScratchDir;
use crate::record::draft;
use crate::report::duration_ms;

const FILL_TOPIC: &str = "BenchTopic";
const FILL_QUEUE_COUNT: u32 = 8;
const FILL_RECORD_SIZE: usize = 1024;
const FILL_BATCH_RECORDS: usize = 32;
const CHECKPOINT_WAIT: Duration = Duration::from_secs(10);

/// Flags of `ferromq bench recovery`.
#[derive(Debug, clap::Args)]
pub struct RecoveryArgs {
    /// Bytes of CommitLog to fill (bytes, or with KiB/MiB/GiB).
    #[arg(long, value_name = "BYTES", value_parser = super::byte_count)]
    log_bytes: u64,
    /// Print the result as one JSON object on the last stdout line.
    #[arg(long)]
    json: bool,
    /// Parent of the run's scratch directory (default: the system temp directory).
    #[arg(long, value_name = "PATH")]
    dir: Option<PathBuf>,
    /// CommitLog segment size (bytes, or with KiB/MiB/GiB); default 1 GiB.
    #[arg(long, value_name = "BYTES", value_parser = super::byte_count)]
    segment_size: Option<u64>,
}

/// Arguments of the hidden child command.
#[derive(Debug, clap::Args)]
pub struct FillArgs {
    /// Store directory to fill.
    #[arg(long, value_name = "PATH")]
    store_dir: PathBuf,
    /// Bytes of CommitLog to fill.
    #[arg(long, value_name = "BYTES", value_parser = super::byte_count)]
    log_bytes: u64,
    /// CommitLog segment size.
    #[arg(long, value_name = "BYTES", value_parser = super::byte_count)]
    segment_size: Option<u64>,
}

fn config(store_dir: &Path, segment_size: Option<u64>) -> StoreConfig {
    let mut config = StoreConfig::new(store_dir);
    config.flush_disk_type = FlushDiskType::AsyncFlush;
    if let Some(size) = segment_size {
        config.segment_size_bytes = size;
    }
    config
}

/// Runs `ferromq bench recovery`.
pub fn run(args: &RecoveryArgs) -> Result<()> {
    let scratch = ScratchDir::create(args.dir.as_deref())?;
    let store_dir = scratch.path().join("store");
    eprintln!(
        "bench recovery: filling {} bytes of log in {}",
        args.log_bytes,
        store_dir.display()
    );
    let fill_started = Instant::now();
    let filled = run_fill_child(&store_dir, args)?;
    let fill_elapsed = fill_started.elapsed();
    let log_end = filled["log_end"]
        .as_u64()
        .context("the fill process reported no log_end")?;

    let config = config(&store_dir, args.segment_size);
    let (recovery_time, recovery) = timed_open(&config, log_end, "crash recovery")?;
    let checkpoint_dir = store_dir.join("checkpoint");
    clear_dir(&checkpoint_dir)?;
    let abort = store_dir.join("abort");
    std::fs::write(&abort, b"running\n")
        .with_context(|| format!("restoring the crash marker {}", abort.display()))?;
    let (rescan_time, rescan) = timed_open(&config, log_end, "full rescan")?;

    let recovery_ms = duration_ms(recovery_time);
    let full_rescan_ms = duration_ms(rescan_time);
    println!(
        "fill        : {log_end} bytes, {} records in {:.2} s (child process, exited without close)",
        filled["records"],
        fill_elapsed.as_secs_f64()
    );
    println!("{}", open_line("recovery   ", recovery_time, &recovery));
    println!("{}", open_line("full rescan", rescan_time, &rescan));
    if args.json {
        let out = json!({
            "bench": "recovery",
            "log_bytes": args.log_bytes,
            "log_end": log_end,
            "records": filled["records"],
            "fill_seconds": (fill_elapsed.as_secs_f64() * 1000.0).round() / 1000.0,
            "recovery_ms": recovery_ms,
            "full_rescan_ms": full_rescan_ms,
            "recovery": open_json(&recovery),
            "full_rescan": open_json(&rescan),
        });
        println!("{out}");
    }
    Ok(())
}

/// Runs the fill child and returns its JSON summary.
fn run_fill_child(store_dir: &Path, args: &RecoveryArgs) -> Result<Value> {
    let exe = std::env::current_exe().context("locating the ferromq executable")?;
    let mut command = Command::new(&exe);
    command
        .args(["bench", "recovery-fill", "--store-dir"])
        .arg(store_dir)
        .args(["--log-bytes", &args.log_bytes.to_string()]);
    if let Some(size) = args.segment_size {
        command.args(["--segment-size", &size.to_string()]);
    }
    let output = command
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("starting the fill process {}", exe.display()))?;
    if !output.status.success() {
        bail!("the fill process failed ({})", output.status);
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last)
        .with_context(|| format!("the fill process printed no summary (got {last:?})"))
}

/// Opens the store, checks it kept `log_end`, closes it; returns the time `open` took.
fn timed_open(
    config: &StoreConfig,
    log_end: u64,
    what: &str,
) -> Result<(Duration, RecoveryReport)> {
    let started = Instant::now();
    let store = MessageStore::open(config.clone())
        .with_context(|| format!("{what}: opening {}", config.root_dir.display()))?;
    let elapsed = started.elapsed();
    let report = store.recovery_report().clone();
    store
        .close()
        .with_context(|| format!("{what}: closing the store"))?;
    if report.log_end != log_end {
        bail!(
            "{what}: the log ends at {} after recovery, but the fill made {log_end} bytes durable",
            report.log_end
        );
    }
    Ok((elapsed, report))
}

/// Deletes every file under `dir`, keeping the directory.
fn clear_dir(dir: &Path) -> Result<()> {
    let entries = std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))?;
    for entry in entries {
        let path = entry
            .with_context(|| format!("listing {}", dir.display()))?
            .path();
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.with_context(|| format!("removing {}", path.display()))?;
    }
    Ok(())
}

fn open_line(label: &str, elapsed: Duration, report: &RecoveryReport) -> String {
    let checkpoint = report
        .checkpoint_position
        .map_or_else(|| "none".to_string(), |p| p.to_string());
    format!(
        "{label} : open took {} ms (checkpoint {checkpoint}, scanned {} bytes from {}, {} records re-dispatched)",
        duration_ms(elapsed),
        report.scanned_bytes,
        report.scanned_from,
        report.records_dispatched
    )
}

fn open_json(report: &RecoveryReport) -> Value {
    json!({
        "clean_shutdown": report.clean_shutdown,
        "checkpoint_position": report.checkpoint_position,
        "scanned_from": report.scanned_from,
        "scanned_bytes": report.scanned_bytes,
        "records_dispatched": report.records_dispatched,
        "queues_rebuilt": report.queues_rebuilt,
        "store_reported_ms": duration_ms(report.duration),
    })
}

/// Runs the hidden `bench recovery-fill`: fills the store, makes it durable, waits for a
/// checkpoint at the end, prints a JSON summary and exits without closing the store.
pub fn fill(args: &FillArgs) -> Result<()> {
    let config = config(&args.store_dir, args.segment_size);
    let body_size = super::store::body_size_for(FILL_RECORD_SIZE, config.max_message_size_bytes)?;
    let store = MessageStore::open(config)
        .with_context(|| format!("opening {}", args.store_dir.display()))?;
    let body = vec![0xa5_u8; body_size];
    let host = store.config().store_host;
    let mut end = store.stats().written_end;
    let mut records = 0u64;
    while end < args.log_bytes {
        let batch: Vec<_> = (0..FILL_BATCH_RECORDS)
            .map(|i| {
                draft(
                    FILL_TOPIC,
                    (records + i as u64) as u32 % FILL_QUEUE_COUNT,
                    &body,
                    host,
                )
            })
            .collect();
        end = store
            .append(&batch)
            .context("filling the store")?
            .end_offset;
        records += FILL_BATCH_RECORDS as u64;
    }
    store
        .wait_durable(end)
        .context("making the filled log durable")?;
    let deadline = Instant::now() + CHECKPOINT_WAIT;
    while store.stats().checkpoint_position < end && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let checkpoint_position = store.stats().checkpoint_position;
    println!(
        "{}",
        json!({ "log_end": end, "records": records, "checkpoint_position": checkpoint_position })
    );
    // Leave without closing the store: the abort marker stays, as after a crash.
    std::process::exit(0)
}
