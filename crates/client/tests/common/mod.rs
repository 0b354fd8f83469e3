//! In-process name server and brokers on 127.0.0.1 for the client's integration tests.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use ferromq_broker::{Broker, BrokerConfig};
use ferromq_client::{ClientError, ConnectionPool, Message, Producer, ProducerConfig, RouteCache};
use ferromq_namesrv::{NameServer, NamesrvConfig};
use ferromq_protocol::remoting::body::route::perm;
use ferromq_protocol::remoting::body::topic::{
    RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper,
};
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::admin::CreateTopicRequestHeader;
use ferromq_protocol::remoting::headers::namesrv::RegisterBrokerRequestHeader;
use ferromq_protocol::remoting::{ClientOptions, RemotingClient, RemotingCommand};
use tokio::sync::oneshot;

pub const T: Duration = Duration::from_secs(5);

/// A running name server; dropping it stops it.
pub struct Namesrv {
    pub addr: SocketAddr,
    pub registry: std::sync::Arc<ferromq_namesrv::RouteRegistry>,
    _stop: oneshot::Sender<()>,
}

pub async fn namesrv() -> Namesrv {
    let server = NameServer::bind(NamesrvConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..NamesrvConfig::default()
    })
    .await
    .expect("name server binds");
    let addr = server.local_addr();
    let registry = server.registry();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    Namesrv {
        addr,
        registry,
        _stop: stop,
    }
}

/// A broker on its own tokio runtime, so that stopping it also ends every connection it
/// serves, as the death of a broker process would.
pub struct BrokerProc {
    runtime: Option<tokio::runtime::Runtime>,
    broker: Option<Broker>,
    addr: SocketAddr,
}

impl BrokerProc {
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Shuts the broker down cleanly (flush, checkpoint, unregister), then drops its runtime
    /// and with it every open connection.
    pub async fn shutdown(mut self) -> Result<(), String> {
        let runtime = self.runtime.take().expect("runtime");
        let broker = self.broker.take().expect("broker");
        let result = runtime
            .spawn(async move { broker.shutdown().await.map_err(|e| e.to_string()) })
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r);
        runtime.shutdown_background();
        result
    }
}

impl Drop for BrokerProc {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Starts a SYNC_FLUSH broker named `name` registering with `namesrv`, on `port` (0: any).
pub async fn broker(dir: &Path, namesrv: SocketAddr, name: &str, port: u16) -> BrokerProc {
    broker_with(broker_config(dir, namesrv, name, port)).await
}

/// Creates `topic` with `queues` read/write queues on the broker at `addr`.
pub async fn create_topic(addr: SocketAddr, topic: &str, queues: i32) {
    let client = RemotingClient::connect(addr, T).await.expect("connect");
    let header = CreateTopicRequestHeader {
        topic: topic.into(),
        default_topic: "TBW102".into(),
        read_queue_nums: queues,
        write_queue_nums: queues,
        perm: perm::READ | perm::WRITE,
        ..Default::default()
    };
    let reply = client
        .invoke(
            RemotingCommand::request_with_header(request::UPDATE_AND_CREATE_TOPIC, &header),
            T,
        )
        .await
        .expect("create topic reply");
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
}

/// Waits until the name server's route for `topic` names `brokers` broker groups.
pub async fn wait_route(namesrv: SocketAddr, topic: &str, brokers: usize) {
    let pool = std::sync::Arc::new(ConnectionPool::new(ClientOptions::default()));
    let routes = RouteCache::new(vec![namesrv], pool, T, Duration::ZERO).unwrap();
    let deadline = Instant::now() + T;
    loop {
        match routes.refresh(topic).await {
            Ok(route) if route.data.broker_datas.len() >= brokers => return,
            Ok(_) | Err(ClientError::NoRoute { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            other => panic!("route of {topic} never appeared: {other:?}"),
        }
    }
}

/// Registers a fake broker group `name` at `addr` serving `topic` (2 queues) directly in the
/// name server's registry.
pub fn register_fake_broker(ns: &Namesrv, name: &str, addr: SocketAddr, topic: &str) {
    let header = RegisterBrokerRequestHeader {
        broker_name: name.into(),
        broker_addr: addr.to_string(),
        cluster_name: "DefaultCluster".into(),
        ha_server_addr: addr.to_string(),
        broker_id: 0,
        ..Default::default()
    };
    let mut config = TopicConfig::new(topic);
    config.read_queue_nums = 2;
    config.write_queue_nums = 2;
    let mut wrapper = TopicConfigSerializeWrapper::default();
    wrapper.topic_config_table.insert(topic.into(), config);
    wrapper.data_version.counter = 1;
    let body = RegisterBrokerBody {
        topic_config_serialize_wrapper: wrapper,
        filter_server_list: Vec::new(),
    };
    let _ = ns.registry.register_broker(&header, &body, None);
}

/// Pulls `q` with `expression` from offset 0 until the broker has nothing new (32 a pull).
pub async fn pull_all(
    c: &ferromq_client::PullConsumer,
    q: &ferromq_client::MessageQueue,
    expression: &str,
) -> Vec<ferromq_client::MessageExt> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        match c.pull(q, expression, offset, 32).await.unwrap() {
            ferromq_client::PullResult::Found {
                messages,
                next_offset,
            } => {
                out.extend(messages);
                offset = next_offset;
            }
            ferromq_client::PullResult::NoMatchedMessage { next_offset } => offset = next_offset,
            ferromq_client::PullResult::NoNewMessage { .. } => return out,
            other => panic!("{other:?}"),
        }
    }
}

/// A fake broker on 127.0.0.1: decodes every request frame and writes the reply `answer`
/// gives (none for a one-way request); returns its address. For tests of what a client sends.
pub async fn answering_broker<F>(answer: F) -> SocketAddr
where
    F: Fn(&RemotingCommand) -> RemotingCommand + Send + Sync + 'static,
{
    use bytes::BytesMut;
    use ferromq_protocol::remoting::{RawFrame, DEFAULT_MAX_FRAME_LENGTH};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let answer = std::sync::Arc::new(answer);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut buf = BytesMut::new();
                loop {
                    while let Ok(Some(frame)) = RawFrame::decode(&mut buf, DEFAULT_MAX_FRAME_LENGTH)
                    {
                        let cmd = RemotingCommand::from_frame(frame).unwrap();
                        let reply = answer(&cmd);
                        if cmd.is_oneway() {
                            continue;
                        }
                        if stream.write_all(&reply.to_bytes().unwrap()).await.is_err() {
                            return;
                        }
                    }
                    match stream.read_buf(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                }
            });
        }
    });
    addr
}

