//! `TransactionProducer` end to end against an in-process broker: commit, rollback, an
//! unknown outcome settled by the check callback, a panicking local transaction, and a half
//! left by a producer that died before END, answered by a restarted producer of the group.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{broker_config, broker_with, create_topic, namesrv, wait_route, T};
use ferromq_client::{
    ClientError, Message, MessageExt, ProducerConfig, PullConsumer, PullConsumerConfig, PullResult,
    TransactionProducer, TransactionState,
};
use ferromq_protocol::remoting::client::RemotingClient;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::send::SendMessageRequestHeaderV2;
use ferromq_protocol::remoting::RemotingCommand;
use ferromq_protocol::Properties;

fn config(namesrv: std::net::SocketAddr) -> ProducerConfig {
    ProducerConfig {
        namesrv_addrs: vec![namesrv],
        group: "TXG".into(),
        send_timeout: T,
        heartbeat_interval: Duration::from_millis(200),
        ..ProducerConfig::default()
    }
}

/// Bodies a consumer pulls from TX queue 0 now.
async fn bodies(namesrv: std::net::SocketAddr) -> Vec<String> {
    let consumer = PullConsumer::start(PullConsumerConfig {
        namesrv_addrs: vec![namesrv],
        group: "CG".into(),
        ..PullConsumerConfig::default()
    })
    .unwrap();
    let queue = consumer.fetch_queues("TX").await.unwrap()[0].clone();
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        match consumer.pull(&queue, "*", offset, 32).await.unwrap() {
            PullResult::Found {
                messages,
                next_offset,
            } => {
                out.extend(
                    messages
                        .iter()
                        .map(|m| String::from_utf8(m.body.to_vec()).unwrap()),
                );
                offset = next_offset;
            }
            PullResult::NoNewMessage { .. } => return out,
            other => panic!("{other:?}"),
        }
    }
}

async fn eventually_bodies(namesrv: std::net::SocketAddr, want: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let got = bodies(namesrv).await;
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "consumers see {got:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_in_transaction_commits_rolls_back_and_settles_unknown_by_check() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let broker = broker_with(ferromq_broker::BrokerConfig {
        transaction_time_out: 300,
        transaction_check_interval: 100,
        ..broker_config(dir.path(), ns.addr, "b0", 0)
    })
    .await;
    create_topic(broker.local_addr(), "TX", 1).await;
    wait_route(ns.addr, "TX", 1).await;
    let checks = Arc::new(AtomicUsize::new(0));
    let seen = checks.clone();
    let producer = TransactionProducer::start(config(ns.addr), move |half: &MessageExt| {
        seen.fetch_add(1, Ordering::SeqCst);
        assert_eq!(&*half.topic, "TX");
        match &half.body[..] {
            b"unknown-then-commit" => TransactionState::Commit,
            _ => TransactionState::Rollback,
        }
    })
    .unwrap();

    let committed = producer
        .send_in_transaction(Message::new("TX", "committed"), |message, sent| {
            assert_eq!(&message.body[..], b"committed");
            assert_eq!(sent.queue.topic, "TX");
            TransactionState::Commit
        })
        .await
        .unwrap();
    assert_eq!(committed.local_state, TransactionState::Commit);
    assert!(committed.end_acknowledged(), "{:?}", committed.end);
    let rolled_back = producer
        .send_in_transaction(Message::new("TX", "rolled-back"), |_, _| {
            TransactionState::Rollback
        })
        .await
        .unwrap();
    assert!(rolled_back.end_acknowledged(), "{:?}", rolled_back.end);
    let panicked = producer
        .send_in_transaction(Message::new("TX", "panicked"), |_, _| {
            panic!("local transaction failed")
        })
        .await
        .unwrap();
    assert_eq!(panicked.local_state, TransactionState::Unknown);
    let unknown = producer
        .send_in_transaction(Message::new("TX", "unknown-then-commit"), |_, _| {
            TransactionState::Unknown
        })
        .await
        .unwrap();
    assert_eq!(unknown.local_state, TransactionState::Unknown);
    assert!(
        unknown.end_acknowledged(),
        "the broker noted the unknown: {:?}",
        unknown.end
    );
    assert_eq!(bodies(ns.addr).await, vec!["committed"]);

    // The broker checks both unknowns back: one commits, the panicked one rolls back.
    eventually_bodies(ns.addr, &["committed", "unknown-then-commit"]).await;
    let tx = broker.context().metrics.transactions.clone();
    let deadline = Instant::now() + Duration::from_secs(10);
    while tx.pending() != 0 {
        assert!(
            Instant::now() < deadline,
            "halves still pending: {}",
            tx.pending()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(checks.load(Ordering::SeqCst) >= 2);
    assert_eq!((tx.decisions("commit"), tx.decisions("rollback")), (2, 2));

    let delayed = producer
        .send_in_transaction(Message::new("TX", "x").with_delay_level(2), |_, _| {
            TransactionState::Commit
        })
        .await;
    assert!(
        matches!(delayed, Err(ClientError::InvalidMessage(_))),
        "{delayed:?}"
    );
    producer.producer().shutdown();
}

/// Sends a half message of group TXG as a producer that dies before END would.
async fn orphan_half(broker: std::net::SocketAddr, body: &str) {
    let conn = RemotingClient::connect(broker, T).await.unwrap();
    let properties = Properties::encode([
        ("TRAN_MSG", "true"),
        ("PGROUP", "TXG"),
        ("UNIQ_KEY", "ORPHAN1"),
    ]);
    let header = SendMessageRequestHeaderV2 {
        a: "TXG".into(),
        b: "TX".into(),
        c: "TBW102".into(),
        d: 1,
        e: 0,
        f: 4,
        g: 1,
        i: Some(String::from_utf8(properties).unwrap().into()),
        ..Default::default()
    };
    let command = RemotingCommand::request_with_header(request::SEND_MESSAGE_V2, &header)
        .with_body(body.as_bytes().to_vec());
    let reply = conn.invoke(command, T).await.unwrap();
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    conn.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_producer_answers_the_check_of_a_half_left_before_end() {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let broker = broker_with(ferromq_broker::BrokerConfig {
        transaction_time_out: 200,
        transaction_check_interval: 100,
        ..broker_config(dir.path(), ns.addr, "b0", 0)
    })
    .await;
    create_topic(broker.local_addr(), "TX", 1).await;
    wait_route(ns.addr, "TX", 1).await;
    orphan_half(broker.local_addr(), "orphaned").await;
    let answered = Arc::new(AtomicUsize::new(0));
    let count = answered.clone();
    let restarted = TransactionProducer::start(config(ns.addr), move |half: &MessageExt| {
        assert_eq!(half.msg_id, "ORPHAN1");
        count.fetch_add(1, Ordering::SeqCst);
        TransactionState::Commit
    })
    .unwrap();
    // It has sent nothing: its heartbeats alone register it for check-backs.
    restarted.producer().routes().route("TX").await.unwrap();
    eventually_bodies(ns.addr, &["orphaned"]).await;
    assert_eq!(answered.load(Ordering::SeqCst), 1, "one check, one answer");
    restarted.producer().shutdown();
}
