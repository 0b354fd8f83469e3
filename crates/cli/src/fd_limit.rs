//! Raising the soft open-file limit (`RLIMIT_NOFILE`) to the hard one, for the servers and the
//! benches that open many sockets.
//!
//! Every client connection costs a broker one descriptor, and the broker caps its connections
//! at the soft limit minus a reserve for the store (`ferromq_protocol::remoting::limits::
//! connection_limit`). Distributions default the soft limit to 1,024 while the hard limit is
//! often far higher, so a broker that kept the soft limit would serve fewer than a thousand
//! clients for no reason. Raising the soft limit up to the hard one needs no privilege (Go's
//! runtime and the JVM's `-XX:+MaxFDLimit` do the same).

use anyhow::{bail, Result};

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

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (or to `fs.nr_open`'s usual ceiling
/// when the hard limit is unlimited) and returns the limits.
///
/// # Errors
/// getrlimit or setrlimit failed.
pub fn raise_to_hard() -> Result<OpenFileLimit> {
    /// Ceiling used when the hard limit is unlimited: Linux refuses a soft limit above
    /// `fs.nr_open`, whose default is 2^20.
    const UNLIMITED_CEILING: u64 = 1 << 20;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given, which lives for the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        bail!(
            "getrlimit(RLIMIT_NOFILE): {}",
            std::io::Error::last_os_error()
        );
    }
    let before = to_u64(limit.rlim_cur);
    let hard = to_u64(limit.rlim_max);
    let target = if limit.rlim_max == libc::RLIM_INFINITY {
        UNLIMITED_CEILING.max(before)
    } else {
        hard
    };
    if before >= target {
        return Ok(OpenFileLimit {
            before,
            soft: before,
            hard,
        });
    }
    let raised = libc::rlimit {
        rlim_cur: from_u64(target),
        rlim_max: limit.rlim_max,
    };
    // SAFETY: setrlimit only reads the struct it is given, which lives for the call.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        bail!(
            "setrlimit(RLIMIT_NOFILE) from {before} to {target}: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(OpenFileLimit {
        before,
        soft: target,
        hard,
    })
}

/// Raises the limit for a server and logs what it did; a failure is logged and the server
/// runs on with the limit it has (its connection limit then follows the lower soft limit,
/// as logged at the broker's start).
pub fn raise_for_server() {
    match raise_to_hard() {
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
    use super::*;

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
}
