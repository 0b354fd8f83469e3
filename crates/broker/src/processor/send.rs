//! SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320).
//!
//! A send is answered SUCCESS only once the store says the records are acknowledgeable under
//! the flush policy (invariant 2). A flush that times out or fails is an error reply the
//! client retries (ferromq code `NOT_DURABLE`), never RocketMQ's FLUSH_DISK_TIMEOUT, which
//! Java clients count as sent.
//!
//! Clients may not send to a reserved topic (`access::client_topic`): the delay scheduler's,
//! the transaction topics, the offsets topic. A message's properties may hold at most
//! [`CLIENT_PROPERTIES_LEN_MAX`] bytes: RocketMQ's 32,767 less the CRC property ferromq adds to
//! every record (RocketMQ's broker likewise counts the properties it adds against 32,767).

use ferromq_protocol::message::record::{CLIENT_PROPERTIES_LEN_MAX, PROPERTIES_LEN_MAX};
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::send::{
    SendMessageRequestHeader, SendMessageRequestHeaderV2, SendMessageResponseHeader,
};
use ferromq_protocol::remoting::RemotingCommand;
use ferromq_protocol::{DraftRecord, MessageId, Properties, PROPERTY_SEPARATOR};
use ferromq_store::{AppendError, PutReceipt};

use super::access::{self, Request};
use super::bad_header;
use super::batch::decode_batch;
use crate::clients::ClientChannel;
use crate::codes;
use crate::context::BrokerContext;
use crate::topics::{topic_with_queues, PERM_WRITE};

/// Property naming a message's delay level.
pub(crate) const PROPERTY_DELAY: &str = "DELAY";

/// A send that failed, as a reply code and remark.
#[derive(Debug)]
pub(crate) struct Refusal {
    pub code: i32,
    pub remark: String,
}

impl Refusal {
    pub(crate) fn new(code: i32, remark: impl Into<String>) -> Refusal {
        Refusal {
            code,
            remark: remark.into(),
        }
    }

    pub(crate) fn reply(self, command: &RemotingCommand) -> RemotingCommand {
        command.reply(self.code, Some(self.remark))
    }
}

