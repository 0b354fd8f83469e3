//! Property: whatever a client sends — sends (all three codes) to any topic with any
//! properties (`REAL_TOPIC`, `REAL_QID`, `DELAY`, system topic names, path-like and overlong
//! names) and bodies that are forged offset records, commits and pull-commits naming any group
//! and topic — a group's offset changes only through that group's own successful commit,
//! nothing is created outside the data directory, and dispatch never stops.
//!
//! One broker serves every case (bounded by [`CASES`] × [`OPS_MAX`] requests); each case is
//! checked against the state before it, and a last check runs after every delayed message
//! had time to fire.

mod common;
mod hostile;

use std::collections::BTreeMap;
use std::time::Duration;

use ferromq_broker::Broker;
use ferromq_protocol::remoting::client::RemotingClient;
use ferromq_protocol::remoting::codes::response;
use ferromq_store::offsets::{OffsetCommand, OffsetEntry, OffsetKind};
use hostile::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// Cases run: bounded so the test takes seconds.
const CASES: u32 = 24;
/// Requests per case at most.
const OPS_MAX: usize = 10;
/// Groups with offsets that no generated request commits for: only forgery could move them.
const VICTIMS: &[&str] = &["Victim", "Victim2"];
/// Longest the final check waits for delayed messages (1 s levels) to fire.
const SETTLE: Duration = Duration::from_millis(2_500);

/// One hostile request.
#[derive(Debug, Clone)]
enum Op {
    /// A send with this code (0: V1, 1: V2, 2: batch).
    Send {
        code: u8,
        topic: String,
        properties: Vec<(String, String)>,
        forged_body: Option<usize>,
    },
    /// UPDATE_CONSUMER_OFFSET.
    Commit {
        group: String,
        topic: String,
        queue_id: i32,
        offset: i64,
    },
    /// A pull carrying a commit.
    PullCommit {
        group: String,
        topic: String,
        queue_id: i32,
        offset: i64,
    },
}

fn topic() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("T0".to_string()),
        Just("T1".to_string()),
        Just("SCHEDULE_TOPIC_XXXX".to_string()),
        Just("RMQ_SYS_FERROMQ_OFFSETS".to_string()),
        Just("RMQ_SYS_TRANS_HALF_TOPIC".to_string()),
        Just("RMQ_SYS_TRANS_OP_HALF_TOPIC".to_string()),
        Just("RMQ_SYS_FERROMQ_SCHEDULE_DLQ".to_string()),
        Just("TBW102".to_string()),
        Just("%RETRY%G0".to_string()),
        Just("../../x".to_string()),
        Just("../escape".to_string()),
        Just("t".repeat(300)),
        Just("t".repeat(128)),
        "[a-zA-Z0-9%|_./ -]{1,12}",
    ]
}

fn group() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("G0".to_string()),
        Just("G1".to_string()),
        Just("%SCHEDULE%".to_string()),
        Just("CID_RMQ_SYS_TRANS".to_string()),
        Just("../g".to_string()),
        "[a-zA-Z0-9%_./-]{1,10}".prop_filter("not a victim", |g| !VICTIMS.contains(&g.as_str())),
    ]
}

fn property() -> impl Strategy<Value = (String, String)> {
    prop_oneof![
        topic().prop_map(|t| ("REAL_TOPIC".to_string(), t)),
        prop_oneof![Just("0"), Just("1"), Just("99999"), Just("-1"), Just("x")]
            .prop_map(|q| ("REAL_QID".to_string(), q.to_string())),
        prop_oneof![Just("0"), Just("1"), Just("3"), Just("99"), Just("x")]
            .prop_map(|d| ("DELAY".to_string(), d.to_string())),
        "[a-z]{1,4}".prop_map(|t| ("TAGS".to_string(), t)),
    ]
}

