//! Zero-copy pull replies (`transferMsgByHeap=false`) over real TCP: every pull returns
//! byte-identical replies to the copying path (several segments, batches crossing a segment
//! end, a tag filter skipping entries, bodies of about 1 MiB, a client that reads slowly); a
//! TLS connection falls back to copying, counted, and still works.

mod common;

use std::path::Path;
use std::time::Duration;

use ferromq_broker::observability::transfer::Fallback;
use ferromq_broker::{Broker, BrokerConfig};
use ferromq_protocol::remoting::client::RemotingClient;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::pull::PullMessageResponseHeader;
use ferromq_protocol::remoting::tls::ClientTls;
use ferromq_protocol::remoting::{ClientOptions, RemotingCommand};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use common::TIMEOUT;

const TOPIC: &str = "zc";
/// Largest body sent (about 1 MiB).
const LARGE_BODY: usize = 1 << 20;

fn config(dir: &Path, transfer_by_heap: bool) -> BrokerConfig {
    BrokerConfig {
        mapped_file_size_commit_log: 2 << 20,
        max_message_size: LARGE_BODY + 4096,
        max_frame_length: 32 << 20,
        transfer_msg_by_heap: transfer_by_heap,
        ..common::broker_config(dir, true)
    }
}

/// Sends the test's messages to queue 0: small bodies of varying size with tags `a`, `b`,
/// `c` in turn, and 1 MiB bodies at offsets 7, 57 and 107 (so segments end both before a
/// large body and among small ones); returns how many.
async fn fill(client: &RemotingClient) -> usize {
    let count = 400;
    for i in 0..count {
        let size = if i % 50 == 7 && i < 150 {
            LARGE_BODY
        } else {
            100 + (i * 53) % 8000
        };
        let body: Vec<u8> = (0..size).map(|j| (i * 7 + j) as u8).collect();
        let tag = ["a", "b", "c"][i % 3];
        let reply = common::send(client, TOPIC, 0, &body, tag).await;
        assert_eq!(
            reply.code,
            response::SUCCESS,
            "send {i}: {:?}",
            reply.remark
        );
    }
    count
}

