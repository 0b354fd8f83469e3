//! RocketMQ 5.x gRPC protocol (`apache.rocketmq.v2`): the messages and the `MessagingService`
//! server and client, as served by the broker's gRPC endpoint (docs/grpc.md).
//!
//! # How the code is made
//!
//! The `.proto` files in `crates/protocol/proto/` are ferromq's own description of the wire
//! facts (field names and numbers) of apache/rocketmq-apis. Their Rust code
//! (`apache.rocketmq.v2.rs`) is generated once by `scripts/gen-grpc` (tonic-prost-build and
//! protoc, in a tool outside the workspace) and committed: `cargo build` on a fresh machine
//! then needs neither `protoc` nor a build script, and builds only the runtime crates
//! (prost, tonic with `codegen`). Regenerate and commit after changing a `.proto` file.
//!
//! [`codes`] lists which status codes ferromq may send: released clients crash or misbehave
//! on codes their copy of the enum lacks.

#[allow(missing_docs, clippy::all, clippy::pedantic)]
#[rustfmt::skip]
mod generated {
    include!("apache.rocketmq.v2.rs");
}

pub mod codes;

pub use generated::*;
