//! [`OffsetCommand`]: the body of one offset record, and its binary codec.
//!
//! Layout of format version 1 (all integers big-endian, strings u16-length-prefixed UTF-8):
//!
//! ```text
//! u8  version = 1
//! u8  kind            1 = commit, 2 = reset, 3 = correction
//! str group
//! str client_id
//! u8  has_generation  0 = none, 1 = followed by u64 generation
//! u16 entry count, then per entry: str topic, u32 queue_id, u64 offset
//! ```
//!
//! Format version 2 is version 1 followed by the clients a reset or correction fences
//! (`u16 count, then str client_id each`); a command fencing nobody is written as version 1,
//! so records from before fences existed and records of commits keep their bytes.
//!
//! Format version 3 is version 2 whose fenced-client count may be 0, followed by the ACL
//! access key the command was granted to (`str access_key`, never empty): with ACL on, the
//! log says which access key moved an offset. A command without an access key (ACL off) is
//! written as version 1 or 2 as before, so every older record keeps its bytes and every
//! version stays readable.

use std::fmt;

use thiserror::Error;

/// The format version of a command fencing nobody, and of every view snapshot without fences.
pub const OFFSET_FORMAT_VERSION: u8 = 1;
/// The format version of a command that names fenced clients (a reset or correction issued
/// while consumers were online), and of a view snapshot holding fences.
pub const OFFSET_FORMAT_VERSION_FENCES: u8 = 2;
/// The format version of a command that names the ACL access key it was granted to (commands
/// only; view snapshots never use it).
pub const OFFSET_FORMAT_VERSION_ACCESS_KEY: u8 = 3;

/// What an offset record does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OffsetKind {
    /// A consumer reports its progress; subject to the generation and monotone rules.
    Commit = 1,
    /// An administrator moves offsets (backwards or forwards) and starts a new generation.
    Reset = 2,
    /// The broker moves offsets (e.g. after an out-of-range pull) and starts a new
    /// generation; applied exactly like a reset, kept apart for auditing.
    Correction = 3,
}

impl OffsetKind {
    /// Lower-case name used in logs and admin output: "commit", "reset" or "correction".
    pub fn as_str(self) -> &'static str {
        match self {
            OffsetKind::Commit => "commit",
            OffsetKind::Reset => "reset",
            OffsetKind::Correction => "correction",
        }
    }

    /// The byte that encodes this kind.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The kind encoded by `code`, or `None` for a code no version-1 record uses.
    pub fn from_code(code: u8) -> Option<OffsetKind> {
        match code {
            1 => Some(OffsetKind::Commit),
            2 => Some(OffsetKind::Reset),
            3 => Some(OffsetKind::Correction),
            _ => None,
        }
    }
}

impl fmt::Display for OffsetKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One queue's offset inside a command: the next queue offset to consume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetEntry {
    pub topic: String,
    pub queue_id: u32,
    pub offset: u64,
}

/// The body of one offset record in [`super::OFFSET_TOPIC`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommand {
    pub kind: OffsetKind,
    pub group: String,
    /// The client (or admin tool / broker component) that issued the command; recorded
    /// for auditing, not used by the rules.
    pub client_id: String,
    /// Commit: the reset generation the committer last saw; None = a legacy client that knows no generation.
    /// Reset/Correction in a stored record: the NEW generation this record establishes (assigned by the store = current + 1).
    pub generation: Option<u64>,
    pub entries: Vec<OffsetEntry>,
    /// Reset/Correction: the client ids of the group's consumers online when it was issued.
    /// Their commits are refused on the moved queues until they follow the move (the broker's
    /// fences); recorded so the fences survive a restart and replicate with the log. Empty for
    /// commits.
    pub fenced_clients: Vec<String>,
    /// With ACL on: the access key of the account the request that issued the command was
    /// granted to (who moved the offset). `None` with ACL off, for the broker's own commands
    /// and in records written before access keys were recorded. Never `Some("")`.
    pub access_key: Option<String>,
}

