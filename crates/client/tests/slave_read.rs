//! Reads from a slave while the master is unreachable, against fake brokers on 127.0.0.1: a
//! pull consumer whose master refuses connections pulls from the group's slave, without a
//! piggy-backed commit; a commit in that state fails and never reaches the slave; reads
//! return to the master once it answers again.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{namesrv, Namesrv, T};
use ferromq_client::read_failover::MASTER_RETRY;
use ferromq_client::{MessageQueue, OffsetError, PullConsumer, PullConsumerConfig, PullResult};
use ferromq_protocol::message::record::DraftRecord;
use ferromq_protocol::remoting::body::topic::{
    RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper,
};
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::namesrv::RegisterBrokerRequestHeader;
use ferromq_protocol::remoting::headers::pull::{
    PullMessageRequestHeader, PullMessageResponseHeader,
};
use ferromq_protocol::remoting::RemotingCommand;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const TOPIC: &str = "REPLICA_READ";
/// Messages each fake broker holds per queue (offsets 0..MESSAGES).
const MESSAGES: u64 = 3;

/// One request a fake broker received: its code and, for a pull, its sysFlag.
#[derive(Debug, Clone)]
struct Seen {
    code: i32,
    sys_flag: Option<i32>,
}

type Log = Arc<Mutex<Vec<Seen>>>;

/// A fake broker at `listener`: answers pulls with one stored record per offset below
/// [`MESSAGES`] (body = `"{role}-{offset}"`), PULL_NOT_FOUND past them, SUCCESS to anything
/// else; logs every request.
fn fake_broker(listener: TcpListener, role: &'static str) -> Log {
    let log: Log = Arc::default();
    let seen = log.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream, role, seen.clone()));
        }
    });
    log
}

async fn serve(mut stream: TcpStream, role: &'static str, log: Log) {
    let store_host = stream.local_addr().unwrap();
    loop {
        let mut len = [0u8; 4];
        if stream.read_exact(&mut len).await.is_err() {
            return;
        }
        let n = u32::from_be_bytes(len) as usize;
        let mut frame = vec![0u8; 4 + n];
        frame[..4].copy_from_slice(&len);
        if stream.read_exact(&mut frame[4..]).await.is_err() {
            return;
        }
        let Ok(req) = RemotingCommand::decode(frame.into()) else {
            return;
        };
        let pull: Option<PullMessageRequestHeader> = (req.code == request::PULL_MESSAGE)
            .then(|| req.decode_header().ok())
            .flatten();
        log.lock().unwrap().push(Seen {
            code: req.code,
            sys_flag: pull.as_ref().map(|h| h.sys_flag),
        });
        if req.is_oneway() {
            continue;
        }
        let reply = match pull {
            Some(h) => pull_reply(&req, &h, role, store_host),
            None => req.reply(response::SUCCESS, None),
        };
        if stream.write_all(&reply.to_bytes().unwrap()).await.is_err() {
            return;
        }
    }
}

fn pull_reply(
    req: &RemotingCommand,
    h: &PullMessageRequestHeader,
    role: &str,
    store_host: SocketAddr,
) -> RemotingCommand {
    let offset = h.queue_offset as u64;
    let mut header = PullMessageResponseHeader {
        suggest_which_broker_id: 0,
        next_begin_offset: h.queue_offset,
        min_offset: 0,
        max_offset: MESSAGES as i64,
        ..Default::default()
    };
    if offset >= MESSAGES {
        return req
            .reply(response::PULL_NOT_FOUND, None)
            .with_header(&header);
    }
    let body = format!("{role}-{offset}");
    let draft = DraftRecord {
        topic: &h.topic,
        queue_id: h.queue_id as u32,
        flag: 0,
        sys_flag: 0,
        born_timestamp_ms: 1,
        born_host: store_host,
        store_host,
        reconsume_times: 0,
        prepared_tx_offset: 0,
        body: body.as_bytes(),
        properties: b"",
    };
    let mut record = draft.encode().unwrap();
    record.finalize(offset, offset * 1000, 2);
    header.next_begin_offset = h.queue_offset + 1;
    req.reply(response::SUCCESS, None)
        .with_header(&header)
        .with_body(record.as_bytes().to_vec())
}

/// Registers `addr` as member `id` of broker group `broker-a` serving [`TOPIC`].
fn register(ns: &Namesrv, addr: SocketAddr, id: i64) {
    let header = RegisterBrokerRequestHeader {
        broker_name: "broker-a".into(),
        broker_addr: addr.to_string(),
        cluster_name: "DefaultCluster".into(),
        ha_server_addr: addr.to_string(),
        broker_id: id,
        ..Default::default()
    };
    let mut config = TopicConfig::new(TOPIC);
    config.read_queue_nums = 1;
    config.write_queue_nums = 1;
    let mut wrapper = TopicConfigSerializeWrapper::default();
    wrapper.topic_config_table.insert(TOPIC.into(), config);
    wrapper.data_version.counter = 1;
    let body = RegisterBrokerBody {
        topic_config_serialize_wrapper: wrapper,
        filter_server_list: Vec::new(),
    };
    ns.registry
        .register_broker(&header, &body, None)
        .expect("registration accepted");
}

