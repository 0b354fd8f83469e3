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
    DraftRecord::plain(topic, queue_id, body, &[], host, now_ms())
}

/// Wall-clock milliseconds since the Unix epoch (0 if the clock is before it): the store's
/// [`SystemClock`], so the CLI and the broker read time the same way.
pub fn now_ms() -> i64 {
    SystemClock.now_ms()
}
