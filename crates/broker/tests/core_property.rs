//! A property test over the broker core (issue 11): random sequences of commits, corrections,
//! resets, member joins, leaves and reconnects (same client id, new connection) and broker
//! restarts, checked against a model of invariant 3:
//!
//! - no commit lands below an acknowledged reset's offset, and no commit from a client that
//!   was online at a reset lands before it has followed the reset (pulled the queue), across
//!   reconnects and restarts;
//! - every other commit is judged by the monotone rule (regression, past max);
//! - a fence recorded in the log comes back after a restart for every fenced client that has
//!   not committed since (a pull lifts a fence in memory only, so after a restart such a
//!   client must follow again — safe, at worst a duplicate delivery).
//!
//! The broker is driven through its remoting port with raw clients, so the property covers
//! the adapters and the core together.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use ferromq_broker::{codes, Broker, BrokerConfig};
use ferromq_protocol::remoting::client::RemotingClient;
use ferromq_protocol::remoting::codes::response;
use ferromq_protocol::remoting::headers::offset::QueryConsumerOffsetResponseHeader;
use ferromq_protocol::remoting::headers::pull::PullMessageResponseHeader;
use ferromq_protocol::remoting::RemotingCommand;
use proptest::prelude::*;

use common::{client, commit, join_group, pull_request, query, reset_queue, send, TIMEOUT};

const TOPIC: &str = "P";
/// Messages on P/0: the queue's max offset.
const MAX: u64 = 12;
const CLIENTS: [&str; 3] = ["10.0.0.1@a", "10.0.0.2@b", "10.0.0.3@c"];

#[derive(Debug, Clone)]
enum Op {
    Join(usize),
    Leave(usize),
    Reconnect(usize),
    Commit(usize, u64),
    Correct(usize, u64),
    Pull(usize),
    Reset(u64),
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    let client = 0..CLIENTS.len();
    prop_oneof![
        3 => client.clone().prop_map(Op::Join),
        1 => client.clone().prop_map(Op::Leave),
        2 => client.clone().prop_map(Op::Reconnect),
        6 => (client.clone(), 0..=MAX + 1).prop_map(|(c, o)| Op::Commit(c, o)),
        1 => (client.clone(), 0..=MAX).prop_map(|(c, o)| Op::Correct(c, o)),
        3 => client.prop_map(Op::Pull),
        2 => (0..=MAX).prop_map(Op::Reset),
        1 => Just(Op::Restart),
    ]
}

/// One client: its connection (if any) and whether it identified itself (heartbeat).
#[derive(Default)]
struct Peer {
    connection: Option<RemotingClient>,
    joined: bool,
    /// Where it believes it is.
    position: u64,
}

/// The model: what the broker must answer.
struct Model {
    stored: u64,
    /// Clients fenced in the broker's memory.
    fenced: BTreeSet<usize>,
    /// Clients fenced as the log records it (recovered at a restart).
    recorded: BTreeSet<usize>,
}

fn config(dir: &std::path::Path) -> BrokerConfig {
    common::broker_config(dir, true)
}

async fn connect(broker: &Broker) -> RemotingClient {
    client(broker.local_addr()).await
}

async fn correction(client: &RemotingClient, offset: u64) -> RemotingCommand {
    let command = common::commit_request(TOPIC, 0, offset as i64, true);
    client
        .invoke(command, TIMEOUT)
        .await
        .expect("correction reply")
}

