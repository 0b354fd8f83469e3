//! `RemotingCommand`: one decoded request or reply, and its encoding to and from a frame.
//!
//! A command is the same value whichever header encoding carried it; `serialize_type` records
//! that encoding so a reply can use the request's ([`RemotingCommand::reply`]).
//!
//! Invariants: decoding never panics and reports every malformed input as a
//! [`CommandError`]; encoding then decoding gives back an equal command (a binary header that
//! cannot carry a command exactly falls back to JSON, see `binary_header`).

use bytes::{BufMut, Bytes, BytesMut};
use thiserror::Error;

use super::binary_header::{self, BinaryHeaderError};
use super::ext::{CommandHeader, ExtFields, HeaderError};
use super::frame::{FrameError, FrameLimits, RawFrame, SerializeType, DEFAULT_MAX_FRAME_LENGTH};
use super::json_header::{self, JsonHeaderError};
use super::language::LanguageCode;

/// Flag bit 0 (`RPC_TYPE`): set on replies.
pub const FLAG_RESPONSE: i32 = 1;
/// Flag bit 1 (`RPC_ONEWAY`): set on one-way requests, which are never answered.
pub const FLAG_ONEWAY: i32 = 2;

/// Ordinals of `MQVersion.Version` that matter on the wire.
pub mod version {
    /// V3_0_7.
    pub const V3_0_7: i32 = 29;
    /// V3_1_8 (the C++ core).
    pub const V3_1_8: i32 = 63;
    /// V3_4_9: send-back reads `maxReconsumeTimes` from here on.
    pub const V3_4_9: i32 = 121;
    /// V4_3_0.
    pub const V4_3_0: i32 = 273;
    /// V4_9_4: Java's name server writes standard route JSON from here on.
    pub const V4_9_4: i32 = 401;
    /// V5_0_0.
    pub const V5_0_0: i32 = 413;
    /// V5_3_3: the version ferromq puts in the commands it sends.
    pub const V5_3_3: i32 = 479;
}

/// Why bytes are not a valid command.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CommandError {
    /// The frame envelope is malformed.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The JSON header is malformed.
    #[error(transparent)]
    JsonHeader(#[from] JsonHeaderError),
    /// The binary header is malformed.
    #[error(transparent)]
    BinaryHeader(#[from] BinaryHeaderError),
}

/// One request or reply of the remoting protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemotingCommand {
    /// Request code in a request, response code in a reply (see `codes`).
    pub code: i32,
    /// Implementation of the sender.
    pub language: LanguageCode,
    /// Sender's `MQVersion` ordinal (see [`version`]).
    pub version: i32,
    /// Request id; a reply carries its request's value.
    pub opaque: i32,
    /// Bit 0 reply, bit 1 one-way ([`FLAG_RESPONSE`], [`FLAG_ONEWAY`]).
    pub flag: i32,
    /// Error text in replies.
    pub remark: Option<String>,
    /// The custom header: every value as text, as Java's `toString()` writes it.
    pub ext_fields: ExtFields,
    /// Opaque body bytes; `None` when the frame had none.
    pub body: Option<Bytes>,
    /// Header encoding this command arrived in or will be sent in.
    pub serialize_type: SerializeType,
}

impl RemotingCommand {
    /// A request with the given code and ext fields, sent as JSON by ferromq (language RUST).
    pub fn new_request(code: i32, ext_fields: ExtFields) -> Self {
        RemotingCommand {
            code,
            language: LanguageCode::Rust,
            version: version::V5_3_3,
            opaque: 0,
            flag: 0,
            remark: None,
            ext_fields,
            body: None,
            serialize_type: SerializeType::Json,
        }
    }

    /// A request whose ext fields come from a typed header.
    pub fn request_with_header<H: CommandHeader>(code: i32, header: &H) -> Self {
        Self::new_request(code, header.to_ext())
    }

    /// [`request_with_header`](Self::request_with_header) consuming the header, whose strings
    /// move into the ext fields instead of being copied.
    pub fn request_with_owned_header<H: CommandHeader>(code: i32, header: H) -> Self {
        Self::new_request(code, header.into_ext())
    }

    /// A reply with the given code and remark: flag bit 0 set, language JAVA (what clients
    /// expect from a server), opaque 0 and JSON. Prefer [`reply`](Self::reply), which ties it
    /// to its request.
    pub fn new_response(code: i32, remark: Option<String>) -> Self {
        RemotingCommand {
            code,
            language: LanguageCode::Java,
            version: version::V5_3_3,
            opaque: 0,
            flag: FLAG_RESPONSE,
            remark,
            ext_fields: ExtFields::new(),
            body: None,
            serialize_type: SerializeType::Json,
        }
    }

    /// The reply to this request: [`new_response`](Self::new_response) with this request's
    /// opaque and serialize type.
    pub fn reply(&self, code: i32, remark: Option<String>) -> Self {
        RemotingCommand {
            opaque: self.opaque,
            serialize_type: self.serialize_type,
            ..Self::new_response(code, remark)
        }
    }

    /// True for a reply (flag bit 0).
    pub fn is_response(&self) -> bool {
        self.flag & FLAG_RESPONSE != 0
    }

