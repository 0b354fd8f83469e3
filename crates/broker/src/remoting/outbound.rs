//! What a connection's writer sends: a frame, or a pull reply whose body is a list of
//! CommitLog file regions to send without copying (`transferMsgByHeap=false`).
//!
//! Every write of a connection goes through its one writer task, in queue order, so a
//! zero-copy reply never interleaves with another frame: the writer writes the reply's head
//! through its codec, flushes, then sends the regions itself (`super::zero_copy`).

use bytes::{Bytes, BytesMut};
use ferromq_protocol::remoting::{CodecError, RemotingCodec, RemotingCommand};
use ferromq_protocol::RecordView;
use ferromq_store::{FileRegion, RegionError, StoredRegion};
use tokio_util::codec::Encoder;

/// One item of a connection's outgoing queue.
#[derive(Debug)]
pub enum Outbound {
    /// A whole frame.
    Frame(RemotingCommand),
    /// A pull reply whose body goes from the files.
    Regions(RegionReply),
    /// A pull reply whose body is records already read and verified.
    Records(RecordsReply),
}

impl From<RemotingCommand> for Outbound {
    fn from(command: RemotingCommand) -> Self {
        Outbound::Frame(command)
    }
}

/// A reply whose body is the records of checked file regions, in order.
#[derive(Debug)]
pub struct RegionReply {
    /// The reply; its own body is ignored.
    pub head: RemotingCommand,
    /// The body, adjacent records merged into one region.
    pub regions: Vec<FileRegion>,
    /// Bytes of the body.
    pub body_len: u64,
}

/// A reply whose body is records read and verified into memory (`transferMsgByHeap=true`),
/// in order. The writer's encoder copies them straight into its buffer after the head: one
/// copy of each record between the read and the socket, not one into a body and another into
/// the buffer.
#[derive(Debug)]
pub struct RecordsReply {
    /// The reply; its own body is ignored.
    pub head: RemotingCommand,
    /// The body, record by record.
    pub records: Vec<Bytes>,
}

impl RecordsReply {
    /// The reply `head` carrying `records`.
    pub fn new(head: RemotingCommand, records: Vec<Bytes>) -> RecordsReply {
        RecordsReply { head, records }
    }

    /// Bytes of the body.
    pub fn body_len(&self) -> usize {
        self.records.iter().map(Bytes::len).sum()
    }
}

