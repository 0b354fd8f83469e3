//! The remoting frame: the outer envelope of every request and reply on a connection.
//!
//! ```text
//! 0 length 4 | 4 serializeType 1 + headerLen 3 | 8 header (headerLen) | body (the rest)
//! ```
//!
//! All integers are big-endian. `length` counts the bytes after itself (`4 + headerLen +
//! bodyLen`); the frame size checked against the configured maximum is `4 + length`, the whole
//! frame including the length field, as Java's `LengthFieldBasedFrameDecoder` counts it.
//!
//! Invariants: a decoded [`RawFrame`] always has `header.len() <= 0xFF_FFFF`; decoding never
//! panics and never consumes bytes from the stream unless it returns a whole frame; an error
//! means the stream can no longer be trusted and the caller closes the connection.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use thiserror::Error;

/// Default maximum frame size (16 MiB), Java's `com.rocketmq.remoting.frameMaxLength`.
pub const DEFAULT_MAX_FRAME_LENGTH: usize = 16_777_216;
/// Largest header length the 24-bit field can express.
pub const MAX_HEADER_LENGTH: usize = 0xFF_FFFF;
/// Bytes before the header: the length field and the serialize-type/header-length field.
pub const FRAME_PREFIX_LEN: usize = 8;

/// How the header of one frame is encoded (high byte of the second field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SerializeType {
    /// JSON text header (§3); what every non-Java client sends and Java's default.
    #[default]
    Json,
    /// RocketMQ's compact binary header (§4).
    RocketMq,
}

impl SerializeType {
    /// The wire byte of this type.
    pub fn code(self) -> u8 {
        match self {
            SerializeType::Json => 0,
            SerializeType::RocketMq => 1,
        }
    }

    /// Maps a wire byte to a type; `None` for bytes RocketMQ does not define.
    pub fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(SerializeType::Json),
            1 => Some(SerializeType::RocketMq),
            _ => None,
        }
    }

    /// The name Java writes in `serializeTypeCurrentRPC`.
    pub fn name(self) -> &'static str {
        match self {
            SerializeType::Json => "JSON",
            SerializeType::RocketMq => "ROCKETMQ",
        }
    }
}

/// Why bytes are not a valid frame. Every variant means the connection must be closed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FrameError {
    /// The frame (length field included) is larger than the configured maximum.
    #[error("frame of {size} bytes exceeds the maximum of {max} bytes")]
    TooLong {
        /// Whole frame size, `4 + length`.
        size: u64,
        /// Configured maximum.
        max: usize,
    },
    /// The length field is negative or smaller than the 4-byte header-length field it must
    /// contain.
    #[error("frame length field {length} is smaller than the 4 bytes it must contain")]
    LengthTooShort {
        /// The length field as read (signed, as Java reads it).
        length: i32,
    },
    /// The header length exceeds the bytes the frame holds after the header-length field.
    #[error("header length {header_len} exceeds the {available} bytes left in the frame")]
    HeaderLengthExceedsFrame {
        /// Declared header length.
        header_len: usize,
        /// Bytes after the header-length field.
        available: usize,
    },
    /// The serialize-type byte is neither 0 (JSON) nor 1 (ROCKETMQ).
    #[error("unknown serialize type {0}")]
    UnknownSerializeType(u8),
    /// A complete frame was expected but the bytes end early.
    #[error("frame truncated: needs {needed} bytes, has {available}")]
    Truncated {
        /// Bytes the frame declares.
        needed: usize,
        /// Bytes present.
        available: usize,
    },
    /// Bytes follow the end of a frame given as one complete buffer.
    #[error("{0} bytes follow the end of the frame")]
    TrailingBytes(usize),
    /// The header is longer than 24 bits can express (encoding only).
    #[error("header of {0} bytes exceeds the 24-bit header length field")]
    HeaderTooLarge(usize),
}

/// The size checks every encoded frame passes, and its 8-byte prefix.
pub(crate) struct FrameLimits {
    /// Largest frame, length field included.
    pub(crate) max_frame_length: usize,
}

impl FrameLimits {
    /// Checks a frame of a `header_len`-byte header and a `body_len`-byte body (the header
    /// must fit the 24-bit field, the frame `max_frame_length` and an `i32` length), then
    /// appends its length and header-length fields to `dst` with room reserved for the
    /// `then` bytes the caller writes next. Nothing is appended when a check fails.
    pub(crate) fn put_prefix(
        &self,
        serialize_type: SerializeType,
        header_len: usize,
        body_len: usize,
        then: usize,
        dst: &mut BytesMut,
    ) -> Result<(), FrameError> {
        if header_len > MAX_HEADER_LENGTH {
            return Err(FrameError::HeaderTooLarge(header_len));
        }
        let size = FRAME_PREFIX_LEN + header_len + body_len;
        if size > self.max_frame_length || size - 4 > i32::MAX as usize {
            return Err(FrameError::TooLong {
                size: size as u64,
                max: self.max_frame_length,
            });
        }
        dst.reserve(FRAME_PREFIX_LEN + then);
        dst.put_u32((size - 4) as u32);
        dst.put_u32(((serialize_type.code() as u32) << 24) | header_len as u32);
        Ok(())
    }
}

