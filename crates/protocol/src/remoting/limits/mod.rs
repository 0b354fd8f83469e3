//! The limits a remoting server puts on its connections, shared by the broker and the name
//! server so both defend themselves the same way against clients that open too many
//! connections, stay silent, or send frames slowly:
//!
//! - **connection limit** (`maxConnections`): a connection past it is closed as soon as it is
//!   accepted ([`Acceptor`]), so file descriptors stay for the store; the limit is also
//!   capped by the process's open-file limit ([`connection_limit`]);
//! - **accept back-off**: when accepting fails for lack of descriptors (EMFILE, ENFILE), the
//!   acceptor pauses, growing and bounded, instead of spinning on the pending connection;
//! - **idle timeout** (RocketMQ's `serverChannelMaxIdleTimeSeconds`): a connection with no
//!   byte in or out and no request in flight for that long is closed ([`FrameReader`]);
//! - **frame deadline** (`frameReadTimeoutMillis`): once the first byte of a frame has
//!   arrived, the whole frame must arrive within it (slowloris);
//! - **partial-frame budget** (`partialFrameBudgetBytes`): the memory the incomplete frames
//!   of all connections may hold together. A connection whose frame would pass it is closed
//!   at once rather than made to wait: a waiting connection still holds its descriptor and
//!   buffer and, as RocketMQ clients time a send out after 3 s, would mostly turn into a
//!   timeout anyway, while a close is a fast, clear failure the client retries.
//!
//! Every refusal and close is counted in [`LimitCounters`]; the broker renders them as
//! Prometheus metrics.
//!
//! Invariant: memory buffered for a connection's frames is its [`READ_CHUNK`] plus, for a frame
//! larger than that, the frame's announced size, and the sum of the latter over all
//! connections never exceeds the budget.

mod accept;
mod reader;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use accept::{
    connection_limit, Accepted, Acceptor, ConnectionLimit, ACCEPT_BACKOFF_MAX, ACCEPT_BACKOFF_MIN,
    FD_RESERVE_MIN,
};
pub use reader::{Activity, FrameReadError, FrameReader, InFlight, READ_CHUNK};

/// Default `maxConnections`: thousands of clients per broker is common, and each connection
/// costs one descriptor and about [`READ_CHUNK`] of memory.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10_000;
/// Largest `maxConnections` accepted: Linux's default ceiling on a process's descriptors
/// (`fs.nr_open`) is 1 048 576, so more could never be served.
pub const MAX_CONNECTIONS_CEILING: u32 = 1 << 20;
/// Default idle timeout, RocketMQ's `serverChannelMaxIdleTimeSeconds` (120 s); clients send a
/// heartbeat every 30 s, so a live client is never idle that long.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest idle timeout accepted (one day): a longer one keeps dead connections forever in
/// practice, which is what the timeout is there to prevent.
pub const MAX_IDLE_TIMEOUT: Duration = Duration::from_secs(86_400);
/// Default frame deadline: a RocketMQ client gives up on a send after 3 s, so a frame that
/// takes ten times that to arrive is served to nobody; 30 s still carries a 16 MiB frame at
/// 0.6 MB/s.
pub const DEFAULT_FRAME_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Shortest frame deadline accepted: below 10 ms a frame split across two TCP segments could
/// miss it on a loaded machine.
pub const MIN_FRAME_READ_TIMEOUT: Duration = Duration::from_millis(10);
/// Longest frame deadline accepted (10 min): past that the deadline no longer bounds how
/// long a stalled sender holds memory.
pub const MAX_FRAME_READ_TIMEOUT: Duration = Duration::from_secs(600);
/// Default partial-frame budget (256 MiB): sixteen 16 MiB frames arriving at once, far above
/// what loopback or a LAN keeps in flight, and a fraction of a broker host's memory.
pub const DEFAULT_PARTIAL_FRAME_BUDGET: u64 = 256 << 20;
/// Largest partial-frame budget accepted (64 GiB): more than that is not a bound on a real
/// host.
pub const MAX_PARTIAL_FRAME_BUDGET: u64 = 64 << 30;

/// A limit setting ferromq cannot use; names the configuration key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("config key {key}: {message}")]
pub struct LimitError {
    /// The key, as the broker configuration spells it.
    pub key: &'static str,
    /// What is wrong.
    pub message: String,
}

