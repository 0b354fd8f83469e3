//! Requests the brokers push to the consumer: NOTIFY_CONSUMER_IDS_CHANGED (rebalance now) and
//! RESET_CONSUMER_CLIENT_OFFSET (follow an administrator's reset).

use std::sync::Arc;

use ferromq_protocol::remoting::body::misc::MessageQueue;
use ferromq_protocol::remoting::codes::request;
use ferromq_protocol::remoting::RemotingCommand;

use super::fetch::spawn_fetch;
use super::state::{bump, Shared};

/// Server-initiated requests of the consumer's broker connections.
pub(super) fn on_server_request(shared: &Arc<Shared>, cmd: &RemotingCommand) -> bool {
    match cmd.code {
        request::NOTIFY_CONSUMER_IDS_CHANGED => {
            shared.rebalance_now.notify_one();
            true
        }
        request::RESET_CONSUMER_CLIENT_OFFSET => match crate::reset_push::parse(cmd) {
            Ok(reset) if reset.group == shared.config.group => {
                apply_reset(shared, &reset.offsets);
                true
            }
            Ok(reset) => {
                tracing::warn!(group = %reset.group, "offset reset for another group ignored");
                true
            }
            Err(error) => {
                tracing::warn!(%error, "malformed offset reset push ignored");
                false
            }
        },
        _ => false,
    }
}

/// Moves every assigned queue named by a reset to its reset offset: the buffer and any pull
/// in flight are discarded (new epoch), and the position a commit writes is the reset offset.
pub(super) fn apply_reset(shared: &Arc<Shared>, offsets: &[(MessageQueue, u64)]) {
    let store = shared.pull.offset_store();
    let mut state = shared.lock();
    for (queue, offset) in offsets {
        let Some(q) = state.queues.get_mut(queue) else {
            continue;
        };
        tracing::info!(?queue, offset, "offset reset by the broker; following it");
        q.epoch = shared.next_epoch();
        q.buffer.clear();
        if store.fences_owners() {
            // The store is the source of truth: the fetch task writes the reset to it under
            // a new owner generation before the queue resumes, so no batch polled before the
            // reset can be committed over it.
            q.fetch_offset = None;
            q.consumed = None;
            q.owner_generation = None;
            q.pending_reset = Some(*offset);
        } else {
            q.fetch_offset = Some(*offset);
            q.consumed = Some(*offset);
            // Forget what was persisted: the broker's offset moved, so the next commit must
            // be sent even if it repeats a value acknowledged before the reset.
            store.remove(queue);
            store.update(queue, *offset);
        }
        if let Some(task) = q.task.take() {
            task.abort();
        }
        q.task = Some(spawn_fetch(shared, queue.clone(), q.epoch));
        bump(&shared.counters.resets_applied);
    }
}
