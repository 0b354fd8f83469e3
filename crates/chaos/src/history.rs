//! The recorded history of a chaos run: what every producer and consumer did and saw.
//!
//! A history is a list of [`Event`]s in the order the harness observed them, each stamped with
//! the milliseconds since the run started. It is serialisable (one JSON object per line), so a
//! run's history can be saved and checked again later.
//!
//! Values are `producer:counter` pairs ([`Value`]): unique per run, counters dense per producer
//! starting at 0, so the checker can tell exactly which sends were lost, duplicated or never
//! sent.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One message value: sent once by `producer` with its `counter`th send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Value {
    /// The producer's id within the run.
    pub producer: u32,
    /// Dense per producer, from 0.
    pub counter: u64,
}

impl Value {
    /// The value `producer:counter`.
    pub fn new(producer: u32, counter: u64) -> Value {
        Value { producer, counter }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.producer, self.counter)
    }
}

/// A message body that is not `producer:counter`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a chaos value (expected `producer:counter`): {0:?}")]
pub struct BadValue(pub String);

impl FromStr for Value {
    type Err = BadValue;

    fn from_str(text: &str) -> Result<Value, BadValue> {
        let bad = || BadValue(text.to_owned());
        let (producer, counter) = text.split_once(':').ok_or_else(bad)?;
        Ok(Value {
            producer: producer.parse().map_err(|_| bad())?,
            counter: counter.parse().map_err(|_| bad())?,
        })
    }
}

/// A message queue: broker name and queue id, as in a topic route.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Queue {
    /// The broker name (not its address: the name survives restarts and failover).
    pub broker: String,
    /// The queue id within the topic on that broker.
    pub queue_id: u32,
}

impl fmt::Display for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.broker, self.queue_id)
    }
}

/// Who performed an operation: a producer or a consumer session.
///
/// A consumer `session` starts at 0 and is incremented each time the harness restarts that
/// consumer, so deliveries after a restart can be told apart from those before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ConsumerId {
    /// The consumer's id within the run (stable across its restarts).
    pub consumer: u32,
    /// Incremented on every restart of this consumer.
    pub session: u32,
}

/// The kind of consumer, for reports: they differ in how commits travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConsumerKind {
    /// `PullConsumer` with explicit commits after each processed batch.
    Pull,
    /// `PushConsumer` (smallest in-flight offset committed in the background).
    Push,
}

/// What a server node was when a fault hit it: a fault's effect on acknowledged data depends
/// on it (a name-server kill never excuses a loss; a master kill may, under ASYNC_MASTER or
/// ASYNC_FLUSH).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum NodeRole {
    /// `ferromq standalone`: name server and the only broker (the master of its data).
    #[default]
    Standalone,
    /// The master of a broker group at the time of the fault.
    Master,
    /// A slave (replica) of a broker group.
    Slave,
    /// A controller (Raft group member), leader or follower.
    Controller,
    /// A name server.
    Namesrv,
}

impl NodeRole {
    /// True for a node whose death can take acknowledged-but-unprotected data with it (the
    /// writer of its group's log).
    pub fn holds_master_log(self) -> bool {
        matches!(self, NodeRole::Standalone | NodeRole::Master)
    }

    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            NodeRole::Standalone => "standalone",
            NodeRole::Master => "master",
            NodeRole::Slave => "slave",
            NodeRole::Controller => "controller",
            NodeRole::Namesrv => "namesrv",
        }
    }
}