/// A send aimed at the scheduler: its topic with a `REAL_TOPIC`, maybe a queue and a delay.
fn through_the_scheduler() -> impl Strategy<Value = Op> {
    (
        0u8..3,
        topic(),
        prop::collection::vec(property(), 0..3),
        prop::option::of(0usize..3),
    )
        .prop_map(|(code, target, mut properties, forged_body)| {
            properties.insert(0, ("REAL_TOPIC".to_string(), target));
            Op::Send {
                code,
                topic: "SCHEDULE_TOPIC_XXXX".to_string(),
                properties,
                forged_body,
            }
        })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => through_the_scheduler(),
        4 => (0u8..3, topic(), prop::collection::vec(property(), 0..4), prop::option::of(0usize..3))
            .prop_map(|(code, topic, properties, forged_body)| Op::Send {
                code,
                topic,
                properties,
                forged_body,
            }),
        2 => (group(), topic(), prop_oneof![Just(0), Just(1), Just(99999), Just(-1)], -1i64..20)
            .prop_map(|(group, topic, queue_id, offset)| Op::Commit { group, topic, queue_id, offset }),
        1 => (group(), topic(), 0i32..2, -1i64..20)
            .prop_map(|(group, topic, queue_id, offset)| Op::PullCommit { group, topic, queue_id, offset }),
    ]
}

/// Offset record bodies a forger would write: a commit forward, a reset back, a new group.
fn forged_body(which: usize) -> Vec<u8> {
    let (kind, group, generation, offset) = match which {
        0 => (OffsetKind::Commit, "Victim", None, 9),
        1 => (OffsetKind::Reset, "Victim", Some(1), 0),
        _ => (OffsetKind::Commit, "ForgedGroup", None, 5),
    };
    OffsetCommand {
        kind,
        group: group.into(),
        client_id: "forger".into(),
        generation,
        entries: vec![OffsetEntry {
            topic: "T0".into(),
            queue_id: 0,
            offset,
        }],
        fenced_clients: Vec::new(),
        access_key: None,
    }
    .encode()
    .unwrap()
}

type Offsets = BTreeMap<(String, String, u32), u64>;

/// Every stored offset of every group.
fn offsets(broker: &Broker) -> Offsets {
    let store = &broker.context().store;
    let mut out = Offsets::new();
    for group in store.groups().expect("offset view") {
        for (topic, queue_id, stored) in store.group_offsets(&group).expect("offset view") {
            out.insert((group.clone(), topic, queue_id), stored.offset);
        }
    }
    out
}

/// Runs one op; returns the offset a successful client commit stored, if any.
async fn run(c: &RemotingClient, op: &Op) -> Option<((String, String, u32), u64)> {
    match op {
        Op::Send {
            code,
            topic,
            properties,
            forged_body: forged,
        } => {
            let pairs: Vec<(&str, &str)> = properties
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect();
            let body = forged.map_or_else(|| b"payload".to_vec(), forged_body);
            let reply = match code {
                0 => send_v1(c, topic, &body, &pairs).await,
                1 => send(c, topic, &body, &pairs).await,
                _ => send_batch(c, topic, &body, &pairs).await,
            };
            if ferromq_protocol::names::is_reserved_topic(topic) {
                assert_eq!(
                    reply.code,
                    response::NO_PERMISSION,
                    "{op:?}: {:?}",
                    reply.remark
                );
            }
            None
        }
        Op::Commit {
            group,
            topic,
            queue_id,
            offset,
        } => {
            let reply = commit(c, group, topic, *queue_id, *offset).await;
            let internal = ferromq_protocol::names::is_internal_group(group)
                || ferromq_protocol::names::is_reserved_topic(topic);
            if internal && ferromq_protocol::names::validate_group(group).is_ok() {
                assert_eq!(
                    reply.code,
                    response::NO_PERMISSION,
                    "{op:?}: {:?}",
                    reply.remark
                );
            }
            let stored = reply.code == response::SUCCESS && *offset >= 0 && *queue_id >= 0;
            stored.then(|| {
                (
                    (group.clone(), topic.clone(), *queue_id as u32),
                    *offset as u64,
                )
            })
        }
        Op::PullCommit {
            group,
            topic,
            queue_id,
            offset,
        } => {
            let reply = invoke(c, pull_command(group, topic, *queue_id, 0, Some(*offset))).await;
            if ferromq_protocol::names::is_internal_group(group)
                && ferromq_protocol::names::validate_group(group).is_ok()
            {
                assert_eq!(reply.code, response::NO_PERMISSION, "{op:?}");
            }
            // The piggy-backed commit's outcome is not in the reply: it is judged by the
            // offsets check as the group's own commit path (allowed to move only this key).
            None
        }
    }
}

/// The keys a pull-commit in `ops` may have moved (its own group, topic and queue).
fn pull_commit_keys(ops: &[Op]) -> Vec<(String, String, u32)> {
    ops.iter()
        .filter_map(|op| match op {
            Op::PullCommit {
                group,
                topic,
                queue_id,
                ..
            } => Some((group.clone(), topic.clone(), *queue_id as u32)),
            _ => None,
        })
        .collect()
}

