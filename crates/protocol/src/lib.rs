//! Wire formats shared by ferromq's store, broker and clients.
//!
//! This crate owns RocketMQ's byte layouts. Today it holds the stored message record
//! (RocketMQ's `MessageDecoder` layout), which is at once the CommitLog record and the body of
//! a pull reply, so a broker can send stored bytes to real clients unchanged, and the remoting
//! protocol (`remoting`): frames, commands, request/response codes, typed headers and JSON
//! bodies, RocketMQ's tag expressions (`tags`), ferromq's own master/slave replication
//! frames (`ha`), and the RocketMQ 5.x gRPC protocol (`grpc`, `apache.rocketmq.v2`: prost
//! messages and the tonic `MessagingService`, generated once by `scripts/gen-grpc`).
//!
//! Everything except `remoting::client` maps bytes to values and back without touching a file
//! or a socket; the client is the small tokio transport that brokers, tests and the Rust
//! client library share.

pub mod controller;
pub mod grpc;
pub mod ha;
pub mod java_hash;
pub mod message;
pub mod names;
pub mod remoting;
pub mod tags;

pub use java_hash::java_string_hash;
pub use message::message_id::{MessageId, MessageIdError};
pub use message::outline::{RecordHead, RecordOutline, RECORD_HEAD_LEN_MAX};
pub use message::properties::names as property_names;
pub use message::properties::{Properties, NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR};
pub use message::record::{
    body_crc, peek_magic, peek_total_size, record_size_max, seal, DraftRecord, EncodedRecord,
    RecordError, RecordView, BLANK_MAGIC, BODY_SIZE_LIMIT, MAGIC_V1, MAGIC_V2, RECORD_OVERHEAD_MAX,
    RECORD_SIZE_MAX,
};
