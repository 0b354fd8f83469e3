//! GET_BROKER_CONFIG, UPDATE_BROKER_CONFIG and GET_BROKER_RUNTIME_INFO over real TCP: a run-time
//! key changes what the broker does at once and shows in the config; a key fixed at startup,
//! an unknown key and a bad value are refused with a remark naming the key; the runtime table
//! carries RocketMQ's keys with real values.

use std::collections::BTreeMap;
use std::time::Duration;

use ferromq_broker::{Broker, BrokerConfig};
use ferromq_protocol::remoting::body::misc::KvTable;
use ferromq_protocol::remoting::client::RemotingClient;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::send::{
    SendMessageRequestHeaderV2, SendMessageResponseHeader,
};
use ferromq_protocol::remoting::RemotingCommand;

const TIMEOUT: Duration = Duration::from_secs(5);

async fn broker(dir: &std::path::Path) -> Broker {
    let config = BrokerConfig {
        listen_port: 0,
        store_path_root_dir: dir.to_path_buf(),
        flush_disk_type: "SYNC_FLUSH".into(),
        default_topic_queue_nums: 4,
        mapped_file_size_commit_log: 1 << 20,
        max_message_size: 64 * 1024,
        ..BrokerConfig::default()
    };
    Broker::start(config).await.expect("broker starts")
}

async fn send(client: &RemotingClient, topic: &str, queue_id: i32) -> RemotingCommand {
    let header = SendMessageRequestHeaderV2 {
        a: "PG".into(),
        b: topic.into(),
        c: "TBW102".into(),
        d: 8,
        e: queue_id,
        ..Default::default()
    };
    let command = RemotingCommand::request_with_header(request::SEND_MESSAGE_V2, &header)
        .with_body(b"m".to_vec());
    client.invoke(command, TIMEOUT).await.expect("send reply")
}

async fn update(client: &RemotingClient, body: &str) -> RemotingCommand {
    let command = RemotingCommand::new_request(request::UPDATE_BROKER_CONFIG, Default::default())
        .with_body(body.as_bytes().to_vec());
    client.invoke(command, TIMEOUT).await.expect("update reply")
}

