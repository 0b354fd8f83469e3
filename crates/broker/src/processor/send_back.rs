//! CONSUMER_SEND_MSG_BACK (36) and delayed delivery.
//!
//! A message a consumer failed to process goes to the group's retry topic `%RETRY%<group>`
//! after a delay that grows with each attempt (level `3 + reconsumeTimes` unless the client
//! names one), and to the dead-letter topic `%DLQ%<group>` once it has been delivered
//! `maxReconsumeTimes` times or the client asks for it (negative level).
//!
//! Delayed messages (retries and sends with a `DELAY` property) are stored in
//! `SCHEDULE_TOPIC_XXXX`, one queue per level, with their real topic and queue as properties.
//! The scheduler (`run_scheduler`) moves each due message to its real topic and records its
//! progress per level as an offset commit of the system group `%SCHEDULE%`, so progress is
//! in the same log as everything else: a crash between the move and the commit delivers a
//! message twice, never zero times.

use std::sync::Arc;
use std::time::Duration;

use ferromq_protocol::remoting::codes::response;
use ferromq_protocol::remoting::headers::client::ConsumerSendMsgBackRequestHeader;
use ferromq_protocol::remoting::RemotingCommand;
use ferromq_protocol::{property_names, DraftRecord, MessageId, Properties, RecordView};
use ferromq_store::offsets::{OffsetCommand, OffsetEntry, OffsetKind};
use ferromq_store::{PutReceipt, TagFilter};

use super::send::{store_durably, Refusal, PROPERTY_DELAY};
use super::{bad_header, success};
use crate::clients::ClientChannel;
use crate::context::BrokerContext;
use crate::topics::{topic_with_queues, DLQ_PREFIX, RETRY_PREFIX};

/// Topic holding delayed messages, one queue per delay level.
pub const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";
/// System group whose offsets record the scheduler's progress.
pub const SCHEDULE_GROUP: &str = "%SCHEDULE%";
const PROPERTY_REAL_TOPIC: &str = "REAL_TOPIC";
const PROPERTY_REAL_QUEUE_ID: &str = "REAL_QID";
const PROPERTY_RETRY_TOPIC: &str = "RETRY_TOPIC";
const PROPERTY_ORIGIN_MESSAGE_ID: &str = "ORIGIN_MESSAGE_ID";
const PROPERTY_DLQ_ORIGIN_TOPIC: &str = "DLQ_ORIGIN_TOPIC";
const PROPERTY_DLQ_ORIGIN_MESSAGE_ID: &str = "DLQ_ORIGIN_MESSAGE_ID";
/// How often the scheduler looks for due messages.
const SCHEDULER_TICK: Duration = Duration::from_millis(100);
/// Messages moved per level per tick.
const SCHEDULER_BATCH_MAX: usize = 64;

pub(super) async fn handle(
    ctx: &BrokerContext,
    channel: &ClientChannel,
    command: &RemotingCommand,
) -> RemotingCommand {
    let header = match command.decode_header::<ConsumerSendMsgBackRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    match send_back(ctx, channel, &header).await {
        Ok(_) => success(command),
        Err(refusal) => refusal.reply(command),
    }
}

async fn send_back(
    ctx: &BrokerContext,
    channel: &ClientChannel,
    header: &ConsumerSendMsgBackRequestHeader,
) -> Result<PutReceipt, Refusal> {
    let group = ctx
        .groups
        .ensure(&header.group)
        .map_err(|e| Refusal::new(response::SYSTEM_ERROR, e.to_string()))?;
    let id = MessageId {
        store_host: ctx.broker_addr,
        phys_offset: header.offset.max(0) as u64,
    }
    .encode();
    let bytes = ctx
        .store
        .message_by_id(&id)
        .map_err(|e| Refusal::new(response::SYSTEM_ERROR, e.to_string()))?
        .ok_or_else(|| {
            Refusal::new(
                response::SYSTEM_ERROR,
                format!("no message at CommitLog offset {}", header.offset),
            )
        })?;
    let original = RecordView::parse(&bytes)
        .map_err(|e| Refusal::new(response::SYSTEM_ERROR, e.to_string()))?;
    let max_times = header.max_reconsume_times.unwrap_or(group.retry_max_times);
    let attempts = original.reconsume_times.max(0);
    let origin_topic = original
        .properties
        .get_str(PROPERTY_RETRY_TOPIC)
        .unwrap_or_else(|| original.topic_str())
        .to_string();
    let origin_id = header.origin_msg_id.clone().unwrap_or(id);
    let to_dlq = header.delay_level < 0 || attempts >= max_times;
    let (topic, mut extra) = if to_dlq {
        let topic = format!("{DLQ_PREFIX}{}", header.group);
        ensure_topic(ctx, &topic, 1)?;
        (
            topic,
            vec![
                (PROPERTY_DLQ_ORIGIN_TOPIC, origin_topic.clone()),
                (PROPERTY_DLQ_ORIGIN_MESSAGE_ID, origin_id.clone()),
            ],
        )
    } else {
        let topic = format!("{RETRY_PREFIX}{}", header.group);
        ensure_topic(ctx, &topic, group.retry_queue_nums.max(1) as u32)?;
        (topic, vec![(PROPERTY_RETRY_TOPIC, origin_topic.clone())])
    };
    extra.push((PROPERTY_ORIGIN_MESSAGE_ID, origin_id));
    let properties = rewrite_properties(
        &original.properties,
        &[PROPERTY_RETRY_TOPIC, PROPERTY_DELAY],
        &extra,
    );
    let draft = DraftRecord {
        topic: &topic,
        queue_id: 0,
        flag: original.flag,
        sys_flag: original.sys_flag,
        born_timestamp_ms: original.born_timestamp_ms,
        born_host: original.born_host,
        store_host: ctx.broker_addr,
        reconsume_times: attempts + 1,
        prepared_tx_offset: 0,
        body: original.body,
        properties: &properties,
    };
    tracing::debug!(group = %header.group, %origin_topic, attempts, to_dlq, peer = %channel.peer, "message sent back");
    if to_dlq {
        store_durably(ctx, &[draft]).await
    } else {
        let level = if header.delay_level > 0 {
            header.delay_level as u32
        } else {
            3 + attempts as u32
        };
        schedule(ctx, &draft, level).await
    }
}

