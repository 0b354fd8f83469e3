//! The core's typed errors. They say what went wrong in the broker's terms and keep their
//! cause; no wire code appears here. Each wire adapter maps them to its protocol's codes in
//! one table (`remoting::code_map` for the remoting protocol).

use ferromq_protocol::names::NameError;
use ferromq_store::offsets::CommitRejection;
use ferromq_store::{AppendError, DurabilityError, ReadError, StoreError};
use thiserror::Error;

/// Why a write — a message, a batch, an offset commit, a reset, a correction, the delay
/// scheduler's progress — was not acknowledged. Every write ends in [`super::ack`], so every
/// kind of write fails in these same ways.
#[derive(Debug, Error)]
pub enum WriteError {
    /// The record was handed to the store but is not known to be durable (an fsync or write
    /// failed, or the flush timed out): it may or may not be stored. Clients must retry.
    #[error("the {what} may not be durable: {cause}")]
    NotDurable {
        /// What was written ("message", "commit", "reset", ...).
        what: &'static str,
        /// The store's answer, with the I/O error text it carries.
        #[source]
        cause: DurabilityError,
    },
    /// The CommitLog write itself failed (rolled back): nothing was stored, and the failure
    /// has poisoned the store.
    #[error("the {what} was not written: {cause}")]
    WriteFailed {
        /// What was written.
        what: &'static str,
        /// The append error, with its file error.
        #[source]
        cause: AppendError,
    },
    /// An earlier CommitLog write or fsync failed: the store refuses every write until the
    /// broker restarts and recovers (reads keep working).
    #[error("the store is poisoned by an earlier I/O failure ({reason}) and refuses writes; restart the broker to recover")]
    Poisoned {
        /// The failure that poisoned the store.
        reason: String,
    },
    /// The store is shutting down.
    #[error("the store is closed")]
    Closed,
    /// Dispatch has kept failing: writes wait until it recovers.
    #[error("{0}")]
    DispatchStalled(String),
    /// The record is invalid or too large (a client error).
    #[error("{0}")]
    Invalid(#[source] AppendError),
    /// The record names a topic only the broker writes.
    #[error("{0}")]
    Reserved(#[source] AppendError),
    /// This broker is not the master of its group now, so it accepts no write: a commit or
    /// a message landing on a slave would be lost or overwritten (R3).
    #[error("not master: broker {broker} (brokerId {broker_id}) is a {role} and accepts no {what}; send it to the master of {broker}")]
    NotMaster {
        /// What was written.
        what: &'static str,
        /// `brokerName`.
        broker: String,
        /// `brokerId`.
        broker_id: u64,
        /// The current role.
        role: &'static str,
    },
    /// Controller mode: this master's lease from the controller ran out (it cannot reach a
    /// controller quorum), so it accepts no write: a new master may be elected once the
    /// lease is over, and it would not have this write.
    #[error("not master: broker {broker} (brokerId {broker_id}) holds no controller lease now ({silence}) and accepts no {what}; a new master may be elected")]
    LeaseExpired {
        /// What was written.
        what: &'static str,
        /// `brokerName`.
        broker: String,
        /// The broker's id.
        broker_id: u64,
        /// How long since the last heartbeat a controller quorum confirmed was sent.
        silence: ControllerSilence,
    },
    /// SYNC_MASTER: the in-sync set has fewer members than `minInSyncReplicas`, so nothing
    /// can be acknowledged (RocketMQ's IN_SYNC_REPLICAS_NOT_ENOUGH).
    #[error("in-sync replicas not enough: {members} member(s) in sync, the master included, minInSyncReplicas is {needed}; the {what} was not acknowledged")]
    InSyncReplicasNotEnough {
        /// What was written.
        what: &'static str,
        /// Members now.
        members: usize,
        /// `minInSyncReplicas`.
        needed: usize,
    },
    /// SYNC_MASTER: the write was appended but the in-sync replicas did not all hold it — in
    /// time, or before the set fell below `minInSyncReplicas`. It may or may not be stored
    /// (it becomes visible if the replicas catch up later). Clients must retry.
    #[error("the {what} was not replicated to every in-sync replica ({reason}): it may or may not be stored")]
    NotReplicated {
        /// What was written.
        what: &'static str,
        /// Why the wait ended.
        reason: String,
    },
    /// The store failed in a way a write does not normally fail (a file or derived-state
    /// error): the record may or may not be stored.
    #[error("the {what} may not be durable: {cause}")]
    Unexpected {
        /// What was written.
        what: &'static str,
        /// The store's error.
        #[source]
        cause: StoreError,
    },
}

/// How long a master has gone without a heartbeat a controller quorum confirmed, as the
/// lease refusal's remark says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControllerSilence {
    /// No heartbeat of this broker as master has been confirmed since it started (a fresh
    /// promotion waits for its first confirmation).
    NeverConfirmed,
    /// The last confirmed heartbeat was sent this many milliseconds ago.
    For {
        /// Milliseconds since the confirmed heartbeat was sent.
        millis: u64,
    },
}

impl std::fmt::Display for ControllerSilence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NeverConfirmed => f.write_str(
                "no controller quorum has confirmed a heartbeat of it as master since it started",
            ),
            Self::For { millis } => {
                write!(f, "no controller quorum confirmed it for {millis} ms")
            }
        }
    }
}

