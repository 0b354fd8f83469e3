//! All ConsumeQueues of a store, found under `consumequeue/<topic>/<queueId>/`.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::{ConsumeQueue, CqError, CqOpenReport};
use crate::error::FileError;
use crate::fsutil;

/// Every ConsumeQueue, by topic and queue id.
///
/// Invariants: `topics` only grows (no topic is ever dropped), so a position in it stays
/// valid; `index` maps each topic's name to its position; every topic has at least one
/// queue (a topic is added together with its first queue).
#[derive(Debug)]
pub struct ConsumeQueueSet {
    dir: PathBuf,
    entries_per_file: u64,
    index: HashMap<String, usize>,
    topics: Vec<TopicQueues>,
    /// Position of the topic the last [`ConsumeQueueSet::get_or_create`] found. The
    /// dispatcher meets runs of records of one topic (batches, one producer's burst); the
    /// next record of the run finds its topic by one comparison instead of hashing the name
    /// (SipHash, seeded: topic names are chosen by clients).
    last: Option<usize>,
    /// Queues appended to while tracking is on (the dispatcher turns it on for a hold when
    /// someone waits for a queue, `queue_waiters`), as (topic position, queue id), a run of
    /// one queue's records noted once; at most `TOUCHED_MAX`, past which `touched_overflow`.
    touched: Vec<(usize, u32)>,
    tracking: bool,
    touched_overflow: bool,
}

/// Most queues one hold of the dispatcher notes for wake-ups; past it every waiter is woken.
/// A hold covers about 128 KiB of log, so this is reached only by runs of tiny records
/// spread over thousands of queues.
pub const TOUCHED_MAX: usize = 4_096;