    /// True for a one-way request (flag bit 1): the receiver must not reply.
    pub fn is_oneway(&self) -> bool {
        self.flag & FLAG_ONEWAY != 0
    }

    /// Sets or clears the one-way bit.
    pub fn set_oneway(&mut self, oneway: bool) {
        if oneway {
            self.flag |= FLAG_ONEWAY;
        } else {
            self.flag &= !FLAG_ONEWAY;
        }
    }

    /// Builder form: this command with `body`.
    pub fn with_body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = Some(body.into());
        self
    }

    /// Builder form: this command with `opaque`.
    pub fn with_opaque(mut self, opaque: i32) -> Self {
        self.opaque = opaque;
        self
    }

    /// Builder form: this command with the ext fields of a typed header added.
    pub fn with_header<H: CommandHeader>(mut self, header: &H) -> Self {
        self.add_ext(header.to_ext());
        self
    }

    /// [`with_header`](Self::with_header) consuming the header, whose strings move into the
    /// ext fields instead of being copied.
    pub fn with_owned_header<H: CommandHeader>(mut self, header: H) -> Self {
        self.add_ext(header.into_ext());
        self
    }

    /// Adds `ext` to the ext fields (a later key wins); into an empty map (a fresh reply) it
    /// is moved whole rather than re-inserted entry by entry.
    fn add_ext(&mut self, ext: ExtFields) {
        if self.ext_fields.is_empty() {
            self.ext_fields = ext;
        } else {
            self.ext_fields.extend(ext);
        }
    }

    /// Reads the ext fields as a typed header.
    pub fn decode_header<H: CommandHeader>(&self) -> Result<H, HeaderError> {
        H::from_ext(&self.ext_fields)
    }

    /// Decodes the parts of one frame.
    pub fn from_frame(frame: RawFrame) -> Result<Self, CommandError> {
        let mut cmd = match frame.serialize_type {
            SerializeType::Json => json_header::decode(&frame.header)?,
            SerializeType::RocketMq => binary_header::decode(&frame.header)?,
        };
        if !frame.body.is_empty() {
            cmd.body = Some(frame.body);
        }
        Ok(cmd)
    }

    /// Decodes exactly one complete frame (length field included), with the default maximum
    /// frame length.
    pub fn decode(frame: Bytes) -> Result<Self, CommandError> {
        Self::from_frame(RawFrame::from_bytes(frame, DEFAULT_MAX_FRAME_LENGTH)?)
    }

    /// Builds the frame for this command in its serialize type (JSON when the binary header
    /// cannot carry it exactly).
    pub fn to_frame(&self) -> RawFrame {
        let (serialize_type, header) = match self.serialize_type {
            SerializeType::RocketMq => match binary_header::encode(self) {
                Some(h) => (SerializeType::RocketMq, h),
                None => (SerializeType::Json, json_header::encode(self)),
            },
            SerializeType::Json => (SerializeType::Json, json_header::encode(self)),
        };
        RawFrame {
            serialize_type,
            header: Bytes::from(header),
            body: self.body.clone().unwrap_or_default(),
        }
    }

    /// Appends this command's frame to `dst`, failing if it exceeds `max_frame_length`: the
    /// frame [`RemotingCommand::to_frame`] would encode, written without building it.
    pub fn encode(&self, dst: &mut BytesMut, max_frame_length: usize) -> Result<(), FrameError> {
        let body = self.body.as_deref().unwrap_or_default();
        self.put_head(body.len(), body.len(), dst, max_frame_length)?;
        dst.put_slice(body);
        Ok(())
    }

    /// Appends this command's frame up to its body, for a body of `body_len` bytes the caller
    /// writes itself right after (see [`RawFrame::encode_head`]); the command's own body is
    /// ignored.
    pub fn encode_head(
        &self,
        body_len: usize,
        dst: &mut BytesMut,
        max_frame_length: usize,
    ) -> Result<(), FrameError> {
        self.put_head(body_len, 0, dst, max_frame_length)
    }

    /// Appends the frame's prefix and header (binary when the layout can carry the command,
    /// as [`RemotingCommand::to_frame`] chooses) for a body of `body_len` bytes, reserving
    /// room for `then` bytes after the header.
    fn put_head(
        &self,
        body_len: usize,
        then: usize,
        dst: &mut BytesMut,
        max_frame_length: usize,
    ) -> Result<(), FrameError> {
        let limits = FrameLimits { max_frame_length };
        if self.serialize_type == SerializeType::RocketMq {
            if let Some(layout) = binary_header::Layout::of(self) {
                let header_len = layout.len;
                let serialize_type = SerializeType::RocketMq;
                limits.put_prefix(serialize_type, header_len, body_len, header_len + then, dst)?;
                layout.write(self, dst);
                return Ok(());
            }
        }
        let header = json_header::encode(self);
        limits.put_prefix(
            SerializeType::Json,
            header.len(),
            body_len,
            header.len() + then,
            dst,
        )?;
        dst.put_slice(&header);
        Ok(())
    }

    /// This command's frame as bytes, with the default maximum frame length.
    pub fn to_bytes(&self) -> Result<Bytes, FrameError> {
        let mut buf = BytesMut::new();
        self.encode(&mut buf, DEFAULT_MAX_FRAME_LENGTH)?;
        Ok(buf.freeze())
    }
}
