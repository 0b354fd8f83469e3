//! ferromq's failover controller: a Raft group (openraft) that holds every broker group's
//! members, master, master epoch and in-sync set, elects masters when they stop
//! heartbeating, and fences stale masters by epoch.

mod api;
pub mod config;
pub mod controller;
mod core;
pub mod election;
pub mod error;
mod fsutil;
pub mod liveness;
pub mod log_store;
pub mod metrics;
pub mod network;
mod notify;
pub mod raft_types;
mod server;
pub mod sm_store;
pub mod state;

pub use config::{format_peers, parse_node_id, parse_peers, ControllerConfig, Peer};
pub use controller::{BoundController, Controller};
pub use error::{ControllerError, StoreError};
