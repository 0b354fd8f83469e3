//! Reading a broker system queue (queue 0 of a topic only the broker writes) from an offset to
//! its end, as the transaction table and the pop table do when they are rebuilt from the log.
//!
//! Reads go in batches of [`READ_BATCH_MAX`] records on the blocking pool; a damaged
//! (quarantined) record is logged and skipped, every other read failure is the caller's error,
//! so a table is never built from a partial read.

use ferromq_store::{ReadError, StoredMessage, TagFilter};

use crate::context::BrokerContext;

/// Records read per batch.
pub const READ_BATCH_MAX: usize = 256;

/// Why a system queue could not be read to its end.
#[derive(Debug, thiserror::Error)]
pub enum QueueReadError {
    /// The store could not read the queue.
    #[error("reading {topic}: {source}")]
    Read {
        /// The queue's topic.
        topic: &'static str,
        /// The store's error.
        #[source]
        source: ReadError,
    },
    /// A blocking read did not complete.
    #[error("a read of {topic} did not complete: {source}")]
    Join {
        /// The queue's topic.
        topic: &'static str,
        /// The task's failure.
        #[source]
        source: tokio::task::JoinError,
    },
}

/// Reads `topic` queue 0 from `from` to its end, calling `each` per record; returns the end.
pub async fn read_queue(
    ctx: &BrokerContext,
    topic: &'static str,
    from: u64,
    mut each: impl FnMut(&StoredMessage),
) -> Result<u64, QueueReadError> {
    let mut next = from;
    loop {
        let store = ctx.store.clone();
        let read = tokio::task::spawn_blocking(move || {
            store.get_messages(topic, 0, next, READ_BATCH_MAX, usize::MAX, &TagFilter::All)
        })
        .await
        .map_err(|source| QueueReadError::Join { topic, source })?;
        let result = match read {
            Ok(result) => result,
            Err(ReadError::Damaged {
                queue_offset,
                reason,
                ..
            }) if queue_offset >= next => {
                tracing::error!(topic, queue_offset, %reason,
                    "damaged system record skipped by a rebuild");
                next = queue_offset + 1;
                continue;
            }
            Err(source) => return Err(QueueReadError::Read { topic, source }),
        };
        let before = next;
        next = next.max(result.min_offset);
        if result.messages.is_empty() {
            // Below the queue's start (retention removed old records): read on from there.
            if next > before && next < result.max_offset {
                continue;
            }
            return Ok(next);
        }
        for message in &result.messages {
            each(message);
            next = message.queue_offset + 1;
        }
    }
}
