//! Transactional messages (RocketMQ's model): half messages, END_TRANSACTION decisions and
//! check-backs, with every decision and every step of the checker recorded in the log.
//!
//! - [`half`]: a send with `TRAN_MSG=true` (or the prepared sysFlag) is stored in
//!   `RMQ_SYS_TRANS_HALF_TOPIC` queue 0 with its real topic and queue in `REAL_TOPIC` /
//!   `REAL_QID`. Nothing reads that topic but this module, so no consumer, pull or query
//!   delivers a half.
//! - [`decision`]: END_TRANSACTION commit / rollback / unknown, from the producer or answering a
//!   check-back.
//! - [`check`]: the checker task (master only): check-backs after `transactionTimeOut`, every
//!   `transactionCheckInterval`, at most `transactionCheckMax` times, then a discard to
//!   `TRANS_CHECK_MAX_TIME_TOPIC`.
//! - [`load`]: the table of tracked halves, rebuilt from the log.
//! - [`op`], [`table`]: the op record layout and the table itself.
//!
//! Invariants:
//! 1. Decisions are log records (I1). A commit appends the real message and its op record in
//!    one append (one acknowledgement, I2); a rollback or a discard appends its op record
//!    (a discard with its copy in `TRANS_CHECK_MAX_TIME_TOPIC`). So a decision is fsynced,
//!    replicated, truncated and recovered exactly as messages are, and survives failover.
//! 2. A half is decided at most once: the table moves a half `Pending → Deciding → Decided`
//!    under its lock, so of two racing ENDs one writes and the other is told the outcome
//!    (repeated END: idempotent; different decision: refused as a conflict).
//! 3. The checker's progress (checks sent per half, and the low watermarks of the half and op
//!    queues as offsets of the internal group `CID_RMQ_SYS_TRANS`) is in the log: a restarted
//!    or promoted broker rebuilds the table from the log and neither re-decides a decided half
//!    nor resets a half's check count.
//! 4. Only a master stores halves, decides and checks; a slave refuses END as it refuses every
//!    write (NOT_MASTER). The table belongs to one master term: it is rebuilt when the broker
//!    becomes master again (epoch change) and dropped when it stops being master.
//! 5. Bounded: at most `transactionTrackedMax` halves are tracked (a half send past it is
//!    refused SYSTEM_BUSY), at most [`CHECK_BATCH_MAX`] halves are checked per tick, and
//!    refusals of bad ENDs are logged at most once a second (with a count) however many come.
//!
//! Crash points of a commit: the real message and its op record are one append, written with
//! one copy into the log; a process kill cannot separate them after the copy, and before it
//! neither is acknowledged. If only the real message survived (a torn write below the
//! acknowledgement, e.g. power loss), the half stays pending and a later commit first looks
//! the real message up by `UNIQ_KEY` and the half's offset (`prepared_tx_offset`), and
//! records the decision without writing a second copy.

pub mod check;
pub mod decision;
pub mod half;
pub mod load;
pub mod op;
pub mod status;
pub mod table;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::config::BrokerConfig;
use crate::context::BrokerContext;
use table::Table;

pub use ferromq_protocol::names::{TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC};

/// Where halves checked `transactionCheckMax` times go.
pub const TRANS_CHECK_MAX_TIME_TOPIC: &str = "TRANS_CHECK_MAX_TIME_TOPIC";
/// The internal group whose offsets hold the checker's low watermarks.
pub const TRANSACTION_GROUP: &str = "CID_RMQ_SYS_TRANS";
/// Halves checked (or discarded) per checker tick.
pub const CHECK_BATCH_MAX: usize = 256;

/// The transaction settings (`transactionTimeOut`, `transactionCheckInterval`,
/// `transactionCheckMax`, `transactionTrackedMax`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransactionSettings {
    /// Default immunity before the first check-back, ms.
    pub timeout_ms: u64,
    /// Checker period and least time between two checks of one half, ms.
    pub check_interval_ms: u64,
    /// Checks before a discard.
    pub check_max: u32,
    /// Most tracked halves.
    pub tracked_max: usize,
}

impl TransactionSettings {
    /// The settings of a broker config.
    pub fn of(config: &BrokerConfig) -> TransactionSettings {
        TransactionSettings {
            timeout_ms: config.transaction_time_out,
            check_interval_ms: config.transaction_check_interval,
            check_max: config.transaction_check_max,
            tracked_max: config.transaction_tracked_max as usize,
        }
    }

