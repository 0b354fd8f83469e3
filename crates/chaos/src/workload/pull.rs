//! A chaos pull consumer session: a [`PullConsumer`] in the run's group that takes its share
//! of the queues by the same average allocation the push consumers use, pulls, records each
//! delivery, and commits explicitly after every batch.
//!
//! Per owned queue the session keeps its next offset:
//! - taking a queue: read the committed offset from the broker → `QueueStart` there (no
//!   offset: the queue's min offset);
//! - a pull that finds messages: a `Deliver` per message, then commit the next offset →
//!   `CommitOk` / `CommitFail`;
//! - OFFSET_ILLEGAL / PULL_OFFSET_MOVED (a reset, or an offset past a shortened log): the
//!   queue restarts at the broker's offset → `QueueStop` + `QueueStart`, then a correction
//!   there (the broker accepts it only when justified);
//! - a commit refused as a regression (another member got further during a rebalance): the
//!   queue restarts at the committed offset read back;
//! - losing a queue: `QueueStop` (its last batch is already committed);
//! - [`UNCOMMITTED_MAX`] past the last acknowledged commit (commits keep failing, e.g. to a
//!   deposed master): no more pulls of the queue, only the commit again, until one lands.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ferromq_client::{
    ClientError, ConnectionPool, MessageQueue, OffsetError, PullConsumer, PullConsumerConfig,
    PullResult, ReadMode, RejectReason,
};
use ferromq_protocol::remoting::ClientOptions;
use tokio::sync::watch;
use tokio::time::Instant;

use super::membership::{allocation, consumer_ids};
use super::{
    commit_op, queue_of, record_delivery, Active, Shared, Target, REQUEST_TIMEOUT, ROUTE_MAX_AGE,
};
use crate::history::{ConsumerId, ConsumerKind};
use crate::recorder::Recorder;

/// Messages asked for per pull.
pub const PULL_BATCH_MAX: u32 = 32;
/// How often the session recomputes its queues.
pub const REBALANCE_INTERVAL: Duration = Duration::from_secs(1);
/// Largest distance a queue is pulled past its last acknowledged commit (the push sessions
/// use the same window): bounds what comes again after a failover.
pub const UNCOMMITTED_MAX: u64 = 256;
/// The checker's per-queue failover slack for these consumers
/// ([`CheckOptions::failover_slack`](crate::checker::CheckOptions::failover_slack)): the
/// window plus the one pull that may cross it.
pub const FAILOVER_SLACK: u64 = UNCOMMITTED_MAX + PULL_BATCH_MAX as u64;
/// Pause when no owned queue had anything new.
const IDLE_WAIT: Duration = Duration::from_millis(50);

/// One running pull session.
pub struct PullSession {
    consumer: ConsumerId,
    recorder: Arc<Recorder>,
    shared: Arc<Shared>,
    active: Active,
    target: Target,
    client: PullConsumer,
    pool: ConnectionPool,
    /// Next offset to pull per owned queue.
    owned: BTreeMap<MessageQueue, u64>,
    /// Per owned queue, the last offset the broker acknowledged (or the start offset).
    acked: BTreeMap<MessageQueue, u64>,
}

impl PullSession {
    /// A session of consumer `consumer` (not started until [`PullSession::run`]).
    ///
    /// # Errors
    /// The client's configuration errors.
    pub fn new(
        consumer: ConsumerId,
        target: &Target,
        recorder: Arc<Recorder>,
        shared: Arc<Shared>,
        active: Active,
    ) -> Result<PullSession, ClientError> {
        let client = PullConsumer::start(PullConsumerConfig {
            namesrv_addrs: target.namesrvs.clone(),
            group: target.group.clone(),
            pull_timeout: REQUEST_TIMEOUT,
            connect_timeout: REQUEST_TIMEOUT,
            route_max_age: ROUTE_MAX_AGE,
            heartbeat_interval: Duration::from_secs(1),
            ..PullConsumerConfig::default()
        })?;
        Ok(PullSession {
            consumer,
            recorder,
            shared,
            active,
            target: target.clone(),
            client,
            pool: ConnectionPool::new(ClientOptions {
                connect_timeout: REQUEST_TIMEOUT,
                ..ClientOptions::default()
            }),
            owned: BTreeMap::new(),
            acked: BTreeMap::new(),
        })
    }

