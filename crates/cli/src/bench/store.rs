//! `ferromq bench store`: the store's append path against raw file writes on the same disk.
//!
//! 0. ASYNC_FLUSH only, the warm-up baseline: the baseline below runs once first, for
//!    `--seconds`, and its file is deleted. Writing into the page cache costs most on pages
//!    that nothing used lately (on a VM that returns free pages to its host, each first touch
//!    faults in the host as well: half of a mapped-writes phase's samples were the zeroing of
//!    such pages), and each phase below writes into the pages the phase before it freed; so
//!    without this the ferromq phase got cold pages and the baseline the store's recycled
//!    ones. Its rate is printed too (`baseline before`), as is the ratio to it.
//! 1. ferromq phase: `--writers` concurrent writers each append one record at a time for
//!    `--seconds` and wait until it is acknowledgeable, timing every call. Under sync flush
//!    that is after the fsync that covers it (group commit); under async flush once written.
//!    `--mode tasks` (default) runs the writers as tokio tasks on a 2-thread runtime awaiting
//!    `MessageStore::acknowledged`, as the broker's connection handlers do; `--mode threads`
//!    runs one OS thread per writer calling the blocking `MessageStore::put`.
//! 2. The store is closed and deleted, then the baseline phase writes the same bytes with one
//!    thread to a plain file: async, one `write_all` of `--record-size` bytes per record;
//!    sync, one `write_all` of `records_per_fsync` records followed by `fdatasync`, where
//!    `records_per_fsync` is the ferromq phase's records per fsync (its group-commit batch).
//!    The baseline stops once it has written as many records as the ferromq phase, or after
//!    `--seconds`, whichever comes first.
//! 3. `ratio` = ferromq msgs/s / baseline msgs/s.
//!
//! `--record-size` is the encoded record size: the body is sized so that the whole
//! CommitLog record (header, topic `BenchTopic`, body, CRC property) is exactly that long.
//! MB/s counts encoded bytes, 1 MB = 10^6 bytes.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::value_parser;
use ferromq_store::{MessageStore, StoreConfig};
use serde_json::json;

use super::stats::{ns_to_us, Histogram};
use super::{fsync_probe, ScratchDir};
use crate::record::draft;
use crate::Flush;

const BENCH_TOPIC: &str = "BenchTopic";
const BENCH_QUEUE_COUNT: u32 = 8;
/// Appends a writer task makes between two `yield_now`s when its acknowledgements are
/// ready at once (ASYNC_FLUSH): a yield per append woke the runtime's idle worker every time
/// and cost more than the append itself. A lone writer does not yield at all: it has no
/// other writer to give way to, and each yield made the idle worker steal its task (14,000
/// context switches a second at 1 writer, session 26; see `write_task`).
const APPENDS_PER_YIELD: u64 = 32;
/// After a failed put a writer pauses this long, so a poisoned store is not spun on.
const ERROR_PAUSE: Duration = Duration::from_millis(1);

/// Flags of `ferromq bench store`.
#[derive(Debug, clap::Args)]
pub struct StoreArgs {
    /// Encoded size of each record in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 1024)]
    record_size: usize,
    /// How appends become durable (RocketMQ flushDiskType).
    #[arg(long, value_enum, default_value_t = Flush::Async)]
    flush: Flush,
    /// Concurrent writers, each putting one record at a time.
    #[arg(long, default_value_t = 1, value_parser = value_parser!(u32).range(1..=1024))]
    writers: u32,
    /// How writers run: tokio tasks awaiting durability (as the broker does) or OS threads
    /// blocking on it.
    #[arg(long, value_enum, default_value_t = WriterMode::Tasks)]
    mode: WriterMode,
    /// Length of the ferromq phase; the baseline runs at most as long.
    #[arg(long, default_value_t = 10, value_parser = value_parser!(u64).range(1..=86_400))]
    seconds: u64,
    /// Print the result as one JSON object on the last stdout line.
    #[arg(long)]
    json: bool,
    /// Parent of the run's scratch directory (default: the system temp directory); pick a
    /// directory on the disk to measure.
    #[arg(long, value_name = "PATH")]
    dir: Option<PathBuf>,
    /// CommitLog segment size (bytes, or with KiB/MiB/GiB); default 1 GiB.
    #[arg(long, value_name = "BYTES", value_parser = super::byte_count)]
    segment_size: Option<u64>,
    /// How ASYNC_FLUSH commits reach the page cache: copied into a map of the active
    /// segment (the store's default) or written with `pwrite` (`commitLogMappedWrites`).
    #[arg(long, value_enum, default_value_t = CommitWrites::Mapped)]
    writes: CommitWrites,
    /// SYNC_FLUSH: a thread writes zeros ahead of the commits, which then overwrite written
    /// blocks (`commitLogZeroedSpace`; `true`, the store's default, or `false`).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    zeroed_space: bool,
    /// ASYNC_FLUSH mapped writes: a thread populates the map's next window ahead of the
    /// copies (`commitLogPopulateAhead`; `true`, the store's default), or the committer
    /// populates each window itself (`false`).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    populate_ahead: bool,
}

