//! `getBrokerEpoch` against fake brokers answering GET_BROKER_EPOCH_CACHE (1007) and an
//! in-process name server: one row per epoch entry of every member of the broker group (a
//! pre-epoch broker shows epoch 0 over its log), human and JSON; `-b` selects the group by
//! name; a broker answering an error code is shown and fails the command.

use std::net::SocketAddr;
use std::sync::Arc;

use ferromq_namesrv::{NameServer, NamesrvConfig, RouteRegistry};
use ferromq_protocol::controller::{BrokerEpochCache, EpochEntryInfo};
use ferromq_protocol::remoting::body::topic::RegisterBrokerBody;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::namesrv::RegisterBrokerRequestHeader;
use ferromq_protocol::remoting::RemotingCommand;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::common::{admin, ok, ok_json};

/// What a fake broker answers to 1007: a body, or an error code.
#[derive(Clone)]
enum Answer {
    Body(Vec<u8>),
    Error(i32),
}

async fn fake_broker(answer: Answer) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream, answer.clone()));
        }
    });
    addr
}

async fn serve(mut stream: TcpStream, answer: Answer) {
    loop {
        let mut len = [0u8; 4];
        if stream.read_exact(&mut len).await.is_err() {
            return;
        }
        let mut frame = vec![0u8; 4 + u32::from_be_bytes(len) as usize];
        frame[..4].copy_from_slice(&len);
        if stream.read_exact(&mut frame[4..]).await.is_err() {
            return;
        }
        let Ok(req) = RemotingCommand::decode(frame.into()) else {
            return;
        };
        let reply = match (req.code, &answer) {
            (request::GET_BROKER_EPOCH_CACHE, Answer::Body(body)) => {
                req.reply(response::SUCCESS, None).with_body(body.clone())
            }
            (request::GET_BROKER_EPOCH_CACHE, Answer::Error(code)) => {
                req.reply(*code, Some("epochs unavailable".into()))
            }
            (code, _) => req.reply(
                response::REQUEST_CODE_NOT_SUPPORTED,
                Some(format!("fake broker: code {code}")),
            ),
        };
        if stream.write_all(&reply.to_bytes().unwrap()).await.is_err() {
            return;
        }
    }
}

fn register(registry: &RouteRegistry, cluster: &str, name: &str, addr: SocketAddr, id: i64) {
    let header = RegisterBrokerRequestHeader {
        broker_name: name.into(),
        broker_addr: addr.to_string(),
        cluster_name: cluster.into(),
        ha_server_addr: addr.to_string(),
        broker_id: id,
        ..Default::default()
    };
    registry
        .register_broker(&header, &RegisterBrokerBody::default(), None)
        .unwrap();
}

fn cache(id: u64, epochs: &[(u64, u64, u64)], max_offset: u64) -> Vec<u8> {
    serde_json::to_vec(&BrokerEpochCache {
        cluster_name: "EpochCluster".into(),
        broker_name: "broker-e".into(),
        broker_id: id,
        epochs: epochs
            .iter()
            .map(|&(epoch, start_offset, end_offset)| EpochEntryInfo {
                epoch,
                start_offset,
                end_offset,
            })
            .collect(),
        max_offset,
    })
    .unwrap()
}

#[test]
fn get_broker_epoch_prints_each_entry_of_each_member() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (namesrv, master, slave, old, failing) = runtime.block_on(async {
        let server = NameServer::bind(NamesrvConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..NamesrvConfig::default()
        })
        .await
        .unwrap();
        let namesrv = server.local_addr();
        let registry: Arc<RouteRegistry> = server.registry();
        tokio::spawn(server.run(std::future::pending::<()>()));
        let master = fake_broker(Answer::Body(cache(0, &[(1, 0, 500), (3, 500, 900)], 900))).await;
        let slave = fake_broker(Answer::Body(cache(1, &[(1, 0, 500), (3, 500, 700)], 700))).await;
        let old = fake_broker(Answer::Body(cache(0, &[], 4096))).await;
        let failing = fake_broker(Answer::Error(response::SYSTEM_ERROR)).await;
        register(&registry, "EpochCluster", "broker-e", master, 0);
        register(&registry, "EpochCluster", "broker-e", slave, 1);
        register(&registry, "OldCluster", "broker-o", old, 0);
        register(&registry, "OldCluster", "broker-f", failing, 0);
        (namesrv.to_string(), master, slave, old, failing)
    });
    let n = namesrv.as_str();

    let human = ok(&["getBrokerEpoch", "-n", n, "-b", "broker-e"]);
    let lines: Vec<Vec<&str>> = human
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        [
            "#ClusterName",
            "#BrokerName",
            "#BrokerAddr",
            "#BrokerId",
            "#Epoch",
            "#StartOffset",
            "#EndOffset"
        ],
        "{human}"
    );
    let (m, s) = (master.to_string(), slave.to_string());
    assert_eq!(lines.len(), 5, "{human}");
    assert!(lines.contains(&vec!["EpochCluster", "broker-e", &m, "0", "1", "0", "500"]));
    assert!(lines.contains(&vec![
        "EpochCluster",
        "broker-e",
        &m,
        "0",
        "3",
        "500",
        "900"
    ]));
    assert!(lines.contains(&vec![
        "EpochCluster",
        "broker-e",
        &s,
        "1",
        "3",
        "500",
        "700"
    ]));

    let json = ok_json(&["getBrokerEpoch", "-n", n, "-c", "EpochCluster"]);
    let brokers = json["brokers"].as_array().unwrap();
    assert_eq!(brokers.len(), 2, "{json}");
    assert_eq!(brokers[0]["brokerId"], 0);
    assert_eq!(brokers[0]["epochs"][1]["epoch"], 3);
    assert_eq!(brokers[0]["epochs"][1]["startOffset"], 500);
    assert_eq!(brokers[0]["epochs"][1]["endOffset"], 900);
    assert_eq!(brokers[1]["maxOffset"], 700);

    // A broker without entries: epoch 0 over its log.
    let human = ok(&["getBrokerEpoch", "-n", n, "-b", "broker-o"]);
    assert!(
        human.contains(&format!("{old}"))
            && human.lines().nth(1).is_some_and(|l| l
                .split_whitespace()
                .collect::<Vec<_>>()
                .ends_with(&["0", "0", "0", "4096"])),
        "{human}"
    );

    // A failing broker is shown and fails the command; an unknown group is an error.
    let out = admin(&["getBrokerEpoch", "-n", n, "-c", "OldCluster"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&failing.to_string()), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains(&old.to_string()));
    let out = admin(&["getBrokerEpoch", "-n", n, "-b", "nobody"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    drop(runtime);
}
