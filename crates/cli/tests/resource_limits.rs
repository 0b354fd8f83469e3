//! `ferromq standalone` under exhausted resources, as a process: a flood of connections past
//! its open-file limit neither poisons the store nor stops sends, and the refused connections
//! are counted; a flood of both its ports, which runs the process out of descriptors, pauses
//! accepts and still leaves the store serving; a store poisoned by a failed write makes shutdown fail instead of saying
//! "stopped cleanly"; a stray file in `checkpoint/` does not stop start-up; the open-file
//! gauges, `brokerStatus` and the startup report show the limits the process really runs with.

mod common;

use std::time::{Duration, Instant};

use common::LoggedStandalone;
use ferromq_protocol::remoting::client::RemotingClient;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::send::SendMessageRequestHeaderV2;
use ferromq_protocol::remoting::RemotingCommand;

/// Bound on every request.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The open-file limit of the flooded standalone: enough to start, far below the flood.
const OPEN_FILES: u64 = 256;
/// Connections of the flood: more than the standalone has descriptors.
const FLOOD: usize = 2 * OPEN_FILES as usize;
/// Bound on one connect of the flood (a server that stops accepting fills its backlog).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Bound on opening the whole flood.
const FLOOD_DEADLINE: Duration = Duration::from_secs(20);

/// Opens up to `count` connections to `addr` (each bounded by [`CONNECT_TIMEOUT`], all by
/// [`FLOOD_DEADLINE`]).
async fn flood(addr: &str, count: usize) -> Vec<tokio::net::TcpStream> {
    let mut flood = Vec::with_capacity(count);
    let deadline = Instant::now() + FLOOD_DEADLINE;
    while flood.len() < count && Instant::now() < deadline {
        let connect = tokio::net::TcpStream::connect(addr);
        if let Ok(Ok(stream)) = tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
            flood.push(stream);
        }
    }
    flood
}

