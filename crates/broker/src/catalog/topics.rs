//! Topic configurations: which topics exist, their queue counts and permissions.
//!
//! Persisted as `config/topics.json` under the store root, rewritten whole on every change by
//! write-temp + fsync + rename + fsync(dir) (invariant 5), so a crash leaves the old or the new
//! table, never a torn one.
//!
//! Invariants:
//! 1. Every change bumps the data version, so the name server sees a new registration.
//! 2. `TBW102` exists exactly when automatic topic creation is allowed: it is what clients
//!    look up to learn that a broker will create their topic on first send.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use ferromq_protocol::remoting::body::topic::{
    DataVersion, TopicConfig, TopicConfigSerializeWrapper,
};

pub use ferromq_protocol::names::{
    AUTO_CREATE_TOPIC, DLQ_TOPIC_PREFIX as DLQ_PREFIX, RETRY_TOPIC_PREFIX as RETRY_PREFIX,
    TOPIC_NAME_MAX_LEN,
};
/// `PermName` bits.
pub const PERM_READ: i32 = 4;
/// Writable.
pub const PERM_WRITE: i32 = 2;
/// Inheritable (templates such as TBW102).
pub const PERM_INHERIT: i32 = 1;

/// Why a topic operation failed.
#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    /// The name breaks RocketMQ's topic rules.
    #[error(transparent)]
    InvalidName(#[from] ferromq_protocol::names::NameError),
    /// The table could not be persisted.
    #[error("cannot persist topic configs to {path}: {source}")]
    Persist {
        path: PathBuf,
        source: ferromq_store::error::FileError,
    },
    /// The table on disk is unreadable.
    #[error("topic config file {path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
}

/// Checks a topic name: RocketMQ's rules, [`ferromq_protocol::names::validate_topic`].
pub fn validate_topic_name(name: &str) -> Result<(), TopicError> {
    Ok(ferromq_protocol::names::validate_topic(name)?)
}

#[derive(Debug, Default)]
struct Table {
    topics: BTreeMap<String, TopicConfig>,
    version: DataVersion,
}

/// The broker's topics.
#[derive(Debug)]
pub struct TopicManager {
    path: PathBuf,
    table: RwLock<Table>,
    /// Notified after every change (the catalog publisher waits on it).
    pub changed: tokio::sync::Notify,
}

impl TopicManager {
    /// Loads `config/topics.json` (absent: an empty table) and makes sure the system topics
    /// exist.
    pub fn load(
        root: &Path,
        auto_create: bool,
        default_queue_nums: u32,
    ) -> Result<TopicManager, TopicError> {
        let path = root.join("config").join("topics.json");
        let mut table = Table::default();
        match std::fs::read(&path) {
            Ok(bytes) => {
                let wrapper: TopicConfigSerializeWrapper =
                    serde_json::from_slice(&bytes).map_err(|e| TopicError::Corrupt {
                        path: path.clone(),
                        reason: e.to_string(),
                    })?;
                table.topics = wrapper.topic_config_table;
                table.version = wrapper.data_version;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(TopicError::Corrupt {
                    path,
                    reason: e.to_string(),
                });
            }
        }
        let manager = TopicManager {
            path,
            table: RwLock::new(table),
            changed: tokio::sync::Notify::new(),
        };
        if auto_create {
            let mut template = TopicConfig::new(AUTO_CREATE_TOPIC);
            template.read_queue_nums = default_queue_nums as i32;
            template.write_queue_nums = default_queue_nums as i32;
            template.perm = PERM_READ | PERM_WRITE | PERM_INHERIT;
            manager.put_if_absent(template)?;
        } else if manager.get(AUTO_CREATE_TOPIC).is_some() {
            manager.delete(AUTO_CREATE_TOPIC)?;
        }
        Ok(manager)
    }

    /// The topic's config.
    pub fn get(&self, topic: &str) -> Option<TopicConfig> {
        self.table
            .read()
            .expect("topics lock")
            .topics
            .get(topic)
            .cloned()
    }

    /// `f` of the topic's config, without cloning it (the send and pull paths read a few
    /// numbers of it per request; a clone costs its strings and attribute map).
    pub fn read<R>(&self, topic: &str, f: impl FnOnce(&TopicConfig) -> R) -> Option<R> {
        self.table
            .read()
            .expect("topics lock")
            .topics
            .get(topic)
            .map(f)
    }

    /// Whether the topic exists.
    pub fn contains(&self, topic: &str) -> bool {
        self.read(topic, |_| ()).is_some()
    }

