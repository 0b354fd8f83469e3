//! Accepting connections under a limit, with a back-off when descriptors run out, and the
//! limit itself derived from the process's open-file limit.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use super::{bump, ConnectionGuard, ConnectionPermit, LimitError};

/// First pause after an accept fails for lack of descriptors: short, because any connection
/// closing frees one.
pub const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
/// Longest pause after accepts keep failing for lack of descriptors: bounds how long a freed
/// descriptor waits before a new connection can use it.
pub const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Pause after any other accept error (a connection reset before it was accepted, ...):
/// such errors concern one connection, but a persistent one must not spin a core.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(10);
/// Descriptors kept for everything but client connections when the open-file limit is low:
/// the store's CommitLog, ConsumeQueue, index and checkpoint files, the name-server and
/// metrics sockets, the log and the runtime's own (epoll, eventfd).
pub const FD_RESERVE_MIN: u64 = 64;
/// Share of the open-file limit kept likewise when it is more than [`FD_RESERVE_MIN`] (a
/// quarter): the store's files grow with its topics and queues.
const FD_RESERVE_DIVISOR: u64 = 4;

/// The connection limit in force and where it came from, for the start-up log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimit {
    /// Connections admitted at once.
    pub limit: usize,
    /// `maxConnections` as configured.
    pub configured: u32,
    /// The soft open-file limit (`ulimit -n`); `None` when unlimited or unknown.
    pub open_file_limit: Option<u64>,
    /// Descriptors kept for the store and the rest.
    pub reserved: u64,
}

/// `max_connections` capped so that connections never take the descriptors the store
/// needs: at most the soft open-file limit minus a reserve (a quarter of it, at least
/// [`FD_RESERVE_MIN`]).
///
/// # Errors
/// The open-file limit leaves nothing for connections after the reserve.
pub fn connection_limit(max_connections: u32) -> Result<ConnectionLimit, LimitError> {
    let open_file_limit = soft_open_file_limit();
    let reserved =
        open_file_limit.map_or(0, |soft| (soft / FD_RESERVE_DIVISOR).max(FD_RESERVE_MIN));
    let usable = open_file_limit.map_or(u64::MAX, |soft| soft.saturating_sub(reserved));
    if usable == 0 {
        return Err(LimitError {
            key: "maxConnections",
            message: format!(
                "the open-file limit (ulimit -n) of {} leaves no descriptor for connections \
                 after the {reserved} kept for the store; raise it",
                open_file_limit.unwrap_or_default()
            ),
        });
    }
    let limit = u64::from(max_connections).min(usable);
    Ok(ConnectionLimit {
        limit: usize::try_from(limit).unwrap_or(usize::MAX),
        configured: max_connections,
        open_file_limit,
        reserved,
    })
}

/// The soft `RLIMIT_NOFILE`; `None` when unlimited or when it cannot be read.
fn soft_open_file_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given, which lives for the call.
    let result = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    if result != 0 || limit.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    rlim_to_u64(limit.rlim_cur)
}

/// `rlim_t` is `u64` on 64-bit Linux but not on every target.
#[allow(clippy::useless_conversion)]
fn rlim_to_u64(value: libc::rlim_t) -> Option<u64> {
    u64::try_from(value).ok()
}

/// A connection the limit admitted.
#[derive(Debug)]
pub struct Accepted {
    /// The socket.
    pub stream: TcpStream,
    /// The client's address.
    pub peer: SocketAddr,
    /// Its place under the limit; keep it until the connection closes.
    pub permit: ConnectionPermit,
}

/// A listener that admits connections under a [`ConnectionGuard`]: a connection past the
/// limit is closed as soon as it is accepted, and an accept that fails for lack of
/// descriptors pauses the acceptor, for a growing and bounded time.
#[derive(Debug)]
pub struct Acceptor {
    listener: TcpListener,
    guard: Arc<ConnectionGuard>,
    backoff: Duration,
    retry_at: Option<Instant>,
}

impl Acceptor {
    /// Accepts on `listener` under `guard`.
    pub fn new(listener: TcpListener, guard: Arc<ConnectionGuard>) -> Acceptor {
        Acceptor {
            listener,
            guard,
            backoff: Duration::ZERO,
            retry_at: None,
        }
    }

    /// The guard (settings, counters).
    pub fn guard(&self) -> &Arc<ConnectionGuard> {
        &self.guard
    }

