//! A record's outline: every field but the body, checked from two small reads of the stored
//! bytes (the fixed head, then the tail after the body), so a server can vouch for a record
//! it sends straight from the file (zero copy) without reading the body.
//!
//! What the outline checks: TOTALSIZE, the magic, the inner lengths adding up to TOTALSIZE,
//! and the shape of the CRC property at the end. What it cannot check: the CRC's value, which
//! covers the body — a reader that needs that guarantee uses [`RecordView::parse`] on the whole
//! record (RocketMQ's zero-copy transfer checks no CRC either).
//!
//! [`RecordView::parse`]: super::record::RecordView::parse

use super::properties::{Properties, PROPERTY_SEPARATOR};
use super::record::{
    read_i32, read_u32, read_u64, RecordError, CRC_PREFIX, CRC_TRAILER_LEN, MAGIC_V1, MAGIC_V2,
    POS_BORN_HOST, POS_MAGIC, POS_PHYS_OFFSET, POS_QUEUE_ID, POS_QUEUE_OFFSET, POS_SYS_FLAG,
    POS_TOTAL_SIZE, RECORD_SIZE_MAX, RECORD_SIZE_MIN, SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6,
};

/// The longest fixed head a record has (both hosts IPv6): reading this many bytes (or the
/// whole record, when shorter) is always enough for [`RecordHead::parse`].
pub const RECORD_HEAD_LEN_MAX: usize = 112;

/// The fixed head of a record: where it belongs and where its body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHead {
    /// TOTALSIZE.
    pub total: usize,
    /// MAGICCODE (V1 or V2).
    pub magic: u32,
    /// QUEUEID.
    pub queue_id: u32,
    /// QUEUEOFFSET.
    pub queue_offset: u64,
    /// PHYSICALOFFSET.
    pub phys_offset: u64,
    /// Offset of the body inside the record.
    pub body_at: usize,
    /// BODYLEN.
    pub body_len: usize,
}

/// A record's head and tail, checked; the body is not read.
#[derive(Debug, Clone, Copy)]
pub struct RecordOutline<'a> {
    /// The fixed head.
    pub head: RecordHead,
    /// TOPIC.
    pub topic: &'a [u8],
    /// All properties, the CRC property included (it is the last one).
    pub properties: Properties<'a>,
}

impl RecordHead {
    /// Parses the fixed head from `head`, the record's first `min(total, 112)` bytes (more
    /// is fine), for a record the caller expects to be `total` bytes long.
    ///
    /// # Errors
    /// The bytes are not the head of a record of `total` bytes: TOTALSIZE differs, the magic
    /// is wrong, or the fixed fields and body do not fit in `total`.
    pub fn parse(head: &[u8], total: usize) -> Result<RecordHead, RecordError> {
        if head.len() < 8 {
            return Err(RecordError::Torn {
                needed: 8,
                available: head.len(),
            });
        }
        let stored = read_u32(head, POS_TOTAL_SIZE) as usize;
        if stored != total || !(RECORD_SIZE_MIN..=RECORD_SIZE_MAX).contains(&total) {
            return Err(RecordError::BadTotalSize(stored as u32));
        }
        let magic = read_u32(head, POS_MAGIC);
        if magic != MAGIC_V1 && magic != MAGIC_V2 {
            return Err(RecordError::BadMagic(magic));
        }
        let mismatch = |computed: usize| RecordError::LengthMismatch { total, computed };
        if head.len() < POS_SYS_FLAG + 4 {
            return Err(RecordError::Torn {
                needed: POS_SYS_FLAG + 4,
                available: head.len(),
            });
        }
        let sys_flag = read_i32(head, POS_SYS_FLAG);
        let born_len = if sys_flag & SYSFLAG_BORNHOST_V6 != 0 {
            20
        } else {
            8
        };
        let store_len = if sys_flag & SYSFLAG_STOREHOST_V6 != 0 {
            20
        } else {
            8
        };
        let body_len_at = POS_BORN_HOST + born_len + 8 + store_len + 4 + 8;
        let body_at = body_len_at + 4;
        if body_at > total {
            return Err(mismatch(body_at));
        }
        if head.len() < body_at {
            return Err(RecordError::Torn {
                needed: body_at,
                available: head.len(),
            });
        }
        let body_len = read_u32(head, body_len_at) as usize;
        // The tail holds at least the topic length, the properties length and the CRC.
        let tail_min = 1 + 2 + CRC_TRAILER_LEN;
        if body_at + body_len + tail_min > total {
            return Err(mismatch(body_at + body_len + tail_min));
        }
        Ok(RecordHead {
            total,
            magic,
            queue_id: read_u32(head, POS_QUEUE_ID),
            queue_offset: read_u64(head, POS_QUEUE_OFFSET),
            phys_offset: read_u64(head, POS_PHYS_OFFSET),
            body_at,
            body_len,
        })
    }

    /// Offset of the tail (topic length, topic, properties) inside the record.
    pub fn tail_at(&self) -> usize {
        self.body_at + self.body_len
    }

    /// Bytes of the tail.
    pub fn tail_len(&self) -> usize {
        self.total - self.tail_at()
    }

