//! The openraft type configuration of the controller group: log entries carry
//! [`Command`]s, applying one yields an [`ApplyOutcome`], nodes are `u64` ids with their
//! remoting address.

use std::io::Cursor;

use crate::state::{ApplyOutcome, Command};

openraft::declare_raft_types!(
    /// The controller's Raft types.
    pub TypeConfig:
        D = Command,
        R = ApplyOutcome,
        NodeId = u64,
        Node = openraft::BasicNode,
        SnapshotData = Cursor<Vec<u8>>,
);

/// A Raft node of the controller group.
pub type ControllerRaft = openraft::Raft<TypeConfig>;
/// A log id.
pub type LogId = openraft::LogId<u64>;
/// A log entry.
pub type Entry = openraft::Entry<TypeConfig>;
/// A storage error as openraft wants it.
pub type RaftStorageError = openraft::StorageError<u64>;
/// Stored membership.
pub type StoredMembership = openraft::StoredMembership<u64, openraft::BasicNode>;
