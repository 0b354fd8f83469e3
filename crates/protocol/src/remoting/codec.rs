//! `RemotingCodec`: frames `RemotingCommand`s on a byte stream for `tokio_util::codec`.
//!
//! Invariant: the decoder buffers at most one frame and rejects a frame larger than
//! `max_frame_length` as soon as its length field arrives, so a peer cannot make it allocate
//! more. Any error means the stream is unusable: the caller closes the connection (after a
//! header error the frame has been consumed, so logging and reading on would also be safe).

use std::io;

use bytes::BytesMut;
use thiserror::Error;
use tokio_util::codec::{Decoder, Encoder};

use super::command::{CommandError, RemotingCommand};
use super::frame::{FrameError, RawFrame, DEFAULT_MAX_FRAME_LENGTH};

/// Errors of [`RemotingCodec`].
#[derive(Debug, Error)]
pub enum CodecError {
    /// Reading or writing the underlying stream failed.
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
    /// A received frame is malformed or an outgoing one is too large.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// A received frame's header is malformed.
    #[error(transparent)]
    Command(#[from] CommandError),
}

/// Decoder and encoder of remoting frames carrying [`RemotingCommand`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemotingCodec {
    max_frame_length: usize,
}

impl Default for RemotingCodec {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME_LENGTH)
    }
}

impl RemotingCodec {
    /// A codec accepting frames up to `max_frame_length` bytes, length field included.
    pub fn new(max_frame_length: usize) -> Self {
        RemotingCodec { max_frame_length }
    }

    /// The configured maximum frame size.
    pub fn max_frame_length(&self) -> usize {
        self.max_frame_length
    }
}

impl Decoder for RemotingCodec {
    type Item = RemotingCommand;
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<RemotingCommand>, CodecError> {
        match RawFrame::decode(src, self.max_frame_length)? {
            None => Ok(None),
            Some(frame) => Ok(Some(RemotingCommand::from_frame(frame)?)),
        }
    }
}

impl Encoder<RemotingCommand> for RemotingCodec {
    type Error = CodecError;

    fn encode(&mut self, item: RemotingCommand, dst: &mut BytesMut) -> Result<(), CodecError> {
        self.encode(&item, dst)
    }
}

impl Encoder<&RemotingCommand> for RemotingCodec {
    type Error = CodecError;

    fn encode(&mut self, item: &RemotingCommand, dst: &mut BytesMut) -> Result<(), CodecError> {
        Ok(item.encode(dst, self.max_frame_length)?)
    }
}
