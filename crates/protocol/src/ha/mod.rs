//! The master/slave replication ("HA") wire format: ferromq's own, not RocketMQ's.
//!
//! A slave connects to its master, sends one [`Hello`] describing where its CommitLog ends,
//! which master terms wrote it (its epoch entries) and the CRCs of its last records, so the
//! master can tell whether the two logs agree, and the master answers [`Welcome`] (streaming
//! starts at [`Welcome::start`]; the Welcome carries the master's epoch entries),
//! [`Truncate`] (the replica's log goes past the last point it shares with the master: it
//! cuts there and says Hello again) or [`Refused`] (then it closes the connection). After a welcome the master sends [`Data`]
//! (raw CommitLog bytes) and [`HaFrame::Heartbeat`]s, and the slave answers with
//! [`HaFrame::Ack`]s carrying its durable end.
//!
//! # Layout
//!
//! All integers are big-endian.
//!
//! ```text
//! frame   = len: u32 | kind: u8 | payload        len = 1 + payload length
//! str     = n: u16 | n bytes of UTF-8             n <= HA_STRING_MAX
//!
//! 1 Hello      version u16 | cluster str | broker_name str | broker_id u64 | log_end u64
//!              | epoch u64 | segment_size u64 | count u16
//!              | count x (offset u64 | size u32 | crc u32)
//!              | epochs u16 | epochs x (epoch u64 | start u64)
//! 2 Welcome    epoch u64 | master_end u64 | start u64 | watermark u64
//!              | epochs u16 | epochs x (epoch u64 | start u64)
//! 3 Refused    code u16 | differs_at u64 (u64::MAX = none) | reason str
//! 4 Data       offset u64 | watermark u64 | master_end u64 | CommitLog bytes (the rest)
//! 5 Heartbeat  watermark u64 | master_end u64
//! 6 Ack        log_end u64
//! 7 Truncate   to u64 | reason str
//! ```
//!
//! # Invariants
//!
//! * Every payload except `Data`'s is self-delimiting, so a frame whose payload is shorter
//!   ([`HaFrameError::Truncated`]) or longer ([`HaFrameError::Trailing`]) than its kind
//!   requires is refused; a `Data` frame's bytes are whatever follows its 24-byte header.
//! * [`HaCodec`] never buffers or reserves more than one frame of at most its `max_frame`
//!   bytes (the `len` value: kind byte plus payload), and it refuses a larger `len` as soon as
//!   the four length bytes arrive, so a hostile peer cannot make it allocate more.
//! * Decoding never panics on any input. Any decode error means the stream can no longer be
//!   trusted: the caller closes the connection.
//! * Encoding checks every bound (frame size, string lengths, sample count, the reserved
//!   `differs_at` value) before writing anything, so a refused frame leaves the output buffer
//!   untouched, and what is encoded always decodes back to an equal frame.
//!
//! A Hello of version 1 (which ends after its samples) decodes with no epoch entries, so a
//! master can answer an old slave [`RefusalCode::BadVersion`] rather than drop it as malformed.
//!
//! The decoder accepts any [`Hello::version`]; whether to talk to a slave of another version
//! is the master's decision (it answers [`RefusalCode::BadVersion`]).

mod codec;
mod error;
mod wire;

#[cfg(test)]
mod tests;

use std::fmt;

use bytes::Bytes;

pub use codec::HaCodec;
pub use error::{HaFrameError, HaStringError};

/// The protocol version a slave sends in its [`Hello`].
/// Version 2 added the epoch entries of Hello and Welcome and the Truncate frame.
pub const HA_VERSION: u16 = 2;
/// Longest string (cluster, broker name, refusal reason) in bytes of UTF-8.
pub const HA_STRING_MAX: usize = 1024;
/// Most [`RecordSample`]s a [`Hello`] may carry.
pub const HA_SAMPLES_MAX: usize = 64;
/// Most [`EpochEntry`]s a [`Hello`] or [`Welcome`] may carry (a replica sends its newest).
pub const HA_EPOCHS_MAX: usize = 1024;
/// Default bound of a frame: the largest CommitLog record (4 MiB body + headers) plus room.
pub const HA_FRAME_MAX_DEFAULT: usize = 8 * 1024 * 1024;

