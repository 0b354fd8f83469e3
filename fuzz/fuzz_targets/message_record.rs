//! `message_record`: `RecordView::parse` / `parse_structure` on arbitrary bytes.
//!
//! The first input byte is a control byte: bit 0 set means "seal" — write a valid CRC trailer
//! over the record the TOTALSIZE field describes before parsing, so the fuzzer gets past the
//! whole-record CRC and explores the structure checks and the re-encoding below.
//!
//! Checks, for any input:
//! 1. `parse` and `parse_structure` never panic; `parse` succeeding implies `parse_structure`
//!    succeeds with the same fields.
//! 2. A parsed view is consistent: TOTALSIZE equals the length of the prefix it covers; body,
//!    topic and properties are in-bounds, ordered sub-slices of it, the properties run to the
//!    end of the record and hold the 20-byte CRC property.
//! 3. Re-encoding the parsed fields with `DraftRecord::encode` + `finalize` gives a record
//!    that parses to the same fields (magic follows the topic length; a separator is added
//!    before the CRC property when the properties lack one; BODYCRC is recomputed), and that
//!    is byte-identical to the input when the input was already in that canonical form.

#![no_main]

use ferromq_protocol::{body_crc, seal, DraftRecord, RecordError, RecordView, MAGIC_V1, MAGIC_V2};
use libfuzzer_sys::fuzz_target;

const CRC_TRAILER_LEN: usize = 20;
const CRC_PREFIX: &[u8] = b"__CRC32#\x01";
const SEP: u8 = 0x02;

fn within(outer: &[u8], inner: &[u8]) -> (usize, usize) {
    let o = outer.as_ptr() as usize;
    let i = inner.as_ptr() as usize;
    assert!(i >= o && i + inner.len() <= o + outer.len(), "slice outside the record");
    (i - o, i - o + inner.len())
}

fn same_fields(a: &RecordView<'_>, b: &RecordView<'_>) -> bool {
    a.queue_id == b.queue_id
        && a.flag == b.flag
        && a.queue_offset == b.queue_offset
        && a.phys_offset == b.phys_offset
        && a.sys_flag == b.sys_flag
        && a.born_timestamp_ms == b.born_timestamp_ms
        && a.born_host == b.born_host
        && a.store_timestamp_ms == b.store_timestamp_ms
        && a.store_host == b.store_host
        && a.reconsume_times == b.reconsume_times
        && a.prepared_tx_offset == b.prepared_tx_offset
        && a.body == b.body
        && a.topic == b.topic
}

