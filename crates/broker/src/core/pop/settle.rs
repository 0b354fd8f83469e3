//! Settling deliveries: acks, new invisibility deadlines, forwarding to the dead-letter queue,
//! and the writes they share (pop records, the group's offset commit, the rebuild watermark).
//!
//! Each operation first claims the delivery its handle names (table invariant 4: a wrong or
//! stale handle is refused, a claimed slot is left alone by every other request), writes its
//! record, and changes the table only once the record is acknowledged; a failed write
//! releases the claim and the caller gets the error.

use std::sync::atomic::Ordering;
use std::time::Duration;

use ferromq_protocol::DraftRecord;
use ferromq_store::offsets::{OffsetCommand, OffsetEntry, OffsetKind};

use super::record::{PopOp, PopRecord};
use super::table::{HandleError, Key, Table};
use super::{
    now_ms, with_loaded, with_table, PopError, ReceiptHandle, INVISIBLE_MAX, POP_CLIENT_ID,
    POP_GROUP, POP_TOPIC, WATERMARK_EVERY,
};
use crate::context::BrokerContext;
use crate::core::access::{self, Request};
use crate::core::error::{Refusal, RefusalKind, WriteError};
use crate::core::send_back::{send_back, Redelivery, SendBackRequest};

/// Acknowledges deliveries of `group`; one result per handle, in order.
pub async fn ack(
    ctx: &BrokerContext,
    group: &str,
    handles: &[ReceiptHandle],
) -> Result<Vec<Result<(), PopError>>, PopError> {
    access::client_group(ctx, group, Request::Commit)?;
    let generations = generations(ctx, group, handles).await?;
    let mut results: Vec<Result<(), PopError>> = Vec::with_capacity(handles.len());
    let mut claimed: Vec<(Key, Vec<(u64, u64)>)> = Vec::new();
    with_table(ctx, |t| {
        for (h, generation) in handles.iter().zip(&generations) {
            let key = key_of(group, h);
            let claim = if h.generation == *generation {
                t.claim(&key, h.offset, h.handle)
            } else {
                Err(HandleError::Expired)
            };
            results.push(claim.map_err(|e| handle_error(e, h)));
            if results.last().is_some_and(Result::is_ok) {
                match claimed.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, entries)) => entries.push((h.offset, h.handle)),
                    None => claimed.push((key, vec![(h.offset, h.handle)])),
                }
            }
        }
    })
    .await?;
    let records: Vec<PopRecord> = claimed
        .iter()
        .map(|(key, entries)| PopRecord {
            group: key.group.clone(),
            topic: key.topic.clone(),
            queue_id: key.queue_id,
            generation: generation_of(handles, &generations, key),
            op: PopOp::Ack {
                entries: entries.clone(),
            },
        })
        .collect();
    // An error, or the future dropped midway, releases the claims.
    let guard = super::Undo::new(|| release_all(ctx, &claimed));
    write_records(ctx, &records).await?;
    for (key, entries) in &claimed {
        for (offset, _) in entries {
            ctx.pop.renewals.forget(key, *offset);
        }
        let mut moved = None;
        with_loaded(ctx, |t| {
            if t.acked(key, entries) {
                moved = t.get_mut(key).map(|s| s.base);
            }
        });
        if let Some(base) = moved {
            let generation = generation_of(handles, &generations, key);
            commit_progress(ctx, key, generation, base).await;
        }
    }
    guard.disarm();
    Ok(results)
}

/// Gives a delivery a new invisibility (`0` makes it visible at once: a negative ack);
/// returns the handle of the renewed delivery, which replaces the old one.
pub async fn change_invisible(
    ctx: &BrokerContext,
    group: &str,
    handle: &ReceiptHandle,
    invisible: Duration,
) -> Result<ReceiptHandle, PopError> {
    access::client_group(ctx, group, Request::Commit)?;
    if invisible > INVISIBLE_MAX {
        return Err(PopError::IllegalInvisibleTime(format!(
            "invisible duration {invisible:?} is longer than {INVISIBLE_MAX:?}"
        )));
    }
    let generation = generations(ctx, group, std::slice::from_ref(handle)).await?[0];
    let key = key_of(group, handle);
    let new_handle = with_table(ctx, |t| {
        claim_current(t, &key, handle, generation).map(|()| t.handle())
    })
    .await??;
    let deadline_ms = now_ms().saturating_add(invisible.as_millis() as i64);
    let record = PopRecord {
        group: group.to_string(),
        topic: handle.topic.clone(),
        queue_id: handle.queue_id,
        generation,
        op: PopOp::Renew {
            offset: handle.offset,
            handle: handle.handle,
            new_handle,
            deadline_ms,
        },
    };
    let guard = super::Undo::new(|| {
        with_loaded(ctx, |t| t.release(&key, handle.offset, handle.handle));
    });
    write_records(ctx, std::slice::from_ref(&record)).await?;
    with_loaded(ctx, |t| {
        t.renewed(&key, handle.offset, handle.handle, new_handle, deadline_ms)
    });
    guard.disarm();
    // The client took the deadline over: no automatic renewal of the old handle.
    ctx.pop.renewals.forget(&key, handle.offset);
    Ok(ReceiptHandle {
        handle: new_handle,
        ..handle.clone()
    })
}

