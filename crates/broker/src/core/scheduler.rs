//! Delayed delivery: messages stored in `SCHEDULE_TOPIC_XXXX` (one queue per delay level,
//! their real topic and queue in the `REAL_TOPIC` and `REAL_QID` properties) are moved to
//! their real queue once due.
//!
//! - [`schedule`] stores a message for later; its target is checked first ([`check_target`]:
//!   a valid name, not a reserved topic, an existing and writable topic, a queue id below its
//!   write queue count), and a send to an invalid target is refused.
//! - [`run_scheduler`] moves due messages and records its progress per level as an offset
//!   commit of the internal group `%SCHEDULE%`, written through the store directly (clients
//!   cannot commit that group). Progress is in the same log as everything else: a crash
//!   between the move and the commit delivers a message twice, never zero times.
//! - A message whose target is invalid when it fires (the topic was deleted or made
//!   read-only, its queue count shrank, or an old log holds a message no check saw) is never
//!   re-appended to its target: it goes to the dead-letter topic [`SCHEDULE_DLQ_TOPIC`] with
//!   the reason in [`PROPERTY_DEAD_LETTER_REASON`], is counted
//!   (`ferromq_scheduler_dead_letters_total`) and logged, and the scheduler moves past it. A
//!   message even the dead-letter topic refuses is dropped, counted and logged the same way.
//!   A damaged (quarantined) record in the scheduler's own queue is moved past the same way:
//!   the scheduler is its own consumer, and no administrator may move `%SCHEDULE%`.
//!   Only a failure of the store itself (not durable, poisoned) stops a level; it is retried
//!   on the next tick.

use std::sync::Arc;
use std::time::Duration;

use ferromq_protocol::names::{self, NameError};
use ferromq_protocol::{DraftRecord, Properties, RecordView};
use ferromq_store::offsets::{OffsetCommand, OffsetEntry, OffsetKind};
use ferromq_store::{GetResult, PutReceipt, ReadError, StoredMessage, TagFilter};

use super::access::{self, Request};
use super::error::{Refusal, RefusalKind, SendError};
use super::send::{check_properties_len, put, PROPERTY_DELAY};
use super::send_back::rewrite_properties;
use crate::catalog::topics::{PERM_READ, PERM_WRITE};
use crate::context::BrokerContext;

pub use ferromq_protocol::names::{SCHEDULE_DLQ_TOPIC, SCHEDULE_GROUP, SCHEDULE_TOPIC};

/// Property naming a delayed message's real topic.
pub(crate) const PROPERTY_REAL_TOPIC: &str = "REAL_TOPIC";
/// Property naming a delayed message's real queue.
pub(crate) const PROPERTY_REAL_QUEUE_ID: &str = "REAL_QID";
/// Property of a dead-lettered delayed message: why its target was refused.
pub const PROPERTY_DEAD_LETTER_REASON: &str = "FERROMQ_SCHEDULE_DLQ_REASON";
/// How often the scheduler looks for due messages.
const SCHEDULER_TICK: Duration = Duration::from_millis(100);
/// Messages moved per level per tick: bounds one tick's work and memory.
const SCHEDULER_BATCH_MAX: usize = 64;
/// Longest dead-letter reason kept in the property (a reason quotes names, already cut).
const DEAD_LETTER_REASON_MAX: usize = 256;

/// Why a delayed message cannot go to its target.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TargetError {
    /// The real topic's name breaks the rules (or the property is missing).
    #[error("target topic: {0}")]
    InvalidName(#[from] NameError),
    /// The real topic is reserved for the broker.
    #[error("target topic {0} is reserved for the broker")]
    Reserved(String),
    /// The real topic does not exist.
    #[error("target topic {0} does not exist")]
    Missing(String),
    /// The real topic is not writable.
    #[error("target topic {0} is not writable")]
    NotWritable(String),
    /// The real queue id is missing, unreadable, or not below the topic's write queue count.
    #[error("target queue {queue} of topic {topic} does not exist ({queues} write queues)")]
    NoSuchQueue {
        topic: String,
        queue: String,
        queues: i32,
    },
}

