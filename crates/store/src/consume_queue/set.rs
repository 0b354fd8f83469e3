//! All ConsumeQueues of a store, found under `consumequeue/<topic>/<queueId>/`.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::{ConsumeQueue, CqError, CqOpenReport};
use crate::error::FileError;
use crate::fsutil;

/// Every ConsumeQueue, by topic and queue id.
#[derive(Debug)]
pub struct ConsumeQueueSet {
    dir: PathBuf,
    entries_per_file: u64,
    queues: HashMap<String, BTreeMap<u32, ConsumeQueue>>,
}

impl ConsumeQueueSet {
    /// Opens every queue under `dir`; the report lists queues that need a rebuild.
    pub fn open(
        dir: &Path,
        entries_per_file: u64,
    ) -> Result<(ConsumeQueueSet, Vec<(String, CqOpenReport)>), CqError> {
        fsutil::create_dir_all(dir)?;
        let mut set = ConsumeQueueSet {
            dir: dir.to_path_buf(),
            entries_per_file,
            queues: HashMap::new(),
        };
        let mut reports = Vec::new();
        for topic_dir in list_dirs(dir)? {
            let topic = topic_dir
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            for queue_dir in list_dirs(&topic_dir)? {
                let name = queue_dir
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                let queue_id: u32 = name.parse().map_err(|_| CqError::Foreign {
                    path: queue_dir.clone(),
                    reason: "queue directory name is not a queue id".into(),
                })?;
                let label = format!("{topic}/{queue_id}");
                let (queue, report) =
                    ConsumeQueue::open(label.clone(), &queue_dir, entries_per_file)?;
                if report != CqOpenReport::default() {
                    reports.push((label, report));
                }
                set.queues
                    .entry(topic.clone())
                    .or_default()
                    .insert(queue_id, queue);
            }
        }
        Ok((set, reports))
    }

    /// The queue, if it exists.
    pub fn get(&self, topic: &str, queue_id: u32) -> Option<&ConsumeQueue> {
        self.queues
            .get(topic)
            .and_then(|queues| queues.get(&queue_id))
    }

    /// The queue, created on first use.
    ///
    /// # Errors
    /// [`CqError::InvalidName`] before any path is built when `topic` breaks the naming rules;
    /// a file error when the queue's directory cannot be created or listed.
    pub fn get_or_create(
        &mut self,
        topic: &str,
        queue_id: u32,
    ) -> Result<&mut ConsumeQueue, CqError> {
        // The dispatcher calls this for every record: no allocation and one search of the
        // topic's queues when the queue exists. A topic entry is only added together with its
        // first queue, so every topic in the map has at least one queue.
        if !self.queues.contains_key(topic) {
            let queue = open_new_queue(&self.dir, self.entries_per_file, topic, queue_id)?;
            self.queues
                .insert(topic.to_string(), BTreeMap::from([(queue_id, queue)]));
        }
        let queues = self.queues.get_mut(topic).expect("inserted above");
        match queues.entry(queue_id) {
            Entry::Occupied(existing) => Ok(existing.into_mut()),
            Entry::Vacant(vacant) => {
                let queue = open_new_queue(&self.dir, self.entries_per_file, topic, queue_id)?;
                Ok(vacant.insert(queue))
            }
        }
    }

    /// Every queue, mutable.
    pub fn all_mut(&mut self) -> impl Iterator<Item = &mut ConsumeQueue> {
        self.queues
            .values_mut()
            .flat_map(|queues| queues.values_mut())
    }

    /// (topic, queue id, queue) for every queue.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u32, &ConsumeQueue)> {
        self.queues.iter().flat_map(|(topic, queues)| {
            queues
                .iter()
                .map(move |(queue_id, queue)| (topic.as_str(), *queue_id, queue))
        })
    }

    /// Queue ids of a topic.
    pub fn queue_ids(&self, topic: &str) -> Vec<u32> {
        self.queues
            .get(topic)
            .map(|q| q.keys().copied().collect())
            .unwrap_or_default()
    }

    /// Topics with at least one queue.
    pub fn topics(&self) -> Vec<String> {
        let mut topics: Vec<String> = self.queues.keys().cloned().collect();
        topics.sort();
        topics
    }

    /// Next queue offset of every queue, by topic.
    pub fn max_offsets(&self) -> HashMap<String, HashMap<u32, u64>> {
        self.queues
            .iter()
            .map(|(topic, queues)| {
                (
                    topic.clone(),
                    queues.iter().map(|(id, q)| (*id, q.max_offset())).collect(),
                )
            })
            .collect()
    }
}

/// Opens (creating its directory) the queue of (topic, queue_id) under `dir`, after checking
/// the topic name before any path is built from it.
fn open_new_queue(
    dir: &Path,
    entries_per_file: u64,
    topic: &str,
    queue_id: u32,
) -> Result<ConsumeQueue, CqError> {
    ferromq_protocol::names::validate_topic(topic)?;
    let queue_dir = dir.join(topic).join(queue_id.to_string());
    let (queue, _) =
        ConsumeQueue::open(format!("{topic}/{queue_id}"), &queue_dir, entries_per_file)?;
    Ok(queue)
}

fn list_dirs(dir: &Path) -> Result<Vec<PathBuf>, CqError> {
    let mut dirs = Vec::new();
    let listing = std::fs::read_dir(dir).map_err(|e| FileError::new("list", dir, e))?;
    for item in listing {
        let item = item.map_err(|e| FileError::new("list", dir, e))?;
        let path = item.path();
        if !path.is_dir() {
            return Err(CqError::Foreign {
                path,
                reason: "expected a directory".into(),
            });
        }
        dirs.push(path);
    }
    dirs.sort();
    Ok(dirs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queue that cannot be created leaves no trace: no topic without queues appears.
    #[test]
    fn a_refused_queue_adds_no_topic_and_an_existing_topic_gains_queues() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut set, _) = ConsumeQueueSet::open(dir.path(), 16).expect("open");
        assert!(set.get_or_create("bad/name", 0).is_err());
        assert!(set.topics().is_empty());
        set.get_or_create("T", 3).expect("create");
        set.get_or_create("T", 1).expect("create");
        set.get_or_create("T", 3).expect("existing");
        assert_eq!(set.topics(), ["T"]);
        assert_eq!(set.queue_ids("T"), [1, 3]);
        let (reopened, _) = ConsumeQueueSet::open(dir.path(), 16).expect("reopen");
        assert_eq!(reopened.queue_ids("T"), [1, 3]);
    }
}
