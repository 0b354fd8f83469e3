//! Metrics of transactional messages (`core::transactions`):
//! - `ferromq_transaction_halves_total`: half messages stored;
//! - `ferromq_transaction_half_pending`: undecided halves the checker tracks now (gauge);
//! - `ferromq_transaction_checks_total`: check-backs recorded (sent, or attempted with no
//!   producer of the group online);
//! - `ferromq_transaction_decisions_total{kind}`: `commit`, `rollback`, `discard`, `unknown`
//!   (decisions recorded in the log);
//! - `ferromq_transaction_discards_total`: halves moved to `TRANS_CHECK_MAX_TIME_TOPIC` after
//!   `transactionCheckMax` checks;
//! - `ferromq_transaction_end_refused_total{reason}`: END_TRANSACTION requests refused
//!   (`no_half`, `wrong_group`, `bad_argument`, `conflict`, `busy`, `not_master`) — counted
//!   because Java producers send END one-way and never see the answer.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

type StaticLabel = [(&'static str, &'static str); 1];

/// The transaction counters.
#[derive(Debug, Default, Clone)]
pub struct TransactionMetrics {
    halves: Counter,
    half_pending: Gauge,
    checks: Counter,
    decisions: Family<StaticLabel, Counter>,
    discards: Counter,
    end_refused: Family<StaticLabel, Counter>,
}

impl TransactionMetrics {
    /// Registers every metric in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "ferromq_transaction_halves",
            "Half (prepared) messages stored",
            self.halves.clone(),
        );
        registry.register(
            "ferromq_transaction_half_pending",
            "Undecided half messages the checker tracks",
            self.half_pending.clone(),
        );
        registry.register(
            "ferromq_transaction_checks",
            "Transaction check-backs recorded",
            self.checks.clone(),
        );
        registry.register(
            "ferromq_transaction_decisions",
            "Transaction decisions recorded in the log, by kind",
            self.decisions.clone(),
        );
        registry.register(
            "ferromq_transaction_discards",
            "Half messages discarded after transactionCheckMax check-backs",
            self.discards.clone(),
        );
        registry.register(
            "ferromq_transaction_end_refused",
            "END_TRANSACTION requests refused, by reason",
            self.end_refused.clone(),
        );
    }

    /// A half was stored.
    pub fn half_stored(&self) {
        self.halves.inc();
    }

    /// Halves stored so far.
    pub fn halves(&self) -> u64 {
        self.halves.get()
    }

    /// Sets the pending gauge.
    pub fn set_pending(&self, pending: usize) {
        self.half_pending.set(pending as i64);
    }

    /// Undecided halves now.
    pub fn pending(&self) -> i64 {
        self.half_pending.get()
    }

    /// `count` check-backs were recorded.
    pub fn checks_recorded(&self, count: usize) {
        self.checks.inc_by(count as u64);
    }

    /// Check-backs so far.
    pub fn checks(&self) -> u64 {
        self.checks.get()
    }

    /// A decision of `kind` was recorded.
    pub fn decided(&self, kind: &'static str) {
        self.decisions.get_or_create(&[("kind", kind)]).inc();
        if kind == "discard" {
            self.discards.inc();
        }
    }

    /// Decisions of `kind` so far.
    pub fn decisions(&self, kind: &'static str) -> u64 {
        self.decisions.get(&[("kind", kind)]).map_or(0, |c| c.get())
    }

    /// Discards so far.
    pub fn discards(&self) -> u64 {
        self.discards.get()
    }

    /// An END was refused for `reason`.
    pub fn end_refused(&self, reason: &'static str) {
        self.end_refused.get_or_create(&[("reason", reason)]).inc();
    }

    /// ENDs refused so far for `reason`.
    pub fn end_refusals(&self, reason: &'static str) -> u64 {
        self.end_refused
            .get(&[("reason", reason)])
            .map_or(0, |c| c.get())
    }
}
