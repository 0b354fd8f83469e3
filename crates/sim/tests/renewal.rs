//! A master that restarts within the controller's heartbeat timeout never resumes its term
//! (`RoleAction::Renew`): it asks the controller for a new election, which begins a new epoch
//! and restarts the in-sync set at the winner.
//!
//! Seed 89 (found with the CI seeds) is the case that used to fail: the master crashed with an
//! unsynced tail its slaves had received, restarted within the heartbeat timeout and resumed
//! epoch 1; both slaves were refused `AheadOfMaster` forever and, with `minInSyncReplicas` 2,
//! no write was acknowledged again. The other seeds of the former known gap (a resumed
//! master serving its recovered tail while an in-sync member lacked it) are pinned too.

use ferromq_sim::{run_seed, SimConfig};

/// The seeds 0..2000 that failed while restarted masters resumed their epoch.
const FORMER_GAP_SEEDS: [u64; 9] = [89, 498, 501, 520, 623, 738, 921, 1567, 1989];

#[test]
fn restarted_masters_renew_their_term_and_every_former_gap_seed_passes() {
    let mut renewals = 0;
    for seed in FORMER_GAP_SEEDS {
        let stats = run_seed(seed, &SimConfig::default()).unwrap_or_else(|f| panic!("{f}"));
        renewals += stats.counters.renewals;
    }
    assert!(
        renewals > 0,
        "none of the former gap seeds went through a term renewal"
    );
}

#[test]
fn seed_89_renews_instead_of_stranding_its_replicas() {
    let stats = run_seed(89, &SimConfig::default()).unwrap_or_else(|f| panic!("{f}"));
    assert!(stats.counters.renewals >= 1, "{stats:?}");
    assert!(stats.acknowledged > 0, "{stats:?}");
}
