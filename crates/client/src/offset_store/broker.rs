//! [`BrokerOffsetStore`]: cluster-mode offsets committed to, and queried from, the broker
//! that masters each queue (UPDATE_CONSUMER_OFFSET, QUERY_CONSUMER_OFFSET, request/response).
//!
//! Failover: a commit or query whose master answers NOT_MASTER or cannot be reached asks the
//! name servers for the route at once ([`RouteCache::master_failed`]); when the route names
//! another master, the same request goes to it once more (a commit of the same value is
//! idempotent: the old master refused it, or stored it before dying and the new master holds
//! it or takes it now). Otherwise the first error is returned. Commits never go to a slave
//! (offset pitfall R3): only masters (broker id 0) are ever addressed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ferromq_protocol::remoting::body::misc::MessageQueue;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::offset::{
    QueryConsumerOffsetRequestHeader, QueryConsumerOffsetResponseHeader,
    UpdateConsumerOffsetRequestHeader,
};
use ferromq_protocol::remoting::RemotingCommand;

use super::memory::{read_through, Counters, Table};
use super::{BoxFuture, OffsetStore, OffsetStoreStats, PersistReport, ReadMode, CORRECTION_EXT};
use crate::connections::ConnectionPool;
use crate::error::{codes, OffsetError, RejectReason};
use crate::route::RouteCache;

/// Attempts of one commit or offset query: the first, and one on the new master when the
/// first found its master gone and the refreshed route names another.
const FAILOVER_ATTEMPTS: u32 = 2;

/// Cluster-mode offsets kept by the broker that masters each queue.
#[derive(Debug)]
pub struct BrokerOffsetStore {
    group: String,
    routes: Arc<RouteCache>,
    pool: Arc<ConnectionPool>,
    timeout: Duration,
    table: Table,
    counters: Counters,
}

impl BrokerOffsetStore {
    /// A store for `group` that finds brokers through `routes` and waits at most `timeout`
    /// for each request.
    pub fn new(
        group: impl Into<String>,
        routes: Arc<RouteCache>,
        pool: Arc<ConnectionPool>,
        timeout: Duration,
    ) -> Self {
        BrokerOffsetStore {
            group: group.into(),
            routes,
            pool,
            timeout,
            table: Table::default(),
            counters: Counters::default(),
        }
    }

    async fn broker_addr(&self, queue: &MessageQueue) -> Result<SocketAddr, OffsetError> {
        self.routes
            .master_addr(&queue.topic, &queue.broker_name)
            .await
            .map_err(|e| OffsetError::Unreachable {
                queue: queue.clone(),
                source: Box::new(e),
            })
    }

    /// The master to try next after `error` from `addr`: the new master of the refreshed
    /// route when `error` says the master may have changed and this was not the last attempt.
    async fn failover_target(
        &self,
        queue: &MessageQueue,
        addr: SocketAddr,
        error: &OffsetError,
        attempt: u32,
    ) -> Option<SocketAddr> {
        if attempt >= FAILOVER_ATTEMPTS || !error.signals_master_change() {
            return None;
        }
        let next = self
            .routes
            .master_failed(&queue.topic, &queue.broker_name, addr)
            .await?;
        tracing::info!(group = %self.group, ?queue, old_master = %addr, new_master = %next,
            %error, "offset request goes to the broker group's new master");
        Some(next)
    }

    /// Sends one commit (with `correction`, marked as ferromq's justified correction, see
    /// [`CORRECTION_EXT`]) and maps the answer; follows a failover once (see the module doc).
    async fn commit(
        &self,
        queue: &MessageQueue,
        offset: u64,
        correction: bool,
    ) -> Result<(), OffsetError> {
        let mut addr = self.broker_addr(queue).await?;
        let mut attempt = 1;
        loop {
            let result = self.commit_at(addr, queue, offset, correction).await;
            match result {
                Err(error) => match self.failover_target(queue, addr, &error, attempt).await {
                    Some(next) => {
                        addr = next;
                        attempt += 1;
                    }
                    None => return Err(error),
                },
                Ok(()) => return Ok(()),
            }
        }
    }

    /// One commit to `addr`.
    async fn commit_at(
        &self,
        addr: SocketAddr,
        queue: &MessageQueue,
        offset: u64,
        correction: bool,
    ) -> Result<(), OffsetError> {
        let wire = i64::try_from(offset).map_err(|_| OffsetError::OutOfRange {
            queue: queue.clone(),
            value: offset.to_string(),
            why: "larger than the wire's i64",
        })?;
        let header = UpdateConsumerOffsetRequestHeader {
            consumer_group: self.group.clone(),
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
            commit_offset: wire,
        };
        let mut cmd =
            RemotingCommand::request_with_header(request::UPDATE_CONSUMER_OFFSET, &header);
        if correction {
            cmd.ext_fields
                .insert(CORRECTION_EXT.to_string(), "true".to_string());
        }
        let reply = self
            .pool
            .invoke(addr, cmd, self.timeout)
            .await
            .map_err(|e| OffsetError::Unreachable {
                queue: queue.clone(),
                source: Box::new(e),
            })?;
        let remark = reply.remark.clone().unwrap_or_default();
        let reason = match reply.code {
            response::SUCCESS => return Ok(()),
            codes::NOT_DURABLE => {
                return Err(OffsetError::NotDurable {
                    queue: queue.clone(),
                    addr,
                    remark,
                })
            }
            codes::COMMIT_REGRESSION => RejectReason::Regression,
            codes::COMMIT_STALE_GENERATION => RejectReason::StaleGeneration,
            codes::COMMIT_PAST_MAX => RejectReason::PastMax,
            response::SYSTEM_BUSY | response::SYSTEM_ERROR | response::SERVICE_NOT_AVAILABLE => {
                return Err(OffsetError::Unexpected {
                    queue: queue.clone(),
                    addr,
                    code: reply.code,
                    remark,
                })
            }
            _ => RejectReason::Other,
        };
        Err(OffsetError::Rejected {
            queue: queue.clone(),
            offset,
            reason,
            code: reply.code,
            remark,
            addr,
        })
    }

