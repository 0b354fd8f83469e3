//! The ferromq broker: serves RocketMQ's remoting protocol on top of `ferromq-store`.
//!
//! - [`core`]: every operation the broker offers (send, pull, offsets, resets, membership,
//!   locks) as typed requests, outcomes and errors, and every rule of consumer progress — no
//!   wire format. See `docs/broker-core.md`.
//! - [`remoting`]: the RocketMQ remoting adapter: the TCP connections, the processors that
//!   decode a request, call the core and map its answer to a code (one table,
//!   `remoting::processor::code_map`), and the registration with the name servers.
//! - [`grpc`]: the RocketMQ 5.x gRPC adapter (`apache.rocketmq.v2`) on `grpcListenPort`:
//!   producers today (QueryRoute, Heartbeat, Telemetry, SendMessage); docs/grpc.md.
//! - [`sessions`]: who a request comes from (client id, not connection) and the registry of
//!   connected producers and consumers.
//! - [`catalog`]: topic configs and subscription groups.
//! - [`config`]: broker configuration with RocketMQ's key names, from TOML, and the settings
//!   `updateBrokerConfig` may change while the broker runs.
//! - [`observability`]: Prometheus metrics on `metricsPort` and the runtime table of
//!   `brokerStatus`.
//! - [`server`] and [`context`]: starting and stopping a broker, and the state its parts
//!   share.
//!
//! Invariants kept here (DESIGN.md): a send or a commit is answered SUCCESS only when the store
//! says it is acknowledgeable under the flush policy (invariant 2); commits go through the
//! store's offset view, so a stale commit is rejected with its own code (invariant 3);
//! consumers see only dispatched records (invariant 4); magic negative offsets exist only at
//! this protocol edge (invariant 7). Network input never panics the broker.

pub mod catalog;
pub mod codes;
pub mod config;
pub mod context;
pub mod core;
pub mod grpc;
pub mod observability;
pub mod remoting;
pub mod replication;
pub mod server;
pub mod sessions;

pub use config::{BrokerConfig, ConfigError};
pub use context::BrokerContext;
pub use server::{Broker, BrokerError};
