//! `ferromq standalone`: ferromq on one machine.
//!
//! The name server and broker arrive with issue 3. Until then this subcommand opens the
//! `MessageStore` under `--data-dir`, prints what recovery found, and runs a store-only demo:
//! one message a second to `DemoTopic`, until it is told to stop. It always closes the store
//! (final flush and checkpoint), so the next start is a clean one; a process killed instead
//! (Ctrl-C, SIGKILL) leaves the `abort` marker and the next start runs, and reports, crash
//! recovery.

use std::io::BufRead;
use std::path::PathBuf;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use ferromq_store::{MessageStore, StoreConfig};
use serde_json::json;

use crate::report;
use crate::Flush;

const DEMO_TOPIC: &str = "DemoTopic";
const DEMO_QUEUE_COUNT: u32 = 4;
const DEMO_INTERVAL: Duration = Duration::from_secs(1);

/// Flags of `ferromq standalone`.
#[derive(Debug, clap::Args)]
pub struct StandaloneArgs {
    /// Store root directory (RocketMQ storePathRootDir).
    #[arg(long, value_name = "DIR", default_value = "./data")]
    data_dir: PathBuf,
    /// How appends become durable (RocketMQ flushDiskType).
    #[arg(long, value_enum, default_value_t = Flush::Async)]
    flush: Flush,
    /// Stop the demo after N seconds; 0 runs until the process is killed. Without it the demo
    /// runs until a line or end of input arrives on stdin.
    #[arg(long, value_name = "N")]
    seconds: Option<u64>,
    /// Open the store, print the recovery report as one JSON line, close the store and exit.
    #[arg(long)]
    check: bool,
}

/// Runs `ferromq standalone`.
pub fn run(args: &StandaloneArgs) -> Result<()> {
    let mut config = StoreConfig::new(&args.data_dir);
    config.flush_disk_type = args.flush.disk_type();
    let store = MessageStore::open(config)
        .with_context(|| format!("opening the store at {}", args.data_dir.display()))?;
    let root = std::fs::canonicalize(&args.data_dir).unwrap_or_else(|_| args.data_dir.clone());
    if args.check {
        let mut out = report::recovery_json(store.recovery_report());
        out["data_dir"] = json!(root.display().to_string());
        out["flush"] = json!(args.flush.name());
        out["stats"] = report::stats_json(&store.stats());
        println!("{out}");
        return store.close().context("closing the store");
    }
    println!("ferromq standalone: the name server and broker arrive with issue 3; running the store alone.");
    println!(
        "store        : {} (flush {})",
        root.display(),
        args.flush.name()
    );
    for line in report::recovery_lines(store.recovery_report()) {
        println!("{line}");
    }
    println!("stats        : {}", report::stats_line(&store.stats()));
    let demo = run_demo(&store, args.seconds);
    let closed = store.close().context("closing the store");
    demo?;
    closed?;
    println!("store closed cleanly; the next start is a clean start");
    Ok(())
}

/// Appends one message a second until the stop condition; returns the first append failure.
fn run_demo(store: &MessageStore, seconds: Option<u64>) -> Result<()> {
    let (_keep_open, stop) = stop_signal(seconds);
    let deadline = seconds
        .filter(|s| *s > 0)
        .map(|s| Instant::now() + Duration::from_secs(s));
    match seconds {
        None => println!(
            "demo         : one message a second to {DEMO_TOPIC}; press Enter or Ctrl-D to stop"
        ),
        Some(0) => println!(
            "demo         : one message a second to {DEMO_TOPIC} until the process is killed"
        ),
        Some(s) => println!("demo         : one message a second to {DEMO_TOPIC} for {s} s"),
    }
    let host = store.config().store_host;
    for sequence in 0u64.. {
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            println!("demo finished after {} messages", sequence);
            return Ok(());
        }
        let body = format!("hello from ferromq standalone, message {sequence}");
        let queue_id = (sequence % u64::from(DEMO_QUEUE_COUNT)) as u32;
        let draft = crate::record::draft(DEMO_TOPIC, queue_id, body.as_bytes(), host);
        let receipt = store
            .put(&[draft])
            .with_context(|| format!("appending demo message {sequence}"))?;
        let placement = &receipt.placements[0];
        let stats = store.stats();
        println!(
            "appended {DEMO_TOPIC}[{}] queue offset {} at CommitLog offset {}; log end {}, flushed {}, dispatched {}",
            placement.queue_id,
            placement.queue_offset,
            placement.phys_offset,
            stats.written_end,
            stats.flushed_end,
            stats.dispatched_end
        );
        let wait = deadline.map_or(DEMO_INTERVAL, |d| {
            DEMO_INTERVAL.min(d.saturating_duration_since(Instant::now()))
        });
        match stop.recv_timeout(wait) {
            Ok(reason) => {
                println!("stopping: {reason}");
                return Ok(());
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        }
    }
    Ok(())
}

/// A channel that yields a reason to stop: a line or end of input on stdin when `seconds` is
/// `None`, nothing otherwise. The caller keeps the returned sender alive, so the receiver
/// only ever times out unless the stdin watcher sends.
fn stop_signal(seconds: Option<u64>) -> (mpsc::Sender<&'static str>, mpsc::Receiver<&'static str>) {
    let (sender, receiver) = mpsc::channel();
    if seconds.is_none() {
        let watcher = sender.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            let reason = match std::io::stdin().lock().read_line(&mut line) {
                Ok(0) => "end of input on stdin",
                Ok(_) => "a line arrived on stdin",
                Err(_) => "stdin could not be read",
            };
            // The receiver is gone only when the demo already stopped.
            let _ = watcher.send(reason);
        });
    }
    (sender, receiver)
}
