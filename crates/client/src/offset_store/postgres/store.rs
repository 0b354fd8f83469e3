//! [`PostgresOffsetStore`]: one consumer group's rows of the offset table, the owner
//! generation this consumer holds per queue, and an optional broker mirror for monitoring.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, OnceLock};

use ferromq_protocol::remoting::body::misc::MessageQueue;
use tokio_postgres::types::ToSql;
use tokio_postgres::GenericClient;

use super::setup::PostgresOffsets;
use crate::error::OffsetError;
use crate::offset_store::memory::{read_through, Counters, Table};
use crate::offset_store::{
    BoxFuture, BrokerOffsetStore, Claim, OffsetStore, OffsetStoreStats, PersistReport, ReadMode,
};

/// A PostgreSQL-backed [`OffsetStore`] for one consumer group that fences owners by
/// generation (see the module invariants of [`crate::offset_store::postgres`]).
///
/// # Durability
/// `Ok` from a commit means PostgreSQL committed the row (with the server's
/// `synchronous_commit` setting). The broker mirror ([`PostgresOffsetStore::with_mirror`])
/// is for monitoring only (`consumerProgress` lag); the database is the source of truth.
#[derive(Debug)]
pub struct PostgresOffsetStore {
    db: PostgresOffsets,
    group: String,
    owner: OnceLock<String>,
    table: Table,
    counters: Counters,
    generations: Mutex<BTreeMap<MessageQueue, u64>>,
    mirror: Option<BrokerOffsetStore>,
}

/// A row as read back: next offset, generation, last writer.
type Row = (Option<u64>, u64, String);

impl PostgresOffsetStore {
    /// A store for `group` in the checked table of `db`.
    pub fn new(db: PostgresOffsets, group: impl Into<String>) -> Self {
        PostgresOffsetStore {
            db,
            group: group.into(),
            owner: OnceLock::new(),
            table: Table::default(),
            counters: Counters::default(),
            generations: Mutex::new(BTreeMap::new()),
            mirror: None,
        }
    }

    /// Mirrors every committed offset to `mirror` (the brokers), written by
    /// [`PostgresOffsetStore::persist_mirror`].
    pub fn with_mirror(mut self, mirror: BrokerOffsetStore) -> Self {
        self.mirror = Some(mirror);
        self
    }

    /// Names this consumer in `updated_by` (its client id); set once, later calls are
    /// ignored. Until set, rows name the process id.
    pub fn set_owner(&self, owner: &str) {
        let _ = self.owner.set(owner.to_string());
    }

    /// The checked pool and table.
    pub fn database(&self) -> &PostgresOffsets {
        &self.db
    }

    /// The owner generation this consumer holds for `queue` (`None`: not claimed).
    pub fn generation(&self, queue: &MessageQueue) -> Option<u64> {
        self.generations().get(queue).copied()
    }

    fn generations(&self) -> MutexGuard<'_, BTreeMap<MessageQueue, u64>> {
        // Each critical section is one map operation.
        self.generations.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn owner(&self) -> String {
        self.owner
            .get()
            .cloned()
            .unwrap_or_else(|| format!("pid-{}", std::process::id()))
    }

