//! ferromq's own response and request codes, for outcomes and requests RocketMQ has no code
//! for. They are defined, with their meaning, in [`ferromq_protocol::remoting::extensions`],
//! shared with the client and the CLI; this module re-exports them for the broker.

pub use ferromq_protocol::remoting::extensions::*;
