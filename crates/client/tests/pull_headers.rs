//! Pull requests in RocketMQ's binary header (the consumers' default) and in JSON: the wire
//! form a consumer sends, and that a broker serves both forms the same messages, copied or
//! with zero copy.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use common::{broker_config, broker_with, create_topic, namesrv, register_fake_broker, wait_route};
use ferromq_client::{
    Message, MessageExt, MessageQueue, PullConsumer, PullConsumerConfig, PullResult,
};
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::pull::PullMessageResponseHeader;
use ferromq_protocol::remoting::{RemotingCommand, SerializeType};

/// The serialize type of every PULL_MESSAGE a fake broker received.
type PullForms = Arc<Mutex<Vec<SerializeType>>>;

/// A fake broker that answers every pull "no new message" (at offset 7) in the request's
/// form and every other request SUCCESS, recording the form of each pull.
async fn fake_broker() -> (SocketAddr, PullForms) {
    let forms = PullForms::default();
    let log = forms.clone();
    let addr = common::answering_broker(move |cmd: &RemotingCommand| {
        if cmd.code != request::PULL_MESSAGE {
            return cmd.reply(response::SUCCESS, None);
        }
        log.lock().unwrap().push(cmd.serialize_type);
        cmd.reply(response::PULL_NOT_FOUND, None)
            .with_header(&PullMessageResponseHeader {
                next_begin_offset: 7,
                max_offset: 7,
                ..Default::default()
            })
    })
    .await;
    (addr, forms)
}

fn consumer(namesrv: SocketAddr, group: &str, binary_header: bool) -> PullConsumer {
    PullConsumer::start(PullConsumerConfig {
        namesrv_addrs: vec![namesrv],
        group: group.into(),
        binary_header,
        ..PullConsumerConfig::default()
    })
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pulls_go_out_in_binary_headers_by_default_and_in_json_when_asked() {
    assert!(PullConsumerConfig::default().binary_header);
    assert!(ferromq_client::LitePullConsumerConfig::default().binary_header);
    assert!(ferromq_client::PushConsumerConfig::default().binary_header);
    let ns = namesrv().await;
    let (fake, forms) = fake_broker().await;
    register_fake_broker(&ns, "broker-fake", fake, "PH");
    let queue = MessageQueue {
        topic: "PH".into(),
        broker_name: "broker-fake".into(),
        queue_id: 0,
    };
    for (binary, expected) in [
        (true, SerializeType::RocketMq),
        (false, SerializeType::Json),
    ] {
        forms.lock().unwrap().clear();
        let c = consumer(ns.addr, "G-PH", binary);
        let result = c.pull(&queue, "*", 0, 32).await.unwrap();
        // The reply came back in the request's form and was read whole.
        assert_eq!(result, PullResult::NoNewMessage { next_offset: 7 });
        assert_eq!(
            *forms.lock().unwrap(),
            vec![expected],
            "binary_header {binary}"
        );
        assert!(c.shutdown().await.unwrap().failed.is_empty());
    }
}

/// What a consumer needs to tell two reads of a queue apart.
fn essence(m: &MessageExt) -> (u64, u64, Vec<u8>, Vec<String>, String) {
    (
        m.queue_offset,
        m.commit_log_offset,
        m.body.to_vec(),
        m.keys.clone(),
        m.msg_id.clone(),
    )
}

/// Pulls queue 0 of topic PB from offset 0 to its end.
async fn read_all(c: &PullConsumer) -> Vec<MessageExt> {
    let queues = c.fetch_queues("PB").await.unwrap();
    let queue = queues.iter().find(|q| q.queue_id == 0).expect("queue 0");
    common::pull_all(c, queue, "*").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_serves_binary_and_json_pulls_the_same_messages_copied_or_zero_copy() {
    for by_heap in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let ns = namesrv().await;
        let mut config = broker_config(dir.path(), ns.addr, "b0", 0);
        config.transfer_msg_by_heap = by_heap;
        let broker = broker_with(config).await;
        create_topic(broker.local_addr(), "PB", 1).await;
        wait_route(ns.addr, "PB", 1).await;
        let p = common::producer(ns.addr, "PG");
        let n = 40;
        for i in 0..n {
            let body = format!("pull-header-{i}-{}", "x".repeat(i * 7));
            p.send(Message::new("PB", body).with_key(format!("k{i}")))
                .await
                .unwrap();
        }
        let binary = consumer(ns.addr, "G-BIN", true);
        let json = consumer(ns.addr, "G-JSON", false);
        let from_binary = read_all(&binary).await;
        let from_json = read_all(&json).await;
        assert_eq!(from_binary.len(), n, "transferMsgByHeap={by_heap}");
        let bodies: Vec<String> = from_binary
            .iter()
            .map(|m| String::from_utf8(m.body.to_vec()).unwrap())
            .collect();
        let expected: Vec<String> = (0..n)
            .map(|i| format!("pull-header-{i}-{}", "x".repeat(i * 7)))
            .collect();
        assert_eq!(bodies, expected, "transferMsgByHeap={by_heap}");
        assert_eq!(
            from_binary.iter().map(essence).collect::<Vec<_>>(),
            from_json.iter().map(essence).collect::<Vec<_>>(),
            "transferMsgByHeap={by_heap}"
        );
        for c in [binary, json] {
            assert!(c.shutdown().await.unwrap().failed.is_empty());
        }
        p.shutdown();
        drop(broker);
    }
}
