//! End-to-end tests of the name server over TCP on 127.0.0.1 with OS-chosen ports: broker
//! registration and routes as real clients read them, cluster info, topic lists, removal by
//! unregistration, expiry and connection close, robustness against bad frames, and the
//! connection limits shared with the broker (limit, frame deadline, idle timeout).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferromq_namesrv::client::{register_broker, unregister_broker};
use ferromq_namesrv::{NameServer, NamesrvClient, NamesrvConfig};
use ferromq_protocol::remoting::body::topic::{RegisterBrokerBody, TopicConfig};
use ferromq_protocol::remoting::headers::namesrv::{
    RegisterBrokerRequestHeader, UnregisterBrokerRequestHeader,
};
use ferromq_protocol::remoting::limits::ConnectionGuard;
use ferromq_protocol::remoting::{request, response, ExtFields, RemotingClient, RemotingCommand};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const T: Duration = Duration::from_secs(5);

struct Running {
    addr: SocketAddr,
    limits: Arc<ConnectionGuard>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Running {
    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(T, &mut self.task)
            .await
            .expect("name server stops within the timeout")
            .unwrap();
    }
}

async fn start(config: NamesrvConfig) -> Running {
    let server = NameServer::bind(config).await.unwrap();
    let addr = server.local_addr();
    assert_ne!(addr.port(), 0);
    let limits = server.connection_limits();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    Running {
        addr,
        limits,
        stop: Some(stop),
        task,
    }
}

fn local_config() -> NamesrvConfig {
    NamesrvConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..NamesrvConfig::default()
    }
}

fn broker_header(name: &str, addr: &str, id: i64) -> RegisterBrokerRequestHeader {
    RegisterBrokerRequestHeader {
        broker_name: name.into(),
        broker_addr: addr.into(),
        cluster_name: "DefaultCluster".into(),
        ha_server_addr: format!("{addr}-ha"),
        broker_id: id,
        ..Default::default()
    }
}

/// TopicA: 4 read/write queues; TopicB: 8 read, 6 write queues, read-only; TBW102.
fn broker_body() -> RegisterBrokerBody {
    let mut body = RegisterBrokerBody::default();
    let table = &mut body.topic_config_serialize_wrapper.topic_config_table;
    let mut a = TopicConfig::new("TopicA");
    a.read_queue_nums = 4;
    a.write_queue_nums = 4;
    let mut b = TopicConfig::new("TopicB");
    b.read_queue_nums = 8;
    b.write_queue_nums = 6;
    b.perm = 4;
    table.insert(a.topic_name.clone(), a);
    table.insert(b.topic_name.clone(), b);
    table.insert("TBW102".into(), TopicConfig::new("TBW102"));
    body.topic_config_serialize_wrapper.data_version.counter = 1;
    body.topic_config_serialize_wrapper.data_version.timestamp = 1_700_000_000_000;
    body
}

