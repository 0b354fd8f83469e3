//! `ferromq chaos`: a seeded fault-injection run against a `ferromq standalone` this command
//! starts itself, checked for ferromq's promises (properties K1–K7 of offset-pitfalls.md).
//!
//! Output: the fault schedule and a progress line each second on stderr; a human report on
//! stdout; with `--json`, the last stdout line is one JSON object with the run's figures and
//! the checker's full report. Exit status 1 when the checker (or the broker's own offset
//! history) finds a violation, 2 for bad flags. Ctrl-C or SIGTERM stops the run: the servers
//! are killed and the run's directory removed before the command exits.
//!
//! The clients log their warnings (connections cut by faults) at `RUST_LOG`'s level, `info`
//! by default; `RUST_LOG=error` leaves the schedule, the progress line and the report.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use ferromq_chaos::checker::{check, CheckOptions, Durability, Report};
use ferromq_chaos::faults::{parse_kinds, FaultKind};
use ferromq_chaos::nodes::Flush as NodeFlush;
use ferromq_chaos::resets::undone_resets;
use ferromq_chaos::run::{run, RunConfig, RunOutcome};
use ferromq_chaos::topology::{MasterMode, Topology, UnknownTopology};
use serde_json::{json, Value};

use crate::Flush;

/// Flags of `ferromq chaos`.
#[derive(Debug, clap::Args)]
pub struct ChaosArgs {
    /// Seed of the fault schedule (default: drawn from the clock, and printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Length of the fault phase, seconds (the drain comes after it).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    seconds: u64,
    /// Fault kinds to inject, comma-separated: kill, pause, partition, restart-consumer, reset.
    #[arg(long, value_name = "LIST", default_value = "kill,pause,partition,restart-consumer,reset",
          value_parser = parse_fault_list)]
    faults: FaultList,
    /// What runs: single (`ferromq standalone`), replicated (1 controller, 1 name server, a
    /// master and 2 slaves) or ha (3 controllers, 2 name servers, 2 groups × 3 replicas).
    #[arg(long, default_value = "single", value_parser = parse_topology)]
    topology: Topology,
    /// How an elected master acknowledges (replicated and ha): sync (SYNC_MASTER) or async
    /// (ASYNC_MASTER).
    #[arg(long, value_enum, default_value_t = crate::cluster::MasterRole::Sync)]
    role: crate::cluster::MasterRole,
    /// Plan two faults at once (a second fault strikes while one is active); default: on
    /// for replicated and ha, off for single.
    #[arg(long)]
    overlap: Option<bool>,
    /// Every broker's flush policy.
    #[arg(long, value_enum, default_value_t = Flush::Sync)]
    flush: Flush,
    /// Producers.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    producers: u32,
    /// Consumers of the group (even-numbered ones pull, odd-numbered ones push).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    consumers: u32,
    /// Queues of the topic.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    queues: u32,
    /// Longest drain, seconds.
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u64).range(1..))]
    drain_seconds: u64,
    /// Most duplicates one consumer restart may cause (on top of the checker's own bound:
    /// what was delivered but not committed before the restart).
    #[arg(long, default_value_t = 2000)]
    duplicate_bound: u64,
    /// Print the fault schedule and exit without running.
    #[arg(long)]
    schedule_only: bool,
    /// Keep the run's directory (broker data and standalone.log) and print its path.
    #[arg(long)]
    keep_dir: bool,
    /// Save the recorded history as JSON lines.
    #[arg(long, value_name = "FILE")]
    history: Option<PathBuf>,
    /// Print one JSON object (the last stdout line) after the human report.
    #[arg(long)]
    json: bool,
}

/// The parsed `--faults` list.
#[derive(Debug, Clone)]
pub struct FaultList(Vec<FaultKind>);

fn parse_topology(text: &str) -> Result<Topology, String> {
    text.parse()
        .map_err(|error: UnknownTopology| error.to_string())
}

fn parse_fault_list(text: &str) -> Result<FaultList, String> {
    parse_kinds(text)
        .map(FaultList)
        .map_err(|error| error.to_string())
}

