//! The transaction checker (master only): every `transactionCheckInterval` it advances the
//! watermarks, then checks back the halves that are due and discards those checked
//! `transactionCheckMax` times.
//!
//! Invariants:
//! 1. A check-back is recorded in the log (a `check` op record with its number) before the
//!    CHECK_TRANSACTION_STATE request leaves, so a restarted checker continues the count and
//!    never grants a half more than `transactionCheckMax` checks. A check with no producer of
//!    the group online is recorded and counted too (RocketMQ's behaviour): a half whose
//!    producer is gone for good is discarded in bounded time.
//! 2. A discard copies the half to `TRANS_CHECK_MAX_TIME_TOPIC` (readable by administrators,
//!    never by a consumer of the real topic) with its op record in one append, logs one line
//!    and counts `ferromq_transaction_discards_total`.
//! 3. Each tick handles at most [`CHECK_BATCH_MAX`] halves and writes their check records
//!    in one append; the check requests are one-way and never wait for an answer (the
//!    answer is an END). A full or closed producer connection skips the send, not the count.
//! 4. The watermarks are committed as offsets of `CID_RMQ_SYS_TRANS` only when they moved.

use std::sync::Arc;

use bytes::Bytes;
use ferromq_protocol::remoting::codes::request;
use ferromq_protocol::remoting::headers::transaction::{
    CheckTransactionStateRequestHeader, PROPERTY_TRANSACTION_CHECK_TIMES,
};
use ferromq_protocol::remoting::RemotingCommand;
use ferromq_protocol::{DraftRecord, MessageId, RecordView};
use ferromq_store::offsets::{OffsetCommand, OffsetEntry, OffsetKind};

use super::decision::{decide, op_draft, write_ops, EndError};
use super::op::{Op, OpRecord};
use super::table::{Decision, HalfEntry, HalfState};
use super::{
    now_ms, with_table, CHECK_BATCH_MAX, TRANSACTION_GROUP, TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC,
};
use crate::catalog::topics::PERM_READ;
use crate::context::BrokerContext;
use crate::core::error::{Refusal, RefusalKind};
use crate::core::scheduler::{PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC};
use crate::core::send_back::rewrite_properties;

/// Runs the checker until the broker stops.
pub async fn run_checker(ctx: Arc<BrokerContext>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(ctx.transactions.settings.check_interval());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        if !ctx.replication.role().is_master() {
            // A slave holds the master's decisions in its log and rebuilds from them if it is
            // promoted (invariant 4 of the module).
            ctx.transactions.unload();
            continue;
        }
        if let Err(error) = check_once(&ctx).await {
            tracing::warn!(%error, "transaction check failed; retrying next interval");
        }
    }
}

/// One checker pass: watermarks, discards, check-backs. Public for tests and `ferromq`'s
/// admin, which may run a pass at once.
///
/// # Errors
/// The table could not be rebuilt, or a record could not be made durable.
pub async fn check_once(ctx: &BrokerContext) -> Result<(), EndError> {
    // A watermark that cannot be committed now (e.g. the op queue's dispatch lags) is
    // committed on a later run; the checks do not wait for it.
    if let Err(error) = commit_watermarks(ctx).await {
        tracing::warn!(%error, "transaction checker watermarks not committed; retrying next interval");
    }
    let settings = ctx.transactions.settings;
    let due = with_table(ctx, |t| {
        t.due(now_ms(), settings.check_interval_ms, CHECK_BATCH_MAX)
    })
    .await?;
    let (exhausted, to_check): (Vec<_>, Vec<_>) = due
        .into_iter()
        .partition(|(_, e)| e.checks >= settings.check_max);
    for (queue_offset, entry) in exhausted {
        let claimed = with_table(ctx, |t| match t.get_mut(queue_offset) {
            Some(e) if e.state == HalfState::Pending => {
                e.state = HalfState::Deciding(Decision::Discard);
                true
            }
            _ => false,
        })
        .await?;
        if claimed {
            decide(ctx, queue_offset, &entry, Decision::Discard).await?;
        }
    }
    check_back(ctx, to_check).await
}

/// Records the checks of `due` in one append, then sends them.
async fn check_back(ctx: &BrokerContext, due: Vec<(u64, HalfEntry)>) -> Result<(), EndError> {
    if due.is_empty() {
        return Ok(());
    }
    let ops: Vec<OpRecord> = due
        .iter()
        .map(|(q, e)| OpRecord {
            half_queue_offset: *q,
            half_phys_offset: e.phys_offset,
            op: Op::Check(e.checks + 1),
        })
        .collect();
    let last_op = write_ops(ctx, &ops).await?;
    let first_op = last_op + 1 - ops.len() as u64;
    let now = now_ms();
    with_table(ctx, |table| {
        for (index, (queue_offset, _)) in due.iter().enumerate() {
            table.note_op(*queue_offset, first_op + index as u64);
            if let Some(entry) = table.get_mut(*queue_offset) {
                entry.checks += 1;
                entry.last_check_ms = now;
                entry.unknown_recorded = false;
            }
        }
    })
    .await?;
    ctx.metrics.transactions.checks_recorded(ops.len());
    for (queue_offset, entry) in &due {
        send_check(ctx, *queue_offset, entry).await;
    }
    Ok(())
}