fn ext(pairs: &[(&str, &str)]) -> ExtFields {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn call(client: &RemotingClient, code: i32, pairs: &[(&str, &str)]) -> RemotingCommand {
    client
        .invoke(RemotingCommand::new_request(code, ext(pairs)), T)
        .await
        .unwrap()
}

async fn route(client: &RemotingClient, topic: &str) -> RemotingCommand {
    call(client, request::GET_ROUTEINFO_BY_TOPIC, &[("topic", topic)]).await
}

fn json(reply: &RemotingCommand) -> Value {
    serde_json::from_slice(reply.body.as_deref().expect("reply has a body"))
        .expect("body is standard JSON")
}

#[tokio::test]
async fn registered_topics_have_routes_in_the_shape_clients_need() {
    let ns = start(local_config()).await;
    let broker = RemotingClient::connect(ns.addr, T).await.unwrap();
    let reply = register_broker(
        &broker,
        &broker_header("broker-a", "127.0.0.1:10911", 0),
        &broker_body(),
        T,
    )
    .await
    .unwrap();
    assert_eq!(reply.result.master_addr, None);

    let client = RemotingClient::connect(ns.addr, T).await.unwrap();
    let r = route(&client, "TopicA").await;
    assert_eq!(r.code, response::SUCCESS);
    assert!(r.is_response());
    let text = std::str::from_utf8(r.body.as_deref().unwrap()).unwrap();
    assert!(
        text.contains(r#""brokerAddrs":{"0":"127.0.0.1:10911"}"#),
        "{text}"
    );
    let v = json(&r);
    assert_eq!(
        v["queueDatas"],
        serde_json::json!([{"brokerName":"broker-a","readQueueNums":4,"writeQueueNums":4,
            "perm":6,"topicSysFlag":0}])
    );
    let bd = &v["brokerDatas"][0];
    assert_eq!(bd["cluster"], "DefaultCluster");
    assert_eq!(bd["brokerName"], "broker-a");
    assert_eq!(bd["brokerAddrs"]["0"], "127.0.0.1:10911");
    assert_eq!(bd["enableActingMaster"], Value::Bool(false));
    assert!(bd.get("zoneName").is_none());
    assert_eq!(v["filterServerTable"], serde_json::json!({}));
    assert!(v.get("orderTopicConf").is_none());

    let v = json(&route(&client, "TopicB").await);
    assert_eq!(v["queueDatas"][0]["readQueueNums"], 8);
    assert_eq!(v["queueDatas"][0]["writeQueueNums"], 6);
    assert_eq!(v["queueDatas"][0]["perm"], 4);

    // TBW102 is served like any registered topic.
    assert_eq!(route(&client, "TBW102").await.code, response::SUCCESS);

    // A slave of the same group learns its master and joins the route.
    let slave = register_broker(
        &broker,
        &broker_header("broker-a", "127.0.0.1:10921", 1),
        &RegisterBrokerBody::default(),
        T,
    )
    .await
    .unwrap();
    assert_eq!(slave.result.master_addr.as_deref(), Some("127.0.0.1:10911"));
    assert_eq!(
        slave.result.ha_server_addr.as_deref(),
        Some("127.0.0.1:10911-ha")
    );
    let v = json(&route(&client, "TopicA").await);
    assert_eq!(v["brokerDatas"][0]["brokerAddrs"]["1"], "127.0.0.1:10921");
    ns.stop().await;
}

#[tokio::test]
async fn unknown_topic_is_topic_not_exist_with_remark() {
    let ns = start(local_config()).await;
    let client = RemotingClient::connect(ns.addr, T).await.unwrap();
    let r = route(&client, "NoSuchTopic").await;
    assert_eq!(r.code, response::TOPIC_NOT_EXIST);
    assert!(r.remark.unwrap().contains("NoSuchTopic"));
    assert!(r.body.is_none());
    // Also before any broker exists: TBW102 is not special.
    assert_eq!(
        route(&client, "TBW102").await.code,
        response::TOPIC_NOT_EXIST
    );
    ns.stop().await;
}

#[tokio::test]
async fn cluster_info_and_topic_lists() {
    let ns = start(local_config()).await;
    let broker = RemotingClient::connect(ns.addr, T).await.unwrap();
    register_broker(
        &broker,
        &broker_header("broker-a", "127.0.0.1:10911", 0),
        &broker_body(),
        T,
    )
    .await
    .unwrap();
    let mut other = broker_header("broker-b", "127.0.0.1:20911", 0);
    other.cluster_name = "OtherCluster".into();
    let mut body = RegisterBrokerBody::default();
    body.topic_config_serialize_wrapper
        .topic_config_table
        .insert("TopicC".into(), TopicConfig::new("TopicC"));
    register_broker(&broker, &other, &body, T).await.unwrap();

    let client = RemotingClient::connect(ns.addr, T).await.unwrap();
    let r = call(&client, request::GET_BROKER_CLUSTER_INFO, &[]).await;
    assert_eq!(r.code, response::SUCCESS);
    let v = json(&r);
    assert_eq!(
        v["brokerAddrTable"]["broker-a"]["brokerAddrs"]["0"],
        "127.0.0.1:10911"
    );
    assert_eq!(v["brokerAddrTable"]["broker-b"]["cluster"], "OtherCluster");
    assert_eq!(
        v["clusterAddrTable"]["DefaultCluster"],
        serde_json::json!(["broker-a"])
    );
    assert_eq!(
        v["clusterAddrTable"]["OtherCluster"],
        serde_json::json!(["broker-b"])
    );

    let r = call(&client, request::GET_ALL_TOPIC_LIST_FROM_NAMESERVER, &[]).await;
    assert_eq!(
        json(&r),
        serde_json::json!({"topicList":["TBW102","TopicA","TopicB","TopicC"]})
    );
    let r = call(
        &client,
        request::GET_TOPICS_BY_CLUSTER,
        &[("cluster", "OtherCluster")],
    )
    .await;
    assert_eq!(json(&r), serde_json::json!({"topicList":["TopicC"]}));

    // DELETE_TOPIC_IN_NAMESRV removes the route.
    let r = call(
        &client,
        request::DELETE_TOPIC_IN_NAMESRV,
        &[("topic", "TopicA")],
    )
    .await;
    assert_eq!(r.code, response::SUCCESS);
    assert_eq!(
        route(&client, "TopicA").await.code,
        response::TOPIC_NOT_EXIST
    );
    ns.stop().await;
}

#[tokio::test]
async fn unregister_removes_routes() {
    let ns = start(local_config()).await;
    let namesrv = NamesrvClient::new();
    namesrv
        .register_broker(
            ns.addr,
            &broker_header("broker-a", "127.0.0.1:10911", 0),
            &broker_body(),
            T,
        )
        .await
        .unwrap();
    let client = RemotingClient::connect(ns.addr, T).await.unwrap();
    assert_eq!(route(&client, "TopicA").await.code, response::SUCCESS);
    namesrv
        .unregister_broker(
            ns.addr,
            &UnregisterBrokerRequestHeader {
                broker_name: "broker-a".into(),
                broker_addr: "127.0.0.1:10911".into(),
                cluster_name: "DefaultCluster".into(),
                broker_id: 0,
            },
            T,
        )
        .await
        .unwrap();
    assert_eq!(
        route(&client, "TopicA").await.code,
        response::TOPIC_NOT_EXIST
    );
    let v = json(&call(&client, request::GET_BROKER_CLUSTER_INFO, &[]).await);
    assert_eq!(v["brokerAddrTable"], serde_json::json!({}));
    assert_eq!(v["clusterAddrTable"], serde_json::json!({}));
    // Unregistering again is harmless.
    unregister_broker(
        &client,
        &UnregisterBrokerRequestHeader {
            broker_name: "broker-a".into(),
            broker_addr: "127.0.0.1:10911".into(),
            cluster_name: "DefaultCluster".into(),
            broker_id: 0,
        },
        T,
    )
    .await
    .unwrap();
    namesrv.close_all().await;
    ns.stop().await;
}

#[tokio::test]
async fn silent_broker_expires_while_a_registering_one_stays() {
    let ns = start(NamesrvConfig {
        broker_expiry: Duration::from_millis(400),
        scan_interval: Duration::from_millis(50),
        ..local_config()
    })
    .await;
    // The connection stays open, so removal can only come from expiry.
    let broker = RemotingClient::connect(ns.addr, T).await.unwrap();
    register_broker(
        &broker,
        &broker_header("broker-a", "127.0.0.1:10911", 0),
        &broker_body(),
        T,
    )
    .await
    .unwrap();
    let mut body_b = RegisterBrokerBody::default();
    body_b
        .topic_config_serialize_wrapper
        .topic_config_table
        .insert("TopicZ".into(), TopicConfig::new("TopicZ"));
    let header_b = broker_header("broker-b", "127.0.0.1:20911", 0);
    register_broker(&broker, &header_b, &body_b, T)
        .await
        .unwrap();

    let client = RemotingClient::connect(ns.addr, T).await.unwrap();
    assert_eq!(route(&client, "TopicA").await.code, response::SUCCESS);
    let deadline = tokio::time::Instant::now() + T;
    loop {
        // broker-b keeps registering; broker-a falls silent.
        register_broker(&broker, &header_b, &body_b, T)
            .await
            .unwrap();
        if route(&client, "TopicA").await.code == response::TOPIC_NOT_EXIST {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "broker-a never expired"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(route(&client, "TopicZ").await.code, response::SUCCESS);
    let v = json(&call(&client, request::GET_BROKER_CLUSTER_INFO, &[]).await);
    assert!(v["brokerAddrTable"].get("broker-a").is_none());
    assert!(!broker.is_closed());
    ns.stop().await;
}

#[tokio::test]
async fn closing_the_registration_connection_removes_the_broker() {
    let ns = start(local_config()).await;
    let broker = RemotingClient::connect(ns.addr, T).await.unwrap();
    register_broker(
        &broker,
        &broker_header("broker-a", "127.0.0.1:10911", 0),
        &broker_body(),
        T,
    )
    .await
    .unwrap();
    let client = RemotingClient::connect(ns.addr, T).await.unwrap();
    assert_eq!(route(&client, "TopicA").await.code, response::SUCCESS);
    drop(broker);
    let deadline = tokio::time::Instant::now() + T;
    while route(&client, "TopicA").await.code != response::TOPIC_NOT_EXIST {
        assert!(tokio::time::Instant::now() < deadline, "broker not removed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ns.stop().await;
}

#[tokio::test]
async fn unknown_and_unsupported_codes_are_request_code_not_supported() {
    let ns = start(local_config()).await;
    let client = RemotingClient::connect(ns.addr, T).await.unwrap();
    let r = call(&client, 9999, &[]).await;
    assert_eq!(r.code, response::REQUEST_CODE_NOT_SUPPORTED);
    assert!(r.remark.unwrap().contains("9999"));
    let r = call(&client, request::BROKER_HEARTBEAT, &[]).await;
    assert_eq!(r.code, response::REQUEST_CODE_NOT_SUPPORTED);
    assert!(r.remark.unwrap().contains("BROKER_HEARTBEAT"));
    // Still serving on the same connection.
    assert_eq!(
        call(&client, request::GET_BROKER_CLUSTER_INFO, &[])
            .await
            .code,
        response::SUCCESS
    );
    ns.stop().await;
}

#[tokio::test]
async fn oneway_requests_are_served_without_a_reply() {
    let ns = start(local_config()).await;
    let client = RemotingClient::connect(ns.addr, T).await.unwrap();
    let put = RemotingCommand::new_request(
        request::PUT_KV_CONFIG,
        ext(&[("namespace", "ns"), ("key", "k"), ("value", "v")]),
    );
    client.invoke_oneway(put).await.unwrap();
    // Replies are in request order on one connection; the only reply is the GET's.
    let r = call(
        &client,
        request::GET_KV_CONFIG,
        &[("namespace", "ns"), ("key", "k")],
    )
    .await;
    assert_eq!(r.code, response::SUCCESS);
    assert_eq!(r.ext_fields.get("value").map(|v| v.as_str()), Some("v"));
    ns.stop().await;
}

/// Sends `bytes` on a fresh connection and expects the server to close it.
async fn expect_closed_after(addr: SocketAddr, bytes: &[u8]) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut buf = [0u8; 256];
    let r = tokio::time::timeout(T, s.read(&mut buf))
        .await
        .expect("server closes the connection in time");
    match r {
        Ok(0) | Err(_) => {}
        Ok(n) => panic!("expected close, got {n} bytes"),
    }
}

#[tokio::test]
async fn bad_frames_close_only_their_connection() {
    let ns = start(NamesrvConfig {
        max_frame_length: 64 * 1024,
        ..local_config()
    })
    .await;
    let survivor = RemotingClient::connect(ns.addr, T).await.unwrap();

    // Garbage: an HTTP request read as a frame length is far too long.
    expect_closed_after(ns.addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    // Oversized frame: declared length above the configured maximum.
    let mut big = (1_000_000u32).to_be_bytes().to_vec();
    big.extend_from_slice(&[0u8; 64]);
    expect_closed_after(ns.addr, &big).await;
    // Length field too short to hold the header-length field.
    expect_closed_after(ns.addr, &[0, 0, 0, 2, 0, 0]).await;
    // A well-framed header that is not JSON.
    let header = b"not json at all";
    let mut frame = ((4 + header.len()) as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&(header.len() as u32).to_be_bytes());
    frame.extend_from_slice(header);
    expect_closed_after(ns.addr, &frame).await;
    // JSON but no code.
    let header = br#"{"opaque":1}"#;
    let mut frame = ((4 + header.len()) as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&(header.len() as u32).to_be_bytes());
    frame.extend_from_slice(header);
    expect_closed_after(ns.addr, &frame).await;

    // The server keeps serving an existing and a new client.
    assert_eq!(
        call(&survivor, request::GET_BROKER_CLUSTER_INFO, &[])
            .await
            .code,
        response::SUCCESS
    );
    let second = RemotingClient::connect(ns.addr, T).await.unwrap();
    assert_eq!(
        call(&second, request::GET_ALL_TOPIC_LIST_FROM_NAMESERVER, &[])
            .await
            .code,
        response::SUCCESS
    );
    ns.stop().await;
}

/// Waits until the server closes `stream`; returns how long that took (panics after `T`).
async fn closed_after(stream: &mut TcpStream) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 256];
    let read = tokio::time::timeout(T, stream.read(&mut buf))
        .await
        .expect("server closes the connection in time");
    assert!(
        matches!(read, Ok(0) | Err(_)),
        "expected close, got {read:?}"
    );
    started.elapsed()
}

#[tokio::test]
async fn connection_limit_frame_deadline_and_idle_timeout_apply_to_the_name_server() {
    let ns = start(NamesrvConfig {
        max_connections: 1,
        idle_timeout: Duration::from_secs(1),
        frame_read_timeout: Duration::from_millis(200),
        ..local_config()
    })
    .await;
    assert_eq!(ns.limits.limit(), 1);
    let first = RemotingClient::connect(ns.addr, T).await.unwrap();
    let reply = call(&first, request::GET_BROKER_CLUSTER_INFO, &[]).await;
    assert_eq!(reply.code, response::SUCCESS);
    let mut refused = TcpStream::connect(ns.addr).await.unwrap();
    let waited = closed_after(&mut refused).await;
    assert!(
        waited < Duration::from_millis(900),
        "closed at once: {waited:?}"
    );
    assert_eq!(ns.limits.counters().snapshot().refused_over_limit, 1);
    drop(first);
    let deadline = Instant::now() + T;
    while ns.limits.open() > 0 {
        assert!(
            Instant::now() < deadline,
            "the closed client frees its place"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let mut slow = TcpStream::connect(ns.addr).await.unwrap();
    slow.write_all(&[0, 0, 1]).await.unwrap();
    let waited = closed_after(&mut slow).await;
    assert!(
        waited >= Duration::from_millis(150) && waited < Duration::from_millis(900),
        "closed by the 200 ms frame deadline, before the 1 s idle timeout: {waited:?}"
    );
    drop(slow);
    let deadline = Instant::now() + T;
    while ns.limits.open() > 0 {
        assert!(Instant::now() < deadline, "the slow client frees its place");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let mut silent = TcpStream::connect(ns.addr).await.unwrap();
    let waited = closed_after(&mut silent).await;
    assert!(
        waited >= Duration::from_millis(900),
        "idle for 1 s: {waited:?}"
    );
    let counts = ns.limits.counters().snapshot();
    assert_eq!(
        (counts.closed_frame_timeout, counts.closed_idle),
        (1, 1),
        "{counts:?}"
    );
    ns.stop().await;
}

#[tokio::test]
async fn zero_connection_limits_are_refused_naming_the_key() {
    let error = NameServer::bind(NamesrvConfig {
        max_connections: 0,
        ..local_config()
    })
    .await
    .unwrap_err();
    assert!(error.to_string().contains("maxConnections"), "{error}");
    let error = NameServer::bind(NamesrvConfig {
        partial_frame_budget_bytes: 10,
        ..local_config()
    })
    .await
    .unwrap_err();
    assert!(
        error.to_string().contains("partialFrameBudgetBytes"),
        "{error}"
    );
}

#[tokio::test]
async fn shutdown_closes_connections() {
    let ns = start(local_config()).await;
    let client = RemotingClient::connect(ns.addr, T).await.unwrap();
    assert_eq!(
        call(&client, request::GET_BROKER_CLUSTER_INFO, &[])
            .await
            .code,
        response::SUCCESS
    );
    let addr = ns.addr;
    ns.stop().await;
    assert!(client.closed(T).await);
    assert!(RemotingClient::connect(addr, Duration::from_millis(500))
        .await
        .is_err());
}

#[tokio::test]
async fn second_master_for_a_broker_name_is_refused_until_the_first_is_gone() {
    let ns = start(local_config()).await;
    let first = NamesrvClient::new();
    first
        .register_broker(
            ns.addr,
            &broker_header("broker-a", "127.0.0.1:10911", 0),
            &broker_body(),
            T,
        )
        .await
        .unwrap();
    // A slave of the group, over its own connection.
    let slave = NamesrvClient::new();
    let reply = slave
        .register_broker(
            ns.addr,
            &broker_header("broker-a", "127.0.0.1:10921", 1),
            &RegisterBrokerBody::default(),
            T,
        )
        .await
        .unwrap();
    assert_eq!(reply.result.master_addr.as_deref(), Some("127.0.0.1:10911"));

    // Another address as master of broker-a: refused, with a typed error.
    let second = NamesrvClient::new();
    let err = second
        .register_broker(
            ns.addr,
            &broker_header("broker-a", "127.0.0.1:10931", 0),
            &broker_body(),
            T,
        )
        .await
        .unwrap_err();
    let (code, remark) = err.rejection().expect("a name server refusal");
    assert_eq!(code, response::SYSTEM_ERROR);
    let remark = remark.unwrap_or_default();
    assert!(
        remark.contains(
            "broker name broker-a already has a live master at 127.0.0.1:10911 \
             (brokerName, brokerId=0): a second master with the same brokerName is refused"
        ),
        "{remark}"
    );
    assert!(err.is_second_master(), "{err}");
    let client = RemotingClient::connect(ns.addr, T).await.unwrap();
    let v = json(&route(&client, "TopicA").await);
    assert_eq!(v["brokerDatas"][0]["brokerAddrs"]["0"], "127.0.0.1:10911");

    // The master's connection closes: the slave, promoted, takes id 0 from its address.
    first.close_all().await;
    let deadline = Instant::now() + T;
    loop {
        let promoted = slave
            .register_broker(
                ns.addr,
                &broker_header("broker-a", "127.0.0.1:10921", 0),
                &broker_body(),
                T,
            )
            .await;
        match promoted {
            Ok(_) => break,
            Err(e) if e.is_second_master() && Instant::now() < deadline => {
                // The server has not yet seen the close.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("promotion refused: {e}"),
        }
    }
    let v = json(&route(&client, "TopicA").await);
    assert_eq!(
        v["brokerDatas"][0]["brokerAddrs"],
        serde_json::json!({"0": "127.0.0.1:10921"})
    );
    // The refused broker is still refused: the group has a live master again.
    let err = second
        .register_broker(
            ns.addr,
            &broker_header("broker-a", "127.0.0.1:10931", 0),
            &broker_body(),
            T,
        )
        .await
        .unwrap_err();
    assert!(err.is_second_master(), "{err}");
    slave.close_all().await;
    second.close_all().await;
    ns.stop().await;
}

/// Failover over TCP: the promoted slave's registration with a higher master epoch (the
/// `ferromqMasterEpoch` ext field) replaces the live master at once, in routes and in
/// clusterList; equal, missing and lower epochs are refused; the deposed master re-registering
/// as a slave under its own id leaves id 0.
#[tokio::test]
async fn a_higher_master_epoch_replaces_the_live_master_in_routes_at_once() {
    const OLD: &str = "127.0.0.1:10911";
    const NEW: &str = "127.0.0.1:10921";
    let ns = start(local_config()).await;
    let old = NamesrvClient::new();
    old.register_broker_with_epoch(
        ns.addr,
        &broker_header("broker-a", OLD, 0),
        Some(1),
        &broker_body(),
        T,
    )
    .await
    .unwrap();
    let new = NamesrvClient::new();
    new.register_broker(
        ns.addr,
        &broker_header("broker-a", NEW, 1),
        &RegisterBrokerBody::default(),
        T,
    )
    .await
    .unwrap();
    let client = RemotingClient::connect(ns.addr, T).await.unwrap();

    // Equal and missing epochs: the existing refusal.
    for epoch in [Some(1), None] {
        let err = new
            .register_broker_with_epoch(
                ns.addr,
                &broker_header("broker-a", NEW, 0),
                epoch,
                &broker_body(),
                T,
            )
            .await
            .unwrap_err();
        assert!(err.is_second_master(), "epoch {epoch:?}: {err}");
    }
    let v = json(&route(&client, "TopicA").await);
    assert_eq!(
        v["brokerDatas"][0]["brokerAddrs"],
        serde_json::json!({"0": OLD, "1": NEW})
    );

    // A higher epoch, while the old master's connection is still open: replaced at once.
    new.register_broker_with_epoch(
        ns.addr,
        &broker_header("broker-a", NEW, 0),
        Some(2),
        &broker_body(),
        T,
    )
    .await
    .unwrap();
    let v = json(&route(&client, "TopicA").await);
    assert_eq!(
        v["brokerDatas"][0]["brokerAddrs"],
        serde_json::json!({"0": NEW})
    );
    let info = json(&call(&client, request::GET_BROKER_CLUSTER_INFO, &[]).await);
    assert_eq!(
        info["brokerAddrTable"]["broker-a"]["brokerAddrs"],
        serde_json::json!({"0": NEW})
    );

    // The deposed master still registering as master: refused, naming both epochs.
    let err = old
        .register_broker_with_epoch(
            ns.addr,
            &broker_header("broker-a", OLD, 0),
            Some(1),
            &broker_body(),
            T,
        )
        .await
        .unwrap_err();
    assert!(err.is_deposed_master(), "{err}");
    let (_, remark) = err.rejection().unwrap();
    let remark = remark.unwrap_or_default();
    assert!(
        remark.contains("master epoch 1 refused") && remark.contains("master epoch is 2"),
        "{remark}"
    );
    // As a slave under its own id it joins the group and learns the new master.
    let reply = old
        .register_broker(
            ns.addr,
            &broker_header("broker-a", OLD, 2),
            &RegisterBrokerBody::default(),
            T,
        )
        .await
        .unwrap();
    assert_eq!(reply.result.master_addr.as_deref(), Some(NEW));
    let v = json(&route(&client, "TopicA").await);
    assert_eq!(
        v["brokerDatas"][0]["brokerAddrs"],
        serde_json::json!({"0": NEW, "2": OLD})
    );

    // A malformed epoch is refused naming the field, and changes nothing.
    let mut fields = ext(&[
        ("brokerName", "broker-a"),
        ("brokerAddr", "127.0.0.1:10931"),
        ("clusterName", "DefaultCluster"),
        ("haServerAddr", "x"),
        ("brokerId", "0"),
    ]);
    fields.insert("ferromqMasterEpoch", "-3");
    let r = client
        .invoke(
            RemotingCommand::new_request(request::REGISTER_BROKER, fields),
            T,
        )
        .await
        .unwrap();
    assert_eq!(r.code, response::SYSTEM_ERROR);
    assert!(r.remark.unwrap_or_default().contains("ferromqMasterEpoch"));
    let v = json(&route(&client, "TopicA").await);
    assert_eq!(v["brokerDatas"][0]["brokerAddrs"]["0"], NEW);

    old.close_all().await;
    new.close_all().await;
    ns.stop().await;
}
