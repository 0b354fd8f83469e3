//! The ROCKETMQ binary header (serialize type 1), big-endian:
//!
//! ```text
//! code i16 | language u8 | version i16 | opaque i32 | flag i32
//! | remarkLen i32 + remark | extLen i32 + { keyLen i16 + key | valLen i32 + value }*
//! ```
//!
//! A zero length means null (no remark; an ext entry with an empty key or value is dropped), as
//! in Java. `code` and `version` are sign-extended from 16 bits.
//!
//! Invariants: decoding checks every length against the bytes present, rejects negative lengths,
//! invalid UTF-8 and bytes left over after the ext map, and never panics. [`encode`] returns
//! `None` for a command this layout cannot carry exactly (a code or version outside `i16`, an
//! empty remark, key or value, a key over 32767 bytes); the caller then uses JSON, which is
//! legal because the serialize type is chosen per frame.

use super::ext::{ExtFields, ExtText};

use bytes::BufMut;
use thiserror::Error;

use super::command::RemotingCommand;
use super::frame::SerializeType;
use super::language::LanguageCode;

/// Fixed part: code 2, language 1, version 2, opaque 4, flag 4.
const FIXED_LEN: usize = 13;

/// Why a binary header cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BinaryHeaderError {
    /// The header ends inside a field.
    #[error("binary header truncated in {field}: needs {needed} bytes, has {available}")]
    Truncated {
        /// Field being read.
        field: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes left.
        available: usize,
    },
    /// A length prefix is negative.
    #[error("binary header field {field} has negative length {length}")]
    NegativeLength {
        /// Field whose length is negative.
        field: &'static str,
        /// The length as read.
        length: i32,
    },
    /// A string is not UTF-8.
    #[error("binary header field {field} is not valid UTF-8")]
    NotUtf8 {
        /// Field holding the bad bytes.
        field: &'static str,
    },
    /// Bytes remain after the ext map.
    #[error("{0} bytes follow the end of the binary header")]
    TrailingBytes(usize),
}

/// Decodes a binary header into a command without body (serialize type ROCKETMQ). The ext
/// fields keep a copy of their bytes and are decoded into a map only when first read as one
/// (`ExtFields` invariant 4); every length and every key and value's UTF-8 is checked here all
/// the same. A copy, not a view of the frame: a view would keep the connection's whole read
/// buffer alive as long as the command (a held pull), past the reader's per-connection bound.
pub fn decode(header: &[u8]) -> Result<RemotingCommand, BinaryHeaderError> {
    let mut r = Reader { buf: header };
    let code = r.i16("code")? as i32;
    let language = LanguageCode::from_code_lenient(r.take("language", 1)?[0]);
    let version = r.i16("version")? as i32;
    let opaque = r.i32("opaque")?;
    let flag = r.i32("flag")?;
    let remark_len = r.len_i32("remark length")?;
    let remark = r.string("remark", remark_len)?;
    let ext_len = r.len_i32("extFields length")?;
    let ext_bytes = r.take("extFields", ext_len)?;
    let ext_fields = ExtFields::from_binary(check_ext(ext_bytes)?);
    if !r.buf.is_empty() {
        return Err(BinaryHeaderError::TrailingBytes(r.buf.len()));
    }
    Ok(RemotingCommand {
        code,
        language,
        version,
        opaque,
        flag,
        remark,
        ext_fields,
        body: None,
        serialize_type: SerializeType::RocketMq,
    })
}

/// The bytes of a binary header's ext map that [`check_ext`] accepted: every length within
/// them and not negative, every key and value UTF-8, nothing left over. Only [`check_ext`]
/// makes one, which is what lets [`binary_fields`] read its texts without checking them again.
#[derive(Debug, Clone)]
pub struct CheckedExt(Box<[u8]>);

/// Checks the ext map's bytes (see [`CheckedExt`]) and keeps a copy of them.
fn check_ext(bytes: &[u8]) -> Result<CheckedExt, BinaryHeaderError> {
    let mut r = Reader { buf: bytes };
    while !r.buf.is_empty() {
        let (key, value) = next_pair(&mut r)?;
        std::str::from_utf8(key).map_err(|_| BinaryHeaderError::NotUtf8 { field: "ext key" })?;
        std::str::from_utf8(value)
            .map_err(|_| BinaryHeaderError::NotUtf8 { field: "ext value" })?;
    }
    Ok(CheckedExt(bytes.into()))
}

/// The fields of checked ext bytes, in wire order: each key and value pair but those with an
/// empty key or value (Java drops them: null).
pub(crate) fn binary_fields(ext: &CheckedExt) -> impl Iterator<Item = (&str, &str)> {
    let mut r = Reader { buf: &ext.0 };
    std::iter::from_fn(move || {
        while !r.buf.is_empty() {
            // Cannot fail: `check_ext` read these same bytes the same way.
            let (key, value) = next_pair(&mut r).ok()?;
            if !key.is_empty() && !value.is_empty() {
                // SAFETY: `ext` is a `CheckedExt`, which only `check_ext` builds, after
                // `std::str::from_utf8` accepted every key and value `next_pair` reads from
                // these bytes; nothing changes them (its field is private and never lent
                // mutably), so `key` and `value` are exactly those checked texts. Checking
                // them again was an eighth of a send header's decoding time.
                let texts = unsafe {
                    (
                        std::str::from_utf8_unchecked(key),
                        std::str::from_utf8_unchecked(value),
                    )
                };
                return Some(texts);
            }
        }
        None
    })
}

