//! `ferromq-sim`: runs simulation seeds.
//!
//! ```text
//! ferromq-sim --seed S                 one seed, verbose (replay a failure)
//! ferromq-sim --seeds N [--start S]    N seeds from S (default 0); exit 1 on any failure
//!             [--bug ack-before-replicated|elect-outside-in-sync-set|growth-not-waited-for|
//!                    stale-watermark-across-terms|unchanged-acked-at-once]
//!             [--trace EVENTS]              how many events a failure shows
//! ```

use std::process::ExitCode;
use std::time::Instant;

use ferromq_sim::{run_seed, InjectedBug, SimConfig};

/// Most failures printed in full by a multi-seed run.
const FAILURES_PRINTED_MAX: usize = 5;

struct Args {
    seed: Option<u64>,
    seeds: u64,
    start: u64,
    bug: InjectedBug,
    trace_tail: Option<usize>,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        seed: None,
        seeds: 1,
        start: 0,
        bug: InjectedBug::None,
        trace_tail: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let number = |v: String| v.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--seed" => args.seed = Some(number(value()?)?),
            "--seeds" => args.seeds = number(value()?)?,
            "--start" => args.start = number(value()?)?,
            "--trace" => args.trace_tail = Some(number(value()?)? as usize),
            "--bug" => {
                args.bug = match value()?.as_str() {
                    "ack-before-replicated" => InjectedBug::AckBeforeReplicated,
                    "elect-outside-in-sync-set" => InjectedBug::ElectOutsideInSyncSet,
                    "growth-not-waited-for" => InjectedBug::GrowthNotWaitedFor,
                    "stale-watermark-across-terms" => InjectedBug::StaleWatermarkAcrossTerms,
                    "unchanged-acked-at-once" => InjectedBug::UnchangedAckedAtOnce,
                    other => return Err(format!("unknown bug {other}")),
                }
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(args) => args,
        Err(error) => {
            eprintln!("ferromq-sim: {error}");
            return ExitCode::from(2);
        }
    };
    let config = SimConfig {
        bug: args.bug,
        run_ms: None,
        trace_tail: args.trace_tail,
    };
    if let Some(seed) = args.seed {
        return match run_seed(seed, &config) {
            Ok(stats) => {
                println!("seed {seed} passed: {stats:#?}");
                ExitCode::SUCCESS
            }
            Err(failure) => {
                println!("{failure}");
                ExitCode::FAILURE
            }
        };
    }
    let started = Instant::now();
    let (mut events, mut failures, mut virtual_ms) = (0u64, Vec::new(), 0u64);
    let mut renewals = 0u64;
    for seed in args.start..args.start + args.seeds {
        match run_seed(seed, &config) {
            Ok(stats) => {
                events += stats.events;
                virtual_ms += stats.virtual_ms;
                renewals += stats.counters.renewals;
            }
            Err(failure) => failures.push(failure),
        }
    }
    let seconds = started.elapsed().as_secs_f64().max(1e-9);
    for failure in failures.iter().take(FAILURES_PRINTED_MAX) {
        println!("{failure}");
    }
    let failed: Vec<u64> = failures.iter().map(|f| f.seed).collect();
    println!(
        "seeds {}..{}: {} run, {} failed {:?}; {:.1} s, {:.1} seeds/s, {:.0} events/s, {:.0} virtual s",
        args.start,
        args.start + args.seeds,
        args.seeds,
        failed.len(),
        failed,
        seconds,
        args.seeds as f64 / seconds,
        events as f64 / seconds,
        virtual_ms as f64 / 1000.0
    );
    println!("terms renewed by restarted masters (passing seeds): {renewals}");
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
