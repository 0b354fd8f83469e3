//! [`HaCodec`]: frames [`HaFrame`]s on a byte stream for `tokio_util::codec`.

use bytes::{Buf, BufMut, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use super::error::HaFrameError;
use super::wire::{decode_payload, payload_len, put_payload};
use super::{HaFrame, HA_FRAME_MAX_DEFAULT};

/// Bytes of the length field.
const LEN_FIELD: usize = 4;

/// Decoder and encoder of HA frames.
///
/// `max_frame` bounds a frame's `len` field (kind byte plus payload, the length prefix not
/// counted) both ways. Invariant: the decoder buffers and reserves at most one frame of at
/// most `4 + max_frame` bytes, and it refuses a larger `len` as soon as the length field is
/// present; it consumes bytes only when it has a whole frame (which it then consumes even if
/// the frame's payload turns out to be malformed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HaCodec {
    max_frame: usize,
}

impl HaCodec {
    /// A codec accepting frames whose `len` is at most `max_frame` bytes.
    pub fn new(max_frame: usize) -> Self {
        HaCodec { max_frame }
    }

    /// The configured bound of a frame's `len`.
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }

    fn too_large(&self, len: usize) -> HaFrameError {
        HaFrameError::TooLarge {
            len,
            max: self.max_frame,
        }
    }
}

impl Default for HaCodec {
    /// A codec bounded by [`HA_FRAME_MAX_DEFAULT`].
    fn default() -> Self {
        Self::new(HA_FRAME_MAX_DEFAULT)
    }
}

impl Decoder for HaCodec {
    type Item = HaFrame;
    type Error = HaFrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<HaFrame>, HaFrameError> {
        let Some(len_bytes) = src.get(..LEN_FIELD) else {
            return Ok(None);
        };
        let mut field = [0u8; LEN_FIELD];
        field.copy_from_slice(len_bytes);
        // u32 always fits the usize of any platform tokio supports; saturate otherwise, which
        // is then refused as too large.
        let len = usize::try_from(u32::from_be_bytes(field)).unwrap_or(usize::MAX);
        if len > self.max_frame {
            return Err(self.too_large(len));
        }
        if len == 0 {
            return Err(HaFrameError::EmptyFrame);
        }
        let total = len
            .checked_add(LEN_FIELD)
            .ok_or_else(|| self.too_large(len))?;
        if src.len() < total {
            // At most the rest of this frame, which the check above bounds.
            src.reserve(total - src.len());
            return Ok(None);
        }
        let mut frame = src.split_to(total);
        frame.advance(LEN_FIELD);
        // `len >= 1`, so the kind byte is there.
        let kind = frame.get_u8();
        decode_payload(kind, frame).map(Some)
    }
}

impl Encoder<&HaFrame> for HaCodec {
    type Error = HaFrameError;

    fn encode(&mut self, item: &HaFrame, dst: &mut BytesMut) -> Result<(), HaFrameError> {
        let len = payload_len(item)?
            .checked_add(1)
            .ok_or_else(|| self.too_large(usize::MAX))?;
        if len > self.max_frame {
            return Err(self.too_large(len));
        }
        let Ok(len_field) = u32::try_from(len) else {
            return Err(HaFrameError::TooLarge {
                len,
                max: usize::try_from(u32::MAX).unwrap_or(usize::MAX),
            });
        };
        dst.reserve(LEN_FIELD + len);
        dst.put_u32(len_field);
        dst.put_u8(item.kind());
        put_payload(item, dst);
        Ok(())
    }
}

impl Encoder<HaFrame> for HaCodec {
    type Error = HaFrameError;

    fn encode(&mut self, item: HaFrame, dst: &mut BytesMut) -> Result<(), HaFrameError> {
        self.encode(&item, dst)
    }
}