impl TargetError {
    /// The kind of refusal when a send names this target.
    pub(crate) fn kind(&self) -> RefusalKind {
        match self {
            TargetError::InvalidName(_) | TargetError::NoSuchQueue { .. } => {
                RefusalKind::InvalidArgument
            }
            TargetError::Reserved(_) | TargetError::NotWritable(_) => RefusalKind::Forbidden,
            TargetError::Missing(_) => RefusalKind::TopicMissing,
        }
    }
}

/// The real topic and queue (`REAL_TOPIC`, `REAL_QID`) a stored delayed, timer or half message
/// names (empty when missing: `check_target` refuses them).
pub(crate) fn real_target<'a>(view: &RecordView<'a>) -> (&'a str, &'a str) {
    (
        view.properties
            .get_str(PROPERTY_REAL_TOPIC)
            .unwrap_or_default(),
        view.properties
            .get_str(PROPERTY_REAL_QUEUE_ID)
            .unwrap_or_default(),
    )
}

/// Checks that a delayed message may be delivered to `topic`/`queue` (`queue` as the text of
/// `REAL_QID`, so an unreadable one is reported as it is).
pub(crate) fn check_target(
    ctx: &BrokerContext,
    topic: &str,
    queue: &str,
) -> Result<(), TargetError> {
    names::validate_topic(topic)?;
    if names::is_reserved_topic(topic) {
        return Err(TargetError::Reserved(topic.to_string()));
    }
    let config = ctx
        .topics
        .get(topic)
        .ok_or_else(|| TargetError::Missing(topic.to_string()))?;
    if config.perm & PERM_WRITE == 0 {
        return Err(TargetError::NotWritable(topic.to_string()));
    }
    let in_range = queue
        .parse::<u32>()
        .is_ok_and(|q| i64::from(q) < i64::from(config.write_queue_nums));
    if !in_range {
        return Err(TargetError::NoSuchQueue {
            topic: topic.to_string(),
            queue: quote_queue(queue),
            queues: config.write_queue_nums,
        });
    }
    Ok(())
}

/// A `REAL_QID` value for a message: cut and escaped, as names are.
fn quote_queue(queue: &str) -> String {
    let cut: String = queue.chars().take(20).collect();
    format!("{cut:?}")
}

/// Stores `draft` for delivery to its topic and queue after delay `level` (clamped to the
/// configured levels), once its target passed [`check_target`].
pub(crate) async fn schedule(
    ctx: &BrokerContext,
    draft: &DraftRecord<'_>,
    level: u32,
) -> Result<PutReceipt, SendError> {
    let queue = draft.queue_id.to_string();
    if let Err(error) = check_target(ctx, draft.topic, &queue) {
        let remark = format!("delayed message refused: {error}");
        return Err(access::refuse(
            ctx,
            "schedule_target",
            Request::Schedule,
            error.kind(),
            remark,
        )
        .into());
    }
    let levels = ctx.delay_levels_ms.len() as u32;
    if levels == 0 {
        return put(ctx, std::slice::from_ref(draft)).await;
    }
    let level = level.clamp(1, levels);
    let real = [
        (PROPERTY_REAL_TOPIC, draft.topic.to_string()),
        (PROPERTY_REAL_QUEUE_ID, queue),
        (PROPERTY_DELAY, level.to_string()),
    ];
    let properties = rewrite_properties(&Properties(draft.properties), &[PROPERTY_DELAY], &real);
    check_properties_len(&properties).map_err(|refusal| {
        Refusal::new(
            refusal.kind,
            format!(
                "delayed message refused: with the scheduler's REAL_TOPIC, REAL_QID and DELAY, {}",
                refusal.remark
            ),
        )
    })?;
    let scheduled = DraftRecord {
        topic: SCHEDULE_TOPIC,
        queue_id: level - 1,
        properties: &properties,
        ..draft.clone()
    };
    put(ctx, &[scheduled]).await
}

/// Moves due delayed messages to their real topics until the broker stops.
pub async fn run_scheduler(ctx: Arc<BrokerContext>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(SCHEDULER_TICK);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        if !ctx.replication.role().is_master() {
            // Only a master moves delayed messages; a slave holds the master's progress,
            // replicated with the log, and takes over from it if it is promoted.
            continue;
        }
        for (index, delay_ms) in ctx.delay_levels_ms.iter().enumerate() {
            if let Err(error) = deliver_due(&ctx, index as u32, *delay_ms).await {
                tracing::warn!(level = index + 1, %error, "delayed delivery failed; retrying");
            }
        }
    }
}