/// Sends on `client` every 200 ms for 2.5 s (across two checkpoints), asserting success.
async fn keep_sending(client: &RemotingClient, when: &str) {
    let until = Instant::now() + Duration::from_millis(2_500);
    while Instant::now() < until {
        let (code, remark) = send(client, when.as_bytes()).await;
        assert_eq!(code, response::SUCCESS, "{when}: {remark}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn client(addr: &str) -> RemotingClient {
    RemotingClient::connect(addr.parse().unwrap(), TIMEOUT)
        .await
        .expect("connect")
}

/// Sends one message of `body`; returns the reply's code and remark.
async fn send(client: &RemotingClient, body: &[u8]) -> (i32, String) {
    let header = SendMessageRequestHeaderV2 {
        a: "PG".into(),
        b: "LimitsTopic".into(),
        c: "TBW102".into(),
        d: 1,
        e: 0,
        ..Default::default()
    };
    let command = RemotingCommand::request_with_header(request::SEND_MESSAGE_V2, &header)
        .with_body(body.to_vec());
    match client.invoke(command, TIMEOUT).await {
        Ok(reply) => (reply.code, reply.remark.unwrap_or_default()),
        Err(error) => (-1, error.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_flood_past_the_open_file_limit_does_not_poison_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let server = LoggedStandalone::start(
        &format!("ulimit -n {OPEN_FILES}"),
        &dir.path().join("data"),
        &dir.path().join("stderr.log"),
    );
    let steady = client(&server.broker).await;
    assert_eq!(send(&steady, b"before").await.0, response::SUCCESS);
    let limit = server.metric("ferromq_connection_limit").unwrap();
    assert!(
        limit > 0.0 && limit < OPEN_FILES as f64,
        "the limit keeps descriptors for the store: {limit}"
    );

    // Hold the flood across several checkpoints (one a second), sending all along.
    let flood = flood(&server.broker, FLOOD).await;
    assert!(flood.len() as f64 > limit, "the flood passes the limit");
    keep_sending(&steady, "during the flood").await;
    // Every connection past the limit (the steady one holds a place) is refused and counted.
    let past_limit = flood.len() as f64 + 1.0 - limit;
    let refused_series = "ferromq_connections_refused_total{reason=\"limit\"}";
    let counted_by = Instant::now() + TIMEOUT;
    let refused = loop {
        let refused = server.metric(refused_series).unwrap();
        if refused >= past_limit || Instant::now() > counted_by {
            break refused;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        refused >= past_limit,
        "refused {refused} of {} connections past the limit {limit}",
        flood.len()
    );
    drop(flood);

    let after = client(&server.broker).await;
    let (code, remark) = send(&after, b"after").await;
    assert_eq!(code, response::SUCCESS, "after the flood: {remark}");
    assert_eq!(
        server.metric("ferromq_checkpoint_failures_total"),
        Some(0.0),
        "the store kept its descriptors: {}",
        server.stderr()
    );
    drop((steady, after));
    let (status, stderr) = server.stop();
    assert!(!stderr.contains("poisoned"), "{stderr}");
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("stopped cleanly"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_after_the_store_is_poisoned_reports_it_instead_of_stopping_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    // Files may not grow past 256 KiB (SIGXFSZ ignored, so a write past it fails with
    // EFBIG): the CommitLog fills up and its failed write poisons the store.
    let server = LoggedStandalone::start(
        "trap '' XFSZ; ulimit -f 256",
        &dir.path().join("data"),
        &dir.path().join("stderr.log"),
    );
    let producer = client(&server.broker).await;
    let body = vec![b'x'; 16 * 1024];
    let mut failed = None;
    for _ in 0..64 {
        let (code, remark) = send(&producer, &body).await;
        if code != response::SUCCESS {
            failed = Some(remark);
            break;
        }
    }
    let remark = failed.expect("a send fails once the CommitLog cannot grow");
    let (code, refused) = send(&producer, b"small").await;
    assert_ne!(code, response::SUCCESS);
    assert!(refused.contains("poisoned"), "{remark} / {refused}");
    drop(producer);
    let (status, stderr) = server.stop();
    assert!(!stderr.contains("stopped cleanly"), "{stderr}");
    assert!(
        !status.success(),
        "a poisoned store exits non-zero: {stderr}"
    );
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_else(|| panic!("an error line: {stderr}"));
    assert!(error.contains("poisoned"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stray_file_in_the_checkpoint_dir_gets_a_warning_not_a_failed_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let first = LoggedStandalone::start("", &data, &dir.path().join("first.log"));
    let producer = client(&first.broker).await;
    assert_eq!(send(&producer, b"kept").await.0, response::SUCCESS);
    drop(producer);
    let (status, stderr) = first.stop();
    assert!(status.success(), "{stderr}");
    let stray = data.join("checkpoint").join("notes.txt");
    std::fs::write(&stray, "operator notes").unwrap();

    let second = LoggedStandalone::start("", &data, &dir.path().join("second.log"));
    let stderr = second.stderr();
    let warning = stderr
        .lines()
        .find(|l| l.contains("WARN") && l.contains("not a checkpoint"))
        .unwrap_or_else(|| panic!("a warning: {stderr}"));
    assert!(warning.contains("notes.txt"), "{warning}");
    let producer = client(&second.broker).await;
    assert_eq!(send(&producer, b"after").await.0, response::SUCCESS);
    drop(producer);
    let (status, stderr) = second.stop();
    assert!(status.success(), "{stderr}");
    assert!(stray.exists(), "the stray file is left alone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_both_ports_runs_out_of_descriptors_and_the_store_still_serves() {
    let dir = tempfile::tempdir().unwrap();
    let server = LoggedStandalone::start(
        &format!("ulimit -n {OPEN_FILES}"),
        &dir.path().join("data"),
        &dir.path().join("stderr.log"),
    );
    let steady = client(&server.broker).await;
    assert_eq!(send(&steady, b"before").await.0, response::SUCCESS);
    // Name server and broker each keep a reserve, but together their connections take more
    // descriptors than the process has: accepts (and maybe checkpoints) fail with EMFILE. The
    // broker's share is small: connections a paused acceptor leaves queued make connects wait.
    let namesrv_flood = flood(&server.namesrv, FLOOD).await;
    let broker_flood = flood(&server.broker, OPEN_FILES as usize / 2).await;
    keep_sending(&steady, "while out of descriptors").await;
    let stderr = server.stderr();
    assert!(
        stderr.contains("out of file descriptors; pausing accepts"),
        "the process ran out of descriptors and its acceptors paused: {stderr}"
    );
    drop((namesrv_flood, broker_flood));

    // Accepts resume (a pause is at most 1 s) and the store serves new connections.
    let retry_until = Instant::now() + TIMEOUT;
    let after = loop {
        let connect = RemotingClient::connect(server.broker.parse().unwrap(), TIMEOUT).await;
        match connect {
            Ok(client) => break client,
            Err(error) => assert!(Instant::now() < retry_until, "reconnect: {error}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (code, remark) = send(&after, b"after").await;
    assert_eq!(code, response::SUCCESS, "after the flood: {remark}");
    drop((steady, after));
    let (status, stderr) = server.stop();
    assert!(!stderr.contains("poisoned"), "{stderr}");
    assert!(status.success(), "{stderr}");
}

/// The soft and hard "Max open files" of process `pid` as `/proc/<pid>/limits` states them
/// (-1 for unlimited, as the gauges report it).
fn proc_open_file_limits(pid: u32) -> (f64, f64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap_or_else(|| panic!("no open-file line in {limits}"));
    let value = |word: &str| match word {
        "unlimited" => -1.0,
        number => number.parse::<f64>().unwrap(),
    };
    let words: Vec<&str> = line.split_whitespace().collect();
    (value(words[3]), value(words[4]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_open_file_gauges_equal_the_limits_in_proc_of_the_running_server() {
    let dir = tempfile::tempdir().unwrap();
    // A soft limit below the hard one: the server raises it at start.
    let server = LoggedStandalone::start(
        &format!("ulimit -S -n {OPEN_FILES}"),
        &dir.path().join("data"),
        &dir.path().join("stderr.log"),
    );
    let (soft, hard) = proc_open_file_limits(server.pid());
    assert_eq!(
        server.metric("ferromq_open_files_soft_limit"),
        Some(soft),
        "{}",
        server.stderr()
    );
    assert_eq!(server.metric("ferromq_open_files_hard_limit"), Some(hard));
    assert_eq!(server.metric("ferromq_open_files_raise_failed"), Some(0.0));
    if hard != OPEN_FILES as f64 {
        assert_eq!(soft, hard, "the soft limit was raised to the hard one");
    }
    let shown = |value: f64| {
        if value < 0.0 {
            "unlimited".to_string()
        } else {
            value.to_string()
        }
    };
    let stderr = server.stderr();
    let line = format!(
        "ferromq standalone: open files: soft limit {}, hard limit {}",
        shown(soft),
        shown(hard)
    );
    assert!(
        stderr.lines().any(|l| l.starts_with(&line)),
        "{line} in {stderr}"
    );
    assert!(
        !stderr.contains("raising the soft limit failed"),
        "{stderr}"
    );
    let status = common::ok_json(&["brokerStatus", "-b", &server.broker]).to_string();
    for entry in [
        format!(r#""openFilesSoftLimit":"{}""#, shown(soft)),
        format!(r#""openFilesHardLimit":"{}""#, shown(hard)),
        r#""openFilesRaiseError":"""#.to_string(),
    ] {
        assert!(status.contains(&entry), "{entry} in {status}");
    }
    let (status, stderr) = server.stop();
    assert!(status.success(), "{stderr}");
}