    /// The checker's period.
    pub fn check_interval(&self) -> Duration {
        Duration::from_millis(self.check_interval_ms)
    }
}

/// The table of one master term.
#[derive(Debug)]
struct Loaded {
    epoch: u64,
    table: Table,
}

/// The transaction state of a broker: the tracked halves of the current master term.
#[derive(Debug)]
pub struct Transactions {
    /// Settings.
    pub settings: TransactionSettings,
    loaded: Mutex<Option<Loaded>>,
    loading: tokio::sync::Mutex<()>,
    refusals_logged_second: AtomicU64,
    refusals_unlogged: AtomicU64,
    check_sink: Mutex<Option<tokio::sync::mpsc::Sender<check::CheckBack>>>,
}

impl Transactions {
    /// No table yet: the first use on a master rebuilds it from the log.
    pub fn new(settings: TransactionSettings) -> Transactions {
        Transactions {
            settings,
            loaded: Mutex::new(None),
            loading: tokio::sync::Mutex::new(()),
            refusals_logged_second: AtomicU64::new(0),
            refusals_unlogged: AtomicU64::new(0),
            check_sink: Mutex::new(None),
        }
    }

    /// Runs `f` on the table if it belongs to master term `epoch`.
    fn with_table<R>(&self, epoch: u64, f: impl FnOnce(&mut Table) -> R) -> Option<R> {
        let mut loaded = self.loaded.lock().expect("transactions lock");
        match loaded.as_mut() {
            Some(l) if l.epoch == epoch => Some(f(&mut l.table)),
            _ => None,
        }
    }

    /// Runs `f` on the table of master term `epoch` if it is loaded (no rebuild, no wait).
    pub(crate) fn with_table_now(&self, epoch: u64, f: impl FnOnce(&mut Table)) {
        let _ = self.with_table(epoch, f);
    }

    /// Opens the queue of check-backs for producers the remoting registry does not hold (the
    /// gRPC adapter reads it); bounded by [`check::CHECK_BACKS_QUEUED_MAX`]. A second call
    /// replaces the first queue.
    pub fn open_check_backs(&self) -> tokio::sync::mpsc::Receiver<check::CheckBack> {
        let (tx, rx) = tokio::sync::mpsc::channel(check::CHECK_BACKS_QUEUED_MAX);
        *self.check_sink.lock().expect("transactions lock") = Some(tx);
        rx
    }

    /// The queue of check-backs for other transports, if one is open.
    pub(crate) fn check_sink(&self) -> Option<tokio::sync::mpsc::Sender<check::CheckBack>> {
        self.check_sink
            .lock()
            .expect("transactions lock")
            .clone()
            .filter(|tx| !tx.is_closed())
    }

    /// Drops the table (the broker is no longer master).
    pub fn unload(&self) {
        *self.loaded.lock().expect("transactions lock") = None;
    }

    /// Logs a refused END at most once a second, with the number not logged since.
    fn log_refusal(&self, reason: &'static str, remark: &str) {
        let second = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let last = self.refusals_logged_second.swap(second, Ordering::Relaxed);
        if last == second {
            self.refusals_unlogged.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let unlogged = self.refusals_unlogged.swap(0, Ordering::Relaxed);
        tracing::warn!(reason, %remark, refused_unlogged_before = unlogged,
            "END_TRANSACTION refused (counted in ferromq_transaction_end_refused_total)");
    }
}

/// Runs `f` on the table of the current master term, rebuilding it from the log first if
/// needed.
///
/// # Errors
/// The rebuild's error (the log could not be read).
pub async fn with_table<R>(
    ctx: &BrokerContext,
    f: impl FnOnce(&mut Table) -> R,
) -> Result<R, load::LoadError> {
    let tx = &ctx.transactions;
    let epoch = ctx.replication.epoch();
    let mut f = Some(f);
    if let Some(r) = tx.with_table(epoch, |t| (f.take().expect("called once"))(t)) {
        return Ok(r);
    }
    let _turn = tx.loading.lock().await;
    if tx.with_table(epoch, |_| ()).is_none() {
        let table = load::rebuild(ctx).await?;
        ctx.metrics.transactions.set_pending(table.pending_count());
        *tx.loaded.lock().expect("transactions lock") = Some(Loaded { epoch, table });
    }
    tx.with_table(epoch, |t| (f.take().expect("called once"))(t))
        .ok_or(load::LoadError::TermChanged)
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
