//! The remoting side of ACL: what each request code names and needs, read from its ext
//! fields (and, for heartbeats and queue locks, its body), handed to the core's one check
//! (`core::authorisation::authorise`). Nothing is decided here.
//!
//! | request | needs |
//! |---|---|
//! | SEND_MESSAGE(_V2), SEND_BATCH_MESSAGE | PUB on the topic (SUB on the group for its retry topic) |
//! | CONSUMER_SEND_MSG_BACK | SUB on the group, PUB on the original topic |
//! | PULL_MESSAGE, LITE_PULL_MESSAGE, QUERY/UPDATE_CONSUMER_OFFSET | SUB on the topic and the group |
//! | GET_MAX/MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP, GET_EARLIEST_MSG_STORETIME, QUERY_MESSAGE | SUB on the topic |
//! | HEART_BEAT | SUB on each consumer group and each subscribed topic |
//! | UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP, LOCK/UNLOCK_BATCH_MQ | SUB on the group |
//! | END_TRANSACTION | a valid signature |
//! | every other code (topic and group changes, resets, clones, broker config, listings, stats, offset history, damaged records, view by id, role changes) | an admin account |
//!
//! A topic named `%RETRY%<group>` is the group's: it needs the group's permission, as in
//! RocketMQ. Retry and DLQ handling otherwise follow RocketMQ's `PlainAccessResource`.

use std::net::IpAddr;

use ferromq_acl::{Needs, Perm, Presented, Resource};
use ferromq_protocol::remoting::acl;
use ferromq_protocol::remoting::body::decode_json;
use ferromq_protocol::remoting::body::heartbeat::HeartbeatData;
use ferromq_protocol::remoting::body::misc::LockBatchRequestBody;
use ferromq_protocol::remoting::codes::request;
use ferromq_protocol::remoting::RemotingCommand;

use crate::context::BrokerContext;
use crate::core::access::Request;
use crate::core::authorisation::{self, Principal};

/// The prefix of a group's retry topic.
const RETRY_PREFIX: &str = "%RETRY%";

/// Checks one request; the reply to send instead when it is refused.
pub(super) fn check(
    ctx: &BrokerContext,
    remote: IpAddr,
    command: &RemotingCommand,
) -> Result<Principal, RemotingCommand> {
    if ctx.acl.is_none() {
        return Ok(Principal::default());
    }
    let bodies = Bodies::decode(command);
    let (request, needs) = needs(command, &bodies);
    let presented = Presented {
        access_key: command.ext_fields.get(acl::ACCESS_KEY).map(|v| v.as_str()),
        signature: command.ext_fields.get(acl::SIGNATURE).map(|v| v.as_str()),
        remote,
    };
    let content = || acl::signed_content(&command.ext_fields, command.body.as_deref());
    authorisation::authorise(ctx, request, presented, content, &needs)
        .map_err(|refusal| super::code_map::error_reply(command, &refusal))
}

/// Bodies that name resources, decoded once (an undecodable body names nothing here; its
/// handler refuses it).
#[derive(Default)]
struct Bodies {
    heartbeat: Option<HeartbeatData>,
    lock: Option<LockBatchRequestBody>,
}

impl Bodies {
    fn decode(command: &RemotingCommand) -> Bodies {
        let body = command.body.as_deref().unwrap_or_default();
        match command.code {
            request::HEART_BEAT => Bodies {
                heartbeat: decode_json(body).ok(),
                lock: None,
            },
            request::LOCK_BATCH_MQ | request::UNLOCK_BATCH_MQ => Bodies {
                heartbeat: None,
                lock: decode_json(body).ok(),
            },
            _ => Bodies::default(),
        }
    }
}

/// The request kind and what it needs.
fn needs<'a>(command: &'a RemotingCommand, bodies: &'a Bodies) -> (Request, Needs<'a>) {
    let ext = |key: &str| command.ext_fields.get(key).map(|v| v.as_str());
    let mut needs = Needs::default();
    let request = match command.code {
        request::SEND_MESSAGE | request::SEND_MESSAGE_V2 | request::SEND_BATCH_MESSAGE => {
            let topic = ext("topic").or(ext("b")).unwrap_or_default();
            needs
                .resources
                .push(match topic.strip_prefix(RETRY_PREFIX) {
                    Some(group) => (Resource::Group(group), Perm::SUB),
                    None => (Resource::Topic(topic), Perm::PUB),
                });
            Request::Send
        }
        request::CONSUMER_SEND_MSG_BACK => {
            needs.resources.push(group(ext("group")));
            needs.resources.push(topic(ext("originTopic"), Perm::PUB));
            Request::SendBack
        }
        request::PULL_MESSAGE | request::LITE_PULL_MESSAGE => {
            sub_topic_and_group(&mut needs, ext("topic"), ext("consumerGroup"));
            Request::Pull
        }
        request::QUERY_CONSUMER_OFFSET => {
            sub_topic_and_group(&mut needs, ext("topic"), ext("consumerGroup"));
            Request::QueryOffset
        }
        request::UPDATE_CONSUMER_OFFSET => {
            sub_topic_and_group(&mut needs, ext("topic"), ext("consumerGroup"));
            Request::Commit
        }
        request::GET_MAX_OFFSET
        | request::GET_MIN_OFFSET
        | request::SEARCH_OFFSET_BY_TIMESTAMP
        | request::GET_EARLIEST_MSG_STORETIME => {
            needs.resources.push(topic(ext("topic"), Perm::SUB));
            Request::QueueInfo
        }
        request::QUERY_MESSAGE => {
            needs.resources.push(topic(ext("topic"), Perm::SUB));
            Request::QueryMessage
        }
        request::HEART_BEAT => {
            heartbeat_needs(&mut needs, bodies.heartbeat.as_ref());
            Request::Client
        }
        request::UNREGISTER_CLIENT | request::GET_CONSUMER_LIST_BY_GROUP => {
            if let Some(name) = ext("consumerGroup").filter(|g| !g.is_empty()) {
                needs.resources.push((Resource::Group(name), Perm::SUB));
            }
            Request::Client
        }
        request::LOCK_BATCH_MQ | request::UNLOCK_BATCH_MQ => {
            let name = bodies.lock.as_ref().map(|b| b.consumer_group.as_str());
            needs.resources.push(group(name));
            Request::Client
        }
        request::END_TRANSACTION => Request::EndTransaction,
        code => {
            needs.admin = true;
            admin_request(code)
        }
    };
    (request, needs)
}

