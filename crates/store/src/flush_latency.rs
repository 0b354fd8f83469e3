//! How long the CommitLog flusher's fsyncs take: a fixed-bucket histogram kept with relaxed
//! atomics, cheap enough for the flush path (one `Instant` read before and after, a handful of
//! atomic adds per fsync).
//!
//! Readers (the broker's metrics endpoint and `brokerStatus`) take [`FlushLatencySnapshot`]s;
//! the difference of two snapshots is the histogram of the fsyncs in between, so a reader can
//! report a recent window without the flusher knowing about windows.
//!
//! Invariants:
//! 1. Every recorded fsync lands in exactly one bucket: `bucket_counts` sums to `count` in any
//!    snapshot taken while no fsync is being recorded (a concurrent record may show in one
//!    field and not yet in another; readers tolerate that, it is a statistic).
//! 2. Counters only grow, so a later snapshot minus an earlier one never underflows
//!    (saturating subtraction keeps a torn read harmless).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the histogram buckets, µs; a last, unbounded bucket follows.
pub const FLUSH_LATENCY_BOUNDS_MICROS: [u64; 15] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 5_000_000,
];

/// Buckets including the unbounded last one.
const BUCKET_COUNT: usize = FLUSH_LATENCY_BOUNDS_MICROS.len() + 1;

/// Fsync durations of the flusher.
#[derive(Debug, Default)]
pub struct FlushLatency {
    buckets: [AtomicU64; BUCKET_COUNT],
    sum_micros: AtomicU64,
    count: AtomicU64,
    /// Longest fsync since the last [`FlushLatency::take_max_micros`].
    max_micros: AtomicU64,
}

impl FlushLatency {
    /// Records one fsync that took `elapsed`.
    pub fn record(&self, elapsed: Duration) {
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        let index = FLUSH_LATENCY_BOUNDS_MICROS
            .iter()
            .position(|bound| micros <= *bound)
            .unwrap_or(BUCKET_COUNT - 1);
        self.buckets[index].fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.max_micros.fetch_max(micros, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn snapshot(&self) -> FlushLatencySnapshot {
        FlushLatencySnapshot {
            bucket_counts: std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed)),
            sum_micros: self.sum_micros.load(Ordering::Relaxed),
            count: self.count.load(Ordering::Relaxed),
        }
    }

    /// The longest fsync since the previous call (0 when none), and starts a new period.
    /// Meant for one periodic reader (the broker's statistics sampler).
    pub fn take_max_micros(&self) -> u64 {
        self.max_micros.swap(0, Ordering::Relaxed)
    }
}

/// The flush histogram at one moment (or, from [`FlushLatencySnapshot::since`], over a period).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlushLatencySnapshot {
    /// Fsyncs per bucket (not cumulative); bucket `i < 15` holds durations at most
    /// `FLUSH_LATENCY_BOUNDS_MICROS[i]` and above the previous bound, the last one the rest.
    pub bucket_counts: [u64; BUCKET_COUNT],
    /// Total fsync time, µs.
    pub sum_micros: u64,
    /// Fsyncs recorded.
    pub count: u64,
}

impl FlushLatencySnapshot {
    /// The fsyncs recorded after `earlier` and up to `self`.
    pub fn since(&self, earlier: &FlushLatencySnapshot) -> FlushLatencySnapshot {
        FlushLatencySnapshot {
            bucket_counts: std::array::from_fn(|i| {
                self.bucket_counts[i].saturating_sub(earlier.bucket_counts[i])
            }),
            sum_micros: self.sum_micros.saturating_sub(earlier.sum_micros),
            count: self.count.saturating_sub(earlier.count),
        }
    }

    /// An upper estimate of the `quantile` (0.0..=1.0) in µs: the bound of the bucket holding
    /// it (`None` without samples; `u64::MAX` when it falls in the unbounded bucket).
    pub fn quantile_upper_micros(&self, quantile: f64) -> Option<u64> {
        let total: u64 = self.bucket_counts.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((quantile.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, count) in self.bucket_counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(
                    FLUSH_LATENCY_BOUNDS_MICROS
                        .get(i)
                        .copied()
                        .unwrap_or(u64::MAX),
                );
            }
        }
        Some(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_land_in_their_bucket_and_windows_subtract() {
        let latency = FlushLatency::default();
        latency.record(Duration::from_micros(40));
        let first = latency.snapshot();
        latency.record(Duration::from_micros(300));
        latency.record(Duration::from_millis(7));
        latency.record(Duration::from_secs(60));
        let now = latency.snapshot();
        assert_eq!(now.count, 4);
        assert_eq!(now.bucket_counts.iter().sum::<u64>(), 4);
        assert_eq!(now.bucket_counts[0], 1, "40 µs is in the 50 µs bucket");
        assert_eq!(now.bucket_counts[3], 1, "300 µs is in the 500 µs bucket");
        assert_eq!(now.bucket_counts[BUCKET_COUNT - 1], 1, "60 s is unbounded");
        let window = now.since(&first);
        assert_eq!(window.count, 3);
        assert_eq!(window.bucket_counts[0], 0);
        assert_eq!(window.quantile_upper_micros(0.5), Some(10_000));
        assert_eq!(window.quantile_upper_micros(0.01), Some(500));
        assert_eq!(window.quantile_upper_micros(1.0), Some(u64::MAX));
        assert_eq!(
            FlushLatencySnapshot::default().quantile_upper_micros(0.5),
            None
        );
        assert_eq!(latency.take_max_micros(), 60_000_000);
        assert_eq!(latency.take_max_micros(), 0, "a take starts a new period");
    }
}
