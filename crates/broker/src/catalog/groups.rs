//! Subscription groups (consumer groups) and their settings, persisted like topics in
//! `config/subscriptionGroup.json` by atomic replace.
//!
//! A group created on first use (a pull, a commit, a heartbeat) is held in memory and saved by
//! the saver task ([`run_saver`]), never on the request's path: a full disk must not fail a
//! new consumer's first pull. A failed save is logged, counted
//! ([`GroupManager::save_failures`], `ferromq_config_save_failures_total`) and retried every
//! [`SAVE_RETRY_INTERVAL`] until it succeeds; an auto-created group lost to a crash before its
//! save is created again, with the same defaults, on its next use. Changes an administrator
//! asks for (`upsert`, `delete`) are saved before the reply, and a failure reaches the admin.
//!
//! Every group name passes [`ferromq_protocol::names::validate_group`] first.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{watch, Notify};

use crate::context::BrokerContext;

/// How often the saver retries a failed save of the table (and the longest an auto-created
/// group waits for its first save when no wake-up comes).
pub const SAVE_RETRY_INTERVAL: Duration = Duration::from_secs(1);

/// The metrics label of this table's file.
pub const GROUPS_FILE_LABEL: &str = "subscriptionGroup.json";

/// A consumer group's settings (RocketMQ `SubscriptionGroupConfig`, the fields ferromq uses).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SubscriptionGroupConfig {
    /// Group name.
    pub group_name: String,
    /// Consumption allowed.
    pub consume_enable: bool,
    /// Broadcast consumption allowed.
    pub consume_broadcast_enable: bool,
    /// Queues of the group's retry topic.
    pub retry_queue_nums: i32,
    /// Deliveries before the dead-letter queue.
    pub retry_max_times: i32,
    /// Orderly (FIFO) consumption: a receive hands out a queue's messages one batch at a
    /// time, in order (`core::pop`), and gRPC consumers are told `fifo`.
    pub consume_message_orderly: bool,
    /// Notify members when the membership changes.
    pub notify_consumer_ids_changed_enable: bool,
}

impl Default for SubscriptionGroupConfig {
    fn default() -> Self {
        SubscriptionGroupConfig {
            group_name: String::new(),
            consume_enable: true,
            consume_broadcast_enable: true,
            retry_queue_nums: 1,
            retry_max_times: 16,
            consume_message_orderly: false,
            notify_consumer_ids_changed_enable: true,
        }
    }
}

/// Why a group operation failed.
#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    /// The name breaks RocketMQ's group rules.
    #[error(transparent)]
    InvalidName(#[from] ferromq_protocol::names::NameError),
    /// The table could not be persisted.
    #[error("cannot persist subscription groups to {path}: {source}")]
    Persist {
        path: PathBuf,
        source: ferromq_store::error::FileError,
    },
    /// The file on disk is unreadable.
    #[error("subscription group file {path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Table {
    subscription_group_table: BTreeMap<String, SubscriptionGroupConfig>,
}

/// The broker's subscription groups.
#[derive(Debug)]
pub struct GroupManager {
    path: PathBuf,
    table: RwLock<Table>,
    /// The table in memory differs from the file (a save is due).
    dirty: AtomicBool,
    /// Saves that failed since the broker started.
    save_failures: AtomicU64,
    /// Why the last save failed, while it has not succeeded since.
    last_save_error: Mutex<Option<String>>,
    /// Wakes the saver when a group was created in memory.
    save_due: Notify,
    /// Bumped on every change in memory (the catalog publisher compares it).
    version: AtomicU64,
    /// Notified after every change (the catalog publisher waits on it).
    pub changed: Notify,
    /// `retryMaxTimes` of the groups [`GroupManager::ensure`] creates (the broker's
    /// `maxReconsumeTimes`).
    default_retry_max_times: i32,
}

impl GroupManager {
    /// Loads the table (absent: empty); groups created later by [`GroupManager::ensure`] get
    /// `default_retry_max_times` deliveries before the dead-letter queue.
    pub fn load(root: &Path, default_retry_max_times: i32) -> Result<GroupManager, GroupError> {
        let path = root.join("config").join("subscriptionGroup.json");
        let table = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| GroupError::Corrupt {
                path: path.clone(),
                reason: e.to_string(),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Table::default(),
            Err(e) => {
                return Err(GroupError::Corrupt {
                    path,
                    reason: e.to_string(),
                })
            }
        };
        Ok(GroupManager {
            path,
            table: RwLock::new(table),
            dirty: AtomicBool::new(false),
            save_failures: AtomicU64::new(0),
            last_save_error: Mutex::new(None),
            save_due: Notify::new(),
            version: AtomicU64::new(0),
            changed: Notify::new(),
            default_retry_max_times,
        })
    }

    /// The group's settings.
    pub fn get(&self, group: &str) -> Option<SubscriptionGroupConfig> {
        self.table
            .read()
            .expect("groups lock")
            .subscription_group_table
            .get(group)
            .cloned()
    }

    /// Every group.
    pub fn all(&self) -> Vec<SubscriptionGroupConfig> {
        self.table
            .read()
            .expect("groups lock")
            .subscription_group_table
            .values()
            .cloned()
            .collect()
    }

    /// Creates or replaces a group, saved before it returns.
    ///
    /// # Errors
    /// An invalid name (nothing changes), or the save failed: the change is kept in memory and
    /// the saver retries it.
    pub fn upsert(&self, config: SubscriptionGroupConfig) -> Result<(), GroupError> {
        ferromq_protocol::names::validate_group(&config.group_name)?;
        let mut table = self.table.write().expect("groups lock");
        if table.subscription_group_table.get(&config.group_name) == Some(&config) {
            return Ok(());
        }
        table
            .subscription_group_table
            .insert(config.group_name.clone(), config);
        self.mark_changed();
        self.save_locked(&table)
    }

