//! SendMessage: translates each gRPC `Message` into the core's [`SendRequest`] and sends it
//! through the same `core::send::send` the remoting adapter uses (same checks, same
//! acknowledgement under the flush and replication policy, invariant 2).
//!
//! Rules of this adapter, per message (docs/grpc.md):
//! 1. Exactly one result entry per message, in request order.
//! 2. System properties become RocketMQ properties: tag → `TAGS`, keys → `KEYS`
//!    (space-joined), message_id → `UNIQ_KEY`, message_group → `__SHARDINGKEY`; user
//!    properties are copied, except names the broker reserves (ILLEGAL_MESSAGE_PROPERTY_KEY).
//! 3. `GZIP` bodies are inflated before storing, never past `maxMessageSize`
//!    (MESSAGE_BODY_TOO_LARGE); a body that does not inflate is MESSAGE_CORRUPTED.
//! 4. A FIFO message goes to the queue its group hashes to (Java's `String.hashCode`, so the
//!    choice is stable across restarts and brokers with equal queue counts); other messages
//!    go round robin.
//! 5. A DELAY message's `delivery_timestamp` becomes `TIMER_DELIVER_MS`: the core stores it as
//!    a timer message (`core::timer`) and the reply carries its recall handle; a time further
//!    than `timerMaxDelaySec` is ILLEGAL_DELIVERY_TIME. A TRANSACTION message is stored as a
//!    half message (`super::transaction`) and the reply carries its transaction id.

use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};

use ferromq_protocol::grpc::{
    Code, Encoding, Message, MessageType, SendResultEntry, Status, SystemProperties,
};
use ferromq_protocol::{java_string_hash, property_names, Properties};

use super::status::{send_error, status};
use crate::context::BrokerContext;
use crate::core::send::{SendRequest, Sent};

/// Most messages one SendMessage request may carry; the rest are refused per entry.
pub const SEND_MESSAGES_PER_REQUEST_MAX: usize = 1024;

/// RocketMQ's property naming a FIFO message's group.
pub const PROPERTY_SHARDING_KEY: &str = "__SHARDINGKEY";

/// Property names a client's `user_properties` may not set: the broker and the system
/// properties own them.
pub(crate) const RESERVED_PROPERTY_NAMES: &[&str] = &[
    property_names::TAGS,
    property_names::KEYS,
    property_names::UNIQ_KEY,
    property_names::DELAY,
    PROPERTY_SHARDING_KEY,
    "TRAN_MSG",
    "PGROUP",
    "TIMER_DELIVER_MS",
    "TIMER_DELAY_SEC",
    "TIMER_DELAY_MS",
    "REAL_TOPIC",
    "REAL_QID",
    "RETRY_TOPIC",
    "WAIT",
    "MAX_OFFSET",
    "MIN_OFFSET",
    "CLUSTER",
    "__CRC32#",
];

/// Where a send comes from: the connection's peer and the client id header.
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    /// The connection's peer address, when known.
    pub peer: Option<SocketAddr>,
    /// `x-mq-client-id` (empty when absent); names the producer in the core.
    pub client_id: &'a str,
}

/// Round-robin position for messages without a group.
#[derive(Debug, Default)]
pub struct QueueCursor(AtomicU32);