/// Kind byte of a [`Hello`] frame.
pub const KIND_HELLO: u8 = 1;
/// Kind byte of a [`Welcome`] frame.
pub const KIND_WELCOME: u8 = 2;
/// Kind byte of a [`Refused`] frame.
pub const KIND_REFUSED: u8 = 3;
/// Kind byte of a [`Data`] frame.
pub const KIND_DATA: u8 = 4;
/// Kind byte of a [`HaFrame::Heartbeat`] frame.
pub const KIND_HEARTBEAT: u8 = 5;
/// Kind byte of a [`HaFrame::Ack`] frame.
pub const KIND_ACK: u8 = 6;
/// Kind byte of a [`Truncate`] frame.
pub const KIND_TRUNCATE: u8 = 7;

/// One master term: the master of `epoch` wrote the log from `start` (to the next entry's
/// start, or the log end). Entries travel oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    /// The master epoch.
    pub epoch: u64,
    /// The CommitLog offset the term starts at.
    pub start: u64,
}

/// One of the slave's last CommitLog records as it stored it: where it starts, how long it
/// is and its stored body CRC. The master compares these with its own log to find out
/// whether (and where) the two logs diverge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordSample {
    /// CommitLog offset of the record's first byte.
    pub offset: u64,
    /// The record's total size in bytes.
    pub size: u32,
    /// The CRC stored in the record.
    pub crc: u32,
}

/// The slave's first frame: who it is and where its CommitLog ends.
///
/// Invariants (checked when encoding and decoding): `cluster` and `broker_name` are at most
/// [`HA_STRING_MAX`] bytes, and `samples` holds at most [`HA_SAMPLES_MAX`] entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The slave's protocol version ([`HA_VERSION`] for this one).
    pub version: u16,
    /// The cluster the slave belongs to.
    pub cluster: String,
    /// The broker group (master and slaves share it).
    pub broker_name: String,
    /// The slave's broker id (non-zero for a slave in RocketMQ's convention).
    pub broker_id: u64,
    /// The slave's CommitLog end offset.
    pub log_end: u64,
    /// The last master epoch the slave has followed.
    pub epoch: u64,
    /// The slave's CommitLog segment size (`mappedFileSizeCommitLog`): records sit at the
    /// same offsets on master and slave only when both use the same.
    pub segment_size: u64,
    /// The slave's last records, oldest first.
    pub samples: Vec<RecordSample>,
    /// The slave's epoch entries, oldest first (its newest [`HA_EPOCHS_MAX`]).
    pub epochs: Vec<EpochEntry>,
}

/// The master's acceptance of a [`Hello`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Welcome {
    /// The master's current epoch.
    pub epoch: u64,
    /// The master's CommitLog end offset.
    pub master_end: u64,
    /// The CommitLog offset streaming begins at; the slave truncates its log to it first.
    pub start: u64,
    /// The replicated (committed) watermark.
    pub watermark: u64,
    /// The master's epoch entries, oldest first (its newest [`HA_EPOCHS_MAX`]): the replica
    /// records each as its log reaches the entry's start.
    pub epochs: Vec<EpochEntry>,
}

/// The master's answer to a replica whose log goes past the last point it shares with the
/// master (found from both sides' epoch entries): cut the log at `to`, then say Hello again.
/// The master closes the connection after sending it.
///
/// Invariant: `reason` is at most [`HA_STRING_MAX`] bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncate {
    /// The last common point: the replica keeps its log below it.
    pub to: u64,
    /// A human-readable explanation.
    pub reason: String,
}

/// Why a master refused a slave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefusalCode {
    /// The slave names another cluster or broker group.
    WrongGroup,
    /// The slave's log is longer than the master's.
    AheadOfMaster,
    /// The slave's log disagrees with the master's.
    Diverged,
    /// The peer is not (or no longer) the master.
    NotMaster,
    /// The master does not speak the slave's protocol version.
    BadVersion,
    /// Another slave with the same broker id is connected.
    DuplicateId,
    /// The Hello is malformed or inconsistent.
    BadHello,
}

impl RefusalCode {
    /// Every code, in wire order.
    pub const ALL: [RefusalCode; 7] = [
        RefusalCode::WrongGroup,
        RefusalCode::AheadOfMaster,
        RefusalCode::Diverged,
        RefusalCode::NotMaster,
        RefusalCode::BadVersion,
        RefusalCode::DuplicateId,
        RefusalCode::BadHello,
    ];

    /// The wire number of this code.
    pub fn code(self) -> u16 {
        match self {
            RefusalCode::WrongGroup => 1,
            RefusalCode::AheadOfMaster => 2,
            RefusalCode::Diverged => 3,
            RefusalCode::NotMaster => 4,
            RefusalCode::BadVersion => 5,
            RefusalCode::DuplicateId => 6,
            RefusalCode::BadHello => 7,
        }
    }