/// Why a region reply could not be turned into a copied frame.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// A region may no longer be sent, or could not be read.
    #[error(transparent)]
    Region(#[from] RegionError),
    /// A record read back fails verification (its CRC, most likely: the zero-copy check does
    /// not read bodies).
    #[error("a record of the reply does not verify: {0}")]
    Record(#[from] ferromq_protocol::RecordError),
}

impl RegionReply {
    /// The reply `head` carrying `messages`, adjacent records merged.
    pub fn new(head: RemotingCommand, messages: Vec<StoredRegion>) -> RegionReply {
        let mut regions: Vec<FileRegion> = Vec::with_capacity(messages.len());
        let mut body_len = 0;
        for message in messages {
            body_len += message.region.len();
            let merged = regions
                .last_mut()
                .is_some_and(|last| last.try_merge(&message.region));
            if !merged {
                regions.push(message.region);
            }
        }
        RegionReply {
            head,
            regions,
            body_len,
        }
    }

    /// The same reply with its body read into memory and every record verified (CRC
    /// included): the copying fallback.
    ///
    /// # Errors
    /// A region was truncated since its check, cannot be read, or holds a record that does
    /// not verify; the reply must not be sent.
    pub fn into_frame(self) -> Result<RemotingCommand, CopyError> {
        let body = self.read_body()?;
        Ok(self.head.with_body(body))
    }

    /// The body read into memory, every record verified (CRC included).
    ///
    /// # Errors
    /// As [`RegionReply::into_frame`].
    pub fn read_body(&self) -> Result<Bytes, CopyError> {
        let mut body = BytesMut::with_capacity(self.body_len as usize);
        FileRegion::read_all_into(&self.regions, &mut body)?;
        let mut rest = &body[..];
        while !rest.is_empty() {
            let view = RecordView::parse(rest)?;
            rest = &rest[view.total_size()..];
        }
        Ok(body.freeze())
    }
}

/// Why a connection's writer stopped (the connection is then closed).
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Encoding or writing a frame failed.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// A zero-copy send stopped part-way.
    #[error(transparent)]
    ZeroCopy(#[from] super::zero_copy::SendError),
    /// The copying fallback could not read or verify the records.
    #[error(transparent)]
    Copy(#[from] CopyError),
}

/// The connection's encoder: remoting frames, and raw bytes (a region reply's head and its
/// held-back last byte).
#[derive(Debug, Clone, Copy)]
pub struct WireCodec {
    frames: RemotingCodec,
}

impl WireCodec {
    /// Frames up to `max_frame_length` bytes.
    pub fn new(max_frame_length: usize) -> WireCodec {
        WireCodec {
            frames: RemotingCodec::new(max_frame_length),
        }
    }

    /// The bytes of `reply`'s frame up to its body.
    pub fn head_of(&self, reply: &RegionReply) -> Result<Bytes, CodecError> {
        let mut out = BytesMut::new();
        reply.head.encode_head(
            reply.body_len as usize,
            &mut out,
            self.frames.max_frame_length(),
        )?;
        Ok(out.freeze())
    }
}

impl Encoder<RemotingCommand> for WireCodec {
    type Error = CodecError;

    fn encode(&mut self, item: RemotingCommand, dst: &mut BytesMut) -> Result<(), CodecError> {
        self.frames.encode(item, dst)
    }
}

impl Encoder<RecordsReply> for WireCodec {
    type Error = CodecError;

    /// The head with the body's length, then each record: the same bytes as the frame of the
    /// head carrying the records as its body.
    fn encode(&mut self, item: RecordsReply, dst: &mut BytesMut) -> Result<(), CodecError> {
        let body_len = item.body_len();
        item.head
            .encode_head(body_len, dst, self.frames.max_frame_length())?;
        dst.reserve(body_len);
        for record in &item.records {
            dst.extend_from_slice(record);
        }
        Ok(())
    }
}

impl Encoder<Bytes> for WireCodec {
    type Error = CodecError;

    fn encode(&mut self, item: Bytes, dst: &mut BytesMut) -> Result<(), CodecError> {
        dst.extend_from_slice(&item);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head() -> RemotingCommand {
        RemotingCommand::new_response(0, Some("found".into())).with_opaque(7)
    }

    /// A records reply is the same frame as its head carrying the records as one body.
    #[test]
    fn a_records_reply_encodes_as_the_frame_with_its_records_as_body() {
        let records = vec![
            Bytes::from_static(b"first record"),
            Bytes::new(),
            Bytes::from_static(b"second"),
        ];
        let mut codec = WireCodec::new(1 << 20);
        let mut split = BytesMut::new();
        let reply = RecordsReply::new(head(), records.clone());
        assert_eq!(reply.body_len(), 18);
        codec.encode(reply, &mut split).expect("encode");
        let mut whole = BytesMut::new();
        codec
            .encode(head().with_body(records.concat()), &mut whole)
            .expect("encode");
        assert_eq!(split, whole);
    }

    /// A body past the frame limit is refused before anything is written.
    #[test]
    fn a_records_reply_past_the_frame_limit_is_refused() {
        let mut codec = WireCodec::new(64);
        let mut dst = BytesMut::new();
        let reply = RecordsReply::new(head(), vec![Bytes::from(vec![1u8; 100])]);
        assert!(codec.encode(reply, &mut dst).is_err());
        assert!(dst.is_empty(), "{dst:?}");
    }
}
