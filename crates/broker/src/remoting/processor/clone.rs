//! CLONE_GROUP_OFFSET (314): copy a source group's committed offsets on a topic (or on every
//! topic it has offsets for) to a destination group.
//!
//! - The copy is a **reset of the destination group**: one reset record per topic through
//!   `core::reset::apply`, so it is durable before the reply, starts a new generation of
//!   (destGroup, topic), and fences the destination's online consumers exactly as
//!   `resetOffsetByTime` does; a running destination consumer cannot undo it (invariant 3).
//! - Only queues the source group has an offset for are copied; the destination's other
//!   queues keep theirs (Java replaces the whole queue map; ferromq never erases progress it
//!   was not asked to move).
//! - Without `offline=true`, a topic is skipped when the source group is online but none of
//!   its members subscribes to it (Java's rule).
//! - The destination group gets its subscription config and `%RETRY%<destGroup>` topic when
//!   missing (as a heartbeat would create them): Java mqadmin locates a group's brokers
//!   through that topic's route, and `queryMsgById` asks about every group with offsets.
//! - The reply is SUCCESS (Java's admin reads nothing else) plus ferromq's ext fields for
//!   `ferromq admin cloneGroupOffset`: `cloned` = `topic/queueId:old>new,...` (`old` is `-1`
//!   when the destination had no offset), `skipped` = topics left out by the rule above, and
//!   `generation` (the highest one established).
//! - An internal source or destination group (`%SCHEDULE%`), or an explicit reserved topic, is
//!   refused with NO_PERMISSION (`core::access`); when every topic of the source is cloned, reserved
//!   topics are left out and listed in `skipped`.

use ferromq_protocol::remoting::headers::offset::CloneGroupOffsetRequestHeader;
use ferromq_protocol::remoting::RemotingCommand;

use super::code_map::error_reply;
use super::{bad_header, success};
use crate::context::BrokerContext;
use crate::core::authorisation::Principal;
use crate::core::reset;

pub(super) async fn handle(
    ctx: &BrokerContext,
    principal: &Principal,
    command: &RemotingCommand,
) -> RemotingCommand {
    let header = match command.decode_header::<CloneGroupOffsetRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    let done = match reset::clone_group(
        ctx,
        principal,
        &header.src_group,
        &header.dest_group,
        header.topic.as_deref(),
        header.offline.unwrap_or(false),
    )
    .await
    {
        Ok(done) => done,
        Err(error) => return error_reply(command, &error),
    };
    for (topic, applied) in &done.resets {
        super::reset::notify_reset(ctx, &header.dest_group, topic, applied, 0, false);
    }
    // The destination now holds offsets: give it the retry topic through which Java admin
    // tools (queryMsgById, consumerProgress) locate a group's brokers.
    if let Err(refusal) = crate::core::membership::ensure_consumer_group(ctx, &header.dest_group) {
        return error_reply(command, &refusal);
    }
    let mut reply = success(command);
    reply.ext_fields.insert("cloned", done.cloned.join(","));
    reply.ext_fields.insert("skipped", done.skipped.join(","));
    reply.ext_fields.insert(
        crate::codes::RESET_GENERATION_EXT,
        done.generation.to_string(),
    );
    reply
}
