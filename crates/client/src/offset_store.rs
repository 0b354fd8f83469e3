//! Consumer offset stores: the [`OffsetStore`] trait, [`BrokerOffsetStore`] (cluster mode)
//! and [`LocalFileOffsetStore`] (broadcasting), plus a background persister.
//!
//! Offsets are the **next** queue offset to consume, per (group, topic, queue).
//!
//! Invariants (DESIGN invariants 2, 3, 7; offset pitfalls C1–C4, C6, C7):
//! - `update` changes memory only; only `persist`, `persist_all` and `correct` reach the
//!   store, and each returns `Err` when the store did not acknowledge the value — a failure
//!   is never only a log line, and every failure is counted in [`OffsetStoreStats`];
//! - the broker store commits with request/response UPDATE_CONSUMER_OFFSET, never one-way;
//!   a stale refusal (regression, stale generation, past max) is
//!   [`OffsetError::Rejected`] with its own [`RejectReason`];
//! - `read` returns `Ok(None)` only when the store positively says it has no offset
//!   (QUERY_NOT_FOUND, or no entry in an intact local file); a timeout, a closed connection
//!   or any unexpected answer is `Err` — never `Ok(None)`, never a fallback to min offset;
//! - every queue known to the store is persisted by `persist_all`, registered or not (C1);
//! - the local file is replaced atomically (write temp, fsync, rename, fsync directory) and a
//!   correction is written before `correct` returns (C7);
//! - no public function takes or returns a negative offset.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ferromq_protocol::remoting::body::misc::MessageQueue;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::offset::{
    QueryConsumerOffsetRequestHeader, QueryConsumerOffsetResponseHeader,
    UpdateConsumerOffsetRequestHeader,
};
use ferromq_protocol::remoting::RemotingCommand;
use serde::{Deserialize, Serialize};

use crate::connections::ConnectionPool;
use crate::error::{codes, OffsetError, RejectReason};
use crate::route::RouteCache;

/// Ext field with which [`BrokerOffsetStore`] marks the commit sent by
/// [`OffsetStore::correct`] as a correction (ferromq extension, value `true`; see
/// [`ferromq_protocol::remoting::extensions::CORRECTION_EXT`]). A broker that refuses it
/// answers [`OffsetError::Rejected`].
pub use ferromq_protocol::remoting::extensions::CORRECTION_EXT;

/// A boxed, sendable future (the trait is object-safe so users can plug their own store).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where [`OffsetStore::read`] looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadMode {
    /// Memory if it has the queue, else the store.
    MemoryFirstThenStore,
    /// Memory only (`Ok(None)` when the queue is not in memory).
    Memory,
    /// The store only.
    Store,
}

/// Outcome of [`OffsetStore::persist_all`]: which queues were written and which failed.
#[derive(Debug, Default)]
#[must_use = "a persist report may list failed queues"]
pub struct PersistReport {
    /// Queues whose offset the store acknowledged in this call, with the offset.
    pub persisted: Vec<(MessageQueue, u64)>,
    /// Queues whose offset was already persisted (nothing to do).
    pub unchanged: usize,
    /// Queues whose persist failed, with the error.
    pub failed: Vec<(MessageQueue, OffsetError)>,
}

impl PersistReport {
    /// Adds the outcome of persisting `queue`: `Ok(Some(offset))` when the store acknowledged
    /// `offset`, `Ok(None)` when there was nothing to write, `Err` when the persist failed.
    pub fn record(&mut self, queue: MessageQueue, outcome: Result<Option<u64>, OffsetError>) {
        match outcome {
            Ok(Some(offset)) => self.persisted.push((queue, offset)),
            Ok(None) => self.unchanged += 1,
            Err(error) => self.failed.push((queue, error)),
        }
    }

    /// True when no queue failed.
    pub fn is_complete(&self) -> bool {
        self.failed.is_empty()
    }

    /// The persisted queues, or an error when any queue failed.
    ///
    /// # Errors
    /// [`OffsetError::PersistFailed`] naming the count and the first failure.
    pub fn into_result(self) -> Result<Vec<(MessageQueue, u64)>, OffsetError> {
        match self.failed.first() {
            None => Ok(self.persisted),
            Some((queue, error)) => Err(OffsetError::PersistFailed {
                failed: self.failed.len(),
                total: self.failed.len() + self.persisted.len(),
                first: format!("{queue:?}: {error}"),
            }),
        }
    }
}

