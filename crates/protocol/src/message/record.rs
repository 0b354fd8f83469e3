//! The stored message record: RocketMQ's `MessageDecoder` layout plus a whole-record CRC.
//!
//! One layout serves the CommitLog and the body of a pull reply, so the broker can send stored
//! bytes to real clients unchanged (big-endian, IPv4 hosts and magic V1 shown):
//!
//! ```text
//!  0 TOTALSIZE  4 | 4 MAGICCODE 4 | 8 BODYCRC 4 | 12 QUEUEID 4 | 16 FLAG 4
//! 20 QUEUEOFFSET 8 | 28 PHYSICALOFFSET 8 | 36 SYSFLAG 4 | 40 BORNTIMESTAMP 8
//! 48 BORNHOST 8 (20 if SYSFLAG & 0x10) | 56 STORETIMESTAMP 8 | 64 STOREHOST 8 (20 if & 0x20)
//! 72 RECONSUMETIMES 4 | 76 PREPARED_TX_OFFSET 8 | 84 BODYLEN 4 + BODY
//!    TOPICLEN 1 (V1) or 2 (V2) + TOPIC | PROPLEN 2 + PROPERTIES
//! ```
//!
//! # Integrity (invariant 5)
//!
//! RocketMQ's BODYCRC covers the body only, so a flipped queue offset or topic goes unseen.
//! ferromq keeps BODYCRC (CRC32-IEEE of the body, sign bit cleared, as RocketMQ computes it) and
//! also reserves RocketMQ's optional property CRC at the very end of PROPERTIES:
//! `__CRC32#` 0x01, ten decimal digits least significant first, 0x02 — twenty bytes holding the
//! CRC32-IEEE of every record byte before them. Clients decode it as one more property, so the
//! record stays byte-compatible; a reader checks a record with `RecordView::parse`, which
//! verifies sizes, magic, inner lengths and this CRC.
//!
//! Invariants, enforced by `parse`:
//! 1. `TOTALSIZE` equals the sum of the inner lengths (no slack bytes: Java decodes records
//!    back to back, so any extra byte would break every following record).
//! 2. The last 20 bytes are the CRC property and it matches.

use std::net::{IpAddr, SocketAddr};

use super::properties::{names, Properties, NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR};

/// Magic of a record whose topic length is one byte.
pub const MAGIC_V1: u32 = 0xDAA3_20A7;
/// Magic of a record whose topic length is two bytes (topics over 127 bytes).
pub const MAGIC_V2: u32 = 0xDAA3_20AB;
/// Magic of the filler that ends a CommitLog segment ("continue in the next file").
pub const BLANK_MAGIC: u32 = 0xCBD4_3194;
/// Hard upper bound on a record's size, far above any configured message size; anything larger
/// is garbage, not a record.
pub const RECORD_SIZE_MAX: usize = 64 * 1024 * 1024;
/// Bytes a record holds besides its body, at most: the fixed fields with IPv6 hosts (112),
/// the two-byte topic length and the longest topic it can carry, the two-byte properties
/// length and the longest properties it can carry (CRC property included). Both lengths are
/// Java `short`s, so `encode` refuses anything longer.
pub const RECORD_OVERHEAD_MAX: usize = 112 + 2 + i16::MAX as usize + 2 + i16::MAX as usize;

/// The largest record `encode` can produce for a body of at most `body_max` bytes.
///
/// This is the one definition a store ties every size limit to: the writer never appends a
/// record larger than `record_size_max(maxMessageSize)`, and the recovery scanner, the
/// dispatcher and every reader accept any record up to it, so a record of the largest size a
/// send may produce always recovers.
pub const fn record_size_max(body_max: usize) -> usize {
    body_max + RECORD_OVERHEAD_MAX
}

/// The largest body a store may accept: its biggest record must stay below
/// [`RECORD_SIZE_MAX`], the bound past which bytes are garbage.
pub const BODY_SIZE_LIMIT: usize = RECORD_SIZE_MAX - RECORD_OVERHEAD_MAX;

