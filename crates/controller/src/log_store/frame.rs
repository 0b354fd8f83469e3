//! The Raft log file's framing: `[payload length: u32 BE][CRC32 of payload: u32 BE][payload]`,
//! payload = one JSON-encoded openraft entry.
//!
//! Recovery decisions for the frame at `position` (exhaustive, see `scan`):
//! | facts | decision |
//! |---|---|
//! | fewer than 8 bytes left | torn tail: cut at `position` |
//! | header complete, payload runs past the file end | torn tail: cut |
//! | length above `FRAME_PAYLOAD_MAX` and past the end | torn tail: cut |
//! | length above `FRAME_PAYLOAD_MAX` within the file | corrupt |
//! | CRC mismatch, frame ends exactly at the file end | torn tail: cut |
//! | CRC mismatch, bytes follow the frame | corrupt (acknowledged entries may follow) |
//! | CRC ok | keep |

/// Largest payload one frame may hold (a controller command is a few hundred bytes; a
/// membership entry a few KiB).
pub const FRAME_PAYLOAD_MAX: usize = 16 << 20;

/// Bytes of a frame header.
pub const FRAME_HEADER_BYTES: usize = 8;

/// Appends one frame around `payload` to `out`.
pub fn encode_frame(payload: &[u8], out: &mut Vec<u8>) {
    assert!(payload.len() <= FRAME_PAYLOAD_MAX, "log entry too large");
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_be_bytes());
    out.extend_from_slice(payload);
}

/// A frame found by [`scan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedFrame<'a> {
    /// Offset of the frame's header in the file.
    pub position: u64,
    /// The payload.
    pub payload: &'a [u8],
}

/// The result of scanning a whole file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan<'a> {
    /// Valid frames in order.
    pub frames: Vec<ScannedFrame<'a>>,
    /// Where the valid prefix ends; bytes past it are a torn tail to cut.
    pub valid_len: u64,
}

/// Damage that is not a torn tail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corruption {
    /// Offset of the bad frame.
    pub position: u64,
    /// What is wrong.
    pub why: String,
}

/// Scans `bytes` (a whole log file) frame by frame; see the module table.
pub fn scan(bytes: &[u8]) -> Result<Scan<'_>, Corruption> {
    let mut frames = Vec::new();
    let mut position = 0usize;
    loop {
        let left = bytes.len() - position;
        if left < FRAME_HEADER_BYTES {
            break;
        }
        let header = &bytes[position..position + FRAME_HEADER_BYTES];
        let length = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let crc = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
        let end = position + FRAME_HEADER_BYTES + length;
        if end > bytes.len() {
            break;
        }
        if length > FRAME_PAYLOAD_MAX {
            return Err(Corruption {
                position: position as u64,
                why: format!("frame length {length} above the limit {FRAME_PAYLOAD_MAX}"),
            });
        }
        let payload = &bytes[position + FRAME_HEADER_BYTES..end];
        if crc32fast::hash(payload) != crc {
            if end == bytes.len() {
                break;
            }
            return Err(Corruption {
                position: position as u64,
                why: "CRC mismatch in a frame followed by more data".into(),
            });
        }
        frames.push(ScannedFrame {
            position: position as u64,
            payload,
        });
        position = end;
    }
    Ok(Scan {
        frames,
        valid_len: position as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(payloads: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in payloads {
            encode_frame(p, &mut out);
        }
        out
    }

    #[test]
    fn frames_round_trip() {
        let bytes = file(&[b"one", b"", b"three"]);
        let scan = scan(&bytes).unwrap();
        assert_eq!(scan.frames.len(), 3);
        assert_eq!(scan.frames[2].payload, b"three");
        assert_eq!(scan.valid_len, bytes.len() as u64);
    }

    #[test]
    fn every_truncation_of_the_last_frame_is_a_torn_tail() {
        let whole = file(&[b"first", b"second entry"]);
        let first_len = 8 + 5;
        for cut in first_len..whole.len() {
            let scan = scan(&whole[..cut]).unwrap();
            assert_eq!(scan.frames.len(), 1, "cut at {cut}");
            assert_eq!(scan.valid_len, first_len as u64);
        }
    }

    #[test]
    fn a_bad_crc_at_the_tail_is_cut_but_inside_is_corruption() {
        let mut bytes = file(&[b"first", b"second"]);
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        assert_eq!(scan(&bytes).unwrap().frames.len(), 1);
        let mut bytes = file(&[b"first", b"second"]);
        bytes[9] ^= 0xff;
        let error = scan(&bytes).unwrap_err();
        assert_eq!(error.position, 0);
    }

    #[test]
    fn garbage_appended_is_cut() {
        let mut bytes = file(&[b"first"]);
        bytes.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7]);
        let scan = scan(&bytes).unwrap();
        assert_eq!(scan.frames.len(), 1);
        assert_eq!(scan.valid_len, 13);
    }
}