/// Moves the due messages of one level's queue and commits the scheduler's progress, also
/// when a store failure stopped the batch midway (so nothing moved is moved again).
async fn deliver_due(
    ctx: &Arc<BrokerContext>,
    level_queue: u32,
    delay_ms: u64,
) -> Result<(), String> {
    if ctx
        .store
        .queue_bounds(SCHEDULE_TOPIC, level_queue)
        .is_none()
    {
        return Ok(());
    }
    let from = super::view::offsets(&ctx.store)
        .await
        .map_err(|e| e.to_string())?
        .stored(SCHEDULE_GROUP, SCHEDULE_TOPIC, level_queue)
        .unwrap_or(0);
    let result = match read_due(ctx, level_queue, from).await? {
        Ok(result) => result,
        Err(past_damage) => return commit_progress(ctx, level_queue, past_damage).await,
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let mut next = from.max(result.min_offset);
    let mut failure = None;
    for message in &result.messages {
        match deliver_one(ctx, message, delay_ms, now).await {
            Ok(true) => next = message.queue_offset + 1,
            Ok(false) => break,
            Err(error) => {
                failure = Some(error);
                break;
            }
        }
    }
    if next > from {
        commit_progress(ctx, level_queue, next).await?;
    }
    failure.map_or(Ok(()), Err)
}

/// Reads a batch of one level's queue from `from`. `Ok(Err(next))` when the first record to
/// read is damaged (quarantined by the store): it is counted and logged, and the caller moves
/// on to `next`, the queue offset after it.
async fn read_due(
    ctx: &BrokerContext,
    level_queue: u32,
    from: u64,
) -> Result<Result<GetResult, u64>, String> {
    let store = ctx.store.clone();
    // Reading the log is blocking I/O; keep it off the async workers.
    let read = tokio::task::spawn_blocking(move || {
        store.get_messages(
            SCHEDULE_TOPIC,
            level_queue,
            from,
            SCHEDULER_BATCH_MAX,
            usize::MAX,
            &TagFilter::All,
        )
    })
    .await
    .map_err(|e| e.to_string())?;
    match read {
        Ok(result) => Ok(Ok(result)),
        Err(ReadError::Damaged {
            queue_offset,
            phys_offset,
            reason,
            ..
        }) if queue_offset >= from => {
            ctx.metrics.scheduler_dead_letter();
            tracing::error!(level_queue, queue_offset, phys_offset, %reason,
                "delayed message lost to a damaged CommitLog range; the scheduler moves past it");
            Ok(Err(queue_offset + 1))
        }
        Err(error) => Err(error.to_string()),
    }
}

/// Delivers one message if it is due: `Ok(false)` when it is not yet; `Err` only for a store
/// failure worth retrying.
async fn deliver_one(
    ctx: &BrokerContext,
    message: &StoredMessage,
    delay_ms: u64,
    now_ms: i64,
) -> Result<bool, String> {
    let view = RecordView::parse(&message.bytes).map_err(|e| e.to_string())?;
    if view.store_timestamp_ms.saturating_add(delay_ms as i64) > now_ms {
        return Ok(false);
    }
    let (topic, queue) = real_target(&view);
    let reason = match check_target(ctx, topic, queue) {
        Ok(()) => match move_to_target(ctx, &view, topic, queue).await {
            Ok(()) => return Ok(true),
            Err(error) if is_permanent(&error) => error.to_string(),
            Err(error) => return Err(error.to_string()),
        },
        Err(error) => error.to_string(),
    };
    dead_letter(ctx, &view, message.queue_offset, &reason).await?;
    Ok(true)
}

/// Appends the due message to its (checked) target.
async fn move_to_target(
    ctx: &BrokerContext,
    view: &RecordView<'_>,
    topic: &str,
    queue: &str,
) -> Result<(), SendError> {
    let properties = rewrite_properties(
        &view.properties,
        &[PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID, PROPERTY_DELAY],
        &[],
    );
    let draft = DraftRecord {
        topic,
        queue_id: queue.parse().unwrap_or_default(),
        properties: &properties,
        ..draft_of(ctx, view)
    };
    put(ctx, &[draft]).await.map(|_| ())
}

/// The fields a moved copy keeps from the delayed record.
pub(crate) fn draft_of<'a>(ctx: &BrokerContext, view: &RecordView<'a>) -> DraftRecord<'a> {
    DraftRecord {
        topic: SCHEDULE_DLQ_TOPIC,
        queue_id: 0,
        flag: view.flag,
        sys_flag: view.sys_flag,
        born_timestamp_ms: view.born_timestamp_ms,
        born_host: view.born_host,
        store_host: ctx.broker_addr,
        reconsume_times: view.reconsume_times,
        prepared_tx_offset: 0,
        body: view.body,
        properties: &[],
    }
}

