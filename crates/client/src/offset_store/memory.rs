//! The in-memory side both offset stores share: the table of (queue → offset, last persisted
//! offset), the counters behind [`OffsetStoreStats`], and the read-through rule of
//! [`OffsetStore::read`](super::OffsetStore::read).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use ferromq_protocol::remoting::body::misc::MessageQueue;

use super::{OffsetStoreStats, ReadMode};
use crate::error::OffsetError;

#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    pub(super) offset: u64,
    pub(super) persisted: Option<u64>,
}

#[derive(Debug, Default)]
pub(super) struct Table(Mutex<BTreeMap<MessageQueue, Entry>>);

impl Table {
    pub(super) fn lock(&self) -> MutexGuard<'_, BTreeMap<MessageQueue, Entry>> {
        // Each operation under the lock is a single map update.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn update(&self, queue: &MessageQueue, offset: u64) {
        let mut t = self.lock();
        t.entry(queue.clone())
            .and_modify(|e| e.offset = offset)
            .or_insert(Entry {
                offset,
                persisted: None,
            });
    }

    pub(super) fn get(&self, queue: &MessageQueue) -> Option<Entry> {
        self.lock().get(queue).copied()
    }

    /// The last persisted offset of `queue` ([`OffsetStore::acknowledged`](super::OffsetStore::acknowledged)).
    pub(super) fn acknowledged(&self, queue: &MessageQueue) -> Option<u64> {
        self.lock().get(queue).and_then(|e| e.persisted)
    }

    pub(super) fn mark_persisted(&self, queue: &MessageQueue, offset: u64) {
        if let Some(e) = self.lock().get_mut(queue) {
            e.persisted = Some(offset);
        }
    }

    /// Sets the offset and marks it unpersisted, whatever was persisted before.
    pub(super) fn force(&self, queue: &MessageQueue, offset: u64) {
        self.lock().insert(
            queue.clone(),
            Entry {
                offset,
                persisted: None,
            },
        );
    }

    /// Puts back an entry saved with [`Table::get`] (`None`: removes the queue).
    pub(super) fn restore(&self, queue: &MessageQueue, previous: Option<Entry>) {
        let mut t = self.lock();
        match previous {
            Some(entry) => t.insert(queue.clone(), entry),
            None => t.remove(queue),
        };
    }

    /// Forgets `queue` (the PostgreSQL store drops a queue it no longer owns).
    #[cfg(feature = "postgres")]
    pub(super) fn remove(&self, queue: &MessageQueue) {
        self.lock().remove(queue);
    }

    pub(super) fn seed(&self, queue: &MessageQueue, offset: u64) {
        self.lock().entry(queue.clone()).or_insert(Entry {
            offset,
            persisted: Some(offset),
        });
    }
}

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) persists_ok: AtomicU64,
    pub(super) persists_failed: AtomicU64,
    pub(super) stale_rejections: AtomicU64,
    pub(super) reads_failed: AtomicU64,
}

impl Counters {
    pub(super) fn snapshot(&self) -> OffsetStoreStats {
        OffsetStoreStats {
            persists_ok: self.persists_ok.load(Ordering::Relaxed),
            persists_failed: self.persists_failed.load(Ordering::Relaxed),
            stale_rejections: self.stale_rejections.load(Ordering::Relaxed),
            reads_failed: self.reads_failed.load(Ordering::Relaxed),
        }
    }

    pub(super) fn persist_outcome<T>(&self, result: &Result<T, OffsetError>) {
        match result {
            Ok(_) => self.persists_ok.fetch_add(1, Ordering::Relaxed),
            Err(e) => self.persist_failed(e),
        };
    }

    /// Counts a failed persist (and a stale rejection when `error` is stale).
    pub(super) fn persist_failed(&self, error: &OffsetError) -> u64 {
        if error.is_stale() {
            self.stale_rejections.fetch_add(1, Ordering::Relaxed);
        }
        self.persists_failed.fetch_add(1, Ordering::Relaxed)
    }
}

/// The read rule both stores share: memory first unless `mode` is `Store`, `Ok(None)` from
/// memory only for `Memory`; an offset read from the store seeds memory; a failed store read is
/// counted and returned, never turned into "no offset".
pub(super) async fn read_through(
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
