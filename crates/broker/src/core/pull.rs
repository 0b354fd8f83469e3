//! Pulls: reading a queue from an offset for a consumer, with its tag filter, the commit it
//! carries, long polling, and following a reset.
//!
//! 1. A pull by an internal group (`%SCHEDULE%`), and a pull carrying a commit on a reserved
//!    topic, are refused (`access`): the commit would move offsets only the broker moves.
//! 2. The commit a pull carries is judged by `offsets` like any commit (in the background: the
//!    pull's answer has no place for its outcome); a fenced client's is refused and counted.
//! 3. A fenced client's pull lifts its fence, and is told to move when it pulled anywhere but
//!    the group's stored offset (`offsets::follow_on_pull`).
//! 4. A queue that looks shorter than the offset (or ends at it) is read again once the
//!    dispatcher has caught up, so a record acknowledged before the pull is never reported
//!    missing.
//! 5. Nothing new at the tail: the pull is held (when the client allows) until a message is
//!    dispatched, the hold ends or the client goes away — within the broker's and the
//!    connection's hold limits (`work_limits`); past them the answer is "busy".
//! 6. A damaged record is [`PullError::Damaged`] (counted): the consumer is never moved past
//!    it silently.
//! 7. On a slave, the pull is served from the replicated queues (below the master's
//!    watermark), a commit it carries is refused and counted, and an offset past the slave's
//!    queue is "nothing new yet", never a correction ([`suggested_broker`] says where to read
//!    next).

use std::future::Future;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use ferromq_store::{
    GetResult, GetStatus, MessageStore, ReadError, Sendable, Stored, StoredMessage, TagFilter,
};

use super::access::{self, Request};
use super::error::{PullError, Refusal, RefusalKind};
use super::offsets::{self, CommitKind, CommitRequest};
use crate::catalog::topics::PERM_READ;
use crate::context::BrokerContext;
use crate::core::long_poll;
use crate::sessions::identity::Caller;

/// Most messages one pull returns (RocketMQ's `maxTransferCountOnMessageInMemory` is 32).
pub const PULL_COUNT_MAX: usize = 64;
/// Most bytes one pull returns unless the request asks for less.
pub const PULL_BYTES_MAX: usize = 256 * 1024;
/// Longest a pull waits for the dispatcher before answering "offset out of range".
const DISPATCH_CATCH_UP_MAX: Duration = Duration::from_millis(500);

/// Which messages a pull wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subscription {
    /// The tag expression the request carries (`*`, `a || b`).
    Tags(String),
    /// An expression of a type the broker does not evaluate (SQL92).
    Unsupported(String),
    /// The group's registered subscription of the topic (everything when it has none).
    Registered,
}

/// One pull.
#[derive(Debug, Clone)]
pub struct PullRequest {
    /// Consumer group.
    pub group: String,
    /// Topic.
    pub topic: String,
    /// Queue (`None`: the client sent a negative id).
    pub queue_id: Option<u32>,
    /// The offset to read from.
    pub offset: u64,
    /// Most messages wanted (at most [`PULL_COUNT_MAX`]).
    pub max_count: usize,
    /// Most bytes wanted (at most [`PULL_BYTES_MAX`]).
    pub max_bytes: usize,
    /// How long the client lets the broker hold the pull when nothing is new (`None`: answer
    /// at once).
    pub hold: Option<Duration>,
    /// The filter.
    pub subscription: Subscription,
    /// The commit the pull carries: `Some(Some(offset))`, or `Some(None)` for RocketMQ's
    /// negative "none" (ignored and counted).
    pub commit: Option<Option<u64>>,
}

/// How a pull reads its messages: their verified bytes ([`StoredMessage`], the default), or
/// regions of the CommitLog files to send without copying ([`StoredRegion`], for
/// `transferMsgByHeap=false`; see `ferromq_store::StoredRegion` for what is checked).
pub trait PullRead: Stored + Sized + Send {
    /// Reads like `MessageStore::get_messages`.
    fn get(
        store: &MessageStore,
        topic: &str,
        queue_id: u32,
        offset: u64,
        max_count: usize,
        max_bytes: usize,
        filter: &TagFilter,
    ) -> Result<GetResult<Self>, ReadError>;
}

