pub mod clock;
pub mod controller;
pub mod disk;
pub mod log;
pub mod msg;
pub mod net;
pub mod node;
pub mod rng;
pub mod swarm;
pub mod trace;

/// A deliberately injected bug (test-only switch): the simulation must catch it.
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
}
pub mod checker;
pub mod run;
pub mod workload;
pub mod world;

pub use run::{run_seed, Failure, RunStats, SimConfig};