/// Runs `ferromq chaos`.
pub fn run_chaos(args: &ChaosArgs) -> Result<()> {
    let program = std::env::current_exe().context("finding the ferromq binary")?;
    let seed = args.seed.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
    });
    let mut config = RunConfig::new(program, seed, args.seconds);
    config.faults = args.faults.0.clone();
    config.topology = args.topology;
    config.master = match args.role {
        crate::cluster::MasterRole::Sync => MasterMode::Sync,
        crate::cluster::MasterRole::Async => MasterMode::Async,
    };
    config.overlap = args.overlap.unwrap_or(args.topology != Topology::Single);
    config.flush = match args.flush {
        Flush::Sync => NodeFlush::Sync,
        Flush::Async => NodeFlush::Async,
    };
    config.producers = args.producers;
    config.consumers = args.consumers;
    config.queues = args.queues;
    config.drain_timeout = Duration::from_secs(args.drain_seconds);
    config.progress = true;
    config.keep_dir = args.keep_dir;
    config.validate()?;
    eprintln!(
        "ferromq chaos: seed {seed}, {} s, topology {}, role {}, faults {}, flush {}, overlap {}",
        args.seconds,
        config.topology,
        config.master.name(),
        kinds_text(&config.faults),
        args.flush.name(),
        config.overlap
    );
    for planned in config.schedule() {
        eprintln!("  {planned}");
    }
    if args.schedule_only {
        return Ok(());
    }
    let runtime = crate::runtime()?;
    let outcome = runtime.block_on(async {
        let mut signals = crate::ShutdownSignals::install()?;
        tokio::select! {
            outcome = run(&config) => outcome.context("chaos run"),
            reason = signals.recv() => bail!("interrupted by {reason}; servers killed, run directory removed"),
        }
    })?;
    // Background client tasks end with the runtime.
    runtime.shutdown_timeout(Duration::from_secs(2));
    if let Some(path) = &args.history {
        std::fs::write(path, outcome.history.to_json_lines())
            .with_context(|| format!("writing the history to {}", path.display()))?;
    }
    let durability = durability(&config);
    let report = check(
        &outcome.history,
        &CheckOptions {
            durability,
            duplicate_bound: Some(args.duplicate_bound),
            failover_slack: ferromq_chaos::workload::pull::FAILOVER_SLACK,
        },
    );
    let summary = summary(&config, &outcome, &report)?;
    print_human(&summary, &report.failures());
    if args.json {
        println!("{summary}");
    }
    if summary["valid"] != json!(true) {
        bail!(
            "chaos run (seed {seed}) failed: {}",
            failure_text(&summary, &report.failures())
        );
    }
    Ok(())
}

/// What a kill may lose: a single broker with ASYNC_FLUSH its unflushed tail, an ASYNC_MASTER
/// its unreplicated tail when it fails over. A SYNC_MASTER group loses nothing acknowledged
/// whatever its flush (every in-sync replica holds the write; faults never kill two brokers at
/// once).
fn durability(config: &RunConfig) -> Durability {
    match (config.topology, config.flush, config.master) {
        (Topology::Single, NodeFlush::Async, _) | (_, _, MasterMode::Async) => Durability::Async,
        _ => Durability::Sync,
    }
}

fn kinds_text(kinds: &[FaultKind]) -> String {
    kinds.iter().map(|k| k.name()).collect::<Vec<_>>().join(",")
}

fn summary(config: &RunConfig, outcome: &RunOutcome, report: &Report) -> Result<Value> {
    let report_json = serde_json::to_value(report).context("serialising the checker report")?;
    let history = &outcome.offset_history;
    // An offset history that cannot be read proves nothing: the check fails.
    let history_ok = history.regressions.is_empty()
        && history.offline_resets.is_empty()
        && history.error.is_none();
    let unexpected_fault_errors = outcome.fault_errors.iter().filter(|e| !e.expected).count();
    let undone = undone_resets(&outcome.history);
    let faults: BTreeMap<&str, u64> = FaultKind::ALL
        .iter()
        .map(|k| (k.name(), outcome.faults.get(k.name()).copied().unwrap_or(0)))
        .collect();
    let t = &outcome.totals;
    let resets_undone: Vec<Value> = undone
        .iter()
        .map(|u| {
            json!({
                "queue": u.queue.to_string(),
                "reset_to": u.reset_to,
                "reset_at_ms": u.reset_at_ms,
                "committed": u.committed,
                "reread_up_to": u.frontier,
                "observed_at_ms": u.observed_at_ms,
            })
        })
        .collect::<Vec<_>>();
    let offset_history = json!({
        "events": history.events,
        "regressions": history.regressions.iter()
            .map(|(q, from, to)| json!({"queue": q.to_string(), "from": from, "to": to}))
            .collect::<Vec<_>>(),
        "offline_resets": history.offline_resets.iter()
            .map(|(q, offset)| json!({"queue": q.to_string(), "offset": offset}))
            .collect::<Vec<_>>(),
        "error": history.error,
    });
    let mut summary = json!({
        "valid": report.valid && history_ok && undone.is_empty() && unexpected_fault_errors == 0,
        "seed": config.seed,
        "flush": config.flush.name(),
        "seconds": config.seconds,
        "producers": config.producers,
        "consumers": config.consumers,
        "attempted": t.attempted,
        "acked": t.acked,
        "send_failed": t.failed,
        "indeterminate": t.indeterminate,
        "delivered": t.delivered,
        "deliveries": t.deliveries,
        "commits": t.commits_ok,
        "commits_failed": t.commits_failed,
        "lost": report.lost.count,
        "lost_failing": report.lost.failing,
        "lost_holes": report.async_loss.as_ref().map_or(0, |a| a.holes.count),
        "unexpected": report.unexpected.count,
        "failed_but_delivered": report.failed_but_delivered.count,
        "recovered": report.recovered.count,
        "duplicates": report.duplicates.total,
        "duplicates_max_per_restart": report.duplicates.max_per_restart,
        "offset_violations": report.offset_violations.count,
        "commit_regressions": report.commit_regressions.count,
        "commits_past_max": report.commits_past_max.count,
        "poll_skips": report.poll_skips.count,
        "resets_undone": resets_undone,
        "faults": faults,
        "faults_total": t.faults,
        "fault_errors": outcome.fault_errors,
        "drain_complete": outcome.drain_complete,
        "drain_ms": outcome.drain.as_millis() as u64,
        "elapsed_ms": outcome.elapsed.as_millis() as u64,
        "foreign_messages": outcome.foreign_messages,
        "kept_dir": outcome.kept_dir.as_ref().map(|d| d.display().to_string()),
        "offset_history": offset_history,
        "report": report_json,
    });
    // Added apart: one json! literal this long exceeds the macro's recursion limit.
    summary["topology"] = json!(config.topology.name());
    summary["role"] = json!(config.master.name());
    summary["overlap"] = json!(config.overlap);
    summary["unexpected_fault_errors"] = json!(unexpected_fault_errors);
    summary["failovers"] = json!(outcome.failovers);
    Ok(summary)
}

