//! The CI seeds: 1,000 seeds (0..1000) of the simulation must keep every property, and the
//! runs together must really exercise failover (crashes, elections, truncations, torn
//! tails, acknowledged writes), so a pass means something.
//!
//! Split in four tests so the test runner spreads them over the cores.

use ferromq_sim::{run_seed, RunStats, SimConfig};

/// The CI seed range.
const SEEDS: std::ops::Range<u64> = 0..1000;

fn run_range(range: std::ops::Range<u64>) -> Vec<RunStats> {
    let config = SimConfig::default();
    let mut passed = Vec::new();
    let mut failures = Vec::new();
    for seed in range {
        match run_seed(seed, &config) {
            Ok(stats) => passed.push(stats),
            Err(failure) => failures.push(failure.to_string()),
        }
    }
    assert!(
        failures.is_empty(),
        "{} seed(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    passed
}

fn quarter(i: u64) -> std::ops::Range<u64> {
    let step = (SEEDS.end - SEEDS.start) / 4;
    SEEDS.start + i * step..SEEDS.start + (i + 1) * step
}

fn assert_exercised(stats: &[RunStats]) {
    let sum = |f: fn(&RunStats) -> u64| stats.iter().map(f).sum::<u64>();
    let acknowledged = sum(|s| s.acknowledged);
    let promotions = sum(|s| s.counters.promotions);
    let crashes = sum(|s| s.counters.crashes);
    let truncations = sum(|s| s.counters.truncations);
    let consumed = sum(|s| s.consumed);
    let lost = sum(|s| s.counters.lost_unsynced_bytes);
    let n = stats.len() as u64;
    assert!(
        acknowledged > 20 * n,
        "acknowledged {acknowledged} over {n} seeds"
    );
    assert!(promotions > 2 * n, "promotions {promotions} over {n} seeds");
    assert!(crashes > n, "crashes {crashes} over {n} seeds");
    assert!(
        truncations >= n / 50,
        "truncations {truncations} over {n} seeds"
    );
    assert!(consumed > 10 * n, "consumed {consumed} over {n} seeds");
    assert!(lost > 0, "no crash ever lost an unsynced tail");
}

#[test]
fn ci_seeds_first_quarter_keep_every_property() {
    assert_exercised(&run_range(quarter(0)));
}

#[test]
fn ci_seeds_second_quarter_keep_every_property() {
    assert_exercised(&run_range(quarter(1)));
}

#[test]
fn ci_seeds_third_quarter_keep_every_property() {
    assert_exercised(&run_range(quarter(2)));
}

#[test]
fn ci_seeds_fourth_quarter_keep_every_property() {
    assert_exercised(&run_range(quarter(3)));
}
