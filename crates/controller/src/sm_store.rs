//! The Raft state machine: applies committed [`Command`]s to the [`ControllerState`] and
//! keeps snapshots of it on disk (`<controllerStorePath>/raft/snapshot.json`, replaced
//! atomically).
//!
//! The state itself is not written on every apply: on restart openraft installs the last
//! snapshot and re-applies the committed log after it (the commit point is persisted by the
//! log store), which rebuilds the same state because apply is deterministic.

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{AnyError, BasicNode, EntryPayload, RaftSnapshotBuilder, StorageIOError};
use serde::{Deserialize, Serialize};

use crate::error::StoreError;
use crate::fsutil;
use crate::raft_types::{Entry, LogId, RaftStorageError, StoredMembership, TypeConfig};
use crate::state::{ApplyOutcome, ControllerState};

/// `snapshot.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct PersistedSnapshot {
    meta: SnapshotMeta<u64, BasicNode>,
    state: ControllerState,
}

/// The applied state, shared with the controller's request handlers (read only there).
#[derive(Debug, Default)]
pub struct Applied {
    /// The state.
    pub state: ControllerState,
    /// Last applied log id.
    pub last_applied: Option<LogId>,
    /// Membership of the controller group as applied.
    pub membership: StoredMembership,
    snapshot: Option<PersistedSnapshot>,
    snapshots_built: u64,
}

/// The state machine store; clones share the state.
#[derive(Debug, Clone)]
pub struct StateMachineStore {
    applied: Arc<Mutex<Applied>>,
    path: PathBuf,
}

fn write_error(error: &StoreError) -> RaftStorageError {
    StorageIOError::write_snapshot(None, AnyError::new(error)).into()
}

impl StateMachineStore {
    /// Opens the store in `dir`, starting from the snapshot there if any.
    pub fn open(dir: &Path) -> Result<StateMachineStore, StoreError> {
        let path = dir.join("snapshot.json");
        let mut applied = Applied::default();
        if let Some(snapshot) = fsutil::read_json::<PersistedSnapshot>(&path)? {
            applied.state = snapshot.state.clone();
            applied.last_applied = snapshot.meta.last_log_id;
            applied.membership = snapshot.meta.last_membership.clone();
            applied.snapshot = Some(snapshot);
        }
        Ok(StateMachineStore {
            applied: Arc::new(Mutex::new(applied)),
            path,
        })
    }

    /// The applied state, locked briefly (never across an await).
    pub fn read(&self) -> MutexGuard<'_, Applied> {
        self.applied.lock().expect("state machine lock")
    }

    fn persist(&self, snapshot: &PersistedSnapshot) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(snapshot)
            .map_err(|e| StoreError::io("encode", &self.path, std::io::Error::other(e)))?;
        fsutil::write_atomic(&self.path, &bytes)
    }

    fn to_snapshot(
        snapshot: &PersistedSnapshot,
    ) -> Result<Snapshot<TypeConfig>, serde_json::Error> {
        let data = serde_json::to_vec(&snapshot.state)?;
        Ok(Snapshot {
            meta: snapshot.meta.clone(),
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachineStore {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, RaftStorageError> {
        let persisted = {
            let mut applied = self.read();
            applied.snapshots_built += 1;
            let snapshot_id = match applied.last_applied {
                Some(id) => format!("{}-{}-{}", id.leader_id, id.index, applied.snapshots_built),
                None => format!("empty-{}", applied.snapshots_built),
            };
            PersistedSnapshot {
                meta: SnapshotMeta {
                    last_log_id: applied.last_applied,
                    last_membership: applied.membership.clone(),
                    snapshot_id,
                },
                state: applied.state.clone(),
            }
        };
        self.persist(&persisted).map_err(|e| write_error(&e))?;
        let snapshot = Self::to_snapshot(&persisted)
            .map_err(|e| StorageIOError::read_snapshot(None, AnyError::new(&e)))?;
        self.read().snapshot = Some(persisted);
        Ok(snapshot)
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = StateMachineStore;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId>, StoredMembership), RaftStorageError> {
        let applied = self.read();
        Ok((applied.last_applied, applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<ApplyOutcome>, RaftStorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut applied = self.read();
        let mut outcomes = Vec::new();
        for entry in entries {
            applied.last_applied = Some(entry.log_id);
            let outcome = match entry.payload {
                EntryPayload::Blank => ApplyOutcome::Nothing,
                EntryPayload::Normal(command) => applied.state.apply(&command),
                EntryPayload::Membership(membership) => {
                    applied.membership = StoredMembership::new(Some(entry.log_id), membership);
                    ApplyOutcome::Nothing
                }
            };
            outcomes.push(outcome);
        }
        Ok(outcomes)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, RaftStorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), RaftStorageError> {
        let state: ControllerState = serde_json::from_slice(snapshot.get_ref()).map_err(|e| {
            StorageIOError::read_snapshot(Some(meta.signature()), AnyError::new(&e))
        })?;
        let persisted = PersistedSnapshot {
            meta: meta.clone(),
            state,
        };
        self.persist(&persisted).map_err(|e| write_error(&e))?;
        let mut applied = self.read();
        applied.state = persisted.state.clone();
        applied.last_applied = meta.last_log_id;
        applied.membership = meta.last_membership.clone();
        applied.snapshot = Some(persisted);
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, RaftStorageError> {
        let persisted = self.read().snapshot.clone();
        persisted
            .as_ref()
            .map(Self::to_snapshot)
            .transpose()
            .map_err(|e| StorageIOError::read_snapshot(None, AnyError::new(&e)).into())
    }
}

#[cfg(test)]
mod tests {
    use openraft::CommittedLeaderId;

    use super::*;
    use crate::state::Command;

    fn entry(index: u64, command: Command) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 0), index),
            payload: EntryPayload::Normal(command),
        }
    }

    fn register(name: &str) -> Command {
        Command::RegisterBroker {
            cluster_name: "c".into(),
            broker_name: name.into(),
            broker_id: None,
            broker_address: "a:1".into(),
            ha_address: "a:2".into(),
            election_priority: 0,
        }
    }

    #[tokio::test]
    async fn a_snapshot_on_disk_is_the_starting_state_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = StateMachineStore::open(dir.path()).unwrap();
        let outcomes = store
            .apply(vec![entry(1, register("a")), entry(2, register("b"))])
            .await
            .unwrap();
        assert!(matches!(
            outcomes[1],
            ApplyOutcome::Registered { broker_id: 1, .. }
        ));
        let snapshot = store
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        assert_eq!(snapshot.meta.last_log_id.map(|l| l.index), Some(2));
        let expected = store.read().state.clone();
        drop(store);
        let mut reopened = StateMachineStore::open(dir.path()).unwrap();
        assert_eq!(reopened.read().state, expected);
        let (applied, _) = reopened.applied_state().await.unwrap();
        assert_eq!(applied.map(|l| l.index), Some(2));
        assert!(reopened.get_current_snapshot().await.unwrap().is_some());
    }

    #[test]
    fn a_corrupt_snapshot_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("snapshot.json"), b"{\"meta\":").unwrap();
        let error = StateMachineStore::open(dir.path()).unwrap_err();
        assert!(error.to_string().contains("snapshot.json"), "{error}");
    }
}