    /// Consumes until `stop` is set; then records `QueueStop` for every owned queue. Dropped
    /// (aborted) instead, it stops wherever it is, like a crash.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let mut rebalanced: Option<Instant> = None;
        while !*stop.borrow() {
            if rebalanced.is_none_or(|at| at.elapsed() >= REBALANCE_INTERVAL) {
                self.rebalance().await;
                rebalanced = Some(Instant::now());
            }
            let mut found_any = false;
            let queues: Vec<MessageQueue> = self.owned.keys().cloned().collect();
            for queue in queues {
                if *stop.borrow() {
                    break;
                }
                found_any |= self.pull_once(&queue).await;
            }
            if !found_any {
                tokio::select! {
                    _ = tokio::time::sleep(IDLE_WAIT) => {}
                    _ = stop.changed() => {}
                }
            }
        }
        self.active.stop_all(&self.recorder, self.consumer);
        let _ = self.client.shutdown().await;
        self.pool.close_all();
    }

    /// Recomputes the owned queues; keeps the current ones when membership is unknown.
    async fn rebalance(&mut self) {
        let queues = match self.client.fetch_queues(&self.target.topic).await {
            Ok(queues) => queues,
            Err(error) => {
                tracing::debug!(%error, "pull consumer: no queues yet");
                return;
            }
        };
        let ids = match consumer_ids(
            &self.pool,
            self.client.routes(),
            &queues,
            &self.target.group,
        )
        .await
        {
            Ok(ids) => ids,
            Err(error) => {
                tracing::debug!(%error, "pull consumer: consumer list unavailable");
                return;
            }
        };
        let mine = allocation(&queues, &ids, self.client.client_id());
        let gone: Vec<MessageQueue> = self
            .owned
            .keys()
            .filter(|q| !mine.contains(q))
            .cloned()
            .collect();
        for queue in gone {
            self.owned.remove(&queue);
            self.acked.remove(&queue);
            self.client.offset_store().remove(&queue);
            self.active
                .stop(&self.recorder, self.consumer, &queue_of(&queue));
        }
        for queue in mine {
            if !self.owned.contains_key(&queue) {
                self.take(&queue).await;
            }
        }
    }

    /// Starts consuming `queue` at its committed offset (or its min offset when it has none);
    /// leaves it for the next rebalance when the broker cannot be asked.
    async fn take(&mut self, queue: &MessageQueue) {
        let start = match self
            .client
            .offset_store()
            .read(queue, ReadMode::Store)
            .await
        {
            Ok(Some(offset)) => offset,
            Ok(None) => match self.client.min_offset(queue).await {
                Ok(offset) => offset,
                Err(error) => {
                    tracing::debug!(%error, ?queue, "pull consumer: min offset unavailable");
                    return;
                }
            },
            Err(error) => {
                tracing::debug!(%error, ?queue, "pull consumer: committed offset unavailable");
                return;
            }
        };
        self.restart_queue(queue, start);
    }

    /// Records that the session (re)starts `queue` at `offset`.
    fn restart_queue(&mut self, queue: &MessageQueue, offset: u64) {
        let q = queue_of(queue);
        self.active.stop(&self.recorder, self.consumer, &q);
        self.active
            .start(&self.recorder, self.consumer, ConsumerKind::Pull, q, offset);
        self.owned.insert(queue.clone(), offset);
        self.acked.insert(queue.clone(), offset);
    }

    /// One pull of `queue`; true when it found messages.
    async fn pull_once(&mut self, queue: &MessageQueue) -> bool {
        let Some(&offset) = self.owned.get(queue) else {
            return false;
        };
        let acked = self.acked.get(queue).copied().unwrap_or(offset);
        if offset.saturating_sub(acked) >= UNCOMMITTED_MAX {
            // At the window: commit again instead of reading further.
            self.commit(queue, offset).await;
            return false;
        }
        match self.client.pull(queue, "*", offset, PULL_BATCH_MAX).await {
            Ok(PullResult::Found {
                messages,
                next_offset,
            }) => {
                for message in &messages {
                    record_delivery(&self.recorder, &self.shared, self.consumer, message);
                }
                self.owned.insert(queue.clone(), next_offset);
                self.commit(queue, next_offset).await;
                true
            }
            Ok(PullResult::NoNewMessage { next_offset })
            | Ok(PullResult::NoMatchedMessage { next_offset }) => {
                self.owned.insert(queue.clone(), next_offset);
                false
            }
            Ok(PullResult::OffsetIllegal { suggested_offset }) => {
                tracing::info!(
                    ?queue,
                    offset,
                    suggested_offset,
                    "pull consumer: offset moved"
                );
                self.restart_queue(queue, suggested_offset);
                self.correct(queue, suggested_offset).await;
                false
            }
            Err(error) => {
                tracing::debug!(%error, ?queue, "pull consumer: pull failed");
                if matches!(error, ClientError::Transport { .. }) {
                    self.client.routes().invalidate(&queue.topic);
                }
                false
            }
        }
    }

    /// Corrects the stored offset of `queue` to the broker's suggestion (a correction, which
    /// the broker accepts only when justified) and records the outcome.
    async fn correct(&mut self, queue: &MessageQueue, offset: u64) {
        let sent_ms = self.recorder.elapsed_ms();
        let result = self.client.offset_store().correct(queue, offset).await;
        self.record_commit(queue, offset, sent_ms, &result);
        if result.is_ok() {
            self.acked.insert(queue.clone(), offset);
        }
    }

    /// Records the outcome of a commit (or correction) of `offset` sent at `sent_ms`.
    fn record_commit(
        &self,
        queue: &MessageQueue,
        offset: u64,
        sent_ms: u64,
        result: &Result<(), OffsetError>,
    ) {
        let op = commit_op(self.consumer, queue, offset, Some(sent_ms), result);
        self.recorder.record(op);
    }

    /// Commits `offset` for `queue` and records the outcome; after a regression refusal the
    /// queue restarts from the committed offset read back.
    async fn commit(&mut self, queue: &MessageQueue, offset: u64) {
        let sent_ms = self.recorder.elapsed_ms();
        let result = self.client.commit(queue, offset).await;
        self.record_commit(queue, offset, sent_ms, &result);
        if result.is_ok() {
            self.acked.insert(queue.clone(), offset);
        }
        if matches!(
            result,
            Err(OffsetError::Rejected {
                reason: RejectReason::Regression,
                ..
            })
        ) {
            self.client.offset_store().remove(queue);
            self.owned.remove(queue);
            self.acked.remove(queue);
            self.take(queue).await;
        }
    }
}
