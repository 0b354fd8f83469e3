//! Messages: the [`Message`] a producer sends and the [`MessageExt`] a consumer receives.
//!
//! Invariants:
//! - a `Message` that passed [`Message::validate`] encodes to properties Java's
//!   `string2messageProperties` reads back identically: no name or value holds the 0x01/0x02
//!   separators, and user properties never shadow the reserved names the client sets
//!   (`TAGS`, `KEYS`, `UNIQ_KEY`, `DELAY`, `WAIT`);
//! - every sent message carries a fresh `UNIQ_KEY` of 32 uppercase hex characters, unique
//!   within this process and, with overwhelming likelihood, across processes;
//! - decoding a pull body never panics: malformed bytes, including a compressed body that
//!   cannot be decompressed, are an error naming the record index;
//! - every consumer path gets bodies decompressed from [`decode_pull_body`], so no consumer
//!   ever sees zlib bytes in place of what the producer sent.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use ferromq_protocol::message::message_id::push_upper_hex;
use ferromq_protocol::message::properties::{NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR};
use ferromq_protocol::{property_names, MessageId, Properties, RecordView};

use crate::compression;

/// Property names the client sets itself; user properties may not use them.
pub const RESERVED_PROPERTIES: &[&str] = &[
    property_names::TAGS,
    property_names::KEYS,
    property_names::UNIQ_KEY,
    property_names::DELAY,
    "WAIT",
    property_names::CRC32,
];

/// Longest topic name (RocketMQ's limit).
pub const TOPIC_NAME_MAX: usize = 127;

/// A message to send.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Message {
    /// Topic.
    pub topic: String,
    /// Body.
    pub body: Bytes,
    /// Tag (one; `||` is not allowed in a tag).
    pub tags: Option<String>,
    /// Keys (indexed by the broker; stored space-separated).
    pub keys: Vec<String>,
    /// Delay level (1-based, the broker's `messageDelayLevel`); `None` for immediate delivery.
    pub delay_level: Option<u32>,
    /// User properties.
    pub properties: BTreeMap<String, String>,
    /// Java's `flag` (an opaque int the application may use).
    pub flag: i32,
}

impl Message {
    /// A message with `topic` and `body` and nothing else.
    pub fn new(topic: impl Into<String>, body: impl Into<Bytes>) -> Self {
        Message {
            topic: topic.into(),
            body: body.into(),
            ..Message::default()
        }
    }

    /// Sets the tag.
    pub fn with_tags(mut self, tags: impl Into<String>) -> Self {
        self.tags = Some(tags.into());
        self
    }

    /// Adds a key.
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.keys.push(key.into());
        self
    }

    /// Sets the delay level.
    pub fn with_delay_level(mut self, level: u32) -> Self {
        self.delay_level = Some(level);
        self
    }

    /// Adds a user property.
    pub fn with_property(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.insert(name.into(), value.into());
        self
    }

    /// Sets the flag.
    pub fn with_flag(mut self, flag: i32) -> Self {
        self.flag = flag;
        self
    }

    /// Checks the topic name, tag, keys and properties.
    ///
    /// # Errors
    /// A text naming the first problem found.
    pub fn validate(&self) -> Result<(), String> {
        validate_topic(&self.topic)?;
        if let Some(tags) = &self.tags {
            if tags.is_empty() || tags.contains("||") {
                return Err(format!("tag {tags:?} is empty or contains \"||\""));
            }
            check_text("tag", tags)?;
        }
        for key in &self.keys {
            if key.is_empty() || key.contains(' ') {
                return Err(format!("key {key:?} is empty or contains a space"));
            }
            check_text("key", key)?;
        }
        if self.delay_level == Some(0) {
            return Err("delay level 0 is not a level; leave it unset".into());
        }
        for (name, value) in &self.properties {
            if name.is_empty() {
                return Err("empty property name".into());
            }
            if RESERVED_PROPERTIES.contains(&name.as_str()) {
                return Err(format!("property name {name} is reserved"));
            }
            check_text("property name", name)?;
            check_text("property value", value)?;
        }
        Ok(())
    }

    /// Encodes the properties string sent in the header, with `uniq_key` as `UNIQ_KEY`.
    pub(crate) fn encode_properties(&self, uniq_key: &str) -> String {
        // Written straight into the text (a list of pairs, then the encoder's buffer, was two
        // allocations per send).
        let mut out = String::with_capacity(self.properties_room());
        self.write_properties(uniq_key, &mut out);
        out
    }

    /// Room enough for the properties text in most cases (a hint for a buffer's capacity).
    fn properties_room(&self) -> usize {
        let user_len: usize = self
            .properties
            .iter()
            .map(|(n, v)| n.len() + v.len() + 2)
            .sum();
        PROPERTIES_FIXED_ROOM + self.keys_text_len() + user_len
    }

    /// Length of the `KEYS` value (the keys joined by spaces); no `KEYS` pair when zero.
    fn keys_text_len(&self) -> usize {
        self.keys.iter().map(String::len).sum::<usize>() + self.keys.len().saturating_sub(1)
    }

    /// Appends the properties text to `out`; the pairs and their order are Java's.
    fn write_properties(&self, uniq_key: &str, out: &mut impl TextSink) {
        if let Some(tags) = &self.tags {
            put_property(out, property_names::TAGS, tags);
        }
        if self.keys_text_len() > 0 {
            out.push_text(property_names::KEYS);
            out.push_byte(NAME_VALUE_SEPARATOR);
            for (i, key) in self.keys.iter().enumerate() {
                if i > 0 {
                    out.push_byte(b' ');
                }
                out.push_text(key);
            }
            out.push_byte(PROPERTY_SEPARATOR);
        }
        if let Some(level) = self.delay_level {
            put_property(out, property_names::DELAY, &level.to_string());
        }
        put_property(out, "WAIT", "true");
        put_property(out, property_names::UNIQ_KEY, uniq_key);
        for (name, value) in &self.properties {
            put_property(out, name, value);
        }
    }
}

