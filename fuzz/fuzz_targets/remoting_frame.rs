//! `remoting_frame`: the remoting frame decoder and both header decoders on arbitrary bytes.
//!
//! Checks, for any input:
//! 1. `RemotingCodec::decode` (driven as tokio-util drives it: decode until `Ok(None)` or an
//!    error) and `RemotingCommand::decode` never panic.
//! 2. Feeding the same bytes in small chunks gives the same commands and the same final error
//!    as feeding them at once (the decoder consumes nothing until a whole frame is there).
//! 3. Every decoded command re-encodes (codec and `to_bytes`) and decodes back to an equal
//!    command, consuming exactly the bytes written.

#![no_main]

use bytes::{Bytes, BytesMut};
use ferromq_protocol::remoting::{
    CodecError, RemotingCodec, RemotingCommand, DEFAULT_MAX_FRAME_LENGTH,
};
use libfuzzer_sys::fuzz_target;
use tokio_util::codec::{Decoder, Encoder};

/// Outcome of decoding a stream: the commands, then how it stopped (None: waiting for more).
type Outcome = (Vec<RemotingCommand>, Option<String>);

fn decode_all(codec: &mut RemotingCodec, buf: &mut BytesMut, out: &mut Vec<RemotingCommand>) -> Option<String> {
    loop {
        let before = buf.len();
        match codec.decode(buf) {
            Ok(Some(cmd)) => {
                assert!(buf.len() < before, "a decoded frame consumed no bytes");
                out.push(cmd);
            }
            Ok(None) => {
                assert_eq!(buf.len(), before, "Ok(None) consumed bytes");
                return None;
            }
            Err(e) => return Some(e.to_string()),
        }
    }
}

fn whole(data: &[u8], max: usize) -> Outcome {
    let mut codec = RemotingCodec::new(max);
    let mut buf = BytesMut::from(data);
    let mut cmds = Vec::new();
    let err = decode_all(&mut codec, &mut buf, &mut cmds);
    (cmds, err)
}

fn chunked(data: &[u8], max: usize, chunk: usize) -> Outcome {
    let mut codec = RemotingCodec::new(max);
    let mut buf = BytesMut::new();
    let mut cmds = Vec::new();
    for piece in data.chunks(chunk) {
        buf.extend_from_slice(piece);
        if let Some(err) = decode_all(&mut codec, &mut buf, &mut cmds) {
            return (cmds, Some(err));
        }
    }
    (cmds, None)
}

fn round_trip(cmd: &RemotingCommand, max: usize) {
    let mut codec = RemotingCodec::new(max);
    let mut buf = BytesMut::new();
    match Encoder::<&RemotingCommand>::encode(&mut codec, cmd, &mut buf) {
        Ok(()) => {}
        // Re-encoding may legitimately grow a header (JSON adds the default fields), so a frame
        // near the limit may no longer fit; anything else is a bug.
        Err(CodecError::Frame(ferromq_protocol::remoting::FrameError::TooLong { size, max: m })) => {
            assert!(size as usize > m);
            return;
        }
        Err(e) => panic!("re-encoding a decoded command failed: {e}"),
    }
    let written = buf.len();
    let again = codec
        .decode(&mut buf)
        .unwrap_or_else(|e| panic!("re-encoded command does not decode: {e}\n{cmd:?}"))
        .unwrap_or_else(|| panic!("re-encoded frame of {written} bytes is incomplete"));
    assert!(buf.is_empty(), "re-encoded frame left {} bytes", buf.len());
    assert_eq!(&again, cmd, "codec round trip changed the command");

    if max >= DEFAULT_MAX_FRAME_LENGTH || written <= DEFAULT_MAX_FRAME_LENGTH {
        let bytes = cmd.to_bytes().expect("fits the default maximum");
        let again = RemotingCommand::decode(bytes).expect("to_bytes output decodes");
        assert_eq!(&again, cmd, "to_bytes round trip changed the command");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, rest)) = data.split_first() else {
        return;
    };
    // Low bits pick a chunk size for the streaming check; bit 7 a tiny frame limit, so the
    // TooLong path is reachable with small inputs.
    let chunk = 1 + usize::from(ctl & 0x0F);
    let max = if ctl & 0x80 != 0 { 64 + usize::from(ctl & 0x70) } else { DEFAULT_MAX_FRAME_LENGTH };

    let at_once = whole(rest, max);
    let streamed = chunked(rest, max, chunk);
    assert_eq!(at_once, streamed, "chunked decoding (chunk {chunk}) differs from whole");
    for cmd in &at_once.0 {
        round_trip(cmd, max);
    }

    if let Ok(cmd) = RemotingCommand::decode(Bytes::copy_from_slice(rest)) {
        round_trip(&cmd, DEFAULT_MAX_FRAME_LENGTH);
        // A single complete frame must decode the same through the codec.
        if max == DEFAULT_MAX_FRAME_LENGTH {
            assert_eq!(at_once.0.first(), Some(&cmd));
        }
    }
});