/// Counters of an offset store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OffsetStoreStats {
    /// Persists the store acknowledged.
    pub persists_ok: u64,
    /// Persists that failed, whatever the reason (stale rejections included).
    pub persists_failed: u64,
    /// Persists the broker rejected as stale (regression, stale generation, past max).
    pub stale_rejections: u64,
    /// Reads from the store that failed.
    pub reads_failed: u64,
}

/// A consumer group's offset store. Implementations must keep the module invariants.
pub trait OffsetStore: Send + Sync + std::fmt::Debug {
    /// Sets the in-memory offset of `queue` (the next offset to consume). Nothing is written
    /// until [`OffsetStore::persist`] or [`OffsetStore::persist_all`].
    fn update(&self, queue: &MessageQueue, offset: u64);

    /// Sets the offset of `queue` and persists it at once (used after OFFSET_ILLEGAL, with
    /// the broker's suggested offset). [`BrokerOffsetStore`] sends it as a correction
    /// ([`CORRECTION_EXT`]), which a ferromq broker accepts only when the queue's state
    /// justifies it.
    ///
    /// # Errors
    /// As [`OffsetStore::persist`].
    fn correct<'a>(
        &'a self,
        queue: &'a MessageQueue,
        offset: u64,
    ) -> BoxFuture<'a, Result<(), OffsetError>>;

    /// Writes the in-memory offset of `queue` to the store and waits for its
    /// acknowledgement. `Ok(())` when there is nothing to write.
    ///
    /// # Errors
    /// Any [`OffsetError`]: the store is unreachable, refused the value, or failed to write.
    fn persist<'a>(&'a self, queue: &'a MessageQueue) -> BoxFuture<'a, Result<(), OffsetError>>;

    /// Persists every queue in memory whose offset changed since its last persist.
    ///
    /// # Errors
    /// Implementations that write all queues at once return their write error; per-queue
    /// failures are listed in the report.
    fn persist_all(&self) -> BoxFuture<'_, Result<PersistReport, OffsetError>>;

    /// The offset of `queue`: `Ok(None)` when the store has none.
    ///
    /// # Errors
    /// The store could not be read (unreachable, timeout, unexpected answer, corrupt file).
    fn read<'a>(
        &'a self,
        queue: &'a MessageQueue,
        mode: ReadMode,
    ) -> BoxFuture<'a, Result<Option<u64>, OffsetError>>;

    /// Forgets `queue` in memory (e.g. after a rebalance moved it away).
    fn remove(&self, queue: &MessageQueue);

    /// Counters.
    fn stats(&self) -> OffsetStoreStats;
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    offset: u64,
    persisted: Option<u64>,
}

#[derive(Debug, Default)]
struct Table(Mutex<BTreeMap<MessageQueue, Entry>>);

impl Table {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<MessageQueue, Entry>> {
        // Each operation under the lock is a single map update.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn update(&self, queue: &MessageQueue, offset: u64) {
        let mut t = self.lock();
        t.entry(queue.clone())
            .and_modify(|e| e.offset = offset)
            .or_insert(Entry {
                offset,
                persisted: None,
            });
    }

    fn get(&self, queue: &MessageQueue) -> Option<Entry> {
        self.lock().get(queue).copied()
    }

    fn mark_persisted(&self, queue: &MessageQueue, offset: u64) {
        if let Some(e) = self.lock().get_mut(queue) {
            e.persisted = Some(offset);
        }
    }

    /// Sets the offset and marks it unpersisted, whatever was persisted before.
    fn force(&self, queue: &MessageQueue, offset: u64) {
        self.lock().insert(
            queue.clone(),
            Entry {
                offset,
                persisted: None,
            },
        );
    }

    /// Puts back an entry saved with [`Table::get`] (`None`: removes the queue).
    fn restore(&self, queue: &MessageQueue, previous: Option<Entry>) {
        let mut t = self.lock();
        match previous {
            Some(entry) => t.insert(queue.clone(), entry),
            None => t.remove(queue),
        };
    }

