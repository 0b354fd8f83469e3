//! Payload layouts: the bytes after a frame's kind byte, to and from [`HaFrame`]s.
//!
//! Encoding is two steps so that a refused frame writes nothing: [`payload_len`] checks every
//! bound and computes the exact size, then [`put_payload`] writes, relying on those checks.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::error::{HaFrameError, HaStringError};
use super::{
    kind_name_of, Data, EpochEntry, HaFrame, Hello, RecordSample, RefusalCode, Refused, Truncate,
    Welcome, HA_EPOCHS_MAX, HA_SAMPLES_MAX, HA_STRING_MAX, KIND_ACK, KIND_DATA, KIND_HEARTBEAT,
    KIND_HELLO, KIND_REFUSED, KIND_TRUNCATE, KIND_WELCOME,
};

/// Bytes of one [`RecordSample`] on the wire.
const SAMPLE_LEN: usize = 8 + 4 + 4;
/// Bytes of one [`EpochEntry`] on the wire.
const EPOCH_LEN: usize = 8 + 8;
/// Bytes of a Welcome payload before its epoch list.
const WELCOME_LEN: usize = 4 * 8;
/// Bytes of a Data payload before the CommitLog bytes.
const DATA_HEADER_LEN: usize = 3 * 8;
/// Bytes of a Heartbeat payload.
const HEARTBEAT_LEN: usize = 2 * 8;
/// Bytes of an Ack payload.
const ACK_LEN: usize = 8;
/// The wire value of `Refused::differs_at == None`.
const DIFFERS_AT_NONE: u64 = u64::MAX;

/// Checks a string field against [`HA_STRING_MAX`]; returns its wire size.
fn string_len(kind: &'static str, field: &'static str, s: &str) -> Result<usize, HaFrameError> {
    if s.len() > HA_STRING_MAX {
        return Err(HaFrameError::BadString {
            kind,
            field,
            source: HaStringError::TooLong {
                len: s.len(),
                max: HA_STRING_MAX,
            },
        });
    }
    Ok(2 + s.len())
}

/// Checks an epoch list against [`HA_EPOCHS_MAX`]; returns its wire size.
fn epochs_len(kind: &'static str, epochs: &[EpochEntry]) -> Result<usize, HaFrameError> {
    if epochs.len() > HA_EPOCHS_MAX {
        return Err(HaFrameError::TooManyEpochs {
            kind,
            count: epochs.len(),
            max: HA_EPOCHS_MAX,
        });
    }
    Ok(2 + epochs.len() * EPOCH_LEN)
}

/// Checks every bound of `frame` and returns the exact length of its payload.
pub(super) fn payload_len(frame: &HaFrame) -> Result<usize, HaFrameError> {
    let kind = frame.kind_name();
    Ok(match frame {
        HaFrame::Hello(hello) => {
            if hello.samples.len() > HA_SAMPLES_MAX {
                return Err(HaFrameError::TooManySamples {
                    count: hello.samples.len(),
                    max: HA_SAMPLES_MAX,
                });
            }
            2 + string_len(kind, "cluster", &hello.cluster)?
                + string_len(kind, "broker_name", &hello.broker_name)?
                + 4 * 8
                + 2
                + hello.samples.len() * SAMPLE_LEN
                + epochs_len(kind, &hello.epochs)?
        }
        HaFrame::Welcome(welcome) => WELCOME_LEN + epochs_len(kind, &welcome.epochs)?,
        HaFrame::Truncate(truncate) => 8 + string_len(kind, "reason", &truncate.reason)?,
        HaFrame::Refused(refused) => {
            if refused.differs_at == Some(DIFFERS_AT_NONE) {
                return Err(HaFrameError::ReservedDiffersAt);
            }
            2 + 8 + string_len(kind, "reason", &refused.reason)?
        }
        HaFrame::Data(data) => {
            DATA_HEADER_LEN
                .checked_add(data.bytes.len())
                .ok_or(HaFrameError::TooLarge {
                    len: usize::MAX,
                    max: usize::MAX,
                })?
        }
        HaFrame::Heartbeat { .. } => HEARTBEAT_LEN,
        HaFrame::Ack { .. } => ACK_LEN,
    })
}

