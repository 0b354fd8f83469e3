//! ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue and
//! QueryAssignment: translations to and from `core::pop` (docs/grpc.md).
//!
//! Rules of this adapter:
//! 1. A receive stream is `status`, then one `message` per delivery, then
//!    `delivery_timestamp` (the Java proxy's order); nothing found is MESSAGE_NOT_FOUND. The
//!    request's queue is served first, then any other readable queue of the topic.
//! 2. A delivered message carries what clients check: the body as stored (inflated when the
//!    record is compressed) with `IDENTITY`, its uppercase-hex MD5 digest, the receipt handle
//!    (popped messages; PullMessage's share [`stored_message_of`] without one),
//!    queue id and offset, delivery attempt, store and born times and hosts, and the message
//!    id (`UNIQ_KEY`, else the offset message id); properties RocketMQ reserves stay out of
//!    `user_properties`.
//! 3. An ack answers one entry per request entry; the top-level status is OK when all are,
//!    the entry's status for one entry, MULTIPLE_RESULTS otherwise.
//! 4. A receive is served from any readable queue of the topic on this broker, the named one
//!    first (`core::pop::receive`; the Java proxy pops from its broker-acting queue, id -1):
//!    simple consumers name the route's queues in turn, and one naming a drained queue must
//!    not wait out its long polling while other queues hold messages. A queue id outside the
//!    topic is still refused.
//! 5. A receive never holds past its gRPC deadline (`grpc-timeout`): the hold ends
//!    [`DEADLINE_HEADROOM`] before it, and a receive naming no long-polling timeout holds
//!    until then (at most [`DEFAULT_LONG_POLLING`]), as the Java proxy bounds its polling by
//!    the time remaining. Past the deadline the transport cancels the call, so a longer hold
//!    could only end in the client's DEADLINE_EXCEEDED instead of MESSAGE_NOT_FOUND.

use std::io::Read;
use std::time::Duration;

use ferromq_protocol::grpc::{self as pb, Code, DigestType, Encoding, FilterType, MessageType};
use ferromq_protocol::{property_names, MessageId, RecordView};
use ferromq_store::{StoredMessage, TagFilter};
use md5::{Digest as _, Md5};

use super::send::{PROPERTY_SHARDING_KEY, RESERVED_PROPERTY_NAMES};
use super::status::{ok, refusal_code, status, write_code};
use crate::context::BrokerContext;
use crate::core::error::PullError;
use crate::core::pop::receive::{Delivery, ReceiveRequest};
use crate::core::pop::{self, PopError, ReceiptHandle};

/// The invisibility of a receive that names none (the Java proxy's default).
pub const DEFAULT_INVISIBLE: Duration = Duration::from_secs(60);
/// The hold of a receive that names no long-polling timeout (and no deadline sooner).
pub const DEFAULT_LONG_POLLING: Duration = Duration::from_secs(20);
/// How long before its gRPC deadline a held receive answers (rule 5): time to write the
/// receive's record and send the reply.
pub const DEADLINE_HEADROOM: Duration = Duration::from_secs(1);
/// Longest `grpc-timeout` value read (the header's 8 digits of hours exceed it); longer
/// deadlines are read as this, which no hold reaches.
const DEADLINE_MAX: Duration = Duration::from_secs(24 * 3600);
/// RocketMQ's system property names beyond those a producer may not set: kept out of
/// `user_properties` on delivery.
const SYSTEM_PROPERTY_NAMES: &[&str] = &[
    "TRANSACTION_PREPARED_QUEUE_OFFSET",
    "REAL_TOPIC",
    "REAL_QID",
    "MSG_REGION",
    "TRACE_ON",
    "CONSUME_START_TIME",
    "ORIGIN_MESSAGE_ID",
    "DLQ_ORIGIN_TOPIC",
    "DLQ_ORIGIN_MESSAGE_ID",
    "INNER_NUM",
    "INNER_BASE",
    "TRANSACTION_CHECK_TIMES",
    "CHECK_IMMUNITY_TIME_IN_SECONDS",
    "UNIQ_KEY",
];