/// Appends one `name`, value pair of the properties text.
fn put_property(out: &mut impl TextSink, name: &str, value: &str) {
    out.push_text(name);
    out.push_byte(NAME_VALUE_SEPARATOR);
    out.push_text(value);
    out.push_byte(PROPERTY_SEPARATOR);
}

/// Where property text is written: the header's `String` or a batch body's bytes.
trait TextSink {
    fn push_text(&mut self, text: &str);
    /// An ASCII byte (a separator).
    fn push_byte(&mut self, byte: u8);
}

impl TextSink for String {
    fn push_text(&mut self, text: &str) {
        self.push_str(text);
    }

    fn push_byte(&mut self, byte: u8) {
        debug_assert!(byte.is_ascii());
        self.push(char::from(byte));
    }
}

impl TextSink for Vec<u8> {
    fn push_text(&mut self, text: &str) {
        self.extend_from_slice(text.as_bytes());
    }

    fn push_byte(&mut self, byte: u8) {
        self.push(byte);
    }
}

/// Room for the properties every send carries (`WAIT`, `UNIQ_KEY` with its 32 digits) and
/// short tags and delay, before keys and user properties.
const PROPERTIES_FIXED_ROOM: usize = 96;

fn check_text(what: &str, text: &str) -> Result<(), String> {
    if text.bytes().any(|b| b == 0x01 || b == 0x02) {
        return Err(format!(
            "{what} {text:?} contains a property separator (0x01 or 0x02)"
        ));
    }
    Ok(())
}

/// Checks a topic name: 1 to 127 characters of `[A-Za-z0-9_%|-]`.
///
/// # Errors
/// A text naming the problem.
pub fn validate_topic(topic: &str) -> Result<(), String> {
    if topic.is_empty() || topic.len() > TOPIC_NAME_MAX {
        return Err(format!(
            "topic name must have 1 to {TOPIC_NAME_MAX} characters, got {}",
            topic.len()
        ));
    }
    if let Some(c) = topic
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '%' | '|' | '-')))
    {
        return Err(format!("topic name {topic:?} contains {c:?}"));
    }
    Ok(())
}

