//! Each deliberately injected bug must be caught within the CI seeds (0..1000), by a safety
//! property (not by a timeout), so a passing CI run means something.
//!
//! First catching seeds when written: `AckBeforeReplicated` 15, `ElectOutsideInSyncSet` 14
//! (both as an acknowledged record missing from a later master). The tests pin the first
//! seed so a change that weakens the simulation shows (a change to the simulation or to the
//! production code it drives moves every run: re-pin, and say why in the commit).
//!
//! Two more switches restore production behaviour this branch fixed, to show the simulation
//! catches the bugs it found: `GrowthNotWaitedFor` (before `in_sync` rule 6; first seed 254,
//! a read of a record an in-sync member lacks) and `StaleWatermarkAcrossTerms` (before rule
//! 7; first seed 83, a read past the master's own dispatch bound).

use ferromq_sim::checker::Violation;
use ferromq_sim::{run_seed, Failure, InjectedBug, SimConfig};

/// The CI seed range.
const SEEDS: std::ops::Range<u64> = 0..1000;

fn first_failure(bug: InjectedBug) -> Failure {
    let config = SimConfig {
        bug,
        ..SimConfig::default()
    };
    SEEDS
        .clone()
        .find_map(|seed| run_seed(seed, &config).err())
        .unwrap_or_else(|| panic!("{bug:?} was not caught by seeds {SEEDS:?}"))
}

fn assert_safety(failure: &Failure) {
    assert!(
        !matches!(failure.violation, Violation::NoProgress { .. }),
        "caught only as a liveness timeout:\n{failure}"
    );
    let text = failure.to_string();
    assert!(text.contains(&format!("seed {}", failure.seed)), "{text}");
    assert!(
        text.contains("swarm:") && text.contains("replay:"),
        "{text}"
    );
    assert!(!failure.trace.is_empty());
}

#[test]
fn acknowledging_before_the_in_sync_set_holds_a_write_is_caught() {
    let failure = first_failure(InjectedBug::AckBeforeReplicated);
    assert_safety(&failure);
    assert_eq!(failure.seed, 15, "first catching seed moved:\n{failure}");
    assert!(
        matches!(failure.violation, Violation::CommittedRecordMissing { .. }),
        "{failure}"
    );
}

#[test]
fn electing_outside_the_in_sync_set_is_caught() {
    let failure = first_failure(InjectedBug::ElectOutsideInSyncSet);
    assert_safety(&failure);
    assert_eq!(failure.seed, 14, "first catching seed moved:\n{failure}");
    assert!(
        matches!(failure.violation, Violation::CommittedRecordMissing { .. }),
        "{failure}"
    );
}

#[test]
fn the_same_seeds_pass_without_the_bug() {
    for seed in [14, 15, 83, 254] {
        if let Err(failure) = run_seed(seed, &SimConfig::default()) {
            panic!("{failure}");
        }
    }
}

#[test]
fn the_growth_race_fixed_by_in_sync_rule_6_is_caught() {
    let failure = first_failure(InjectedBug::GrowthNotWaitedFor);
    assert_safety(&failure);
    assert_eq!(failure.seed, 254, "first catching seed moved:\n{failure}");
    assert!(
        matches!(failure.violation, Violation::ReadPastWatermark { .. }),
        "{failure}"
    );
}

#[test]
fn the_stale_watermark_fixed_by_in_sync_rule_7_is_caught() {
    let failure = first_failure(InjectedBug::StaleWatermarkAcrossTerms);
    assert_safety(&failure);
    assert_eq!(failure.seed, 83, "first catching seed moved:\n{failure}");
}
