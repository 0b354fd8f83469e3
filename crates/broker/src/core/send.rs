//! Sends: single messages, batches and delayed messages, from any wire adapter.
//!
//! A send is acknowledged only once the store says the records are acknowledgeable under the
//! flush policy ([`super::ack`], invariant 2). A flush that times out or fails is
//! [`WriteError::NotDurable`] (clients retry), never a "sent" answer.
//!
//! - Clients may not send to a reserved topic (`access::client_topic`): the delay scheduler's,
//!   the transaction topics, the offsets topic.
//! - A message's properties may hold at most [`CLIENT_PROPERTIES_LEN_MAX`] bytes: RocketMQ's
//!   32,767 less the CRC property ferromq adds to every record.
//! - A send naming a queue the topic does not have (a stale route) is refused, never wrapped
//!   into another queue; only the send that auto-creates its topic maps its queue (picked
//!   from the auto-create template's route) into the new topic's queues.
//! - A message with a `DELAY` level goes through the delay scheduler (`scheduler`); one with a
//!   timer property (`TIMER_DELIVER_MS`, `TIMER_DELAY_SEC`, `TIMER_DELAY_MS`,
//!   `__STARTDELIVERTIME`) through the timer (`timer`).
//! - A half message (`TRAN_MSG=true` or the prepared sysFlag) is stored by
//!   `transactions::half`; a batch or a delayed message cannot be one (MESSAGE_ILLEGAL).

use std::net::SocketAddr;

use ferromq_protocol::message::record::{CLIENT_PROPERTIES_LEN_MAX, PROPERTIES_LEN_MAX};
use ferromq_protocol::remoting::headers::transaction::PROPERTY_TRANSACTION_PREPARED;
use ferromq_protocol::{DraftRecord, Properties, PROPERTY_SEPARATOR};
use ferromq_store::PutReceipt;

use super::access::{self, Request};
use super::error::{Refusal, RefusalKind, SendError};
use super::{ack, scheduler};
use crate::catalog::topics::{topic_with_queues, PERM_WRITE};
use crate::context::BrokerContext;

/// Property naming a message's delay level.
pub const PROPERTY_DELAY: &str = "DELAY";

/// One send: a message, or a batch of messages sharing its header.
#[derive(Debug, Clone)]
pub struct SendRequest<'a> {
    /// Producer group (a half message's group when it carries no `PGROUP`).
    pub producer_group: &'a str,
    /// Topic.
    pub topic: &'a str,
    /// The queue the client picked; `None`: any queue.
    pub queue_id: Option<u32>,
    /// Queues to create the topic with when it is auto-created.
    pub default_topic_queue_nums: i32,
    /// Message flag.
    pub flag: i32,
    /// System flag.
    pub sys_flag: i32,
    /// Producer's timestamp, ms.
    pub born_timestamp_ms: i64,
    /// Producer's address.
    pub born_host: SocketAddr,
    /// Times the message was consumed and sent back.
    pub reconsume_times: i32,
    /// Body (of the single message).
    pub body: &'a [u8],
    /// Properties (of the single message).
    pub properties: &'a [u8],
    /// For a batch: each message's flag, body and properties.
    pub batch: Option<Vec<BatchMessage<'a>>>,
}

/// One message of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMessage<'a> {
    /// Message flag.
    pub flag: i32,
    /// Body.
    pub body: &'a [u8],
    /// Properties.
    pub properties: &'a [u8],
}

/// An acknowledged send.
#[derive(Debug)]
pub struct Sent {
    /// Where the records landed.
    pub receipt: PutReceipt,
    /// The queue they went to.
    pub queue_id: u32,
    /// Stored as a timer message (the receipt names its timer record, which
    /// `timer::schedule::recall_handle` turns into a recall handle).
    pub timer: bool,
}