/// The config as a map, and the data version's counter.
async fn config(client: &RemotingClient) -> (BTreeMap<String, String>, i64) {
    let command = RemotingCommand::new_request(request::GET_BROKER_CONFIG, Default::default());
    let reply = client.invoke(command, TIMEOUT).await.expect("config reply");
    assert_eq!(reply.code, response::SUCCESS);
    let text = String::from_utf8(reply.body.unwrap().to_vec()).unwrap();
    let table = text
        .lines()
        .map(|line| {
            let (key, value) = line.split_once('=').expect("key=value");
            (key.to_string(), value.to_string())
        })
        .collect();
    let version: serde_json::Value =
        serde_json::from_str(reply.ext_fields.get("version").expect("version ext field")).unwrap();
    (table, version["counter"].as_i64().expect("counter"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_time_keys_take_effect_and_fixed_keys_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path()).await;
    let client = RemotingClient::connect(broker.local_addr(), TIMEOUT)
        .await
        .expect("connect");

    let (before, counter) = config(&client).await;
    assert_eq!(before["autoCreateTopicEnable"], "true");
    assert_eq!(before["defaultTopicQueueNums"], "4");
    assert_eq!(before["brokerName"], "broker-a");
    assert_eq!(counter, 0);

    // Off: a send to an unknown topic is refused.
    assert_eq!(
        update(&client, "autoCreateTopicEnable=false\n").await.code,
        response::SUCCESS
    );
    assert_eq!(
        send(&client, "RtNew", 3).await.code,
        response::TOPIC_NOT_EXIST
    );
    let (after, counter) = config(&client).await;
    assert_eq!(after["autoCreateTopicEnable"], "false");
    assert_eq!(counter, 1);

    // On again with one default queue: the topic is created with one queue, so queue 3 is
    // taken modulo 1.
    let reply = update(
        &client,
        "autoCreateTopicEnable=true\ndefaultTopicQueueNums=1\n",
    )
    .await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    let sent = send(&client, "RtNew", 3).await;
    assert_eq!(sent.code, response::SUCCESS, "{:?}", sent.remark);
    let header: SendMessageResponseHeader = sent.decode_header().unwrap();
    assert_eq!(header.queue_id, 0);

    // Refusals name the key; nothing of a refused update is applied.
    let fixed = update(&client, "defaultTopicQueueNums=2\nlistenPort=1\n").await;
    assert_eq!(fixed.code, response::NO_PERMISSION);
    let remark = fixed.remark.unwrap_or_default();
    assert!(remark.contains("listenPort"), "{remark}");
    let unknown = update(&client, "noSuchKey=1").await;
    assert_eq!(unknown.code, response::INVALID_PARAMETER);
    assert!(unknown.remark.unwrap_or_default().contains("noSuchKey"));
    let bad = update(&client, "brokerSuspendMaxTimeMillis=soon").await;
    assert_eq!(bad.code, response::INVALID_PARAMETER);
    assert!(bad
        .remark
        .unwrap_or_default()
        .contains("brokerSuspendMaxTimeMillis"));
    let (last, counter) = config(&client).await;
    assert_eq!(last["defaultTopicQueueNums"], "1");
    assert_eq!(counter, 2);

    drop(client);
    broker.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_info_has_rocketmq_keys_with_real_values() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path()).await;
    let client = RemotingClient::connect(broker.local_addr(), TIMEOUT)
        .await
        .expect("connect");
    for _ in 0..3 {
        assert_eq!(send(&client, "RtInfo", 0).await.code, response::SUCCESS);
    }
    let command =
        RemotingCommand::new_request(request::GET_BROKER_RUNTIME_INFO, Default::default());
    let reply = client.invoke(command, TIMEOUT).await.expect("runtime info");
    assert_eq!(reply.code, response::SUCCESS);
    let table: KvTable = serde_json::from_slice(reply.body.as_deref().unwrap()).unwrap();
    let table = table.table;
    let number = |key: &str| -> f64 {
        table
            .get(key)
            .unwrap_or_else(|| panic!("missing {key}: {table:?}"))
            .parse()
            .unwrap_or_else(|_| panic!("{key} is not a number: {table:?}"))
    };
    assert!(number("commitLogMaxOffset") > number("commitLogMinOffset"));
    assert_eq!(number("msgPutTotalTodayNow"), 3.0);
    assert_eq!(number("putMessageTimesTotal"), 3.0);
    assert!(number("clientConnections") >= 1.0);
    assert!(number("flushCountTotal") >= 1.0, "SYNC_FLUSH sends fsync");
    assert!(
        number("flushCountLastMinute") >= 1.0,
        "the broker is younger than a minute"
    );
    assert!(number("flushLatencyP99Micros") > 0.0, "{table:?}");
    assert!(number("flushLatencyP99Micros") >= number("flushLatencyP50Micros"));
    assert!(number("dispatchBehindBytes") >= 0.0);
    for key in ["putTps", "getTransferredTps"] {
        let rates: Vec<f64> = table[key]
            .split(' ')
            .map(|r| r.parse().expect("a rate"))
            .collect();
        assert_eq!(rates.len(), 3, "{key}: 10 s, 1 min, 10 min");
    }
    let put_rates: Vec<f64> = table["putTps"]
        .split(' ')
        .map(|r| r.parse().unwrap())
        .collect();
    assert!(
        put_rates[0] > 0.0,
        "three puts in the last 10 s: {put_rates:?}"
    );
    assert!(table["brokerVersionDesc"].starts_with("ferromq-"));
    assert!(table["runtime"].starts_with("[ 0 days"));
    drop(client);
    broker.shutdown().await.expect("clean shutdown");
}