/// An injected fault, or its healing.
///
/// `role` is what the node was when the fault was injected (absent in histories saved before
/// roles were recorded: `standalone`). `link` names the proxied connection a partition cuts
/// (`client-broker`, `ha`, `broker-controller`, `controller-controller`, `broker-namesrv`;
/// absent: `client-broker`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "fault", rename_all = "snake_case")]
pub enum Fault {
    /// kill -9 of a server process (`node` names it, e.g. `standalone`, `broker-0-r1`).
    Kill {
        node: String,
        #[serde(default)]
        role: NodeRole,
    },
    /// The killed process was started again.
    Restart {
        node: String,
        #[serde(default)]
        role: NodeRole,
    },
    /// SIGSTOP of a server process.
    Pause {
        node: String,
        #[serde(default)]
        role: NodeRole,
    },
    /// SIGCONT after a pause.
    Resume {
        node: String,
        #[serde(default)]
        role: NodeRole,
    },
    /// The proxy on `link` in front of `node` starts to `mode` ("drop", "stall", "slow",
    /// "drop-replies", "drop-requests").
    Partition {
        node: String,
        mode: String,
        #[serde(default = "client_link")]
        link: String,
    },
    /// The proxy forwards normally again.
    Heal {
        node: String,
        #[serde(default = "client_link")]
        link: String,
    },
    /// A consumer was stopped (not gracefully: no final commit) and started again.
    RestartConsumer { consumer: u32 },
    /// `resetOffsetByTime` was run for the group (see [`Op::Reset`] for its result).
    Reset,
}

fn client_link() -> String {
    "client-broker".to_string()
}

impl Fault {
    /// The short name used by `--faults` and in reports.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Kill { .. } | Fault::Restart { .. } => "kill",
            Fault::Pause { .. } | Fault::Resume { .. } => "pause",
            Fault::Partition { .. } | Fault::Heal { .. } => "partition",
            Fault::RestartConsumer { .. } => "restart-consumer",
            Fault::Reset => "reset",
        }
    }
}

/// One operation or observation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// A producer is about to send `value`.
    SendInvoke { value: Value },
    /// The broker acknowledged the send: `value` is stored at (`queue`, `offset`).
    SendOk {
        value: Value,
        queue: Queue,
        offset: u64,
    },
    /// The send definitely did not store the value (the broker answered an error).
    SendFail { value: Value, error: String },
    /// The outcome is unknown (timeout, connection lost): the value may or may not be stored.
    SendInfo { value: Value, error: String },
    /// A consumer session starts consuming `queue` at `offset` (the committed offset it read,
    /// or the position its consume-from rule chose). The first delivery of the queue in this
    /// session must be at `offset` (property K7).
    QueueStart {
        consumer: ConsumerId,
        kind: ConsumerKind,
        queue: Queue,
        offset: u64,
    },
    /// A consumer session stopped consuming `queue` (rebalanced away, or the session ended).
    QueueStop { consumer: ConsumerId, queue: Queue },
    /// A message was handed to a consumer's application code.
    Deliver {
        consumer: ConsumerId,
        queue: Queue,
        offset: u64,
        value: Value,
    },
    /// The broker acknowledged a commit of `offset` (the next offset to consume) for `queue`.
    /// `sent_ms` is when the commit request was sent (run clock), when the recorder knows it:
    /// the event's own `at_ms` is when its acknowledgement arrived.
    CommitOk {
        consumer: ConsumerId,
        queue: Queue,
        offset: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sent_ms: Option<u64>,
    },
    /// A commit was rejected (stale generation, regression) or could not be sent.
    CommitFail {
        consumer: ConsumerId,
        queue: Queue,
        offset: u64,
        error: String,
    },
    /// An observer read the group's committed offset of `queue` and the queue's max offset
    /// (for K4 monotone commits and K5 commit ≤ max). `generation` is the reset generation
    /// when the observer knows it.
    Observe {
        queue: Queue,
        committed: Option<u64>,
        max_offset: u64,
        generation: Option<u64>,
    },
    /// An acknowledged reset: the group's offsets moved to these values (new generation).
    Reset {
        offsets: Vec<(Queue, u64)>,
        generation: Option<u64>,
    },
    /// A reset that failed without saying it was not applied (the connection closed, the
    /// reply timed out, or the record was written but not yet durable): it may still take
    /// effect later, for instance once a failover exposes its record. The harness asks again
    /// with the same timestamp until one attempt is acknowledged ([`Op::Reset`]); until then
    /// the checker treats the reset as pending.
    ResetUnsettled { error: String },
    /// A fault was injected or healed.
    Fault(Fault),
    /// The harness saw broker group `group` get a new master: `master` (a node name) at
    /// master epoch `epoch` (higher than any seen before for the group).
    Failover {
        group: String,
        master: String,
        epoch: u64,
    },
    /// Faults are over; consumers drain from here on.
    DrainStart,
    /// The drain ended: `complete` is true when every acknowledged value was delivered
    /// before the deadline.
    DrainEnd { complete: bool },
}

