//! ferromq's failover controller: a Raft group (openraft) that holds every broker group's
//! members, master, master epoch and in-sync set, elects masters when they stop
//! heartbeating, and fences stale masters by epoch.

pub mod config;
pub mod election;
pub mod error;
mod fsutil;
pub mod liveness;
pub mod log_store;
pub mod raft_types;
pub mod sm_store;
pub mod state;