/// Longest PROPERTIES field a record may carry. Java's `MessageDecoder` reads PROPLEN as a
/// signed short: a longer field reads as negative there, and the client then mis-decodes every
/// later record of the pull reply. RocketMQ's broker refuses such a message too
/// (PROPERTIES_SIZE_EXCEEDED).
pub const PROPERTIES_LEN_MAX: usize = i16::MAX as usize;
/// Property bytes a producer's message may carry: [`PROPERTIES_LEN_MAX`] less ferromq's own
/// CRC property (20 bytes), which every record ends with. RocketMQ likewise counts what its
/// broker adds (`CLUSTER`, and `UNIQ_KEY` when absent) against the same 32,767 bytes.
pub const CLIENT_PROPERTIES_LEN_MAX: usize = PROPERTIES_LEN_MAX - CRC_TRAILER_LEN;

pub(super) const SYSFLAG_BORNHOST_V6: i32 = 0x10;
pub(super) const SYSFLAG_STOREHOST_V6: i32 = 0x20;
pub(super) const CRC_TRAILER_LEN: usize = 20;
pub(super) const CRC_PREFIX: &[u8] = b"__CRC32#\x01";
pub(super) const POS_TOTAL_SIZE: usize = 0;
pub(super) const POS_MAGIC: usize = 4;
const POS_BODY_CRC: usize = 8;
pub(super) const POS_QUEUE_ID: usize = 12;
const POS_FLAG: usize = 16;
pub(super) const POS_QUEUE_OFFSET: usize = 20;
pub(super) const POS_PHYS_OFFSET: usize = 28;
pub(super) const POS_SYS_FLAG: usize = 36;
const POS_BORN_TIMESTAMP: usize = 40;
pub(super) const POS_BORN_HOST: usize = 48;
/// Smallest possible record: IPv4 hosts, empty body, topic and properties, plus the CRC.
pub(super) const RECORD_SIZE_MIN: usize = 91 + CRC_TRAILER_LEN;

/// Why bytes are not a valid record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Fewer bytes than the record claims: a torn write or a cut file.
    #[error("record is torn: needs {needed} bytes, {available} available")]
    Torn { needed: usize, available: usize },
    /// The magic is not a record magic (garbage, or a zeroed tail).
    #[error("bad magic {0:#010x}")]
    BadMagic(u32),
    /// TOTALSIZE outside the possible range.
    #[error("bad total size {0}")]
    BadTotalSize(u32),
    /// The inner lengths do not add up to TOTALSIZE.
    #[error("inner lengths add up to {computed} bytes, TOTALSIZE says {total}")]
    LengthMismatch { total: usize, computed: usize },
    /// The properties do not end with the CRC property.
    #[error("record has no CRC property")]
    MissingCrc,
    /// The stored CRC does not match the bytes.
    #[error("CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    /// A field is too large for its length prefix.
    #[error("{field} is {size} bytes; at most {max} fit")]
    FieldTooLarge {
        field: &'static str,
        size: usize,
        max: usize,
    },
}

/// A message as a producer hands it to the store, before the store assigns its place.
#[derive(Debug, Clone)]
pub struct DraftRecord<'a> {
    pub topic: &'a str,
    pub queue_id: u32,
    pub flag: i32,
    /// Message sysFlag; the IPv6 host bits are set from the addresses by `encode`.
    pub sys_flag: i32,
    pub born_timestamp_ms: i64,
    pub born_host: SocketAddr,
    pub store_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_tx_offset: i64,
    pub body: &'a [u8],
    /// Encoded properties without the CRC property, which `encode` appends.
    pub properties: &'a [u8],
}

/// An encoded record whose queue offset, physical offset, store time and CRC are still open.
///
/// The store fills them under its append lock with [`EncodedRecord::finalize`]; everything
/// else is encoded before, outside the lock.
#[derive(Debug, Clone)]
pub struct EncodedRecord {
    bytes: Vec<u8>,
    store_timestamp_pos: usize,
    queue_id: u32,
}

