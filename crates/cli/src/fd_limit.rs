//! Raising the soft open-file limit (`RLIMIT_NOFILE`) to the hard one, for the servers and the
//! benches that open many sockets.
//!
//! Every client connection costs a broker one descriptor, and the broker caps its connections
//! at the soft limit minus a reserve for the store (`ferromq_protocol::remoting::limits::
//! connection_limit`). Distributions default the soft limit to 1,024 while the hard limit is
//! often far higher, so a broker that kept the soft limit would serve fewer than a thousand
//! clients for no reason. Raising the soft limit up to the hard one needs no privilege (Go's
//! runtime and the JVM's `-XX:+MaxFDLimit` do the same).
//!
//! A server whose raise fails still starts (a host may allow only a low limit), but the failure
//! is reported where an operator sees it: the startup report on stderr ([`describe`]), and the
//! broker's metrics and runtime info ([`status`], `ferromq_broker::observability::open_files`).

use ferromq_broker::observability::open_files::OpenFileStatus;

/// The open-file limits before and after [`raise_to_hard`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFileLimit {
    /// The soft limit found at start.
    pub before: u64,
    /// The soft limit now.
    pub soft: u64,
    /// The hard limit (`u64::MAX` when unlimited).
    pub hard: u64,
}

/// Why the open-file limit could not be raised.
#[derive(Debug, thiserror::Error)]
pub enum FdLimitError {
    /// The limits could not be read.
    #[error("getrlimit(RLIMIT_NOFILE): {cause}")]
    Read {
        /// The system call's error.
        cause: std::io::Error,
    },
    /// The soft limit could not be raised; `limit` stays in force.
    #[error("setrlimit(RLIMIT_NOFILE) from {} to {target}: {cause}", limit.before)]
    Raise {
        /// The limits in force (unchanged).
        limit: OpenFileLimit,
        /// The soft limit asked for.
        target: u64,
        /// The system call's error.
        cause: std::io::Error,
    },
}

/// The outcome of [`raise_for_server`].
pub type Outcome = Result<OpenFileLimit, FdLimitError>;

/// The two system calls, behind a seam so tests can make either fail. Limits are `u64`, with
/// `u64::MAX` for unlimited.
trait NofileCalls {
    /// getrlimit(RLIMIT_NOFILE): (soft, hard).
    fn get(&self) -> std::io::Result<(u64, u64)>;
    /// setrlimit(RLIMIT_NOFILE) to (soft, hard).
    fn set(&self, soft: u64, hard: u64) -> std::io::Result<()>;
}

/// The calls on this process.
struct ThisProcess;

impl NofileCalls for ThisProcess {
    fn get(&self) -> std::io::Result<(u64, u64)> {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit only writes the struct it is given, which lives for the call.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok((to_u64(limit.rlim_cur), to_u64(limit.rlim_max)))
    }

