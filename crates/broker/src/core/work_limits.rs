//! Bounded work: how many long-poll pulls the broker holds (in all and per connection) and how
//! many requests one connection may have in flight. Past a limit a request is answered
//! SYSTEM_BUSY (2) at once, with a remark naming the limit, and counted
//! (`ferromq_requests_busy_total{reason}`); nothing is queued, so a client cannot make the
//! broker hold unbounded memory. RocketMQ clients retry a pull answered SYSTEM_BUSY later.
//!
//! The limits are fixed at start (`pullHoldMax`, `pullHoldMaxPerConnection`,
//! `maxInFlightRequestsPerConnection`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::observability::metrics::BrokerMetrics;

/// Default of `pullHoldMax`: pulls held at once by the whole broker. A held pull costs a task
/// and its request (about 2 KiB), so the default bounds them near 128 MiB.
pub const DEFAULT_PULL_HOLD_MAX: u32 = 65_536;
/// Default of `pullHoldMaxPerConnection`: below the in-flight limit, so a connection whose
/// pulls are all held can still send, commit and heartbeat.
pub const DEFAULT_PULL_HOLD_MAX_PER_CONNECTION: u32 = 512;
/// Default of `maxInFlightRequestsPerConnection` (RocketMQ clients keep at most a few hundred
/// asynchronous requests in flight).
pub const DEFAULT_MAX_IN_FLIGHT_PER_CONNECTION: u32 = 1024;
/// Largest `pullHoldMax` accepted: more would let held pulls take gigabytes.
pub const PULL_HOLD_MAX_LIMIT: u32 = 1 << 20;
/// Largest per-connection limit accepted (`pullHoldMaxPerConnection`,
/// `maxInFlightRequestsPerConnection`).
pub const PER_CONNECTION_LIMIT: u32 = 1 << 16;

/// Why a request was answered SYSTEM_BUSY; the label of `ferromq_requests_busy_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Busy {
    /// The broker holds `pullHoldMax` pulls.
    HeldPulls,
    /// The connection holds `pullHoldMaxPerConnection` pulls.
    HeldPullsPerConnection,
    /// The connection has `maxInFlightRequestsPerConnection` requests in flight.
    InFlight,
}

impl Busy {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Busy::HeldPulls => "held_pulls",
            Busy::HeldPullsPerConnection => "held_pulls_per_connection",
            Busy::InFlight => "in_flight_per_connection",
        }
    }

    /// The reply's remark: the limit and its key.
    pub fn remark(self, limit: usize) -> String {
        let what = match self {
            Busy::HeldPulls => "the broker holds pullHoldMax",
            Busy::HeldPullsPerConnection => "this connection holds pullHoldMaxPerConnection",
            Busy::InFlight => "this connection has maxInFlightRequestsPerConnection",
        };
        format!("[SYSTEM_BUSY] {what} = {limit} pulls or requests already; retry later")
    }
}

/// Counts `counter` up unless it already reached `max`; returns whether it did.
fn try_increment(counter: &AtomicUsize, max: usize) -> bool {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .is_ok()
}

/// The broker-wide count of held pulls and the limits of holding.
#[derive(Debug)]
pub struct HeldPulls {
    held: AtomicUsize,
    max: usize,
    per_connection_max: usize,
}

impl HeldPulls {
    /// No pull held; at most `max` in all and `per_connection_max` per connection.
    pub fn new(max: u32, per_connection_max: u32) -> HeldPulls {
        HeldPulls {
            held: AtomicUsize::new(0),
            max: max as usize,
            per_connection_max: per_connection_max as usize,
        }
    }