impl<'a> DraftRecord<'a> {
    /// A plain message: no flags, first delivery, not transactional, born and stored at
    /// `host`.
    pub fn plain(
        topic: &'a str,
        queue_id: u32,
        body: &'a [u8],
        properties: &'a [u8],
        host: SocketAddr,
        born_timestamp_ms: i64,
    ) -> DraftRecord<'a> {
        DraftRecord {
            topic,
            queue_id,
            flag: 0,
            sys_flag: 0,
            born_timestamp_ms,
            born_host: host,
            store_host: host,
            reconsume_times: 0,
            prepared_tx_offset: 0,
            body,
            properties,
        }
    }

    /// Encodes the record with zeroed store-assigned fields and a reserved CRC property.
    pub fn encode(&self) -> Result<EncodedRecord, RecordError> {
        let magic_v2 = self.topic.len() > 127;
        let topic_len_max = if magic_v2 { i16::MAX as usize } else { 127 };
        check_len("topic", self.topic.len(), topic_len_max)?;
        check_len("body", self.body.len(), RECORD_SIZE_MAX)?;
        let needs_separator =
            !self.properties.is_empty() && self.properties.last() != Some(&PROPERTY_SEPARATOR);
        let properties_len = self.properties.len() + usize::from(needs_separator) + CRC_TRAILER_LEN;
        check_len("properties", properties_len, PROPERTIES_LEN_MAX)?;

        let mut sys_flag = self.sys_flag & !(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6);
        if self.born_host.is_ipv6() {
            sys_flag |= SYSFLAG_BORNHOST_V6;
        }
        if self.store_host.is_ipv6() {
            sys_flag |= SYSFLAG_STOREHOST_V6;
        }
        let total = 4
            + 4
            + 4
            + 4
            + 4
            + 8
            + 8
            + 4
            + 8
            + host_len(&self.born_host)
            + 8
            + host_len(&self.store_host)
            + 4
            + 8
            + 4
            + self.body.len()
            + if magic_v2 { 2 } else { 1 }
            + self.topic.len()
            + 2
            + properties_len;
        check_len("record", total, RECORD_SIZE_MAX)?;

        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(&(total as u32).to_be_bytes());
        out.extend_from_slice(&(if magic_v2 { MAGIC_V2 } else { MAGIC_V1 }).to_be_bytes());
        out.extend_from_slice(&body_crc(self.body).to_be_bytes());
        out.extend_from_slice(&self.queue_id.to_be_bytes());
        out.extend_from_slice(&self.flag.to_be_bytes());
        out.extend_from_slice(&0u64.to_be_bytes()); // queue offset, set by finalize
        out.extend_from_slice(&0u64.to_be_bytes()); // physical offset, set by finalize
        out.extend_from_slice(&sys_flag.to_be_bytes());
        out.extend_from_slice(&self.born_timestamp_ms.to_be_bytes());
        put_host(&mut out, &self.born_host);
        let store_timestamp_pos = out.len();
        out.extend_from_slice(&0i64.to_be_bytes()); // store time, set by finalize
        put_host(&mut out, &self.store_host);
        out.extend_from_slice(&self.reconsume_times.to_be_bytes());
        out.extend_from_slice(&self.prepared_tx_offset.to_be_bytes());
        out.extend_from_slice(&(self.body.len() as u32).to_be_bytes());
        out.extend_from_slice(self.body);
        if magic_v2 {
            out.extend_from_slice(&(self.topic.len() as u16).to_be_bytes());
        } else {
            out.push(self.topic.len() as u8);
        }
        out.extend_from_slice(self.topic.as_bytes());
        out.extend_from_slice(&(properties_len as u16).to_be_bytes());
        out.extend_from_slice(self.properties);
        if needs_separator {
            out.push(PROPERTY_SEPARATOR);
        }
        out.extend_from_slice(CRC_PREFIX);
        out.extend_from_slice(b"0000000000");
        out.push(PROPERTY_SEPARATOR);
        debug_assert_eq!(out.len(), total);
        Ok(EncodedRecord {
            bytes: out,
            store_timestamp_pos,
            queue_id: self.queue_id,
        })
    }
}