impl WriteError {
    /// The error for an append of a `what` the store refused.
    pub fn from_append(what: &'static str, error: AppendError) -> WriteError {
        match error {
            AppendError::InvalidMessage(_)
            | AppendError::MessageTooLarge { .. }
            | AppendError::InvalidName(_)
            | AppendError::OffsetEncoding(_) => WriteError::Invalid(error),
            AppendError::ReservedTopic { .. } => WriteError::Reserved(error),
            AppendError::Poisoned(reason) => WriteError::Poisoned { reason },
            AppendError::Closed => WriteError::Closed,
            AppendError::DispatchStalled(reason) => WriteError::DispatchStalled(reason),
            AppendError::Write(_) => WriteError::WriteFailed { what, cause: error },
        }
    }

    /// The error for a store call that appends and waits.
    pub fn from_store(what: &'static str, error: StoreError) -> WriteError {
        match error {
            StoreError::Append(error) => WriteError::from_append(what, error),
            StoreError::Durability(cause) => WriteError::from_durability(what, cause),
            StoreError::Poisoned(reason) => WriteError::Poisoned { reason },
            cause => WriteError::Unexpected { what, cause },
        }
    }

    /// The error for a wait that did not end in an acknowledgement. A `Closed` store is
    /// reported as such (the broker is stopping), everything else as not durable.
    pub fn from_durability(what: &'static str, cause: DurabilityError) -> WriteError {
        match cause {
            DurabilityError::Closed => WriteError::Closed,
            cause => WriteError::NotDurable { what, cause },
        }
    }
}

/// The offset view could not answer: it could not catch up with what was acknowledged, so
/// any answer might be stale (invariant 7: "could not read" is never "no offset").
#[derive(Debug, Error)]
#[error("consumer offsets cannot be read now: {0}")]
pub struct ViewError(#[from] pub ReadError);

/// A request the core refuses before touching the store: bad names, missing topics or groups,
/// permissions. `remark` says why in words a user can act on.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[error("{remark}")]
pub struct Refusal {
    /// What kind of refusal (the wire adapters map it to a code).
    pub kind: RefusalKind,
    /// Why, for the reply.
    pub remark: String,
}

impl Refusal {
    /// A refusal of `kind` with `remark`.
    pub fn new(kind: RefusalKind, remark: impl Into<String>) -> Refusal {
        Refusal {
            kind,
            remark: remark.into(),
        }
    }
}

/// The kinds of [`Refusal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// This broker is not master: it changes nothing (R3).
    NotMaster,
    /// A topic or group name that breaks RocketMQ's naming rules.
    InvalidName,
    /// A reserved topic or an internal group a client may not name for this operation.
    Forbidden,
    /// A request field out of range or inconsistent (queue id, offset, timestamp).
    InvalidArgument,
    /// The message itself is malformed (a bad batch, a timer property that is not a number).
    InvalidMessage,
    /// The message's properties are longer than a record may hold.
    PropertiesTooLarge,
    /// The topic does not exist (and may not be created here).
    TopicMissing,
    /// The subscription group does not exist.
    GroupMissing,
    /// The topic exists but does not allow this (not writable, not readable).
    TopicPermission,
    /// A send names a queue the topic does not have (a stale route).
    QueueMissing,
    /// A broker-side failure unrelated to the request (a config file could not be saved).
    Internal,
    /// A limit is reached; the client should retry later.
    Busy,
    /// A subscription expression the broker cannot evaluate.
    BadSubscription,
}