/// Writes an epoch list whose length [`payload_len`] has checked.
fn put_epochs(dst: &mut BytesMut, epochs: &[EpochEntry]) {
    // At most HA_EPOCHS_MAX (< u16::MAX), checked by `payload_len`.
    dst.put_u16(epochs.len() as u16);
    for entry in epochs {
        dst.put_u64(entry.epoch);
        dst.put_u64(entry.start);
    }
}

/// Writes a string whose length [`payload_len`] has checked.
fn put_string(dst: &mut BytesMut, s: &str) {
    // At most HA_STRING_MAX (< u16::MAX) bytes, checked by `payload_len`.
    dst.put_u16(s.len() as u16);
    dst.put_slice(s.as_bytes());
}

/// Writes the payload of a frame that [`payload_len`] has accepted. The CommitLog bytes of a
/// Data frame are copied once, straight into `dst`.
pub(super) fn put_payload(frame: &HaFrame, dst: &mut BytesMut) {
    match frame {
        HaFrame::Hello(hello) => {
            dst.put_u16(hello.version);
            put_string(dst, &hello.cluster);
            put_string(dst, &hello.broker_name);
            dst.put_u64(hello.broker_id);
            dst.put_u64(hello.log_end);
            dst.put_u64(hello.epoch);
            dst.put_u64(hello.segment_size);
            // At most HA_SAMPLES_MAX, checked by `payload_len`.
            dst.put_u16(hello.samples.len() as u16);
            for sample in &hello.samples {
                dst.put_u64(sample.offset);
                dst.put_u32(sample.size);
                dst.put_u32(sample.crc);
            }
            put_epochs(dst, &hello.epochs);
        }
        HaFrame::Welcome(welcome) => {
            dst.put_u64(welcome.epoch);
            dst.put_u64(welcome.master_end);
            dst.put_u64(welcome.start);
            dst.put_u64(welcome.watermark);
            put_epochs(dst, &welcome.epochs);
        }
        HaFrame::Truncate(truncate) => {
            dst.put_u64(truncate.to);
            put_string(dst, &truncate.reason);
        }
        HaFrame::Refused(refused) => {
            dst.put_u16(refused.code.code());
            dst.put_u64(refused.differs_at.unwrap_or(DIFFERS_AT_NONE));
            put_string(dst, &refused.reason);
        }
        HaFrame::Data(data) => {
            dst.put_u64(data.offset);
            dst.put_u64(data.watermark);
            dst.put_u64(data.master_end);
            dst.put_slice(&data.bytes);
        }
        HaFrame::Heartbeat {
            watermark,
            master_end,
        } => {
            dst.put_u64(*watermark);
            dst.put_u64(*master_end);
        }
        HaFrame::Ack { log_end } => dst.put_u64(*log_end),
    }
}

/// A bounds-checked reader over one frame's payload; every read that would run past the end
/// is [`HaFrameError::Truncated`] instead of a panic.
struct Reader {
    buf: BytesMut,
    kind: &'static str,
}

impl Reader {
    fn need(&self, needed: usize) -> Result<(), HaFrameError> {
        if self.buf.len() < needed {
            return Err(HaFrameError::Truncated {
                kind: self.kind,
                needed,
                had: self.buf.len(),
            });
        }
        Ok(())
    }

    fn u16(&mut self) -> Result<u16, HaFrameError> {
        self.need(2)?;
        Ok(self.buf.get_u16())
    }

    fn u32(&mut self) -> Result<u32, HaFrameError> {
        self.need(4)?;
        Ok(self.buf.get_u32())
    }

    fn u64(&mut self) -> Result<u64, HaFrameError> {
        self.need(8)?;
        Ok(self.buf.get_u64())
    }

    fn string(&mut self, field: &'static str) -> Result<String, HaFrameError> {
        let len = usize::from(self.u16()?);
        let bad = |source| HaFrameError::BadString {
            kind: self.kind,
            field,
            source,
        };
        if len > HA_STRING_MAX {
            return Err(bad(HaStringError::TooLong {
                len,
                max: HA_STRING_MAX,
            }));
        }
        self.need(len)?;
        let raw = self.buf.split_to(len);
        match std::str::from_utf8(&raw) {
            Ok(s) => Ok(s.to_owned()),
            Err(e) => Err(bad(HaStringError::NotUtf8(e))),
        }
    }

    /// The rest of the payload, without copying.
    fn rest(mut self) -> Bytes {
        let len = self.buf.len();
        self.buf.split_to(len).freeze()
    }