fn failure_text(summary: &Value, failures: &[String]) -> String {
    let mut parts: Vec<String> = failures.to_vec();
    if let Some(undone) = summary["resets_undone"]
        .as_array()
        .filter(|u| !u.is_empty())
    {
        parts.push(format!(
            "{} acknowledged resets undone (committed offset beyond what was re-read since \
             the reset): {}",
            undone.len(),
            Value::Array(undone.clone())
        ));
    }
    let history = &summary["offset_history"];
    for (key, what) in [
        (
            "regressions",
            "backward commits in the broker's offset history",
        ),
        (
            "offline_resets",
            "backward commits the broker took as offline resets",
        ),
    ] {
        let n = history[key].as_array().map_or(0, Vec::len);
        if n > 0 {
            parts.push(format!("{n} {what}"));
        }
    }
    if let Some(error) = history["error"].as_str() {
        parts.push(format!(
            "the broker's offset history could not be read: {error}"
        ));
    }
    let unexpected = summary["unexpected_fault_errors"].as_u64().unwrap_or(0);
    if unexpected > 0 {
        parts.push(format!("{unexpected} faults not carried out unexpectedly"));
    }
    if parts.is_empty() {
        "see the report".into()
    } else {
        parts.join("; ")
    }
}

fn print_human(summary: &Value, failures: &[String]) {
    let s = |key: &str| summary[key].to_string();
    println!(
        "seed {} topology {} role {} flush {} seconds {}: {}",
        s("seed"),
        summary["topology"].as_str().unwrap_or("?"),
        summary["role"].as_str().unwrap_or("?"),
        summary["flush"].as_str().unwrap_or("?"),
        s("seconds"),
        if summary["valid"] == json!(true) {
            "VALID"
        } else {
            "INVALID"
        }
    );
    println!(
        "sends: {} attempted, {} acknowledged, {} failed, {} indeterminate",
        s("attempted"),
        s("acked"),
        s("send_failed"),
        s("indeterminate")
    );
    println!(
        "deliveries: {} ({} distinct values); commits {} ok, {} failed",
        s("deliveries"),
        s("delivered"),
        s("commits"),
        s("commits_failed")
    );
    println!(
        "lost {} unexpected {} duplicates {} commit_regressions {} commits_past_max {} poll_skips {}",
        s("lost"),
        s("unexpected"),
        s("duplicates"),
        s("commit_regressions"),
        s("commits_past_max"),
        s("poll_skips")
    );
    println!(
        "faults: {} ({}); drain {} in {} ms",
        s("faults_total"),
        summary["faults"],
        if summary["drain_complete"] == json!(true) {
            "complete"
        } else {
            "incomplete"
        },
        s("drain_ms")
    );
    let history = &summary["offset_history"];
    println!(
        "broker offset history: {} events, {} regressions, {} offline resets{}",
        history["events"],
        history["regressions"].as_array().map_or(0, Vec::len),
        history["offline_resets"].as_array().map_or(0, Vec::len),
        history["error"]
            .as_str()
            .map(|e| format!(" (unreadable: {e})"))
            .unwrap_or_default()
    );
    if let Some(dir) = summary["kept_dir"].as_str() {
        println!("run directory kept: {dir}");
    }
    println!("failovers: {}", s("failovers"));
    for error in summary["fault_errors"].as_array().into_iter().flatten() {
        let expected = error["expected"] == json!(true);
        println!(
            "{}fault not carried out{}: {}: {}",
            if expected { "" } else { "FAIL " },
            if expected { " (expected)" } else { "" },
            error["fault"].as_str().unwrap_or(""),
            error["error"].as_str().unwrap_or("")
        );
    }
    for undone in summary["resets_undone"].as_array().into_iter().flatten() {
        println!("FAIL reset undone: {undone}");
    }
    for failure in failures {
        println!("FAIL {failure}");
    }
}