/// Waits (bounded) until queue 0 shows all `count` messages, so every pull sees one max.
async fn settle(broker: &Broker, count: usize) {
    let store = broker.context().store.clone();
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while store.queue_bounds(TOPIC, 0) != Some((0, count as u64)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "queue 0 never showed {count} messages: {:?}",
            store.queue_bounds(TOPIC, 0)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn set_transfer(client: &RemotingClient, by_heap: bool) {
    let command = RemotingCommand::new_request(request::UPDATE_BROKER_CONFIG, Default::default())
        .with_body(format!("transferMsgByHeap={by_heap}\n").into_bytes());
    let reply = client.invoke(command, TIMEOUT).await.expect("update reply");
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
}

/// Pulls queue 0 from offset 0 to its end with `expression`; every reply's code, next offset
/// and records, in order.
async fn pull_all(client: &RemotingClient, expression: &str) -> Vec<(i32, i64, Vec<Vec<u8>>)> {
    let mut out = Vec::new();
    let mut offset = 0;
    for _ in 0..2_000 {
        let command = common::pull_command(TOPIC, 0, offset, 0, expression);
        let reply = client.invoke(command, TIMEOUT).await.expect("pull reply");
        let header: PullMessageResponseHeader = reply.decode_header().expect("pull header");
        let records = common::records(&reply);
        out.push((reply.code, header.next_begin_offset, records));
        match reply.code {
            response::SUCCESS | response::PULL_RETRY_IMMEDIATELY => {
                offset = header.next_begin_offset
            }
            response::PULL_NOT_FOUND => return out,
            other => panic!("pull at {offset}: code {other} {:?}", reply.remark),
        }
    }
    panic!("no end of the queue after 2000 pulls");
}

fn messages(pulls: &[(i32, i64, Vec<Vec<u8>>)]) -> usize {
    pulls.iter().map(|(_, _, records)| records.len()).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_copy_pulls_equal_copied_pulls_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(config(dir.path(), false)).await.unwrap();
    let client = common::client(broker.local_addr()).await;
    let count = fill(&client).await;
    settle(&broker, count).await;
    let store = broker.context().store.clone();
    assert!(
        store.committed_end() > 2 * (2 << 20),
        "the messages span several segments"
    );
    let transfer = &broker.context().metrics.transfer;
    let mut zero_copy = Vec::new();
    for expression in ["*", "a || c", "b"] {
        zero_copy.push(pull_all(&client, expression).await);
    }
    let replies = transfer.replies(true);
    assert!(replies > 20, "replies went out with zero copy: {replies}");
    // A filtered pull of small records skips the records between its own: such a reply,
    // a `sendfile` call per record, is copied instead, and counted.
    let small = transfer.fallbacks(Fallback::SmallRecords);
    assert!(small > 0, "filtered pulls of small records were copied");
    assert_eq!(transfer.replies(false), small, "nothing else was copied");
    assert!(transfer.zero_copy_bytes() > 3 * LARGE_BODY as u64);

    set_transfer(&client, true).await;
    for (expression, zero_copied) in ["*", "a || c", "b"].iter().zip(&zero_copy) {
        let copied = pull_all(&client, expression).await;
        assert_eq!(&copied, zero_copied, "{expression}: replies differ");
    }
    assert_eq!(transfer.replies(true), replies, "copied this time");
    assert_eq!(transfer.fallbacks(Fallback::SmallRecords), small);
    assert_eq!(messages(&zero_copy[0]), count);
    assert_eq!(messages(&zero_copy[1]) + messages(&zero_copy[2]), count);
    // A batch crossed a segment end: some reply holds records of two segments.
    let segment = 2u64 << 20;
    let crossed = zero_copy[0].iter().any(|(_, _, records)| {
        let phys = |r: &Vec<u8>| ferromq_protocol::RecordView::parse(r).unwrap().phys_offset;
        records.len() > 1 && phys(&records[0]) / segment != phys(records.last().unwrap()) / segment
    });
    assert!(crossed, "no reply crossed a segment end");
    broker.shutdown().await.unwrap();
}

/// Small records of two queues sent in turn lie apart in the log: a zero-copy pull of one
/// queue would take a `sendfile` call per record, so its replies are copied and verified
/// instead (counted as `small_records`), byte for byte what the copying path sends; one
/// queue's adjacent records of at least `ZERO_COPY_SEND_BYTES_MIN` still go with zero copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_scattered_records_are_copied_and_adjacent_ones_sent_with_zero_copy() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(config(dir.path(), false)).await.unwrap();
    let client = common::client(broker.local_addr()).await;
    let count = 96;
    for i in 0..count {
        let body = vec![i as u8; 128 + i];
        for queue in [0, 1] {
            let reply = common::send(&client, TOPIC, queue, &body, "a").await;
            assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
        }
    }
    settle(&broker, count).await;
    let transfer = &broker.context().metrics.transfer;
    let zero_copy = pull_all(&client, "*").await;
    assert_eq!(messages(&zero_copy), count);
    let with_messages = zero_copy.iter().filter(|(_, _, r)| !r.is_empty()).count() as u64;
    assert_eq!(
        transfer.replies(true),
        0,
        "no scattered small reply used sendfile"
    );
    assert_eq!(transfer.replies(false), with_messages);
    assert_eq!(transfer.fallbacks(Fallback::SmallRecords), with_messages);
    assert_eq!(transfer.zero_copy_bytes(), 0);
    set_transfer(&client, true).await;
    assert_eq!(pull_all(&client, "*").await, zero_copy, "replies differ");

    // One queue alone: its records are adjacent, one run per reply, sent with zero copy.
    set_transfer(&client, false).await;
    let alone = "zc-alone";
    for i in 0..40 {
        let reply = common::send(&client, alone, 0, &vec![i as u8; 2048], "a").await;
        assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    }
    let store = broker.context().store.clone();
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while store.queue_bounds(alone, 0) != Some((0, 40)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{alone} never showed 40"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let command = common::pull_command(alone, 0, 0, 0, "*");
    let reply = client.invoke(command, TIMEOUT).await.expect("pull reply");
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    assert_eq!(common::records(&reply).len(), 32);
    assert_eq!(
        transfer.replies(true),
        1,
        "adjacent records went with zero copy"
    );
    assert_eq!(
        transfer.zero_copy_bytes(),
        reply.body.as_ref().unwrap().len() as u64
    );
    broker.shutdown().await.unwrap();
}

/// A connection whose receive buffer is small, so the broker's sends fill it quickly and
/// must wait for the socket to become writable again.
async fn small_window(addr: std::net::SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(8 * 1024).unwrap();
    socket.connect(addr).await.unwrap()
}

/// Writes a pull request on a raw socket, reads nothing for a while (the broker's socket
/// buffer fills, `sendfile` meets EAGAIN), then reads the reply in small pieces.
async fn slow_pull(addr: std::net::SocketAddr, offset: i64) -> RemotingCommand {
    let mut stream = small_window(addr).await;
    let mut command = common::pull_command(TOPIC, 0, offset, 0, "*");
    command.opaque = 77;
    stream
        .write_all(&command.to_bytes().unwrap())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let read = async {
        let mut length = [0u8; 4];
        stream.read_exact(&mut length).await.unwrap();
        let mut frame = length.to_vec();
        let length = u32::from_be_bytes(length) as usize;
        let mut chunk = vec![0u8; 16 * 1024];
        while frame.len() < 4 + length {
            let want = chunk.len().min(4 + length - frame.len());
            let n = stream.read(&mut chunk[..want]).await.unwrap();
            assert!(n > 0, "the broker closed the connection mid-reply");
            frame.extend_from_slice(&chunk[..n]);
            if frame.len() % (256 * 1024) < n {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        frame
    };
    let frame = tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("the reply arrived in time");
    let reply = RemotingCommand::decode(frame.into()).expect("one whole frame");
    assert_eq!(reply.opaque, 77);
    reply
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_gets_the_whole_reply() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(config(dir.path(), false)).await.unwrap();
    let client = common::client(broker.local_addr()).await;
    let count = fill(&client).await;
    settle(&broker, count).await;
    // Offset 7 holds a 1 MiB body: the reply is larger than any socket buffer.
    let slow = slow_pull(broker.local_addr(), 7).await;
    assert_eq!(slow.code, response::SUCCESS, "{:?}", slow.remark);
    let records = common::records(&slow);
    assert!(records.iter().map(Vec::len).sum::<usize>() > LARGE_BODY);
    set_transfer(&client, true).await;
    let copied = slow_pull(broker.local_addr(), 7).await;
    assert_eq!(common::records(&copied), records);
    assert_eq!(copied.ext_fields, slow.ext_fields);
    let transfer = &broker.context().metrics.transfer;
    assert_eq!(transfer.replies(true), 1);
    assert_eq!(transfer.replies(false), 1);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_connection_falls_back_to_copying() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = common::certificate(dir.path());
    let broker = Broker::start(BrokerConfig {
        tls_server_mode: "permissive".into(),
        tls_server_cert_path: Some(cert.clone()),
        tls_server_key_path: Some(key),
        ..config(&dir.path().join("store"), false)
    })
    .await
    .unwrap();
    let plain = common::client(broker.local_addr()).await;
    for i in 0..40 {
        let body = vec![i as u8; 500 + i * 100];
        let reply = common::send(&plain, TOPIC, 0, &body, "a").await;
        assert_eq!(reply.code, response::SUCCESS);
    }
    settle(&broker, 40).await;
    let options = ClientOptions {
        connect_timeout: TIMEOUT,
        tls: Some(ClientTls::from_ca_file(&cert, None).expect("CA file")),
        max_frame_length: 32 << 20,
        ..ClientOptions::default()
    };
    let secure = RemotingClient::connect_with(broker.local_addr(), options)
        .await
        .expect("TLS connect");
    let over_tls = pull_all(&secure, "*").await;
    let transfer = &broker.context().metrics.transfer;
    let copied = transfer.replies(false);
    assert!(copied > 0);
    assert_eq!(
        transfer.replies(true),
        0,
        "nothing sent with zero copy over TLS"
    );
    assert_eq!(transfer.fallbacks(Fallback::Tls), copied);
    let over_tcp = pull_all(&plain, "*").await;
    assert_eq!(over_tcp, over_tls);
    assert!(
        transfer.replies(true) > 0,
        "the plain connection used zero copy"
    );
    assert_eq!(messages(&over_tls), 40);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_dropped_after_the_idle_timeout() {
    let dir = tempfile::tempdir().unwrap();
    // A reply larger than any send buffer Linux grows to (tcp_wmem's maximum) plus the
    // client's small window: the broker must stall.
    let huge = send_buffer_max() + (2 << 20);
    let broker = Broker::start(BrokerConfig {
        server_channel_max_idle_time_seconds: 1,
        mapped_file_size_commit_log: (2 * huge as u64).next_power_of_two(),
        max_message_size: huge + 4096,
        max_frame_length: 2 * huge,
        ..config(dir.path(), false)
    })
    .await
    .unwrap();
    let client = common::client(broker.local_addr()).await;
    let reply = common::send(&client, TOPIC, 0, &vec![9u8; huge], "a").await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    settle(&broker, 1).await;
    let mut stream = small_window(broker.local_addr()).await;
    let command = common::pull_command(TOPIC, 0, 0, 0, "*");
    stream
        .write_all(&command.to_bytes().unwrap())
        .await
        .unwrap();
    let transfer = &broker.context().metrics.transfer;
    let aborted = || transfer.aborts(ferromq_broker::observability::transfer::Abort::Timeout);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while aborted() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stalled reply was never given up: {} zero-copy replies, {:?} connection limits",
            transfer.replies(true),
            broker.context().connection_limits.counters().snapshot()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The connection is closed: reading drains what was sent, then ends.
    let drained = tokio::time::timeout(Duration::from_secs(5), async {
        let mut sink = vec![0u8; 64 * 1024];
        let mut total = 0usize;
        loop {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => return total,
                Ok(n) => total += n,
            }
        }
    })
    .await
    .expect("the connection was closed");
    assert!(
        drained < huge,
        "the reply was not sent whole: {drained} bytes"
    );
    assert_eq!(transfer.replies(true), 0, "no zero-copy reply completed");
    // Other clients are still served (a new one: the first sat idle past the timeout).
    let other = common::client(broker.local_addr()).await;
    let reply = common::send(&other, TOPIC, 0, b"after", "a").await;
    assert_eq!(reply.code, response::SUCCESS);
    broker.shutdown().await.unwrap();
}

/// The largest send buffer Linux autotunes a TCP socket to (`tcp_wmem`'s third field; 4 MiB,
/// the kernel default, when it cannot be read).
fn send_buffer_max() -> usize {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem")
        .ok()
        .and_then(|text| text.split_whitespace().nth(2)?.parse().ok())
        .unwrap_or(4 << 20)
}