    fn seed(&self, queue: &MessageQueue, offset: u64) {
        self.lock().entry(queue.clone()).or_insert(Entry {
            offset,
            persisted: Some(offset),
        });
    }
}

#[derive(Debug, Default)]
struct Counters {
    persists_ok: AtomicU64,
    persists_failed: AtomicU64,
    stale_rejections: AtomicU64,
    reads_failed: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> OffsetStoreStats {
        OffsetStoreStats {
            persists_ok: self.persists_ok.load(Ordering::Relaxed),
            persists_failed: self.persists_failed.load(Ordering::Relaxed),
            stale_rejections: self.stale_rejections.load(Ordering::Relaxed),
            reads_failed: self.reads_failed.load(Ordering::Relaxed),
        }
    }

    fn persist_outcome<T>(&self, result: &Result<T, OffsetError>) {
        match result {
            Ok(_) => self.persists_ok.fetch_add(1, Ordering::Relaxed),
            Err(e) => {
                if e.is_stale() {
                    self.stale_rejections.fetch_add(1, Ordering::Relaxed);
                }
                self.persists_failed.fetch_add(1, Ordering::Relaxed)
            }
        };
    }
}

/// The read rule both stores share: memory first unless `mode` is `Store`, `Ok(None)` from
/// memory only for `Memory`; an offset read from the store seeds memory; a failed store read is
/// counted and returned, never turned into "no offset".
async fn read_through(
    table: &Table,
    counters: &Counters,
    queue: &MessageQueue,
    mode: ReadMode,
    from_store: impl std::future::Future<Output = Result<Option<u64>, OffsetError>>,
) -> Result<Option<u64>, OffsetError> {
    if mode != ReadMode::Store {
        if let Some(entry) = table.get(queue) {
            return Ok(Some(entry.offset));
        }
        if mode == ReadMode::Memory {
            return Ok(None);
        }
    }
    match from_store.await {
        Ok(found) => {
            if let Some(offset) = found {
                table.seed(queue, offset);
            }
            Ok(found)
        }
        Err(error) => {
            counters.reads_failed.fetch_add(1, Ordering::Relaxed);
            Err(error)
        }
    }
}

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

    /// Sends one commit (with `correction`, marked as ferromq's justified correction, see
    /// [`CORRECTION_EXT`]) and maps the answer.
    async fn commit(
        &self,
        queue: &MessageQueue,
        offset: u64,
        correction: bool,
    ) -> Result<(), OffsetError> {
        let wire = i64::try_from(offset).map_err(|_| OffsetError::OutOfRange {
            queue: queue.clone(),
            value: offset.to_string(),
            why: "larger than the wire's i64",
        })?;
        let addr = self.broker_addr(queue).await?;
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

    async fn query(&self, queue: &MessageQueue) -> Result<Option<u64>, OffsetError> {
        let addr = self.broker_addr(queue).await?;
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

    fn stats(&self) -> OffsetStoreStats {
        self.counters.snapshot()
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct OffsetFile {
    group: String,
    offsets: Vec<FileEntry>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FileEntry {
    topic: String,
    broker_name: String,
    queue_id: i32,
    offset: u64,
}

/// Broadcasting-mode offsets in one JSON file per group under a directory.
#[derive(Debug)]
pub struct LocalFileOffsetStore {
    group: String,
    dir: PathBuf,
    path: PathBuf,
    table: Table,
    counters: Counters,
    /// Serialises file replacements so an older snapshot never overwrites a newer one.
    write_lock: tokio::sync::Mutex<()>,
}

impl LocalFileOffsetStore {
    /// Opens the store of `group` under `dir` (created if missing) and loads its file.
    ///
    /// # Errors
    /// [`OffsetError::Io`] when the directory or file cannot be read,
    /// [`OffsetError::Corrupt`] when the file cannot be parsed.
    pub fn open(dir: impl Into<PathBuf>, group: &str) -> Result<Self, OffsetError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|source| OffsetError::Io {
            path: dir.clone(),
            source,
        })?;
        let path = dir.join(format!("{}.offsets.json", file_stem(group)));
        let store = LocalFileOffsetStore {
            group: group.to_string(),
            dir,
            path,
            table: Table::default(),
            counters: Counters::default(),
            write_lock: tokio::sync::Mutex::new(()),
        };
        for (queue, offset) in read_file(&store.path)?.unwrap_or_default() {
            store.table.seed(&queue, offset);
        }
        Ok(store)
    }

    /// The file holding this group's offsets.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes every in-memory offset to the file; returns the snapshot written.
    async fn write_all(&self) -> Result<Vec<(MessageQueue, u64)>, OffsetError> {
        let _guard = self.write_lock.lock().await;
        let snapshot: Vec<(MessageQueue, u64)> = self
            .table
            .lock()
            .iter()
            .map(|(q, e)| (q.clone(), e.offset))
            .collect();
        let file = OffsetFile {
            group: self.group.clone(),
            offsets: snapshot
                .iter()
                .map(|(q, o)| FileEntry {
                    topic: q.topic.clone(),
                    broker_name: q.broker_name.clone(),
                    queue_id: q.queue_id,
                    offset: *o,
                })
                .collect(),
        };
        let bytes = serde_json::to_vec_pretty(&file).map_err(|e| OffsetError::Corrupt {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        let (dir, path) = (self.dir.clone(), self.path.clone());
        let result = tokio::task::spawn_blocking(move || write_atomically(&dir, &path, &bytes))
            .await
            .unwrap_or_else(|join| {
                Err(OffsetError::Io {
                    path: self.path.clone(),
                    source: std::io::Error::other(join.to_string()),
                })
            });
        self.counters.persist_outcome(&result);
        result?;
        for (queue, offset) in &snapshot {
            self.table.mark_persisted(queue, *offset);
        }
        Ok(snapshot)
    }
}

/// A file-name-safe form of a group name: `[A-Za-z0-9._-]` kept, anything else `%XX`.
fn file_stem(group: &str) -> String {
    let mut out = String::new();
    for b in group.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if out.starts_with('.') {
        out.replace_range(0..1, "%2E");
    }
    out
}

fn read_file(path: &Path) -> Result<Option<Vec<(MessageQueue, u64)>>, OffsetError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(OffsetError::Io {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let file: OffsetFile = serde_json::from_slice(&bytes).map_err(|e| OffsetError::Corrupt {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok(Some(
        file.offsets
            .into_iter()
            .map(|e| {
                (
                    MessageQueue {
                        topic: e.topic,
                        broker_name: e.broker_name,
                        queue_id: e.queue_id,
                    },
                    e.offset,
                )
            })
            .collect(),
    ))
}

/// Replaces `path` with `bytes`: write a temp file, fsync it, rename it over `path`, fsync
/// the directory.
fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), OffsetError> {
    use std::io::Write;
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| OffsetError::Io { path: p, source }
    };
    let tmp = path.with_extension("json.tmp");
    {
        let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(bytes).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
    }
    std::fs::rename(&tmp, path).map_err(io(path))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))?;
    Ok(())
}

impl OffsetStore for LocalFileOffsetStore {
    fn update(&self, queue: &MessageQueue, offset: u64) {
        self.table.update(queue, offset);
    }

    fn correct<'a>(
        &'a self,
        queue: &'a MessageQueue,
        offset: u64,
    ) -> BoxFuture<'a, Result<(), OffsetError>> {
        Box::pin(async move {
            self.table.update(queue, offset);
            self.write_all().await.map(|_| ())
        })
    }

    fn persist<'a>(&'a self, queue: &'a MessageQueue) -> BoxFuture<'a, Result<(), OffsetError>> {
        Box::pin(async move {
            match self.table.get(queue) {
                Some(e) if e.persisted != Some(e.offset) => self.write_all().await.map(|_| ()),
                _ => Ok(()),
            }
        })
    }

    fn persist_all(&self) -> BoxFuture<'_, Result<PersistReport, OffsetError>> {
        Box::pin(async move {
            let dirty = self
                .table
                .lock()
                .values()
                .filter(|e| e.persisted != Some(e.offset))
                .count();
            let total = self.table.lock().len();
            if dirty == 0 {
                return Ok(PersistReport {
                    unchanged: total,
                    ..PersistReport::default()
                });
            }
            let written = self.write_all().await?;
            Ok(PersistReport {
                persisted: written,
                unchanged: 0,
                failed: Vec::new(),
            })
        })
    }

    fn read<'a>(
        &'a self,
        queue: &'a MessageQueue,
        mode: ReadMode,
    ) -> BoxFuture<'a, Result<Option<u64>, OffsetError>> {
        let from_file = async move {
            let path = self.path.clone();
            let entries = tokio::task::spawn_blocking(move || read_file(&path))
                .await
                .unwrap_or_else(|join| {
                    Err(OffsetError::Io {
                        path: self.path.clone(),
                        source: std::io::Error::other(join.to_string()),
                    })
                })?;
            Ok(entries
                .unwrap_or_default()
                .into_iter()
                .find(|(q, _)| q == queue)
                .map(|(_, o)| o))
        };
        Box::pin(read_through(
            &self.table,
            &self.counters,
            queue,
            mode,
            from_file,
        ))
    }

    fn remove(&self, queue: &MessageQueue) {
        self.table.lock().remove(queue);
    }

    fn stats(&self) -> OffsetStoreStats {
        self.counters.snapshot()
    }
}