impl PullRead for StoredMessage {
    fn get(
        store: &MessageStore,
        topic: &str,
        queue_id: u32,
        offset: u64,
        max_count: usize,
        max_bytes: usize,
        filter: &TagFilter,
    ) -> Result<GetResult<Self>, ReadError> {
        store.get_messages(topic, queue_id, offset, max_count, max_bytes, filter)
    }
}

impl PullRead for Sendable {
    fn get(
        store: &MessageStore,
        topic: &str,
        queue_id: u32,
        offset: u64,
        max_count: usize,
        max_bytes: usize,
        filter: &TagFilter,
    ) -> Result<GetResult<Self>, ReadError> {
        store.get_messages_to_send(topic, queue_id, offset, max_count, max_bytes, filter)
    }
}

/// What a pull found.
#[derive(Debug)]
pub enum Pulled<M = StoredMessage> {
    /// The queue read from the requested offset (the status says what was there).
    Read(GetResult<M>),
    /// The client follows a reset: it must continue from `offset` (queue range `[min, max]`).
    Moved {
        /// Where to continue.
        offset: u64,
        /// Queue min.
        min: u64,
        /// Queue max.
        max: u64,
    },
}

/// Serves one pull. `held` counts the pulls of the caller's connection held now; `closed`
/// resolves when the caller is gone (its answer can no longer be delivered).
pub async fn pull<M: PullRead>(
    ctx: &Arc<BrokerContext>,
    caller: &Caller,
    request: &PullRequest,
    held: &Arc<AtomicUsize>,
    closed: impl Future<Output = ()>,
) -> Result<Pulled<M>, PullError> {
    let queue_id = admit(ctx, request)?;
    let (group, topic) = (request.group.as_str(), request.topic.as_str());
    if let Some(commit) = request.commit {
        carry_commit(ctx, caller, request, queue_id, commit);
    }
    if let Some(to) =
        offsets::follow_on_pull(ctx, caller, group, topic, queue_id, request.offset).await?
    {
        let (min, max) = ctx.store.queue_bounds(topic, queue_id).unwrap_or((0, 0));
        return Ok(Pulled::Moved {
            offset: to,
            min,
            max,
        });
    }
    let filter = filter_of(ctx, request)?;
    let offset = request.offset;
    let read_now = || read::<M>(ctx, topic, queue_id, offset, request, &filter);
    let mut result = read_now()?;
    if past_the_end(&result, offset) || nothing_new(&result, offset) {
        ctx.store.dispatch_caught_up(DISPATCH_CATCH_UP_MAX).await;
        result = read_now()?;
    }
    if let (true, Some(hold)) = (nothing_new(&result, offset), request.hold) {
        if hold_pull(ctx, topic, queue_id, offset, hold, held, closed).await? {
            result = read_now()?;
        }
    }
    if matches!(
        result.status,
        GetStatus::Found | GetStatus::NoMatchedMessage
    ) {
        // For consumerProgress: in-flight = where this pull ended - the committed offset.
        ctx.clients.record_pull(
            group,
            topic,
            queue_id,
            result.next_begin_offset,
            result.messages.len(),
        );
    }
    let result = on_a_lagging_slave(ctx, result, offset);
    ctx.metrics
        .record_pull(group, topic, queue_id, offset, &result);
    if result.status == GetStatus::Found {
        ctx.counters.messages_pulled.fetch_add(
            result.messages.len() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }
    Ok(Pulled::Read(result))
}

/// Rule 7: a slave that has not yet received the queue up to the pulled offset answers
/// "nothing new yet", never "offset moved": the consumer's offset was committed on the master
/// below the replicated watermark, and correcting it to this slave's shorter queue would move
/// it backwards (R7, alibaba/rocketmq#395).
fn on_a_lagging_slave<M>(
    ctx: &BrokerContext,
    mut result: GetResult<M>,
    offset: u64,
) -> GetResult<M> {
    if result.status == GetStatus::OffsetOverflowBadly && !ctx.replication.role().is_master() {
        result.status = GetStatus::OffsetOverflowOne;
        result.next_begin_offset = offset;
    }
    result
}

/// Which broker the client should pull this queue from next (RocketMQ's
/// `suggestWhichBrokerId`). With `slaveReadEnable`, a master suggests its slave (id 1,
/// RocketMQ's `whichBrokerWhenConsumeSlowly` default) when the pull read further behind the
/// log end than `accessMessageInMemoryMaxRatio` percent of physical memory — data that is
/// cold in the page cache — and itself (0) otherwise; a slave always suggests the master.
pub fn suggested_broker<M: Stored>(ctx: &BrokerContext, result: &GetResult<M>) -> u64 {
    let settings = ctx.replication.settings();
    if !settings.slave_read_enable || !ctx.replication.role().is_master() {
        return 0;
    }
    let (Some(first), Some(memory)) = (result.messages.first(), physical_memory_bytes()) else {
        return 0;
    };
    let behind = ctx
        .store
        .committed_end()
        .saturating_sub(first.phys_offset());
    suggestion(behind, memory, settings.memory_ratio_percent)
}

/// The broker to suggest for a read `behind` bytes from the log end: a slave (1) when that
/// is more than `ratio_percent` of `memory`, the master (0) otherwise.
fn suggestion(behind: u64, memory: u64, ratio_percent: u32) -> u64 {
    let hot = memory / 100 * u64::from(ratio_percent);
    u64::from(behind > hot)
}

/// Total physical memory (`MemTotal` of `/proc/meminfo`), read once; `None` where unknown
/// (no slave is then suggested for coldness).
fn physical_memory_bytes() -> Option<u64> {
    static MEMORY: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *MEMORY.get_or_init(|| {
        let text = std::fs::read_to_string("/proc/meminfo").ok()?;
        let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    })
}

/// The numbers of a topic's config a pull checks, read in place (a clone of the config cost
/// its strings and attribute map on every pull).
#[derive(Debug, Clone, Copy)]
struct TopicAccess {
    perm: i32,
    read_queue_nums: i32,
}

/// The topic's [`TopicAccess`]. A slave that does not know the topic first applies the
/// newest catalog record its dispatcher exposed: the record precedes the topic's messages in
/// the log, so a slave that serves those messages knows their topic too, without waiting for
/// the catalog follower's next pass.
fn topic_access(ctx: &BrokerContext, topic: &str) -> Option<TopicAccess> {
    let read = || {
        ctx.topics.read(topic, |config| TopicAccess {
            perm: config.perm,
            read_queue_nums: config.read_queue_nums,
        })
    };
    if let Some(access) = read() {
        return Some(access);
    }
    if !ctx.replication.role().is_master() {
        // A failure is counted and logged by the follower's next pass.
        let _ = crate::replication::catalog_log::apply_newest(ctx);
    }
    read()
}

/// Rule 1 and the topic, queue and group checks; the queue id.
fn admit(ctx: &BrokerContext, request: &PullRequest) -> Result<u32, Refusal> {
    let topic = request.topic.as_str();
    access::client_group(ctx, &request.group, Request::Pull)?;
    if request.commit.is_some() {
        access::client_topic(ctx, topic, Request::Pull)?;
    }
    let config = topic_access(ctx, topic).ok_or_else(|| {
        Refusal::new(
            RefusalKind::TopicMissing,
            format!("topic {topic} does not exist"),
        )
    })?;
    if config.perm & PERM_READ == 0 {
        return Err(Refusal::new(
            RefusalKind::TopicPermission,
            format!("topic {topic} is not readable"),
        ));
    }
    let queue_id = request
        .queue_id
        .filter(|q| i64::from(*q) < i64::from(config.read_queue_nums))
        .ok_or_else(|| {
            Refusal::new(
                RefusalKind::InvalidArgument,
                format!(
                    "queueId {} is outside the {} read queues of {topic}",
                    request.queue_id.map_or(-1, i64::from),
                    config.read_queue_nums
                ),
            )
        })?;
    ctx.groups
        .ensure(&request.group)
        .map_err(|e| Refusal::new(RefusalKind::InvalidArgument, e.to_string()))?;
    Ok(queue_id)
}

/// Rule 2.
fn carry_commit(
    ctx: &Arc<BrokerContext>,
    caller: &Caller,
    request: &PullRequest,
    queue_id: u32,
    commit: Option<u64>,
) {
    let (group, topic) = (request.group.as_str(), request.topic.as_str());
    if !ctx.replication.role().is_master() {
        // A slave serves the pull but never applies the commit it carries (R3): only the
        // master of the group records progress. Java clears the flag itself when it pulls
        // from a slave; a client that does not is counted.
        ctx.replication
            .counters
            .carried_commits_refused
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::debug!(%group, %topic, queue_id, "commit carried by a pull refused: not master");
        return;
    }
    if offsets::pull_commit_fenced(ctx, caller, group, topic, queue_id) {
        return;
    }
    match commit {
        Some(offset) => offsets::commit_from_pull(
            ctx,
            caller.clone(),
            CommitRequest {
                group: group.to_string(),
                topic: topic.to_string(),
                queue_id,
                offset,
                kind: CommitKind::CarriedByPull,
            },
        ),
        None => offsets::count_negative_commit(ctx),
    }
}

fn read<M: PullRead>(
    ctx: &BrokerContext,
    topic: &str,
    queue_id: u32,
    offset: u64,
    request: &PullRequest,
    filter: &TagFilter,
) -> Result<GetResult<M>, PullError> {
    let max_count = request.max_count.clamp(1, PULL_COUNT_MAX);
    let max_bytes = request.max_bytes.clamp(1, PULL_BYTES_MAX);
    M::get(
        &ctx.store, topic, queue_id, offset, max_count, max_bytes, filter,
    )
    .map_err(|error| PullError::from_read(&ctx.metrics, topic, queue_id, error))
}

/// Rule 5: holds the pull; `Ok(true)` when a message arrived.
async fn hold_pull(
    ctx: &BrokerContext,
    topic: &str,
    queue_id: u32,
    offset: u64,
    hold: Duration,
    held: &Arc<AtomicUsize>,
    closed: impl Future<Output = ()>,
) -> Result<bool, PullError> {
    if hold.is_zero() {
        return Ok(false);
    }
    let _permit = ctx
        .held_pulls
        .try_hold(held, &ctx.metrics)
        .map_err(PullError::Busy)?;
    tokio::select! {
        arrived = long_poll::wait_for_messages(&ctx.store, topic, queue_id, offset, hold) => Ok(arrived),
        () = closed => Err(PullError::CallerGone),
    }
}

/// True when the answer would be "offset out of range" beyond the queue's end.
fn past_the_end<M>(result: &GetResult<M>, offset: u64) -> bool {
    match result.status {
        GetStatus::OffsetOverflowBadly => true,
        GetStatus::NoMessageInQueue | GetStatus::NoMatchedLogicQueue => offset > 0,
        _ => false,
    }
}

/// True when the queue has no message at `offset` yet (the request may be held).
fn nothing_new<M>(result: &GetResult<M>, offset: u64) -> bool {
    match result.status {
        GetStatus::OffsetOverflowOne => true,
        GetStatus::NoMessageInQueue | GetStatus::NoMatchedLogicQueue => offset == 0,
        _ => false,
    }
}

/// The request's tag filter: its own expression, else the group's registered subscription,
/// else everything.
fn filter_of(ctx: &BrokerContext, request: &PullRequest) -> Result<TagFilter, Refusal> {
    match &request.subscription {
        Subscription::Tags(expression) => Ok(TagFilter::parse(expression)),
        Subscription::Unsupported(kind) => Err(Refusal::new(
            RefusalKind::BadSubscription,
            format!("expression type {kind} is not supported; use TAG"),
        )),
        Subscription::Registered => Ok(ctx
            .clients
            .subscription(&request.group, &request.topic)
            .map_or(TagFilter::All, |s| TagFilter::parse(&s.sub_string))),
    }
}

#[cfg(test)]
mod tests {
    use super::suggestion;

    #[test]
    fn a_read_further_behind_than_the_memory_ratio_is_sent_to_a_slave() {
        let memory = 100 << 30;
        assert_eq!(suggestion(0, memory, 40), 0);
        assert_eq!(
            suggestion(40 << 30, memory, 40),
            0,
            "exactly at the ratio: still hot"
        );
        assert_eq!(suggestion((40 << 30) + 1, memory, 40), 1);
        assert_eq!(suggestion(2 << 30, memory, 1), 1);
    }
}
