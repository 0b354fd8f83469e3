//! Error types of the client.
//!
//! Invariants: a transport failure (connect, timeout, closed connection) is always
//! distinguishable from a broker's answer; an offset commit the broker refused as stale
//! (regression, stale generation, past the queue's max) is its own [`RejectReason`], never
//! folded into a generic failure; every variant names the address or queue involved.

use std::net::SocketAddr;

use ferromq_protocol::remoting::body::decode_json;
use ferromq_protocol::remoting::body::misc::MessageQueue;
use ferromq_protocol::remoting::ClientError as TransportError;
use ferromq_protocol::remoting::{CommandHeader, RemotingCommand};
use thiserror::Error;

/// Errors of the producer, the pull consumer and route discovery.
#[derive(Debug, Error)]
pub enum ClientError {
    /// The configuration cannot work (e.g. no name server, empty group).
    #[error("invalid client configuration: {0}")]
    Config(String),
    /// The message is not valid (topic name, property names, empty body, ...).
    #[error("invalid message: {0}")]
    InvalidMessage(String),
    /// The message body exceeds the configured maximum; nothing was sent.
    #[error(
        "message body is {size} bytes, more than the maximum of {max} bytes; nothing was sent"
    )]
    BodyTooLarge {
        /// Size of the body (or of the encoded batch).
        size: usize,
        /// Configured maximum.
        max: usize,
    },
    /// A server could not be reached, did not answer in time, or closed the connection.
    #[error("transport to {addr} failed: {source}")]
    Transport {
        /// Server address.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: TransportError,
    },
    /// No name server answered with a route for the topic.
    #[error("no route for topic {topic}: {reason}")]
    NoRoute {
        /// Topic.
        topic: String,
        /// Why (every name server's answer or failure).
        reason: String,
    },
    /// The route names no reachable master for a broker group.
    #[error("no master address known for broker {broker_name}")]
    NoBrokerAddress {
        /// Broker group name.
        broker_name: String,
    },
    /// The topic's route has no queue with the needed permission.
    #[error("topic {topic} has no {kind} queue")]
    NoQueue {
        /// Topic.
        topic: String,
        /// `writable` or `readable`.
        kind: &'static str,
    },
    /// A broker answered with a failure code.
    #[error("broker {addr} answered code {code}: {remark}")]
    Broker {
        /// Broker address.
        addr: SocketAddr,
        /// Response code.
        code: i32,
        /// The broker's remark (empty when it gave none).
        remark: String,
    },
    /// A reply could not be decoded.
    #[error("cannot decode reply from {addr}: {reason}")]
    Decode {
        /// Server address.
        addr: SocketAddr,
        /// What is wrong.
        reason: String,
    },
    /// Every attempt of a send failed; `last` is the final attempt's error.
    #[error("send failed after {attempts} attempts: {last}")]
    RetriesExhausted {
        /// Attempts made.
        attempts: u32,
        /// Error of the last attempt.
        #[source]
        last: Box<ClientError>,
    },
    /// An offset operation failed.
    #[error(transparent)]
    Offset(Box<OffsetError>),
    /// The producer's bound on outstanding asynchronous sends was reached and no send
    /// finished within the wait; nothing was sent (backpressure).
    #[error("{max} asynchronous sends are outstanding, the maximum; none finished within {waited:?}; nothing was sent")]
    AsyncSendsFull {
        /// The configured bound.
        max: usize,
        /// How long the call waited for a slot.
        waited: std::time::Duration,
    },
    /// The producer was shut down; nothing was sent.
    #[error("the producer is shut down; nothing was sent")]
    Shutdown,
}

impl From<OffsetError> for ClientError {
    fn from(error: OffsetError) -> Self {
        ClientError::Offset(Box::new(error))
    }
}

impl ClientError {
    /// The header of `reply`, from `addr`; a header that does not decode is
    /// [`ClientError::Decode`] naming `addr`.
    ///
    /// # Errors
    /// [`ClientError::Decode`] with the header error.
    pub fn decode_header<H: CommandHeader>(
        addr: SocketAddr,
        reply: &RemotingCommand,
    ) -> Result<H, ClientError> {
        reply.decode_header().map_err(|e| ClientError::Decode {
            addr,
            reason: e.to_string(),
        })
    }

    /// The JSON body of `reply`, from `addr` (an absent body reads as empty); a body that
    /// does not decode is [`ClientError::Decode`] naming `addr`.
    ///
    /// # Errors
    /// [`ClientError::Decode`] with the body error.
    pub fn decode_body<T: serde::de::DeserializeOwned>(
        addr: SocketAddr,
        reply: &RemotingCommand,
    ) -> Result<T, ClientError> {
        decode_json(reply.body.as_deref().unwrap_or_default()).map_err(|e| ClientError::Decode {
            addr,
            reason: e.to_string(),
        })
    }