/// One frame split into its parts, header still encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawFrame {
    /// Encoding of `header`.
    pub serialize_type: SerializeType,
    /// Header bytes (JSON text or ROCKETMQ binary).
    pub header: Bytes,
    /// Body bytes; empty when the frame carries none.
    pub body: Bytes,
}

impl RawFrame {
    /// Size of the encoded frame including the length field.
    pub fn encoded_len(&self) -> usize {
        FRAME_PREFIX_LEN + self.header.len() + self.body.len()
    }

    /// Appends the encoded frame to `dst`; fails only when the header exceeds 24 bits or the
    /// frame exceeds `max_frame_length`.
    pub fn encode(&self, dst: &mut BytesMut, max_frame_length: usize) -> Result<(), FrameError> {
        let (header_len, body_len) = (self.header.len(), self.body.len());
        let limits = FrameLimits { max_frame_length };
        limits.put_prefix(
            self.serialize_type,
            header_len,
            body_len,
            header_len + body_len,
            dst,
        )?;
        dst.put_slice(&self.header);
        dst.put_slice(&self.body);
        Ok(())
    }

    /// Appends the frame's length field, header-length field and header to `dst`, as if the
    /// frame carried a body of `body_len` bytes that the caller writes after them itself
    /// (a server sending the body straight from a file). `self.body` must be empty.
    ///
    /// # Errors
    /// As [`RawFrame::encode`], for the whole frame the body completes.
    pub fn encode_head(
        &self,
        body_len: usize,
        dst: &mut BytesMut,
        max_frame_length: usize,
    ) -> Result<(), FrameError> {
        debug_assert!(self.body.is_empty(), "encode_head of a frame with a body");
        let header_len = self.header.len();
        let limits = FrameLimits { max_frame_length };
        limits.put_prefix(self.serialize_type, header_len, body_len, header_len, dst)?;
        dst.put_slice(&self.header);
        Ok(())
    }

    /// Takes one whole frame off the front of `src` when it is complete.
    ///
    /// Returns `Ok(None)` (consuming nothing) while the frame is incomplete. The length field
    /// is checked against `max_frame_length` as soon as it is readable, so an oversized frame
    /// is rejected before its bytes are buffered.
    pub fn decode(
        src: &mut BytesMut,
        max_frame_length: usize,
    ) -> Result<Option<RawFrame>, FrameError> {
        let Some(length) = peek_i32(src) else {
            return Ok(None);
        };
        let length = check_length(length, max_frame_length)?;
        if src.len() < 4 + length {
            src.reserve(4 + length - src.len());
            return Ok(None);
        }
        let mut frame = src.split_to(4 + length).freeze();
        frame.advance(4);
        split_frame(frame, length).map(Some)
    }

    /// The whole size (length field included) of the frame starting at `src`, once its
    /// length field is readable; `Ok(None)` before. Checks the length as [`RawFrame::decode`]
    /// does but reserves nothing, so a server can charge the frame to a memory budget before
    /// buffering it.
    pub fn peek_size(src: &[u8], max_frame_length: usize) -> Result<Option<usize>, FrameError> {
        match peek_i32(src) {
            Some(length) => Ok(Some(4 + check_length(length, max_frame_length)?)),
            None => Ok(None),
        }
    }

    /// Parses `bytes` as exactly one complete frame (length field included).
    pub fn from_bytes(bytes: Bytes, max_frame_length: usize) -> Result<RawFrame, FrameError> {
        let Some(length) = peek_i32(&bytes) else {
            return Err(FrameError::Truncated {
                needed: 4,
                available: bytes.len(),
            });
        };
        let length = check_length(length, max_frame_length)?;
        let needed = 4 + length;
        if bytes.len() < needed {
            return Err(FrameError::Truncated {
                needed,
                available: bytes.len(),
            });
        }
        if bytes.len() > needed {
            return Err(FrameError::TrailingBytes(bytes.len() - needed));
        }
        split_frame(bytes.slice(4..), length)
    }
}

fn peek_i32(src: &[u8]) -> Option<i32> {
    let head: [u8; 4] = src.get(..4)?.try_into().ok()?;
    Some(i32::from_be_bytes(head))
}

/// Validates the length field and returns it as a byte count.
fn check_length(length: i32, max_frame_length: usize) -> Result<usize, FrameError> {
    if length < 4 {
        return Err(FrameError::LengthTooShort { length });
    }
    let length = length as usize;
    if length + 4 > max_frame_length {
        return Err(FrameError::TooLong {
            size: length as u64 + 4,
            max: max_frame_length,
        });
    }
    Ok(length)
}

/// Splits `frame` (everything after the length field, exactly `length` bytes) into parts.
fn split_frame(mut frame: Bytes, length: usize) -> Result<RawFrame, FrameError> {
    debug_assert_eq!(frame.len(), length);
    let ser_and_len = frame.get_u32();
    let ser_code = (ser_and_len >> 24) as u8;
    let header_len = (ser_and_len & 0xFF_FFFF) as usize;
    let serialize_type =
        SerializeType::from_code(ser_code).ok_or(FrameError::UnknownSerializeType(ser_code))?;
    if header_len > frame.len() {
        return Err(FrameError::HeaderLengthExceedsFrame {
            header_len,
            available: frame.len(),
        });
    }
    let header = frame.split_to(header_len);
    Ok(RawFrame {
        serialize_type,
        header,
        body: frame,
    })
}