/// Stores a send and waits for its acknowledgement.
pub async fn send(ctx: &BrokerContext, request: &SendRequest<'_>) -> Result<Sent, SendError> {
    super::ack::check_writable(ctx, "message")?;
    let topic = request.topic;
    let before = ctx.topics.contains(topic);
    let queue_nums = writable_queue_nums(ctx, topic, request.default_topic_queue_nums)?;
    let requested = request
        .queue_id
        .map_or(-1, |q| i32::try_from(q).unwrap_or(i32::MAX));
    let queue_id = if before {
        send_queue_id(ctx, topic, requested, queue_nums)?
    } else {
        // This send created the topic: the client picked its queue from the auto-create
        // template's route (TBW102), not the topic's, so map it into the topic's queues.
        requested.max(0) % queue_nums
    } as u32;
    check_properties_len(request.properties)?;
    let directives = Directives::read(request.properties);
    let half = super::transactions::half::is_half(request.sys_flag, directives.prepared);
    if half {
        check_half_shape(request, &directives)?;
    }
    let due = timer_due(ctx, request, &directives, half)?;
    let base = DraftRecord {
        topic,
        queue_id,
        flag: request.flag,
        sys_flag: request.sys_flag,
        born_timestamp_ms: request.born_timestamp_ms,
        born_host: request.born_host,
        store_host: ctx.broker_addr,
        reconsume_times: request.reconsume_times.max(0),
        prepared_tx_offset: 0,
        body: request.body,
        properties: request.properties,
    };
    let receipt = if let Some(batch) = &request.batch {
        for message in batch {
            check_properties_len(message.properties)?;
        }
        let drafts: Vec<DraftRecord<'_>> = batch
            .iter()
            .map(|message| DraftRecord {
                flag: message.flag,
                body: message.body,
                properties: message.properties,
                ..base.clone()
            })
            .collect();
        put(ctx, &drafts).await?
    } else if half {
        super::transactions::half::store_half(ctx, &base, request.producer_group).await?
    } else if let Some(due) = due {
        super::timer::schedule::schedule(ctx, &base, due).await?
    } else if let Some(level) = delay_level(directives.delay) {
        scheduler::schedule(ctx, &base, level).await?
    } else {
        put(ctx, &[base]).await?
    };
    ctx.counters.messages_put.fetch_add(
        receipt.placements.len() as u64,
        std::sync::atomic::Ordering::Relaxed,
    );
    ctx.metrics
        .record_send(topic, receipt.placements.len(), request.body.len());
    Ok(Sent {
        receipt,
        queue_id,
        timer: due.is_some(),
    })
}

/// The delivery time a single message's timer properties ask for (`None` for a batch, whose
/// messages' properties are their own and are stored as sent); a half message may not be a
/// timer message.
fn timer_due(
    ctx: &BrokerContext,
    request: &SendRequest<'_>,
    directives: &Directives<'_>,
    half: bool,
) -> Result<Option<i64>, Refusal> {
    if request.batch.is_some() || directives.timer.is_none() {
        return Ok(None);
    }
    let due = super::timer::due_ms(
        directives.timer,
        super::timer::now_ms(),
        ctx.timers.settings.max_delay_ms,
    )?;
    if half && due.is_some() {
        return Err(Refusal::new(
            RefusalKind::InvalidMessage,
            "a timer message cannot be a transactional (half) message",
        ));
    }
    Ok(due)
}

/// Refuses a half message that is a batch or delayed (RocketMQ refuses both).
fn check_half_shape(request: &SendRequest<'_>, directives: &Directives<'_>) -> Result<(), Refusal> {
    let reason = if request.batch.is_some() {
        "a batch cannot be a transactional (half) message"
    } else if delay_level(directives.delay).is_some() {
        "a delayed message (DELAY property) cannot be a transactional (half) message"
    } else {
        return Ok(());
    };
    Err(Refusal::new(RefusalKind::InvalidMessage, reason))
}

