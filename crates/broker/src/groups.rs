//! Subscription groups (consumer groups) and their settings, persisted like topics in
//! `config/subscriptionGroup.json` by atomic replace.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use serde::{Deserialize, Serialize};

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
            notify_consumer_ids_changed_enable: true,
        }
    }
}

/// Why a group operation failed.
#[derive(Debug, thiserror::Error)]
pub enum GroupError {
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
}

impl GroupManager {
    /// Loads the table (absent: empty).
    pub fn load(root: &Path) -> Result<GroupManager, GroupError> {
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

    /// Creates or replaces a group.
    pub fn upsert(&self, config: SubscriptionGroupConfig) -> Result<(), GroupError> {
        let mut table = self.table.write().expect("groups lock");
        if table.subscription_group_table.get(&config.group_name) == Some(&config) {
            return Ok(());
        }
        table
            .subscription_group_table
            .insert(config.group_name.clone(), config);
        self.persist(&table)
    }

    /// Creates the group with default settings unless it exists.
    pub fn ensure(&self, group: &str) -> Result<SubscriptionGroupConfig, GroupError> {
        if let Some(existing) = self.get(group) {
            return Ok(existing);
        }
        let config = SubscriptionGroupConfig {
            group_name: group.to_string(),
            ..Default::default()
        };
        self.upsert(config.clone())?;
        Ok(config)
    }

    /// Deletes a group; returns whether it existed.
    pub fn delete(&self, group: &str) -> Result<bool, GroupError> {
        let mut table = self.table.write().expect("groups lock");
        if table.subscription_group_table.remove(group).is_none() {
            return Ok(false);
        }
        self.persist(&table)?;
        Ok(true)
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
