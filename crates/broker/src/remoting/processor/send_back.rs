//! CONSUMER_SEND_MSG_BACK (36): decode, call `core::send_back`, answer. RocketMQ's magic
//! values end here: a negative delay level means "to the dead-letter topic", 0 "the default
//! delay", and a negative CommitLog offset is refused.

use ferromq_protocol::remoting::headers::client::ConsumerSendMsgBackRequestHeader;
use ferromq_protocol::remoting::RemotingCommand;

use super::code_map::error_reply;
use super::{bad_header, success};
use crate::context::BrokerContext;
use crate::core::access::{self, Request};
use crate::core::send_back::{send_back, Redelivery, SendBackRequest};
use crate::sessions::registry::ClientChannel;

pub(super) async fn handle(
    ctx: &BrokerContext,
    channel: &ClientChannel,
    command: &RemotingCommand,
) -> RemotingCommand {
    let header = match command.decode_header::<ConsumerSendMsgBackRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    let phys_offset = match access::commitlog_offset(ctx, header.offset, Request::SendBack) {
        Ok(offset) => offset,
        Err(refusal) => return error_reply(command, &refusal),
    };
    let redelivery = match header.delay_level {
        level if level < 0 => Redelivery::DeadLetter,
        0 => Redelivery::Default,
        level => Redelivery::Level(level as u32),
    };
    let request = SendBackRequest {
        group: header.group,
        phys_offset,
        redelivery,
        origin_msg_id: header.origin_msg_id,
        max_reconsume_times: header.max_reconsume_times,
        peer: channel.peer,
    };
    match send_back(ctx, &request).await {
        Ok(_) => success(command),
        Err(error) => error_reply(command, &error),
    }
}