fn bodies(result: &PullResult) -> Vec<String> {
    match result {
        PullResult::Found { messages, .. } => messages
            .iter()
            .map(|m| String::from_utf8_lossy(&m.body).into_owned())
            .collect(),
        _ => Vec::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pulls_read_from_the_slave_while_the_master_refuses_and_commits_never_go_there() {
    let ns = namesrv().await;
    // The master's port: bound, then closed, so connections to it are refused.
    let master_addr = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let slave_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let slave_addr = slave_listener.local_addr().unwrap();
    let slave_log = fake_broker(slave_listener, "slave");
    register(&ns, master_addr, 0);
    register(&ns, slave_addr, 1);

    let c = PullConsumer::start(PullConsumerConfig {
        namesrv_addrs: vec![ns.addr],
        group: "G".into(),
        pull_timeout: Duration::from_secs(1),
        connect_timeout: Duration::from_secs(1),
        route_max_age: Duration::from_secs(600),
        ..PullConsumerConfig::default()
    })
    .unwrap();
    c.set_commit_on_pull(true);
    let queues = c.fetch_queues(TOPIC).await.unwrap();
    let q: MessageQueue = queues[0].clone();
    let replicas = c.routes().known_replicas("broker-a").unwrap();
    assert_eq!(replicas.master, Some(master_addr));
    assert_eq!(replicas.slaves, vec![(1, slave_addr)]);
    // A commit in memory, which a pull to the master would carry.
    c.offset_store().update(&q, 1);

    // The first pull finds the master unreachable: a transport error.
    let err = c.pull(&q, "*", 0, 32).await.expect_err("master refuses");
    assert!(err.is_transport(), "{err:?}");
    // The next pulls read from the slave.
    let first = c.pull(&q, "*", 0, 32).await.unwrap();
    assert_eq!(bodies(&first), vec!["slave-0"]);
    let second = c.pull(&q, "*", 1, 32).await.unwrap();
    assert_eq!(bodies(&second), vec!["slave-1"]);

    // A commit goes to the master only: it fails loudly.
    let err = c.commit(&q, 2).await.expect_err("master unreachable");
    assert!(matches!(err, OffsetError::Unreachable { .. }), "{err:?}");

    let seen = slave_log.lock().unwrap().clone();
    let pulls: Vec<&Seen> = seen
        .iter()
        .filter(|s| s.code == request::PULL_MESSAGE)
        .collect();
    assert_eq!(pulls.len(), 2, "{seen:?}");
    assert!(
        pulls.iter().all(|s| s.sys_flag.unwrap() & 0x1 == 0),
        "a slave's pull carries no commit: {seen:?}"
    );
    assert!(
        seen.iter()
            .all(|s| s.code != request::UPDATE_CONSUMER_OFFSET
                && s.code != request::QUERY_CONSUMER_OFFSET),
        "offsets never go to the slave: {seen:?}"
    );

    // Past the back-off the master is probed first; the failed probe falls back to the slave
    // within the same pull instead of failing it.
    tokio::time::sleep(MASTER_RETRY + Duration::from_millis(100)).await;
    let probed = c
        .pull(&q, "*", 2, 32)
        .await
        .expect("probe falls back to the slave");
    assert_eq!(bodies(&probed), vec!["slave-2"]);

    // The master comes back: within the back-off bound, pulls return to it, with the commit.
    let master_log = fake_broker(TcpListener::bind(master_addr).await.unwrap(), "master");
    let deadline = Instant::now() + T;
    loop {
        let result = c.pull(&q, "*", 2, 32).await.unwrap();
        if bodies(&result) == vec!["master-2"] {
            break;
        }
        assert_eq!(bodies(&result), vec!["slave-2"]);
        assert!(
            Instant::now() < deadline,
            "reads never returned to the master"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let seen = master_log.lock().unwrap().clone();
    assert!(
        seen.iter()
            .any(|s| s.code == request::PULL_MESSAGE && s.sys_flag.unwrap() & 0x1 != 0),
        "the master's pull carries the commit: {seen:?}"
    );
    c.commit(&q, 3).await.expect("commit to the master");
    assert!(master_log
        .lock()
        .unwrap()
        .iter()
        .any(|s| s.code == request::UPDATE_CONSUMER_OFFSET));
    assert!(slave_log
        .lock()
        .unwrap()
        .iter()
        .all(|s| s.code != request::UPDATE_CONSUMER_OFFSET));
}