    /// Pulls held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// A place for one more held pull of the connection whose count is `connection`, or
    /// why not (counted in `metrics`, with the remark to answer).
    pub fn try_hold(
        self: &Arc<Self>,
        connection: &Arc<AtomicUsize>,
        metrics: &Arc<BrokerMetrics>,
    ) -> Result<HoldPermit, String> {
        if !try_increment(connection, self.per_connection_max) {
            metrics.busy(Busy::HeldPullsPerConnection);
            return Err(Busy::HeldPullsPerConnection.remark(self.per_connection_max));
        }
        if !try_increment(&self.held, self.max) {
            connection.fetch_sub(1, Ordering::AcqRel);
            metrics.busy(Busy::HeldPulls);
            return Err(Busy::HeldPulls.remark(self.max));
        }
        metrics.held_pull_started();
        Ok(HoldPermit {
            broker: self.clone(),
            connection: connection.clone(),
            metrics: metrics.clone(),
        })
    }
}

/// One held pull's place; freed (and the gauge lowered) when dropped, however the hold ends.
#[derive(Debug)]
pub struct HoldPermit {
    broker: Arc<HeldPulls>,
    connection: Arc<AtomicUsize>,
    metrics: Arc<BrokerMetrics>,
}

impl Drop for HoldPermit {
    fn drop(&mut self) {
        self.broker.held.fetch_sub(1, Ordering::AcqRel);
        self.connection.fetch_sub(1, Ordering::AcqRel);
        self.metrics.held_pull_ended();
    }
}

/// The requests of one connection in flight (read, reply not yet queued).
#[derive(Debug)]
pub struct InFlight {
    count: Arc<AtomicUsize>,
    max: usize,
}

impl InFlight {
    /// None in flight; at most `max`.
    pub fn new(max: u32) -> InFlight {
        InFlight {
            count: Arc::new(AtomicUsize::new(0)),
            max: max as usize,
        }
    }

    /// A place for one more request, or the remark of the SYSTEM_BUSY answer (counted).
    pub fn try_begin(&self, metrics: &BrokerMetrics) -> Result<InFlightPermit, String> {
        if try_increment(&self.count, self.max) {
            Ok(InFlightPermit(self.count.clone()))
        } else {
            metrics.busy(Busy::InFlight);
            Err(Busy::InFlight.remark(self.max))
        }
    }
}

/// One request's place in flight; freed when the request's task ends (or is dropped).
#[derive(Debug)]
pub struct InFlightPermit(Arc<AtomicUsize>);

impl Drop for InFlightPermit {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_stop_at_either_limit_and_free_their_place_when_dropped() {
        let metrics = Arc::new(BrokerMetrics::new());
        let pulls = Arc::new(HeldPulls::new(3, 2));
        let (a, b) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let first = pulls.try_hold(&a, &metrics).unwrap();
        let _second = pulls.try_hold(&a, &metrics).unwrap();
        let error = pulls.try_hold(&a, &metrics).unwrap_err();
        assert!(error.contains("pullHoldMaxPerConnection"), "{error}");
        let _third = pulls.try_hold(&b, &metrics).unwrap();
        let error = pulls.try_hold(&b, &metrics).unwrap_err();
        assert!(error.contains("pullHoldMax ="), "{error}");
        assert_eq!((pulls.held(), b.load(Ordering::Acquire)), (3, 1));
        assert_eq!(metrics.held_pulls(), 3);
        drop(first);
        assert_eq!((pulls.held(), a.load(Ordering::Acquire)), (2, 1));
        assert_eq!(metrics.held_pulls(), 2);
        assert_eq!(metrics.busy_count(Busy::HeldPulls), 1);
        assert_eq!(metrics.busy_count(Busy::HeldPullsPerConnection), 1);
    }

    #[test]
    fn in_flight_stops_at_its_limit() {
        let metrics = BrokerMetrics::new();
        let in_flight = InFlight::new(1);
        let permit = in_flight.try_begin(&metrics).unwrap();
        assert!(in_flight.try_begin(&metrics).is_err());
        drop(permit);
        in_flight.try_begin(&metrics).unwrap();
        assert_eq!(metrics.busy_count(Busy::InFlight), 1);
    }
}