/// Sends `messages` one by one, in order; one entry each.
pub async fn send_all(
    ctx: &BrokerContext,
    cursor: &QueueCursor,
    origin: Origin<'_>,
    messages: &[Message],
) -> Vec<SendResultEntry> {
    let mut entries = Vec::with_capacity(messages.len().min(SEND_MESSAGES_PER_REQUEST_MAX));
    for (index, message) in messages.iter().enumerate() {
        let message_id = message
            .system_properties
            .as_ref()
            .map(|p| p.message_id.clone())
            .unwrap_or_default();
        let result = if index >= SEND_MESSAGES_PER_REQUEST_MAX {
            Err(status(
                Code::BadRequest,
                format!(
                    "a SendMessage request may carry at most {SEND_MESSAGES_PER_REQUEST_MAX} \
                     messages; this one is number {}",
                    index + 1
                ),
            ))
        } else {
            send_one(ctx, cursor, origin, message).await
        };
        entries.push(match result {
            Ok((sent, transactional)) => SendResultEntry {
                status: Some(super::status::ok()),
                message_id,
                transaction_id: if transactional {
                    let half = &sent.receipt.placements[0];
                    super::transaction::transaction_id(half.queue_offset, half.phys_offset)
                } else {
                    String::new()
                },
                offset: sent.receipt.placements[0].queue_offset as i64,
                recall_handle: if sent.timer {
                    crate::core::timer::schedule::recall_handle(
                        sent.receipt.placements[0].queue_offset,
                    )
                } else {
                    String::new()
                },
            },
            Err(status) => SendResultEntry {
                status: Some(status),
                message_id,
                ..Default::default()
            },
        });
    }
    debug_assert_eq!(entries.len(), messages.len());
    entries
}

/// The top-level status of a reply with `entries`: OK when all are, the one entry's status
/// for a single message, MULTIPLE_RESULTS otherwise (Python counts it as success and
/// inspects each entry).
pub fn overall_status(entries: &[SendResultEntry]) -> Status {
    let ok = Code::Ok as i32;
    if entries
        .iter()
        .all(|e| e.status.as_ref().is_some_and(|s| s.code == ok))
    {
        return super::status::ok();
    }
    match entries {
        [single] => single.status.clone().unwrap_or_default(),
        _ => status(
            Code::MultipleResults,
            "some messages were not sent; see each entry's status",
        ),
    }
}

async fn send_one(
    ctx: &BrokerContext,
    cursor: &QueueCursor,
    origin: Origin<'_>,
    message: &Message,
) -> Result<(Sent, bool), Status> {
    let topic = message
        .topic
        .as_ref()
        .map(|t| t.name.as_str())
        .unwrap_or("");
    if topic.is_empty() {
        return Err(status(Code::IllegalTopic, "message.topic.name is required"));
    }
    if let Err(error) = ferromq_protocol::names::validate_topic(topic) {
        return Err(status(Code::IllegalTopic, error.to_string()));
    }
    let system = message
        .system_properties
        .as_ref()
        .ok_or_else(|| status(Code::BadRequest, "message.system_properties is required"))?;
    if system.message_id.is_empty() {
        return Err(status(
            Code::IllegalMessageId,
            "system_properties.message_id is required",
        ));
    }
    let message_type = check_type(ctx, topic, system)?;
    let body = decode_body(system, &message.body, ctx.config.max_message_size)?;
    let transactional = message_type == MessageType::Transaction;
    let mut properties = encode_properties(message, system)?;
    if transactional {
        properties = half_properties(topic, system, &properties);
    }
    let queue_nums = crate::core::send::writable_queue_nums(
        ctx,
        topic,
        ctx.runtime_config.default_topic_queue_nums() as i32,
    )
    .map_err(|refusal| send_error(&refusal.into()))?;
    let queue_id = match (message_type, system.message_group.as_deref()) {
        (MessageType::Fifo, Some(group)) => fifo_queue(group, queue_nums),
        _ => cursor.0.fetch_add(1, Ordering::Relaxed) % queue_nums.max(1) as u32,
    };
    let request = SendRequest {
        // A gRPC producer has no group: a half's group is its topic (`transaction` rule 1).
        producer_group: if transactional {
            topic
        } else {
            origin.client_id
        },
        topic,
        queue_id: Some(queue_id),
        default_topic_queue_nums: ctx.runtime_config.default_topic_queue_nums() as i32,
        flag: 0,
        sys_flag: 0,
        born_timestamp_ms: born_timestamp_ms(system),
        born_host: born_host(system, origin.peer),
        reconsume_times: 0,
        body: &body,
        properties: &properties,
        batch: None,
    };
    crate::core::send::send(ctx, &request)
        .await
        .map(|sent| (sent, transactional))
        .map_err(|error| send_error(&error))
}

