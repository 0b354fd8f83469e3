//! ferromq's name server: RocketMQ's route registry over the remoting protocol.
//!
//! Brokers register their address and topics (REGISTER_BROKER) every 30 s; clients ask it for
//! topic routes (GET_ROUTEINFO_BY_TOPIC) and cluster info; admin tools list and delete topics.
//! A broker that stops registering, or whose connection closes, is removed with its routes.
//!
//! Modules:
//! - `route_registry`: the in-memory route tables and their rules ([`RouteRegistry`]);
//! - `kv`: the namespaced key-value store ([`KvConfig`]);
//! - `processor`: request code → reply ([`Processor`]);
//! - `server`: the TCP server and its lifecycle ([`NameServer`], [`NamesrvConfig`]);
//! - `client`: the broker's side of registration ([`NamesrvClient`]).
//!
//! Invariant: state is in memory only and rebuilt by broker registrations, as in RocketMQ;
//! network input never panics the server.

pub mod client;
pub mod kv;
pub mod processor;
pub mod route_registry;
pub mod server;

pub use client::{NamesrvClient, NamesrvClientError, RegisterBrokerReply};
pub use kv::KvConfig;
pub use processor::Processor;
pub use route_registry::{
    ConnectionId, RegisterBrokerError, RegisterBrokerResult, RemovedBroker, RouteRegistry,
    DEFAULT_BROKER_EXPIRY,
};
pub use server::{NameServer, NamesrvConfig, NamesrvError};