    /// A queue offset `addr` replied, which must not be negative.
    ///
    /// # Errors
    /// [`ClientError::Decode`] naming `addr` and the negative value.
    pub fn non_negative_offset(addr: SocketAddr, offset: i64) -> Result<u64, ClientError> {
        u64::try_from(offset).map_err(|_| ClientError::Decode {
            addr,
            reason: format!("negative offset {offset}"),
        })
    }

    /// True for a transport failure (cannot connect, connection closed, timeout), as opposed
    /// to an answer: the server may be down. Pulls then read from a slave for a while.
    pub fn is_transport(&self) -> bool {
        matches!(self, ClientError::Transport { .. })
    }

    /// True when the failure says the master it went to may no longer be the master: the
    /// broker answered NOT_MASTER (a slave, or a master demoted by failover), or the
    /// connection to it failed (refused, closed, timed out). The caller asks the name
    /// servers for the route again ([`crate::route::RouteCache::master_failed`]).
    pub fn signals_master_change(&self) -> bool {
        match self {
            ClientError::Transport { .. } => true,
            ClientError::Broker { code, .. } => *code == crate::error::codes::NOT_MASTER,
            ClientError::Offset(error) => error.signals_master_change(),
            ClientError::RetriesExhausted { last, .. } => last.signals_master_change(),
            _ => false,
        }
    }

    /// True for failures where another attempt (possibly on another queue or broker) may
    /// succeed: transport failures and broker codes for transient or per-broker conditions
    /// (NOT_MASTER included: a failover moved the group's master).
    pub fn is_retriable(&self) -> bool {
        use ferromq_protocol::remoting::codes::response;
        match self {
            ClientError::Transport { .. } | ClientError::NoBrokerAddress { .. } => true,
            ClientError::Broker { code, .. } => matches!(
                *code,
                response::SYSTEM_ERROR
                    | response::SYSTEM_BUSY
                    | response::SERVICE_NOT_AVAILABLE
                    | response::NO_PERMISSION
                    | response::TOPIC_NOT_EXIST
                    | response::FLUSH_DISK_TIMEOUT
                    | response::FLUSH_SLAVE_TIMEOUT
                    | response::SLAVE_NOT_AVAILABLE
                    | crate::error::codes::NOT_DURABLE
                    | crate::error::codes::NOT_MASTER
            ),
            _ => false,
        }
    }
}

/// ferromq's own response codes (assigned by the ferromq broker, reference §6 "pick numbers
/// unused above"). A RocketMQ broker never sends them. Defined in
/// [`ferromq_protocol::remoting::extensions`].
pub use ferromq_protocol::remoting::extensions as codes;

/// Why a broker rejected an offset commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectReason {
    /// The commit is lower than the stored offset (another consumer got further, or this one
    /// is stale after a rebalance).
    Regression,
    /// The commit belongs to an older reset generation (a reset or correction superseded it).
    StaleGeneration,
    /// The commit is past the queue's max offset.
    PastMax,
    /// Any other refusal (unknown topic, group not allowed, ferromq's generic rejection, ...).
    Other,
}

impl RejectReason {
    /// True for the stale kinds (regression, stale generation, past max): retrying the same
    /// value cannot succeed.
    pub fn is_stale(self) -> bool {
        !matches!(self, RejectReason::Other)
    }
}

