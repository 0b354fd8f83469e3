//! `KvConfig`: the name server's namespaced key-value store (PUT_KV_CONFIG, GET_KV_CONFIG,
//! DELETE_KV_CONFIG, GET_KVLIST_BY_NAMESPACE).
//!
//! RocketMQ uses it mainly for namespace `ORDER_TOPIC_CONFIG` (topic → `brokerName:queueNums;…`),
//! which the name server adds to that topic's route as `orderTopicConf`.
//!
//! Invariant: a namespace exists only while it holds at least one key. The store is in memory
//! only; unlike RocketMQ's `kvConfig.json` it does not survive a restart.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

/// Namespace whose entries become a topic route's `orderTopicConf`.
pub const NAMESPACE_ORDER_TOPIC_CONFIG: &str = "ORDER_TOPIC_CONFIG";

/// Namespaced string table. Thread-safe; share it behind an `Arc`.
#[derive(Debug, Default)]
pub struct KvConfig {
    table: Mutex<BTreeMap<String, BTreeMap<String, String>>>,
}

impl KvConfig {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, BTreeMap<String, String>>> {
        // Each operation is a single map update, so a poisoned lock still guards valid data.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets `key` in `namespace`.
    pub fn put(&self, namespace: &str, key: &str, value: &str) {
        self.lock()
            .entry(namespace.to_owned())
            .or_default()
            .insert(key.to_owned(), value.to_owned());
        tracing::info!(namespace, key, value, "kv config put");
    }

    /// The value of `key` in `namespace`.
    pub fn get(&self, namespace: &str, key: &str) -> Option<String> {
        self.lock().get(namespace)?.get(key).cloned()
    }

    /// Removes `key` from `namespace`; returns whether it existed.
    pub fn delete(&self, namespace: &str, key: &str) -> bool {
        let mut t = self.lock();
        let Some(ns) = t.get_mut(namespace) else {
            return false;
        };
        let existed = ns.remove(key).is_some();
        if ns.is_empty() {
            t.remove(namespace);
        }
        if existed {
            tracing::info!(namespace, key, "kv config deleted");
        }
        existed
    }

    /// All entries of `namespace`; `None` when it holds none.
    pub fn list(&self, namespace: &str) -> Option<BTreeMap<String, String>> {
        self.lock().get(namespace).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_get_delete_list() {
        let kv = KvConfig::new();
        assert_eq!(kv.get("ns", "k"), None);
        kv.put("ns", "k", "v");
        kv.put("ns", "k2", "v2");
        assert_eq!(kv.get("ns", "k").as_deref(), Some("v"));
        assert_eq!(kv.list("ns").unwrap().len(), 2);
        assert!(kv.delete("ns", "k"));
        assert!(!kv.delete("ns", "k"));
        assert!(kv.delete("ns", "k2"));
        assert_eq!(kv.list("ns"), None);
    }
}
