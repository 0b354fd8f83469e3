//! SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320): decode the header
//! and the batch body, call `core::send`, answer with the message ids. Every rule of a send
//! lives in the core; the error codes come from `code_map`.

use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::send::{
    SendMessageRequestHeader, SendMessageRequestHeaderV2, SendMessageResponseHeader,
};
use ferromq_protocol::remoting::RemotingCommand;
use ferromq_protocol::MessageId;

use super::bad_header;
use super::batch::decode_batch;
use super::code_map::error_reply;
use crate::context::BrokerContext;
use crate::core::error::{Refusal, RefusalKind, SendError};
use crate::core::send::{BatchMessage, SendRequest, Sent};
use crate::sessions::registry::ClientChannel;

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
        Ok(Sent {
            receipt, queue_id, ..
        }) => {
            let first = &receipt.placements[0];
            let ids = message_ids(
                ctx.broker_addr,
                receipt.placements.iter().map(|p| p.phys_offset),
            );
            let reply = SendMessageResponseHeader {
                msg_id: ids.into(),
                queue_id: queue_id as i32,
                queue_offset: first.queue_offset as i64,
                transaction_id: None,
                batch_uniq_id: None,
                recall_handle: None,
                msg_region: Some("DefaultRegion".into()),
                trace_on: Some("false".into()),
            };
            command
                .reply(response::SUCCESS, None)
                .with_owned_header(reply)
        }
        Err(error) => error_reply(command, &error),
    }
}

async fn send(
    ctx: &BrokerContext,
    channel: &ClientChannel,
    command: &RemotingCommand,
    header: &SendMessageRequestHeader,
) -> Result<Sent, SendError> {
    let body = command.body.as_deref().unwrap_or_default();
    let is_batch = command.code == request::SEND_BATCH_MESSAGE || header.batch == Some(true);
    let batch = if is_batch {
        let entries = decode_batch(body)
            .map_err(|e| SendError::Refused(Refusal::new(RefusalKind::InvalidMessage, e)))?;
        Some(
            entries
                .iter()
                .map(|entry| BatchMessage {
                    flag: entry.flag,
                    body: entry.body,
                    properties: entry.properties,
                })
                .collect(),
        )
    } else {
        None
    };
    let request = SendRequest {
        producer_group: &header.producer_group,
        topic: &header.topic,
        // RocketMQ's "any queue" is a negative id.
        queue_id: u32::try_from(header.queue_id).ok(),
        default_topic_queue_nums: header.default_topic_queue_nums,
        flag: header.flag,
        sys_flag: header.sys_flag,
        born_timestamp_ms: header.born_timestamp,
        born_host: channel.peer,
        reconsume_times: header.reconsume_times.unwrap_or(0),
        body,
        properties: header.properties.as_deref().unwrap_or_default().as_bytes(),
        batch,
    };
    crate::core::send::send(ctx, &request).await
}

/// The broker message ids of records stored at `phys_offsets`, comma-separated, exactly as
/// [`MessageId::encode`] writes each, into one string sized up front from the iterator's hint
/// (exact for a batch's placements): no allocation per record.
fn message_ids(
    store_host: std::net::SocketAddr,
    phys_offsets: impl Iterator<Item = u64>,
) -> String {
    let (records, _) = phys_offsets.size_hint();
    let id_len = MessageId {
        store_host,
        phys_offset: 0,
    }
    .hex_len();
    let mut out = String::with_capacity(records.max(1) * (id_len + 1));
    for (index, phys_offset) in phys_offsets.enumerate() {
        if index > 0 {
            out.push(',');
        }
        MessageId {
            store_host,
            phys_offset,
        }
        .write_hex(&mut out);
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
