//! How remoting pull replies carried their messages (`transferMsgByHeap`, see
//! `remoting::zero_copy`):
//! - `ferromq_pull_replies_total{transfer}`: pull replies with messages, `heap` (records read
//!   into memory, CRC verified) or `zero_copy` (sent from the files with `sendfile`);
//! - `ferromq_pull_zero_copy_bytes_total`: record bytes sent with `sendfile`;
//! - `ferromq_pull_zero_copy_fallbacks_total{reason}`: replies copied although zero copy was
//!   asked for: `tls` (the connection is TLS: bytes must pass through the encryption),
//!   `sendfile_unsupported` (the kernel refused `sendfile` for the files or the socket, e.g.
//!   EINVAL or ENOSYS: this broker copies from then on). Each reason is logged once;
//! - `ferromq_pull_zero_copy_aborted_total{reason}`: zero-copy replies whose connection was
//!   closed mid-reply instead of sending bytes that may be wrong or never arrive: `truncated`
//!   (the segment was truncated after the record was checked, or `sendfile` ended early),
//!   `timeout` (the client read nothing for the connection's idle timeout), `io` (the socket
//!   failed). The client re-pulls.

use std::sync::atomic::{AtomicBool, Ordering};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

type StaticLabel = [(&'static str, &'static str); 1];

/// Why a zero-copy reply was copied instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// The connection is TLS.
    Tls,
    /// `sendfile` is not usable here.
    SendfileUnsupported,
    /// The reply's records are small and apart: one `sendfile` call each would cost more
    /// than copying them (`ferromq_store::ZERO_COPY_SEND_BYTES_MIN`).
    SmallRecords,
}

impl Fallback {
    fn label(self) -> &'static str {
        match self {
            Fallback::Tls => "tls",
            Fallback::SendfileUnsupported => "sendfile_unsupported",
            Fallback::SmallRecords => "small_records",
        }
    }
}

/// Why a zero-copy reply closed its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abort {
    /// The bytes may have changed under the send, or the file ended early.
    Truncated,
    /// The client read nothing for the idle timeout.
    Timeout,
    /// The socket failed.
    Io,
}

impl Abort {
    fn label(self) -> &'static str {
        match self {
            Abort::Truncated => "truncated",
            Abort::Timeout => "timeout",
            Abort::Io => "io",
        }
    }
}

/// The transfer counters, and whether `sendfile` proved unusable on this broker.
#[derive(Debug, Default)]
pub struct TransferMetrics {
    replies: Family<StaticLabel, Counter>,
    zero_copy_bytes: Counter,
    fallbacks: Family<StaticLabel, Counter>,
    aborted: Family<StaticLabel, Counter>,
    /// Set once `sendfile` was refused: every later pull reply copies.
    sendfile_unusable: AtomicBool,
    tls_logged: AtomicBool,
    small_logged: AtomicBool,
}

impl TransferMetrics {
    /// Registers every metric in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "ferromq_pull_replies",
            "Remoting pull replies with messages, by how they were carried (heap, zero_copy)",
            self.replies.clone(),
        );
        registry.register(
            "ferromq_pull_zero_copy_bytes",
            "Record bytes of pull replies sent from the CommitLog files with sendfile",
            self.zero_copy_bytes.clone(),
        );
        registry.register(
            "ferromq_pull_zero_copy_fallbacks",
            "Pull replies copied although transferMsgByHeap=false, by reason",
            self.fallbacks.clone(),
        );
        registry.register(
            "ferromq_pull_zero_copy_aborted",
            "Zero-copy pull replies that closed their connection mid-reply, by reason",
            self.aborted.clone(),
        );
    }

    /// A pull reply with messages went out copied (`zero_copy = false`) or not.
    pub fn reply(&self, zero_copy: bool) {
        let label = if zero_copy { "zero_copy" } else { "heap" };
        self.replies.get_or_create(&[("transfer", label)]).inc();
    }

    /// Pull replies with messages so far, `zero_copy` or copied.
    pub fn replies(&self, zero_copy: bool) -> u64 {
        let label = if zero_copy { "zero_copy" } else { "heap" };
        self.replies
            .get(&[("transfer", label)])
            .map_or(0, |c| c.get())
    }

    /// `bytes` record bytes went out with `sendfile`.
    pub fn sent_zero_copy(&self, bytes: u64) {
        self.zero_copy_bytes.inc_by(bytes);
    }

    /// Record bytes sent with `sendfile` so far.
    pub fn zero_copy_bytes(&self) -> u64 {
        self.zero_copy_bytes.get()
    }

    /// A reply was copied for `reason`; the first of each reason is logged (`detail` says
    /// what happened).
    pub fn fallback(&self, reason: Fallback, detail: &str) {
        self.fallbacks
            .get_or_create(&[("reason", reason.label())])
            .inc();
        let first = match reason {
            Fallback::Tls => !self.tls_logged.swap(true, Ordering::Relaxed),
            Fallback::SendfileUnsupported => !self.sendfile_unusable.swap(true, Ordering::Relaxed),
            Fallback::SmallRecords => !self.small_logged.swap(true, Ordering::Relaxed),
        };
        if first {
            match reason {
                Fallback::Tls => tracing::info!(
                    %detail,
                    "transferMsgByHeap=false: pull replies on TLS connections are copied (logged once)"
                ),
                Fallback::SendfileUnsupported => tracing::warn!(
                    %detail,
                    "sendfile is not usable: pull replies are copied from now on (logged once)"
                ),
                Fallback::SmallRecords => tracing::info!(
                    %detail,
                    "transferMsgByHeap=false: pull replies of small, scattered records are copied and verified, which costs less than a sendfile call per record (logged once)"
                ),
            }
        }
    }

    /// Replies copied for `reason` so far.
    pub fn fallbacks(&self, reason: Fallback) -> u64 {
        self.fallbacks
            .get(&[("reason", reason.label())])
            .map_or(0, |c| c.get())
    }

    /// A zero-copy reply closed its connection for `reason`.
    pub fn aborted(&self, reason: Abort) {
        self.aborted
            .get_or_create(&[("reason", reason.label())])
            .inc();
    }

    /// Zero-copy replies aborted for `reason` so far.
    pub fn aborts(&self, reason: Abort) -> u64 {
        self.aborted
            .get(&[("reason", reason.label())])
            .map_or(0, |c| c.get())
    }

    /// Whether `sendfile` was refused on this broker (every reply copies since).
    pub fn sendfile_unusable(&self) -> bool {
        self.sendfile_unusable.load(Ordering::Relaxed)
    }
}