    /// The next admitted connection. Refusals and failures are counted and logged (the
    /// first and then every power of two, so a flood cannot flood the log).
    ///
    /// # Cancel safety
    /// Cancel safe: a pause in progress is remembered, so calling again resumes it instead of
    /// retrying at once.
    pub async fn accept(&mut self) -> Accepted {
        loop {
            if let Some(at) = self.retry_at {
                tokio::time::sleep_until(at).await;
                self.retry_at = None;
            }
            match self.listener.accept().await {
                Ok((stream, peer)) => {
                    self.backoff = Duration::ZERO;
                    if let Some(permit) = self.guard.try_admit() {
                        return Accepted {
                            stream,
                            peer,
                            permit,
                        };
                    }
                    self.refuse(stream, peer);
                }
                Err(error) => self.failed(&error),
            }
        }
    }

    /// Closes a connection over the limit at once.
    fn refuse(&self, stream: TcpStream, peer: SocketAddr) {
        drop(stream);
        let refused = bump(&self.guard.counters.refused_over_limit);
        if refused.is_power_of_two() {
            tracing::warn!(%peer, limit = self.guard.limit, refused,
                "connection limit reached (maxConnections); connection closed");
        }
    }

    /// Counts a failed accept and schedules the retry.
    fn failed(&mut self, error: &io::Error) {
        let counters = &self.guard.counters;
        let pause = if is_fd_exhaustion(error) {
            self.backoff = (self.backoff * 2).clamp(ACCEPT_BACKOFF_MIN, ACCEPT_BACKOFF_MAX);
            let failures = bump(&counters.accept_fd_exhausted);
            if failures.is_power_of_two() {
                tracing::warn!(%error, failures, pause = ?self.backoff,
                    "accept failed: out of file descriptors; pausing accepts");
            }
            self.backoff
        } else {
            let failures = bump(&counters.accept_failed_other);
            if failures.is_power_of_two() {
                tracing::warn!(%error, failures, "accept failed");
            }
            ACCEPT_ERROR_PAUSE
        };
        self.retry_at = Some(Instant::now() + pause);
    }
}

/// EMFILE (the process is out of descriptors) or ENFILE (the system is).
fn is_fd_exhaustion(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remoting::limits::LimitSettings;

    #[test]
    fn the_limit_keeps_a_reserve_below_the_open_file_limit() {
        let limit = connection_limit(u32::MAX).unwrap();
        match limit.open_file_limit {
            Some(soft) => {
                assert!(limit.reserved >= FD_RESERVE_MIN);
                assert_eq!(limit.limit as u64, soft - limit.reserved);
            }
            None => assert_eq!(limit.limit as u64, u64::from(u32::MAX)),
        }
        assert_eq!(connection_limit(3).unwrap().limit, 3);
    }

    #[test]
    fn fd_exhaustion_is_told_from_other_errors() {
        assert!(is_fd_exhaustion(&io::Error::from_raw_os_error(
            libc::EMFILE
        )));
        assert!(is_fd_exhaustion(&io::Error::from_raw_os_error(
            libc::ENFILE
        )));
        assert!(!is_fd_exhaustion(&io::Error::from_raw_os_error(
            libc::ECONNABORTED
        )));
    }

    #[tokio::test]
    async fn fd_exhaustion_pauses_grow_to_their_bound_and_are_counted() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let guard = ConnectionGuard::new(LimitSettings::default(), 1);
        let mut acceptor = Acceptor::new(listener, guard.clone());
        let emfile = io::Error::from_raw_os_error(libc::EMFILE);
        let mut pauses = Vec::new();
        for _ in 0..10 {
            acceptor.failed(&emfile);
            pauses.push(acceptor.backoff);
        }
        assert_eq!(pauses[0], ACCEPT_BACKOFF_MIN);
        assert_eq!(pauses[1], ACCEPT_BACKOFF_MIN * 2);
        assert!(pauses.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(*pauses.last().unwrap(), ACCEPT_BACKOFF_MAX);
        acceptor.failed(&io::Error::from_raw_os_error(libc::ECONNABORTED));
        let counts = guard.counters().snapshot();
        assert_eq!(counts.accept_fd_exhausted, 10);
        assert_eq!(counts.accept_failed_other, 1);
    }
}
