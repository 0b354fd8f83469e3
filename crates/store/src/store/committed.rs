//! Committed tail chunks waiting for the dispatcher, so it can build derived state from the
//! bytes it already has in memory instead of reading them back from the files.
//!
//! Invariants:
//! 1. Chunks are queued in log order, and only after they are in the files.
//! 2. The queue holds at most `COMMITTED_BYTES_MAX` bytes; past that, chunks are dropped and
//!    the dispatcher reads those records from the files instead. Dropping never loses data.
//! 3. A chunk is used only if it starts exactly at the dispatched position; chunks below it
//!    are stale (already dispatched, or cut by a truncation) and are recycled.

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::commitlog::writer::TailChunk;

/// Bytes of committed chunks kept for the dispatcher.
pub(crate) const COMMITTED_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Empty buffers kept for reuse by the appender.
const SPARE_BUFFERS_MAX: usize = 4;

#[derive(Debug, Default)]
pub(crate) struct CommittedChunks {
    queue: Mutex<(VecDeque<TailChunk>, usize)>,
    spare: Mutex<Vec<Vec<u8>>>,
}

impl CommittedChunks {
    /// Queues chunks just written to the files.
    pub(crate) fn push(&self, chunks: Vec<TailChunk>) {
        let mut dropped = Vec::new();
        {
            let mut queue = self.queue.lock().expect("committed lock");
            for chunk in chunks {
                if chunk.bytes.is_empty() || queue.1 + chunk.bytes.len() > COMMITTED_BYTES_MAX {
                    dropped.push(chunk.bytes);
                } else {
                    queue.1 += chunk.bytes.len();
                    queue.0.push_back(chunk);
                }
            }
        }
        for buffer in dropped {
            self.recycle(buffer);
        }
    }

    /// The oldest chunk that does not end at or below `dispatched`, removed from the queue.
    pub(crate) fn next_after(&self, dispatched: u64, segment_size: u64) -> Option<TailChunk> {
        let mut stale = Vec::new();
        let found = {
            let mut queue = self.queue.lock().expect("committed lock");
            loop {
                let Some(front) = queue.0.pop_front() else {
                    break None;
                };
                queue.1 -= front.bytes.len();
                if front.end(segment_size) <= dispatched || front.start < dispatched {
                    stale.push(front.bytes);
                    continue;
                }
                break Some(front);
            }
        };
        for buffer in stale {
            self.recycle(buffer);
        }
        found
    }

    /// Puts back a chunk the dispatcher could not use yet.
    pub(crate) fn put_back(&self, chunk: TailChunk) {
        let mut queue = self.queue.lock().expect("committed lock");
        queue.1 += chunk.bytes.len();
        queue.0.push_front(chunk);
    }

    /// Drops every queued chunk (after a truncation).
    pub(crate) fn clear(&self) {
        let mut queue = self.queue.lock().expect("committed lock");
        queue.0.clear();
        queue.1 = 0;
    }

    /// Returns an emptied buffer to the pool.
    pub(crate) fn recycle(&self, mut buffer: Vec<u8>) {
        buffer.clear();
        let mut spare = self.spare.lock().expect("spare lock");
        if spare.len() < SPARE_BUFFERS_MAX && buffer.capacity() > 0 {
            spare.push(buffer);
        }
    }

    /// Takes the pool of spare buffers (the appender draws from it).
    pub(crate) fn take_spare(&self) -> Vec<Vec<u8>> {
        std::mem::take(&mut *self.spare.lock().expect("spare lock"))
    }
}
