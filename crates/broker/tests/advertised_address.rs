//! The address a broker tells the world: with `brokerIP1` and `brokerAdvertisedPort` set, the
//! name server's route and cluster info name that address (not the one the broker listens
//! on), and message ids carry it as their store host, as RocketMQ's `storeHost` is
//! `brokerIP1:listenPort`. The broker itself still listens on `bindAddress`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use ferromq_broker::{Broker, BrokerConfig};
use ferromq_namesrv::{NameServer, NamesrvConfig};
use ferromq_protocol::remoting::client::RemotingClient;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::send::{
    SendMessageRequestHeaderV2, SendMessageResponseHeader,
};
use ferromq_protocol::remoting::RemotingCommand;
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(5);

/// The route of `topic` from the name server, once it has one (registration runs at start).
async fn route(namesrv: &RemotingClient, topic: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut ext = ferromq_protocol::remoting::ExtFields::default();
        ext.insert("topic", topic);
        let command = RemotingCommand::new_request(request::GET_ROUTEINFO_BY_TOPIC, ext);
        let reply = namesrv.invoke(command, TIMEOUT).await.expect("route reply");
        if reply.code == response::SUCCESS {
            return serde_json::from_slice(reply.body.as_deref().expect("route body")).unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "no route for {topic} after 10 s: code {} {:?}",
            reply.code,
            reply.remark
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_registers_and_stamps_its_advertised_address() {
    let namesrv = NameServer::bind(NamesrvConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..NamesrvConfig::default()
    })
    .await
    .unwrap();
    let namesrv_addr = namesrv.local_addr();
    let (stop_namesrv, namesrv_stopped) = tokio::sync::oneshot::channel::<()>();
    let namesrv_task = tokio::spawn(namesrv.run(async move {
        let _ = namesrv_stopped.await;
    }));

    // A port nobody else takes while the test runs stands in for a proxy's.
    let proxy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_port = proxy.local_addr().unwrap().port();
    let advertised = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)), proxy_port);

    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BrokerConfig {
        broker_ip1: advertised.ip(),
        bind_address: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        broker_advertised_port: Some(proxy_port),
        listen_port: 0,
        namesrv_addr: namesrv_addr.to_string(),
        store_path_root_dir: dir.path().to_path_buf(),
        mapped_file_size_commit_log: 1 << 20,
        max_message_size: 64 * 1024,
        ..BrokerConfig::default()
    })
    .await
    .expect("broker starts");
    assert_eq!(broker.local_addr().ip(), IpAddr::V4(Ipv4Addr::LOCALHOST));
    assert_ne!(broker.local_addr().port(), proxy_port);
    assert_eq!(broker.context().broker_addr, advertised);

    let client = RemotingClient::connect(namesrv_addr, TIMEOUT)
        .await
        .unwrap();
    let tbw102 = route(&client, "TBW102").await;
    assert_eq!(
        tbw102["brokerDatas"][0]["brokerAddrs"]["0"],
        advertised.to_string(),
        "{tbw102}"
    );
    let command =
        RemotingCommand::new_request(request::GET_BROKER_CLUSTER_INFO, Default::default());
    let reply = client.invoke(command, TIMEOUT).await.unwrap();
    assert_eq!(reply.code, response::SUCCESS);
    let cluster: Value = serde_json::from_slice(reply.body.as_deref().unwrap()).unwrap();
    assert_eq!(
        cluster["brokerAddrTable"]["broker-a"]["brokerAddrs"]["0"],
        advertised.to_string(),
        "{cluster}"
    );

    // A send reaches the broker where it listens; its message id names the advertised
    // address: 4 bytes of IPv4, 4 of port, 8 of CommitLog offset, in uppercase hex.
    let producer = RemotingClient::connect(broker.local_addr(), TIMEOUT)
        .await
        .unwrap();
    let header = SendMessageRequestHeaderV2 {
        a: "PG".into(),
        b: "AdvertisedTopic".into(),
        c: "TBW102".into(),
        d: 4,
        e: 0,
        ..Default::default()
    };
    let command = RemotingCommand::request_with_header(request::SEND_MESSAGE_V2, &header)
        .with_body(b"m".to_vec());
    let sent = producer.invoke(command, TIMEOUT).await.unwrap();
    assert_eq!(sent.code, response::SUCCESS, "{:?}", sent.remark);
    let reply: SendMessageResponseHeader = sent.decode_header().unwrap();
    let store_host = format!("7F000002{:08X}", u32::from(proxy_port));
    assert!(
        reply.msg_id.starts_with(&store_host),
        "{} does not start with {store_host}",
        reply.msg_id
    );
    // The topic created by that send is registered under the advertised address too.
    let created = route(&client, "AdvertisedTopic").await;
    assert_eq!(
        created["brokerDatas"][0]["brokerAddrs"]["0"],
        advertised.to_string()
    );

    broker.shutdown().await.expect("clean shutdown unregisters");
    let _ = stop_namesrv.send(());
    tokio::time::timeout(TIMEOUT, namesrv_task)
        .await
        .expect("name server stops")
        .unwrap();
    drop(proxy);
}
