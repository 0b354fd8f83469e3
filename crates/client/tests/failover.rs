//! Failover without a controller, in process on 127.0.0.1: broker group `fo` has master A
//! (SYNC_MASTER) and slave B replicating from it. A is shut down, B is switched to master
//! with `Replication::set_role` (its registration loop re-registers it at once as brokerId 0;
//! A's unregistration and closed connection already removed A from the name server). The Rust
//! client must follow: a producer sending to A goes on to B within its retry budget, a
//! lite-pull consumer resumes on B from exactly the offset B holds as committed, commits land
//! on B, and a commit racing the switch is either on B or an error.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{broker_config, broker_with, create_topic, namesrv, BrokerProc, Namesrv, T};
use ferromq_broker::replication::BrokerRole;
use ferromq_broker::BrokerConfig;
use ferromq_client::{
    LitePullConsumer, LitePullConsumerConfig, Message, MessageExt, MessageQueue, Producer,
    ProducerConfig, StartPosition,
};
use ferromq_protocol::remoting::body::decode_json;
use ferromq_protocol::remoting::body::route::TopicRouteData;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::namesrv::GetRouteInfoRequestHeader;
use ferromq_protocol::remoting::headers::offset::{
    QueryConsumerOffsetRequestHeader, QueryConsumerOffsetResponseHeader,
};
use ferromq_protocol::remoting::{RemotingClient, RemotingCommand};

const GROUP_NAME: &str = "fo";
/// Bound on every wait of these tests.
const WAIT: Duration = Duration::from_secs(20);
/// Bound on the switch as a producer sees it: from A's shutdown starting to the first send
/// stored by B (A's shutdown, B's role change and registration, one route fetch and a send).
const SWITCH_BOUND: Duration = Duration::from_secs(5);

/// A group of two brokers: A master, B its slave, in sync.
struct Group {
    ns: Namesrv,
    a: Option<BrokerProc>,
    b: BrokerProc,
    _dirs: [tempfile::TempDir; 2],
}