/// The status of a failed pop operation.
pub fn pop_status(error: &PopError) -> pb::Status {
    let code = match error {
        PopError::Refused(refusal) => refusal_code(refusal),
        PopError::InvalidHandle(_) => Code::InvalidReceiptHandle,
        PopError::IllegalInvisibleTime(_) => Code::IllegalInvisibleTime,
        PopError::Write(error) => write_code(error),
        PopError::Read(PullError::Refused(refusal)) => refusal_code(refusal),
        PopError::Read(PullError::Busy(_)) => Code::TooManyRequests,
        PopError::Read(_) | PopError::View(_) | PopError::Load(_) => Code::InternalServerError,
        PopError::TermChanged => Code::Forbidden,
    };
    status(code, error.to_string())
}

/// The time left to a request by its `grpc-timeout` header (`None`: no deadline, or a value
/// that does not parse): up to 8 ASCII digits and a unit, `H`, `M`, `S`, `m`, `u` or `n`.
pub fn grpc_timeout(value: &str) -> Option<Duration> {
    let unit = value.chars().last()?;
    let digits = &value[..value.len() - unit.len_utf8()];
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    let time = match unit {
        'H' => Duration::from_secs(n.saturating_mul(3600)),
        'M' => Duration::from_secs(n.saturating_mul(60)),
        'S' => Duration::from_secs(n),
        'm' => Duration::from_millis(n),
        'u' => Duration::from_micros(n),
        'n' => Duration::from_nanos(n),
        _ => return None,
    };
    Some(time.min(DEADLINE_MAX))
}

/// The core request of a ReceiveMessage, or the status refusing it; `deadline` is the time
/// the call has left ([`grpc_timeout`]), which bounds the hold (rule 5).
pub fn receive_request(
    request: &pb::ReceiveMessageRequest,
    deadline: Option<Duration>,
) -> Result<ReceiveRequest, pb::Status> {
    let group = resource_name(request.group.as_ref(), Code::IllegalConsumerGroup, "group")?;
    let queue = request
        .message_queue
        .as_ref()
        .ok_or_else(|| status(Code::BadRequest, "message_queue is required"))?;
    let topic = resource_name(
        queue.topic.as_ref(),
        Code::IllegalTopic,
        "message_queue.topic",
    )?;
    let filter = match &request.filter_expression {
        None => TagFilter::All,
        Some(f) if f.r#type == FilterType::Sql as i32 => {
            return Err(status(
                Code::IllegalFilterExpression,
                "SQL92 filter expressions are not supported; use TAG",
            ))
        }
        Some(f) => TagFilter::parse_subscription(&f.expression),
    };
    let invisible = match &request.invisible_duration {
        None => DEFAULT_INVISIBLE,
        Some(d) => duration(d)
            .ok_or_else(|| status(Code::IllegalInvisibleTime, "invisible_duration is negative"))?,
    };
    let wait = match &request.long_polling_timeout {
        None => DEFAULT_LONG_POLLING,
        Some(d) => duration(d)
            .ok_or_else(|| status(Code::IllegalPollingTime, "long_polling_timeout is negative"))?,
    };
    let wait = match deadline {
        Some(left) => wait.min(left.saturating_sub(DEADLINE_HEADROOM)),
        None => wait,
    };
    if !(pop::INVISIBLE_MIN..=pop::INVISIBLE_MAX).contains(&invisible) {
        return Err(status(
            Code::IllegalInvisibleTime,
            format!(
                "invisible_duration {invisible:?} is outside {:?}..={:?}",
                pop::INVISIBLE_MIN,
                pop::INVISIBLE_MAX
            ),
        ));
    }
    Ok(ReceiveRequest {
        group,
        topic,
        // The named queue is served first, then every other readable queue of the topic
        // (`core::pop::receive`): as the Java proxy, which only uses it to pick the broker.
        queue_id: u32::try_from(queue.id).ok(),
        filter,
        batch: usize::try_from(request.batch_size).unwrap_or(1),
        invisible,
        wait: wait.min(pop::RECEIVE_WAIT_MAX),
        auto_renew: None,
    })
}

/// The receive stream for `deliveries` (rule 1).
pub fn receive_stream(
    ctx: &BrokerContext,
    outcome: Result<Vec<Delivery>, pb::Status>,
) -> Vec<pb::ReceiveMessageResponse> {
    use pb::receive_message_response::Content;
    let mut out = Vec::new();
    match outcome {
        Ok(deliveries) if deliveries.is_empty() => out.push(Content::Status(status(
            Code::MessageNotFound,
            "no new message",
        ))),
        Ok(deliveries) => {
            out.push(Content::Status(ok()));
            out.extend(
                deliveries
                    .iter()
                    .filter_map(|d| message_of(ctx, d))
                    .map(Content::Message),
            );
        }
        Err(refused) => out.push(Content::Status(refused)),
    }
    out.push(Content::DeliveryTimestamp(
        std::time::SystemTime::now().into(),
    ));
    out.into_iter()
        .map(|content| pb::ReceiveMessageResponse {
            content: Some(content),
        })
        .collect()
}