/// Whether a failed move can never succeed (the message or its target is refused for what it
/// is), as opposed to a store failure that a retry may cure.
pub(crate) fn is_permanent(error: &SendError) -> bool {
    use super::error::WriteError;
    match error {
        SendError::Refused(refusal) => matches!(
            refusal.kind,
            RefusalKind::InvalidMessage
                | RefusalKind::InvalidName
                | RefusalKind::Forbidden
                | RefusalKind::TopicPermission
                | RefusalKind::InvalidArgument
        ),
        SendError::Write(WriteError::Invalid(_) | WriteError::Reserved(_)) => true,
        SendError::Write(_) => false,
    }
}

/// Moves a delayed message whose target is refused to [`SCHEDULE_DLQ_TOPIC`] (read-only for
/// clients), keeping `REAL_TOPIC`/`REAL_QID` for the administrator and adding the reason;
/// drops it when even that is refused. `Err` only for a store failure worth retrying.
pub(crate) async fn dead_letter(
    ctx: &BrokerContext,
    view: &RecordView<'_>,
    queue_offset: u64,
    reason: &str,
) -> Result<(), String> {
    ctx.metrics.scheduler_dead_letter();
    let reason: String = reason
        .chars()
        .filter(|c| !c.is_control())
        .take(DEAD_LETTER_REASON_MAX)
        .collect();
    tracing::warn!(level_queue = view.queue_id, queue_offset, phys_offset = view.phys_offset,
        %reason, "delayed message not delivered: its target is refused; moved to {SCHEDULE_DLQ_TOPIC}");
    ensure_dead_letter_topic(ctx).map_err(|r| r.remark)?;
    let properties = rewrite_properties(
        &view.properties,
        &[PROPERTY_DELAY],
        &[(PROPERTY_DEAD_LETTER_REASON, reason)],
    );
    let draft = DraftRecord {
        properties: &properties,
        ..draft_of(ctx, view)
    };
    match put(ctx, &[draft]).await {
        Ok(_) => Ok(()),
        Err(error) if is_permanent(&error) => {
            tracing::error!(phys_offset = view.phys_offset, remark = %error,
                "delayed message dropped: even the scheduler's dead-letter topic refuses it");
            Ok(())
        }
        Err(error) => Err(error.to_string()),
    }
}

/// Creates the dead-letter topic (one queue, readable, not writable by clients).
fn ensure_dead_letter_topic(ctx: &BrokerContext) -> Result<(), Refusal> {
    if ctx.topics.get(SCHEDULE_DLQ_TOPIC).is_some() {
        return Ok(());
    }
    let mut config = crate::catalog::topics::topic_with_queues(SCHEDULE_DLQ_TOPIC, 1);
    config.perm = PERM_READ;
    ctx.topics
        .put_if_absent(config)
        .map_err(|e| Refusal::new(RefusalKind::Internal, e.to_string()))?;
    ctx.register_now.notify_one();
    Ok(())
}

/// Commits the scheduler's progress on one level through the store directly: the internal
/// path of `%SCHEDULE%`, which no client request can take.
async fn commit_progress(ctx: &BrokerContext, level_queue: u32, next: u64) -> Result<(), String> {
    let command = OffsetCommand {
        kind: OffsetKind::Commit,
        group: SCHEDULE_GROUP.into(),
        client_id: "scheduler".into(),
        generation: None,
        entries: vec![OffsetEntry {
            topic: SCHEDULE_TOPIC.into(),
            queue_id: level_queue,
            offset: next,
        }],
        fenced_clients: Vec::new(),
        access_key: None,
    };
    super::ack::put_offsets(ctx, &command)
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}
