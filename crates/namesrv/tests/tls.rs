//! TLS on the name server's port (the broker's `tls.server.mode` and certificate files):
//! enforcing refuses a plain client before its first request and serves a TLS one;
//! permissive serves both on one port; a broker registers over TLS (`NamesrvClient` with
//! TLS). Certificates are made per test (rcgen, self-signed for 127.0.0.1).

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use ferromq_namesrv::{NameServer, NamesrvClient, NamesrvConfig};
use ferromq_protocol::remoting::body::topic::{RegisterBrokerBody, TopicConfig};
use ferromq_protocol::remoting::headers::namesrv::RegisterBrokerRequestHeader;
use ferromq_protocol::remoting::tls::ClientTls;
use ferromq_protocol::remoting::tls_server::{ServerTls, TlsMode};
use ferromq_protocol::remoting::{
    request, response, ClientOptions, RemotingClient, RemotingCommand,
};
use tokio::sync::oneshot;

const T: Duration = Duration::from_secs(5);

/// A name server with `mode` on 127.0.0.1; (address, refusal counter, stop).
async fn start(
    mode: TlsMode,
    cert: &Path,
    key: &Path,
) -> (
    SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicU64>,
    oneshot::Sender<()>,
) {
    let config = NamesrvConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        frame_read_timeout: Duration::from_secs(2),
        ..NamesrvConfig::default()
    };
    let tls = ServerTls::new(mode, Some(cert), Some(key)).expect("TLS set up");
    let server = NameServer::bind(config).await.unwrap().with_tls(tls);
    let addr = server.local_addr();
    let refusals = server.tls_refusal_counter();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    (addr, refusals, stop)
}

async fn tls_client(addr: SocketAddr, ca: &Path) -> RemotingClient {
    let options = ClientOptions {
        connect_timeout: T,
        tls: Some(ClientTls::from_ca_file(ca, None).expect("CA file")),
        ..ClientOptions::default()
    };
    RemotingClient::connect_with(addr, options)
        .await
        .expect("TLS connect")
}

/// Whether GET_BROKER_CLUSTER_INFO (a read every name server serves) is answered.
async fn served(client: &RemotingClient) -> bool {
    let command =
        RemotingCommand::new_request(request::GET_BROKER_CLUSTER_INFO, Default::default());
    matches!(client.invoke(command, T).await, Ok(reply) if reply.code == response::SUCCESS)
}

#[tokio::test]
async fn an_enforcing_name_server_refuses_a_plain_client_and_serves_tls() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = common::certificate(dir.path());
    let (addr, refusals, stop) = start(TlsMode::Enforcing, &cert, &key).await;
    let secure = tls_client(addr, &cert).await;
    assert!(served(&secure).await, "a TLS client is served");
    let plain = RemotingClient::connect(addr, T).await.expect("TCP connect");
    assert!(!served(&plain).await, "a plain client must not be served");
    assert!(plain.closed(T).await, "the plain connection is closed");
    assert_eq!(refusals.load(std::sync::atomic::Ordering::Relaxed), 1);

    // A broker registers over TLS, and a TLS client then reads its route.
    let registrar =
        NamesrvClient::new().with_tls(Some(ClientTls::from_ca_file(&cert, None).unwrap()));
    let header = RegisterBrokerRequestHeader {
        broker_name: "broker-a".into(),
        broker_addr: "127.0.0.1:10911".into(),
        cluster_name: "DefaultCluster".into(),
        ha_server_addr: "127.0.0.1:10912".into(),
        broker_id: 0,
        ..Default::default()
    };
    let mut body = RegisterBrokerBody::default();
    body.topic_config_serialize_wrapper
        .topic_config_table
        .insert("TlsTopic".into(), TopicConfig::new("TlsTopic"));
    registrar
        .register_broker(addr, &header, &body, T)
        .await
        .expect("registration over TLS");
    let mut ext = ferromq_protocol::remoting::ExtFields::new();
    ext.insert("topic", "TlsTopic");
    let reply = secure
        .invoke(
            RemotingCommand::new_request(request::GET_ROUTEINFO_BY_TOPIC, ext),
            T,
        )
        .await
        .unwrap();
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    // A plain registrar is refused.
    let plain_registrar = NamesrvClient::new();
    assert!(plain_registrar
        .register_broker(addr, &header, &body, Duration::from_secs(3))
        .await
        .is_err());
    assert!(served(&secure).await, "still serving TLS clients");
    let _ = stop.send(());
}

#[tokio::test]
async fn a_permissive_name_server_serves_plain_and_tls_clients() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = common::certificate(dir.path());
    let (addr, refusals, stop) = start(TlsMode::Permissive, &cert, &key).await;
    let secure = tls_client(addr, &cert).await;
    let plain = RemotingClient::connect(addr, T).await.expect("TCP connect");
    assert!(served(&secure).await, "a TLS client is served");
    assert!(served(&plain).await, "a plain client is served");
    assert_eq!(refusals.load(std::sync::atomic::Ordering::Relaxed), 0);
    let _ = stop.send(());
}
