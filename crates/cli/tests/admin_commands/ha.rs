//! `haStatus` against fake brokers answering GET_BROKER_HA_STATUS (907) and an in-process
//! name server: a master's slave table and a slave's master view, human and JSON; a broker
//! answering an error code or unreachable is shown and fails the command; `clusterList`
//! shows each broker's role.

use std::net::SocketAddr;
use std::sync::Arc;

use ferromq_namesrv::{NameServer, NamesrvConfig, RouteRegistry};
use ferromq_protocol::remoting::body::topic::RegisterBrokerBody;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::namesrv::RegisterBrokerRequestHeader;
use ferromq_protocol::remoting::RemotingCommand;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::common::{admin, ok, ok_json};

const MASTER_STATUS: &str = r#"{"master":true,"masterCommitLogMaxOffset":12345,"inSyncSlaveNums":2,
 "watermark":12000,"minInSyncReplicas":1,"brokerRole":"SYNC_MASTER",
 "haConnectionInfo":[{"addr":"127.0.0.1:40000","brokerId":1,"slaveAckOffset":12000,"diff":345,"lagTimeMs":12,"inSync":true,"transferredByteInSecond":1000,"transferFromWhere":0,"bytesStreamed":99999},
   {"addr":"127.0.0.1:40001","brokerId":2,"slaveAckOffset":9000,"diff":3345,"lagTimeMs":5000,"inSync":false,"transferredByteInSecond":0,"transferFromWhere":0}],
 "haClientRuntimeInfo":{"masterAddr":"127.0.0.1:10912","transferredByteInSecond":0,"maxOffset":0,"lastReadTimestamp":0,"lastWriteTimestamp":0,"masterFlushOffset":0,"isActivated":false}}"#;

/// As a RocketMQ slave writes it, plus ferromq's `watermark` and `brokerId`.
const SLAVE_STATUS: &str = r#"{"master":false,"masterCommitLogMaxOffset":0,"inSyncSlaveNums":0,
 "haConnectionInfo":[],
 "haClientRuntimeInfo":{"masterAddr":"127.0.0.1:10912","transferredByteInSecond":10,"maxOffset":11111,"watermark":11000,"brokerId":1,"lastReadTimestamp":1,"lastWriteTimestamp":2,"masterFlushOffset":11111,"isActivated":true}}"#;