/// A TCP server that accepts connections and never answers; returns its address and a
/// counter of accepted connections.
pub async fn silent_server() -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            held.push(stream);
        }
    });
    (addr, accepted)
}

// --- additions by client-consumer: brokers with a custom configuration ---

impl BrokerProc {
    /// The running broker's shared state (store, counters, fences), for assertions.
    pub fn context(&self) -> std::sync::Arc<ferromq_broker::BrokerContext> {
        self.broker.as_ref().expect("broker").context().clone()
    }
}

/// The configuration [`broker`] uses, for tests that change a few settings and start it with
/// [`broker_with`].
pub fn broker_config(dir: &Path, namesrv: SocketAddr, name: &str, port: u16) -> BrokerConfig {
    BrokerConfig {
        broker_name: name.into(),
        listen_port: port,
        // Restarted brokers reuse a fixed `port`; with it the gRPC port would default to
        // 8081, which parallel tests would contend for. These tests use remoting only.
        grpc_listen_port: Some(ferromq_broker::config::GRPC_DISABLED),
        // Restarts reuse `port`; the HA port must not depend on `port + 1` being free.
        ha_listen_port: Some(0),
        namesrv_addr: namesrv.to_string(),
        store_path_root_dir: dir.to_path_buf(),
        flush_disk_type: "SYNC_FLUSH".into(),
        auto_create_topic_enable: false,
        default_topic_queue_nums: 2,
        mapped_file_size_commit_log: 4 << 20,
        max_message_size: 256 * 1024,
        ..BrokerConfig::default()
    }
}

/// Starts a broker with `config` on its own runtime, as [`broker`] does.
pub async fn broker_with(config: BrokerConfig) -> BrokerProc {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("broker runtime");
    // A restart on the same port may race the old socket's release: retry briefly.
    let deadline = Instant::now() + T;
    loop {
        let started = runtime
            .spawn(Broker::start(config.clone()))
            .await
            .expect("broker start task");
        match started {
            Ok(broker) => {
                let addr = broker.local_addr();
                return BrokerProc {
                    runtime: Some(runtime),
                    broker: Some(broker),
                    addr,
                };
            }
            Err(e) if Instant::now() < deadline => {
                tracing::debug!(error = %e, "broker start retry");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("broker starts: {e}"),
        }
    }
}

/// Resets `group`'s offsets of every queue of `topic` to the first message stored at or
/// after `timestamp_ms` (INVOKE_BROKER_TO_RESET_OFFSET, as `mqadmin resetOffsetByTime`).
pub async fn reset_offsets_by_time(addr: SocketAddr, group: &str, topic: &str, timestamp_ms: i64) {
    use ferromq_protocol::remoting::headers::offset::ResetOffsetRequestHeader;
    let client = RemotingClient::connect(addr, T).await.expect("connect");
    let header = ResetOffsetRequestHeader {
        group: group.into(),
        topic: topic.into(),
        queue_id: None,
        offset: None,
        timestamp: timestamp_ms,
        is_force: true,
    };
    let reply = client
        .invoke(
            RemotingCommand::request_with_header(request::INVOKE_BROKER_TO_RESET_OFFSET, &header),
            T,
        )
        .await
        .expect("reset reply");
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
}

/// A name server and one broker (`b0`) with a test topic created and routed; everything stops
/// on drop.
pub struct Cluster {
    pub ns: Namesrv,
    pub broker: BrokerProc,
    /// The broker's data directory (a restarted broker reuses it).
    pub dir: tempfile::TempDir,
}

/// Starts a [`Cluster`] whose broker serves `topic` on `queues` queues, once the name server
/// routes it.
pub async fn cluster(topic: &str, queues: i32) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let ns = namesrv().await;
    let broker = broker(dir.path(), ns.addr, "b0", 0).await;
    create_topic(broker.local_addr(), topic, queues).await;
    wait_route(ns.addr, topic, 1).await;
    Cluster { ns, broker, dir }
}

/// A producer of `group` routed by `namesrv`, with the tests' send timeout [`T`].
pub fn producer(namesrv: SocketAddr, group: &str) -> Producer {
    Producer::start(ProducerConfig {
        namesrv_addrs: vec![namesrv],
        group: group.into(),
        send_timeout: T,
        ..ProducerConfig::default()
    })
    .unwrap()
}

/// Sends messages `from..from + n` to `topic`: body `body-<i>`, key `k<i>`.
pub async fn produce(p: &Producer, topic: &str, from: usize, n: usize) {
    for i in from..from + n {
        p.send(Message::new(topic, format!("body-{i}")).with_key(format!("k{i}")))
            .await
            .expect("send");
    }
}

/// Waits (polling every 20 ms) until `done` holds; panics naming `what` after `limit`.
pub async fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
