//! The SEND_BATCH_MESSAGE (320) body: short records back to back (reference §8.6):
//! `total i32 | magic i32 | bodyCRC i32 | flag i32 | bodyLen i32 | body | propLen i16 | props`.

/// One message of a batch, borrowing the request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BatchEntry<'a> {
    pub flag: i32,
    pub body: &'a [u8],
    pub properties: &'a [u8],
}

/// Most messages in one batch.
const BATCH_ENTRIES_MAX: usize = 10_000;

/// Splits a batch body; the error names the entry and what is wrong.
pub(crate) fn decode_batch(bytes: &[u8]) -> Result<Vec<BatchEntry<'_>>, String> {
    let mut entries = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let index = entries.len();
        if index >= BATCH_ENTRIES_MAX {
            return Err(format!(
                "batch holds more than {BATCH_ENTRIES_MAX} messages"
            ));
        }
        let rest = &bytes[at..];
        let bad = |what: &str| format!("batch entry {index} at byte {at}: {what}");
        if rest.len() < 20 {
            return Err(bad("truncated header"));
        }
        let read_i32 =
            |from: usize| i32::from_be_bytes(rest[from..from + 4].try_into().expect("4 bytes"));
        let total = read_i32(0);
        let flag = read_i32(12);
        let body_len = read_i32(16);
        if total < 22 || total as usize > rest.len() || body_len < 0 {
            return Err(bad("bad total or body length"));
        }
        let total = total as usize;
        let body_end = 20 + body_len as usize;
        if body_end + 2 > total {
            return Err(bad("body runs past the entry"));
        }
        let props_len = u16::from_be_bytes([rest[body_end], rest[body_end + 1]]) as usize;
        if body_end + 2 + props_len != total {
            return Err(bad("lengths do not add up to the entry's total"));
        }
        entries.push(BatchEntry {
            flag,
            body: &rest[20..body_end],
            properties: &rest[body_end + 2..total],
        });
        at += total;
    }
    if entries.is_empty() {
        return Err("empty batch".into());
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(flag: i32, body: &[u8], props: &[u8]) -> Vec<u8> {
        let total = 20 + body.len() + 2 + props.len();
        let mut out = Vec::new();
        for value in [total as i32, 0, 0, flag, body.len() as i32] {
            out.extend_from_slice(&value.to_be_bytes());
        }
        out.extend_from_slice(body);
        out.extend_from_slice(&(props.len() as u16).to_be_bytes());
        out.extend_from_slice(props);
        out
    }

    #[test]
    fn splits_entries_and_rejects_damage() {
        let mut bytes = entry(1, b"one", b"UNIQ_KEY\x01a\x02");
        bytes.extend(entry(2, b"two", b""));
        let entries = decode_batch(&bytes).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!((entries[1].flag, entries[1].body), (2, &b"two"[..]));
        for cut in 1..bytes.len() {
            if cut != entry(1, b"one", b"UNIQ_KEY\x01a\x02").len() {
                assert!(decode_batch(&bytes[..cut]).is_err(), "cut at {cut}");
            }
        }
        assert!(decode_batch(b"").is_err());
    }
}