/// Why an offset command or offset view could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OffsetCodecError {
    /// The input ended inside a field.
    #[error("truncated at byte {at}: {field} needs {needed} byte(s), input has {len}")]
    Truncated {
        field: &'static str,
        at: usize,
        needed: usize,
        len: usize,
    },
    /// The first byte is not a format version this code understands.
    #[error("unknown format version {found} (supported: {supported})")]
    UnknownVersion { found: u8, supported: u8 },
    /// The kind byte names no [`OffsetKind`].
    #[error("unknown offset command kind {found} at byte {at}")]
    UnknownKind { found: u8, at: usize },
    /// A string field is not valid UTF-8.
    #[error("bad utf8 in field {field} at byte {at}")]
    BadUtf8 { field: &'static str, at: usize },
    /// A presence flag is neither 0 nor 1.
    #[error("bad flag {found} for field {field} at byte {at} (expected 0 or 1)")]
    BadFlag {
        field: &'static str,
        found: u8,
        at: usize,
    },
    /// Bytes remain after a complete command.
    #[error("{count} trailing byte(s) after the command, starting at byte {at}")]
    TrailingBytes { count: usize, at: usize },
    /// A command has more entries than the u16 count can express.
    #[error("too many entries: {count} (at most {max})")]
    TooManyEntries { count: usize, max: usize },
    /// A string is longer than its u16 length prefix can express.
    #[error("field {field} is {len} bytes long (at most {max})")]
    StringTooLong {
        field: &'static str,
        len: usize,
        max: usize,
    },
    /// A view snapshot is well-formed but is not the encoding any view produces
    /// (keys out of order or repeated, an empty group or topic, inconsistent generations).
    #[error("non-canonical view encoding at byte {at}: {reason}")]
    NonCanonical { reason: &'static str, at: usize },
}

impl OffsetCommand {
    /// Encodes the command as a record body (format version 1).
    ///
    /// Fails with [`OffsetCodecError::TooManyEntries`] above 65535 entries and with
    /// [`OffsetCodecError::StringTooLong`] for a group, client id or topic longer than
    /// 65535 bytes, since those lengths are u16 on the wire.
    pub fn encode(&self) -> Result<Vec<u8>, OffsetCodecError> {
        let count =
            u16::try_from(self.entries.len()).map_err(|_| OffsetCodecError::TooManyEntries {
                count: self.entries.len(),
                max: usize::from(u16::MAX),
            })?;
        let mut out = Vec::with_capacity(
            16 + self.group.len()
                + self.client_id.len()
                + self
                    .entries
                    .iter()
                    .map(|e| 14 + e.topic.len())
                    .sum::<usize>(),
        );
        let fenced = u16::try_from(self.fenced_clients.len()).map_err(|_| {
            OffsetCodecError::TooManyEntries {
                count: self.fenced_clients.len(),
                max: usize::from(u16::MAX),
            }
        })?;
        let access_key = match self.access_key.as_deref() {
            Some("") => {
                return Err(OffsetCodecError::NonCanonical {
                    reason: "an empty access key (None means no access key)",
                    at: 0,
                })
            }
            other => other,
        };
        out.push(match (access_key, fenced) {
            (Some(_), _) => OFFSET_FORMAT_VERSION_ACCESS_KEY,
            (None, 0) => OFFSET_FORMAT_VERSION,
            (None, _) => OFFSET_FORMAT_VERSION_FENCES,
        });
        out.push(self.kind.code());
        put_str16(&mut out, "group", &self.group)?;
        put_str16(&mut out, "client_id", &self.client_id)?;
        match self.generation {
            None => out.push(0),
            Some(g) => {
                out.push(1);
                out.extend_from_slice(&g.to_be_bytes());
            }
        }
        out.extend_from_slice(&count.to_be_bytes());
        for entry in &self.entries {
            put_str16(&mut out, "topic", &entry.topic)?;
            out.extend_from_slice(&entry.queue_id.to_be_bytes());
            out.extend_from_slice(&entry.offset.to_be_bytes());
        }
        if fenced > 0 || access_key.is_some() {
            out.extend_from_slice(&fenced.to_be_bytes());
            for client in &self.fenced_clients {
                put_str16(&mut out, "fenced client", client)?;
            }
        }
        if let Some(key) = access_key {
            put_str16(&mut out, "access_key", key)?;
        }
        Ok(out)
    }

    /// Decodes a record body produced by [`OffsetCommand::encode`].
    ///
    /// The whole input must be one command: a short input, an unknown version or kind,
    /// invalid UTF-8, a bad presence flag or trailing bytes are errors, never panics.
    pub fn decode(bytes: &[u8]) -> Result<OffsetCommand, OffsetCodecError> {
        let mut r = Reader::new(bytes);
        let version = r.u8("version")?;
        if !matches!(
            version,
            OFFSET_FORMAT_VERSION | OFFSET_FORMAT_VERSION_FENCES | OFFSET_FORMAT_VERSION_ACCESS_KEY
        ) {
            return Err(OffsetCodecError::UnknownVersion {
                found: version,
                supported: OFFSET_FORMAT_VERSION_ACCESS_KEY,
            });
        }
        let kind_at = r.pos();
        let kind_code = r.u8("kind")?;
        let kind = OffsetKind::from_code(kind_code).ok_or(OffsetCodecError::UnknownKind {
            found: kind_code,
            at: kind_at,
        })?;
        let group = r.str16("group")?;
        let client_id = r.str16("client_id")?;
        let flag_at = r.pos();
        let generation = match r.u8("generation flag")? {
            0 => None,
            1 => Some(r.u64("generation")?),
            found => {
                return Err(OffsetCodecError::BadFlag {
                    field: "generation flag",
                    found,
                    at: flag_at,
                })
            }
        };
        let count = r.u16("entry count")?;
        let mut entries = Vec::new();
        for _ in 0..count {
            let topic = r.str16("topic")?;
            let queue_id = r.u32("queue_id")?;
            let offset = r.u64("offset")?;
            entries.push(OffsetEntry {
                topic,
                queue_id,
                offset,
            });
        }
        let mut fenced_clients = Vec::new();
        if version >= OFFSET_FORMAT_VERSION_FENCES {
            let at = r.pos();
            let count = r.u16("fenced client count")?;
            if count == 0 && version == OFFSET_FORMAT_VERSION_FENCES {
                return Err(OffsetCodecError::NonCanonical {
                    reason: "version 2 command without fenced clients",
                    at,
                });
            }
            for _ in 0..count {
                fenced_clients.push(r.str16("fenced client")?);
            }
        }
        let mut access_key = None;
        if version == OFFSET_FORMAT_VERSION_ACCESS_KEY {
            let at = r.pos();
            let key = r.str16("access_key")?;
            if key.is_empty() {
                return Err(OffsetCodecError::NonCanonical {
                    reason: "version 3 command with an empty access key",
                    at,
                });
            }
            access_key = Some(key);
        }
        if r.remaining() > 0 {
            return Err(OffsetCodecError::TrailingBytes {
                count: r.remaining(),
                at: r.pos(),
            });
        }
        Ok(OffsetCommand {
            kind,
            group,
            client_id,
            generation,
            entries,
            fenced_clients,
            access_key,
        })
    }
}

fn put_str16(out: &mut Vec<u8>, field: &'static str, s: &str) -> Result<(), OffsetCodecError> {
    let len = u16::try_from(s.len()).map_err(|_| OffsetCodecError::StringTooLong {
        field,
        len: s.len(),
        max: usize::from(u16::MAX),
    })?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

/// Bounds-checked big-endian reader shared by the command and view codecs.
pub(super) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Bytes consumed so far, i.e. the position of the next field.
    pub(super) fn pos(&self) -> usize {
        self.pos
    }

    pub(super) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(super) fn take(
        &mut self,
        field: &'static str,
        needed: usize,
    ) -> Result<&'a [u8], OffsetCodecError> {
        if needed > self.remaining() {
            return Err(OffsetCodecError::Truncated {
                field,
                at: self.pos,
                needed,
                len: self.buf.len(),
            });
        }
        let slice = &self.buf[self.pos..self.pos + needed];
        self.pos += needed;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], OffsetCodecError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(field, N)?);
        Ok(a)
    }

    pub(super) fn u8(&mut self, field: &'static str) -> Result<u8, OffsetCodecError> {
        Ok(self.array::<1>(field)?[0])
    }

    pub(super) fn u16(&mut self, field: &'static str) -> Result<u16, OffsetCodecError> {
        Ok(u16::from_be_bytes(self.array(field)?))
    }

    pub(super) fn u32(&mut self, field: &'static str) -> Result<u32, OffsetCodecError> {
        Ok(u32::from_be_bytes(self.array(field)?))
    }

    pub(super) fn u64(&mut self, field: &'static str) -> Result<u64, OffsetCodecError> {
        Ok(u64::from_be_bytes(self.array(field)?))
    }

    pub(super) fn i64(&mut self, field: &'static str) -> Result<i64, OffsetCodecError> {
        Ok(i64::from_be_bytes(self.array(field)?))
    }

    /// A UTF-8 string of `len` bytes starting at the current position.
    pub(super) fn utf8(
        &mut self,
        field: &'static str,
        len: usize,
    ) -> Result<String, OffsetCodecError> {
        let at = self.pos;
        let bytes = self.take(field, len)?;
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| OffsetCodecError::BadUtf8 { field, at })
    }

    /// A u16-length-prefixed UTF-8 string.
    pub(super) fn str16(&mut self, field: &'static str) -> Result<String, OffsetCodecError> {
        let len = self.u16(field)?;
        self.utf8(field, usize::from(len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> OffsetCommand {
        OffsetCommand {
            kind: OffsetKind::Commit,
            group: "g".into(),
            client_id: "c1".into(),
            generation: Some(7),
            entries: vec![
                OffsetEntry {
                    topic: "t".into(),
                    queue_id: 1,
                    offset: 42,
                },
                OffsetEntry {
                    topic: "ü".into(),
                    queue_id: u32::MAX,
                    offset: u64::MAX,
                },
            ],
            fenced_clients: Vec::new(),
            access_key: None,
        }
    }

    #[test]
    fn kind_names_and_codes_round_trip() {
        for kind in [
            OffsetKind::Commit,
            OffsetKind::Reset,
            OffsetKind::Correction,
        ] {
            assert_eq!(OffsetKind::from_code(kind.code()), Some(kind));
            assert_eq!(kind.to_string(), kind.as_str());
        }
        assert_eq!(OffsetKind::Commit.as_str(), "commit");
        assert_eq!(OffsetKind::Reset.as_str(), "reset");
        assert_eq!(OffsetKind::Correction.as_str(), "correction");
        assert_eq!(OffsetKind::from_code(0), None);
        assert_eq!(OffsetKind::from_code(4), None);
    }

    #[test]
    fn encoding_layout_is_versioned_big_endian() {
        let cmd = OffsetCommand {
            kind: OffsetKind::Reset,
            group: "g".into(),
            client_id: String::new(),
            generation: Some(2),
            entries: vec![OffsetEntry {
                topic: "t".into(),
                queue_id: 3,
                offset: 5,
            }],
            fenced_clients: Vec::new(),
            access_key: None,
        };
        let bytes = cmd.encode().unwrap();
        let expected: Vec<u8> = [
            &[1u8, 2][..],
            &[0, 1, b'g'],
            &[0, 0],
            &[1, 0, 0, 0, 0, 0, 0, 0, 2],
            &[0, 1],
            &[0, 1, b't', 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 5],
        ]
        .concat();
        assert_eq!(bytes, expected);
        assert_eq!(OffsetCommand::decode(&bytes).unwrap(), cmd);
    }

    #[test]
    fn command_round_trips_with_and_without_generation() {
        let mut cmd = sample();
        assert_eq!(OffsetCommand::decode(&cmd.encode().unwrap()).unwrap(), cmd);
        cmd.generation = None;
        cmd.entries.clear();
        assert_eq!(OffsetCommand::decode(&cmd.encode().unwrap()).unwrap(), cmd);
    }

    #[test]
    fn decode_rejects_unknown_version() {
        let mut bytes = sample().encode().unwrap();
        bytes[0] = 4;
        assert_eq!(
            OffsetCommand::decode(&bytes),
            Err(OffsetCodecError::UnknownVersion {
                found: 4,
                supported: 3
            })
        );
    }

    #[test]
    fn decode_rejects_unknown_kind() {
        let mut bytes = sample().encode().unwrap();
        bytes[1] = 9;
        assert_eq!(
            OffsetCommand::decode(&bytes),
            Err(OffsetCodecError::UnknownKind { found: 9, at: 1 })
        );
    }

    #[test]
    fn decode_rejects_bad_utf8_naming_the_field() {
        let mut bytes = sample().encode().unwrap();
        bytes[4] = 0xff; // the single byte of the group
        assert_eq!(
            OffsetCommand::decode(&bytes),
            Err(OffsetCodecError::BadUtf8 {
                field: "group",
                at: 4
            })
        );
        let mut bytes = sample().encode().unwrap();
        bytes[7] = 0xc0; // first byte of the client id
        assert!(matches!(
            OffsetCommand::decode(&bytes),
            Err(OffsetCodecError::BadUtf8 {
                field: "client_id",
                ..
            })
        ));
        let mut bytes = sample().encode().unwrap();
        let topic_at = 1 + 1 + 3 + 4 + 9 + 2 + 2;
        bytes[topic_at] = 0x80;
        assert_eq!(
            OffsetCommand::decode(&bytes),
            Err(OffsetCodecError::BadUtf8 {
                field: "topic",
                at: topic_at
            })
        );
    }

    #[test]
    fn decode_rejects_bad_generation_flag() {
        let mut bytes = sample().encode().unwrap();
        bytes[9] = 2;
        assert_eq!(
            OffsetCommand::decode(&bytes),
            Err(OffsetCodecError::BadFlag {
                field: "generation flag",
                found: 2,
                at: 9
            })
        );
    }

    #[test]
    fn decode_rejects_trailing_bytes() {
        let mut bytes = sample().encode().unwrap();
        let len = bytes.len();
        bytes.extend_from_slice(&[0, 0]);
        assert_eq!(
            OffsetCommand::decode(&bytes),
            Err(OffsetCodecError::TrailingBytes { count: 2, at: len })
        );
    }

    #[test]
    fn decode_reports_truncation_position() {
        let bytes = sample().encode().unwrap();
        assert_eq!(
            OffsetCommand::decode(&bytes[..bytes.len() - 3]),
            Err(OffsetCodecError::Truncated {
                field: "offset",
                at: bytes.len() - 8,
                needed: 8,
                len: bytes.len() - 3
            })
        );
        assert!(matches!(
            OffsetCommand::decode(&[]),
            Err(OffsetCodecError::Truncated {
                field: "version",
                at: 0,
                ..
            })
        ));
    }

    #[test]
    fn encode_rejects_too_many_entries() {
        let mut cmd = sample();
        cmd.entries = vec![cmd.entries[0].clone(); usize::from(u16::MAX) + 1];
        assert_eq!(
            cmd.encode(),
            Err(OffsetCodecError::TooManyEntries {
                count: 65536,
                max: 65535
            })
        );
        cmd.entries.pop();
        let decoded = OffsetCommand::decode(&cmd.encode().unwrap()).unwrap();
        assert_eq!(decoded.entries.len(), 65535);
    }

    #[test]
    fn encode_rejects_overlong_strings() {
        let long = "x".repeat(usize::from(u16::MAX) + 1);
        for field in ["group", "client_id", "topic"] {
            let mut cmd = sample();
            match field {
                "group" => cmd.group = long.clone(),
                "client_id" => cmd.client_id = long.clone(),
                _ => cmd.entries[1].topic = long.clone(),
            }
            assert_eq!(
                cmd.encode(),
                Err(OffsetCodecError::StringTooLong {
                    field,
                    len: 65536,
                    max: 65535
                })
            );
        }
        let mut cmd = sample();
        cmd.group = "x".repeat(usize::from(u16::MAX));
        assert_eq!(OffsetCommand::decode(&cmd.encode().unwrap()).unwrap(), cmd);
    }

    #[test]
    fn an_access_key_is_written_as_version_3_and_reads_back() {
        let mut cmd = sample();
        cmd.access_key = Some("user01".into());
        let bytes = cmd.encode().unwrap();
        assert_eq!(bytes[0], OFFSET_FORMAT_VERSION_ACCESS_KEY);
        // Version 1's bytes, then a zero fenced count, then the key.
        let mut plain = cmd.clone();
        plain.access_key = None;
        let v1 = plain.encode().unwrap();
        assert_eq!(v1[0], OFFSET_FORMAT_VERSION);
        assert_eq!(&bytes[1..v1.len()], &v1[1..]);
        assert_eq!(
            &bytes[v1.len()..],
            &[0, 0, 0, 6, b'u', b's', b'e', b'r', b'0', b'1']
        );
        assert_eq!(OffsetCommand::decode(&bytes).unwrap(), cmd);

        // With fenced clients too.
        cmd.kind = OffsetKind::Reset;
        cmd.fenced_clients = vec!["c1".into(), "c2".into()];
        let bytes = cmd.encode().unwrap();
        assert_eq!(bytes[0], OFFSET_FORMAT_VERSION_ACCESS_KEY);
        assert_eq!(OffsetCommand::decode(&bytes).unwrap(), cmd);
        cmd.access_key = None;
        let v2 = cmd.encode().unwrap();
        assert_eq!(v2[0], OFFSET_FORMAT_VERSION_FENCES);
        assert_eq!(OffsetCommand::decode(&v2).unwrap(), cmd);
    }

    #[test]
    fn an_empty_access_key_is_refused_both_ways() {
        let mut cmd = sample();
        cmd.access_key = Some(String::new());
        assert!(matches!(
            cmd.encode(),
            Err(OffsetCodecError::NonCanonical { .. })
        ));
        cmd.access_key = Some("k".into());
        let mut bytes = cmd.encode().unwrap();
        // Cut the key to a zero-length string.
        bytes.truncate(bytes.len() - 3);
        bytes.extend_from_slice(&[0, 0]);
        assert!(matches!(
            OffsetCommand::decode(&bytes),
            Err(OffsetCodecError::NonCanonical { .. })
        ));
        // A version 3 record without its key is truncated, never a keyless command.
        let mut bytes = cmd.encode().unwrap();
        bytes.truncate(bytes.len() - 3);
        assert!(matches!(
            OffsetCommand::decode(&bytes),
            Err(OffsetCodecError::Truncated {
                field: "access_key",
                ..
            })
        ));
    }

    fn arb_command() -> impl Strategy<Value = OffsetCommand> {
        (
            prop_oneof![
                Just(OffsetKind::Commit),
                Just(OffsetKind::Reset),
                Just(OffsetKind::Correction)
            ],
            ".{0,8}",
            ".{0,8}",
            proptest::option::of(any::<u64>()),
            proptest::collection::vec((".{0,6}", any::<u32>(), any::<u64>()), 0..6),
        )
            .prop_map(
                |(kind, group, client_id, generation, entries)| OffsetCommand {
                    kind,
                    group,
                    client_id,
                    generation,
                    entries: entries
                        .into_iter()
                        .map(|(topic, queue_id, offset)| OffsetEntry {
                            topic,
                            queue_id,
                            offset,
                        })
                        .collect(),
                    fenced_clients: Vec::new(),
                    access_key: None,
                },
            )
    }

    proptest! {
        #[test]
        fn command_codec_round_trips(cmd in arb_command()) {
            let bytes = cmd.encode().unwrap();
            prop_assert_eq!(bytes[0], OFFSET_FORMAT_VERSION);
            prop_assert_eq!(OffsetCommand::decode(&bytes).unwrap(), cmd);
        }

        #[test]
        fn every_truncation_of_a_command_fails_to_decode(cmd in arb_command()) {
            let bytes = cmd.encode().unwrap();
            for cut in 0..bytes.len() {
                let result = OffsetCommand::decode(&bytes[..cut]);
                prop_assert!(
                    matches!(result, Err(OffsetCodecError::Truncated { .. })),
                    "prefix of {} bytes decoded as {:?}", cut, result
                );
            }
        }

        #[test]
        fn decoding_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = OffsetCommand::decode(&bytes);
        }

        #[test]
        fn decoding_corrupted_commands_never_panics(
            cmd in arb_command(),
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
        ) {
            let mut bytes = cmd.encode().unwrap();
            for (at, value) in flips {
                let i = at % bytes.len();
                bytes[i] = value;
            }
            if let Ok(decoded) = OffsetCommand::decode(&bytes) {
                prop_assert_eq!(decoded.encode().unwrap(), bytes);
            }
        }
    }
}
