//! The simulation's only source of randomness: SplitMix64 streams, one per concern.
//!
//! Invariants:
//! 1. A stream's output depends only on the run's seed and the stream's salt, so adding draws
//!    to one concern (say, the network) never shifts another's (the disk's).
//! 2. Nothing here reads the clock, the environment or an OS source.

/// What a stream is for; each has its own salt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Swarm parameters (drawn once at the start).
    Swarm = 1,
    /// Message drop, delay, duplication.
    Network = 2,
    /// fsync failures, lost and torn writes at a crash, disk latency.
    Disk = 3,
    /// Producers, consumers and admin resets.
    Workload = 4,
    /// Crashes, restarts and partitions.
    Faults = 5,
}

/// A SplitMix64 generator (Steele, Lea and Flood, 2014): 64 bits of state, full period.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

/// Parts per million: probabilities are integers, so no float rounding enters a run.
pub const PPM: u32 = 1_000_000;

impl Rng {
    /// The stream `stream` of the run with this seed.
    pub fn new(seed: u64, stream: Stream) -> Rng {
        let mut rng = Rng {
            state: seed ^ (stream as u64).wrapping_mul(0xD1B5_4A32_D192_ED03),
        };
        // Mix the salt in before the first output.
        rng.next_u64();
        rng
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..bound` (`0` when `bound` is 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 {
            return 0;
        }
        // Multiply-shift: unbiased enough for bounds far below 2^64.
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }

    /// A number in `low..=high`.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high.saturating_sub(low) + 1)
    }

    /// True with probability `ppm` parts per million.
    pub fn chance(&mut self, ppm: u32) -> bool {
        self.below(u64::from(PPM)) < u64::from(ppm)
    }

    /// One element of a non-empty slice.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_reproducible_and_independent() {
        let mut a = Rng::new(7, Stream::Network);
        let mut b = Rng::new(7, Stream::Network);
        let mut c = Rng::new(7, Stream::Disk);
        let xs: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        let zs: Vec<u64> = (0..8).map(|_| c.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(xs, zs);
    }

    #[test]
    fn draws_stay_in_their_bounds() {
        let mut rng = Rng::new(1, Stream::Workload);
        for _ in 0..1000 {
            assert!(rng.below(10) < 10);
            let x = rng.between(5, 9);
            assert!((5..=9).contains(&x));
        }
        assert_eq!(rng.below(0), 0);
        assert!(!(0..1000).any(|_| rng.chance(0)));
        assert!((0..1000).all(|_| rng.chance(PPM)));
    }
}
