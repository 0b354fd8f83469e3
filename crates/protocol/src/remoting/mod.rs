//! The remoting protocol: RocketMQ's classic TCP protocol spoken by name servers, brokers and
//! 4.x/5.x remoting clients.
//!
//! Layers, outermost first:
//! - `frame`: the length-prefixed envelope (`RawFrame`), with a maximum frame size;
//! - `codec`: `RemotingCodec`, the frame decoder/encoder for `tokio_util::codec`;
//! - `command`: `RemotingCommand`, decoded from a JSON (`json_header`) or ROCKETMQ binary
//!   (`binary_header`) header chosen per frame;
//! - `codes`: request and response codes;
//! - `extensions`: ferromq's own codes and ext fields, beyond RocketMQ's;
//! - `ext` and `headers`: typed, lenient views of a command's ext fields;
//! - `body`: JSON bodies (routes, heartbeats, topic configs, ...);
//! - `client`: `RemotingClient`, a multiplexed tokio TCP connection speaking all of the above;
//! - `limits`: what a server bounds per connection and in total (connection limit, accept
//!   back-off, idle timeout, frame deadline, partial-frame budget), shared by the broker and
//!   the name server.
//!
//! Invariant for every decoder here: network input never panics; malformed input is a typed
//! error that names what is wrong.

pub mod acl;
pub mod binary_header;
pub mod body;
pub mod client;
pub mod codec;
pub mod codes;
pub mod command;
pub mod ext;
pub mod ext_map;
pub mod extensions;
pub mod frame;
pub mod headers;
pub mod json_header;
pub mod language;
pub mod limits;
pub mod tls;
pub mod tls_server;

#[cfg(test)]
mod tests;

pub use client::{ClientError, ClientOptions, RemotingClient, REPLY_SPIN_MAX};
pub use codec::{CodecError, RemotingCodec};
pub use codes::{request, request_code_name, response, response_code_name};
pub use command::{CommandError, RemotingCommand, FLAG_ONEWAY, FLAG_RESPONSE};
pub use ext::{CommandHeader, ExtFields, ExtFieldsExt, ExtText, HeaderError};
pub use frame::{FrameError, RawFrame, SerializeType, DEFAULT_MAX_FRAME_LENGTH};
pub use language::LanguageCode;