/// Errors of offset stores. "No offset stored" is never an error: it is `Ok(None)`.
#[derive(Debug, Error)]
pub enum OffsetError {
    /// The broker (or name server) could not be asked: connect failure, timeout or closed
    /// connection. Nothing is known about the stored offset.
    #[error("offset store for {queue:?} unreachable: {source}")]
    Unreachable {
        /// The queue concerned.
        queue: MessageQueue,
        /// Cause.
        #[source]
        source: Box<ClientError>,
    },
    /// The broker refused the commit.
    #[error("broker {addr} rejected commit of offset {offset} for {queue:?} ({reason:?}, code {code}): {remark}")]
    Rejected {
        /// The queue concerned.
        queue: MessageQueue,
        /// Offset that was refused.
        offset: u64,
        /// Kind of refusal.
        reason: RejectReason,
        /// Response code.
        code: i32,
        /// The broker's remark.
        remark: String,
        /// Broker address.
        addr: SocketAddr,
    },
    /// The broker accepted the request but could not make it durable (ferromq NOT_DURABLE);
    /// the commit may or may not be stored: retry it.
    #[error("broker {addr} could not make the commit of {queue:?} durable: {remark}")]
    NotDurable {
        /// The queue concerned.
        queue: MessageQueue,
        /// Broker address.
        addr: SocketAddr,
        /// The broker's remark.
        remark: String,
    },
    /// The broker answered with a code this client does not expect for the request.
    #[error("broker {addr} answered offset request for {queue:?} with code {code}: {remark}")]
    Unexpected {
        /// The queue concerned.
        queue: MessageQueue,
        /// Broker address.
        addr: SocketAddr,
        /// Response code.
        code: i32,
        /// The broker's remark.
        remark: String,
    },
    /// The offset cannot be sent over the wire (larger than `i64::MAX`), or a reply carried a
    /// negative offset.
    #[error("offset {value} for {queue:?} is out of range: {why}")]
    OutOfRange {
        /// The queue concerned.
        queue: MessageQueue,
        /// The value, as text (it may be negative on the wire).
        value: String,
        /// Which side produced it.
        why: &'static str,
    },
    /// A local offset file could not be read or written.
    #[error("offset file {path}: {source}")]
    Io {
        /// File or directory.
        path: std::path::PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A local offset file exists but cannot be parsed.
    #[error("offset file {path} is corrupt: {reason}")]
    Corrupt {
        /// File.
        path: std::path::PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Another owner took the queue over (its owner generation in the offset table moved
    /// past this consumer's), or the stored offset is already past the batch: the commit was
    /// refused and nothing of it was written. The caller drops the batch; the queue's new
    /// owner (or the reset that moved it) holds the truth. Raised by stores that fence owners
    /// ([`crate::OffsetStore::fences_owners`]), such as the PostgreSQL store.
    #[error("commit of {queue:?} fenced: this consumer holds generation {generation}, the store has generation {current_generation} at offset {current_offset:?}, last written by {updated_by:?}")]
    Fenced {
        /// The queue concerned.
        queue: MessageQueue,
        /// The owner generation this consumer claimed.
        generation: u64,
        /// The generation the store holds now.
        current_generation: u64,
        /// The next offset the store holds now (`None`: never committed).
        current_offset: Option<u64>,
        /// Who last wrote the row (a consumer's client id, or a reset).
        updated_by: String,
    },
    /// A commit was asked for a queue this consumer never claimed from a store that fences
    /// owners (call [`crate::OffsetStore::claim`] first; consumers do it on assignment).
    #[error("{queue:?} is not claimed by this consumer; claim it before committing")]
    NotClaimed {
        /// The queue concerned.
        queue: MessageQueue,
    },
    /// A database offset store failed (connection refused or lost, timeout, statement
    /// error, commit failure). A failed `COMMIT` leaves the outcome unknown: the consumer
    /// re-reads its position from the database before going on.
    #[error("offset database: {what}: {source}")]
    Database {
        /// What was being done (names the queue when there is one).
        what: String,
        /// Cause (the driver's error).
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Some queues of a `persist_all` failed (see [`crate::PersistReport::into_result`]).
    #[error("{} of {total} queue offsets failed to persist; first: {first}", .failed)]
    PersistFailed {
        /// Number of failed queues.
        failed: usize,
        /// Number of queues attempted.
        total: usize,
        /// First failure, as text.
        first: String,
    },
}

impl OffsetError {
    /// True when the broker refused the commit as stale (regression, stale generation, past
    /// max): the same value will never be accepted.
    pub fn is_stale(&self) -> bool {
        match self {
            OffsetError::Rejected { reason, .. } => reason.is_stale(),
            OffsetError::Fenced { .. } => true,
            _ => false,
        }
    }

    /// True when another owner (or a reset) fenced this consumer off the queue.
    pub fn is_fenced(&self) -> bool {
        matches!(self, OffsetError::Fenced { .. })
    }

    /// True when the commit or query went to a broker that may no longer be the master: it
    /// answered NOT_MASTER, or it could not be reached.
    pub fn signals_master_change(&self) -> bool {
        match self {
            OffsetError::Unreachable { source, .. } => source.signals_master_change(),
            OffsetError::Rejected { code, .. } | OffsetError::Unexpected { code, .. } => {
                *code == crate::error::codes::NOT_MASTER
            }
            _ => false,
        }
    }

    /// True for a commit refused as a stale generation: on a ferromq broker, either a commit
    /// from a connection that has not identified its client (no heartbeat yet) on a queue a
    /// reset fences, or one from a client the reset fenced. After a heartbeat the first is
    /// accepted; the second is refused again (the client follows the reset on its next pull).
    pub fn is_unidentified(&self) -> bool {
        matches!(
            self,
            OffsetError::Rejected {
                reason: RejectReason::StaleGeneration,
                ..
            }
        )
    }

    /// True when the outcome is unknown and the same commit may be retried (transport failure
    /// or not durable).
    pub fn is_retriable(&self) -> bool {
        matches!(
            self,
            OffsetError::Unreachable { .. }
                | OffsetError::NotDurable { .. }
                | OffsetError::Database { .. }
        )
    }
}