/// Checks the three properties after a case: offsets, files, dispatch.
async fn check(
    broker: &Broker,
    c: &RemotingClient,
    dir: &std::path::Path,
    before: &Offsets,
    committed: &BTreeMap<(String, String, u32), u64>,
    pulled: &[(String, String, u32)],
) -> Result<(), TestCaseError> {
    let store = &broker.context().store;
    store.dispatch_caught_up(TIMEOUT).await;
    let after = offsets(broker);
    for (key, value) in &after {
        if key.0 == "%SCHEDULE%" {
            // The scheduler's own progress: it may move, forward only.
            prop_assert!(
                before.get(key).is_none_or(|b| value >= b),
                "{key:?} went back"
            );
            continue;
        }
        let expected = committed.get(key).or(before.get(key));
        if pulled.contains(key) && expected != Some(value) {
            continue;
        }
        prop_assert_eq!(Some(value), expected, "offset of {:?} moved", key);
    }
    for key in before.keys() {
        prop_assert!(after.contains_key(key), "offset of {key:?} vanished");
    }
    prop_assert_eq!(
        entries(dir),
        vec!["data".to_string()],
        "a file outside the data dir"
    );
    let canary = send(c, "Canary", b"alive", &[]).await;
    prop_assert_eq!(canary.code, response::SUCCESS, "{:?}", canary.remark);
    let end = store.stats().written_end;
    let store = store.clone();
    let dispatched = tokio::task::spawn_blocking(move || store.wait_dispatched(end, TIMEOUT))
        .await
        .unwrap();
    prop_assert_eq!(dispatched, end, "dispatch stopped");
    prop_assert_eq!(broker.context().store.stats().undispatchable_records, 0);
    Ok(())
}

async fn setup(c: &RemotingClient) {
    for topic in ["T0", "T1"] {
        for i in 0..10 {
            let reply = send(c, topic, format!("m{i}").as_bytes(), &[]).await;
            assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
        }
    }
    for (victim, offset) in VICTIMS.iter().zip([3, 6]) {
        for topic in ["T0", "T1"] {
            assert_eq!(
                commit(c, victim, topic, 0, offset).await.code,
                response::SUCCESS
            );
        }
    }
}

#[test]
fn no_client_request_moves_another_groups_offset_escapes_the_data_dir_or_stops_dispatch() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (broker, c) = runtime.block_on(async {
        let broker = broker(dir.path()).await;
        let c = client(broker.local_addr()).await;
        setup(&c).await;
        (broker, c)
    });
    let victims_before = offsets(&broker);
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = prop::collection::vec(op(), 1..=OPS_MAX);
    let result = runner.run(&strategy, |ops| {
        runtime.block_on(async {
            let before = offsets(&broker);
            let mut committed = BTreeMap::new();
            for op in &ops {
                if let Some((key, offset)) = run(&c, op).await {
                    committed.insert(key, offset);
                }
            }
            check(
                &broker,
                &c,
                dir.path(),
                &before,
                &committed,
                &pull_commit_keys(&ops),
            )
            .await
        })
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
    runtime.block_on(async {
        // Every delayed message has fired by now: the victims are where setup left them.
        tokio::time::sleep(SETTLE).await;
        broker.context().store.dispatch_caught_up(TIMEOUT).await;
        let after = offsets(&broker);
        for (key, value) in &victims_before {
            if VICTIMS.contains(&key.0.as_str()) {
                assert_eq!(after.get(key), Some(value), "victim offset {key:?} moved");
            }
        }
        assert!(!broker
            .context()
            .store
            .groups()
            .expect("offset view")
            .iter()
            .any(|g| g == "ForgedGroup"));
        assert_eq!(entries(dir.path()), vec!["data".to_string()]);
        let metrics = &broker.context().metrics;
        eprintln!(
            "refused: reserved_topic {}, internal_group {}, invalid_name {}, schedule_target {}; \
             scheduler dead letters {}",
            metrics.refused_count("reserved_topic"),
            metrics.refused_count("internal_group"),
            metrics.refused_count("invalid_name"),
            metrics.refused_count("schedule_target"),
            metrics.scheduler_dead_letters()
        );
        broker.shutdown().await.unwrap();
    });
}