/// Moves a delivered message to the group's dead-letter queue and settles its delivery (a
/// consumer gave up on it).
pub async fn forward_to_dead_letter(
    ctx: &BrokerContext,
    group: &str,
    handle: &ReceiptHandle,
) -> Result<(), PopError> {
    access::client_group(ctx, group, Request::SendBack)?;
    let generation = generations(ctx, group, std::slice::from_ref(handle)).await?[0];
    let key = key_of(group, handle);
    with_table(ctx, |t| claim_current(t, &key, handle, generation)).await??;
    dead_letter_slot(ctx, &key, handle.offset, handle.handle, generation).await
}

/// Copies the claimed slot's message to `%DLQ%<group>` and acks the slot (an ack record).
pub(super) async fn dead_letter_slot(
    ctx: &BrokerContext,
    key: &Key,
    offset: u64,
    handle: u64,
    generation: u64,
) -> Result<(), PopError> {
    let guard = super::Undo::new(|| with_loaded(ctx, |t| t.release(key, offset, handle)));
    dead_letter_inner(ctx, key, offset, handle, generation).await?;
    guard.disarm();
    Ok(())
}

async fn dead_letter_inner(
    ctx: &BrokerContext,
    key: &Key,
    offset: u64,
    handle: u64,
    generation: u64,
) -> Result<(), PopError> {
    let read = ctx
        .store
        .get_messages(
            &key.topic,
            key.queue_id,
            offset,
            1,
            usize::MAX,
            &ferromq_store::TagFilter::All,
        )
        .map_err(|cause| crate::core::error::PullError::Failed {
            topic: key.topic.clone(),
            queue_id: key.queue_id,
            cause,
        })?;
    if let Some(message) = read.messages.iter().find(|m| m.queue_offset == offset) {
        send_back(
            ctx,
            &SendBackRequest {
                group: key.group.clone(),
                phys_offset: message.phys_offset,
                redelivery: Redelivery::DeadLetter,
                origin_msg_id: None,
                max_reconsume_times: None,
                peer: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            },
        )
        .await
        .map_err(|e| match e {
            crate::core::error::SendError::Refused(r) => PopError::Refused(r),
            crate::core::error::SendError::Write(w) => PopError::Write(w),
        })?;
        ctx.pop.dead_lettered.fetch_add(1, Ordering::Relaxed);
    }
    let record = PopRecord {
        group: key.group.clone(),
        topic: key.topic.clone(),
        queue_id: key.queue_id,
        generation,
        op: PopOp::Ack {
            entries: vec![(offset, handle)],
        },
    };
    write_records(ctx, std::slice::from_ref(&record)).await?;
    ctx.pop.renewals.forget(key, offset);
    let mut moved = None;
    with_loaded(ctx, |t| {
        if t.acked(key, &[(offset, handle)]) {
            moved = t.get_mut(key).map(|s| s.base);
        }
    });
    if let Some(base) = moved {
        commit_progress(ctx, key, generation, base).await;
    }
    Ok(())
}

/// Appends pop records (under the table lock, so each is noted for the watermark before any
/// later computation of it) and waits for their acknowledgement.
pub(super) async fn write_records(
    ctx: &BrokerContext,
    records: &[PopRecord],
) -> Result<(), PopError> {
    if records.is_empty() {
        return Ok(());
    }
    crate::core::ack::check_writable(ctx, "pop record")?;
    let bodies: Vec<Vec<u8>> = records.iter().map(PopRecord::encode).collect();
    let now = now_ms();
    let drafts: Vec<DraftRecord<'_>> = bodies
        .iter()
        .map(|body| DraftRecord {
            topic: POP_TOPIC,
            queue_id: 0,
            flag: 0,
            sys_flag: 0,
            born_timestamp_ms: now,
            born_host: ctx.broker_addr,
            store_host: ctx.broker_addr,
            reconsume_times: 0,
            prepared_tx_offset: 0,
            body,
            properties: &[],
        })
        .collect();
    let mut appended = None;
    with_loaded(ctx, |t| {
        let receipt = ctx.store.append(&drafts);
        if let Ok(receipt) = &receipt {
            for (placement, record) in receipt.placements.iter().zip(records) {
                t.note_record(placement.queue_offset, record);
            }
        }
        appended = Some(receipt);
    });
    let receipt = appended
        .ok_or(PopError::TermChanged)?
        .map_err(|error| WriteError::from_append("pop record", error))?;
    crate::core::ack::acknowledged(ctx, receipt.ticket(), "pop record").await?;
    let written = ctx
        .pop
        .records_since_watermark
        .fetch_add(records.len() as u64, Ordering::Relaxed);
    if written + records.len() as u64 >= WATERMARK_EVERY {
        ctx.pop.records_since_watermark.store(0, Ordering::Relaxed);
        commit_watermark(ctx).await;
    }
    Ok(())
}

