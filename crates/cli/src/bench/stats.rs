//! A latency histogram with bounded relative error, and the percentiles it reports.
//!
//! Values are nanoseconds in log-linear buckets: values below 256 get one bucket each, and
//! every larger power-of-two range `[2^k, 2^(k+1))` is split into 128 equal buckets, so a
//! reported value is within 1/128 (< 0.8 %) of the true one. The whole `u64` range fits in
//! `BUCKET_COUNT` buckets (58 KiB), so recording never allocates and never saturates.
//!
//! Invariants:
//! 1. `count` equals the sum of the buckets.
//! 2. A percentile is the upper bound of the bucket holding the rank, clamped to the exact
//!    `max`, so it never understates a latency and never exceeds the largest one seen.

use std::time::Duration;

const SUB_BUCKET_BITS: u32 = 7;
const SUB_BUCKET_COUNT: usize = 1 << SUB_BUCKET_BITS;
/// Buckets needed for the largest `u64`: shift 56, mantissa below 256.
const BUCKET_COUNT: usize = (64 - SUB_BUCKET_BITS as usize) * SUB_BUCKET_COUNT + SUB_BUCKET_COUNT;

/// Latencies in nanoseconds.
#[derive(Debug, Clone)]
pub struct Histogram {
    buckets: Vec<u64>,
    count: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: vec![0; BUCKET_COUNT],
            count: 0,
            max: 0,
        }
    }
}

impl Histogram {
    /// Records one value.
    pub fn record(&mut self, value_ns: u64) {
        self.buckets[bucket_index(value_ns)] += 1;
        self.count += 1;
        self.max = self.max.max(value_ns);
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.buckets.iter_mut().zip(&other.buckets) {
            *mine += theirs;
        }
        self.count += other.count;
        self.max = self.max.max(other.max);
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Largest value recorded (0 when empty).
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The value at `quantile` (0.0..=1.0): the smallest bucket bound with at least that share
    /// of values at or below it. 0 when empty.
    pub fn percentile(&self, quantile: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((quantile.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (index, bucket) in self.buckets.iter().enumerate() {
            seen += bucket;
            if seen >= rank {
                return bucket_upper(index).min(self.max);
            }
        }
        self.max
    }
}

fn bucket_index(value: u64) -> usize {
    let msb = 63 - (value | 1).leading_zeros();
    let shift = msb.saturating_sub(SUB_BUCKET_BITS);
    (shift as usize) * SUB_BUCKET_COUNT + (value >> shift) as usize
}

/// Largest value that falls in bucket `index`.
fn bucket_upper(index: usize) -> u64 {
    if index < 2 * SUB_BUCKET_COUNT {
        return index as u64;
    }
    let shift = (index / SUB_BUCKET_COUNT - 1) as u32;
    let mantissa = (index - shift as usize * SUB_BUCKET_COUNT) as u64;
    // The top bucket's bound is 2^64 - 1: the shift wraps to 0 and the subtraction back.
    ((mantissa + 1) << shift).wrapping_sub(1)
}

/// Nanoseconds as microseconds with 0.1 µs precision.
pub fn ns_to_us(ns: u64) -> f64 {
    (ns as f64 / 100.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_are_exact() {
        for value in 0..512 {
            let index = bucket_index(value);
            assert!(bucket_upper(index) >= value);
            if value < 256 {
                assert_eq!(bucket_upper(index), value);
            }
        }
    }

    #[test]
    fn every_value_lands_in_a_bucket_within_one_128th() {
        let mut value = 1u64;
        while value < u64::MAX / 3 {
            for probe in [value, value + value / 3, value * 2 - 1] {
                let index = bucket_index(probe);
                assert!(index < BUCKET_COUNT);
                let upper = bucket_upper(index);
                assert!(upper >= probe, "{probe} above its bucket bound {upper}");
                assert!(
                    (upper - probe) as f64 <= probe as f64 / 128.0,
                    "{probe} -> {upper}"
                );
            }
            value *= 2;
        }
        assert!(bucket_index(u64::MAX) < BUCKET_COUNT);
        assert_eq!(bucket_upper(bucket_index(u64::MAX)), u64::MAX);
    }

    #[test]
    fn bucket_indexes_are_monotone() {
        let mut previous = 0;
        for value in (0..1_000_000u64).step_by(7) {
            let index = bucket_index(value);
            assert!(index >= previous);
            previous = index;
        }
    }

    #[test]
    fn percentiles_of_a_uniform_set() {
        let mut histogram = Histogram::default();
        for value in 1..=10_000u64 {
            histogram.record(value * 1_000);
        }
        let close = |got: u64, want: u64| (got as f64 - want as f64).abs() <= want as f64 / 100.0;
        assert!(close(histogram.percentile(0.5), 5_000_000));
        assert!(close(histogram.percentile(0.99), 9_900_000));
        assert!(close(histogram.percentile(0.999), 9_990_000));
        assert_eq!(histogram.percentile(1.0), 10_000_000);
        assert_eq!(histogram.max(), 10_000_000);
        assert_eq!(histogram.count(), 10_000);
    }

    #[test]
    fn empty_histogram_reports_zero() {
        let histogram = Histogram::default();
        assert_eq!(histogram.percentile(0.99), 0);
        assert_eq!(histogram.max(), 0);
    }

    #[test]
    fn merge_adds_counts_and_keeps_the_max() {
        let mut a = Histogram::default();
        let mut b = Histogram::default();
        a.record(10);
        b.record(1_000_000);
        b.record(20);
        a.merge(&b);
        assert_eq!(a.count(), 3);
        assert_eq!(a.max(), 1_000_000);
        assert_eq!(a.percentile(0.5), 20);
    }

    #[test]
    fn microseconds_round_to_a_tenth() {
        assert_eq!(ns_to_us(1_234_567), 1234.6);
        assert_eq!(ns_to_us(0), 0.0);
    }
}

/// What a baseline probe (`fsync_probe`, `rtt_probe`) measured: one latency per cycle.
#[derive(Debug, Default)]
pub struct Probe {
    /// Cycles done.
    pub cycles: u64,
    /// Time of all cycles.
    pub elapsed: Duration,
    /// Latency of each cycle.
    pub latency: Histogram,
}

impl Probe {
    /// The median cycle, µs.
    pub fn p50_us(&self) -> f64 {
        ns_to_us(self.latency.percentile(0.5))
    }

    /// The 99th percentile cycle, µs.
    pub fn p99_us(&self) -> f64 {
        ns_to_us(self.latency.percentile(0.99))
    }

    /// Records one cycle that took `took`.
    pub fn record(&mut self, took: Duration) {
        self.latency
            .record(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX));
        self.cycles += 1;
    }
}
