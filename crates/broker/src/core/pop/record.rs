//! Pop records: every change of pop-style consumption state (a receive, an ack, a new
//! invisibility deadline) is the body of one message of the system topic [`super::POP_TOPIC`]
//! queue 0, so the state is fsynced, replicated, truncated and recovered with the messages it
//! describes (DESIGN invariant 1).
//!
//! Layout of format version 1 (big-endian; `str` = u16 length + UTF-8):
//!
//! ```text
//! u8  version = 1
//! u8  kind            1 = receive, 2 = ack, 3 = renew
//! str group, str topic, u32 queue_id, u64 generation (the offsets' reset generation)
//! receive: u64 scan_from, u64 scan_to, i64 deadline_ms, u64 handle,
//!          u16 count, then count × (u64 offset, u32 delivery attempt)
//! ack:     u16 count, then count × (u64 offset, u64 handle)
//! renew:   u64 offset, u64 handle, u64 new_handle, i64 deadline_ms
//! ```
//!
//! A receive's `[scan_from, scan_to)` is the fresh range it read: each offset there that it
//! does not list was filtered out by the subscription and counts as consumed.
//!
//! Invariants: [`PopRecord::encode`] and [`PopRecord::decode`] are inverse; decoding never
//! panics on any bytes and names the field that is wrong; a count above
//! [`POP_RECORD_ENTRIES_MAX`] is refused on both sides.

use thiserror::Error;

/// The format version this module writes.
pub const POP_RECORD_VERSION: u8 = 1;
/// Most entries one record carries (a receive batch, one ack request's entries of a queue).
pub const POP_RECORD_ENTRIES_MAX: usize = 1024;

/// What a pop record does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PopOp {
    /// Messages were handed to a consumer, invisible to others until `deadline_ms`.
    Receive {
        /// First fresh offset read.
        scan_from: u64,
        /// End of the fresh range read (exclusive).
        scan_to: u64,
        /// When the delivered messages become visible again (ms since the Unix epoch).
        deadline_ms: i64,
        /// The handle of this delivery.
        handle: u64,
        /// Delivered offsets with their delivery attempt (from 1).
        entries: Vec<(u64, u32)>,
    },
    /// Deliveries were acknowledged: (offset, handle of the delivery acked).
    Ack {
        /// The acked deliveries.
        entries: Vec<(u64, u64)>,
    },
    /// A delivery got a new deadline and a new handle.
    Renew {
        /// The offset.
        offset: u64,
        /// The handle renewed.
        handle: u64,
        /// Its replacement.
        new_handle: u64,
        /// The new deadline (ms since the Unix epoch).
        deadline_ms: i64,
    },
}

/// One pop record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PopRecord {
    /// Consumer group.
    pub group: String,
    /// Topic.
    pub topic: String,
    /// Queue.
    pub queue_id: u32,
    /// The offsets' reset generation of (group, topic) when the record was written: a record
    /// of an older generation describes deliveries a reset has made void.
    pub generation: u64,
    /// What happened.
    pub op: PopOp,
}

/// Why a record body does not decode.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PopCodecError {
    /// The body ends inside a field.
    #[error("pop record ends inside {field} (byte {at})")]
    Truncated {
        /// The field.
        field: &'static str,
        /// Where it starts.
        at: usize,
    },
    /// A field holds a value no writer produces.
    #[error("pop record field {field} is invalid at byte {at}: {reason}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// Where it starts.
        at: usize,
        /// What is wrong.
        reason: String,
    },
}

impl PopRecord {
    /// The most offset this record names (for the watermark of obsolete records).
    pub fn max_offset(&self) -> u64 {
        match &self.op {
            PopOp::Receive {
                scan_to, entries, ..
            } => entries
                .iter()
                .map(|(o, _)| *o)
                .max()
                .unwrap_or(0)
                .max(scan_to.saturating_sub(1)),
            PopOp::Ack { entries } => entries.iter().map(|(o, _)| *o).max().unwrap_or(0),
            PopOp::Renew { offset, .. } => *offset,
        }
    }

