//! TLS on the remoting port (`tls.server.mode`): enforcing refuses a plain client and serves
//! a TLS one; permissive serves both on the same port; a missing or bad certificate file
//! stops the broker at start with an error naming it. Certificates are made per test
//! (rcgen, self-signed for 127.0.0.1).

mod common;

use std::path::Path;

use ferromq_broker::{Broker, BrokerConfig};
use ferromq_protocol::remoting::client::RemotingClient;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::tls::ClientTls;
use ferromq_protocol::remoting::{ClientOptions, RemotingCommand};

use common::TIMEOUT;

fn tls_config(dir: &Path, mode: &str, cert: &Path, key: &Path) -> BrokerConfig {
    BrokerConfig {
        tls_server_mode: mode.into(),
        tls_server_cert_path: Some(cert.to_path_buf()),
        tls_server_key_path: Some(key.to_path_buf()),
        frame_read_timeout_millis: 2_000,
        ..common::broker_config(&dir.join("store"), true)
    }
}

async fn tls_client(broker: &Broker, ca: &Path) -> RemotingClient {
    let options = ClientOptions {
        connect_timeout: TIMEOUT,
        tls: Some(ClientTls::from_ca_file(ca, None).expect("CA file")),
        ..ClientOptions::default()
    };
    RemotingClient::connect_with(broker.local_addr(), options)
        .await
        .expect("TLS connect")
}

/// A request every broker serves: GET_BROKER_CONFIG.
async fn served(client: &RemotingClient) -> bool {
    let command = RemotingCommand::new_request(request::GET_BROKER_CONFIG, Default::default());
    matches!(client.invoke(command, TIMEOUT).await, Ok(reply) if reply.code == response::SUCCESS)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enforcing_refuses_a_plain_client_and_serves_tls() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = common::certificate(dir.path());
    let broker = Broker::start(tls_config(dir.path(), "enforcing", &cert, &key))
        .await
        .expect("broker starts with TLS");
    let secure = tls_client(&broker, &cert).await;
    assert!(served(&secure).await, "a TLS client is served");
    let plain = common::client(broker.local_addr()).await;
    assert!(!served(&plain).await, "a plain client must not be served");
    assert!(
        plain.closed(TIMEOUT).await,
        "the plain connection is closed"
    );
    // The broker counts the refusal right after it drops the connection, so the client may
    // see the close first: wait (bounded) for the count.
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let refused = loop {
        let refused = broker
            .context()
            .metrics
            .refused_count("tls_handshake_failed");
        if refused >= 1 || tokio::time::Instant::now() >= deadline {
            break refused;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    assert_eq!(refused, 1);
    assert!(served(&secure).await, "still serving TLS clients");
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permissive_serves_plain_and_tls_on_one_port() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = common::certificate(dir.path());
    let broker = Broker::start(tls_config(dir.path(), "permissive", &cert, &key))
        .await
        .expect("broker starts with TLS");
    let secure = tls_client(&broker, &cert).await;
    let plain = common::client(broker.local_addr()).await;
    assert!(served(&secure).await, "TLS client");
    assert!(served(&plain).await, "plain client");
    // Sends through both, to be sure frames of every size pass.
    for client in [&secure, &plain] {
        let reply = common::send(client, "TlsTopic", 0, &vec![7u8; 40_000], "t").await;
        assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    }
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_refuses_a_server_it_does_not_trust() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = common::certificate(dir.path());
    let other = tempfile::tempdir().unwrap();
    let (untrusted_ca, _) = common::certificate(other.path());
    let broker = Broker::start(tls_config(dir.path(), "enforcing", &cert, &key))
        .await
        .unwrap();
    let options = ClientOptions {
        tls: Some(ClientTls::from_ca_file(&untrusted_ca, None).unwrap()),
        ..ClientOptions::default()
    };
    let error = RemotingClient::connect_with(broker.local_addr(), options)
        .await
        .expect_err("an untrusted certificate fails the handshake");
    assert!(error.to_string().contains("cannot connect"), "{error}");
    broker.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_bad_certificate_file_is_a_start_up_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = common::certificate(dir.path());
    let missing = dir.path().join("missing-cert.pem");
    let error = Broker::start(tls_config(dir.path(), "enforcing", &missing, &key))
        .await
        .err()
        .expect("start fails")
        .to_string();
    assert!(error.contains("missing-cert.pem"), "{error}");
    let garbage = dir.path().join("garbage-cert.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let error = Broker::start(tls_config(dir.path(), "permissive", &garbage, &key))
        .await
        .err()
        .expect("start fails")
        .to_string();
    assert!(error.contains("garbage-cert.pem"), "{error}");
    let error = Broker::start(tls_config(dir.path(), "enforcing", &cert, &cert))
        .await
        .err()
        .expect("a certificate is not a key")
        .to_string();
    assert!(error.contains("server.pem"), "{error}");
    let mut config = common::broker_config(&dir.path().join("store"), true);
    config.tls_server_mode = "strict".into();
    let error = Broker::start(config)
        .await
        .err()
        .expect("bad mode")
        .to_string();
    assert!(error.contains("tls.server.mode"), "{error}");
}
