//! Building the records the CLI appends (demo and benchmark messages).

use ferromq_protocol::DraftRecord;
use ferromq_store::{Clock, SystemClock};
use std::net::SocketAddr;

/// A message without properties, born now on the store's host.
pub fn draft<'a>(
    topic: &'a str,
    queue_id: u32,
    body: &'a [u8],
    host: SocketAddr,
) -> DraftRecord<'a> {
    DraftRecord {
        topic,
        queue_id,
        flag: 0,
        sys_flag: 0,
        born_timestamp_ms: now_ms(),
        born_host: host,
        store_host: host,
        reconsume_times: 0,
        prepared_tx_offset: 0,
        body,
        properties: &[],
    }
}

/// Wall-clock milliseconds since the Unix epoch (0 if the clock is before it): the store's
/// [`SystemClock`], so the CLI and the broker read time the same way.
pub fn now_ms() -> i64 {
    SystemClock.now_ms()
}