impl EncodedRecord {
    /// Fills the store-assigned fields and seals the record with its CRC.
    pub fn finalize(&mut self, queue_offset: u64, phys_offset: u64, store_timestamp_ms: i64) {
        self.bytes[POS_QUEUE_OFFSET..POS_QUEUE_OFFSET + 8]
            .copy_from_slice(&queue_offset.to_be_bytes());
        self.bytes[POS_PHYS_OFFSET..POS_PHYS_OFFSET + 8]
            .copy_from_slice(&phys_offset.to_be_bytes());
        let at = self.store_timestamp_pos;
        self.bytes[at..at + 8].copy_from_slice(&store_timestamp_ms.to_be_bytes());
        seal(&mut self.bytes);
    }

    /// The encoded bytes (valid only after `finalize`).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Size of the record in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Always false: a record has a fixed header.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The queue the record is bound for.
    pub fn queue_id(&self) -> u32 {
        self.queue_id
    }
}

/// Writes the CRC property over `record[..len - 20]`. `record` must end with a reserved trailer.
pub fn seal(record: &mut [u8]) {
    let crc_at = record.len() - CRC_TRAILER_LEN;
    let crc = crc32fast::hash(&record[..crc_at]);
    write_crc_digits(
        &mut record[crc_at + CRC_PREFIX.len()..crc_at + CRC_PREFIX.len() + 10],
        crc,
    );
}

/// A parsed and verified record borrowing its bytes.
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a> {
    bytes: &'a [u8],
    pub magic: u32,
    pub body_crc: u32,
    pub queue_id: u32,
    pub flag: i32,
    pub queue_offset: u64,
    pub phys_offset: u64,
    pub sys_flag: i32,
    pub born_timestamp_ms: i64,
    pub born_host: SocketAddr,
    pub store_timestamp_ms: i64,
    pub store_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_tx_offset: i64,
    pub body: &'a [u8],
    pub topic: &'a [u8],
    /// All properties, the CRC property included (it is the last one).
    pub properties: Properties<'a>,
}

