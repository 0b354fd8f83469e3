//! The broker's offset message id: store host, store port and CommitLog offset in hex.
//!
//! RocketMQ clients show this id as `offsetMsgId`, and `queryMsgById` decodes it back to the
//! CommitLog offset, so ferromq keeps the layout: 4 (IPv4) or 16 (IPv6) address bytes, the port
//! as a big-endian i32, the physical offset as a big-endian i64, in uppercase hex (32 or 56
//! characters).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// A decoded offset message id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageId {
    /// Address of the broker that stored the record.
    pub store_host: SocketAddr,
    /// CommitLog byte offset of the record.
    pub phys_offset: u64,
}

/// Why a message id string could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MessageIdError {
    /// Only 32 (IPv4) and 56 (IPv6) hex characters are valid lengths.
    #[error("message id has {0} characters; expected 32 (IPv4) or 56 (IPv6)")]
    Length(usize),
    /// A character outside `[0-9A-Fa-f]`.
    #[error("message id is not hexadecimal at character {0}")]
    NotHex(usize),
}

impl MessageId {
    /// Encodes as RocketMQ's uppercase hex text.
    pub fn encode(&self) -> String {
        let mut text = String::with_capacity(self.hex_len());
        self.write_hex(&mut text);
        text
    }

    /// Length of the hex text: 32 digits with an IPv4 store host, 56 with IPv6.
    pub fn hex_len(&self) -> usize {
        match self.store_host {
            std::net::SocketAddr::V4(_) => 32,
            std::net::SocketAddr::V6(_) => 56,
        }
    }

    /// Appends the hex text to `out`, digit by digit: no allocation beyond `out`'s growth
    /// (a `format!` per byte once made 29).
    pub fn write_hex(&self, out: &mut String) {
        // The digits go to a stack buffer first and into `out` in one step (a consumer
        // writes one id per message it decodes; per-char pushes were a visible share).
        let mut digits = HexDigits::default();
        match self.store_host.ip() {
            IpAddr::V4(ip) => digits.put(&ip.octets()),
            IpAddr::V6(ip) => digits.put(&ip.octets()),
        }
        digits.put(&i32::from(self.store_host.port()).to_be_bytes());
        digits.put(&self.phys_offset.to_be_bytes());
        out.push_str(digits.as_str());
    }

    /// Decodes the hex text; the length tells IPv4 from IPv6.
    pub fn decode(text: &str) -> Result<MessageId, MessageIdError> {
        let address_len = match text.len() {
            32 => 4,
            56 => 16,
            other => return Err(MessageIdError::Length(other)),
        };
        let mut bytes = Vec::with_capacity(text.len() / 2);
        for (index, pair) in text.as_bytes().chunks(2).enumerate() {
            let digits =
                std::str::from_utf8(pair).map_err(|_| MessageIdError::NotHex(index * 2))?;
            let byte =
                u8::from_str_radix(digits, 16).map_err(|_| MessageIdError::NotHex(index * 2))?;
            bytes.push(byte);
        }
        let ip = if address_len == 4 {
            IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]))
        } else {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&bytes[..16]);
            IpAddr::V6(Ipv6Addr::from(octets))
        };
        let port_bytes: [u8; 4] = bytes[address_len..address_len + 4]
            .try_into()
            .expect("4 bytes");
        let offset_bytes: [u8; 8] = bytes[address_len + 4..].try_into().expect("8 bytes");
        // The port travels as an i32; anything outside u16 cannot be a real port, keep the low bits.
        let port = i32::from_be_bytes(port_bytes) as u16;
        Ok(MessageId {
            store_host: SocketAddr::new(ip, port),
            phys_offset: u64::from_be_bytes(offset_bytes),
        })
    }
}

/// Upper-case hex digits of at most the longest message id (IPv6: 28 bytes, 56 digits).
struct HexDigits {
    digits: [u8; 56],
    len: usize,
}

impl Default for HexDigits {
    fn default() -> Self {
        HexDigits {
            digits: [0; 56],
            len: 0,
        }
    }
}

impl HexDigits {
    /// Appends two digits per byte; the callers' bytes fit by construction (see the type).
    fn put(&mut self, bytes: &[u8]) {
        const HEX: &[u8; 16] = b"0123456789ABCDEF";
        for b in bytes {
            self.digits[self.len] = HEX[usize::from(b >> 4)];
            self.digits[self.len + 1] = HEX[usize::from(b & 0xF)];
            self.len += 2;
        }
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.digits[..self.len]).expect("hex digits are ASCII")
    }
}

/// Appends `bytes` as uppercase hex, two digits per byte (Java's `UtilAll.bytes2string`),
/// without the formatting machinery: message ids and `UNIQ_KEY`s are written per message.
pub fn push_upper_hex(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for b in bytes {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xF)]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_id_matches_rocketmq_layout() {
        let id = MessageId {
            store_host: "127.0.0.1:10911".parse().unwrap(),
            phys_offset: 0x1234,
        };
        // 7F000001 | 00002A9F | 0000000000001234
        assert_eq!(id.encode(), "7F00000100002A9F0000000000001234");
        assert_eq!(MessageId::decode(&id.encode()).unwrap(), id);
    }

    #[test]
    fn ipv6_round_trips_and_bad_text_is_rejected() {
        let id = MessageId {
            store_host: "[::1]:10911".parse().unwrap(),
            phys_offset: u64::MAX >> 1,
        };
        assert_eq!(id.encode().len(), 56);
        assert_eq!(MessageId::decode(&id.encode()).unwrap(), id);
        assert_eq!(MessageId::decode("abc"), Err(MessageIdError::Length(3)));
        assert!(matches!(
            MessageId::decode("ZZ00000100002A9F0000000000001234"),
            Err(MessageIdError::NotHex(0))
        ));
    }
}