/// Waits until the broker no longer counts `id` as a member (its connection closed).
async fn await_gone(broker: &Broker, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while broker
        .context()
        .clients
        .consumer_ids("G")
        .iter()
        .any(|c| c == id)
    {
        assert!(Instant::now() < deadline, "{id} still registered");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn stored(client: &RemotingClient) -> u64 {
    let reply = query(client, TOPIC, 0).await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    reply
        .decode_header::<QueryConsumerOffsetResponseHeader>()
        .unwrap()
        .offset as u64
}

/// Whether peer `c`'s commits are fenced: it is, by name, or it has not identified itself
/// and the queue fences anyone.
fn is_fenced(model: &Model, peers: &[Peer], c: usize) -> bool {
    if peers[c].joined {
        model.fenced.contains(&c)
    } else {
        !model.fenced.is_empty()
    }
}

/// The expected code of a commit of `offset` by peer `c` (and the model's change).
fn expect_commit(model: &mut Model, peers: &[Peer], c: usize, offset: u64) -> i32 {
    let identified = peers[c].joined;
    let fenced = is_fenced(model, peers, c);
    if fenced {
        // An offset equal to the stored one changes nothing and is answered SUCCESS.
        return if offset == model.stored {
            response::SUCCESS
        } else {
            codes::COMMIT_STALE_GENERATION
        };
    }
    if offset > MAX {
        return codes::COMMIT_PAST_MAX;
    }
    if offset < model.stored {
        return codes::COMMIT_REGRESSION;
    }
    if offset > model.stored {
        model.stored = offset;
        // An applied commit from an identified client lifts its recorded fence.
        if identified {
            model.recorded.remove(&c);
        }
    }
    response::SUCCESS
}

fn expect_correction(model: &Model, peers: &[Peer], c: usize, offset: u64) -> i32 {
    if is_fenced(model, peers, c) {
        codes::COMMIT_STALE_GENERATION
    } else if offset == model.stored {
        response::SUCCESS
    } else if offset < model.stored {
        // The stored offset is inside the queue: nothing to correct.
        codes::COMMIT_REGRESSION
    } else {
        codes::COMMIT_REJECTED
    }
}

async fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(config(dir.path())).await.unwrap();
    let admin = connect(&broker).await;
    for i in 0..MAX {
        send(&admin, TOPIC, 0, format!("m{i}").as_bytes(), "t").await;
    }
    let mut admin = Some(admin);
    let mut peers: Vec<Peer> = (0..CLIENTS.len()).map(|_| Peer::default()).collect();
    let mut model = Model {
        stored: 0,
        fenced: BTreeSet::new(),
        recorded: BTreeSet::new(),
    };
    assert_eq!(
        commit(admin.as_ref().unwrap(), TOPIC, 0, 0).await.code,
        response::SUCCESS
    );
    for (step, op) in ops.into_iter().enumerate() {
        match op {
            Op::Join(c) | Op::Reconnect(c) => {
                if matches!(op, Op::Reconnect(_)) || peers[c].connection.is_none() {
                    if peers[c].connection.take().is_some() && peers[c].joined {
                        await_gone(&broker, CLIENTS[c]).await;
                    }
                    peers[c].connection = Some(connect(&broker).await);
                }
                join_group(peers[c].connection.as_ref().unwrap(), CLIENTS[c], TOPIC).await;
                peers[c].joined = true;
            }
            Op::Leave(c) => {
                if peers[c].connection.take().is_some() && peers[c].joined {
                    await_gone(&broker, CLIENTS[c]).await;
                }
                peers[c].joined = false;
            }
            Op::Commit(c, offset) | Op::Correct(c, offset) => {
                if peers[c].connection.is_none() {
                    peers[c].connection = Some(connect(&broker).await);
                    peers[c].joined = false;
                }
                let connection = peers[c].connection.as_ref().unwrap();
                let (expected, reply) = if let Op::Commit(..) = op {
                    let expected = expect_commit(&mut model, &peers, c, offset);
                    (expected, commit(connection, TOPIC, 0, offset as i64).await)
                } else {
                    let expected = expect_correction(&model, &peers, c, offset);
                    (expected, correction(connection, offset).await)
                };
                assert_eq!(
                    reply.code, expected,
                    "step {step}: {op:?} ({:?})",
                    reply.remark
                );
            }
            Op::Pull(c) => {
                let Some(connection) = peers[c].connection.as_ref() else {
                    continue;
                };
                let at = peers[c].position;
                let pull = pull_request("G", TOPIC, 0, at as i64, 0, "*", None);
                let reply = connection.invoke(pull, TIMEOUT).await.unwrap();
                if peers[c].joined && model.fenced.remove(&c) && at != model.stored {
                    assert_eq!(
                        reply.code,
                        response::PULL_OFFSET_MOVED,
                        "step {step}: {op:?}"
                    );
                    let header: PullMessageResponseHeader = reply.decode_header().unwrap();
                    assert_eq!(header.next_begin_offset as u64, model.stored);
                    peers[c].position = model.stored;
                } else {
                    assert_ne!(
                        reply.code,
                        response::PULL_OFFSET_MOVED,
                        "step {step}: {op:?}"
                    );
                    peers[c].position = model.stored;
                }
            }
            Op::Reset(offset) => {
                let reply = reset_queue(admin.as_ref().unwrap(), TOPIC, 0, offset as i64).await;
                assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
                let online: BTreeSet<usize> = (0..CLIENTS.len())
                    .filter(|c| peers[*c].connection.is_some() && peers[*c].joined)
                    .collect();
                model.fenced.extend(online);
                model.recorded.extend(model.fenced.iter().copied());
                model.stored = offset;
            }
            Op::Restart => {
                for peer in &mut peers {
                    peer.connection = None;
                    peer.joined = false;
                }
                drop(admin.take());
                broker.shutdown().await.unwrap();
                broker = Broker::start(config(dir.path())).await.unwrap();
                admin = Some(connect(&broker).await);
                model.fenced = model.recorded.clone();
            }
        }
        assert_eq!(
            stored(admin.as_ref().unwrap()).await,
            model.stored,
            "step {step}: {op:?}: the stored offset"
        );
    }
    drop(admin);
    broker.shutdown().await.unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn commits_never_undo_an_acknowledged_reset(ops in proptest::collection::vec(op(), 1..30)) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(run(ops));
    }
}