pub(super) async fn handle(
    ctx: &BrokerContext,
    channel: &ClientChannel,
    command: &RemotingCommand,
) -> RemotingCommand {
    let header = match command.code {
        request::SEND_MESSAGE => command.decode_header::<SendMessageRequestHeader>(),
        _ => command
            .decode_header::<SendMessageRequestHeaderV2>()
            .map(Into::into),
    };
    let header = match header {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    match send(ctx, channel, command, &header).await {
        Ok((receipt, queue_id)) => {
            let first = &receipt.placements[0];
            let ids = message_ids(
                ctx.broker_addr,
                receipt.placements.iter().map(|p| p.phys_offset),
            );
            let reply = SendMessageResponseHeader {
                msg_id: ids,
                queue_id,
                queue_offset: first.queue_offset as i64,
                transaction_id: None,
                batch_uniq_id: None,
                recall_handle: None,
                msg_region: Some("DefaultRegion".into()),
                trace_on: Some("false".into()),
            };
            command.reply(response::SUCCESS, None).with_header(&reply)
        }
        Err(refusal) => refusal.reply(command),
    }
}

async fn send(
    ctx: &BrokerContext,
    channel: &ClientChannel,
    command: &RemotingCommand,
    header: &SendMessageRequestHeader,
) -> Result<(PutReceipt, i32), Refusal> {
    let body = command.body.as_deref().unwrap_or_default();
    let topic = header.topic.as_str();
    let before = ctx.topics.get(topic).is_some();
    let queue_nums = writable_queue_nums(ctx, topic, header.default_topic_queue_nums)?;
    let queue_id = if before {
        send_queue_id(ctx, topic, header.queue_id, queue_nums)?
    } else {
        // This send created the topic: the client picked its queue from the auto-create
        // template's route (TBW102), not the topic's, so map it into the topic's queues.
        header.queue_id.max(0) % queue_nums
    };
    let properties = header.properties.as_deref().unwrap_or_default().as_bytes();
    check_properties_len(properties)?;
    let base = DraftRecord {
        topic,
        queue_id: queue_id as u32,
        flag: header.flag,
        sys_flag: header.sys_flag,
        born_timestamp_ms: header.born_timestamp,
        born_host: channel.peer,
        store_host: ctx.broker_addr,
        reconsume_times: header.reconsume_times.unwrap_or(0).max(0),
        prepared_tx_offset: 0,
        body,
        properties,
    };
    let batch = command.code == request::SEND_BATCH_MESSAGE || header.batch == Some(true);
    let receipt = if batch {
        let entries = decode_batch(body).map_err(|e| Refusal::new(response::MESSAGE_ILLEGAL, e))?;
        for entry in &entries {
            check_properties_len(entry.properties)?;
        }
        let drafts: Vec<DraftRecord<'_>> = entries
            .iter()
            .map(|entry| DraftRecord {
                flag: entry.flag,
                body: entry.body,
                properties: entry.properties,
                ..base.clone()
            })
            .collect();
        store_durably(ctx, &drafts).await?
    } else if let Some(level) = delay_level(properties) {
        super::scheduler::schedule(ctx, &base, level).await?
    } else {
        store_durably(ctx, &[base]).await?
    };
    ctx.counters.messages_put.fetch_add(
        receipt.placements.len() as u64,
        std::sync::atomic::Ordering::Relaxed,
    );
    ctx.metrics
        .record_send(topic, receipt.placements.len(), body.len());
    Ok((receipt, queue_id))
}

/// Refuses properties longer than a client may send ([`CLIENT_PROPERTIES_LEN_MAX`]), with a
/// remark that counts what the client sent (not what the record would hold).
pub(crate) fn check_properties_len(properties: &[u8]) -> Result<(), Refusal> {
    // The record encoder ends unterminated properties with a separator before the CRC.
    let unterminated = !properties.is_empty() && properties.last() != Some(&PROPERTY_SEPARATOR);
    let max = CLIENT_PROPERTIES_LEN_MAX - usize::from(unterminated);
    if properties.len() > max {
        return Err(Refusal::new(
            response::MESSAGE_ILLEGAL,
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
    let read_queue_nums = ctx.topics.get(topic).map_or(0, |c| c.read_queue_nums);
    let addressable = write_queue_nums.max(read_queue_nums);
    if requested >= addressable {
        return Err(Refusal::new(
            response::SYSTEM_ERROR,
            format!(
                "request queueId[{requested}] is illegal: topic {topic} has {addressable} queues"
            ),
        ));
    }
    Ok(requested)
}

/// The topic's writable queue count for a client send, creating the topic when the broker
/// allows it; reserved topics and invalid names are refused (`access::client_topic`).
pub(crate) fn writable_queue_nums(
    ctx: &BrokerContext,
    topic: &str,
    requested_queue_nums: i32,
) -> Result<i32, Refusal> {
    access::client_topic(ctx, topic, Request::Send)?;
    let config = match ctx.topics.get(topic) {
        Some(config) => config,
        None if ctx.runtime_config.auto_create_topic_enable() => {
            let queue_nums = (requested_queue_nums.max(1) as u32)
                .min(ctx.runtime_config.default_topic_queue_nums());
            let created = ctx
                .topics
                .put_if_absent(topic_with_queues(topic, queue_nums))
                .map_err(|e| Refusal::new(response::SYSTEM_ERROR, e.to_string()))?;
            tracing::info!(%topic, queues = created.write_queue_nums, "topic created on first send");
            ctx.register_now.notify_one();
            created
        }
        None => {
            return Err(Refusal::new(
                response::TOPIC_NOT_EXIST,
                format!("topic {topic} does not exist and autoCreateTopicEnable is false"),
            ));
        }
    };
    if config.perm & PERM_WRITE == 0 {
        return Err(Refusal::new(
            response::NO_PERMISSION,
            format!("topic {topic} is not writable"),
        ));
    }
    if config.write_queue_nums <= 0 {
        return Err(Refusal::new(
            response::NO_PERMISSION,
            format!("topic {topic} has no writable queue"),
        ));
    }
    Ok(config.write_queue_nums)
}

/// Appends the records and waits until they are acknowledgeable.
pub(crate) async fn store_durably(
    ctx: &BrokerContext,
    drafts: &[DraftRecord<'_>],
) -> Result<PutReceipt, Refusal> {
    let receipt = ctx.store.append(drafts).map_err(|error| match error {
        AppendError::InvalidMessage(_)
        | AppendError::MessageTooLarge { .. }
        | AppendError::InvalidName(_) => Refusal::new(response::MESSAGE_ILLEGAL, error.to_string()),
        AppendError::ReservedTopic { .. } => {
            Refusal::new(response::NO_PERMISSION, error.to_string())
        }
        // Dispatch is failing and retrying: the producer retries (Java: SYSTEM_BUSY is one of
        // its retry codes).
        AppendError::DispatchStalled(_) => Refusal::new(response::SYSTEM_BUSY, error.to_string()),
        other => Refusal::new(response::SERVICE_NOT_AVAILABLE, other.to_string()),
    })?;
    ctx.store
        .acknowledged(receipt.ticket())
        .await
        .map_err(|error| {
            Refusal::new(
                codes::NOT_DURABLE,
                format!("the message may not be durable: {error}"),
            )
        })?;
    Ok(receipt)
}

fn delay_level(properties: &[u8]) -> Option<u32> {
    Properties(properties)
        .get_str(PROPERTY_DELAY)
        .and_then(|level| level.trim().parse::<u32>().ok())
        .filter(|level| *level > 0)
}

/// The broker message ids of records stored at `phys_offsets`, comma-separated, exactly as
/// [`MessageId::encode`] writes each. The store-host part is encoded once and only the offset
/// digits per record: a batch of 64 would otherwise spend most of its reply time formatting.
fn message_ids(
    store_host: std::net::SocketAddr,
    phys_offsets: impl Iterator<Item = u64>,
) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let template = MessageId {
        store_host,
        phys_offset: 0,
    }
    .encode();
    // The last 16 hex digits are the offset; everything before them is the host and port.
    let prefix = &template[..template.len() - 16];
    let mut out = String::new();
    for (index, offset) in phys_offsets.enumerate() {
        if index > 0 {
            out.push(',');
        }
        out.push_str(prefix);
        for shift in (0..16).rev() {
            out.push(HEX[((offset >> (shift * 4)) & 0xF) as usize] as char);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_ids_match_message_id_encode() {
        for host in ["10.1.2.3:10911", "[fe80::1]:30911"] {
            let store_host: std::net::SocketAddr = host.parse().unwrap();
            let offsets = [0u64, 1, 0xABCDEF, u64::MAX >> 1, 1 << 40];
            let expected: Vec<String> = offsets
                .iter()
                .map(|&phys_offset| {
                    MessageId {
                        store_host,
                        phys_offset,
                    }
                    .encode()
                })
                .collect();
            assert_eq!(
                message_ids(store_host, offsets.iter().copied()),
                expected.join(",")
            );
            assert_eq!(message_ids(store_host, std::iter::once(7)), {
                MessageId {
                    store_host,
                    phys_offset: 7,
                }
                .encode()
            });
        }
    }
}