    fn set(&self, soft: u64, hard: u64) -> std::io::Result<()> {
        let limit = libc::rlimit {
            rlim_cur: from_u64(soft),
            rlim_max: from_u64(hard),
        };
        // SAFETY: setrlimit only reads the struct it is given, which lives for the call.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (or to `fs.nr_open`'s usual ceiling
/// when the hard limit is unlimited) and returns the limits.
///
/// # Errors
/// getrlimit or setrlimit failed; a failed setrlimit carries the limits still in force.
pub fn raise_to_hard() -> Outcome {
    raise_with(&ThisProcess)
}

/// [`raise_to_hard`] through `calls`.
fn raise_with(calls: &impl NofileCalls) -> Outcome {
    /// Ceiling used when the hard limit is unlimited: Linux refuses a soft limit above
    /// `fs.nr_open`, whose default is 2^20.
    const UNLIMITED_CEILING: u64 = 1 << 20;
    let (before, hard) = calls.get().map_err(|cause| FdLimitError::Read { cause })?;
    let target = if hard == u64::MAX {
        UNLIMITED_CEILING.max(before)
    } else {
        hard
    };
    let limit = OpenFileLimit {
        before,
        soft: before,
        hard,
    };
    if before >= target {
        return Ok(limit);
    }
    match calls.set(target, hard) {
        Ok(()) => Ok(OpenFileLimit {
            soft: target,
            ..limit
        }),
        Err(cause) => Err(FdLimitError::Raise {
            limit,
            target,
            cause,
        }),
    }
}

/// Raises the limit for a server, logs what it did and returns it. A failure does not stop
/// the server: it runs on with the limit it has (its connection limit then follows the lower
/// soft limit, as logged at the broker's start), and the caller reports the failure with
/// [`describe`] and [`status`].
pub fn raise_for_server() -> Outcome {
    let outcome = raise_to_hard();
    match &outcome {
        Ok(limit) if limit.soft > limit.before => tracing::info!(
            from = limit.before,
            to = limit.soft,
            "raised the open-file limit (RLIMIT_NOFILE soft) to the hard limit: every client \
             connection takes a descriptor"
        ),
        Ok(limit) => tracing::debug!(
            soft = limit.soft,
            "open-file limit already at the hard limit"
        ),
        Err(error) => tracing::warn!(%error,
            "could not raise the open-file limit; connections stay capped by the current one"),
    }
    outcome
}

/// The outcome as the broker's metrics and runtime info take it.
pub fn status(outcome: &Outcome) -> OpenFileStatus {
    match outcome {
        Ok(limit) => OpenFileStatus {
            soft: Some(limit.soft),
            hard: Some(limit.hard),
            raise_error: None,
        },
        Err(error) => {
            let limit = match error {
                FdLimitError::Read { .. } => None,
                FdLimitError::Raise { limit, .. } => Some(limit),
            };
            OpenFileStatus {
                soft: limit.map(|l| l.soft),
                hard: limit.map(|l| l.hard),
                raise_error: Some(error.to_string()),
            }
        }
    }
}

/// The startup report's line (without the server's name): the limits, and the error when
/// raising failed.
pub fn describe(outcome: &Outcome) -> String {
    let shown = |value: u64| {
        if value == u64::MAX {
            "unlimited".to_string()
        } else {
            value.to_string()
        }
    };
    let limits = |limit: &OpenFileLimit| {
        format!(
            "open files: soft limit {}, hard limit {}",
            shown(limit.soft),
            shown(limit.hard)
        )
    };
    match outcome {
        Ok(limit) if limit.soft > limit.before => {
            format!("{} (raised from {})", limits(limit), shown(limit.before))
        }
        Ok(limit) => limits(limit),
        Err(error) => {
            let head = match error {
                FdLimitError::Read { .. } => "open files: limits unknown".to_string(),
                FdLimitError::Raise { limit, .. } => limits(limit),
            };
            format!("{head}; raising the soft limit failed, connections stay capped by it: {error}")
        }
    }
}

/// `rlim_t` as `u64` (`RLIM_INFINITY` is `u64::MAX`).
#[allow(clippy::useless_conversion)]
fn to_u64(value: libc::rlim_t) -> u64 {
    u64::try_from(value).unwrap_or(u64::MAX)
}

/// `u64` as `rlim_t`.
#[allow(clippy::useless_conversion)]
fn from_u64(value: u64) -> libc::rlim_t {
    libc::rlim_t::try_from(value).unwrap_or(libc::RLIM_INFINITY)
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use ferromq_broker::observability::open_files::OpenFileMetrics;

    use super::*;

    /// Calls answering fixed limits, failing where told, recording each setrlimit.
    struct FakeCalls {
        limits: (u64, u64),
        get_fails: bool,
        set_fails: bool,
        sets: RefCell<Vec<(u64, u64)>>,
    }

    impl FakeCalls {
        fn new(soft: u64, hard: u64) -> FakeCalls {
            FakeCalls {
                limits: (soft, hard),
                get_fails: false,
                set_fails: false,
                sets: RefCell::new(Vec::new()),
            }
        }
    }

    impl NofileCalls for FakeCalls {
        fn get(&self) -> std::io::Result<(u64, u64)> {
            if self.get_fails {
                return Err(std::io::Error::from_raw_os_error(libc::EFAULT));
            }
            Ok(self.limits)
        }

        fn set(&self, soft: u64, hard: u64) -> std::io::Result<()> {
            self.sets.borrow_mut().push((soft, hard));
            if self.set_fails {
                return Err(std::io::Error::from_raw_os_error(libc::EPERM));
            }
            Ok(())
        }
    }

    /// The value of the sample `name` in the Prometheus text the metrics render.
    fn gauge(metrics: &OpenFileMetrics, name: &str) -> Option<String> {
        let mut registry = prometheus_client::registry::Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry).unwrap();
        text.lines()
            .filter(|line| !line.starts_with('#'))
            .find_map(|line| Some(line.strip_prefix(name)?.strip_prefix(' ')?.to_string()))
    }

    #[test]
    fn the_soft_limit_ends_at_the_hard_limit_or_above_it_never_lower() {
        let limit = raise_to_hard().unwrap();
        assert!(limit.soft >= limit.before);
        if limit.hard != u64::MAX {
            assert_eq!(limit.soft, limit.hard);
        }
        // A second call finds nothing left to raise.
        let again = raise_to_hard().unwrap();
        assert_eq!(again.before, limit.soft);
        assert_eq!(again.soft, limit.soft);
    }

    #[test]
    fn a_raise_sets_the_soft_limit_to_the_hard_one_and_keeps_the_hard_one() {
        let calls = FakeCalls::new(1_024, 4_096);
        let outcome = raise_with(&calls);
        let limit = outcome.as_ref().unwrap();
        assert_eq!(
            *limit,
            OpenFileLimit {
                before: 1_024,
                soft: 4_096,
                hard: 4_096
            }
        );
        assert_eq!(*calls.sets.borrow(), [(4_096, 4_096)]);
        assert_eq!(
            describe(&outcome),
            "open files: soft limit 4096, hard limit 4096 (raised from 1024)"
        );
        let metrics = OpenFileMetrics::default();
        metrics.set(status(&outcome));
        assert_eq!(
            gauge(&metrics, "ferromq_open_files_raise_failed").as_deref(),
            Some("0")
        );
        assert_eq!(
            gauge(&metrics, "ferromq_open_files_soft_limit").as_deref(),
            Some("4096")
        );
    }

    #[test]
    fn an_unlimited_hard_limit_raises_to_the_nr_open_default_and_nothing_when_there() {
        let calls = FakeCalls::new(1_024, u64::MAX);
        let limit = raise_with(&calls).unwrap();
        assert_eq!(limit.soft, 1 << 20);
        assert_eq!(*calls.sets.borrow(), [(1 << 20, u64::MAX)]);
        let calls = FakeCalls::new(1 << 20, u64::MAX);
        let outcome = raise_with(&calls);
        assert!(calls.sets.borrow().is_empty());
        assert_eq!(
            describe(&outcome),
            "open files: soft limit 1048576, hard limit unlimited"
        );
    }

    #[test]
    fn a_failed_raise_is_returned_with_the_limits_in_force_and_reported_as_gauge_one() {
        let calls = FakeCalls {
            set_fails: true,
            ..FakeCalls::new(1_024, 4_096)
        };
        let outcome = raise_with(&calls);
        let Err(FdLimitError::Raise {
            limit,
            target,
            cause,
        }) = &outcome
        else {
            panic!("expected a failed raise: {outcome:?}");
        };
        assert_eq!(
            (limit.before, limit.soft, limit.hard),
            (1_024, 1_024, 4_096)
        );
        assert_eq!(*target, 4_096);
        assert_eq!(cause.raw_os_error(), Some(libc::EPERM));
        let error_text = format!(
            "setrlimit(RLIMIT_NOFILE) from 1024 to 4096: {}",
            std::io::Error::from_raw_os_error(libc::EPERM)
        );
        let line = describe(&outcome);
        assert_eq!(
            line,
            format!(
                "open files: soft limit 1024, hard limit 4096; raising the soft limit failed, \
                 connections stay capped by it: {error_text}"
            )
        );
        let reported = status(&outcome);
        assert_eq!(reported.raise_error.as_deref(), Some(error_text.as_str()));
        let metrics = OpenFileMetrics::default();
        metrics.set(reported);
        assert_eq!(
            gauge(&metrics, "ferromq_open_files_raise_failed").as_deref(),
            Some("1")
        );
        assert_eq!(
            gauge(&metrics, "ferromq_open_files_soft_limit").as_deref(),
            Some("1024")
        );
        assert_eq!(
            gauge(&metrics, "ferromq_open_files_hard_limit").as_deref(),
            Some("4096")
        );
        let runtime = metrics.runtime_entries();
        assert_eq!(runtime[2], ("openFilesRaiseError", error_text));
    }

    #[test]
    fn unreadable_limits_are_reported_as_unknown_with_the_error() {
        let calls = FakeCalls {
            get_fails: true,
            ..FakeCalls::new(1_024, 4_096)
        };
        let outcome = raise_with(&calls);
        assert!(
            matches!(outcome, Err(FdLimitError::Read { .. })),
            "{outcome:?}"
        );
        assert!(calls.sets.borrow().is_empty());
        let line = describe(&outcome);
        assert!(
            line.starts_with("open files: limits unknown; raising the soft limit failed")
                && line.contains("getrlimit(RLIMIT_NOFILE)"),
            "{line}"
        );
        let reported = status(&outcome);
        assert_eq!((reported.soft, reported.hard), (None, None));
        let metrics = OpenFileMetrics::default();
        metrics.set(reported);
        assert_eq!(
            gauge(&metrics, "ferromq_open_files_raise_failed").as_deref(),
            Some("1")
        );
        assert_eq!(gauge(&metrics, "ferromq_open_files_soft_limit"), None);
    }
}