/// How the bench store's ASYNC_FLUSH commits are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CommitWrites {
    /// Copied into a shared map of the active segment.
    Mapped,
    /// One `pwrite` per commit.
    Pwrite,
}

/// How the bench's writers run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WriterMode {
    /// Tokio tasks on a 2-thread runtime.
    Tasks,
    /// One OS thread per writer.
    Threads,
}

/// What the ferromq phase measured.
struct Phase {
    records: u64,
    errors: u64,
    first_error: Option<String>,
    latency: Histogram,
    elapsed: Duration,
    fsyncs: u64,
    /// Time the flusher spent in those fsyncs, µs.
    fsync_micros: u64,
    /// Map windows populated by the populating thread and by the committer (mapped writes).
    map_windows: (u64, u64),
}

/// What one writer thread measured.
#[derive(Default)]
struct WriterResult {
    latency: Histogram,
    records: u64,
    errors: u64,
    first_error: Option<String>,
}

/// What the baseline measured.
struct Baseline {
    records: u64,
    elapsed: Duration,
    description: String,
    /// Sync: the latency of each write + fdatasync cycle, for a p50-to-p50 comparison.
    cycle_latency: Option<Histogram>,
}

impl Baseline {
    fn msgs_per_sec(&self) -> f64 {
        rate(self.records, self.elapsed)
    }
}

/// Runs `ferromq bench store`.
pub fn run(args: &StoreArgs) -> Result<()> {
    let scratch = ScratchDir::create(args.dir.as_deref())?;
    let store_dir = scratch.path().join("store");
    let mut config = StoreConfig::new(&store_dir);
    config.flush_disk_type = args.flush.disk_type();
    if let Some(size) = args.segment_size {
        config.segment_size_bytes = size;
    }
    config.mapped_writes = args.writes == CommitWrites::Mapped;
    config.zeroed_space = args.zeroed_space;
    config.populate_ahead = args.populate_ahead;
    let body_size = body_size_for(args.record_size, config.max_message_size_bytes)?;
    eprintln!(
        "bench store: flush {} ({} writes), {} writers, {} B records, {} s, in {}",
        args.flush.name(),
        match (args.flush, args.writes) {
            (Flush::Sync, _) => "pwrite",
            (Flush::Async, CommitWrites::Mapped) => "mapped",
            (Flush::Async, CommitWrites::Pwrite) => "pwrite",
        },
        args.writers,
        args.record_size,
        args.seconds,
        scratch.path().display()
    );
    let warm_up = match args.flush {
        Flush::Async => Some(warm_up_baseline(scratch.path(), args)?),
        Flush::Sync => None,
    };
    let store = MessageStore::open(config)
        .with_context(|| format!("opening the bench store at {}", store_dir.display()))?;
    let store = std::sync::Arc::new(store);
    let mut phase = match args.mode {
        WriterMode::Threads => run_ferromq(&store, args, body_size),
        WriterMode::Tasks => run_ferromq_tasks(&store, args, body_size)?,
    };
    let stats = store.stats();
    phase.map_windows = (
        stats.map_windows_populated_ahead,
        stats.map_windows_populated_inline,
    );
    let store = std::sync::Arc::into_inner(store).context("bench writers still hold the store")?;
    store.close().context("closing the bench store")?;
    std::fs::remove_dir_all(&store_dir)
        .with_context(|| format!("removing {}", store_dir.display()))?;
    if phase.records == 0 {
        bail!(
            "no record was stored: {}",
            phase.first_error.as_deref().unwrap_or("no put completed")
        );
    }
    let records_per_fsync = if phase.fsyncs == 0 {
        None
    } else {
        Some(phase.records as f64 / phase.fsyncs as f64)
    };
    let baseline = match args.flush {
        Flush::Async => baseline_async(&scratch.path().join("baseline"), args, phase.records)?,
        Flush::Sync => {
            let batch = records_per_fsync.map_or(1, |r| (r.round() as u64).max(1));
            baseline_sync(&scratch.path().join("baseline"), args, phase.records, batch)?
        }
    };
    print_result(
        args,
        body_size,
        &phase,
        records_per_fsync,
        &baseline,
        warm_up.as_ref(),
    );
    if phase.errors > 0 {
        bail!(
            "{} puts failed; the first: {}",
            phase.errors,
            phase.first_error.as_deref().unwrap_or("unknown")
        );
    }
    Ok(())
}

