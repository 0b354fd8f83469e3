//! Remoting requests the process tests send to brokers (send, commit, query, pull, HA
//! status), a `ferromq namesrv` process, and CommitLog file comparison. Every request is
//! bounded by [`TIMEOUT`].

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ferromq_protocol::remoting::body::decode_json;
use ferromq_protocol::remoting::body::ha_runtime::HaRuntimeInfo;
use ferromq_protocol::remoting::client::RemotingClient;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::extensions::REPLICA_READ_EXT;
use ferromq_protocol::remoting::headers::admin::CreateTopicRequestHeader;
use ferromq_protocol::remoting::headers::offset::{
    GetMaxOffsetRequestHeader, GetMaxOffsetResponseHeader, QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader, UpdateConsumerOffsetRequestHeader,
};
use ferromq_protocol::remoting::headers::pull::PullMessageRequestHeader;
use ferromq_protocol::remoting::headers::send::{
    SendMessageRequestHeaderV2, SendMessageResponseHeader,
};
use ferromq_protocol::remoting::headers::transaction::EndTransactionRequestHeader;
use ferromq_protocol::remoting::RemotingCommand;
use ferromq_protocol::{MessageId, Properties, RecordView};

/// Bound on one remoting request.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// A `ferromq namesrv`, killed on drop.
pub struct Namesrv {
    pub child: Child,
    pub addr: String,
}