/// A check-back for a producer the remoting registry does not hold (a gRPC producer, whose
/// adapter delivers it over its own stream): the half as a record under its real topic and
/// queue, with its check count.
#[derive(Debug, Clone)]
pub struct CheckBack {
    /// The half's producer group.
    pub producer_group: String,
    /// The real topic.
    pub topic: String,
    /// The half's queue offset.
    pub half_queue_offset: u64,
    /// The half's CommitLog offset.
    pub half_phys_offset: u64,
    /// The half as a record (real topic and queue, `TRANSACTION_CHECK_TIMES`).
    pub record: Vec<u8>,
}

/// Check-backs queued for other transports before new ones are skipped (and counted as sent:
/// the check count moves on, invariant 1).
pub const CHECK_BACKS_QUEUED_MAX: usize = 1_024;

/// Sends one check-back to a producer of the half's group: CHECK_TRANSACTION_STATE to a
/// remoting producer if one is online, else to the sink of other transports if one is set.
async fn send_check(ctx: &BrokerContext, queue_offset: u64, entry: &HalfEntry) {
    let remoting = ctx.clients.producer_channel(&entry.producer_group);
    let sink = ctx.transactions.check_sink();
    if remoting.is_none() && sink.is_none() {
        tracing::info!(group = %entry.producer_group, queue_offset, checks = entry.checks + 1,
            "transaction check-back: no producer of the group is online; counted");
        return;
    }
    let (topic, record, uniq) = match check_record(ctx, queue_offset, entry).await {
        Ok(parts) => parts,
        Err(error) => {
            tracing::warn!(queue_offset, %error, "transaction check-back not sent: the half could not be read");
            return;
        }
    };
    let Some((client_id, channel)) = remoting else {
        let check = CheckBack {
            producer_group: entry.producer_group.clone(),
            topic,
            half_queue_offset: queue_offset,
            half_phys_offset: entry.phys_offset,
            record,
        };
        if sink.is_some_and(|sink| sink.try_send(check).is_err()) {
            tracing::info!(group = %entry.producer_group, queue_offset,
                "transaction check-back not sent: the queue of other transports is full; counted");
        }
        return;
    };
    let command = check_command(ctx, queue_offset, entry, topic, &record, uniq);
    if channel.tx.try_send(command.into()).is_err() {
        tracing::info!(group = %entry.producer_group, client = %client_id, queue_offset,
            "transaction check-back not sent: the producer's connection is full or closed; counted");
    }
}

/// The half as a record with its real topic and queue and the check count: (real topic,
/// record bytes, `UNIQ_KEY`).
async fn check_record(
    ctx: &BrokerContext,
    queue_offset: u64,
    entry: &HalfEntry,
) -> Result<(String, Vec<u8>, Option<String>), Refusal> {
    let bytes = crate::core::lookup::message_at(ctx, entry.phys_offset).await?;
    let view = RecordView::parse(&bytes).map_err(|e| {
        Refusal::new(
            RefusalKind::Internal,
            format!("half message unreadable: {e}"),
        )
    })?;
    let topic = view
        .properties
        .get_str(PROPERTY_REAL_TOPIC)
        .unwrap_or(TRANS_HALF_TOPIC)
        .to_string();
    let queue_id = view
        .properties
        .get_str(PROPERTY_REAL_QUEUE_ID)
        .and_then(|q| q.parse().ok())
        .unwrap_or(0);
    let uniq = view.properties.get_str("UNIQ_KEY").map(str::to_string);
    let properties = rewrite_properties(
        &view.properties,
        &[],
        &[(
            PROPERTY_TRANSACTION_CHECK_TIMES,
            (entry.checks + 1).to_string(),
        )],
    );
    let draft = DraftRecord {
        topic: &topic,
        queue_id,
        properties: &properties,
        prepared_tx_offset: 0,
        ..draft_of(ctx, &view)
    };
    let mut record = draft.encode().map_err(|e| {
        Refusal::new(
            RefusalKind::Internal,
            format!("half message cannot be re-encoded: {e}"),
        )
    })?;
    record.finalize(queue_offset, entry.phys_offset, view.store_timestamp_ms);
    Ok((topic, record.as_bytes().to_vec(), uniq))
}

