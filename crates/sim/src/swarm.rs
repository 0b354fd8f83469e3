//! Swarm parameters: the fault rates and run shape of one run, derived from its seed and
//! printed with every failure (swarm testing: each seed explores a different mix instead of
//! every run averaging over one).
//!
//! Invariant: [`Swarm::from_seed`] reads only the swarm stream of the seed, so the same seed
//! always gets the same parameters, and the rates stay within the bounds below (a liveness
//! phase can always converge once faults stop).

use std::fmt;

use crate::rng::{Rng, Stream, PPM};

/// The replica count of the simulated broker group (a master and two slaves).
pub const REPLICA_COUNT: u64 = 3;

/// One run's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Swarm {
    /// Length of the safety phase (faults on), virtual ms.
    pub run_ms: u64,
    /// Probability that a message is dropped.
    pub drop_ppm: u32,
    /// Probability that a message is delivered twice.
    pub duplicate_ppm: u32,
    /// Base one-way latency, virtual ms.
    pub latency_ms: u64,
    /// Extra random delay up to this (reorders messages), virtual ms.
    pub jitter_ms: u64,
    /// Mean time between two fault injections, virtual ms.
    pub fault_interval_ms: u64,
    /// Weight of crashes among faults (the rest are partitions), per million.
    pub crash_ppm: u32,
    /// Probability that an fsync fails (the replica poisons itself and crashes).
    pub fsync_fail_ppm: u32,
    /// At a crash, probability that some of the unsynced log tail survives (possibly torn).
    pub keep_unsynced_ppm: u32,
    /// Probability that a surviving unsynced tail ends in a torn (corrupt) write.
    pub tear_ppm: u32,
    /// Probability that an epoch-file write fails.
    pub epoch_write_fail_ppm: u32,
    /// Time an fsync takes, at most, virtual ms.
    pub fsync_ms_max: u64,
    /// `minInSyncReplicas` (the master counts).
    pub min_in_sync_replicas: usize,
    /// Mean time between two producer sends, virtual ms.
    pub produce_interval_ms: u64,
    /// Probability that a consumer poll is an admin reset instead.
    pub reset_ppm: u32,
}

impl Swarm {
    /// The parameters of `seed`.
    pub fn from_seed(seed: u64) -> Swarm {
        let mut rng = Rng::new(seed, Stream::Swarm);
        let mut rate = |max_ppm: u32| {
            // A quarter of the runs have none of a given fault: swarm testing's switch-off.
            if rng.chance(PPM / 4) {
                0
            } else {
                rng.below(u64::from(max_ppm)) as u32
            }
        };
        let drop_ppm = rate(60_000);
        let duplicate_ppm = rate(30_000);
        let fsync_fail_ppm = rate(4_000);
        let keep_unsynced_ppm = rate(PPM);
        let tear_ppm = rate(PPM);
        let epoch_write_fail_ppm = rate(20_000);
        let reset_ppm = rate(150_000);
        Swarm {
            run_ms: rng.between(8_000, 16_000),
            drop_ppm,
            duplicate_ppm,
            latency_ms: rng.between(1, 10),
            jitter_ms: rng.between(0, 40),
            fault_interval_ms: rng.between(300, 2_500),
            crash_ppm: rng.between(200_000, 800_000) as u32,
            fsync_fail_ppm,
            keep_unsynced_ppm,
            tear_ppm,
            epoch_write_fail_ppm,
            fsync_ms_max: rng.between(1, 20),
            min_in_sync_replicas: rng.between(1, 2) as usize,
            produce_interval_ms: rng.between(10, 120),
            reset_ppm,
        }
    }
}

impl fmt::Display for Swarm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "run_ms={} drop_ppm={} duplicate_ppm={} latency_ms={} jitter_ms={} \
             fault_interval_ms={} crash_ppm={} fsync_fail_ppm={} keep_unsynced_ppm={} \
             tear_ppm={} epoch_write_fail_ppm={} fsync_ms_max={} min_in_sync_replicas={} \
             produce_interval_ms={} reset_ppm={} replicas={REPLICA_COUNT}",
            self.run_ms,
            self.drop_ppm,
            self.duplicate_ppm,
            self.latency_ms,
            self.jitter_ms,
            self.fault_interval_ms,
            self.crash_ppm,
            self.fsync_fail_ppm,
            self.keep_unsynced_ppm,
            self.tear_ppm,
            self.epoch_write_fail_ppm,
            self.fsync_ms_max,
            self.min_in_sync_replicas,
            self.produce_interval_ms,
            self.reset_ppm,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_always_gets_the_same_parameters_and_seeds_differ() {
        assert_eq!(Swarm::from_seed(42), Swarm::from_seed(42));
        let distinct: std::collections::BTreeSet<String> =
            (0..20).map(|s| Swarm::from_seed(s).to_string()).collect();
        assert!(distinct.len() > 15, "{distinct:?}");
        for seed in 0..200 {
            let swarm = Swarm::from_seed(seed);
            assert!((1..=2).contains(&swarm.min_in_sync_replicas));
            assert!(swarm.drop_ppm < 60_000 && swarm.fsync_fail_ppm < 4_000);
        }
    }
}
