//! What a master sends one slave next: flow control of the log stream. Pure state, so the
//! simulation drives it.
//!
//! Invariants:
//! 1. The master sends the log in order from the slave's end, each byte once per connection.
//! 2. At most [`WINDOW_BYTES`] are sent and not yet acknowledged (backpressure: a slow slave
//!    slows its stream, never the master's memory).
//! 3. A slave may acknowledge only what it was sent; more is a bad peer ([`StreamError`]).

/// Most bytes sent to one slave and not yet acknowledged.
pub const WINDOW_BYTES: u64 = 8 * 1024 * 1024;

/// Most log bytes per Data frame (a larger single record goes alone).
pub const CHUNK_BYTES: usize = 256 * 1024;

/// A slave acknowledged what it was never sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the slave acknowledged {acked}, but was sent the log only up to {sent}")]
pub struct StreamError {
    /// What it acknowledged.
    pub acked: u64,
    /// Where the stream stands.
    pub sent: u64,
}

/// One slave's stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamState {
    next: u64,
    acked: u64,
}

impl StreamState {
    /// A stream starting at the slave's end.
    pub fn new(start: u64) -> StreamState {
        StreamState {
            next: start,
            acked: start,
        }
    }

    /// Where to read next and how much, if anything may be sent now.
    pub fn next_read(&self, committed_end: u64) -> Option<(u64, usize)> {
        let in_flight = self.next - self.acked;
        if self.next >= committed_end || in_flight >= WINDOW_BYTES {
            return None;
        }
        let room = (WINDOW_BYTES - in_flight).min(CHUNK_BYTES as u64) as usize;
        Some((self.next, room))
    }

    /// A chunk was sent; the log continues at `next`.
    pub fn sent(&mut self, next: u64) {
        self.next = self.next.max(next);
    }

    /// The slave acknowledged `end`.
    ///
    /// # Errors
    /// [`StreamError`] when `end` is past what was sent.
    pub fn acked(&mut self, end: u64) -> Result<(), StreamError> {
        if end > self.next {
            return Err(StreamError {
                acked: end,
                sent: self.next,
            });
        }
        self.acked = self.acked.max(end);
        Ok(())
    }

    /// Where the stream stands.
    pub fn position(&self) -> u64 {
        self.next
    }

    /// What the slave acknowledged.
    pub fn acknowledged(&self) -> u64 {
        self.acked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_bounds_what_is_in_flight_and_acks_reopen_it() {
        let mut s = StreamState::new(100);
        assert_eq!(s.next_read(100), None, "nothing new");
        assert_eq!(s.next_read(200), Some((100, CHUNK_BYTES)));
        let mut end = 100;
        while let Some((from, len)) = s.next_read(u64::MAX) {
            assert_eq!(from, end);
            end += len as u64;
            s.sent(end);
        }
        assert_eq!(end - 100, WINDOW_BYTES, "stops at the window");
        s.acked(100 + WINDOW_BYTES / 2).unwrap();
        assert!(s.next_read(u64::MAX).is_some());
        assert_eq!(
            s.acked(end + 1),
            Err(StreamError {
                acked: end + 1,
                sent: end
            })
        );
    }
}