/// The CHECK_TRANSACTION_STATE request of a half: header, and the half as a record.
fn check_command(
    ctx: &BrokerContext,
    queue_offset: u64,
    entry: &HalfEntry,
    topic: String,
    record: &[u8],
    uniq: Option<String>,
) -> RemotingCommand {
    let header = CheckTransactionStateRequestHeader {
        tran_state_table_offset: queue_offset as i64,
        commit_log_offset: entry.phys_offset as i64,
        msg_id: uniq.clone(),
        transaction_id: uniq,
        offset_msg_id: Some(
            MessageId {
                store_host: ctx.broker_addr,
                phys_offset: entry.phys_offset,
            }
            .encode(),
        ),
        topic: Some(topic),
        broker_name: Some(ctx.config.broker_name.clone()),
    };
    let mut command =
        RemotingCommand::request_with_header(request::CHECK_TRANSACTION_STATE, &header);
    command.set_oneway(true);
    command.body = Some(Bytes::copy_from_slice(record));
    command
}

/// The fields a copy of a half keeps.
fn draft_of<'a>(ctx: &BrokerContext, view: &RecordView<'a>) -> DraftRecord<'a> {
    DraftRecord {
        topic: TRANS_CHECK_MAX_TIME_TOPIC,
        queue_id: 0,
        flag: view.flag,
        sys_flag: view.sys_flag,
        born_timestamp_ms: view.born_timestamp_ms,
        born_host: view.born_host,
        store_host: ctx.broker_addr,
        reconsume_times: view.reconsume_times,
        prepared_tx_offset: view.phys_offset as i64,
        body: view.body,
        properties: &[],
    }
}

/// Copies a half checked `transactionCheckMax` times to `TRANS_CHECK_MAX_TIME_TOPIC` with its
/// discard op record (invariant 2); returns the op's queue offset.
pub(super) async fn discard(
    ctx: &BrokerContext,
    entry: &HalfEntry,
    op: &OpRecord,
) -> Result<u64, EndError> {
    ensure_discard_topic(ctx)?;
    let bytes = crate::core::lookup::message_at(ctx, entry.phys_offset).await?;
    let view = RecordView::parse(&bytes).map_err(|e| {
        Refusal::new(
            RefusalKind::Internal,
            format!("half message unreadable: {e}"),
        )
    })?;
    let properties = rewrite_properties(
        &view.properties,
        &[],
        &[(PROPERTY_TRANSACTION_CHECK_TIMES, entry.checks.to_string())],
    );
    let copy = DraftRecord {
        properties: &properties,
        ..draft_of(ctx, &view)
    };
    let (op_body, op_properties) = (op.body(), op.properties());
    let receipt =
        crate::core::ack::put_messages(ctx, &[copy, op_draft(ctx, &op_body, &op_properties)])
            .await?;
    tracing::warn!(group = %entry.producer_group, half_queue_offset = op.half_queue_offset,
        half_phys_offset = entry.phys_offset, checks = entry.checks,
        "half message discarded to {TRANS_CHECK_MAX_TIME_TOPIC}: no decision after transactionCheckMax check-backs");
    Ok(receipt.placements.last().map_or(0, |p| p.queue_offset))
}

/// Creates the discard topic (one queue, readable, not writable by clients).
fn ensure_discard_topic(ctx: &BrokerContext) -> Result<(), Refusal> {
    if ctx.topics.get(TRANS_CHECK_MAX_TIME_TOPIC).is_some() {
        return Ok(());
    }
    let mut config = crate::catalog::topics::topic_with_queues(TRANS_CHECK_MAX_TIME_TOPIC, 1);
    config.perm = PERM_READ;
    ctx.topics
        .put_if_absent(config)
        .map_err(|e| Refusal::new(RefusalKind::Internal, e.to_string()))?;
    ctx.register_now.notify_one();
    Ok(())
}

/// Advances the watermarks and commits them when they moved (invariant 4).
async fn commit_watermarks(ctx: &BrokerContext) -> Result<(), EndError> {
    let moved = with_table(ctx, |t| {
        t.advance(0);
        let now = (t.half_low, t.op_low);
        (now != t.committed).then_some(now)
    })
    .await?;
    let Some((half_low, op_low)) = moved else {
        return Ok(());
    };
    let command = OffsetCommand {
        kind: OffsetKind::Commit,
        group: TRANSACTION_GROUP.into(),
        client_id: "transaction-checker".into(),
        generation: None,
        entries: vec![
            OffsetEntry {
                topic: TRANS_HALF_TOPIC.into(),
                queue_id: 0,
                offset: half_low,
            },
            OffsetEntry {
                topic: TRANS_OP_HALF_TOPIC.into(),
                queue_id: 0,
                offset: op_low,
            },
        ],
        fenced_clients: Vec::new(),
        access_key: None,
    };
    let outcome = crate::core::ack::put_offsets(ctx, &command).await?;
    if !outcome.all_accepted() {
        tracing::info!(half_low, op_low, verdicts = ?outcome.verdicts,
            "transaction checker watermarks not accepted by the offset rules yet; retrying next interval");
        return Ok(());
    }
    with_table(ctx, |t| t.committed = t.committed.max((half_low, op_low))).await?;
    Ok(())
}
