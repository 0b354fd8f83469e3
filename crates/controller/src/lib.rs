//! ferromq's failover controller: a Raft group (openraft) that holds every broker group's
//! members, master, master epoch and in-sync set, elects masters when they stop
//! heartbeating, and fences stale masters by epoch.
//!
//! Layout, one concept per module:
//! - `state`: the replicated state and its commands (pure, deterministic);
//! - `election`: who becomes master (pure); `liveness`: heartbeats heard by the leader;
//! - `log_store`, `sm_store`: the Raft log, vote, commit point and snapshots on disk;
//! - `network`: Raft RPCs to peers over remoting frames; `server` and `api`: the listener
//!   and its request handlers (controller API codes 904, 1001-1006, 1011-1013 and Raft codes
//!   61001-61003, see `ferromq_protocol::controller`);
//! - `core`: the election procedure and failure detector; `controller`: the lifecycle.
//!
//! # Example
//!
//! A one-node group on an OS-chosen port:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use ferromq_controller::{Controller, ControllerConfig, Peer};
//!
//! let dir = tempfile::tempdir()?;
//! let any = "127.0.0.1:0".parse()?;
//! let config = ControllerConfig {
//!     peers: vec![Peer { id: 0, addr: any }],
//!     listen: Some(any),
//!     store_path: dir.path().to_owned(),
//!     ..ControllerConfig::default()
//! };
//! let controller = Controller::start(config).await?;
//! for _ in 0..100 {
//!     if controller.is_leader() {
//!         break;
//!     }
//!     tokio::time::sleep(Duration::from_millis(50)).await;
//! }
//! assert!(controller.metadata().is_leader);
//! controller.shutdown().await;
//! # Ok(())
//! # }
//! ```

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