/// A background task persisting every offset of a store on an interval, backing off
/// (doubling up to `max_backoff`) while persists fail.
#[derive(Debug)]
pub struct Persister {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    store: Arc<dyn OffsetStore>,
}

impl Persister {
    /// Starts persisting `store` every `interval` on the current runtime.
    pub fn spawn(store: Arc<dyn OffsetStore>, interval: Duration, max_backoff: Duration) -> Self {
        let (stop, mut stop_rx) = tokio::sync::watch::channel(false);
        let task_store = store.clone();
        let interval = interval.max(Duration::from_millis(1));
        let task = tokio::spawn(async move {
            let mut wait = interval;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stop_rx.changed() => return,
                }
                let ok = match task_store.persist_all().await {
                    Ok(report) => {
                        for (queue, error) in &report.failed {
                            tracing::warn!(?queue, %error, "background offset persist failed; will retry");
                        }
                        report.is_complete()
                    }
                    Err(error) => {
                        tracing::warn!(%error, "background offset persist failed; will retry");
                        false
                    }
                };
                wait = if ok {
                    interval
                } else {
                    (wait * 2).min(max_backoff.max(interval))
                };
            }
        });
        Persister { stop, task, store }
    }

    /// Stops the task and persists every offset one last time.
    ///
    /// # Errors
    /// The final `persist_all`'s error; per-queue failures are in the report.
    pub async fn shutdown(self) -> Result<PersistReport, OffsetError> {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        self.store.persist_all().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(id: i32) -> MessageQueue {
        MessageQueue {
            topic: "T".into(),
            broker_name: "b".into(),
            queue_id: id,
        }
    }

    #[test]
    fn file_stems_are_safe() {
        assert_eq!(file_stem("G_1-a.b"), "G_1-a.b");
        assert_eq!(file_stem("a/b"), "a%2Fb");
        assert_eq!(file_stem(".."), "%2E.");
    }

    #[tokio::test]
    async fn local_store_round_trips_and_reports_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalFileOffsetStore::open(dir.path(), "G").unwrap();
        assert_eq!(store.read(&q(0), ReadMode::Store).await.unwrap(), None);
        store.update(&q(0), 5);
        store.update(&q(1), 7);
        let report = store.persist_all().await.unwrap();
        assert_eq!(report.persisted.len(), 2);
        let again = LocalFileOffsetStore::open(dir.path(), "G").unwrap();
        assert_eq!(again.read(&q(1), ReadMode::Memory).await.unwrap(), Some(7));
        std::fs::write(store.path(), b"{not json").unwrap();
        assert!(matches!(
            store.read(&q(0), ReadMode::Store).await,
            Err(OffsetError::Corrupt { .. })
        ));
        assert!(matches!(
            LocalFileOffsetStore::open(dir.path(), "G"),
            Err(OffsetError::Corrupt { .. })
        ));
        assert_eq!(store.stats().reads_failed, 1);
    }
}