impl From<NameError> for Refusal {
    fn from(error: NameError) -> Refusal {
        Refusal::new(RefusalKind::InvalidName, error.to_string())
    }
}

/// Why a consumer's commit (or correction) of its offset was not stored.
#[derive(Debug, Error)]
pub enum CommitError {
    /// Refused before judging (names, topic, group).
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The client was online at a reset or correction of this queue and has not pulled the
    /// queue since: its commit comes from before the move and would undo it.
    #[error("commit of {proposed} was made before the reset of {group} on {topic}/{queue_id} to {reset_offset} (generation {generation}); pull the queue to follow the reset")]
    Fenced {
        /// Group.
        group: String,
        /// Topic.
        topic: String,
        /// Queue.
        queue_id: u32,
        /// The offset the commit proposed.
        proposed: u64,
        /// The offset the reset set.
        reset_offset: u64,
        /// The generation the reset established (0 while it is becoming durable).
        generation: u64,
    },
    /// The connection has not said which client it is (no heartbeat yet) and the queue has
    /// fenced clients: the commit may be a fenced client's, reconnected.
    #[error("commit of {proposed} on {topic}/{queue_id} comes from a connection that has not identified its client (no heartbeat) while consumers of {group} are fenced there by a reset; send a heartbeat first")]
    Unidentified {
        /// Group.
        group: String,
        /// Topic.
        topic: String,
        /// Queue.
        queue_id: u32,
        /// The offset the commit proposed.
        proposed: u64,
    },
    /// The offset rules rejected it (invariant 3): regression, stale generation, past max.
    #[error("commit rejected: {0}")]
    Rejected(CommitRejection),
    /// A correction the queue's state does not justify.
    #[error("{0}")]
    CorrectionRefused(#[from] CorrectionRefusal),
    /// It could not be made durable.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// The offset view could not be read.
    #[error(transparent)]
    View(#[from] ViewError),
}

/// Why a correction (a consumer's move after OFFSET_ILLEGAL) was refused.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum CorrectionRefusal {
    /// The proposal is past the queue's max offset.
    #[error("correction to {offset} is past the queue's max offset {max}")]
    PastMax {
        /// Proposed offset.
        offset: u64,
        /// Queue max (next offset to be written).
        max: u64,
    },
    /// The proposal is below the queue's min offset.
    #[error("correction to {offset} is below the queue's min offset {min}")]
    BelowMin {
        /// Proposed offset.
        offset: u64,
        /// Queue min.
        min: u64,
    },
    /// The stored offset lies inside the queue: nothing needs correcting.
    #[error("correction to {offset} is not justified: the stored offset {stored} lies inside the queue's range [{min}, {max}]")]
    Healthy {
        /// Proposed offset.
        offset: u64,
        /// Stored offset.
        stored: u64,
        /// Queue min.
        min: u64,
        /// Queue max.
        max: u64,
    },
}

/// Why an administrator's reset (or clone, or skip of a damaged record) was not applied.
#[derive(Debug, Error)]
pub enum ResetError {
    /// Refused before anything was written.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The offset rules rejected some queue's entry; the remark lists them.
    #[error("reset rejected: {}", .0.join("; "))]
    Rejected(Vec<String>),
    /// It could not be made durable.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// The offset view could not be read.
    #[error(transparent)]
    View(#[from] ViewError),
}

/// Why a send was not acknowledged.
#[derive(Debug, Error)]
pub enum SendError {
    /// Refused before anything was written.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The write failed or is not known to be durable.
    #[error(transparent)]
    Write(#[from] WriteError),
}

/// Why an offset could not be answered.
#[derive(Debug, Error)]
pub enum QueryError {
    /// The group never stored an offset for the queue (and the queue's start is trimmed, or
    /// the client did not ask for 0).
    #[error("no offset stored for group {group} on {topic}/{queue_id}")]
    NotFound {
        /// Group.
        group: String,
        /// Topic.
        topic: String,
        /// Queue.
        queue_id: u32,
    },
    /// The offset view could not be read.
    #[error(transparent)]
    View(#[from] ViewError),
    /// This broker may not answer for the group's progress now: it is not the master, or a
    /// master whose controller lease lapsed (a newer master may hold newer commits).
    #[error(transparent)]
    NotMaster(#[from] WriteError),
}

/// Why a pull could not read its queue.
#[derive(Debug, Error)]
pub enum PullError {
    /// Refused before reading.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The record at the pulled offset is damaged and quarantined: the consumer stays there
    /// until an administrator skips it.
    #[error("{0}")]
    Damaged(#[source] ReadError),
    /// Dispatch is stalled: the queue may be behind what was acknowledged.
    #[error("{0}")]
    DispatchStalled(#[source] ReadError),
    /// Truncations kept cutting the log under the read (a deposed master cutting its
    /// diverged tail): nothing is damaged, the consumer pulls again.
    #[error("{0}")]
    CutUnderRead(#[source] ReadError),
    /// The read failed.
    #[error("reading {topic}/{queue_id}: {cause}")]
    Failed {
        /// Topic.
        topic: String,
        /// Queue.
        queue_id: u32,
        /// The store's error.
        #[source]
        cause: ReadError,
    },
    /// The offset view could not be read (to follow a reset).
    #[error(transparent)]
    View(#[from] ViewError),
    /// A hold limit is reached (`pullHoldMax`, `pullHoldMaxPerConnection`); the remark says
    /// which.
    #[error("{0}")]
    Busy(String),
    /// The caller went away while its pull was held: nobody reads the answer.
    #[error("the connection closed while the pull was held")]
    CallerGone,
}

impl PullError {
    /// The pull error for the store's `error` reading `topic`/`queue_id`; a damaged record is
    /// counted in `metrics`.
    pub fn from_read(
        metrics: &crate::observability::metrics::BrokerMetrics,
        topic: &str,
        queue_id: u32,
        error: ReadError,
    ) -> PullError {
        match error {
            ReadError::DispatchStalled(_) => PullError::DispatchStalled(error),
            ReadError::CutUnderRead { .. } => PullError::CutUnderRead(error),
            ReadError::Damaged { .. } => {
                metrics.damaged_read();
                PullError::Damaged(error)
            }
            cause => PullError::Failed {
                topic: topic.to_string(),
                queue_id,
                cause,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_refusal_says_whether_a_heartbeat_was_ever_confirmed() {
        let refusal = |silence| {
            WriteError::LeaseExpired {
                what: "message",
                broker: "b".into(),
                broker_id: 1,
                silence,
            }
            .to_string()
        };
        let never = refusal(ControllerSilence::NeverConfirmed);
        assert!(
            never.contains("has confirmed a heartbeat of it as master since it started"),
            "{never}"
        );
        assert!(!never.contains(&u64::MAX.to_string()), "{never}");
        let silent = refusal(ControllerSilence::For { millis: 812 });
        assert!(
            silent.contains("no controller quorum confirmed it for 812 ms"),
            "{silent}"
        );
    }
}