    /// Maps a wire number to a code; `None` for numbers this version does not define.
    pub fn from_code(code: u16) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.code() == code)
    }

    /// A short name, for logs and error messages.
    pub fn name(self) -> &'static str {
        match self {
            RefusalCode::WrongGroup => "wrong group",
            RefusalCode::AheadOfMaster => "ahead of master",
            RefusalCode::Diverged => "diverged",
            RefusalCode::NotMaster => "not master",
            RefusalCode::BadVersion => "bad version",
            RefusalCode::DuplicateId => "duplicate id",
            RefusalCode::BadHello => "bad hello",
        }
    }
}

impl fmt::Display for RefusalCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The master's refusal of a [`Hello`]; the master closes the connection after sending it.
///
/// Invariants: `reason` is at most [`HA_STRING_MAX`] bytes; `differs_at` is never
/// `Some(u64::MAX)` (that wire value means "none", so encoding refuses it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// Why.
    pub code: RefusalCode,
    /// For [`RefusalCode::Diverged`]: the first CommitLog offset where the logs differ.
    pub differs_at: Option<u64>,
    /// A human-readable explanation.
    pub reason: String,
}

/// A run of the master's CommitLog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Data {
    /// CommitLog offset of the first byte of `bytes`.
    pub offset: u64,
    /// The replicated (committed) watermark.
    pub watermark: u64,
    /// The master's CommitLog end offset.
    pub master_end: u64,
    /// The raw CommitLog bytes; decoded without copying out of the read buffer.
    pub bytes: Bytes,
}

/// One HA frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HaFrame {
    /// Slave -> master, the first frame.
    Hello(Hello),
    /// Master -> slave: the Hello is accepted.
    Welcome(Welcome),
    /// Master -> slave: the Hello is refused; the master closes.
    Refused(Refused),
    /// Master -> slave: cut the log at `to` and say Hello again; the master closes.
    Truncate(Truncate),
    /// Master -> slave: CommitLog bytes.
    Data(Data),
    /// Master -> slave: no new data, but the watermark and end as of now.
    Heartbeat {
        /// The replicated (committed) watermark.
        watermark: u64,
        /// The master's CommitLog end offset.
        master_end: u64,
    },
    /// Slave -> master: the slave's durable CommitLog end.
    Ack {
        /// The slave's durable end offset.
        log_end: u64,
    },
}

impl HaFrame {
    /// The frame's kind byte.
    pub fn kind(&self) -> u8 {
        match self {
            HaFrame::Hello(_) => KIND_HELLO,
            HaFrame::Welcome(_) => KIND_WELCOME,
            HaFrame::Refused(_) => KIND_REFUSED,
            HaFrame::Data(_) => KIND_DATA,
            HaFrame::Heartbeat { .. } => KIND_HEARTBEAT,
            HaFrame::Ack { .. } => KIND_ACK,
            HaFrame::Truncate(_) => KIND_TRUNCATE,
        }
    }

    /// The frame's kind as a name, for logs and error messages.
    pub fn kind_name(&self) -> &'static str {
        // Every variant's kind byte has a name, so the fallback is never used.
        kind_name_of(self.kind()).unwrap_or("unknown")
    }
}

/// The name of a kind byte; `None` for a byte this version does not define.
pub fn kind_name_of(kind: u8) -> Option<&'static str> {
    match kind {
        KIND_HELLO => Some("Hello"),
        KIND_WELCOME => Some("Welcome"),
        KIND_REFUSED => Some("Refused"),
        KIND_DATA => Some("Data"),
        KIND_HEARTBEAT => Some("Heartbeat"),
        KIND_ACK => Some("Ack"),
        KIND_TRUNCATE => Some("Truncate"),
        _ => None,
    }
}

impl From<Hello> for HaFrame {
    fn from(hello: Hello) -> Self {
        HaFrame::Hello(hello)
    }
}

impl From<Welcome> for HaFrame {
    fn from(welcome: Welcome) -> Self {
        HaFrame::Welcome(welcome)
    }
}

impl From<Refused> for HaFrame {
    fn from(refused: Refused) -> Self {
        HaFrame::Refused(refused)
    }
}

impl From<Truncate> for HaFrame {
    fn from(truncate: Truncate) -> Self {
        HaFrame::Truncate(truncate)
    }
}

impl From<Data> for HaFrame {
    fn from(data: Data) -> Self {
        HaFrame::Data(data)
    }
}