/// One topic's queues.
#[derive(Debug)]
struct TopicQueues {
    name: String,
    queues: BTreeMap<u32, ConsumeQueue>,
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
            index: HashMap::new(),
            topics: Vec::new(),
            last: None,
            touched: Vec::new(),
            tracking: false,
            touched_overflow: false,
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
                set.insert(&topic, queue_id, queue);
            }
        }
        Ok((set, reports))
    }

    /// The queue, if it exists.
    pub fn get(&self, topic: &str, queue_id: u32) -> Option<&ConsumeQueue> {
        self.queues_of(topic)
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
        // The dispatcher calls this for every record: no allocation, and no hash either
        // while the records' topic stays the same, when the queue exists.
        let position = match self.last.filter(|&at| self.topics[at].name == topic) {
            Some(at) => at,
            None => match self.index.get(topic) {
                Some(&at) => at,
                None => {
                    let queue = open_new_queue(&self.dir, self.entries_per_file, topic, queue_id)?;
                    self.insert(topic, queue_id, queue)
                }
            },
        };
        self.last = Some(position);
        if self.tracking {
            self.note_touched(position, queue_id);
        }
        match self.topics[position].queues.entry(queue_id) {
            Entry::Occupied(existing) => Ok(existing.into_mut()),
            Entry::Vacant(vacant) => {
                let queue = open_new_queue(&self.dir, self.entries_per_file, topic, queue_id)?;
                Ok(vacant.insert(queue))
            }
        }
    }

    /// Starts noting the queues appended to (`on`), or stops; either way forgets those noted.
    pub fn track_touched(&mut self, on: bool) {
        self.tracking = on;
        self.touched.clear();
        self.touched_overflow = false;
    }

    /// The queues appended to since tracking started, each once, or `None` when they were
    /// more than `TOUCHED_MAX`.
    pub fn touched(&mut self) -> Option<impl Iterator<Item = (&str, u32)>> {
        if self.touched_overflow {
            return None;
        }
        self.touched.sort_unstable();
        self.touched.dedup();
        let topics = &self.topics;
        Some(
            self.touched
                .iter()
                .map(move |&(at, queue_id)| (topics[at].name.as_str(), queue_id)),
        )
    }

    fn note_touched(&mut self, position: usize, queue_id: u32) {
        if self.touched.last() == Some(&(position, queue_id)) || self.touched_overflow {
            return;
        }
        if self.touched.len() >= TOUCHED_MAX {
            self.touched_overflow = true;
            self.touched.clear();
            return;
        }
        self.touched.push((position, queue_id));
    }

    /// Adds an opened queue (its topic too, when new); returns the topic's position.
    fn insert(&mut self, topic: &str, queue_id: u32, queue: ConsumeQueue) -> usize {
        let position = match self.index.get(topic) {
            Some(&at) => at,
            None => {
                self.topics.push(TopicQueues {
                    name: topic.to_string(),
                    queues: BTreeMap::new(),
                });
                let at = self.topics.len() - 1;
                self.index.insert(topic.to_string(), at);
                at
            }
        };
        self.topics[position].queues.insert(queue_id, queue);
        position
    }

    fn queues_of(&self, topic: &str) -> Option<&BTreeMap<u32, ConsumeQueue>> {
        self.index.get(topic).map(|&at| &self.topics[at].queues)
    }

    /// Every queue, mutable.
    pub fn all_mut(&mut self) -> impl Iterator<Item = &mut ConsumeQueue> {
        self.topics
            .iter_mut()
            .flat_map(|topic| topic.queues.values_mut())
    }

    /// (topic, queue id, queue) for every queue.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u32, &ConsumeQueue)> {
        self.topics.iter().flat_map(|topic| {
            topic
                .queues
                .iter()
                .map(move |(queue_id, queue)| (topic.name.as_str(), *queue_id, queue))
        })
    }

    /// Queue ids of a topic.
    pub fn queue_ids(&self, topic: &str) -> Vec<u32> {
        self.queues_of(topic)
            .map(|q| q.keys().copied().collect())
            .unwrap_or_default()
    }

    /// Topics with at least one queue.
    pub fn topics(&self) -> Vec<String> {
        let mut topics: Vec<String> = self.topics.iter().map(|t| t.name.clone()).collect();
        topics.sort();
        topics
    }

    /// Next queue offset of every queue, by topic.
    pub fn max_offsets(&self) -> HashMap<String, HashMap<u32, u64>> {
        self.topics
            .iter()
            .map(|topic| {
                (
                    topic.name.clone(),
                    topic
                        .queues
                        .iter()
                        .map(|(id, q)| (*id, q.max_offset()))
                        .collect(),
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

    /// Touched queues are noted once per run and each once when read; past `TOUCHED_MAX`
    /// distinct runs the set says "too many" (every waiter is then woken).
    #[test]
    fn touched_queues_are_noted_once_and_overflow_to_all() {
        let dir = tempfile::tempdir().unwrap();
        let (mut set, _) = ConsumeQueueSet::open(dir.path(), 8).unwrap();
        set.get_or_create("A", 0).unwrap();
        assert!(set.touched().unwrap().next().is_none(), "not tracking");
        set.track_touched(true);
        for queue_id in [1, 1, 0, 1, 0] {
            set.get_or_create("A", queue_id).unwrap();
        }
        set.get_or_create("B", 2).unwrap();
        let touched: Vec<(String, u32)> = set
            .touched()
            .unwrap()
            .map(|(t, q)| (t.to_string(), q))
            .collect();
        assert_eq!(touched, [("A".into(), 0), ("A".into(), 1), ("B".into(), 2)]);
        set.track_touched(true);
        assert!(
            set.touched().unwrap().next().is_none(),
            "forgotten at a new hold"
        );
        for run in 0..=TOUCHED_MAX {
            set.note_touched(0, (run % 2) as u32);
        }
        assert!(set.touched().is_none(), "more runs than TOUCHED_MAX");
        set.track_touched(false);
        assert!(set.touched().unwrap().next().is_none());
    }

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

    /// Runs of one topic are found through the remembered position: a lookup after another
    /// topic, after a refused name and after a new queue of the same topic still gives the
    /// queue of the topic and id asked for.
    #[test]
    fn every_lookup_finds_the_queue_asked_for_whatever_came_before() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut set, _) = ConsumeQueueSet::open(dir.path(), 16).expect("open");
        let asks = [
            ("T", 0),
            ("T", 0),
            ("U", 0),
            ("T", 0),
            ("T", 1),
            ("bad/name", 0),
            ("T", 1),
            ("U", 2),
            ("U", 0),
            ("bad/name", 1),
            ("U", 2),
        ];
        for (topic, queue_id) in asks {
            match set.get_or_create(topic, queue_id) {
                Ok(queue) => assert_eq!(queue.name(), format!("{topic}/{queue_id}")),
                Err(_) => assert_eq!(topic, "bad/name"),
            }
        }
        assert_eq!(set.topics(), ["T", "U"]);
        assert_eq!(set.queue_ids("T"), [0, 1]);
        assert_eq!(set.queue_ids("U"), [0, 2]);
        let names: Vec<String> = set.iter().map(|(t, q, _)| format!("{t}/{q}")).collect();
        assert_eq!(names, ["T/0", "T/1", "U/0", "U/2"]);
        assert_eq!(set.get("U", 2).map(|q| q.name()), Some("U/2"));
        assert!(set.get("U", 1).is_none());
    }
}
