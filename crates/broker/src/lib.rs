//! The ferromq broker: serves RocketMQ's remoting protocol on top of `ferromq-store`.
//!
//! - [`config`]: broker configuration with RocketMQ's key names, from TOML.
//! - [`server`] and [`connection`]: the TCP server; one task per connection, requests handled
//!   concurrently, replies matched by opaque.
//! - [`core`]: the broker's operations and rules, with no wire format in them.
//! - [`processor`]: the remoting adapter: one module per request family (send, pull,
//!   offsets, clients, admin) that decodes, calls the core and maps its answer to a code.
//! - [`topics`], [`groups`], [`clients`]: topic configs, subscription groups, the registry
//!   of connected producers and consumers.
//! - [`long_poll`]: pull requests held until new messages are dispatched.
//! - [`metrics`], [`metrics_http`], [`broker_stats`]: Prometheus metrics on `metricsPort`
//!   and the runtime table of `brokerStatus`.
//! - [`runtime_config`]: the settings `updateBrokerConfig` may change while the broker runs.
//!
//! Invariants kept here (DESIGN.md): a send or a commit is answered SUCCESS only when the store
//! says it is acknowledgeable under the flush policy (invariant 2); commits go through the
//! store's offset view, so a stale commit is rejected with its own code (invariant 3);
//! consumers see only dispatched records (invariant 4); magic negative offsets exist only at
//! this protocol edge (invariant 7). Network input never panics the broker.

pub mod broker_stats;
pub mod clients;
pub mod codes;
pub mod config;
pub mod connection;
pub mod context;
pub mod core;
pub mod groups;
pub mod long_poll;
pub mod metrics;
pub mod metrics_http;
pub mod processor;
pub mod registration;
pub mod runtime_config;
pub mod server;
pub mod topics;
pub mod work_limits;

pub use config::{BrokerConfig, ConfigError};
pub use context::BrokerContext;
pub use server::{Broker, BrokerError};