/// Commits the group's offset of `key` to `base` (module invariant 3). A failure is counted
/// and logged: the acks are durable, and the next advance commits again.
pub(super) async fn commit_progress(ctx: &BrokerContext, key: &Key, generation: u64, base: u64) {
    let command = OffsetCommand {
        kind: OffsetKind::Commit,
        group: key.group.clone(),
        client_id: POP_CLIENT_ID.into(),
        generation: Some(generation),
        entries: vec![OffsetEntry {
            topic: key.topic.clone(),
            queue_id: key.queue_id,
            offset: base,
        }],
        fenced_clients: Vec::new(),
        access_key: None,
    };
    if let Err(error) = crate::core::ack::put_offsets(ctx, &command).await {
        ctx.pop.commit_failures.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(group = %key.group, topic = %key.topic, queue_id = key.queue_id, base, %error,
            "offset commit of an acked prefix failed; the next ack commits again");
    }
}

/// Commits where a rebuild may start reading the pop topic (the internal group's offset).
async fn commit_watermark(ctx: &BrokerContext) {
    let mut low = None;
    with_loaded(ctx, |t| low = Some(t.low_watermark()));
    let Some(low) = low else {
        return;
    };
    let command = OffsetCommand {
        kind: OffsetKind::Commit,
        group: POP_GROUP.into(),
        client_id: POP_CLIENT_ID.into(),
        generation: None,
        entries: vec![OffsetEntry {
            topic: POP_TOPIC.into(),
            queue_id: 0,
            offset: low,
        }],
        fenced_clients: Vec::new(),
        access_key: None,
    };
    if let Err(error) = crate::core::ack::put_offsets(ctx, &command).await {
        tracing::warn!(low, %error, "pop watermark commit failed; the next one retries");
    }
}

/// The current reset generation of each handle's topic for `group`.
async fn generations(
    ctx: &BrokerContext,
    group: &str,
    handles: &[ReceiptHandle],
) -> Result<Vec<u64>, PopError> {
    let offsets = crate::core::view::offsets(&ctx.store).await?;
    Ok(handles
        .iter()
        .map(|h| offsets.generation(group, &h.topic))
        .collect())
}

fn generation_of(handles: &[ReceiptHandle], generations: &[u64], key: &Key) -> u64 {
    handles
        .iter()
        .zip(generations)
        .find(|(h, _)| h.topic == key.topic && h.queue_id == key.queue_id)
        .map_or(0, |(_, g)| *g)
}

fn claim_current(
    t: &mut Table,
    key: &Key,
    handle: &ReceiptHandle,
    generation: u64,
) -> Result<(), PopError> {
    if handle.generation != generation {
        return Err(handle_error(HandleError::Expired, handle));
    }
    t.claim(key, handle.offset, handle.handle)
        .map_err(|e| handle_error(e, handle))
}

fn release_all(ctx: &BrokerContext, claimed: &[(Key, Vec<(u64, u64)>)]) {
    with_loaded(ctx, |t| {
        for (key, entries) in claimed {
            for (offset, handle) in entries {
                t.release(key, *offset, *handle);
            }
        }
    });
}

fn key_of(group: &str, handle: &ReceiptHandle) -> Key {
    Key {
        group: group.to_string(),
        topic: handle.topic.clone(),
        queue_id: handle.queue_id,
    }
}

fn handle_error(error: HandleError, handle: &ReceiptHandle) -> PopError {
    match error {
        HandleError::Expired => PopError::InvalidHandle(format!(
            "offset {} of {}/{}: the delivery was acked, redelivered, or made void by a reset",
            handle.offset, handle.topic, handle.queue_id
        )),
        HandleError::Busy => PopError::Refused(Refusal::new(
            RefusalKind::Busy,
            format!(
                "another request about offset {} of {}/{} is being written; retry",
                handle.offset, handle.topic, handle.queue_id
            ),
        )),
    }
}