/// Reads one `keyLen i16 + key | valLen i32 + value` pair, its texts unchecked.
fn next_pair<'a>(r: &mut Reader<'a>) -> Result<(&'a [u8], &'a [u8]), BinaryHeaderError> {
    let key_len = r.i16("ext key length")?;
    if key_len < 0 {
        return Err(BinaryHeaderError::NegativeLength {
            field: "ext key",
            length: key_len as i32,
        });
    }
    let key = r.take("ext key", key_len as usize)?;
    let val_len = r.len_i32("ext value length")?;
    let value = r.take("ext value", val_len)?;
    Ok((key, value))
}

/// Encodes the header fields of `cmd`, or `None` when the layout cannot carry them exactly.
pub fn encode(cmd: &RemotingCommand) -> Option<Vec<u8>> {
    let layout = Layout::of(cmd)?;
    let mut out = Vec::with_capacity(layout.len);
    layout.write(cmd, &mut out);
    Some(out)
}

/// What writing a command's binary header needs to know first: its narrowed fields and its
/// length, so a frame's prefix can be written before the header, straight into the frame's
/// buffer (an encoded header of its own cost an allocation and a copy per frame).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    code: i16,
    version: i16,
    ext_len: usize,
    /// Bytes of the whole header.
    pub(crate) len: usize,
}

impl Layout {
    /// The layout of `cmd`'s header; `None` when this layout cannot carry it (see the module
    /// doc).
    pub(crate) fn of(cmd: &RemotingCommand) -> Option<Layout> {
        let code = i16::try_from(cmd.code).ok()?;
        let version = i16::try_from(cmd.version).ok()?;
        let remark_len = cmd.remark.as_deref().map_or(0, str::len);
        if cmd.remark.as_deref() == Some("") || i32::try_from(remark_len).is_err() {
            return None;
        }
        let mut ext_len = 0usize;
        for (k, v) in &cmd.ext_fields {
            if k.is_empty() || v.is_empty() || i16::try_from(k.len()).is_err() {
                return None;
            }
            i32::try_from(v.len()).ok()?;
            ext_len = ext_len.checked_add(2 + k.len() + 4 + v.len())?;
        }
        i32::try_from(ext_len).ok()?;
        let len = (FIXED_LEN + 8 + remark_len).checked_add(ext_len)?;
        Some(Layout {
            code,
            version,
            ext_len,
            len,
        })
    }

    /// Writes `cmd`'s header, the command this layout was made of: `len` bytes.
    pub(crate) fn write(&self, cmd: &RemotingCommand, out: &mut impl BufMut) {
        let remark = cmd.remark.as_deref().map(str::as_bytes).unwrap_or_default();
        out.put_i16(self.code);
        out.put_u8(cmd.language.code());
        out.put_i16(self.version);
        out.put_i32(cmd.opaque);
        out.put_i32(cmd.flag);
        out.put_i32(remark.len() as i32);
        out.put_slice(remark);
        out.put_i32(self.ext_len as i32);
        for (k, v) in &cmd.ext_fields {
            out.put_i16(k.len() as i16);
            out.put_slice(k.as_bytes());
            out.put_i32(v.len() as i32);
            out.put_slice(v.as_bytes());
        }
    }
}

/// Bounds-checked big-endian reader over a byte slice.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, field: &'static str, n: usize) -> Result<&'a [u8], BinaryHeaderError> {
        if self.buf.len() < n {
            return Err(BinaryHeaderError::Truncated {
                field,
                needed: n,
                available: self.buf.len(),
            });
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], BinaryHeaderError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(field, N)?);
        Ok(out)
    }

    fn i16(&mut self, field: &'static str) -> Result<i16, BinaryHeaderError> {
        self.array(field).map(i16::from_be_bytes)
    }

    fn i32(&mut self, field: &'static str) -> Result<i32, BinaryHeaderError> {
        self.array(field).map(i32::from_be_bytes)
    }

    /// Reads an `i32` length prefix and rejects negative values.
    fn len_i32(&mut self, field: &'static str) -> Result<usize, BinaryHeaderError> {
        let length = self.i32(field)?;
        usize::try_from(length).map_err(|_| BinaryHeaderError::NegativeLength { field, length })
    }

    /// Reads `n` bytes of UTF-8; zero bytes is null.
    fn string(
        &mut self,
        field: &'static str,
        n: usize,
    ) -> Result<Option<String>, BinaryHeaderError> {
        Ok(self.text(field, n)?.map(String::from))
    }

    /// Reads `n` bytes of UTF-8 as an [`ExtText`] (inline when short: no allocation); zero
    /// bytes is null.
    fn text(
        &mut self,
        field: &'static str,
        n: usize,
    ) -> Result<Option<ExtText>, BinaryHeaderError> {
        let bytes = self.take(field, n)?;
        if bytes.is_empty() {
            return Ok(None);
        }
        std::str::from_utf8(bytes)
            .map(|s| Some(ExtText::from(s)))
            .map_err(|_| BinaryHeaderError::NotUtf8 { field })
    }
}
