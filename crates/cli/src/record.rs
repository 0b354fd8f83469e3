//! Building the records the CLI appends (demo and benchmark messages).

use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use ferromq_protocol::DraftRecord;

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

/// Wall-clock milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