impl<'a> RecordView<'a> {
    /// Parses and verifies the record at the start of `buf` (which may hold more bytes after it).
    ///
    /// # Errors
    /// Any [`RecordError`]: the bytes are torn, garbage, or fail the CRC.
    pub fn parse(buf: &'a [u8]) -> Result<RecordView<'a>, RecordError> {
        let view = Self::parse_structure(buf)?;
        verify_crc(view.bytes)?;
        Ok(view)
    }

    /// Parses the record's structure (sizes, magic, inner lengths) without checking its CRC:
    /// for bytes the caller itself encoded and sealed moments ago, still in its memory.
    pub fn parse_structure(buf: &'a [u8]) -> Result<RecordView<'a>, RecordError> {
        let total = peek_total_size(buf)?;
        let magic = read_u32(buf, POS_MAGIC);
        if magic != MAGIC_V1 && magic != MAGIC_V2 {
            return Err(RecordError::BadMagic(magic));
        }
        if !(RECORD_SIZE_MIN..=RECORD_SIZE_MAX).contains(&total) {
            return Err(RecordError::BadTotalSize(total as u32));
        }
        if buf.len() < total {
            return Err(RecordError::Torn {
                needed: total,
                available: buf.len(),
            });
        }
        Self::parse_fields(&buf[..total], magic)
    }

    fn parse_fields(record: &'a [u8], magic: u32) -> Result<RecordView<'a>, RecordError> {
        let total = record.len();
        let mismatch = |computed: usize| RecordError::LengthMismatch { total, computed };
        let sys_flag = read_i32(record, POS_SYS_FLAG);
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
        let store_ts_at = POS_BORN_HOST + born_len;
        let store_host_at = store_ts_at + 8;
        let reconsume_at = store_host_at + store_len;
        let body_len_at = reconsume_at + 4 + 8;
        let fixed_end = body_len_at + 4;
        if fixed_end > total {
            return Err(mismatch(fixed_end));
        }
        let body_len = read_u32(record, body_len_at) as usize;
        let topic_len_at = fixed_end + body_len;
        let topic_len_size = if magic == MAGIC_V2 { 2 } else { 1 };
        if topic_len_at + topic_len_size > total {
            return Err(mismatch(topic_len_at + topic_len_size));
        }
        let topic_len = if magic == MAGIC_V2 {
            usize::from(u16::from_be_bytes([
                record[topic_len_at],
                record[topic_len_at + 1],
            ]))
        } else {
            usize::from(record[topic_len_at])
        };
        let props_len_at = topic_len_at + topic_len_size + topic_len;
        if props_len_at + 2 > total {
            return Err(mismatch(props_len_at + 2));
        }
        let props_len = usize::from(u16::from_be_bytes([
            record[props_len_at],
            record[props_len_at + 1],
        ]));
        let computed = props_len_at + 2 + props_len;
        if computed != total {
            return Err(mismatch(computed));
        }
        Ok(RecordView {
            bytes: record,
            magic,
            body_crc: read_u32(record, POS_BODY_CRC),
            queue_id: read_u32(record, POS_QUEUE_ID),
            flag: read_i32(record, POS_FLAG),
            queue_offset: read_u64(record, POS_QUEUE_OFFSET),
            phys_offset: read_u64(record, POS_PHYS_OFFSET),
            sys_flag,
            born_timestamp_ms: read_u64(record, POS_BORN_TIMESTAMP) as i64,
            born_host: read_host(record, POS_BORN_HOST, born_len),
            store_timestamp_ms: read_u64(record, store_ts_at) as i64,
            store_host: read_host(record, store_host_at, store_len),
            reconsume_times: read_i32(record, reconsume_at),
            prepared_tx_offset: read_u64(record, reconsume_at + 4) as i64,
            body: &record[fixed_end..topic_len_at],
            topic: &record[topic_len_at + topic_len_size..props_len_at],
            properties: Properties(&record[props_len_at + 2..]),
        })
    }

    /// The whole record's bytes, exactly as stored and as sent in a pull reply.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Record size in bytes (TOTALSIZE).
    pub fn total_size(&self) -> usize {
        self.bytes.len()
    }

    /// The topic as text (topics are ASCII in practice; invalid UTF-8 reads as empty).
    pub fn topic_str(&self) -> &'a str {
        std::str::from_utf8(self.topic).unwrap_or("")
    }

    /// The `TAGS` property, if any.
    pub fn tags(&self) -> Option<&'a str> {
        self.properties.get_str(names::TAGS)
    }
}

/// Reads TOTALSIZE, or `Torn` when fewer than 8 bytes (size and magic) are available.
pub fn peek_total_size(buf: &[u8]) -> Result<usize, RecordError> {
    if buf.len() < 8 {
        return Err(RecordError::Torn {
            needed: 8,
            available: buf.len(),
        });
    }
    Ok(read_u32(buf, POS_TOTAL_SIZE) as usize)
}

/// Reads the MAGICCODE field (`buf` must hold at least 8 bytes).
pub fn peek_magic(buf: &[u8]) -> u32 {
    read_u32(buf, POS_MAGIC)
}

/// BODYCRC as RocketMQ computes it: CRC32-IEEE with the sign bit cleared.
pub fn body_crc(body: &[u8]) -> u32 {
    crc32fast::hash(body) & 0x7FFF_FFFF
}

fn verify_crc(record: &[u8]) -> Result<(), RecordError> {
    let crc_at = record.len() - CRC_TRAILER_LEN;
    let trailer = &record[crc_at..];
    if &trailer[..CRC_PREFIX.len()] != CRC_PREFIX
        || trailer[CRC_TRAILER_LEN - 1] != PROPERTY_SEPARATOR
    {
        return Err(RecordError::MissingCrc);
    }
    let stored = read_crc_digits(&trailer[CRC_PREFIX.len()..CRC_TRAILER_LEN - 1])
        .ok_or(RecordError::MissingCrc)?;
    let computed = crc32fast::hash(&record[..crc_at]);
    if stored != computed {
        return Err(RecordError::CrcMismatch { stored, computed });
    }
    Ok(())
}

/// The CRC a sealed record carries in its trailer (over everything before the trailer), or
/// `None` when `record` has no well-formed trailer. Replicas compare records by it.
pub fn sealed_crc(record: &[u8]) -> Option<u32> {
    let crc_at = record.len().checked_sub(CRC_TRAILER_LEN)?;
    let trailer = &record[crc_at..];
    if &trailer[..CRC_PREFIX.len()] != CRC_PREFIX
        || trailer[CRC_TRAILER_LEN - 1] != PROPERTY_SEPARATOR
    {
        return None;
    }
    read_crc_digits(&trailer[CRC_PREFIX.len()..CRC_TRAILER_LEN - 1])
}

fn write_crc_digits(out: &mut [u8], crc: u32) {
    let mut value = crc;
    for digit in out.iter_mut() {
        *digit = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

fn read_crc_digits(digits: &[u8]) -> Option<u32> {
    let mut value: u64 = 0;
    for digit in digits.iter().rev() {
        if !digit.is_ascii_digit() {
            return None;
        }
        value = value * 10 + u64::from(digit - b'0');
    }
    u32::try_from(value).ok()
}

fn check_len(field: &'static str, size: usize, max: usize) -> Result<(), RecordError> {
    if size > max {
        return Err(RecordError::FieldTooLarge { field, size, max });
    }
    Ok(())
}

fn host_len(host: &SocketAddr) -> usize {
    if host.is_ipv6() {
        20
    } else {
        8
    }
}

fn put_host(out: &mut Vec<u8>, host: &SocketAddr) {
    match host.ip() {
        IpAddr::V4(ip) => out.extend_from_slice(&ip.octets()),
        IpAddr::V6(ip) => out.extend_from_slice(&ip.octets()),
    }
    out.extend_from_slice(&i32::from(host.port()).to_be_bytes());
}

fn read_host(buf: &[u8], at: usize, len: usize) -> SocketAddr {
    let port = read_i32(buf, at + len - 4) as u16;
    if len == 20 {
        let octets: [u8; 16] = buf[at..at + 16].try_into().expect("16 bytes");
        SocketAddr::new(IpAddr::from(octets), port)
    } else {
        let octets: [u8; 4] = buf[at..at + 4].try_into().expect("4 bytes");
        SocketAddr::new(IpAddr::from(octets), port)
    }
}

pub(super) fn read_u32(buf: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}

pub(super) fn read_i32(buf: &[u8], at: usize) -> i32 {
    read_u32(buf, at) as i32
}

pub(super) fn read_u64(buf: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}

// Keep the separator constant referenced so the layout doc and code agree.
const _: () = assert!(NAME_VALUE_SEPARATOR == 0x01 && CRC_PREFIX.len() + 11 == CRC_TRAILER_LEN);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn draft<'a>(topic: &'a str, body: &'a [u8], props: &'a [u8]) -> DraftRecord<'a> {
        DraftRecord {
            topic,
            queue_id: 3,
            flag: 7,
            sys_flag: 0,
            born_timestamp_ms: 1_700_000_000_000,
            born_host: "10.0.0.1:5555".parse().unwrap(),
            store_host: "127.0.0.1:10911".parse().unwrap(),
            reconsume_times: 0,
            prepared_tx_offset: 0,
            body,
            properties: props,
        }
    }