fn check(buf: &[u8]) {
    let structure = RecordView::parse_structure(buf);
    let Ok(view) = RecordView::parse(buf) else {
        return;
    };
    let structure = structure.expect("parse succeeded but parse_structure failed");
    assert!(same_fields(&view, &structure) && view.magic == structure.magic);

    // 2. Consistency.
    let total = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
    let rec = view.as_bytes();
    assert_eq!(view.total_size(), total);
    assert_eq!(rec.len(), total);
    assert_eq!(rec.as_ptr(), buf.as_ptr(), "record does not start at the input");
    assert_eq!(view.magic, u32::from_be_bytes(buf[4..8].try_into().unwrap()));
    assert!(view.magic == MAGIC_V1 || view.magic == MAGIC_V2);
    let topic_len_size = if view.magic == MAGIC_V2 { 2 } else { 1 };
    let (b0, b1) = within(rec, view.body);
    let (t0, t1) = within(rec, view.topic);
    let (p0, p1) = within(rec, view.properties.0);
    assert_eq!(t0, b1 + topic_len_size, "topic does not follow the body");
    assert_eq!(p0, t1 + 2, "properties do not follow the topic");
    assert_eq!(p1, total, "properties do not end the record");
    assert_eq!(
        u32::from_be_bytes(rec[b0 - 4..b0].try_into().unwrap()) as usize,
        view.body.len()
    );
    let props = view.properties.0;
    assert!(
        props.len() >= CRC_TRAILER_LEN,
        "record parsed but its PROPERTIES ({} bytes) cannot hold the 20-byte CRC property",
        props.len()
    );
    assert_eq!(&props[props.len() - CRC_TRAILER_LEN..][..CRC_PREFIX.len()], CRC_PREFIX);
    // Exercise the accessors.
    let _ = view.topic_str();
    let _ = view.tags();
    for (k, v) in view.properties.iter() {
        let _ = (k.len(), v.len());
    }

    // 3. Re-encode.
    let Ok(topic) = std::str::from_utf8(view.topic) else {
        return; // DraftRecord needs a &str topic
    };
    let user_props = &props[..props.len() - CRC_TRAILER_LEN];
    let draft = DraftRecord {
        topic,
        queue_id: view.queue_id,
        flag: view.flag,
        sys_flag: view.sys_flag,
        born_timestamp_ms: view.born_timestamp_ms,
        born_host: view.born_host,
        store_host: view.store_host,
        reconsume_times: view.reconsume_times,
        prepared_tx_offset: view.prepared_tx_offset,
        body: view.body,
        properties: user_props,
    };
    let needs_sep = !user_props.is_empty() && user_props.last() != Some(&SEP);
    let mut encoded = match draft.encode() {
        Ok(e) => e,
        Err(RecordError::FieldTooLarge { size, max, .. }) if size > max => {
            // Only possible for a V2 topic over 32767 bytes or properties near 65535 bytes.
            assert!(topic.len() > i16::MAX as usize || props.len() + 1 > i16::MAX as usize);
            return;
        }
        Err(e) => panic!("re-encoding parsed fields failed: {e}"),
    };
    encoded.finalize(view.queue_offset, view.phys_offset, view.store_timestamp_ms);
    let again = RecordView::parse(encoded.as_bytes())
        .unwrap_or_else(|e| panic!("re-encoded record does not parse: {e}"));
    assert!(same_fields(&view, &again), "re-encoded record has other fields\n{view:?}\n{again:?}");
    let expected_magic = if topic.len() > 127 { MAGIC_V2 } else { MAGIC_V1 };
    assert_eq!(again.magic, expected_magic);
    assert_eq!(again.body_crc, body_crc(view.body));
    let again_props = again.properties.0;
    let again_user = &again_props[..again_props.len() - CRC_TRAILER_LEN];
    if needs_sep {
        assert_eq!(&again_user[..again_user.len() - 1], user_props);
        assert_eq!(again_user.last(), Some(&SEP));
    } else {
        assert_eq!(again_user, user_props);
    }
    // Canonical input: same magic, correct BODYCRC, separator present, ports that fit u16
    // (the port field is an i32 that the view reads as u16) => byte-identical.
    let port_ok = |at: usize| rec[at] == 0 && rec[at + 1] == 0;
    let born_len = if view.sys_flag & 0x10 != 0 { 20 } else { 8 };
    let store_len = if view.sys_flag & 0x20 != 0 { 20 } else { 8 };
    let born_port_at = 48 + born_len - 4;
    let store_port_at = 48 + born_len + 8 + store_len - 4;
    if view.magic == expected_magic
        && view.body_crc == body_crc(view.body)
        && !needs_sep
        && port_ok(born_port_at)
        && port_ok(store_port_at)
    {
        assert_eq!(encoded.as_bytes(), rec, "canonical record did not re-encode byte-exactly");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, rest)) = data.split_first() else {
        return;
    };
    if ctl & 1 == 0 {
        check(rest);
        return;
    }
    let mut buf = rest.to_vec();
    if buf.len() >= 4 {
        let total = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
        if (CRC_TRAILER_LEN..=buf.len()).contains(&total) {
            let at = total - CRC_TRAILER_LEN;
            buf[at..at + CRC_PREFIX.len()].copy_from_slice(CRC_PREFIX);
            buf[total - 1] = SEP;
            seal(&mut buf[..total]);
        }
    }
    check(&buf);
});
