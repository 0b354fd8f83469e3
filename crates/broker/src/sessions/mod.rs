//! Sessions: who a request comes from, by client id, and the registry of connected producers
//! and consumers with their subscriptions and queue locks.

pub mod calls;
pub mod identity;
pub mod registry;