    #[test]
    fn ipv4_v1_record_has_rocketmq_offsets() {
        let props = Properties::encode([("TAGS", "a")]);
        let mut rec = draft("T", b"hello", &props).encode().unwrap();
        rec.finalize(42, 4096, 1_700_000_000_123);
        let bytes = rec.as_bytes();
        // 91 + body 5 + topic 1 + props (7 + 20).
        assert_eq!(bytes.len(), 91 + 5 + 1 + 27);
        assert_eq!(read_u32(bytes, 0) as usize, bytes.len());
        assert_eq!(read_u32(bytes, 4), MAGIC_V1);
        assert_eq!(read_u64(bytes, 20), 42);
        assert_eq!(read_u64(bytes, 28), 4096);
        assert_eq!(read_u64(bytes, 56) as i64, 1_700_000_000_123);
        assert_eq!(read_u32(bytes, 8), body_crc(b"hello"));
        let view = RecordView::parse(bytes).unwrap();
        assert_eq!(view.body, b"hello");
        assert_eq!(view.topic_str(), "T");
        assert_eq!(view.tags(), Some("a"));
        assert_eq!(view.queue_id, 3);
        assert!(view.properties.get(names::CRC32).is_some());
    }

    #[test]
    fn long_topic_uses_v2_and_ipv6_hosts_set_sysflag() {
        let topic = "t".repeat(200);
        let mut d = draft(&topic, b"x", b"");
        d.born_host = "[::1]:1".parse().unwrap();
        d.store_host = "[::2]:2".parse().unwrap();
        let mut rec = d.encode().unwrap();
        rec.finalize(1, 2, 3);
        let view = RecordView::parse(rec.as_bytes()).unwrap();
        assert_eq!(view.magic, MAGIC_V2);
        assert_eq!(view.sys_flag & 0x30, 0x30);
        assert_eq!(view.topic_str(), topic);
        assert_eq!(view.born_host, d.born_host);
        assert_eq!(view.store_host, d.store_host);
        assert_eq!(view.store_timestamp_ms, 3);
    }