/// Appends `drafts` as one batch and waits for the acknowledgement.
pub async fn put(ctx: &BrokerContext, drafts: &[DraftRecord<'_>]) -> Result<PutReceipt, SendError> {
    Ok(ack::put_messages(ctx, drafts).await?)
}

/// Refuses properties longer than a client may send ([`CLIENT_PROPERTIES_LEN_MAX`]), with a
/// remark that counts what the client sent (not what the record would hold).
pub fn check_properties_len(properties: &[u8]) -> Result<(), Refusal> {
    // The record encoder ends unterminated properties with a separator before the CRC.
    let unterminated = !properties.is_empty() && properties.last() != Some(&PROPERTY_SEPARATOR);
    let max = CLIENT_PROPERTIES_LEN_MAX - usize::from(unterminated);
    if properties.len() > max {
        return Err(Refusal::new(
            RefusalKind::PropertiesTooLarge,
            format!(
                "message properties are {} bytes; at most {max} fit (RocketMQ's limit is \
                 {PROPERTIES_LEN_MAX} bytes including what the broker adds, and ferromq adds a \
                 {}-byte CRC property)",
                properties.len(),
                PROPERTIES_LEN_MAX - CLIENT_PROPERTIES_LEN_MAX
            ),
        ));
    }
    Ok(())
}

/// The queue a send goes to: the one asked for when the topic has it (RocketMQ's bound: the
/// larger of the write and read queue counts), queue 0 for a negative id ("any queue").
/// A queue the topic does not have is refused as RocketMQ refuses it (SYSTEM_ERROR, which
/// Java producers retry on a fresh route), never wrapped into another queue.
fn send_queue_id(
    ctx: &BrokerContext,
    topic: &str,
    requested: i32,
    write_queue_nums: i32,
) -> Result<i32, Refusal> {
    if requested < 0 {
        return Ok(0);
    }
    let read_queue_nums = ctx.topics.read(topic, |c| c.read_queue_nums).unwrap_or(0);
    let addressable = write_queue_nums.max(read_queue_nums);
    if requested >= addressable {
        return Err(Refusal::new(
            RefusalKind::QueueMissing,
            format!(
                "request queueId[{requested}] is illegal: topic {topic} has {addressable} queues"
            ),
        ));
    }
    Ok(requested)
}

/// The topic's writable queue count for a client send, creating the topic when the broker
/// allows it; reserved topics and invalid names are refused (`access::client_topic`).
pub fn writable_queue_nums(
    ctx: &BrokerContext,
    topic: &str,
    requested_queue_nums: i32,
) -> Result<i32, Refusal> {
    access::client_topic(ctx, topic, Request::Send)?;
    // (perm, writeQueueNums): read in place rather than cloning the config per send.
    let (perm, write_queue_nums) = match ctx.topics.read(topic, |c| (c.perm, c.write_queue_nums)) {
        Some(found) => found,
        None if ctx.runtime_config.auto_create_topic_enable() => {
            let queue_nums = (requested_queue_nums.max(1) as u32)
                .min(ctx.runtime_config.default_topic_queue_nums());
            let created = ctx
                .topics
                .put_if_absent(topic_with_queues(topic, queue_nums))
                .map_err(|e| Refusal::new(RefusalKind::Internal, e.to_string()))?;
            tracing::info!(%topic, queues = created.write_queue_nums, "topic created on first send");
            ctx.register_now.notify_one();
            (created.perm, created.write_queue_nums)
        }
        None => {
            return Err(Refusal::new(
                RefusalKind::TopicMissing,
                format!("topic {topic} does not exist and autoCreateTopicEnable is false"),
            ));
        }
    };
    if perm & PERM_WRITE == 0 {
        return Err(Refusal::new(
            RefusalKind::TopicPermission,
            format!("topic {topic} is not writable"),
        ));
    }
    if write_queue_nums <= 0 {
        return Err(Refusal::new(
            RefusalKind::TopicPermission,
            format!("topic {topic} has no writable queue"),
        ));
    }
    Ok(write_queue_nums)
}

/// The delay level a message's `DELAY` property value asks for (0 or unreadable: none).
fn delay_level(value: Option<&str>) -> Option<u32> {
    value
        .and_then(|level| level.trim().parse::<u32>().ok())
        .filter(|level| *level > 0)
}

/// The properties that decide how a single send is stored (a half message, a delay level, a
/// timer), each as [`Properties::get_str`] finds it, read in one scan: looked up one by one,
/// each absent name was a search of the whole property string, six per send.
struct Directives<'a> {
    /// `TRAN_MSG`.
    prepared: Option<&'a str>,
    /// `DELAY`.
    delay: Option<&'a str>,
    timer: super::timer::TimerProperties<'a>,
}