/// An operation stamped with the time it was observed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Milliseconds since the run started.
    pub at_ms: u64,
    /// What happened.
    #[serde(flatten)]
    pub op: Op,
}

/// The events of one run, in observation order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    /// Every event, in the order the harness recorded it.
    pub events: Vec<Event>,
}

/// A line of a saved history that is not an event.
#[derive(Debug, thiserror::Error)]
#[error("history line {line}: {source}")]
pub struct BadHistoryLine {
    /// 1-based line number.
    pub line: usize,
    /// Why it did not parse.
    #[source]
    pub source: serde_json::Error,
}

impl History {
    /// An empty history.
    pub fn new() -> History {
        History::default()
    }

    /// Appends `op` observed at `at_ms`.
    pub fn push(&mut self, at_ms: u64, op: Op) {
        self.events.push(Event { at_ms, op });
    }

    /// The history as JSON lines, one event per line.
    pub fn to_json_lines(&self) -> String {
        let mut out = String::new();
        for event in &self.events {
            // Serialising these plain types cannot fail: no maps with non-string keys, no
            // non-finite floats.
            out.push_str(&serde_json::to_string(event).expect("events serialise"));
            out.push('\n');
        }
        out
    }

    /// Parses JSON lines written by [`History::to_json_lines`]; blank lines are skipped.
    pub fn from_json_lines(text: &str) -> Result<History, BadHistoryLine> {
        let mut history = History::new();
        for (index, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let event = serde_json::from_str(line).map_err(|source| BadHistoryLine {
                line: index + 1,
                source,
            })?;
            history.events.push(event);
        }
        Ok(history)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_through_text() {
        let value: Value = "3:17".parse().unwrap();
        assert_eq!(value, Value::new(3, 17));
        assert_eq!(value.to_string(), "3:17");
        assert!("3".parse::<Value>().is_err());
        assert!("a:1".parse::<Value>().is_err());
        assert!("1:-1".parse::<Value>().is_err());
    }

    #[test]
    fn histories_round_trip_through_json_lines() {
        let queue = Queue {
            broker: "broker-a".into(),
            queue_id: 2,
        };
        let consumer = ConsumerId {
            consumer: 1,
            session: 0,
        };
        let mut history = History::new();
        history.push(
            0,
            Op::SendInvoke {
                value: Value::new(0, 0),
            },
        );
        history.push(
            3,
            Op::SendOk {
                value: Value::new(0, 0),
                queue: queue.clone(),
                offset: 0,
            },
        );
        history.push(
            5,
            Op::Deliver {
                consumer,
                queue: queue.clone(),
                offset: 0,
                value: Value::new(0, 0),
            },
        );
        history.push(
            6,
            Op::Fault(Fault::Kill {
                node: "standalone".into(),
                role: NodeRole::Standalone,
            }),
        );
        history.push(
            6,
            Op::Failover {
                group: "broker-a".into(),
                master: "broker-a-r1".into(),
                epoch: 2,
            },
        );
        history.push(
            7,
            Op::Reset {
                offsets: vec![(queue, 0)],
                generation: Some(1),
            },
        );
        history.push(9, Op::DrainEnd { complete: true });
        let text = history.to_json_lines();
        assert_eq!(text.lines().count(), 7);
        let old = History::from_json_lines(
            "{\"at_ms\":1,\"op\":\"fault\",\"fault\":\"kill\",\"node\":\"standalone\"}\n",
        )
        .unwrap();
        assert_eq!(
            old.events[0].op,
            Op::Fault(Fault::Kill {
                node: "standalone".into(),
                role: NodeRole::Standalone
            })
        );
        assert_eq!(History::from_json_lines(&text).unwrap(), history);
        let err = History::from_json_lines("{\"at_ms\":1}\n").unwrap_err();
        assert_eq!(err.line, 1);
    }
}
