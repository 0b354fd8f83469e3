//! Receiving: hands out up to a batch of messages of any readable queue of the topic, each
//! invisible to other consumers until its deadline. A queue the request names is served
//! first, never alone: RocketMQ's proxy pops from every queue of the broker whatever queue
//! a client names, and the Java and Python clients name each queue of the route in turn, so
//! serving only the named queue would hold a receive for its whole long polling on an empty
//! queue while other queues hold messages.
//!
//! Per queue, under the table lock: the queue's state is brought to the group's committed
//! offset and reset generation; visible slots (un-acked deliveries past their deadline, and
//! deliveries whose record was never acknowledged) come first, in offset order, then fresh
//! messages from the queue's first never-delivered offset, read outside the lock and taken
//! only if no other receive took that range meanwhile. A slot at its last delivery attempt
//! goes to the group's dead-letter queue instead (`settle::dead_letter_slot`). A FIFO group
//! (`consumeMessageOrderly`) gets nothing from a queue while any delivery of it is invisible,
//! and fresh messages only once every earlier one is settled, so a queue's messages — and
//! therefore a message group's — are handed out in order. A FIFO receive's batch comes from
//! one queue (the first, in the order above, that has something to hand out).
//!
//! The delivery is answered only after its pop record is acknowledged (module invariant 1);
//! when the record fails, its slots become visible again as they were. With nothing to hand
//! out, the receive is held until a message is dispatched, a deadline passes, or its wait
//! ends.

use std::sync::Arc;
use std::time::Duration;

use ferromq_store::{GetStatus, StoredMessage, TagFilter};

use super::record::{PopOp, PopRecord};
use super::settle::{self, commit_progress};
use super::table::{Key, Slot};
use super::{
    hold, now_ms, with_loaded, with_table, PopError, ReceiptHandle, INVISIBLE_MAX, INVISIBLE_MIN,
    RECEIVE_BATCH_MAX, RECEIVE_WAIT_MAX,
};
use crate::catalog::groups::SubscriptionGroupConfig;
use crate::catalog::topics::PERM_READ;
use crate::context::BrokerContext;
use crate::core::access::{self, Request};
use crate::core::error::{PullError, Refusal, RefusalKind};
use crate::core::long_poll;
use crate::core::pull::PULL_BYTES_MAX;

/// How often a held receive looks again for deliveries past their deadline.
const EXPIRY_TICK: Duration = Duration::from_millis(100);
/// Shortest pause between two looks of a held receive woken by dispatch.
const RESCAN_PAUSE: Duration = Duration::from_millis(5);

/// One receive.
#[derive(Debug, Clone)]
pub struct ReceiveRequest {
    /// Consumer group.
    pub group: String,
    /// Topic.
    pub topic: String,
    /// The queue served first (the one the client named), or `None` to start anywhere; every
    /// readable queue of the topic is served either way (module doc).
    pub queue_id: Option<u32>,
    /// Which messages the group wants.
    pub filter: TagFilter,
    /// Most messages wanted (at most [`RECEIVE_BATCH_MAX`]).
    pub batch: usize,
    /// How long the messages stay invisible to other consumers.
    pub invisible: Duration,
    /// How long to hold the receive when nothing is there (at most [`RECEIVE_WAIT_MAX`]).
    pub wait: Duration,
    /// Renew the deliveries' invisibility while this client is alive and has not settled
    /// them (gRPC `auto_renew`, `super::renew`); `None`: no renewal.
    pub auto_renew: Option<String>,
}

/// One delivered message.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The stored message.
    pub message: StoredMessage,
    /// Its queue.
    pub queue_id: u32,
    /// Its delivery attempt (from 1).
    pub attempt: u32,
    /// The handle to ack or renew it with.
    pub handle: ReceiptHandle,
}

