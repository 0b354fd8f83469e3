//! ferromq's own response codes, for outcomes RocketMQ has no code for (reference §6: "pick
//! numbers unused above"). Each reply carrying one also has a remark saying why.

/// A commit below the stored offset of its queue, within the same reset generation
/// (invariant 3): a stale client would have rolled progress back.
pub const COMMIT_REGRESSION: i32 = 2101;
/// A commit made before a reset or correction of its group and topic.
pub const COMMIT_STALE_GENERATION: i32 = 2102;
/// A commit beyond the queue's max offset.
pub const COMMIT_PAST_MAX: i32 = 2103;
/// A commit the offset rules reject for another reason (an unknown generation, a malformed
/// reset).
pub const COMMIT_REJECTED: i32 = 2104;
/// The message could not be made durable in time; it may or may not be stored. RocketMQ's
/// FLUSH_DISK_TIMEOUT counts as "sent" for Java clients, so ferromq does not use it.
pub const NOT_DURABLE: i32 = 2110;