/// The limit settings of one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitSettings {
    /// `maxConnections`: connections served at once (before the open-file cap).
    pub max_connections: u32,
    /// `serverChannelMaxIdleTimeSeconds`: silence after which a connection is closed.
    pub idle_timeout: Duration,
    /// `frameReadTimeoutMillis`: longest time from a frame's first byte to its last.
    pub frame_read_timeout: Duration,
    /// `partialFrameBudgetBytes`: memory all connections' incomplete frames may hold.
    pub partial_frame_budget_bytes: u64,
    /// `maxFrameLength`: largest frame, length field included.
    pub max_frame_length: usize,
}

impl Default for LimitSettings {
    fn default() -> Self {
        LimitSettings {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            frame_read_timeout: DEFAULT_FRAME_READ_TIMEOUT,
            partial_frame_budget_bytes: DEFAULT_PARTIAL_FRAME_BUDGET,
            max_frame_length: crate::remoting::DEFAULT_MAX_FRAME_LENGTH,
        }
    }
}

impl LimitSettings {
    /// Refuses zero and absurd values, naming the key.
    pub fn validate(&self) -> Result<(), LimitError> {
        let invalid = |key, message: String| Err(LimitError { key, message });
        if self.max_connections == 0 || self.max_connections > MAX_CONNECTIONS_CEILING {
            return invalid(
                "maxConnections",
                format!("must be between 1 and {MAX_CONNECTIONS_CEILING}"),
            );
        }
        if self.idle_timeout < Duration::from_secs(1) || self.idle_timeout > MAX_IDLE_TIMEOUT {
            return invalid(
                "serverChannelMaxIdleTimeSeconds",
                format!(
                    "must be between 1 and {} seconds",
                    MAX_IDLE_TIMEOUT.as_secs()
                ),
            );
        }
        if self.frame_read_timeout < MIN_FRAME_READ_TIMEOUT
            || self.frame_read_timeout > MAX_FRAME_READ_TIMEOUT
        {
            return invalid(
                "frameReadTimeoutMillis",
                format!(
                    "must be between {} and {} ms",
                    MIN_FRAME_READ_TIMEOUT.as_millis(),
                    MAX_FRAME_READ_TIMEOUT.as_millis()
                ),
            );
        }
        let budget = self.partial_frame_budget_bytes;
        if budget < self.max_frame_length as u64 || budget > MAX_PARTIAL_FRAME_BUDGET {
            return invalid(
                "partialFrameBudgetBytes",
                format!(
                    "must be between maxFrameLength ({}, so a largest frame can arrive) and \
                     {MAX_PARTIAL_FRAME_BUDGET} bytes",
                    self.max_frame_length
                ),
            );
        }
        Ok(())
    }
}

/// Refusals and closes of one server, since it started.
#[derive(Debug, Default)]
pub struct LimitCounters {
    refused_over_limit: AtomicU64,
    accept_fd_exhausted: AtomicU64,
    accept_failed_other: AtomicU64,
    closed_idle: AtomicU64,
    closed_frame_timeout: AtomicU64,
    closed_frame_budget: AtomicU64,
}

/// The values of [`LimitCounters`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimitSnapshot {
    /// Connections closed at accept because `maxConnections` were open.
    pub refused_over_limit: u64,
    /// Accepts that failed for lack of descriptors (EMFILE, ENFILE); each paused the acceptor.
    pub accept_fd_exhausted: u64,
    /// Accepts that failed otherwise.
    pub accept_failed_other: u64,
    /// Connections closed by the idle timeout.
    pub closed_idle: u64,
    /// Connections closed because a frame missed its deadline.
    pub closed_frame_timeout: u64,
    /// Connections closed because their frame would have passed the partial-frame budget.
    pub closed_frame_budget: u64,
}

impl LimitCounters {
    /// The counts now.
    pub fn snapshot(&self) -> LimitSnapshot {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        LimitSnapshot {
            refused_over_limit: get(&self.refused_over_limit),
            accept_fd_exhausted: get(&self.accept_fd_exhausted),
            accept_failed_other: get(&self.accept_failed_other),
            closed_idle: get(&self.closed_idle),
            closed_frame_timeout: get(&self.closed_frame_timeout),
            closed_frame_budget: get(&self.closed_frame_budget),
        }
    }
}

/// Adds one and returns the new count.
fn bump(counter: &AtomicU64) -> u64 {
    counter.fetch_add(1, Ordering::Relaxed) + 1
}

/// The shared state of one server's limits: settings, open connections, the partial-frame
/// budget in use and the counters. One per listening socket, shared by its connections.
#[derive(Debug)]
pub struct ConnectionGuard {
    settings: LimitSettings,
    limit: usize,
    open: AtomicUsize,
    budget_in_use: AtomicU64,
    counters: LimitCounters,
}

