//! Message body compression as RocketMQ producers and consumers do it (reference §8.3).
//!
//! A producer compresses the body of a single (non-batch) message larger than its threshold
//! with zlib and marks the message with sysFlag bits `COMPRESSED` (0x1) and compression type
//! `ZLIB` (0x300), as Java 5.x producers do; Java 4.x, the C++ core and ali-ons read such a
//! body as zlib from bit 0x1 alone. Consumers decompress a body whose sysFlag has bit 0x1,
//! reading the type from bits 8–10, where 0 also means zlib (older producers).
//!
//! Invariants:
//! - decompression never panics and never allocates more than [`DECOMPRESSED_BODY_MAX`]
//!   bytes: a corrupt stream, a truncated stream, trailing garbage, an unsupported type or an
//!   oversized result is an error naming the cause;
//! - `compress` followed by `decompress` gives back the original bytes.

use std::io::{Read, Write};

use flate2::read::ZlibDecoder;
use flate2::write::ZlibEncoder;
use flate2::Compression;

/// sysFlag bit: the body is compressed.
pub const COMPRESSED_FLAG: i32 = 0x1;
/// sysFlag mask of the compression type (bits 8–10).
pub const COMPRESSION_TYPE_MASK: i32 = 0x700;
/// sysFlag compression type LZ4.
pub const COMPRESSION_LZ4: i32 = 0x100;
/// sysFlag compression type ZSTD.
pub const COMPRESSION_ZSTD: i32 = 0x200;
/// sysFlag compression type ZLIB.
pub const COMPRESSION_ZLIB: i32 = 0x300;

/// Bodies over this many bytes are compressed by default (Java's
/// `compressMsgBodyOverHowmuch`, 4 KiB).
pub const COMPRESS_OVER_BYTES_DEFAULT: usize = 4 * 1024;
/// Default zlib level (Java's `compressLevel`, 5).
pub const COMPRESS_LEVEL_DEFAULT: u32 = 5;
/// Largest decompressed body accepted from a broker: 64 MiB, sixteen times RocketMQ's
/// default `maxMessageSize`. A larger result is refused instead of exhausting memory.
pub const DECOMPRESSED_BODY_MAX: usize = 64 * 1024 * 1024;

/// Compresses `body` with zlib at `level` (0–9, clamped). Returns `None` when the result is
/// not smaller than the input, so an incompressible body is sent as it is.
pub fn compress(body: &[u8], level: u32) -> Option<Vec<u8>> {
    let mut encoder = ZlibEncoder::new(
        Vec::with_capacity(body.len() / 2),
        Compression::new(level.min(9)),
    );
    // Writing into a Vec cannot fail.
    encoder.write_all(body).ok()?;
    let out = encoder.finish().ok()?;
    (out.len() < body.len()).then_some(out)
}

/// Decompresses a body stored with `sys_flag` (which must have [`COMPRESSED_FLAG`]).
///
/// # Errors
/// A text naming the problem: an unsupported compression type, a corrupt or truncated zlib
/// stream, bytes after its end, or a result over [`DECOMPRESSED_BODY_MAX`].
pub fn decompress(body: &[u8], sys_flag: i32) -> Result<Vec<u8>, String> {
    debug_assert!(sys_flag & COMPRESSED_FLAG != 0);
    match sys_flag & COMPRESSION_TYPE_MASK {
        0 | COMPRESSION_ZLIB => {}
        COMPRESSION_LZ4 => return Err("compressed body uses LZ4, which is not supported".into()),
        COMPRESSION_ZSTD => return Err("compressed body uses ZSTD, which is not supported".into()),
        other => {
            return Err(format!(
                "compressed body has unknown compression type {:#x}",
                other >> 8
            ))
        }
    }
    let mut decoder = ZlibDecoder::new(body);
    let mut out = Vec::with_capacity(body.len().saturating_mul(4).min(DECOMPRESSED_BODY_MAX));
    let limit = DECOMPRESSED_BODY_MAX as u64 + 1;
    (&mut decoder)
        .take(limit)
        .read_to_end(&mut out)
        .map_err(|e| format!("compressed body is corrupt: {e}"))?;
    if out.len() > DECOMPRESSED_BODY_MAX {
        return Err(format!(
            "compressed body expands to more than {DECOMPRESSED_BODY_MAX} bytes"
        ));
    }
    let consumed = decoder.total_in() as usize;
    if consumed != body.len() {
        return Err(format!(
            "compressed body has {} bytes after the end of its zlib stream",
            body.len() - consumed
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(len: usize) -> Vec<u8> {
        (0..len).map(|i| b"ferromq "[i % 8]).collect()
    }

    #[test]
    fn compress_then_decompress_gives_the_body_back() {
        let body = text(64 * 1024);
        let packed = compress(&body, COMPRESS_LEVEL_DEFAULT).expect("repetitive text shrinks");
        assert!(packed.len() < body.len() / 10, "{}", packed.len());
        let flag = COMPRESSED_FLAG | COMPRESSION_ZLIB;
        assert_eq!(decompress(&packed, flag).unwrap(), body);
        // Type 0 is zlib too (older producers set only bit 0x1).
        assert_eq!(decompress(&packed, COMPRESSED_FLAG).unwrap(), body);
    }

    #[test]
    fn incompressible_body_is_left_alone() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let noise: Vec<u8> = (0..8192)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        assert!(compress(&noise, COMPRESS_LEVEL_DEFAULT).is_none());
    }

    #[test]
    fn corrupt_truncated_trailing_and_unsupported_bodies_are_errors() {
        let packed = compress(&text(10_000), 5).unwrap();
        let flag = COMPRESSED_FLAG | COMPRESSION_ZLIB;
        let err = decompress(b"definitely not zlib", flag).unwrap_err();
        assert!(err.contains("corrupt"), "{err}");
        let err = decompress(&packed[..packed.len() / 2], flag).unwrap_err();
        assert!(err.contains("corrupt"), "{err}");
        let mut trailing = packed.clone();
        trailing.extend_from_slice(b"xx");
        let err = decompress(&trailing, flag).unwrap_err();
        assert!(err.contains("2 bytes after"), "{err}");
        let err = decompress(&packed, COMPRESSED_FLAG | COMPRESSION_LZ4).unwrap_err();
        assert!(err.contains("LZ4"), "{err}");
        let err = decompress(&packed, COMPRESSED_FLAG | 0x500).unwrap_err();
        assert!(err.contains("unknown"), "{err}");
    }

    #[test]
    fn a_zip_bomb_is_refused_at_the_limit() {
        let huge = vec![0u8; DECOMPRESSED_BODY_MAX + 1024];
        let packed = compress(&huge, 1).unwrap();
        let err = decompress(&packed, COMPRESSED_FLAG).unwrap_err();
        assert!(err.contains("expands to more than"), "{err}");
    }
}