/// The refusal label of an administrators' request.
fn admin_request(code: i32) -> Request {
    match code {
        request::UPDATE_AND_CREATE_TOPIC => Request::UpdateTopic,
        request::DELETE_TOPIC_IN_BROKER => Request::DeleteTopic,
        request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP => Request::UpdateGroup,
        request::DELETE_SUBSCRIPTIONGROUP => Request::DeleteGroup,
        request::INVOKE_BROKER_TO_RESET_OFFSET => Request::Reset,
        request::CLONE_GROUP_OFFSET => Request::Clone,
        request::VIEW_MESSAGE_BY_ID => Request::ViewMessage,
        _ => Request::Admin,
    }
}

fn heartbeat_needs<'a>(needs: &mut Needs<'a>, data: Option<&'a HeartbeatData>) {
    let Some(data) = data else {
        return;
    };
    for consumer in &data.consumer_data_set {
        needs
            .resources
            .push((Resource::Group(&consumer.group_name), Perm::SUB));
        for subscription in &consumer.subscription_data_set {
            needs
                .resources
                .push(topic(Some(&subscription.topic), Perm::SUB));
        }
    }
}

fn sub_topic_and_group<'a>(
    needs: &mut Needs<'a>,
    topic_name: Option<&'a str>,
    group_name: Option<&'a str>,
) {
    needs.resources.push(topic(topic_name, Perm::SUB));
    needs.resources.push(group(group_name));
}

/// A topic resource; a group's retry topic is the group's.
fn topic(name: Option<&str>, perm: Perm) -> (Resource<'_>, Perm) {
    let name = name.unwrap_or_default();
    match name.strip_prefix(RETRY_PREFIX) {
        Some(group) => (Resource::Group(group), Perm::SUB),
        None => (Resource::Topic(name), perm),
    }
}

fn group(name: Option<&str>) -> (Resource<'_>, Perm) {
    (Resource::Group(name.unwrap_or_default()), Perm::SUB)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(code: i32, fields: &[(&str, &str)]) -> RemotingCommand {
        let ext = fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        RemotingCommand::new_request(code, ext)
    }

    #[test]
    fn each_family_names_what_rocketmq_names() {
        let bodies = Bodies::default();
        let send = command(request::SEND_MESSAGE_V2, &[("a", "pg"), ("b", "orders")]);
        let (kind, needs) = needs(&send, &bodies);
        assert_eq!(kind, Request::Send);
        assert_eq!(
            needs.resources,
            vec![(Resource::Topic("orders"), Perm::PUB)]
        );
        assert!(!needs.admin);
        let retry = command(request::SEND_MESSAGE, &[("topic", "%RETRY%cg")]);
        let (_, needs_retry) = super::needs(&retry, &bodies);
        assert_eq!(
            needs_retry.resources,
            vec![(Resource::Group("cg"), Perm::SUB)]
        );
        let pull = command(
            request::PULL_MESSAGE,
            &[("topic", "t"), ("consumerGroup", "g")],
        );
        let (kind, needs_pull) = super::needs(&pull, &bodies);
        assert_eq!(kind, Request::Pull);
        assert_eq!(
            needs_pull.resources,
            vec![
                (Resource::Topic("t"), Perm::SUB),
                (Resource::Group("g"), Perm::SUB)
            ]
        );
        for code in [
            request::UPDATE_AND_CREATE_TOPIC,
            request::DELETE_TOPIC_IN_BROKER,
            request::INVOKE_BROKER_TO_RESET_OFFSET,
            request::UPDATE_BROKER_CONFIG,
            request::GET_ALL_TOPIC_CONFIG,
            crate::codes::OFFSET_HISTORY,
        ] {
            let request = command(code, &[]);
            let (_, admin) = super::needs(&request, &bodies);
            assert!(admin.admin, "{code}");
        }
    }
}