impl ConnectionGuard {
    /// A guard admitting at most `limit` connections (see [`connection_limit`]).
    pub fn new(settings: LimitSettings, limit: usize) -> Arc<ConnectionGuard> {
        Arc::new(ConnectionGuard {
            settings,
            limit,
            open: AtomicUsize::new(0),
            budget_in_use: AtomicU64::new(0),
            counters: LimitCounters::default(),
        })
    }

    /// The settings.
    pub fn settings(&self) -> &LimitSettings {
        &self.settings
    }

    /// Connections admitted at once: `maxConnections` capped by the open-file limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Connections admitted and not yet closed.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Bytes of the partial-frame budget held by incomplete frames now.
    pub fn partial_frame_bytes(&self) -> u64 {
        self.budget_in_use.load(Ordering::Acquire)
    }

    /// The counters.
    pub fn counters(&self) -> &LimitCounters {
        &self.counters
    }

    /// Admits one more connection unless `limit` are open.
    pub fn try_admit(self: &Arc<Self>) -> Option<ConnectionPermit> {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < self.limit).then_some(open + 1)
            })
            .ok()?;
        Some(ConnectionPermit {
            guard: self.clone(),
        })
    }

    /// Moves a connection's charge from `from` to `to` bytes; false (nothing changed) when
    /// growing it would pass the budget.
    fn recharge(&self, from: u64, to: u64) -> bool {
        if to <= from {
            self.budget_in_use.fetch_sub(from - to, Ordering::AcqRel);
            return true;
        }
        let budget = self.settings.partial_frame_budget_bytes;
        self.budget_in_use
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                let grown = used.saturating_sub(from) + to;
                (grown <= budget).then_some(grown)
            })
            .is_ok()
    }
}

/// One admitted connection; dropping it frees its place under the limit.
#[derive(Debug)]
pub struct ConnectionPermit {
    guard: Arc<ConnectionGuard>,
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        self.guard.open.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_and_absurd_settings_are_refused_naming_the_key() {
        LimitSettings::default().validate().unwrap();
        let cases = [
            (
                LimitSettings {
                    max_connections: 0,
                    ..Default::default()
                },
                "maxConnections",
            ),
            (
                LimitSettings {
                    max_connections: MAX_CONNECTIONS_CEILING + 1,
                    ..Default::default()
                },
                "maxConnections",
            ),
            (
                LimitSettings {
                    idle_timeout: Duration::ZERO,
                    ..Default::default()
                },
                "serverChannelMaxIdleTimeSeconds",
            ),
            (
                LimitSettings {
                    idle_timeout: MAX_IDLE_TIMEOUT * 2,
                    ..Default::default()
                },
                "serverChannelMaxIdleTimeSeconds",
            ),
            (
                LimitSettings {
                    frame_read_timeout: Duration::ZERO,
                    ..Default::default()
                },
                "frameReadTimeoutMillis",
            ),
            (
                LimitSettings {
                    partial_frame_budget_bytes: 1024,
                    ..Default::default()
                },
                "partialFrameBudgetBytes",
            ),
            (
                LimitSettings {
                    partial_frame_budget_bytes: u64::MAX,
                    ..Default::default()
                },
                "partialFrameBudgetBytes",
            ),
        ];
        for (settings, key) in cases {
            let error = settings.validate().unwrap_err();
            assert_eq!(error.key, key, "{error}");
            assert!(error.to_string().contains(key), "{error}");
        }
    }

    #[test]
    fn permits_stop_at_the_limit_and_free_their_place_on_drop() {
        let guard = ConnectionGuard::new(LimitSettings::default(), 2);
        let first = guard.try_admit().unwrap();
        let _second = guard.try_admit().unwrap();
        assert!(guard.try_admit().is_none());
        assert_eq!(guard.open(), 2);
        drop(first);
        assert_eq!(guard.open(), 1);
        assert!(guard.try_admit().is_some());
    }

    #[test]
    fn the_budget_is_never_passed() {
        let settings = LimitSettings {
            partial_frame_budget_bytes: 100,
            max_frame_length: 100,
            ..Default::default()
        };
        let guard = ConnectionGuard::new(settings, 10);
        assert!(guard.recharge(0, 60));
        assert!(!guard.recharge(0, 50), "60 + 50 passes 100");
        assert!(guard.recharge(60, 90), "a charge grows in place");
        assert_eq!(guard.partial_frame_bytes(), 90);
        assert!(guard.recharge(90, 0));
        assert_eq!(guard.partial_frame_bytes(), 0);
    }
}