/// How a fake broker answers 907.
#[derive(Clone, Copy)]
enum Answer {
    Body(&'static str),
    Error(i32, &'static str),
}

async fn fake_broker(answer: Answer) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream, answer));
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
        let reply = match (req.code, answer) {
            (request::GET_BROKER_HA_STATUS, Answer::Body(body)) => req
                .reply(response::SUCCESS, None)
                .with_body(body.as_bytes().to_vec()),
            (request::GET_BROKER_HA_STATUS, Answer::Error(code, remark)) => {
                req.reply(code, Some(remark.into()))
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

/// A name server with cluster `HaCluster` (broker-a: a master and a slave answering 907) and
/// cluster `BadCluster` (broker-b: a master answering SYSTEM_ERROR and a slave whose port
/// refuses connections). The runtime must stay alive while the servers are used.
struct Setup {
    _runtime: tokio::runtime::Runtime,
    namesrv: String,
    master: String,
    slave: String,
    failing: String,
    unreachable: String,
}

fn setup() -> Setup {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (namesrv, registry, master, slave, failing, unreachable) = runtime.block_on(async {
        let server = NameServer::bind(NamesrvConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..NamesrvConfig::default()
        })
        .await
        .unwrap();
        let namesrv = server.local_addr();
        let registry: Arc<RouteRegistry> = server.registry();
        tokio::spawn(server.run(std::future::pending::<()>()));
        let master = fake_broker(Answer::Body(MASTER_STATUS)).await;
        let slave = fake_broker(Answer::Body(SLAVE_STATUS)).await;
        let failing = fake_broker(Answer::Error(
            response::SYSTEM_ERROR,
            "HA service not started",
        ))
        .await;
        let unreachable = {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            l.local_addr().unwrap()
        };
        (namesrv, registry, master, slave, failing, unreachable)
    });
    register(&registry, "HaCluster", "broker-a", master, 0);
    register(&registry, "HaCluster", "broker-a", slave, 1);
    register(&registry, "BadCluster", "broker-b", failing, 0);
    register(&registry, "BadCluster", "broker-b", unreachable, 1);
    Setup {
        _runtime: runtime,
        namesrv: namesrv.to_string(),
        master: master.to_string(),
        slave: slave.to_string(),
        failing: failing.to_string(),
        unreachable: unreachable.to_string(),
    }
}

#[test]
fn ha_status_shows_a_masters_slaves_and_a_slaves_master() {
    let s = setup();
    let n = s.namesrv.as_str();

    let human = ok(&["haStatus", "-n", n, "-c", "HaCluster"]);
    assert!(
        human.contains(&format!(
            "broker-a {} (brokerId 0, MASTER, SYNC_MASTER)",
            s.master
        )),
        "{human}"
    );
    assert!(
        human.contains("masterCommitLogMaxOffset: 12345  inSyncSlaveNums: 2  watermark: 12000"),
        "{human}"
    );
    assert!(human.contains("#Slave Addr"), "{human}");
    let row = |addr: &str| {
        human
            .lines()
            .find(|l| l.starts_with(addr))
            .unwrap_or_else(|| panic!("no row for {addr}: {human}"))
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        row("127.0.0.1:40000"),
        ["127.0.0.1:40000", "1", "12000", "345", "12", "true"]
    );
    assert_eq!(
        row("127.0.0.1:40001"),
        ["127.0.0.1:40001", "2", "9000", "3345", "5000", "false"]
    );
    assert!(
        human.contains(&format!("broker-a {} (brokerId 1, SLAVE)", s.slave)),
        "{human}"
    );
    assert!(human.contains("#Master Addr"), "{human}");
    assert_eq!(
        row("127.0.0.1:10912"),
        ["127.0.0.1:10912", "11111", "11000", "true"]
    );

    let json = ok_json(&["haStatus", "-n", n, "-c", "HaCluster"]);
    let brokers = json["brokers"].as_array().unwrap();
    assert_eq!(brokers.len(), 2, "{json}");
    assert_eq!(brokers[0]["role"], "MASTER");
    assert_eq!(brokers[0]["brokerId"], 0);
    assert_eq!(brokers[0]["addr"], s.master.as_str());
    let ha = &brokers[0]["haStatus"];
    assert_eq!(ha["watermark"], 12000);
    assert_eq!(ha["haConnectionInfo"][0]["slaveAckOffset"], 12000);
    assert_eq!(ha["haConnectionInfo"][0]["inSync"], true);
    assert_eq!(ha["haConnectionInfo"][1]["inSync"], false);
    assert_eq!(brokers[1]["role"], "SLAVE");
    assert_eq!(
        brokers[1]["haStatus"]["haClientRuntimeInfo"]["maxOffset"],
        11111
    );
    assert_eq!(
        brokers[1]["haStatus"]["haClientRuntimeInfo"]["watermark"],
        11000
    );

    // -b: one broker, named through the name server.
    let json = ok_json(&["haStatus", "-n", n, "-b", &s.slave]);
    assert_eq!(json["brokers"].as_array().unwrap().len(), 1, "{json}");
    assert_eq!(json["brokers"][0]["brokerName"], "broker-a");
    assert_eq!(json["brokers"][0]["brokerId"], 1);
    // -b without a name server: the broker's own answer gives the role.
    let json = ok_json(&["haStatus", "-b", &s.master]);
    assert_eq!(json["brokers"][0]["role"], "MASTER", "{json}");

    // clusterList shows the roles.
    let clusters = ok_json(&["clusterList", "-n", n, "-c", "HaCluster"]);
    let roles: Vec<(i64, &str)> = clusters["brokers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["brokerId"].as_i64().unwrap(), b["role"].as_str().unwrap()))
        .collect();
    assert_eq!(roles, [(0, "MASTER"), (1, "SLAVE")], "{clusters}");
    let human = ok(&["clusterList", "-n", n, "-c", "HaCluster"]);
    assert!(human.lines().next().unwrap().contains("#Role"), "{human}");
    assert!(
        human
            .lines()
            .any(|l| l.contains(&s.slave) && l.contains("SLAVE")),
        "{human}"
    );
    assert!(
        human
            .lines()
            .any(|l| l.contains(&s.master) && l.contains("MASTER")),
        "{human}"
    );
}

#[test]
fn ha_status_error_replies_and_unreachable_brokers_fail_the_command() {
    let s = setup();
    let n = s.namesrv.as_str();

    let out = admin(&["haStatus", "-n", n, "-c", "BadCluster"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Both brokers are shown, each with its error.
    assert!(
        stdout.contains(&format!("broker-b {} (brokerId 0, MASTER)", s.failing)),
        "{stdout}"
    );
    assert!(stdout.contains("HA service not started"), "{stdout}");
    assert!(stdout.contains("SYSTEM_ERROR"), "{stdout}");
    assert!(
        stdout.contains(&format!("broker {} cannot be asked", s.unreachable)),
        "{stdout}"
    );
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with("error: 2 of 2 brokers did not report their HA status"),
        "{stderr}"
    );

    // JSON: the error per broker, still a failure.
    let out = admin(&["haStatus", "-n", n, "-c", "BadCluster", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
    let brokers = json["brokers"].as_array().unwrap();
    assert!(
        brokers[0]["error"]
            .as_str()
            .unwrap()
            .contains("HA service not started"),
        "{json}"
    );
    assert!(brokers[0].get("haStatus").is_none(), "{json}");
    assert_eq!(brokers[1]["role"], "SLAVE");
    assert!(brokers[1]["error"].as_str().is_some(), "{json}");

    // Every cluster (no -c): the good brokers are shown, the bad ones fail the command.
    let out = admin(&["haStatus", "-n", n]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("#Slave Addr") && stdout.contains("HA service not started"),
        "{stdout}"
    );

    // An unknown cluster is an error, not an empty success.
    let out = admin(&["haStatus", "-n", n, "-c", "NoSuchCluster"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("NoSuchCluster"));
}