    /// Ends a self-delimiting payload: anything left over is an error.
    fn finish(self) -> Result<(), HaFrameError> {
        if !self.buf.is_empty() {
            return Err(HaFrameError::Trailing {
                kind: self.kind,
                extra: self.buf.len(),
            });
        }
        Ok(())
    }
}

/// Decodes the payload of a frame of kind `kind`.
pub(super) fn decode_payload(kind: u8, payload: BytesMut) -> Result<HaFrame, HaFrameError> {
    let name = kind_name_of(kind).ok_or(HaFrameError::UnknownKind(kind))?;
    let mut r = Reader {
        buf: payload,
        kind: name,
    };
    let frame = match kind {
        KIND_HELLO => HaFrame::Hello(decode_hello(&mut r)?),
        KIND_WELCOME => HaFrame::Welcome(Welcome {
            epoch: r.u64()?,
            master_end: r.u64()?,
            start: r.u64()?,
            watermark: r.u64()?,
            epochs: decode_epochs(&mut r)?,
        }),
        KIND_TRUNCATE => HaFrame::Truncate(Truncate {
            to: r.u64()?,
            reason: r.string("reason")?,
        }),
        KIND_REFUSED => {
            let number = r.u16()?;
            let code =
                RefusalCode::from_code(number).ok_or(HaFrameError::UnknownRefusal(number))?;
            let differs_at = match r.u64()? {
                DIFFERS_AT_NONE => None,
                at => Some(at),
            };
            HaFrame::Refused(Refused {
                code,
                differs_at,
                reason: r.string("reason")?,
            })
        }
        KIND_DATA => {
            let offset = r.u64()?;
            let watermark = r.u64()?;
            let master_end = r.u64()?;
            // The only open-ended payload: no `finish`.
            return Ok(HaFrame::Data(Data {
                offset,
                watermark,
                master_end,
                bytes: r.rest(),
            }));
        }
        KIND_HEARTBEAT => HaFrame::Heartbeat {
            watermark: r.u64()?,
            master_end: r.u64()?,
        },
        KIND_ACK => HaFrame::Ack { log_end: r.u64()? },
        _ => return Err(HaFrameError::UnknownKind(kind)),
    };
    r.finish()?;
    Ok(frame)
}

fn decode_hello(r: &mut Reader) -> Result<Hello, HaFrameError> {
    let version = r.u16()?;
    let cluster = r.string("cluster")?;
    let broker_name = r.string("broker_name")?;
    let broker_id = r.u64()?;
    let log_end = r.u64()?;
    let epoch = r.u64()?;
    let segment_size = r.u64()?;
    let count = usize::from(r.u16()?);
    if count > HA_SAMPLES_MAX {
        return Err(HaFrameError::TooManySamples {
            count,
            max: HA_SAMPLES_MAX,
        });
    }
    // Check the whole list is present before allocating for it.
    r.need(count * SAMPLE_LEN)?;
    let mut samples = Vec::with_capacity(count);
    for _ in 0..count {
        samples.push(RecordSample {
            offset: r.u64()?,
            size: r.u32()?,
            crc: r.u32()?,
        });
    }
    // A version-1 Hello ends after its samples: read it whole, so the master can answer
    // BadVersion instead of dropping the connection as malformed.
    let epochs = if version < 2 && r.buf.is_empty() {
        Vec::new()
    } else {
        decode_epochs(r)?
    };
    Ok(Hello {
        epochs,
        version,
        cluster,
        broker_name,
        broker_id,
        log_end,
        epoch,
        segment_size,
        samples,
    })
}

/// An epoch list: count, then the entries; bounded before anything is allocated.
fn decode_epochs(r: &mut Reader) -> Result<Vec<EpochEntry>, HaFrameError> {
    let count = usize::from(r.u16()?);
    if count > HA_EPOCHS_MAX {
        return Err(HaFrameError::TooManyEpochs {
            kind: r.kind,
            count,
            max: HA_EPOCHS_MAX,
        });
    }
    r.need(count * EPOCH_LEN)?;
    let mut epochs = Vec::with_capacity(count);
    for _ in 0..count {
        epochs.push(EpochEntry {
            epoch: r.u64()?,
            start: r.u64()?,
        });
    }
    Ok(epochs)
}