    fn sql_key(&self) -> &'static str {
        "consumer_group = $1 AND topic = $2 AND broker_name = $3 AND queue_id = $4"
    }

    /// Runs `f` bounded by the statement timeout; a timeout is [`OffsetError::Database`].
    async fn bounded<T>(
        &self,
        what: String,
        f: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, OffsetError> {
        match tokio::time::timeout(self.db.inner.statement_timeout, f).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(source)) => Err(OffsetError::Database {
                what,
                source: Box::new(source),
            }),
            Err(elapsed) => Err(OffsetError::Database {
                what: format!(
                    "{what} (timed out after {:?})",
                    self.db.inner.statement_timeout
                ),
                source: Box::new(elapsed),
            }),
        }
    }

    async fn connection(&self, what: &str) -> Result<deadpool_postgres::Object, OffsetError> {
        self.db
            .inner
            .pool
            .get()
            .await
            .map_err(|source| OffsetError::Database {
                what: format!("get a connection to {what}"),
                source: Box::new(source),
            })
    }

    /// The row of `queue` (`None`: no row).
    async fn read_row(
        &self,
        client: &impl GenericClient,
        queue: &MessageQueue,
    ) -> Result<Option<Row>, OffsetError> {
        let sql = format!(
            "SELECT next_offset, generation, updated_by FROM {} WHERE {}",
            self.db.inner.table,
            self.sql_key()
        );
        let rows = self
            .bounded(
                format!("read the offset of {queue:?}"),
                client.query(
                    &sql,
                    &[
                        &self.group,
                        &queue.topic,
                        &queue.broker_name,
                        &queue.queue_id,
                    ],
                ),
            )
            .await?;
        rows.first().map(|row| decode_row(queue, row)).transpose()
    }

    /// Starts a new owner generation of `queue`, optionally moving its offset (a reset).
    async fn bump(&self, queue: &MessageQueue, reset: Option<u64>) -> Result<Claim, OffsetError> {
        let t = &self.db.inner.table;
        let (owner, offset_sql) = match reset {
            None => (self.owner(), "o.next_offset"),
            Some(_) => (format!("reset@{}", self.owner()), "EXCLUDED.next_offset"),
        };
        let sql = format!(
            "INSERT INTO {t} AS o (consumer_group, topic, broker_name, queue_id, next_offset, \
             generation, updated_at, updated_by) VALUES ($1, $2, $3, $4, $5, 1, now(), $6) \
             ON CONFLICT (consumer_group, topic, broker_name, queue_id) DO UPDATE SET \
             next_offset = {offset_sql}, generation = o.generation + 1, updated_at = now(), \
             updated_by = EXCLUDED.updated_by RETURNING next_offset, generation, updated_by"
        );
        let offset = reset.map(|o| wire(queue, o)).transpose()?;
        let client = self.connection("claim a queue").await?;
        let params: [&(dyn ToSql + Sync); 6] = [
            &self.group,
            &queue.topic,
            &queue.broker_name,
            &queue.queue_id,
            &offset,
            &owner,
        ];
        let row = self
            .bounded(format!("claim {queue:?}"), client.query_one(&sql, &params))
            .await?;
        let (offset, generation, _) = decode_row(queue, &row)?;
        self.generations().insert(queue.clone(), generation);
        self.table.remove(queue);
        if let Some(offset) = offset {
            self.table.seed(queue, offset);
        }
        Ok(Claim {
            offset,
            generation: Some(generation),
        })
    }

    /// Writes `next_offset` for `queue` under owner `generation` through `client` (a
    /// connection or the application's open transaction), provided the stored offset is at
    /// or below `stored_at_most`.
    ///
    /// # Errors
    /// [`OffsetError::Fenced`] when the generation moved or the stored offset is past
    /// `stored_at_most` (nothing written); [`OffsetError::Database`] when the statement
    /// failed.
    pub async fn commit_with(
        &self,
        client: &impl GenericClient,
        queue: &MessageQueue,
        generation: u64,
        stored_at_most: u64,
        next_offset: u64,
    ) -> Result<(), OffsetError> {
        let sql = format!(
            "UPDATE {} SET next_offset = $6, updated_at = now(), updated_by = $7 WHERE {} \
             AND generation = $5 AND (next_offset IS NULL OR next_offset <= $8)",
            self.db.inner.table,
            self.sql_key()
        );
        let generation_wire = i64::try_from(generation).map_err(|_| OffsetError::OutOfRange {
            queue: queue.clone(),
            value: generation.to_string(),
            why: "generation larger than bigint",
        })?;
        let params: [&(dyn ToSql + Sync); 8] = [
            &self.group,
            &queue.topic,
            &queue.broker_name,
            &queue.queue_id,
            &generation_wire,
            &wire(queue, next_offset)?,
            &self.owner(),
            &wire(queue, stored_at_most)?,
        ];
        let updated = self
            .bounded(format!("commit {queue:?}"), client.execute(&sql, &params))
            .await?;
        if updated == 1 {
            return Ok(());
        }
        let current = self.read_row(client, queue).await?;
        let (current_offset, current_generation, updated_by) =
            current.unwrap_or((None, 0, String::new()));
        Err(OffsetError::Fenced {
            queue: queue.clone(),
            generation,
            current_generation,
            current_offset,
            updated_by,
        })
    }

    /// Records in memory (and in the broker mirror) that `next_offset` of `queue` was
    /// committed by the caller's transaction.
    pub fn committed(&self, queue: &MessageQueue, next_offset: u64) {
        self.table.update(queue, next_offset);
        self.table.mark_persisted(queue, next_offset);
        self.counters.persist_outcome::<()>(&Ok(()));
        if let Some(mirror) = &self.mirror {
            mirror.update(queue, next_offset);
        }
    }

    /// Counts a failed transactional commit (the error goes back to the caller).
    pub fn commit_failed(&self, error: &OffsetError) {
        self.counters.persist_failed(error);
    }

    /// Writes the mirrored offsets to the brokers (`Ok(None)` without a mirror).
    ///
    /// # Errors
    /// The broker store's `persist_all` error; per-queue failures are in the report.
    pub async fn persist_mirror(&self) -> Result<Option<PersistReport>, OffsetError> {
        match &self.mirror {
            None => Ok(None),
            Some(mirror) => mirror.persist_all().await.map(Some),
        }
    }

    async fn persist_queue(
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
        let result = match self.generation(queue) {
            None => Err(OffsetError::NotClaimed {
                queue: queue.clone(),
            }),
            Some(generation) => {
                // A correction may move backwards (the queue was truncated); a plain commit
                // never does.
                let at_most = if correction {
                    i64::MAX as u64
                } else {
                    entry.offset
                };
                match self.connection("commit an offset").await {
                    Ok(client) => {
                        self.commit_with(&**client, queue, generation, at_most, entry.offset)
                            .await
                    }
                    Err(error) => Err(error),
                }
            }
        };
        self.counters.persist_outcome(&result);
        result.map(|()| {
            self.table.mark_persisted(queue, entry.offset);
            if let Some(mirror) = &self.mirror {
                mirror.update(queue, entry.offset);
            }
            Some(entry.offset)
        })
    }
}

