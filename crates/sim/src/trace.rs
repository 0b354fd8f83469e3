//! The run's trace: a hash of every event (the determinism fingerprint) and the last
//! [`TRACE_TAIL_MAX`] events in full (the minimal trace a failure prints).
//!
//! Invariant: the hash covers every recorded event in order, so two runs with equal hashes
//! took the same steps (up to FNV-1a collisions).

use std::collections::VecDeque;

/// Most events a failure report shows.
pub const TRACE_TAIL_MAX: usize = 60;

/// One recorded event: virtual time and what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEvent {
    /// Virtual milliseconds.
    pub at_ms: u64,
    /// What happened.
    pub what: String,
}

/// The hash and tail of a run's events.
#[derive(Debug, Clone)]
pub struct Trace {
    hash: u64,
    count: u64,
    tail: VecDeque<TraceEvent>,
    tail_max: usize,
}

const FNV_OFFSET: u64 = 0xCBF2_9CE4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01B3;

impl Default for Trace {
    fn default() -> Self {
        Trace::with_tail(TRACE_TAIL_MAX)
    }
}

impl Trace {
    /// A trace keeping the last `tail_max` events (a replay may ask for more than the
    /// default [`TRACE_TAIL_MAX`]).
    pub fn with_tail(tail_max: usize) -> Trace {
        Trace {
            hash: FNV_OFFSET,
            count: 0,
            tail: VecDeque::with_capacity(tail_max.min(TRACE_TAIL_MAX)),
            tail_max: tail_max.max(1),
        }
    }

    /// Records one event.
    pub fn record(&mut self, at_ms: u64, what: String) {
        for byte in at_ms.to_le_bytes().iter().chain(what.as_bytes()) {
            self.hash = (self.hash ^ u64::from(*byte)).wrapping_mul(FNV_PRIME);
        }
        self.count += 1;
        if self.tail.len() >= self.tail_max {
            self.tail.pop_front();
        }
        self.tail.push_back(TraceEvent { at_ms, what });
    }

    /// The hash of every event so far.
    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// How many events were recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The last events, oldest first.
    pub fn tail(&self) -> Vec<TraceEvent> {
        self.tail.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_covers_order_and_the_tail_is_bounded() {
        let mut a = Trace::default();
        let mut b = Trace::default();
        a.record(1, "x".into());
        a.record(2, "y".into());
        b.record(2, "y".into());
        b.record(1, "x".into());
        assert_ne!(a.hash(), b.hash());
        for i in 0..(TRACE_TAIL_MAX as u64 + 10) {
            a.record(i, format!("e{i}"));
        }
        assert_eq!(a.tail().len(), TRACE_TAIL_MAX);
        assert_eq!(a.count(), TRACE_TAIL_MAX as u64 + 12);
        assert_eq!(
            a.tail().last().unwrap().what,
            format!("e{}", TRACE_TAIL_MAX + 9)
        );
    }
}