/// The gRPC message of a delivery (rule 2); `None` (logged) for a record that does not parse.
pub fn message_of(ctx: &BrokerContext, delivery: &Delivery) -> Option<pb::Message> {
    stored_message_of(
        ctx,
        &delivery.message,
        Placement {
            topic: &delivery.handle.topic,
            queue_id: delivery.queue_id,
        },
        Some(delivery.handle.to_string()),
        Some(delivery.attempt),
    )
}

/// Where a stored message is delivered from: the topic and queue the client asked for.
#[derive(Debug, Clone, Copy)]
pub struct Placement<'a> {
    /// Topic.
    pub topic: &'a str,
    /// Queue.
    pub queue_id: u32,
}

/// The gRPC message of a stored record read from `at` (rule 2), with `receipt_handle` when
/// it was popped (a pulled message has none) and its delivery attempt (`None`: the record's
/// `reconsume_times + 1`). `None` (logged) for a record that does not parse.
pub fn stored_message_of(
    ctx: &BrokerContext,
    message: &StoredMessage,
    at: Placement<'_>,
    receipt_handle: Option<String>,
    attempt: Option<u32>,
) -> Option<pb::Message> {
    let record = match RecordView::parse(&message.bytes) {
        Ok(record) => record,
        Err(error) => {
            tracing::error!(phys_offset = message.phys_offset, %error,
                "a stored record does not parse; left out of the reply");
            return None;
        }
    };
    let attempt = attempt.map_or_else(|| i64::from(record.reconsume_times.max(0)) + 1, i64::from);
    let body = body_of(ctx, &record);
    let props = &record.properties;
    let message_id = props
        .get_str(property_names::UNIQ_KEY)
        .map(str::to_string)
        .unwrap_or_else(|| {
            MessageId {
                store_host: record.store_host,
                phys_offset: message.phys_offset,
            }
            .encode()
        });
    let message_group = props.get_str(PROPERTY_SHARDING_KEY).map(str::to_string);
    let delivery_timestamp = props
        .get_str(crate::core::timer::PROPERTY_TIMER_DELIVER_MS)
        .and_then(|ms| ms.parse::<i64>().ok())
        .map(timestamp);
    let message_type = if message_group.is_some() {
        MessageType::Fifo
    } else if delivery_timestamp.is_some() {
        MessageType::Delay
    } else if props.get_str("TRAN_MSG").is_some() {
        MessageType::Transaction
    } else {
        MessageType::Normal
    };
    let user_properties = props
        .iter()
        .filter_map(|(name, value)| {
            let name = std::str::from_utf8(name).ok()?;
            let value = std::str::from_utf8(value).ok()?;
            let reserved = RESERVED_PROPERTY_NAMES.contains(&name)
                || SYSTEM_PROPERTY_NAMES.contains(&name)
                || name == property_names::CRC32;
            (!reserved).then(|| (name.to_string(), value.to_string()))
        })
        .collect();
    let system = pb::SystemProperties {
        tag: props.get_str(property_names::TAGS).map(str::to_string),
        keys: props
            .get_str(property_names::KEYS)
            .map(|k| {
                k.split(' ')
                    .filter(|k| !k.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
        message_id,
        body_digest: Some(pb::Digest {
            r#type: DigestType::Md5 as i32,
            checksum: md5_upper_hex(&body),
        }),
        body_encoding: Encoding::Identity as i32,
        message_type: message_type as i32,
        born_timestamp: Some(timestamp(record.born_timestamp_ms)),
        born_host: record.born_host.ip().to_string(),
        store_timestamp: Some(timestamp(record.store_timestamp_ms)),
        store_host: record.store_host.to_string(),
        receipt_handle,
        queue_id: at.queue_id as i32,
        queue_offset: Some(message.queue_offset as i64),
        delivery_attempt: Some(i32::try_from(attempt).unwrap_or(i32::MAX)),
        message_group,
        delivery_timestamp,
        ..Default::default()
    };
    Some(pb::Message {
        topic: Some(pb::Resource {
            resource_namespace: String::new(),
            name: at.topic.to_string(),
        }),
        user_properties,
        system_properties: Some(system),
        body,
    })
}

/// The body as the producer sent it: a compressed record (sysFlag bit 0, zlib) is inflated,
/// never past `maxMessageSize`; one that does not inflate is sent as stored (its digest
/// still covers the bytes sent).
fn body_of(ctx: &BrokerContext, record: &RecordView<'_>) -> Vec<u8> {
    if record.sys_flag & 1 == 0 {
        return record.body.to_vec();
    }
    let mut inflated = Vec::new();
    let limit = ctx.config.max_message_size as u64 + 1;
    match flate2::read::ZlibDecoder::new(record.body)
        .take(limit)
        .read_to_end(&mut inflated)
    {
        Ok(_) if (inflated.len() as u64) < limit => inflated,
        _ => {
            tracing::warn!(
                phys_offset = record.phys_offset,
                "a compressed record does not inflate within maxMessageSize; sent as stored"
            );
            record.body.to_vec()
        }
    }
}

/// Uppercase hex MD5 of `bytes` (what the Java proxy sends and clients verify).
pub fn md5_upper_hex(bytes: &[u8]) -> String {
    Md5::digest(bytes)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect()
}

/// Acks the request's entries (rule 3).
pub async fn ack(ctx: &BrokerContext, request: &pb::AckMessageRequest) -> pb::AckMessageResponse {
    let refused = |status| pb::AckMessageResponse {
        status: Some(status),
        entries: Vec::new(),
    };
    let group = match resource_name(request.group.as_ref(), Code::IllegalConsumerGroup, "group") {
        Ok(group) => group,
        Err(status) => return refused(status),
    };
    if request.entries.is_empty() || request.entries.len() > pop::record::POP_RECORD_ENTRIES_MAX {
        return refused(status(
            Code::BadRequest,
            format!(
                "an AckMessage carries 1..={} entries",
                pop::record::POP_RECORD_ENTRIES_MAX
            ),
        ));
    }
    let parsed: Vec<Result<ReceiptHandle, PopError>> = request
        .entries
        .iter()
        .map(|e| ReceiptHandle::parse(&e.receipt_handle))
        .collect();
    let valid: Vec<ReceiptHandle> = parsed
        .iter()
        .filter_map(|p| p.as_ref().ok().cloned())
        .collect();
    let mut outcomes = match pop::settle::ack(ctx, &group, &valid).await {
        Ok(outcomes) => outcomes.into_iter(),
        Err(error) => return refused(pop_status(&error)),
    };
    let entries: Vec<pb::AckMessageResultEntry> = request
        .entries
        .iter()
        .zip(parsed)
        .map(|(entry, parsed)| {
            let outcome = match parsed {
                Ok(_) => outcomes.next().unwrap_or(Ok(())),
                Err(error) => Err(error),
            };
            pb::AckMessageResultEntry {
                message_id: entry.message_id.clone(),
                receipt_handle: entry.receipt_handle.clone(),
                status: Some(match outcome {
                    Ok(()) => ok(),
                    Err(error) => pop_status(&error),
                }),
            }
        })
        .collect();
    pb::AckMessageResponse {
        status: Some(overall(&entries)),
        entries,
    }
}

fn overall(entries: &[pb::AckMessageResultEntry]) -> pb::Status {
    let statuses: Vec<&pb::Status> = entries.iter().filter_map(|e| e.status.as_ref()).collect();
    if statuses.iter().all(|s| s.code == Code::Ok as i32) {
        return ok();
    }
    match statuses.as_slice() {
        [one] => (*one).clone(),
        _ => status(
            Code::MultipleResults,
            "some entries failed; see each entry's status",
        ),
    }
}

/// Renews (or, with a zero duration, releases) one delivery.
pub async fn change_invisible(
    ctx: &BrokerContext,
    request: &pb::ChangeInvisibleDurationRequest,
) -> pb::ChangeInvisibleDurationResponse {
    let outcome = async {
        let group = resource_name(request.group.as_ref(), Code::IllegalConsumerGroup, "group")?;
        let handle = ReceiptHandle::parse(&request.receipt_handle).map_err(|e| pop_status(&e))?;
        let invisible = request
            .invisible_duration
            .as_ref()
            .and_then(duration)
            .ok_or_else(|| {
                status(
                    Code::IllegalInvisibleTime,
                    "invisible_duration is required and not negative",
                )
            })?;
        pop::settle::change_invisible(ctx, &group, &handle, invisible)
            .await
            .map_err(|e| pop_status(&e))
    }
    .await;
    match outcome {
        Ok(handle) => pb::ChangeInvisibleDurationResponse {
            status: Some(ok()),
            receipt_handle: handle.to_string(),
        },
        Err(status) => pb::ChangeInvisibleDurationResponse {
            status: Some(status),
            receipt_handle: String::new(),
        },
    }
}

/// Moves one delivery's message to the group's dead-letter queue.
pub async fn forward_to_dead_letter(
    ctx: &BrokerContext,
    request: &pb::ForwardMessageToDeadLetterQueueRequest,
) -> pb::Status {
    let outcome = async {
        let group = resource_name(request.group.as_ref(), Code::IllegalConsumerGroup, "group")?;
        let handle = ReceiptHandle::parse(&request.receipt_handle).map_err(|e| pop_status(&e))?;
        pop::settle::forward_to_dead_letter(ctx, &group, &handle)
            .await
            .map_err(|e| pop_status(&e))
    }
    .await;
    outcome.map_or_else(|s| s, |()| ok())
}

/// Cancels a pending timer message by the recall handle its send returned.
pub async fn recall(
    ctx: &BrokerContext,
    request: &pb::RecallMessageRequest,
) -> pb::RecallMessageResponse {
    use crate::core::timer::schedule::RecallError;
    let mut message_id = String::new();
    let status = match crate::core::timer::schedule::recall(ctx, &request.recall_handle).await {
        Ok(id) => {
            message_id = id.unwrap_or_default();
            ok()
        }
        Err(error @ (RecallError::Malformed(_) | RecallError::NotPending(_))) => {
            status(Code::BadRequest, error.to_string())
        }
        Err(error @ RecallError::Failed(_)) => status(Code::InternalServerError, error.to_string()),
    };
    pb::RecallMessageResponse {
        status: Some(status),
        message_id,
    }
}

/// The queues a push consumer of `group` receives from on this broker: one assignment of
/// every queue (`id` -1), or one per readable queue for a FIFO group.
pub fn query_assignment(
    ctx: &BrokerContext,
    request: &pb::QueryAssignmentRequest,
    own_endpoints: &pb::Endpoints,
) -> pb::QueryAssignmentResponse {
    let refused = |status| pb::QueryAssignmentResponse {
        status: Some(status),
        assignments: Vec::new(),
    };
    let topic = match resource_name(request.topic.as_ref(), Code::IllegalTopic, "topic") {
        Ok(topic) => topic,
        Err(status) => return refused(status),
    };
    let group = match resource_name(request.group.as_ref(), Code::IllegalConsumerGroup, "group") {
        Ok(group) => group,
        Err(status) => return refused(status),
    };
    let Some(config) = ctx.topics.get(&topic) else {
        return refused(status(
            Code::TopicNotFound,
            format!("topic {topic} does not exist"),
        ));
    };
    let readable: Vec<i32> = (0..config.read_queue_nums.max(0))
        .filter(|id| {
            matches!(
                super::route::permission(&config, *id),
                pb::Permission::Read | pb::Permission::ReadWrite
            )
        })
        .collect();
    if readable.is_empty() {
        return refused(status(
            Code::Forbidden,
            format!("topic {topic} has no readable queue"),
        ));
    }
    let endpoints = match &request.endpoints {
        Some(e) if !e.addresses.is_empty() => e.clone(),
        _ => own_endpoints.clone(),
    };
    let fifo = ctx
        .groups
        .get(&group)
        .is_some_and(|g| g.consume_message_orderly);
    let ids = if fifo { readable } else { vec![-1] };
    let queue = |id| pb::MessageQueue {
        topic: Some(pb::Resource {
            resource_namespace: String::new(),
            name: topic.clone(),
        }),
        id,
        permission: pb::Permission::ReadWrite as i32,
        broker: Some(pb::Broker {
            name: ctx.config.broker_name.clone(),
            id: 0,
            endpoints: Some(endpoints.clone()),
        }),
        accept_message_types: super::route::accepted_types(Some(&config))
            .into_iter()
            .map(|t| t as i32)
            .collect(),
    };
    pb::QueryAssignmentResponse {
        status: Some(ok()),
        assignments: ids
            .into_iter()
            .map(|id| pb::Assignment {
                message_queue: Some(queue(id)),
            })
            .collect(),
    }
}

/// The name of a required `resource` field, or `code` naming `field`.
pub(super) fn resource_name(
    resource: Option<&pb::Resource>,
    code: Code,
    field: &str,
) -> Result<String, pb::Status> {
    resource
        .map(|r| r.name.clone())
        .filter(|n| !n.is_empty())
        .ok_or_else(|| status(code, format!("{field}.name is required")))
}

/// A protobuf duration; `None` when negative.
pub(super) fn duration(d: &prost_types::Duration) -> Option<Duration> {
    if d.seconds < 0 || d.nanos < 0 {
        return None;
    }
    Some(Duration::new(d.seconds as u64, d.nanos as u32))
}

fn timestamp(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_digest_is_uppercase_hex_md5() {
        assert_eq!(md5_upper_hex(b""), "D41D8CD98F00B204E9800998ECF8427E");
        assert_eq!(md5_upper_hex(b"hello"), "5D41402ABC4B2A76B9719D911017C592");
    }

    #[test]
    fn grpc_timeouts_parse_in_every_unit() {
        assert_eq!(grpc_timeout("5S"), Some(Duration::from_secs(5)));
        assert_eq!(grpc_timeout("4999m"), Some(Duration::from_millis(4_999)));
        assert_eq!(grpc_timeout("2M"), Some(Duration::from_secs(120)));
        assert_eq!(grpc_timeout("1H"), Some(Duration::from_secs(3_600)));
        assert_eq!(grpc_timeout("7u"), Some(Duration::from_micros(7)));
        assert_eq!(grpc_timeout("9n"), Some(Duration::from_nanos(9)));
        assert_eq!(grpc_timeout("99999999H"), Some(DEADLINE_MAX));
        for bad in ["", "S", "5", "5s", "123456789S", "-5S", "5 S", "5é", "é"] {
            assert_eq!(grpc_timeout(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn receive_requests_are_checked_field_by_field() {
        let queue = pb::MessageQueue {
            topic: Some(pb::Resource {
                resource_namespace: String::new(),
                name: "T".into(),
            }),
            id: -1,
            ..Default::default()
        };
        let mut request = pb::ReceiveMessageRequest {
            group: Some(pb::Resource {
                resource_namespace: String::new(),
                name: "G".into(),
            }),
            message_queue: Some(queue),
            batch_size: 16,
            ..Default::default()
        };
        let parsed = receive_request(&request, None).unwrap();
        assert_eq!(parsed.queue_id, None, "id -1: no queue named");
        assert_eq!(
            (parsed.invisible, parsed.wait),
            (DEFAULT_INVISIBLE, DEFAULT_LONG_POLLING)
        );
        // The deadline bounds the hold, with or without a long-polling timeout.
        let wait = |r: &pb::ReceiveMessageRequest, left_ms| {
            receive_request(r, Some(Duration::from_millis(left_ms)))
                .unwrap()
                .wait
        };
        assert_eq!(wait(&request, 5_000), Duration::from_secs(4));
        assert_eq!(wait(&request, 60_000), DEFAULT_LONG_POLLING);
        assert_eq!(wait(&request, 800), Duration::ZERO, "no time left to hold");
        request.long_polling_timeout = Some(prost_types::Duration {
            seconds: 10,
            nanos: 0,
        });
        assert_eq!(wait(&request, 5_000), Duration::from_secs(4));
        assert_eq!(wait(&request, 30_000), Duration::from_secs(10));
        request.long_polling_timeout = None;
        request.invisible_duration = Some(prost_types::Duration {
            seconds: 0,
            nanos: 5,
        });
        assert_eq!(
            receive_request(&request, None).unwrap_err().code,
            Code::IllegalInvisibleTime as i32
        );
        request.invisible_duration = None;
        request.filter_expression = Some(pb::FilterExpression {
            r#type: FilterType::Sql as i32,
            expression: "a > 1".into(),
        });
        assert_eq!(
            receive_request(&request, None).unwrap_err().code,
            Code::IllegalFilterExpression as i32
        );
        request.group = None;
        assert_eq!(
            receive_request(&request, None).unwrap_err().code,
            Code::IllegalConsumerGroup as i32
        );
    }
}