/// Serves one receive: the deliveries (empty when nothing came within the wait).
///
/// # Errors
/// [`PopError`]: refused (unknown topic or group, bad queue, invisibility out of range, not
/// master, too many held receives), or a read, view or write failure.
pub async fn receive(
    ctx: &Arc<BrokerContext>,
    request: &ReceiveRequest,
) -> Result<Vec<Delivery>, PopError> {
    let (queues, group) = admit(ctx, request)?;
    let _held = hold(&ctx.pop)?;
    let wait = request.wait.min(RECEIVE_WAIT_MAX);
    let deadline = tokio::time::Instant::now() + wait;
    let batch = request.batch.clamp(1, RECEIVE_BATCH_MAX);
    // Woken only by dispatches to the topic's queues (not by other topics' traffic).
    let waits: Vec<_> = queues
        .iter()
        .map(|queue_id| ctx.store.wait_for_queue(&request.topic, *queue_id))
        .collect();
    let start = match request.queue_id {
        Some(named) => named as usize,
        None => ctx.pop.held(),
    } % queues.len().max(1);
    loop {
        let mut woken = long_poll::enabled(&waits);
        let mut out = Vec::new();
        for queue_id in queues.iter().cycle().skip(start).take(queues.len()) {
            if out.len() >= batch {
                break;
            }
            let key = Key {
                group: request.group.clone(),
                topic: request.topic.clone(),
                queue_id: *queue_id,
            };
            let room = batch - out.len();
            out.extend(receive_queue(ctx, request, &group, &key, room).await?);
            if group.consume_message_orderly && !out.is_empty() {
                // A FIFO batch comes from one queue: an orderly client processes a batch in
                // sequence, and a batch spanning queues would make one queue's local retries
                // hold back the others' messages.
                break;
            }
        }
        if !out.is_empty() || tokio::time::Instant::now() >= deadline {
            if let Some(client) = &request.auto_renew {
                super::renew::register(&ctx.pop, client, &request.group, &out, request.invisible);
            }
            return Ok(out);
        }
        let tick = tokio::time::Instant::now() + EXPIRY_TICK;
        tokio::select! {
            () = long_poll::any(&mut woken) => tokio::time::sleep(RESCAN_PAUSE).await,
            _ = tokio::time::sleep_until(tick.min(deadline)) => {}
        }
    }
}