/// A TRANSACTION message's properties: a half of group `topic`, checked back after its
/// `orphaned_transaction_recovery_duration` (`transaction` rules 1 and 3).
fn half_properties(topic: &str, system: &SystemProperties, properties: &[u8]) -> Vec<u8> {
    use ferromq_protocol::remoting::headers::transaction::{
        PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS, PROPERTY_PRODUCER_GROUP,
        PROPERTY_TRANSACTION_PREPARED,
    };
    let mut added = vec![
        (PROPERTY_TRANSACTION_PREPARED, "true".to_string()),
        (PROPERTY_PRODUCER_GROUP, topic.to_string()),
    ];
    if let Some(d) = system
        .orphaned_transaction_recovery_duration
        .as_ref()
        .filter(|d| d.seconds > 0)
    {
        added.push((
            PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
            d.seconds.to_string(),
        ));
    }
    crate::core::send_back::rewrite_properties(&Properties(properties), &[], &added)
}

/// The queue of a FIFO group: stable for a group and a queue count.
pub fn fifo_queue(group: &str, queue_nums: i32) -> u32 {
    let queue_nums = queue_nums.max(1).unsigned_abs();
    java_string_hash(group).unsigned_abs() % queue_nums
}

/// The message's type, checked against its properties and the topic's accepted types.
fn check_type(
    ctx: &BrokerContext,
    topic: &str,
    system: &SystemProperties,
) -> Result<MessageType, Status> {
    let declared = MessageType::try_from(system.message_type).unwrap_or(MessageType::Unspecified);
    let has_group = system
        .message_group
        .as_deref()
        .is_some_and(|g| !g.is_empty());
    let message_type = match declared {
        MessageType::Unspecified if has_group => MessageType::Fifo,
        MessageType::Unspecified => MessageType::Normal,
        other => other,
    };
    let conflict = |what: &str| {
        Err(status(
            Code::MessagePropertyConflictWithType,
            what.to_string(),
        ))
    };
    match message_type {
        MessageType::Normal if has_group => {
            return conflict("a NORMAL message may not carry a message_group (send it as FIFO)")
        }
        MessageType::Normal if system.delivery_timestamp.is_some() => {
            return conflict(
                "a NORMAL message may not carry a delivery_timestamp (send it as DELAY)",
            )
        }
        MessageType::Fifo if !has_group => return conflict("a FIFO message needs a message_group"),
        MessageType::Delay if system.delivery_timestamp.is_none() => {
            return conflict("a DELAY message needs a delivery_timestamp")
        }
        MessageType::Delay => check_delivery_time(ctx, system)?,
        MessageType::Lite | MessageType::Priority => {
            return Err(status(
                Code::Unsupported,
                format!(
                    "{} messages are not supported by ferromq; the message was not stored",
                    message_type.as_str_name()
                ),
            ))
        }
        _ => {}
    }
    let accepted = super::route::accepted_types(ctx.topics.get(topic).as_ref());
    if !accepted.contains(&message_type) {
        return conflict(&format!(
            "topic {topic} accepts {:?} messages, not {}",
            accepted.iter().map(|t| t.as_str_name()).collect::<Vec<_>>(),
            message_type.as_str_name()
        ));
    }
    Ok(message_type)
}

/// A DELAY message's delivery time must be within `timerMaxDelaySec` (ILLEGAL_DELIVERY_TIME);
/// a time already past is delivered at once, as RocketMQ does.
fn check_delivery_time(ctx: &BrokerContext, system: &SystemProperties) -> Result<(), Status> {
    let at = system.delivery_timestamp.as_ref().map_or(0, timestamp_ms);
    let ahead = at.saturating_sub(crate::core::timer::now_ms());
    if ahead > ctx.timers.settings.max_delay_ms {
        return Err(status(
            Code::IllegalDeliveryTime,
            format!(
                "delivery_timestamp is {ahead} ms ahead; timerMaxDelaySec allows {} ms",
                ctx.timers.settings.max_delay_ms
            ),
        ));
    }
    Ok(())
}