/// A fresh client message id (`UNIQ_KEY`): 32 uppercase hex characters made of the process id
/// (4 bytes), a per-process random-ish start stamp (4 bytes) and a counter (8 bytes).
pub fn new_uniq_key() -> String {
    static PREFIX: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let prefix = *PREFIX.get_or_init(|| {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let stamp = nanos.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        (u64::from(std::process::id()) << 32) | stamp
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut key = String::with_capacity(32);
    push_upper_hex(&mut key, &prefix.to_be_bytes());
    push_upper_hex(&mut key, &n.to_be_bytes());
    key
}

/// A message received from a broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageExt {
    /// Topic (shared by the messages of one pull that have the same topic).
    pub topic: Arc<str>,
    /// Queue id.
    pub queue_id: i32,
    /// Broker group the message was pulled from (shared by the messages of one pull).
    pub broker_name: Arc<str>,
    /// Offset in the queue.
    pub queue_offset: u64,
    /// Offset in the broker's CommitLog.
    pub commit_log_offset: u64,
    /// Body, decompressed when it was stored compressed (see `sys_flag`).
    pub body: Bytes,
    /// Tag.
    pub tags: Option<String>,
    /// Keys.
    pub keys: Vec<String>,
    /// User properties (reserved names and ferromq's record CRC property excluded).
    pub properties: BTreeMap<String, String>,
    /// Client message id: `UNIQ_KEY` when the producer set one, else the offset message id.
    pub msg_id: String,
    /// Producer's timestamp, ms.
    pub born_timestamp_ms: i64,
    /// Broker's timestamp, ms.
    pub store_timestamp_ms: i64,
    /// Producer address.
    pub born_host: SocketAddr,
    /// Broker address.
    pub store_host: SocketAddr,
    /// Deliveries so far minus one.
    pub reconsume_times: i32,
    /// Message sysFlag (reference §8.3) as stored, except that the COMPRESSED bit (0x1) is
    /// cleared once the body is decompressed; the compression type bits (0x700) stay.
    pub sys_flag: i32,
    /// Java's `flag`.
    pub flag: i32,
    /// Delay level, if the message carried one.
    pub delay_level: Option<u32>,
}

impl MessageExt {
    /// Broker message id (store address + CommitLog offset, Java's `offsetMsgId`), written
    /// when asked for: most consumers never read it, and a field cost a string per message.
    pub fn offset_msg_id(&self) -> String {
        MessageId {
            store_host: self.store_host,
            phys_offset: self.commit_log_offset,
        }
        .encode()
    }
}

/// Decodes a pull body: stored records back to back.
///
/// # Errors
/// A text naming the index of the first record that cannot be parsed.
pub fn decode_pull_body(body: &Bytes, broker_name: &str) -> Result<Vec<MessageExt>, String> {
    let mut out = Vec::with_capacity(count_records(body));
    let mut names = SharedNames::new(broker_name);
    let mut rest = &body[..];
    while !rest.is_empty() {
        let view = RecordView::parse_structure(rest)
            .map_err(|e| format!("record {} of the pull body: {e}", out.len()))?;
        let size = view.total_size();
        let message = message_from_view(&view, body, &mut names)
            .map_err(|e| format!("record {} of the pull body: {e}", out.len()))?;
        out.push(message);
        rest = &rest[size..];
    }
    Ok(out)
}

/// The broker name and topics of one pull's messages, each allocated once and shared (a
/// pull's records are of one queue, so nearly always of one topic).
struct SharedNames {
    broker_name: Arc<str>,
    /// The topic of the last record decoded.
    topic: Option<Arc<str>>,
}

impl SharedNames {
    fn new(broker_name: &str) -> SharedNames {
        SharedNames {
            broker_name: Arc::from(broker_name),
            topic: None,
        }
    }

    /// `topic` as a shared string: the last one when it is the same text.
    fn topic(&mut self, topic: &str) -> Arc<str> {
        match &self.topic {
            Some(last) if &**last == topic => Arc::clone(last),
            _ => Arc::clone(self.topic.insert(Arc::from(topic))),
        }
    }
}

/// The fixed fields of a stored record (reference §8.3, 91 bytes with IPv4 hosts): no
/// record is shorter.
const RECORD_FIXED_LEN: usize = 91;

/// The records of a pull body, counted by their size fields alone (for the vector's
/// capacity: a message is a few hundred bytes, growing the vector moved each one again).
/// Stops at the first size that cannot be a record's, so a hostile body reserves at most one
/// slot per [`RECORD_FIXED_LEN`] bytes; the decoder then says what is wrong.
fn count_records(body: &[u8]) -> usize {
    let (mut count, mut rest) = (0, body);
    while let Some(size) = rest.get(..4) {
        let size = u32::from_be_bytes(size.try_into().expect("4 bytes")) as usize;
        if size < RECORD_FIXED_LEN || size > rest.len() {
            break;
        }
        count += 1;
        rest = &rest[size..];
    }
    count
}

/// Builds a [`MessageExt`] from a stored record of `pull_body`; a compressed body (sysFlag bit
/// 0x1) is decompressed here, the one place every consumer path decodes records, and the bit
/// cleared, as Java's decoder does. An uncompressed body shares `pull_body`'s buffer (no copy
/// per message; a message kept after the others of its pull were dropped keeps that pull's
/// buffer, at most a pull's byte limit, alive).
fn message_from_view(
    view: &RecordView<'_>,
    pull_body: &Bytes,
    names: &mut SharedNames,
) -> Result<MessageExt, String> {
    let (body, sys_flag) = if view.sys_flag & compression::COMPRESSED_FLAG != 0 {
        let body = compression::decompress(view.body, view.sys_flag).map_err(|e| {
            format!(
                "message at queue offset {} of {}-{}: {e}",
                view.queue_offset,
                view.topic_str(),
                view.queue_id
            )
        })?;
        (
            Bytes::from(body),
            view.sys_flag & !compression::COMPRESSED_FLAG,
        )
    } else {
        (pull_body.slice_ref(view.body), view.sys_flag)
    };
    let read = ReadProperties::of(view.properties);
    let msg_id = match read.uniq_key {
        Some(uniq_key) => uniq_key.to_string(),
        None => MessageId {
            store_host: view.store_host,
            phys_offset: view.phys_offset,
        }
        .encode(),
    };
    Ok(MessageExt {
        topic: names.topic(view.topic_str()),
        queue_id: view.queue_id as i32,
        broker_name: Arc::clone(&names.broker_name),
        queue_offset: view.queue_offset,
        commit_log_offset: view.phys_offset,
        body,
        tags: read.tags.map(str::to_string),
        keys: read
            .keys
            .map(|k| {
                k.split(' ')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
        properties: read.user,
        msg_id,
        born_timestamp_ms: view.born_timestamp_ms,
        store_timestamp_ms: view.store_timestamp_ms,
        born_host: view.born_host,
        store_host: view.store_host,
        reconsume_times: view.reconsume_times,
        sys_flag,
        flag: view.flag,
        delay_level: read.delay.and_then(|d| d.parse().ok()),
    })
}

/// A stored record's properties, read in one pass: the reserved ones a [`MessageExt`] has
/// fields for, each as `Properties::get_str` finds it (the first property of that name; `None`
/// when its value is not UTF-8), and the user ones (pairs that are not UTF-8 are skipped; a
/// repeated name keeps its last value).
struct ReadProperties<'a> {
    tags: Option<&'a str>,
    keys: Option<&'a str>,
    uniq_key: Option<&'a str>,
    delay: Option<&'a str>,
    user: BTreeMap<String, String>,
}

impl<'a> ReadProperties<'a> {
    fn of(props: Properties<'a>) -> ReadProperties<'a> {
        // Outer `Some`: the name was seen (only its first value counts).
        let (mut tags, mut keys, mut uniq_key, mut delay) = (None, None, None, None);
        let mut user = BTreeMap::new();
        for (name, value) in props.iter() {
            // Validated only for the properties kept (most records carry only reserved
            // ones a message has no field for).
            let value = || std::str::from_utf8(value).ok();
            let slot = match name {
                n if n == property_names::TAGS.as_bytes() => &mut tags,
                n if n == property_names::KEYS.as_bytes() => &mut keys,
                n if n == property_names::UNIQ_KEY.as_bytes() => &mut uniq_key,
                n if n == property_names::DELAY.as_bytes() => &mut delay,
                _ => {
                    if let Ok(name) = std::str::from_utf8(name) {
                        if !RESERVED_PROPERTIES.contains(&name) {
                            if let Some(value) = value() {
                                user.insert(name.to_string(), value.to_string());
                            }
                        }
                    }
                    continue;
                }
            };
            if slot.is_none() {
                *slot = Some(value());
            }
        }
        ReadProperties {
            tags: tags.flatten(),
            keys: keys.flatten(),
            uniq_key: uniq_key.flatten(),
            delay: delay.flatten(),
            user,
        }
    }
}

/// Encodes a SEND_BATCH_MESSAGE body (reference §8.6): per message `total i32 | magic 0 |
/// bodyCRC 0 | flag i32 | bodyLen i32 | body | propLen i16 | props`, with `ids[i]` as the
/// `UNIQ_KEY` of `messages[i]`. Written in place into one buffer sized up front (a properties
/// text per message, then a copy, was an allocation and a copy per message).
///
/// # Errors
/// A text when a message's properties exceed 32767 bytes.
pub(crate) fn encode_batch(messages: &[Message], ids: &[String]) -> Result<Vec<u8>, String> {
    let room: usize = messages
        .iter()
        .map(|m| BATCH_ENTRY_FIXED + m.body.len() + m.properties_room())
        .sum();
    let mut out = Vec::with_capacity(room);
    for (index, (msg, id)) in messages.iter().zip(ids).enumerate() {
        let start = out.len();
        out.extend_from_slice(&0i32.to_be_bytes()); // total, set below
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&msg.flag.to_be_bytes());
        out.extend_from_slice(&(msg.body.len() as i32).to_be_bytes());
        out.extend_from_slice(&msg.body);
        let props_at = out.len();
        out.extend_from_slice(&0i16.to_be_bytes()); // propLen, set below
        msg.write_properties(id, &mut out);
        let props_len = out.len() - props_at - 2;
        let props_len = i16::try_from(props_len).map_err(|_| {
            format!(
                "batch message {index}: properties are {props_len} bytes, more than {}",
                i16::MAX
            )
        })?;
        out[props_at..props_at + 2].copy_from_slice(&props_len.to_be_bytes());
        let total = (out.len() - start) as i32;
        out[start..start + 4].copy_from_slice(&total.to_be_bytes());
    }
    Ok(out)
}

/// Bytes of a batch entry besides its body and properties: five i32 fields and propLen.
const BATCH_ENTRY_FIXED: usize = 22;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniq_keys_are_32_hex_and_distinct() {
        let a = new_uniq_key();
        let b = new_uniq_key();
        assert_eq!(a.len(), 32);
        assert!(a
            .chars()
            .all(|c| c.is_ascii_digit() || ('A'..='F').contains(&c)));
        assert_ne!(a, b);
        // The same prefix, then a counter (other tests may take keys in between).
        assert_eq!(a[..16], b[..16]);
        let counter = |k: &str| u64::from_str_radix(&k[16..], 16).unwrap();
        assert!(counter(&b) > counter(&a), "{a} then {b}");
    }

    #[test]
    fn validation_rejects_reserved_and_separators() {
        let m = Message::new("T", "x").with_property("KEYS", "v");
        assert!(m.validate().unwrap_err().contains("reserved"));
        let m = Message::new("T", "x").with_property("a", "b\u{1}c");
        assert!(m.validate().unwrap_err().contains("separator"));
        assert!(Message::new("bad topic", "x").validate().is_err());
        assert!(Message::new("T", "x").with_tags("a||b").validate().is_err());
        assert!(Message::new("T", "x").with_key("a b").validate().is_err());
        assert!(Message::new("T", "x")
            .with_tags("t")
            .with_key("k")
            .with_property("p", "v")
            .validate()
            .is_ok());
    }

    /// Splits a SEND_BATCH_MESSAGE body into (flag, body, properties) per entry, checking
    /// each entry's total, magic and CRC fields.
    fn split_batch(mut bytes: &[u8]) -> Vec<(i32, Vec<u8>, Vec<u8>)> {
        let i32_at = |b: &[u8], at: usize| i32::from_be_bytes(b[at..at + 4].try_into().unwrap());
        let mut entries = Vec::new();
        while !bytes.is_empty() {
            let total = i32_at(bytes, 0) as usize;
            assert_eq!(
                (i32_at(bytes, 4), i32_at(bytes, 8)),
                (0, 0),
                "magic, bodyCRC"
            );
            let body_len = i32_at(bytes, 16) as usize;
            let body = bytes[20..20 + body_len].to_vec();
            let at = 20 + body_len;
            let props_len = i16::from_be_bytes([bytes[at], bytes[at + 1]]) as usize;
            assert_eq!(
                total,
                at + 2 + props_len,
                "total of entry {}",
                entries.len()
            );
            let props = bytes[at + 2..at + 2 + props_len].to_vec();
            entries.push((i32_at(bytes, 12), body, props));
            bytes = &bytes[total..];
        }
        entries
    }

    #[test]
    fn a_batch_body_holds_each_message_with_the_header_properties_text() {
        let messages = vec![
            Message::new("T", "first")
                .with_tags("t")
                .with_key("k1")
                .with_key("k2"),
            Message::new("T", "").with_property("p", "v"),
            Message::new("T", vec![7u8; 300]).with_flag(5),
        ];
        let ids: Vec<String> = ["A1", "B2", "C3"].map(String::from).to_vec();
        let entries = split_batch(&encode_batch(&messages, &ids).expect("encode"));
        assert_eq!(entries.len(), 3);
        for ((flag, body, props), (m, id)) in entries.iter().zip(messages.iter().zip(&ids)) {
            assert_eq!(*flag, m.flag);
            assert_eq!(body[..], m.body[..]);
            assert_eq!(props[..], *m.encode_properties(id).as_bytes());
        }
        assert_eq!(Properties(&entries[0].2).get_str("KEYS"), Some("k1 k2"));
        assert_eq!(Properties(&entries[2].2).get_str("UNIQ_KEY"), Some("C3"));
    }

    #[test]
    fn a_batch_message_with_properties_past_i16_is_refused() {
        let long = Message::new("T", "x").with_property("p", "v".repeat(i16::MAX as usize));
        let messages = vec![Message::new("T", "ok"), long];
        let ids = vec!["A".to_string(), "B".to_string()];
        let error = encode_batch(&messages, &ids).expect_err("too long");
        assert!(
            error.starts_with("batch message 1: properties are "),
            "{error}"
        );
    }

    #[test]
    fn properties_round_trip_through_the_protocol_parser() {
        let m = Message::new("T", "x")
            .with_tags("t")
            .with_key("k1")
            .with_key("k2")
            .with_delay_level(3)
            .with_property("p", "v");
        let text = m.encode_properties("ABC");
        let p = Properties(text.as_bytes());
        assert_eq!(p.get_str("TAGS"), Some("t"));
        assert_eq!(p.get_str("KEYS"), Some("k1 k2"));
        assert_eq!(p.get_str("DELAY"), Some("3"));
        assert_eq!(p.get_str("UNIQ_KEY"), Some("ABC"));
        assert_eq!(p.get_str("p"), Some("v"));
    }

    /// The text is the protocol encoder's over Java's pairs in Java's order, for messages
    /// with and without each optional part (keys that join to nothing are left out).
    #[test]
    fn properties_are_the_encoders_text_of_javas_pairs() {
        let plain = Message::new("T", "x");
        let messages = [
            plain.clone(),
            plain.clone().with_tags("t").with_delay_level(18),
            plain.clone().with_key("only"),
            plain.clone().with_key(""),
            plain.clone().with_key("").with_key(""),
            plain
                .clone()
                .with_key("k1")
                .with_key("k2")
                .with_property("b", "2")
                .with_property("a", "long ".repeat(40)),
        ];
        for m in messages {
            let keys = m.keys.join(" ");
            let delay = m.delay_level.map(|l| l.to_string());
            let mut pairs = Vec::new();
            pairs.extend(m.tags.as_deref().map(|t| ("TAGS", t)));
            pairs.extend((!keys.is_empty()).then_some(("KEYS", keys.as_str())));
            pairs.extend(delay.as_deref().map(|d| ("DELAY", d)));
            pairs.push(("WAIT", "true"));
            pairs.push(("UNIQ_KEY", "ABC"));
            pairs.extend(m.properties.iter().map(|(n, v)| (n.as_str(), v.as_str())));
            let expected = String::from_utf8(Properties::encode(pairs)).unwrap();
            assert_eq!(m.encode_properties("ABC"), expected, "{m:?}");
        }
    }

    /// The one-pass read agrees with a lookup per name (`Properties::get_str`, first of a
    /// name, `None` when not UTF-8) and with collecting the user pairs (last value wins).
    #[test]
    fn one_pass_property_read_matches_lookups_per_name() {
        let mut raw = Vec::new();
        for (name, value) in [
            (&b"TAGS"[..], &b"\xff\xfe"[..]),
            (b"TAGS", b"second"),
            (b"KEYS", b"k1 k2"),
            (b"KEYS", b"other"),
            (b"UNIQ_KEY", b"ABC"),
            (b"user", b"1"),
            (b"user", b"2"),
            (b"bad\xff", b"x"),
            (b"WAIT", b"true"),
            (b"__CRC32#", b"0000000001"),
        ] {
            raw.extend_from_slice(name);
            raw.push(0x01);
            raw.extend_from_slice(value);
            raw.push(0x02);
        }
        raw.extend_from_slice(b"no-separator\x02");
        let props = Properties(&raw);
        let read = ReadProperties::of(props);
        assert_eq!(read.tags, props.get_str("TAGS"));
        assert_eq!(read.tags, None, "the first TAGS is not UTF-8");
        assert_eq!(read.keys, Some("k1 k2"));
        assert_eq!(read.uniq_key, props.get_str("UNIQ_KEY"));
        assert_eq!(read.delay, None);
        let user: Vec<_> = read
            .user
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        assert_eq!(user, [("user", "2")]);
    }

    /// A record of `topic` stored at `phys_offset`, with `properties`.
    fn record(topic: &str, phys_offset: u64, properties: &[u8]) -> Vec<u8> {
        let host: SocketAddr = "10.1.2.3:10911".parse().unwrap();
        let draft = ferromq_protocol::DraftRecord::plain(topic, 1, b"body", properties, host, 7);
        let mut record = draft.encode().unwrap();
        record.finalize(phys_offset / 100, phys_offset, 9);
        record.as_bytes().to_vec()
    }

    #[test]
    fn a_pull_decodes_each_records_topic_and_ids_sharing_the_names() {
        let uniq = Properties::encode([(property_names::UNIQ_KEY, "ABC")]);
        let mut body = Vec::new();
        for (topic, at, props) in [
            ("A", 100, &uniq[..]),
            ("A", 200, b"".as_slice()),
            ("B", 300, b"".as_slice()),
            ("A", 400, b"".as_slice()),
        ] {
            body.extend_from_slice(&record(topic, at, props));
        }
        let messages = decode_pull_body(&Bytes::from(body), "broker-x").unwrap();
        let topics: Vec<&str> = messages.iter().map(|m| &*m.topic).collect();
        assert_eq!(topics, ["A", "A", "B", "A"]);
        assert!(Arc::ptr_eq(&messages[0].topic, &messages[1].topic));
        assert!(messages.iter().all(|m| &*m.broker_name == "broker-x"
            && Arc::ptr_eq(&m.broker_name, &messages[0].broker_name)));
        // The client id is UNIQ_KEY when set, else the broker id, which every message has.
        assert_eq!(messages[0].msg_id, "ABC");
        assert_eq!(
            messages[0].offset_msg_id(),
            "0A01020300002A9F0000000000000064"
        );
        for m in &messages[1..] {
            assert_eq!(m.msg_id, m.offset_msg_id());
            let id = MessageId::decode(&m.msg_id).unwrap();
            assert_eq!(
                (id.store_host, id.phys_offset),
                (m.store_host, m.commit_log_offset)
            );
        }
    }

    #[test]
    fn records_are_counted_by_their_sizes_up_to_the_first_that_does_not_fit() {
        let mut body = Vec::new();
        for size in [100_u32, 91, 300] {
            body.extend_from_slice(&size.to_be_bytes());
            body.resize(body.len() + size as usize - 4, 0xee);
        }
        assert_eq!(count_records(&body), 3);
        assert_eq!(count_records(&[]), 0);
        body.extend_from_slice(&1000_u32.to_be_bytes());
        assert_eq!(
            count_records(&body),
            3,
            "a size past the end stops the count"
        );
        let mut tiny = Vec::new();
        for _ in 0..100 {
            tiny.extend_from_slice(&4_u32.to_be_bytes());
        }
        assert_eq!(count_records(&tiny), 0, "sizes below a record's fixed part");
        assert_eq!(count_records(&[0, 0, 8]), 0, "a torn size field stops it");
    }

    #[test]
    fn garbage_pull_body_is_an_error_naming_the_record() {
        let err = decode_pull_body(&Bytes::from_static(&[0, 0, 0, 5, 1, 2, 3]), "b").unwrap_err();
        assert!(err.contains("record 0"), "{err}");
    }
}
