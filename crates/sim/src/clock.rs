//! Virtual time. The run's clock is a number of milliseconds that only the scheduler moves;
//! production functions that take an [`Instant`] get `base + virtual ms` from one base
//! captured once per process, so their results depend only on virtual time.
//!
//! Invariants:
//! 1. Virtual time never goes backwards (the scheduler pops events in time order).
//! 2. No code of the simulation reads the wall clock except [`base`], once.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The one wall-clock reading: the origin of every simulated [`Instant`]. Only differences of
/// instants reach production code, so its value never changes an outcome.
pub fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// The production `Instant` of virtual time `ms`.
pub fn instant(ms: u64) -> Instant {
    base() + Duration::from_millis(ms)
}

/// Virtual milliseconds of a production duration (saturating).
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_follow_virtual_time() {
        assert_eq!(instant(250) - instant(0), Duration::from_millis(250));
        assert!(instant(1) > instant(0));
        assert_eq!(millis(Duration::from_secs(2)), 2000);
    }
}