fn timestamp_ms(t: &prost_types::Timestamp) -> i64 {
    t.seconds
        .saturating_mul(1_000)
        .saturating_add(i64::from(t.nanos) / 1_000_000)
}

/// The body to store: as sent, or inflated (GZIP), at most `max_bytes`.
pub fn decode_body(
    system: &SystemProperties,
    body: &[u8],
    max_bytes: usize,
) -> Result<Vec<u8>, Status> {
    let too_large = |size: String| {
        status(
            Code::MessageBodyTooLarge,
            format!("message body is {size} bytes; maxMessageSize is {max_bytes}"),
        )
    };
    match Encoding::try_from(system.body_encoding).unwrap_or(Encoding::Unspecified) {
        Encoding::Gzip => {
            let mut inflated = Vec::new();
            let limit = max_bytes as u64 + 1;
            flate2::read::GzDecoder::new(body)
                .take(limit)
                .read_to_end(&mut inflated)
                .map_err(|e| {
                    status(
                        Code::MessageCorrupted,
                        format!("body_encoding is GZIP but the body does not inflate: {e}"),
                    )
                })?;
            if inflated.len() > max_bytes {
                return Err(too_large(format!("more than {max_bytes} (inflated)")));
            }
            Ok(inflated)
        }
        Encoding::Identity | Encoding::Unspecified => {
            if body.len() > max_bytes {
                return Err(too_large(body.len().to_string()));
            }
            Ok(body.to_vec())
        }
    }
}

/// The record's properties: user properties, then the mapped system properties.
pub(crate) fn encode_properties(
    message: &Message,
    system: &SystemProperties,
) -> Result<Vec<u8>, Status> {
    let illegal = |what: String| Err(status(Code::IllegalMessagePropertyKey, what));
    let mut pairs: Vec<(&str, String)> = Vec::with_capacity(message.user_properties.len() + 4);
    let mut user: Vec<(&String, &String)> = message.user_properties.iter().collect();
    user.sort();
    for (name, value) in user {
        if name.is_empty() || has_separator(name) || has_separator(value) {
            return illegal(format!(
                "user property {name:?} is empty or holds a \\u0001/\\u0002 separator"
            ));
        }
        if RESERVED_PROPERTY_NAMES.contains(&name.as_str()) {
            return illegal(format!(
                "user property {name} is reserved by RocketMQ; use the system properties"
            ));
        }
        pairs.push((name, value.clone()));
    }
    if let Some(tag) = system.tag.as_deref().filter(|t| !t.is_empty()) {
        if has_separator(tag) || tag.contains('|') {
            return Err(status(
                Code::IllegalMessageTag,
                format!("tag {tag:?} is illegal"),
            ));
        }
        pairs.push((property_names::TAGS, tag.to_string()));
    }
    if !system.keys.is_empty() {
        if system
            .keys
            .iter()
            .any(|k| has_separator(k) || k.contains(' '))
        {
            return Err(status(
                Code::IllegalMessageKey,
                "a key may not hold a space or a \\u0001/\\u0002 separator",
            ));
        }
        pairs.push((property_names::KEYS, system.keys.join(" ")));
    }
    if has_separator(&system.message_id) {
        return Err(status(
            Code::IllegalMessageId,
            "message_id holds a separator",
        ));
    }
    pairs.push((property_names::UNIQ_KEY, system.message_id.clone()));
    if let Some(group) = system.message_group.as_deref().filter(|g| !g.is_empty()) {
        if has_separator(group) {
            return Err(status(
                Code::IllegalMessageGroup,
                "message_group holds a separator",
            ));
        }
        pairs.push((PROPERTY_SHARDING_KEY, group.to_string()));
    }
    if let Some(at) = &system.delivery_timestamp {
        pairs.push((
            crate::core::timer::PROPERTY_TIMER_DELIVER_MS,
            timestamp_ms(at).to_string(),
        ));
    }
    Ok(Properties::encode(
        pairs.iter().map(|(n, v)| (*n, v.as_str())),
    ))
}

