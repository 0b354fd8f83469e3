//! The RocketMQ remoting adapter: TCP connections (one task per connection, requests handled
//! concurrently, replies matched by opaque), the request processors, and the broker's
//! registration with the name servers. Processors translate only: decode a header, call the
//! core, map the outcome to a response code through `processor::code_map`.

pub mod connection;
pub mod outbound;
pub mod processor;
pub mod registration;
pub mod tls;
pub mod zero_copy;
