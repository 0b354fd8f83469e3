//! The broker core: every operation the broker offers, as typed requests with typed outcomes
//! and typed errors, and every rule that keeps consumer progress honest — with no wire format
//! in it. The remoting processors (`processor`) decode a header, call the core and map its
//! outcome to a response code in one table (`processor::code_map`); a gRPC adapter sits
//! beside them over the same calls.
//!
//! - [`send`], [`send_back`], [`scheduler`], [`timer`]: messages, batches, redeliveries,
//!   delayed messages (levels) and timer messages (any delivery time).
//! - [`pull`]: reading a queue for a pull.
//! - [`offsets`]: queries, commits, corrections, the commit a pull carries, and following a
//!   reset on the next pull — every rule of invariant 3 the broker adds to the store's.
//! - [`reset`]: administrators' resets, clones and skips of damaged records.
//! - [`fences`]: who may not commit on which queue after a reset, by client id, recovered
//!   from the log.
//! - [`long_poll`], [`work_limits`]: held pulls and the limits on holding them.
//! - [`pop`]: receive / ack / change-invisible-duration consumption (gRPC v5 consumers), its
//!   state kept as log records; [`system_queue`]: reading a system queue for a rebuild.
//!
//! Who a request comes from (client id, not connection) is `crate::sessions`.
//! - [`membership`]: heartbeats, unregistering, consumer lists, queue locks.
//! - [`lookup`]: one message by CommitLog offset.
//! - [`ack`]: the one acknowledgement path every write ends in (invariant 2).
//! - [`view`]: offset reads that fail rather than answer from a stale view (invariant 7).
//! - [`catalog`]: administrators' changes of topics and subscription groups.
//! - [`access`]: which topics and groups a client or administrator may name.
//! - [`authorisation`]: ACL: who signed a request and whether that account may make it
//!   (every request kind passes it once, before anything else).
//! - [`error`]: the typed errors.

pub mod access;
pub mod ack;
pub mod authorisation;
pub mod catalog;
pub mod error;
pub mod fences;
pub mod long_poll;
pub mod lookup;
pub mod membership;
pub mod offsets;
pub mod pop;
pub mod pull;
pub mod reset;
pub mod scheduler;
pub mod send;
pub mod send_back;
pub mod system_queue;
pub mod timer;
pub mod transactions;
pub mod view;
pub mod work_limits;