/// Checks the request; returns the queues to serve (every readable queue of the topic) and
/// the group's settings.
fn admit(
    ctx: &BrokerContext,
    request: &ReceiveRequest,
) -> Result<(Vec<u32>, SubscriptionGroupConfig), Refusal> {
    let topic = request.topic.as_str();
    access::client_group(ctx, &request.group, Request::Pull)?;
    access::client_topic(ctx, topic, Request::Pull)?;
    if !(INVISIBLE_MIN..=INVISIBLE_MAX).contains(&request.invisible) {
        return Err(Refusal::new(
            RefusalKind::InvalidArgument,
            format!(
                "invisible duration {:?} is outside {INVISIBLE_MIN:?}..={INVISIBLE_MAX:?}",
                request.invisible
            ),
        ));
    }
    let config = ctx.topics.get(topic).ok_or_else(|| {
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
    let count = config.read_queue_nums.max(0) as u32;
    if let Some(q) = request.queue_id.filter(|q| *q >= count) {
        return Err(Refusal::new(
            RefusalKind::InvalidArgument,
            format!("queue {q} is outside the {count} read queues of {topic}"),
        ));
    }
    let queues = (0..count).collect();
    let group = ctx
        .groups
        .ensure(&request.group)
        .map_err(|e| Refusal::new(RefusalKind::InvalidArgument, e.to_string()))?;
    if !group.consume_enable {
        return Err(Refusal::new(
            RefusalKind::Forbidden,
            format!("consumption is disabled for group {}", request.group),
        ));
    }
    Ok((queues, group))
}

/// What one queue's receive reserved under the lock.
#[derive(Debug, Default)]
struct Plan {
    generation: u64,
    handle: u64,
    deadline_ms: i64,
    /// Visible slots handed out again: (offset, new attempt).
    again: Vec<(u64, u32)>,
    /// Slots at their last attempt: (offset, their handle).
    dead: Vec<(u64, u64)>,
    /// Where fresh messages start, and how many may be taken.
    fresh_from: u64,
    fresh_room: usize,
}

async fn receive_queue(
    ctx: &BrokerContext,
    request: &ReceiveRequest,
    group: &SubscriptionGroupConfig,
    key: &Key,
    room: usize,
) -> Result<Vec<Delivery>, PopError> {
    let (generation, committed) = {
        let offsets = crate::core::view::offsets(&ctx.store).await?;
        let committed = offsets
            .stored(&key.group, &key.topic, key.queue_id)
            .unwrap_or_else(|| super::load::queue_start(ctx, &key.topic, key.queue_id));
        (offsets.generation(&key.group, &key.topic), committed)
    };
    let now = now_ms();
    let deadline_ms = now.saturating_add(request.invisible.as_millis() as i64);
    let max_attempts = group.retry_max_times.max(0) as u32 + 1;
    let fifo = group.consume_message_orderly;
    let plan = with_table(ctx, |t| {
        reserve(
            t,
            key,
            generation,
            committed,
            (now, deadline_ms),
            room,
            fifo,
            max_attempts,
        )
    })
    .await??;
    // An error, or the future dropped midway, makes what was reserved visible again.
    let guard = super::Undo::new(|| unreserve(ctx, key, &plan));
    let deliveries = serve(ctx, request, key, &plan).await?;
    for (offset, handle) in &plan.dead {
        settle::dead_letter_slot(ctx, key, *offset, *handle, generation).await?;
    }
    guard.disarm();
    Ok(deliveries)
}

/// Reads what `plan` reserved, takes the fresh range and delivers.
async fn serve(
    ctx: &BrokerContext,
    request: &ReceiveRequest,
    key: &Key,
    plan: &Plan,
) -> Result<Vec<Delivery>, PopError> {
    let mut again = Vec::with_capacity(plan.again.len());
    for (offset, attempt) in &plan.again {
        match read_one(ctx, key, *offset)? {
            Some(message) => again.push((message, *attempt)),
            None => forget(ctx, key, *offset, plan.handle),
        }
    }
    let fresh = if plan.fresh_room > 0 {
        Some(read(
            ctx,
            key,
            plan.fresh_from,
            plan.fresh_room,
            &request.filter,
        )?)
    } else {
        None
    };
    let taken = with_table(ctx, |t| take_fresh(t, key, plan, fresh)).await?;
    deliver(ctx, key, plan, again, taken).await
}

/// Undoes what a failed receive reserved: its slots are visible again as they were (a fresh
/// message taken becomes a slot of attempt 0), its dead-letter candidates unclaimed.
fn unreserve(ctx: &BrokerContext, key: &Key, plan: &Plan) {
    with_loaded(ctx, |t| {
        let Some(state) = t.get_mut(key) else {
            return;
        };
        for slot in state
            .slots
            .values_mut()
            .filter(|s| s.handle == plan.handle && s.busy)
        {
            slot.attempt = slot.attempt.saturating_sub(1);
            slot.deadline_ms = 0;
            slot.busy = false;
        }
        for (offset, handle) in &plan.dead {
            if let Some(slot) = state.slots.get_mut(offset).filter(|s| s.handle == *handle) {
                slot.busy = false;
            }
        }
    });
}

/// Reserves visible slots and the fresh range of one queue (module doc).
#[allow(clippy::too_many_arguments)]
fn reserve(
    t: &mut super::table::Table,
    key: &Key,
    generation: u64,
    committed: u64,
    (now, deadline_ms): (i64, i64),
    room: usize,
    fifo: bool,
    max_attempts: u32,
) -> Result<Plan, PopError> {
    let handle = t.handle();
    let window_max = t.window_max;
    let state = t.state(key, generation, committed).ok_or_else(|| {
        Refusal::new(
            RefusalKind::Busy,
            "the broker tracks as many consumed queues as it may; retry later",
        )
    })?;
    let mut plan = Plan {
        generation,
        handle,
        deadline_ms,
        fresh_from: state.next,
        ..Plan::default()
    };
    if fifo && state.has_invisible(now) {
        return Ok(plan);
    }
    for offset in state.visible(now, room) {
        let slot = state.slots.get_mut(&offset).expect("visible slot");
        slot.busy = true;
        if slot.attempt >= max_attempts {
            plan.dead.push((offset, slot.handle));
            continue;
        }
        slot.attempt += 1;
        slot.handle = handle;
        slot.deadline_ms = deadline_ms;
        plan.again.push((offset, slot.attempt));
    }
    let settled = plan.again.is_empty() && plan.dead.is_empty() && state.slots.is_empty();
    let in_window = window_max.saturating_sub(state.next - state.base) as usize;
    plan.fresh_room = if fifo && !settled {
        0
    } else {
        (room - plan.again.len()).min(in_window)
    };
    Ok(plan)
}

/// Fresh messages read from `plan.fresh_from`, taken if no other receive moved the queue
/// meanwhile: their slots are made (busy) and the filtered-out offsets done. Returns the
/// messages taken and the end of the range read.
fn take_fresh(
    t: &mut super::table::Table,
    key: &Key,
    plan: &Plan,
    fresh: Option<ferromq_store::GetResult>,
) -> (Vec<StoredMessage>, u64) {
    let Some(result) = fresh else {
        return (Vec::new(), plan.fresh_from);
    };
    let Some(state) = t.get_mut(key) else {
        return (Vec::new(), plan.fresh_from);
    };
    let usable = matches!(
        result.status,
        GetStatus::Found | GetStatus::NoMatchedMessage
    );
    if !usable
        || state.generation != plan.generation
        || state.next != plan.fresh_from
        || result.next_begin_offset <= plan.fresh_from
    {
        return (Vec::new(), plan.fresh_from);
    }
    let scan_to = result.next_begin_offset;
    for offset in plan.fresh_from..scan_to {
        state.done.insert(offset);
    }
    for message in &result.messages {
        state.done.remove(&message.queue_offset);
        state.slots.insert(
            message.queue_offset,
            Slot {
                attempt: 1,
                deadline_ms: plan.deadline_ms,
                handle: plan.handle,
                busy: true,
            },
        );
    }
    state.next = scan_to;
    (result.messages, scan_to)
}

/// Writes the receive's record and, once acknowledged, hands the deliveries out.
async fn deliver(
    ctx: &BrokerContext,
    key: &Key,
    plan: &Plan,
    again: Vec<(StoredMessage, u32)>,
    (fresh, scan_to): (Vec<StoredMessage>, u64),
) -> Result<Vec<Delivery>, PopError> {
    let mut delivered: Vec<(StoredMessage, u32)> = again;
    delivered.extend(fresh.into_iter().map(|m| (m, 1)));
    if delivered.is_empty() && scan_to == plan.fresh_from {
        return Ok(Vec::new());
    }
    let record = PopRecord {
        group: key.group.clone(),
        topic: key.topic.clone(),
        queue_id: key.queue_id,
        generation: plan.generation,
        op: PopOp::Receive {
            scan_from: plan.fresh_from,
            scan_to,
            deadline_ms: plan.deadline_ms,
            handle: plan.handle,
            entries: delivered
                .iter()
                .map(|(m, a)| (m.queue_offset, *a))
                .collect(),
        },
    };
    let offsets: Vec<u64> = delivered.iter().map(|(m, _)| m.queue_offset).collect();
    settle::write_records(ctx, std::slice::from_ref(&record)).await?;
    let mut moved = None;
    with_loaded(ctx, |t| {
        if let Some(state) = t.get_mut(key) {
            for offset in &offsets {
                if let Some(slot) = state
                    .slots
                    .get_mut(offset)
                    .filter(|s| s.handle == plan.handle)
                {
                    slot.busy = false;
                }
            }
            if state.advance() {
                moved = Some(state.base);
            }
        }
    });
    if let Some(base) = moved {
        commit_progress(ctx, key, plan.generation, base).await;
    }
    Ok(delivered
        .into_iter()
        .map(|(message, attempt)| Delivery {
            handle: ReceiptHandle {
                topic: key.topic.clone(),
                queue_id: key.queue_id,
                offset: message.queue_offset,
                handle: plan.handle,
                generation: plan.generation,
            },
            queue_id: key.queue_id,
            attempt,
            message,
        })
        .collect())
}

/// A slot whose message the queue no longer holds (retention removed it): consumed.
fn forget(ctx: &BrokerContext, key: &Key, offset: u64, handle: u64) {
    with_loaded(ctx, |t| {
        t.acked(key, &[(offset, handle)]);
    });
}

/// Reads the message at `offset`; `None` when the queue no longer holds it.
fn read_one(
    ctx: &BrokerContext,
    key: &Key,
    offset: u64,
) -> Result<Option<StoredMessage>, PopError> {
    let result = read(ctx, key, offset, 1, &TagFilter::All)?;
    Ok(result
        .messages
        .into_iter()
        .find(|m| m.queue_offset == offset))
}

fn read(
    ctx: &BrokerContext,
    key: &Key,
    offset: u64,
    count: usize,
    filter: &TagFilter,
) -> Result<ferromq_store::GetResult, PopError> {
    ctx.store
        .get_messages(
            &key.topic,
            key.queue_id,
            offset,
            count,
            PULL_BYTES_MAX,
            filter,
        )
        .map_err(|error| {
            PopError::Read(PullError::from_read(
                &ctx.metrics,
                &key.topic,
                key.queue_id,
                error,
            ))
        })
}