impl<'a> Directives<'a> {
    fn read(properties: &'a [u8]) -> Directives<'a> {
        let [t0, t1, t2, t3] = super::timer::TimerProperties::NAMES;
        let [prepared, delay, v0, v1, v2, v3] = Properties(properties).get_strs([
            PROPERTY_TRANSACTION_PREPARED,
            PROPERTY_DELAY,
            t0,
            t1,
            t2,
            t3,
        ]);
        Directives {
            prepared,
            delay,
            timer: super::timer::TimerProperties::from_values([v0, v1, v2, v3]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::timer::{
        PROPERTY_START_DELIVER_TIME, PROPERTY_TIMER_DELAY_MS, PROPERTY_TIMER_DELAY_SEC,
        PROPERTY_TIMER_DELIVER_MS,
    };

    /// The one-scan read finds what a lookup per name finds: the first value of each name,
    /// none for an absent name or a value that is not UTF-8, whatever the order and the
    /// other properties around them.
    #[test]
    fn directives_read_in_one_scan_match_a_lookup_per_name() {
        let cases: Vec<Vec<u8>> = vec![
            Vec::new(),
            Properties::encode([("UNIQ_KEY", "abc"), ("WAIT", "true")]),
            Properties::encode([
                (PROPERTY_TIMER_DELAY_MS, "1500"),
                ("TAGS", "t"),
                (PROPERTY_DELAY, "3"),
                (PROPERTY_TRANSACTION_PREPARED, "true"),
                (PROPERTY_TIMER_DELIVER_MS, "99"),
                (PROPERTY_DELAY, "4"),
                (PROPERTY_START_DELIVER_TIME, "7"),
                (PROPERTY_TIMER_DELAY_SEC, "2"),
            ]),
            [
                PROPERTY_DELAY.as_bytes(),
                &[1, 0xff, 2],
                b"\x02TIMER_DELAY_SEC\x015\x02",
            ]
            .concat(),
        ];
        for properties in &cases {
            let read = Directives::read(properties);
            let get = |name: &str| Properties(properties).get_str(name);
            assert_eq!(read.prepared, get(PROPERTY_TRANSACTION_PREPARED));
            assert_eq!(read.delay, get(PROPERTY_DELAY));
            assert_eq!(read.timer.deliver_ms, get(PROPERTY_TIMER_DELIVER_MS));
            assert_eq!(
                read.timer.start_deliver_time,
                get(PROPERTY_START_DELIVER_TIME)
            );
            assert_eq!(read.timer.delay_sec, get(PROPERTY_TIMER_DELAY_SEC));
            assert_eq!(read.timer.delay_ms, get(PROPERTY_TIMER_DELAY_MS));
            assert_eq!(
                read.timer,
                crate::core::timer::TimerProperties::read(properties)
            );
        }
        let mixed = Directives::read(&cases[2]);
        assert_eq!((mixed.delay, mixed.prepared), (Some("3"), Some("true")));
        assert_eq!(mixed.timer.delay_ms, Some("1500"));
        assert!(Directives::read(&cases[1]).timer.is_none());
    }
}