    /// The group's settings, creating it with default settings in memory unless it exists;
    /// the saver writes it to the file (see the module header), so this never waits for a
    /// disk and never fails because of one.
    ///
    /// # Errors
    /// Only an invalid group name.
    pub fn ensure(&self, group: &str) -> Result<SubscriptionGroupConfig, GroupError> {
        if let Some(existing) = self.get(group) {
            return Ok(existing);
        }
        ferromq_protocol::names::validate_group(group)?;
        let mut table = self.table.write().expect("groups lock");
        let config = table
            .subscription_group_table
            .entry(group.to_string())
            .or_insert_with(|| SubscriptionGroupConfig {
                group_name: group.to_string(),
                retry_max_times: self.default_retry_max_times,
                ..Default::default()
            })
            .clone();
        self.mark_changed();
        drop(table);
        self.save_due.notify_one();
        Ok(config)
    }

    /// Deletes a group; returns whether it existed.
    pub fn delete(&self, group: &str) -> Result<bool, GroupError> {
        let mut table = self.table.write().expect("groups lock");
        if table.subscription_group_table.remove(group).is_none() {
            return Ok(false);
        }
        self.mark_changed();
        self.save_locked(&table)?;
        Ok(true)
    }

    /// A counter that changes with every change of the table in memory.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// Replaces the whole table with a master's (a slave following its catalog records),
    /// saved before it returns; returns whether anything changed.
    ///
    /// # Errors
    /// A name breaks the rules (nothing changes), or the save failed (kept in memory and
    /// retried by the saver).
    pub fn replace_all(&self, groups: Vec<SubscriptionGroupConfig>) -> Result<bool, GroupError> {
        for group in &groups {
            ferromq_protocol::names::validate_group(&group.group_name)?;
        }
        let groups: BTreeMap<String, SubscriptionGroupConfig> = groups
            .into_iter()
            .map(|g| (g.group_name.clone(), g))
            .collect();
        let mut table = self.table.write().expect("groups lock");
        if table.subscription_group_table == groups {
            return Ok(false);
        }
        table.subscription_group_table = groups;
        self.mark_changed();
        self.save_locked(&table)?;
        Ok(true)
    }

    /// Marks the table changed: unsaved, and a new version.
    fn mark_changed(&self) {
        self.dirty.store(true, Ordering::Release);
        self.version.fetch_add(1, Ordering::AcqRel);
        self.changed.notify_one();
    }

    /// Saves the table when it differs from the file. Returns whether it wrote.
    ///
    /// # Errors
    /// The save failed (counted; the table stays due).
    pub fn save_if_dirty(&self) -> Result<bool, GroupError> {
        // Inserts take the write lock, so none lands between the save and clearing `dirty`.
        let table = self.table.read().expect("groups lock");
        if !self.dirty.load(Ordering::Acquire) {
            return Ok(false);
        }
        self.save_locked(&table)?;
        Ok(true)
    }

    /// Saves that failed since the broker started.
    pub fn save_failures(&self) -> u64 {
        self.save_failures.load(Ordering::Relaxed)
    }

    /// Why the last save failed, while no save has succeeded since (`None`: saved).
    pub fn last_save_error(&self) -> Option<String> {
        self.last_save_error
            .lock()
            .expect("save error lock")
            .clone()
    }

    /// Whether the table in memory has changes the file lacks.
    pub fn is_dirty(&self) -> bool {
        self.dirty.load(Ordering::Acquire)
    }

    /// Saves `table` (held locked by the caller); records the outcome.
    fn save_locked(&self, table: &Table) -> Result<(), GroupError> {
        let result = self.persist(table);
        let mut last = self.last_save_error.lock().expect("save error lock");
        match &result {
            Ok(()) => {
                if last.take().is_some() {
                    tracing::info!(path = %self.path.display(), "subscription groups saved again");
                }
                self.dirty.store(false, Ordering::Release);
            }
            Err(error) => {
                self.save_failures.fetch_add(1, Ordering::Relaxed);
                if last.is_none() {
                    tracing::error!(%error, retry_every = ?SAVE_RETRY_INTERVAL,
                        "subscription groups not saved; kept in memory and retried");
                }
                *last = Some(error.to_string());
            }
        }
        result
    }

    fn persist(&self, table: &Table) -> Result<(), GroupError> {
        let persist = |e| GroupError::Persist {
            path: self.path.clone(),
            source: e,
        };
        if let Some(dir) = self.path.parent() {
            ferromq_store::fsutil::create_dir_all(dir).map_err(persist)?;
        }
        let bytes = serde_json::to_vec_pretty(table).unwrap_or_default();
        ferromq_store::fsutil::write_atomic(&self.path, &bytes).map_err(persist)
    }
}

/// Saves the group table whenever it has unsaved changes, retrying failures every
/// [`SAVE_RETRY_INTERVAL`]; a last save when the broker stops.
pub async fn run_saver(ctx: Arc<BrokerContext>, mut stop: watch::Receiver<bool>) {
    loop {
        let stopping = tokio::select! {
            _ = ctx.groups.save_due.notified() => false,
            _ = tokio::time::sleep(SAVE_RETRY_INTERVAL) => false,
            _ = stop.changed() => true,
        };
        let saver = ctx.clone();
        // The save fsyncs: keep it off the async workers. Its error is counted and logged
        // by `save_locked`; the table stays due and the next round retries it.
        let _ = tokio::task::spawn_blocking(move || saver.groups.save_if_dirty()).await;
        if stopping {
            return;
        }
    }
}