    /// The encoded body.
    ///
    /// # Panics
    /// When a name is longer than `u16::MAX` bytes or an entry list longer than
    /// [`POP_RECORD_ENTRIES_MAX`]: callers build records from validated names and bounded
    /// batches.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        out.push(POP_RECORD_VERSION);
        out.push(match self.op {
            PopOp::Receive { .. } => 1,
            PopOp::Ack { .. } => 2,
            PopOp::Renew { .. } => 3,
        });
        put_str(&mut out, &self.group);
        put_str(&mut out, &self.topic);
        out.extend_from_slice(&self.queue_id.to_be_bytes());
        out.extend_from_slice(&self.generation.to_be_bytes());
        match &self.op {
            PopOp::Receive {
                scan_from,
                scan_to,
                deadline_ms,
                handle,
                entries,
            } => {
                out.extend_from_slice(&scan_from.to_be_bytes());
                out.extend_from_slice(&scan_to.to_be_bytes());
                out.extend_from_slice(&deadline_ms.to_be_bytes());
                out.extend_from_slice(&handle.to_be_bytes());
                put_count(&mut out, entries.len());
                for (offset, attempt) in entries {
                    out.extend_from_slice(&offset.to_be_bytes());
                    out.extend_from_slice(&attempt.to_be_bytes());
                }
            }
            PopOp::Ack { entries } => {
                put_count(&mut out, entries.len());
                for (offset, handle) in entries {
                    out.extend_from_slice(&offset.to_be_bytes());
                    out.extend_from_slice(&handle.to_be_bytes());
                }
            }
            PopOp::Renew {
                offset,
                handle,
                new_handle,
                deadline_ms,
            } => {
                out.extend_from_slice(&offset.to_be_bytes());
                out.extend_from_slice(&handle.to_be_bytes());
                out.extend_from_slice(&new_handle.to_be_bytes());
                out.extend_from_slice(&deadline_ms.to_be_bytes());
            }
        }
        out
    }

    /// Decodes a body written by [`PopRecord::encode`].
    ///
    /// # Errors
    /// The body is truncated, has trailing bytes, or holds a value no writer produces.
    pub fn decode(bytes: &[u8]) -> Result<PopRecord, PopCodecError> {
        let mut r = Reader { bytes, at: 0 };
        let version = r.u8("version")?;
        if version != POP_RECORD_VERSION {
            return Err(r.invalid("version", format!("unknown version {version}")));
        }
        let kind = r.u8("kind")?;
        let group = r.str("group")?;
        let topic = r.str("topic")?;
        let queue_id = r.u32("queue_id")?;
        let generation = r.u64("generation")?;
        let op = match kind {
            1 => {
                let scan_from = r.u64("scan_from")?;
                let scan_to = r.u64("scan_to")?;
                if scan_to < scan_from {
                    return Err(r.invalid("scan_to", "below scan_from".into()));
                }
                let deadline_ms = r.u64("deadline_ms")? as i64;
                let handle = r.u64("handle")?;
                let count = r.count()?;
                let mut entries = Vec::with_capacity(count);
                for _ in 0..count {
                    entries.push((r.u64("entry offset")?, r.u32("entry attempt")?));
                }
                PopOp::Receive {
                    scan_from,
                    scan_to,
                    deadline_ms,
                    handle,
                    entries,
                }
            }
            2 => {
                let count = r.count()?;
                let mut entries = Vec::with_capacity(count);
                for _ in 0..count {
                    entries.push((r.u64("entry offset")?, r.u64("entry handle")?));
                }
                PopOp::Ack { entries }
            }
            3 => PopOp::Renew {
                offset: r.u64("offset")?,
                handle: r.u64("handle")?,
                new_handle: r.u64("new_handle")?,
                deadline_ms: r.u64("deadline_ms")? as i64,
            },
            other => return Err(r.invalid("kind", format!("unknown kind {other}"))),
        };
        if r.at != bytes.len() {
            return Err(r.invalid("end", format!("{} trailing bytes", bytes.len() - r.at)));
        }
        Ok(PopRecord {
            group,
            topic,
            queue_id,
            generation,
            op,
        })
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    let len = u16::try_from(s.len()).expect("names are shorter than 64 KiB");
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_count(out: &mut Vec<u8>, count: usize) {
    assert!(count <= POP_RECORD_ENTRIES_MAX, "pop record batch too long");
    out.extend_from_slice(&(count as u16).to_be_bytes());
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize, field: &'static str) -> Result<&'a [u8], PopCodecError> {
        let end = self.at.checked_add(len).filter(|e| *e <= self.bytes.len());
        let end = end.ok_or(PopCodecError::Truncated { field, at: self.at })?;
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    fn invalid(&self, field: &'static str, reason: String) -> PopCodecError {
        PopCodecError::Invalid {
            field,
            at: self.at,
            reason,
        }
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, PopCodecError> {
        Ok(self.take(1, field)?[0])
    }

    fn u16(&mut self, field: &'static str) -> Result<u16, PopCodecError> {
        let b = self.take(2, field)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, PopCodecError> {
        let b = self.take(4, field)?;
        Ok(u32::from_be_bytes(b.try_into().expect("4 bytes")))
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, PopCodecError> {
        let b = self.take(8, field)?;
        Ok(u64::from_be_bytes(b.try_into().expect("8 bytes")))
    }

    fn count(&mut self) -> Result<usize, PopCodecError> {
        let count = usize::from(self.u16("count")?);
        if count > POP_RECORD_ENTRIES_MAX {
            return Err(self.invalid(
                "count",
                format!("{count} entries, at most {POP_RECORD_ENTRIES_MAX}"),
            ));
        }
        Ok(count)
    }

    fn str(&mut self, field: &'static str) -> Result<String, PopCodecError> {
        let len = usize::from(self.u16(field)?);
        let bytes = self.take(len, field)?;
        String::from_utf8(bytes.to_vec()).map_err(|e| self.invalid(field, e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn record(op: PopOp) -> PopRecord {
        PopRecord {
            group: "g".into(),
            topic: "t".into(),
            queue_id: 3,
            generation: 2,
            op,
        }
    }

    #[test]
    fn every_kind_round_trips_and_every_cut_is_refused() {
        for op in [
            PopOp::Receive {
                scan_from: 10,
                scan_to: 14,
                deadline_ms: 1_700_000_000_000,
                handle: 77,
                entries: vec![(4, 2), (10, 1), (12, 1)],
            },
            PopOp::Ack {
                entries: vec![(10, 77), (12, 77)],
            },
            PopOp::Renew {
                offset: 10,
                handle: 77,
                new_handle: 78,
                deadline_ms: 5,
            },
        ] {
            let r = record(op);
            let bytes = r.encode();
            assert_eq!(PopRecord::decode(&bytes), Ok(r.clone()));
            for cut in 0..bytes.len() {
                assert!(PopRecord::decode(&bytes[..cut]).is_err(), "cut at {cut}");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(PopRecord::decode(&longer).is_err());
        }
    }

    #[test]
    fn max_offset_covers_entries_and_the_scanned_range() {
        let r = record(PopOp::Receive {
            scan_from: 10,
            scan_to: 20,
            deadline_ms: 0,
            handle: 1,
            entries: vec![(3, 2), (11, 1)],
        });
        assert_eq!(r.max_offset(), 19);
    }

    proptest! {
        #[test]
        fn decoding_any_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..96)) {
            let _ = PopRecord::decode(&bytes);
        }
    }
}
