//! Offset pitfall C4: a commit whose reply is lost.
//!
//! RocketMQ's Java client sends UPDATE_CONSUMER_OFFSET one-way and ali-ons fire-and-forget, so
//! a dropped connection or a refusal is never seen. ferromq's client commits are
//! request/response; here a fault proxy between the client and the broker forwards the commit
//! and discards the reply (`ProxyMode::DropReplies`). The commit reached the broker and took
//! effect, yet the caller must be told it failed (the outcome is indeterminate), never that it
//! succeeded; after the proxy heals, a retry of the same commit lands without double effect
//! (no second record, no regression), and progress continues.

use std::net::SocketAddr;
use std::time::Duration;

use ferromq_broker::{Broker, BrokerConfig};
use ferromq_chaos::proxy::{FaultProxy, ProxyMode};
use ferromq_client::{
    Message, OffsetError, Producer, ProducerConfig, PullConsumer, PullConsumerConfig,
};
use ferromq_namesrv::{NameServer, NamesrvConfig};
use ferromq_protocol::remoting::body::route::perm;
use ferromq_protocol::remoting::body::topic::{
    RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper,
};
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::admin::CreateTopicRequestHeader;
use ferromq_protocol::remoting::headers::namesrv::RegisterBrokerRequestHeader;
use ferromq_protocol::remoting::{RemotingClient, RemotingCommand};

const TIMEOUT: Duration = Duration::from_secs(5);
const TOPIC: &str = "ReplyLossT";
const GROUP: &str = "ReplyLossG";

async fn create_topic(broker: SocketAddr) {
    let client = RemotingClient::connect(broker, TIMEOUT).await.unwrap();
    let header = CreateTopicRequestHeader {
        topic: TOPIC.into(),
        default_topic: "TBW102".into(),
        read_queue_nums: 1,
        write_queue_nums: 1,
        perm: perm::READ | perm::WRITE,
        ..Default::default()
    };
    let reply = client
        .invoke(
            RemotingCommand::request_with_header(request::UPDATE_AND_CREATE_TOPIC, &header),
            TIMEOUT,
        )
        .await
        .unwrap();
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
}

/// Publishes the broker in the name server at the proxy's address, so that every client
/// request to it goes through the proxy.
fn register_behind(registry: &ferromq_namesrv::RouteRegistry, proxy: SocketAddr) {
    let header = RegisterBrokerRequestHeader {
        broker_name: "b0".into(),
        broker_addr: proxy.to_string(),
        cluster_name: "DefaultCluster".into(),
        ha_server_addr: proxy.to_string(),
        broker_id: 0,
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
    let _ = registry.register_broker(&header, &body, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_reply_is_lost_is_an_error_and_its_retry_lands_once() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BrokerConfig {
        listen_port: 0,
        store_path_root_dir: dir.path().to_path_buf(),
        flush_disk_type: "SYNC_FLUSH".into(),
        ..BrokerConfig::default()
    })
    .await
    .expect("broker starts");
    create_topic(broker.local_addr()).await;
    let proxy = FaultProxy::start(broker.local_addr()).await.unwrap();
    let namesrv = NameServer::bind(NamesrvConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..NamesrvConfig::default()
    })
    .await
    .expect("name server binds");
    let ns = namesrv.local_addr();
    register_behind(&namesrv.registry(), proxy.local_addr());
    let (stop_ns, ns_stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(namesrv.run(async move {
        let _ = ns_stopped.await;
    }));

    let producer = Producer::start(ProducerConfig {
        namesrv_addrs: vec![ns],
        group: "ReplyLossPG".into(),
        send_timeout: TIMEOUT,
        ..ProducerConfig::default()
    })
    .unwrap();
    for i in 0..10 {
        producer
            .send(Message::new(TOPIC, format!("m{i}")))
            .await
            .expect("send through the proxy");
    }
    let consumer = PullConsumer::start(PullConsumerConfig {
        namesrv_addrs: vec![ns],
        group: GROUP.into(),
        pull_timeout: Duration::from_secs(1),
        route_max_age: Duration::from_secs(600),
        ..PullConsumerConfig::default()
    })
    .unwrap();
    let q = consumer.fetch_queues(TOPIC).await.unwrap().remove(0);
    consumer
        .commit(&q, 3)
        .await
        .expect("commit with the proxy passing");
    let stored = || {
        broker
            .context()
            .store
            .consumer_offset(GROUP, TOPIC, 0)
            .expect("offset view")
            .map(|s| s.offset)
    };
    assert_eq!(stored(), Some(3));

    // The request reaches the broker and is stored; the reply is discarded.
    proxy.set_mode(ProxyMode::DropReplies);
    let lost = consumer.commit(&q, 6).await;
    let error = lost.expect_err("a commit without a reply is never reported as a success");
    assert!(
        matches!(error, OffsetError::Unreachable { .. }) && error.is_retriable(),
        "indeterminate, retriable: {error}"
    );
    assert_eq!(stored(), Some(6), "the commit itself landed");
    assert!(proxy.stats().bytes_discarded > 0, "the reply was discarded");
    assert_eq!(consumer.offset_store().stats().persists_failed, 1);

    // Healed: the retry (a new connection) lands without double effect.
    proxy.set_mode(ProxyMode::Pass);
    consumer.commit(&q, 6).await.expect("retry after reconnect");
    assert_eq!(stored(), Some(6), "no regression, no double effect");
    consumer.commit(&q, 7).await.expect("progress continues");
    assert_eq!(stored(), Some(7));
    let history: Vec<(&str, u64)> = broker
        .context()
        .store
        .offset_history(GROUP, TOPIC, Some(0))
        .unwrap()
        .iter()
        .map(|e| (e.kind.as_str(), e.offset))
        .collect();
    assert_eq!(
        history,
        vec![("commit", 3), ("commit", 6), ("commit", 7)],
        "one record per distinct commit: the retry of 6 wrote nothing"
    );
    consumer.shutdown().await.unwrap().into_result().unwrap();
    let _ = stop_ns.send(());
    proxy.shutdown().await;
    broker.shutdown().await.unwrap();
}