    #[test]
    fn properties_without_final_separator_get_one() {
        let mut rec = draft("T", b"", b"KEYS\x01k1").encode().unwrap();
        rec.finalize(0, 0, 0);
        let view = RecordView::parse(rec.as_bytes()).unwrap();
        assert_eq!(view.properties.get_str("KEYS"), Some("k1"));
    }

    #[test]
    fn oversized_properties_are_refused() {
        let props = vec![b'a'; 40_000];
        assert!(matches!(
            draft("T", b"", &props).encode(),
            Err(RecordError::FieldTooLarge {
                field: "properties",
                ..
            })
        ));
    }

    proptest! {
        #[test]
        fn round_trip(body in proptest::collection::vec(any::<u8>(), 0..2048),
                      topic in "[A-Za-z0-9_%-]{1,200}",
                      key in "[a-z0-9]{0,20}",
                      queue_offset in any::<u64>(), phys in any::<u64>(), ts in any::<i64>()) {
            let props = Properties::encode([("KEYS", key.as_str())]);
            let d = draft(&topic, &body, &props);
            let mut rec = d.encode().unwrap();
            rec.finalize(queue_offset, phys, ts);
            let view = RecordView::parse(rec.as_bytes()).unwrap();
            prop_assert_eq!(view.body, &body[..]);
            prop_assert_eq!(view.topic, topic.as_bytes());
            prop_assert_eq!(view.queue_offset, queue_offset);
            prop_assert_eq!(view.phys_offset, phys);
            prop_assert_eq!(view.store_timestamp_ms, ts);
            prop_assert_eq!(view.properties.get_str("KEYS"), Some(key.as_str()));
        }

        #[test]
        fn any_bit_flip_is_detected(body in proptest::collection::vec(any::<u8>(), 0..512),
                                    bit in any::<proptest::sample::Index>()) {
            let mut rec = draft("Topic", &body, b"TAGS\x01x\x02").encode().unwrap();
            rec.finalize(5, 6, 7);
            let mut bytes = rec.as_bytes().to_vec();
            let at = bit.index(bytes.len() * 8);
            bytes[at / 8] ^= 1 << (at % 8);
            prop_assert!(RecordView::parse(&bytes).is_err());
        }

        #[test]
        fn any_truncation_is_detected(body in proptest::collection::vec(any::<u8>(), 0..512),
                                      cut in any::<proptest::sample::Index>()) {
            let mut rec = draft("Topic", &body, b"").encode().unwrap();
            rec.finalize(5, 6, 7);
            let bytes = rec.as_bytes();
            let keep = cut.index(bytes.len());
            prop_assert!(RecordView::parse(&bytes[..keep]).is_err());
        }
    }
}
