//! QUERY_MESSAGE (12): messages of a topic by key, through the store's key index.
//!
//! - A `KEYS` word by default; the message's `UNIQ_KEY` when the ext field
//!   `_UNIQUE_KEY_QUERY` is `"true"` (then at most [`UNIQUE_KEY_QUERY_MAX`] messages, Java's
//!   `defaultQueryMaxNum`, whatever `maxNum` says).
//! - Only messages stored within `[beginTimestamp, endTimestamp]` are returned, newest
//!   first, at most `maxNum` (capped at [`QUERY_MAX`]).
//! - The reply body is the stored records concatenated, exactly as a pull returns them; the
//!   header carries `indexLastUpdatePhyoffset` and `indexLastUpdateTimestamp`. Nothing found
//!   is QUERY_NOT_FOUND (22), as in RocketMQ.

use bytes::BytesMut;
use ferromq_protocol::remoting::codes::response;
use ferromq_protocol::remoting::headers::client::{
    QueryMessageRequestHeader, QueryMessageResponseHeader, UNIQUE_KEY_QUERY_FLAG,
};
use ferromq_protocol::remoting::RemotingCommand;
use ferromq_protocol::RecordView;

use super::{bad_header, success};
use crate::context::BrokerContext;

/// Most messages one query returns.
pub const QUERY_MAX: usize = 1024;
/// Messages a unique-key query returns at most (Java's `defaultQueryMaxNum`).
pub const UNIQUE_KEY_QUERY_MAX: usize = 32;
/// Candidates read at most to honour a time range (the index is searched newest first).
const TIME_RANGE_SCAN_MAX: usize = 4 * QUERY_MAX;
/// Longest a query waits for the dispatcher to index acknowledged messages.
const CATCH_UP_MAX: std::time::Duration = std::time::Duration::from_millis(500);

pub(super) async fn handle(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let header = match command.decode_header::<QueryMessageRequestHeader>() {
        Ok(header) => header,
        Err(error) => return bad_header(command, error),
    };
    if header.max_num <= 0 {
        return command.reply(
            response::INVALID_PARAMETER,
            Some(format!("maxNum {} must be positive", header.max_num)),
        );
    }
    if header.begin_timestamp > header.end_timestamp {
        return command.reply(
            response::INVALID_PARAMETER,
            Some(format!(
                "beginTimestamp {} is after endTimestamp {}",
                header.begin_timestamp, header.end_timestamp
            )),
        );
    }
    if ctx.topics.get(&header.topic).is_none() {
        return command.reply(
            response::TOPIC_NOT_EXIST,
            Some(format!("topic {} does not exist", header.topic)),
        );
    }
    let unique = command
        .ext_fields
        .get(UNIQUE_KEY_QUERY_FLAG)
        .is_some_and(|v| v == "true");
    let max_count = if unique {
        UNIQUE_KEY_QUERY_MAX
    } else {
        (header.max_num as usize).min(QUERY_MAX)
    };
    ctx.store.dispatch_caught_up(CATCH_UP_MAX).await;
    let store = ctx.store.clone();
    let (topic, key) = (header.topic.clone(), header.key.clone());
    // Reading the index and the log is blocking I/O; keep it off the async workers.
    let found = tokio::task::spawn_blocking(move || {
        if unique {
            store.messages_by_unique_key(&topic, &key, TIME_RANGE_SCAN_MAX)
        } else {
            store.messages_by_key(&topic, &key, TIME_RANGE_SCAN_MAX)
        }
    })
    .await;
    let candidates = match found {
        Ok(Ok(candidates)) => candidates,
        Ok(Err(error)) => {
            return command.reply(
                response::SYSTEM_ERROR,
                Some(format!("cannot read the key index: {error}")),
            )
        }
        Err(join) => {
            return command.reply(
                response::SYSTEM_ERROR,
                Some(format!("key query task failed: {join}")),
            )
        }
    };
    let mut body = BytesMut::new();
    let (mut count, mut last_phys, mut last_time) = (0usize, 0i64, 0i64);
    for record in &candidates {
        let Ok(view) = RecordView::parse(record) else {
            continue;
        };
        let stored_at = view.store_timestamp_ms;
        if stored_at < header.begin_timestamp || stored_at > header.end_timestamp {
            continue;
        }
        last_phys = last_phys.max(view.phys_offset as i64);
        last_time = last_time.max(stored_at);
        body.extend_from_slice(record);
        count += 1;
        if count >= max_count {
            break;
        }
    }
    if count == 0 {
        return command.reply(
            response::QUERY_NOT_FOUND,
            Some(format!(
                "no message of topic {} with {} {} in the time range",
                header.topic,
                if unique { "unique key" } else { "key" },
                header.key
            )),
        );
    }
    success(command)
        .with_header(&QueryMessageResponseHeader {
            index_last_update_phyoffset: last_phys,
            index_last_update_timestamp: last_time,
        })
        .with_body(body.freeze())
}