/// The body size that makes the encoded record `record_size` bytes long.
pub(super) fn body_size_for(record_size: usize, max_body: usize) -> Result<usize> {
    let host = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let overhead = draft(BENCH_TOPIC, 0, &[], host)
        .encode()
        .context("encoding an empty bench record")?
        .len();
    if record_size < overhead {
        bail!("--record-size must be at least {overhead} bytes (record header, topic and CRC)");
    }
    let body = record_size - overhead;
    if body > max_body {
        bail!(
            "--record-size {record_size} needs a {body}-byte body; the store accepts at most {max_body}"
        );
    }
    let encoded = draft(BENCH_TOPIC, 0, &vec![0; body], host)
        .encode()
        .context("encoding a bench record")?
        .len();
    if encoded != record_size {
        bail!("a {body}-byte body encodes to {encoded} bytes, not {record_size}");
    }
    Ok(body)
}

fn run_ferromq(store: &MessageStore, args: &StoreArgs, body_size: usize) -> Phase {
    let stop = AtomicBool::new(false);
    let stored = AtomicU64::new(0);
    let flushes_before = FlushesSeen::now(store);
    let started = Instant::now();
    let results: Vec<WriterResult> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..args.writers)
            .map(|writer| {
                let (stop, stored) = (&stop, &stored);
                scope.spawn(move || write_loop(store, writer, body_size, stop, stored))
            })
            .collect();
        report_progress(started, Duration::from_secs(args.seconds), &stored);
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|handle| {
                handle.join().unwrap_or_else(|_| WriterResult {
                    errors: 1,
                    first_error: Some("a writer thread panicked".to_string()),
                    ..WriterResult::default()
                })
            })
            .collect()
    });
    let elapsed = started.elapsed();
    merge_results(results, elapsed, flushes_before.since(store))
}

/// The flusher's fsync counters at the start of a phase.
struct FlushesSeen(ferromq_store::flush_latency::FlushLatencySnapshot);

impl FlushesSeen {
    fn now(store: &MessageStore) -> FlushesSeen {
        FlushesSeen(store.flush_latency().snapshot())
    }

    /// (fsyncs, µs spent in them) since `self`.
    fn since(&self, store: &MessageStore) -> (u64, u64) {
        let latency = store.flush_latency().snapshot().since(&self.0);
        (latency.count, latency.sum_micros)
    }
}

fn merge_results(results: Vec<WriterResult>, elapsed: Duration, flushes: (u64, u64)) -> Phase {
    let (fsyncs, fsync_micros) = flushes;
    let mut phase = Phase {
        records: 0,
        errors: 0,
        first_error: None,
        latency: Histogram::default(),
        elapsed,
        fsyncs,
        fsync_micros,
        map_windows: (0, 0),
    };
    for result in results {
        phase.records += result.records;
        phase.errors += result.errors;
        phase.latency.merge(&result.latency);
        if phase.first_error.is_none() {
            phase.first_error = result.first_error;
        }
    }
    debug_assert_eq!(
        phase.latency.count(),
        phase.records,
        "one latency per stored put"
    );
    phase
}

