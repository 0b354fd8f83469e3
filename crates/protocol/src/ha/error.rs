//! Errors of the HA wire format.

use std::io;
use std::str::Utf8Error;

use thiserror::Error;

/// Why an HA frame cannot be decoded or encoded.
///
/// Every decode error means the stream can no longer be trusted: the caller closes the
/// connection. An encode error leaves the output buffer untouched.
#[derive(Debug, Error)]
pub enum HaFrameError {
    /// The frame's `len` (kind byte plus payload) exceeds the codec's bound (or, when
    /// encoding, what the 32-bit length field can express).
    #[error("HA frame of {len} bytes exceeds the bound of {max}")]
    TooLarge {
        /// The frame's `len`.
        len: usize,
        /// The bound it exceeds.
        max: usize,
    },
    /// A frame with `len == 0`: not even a kind byte.
    #[error("HA frame with length 0 (no kind byte)")]
    EmptyFrame,
    /// A kind byte this version does not define.
    #[error("unknown HA frame kind {0}")]
    UnknownKind(u8),
    /// The payload ends before a field its kind requires.
    #[error("HA {kind} frame truncated: a field needs {needed} bytes, {had} left")]
    Truncated {
        /// The frame's kind name.
        kind: &'static str,
        /// Bytes the next field needs.
        needed: usize,
        /// Bytes left in the payload.
        had: usize,
    },
    /// The payload goes on after the last field its kind defines.
    #[error("HA {kind} frame has {extra} trailing bytes")]
    Trailing {
        /// The frame's kind name.
        kind: &'static str,
        /// Bytes after the last field.
        extra: usize,
    },
    /// A string field is too long or not UTF-8.
    #[error("HA {kind} frame, field {field}: {source}")]
    BadString {
        /// The frame's kind name.
        kind: &'static str,
        /// The field's name.
        field: &'static str,
        /// What is wrong with it.
        #[source]
        source: HaStringError,
    },
    /// A Hello carries more record samples than [`super::HA_SAMPLES_MAX`].
    #[error("HA Hello with {count} record samples, at most {max} allowed")]
    TooManySamples {
        /// The number of samples.
        count: usize,
        /// The bound.
        max: usize,
    },
    /// A Hello or Welcome carries more epoch entries than [`super::HA_EPOCHS_MAX`].
    #[error("HA {kind} with {count} epoch entries, at most {max} allowed")]
    TooManyEpochs {
        /// The frame's kind name.
        kind: &'static str,
        /// The number of entries.
        count: usize,
        /// The bound.
        max: usize,
    },
    /// A Refused frame's code is one this version does not define.
    #[error("unknown HA refusal code {0}")]
    UnknownRefusal(u16),
    /// A Refused frame to encode has `differs_at == Some(u64::MAX)`, the wire value of "none".
    #[error("HA Refused differs_at of u64::MAX cannot be sent: it is the wire value of none")]
    ReservedDiffersAt,
    /// Reading or writing the underlying stream failed.
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
}

/// What is wrong with a string field.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HaStringError {
    /// Longer than [`super::HA_STRING_MAX`] bytes.
    #[error("string of {len} bytes, at most {max} allowed")]
    TooLong {
        /// The string's length in bytes.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// The bytes are not UTF-8.
    #[error("string is not UTF-8: {0}")]
    NotUtf8(#[from] Utf8Error),
}
