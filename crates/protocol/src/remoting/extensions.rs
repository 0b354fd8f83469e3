//! ferromq's extensions of the RocketMQ remoting protocol, defined once for the broker, the
//! client, the CLI and the chaos harness.
//!
//! RocketMQ has no code for some outcomes ferromq reports (a refused commit, a damaged
//! record, a write not made durable), nor for its admin requests (offset history, quarantine,
//! skipping a damaged record). Their numbers are picked unused by RocketMQ (reference §6:
//! "pick numbers unused above"); a RocketMQ broker never sends them and ignores the ext
//! fields. Each reply carrying one of the response codes also has a remark saying why.

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
/// The record at the pulled queue offset is damaged and quarantined (the remark names its
/// queue and CommitLog offsets). The pull's good records before it were returned by earlier
/// replies; moving the group past it is an explicit admin action
/// (`ferromq admin skipDamagedMessage`).
pub const MESSAGE_DAMAGED: i32 = 2105;
/// The message could not be made durable in time; it may or may not be stored. RocketMQ's
/// FLUSH_DISK_TIMEOUT counts as "sent" for Java clients, so ferromq does not use it.
pub const NOT_DURABLE: i32 = 2110;
/// The broker is not the master of its group (a slave, or a master demoted by failover):
/// it accepts no write — send, commit, reset, correction, topic or group change. The remark
/// names the broker, its id and role. RocketMQ has no such code (a RocketMQ slave stores a
/// commit and loses it at the next sync: offset pitfall R3).
pub const NOT_MASTER: i32 = 2111;

/// ferromq's own **request** code (not a RocketMQ one; chosen far above RocketMQ's range):
/// OFFSET_HISTORY. Ext fields `group`, `topic` (required), `queueId`, `since` (store time,
/// ms; optional). The reply body is a JSON array of the offset changes of (group, topic[,
/// queue]) still in the log, oldest first: `{"time","queueId","offset","kind","clientId",
/// "generation","physOffset"}`.
pub const OFFSET_HISTORY: i32 = 60001;

/// ferromq's own request code: QUARANTINE_LIST. No ext fields. The reply body is a JSON
/// object `{"total","notListed","ranges":[{"physOffset","len","kind","reason"}]}`: the
/// CommitLog ranges the store keeps but does not serve (damaged ones with valid records
/// after them, records the dispatcher could not index).
pub const QUARANTINE_LIST: i32 = 60002;

/// ferromq's own request code: SKIP_DAMAGED_MESSAGE. Ext fields `group`, `topic`,
/// `queueId`, `queueOffset` (all required). Moves the group past the record at that queue
/// offset, only if that record is damaged: a reset of the one queue to `queueOffset + 1`,
/// recorded in the log like any admin reset (client id `admin-skip-damaged`), with the same
/// fences and consumer notification. The reply is a reset's (`ResetOffsetBody`, ext
/// [`RESET_GENERATION_EXT`], `physOffset` of the damaged record).
pub const SKIP_DAMAGED_MESSAGE: i32 = 60003;

/// Ext field of UPDATE_CONSUMER_OFFSET marking the commit as a correction after
/// OFFSET_ILLEGAL (value `true`). A ferromq broker records it as a correction with a new
/// reset generation, and fences stale commits of the old generation, only when the queue's
/// state justifies it (the stored offset is outside the queue's [min, max] and the new one
/// inside); otherwise it refuses it. Other RocketMQ brokers ignore unknown ext fields and
/// treat it as a plain commit.
pub const CORRECTION_EXT: &str = "ferromqCorrection";

/// Ext field of QUERY_CONSUMER_OFFSET asking a replica for its own view (value `true`): a
/// diagnostic read for tools and tests. In controller mode a ferromq broker answers offset
/// queries only while it is the master holding its lease; with this field a slave answers
/// from its replicated view, which may trail the master's. Clients never set it.
pub const REPLICA_READ_EXT: &str = "ferromqReplicaRead";

/// Ext field of a correction's SUCCESS reply: the generation the correction established.
pub const GENERATION_EXT: &str = "ferromqGeneration";

/// Ext field of the reply to a reset (INVOKE_BROKER_TO_RESET_OFFSET, SKIP_DAMAGED_MESSAGE)
/// or to a clone of a group's offsets: the reset generation it established.
pub const RESET_GENERATION_EXT: &str = "generation";

/// Ext field of a reset's reply: the offsets the queues had before the reset, as text
/// (`queueId:offset` pairs joined by `,`; `-1` for a queue that had none).
pub const RESET_OLD_OFFSETS_EXT: &str = "oldOffsets";

/// Ext field of REGISTER_BROKER: the master epoch of a broker in controller mode (decimal,
/// sent only when above 0). A ferromq name server lets a master registration with a higher
/// epoch than the group's live master replace it (failover), and refuses one with a lower
/// epoch (a deposed master). RocketMQ name servers ignore unknown ext fields.
pub const MASTER_EPOCH_EXT: &str = "ferromqMasterEpoch";

/// Ext field of a VIEW_MESSAGE_BY_ID reply whose record is a transaction's half message: the
/// half's state as the master sees it (`pending, N check-backs`, `committed`, `rolled back`,
/// `discarded`, `rolled back or discarded`, or why it cannot say).
pub const TRANSACTION_STATE_EXT: &str = "ferromqTransactionState";
