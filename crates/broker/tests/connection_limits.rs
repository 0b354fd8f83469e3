//! The broker's connection limits over real TCP: a connection past `maxConnections` is
//! closed at once and counted; a silent connection is closed after
//! `serverChannelMaxIdleTimeSeconds`; a frame stalled after three bytes is closed after
//! `frameReadTimeoutMillis`; connections announcing large frames and stalling never hold more
//! than `partialFrameBudgetBytes` (the excess ones are closed), while a normal client keeps
//! sending. Every close shows in the Prometheus metrics.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{broker_config, scrape, value, Series};
use ferromq_broker::{Broker, BrokerConfig};
use ferromq_protocol::remoting::client::RemotingClient;
use ferromq_protocol::remoting::codes::response;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bound on every wait for a close or a metric.
const TIMEOUT: Duration = Duration::from_secs(10);
const TOPIC: &str = "LimitsTopic";

/// The tests' broker ([`broker_config`]) with its metrics endpoint, configured by `configure`.
async fn broker(dir: &std::path::Path, configure: impl FnOnce(&mut BrokerConfig)) -> Broker {
    let mut config = BrokerConfig {
        metrics_port: Some(0),
        ..broker_config(dir, true)
    };
    configure(&mut config);
    Broker::start(config).await.expect("broker starts")
}

async fn client(broker: &Broker) -> RemotingClient {
    common::client(broker.local_addr()).await
}

/// Sends one message and asserts it is stored.
async fn send(client: &RemotingClient, body: &str) {
    let reply = common::send(client, TOPIC, 0, body.as_bytes(), "limits").await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
}

/// Reads until the broker closes `stream` (end of stream or reset); returns how long that
/// took. Panics after [`TIMEOUT`].
async fn closed_after(stream: &mut TcpStream) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    let closed = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(TIMEOUT, closed)
        .await
        .expect("the broker closes the connection within the bound");
    started.elapsed()
}

