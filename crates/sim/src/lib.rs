//! ferromq's deterministic simulation: one broker group (a controller, three replicas, a
//! producer and a consumer) under failover, in one thread, on a simulated clock
//! ([`clock`]), network ([`net`]) and disk ([`disk`]), driving the production state machines
//! of replication, election, lease, truncation and the offset view (see [`node`],
//! [`controller`] and `docs/simulation.md` for what is production code and what is
//! modelled).
//!
//! Invariants:
//! 1. One `u64` seed reproduces a run exactly: every random choice comes from [`rng`]
//!    streams of the seed, events run in (virtual time, sequence) order ([`world`]), and
//!    nothing reads the wall clock but [`clock::base`] once.
//! 2. Every property of [`checker`] is checked during the run (each step where cheap) and
//!    after the final quiesce; the first broken one ends the run as a [`Failure`] carrying the
//!    seed, the swarm parameters ([`swarm`]) and the last events ([`trace`]).
//! 3. Every loop is bounded ([`run::EVENTS_MAX`], [`run::LIVENESS_BOUND_MS`],
//!    [`node::PENDING_WRITES_MAX`]).
//!
//! # Example
//!
//! ```
//! use ferromq_sim::{run_seed, SimConfig};
//!
//! let stats = run_seed(7, &SimConfig::default()).expect("seed 7 keeps every property");
//! assert!(stats.acknowledged > 0);
//! // The same seed is the same run.
//! assert_eq!(run_seed(7, &SimConfig::default()).unwrap().trace_hash, stats.trace_hash);
//! ```

pub mod checker;
pub mod clock;
pub mod controller;
pub mod disk;
pub mod log;
pub mod msg;
pub mod net;
pub mod node;
pub mod rng;
pub mod run;
pub mod swarm;
pub mod trace;
pub mod workload;
pub mod world;

pub use run::{run_seed, Failure, RunStats, SimConfig};

/// A deliberately injected bug: a test-only switch of the simulation's own glue (never a
/// production code path), which the CI seeds must catch (`tests/injected_bug.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InjectedBug {
    /// None: the production behaviour.
    #[default]
    None,
    /// The master acknowledges a SYNC_MASTER write once its own flush holds it, without
    /// waiting for the in-sync set.
    AckBeforeReplicated,
    /// The controller treats every alive member as in sync when electing.
    ElectOutsideInSyncSet,
    /// Production before `in_sync` rule 6: while a growth of the in-sync set is in flight, the
    /// master waits only for the controller's current set.
    GrowthNotWaitedFor,
    /// Production before `in_sync` rule 7: a new master term keeps the watermark of an older
    /// term (possibly above the log end after a truncation).
    StaleWatermarkAcrossTerms,
    /// Production before the fix of `ferromq chaos` seed 2006: an offset command that writes
    /// nothing ("unchanged": an earlier record holds the value) is acknowledged at once, even
    /// when that record is not yet replicated.
    UnchangedAckedAtOnce,
}