fn ensure_topic(ctx: &BrokerContext, topic: &str, queues: u32) -> Result<(), Refusal> {
    if ctx.topics.get(topic).is_none() {
        ctx.topics
            .put_if_absent(topic_with_queues(topic, queues))
            .map_err(|e| Refusal::new(response::SYSTEM_ERROR, e.to_string()))?;
        ctx.register_now.notify_one();
    }
    Ok(())
}

/// Stores `draft` for delivery after delay `level` (clamped to the configured levels).
pub(crate) async fn schedule(
    ctx: &BrokerContext,
    draft: &DraftRecord<'_>,
    level: u32,
) -> Result<PutReceipt, Refusal> {
    let levels = ctx.delay_levels_ms.len() as u32;
    if levels == 0 {
        return store_durably(ctx, std::slice::from_ref(draft)).await;
    }
    let level = level.clamp(1, levels);
    let real = [
        (PROPERTY_REAL_TOPIC, draft.topic.to_string()),
        (PROPERTY_REAL_QUEUE_ID, draft.queue_id.to_string()),
        (PROPERTY_DELAY, level.to_string()),
    ];
    let properties = rewrite_properties(&Properties(draft.properties), &[PROPERTY_DELAY], &real);
    let scheduled = DraftRecord {
        topic: SCHEDULE_TOPIC,
        queue_id: level - 1,
        properties: &properties,
        ..draft.clone()
    };
    store_durably(ctx, &[scheduled]).await
}

/// Moves due delayed messages to their real topics until the broker stops.
pub async fn run_scheduler(ctx: Arc<BrokerContext>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(SCHEDULER_TICK);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        for (index, delay_ms) in ctx.delay_levels_ms.iter().enumerate() {
            if let Err(error) = deliver_due(&ctx, index as u32, *delay_ms).await {
                tracing::warn!(level = index + 1, %error, "delayed delivery failed; retrying");
            }
        }
    }
}

async fn deliver_due(ctx: &Arc<BrokerContext>, queue_id: u32, delay_ms: u64) -> Result<(), String> {
    if ctx.store.queue_bounds(SCHEDULE_TOPIC, queue_id).is_none() {
        return Ok(());
    }
    let from = ctx
        .store
        .consumer_offset(SCHEDULE_GROUP, SCHEDULE_TOPIC, queue_id)
        .map_or(0, |s| s.offset);
    let result = ctx
        .store
        .get_messages(
            SCHEDULE_TOPIC,
            queue_id,
            from,
            SCHEDULER_BATCH_MAX,
            usize::MAX,
            &TagFilter::All,
        )
        .map_err(|e| e.to_string())?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let mut next = from.max(result.min_offset);
    for message in &result.messages {
        let view = RecordView::parse(&message.bytes).map_err(|e| e.to_string())?;
        if view.store_timestamp_ms + delay_ms as i64 > now {
            break;
        }
        let topic = view
            .properties
            .get_str(PROPERTY_REAL_TOPIC)
            .unwrap_or_default()
            .to_string();
        let queue_id = view
            .properties
            .get_str(PROPERTY_REAL_QUEUE_ID)
            .and_then(|q| q.parse().ok())
            .unwrap_or(0);
        let properties = rewrite_properties(
            &view.properties,
            &[PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID, PROPERTY_DELAY],
            &[],
        );
        if !topic.is_empty() {
            let draft = DraftRecord {
                topic: &topic,
                queue_id,
                flag: view.flag,
                sys_flag: view.sys_flag,
                born_timestamp_ms: view.born_timestamp_ms,
                born_host: view.born_host,
                store_host: ctx.broker_addr,
                reconsume_times: view.reconsume_times,
                prepared_tx_offset: 0,
                body: view.body,
                properties: &properties,
            };
            store_durably(ctx, &[draft]).await.map_err(|r| r.remark)?;
        }
        next = message.queue_offset + 1;
    }
    if next > from {
        let store = ctx.store.clone();
        let command = OffsetCommand {
            kind: OffsetKind::Commit,
            group: SCHEDULE_GROUP.into(),
            client_id: "scheduler".into(),
            generation: None,
            entries: vec![OffsetEntry {
                topic: SCHEDULE_TOPIC.into(),
                queue_id,
                offset: next,
            }],
        };
        tokio::task::spawn_blocking(move || store.commit_offsets(&command))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Re-encodes properties without the record CRC, without `drop`, and with `add` appended.
pub(crate) fn rewrite_properties(
    properties: &Properties<'_>,
    drop: &[&str],
    add: &[(&str, String)],
) -> Vec<u8> {
    let kept = properties.iter().filter_map(|(name, value)| {
        let name = std::str::from_utf8(name).ok()?;
        let value = std::str::from_utf8(value).ok()?;
        let dropped = name == property_names::CRC32
            || drop.contains(&name)
            || add.iter().any(|(n, _)| *n == name);
        (!dropped).then_some((name, value))
    });
    Properties::encode(kept.chain(add.iter().map(|(n, v)| (*n, v.as_str()))))
}