/// `offset` as a bigint parameter.
fn wire(queue: &MessageQueue, offset: u64) -> Result<i64, OffsetError> {
    i64::try_from(offset).map_err(|_| OffsetError::OutOfRange {
        queue: queue.clone(),
        value: offset.to_string(),
        why: "larger than bigint",
    })
}

/// Decodes (next_offset, generation, updated_by), refusing negative values.
fn decode_row(queue: &MessageQueue, row: &tokio_postgres::Row) -> Result<Row, OffsetError> {
    let decode = |e: tokio_postgres::Error| OffsetError::Database {
        what: format!("decode the offset row of {queue:?}"),
        source: Box::new(e),
    };
    let offset: Option<i64> = row.try_get(0).map_err(decode)?;
    let generation: i64 = row.try_get(1).map_err(decode)?;
    let updated_by: String = row.try_get(2).map_err(decode)?;
    let non_negative = |value: i64, why: &'static str| {
        u64::try_from(value).map_err(|_| OffsetError::OutOfRange {
            queue: queue.clone(),
            value: value.to_string(),
            why,
        })
    };
    let offset = offset
        .map(|o| non_negative(o, "the table holds a negative offset"))
        .transpose()?;
    let generation = non_negative(generation, "the table holds a negative generation")?;
    Ok((offset, generation, updated_by))
}

impl OffsetStore for PostgresOffsetStore {
    fn update(&self, queue: &MessageQueue, offset: u64) {
        self.table.update(queue, offset);
    }

    fn correct<'a>(
        &'a self,
        queue: &'a MessageQueue,
        offset: u64,
    ) -> BoxFuture<'a, Result<(), OffsetError>> {
        Box::pin(async move {
            let previous = self.table.get(queue);
            self.table.force(queue, offset);
            let result = self.persist_queue(queue, true).await.map(|_| ());
            if result.is_err() {
                self.table.restore(queue, previous);
            }
            result
        })
    }

    fn persist<'a>(&'a self, queue: &'a MessageQueue) -> BoxFuture<'a, Result<(), OffsetError>> {
        Box::pin(async move { self.persist_queue(queue, false).await.map(|_| ()) })
    }

    fn persist_all(&self) -> BoxFuture<'_, Result<PersistReport, OffsetError>> {
        Box::pin(async move {
            let queues: Vec<MessageQueue> = self.table.lock().keys().cloned().collect();
            let mut report = PersistReport::default();
            for queue in queues {
                let outcome = self.persist_queue(&queue, false).await;
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
        Box::pin(async move {
            let from_store = async {
                let client = self.connection("read an offset").await?;
                Ok(self.read_row(&**client, queue).await?.and_then(|row| row.0))
            };
            read_through(&self.table, &self.counters, queue, mode, from_store).await
        })
    }

    fn remove(&self, queue: &MessageQueue) {
        self.table.remove(queue);
        self.generations().remove(queue);
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

    fn claim<'a>(&'a self, queue: &'a MessageQueue) -> BoxFuture<'a, Result<Claim, OffsetError>> {
        Box::pin(self.bump(queue, None))
    }

    fn reset_to<'a>(
        &'a self,
        queue: &'a MessageQueue,
        offset: u64,
    ) -> BoxFuture<'a, Result<Claim, OffsetError>> {
        Box::pin(self.bump(queue, Some(offset)))
    }

    fn fences_owners(&self) -> bool {
        true
    }
}