    /// Every topic name.
    pub fn names(&self) -> Vec<String> {
        self.table
            .read()
            .expect("topics lock")
            .topics
            .keys()
            .cloned()
            .collect()
    }

    /// The table and its version, as registered with name servers.
    pub fn snapshot(&self) -> TopicConfigSerializeWrapper {
        let table = self.table.read().expect("topics lock");
        TopicConfigSerializeWrapper {
            topic_config_table: table.topics.clone(),
            data_version: table.version.clone(),
        }
    }

    /// Creates or replaces a topic. Returns whether anything changed.
    pub fn upsert(&self, config: TopicConfig) -> Result<bool, TopicError> {
        validate_topic_name(&config.topic_name)?;
        let mut table = self.table.write().expect("topics lock");
        if table.topics.get(&config.topic_name) == Some(&config) {
            return Ok(false);
        }
        table.topics.insert(config.topic_name.clone(), config);
        self.persist(&mut table)?;
        Ok(true)
    }

    /// Creates a topic unless it exists; returns the config in force.
    pub fn put_if_absent(&self, config: TopicConfig) -> Result<TopicConfig, TopicError> {
        validate_topic_name(&config.topic_name)?;
        let mut table = self.table.write().expect("topics lock");
        if let Some(existing) = table.topics.get(&config.topic_name) {
            return Ok(existing.clone());
        }
        table
            .topics
            .insert(config.topic_name.clone(), config.clone());
        self.persist(&mut table)?;
        Ok(config)
    }

    /// Deletes a topic's config (its messages age out with retention). Returns whether it
    /// existed.
    pub fn delete(&self, topic: &str) -> Result<bool, TopicError> {
        let mut table = self.table.write().expect("topics lock");
        if table.topics.remove(topic).is_none() {
            return Ok(false);
        }
        self.persist(&mut table)?;
        Ok(true)
    }

    /// The data version's counter: it changes with every change of the table.
    pub fn version(&self) -> i64 {
        self.table.read().expect("topics lock").version.counter
    }

    /// Replaces the whole table with a master's (a slave following its catalog records);
    /// returns whether anything changed.
    ///
    /// # Errors
    /// A name breaks the rules (nothing changes), or the file could not be written.
    pub fn replace_all(&self, topics: BTreeMap<String, TopicConfig>) -> Result<bool, TopicError> {
        for name in topics.keys() {
            validate_topic_name(name)?;
        }
        let mut table = self.table.write().expect("topics lock");
        if table.topics == topics {
            return Ok(false);
        }
        table.topics = topics;
        self.persist(&mut table)?;
        Ok(true)
    }

    fn persist(&self, table: &mut Table) -> Result<(), TopicError> {
        table.version.counter += 1;
        self.changed.notify_one();
        table.version.timestamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let wrapper = TopicConfigSerializeWrapper {
            topic_config_table: table.topics.clone(),
            data_version: table.version.clone(),
        };
        let bytes = serde_json::to_vec_pretty(&wrapper).unwrap_or_default();
        let persist = |e| TopicError::Persist {
            path: self.path.clone(),
            source: e,
        };
        if let Some(dir) = self.path.parent() {
            ferromq_store::fsutil::create_dir_all(dir).map_err(persist)?;
        }
        ferromq_store::fsutil::write_atomic(&self.path, &bytes).map_err(persist)
    }
}

/// A topic config with `queue_nums` read and write queues and read-write permission.
pub fn topic_with_queues(name: &str, queue_nums: u32) -> TopicConfig {
    let mut config = TopicConfig::new(name);
    config.read_queue_nums = queue_nums as i32;
    config.write_queue_nums = queue_nums as i32;
    config.perm = PERM_READ | PERM_WRITE;
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_persist_and_names_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let manager = TopicManager::load(dir.path(), true, 4).unwrap();
        assert_eq!(manager.get(AUTO_CREATE_TOPIC).unwrap().perm, 7);
        assert!(manager.upsert(topic_with_queues("Orders", 3)).unwrap());
        assert!(!manager.upsert(topic_with_queues("Orders", 3)).unwrap());
        assert!(matches!(
            manager.upsert(topic_with_queues("bad topic", 1)),
            Err(TopicError::InvalidName(_))
        ));
        let version = manager.snapshot().data_version.counter;
        drop(manager);
        let manager = TopicManager::load(dir.path(), false, 4).unwrap();
        assert_eq!(manager.get("Orders").unwrap().write_queue_nums, 3);
        assert!(
            manager.get(AUTO_CREATE_TOPIC).is_none(),
            "TBW102 goes when auto-create is off"
        );
        assert!(manager.snapshot().data_version.counter > version);
    }
}