    /// Queries the stored offset of `queue` from its master; follows a failover once.
    async fn query(&self, queue: &MessageQueue) -> Result<Option<u64>, OffsetError> {
        let mut addr = self.broker_addr(queue).await?;
        let mut attempt = 1;
        loop {
            match self.query_at(addr, queue).await {
                Err(error) => match self.failover_target(queue, addr, &error, attempt).await {
                    Some(next) => {
                        addr = next;
                        attempt += 1;
                    }
                    None => return Err(error),
                },
                Ok(offset) => return Ok(offset),
            }
        }
    }

    /// One offset query to `addr`.
    async fn query_at(
        &self,
        addr: SocketAddr,
        queue: &MessageQueue,
    ) -> Result<Option<u64>, OffsetError> {
        let header = QueryConsumerOffsetRequestHeader {
            consumer_group: self.group.clone(),
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
            // Ask for "not found" rather than a guessed 0 (offset pitfall B5).
            set_zero_if_not_found: Some(false),
        };
        let cmd = RemotingCommand::request_with_header(request::QUERY_CONSUMER_OFFSET, &header);
        let reply = self
            .pool
            .invoke(addr, cmd, self.timeout)
            .await
            .map_err(|e| OffsetError::Unreachable {
                queue: queue.clone(),
                source: Box::new(e),
            })?;
        match reply.code {
            response::SUCCESS => {
                let h: QueryConsumerOffsetResponseHeader =
                    reply.decode_header().map_err(|e| OffsetError::Unexpected {
                        queue: queue.clone(),
                        addr,
                        code: reply.code,
                        remark: format!("bad offset header: {e}"),
                    })?;
                u64::try_from(h.offset)
                    .map(Some)
                    .map_err(|_| OffsetError::OutOfRange {
                        queue: queue.clone(),
                        value: h.offset.to_string(),
                        why: "the broker answered a negative offset",
                    })
            }
            response::QUERY_NOT_FOUND => Ok(None),
            code => Err(OffsetError::Unexpected {
                queue: queue.clone(),
                addr,
                code,
                remark: reply.remark.unwrap_or_default(),
            }),
        }
    }

    async fn persist_queue(&self, queue: &MessageQueue) -> Result<Option<u64>, OffsetError> {
        self.persist_queue_as(queue, false).await
    }

    async fn persist_queue_as(
        &self,
        queue: &MessageQueue,
        correction: bool,
    ) -> Result<Option<u64>, OffsetError> {
        let Some(entry) = self.table.get(queue) else {
            return Ok(None);
        };
        if entry.persisted == Some(entry.offset) {
            return Ok(None);
        }
        let result = self.commit(queue, entry.offset, correction).await;
        self.counters.persist_outcome(&result);
        match result {
            Ok(()) => {
                self.table.mark_persisted(queue, entry.offset);
                Ok(Some(entry.offset))
            }
            Err(error) => {
                tracing::warn!(group = %self.group, ?queue, offset = entry.offset, %error, "offset commit failed");
                Err(error)
            }
        }
    }
}

impl OffsetStore for BrokerOffsetStore {
    fn update(&self, queue: &MessageQueue, offset: u64) {
        self.table.update(queue, offset);
    }

    fn correct<'a>(
        &'a self,
        queue: &'a MessageQueue,
        offset: u64,
    ) -> BoxFuture<'a, Result<(), OffsetError>> {
        Box::pin(async move {
            // Forget what was persisted: a correction is sent even when it repeats the last
            // acknowledged value, since the broker's offset may have moved out of the queue.
            let previous = self.table.get(queue);
            self.table.force(queue, offset);
            let result = self.persist_queue_as(queue, true).await.map(|_| ());
            if let Err(OffsetError::Rejected { .. }) = &result {
                // Refused: the broker's offset stands, so memory must not keep a value the
                // persister would later send as an ordinary commit.
                self.table.restore(queue, previous);
            }
            result
        })
    }

    fn persist<'a>(&'a self, queue: &'a MessageQueue) -> BoxFuture<'a, Result<(), OffsetError>> {
        Box::pin(async move { self.persist_queue(queue).await.map(|_| ()) })
    }

    fn persist_all(&self) -> BoxFuture<'_, Result<PersistReport, OffsetError>> {
        Box::pin(async move {
            let queues: Vec<MessageQueue> = self.table.lock().keys().cloned().collect();
            let mut report = PersistReport::default();
            for queue in queues {
                let outcome = self.persist_queue(&queue).await;
                report.record(queue, outcome);
            }
            Ok(report)
        })
    }

    fn read<'a>(
        &'a self,
        queue: &'a MessageQueue,
        mode: ReadMode,
    ) -> BoxFuture<'a, Result<Option<u64>, OffsetError>> {
        Box::pin(read_through(
            &self.table,
            &self.counters,
            queue,
            mode,
            self.query(queue),
        ))
    }

    fn remove(&self, queue: &MessageQueue) {
        self.table.lock().remove(queue);
    }

    fn reports_acknowledged(&self) -> bool {
        true
    }

    fn acknowledged(&self, queue: &MessageQueue) -> Option<u64> {
        self.table.acknowledged(queue)
    }

    fn stats(&self) -> OffsetStoreStats {
        self.counters.snapshot()
    }
}