fn has_separator(text: &str) -> bool {
    text.bytes().any(|b| b == 0x01 || b == 0x02)
}

fn born_timestamp_ms(system: &SystemProperties) -> i64 {
    match &system.born_timestamp {
        Some(t) => t.seconds.saturating_mul(1000) + i64::from(t.nanos / 1_000_000),
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64),
    }
}

/// `born_host` when it is an IP address, else the connection's peer.
fn born_host(system: &SystemProperties, peer: Option<SocketAddr>) -> SocketAddr {
    match system.born_host.parse::<IpAddr>() {
        Ok(ip) => SocketAddr::new(ip, peer.map_or(0, |p| p.port())),
        Err(_) => peer.unwrap_or(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn system(encoding: Encoding) -> SystemProperties {
        SystemProperties {
            message_id: "01ABC".into(),
            body_encoding: encoding as i32,
            ..Default::default()
        }
    }

    #[test]
    fn gzip_bodies_inflate_and_are_bounded() {
        use std::io::Write;
        let plain = vec![b'x'; 10_000];
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(&plain).unwrap();
        let gz = encoder.finish().unwrap();
        assert!(gz.len() < 200);
        assert_eq!(
            decode_body(&system(Encoding::Gzip), &gz, 10_000).unwrap(),
            plain
        );
        let refused = decode_body(&system(Encoding::Gzip), &gz, 9_999).unwrap_err();
        assert_eq!(refused.code, Code::MessageBodyTooLarge as i32);
        let corrupt = decode_body(&system(Encoding::Gzip), b"not gzip", 100).unwrap_err();
        assert_eq!(corrupt.code, Code::MessageCorrupted as i32);
        let identity = decode_body(&system(Encoding::Identity), &plain, 9_999).unwrap_err();
        assert_eq!(identity.code, Code::MessageBodyTooLarge as i32);
    }

    #[test]
    fn properties_map_system_fields_and_refuse_reserved_user_keys() {
        let mut message = Message {
            system_properties: Some(SystemProperties {
                message_id: "01ID".into(),
                tag: Some("TagA".into()),
                keys: vec!["k1".into(), "k2".into()],
                message_group: Some("g1".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        message.user_properties.insert("color".into(), "red".into());
        let raw = encode_properties(&message, message.system_properties.as_ref().unwrap()).unwrap();
        let props = Properties(&raw);
        assert_eq!(props.get_str("TAGS"), Some("TagA"));
        assert_eq!(props.get_str("KEYS"), Some("k1 k2"));
        assert_eq!(props.get_str("UNIQ_KEY"), Some("01ID"));
        assert_eq!(props.get_str("__SHARDINGKEY"), Some("g1"));
        assert_eq!(props.get_str("color"), Some("red"));
        message.user_properties.insert("DELAY".into(), "3".into());
        let refused =
            encode_properties(&message, message.system_properties.as_ref().unwrap()).unwrap_err();
        assert_eq!(refused.code, Code::IllegalMessagePropertyKey as i32);
    }

    #[test]
    fn fifo_queue_is_stable_and_in_range() {
        for group in ["", "a", "order-17", "\u{00e9}t\u{00e9}"] {
            let first = fifo_queue(group, 8);
            assert!(first < 8);
            assert_eq!(first, fifo_queue(group, 8));
        }
        assert_eq!(fifo_queue("anything", 0), 0);
    }
}