/// Scrapes until `done` holds for the metrics; returns them. Panics after [`TIMEOUT`].
async fn scrape_until(
    broker: &Broker,
    what: &str,
    done: impl Fn(&BTreeMap<Series, f64>) -> bool,
) -> BTreeMap<Series, f64> {
    let addr = broker.metrics_addr().expect("metrics endpoint is on");
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let metrics = scrape(addr).await;
        if done(&metrics) {
            return metrics;
        }
        assert!(Instant::now() < deadline, "{what} within {TIMEOUT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn closed(metrics: &BTreeMap<Series, f64>, reason: &str) -> f64 {
    value(
        metrics,
        "ferromq_connections_closed_total",
        &[("reason", reason)],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_past_the_limit_is_closed_at_once_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), |c| c.max_connections = 3).await;
    let mut admitted = Vec::new();
    for i in 0..3 {
        let client = client(&broker).await;
        send(&client, &format!("admitted {i}")).await;
        admitted.push(client);
    }
    let mut extra = TcpStream::connect(broker.local_addr()).await.unwrap();
    let waited = closed_after(&mut extra).await;
    assert!(
        waited < Duration::from_secs(2),
        "closed at once: {waited:?}"
    );
    let metrics = scrape_until(&broker, "the refusal is counted", |m| {
        value(
            m,
            "ferromq_connections_refused_total",
            &[("reason", "limit")],
        ) >= 1.0
    })
    .await;
    assert_eq!(
        value(
            &metrics,
            "ferromq_connections_refused_total",
            &[("reason", "limit")]
        ),
        1.0
    );
    assert_eq!(value(&metrics, "ferromq_connection_limit", &[]), 3.0);
    // The admitted connections still work; closing one makes room for another.
    send(&admitted[0], "still served").await;
    drop(admitted.pop());
    scrape_until(&broker, "the closed connection frees its place", |m| {
        value(m, "ferromq_client_connections", &[]) <= 2.0
    })
    .await;
    let replacement = client(&broker).await;
    send(&replacement, "replacement").await;
    drop((admitted, replacement));
    broker.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_is_closed_after_the_idle_timeout_and_an_active_one_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), |c| c.server_channel_max_idle_time_seconds = 1).await;
    let mut silent = TcpStream::connect(broker.local_addr()).await.unwrap();
    let active = client(&broker).await;
    let keep_active = async {
        // A request every 300 ms for 2 s: never 1 s of silence.
        for i in 0..7 {
            send(&active, &format!("active {i}")).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    };
    let (waited, ()) = tokio::join!(closed_after(&mut silent), keep_active);
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(4),
        "closed after the 1 s idle timeout: {waited:?}"
    );
    send(&active, "the active connection survived").await;
    let metrics = scrape_until(&broker, "the idle close is counted", |m| {
        closed(m, "idle") >= 1.0
    })
    .await;
    assert_eq!(closed(&metrics, "idle"), 1.0, "only the silent connection");
    drop(active);
    broker.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_stalled_after_three_header_bytes_is_closed_after_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), |c| c.frame_read_timeout_millis = 400).await;
    let mut slow = TcpStream::connect(broker.local_addr()).await.unwrap();
    slow.write_all(&[0, 0, 1]).await.unwrap();
    let waited = closed_after(&mut slow).await;
    assert!(
        waited >= Duration::from_millis(350) && waited < Duration::from_secs(4),
        "closed after the 400 ms frame deadline (idle timeout is 120 s): {waited:?}"
    );
    let metrics = scrape_until(&broker, "the frame timeout is counted", |m| {
        closed(m, "frame_timeout") >= 1.0
    })
    .await;
    assert_eq!(closed(&metrics, "frame_timeout"), 1.0);
    assert_eq!(closed(&metrics, "idle"), 0.0);
    broker.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_large_frames_never_pass_the_budget_and_a_normal_client_keeps_working() {
    const FRAME: u64 = 1 << 20;
    const BUDGET: u64 = 3 * FRAME;
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), |c| {
        c.max_frame_length = FRAME as usize;
        c.partial_frame_budget_bytes = BUDGET;
    })
    .await;
    // Six connections each announce a largest frame (length field: the bytes after it), send
    // 100 bytes of it and stall: three fit the budget, three must be closed.
    let mut head = ((FRAME - 4) as u32).to_be_bytes().to_vec();
    head.extend([0u8; 96]);
    let mut stalled = Vec::new();
    for _ in 0..6 {
        let mut stream = TcpStream::connect(broker.local_addr()).await.unwrap();
        stream.write_all(&head).await.unwrap();
        stalled.push(stream);
    }
    let metrics = scrape_until(&broker, "three budget closes", |m| {
        closed(m, "frame_budget") >= 3.0
    })
    .await;
    assert_eq!(closed(&metrics, "frame_budget"), 3.0);
    assert_eq!(
        value(&metrics, "ferromq_partial_frame_bytes", &[]),
        BUDGET as f64,
        "three whole frames are charged, never more"
    );
    assert_eq!(
        value(&metrics, "ferromq_partial_frame_budget_bytes", &[]),
        BUDGET as f64
    );
    let mut still_open = 0;
    for stream in &mut stalled {
        let mut byte = [0u8; 1];
        match tokio::time::timeout(Duration::from_millis(200), stream.read(&mut byte)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {}
            Ok(Ok(_)) => panic!("the broker answered a frame that never arrived"),
            Err(_) => still_open += 1,
        }
    }
    assert_eq!(
        still_open, 3,
        "the three charged connections wait for their frames"
    );
    // Small frames are not charged: a normal client is served while the budget is full.
    let normal = client(&broker).await;
    for i in 0..5 {
        send(&normal, &format!("normal {i}")).await;
    }
    drop(stalled);
    scrape_until(&broker, "closed connections release their charge", |m| {
        value(m, "ferromq_partial_frame_bytes", &[]) == 0.0
    })
    .await;
    drop(normal);
    broker.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_limits_are_refused_at_start_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = BrokerConfig {
        listen_port: 0,
        store_path_root_dir: dir.path().to_path_buf(),
        frame_read_timeout_millis: 0,
        ..BrokerConfig::default()
    };
    let error = Broker::start(config).await.err().expect("refused");
    assert!(
        error.to_string().contains("frameReadTimeoutMillis"),
        "{error}"
    );
}