    /// Checks the tail, the record's bytes from [`RecordHead::tail_at`] to its end, and
    /// returns the outline.
    ///
    /// # Errors
    /// The lengths do not add up to TOTALSIZE, or the properties do not end with a
    /// well-formed CRC property (its value is not checked: it covers the body).
    pub fn outline<'a>(&self, tail: &'a [u8]) -> Result<RecordOutline<'a>, RecordError> {
        let total = self.total;
        let mismatch = |computed: usize| RecordError::LengthMismatch { total, computed };
        if tail.len() != self.tail_len() {
            return Err(mismatch(self.tail_at() + tail.len()));
        }
        let (topic_len, topic_at) = if self.magic == MAGIC_V2 {
            (usize::from(u16::from_be_bytes([tail[0], tail[1]])), 2)
        } else {
            (usize::from(tail[0]), 1)
        };
        let props_len_at = topic_at + topic_len;
        if props_len_at + 2 > tail.len() {
            return Err(mismatch(self.tail_at() + props_len_at + 2));
        }
        let props_len = usize::from(u16::from_be_bytes([
            tail[props_len_at],
            tail[props_len_at + 1],
        ]));
        if props_len_at + 2 + props_len != tail.len() {
            return Err(mismatch(self.tail_at() + props_len_at + 2 + props_len));
        }
        let properties = &tail[props_len_at + 2..];
        if properties.len() < CRC_TRAILER_LEN {
            return Err(RecordError::MissingCrc);
        }
        let trailer = &properties[properties.len() - CRC_TRAILER_LEN..];
        if &trailer[..CRC_PREFIX.len()] != CRC_PREFIX
            || trailer[CRC_TRAILER_LEN - 1] != PROPERTY_SEPARATOR
            || !trailer[CRC_PREFIX.len()..CRC_TRAILER_LEN - 1]
                .iter()
                .all(u8::is_ascii_digit)
        {
            return Err(RecordError::MissingCrc);
        }
        Ok(RecordOutline {
            head: *self,
            topic: &tail[topic_at..props_len_at],
            properties: Properties(properties),
        })
    }
}

impl RecordOutline<'_> {
    /// The `TAGS` property, if any.
    pub fn tags(&self) -> Option<&str> {
        self.properties.get_str(super::properties::names::TAGS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::properties::Properties;
    use crate::message::record::{DraftRecord, RecordView};

    fn record(topic: &str, body: &[u8], born: &str) -> Vec<u8> {
        let props = Properties::encode([("TAGS", "tagA"), ("KEYS", "k")]);
        let mut encoded = DraftRecord {
            topic,
            queue_id: 5,
            flag: 0,
            sys_flag: 0,
            born_timestamp_ms: 1,
            born_host: born.parse().unwrap(),
            store_host: "127.0.0.1:10911".parse().unwrap(),
            reconsume_times: 0,
            prepared_tx_offset: 0,
            body,
            properties: &props,
        }
        .encode()
        .unwrap();
        encoded.finalize(42, 4096, 2);
        encoded.as_bytes().to_vec()
    }

    fn outline_of(bytes: &[u8]) -> Result<(RecordHead, Vec<u8>, Option<String>), RecordError> {
        let head = RecordHead::parse(&bytes[..bytes.len().min(RECORD_HEAD_LEN_MAX)], bytes.len())?;
        let outline = head.outline(&bytes[head.tail_at()..])?;
        Ok((
            head,
            outline.topic.to_vec(),
            outline.tags().map(str::to_string),
        ))
    }

    #[test]
    fn an_outline_reads_what_a_full_parse_reads() {
        for (topic, born) in [
            ("T", "10.0.0.1:1"),
            (&*"x".repeat(200), "[::1]:7"),
            ("topic", "10.0.0.1:1"),
        ] {
            for body in [&b""[..], b"hello", &[7u8; 3000]] {
                let bytes = record(topic, body, born);
                let view = RecordView::parse(&bytes).unwrap();
                let (head, topic_read, tags) = outline_of(&bytes).unwrap();
                assert_eq!(head.total, bytes.len());
                assert_eq!(head.queue_id, view.queue_id);
                assert_eq!(head.queue_offset, 42);
                assert_eq!(head.phys_offset, 4096);
                assert_eq!(head.body_len, body.len());
                assert_eq!(&bytes[head.body_at..head.tail_at()], body);
                assert_eq!(topic_read, view.topic);
                assert_eq!(tags.as_deref(), view.tags());
            }
        }
    }

    #[test]
    fn a_wrong_size_magic_or_tail_is_refused() {
        let bytes = record("T", b"body", "10.0.0.1:1");
        let head = &bytes[..RECORD_HEAD_LEN_MAX];
        assert!(matches!(
            RecordHead::parse(head, bytes.len() + 1),
            Err(RecordError::BadTotalSize(_))
        ));
        let mut bad = bytes.clone();
        bad[4] ^= 0xFF;
        assert!(matches!(
            RecordHead::parse(&bad[..RECORD_HEAD_LEN_MAX], bad.len()),
            Err(RecordError::BadMagic(_))
        ));
        let parsed = RecordHead::parse(head, bytes.len()).unwrap();
        let mut tail = bytes[parsed.tail_at()..].to_vec();
        *tail.last_mut().unwrap() = b'x';
        assert_eq!(parsed.outline(&tail).unwrap_err(), RecordError::MissingCrc);
        assert!(parsed.outline(&tail[1..]).is_err());
        // A body length that runs past the record.
        let mut long = bytes.clone();
        let body_len_at = parsed.body_at - 4;
        long[body_len_at..parsed.body_at].copy_from_slice(&(1u32 << 20).to_be_bytes());
        assert!(RecordHead::parse(&long[..RECORD_HEAD_LEN_MAX], long.len()).is_err());
        // A zeroed (truncated then extended) head.
        assert!(RecordHead::parse(&[0u8; RECORD_HEAD_LEN_MAX], bytes.len()).is_err());
    }
}