fn run_ferromq_tasks(
    store: &std::sync::Arc<MessageStore>,
    args: &StoreArgs,
    body_size: usize,
) -> Result<Phase> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .context("starting the bench runtime")?;
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let stored = std::sync::Arc::new(AtomicU64::new(0));
    let flushes_before = FlushesSeen::now(store);
    let started = Instant::now();
    let handles: Vec<_> = (0..args.writers)
        .map(|writer| {
            let (store, stop, stored) = (store.clone(), stop.clone(), stored.clone());
            let alone = args.writers == 1;
            runtime.spawn(async move {
                write_task(&store, writer, body_size, &stop, &stored, alone).await
            })
        })
        .collect();
    report_progress(started, Duration::from_secs(args.seconds), &stored);
    stop.store(true, Ordering::Relaxed);
    let results: Vec<WriterResult> = runtime.block_on(async {
        let mut results = Vec::with_capacity(handles.len());
        for handle in handles {
            results.push(handle.await.unwrap_or_else(|_| WriterResult {
                errors: 1,
                first_error: Some("a writer task panicked".to_string()),
                ..WriterResult::default()
            }));
        }
        results
    });
    let elapsed = started.elapsed();
    Ok(merge_results(results, elapsed, flushes_before.since(store)))
}

async fn write_task(
    store: &MessageStore,
    writer: u32,
    body_size: usize,
    stop: &AtomicBool,
    stored: &AtomicU64,
    alone: bool,
) -> WriterResult {
    let body: Vec<u8> = (0..body_size).map(|i| (i % 251) as u8).collect();
    let host = store.config().store_host;
    let queue_id = writer % BENCH_QUEUE_COUNT;
    let mut result = WriterResult::default();
    while !stop.load(Ordering::Relaxed) {
        let record = draft(BENCH_TOPIC, queue_id, &body, host);
        let started = Instant::now();
        let outcome = match store.append(&[record]) {
            Ok(receipt) => store
                .acknowledged(receipt.ticket())
                .await
                .map_err(|e| e.to_string()),
            Err(error) => Err(error.to_string()),
        };
        let latency_ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        match outcome {
            Ok(()) => {
                result.latency.record(latency_ns);
                result.records += 1;
                stored.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => {
                result.errors += 1;
                result.first_error.get_or_insert(error);
                tokio::time::sleep(ERROR_PAUSE).await;
            }
        }
        // Under AsyncFlush an acknowledgement is usually ready at once, so nothing awaits:
        // give way now and then so other writers run (tokio's budget does not count these).
        // The stop flag ends a lone writer's loop; the runtime's timers run on the other
        // worker.
        if !alone && result.records % APPENDS_PER_YIELD == 0 {
            tokio::task::yield_now().await;
        }
    }
    result
}

fn write_loop(
    store: &MessageStore,
    writer: u32,
    body_size: usize,
    stop: &AtomicBool,
    stored: &AtomicU64,
) -> WriterResult {
    let body: Vec<u8> = (0..body_size).map(|i| (i % 251) as u8).collect();
    let host = store.config().store_host;
    let queue_id = writer % BENCH_QUEUE_COUNT;
    let mut result = WriterResult::default();
    while !stop.load(Ordering::Relaxed) {
        let record = draft(BENCH_TOPIC, queue_id, &body, host);
        let started = Instant::now();
        let outcome = store.put(&[record]);
        let latency_ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        match outcome {
            Ok(_) => {
                result.latency.record(latency_ns);
                result.records += 1;
                stored.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => {
                result.errors += 1;
                result.first_error.get_or_insert_with(|| error.to_string());
                std::thread::sleep(ERROR_PAUSE);
            }
        }
    }
    result
}

/// Prints progress to stderr once a second until `duration` has passed.
fn report_progress(started: Instant, duration: Duration, stored: &AtomicU64) {
    let mut last_count = 0;
    let mut last_at = started;
    let mut tick = 1;
    loop {
        let next = started + Duration::from_secs(tick).min(duration);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        let now = Instant::now();
        let count = stored.load(Ordering::Relaxed);
        let interval_rate = rate(count - last_count, now - last_at);
        eprintln!(
            "  {:>5.1} s: {count} msgs, {interval_rate:.0} msgs/s",
            (now - started).as_secs_f64()
        );
        if now - started >= duration {
            return;
        }
        (last_count, last_at, tick) = (count, now, tick + 1);
    }
}

/// Step 0 of the module docs: the async baseline for `--seconds`, then its file deleted.
fn warm_up_baseline(scratch: &Path, args: &StoreArgs) -> Result<Baseline> {
    let path = scratch.join("baseline-before");
    let baseline = baseline_async(&path, args, u64::MAX)?;
    std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
    Ok(baseline)
}

fn baseline_async(path: &Path, args: &StoreArgs, records_max: u64) -> Result<Baseline> {
    let mut file = create(path)?;
    let buffer = vec![0x5a_u8; args.record_size];
    let deadline = Duration::from_secs(args.seconds);
    let started = Instant::now();
    let mut records = 0;
    while records < records_max && (records % 1024 != 0 || started.elapsed() < deadline) {
        file.write_all(&buffer)
            .with_context(|| format!("baseline write to {}", path.display()))?;
        records += 1;
    }
    let elapsed = started.elapsed();
    Ok(Baseline {
        records,
        elapsed,
        description: format!("1 thread, write_all of {} B per record", args.record_size),
        cycle_latency: None,
    })
}

fn baseline_sync(path: &Path, args: &StoreArgs, records_max: u64, batch: u64) -> Result<Baseline> {
    let batch_bytes = usize::try_from(batch)
        .ok()
        .and_then(|b| b.checked_mul(args.record_size))
        .context("baseline batch does not fit in memory")?;
    let cycles = records_max.div_ceil(batch.max(1));
    let probe = fsync_probe::run(path, batch_bytes, cycles, Duration::from_secs(args.seconds))?;
    Ok(Baseline {
        records: probe.cycles * batch,
        elapsed: probe.elapsed,
        description: format!(
            "1 thread, write_all of {batch} records ({batch_bytes} B) then fdatasync"
        ),
        cycle_latency: Some(probe.latency),
    })
}

fn create(path: &Path) -> Result<File> {
    File::create(path).with_context(|| format!("creating the baseline file {}", path.display()))
}

fn rate(count: u64, elapsed: Duration) -> f64 {
    let seconds = elapsed.as_secs_f64();
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}

fn round(value: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (value * scale).round() / scale
}

fn print_result(
    args: &StoreArgs,
    body_size: usize,
    phase: &Phase,
    records_per_fsync: Option<f64>,
    baseline: &Baseline,
    before: Option<&Baseline>,
) {
    let msgs_per_sec = rate(phase.records, phase.elapsed);
    let mb_per_sec = msgs_per_sec * args.record_size as f64 / 1e6;
    let baseline_msgs_per_sec = baseline.msgs_per_sec();
    let ratio = if baseline_msgs_per_sec > 0.0 {
        msgs_per_sec / baseline_msgs_per_sec
    } else {
        0.0
    };
    let latency = &phase.latency;
    let [p50, p99, p999] = [0.5, 0.99, 0.999].map(|q| ns_to_us(latency.percentile(q)));
    let max = ns_to_us(latency.max());
    println!(
        "ferromq  : {} msgs in {:.2} s = {msgs_per_sec:.0} msgs/s, {mb_per_sec:.1} MB/s ({} B records, {body_size} B bodies, flush {}, {} writers), {} errors",
        phase.records,
        phase.elapsed.as_secs_f64(),
        args.record_size,
        args.flush.name(),
        args.writers,
        phase.errors
    );
    println!("latency  : p50 {p50} us, p99 {p99} us, p999 {p999} us, max {max} us");
    let cycle = flush_cycle(args, phase);
    match (records_per_fsync, cycle) {
        (Some(per), Some((fsync, between))) => println!(
            "fsyncs   : {} ({per:.1} records per fsync; fsync mean {fsync:.1} us, flusher not in fsync {between:.1} us per fsync)",
            phase.fsyncs
        ),
        (Some(per), None) => println!("fsyncs   : {} ({per:.1} records per fsync)", phase.fsyncs),
        (None, _) => println!("fsyncs   : 0"),
    }
    let (ahead, inline) = phase.map_windows;
    if ahead + inline > 0 {
        println!(
            "map      : {ahead} windows populated ahead by the thread, {inline} by the committer"
        );
    }
    println!(
        "baseline : {} msgs in {:.2} s = {baseline_msgs_per_sec:.0} msgs/s ({})",
        baseline.records,
        baseline.elapsed.as_secs_f64(),
        baseline.description
    );
    println!("ratio    : {ratio:.3} (ferromq msgs/s / baseline msgs/s)");
    let before_rate = before.map(Baseline::msgs_per_sec);
    let ratio_to_before = before_rate.map(|r| if r > 0.0 { msgs_per_sec / r } else { 0.0 });
    if let (Some(before), Some(r)) = (before, ratio_to_before) {
        println!(
            "baseline before: {} msgs in {:.2} s = {:.0} msgs/s (the same writes, first, on pages no phase had used; deleted before the ferromq phase); ratio to it {r:.3}",
            before.records,
            before.elapsed.as_secs_f64(),
            before.msgs_per_sec()
        );
    }
    let baseline_p50 = baseline
        .cycle_latency
        .as_ref()
        .map(|h| (ns_to_us(h.percentile(0.5)), ns_to_us(h.percentile(0.99))));
    let p50_ratio = baseline_p50.map(|(base, _)| if base > 0.0 { p50 / base } else { 0.0 });
    if let (Some((base_p50, base_p99)), Some(p50_ratio)) = (baseline_p50, p50_ratio) {
        println!(
            "baseline latency: p50 {base_p50} us, p99 {base_p99} us per write + fdatasync; p50 ratio {p50_ratio:.3} (ferromq p50 / baseline p50)"
        );
    }
    if args.json {
        let out = json!({
            "bench": "store",
            "flush": args.flush.name(),
            "writers": args.writers,
            "mode": format!("{:?}", args.mode).to_lowercase(),
            "writes": format!("{:?}", args.writes).to_lowercase(),
            "zeroed_space": args.zeroed_space,
            "populate_ahead": args.populate_ahead,
            "map_windows_populated_ahead": phase.map_windows.0,
            "map_windows_populated_inline": phase.map_windows.1,
            "record_size": args.record_size,
            "body_size": body_size,
            "seconds": round(phase.elapsed.as_secs_f64(), 3),
            "records": phase.records,
            "msgs_per_sec": round(msgs_per_sec, 1),
            "mb_per_sec": round(mb_per_sec, 3),
            "p50_us": p50,
            "p99_us": p99,
            "p999_us": p999,
            "max_us": max,
            "errors": phase.errors,
            "fsync_count": phase.fsyncs,
            "records_per_fsync": records_per_fsync.map(|r| round(r, 2)),
            "fsync_mean_us": cycle.map(|(fsync, _)| round(fsync, 1)),
            "between_fsyncs_mean_us": cycle.map(|(_, between)| round(between, 1)),
            "baseline_records": baseline.records,
            "baseline_msgs_per_sec": round(baseline_msgs_per_sec, 1),
            "baseline": baseline.description,
            "ratio": round(ratio, 4),
            "baseline_before_msgs_per_sec": before_rate.map(|r| round(r, 1)),
            "ratio_to_before": ratio_to_before.map(|r| round(r, 4)),
            "baseline_p50_us": baseline_p50.map(|(p50, _)| p50),
            "baseline_p99_us": baseline_p50.map(|(_, p99)| p99),
            "p50_ratio": p50_ratio.map(|r| round(r, 4)),
        });
        println!("{out}");
    }
}

/// Under sync flush, the flusher's cycle: (mean fsync, mean time per fsync outside fsyncs),
/// µs. Group commit keeps up with the disk when the second is small against the first: it
/// holds the publish, the wake-ups, the next group's write and the hand-offs.
fn flush_cycle(args: &StoreArgs, phase: &Phase) -> Option<(f64, f64)> {
    if args.flush != Flush::Sync || phase.fsyncs == 0 {
        return None;
    }
    let fsyncs = phase.fsyncs as f64;
    let fsync = phase.fsync_micros as f64 / fsyncs;
    let between = (phase.elapsed.as_secs_f64() * 1e6 / fsyncs - fsync).max(0.0);
    Some((fsync, between))
}

#[cfg(test)]
mod tests {
    use super::body_size_for;

    #[test]
    fn body_is_sized_to_the_encoded_record() {
        let body = body_size_for(1024, 4 << 20).unwrap();
        assert!(body > 0 && body < 1024);
        assert!(body_size_for(1, 4 << 20).is_err());
        assert!(body_size_for(5 << 20, 4 << 20).is_err());
    }
}
