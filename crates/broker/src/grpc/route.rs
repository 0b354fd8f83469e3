//! QueryRoute: one `MessageQueue` per queue of the topic, all on this broker (`id` 0, the
//! endpoints the client used), with RocketMQ's permission mapped per queue and the message
//! types the topic accepts. An unknown topic is created when `autoCreateTopicEnable` allows
//! it (as a remoting send would), else TOPIC_NOT_FOUND.

use ferromq_protocol::grpc::{
    Address, AddressScheme, Broker, Code, Endpoints, MessageQueue, MessageType, Permission,
    QueryRouteRequest, QueryRouteResponse, Resource,
};
use ferromq_protocol::remoting::body::topic::TopicConfig;

use super::status::{ok, refusal_code, status};
use crate::catalog::topics::{PERM_READ, PERM_WRITE};
use crate::context::BrokerContext;
use crate::core::access::{self, Request};

/// Topic attribute naming the message type a topic accepts (RocketMQ's `message.type`; the
/// admin tools write it with a leading `+`).
pub const ATTRIBUTE_MESSAGE_TYPE: &str = "message.type";

/// Answers a QueryRoute. `own_endpoints` are used when the request names none.
pub fn query_route(
    ctx: &BrokerContext,
    request: &QueryRouteRequest,
    own_endpoints: &Endpoints,
) -> QueryRouteResponse {
    let refused = |status| QueryRouteResponse {
        status: Some(status),
        message_queues: Vec::new(),
    };
    let Some(topic) = request.topic.as_ref().filter(|t| !t.name.is_empty()) else {
        return refused(status(Code::IllegalTopic, "topic.name is required"));
    };
    if let Err(error) = ferromq_protocol::names::validate_topic(&topic.name) {
        return refused(status(Code::IllegalTopic, error.to_string()));
    }
    if let Err(refusal) = access::client_topic(ctx, &topic.name, Request::Send) {
        return refused(status(refusal_code(&refusal), refusal.remark));
    }
    let config = match ctx.topics.get(&topic.name) {
        Some(config) => config,
        None => {
            let created = crate::core::send::writable_queue_nums(
                ctx,
                &topic.name,
                ctx.runtime_config.default_topic_queue_nums() as i32,
            );
            match (created, ctx.topics.get(&topic.name)) {
                (Ok(_), Some(config)) => config,
                (Err(refusal), _) => {
                    return refused(status(refusal_code(&refusal), refusal.remark))
                }
                (Ok(_), None) => {
                    return refused(status(
                        Code::TopicNotFound,
                        format!("topic {} was deleted while it was created", topic.name),
                    ))
                }
            }
        }
    };
    let endpoints = match &request.endpoints {
        Some(e) if !e.addresses.is_empty() => e.clone(),
        _ => own_endpoints.clone(),
    };
    QueryRouteResponse {
        status: Some(ok()),
        message_queues: message_queues(ctx, topic, &config, &endpoints),
    }
}

fn message_queues(
    ctx: &BrokerContext,
    topic: &Resource,
    config: &TopicConfig,
    endpoints: &Endpoints,
) -> Vec<MessageQueue> {
    let accepted: Vec<i32> = accepted_types(Some(config))
        .into_iter()
        .map(|t| t as i32)
        .collect();
    let broker = Broker {
        name: ctx.config.broker_name.clone(),
        id: 0,
        endpoints: Some(endpoints.clone()),
    };
    let queue_count = config.read_queue_nums.max(config.write_queue_nums).max(0);
    (0..queue_count)
        .map(|id| MessageQueue {
            topic: Some(topic.clone()),
            id,
            permission: permission(config, id) as i32,
            broker: Some(broker.clone()),
            accept_message_types: accepted.clone(),
        })
        .collect()
}

/// Queue `id`'s permission: readable when the topic is readable and `id` is below its read
/// queue count, writable likewise.
pub fn permission(config: &TopicConfig, id: i32) -> Permission {
    let read = config.perm & PERM_READ != 0 && id < config.read_queue_nums;
    let write = config.perm & PERM_WRITE != 0 && id < config.write_queue_nums;
    match (read, write) {
        (true, true) => Permission::ReadWrite,
        (true, false) => Permission::Read,
        (false, true) => Permission::Write,
        (false, false) => Permission::None,
    }
}

/// The message types a topic accepts, from its `message.type` attribute. A topic without
/// one (every topic made over remoting) accepts every type, as `MIXED`: ferromq's remoting
/// path has never checked types.
pub fn accepted_types(config: Option<&TopicConfig>) -> Vec<MessageType> {
    let all = vec![
        MessageType::Normal,
        MessageType::Fifo,
        MessageType::Delay,
        MessageType::Transaction,
    ];
    let Some(config) = config else { return all };
    let value = config
        .attributes
        .get(ATTRIBUTE_MESSAGE_TYPE)
        .or_else(|| config.attributes.get(&format!("+{ATTRIBUTE_MESSAGE_TYPE}")));
    match value.map(|v| v.to_ascii_uppercase()).as_deref() {
        Some("NORMAL") => vec![MessageType::Normal],
        Some("FIFO") => vec![MessageType::Fifo],
        Some("DELAY") => vec![MessageType::Delay],
        Some("TRANSACTION") => vec![MessageType::Transaction],
        _ => all,
    }
}

/// The endpoints of `addr` (the broker's own gRPC address).
pub fn endpoints_of(addr: std::net::SocketAddr) -> Endpoints {
    Endpoints {
        scheme: if addr.is_ipv4() {
            AddressScheme::IPv4
        } else {
            AddressScheme::IPv6
        } as i32,
        addresses: vec![Address {
            host: addr.ip().to_string(),
            port: i32::from(addr.port()),
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::topics::topic_with_queues;

    #[test]
    fn permissions_follow_perm_bits_and_queue_counts() {
        let mut config = topic_with_queues("T", 4);
        config.read_queue_nums = 2;
        assert_eq!(permission(&config, 0), Permission::ReadWrite);
        assert_eq!(permission(&config, 3), Permission::Write);
        config.perm = PERM_READ;
        assert_eq!(permission(&config, 0), Permission::Read);
        assert_eq!(permission(&config, 3), Permission::None);
    }

    #[test]
    fn message_type_attribute_limits_accepted_types() {
        let mut config = topic_with_queues("T", 1);
        assert_eq!(accepted_types(Some(&config)).len(), 4);
        config
            .attributes
            .insert("+message.type".into(), "FIFO".into());
        assert_eq!(accepted_types(Some(&config)), vec![MessageType::Fifo]);
        config
            .attributes
            .insert("message.type".into(), "MIXED".into());
        assert_eq!(accepted_types(Some(&config)).len(), 4);
    }
}