fn member_config(dir: &std::path::Path, ns: SocketAddr) -> BrokerConfig {
    BrokerConfig {
        ha_send_heartbeat_interval: 100,
        ha_max_time_slave_not_catchup: 1_000,
        sync_flush_timeout: 3_000,
        ..broker_config(dir, ns, GROUP_NAME, 0)
    }
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn group(topic: &str) -> Group {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let ns = namesrv().await;
    // SYNC_MASTER with two in-sync replicas: A acknowledges nothing B does not hold, also
    // while it shuts down (B's HA connection closing first cannot leave A acknowledging
    // alone), so an acknowledged commit is on B whatever the timing.
    let a = broker_with(BrokerConfig {
        broker_role: "SYNC_MASTER".into(),
        min_in_sync_replicas: 2,
        ..member_config(dirs[0].path(), ns.addr)
    })
    .await;
    let b = broker_with(BrokerConfig {
        broker_role: "SLAVE".into(),
        broker_id: 1,
        ha_master_address: Some(a.context().ha_addr.to_string()),
        ..member_config(dirs[1].path(), ns.addr)
    })
    .await;
    let replication = a.context().replication.clone();
    eventually("B in sync with A", || {
        replication.runtime().in_sync_members == 2
    })
    .await;
    create_topic(a.local_addr(), topic, 1).await;
    // B applies A's catalog records (the topic) from the replicated log; a promoted B
    // serves only topics it knows.
    let b_ctx = b.context();
    eventually("B knows the topic", || {
        b_ctx
            .topics
            .snapshot()
            .topic_config_table
            .contains_key(topic)
    })
    .await;
    let (a_addr, b_addr) = (a.local_addr(), b.local_addr());
    wait_members(ns.addr, topic, &[(0, a_addr), (1, b_addr)]).await;
    Group {
        ns,
        a: Some(a),
        b,
        _dirs: dirs,
    }
}

/// Waits until the name server's route of `topic` names exactly `members` (id, address).
async fn wait_members(ns: SocketAddr, topic: &str, members: &[(i64, SocketAddr)]) {
    let client = RemotingClient::connect(ns, T).await.unwrap();
    let want: Vec<(i64, String)> = members.iter().map(|(i, a)| (*i, a.to_string())).collect();
    let deadline = Instant::now() + WAIT;
    loop {
        let header = GetRouteInfoRequestHeader {
            topic: topic.into(),
            accept_standard_json_only: Some(true),
        };
        let cmd = RemotingCommand::request_with_header(request::GET_ROUTEINFO_BY_TOPIC, &header);
        let reply = client.invoke(cmd, T).await.unwrap();
        let got: Vec<(i64, String)> = if reply.code == response::SUCCESS {
            let data: TopicRouteData =
                decode_json(reply.body.as_deref().unwrap_or_default()).unwrap();
            data.broker_datas
                .first()
                .map(|b| {
                    b.broker_addrs
                        .iter()
                        .map(|(i, a)| (*i, a.clone()))
                        .collect()
                })
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "route of {topic} is {got:?}, never {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Group {
    /// The failover: A stops (it unregisters and its connections close), B becomes master
    /// and re-registers at once (its registration loop follows the role change).
    async fn fail_over(&mut self, topic: &str) {
        let a = self.a.take().expect("A runs");
        a.shutdown().await.expect("A shuts down");
        self.b
            .context()
            .replication
            .set_role(BrokerRole::AsyncMaster);
        wait_members(self.ns.addr, topic, &[(0, self.b.local_addr())]).await;
    }
}

/// The offset `addr` holds as committed for (group, topic, queue 0), `None` when none.
async fn committed_on(addr: SocketAddr, group: &str, topic: &str) -> Option<i64> {
    let client = RemotingClient::connect(addr, T).await.unwrap();
    let header = QueryConsumerOffsetRequestHeader {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id: 0,
        set_zero_if_not_found: Some(false),
    };
    let cmd = RemotingCommand::request_with_header(request::QUERY_CONSUMER_OFFSET, &header);
    let reply = client.invoke(cmd, T).await.unwrap();
    match reply.code {
        response::SUCCESS => {
            let h: QueryConsumerOffsetResponseHeader = reply.decode_header().unwrap();
            Some(h.offset)
        }
        response::QUERY_NOT_FOUND => None,
        code => panic!("query on {addr}: code {code} {:?}", reply.remark),
    }
}

fn producer(ns: SocketAddr) -> Producer {
    Producer::start(ProducerConfig {
        namesrv_addrs: vec![ns],
        group: "fo-producer".into(),
        send_timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(1),
        // Only failover refreshes the route: the timer never does within the test.
        route_max_age: Duration::from_secs(600),
        poll_name_server_interval: Duration::from_secs(600),
        ..ProducerConfig::default()
    })
    .unwrap()
}

/// A producer sending continuously to A goes on to B within its retry budget: no send fails,
/// the first send B stores comes within [`SWITCH_BOUND`] of the switch, retries are counted,
/// and only failover (not the 600 s timer) refreshed the route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_follows_the_new_master_within_its_retry_budget() {
    const TOPIC: &str = "FO_SEND";
    let mut g = group(TOPIC).await;
    let p = producer(g.ns.addr);
    let a_addr = g.a.as_ref().unwrap().local_addr();
    let b_addr = g.b.local_addr();
    let first = p.send(Message::new(TOPIC, "before")).await.unwrap();
    assert_eq!(first.attempts, 1);

    // Sends run back to back while the group fails over.
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let (p, stop) = (p.clone(), stop.clone());
        tokio::spawn(async move {
            let mut results = Vec::new();
            let mut i = 0u32;
            while !stop.load(Ordering::Acquire) && i < 100_000 {
                let sent = p.send(Message::new(TOPIC, format!("m{i}"))).await;
                results.push((Instant::now(), sent));
                i += 1;
            }
            results
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let switch_started = Instant::now();
    g.fail_over(TOPIC).await;
    // Keep sending until sends reached B for a while.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Release);
    let results = tokio::time::timeout(WAIT, sender).await.unwrap().unwrap();

    let failed: Vec<String> = results
        .iter()
        .filter_map(|(_, r)| r.as_ref().err().map(|e| e.to_string()))
        .collect();
    assert!(
        failed.is_empty(),
        "sends failed during the switch: {failed:?}"
    );
    // Every send is stored, the later ones by B: B's queue grows past what A had.
    let last = results.last().unwrap().1.as_ref().unwrap();
    let first_on_b = results
        .iter()
        .find(|(_, r)| r.as_ref().is_ok_and(|s| s.attempts > 1))
        .map(|(at, _)| *at);
    let retried = results
        .iter()
        .filter(|(_, r)| r.as_ref().is_ok_and(|s| s.attempts > 1))
        .count();
    let stats = p.stats();
    assert!(
        retried >= 1,
        "a send in flight at the switch was retried ({} sends)",
        results.len()
    );
    assert!(stats.send_retries >= retried as u64, "{stats:?}");
    assert!(stats.failover_route_fetches >= 1, "{stats:?}");
    let took = first_on_b
        .unwrap()
        .saturating_duration_since(switch_started);
    assert!(
        took < SWITCH_BOUND,
        "the first send after the switch took {took:?}"
    );
    // The last sends went to B: its route is the only one, and B answers.
    assert_eq!(p.routes().known_master(GROUP_NAME), Some(b_addr));
    assert_ne!(a_addr, b_addr);
    assert!(last.queue_offset >= first.queue_offset);
    // And B holds them: a send now is acknowledged by B at the next offset.
    let after = p.send(Message::new(TOPIC, "after")).await.unwrap();
    assert_eq!(after.attempts, 1);
    assert!(after.queue_offset > last.queue_offset);
    p.shutdown();
}

fn lite_config(ns: SocketAddr, group: &str) -> LitePullConsumerConfig {
    LitePullConsumerConfig {
        namesrv_addrs: vec![ns],
        group: group.into(),
        start_position: StartPosition::First,
        pull_hold: Duration::from_millis(200),
        request_timeout: Duration::from_secs(1),
        connect_timeout: Duration::from_secs(1),
        route_max_age: Duration::from_secs(600),
        retry_delay: Duration::from_millis(50),
        auto_commit_interval: None,
        ..LitePullConsumerConfig::default()
    }
}

async fn poll_n(c: &LitePullConsumer, want: usize) -> Vec<MessageExt> {
    let deadline = Instant::now() + WAIT;
    let mut got: Vec<MessageExt> = Vec::new();
    while got.len() < want {
        assert!(
            Instant::now() < deadline,
            "only {} of {want} messages arrived: {:?}",
            got.len(),
            got.iter().map(|m| m.queue_offset).collect::<Vec<_>>()
        );
        got.extend(c.poll(Duration::from_millis(100)).await.unwrap());
    }
    got
}

async fn send_n(p: &Producer, topic: &str, n: usize) {
    for i in 0..n {
        p.send(Message::new(topic, format!("x{i}"))).await.unwrap();
    }
}

/// A lite-pull consumer with committed progress (20) and polled but uncommitted messages
/// (20..30) continues on B from exactly the offset B holds as committed — 20, or 30 when
/// the commit racing the switch reached it — never from its in-memory position past it,
/// never from 0; that racing commit is `Ok` only if B holds it; later commits land on B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lite_pull_consumer_resumes_on_the_new_master_from_its_committed_offset() {
    const TOPIC: &str = "FO_PULL";
    const GROUP: &str = "fo-lite";
    let mut g = group(TOPIC).await;
    let p = producer(g.ns.addr);
    let a_addr = g.a.as_ref().unwrap().local_addr();
    let b_addr = g.b.local_addr();
    let queue = MessageQueue {
        topic: TOPIC.into(),
        broker_name: GROUP_NAME.into(),
        queue_id: 0,
    };
    send_n(&p, TOPIC, 20).await;
    let c = LitePullConsumer::start(lite_config(g.ns.addr, GROUP)).unwrap();
    c.assign(vec![queue.clone()]).await.unwrap();
    let got = poll_n(&c, 20).await;
    assert_eq!(got.first().unwrap().queue_offset, 0);
    let _ = c.commit().await.unwrap();
    assert_eq!(committed_on(a_addr, GROUP, TOPIC).await, Some(20));
    // SYNC_MASTER: B holds the acknowledged commit.
    assert_eq!(committed_on(b_addr, GROUP, TOPIC).await, Some(20));

    // Ten more, polled but not committed: the in-memory position is 30.
    send_n(&p, TOPIC, 10).await;
    let got = poll_n(&c, 10).await;
    assert_eq!(got.last().unwrap().queue_offset, 29);
    assert_eq!(c.position(&queue), Some(30));

    // A commit of 30 races the switch.
    let c = Arc::new(c);
    let racing = {
        let c = c.clone();
        tokio::spawn(async move { c.commit().await })
    };
    g.fail_over(TOPIC).await;
    let raced = tokio::time::timeout(WAIT, racing).await.unwrap().unwrap();
    // B exposes an offset record once its dispatcher (now a master's, bounded by its own
    // log end) has applied it: wait for that, bounded, before judging.
    let settle = Instant::now() + Duration::from_secs(2);
    let mut on_b = committed_on(b_addr, GROUP, TOPIC).await;
    while on_b != Some(30) && Instant::now() < settle {
        tokio::time::sleep(Duration::from_millis(20)).await;
        on_b = committed_on(b_addr, GROUP, TOPIC).await;
    }
    eprintln!(
        "racing commit: {:?}; B holds {on_b:?}",
        raced.as_ref().map(|_| ())
    );
    match &raced {
        Ok(_) => assert_eq!(on_b, Some(30), "an acknowledged commit is on B"),
        Err(_) => assert!(on_b == Some(20) || on_b == Some(30), "B holds {on_b:?}"),
    }

    // Five more, sent to B; the consumer reads on B from a committed offset B held: 20 or
    // 30 (30 once B's view shows the racing commit), never 0, never past B's, then densely.
    send_n(&p, TOPIC, 5).await;
    let deadline = Instant::now() + WAIT;
    let mut got: Vec<MessageExt> = Vec::new();
    while got.last().map(|m| m.queue_offset) != Some(34) {
        assert!(
            Instant::now() < deadline,
            "offset 34 never arrived: {:?}",
            got.iter().map(|m| m.queue_offset).collect::<Vec<_>>()
        );
        got.extend(c.poll(Duration::from_millis(100)).await.unwrap());
    }
    let offsets: Vec<u64> = got.iter().map(|m| m.queue_offset).collect();
    let resume_at = offsets[0];
    assert!(
        (resume_at == 20 || resume_at == 30) && Some(resume_at as i64) <= on_b,
        "resumed at {resume_at}, B holds {on_b:?}"
    );
    let expected: Vec<u64> = (resume_at..35).collect();
    assert_eq!(offsets, expected, "resumed on B at {resume_at}");

    // Its commit lands on B.
    let _ = c.commit().await.unwrap();
    assert_eq!(committed_on(b_addr, GROUP, TOPIC).await, Some(35));
    assert_eq!(c.committed(&queue).await.unwrap(), Some(35));
    assert!(c.pull_consumer().routes().master_generation(GROUP_NAME) >= 1);
    p.shutdown();
}

/// A demoted master that is still up answers NOT_MASTER (2111): a producer and a pull
/// consumer whose cached route still names it (the timer would refresh it only after 600 s)
/// fetch the route at once and go to the new master — the send on its second attempt, the
/// commit on the same call — and nothing is stored on the demoted one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_leave_a_demoted_master_that_answers_not_master() {
    const TOPIC: &str = "FO_DEMOTE";
    const GROUP: &str = "fo-pull";
    let g = group(TOPIC).await;
    let p = producer(g.ns.addr);
    let a = g.a.as_ref().unwrap();
    let (a_addr, b_addr) = (a.local_addr(), g.b.local_addr());
    let before = p.send(Message::new(TOPIC, "to A")).await.unwrap();
    let c = ferromq_client::PullConsumer::start(ferromq_client::PullConsumerConfig {
        namesrv_addrs: vec![g.ns.addr],
        group: GROUP.into(),
        pull_timeout: Duration::from_secs(1),
        connect_timeout: Duration::from_secs(1),
        route_max_age: Duration::from_secs(600),
        ..ferromq_client::PullConsumerConfig::default()
    })
    .unwrap();
    let queue = c.fetch_queues(TOPIC).await.unwrap()[0].clone();
    c.commit(&queue, 1).await.unwrap();
    assert_eq!(c.routes().known_master(GROUP_NAME), Some(a_addr));

    // A steps down first (a slave under its own id 2), then B takes over as master.
    a.context().replication.set_broker_id(2);
    a.context().replication.set_role(BrokerRole::Slave);
    wait_members(g.ns.addr, TOPIC, &[(1, b_addr), (2, a_addr)]).await;
    g.b.context().replication.set_role(BrokerRole::AsyncMaster);
    wait_members(g.ns.addr, TOPIC, &[(0, b_addr), (2, a_addr)]).await;

    // Both clients still hold the route naming A.
    assert_eq!(p.routes().known_master(GROUP_NAME), Some(a_addr));
    let started = Instant::now();
    let sent = p.send(Message::new(TOPIC, "to B")).await.unwrap();
    assert_eq!(sent.attempts, 2, "NOT_MASTER from A, then B");
    assert!(started.elapsed() < SWITCH_BOUND, "{:?}", started.elapsed());
    assert_eq!(sent.queue_offset, before.queue_offset + 1);
    assert_eq!(p.routes().known_master(GROUP_NAME), Some(b_addr));
    assert!(p.stats().failover_route_fetches >= 1);

    // The commit finds A refusing and lands on B in the same call.
    c.commit(&queue, 2).await.unwrap();
    assert_eq!(committed_on(b_addr, GROUP, TOPIC).await, Some(2));
    assert_eq!(c.routes().known_master(GROUP_NAME), Some(b_addr));
    // A read of the stored offset asks B too.
    assert_eq!(
        c.offset_store()
            .read(&queue, ferromq_client::ReadMode::Store)
            .await
            .unwrap(),
        Some(2)
    );
    p.shutdown();
}

/// A push consumer that consumed and committed 10 messages on A resumes on B from exactly
/// the offset B holds as committed (10: no rewind to 0, no skip), and its commits land on B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_consumer_resumes_on_the_new_master_from_its_committed_offset() {
    use ferromq_client::{ConsumeFromWhere, ConsumeStatus, MessageListener, PushConsumer};
    const TOPIC: &str = "FO_PUSH";
    const GROUP: &str = "fo-push";
    let mut g = group(TOPIC).await;
    let p = producer(g.ns.addr);
    let b_addr = g.b.local_addr();
    let a_addr = g.a.as_ref().unwrap().local_addr();
    send_n(&p, TOPIC, 10).await;
    let delivered: Arc<std::sync::Mutex<Vec<u64>>> = Arc::default();
    let listener = {
        let delivered = delivered.clone();
        MessageListener::concurrently(move |msgs: &[MessageExt]| {
            let mut d = delivered.lock().unwrap();
            d.extend(msgs.iter().map(|m| m.queue_offset));
            ConsumeStatus::ConsumeSuccess
        })
    };
    let consumer = PushConsumer::start(
        ferromq_client::PushConsumerConfig {
            namesrv_addrs: vec![g.ns.addr],
            group: GROUP.into(),
            consume_from_where: ConsumeFromWhere::FirstOffset,
            pull_hold: Duration::from_millis(200),
            pull_error_backoff: Duration::from_millis(50),
            rebalance_interval: Duration::from_millis(300),
            persist_interval: Duration::from_millis(100),
            heartbeat_interval: Duration::from_secs(1),
            request_timeout: Duration::from_secs(1),
            shutdown_timeout: Duration::from_secs(3),
            ..ferromq_client::PushConsumerConfig::default()
        },
        vec![(TOPIC.into(), "*".into())],
        listener,
    )
    .await
    .unwrap();
    let deadline = Instant::now() + WAIT;
    while committed_on(a_addr, GROUP, TOPIC).await != Some(10) {
        assert!(Instant::now() < deadline, "A never held the commit of 10");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Concurrent listeners: deliveries in any order, each once.
    let mut before = delivered.lock().unwrap().clone();
    before.sort_unstable();
    assert_eq!(before, (0..10).collect::<Vec<u64>>());

    g.fail_over(TOPIC).await;
    let on_b = committed_on(b_addr, GROUP, TOPIC).await;
    assert_eq!(
        on_b,
        Some(10),
        "SYNC_MASTER: A's acknowledged commit is on B"
    );
    let switched_at = delivered.lock().unwrap().len();
    send_n(&p, TOPIC, 5).await;
    eventually("five deliveries from B", || {
        delivered.lock().unwrap().len() >= switched_at + 5
    })
    .await;
    let mut after: Vec<u64> = delivered.lock().unwrap()[switched_at..].to_vec();
    after.sort_unstable();
    assert_eq!(after, (10..15).collect::<Vec<u64>>(), "resumed on B at 10");
    let deadline = Instant::now() + WAIT;
    while committed_on(b_addr, GROUP, TOPIC).await != Some(15) {
        assert!(Instant::now() < deadline, "B never held the commit of 15");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let report = consumer.shutdown().await.unwrap();
    assert!(report.is_complete(), "{report:?}");
    p.shutdown();
}
