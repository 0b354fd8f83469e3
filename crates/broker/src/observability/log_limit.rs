//! A bound on log lines a client can trigger at will: a hostile or broken client repeating a
//! failing request must not flood the log, yet the first failure of a burst is always logged,
//! with how many were left out since the last line (the counters keep the exact numbers).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Allows one log line per `interval`; counts the lines it refuses.
#[derive(Debug)]
pub struct LogEvery {
    interval_ms: u64,
    /// Milliseconds since [`process_start`] from which the next line may be logged.
    next_ms: AtomicU64,
    suppressed: AtomicU64,
}

impl LogEvery {
    /// At most one line per `interval`.
    pub const fn new(interval: Duration) -> LogEvery {
        LogEvery {
            interval_ms: interval.as_millis() as u64,
            next_ms: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// `Some(lines left out since the last one)` when a line may be logged now, else `None`
    /// (and the line is counted as left out).
    pub fn allow(&self) -> Option<u64> {
        let now = process_start().elapsed().as_millis() as u64;
        let next = self.next_ms.load(Ordering::Relaxed);
        if now >= next
            && self
                .next_ms
                .compare_exchange(
                    next,
                    now + self.interval_ms,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }
}

/// The instant the first limited line was considered (a fixed origin for `next_ms`).
fn process_start() -> Instant {
    static START: OnceLock<Instant> = OnceLock::new();
    *START.get_or_init(Instant::now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_and_the_rest_counted() {
        let limit = LogEvery::new(Duration::from_millis(200));
        assert_eq!(limit.allow(), Some(0));
        assert_eq!(limit.allow(), None);
        assert_eq!(limit.allow(), None);
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(limit.allow(), Some(2));
        assert_eq!(limit.allow(), None);
    }
}