impl Drop for Namesrv {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn namesrv() -> Namesrv {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferromq"))
        .args(["namesrv", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let Some(line) = super::first_line(&mut child) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("namesrv printed no address line within 30 s");
    };
    assert!(line.starts_with("ferromq namesrv: listening on "), "{line}");
    Namesrv {
        addr: line.trim().rsplit(' ').next().unwrap().to_string(),
        child,
    }
}

pub async fn client(addr: SocketAddr) -> RemotingClient {
    RemotingClient::connect(addr, TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"))
}

pub async fn invoke(client: &RemotingClient, command: RemotingCommand) -> RemotingCommand {
    client.invoke(command, TIMEOUT).await.expect("a reply")
}

pub fn remark(reply: &RemotingCommand) -> String {
    reply.remark.clone().unwrap_or_default()
}

pub async fn send(
    client: &RemotingClient,
    topic: &str,
    queue: i32,
    body: &[u8],
) -> RemotingCommand {
    invoke(client, send_command(topic, queue, body)).await
}

/// SEND_MESSAGE_V2 of `body` to (topic, queue).
pub fn send_command(topic: &str, queue: i32, body: &[u8]) -> RemotingCommand {
    let properties = String::from_utf8(Properties::encode([("TAGS", "a"), ("KEYS", "k")])).unwrap();
    let header = SendMessageRequestHeaderV2 {
        a: "PG".into(),
        b: topic.into(),
        c: "TBW102".into(),
        d: 4,
        e: queue,
        g: 1,
        i: Some(properties.into()),
        ..Default::default()
    };
    RemotingCommand::request_with_header(request::SEND_MESSAGE_V2, &header).with_body(body.to_vec())
}

pub async fn commit(
    client: &RemotingClient,
    group: &str,
    topic: &str,
    queue: i32,
    offset: i64,
) -> RemotingCommand {
    invoke(client, commit_command(group, topic, queue, offset)).await
}

/// UPDATE_CONSUMER_OFFSET of `offset` for (group, topic, queue).
pub fn commit_command(group: &str, topic: &str, queue: i32, offset: i64) -> RemotingCommand {
    let header = UpdateConsumerOffsetRequestHeader {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id: queue,
        commit_offset: offset,
    };
    RemotingCommand::request_with_header(request::UPDATE_CONSUMER_OFFSET, &header)
}

/// The reply code of a QUERY_CONSUMER_OFFSET.
pub async fn query_offset_code(
    client: &RemotingClient,
    group: &str,
    topic: &str,
    queue: i32,
) -> i32 {
    let header = QueryConsumerOffsetRequestHeader {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id: queue,
        set_zero_if_not_found: Some(false),
    };
    invoke(
        client,
        RemotingCommand::request_with_header(request::QUERY_CONSUMER_OFFSET, &header),
    )
    .await
    .code
}

/// The stored consumer offset in `client`'s broker's own view (a replica read: slaves answer
/// too), `None` when the broker has none.
pub async fn query_offset(
    client: &RemotingClient,
    group: &str,
    topic: &str,
    queue: i32,
) -> Option<i64> {
    let header = QueryConsumerOffsetRequestHeader {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id: queue,
        set_zero_if_not_found: Some(false),
    };
    let mut command = RemotingCommand::request_with_header(request::QUERY_CONSUMER_OFFSET, &header);
    command
        .ext_fields
        .insert(REPLICA_READ_EXT.to_string(), "true".to_string());
    let reply = invoke(client, command).await;
    (reply.code == response::SUCCESS).then(|| {
        reply
            .decode_header::<QueryConsumerOffsetResponseHeader>()
            .expect("offset header")
            .offset
    })
}

/// GET_MAX_OFFSET (committed); `None` when refused.
pub async fn max_offset(client: &RemotingClient, topic: &str, queue: i32) -> Option<i64> {
    let header = GetMaxOffsetRequestHeader {
        topic: topic.into(),
        queue_id: queue,
        committed: None,
    };
    let reply = invoke(
        client,
        RemotingCommand::request_with_header(request::GET_MAX_OFFSET, &header),
    )
    .await;
    (reply.code == response::SUCCESS).then(|| {
        reply
            .decode_header::<GetMaxOffsetResponseHeader>()
            .expect("max offset header")
            .offset
    })
}

pub fn create_topic_command(topic: &str, queues: i32) -> RemotingCommand {
    let header = CreateTopicRequestHeader {
        topic: topic.into(),
        default_topic: "TBW102".into(),
        read_queue_nums: queues,
        write_queue_nums: queues,
        perm: 6,
        ..Default::default()
    };
    RemotingCommand::request_with_header(request::UPDATE_AND_CREATE_TOPIC, &header)
}

pub async fn create_topic(client: &RemotingClient, topic: &str, queues: i32) {
    let reply = invoke(client, create_topic_command(topic, queues)).await;
    assert_eq!(
        reply.code,
        response::SUCCESS,
        "create {topic}: {}",
        remark(&reply)
    );
}

pub async fn pull(
    client: &RemotingClient,
    topic: &str,
    queue: i32,
    offset: i64,
    max: i32,
    commit: Option<i64>,
) -> RemotingCommand {
    let header = PullMessageRequestHeader {
        consumer_group: "G".into(),
        topic: topic.into(),
        queue_id: queue,
        queue_offset: offset,
        max_msg_nums: max,
        sys_flag: 0x4 | if commit.is_some() { 0x1 } else { 0 },
        commit_offset: commit.unwrap_or(0),
        suspend_timeout_millis: 0,
        subscription: Some("*".into()),
        sub_version: 0,
        expression_type: Some("TAG".into()),
        ..Default::default()
    };
    invoke(
        client,
        RemotingCommand::request_with_header(request::PULL_MESSAGE, &header),
    )
    .await
}

/// A half message: its queue offset in the half topic and its CommitLog offset.
pub type Half = (i64, i64);

/// Sends `body` (also its `UNIQ_KEY`) as a half message of producer group `group` for
/// (`topic`, `queue`).
pub async fn send_half(
    client: &RemotingClient,
    group: &str,
    topic: &str,
    queue: i32,
    body: &str,
) -> Half {
    let properties =
        Properties::encode([("TRAN_MSG", "true"), ("PGROUP", group), ("UNIQ_KEY", body)]);
    let header = SendMessageRequestHeaderV2 {
        a: group.into(),
        b: topic.into(),
        c: "TBW102".into(),
        d: 1,
        e: queue,
        g: 1,
        i: Some(String::from_utf8(properties).unwrap().into()),
        ..Default::default()
    };
    let command = RemotingCommand::request_with_header(request::SEND_MESSAGE_V2, &header)
        .with_body(body.as_bytes().to_vec());
    let reply = invoke(client, command).await;
    assert_eq!(reply.code, response::SUCCESS, "{}", remark(&reply));
    let header: SendMessageResponseHeader = reply.decode_header().unwrap();
    let phys = MessageId::decode(&header.msg_id).unwrap().phys_offset as i64;
    (header.queue_offset, phys)
}

/// END_TRANSACTION of `half` for producer group `group`: `kind` 8 commits, 12 rolls back.
pub fn end_transaction(group: &str, half: Half, kind: i32, from_check: bool) -> RemotingCommand {
    let header = EndTransactionRequestHeader {
        producer_group: group.into(),
        tran_state_table_offset: half.0,
        commit_log_offset: half.1,
        commit_or_rollback: kind,
        from_transaction_check: Some(from_check),
        msg_id: None,
        transaction_id: None,
    };
    RemotingCommand::request_with_header(request::END_TRANSACTION, &header)
}

/// A heartbeat that registers `client_id` as a producer of `group` (so the broker may check
/// its halves back over this connection).
pub async fn producer_heartbeat(client: &RemotingClient, client_id: &str, group: &str) {
    let body = format!(
        r#"{{"clientID":"{client_id}","producerDataSet":[{{"groupName":"{group}"}}],"consumerDataSet":[]}}"#
    );
    let beat = RemotingCommand::new_request(request::HEART_BEAT, Default::default())
        .with_body(body.into_bytes());
    assert_eq!(invoke(client, beat).await.code, response::SUCCESS);
}

/// (queue offset, body) of each record in a pull reply.
pub fn records(reply: &RemotingCommand) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut rest = reply.body.as_deref().unwrap_or_default();
    while !rest.is_empty() {
        let view = RecordView::parse(rest).expect("pull body holds whole records");
        out.push((view.queue_offset, view.body.to_vec()));
        rest = &rest[view.total_size()..];
    }
    out
}

/// Every message of a queue from `from` up to `to` (exclusive), pulled in batches.
pub async fn pull_range(
    client: &RemotingClient,
    topic: &str,
    queue: i32,
    from: i64,
    to: i64,
) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut offset = from;
    let mut rounds = 0;
    while offset < to {
        rounds += 1;
        assert!(rounds < 10_000, "pulling {topic}/{queue} does not progress");
        let reply = pull(client, topic, queue, offset, 32, None).await;
        assert_eq!(
            reply.code,
            response::SUCCESS,
            "pull {topic}/{queue}@{offset} from {}: {}",
            client.peer_addr(),
            remark(&reply)
        );
        let batch = records(&reply);
        assert!(!batch.is_empty(), "empty successful pull at {offset}");
        offset = batch.last().unwrap().0 as i64 + 1;
        out.extend(batch);
    }
    out
}

pub async fn ha_status(client: &RemotingClient) -> HaRuntimeInfo {
    let reply = invoke(
        client,
        RemotingCommand::new_request(request::GET_BROKER_HA_STATUS, Default::default()),
    )
    .await;
    assert_eq!(
        reply.code,
        response::SUCCESS,
        "haStatus: {}",
        remark(&reply)
    );
    decode_json(reply.body.as_deref().unwrap_or_default()).expect("HA status body")
}

/// `ferromq admin haStatus -b addr --json`: the broker's `haStatus` object.
pub fn admin_ha_status(addr: &str) -> serde_json::Value {
    let all = super::ok_json(&["haStatus", "-b", addr]);
    all["brokers"][0]["haStatus"].clone()
}

pub fn in_sync_of(info: &HaRuntimeInfo, broker_id: i64) -> Option<bool> {
    info.ha_connection_info
        .iter()
        .find(|c| c.broker_id == Some(broker_id))
        .map(|c| c.in_sync)
}

pub async fn wait_in_sync(master: &RemotingClient, slaves: i32, secs: u64) -> Duration {
    let start = Instant::now();
    eventually!(secs, format!("{slaves} in-sync slaves"), {
        ha_status(master).await.in_sync_slave_nums >= slaves
    });
    start.elapsed()
}

/// Waits until each slave's committed log end equals the master's (the master idle).
pub async fn wait_caught_up(master: &RemotingClient, slaves: &[&RemotingClient], secs: u64) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let end = ha_status(master).await.master_commit_log_max_offset;
        let mut ends = Vec::new();
        for slave in slaves {
            ends.push(ha_status(slave).await.ha_client_runtime_info.max_offset);
        }
        if ends.iter().all(|e| *e == end) {
            return end;
        }
        assert!(
            Instant::now() < deadline,
            "slaves not at the master's log end {end} within {secs} s: {ends:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Asserts the CommitLog segment files of `a` and `b` hold the same bytes below `end` (sealed
/// segments are trimmed after their last record: those are compared whole); returns the
/// bytes compared.
pub fn assert_same_commitlog(a: &Path, b: &Path, end: u64) -> u64 {
    let list = |dir: &Path| {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.len() == 20 && n.bytes().all(|c| c.is_ascii_digit()))
            .collect();
        names.sort();
        names
    };
    let (names_a, names_b) = (list(a), list(b));
    let mut compared = 0u64;
    for name in names_a.iter().filter(|n| n.parse::<u64>().unwrap() < end) {
        assert!(
            names_b.contains(name),
            "segment {name} missing in {}",
            b.display()
        );
        let start: u64 = name.parse().unwrap();
        let bytes_a = std::fs::read(a.join(name)).unwrap();
        let bytes_b = std::fs::read(b.join(name)).unwrap();
        let upto = ((end - start) as usize).min(bytes_a.len());
        assert!(
            bytes_b.len() >= upto,
            "segment {name} of {} too short",
            b.display()
        );
        if bytes_a[..upto] != bytes_b[..upto] {
            let at = (0..upto).find(|&i| bytes_a[i] != bytes_b[i]).unwrap();
            panic!(
                "segment {name} differs at byte {at} (CommitLog offset {})",
                start + at as u64
            );
        }
        if upto < (end - start) as usize {
            // A sealed segment (trimmed after its last record): whole files alike.
            assert_eq!(
                bytes_a.len(),
                bytes_b.len(),
                "sealed segment {name} lengths"
            );
        }
        compared += upto as u64;
    }
    compared
}
