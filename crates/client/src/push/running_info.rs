//! GET_CONSUMER_RUNNING_INFO (307), forwarded by a broker for `mqadmin consumerStatus`: the
//! push consumer answers with its real state (`ConsumerRunningInfo`): its settings as
//! properties, its subscriptions (the retry topic included), and per assigned queue the
//! offset it would commit now, the cached messages, the orderly lock and the last pull and
//! consume times. The per-topic rate table (`statusTable`) is left empty: ferromq's push
//! consumer keeps totals ([`super::PushConsumerStats`]), not per-topic rates.

use ferromq_protocol::remoting::body::mq_map::{encode_fastjson, MqMap};
use ferromq_protocol::remoting::body::running_info::{
    ConsumerRunningInfo, PROP_CLIENT_VERSION, PROP_CONSUMER_START_TIMESTAMP, PROP_CONSUME_ORDERLY,
    PROP_CONSUME_TYPE, PROP_NAMESERVER_ADDR, PROP_THREADPOOL_CORE_SIZE,
};
use ferromq_protocol::remoting::codes::response;
use ferromq_protocol::remoting::headers::client::GetConsumerRunningInfoRequestHeader;
use ferromq_protocol::remoting::RemotingCommand;

use super::session::subscription_data;
use super::{ConsumeFromWhere, Inner};

/// The reply to a forwarded GET_CONSUMER_RUNNING_INFO: SUCCESS with the running info, or
/// SYSTEM_ERROR naming the group when it is not this consumer's (as the Java client answers),
/// INVALID_PARAMETER for an unreadable header.
pub(super) fn reply(inner: &Inner, cmd: &RemotingCommand) -> RemotingCommand {
    let header = match cmd.decode_header::<GetConsumerRunningInfoRequestHeader>() {
        Ok(header) => header,
        Err(error) => {
            return cmd.reply(
                response::INVALID_PARAMETER,
                Some(format!("bad GET_CONSUMER_RUNNING_INFO header: {error}")),
            )
        }
    };
    if header.consumer_group != inner.config.group {
        return cmd.reply(
            response::SYSTEM_ERROR,
            Some(format!(
                "the consumer group {} does not exist in this client (it consumes for {})",
                header.consumer_group, inner.config.group
            )),
        );
    }
    cmd.reply(response::SUCCESS, None)
        .with_body(encode_fastjson(&running_info(inner)))
}

/// This consumer's state now.
pub(super) fn running_info(inner: &Inner) -> ConsumerRunningInfo {
    let cfg = &inner.config;
    let mut info = ConsumerRunningInfo::default();
    let props = &mut info.properties;
    let mut set = |k: &str, v: String| {
        props.insert(k.to_string(), v);
    };
    set(PROP_CONSUME_TYPE, "CONSUME_PASSIVELY".into());
    set(
        PROP_CONSUME_ORDERLY,
        inner.listener.is_orderly().to_string(),
    );
    set(
        PROP_CLIENT_VERSION,
        format!("ferromq-client {}", env!("CARGO_PKG_VERSION")),
    );
    set(PROP_CONSUMER_START_TIMESTAMP, inner.started_ms.to_string());
    set(
        PROP_NAMESERVER_ADDR,
        cfg.namesrv_addrs
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(";"),
    );
    set(PROP_THREADPOOL_CORE_SIZE, cfg.consume_threads.to_string());
    set("consumerGroup", cfg.group.clone());
    set("clientId", inner.pull.client_id().to_string());
    set(
        "messageModel",
        format!("{:?}", cfg.message_model).to_uppercase(),
    );
    set(
        "consumeFromWhere",
        match cfg.consume_from_where {
            ConsumeFromWhere::LastOffset => "CONSUME_FROM_LAST_OFFSET".into(),
            ConsumeFromWhere::FirstOffset => "CONSUME_FROM_FIRST_OFFSET".into(),
            ConsumeFromWhere::Timestamp(ms) => format!("CONSUME_FROM_TIMESTAMP {ms}"),
        },
    );
    set("pullBatchSize", cfg.pull_batch_size.to_string());
    set(
        "consumeMessageBatchMaxSize",
        cfg.consume_batch_max.to_string(),
    );
    set(
        "pullThresholdForQueue",
        cfg.max_cached_messages_per_queue.to_string(),
    );
    set("maxReconsumeTimes", cfg.max_reconsume_times.to_string());
    info.subscription_set = inner
        .subscriptions
        .iter()
        .map(|(topic, expression)| subscription_data(topic, expression))
        .collect();
    info.mq_table = MqMap(
        inner
            .queues()
            .iter()
            .map(|(queue, entry)| (queue.clone(), entry.pq.running_info()))
            .collect(),
    );
    info
}
