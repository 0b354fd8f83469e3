//! The fault proxy against a tiny echo server: each mode does what it says, to open and new
//! connections alike. Every wait is bounded.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferromq_chaos::proxy::{FaultProxy, ProxyMode, DROP_REPLIES_CLOSE_AFTER};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::timeout;

const WAIT: Duration = Duration::from_secs(5);
/// Long enough that a forwarded byte would have arrived on loopback.
const QUIET: Duration = Duration::from_millis(300);

/// Echoes every byte back and counts the bytes it received.
struct EchoServer {
    addr: SocketAddr,
    received: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl EchoServer {
    async fn start() -> EchoServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(AtomicU64::new(0));
        let counter = received.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let counter = counter.clone();
                tokio::spawn(async move {
                    let mut buffer = [0u8; 1024];
                    while let Ok(count) = stream.read(&mut buffer).await {
                        if count == 0 {
                            break;
                        }
                        counter.fetch_add(count as u64, Ordering::SeqCst);
                        if stream.write_all(&buffer[..count]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        EchoServer {
            addr,
            received,
            task,
        }
    }

    fn received(&self) -> u64 {
        self.received.load(Ordering::SeqCst)
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn connect(proxy: &FaultProxy) -> TcpStream {
    timeout(WAIT, TcpStream::connect(proxy.local_addr()))
        .await
        .expect("connect in time")
        .expect("connect")
}

/// Writes `message` and reads exactly as many bytes back.
async fn round_trip(stream: &mut TcpStream, message: &[u8]) -> Vec<u8> {
    stream.write_all(message).await.unwrap();
    let mut reply = vec![0u8; message.len()];
    timeout(WAIT, stream.read_exact(&mut reply))
        .await
        .expect("reply in time")
        .expect("reply");
    reply
}

/// Reads until the connection ends; returns the bytes read before and whether it ended with
/// an error (reset) rather than EOF. Panics if it does not end within `WAIT`.
async fn read_until_closed(stream: &mut TcpStream) -> (Vec<u8>, bool) {
    let mut seen = Vec::new();
    let mut buffer = [0u8; 256];
    loop {
        match timeout(WAIT, stream.read(&mut buffer))
            .await
            .expect("connection closed in time")
        {
            Ok(0) => return (seen, false),
            Ok(count) => seen.extend_from_slice(&buffer[..count]),
            Err(_) => return (seen, true),
        }
    }
}

async fn wait_for(mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !condition() {
        assert!(Instant::now() < deadline, "condition not met in time");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn pass_forwards_both_directions_and_counts_bytes() {
    let server = EchoServer::start().await;
    let proxy = FaultProxy::start(server.addr).await.unwrap();
    assert_eq!(proxy.mode(), ProxyMode::Pass);
    let mut stream = connect(&proxy).await;
    assert_eq!(round_trip(&mut stream, b"hello").await, b"hello");
    assert_eq!(round_trip(&mut stream, b"again").await, b"again");
    let stats = proxy.stats();
    assert_eq!(stats.connections_accepted, 1);
    assert_eq!(stats.connections_refused, 0);
    assert_eq!(stats.bytes_to_server, 10);
    assert_eq!(stats.bytes_to_client, 10);
    assert_eq!(server.received(), 10);
}

#[tokio::test]
async fn client_half_close_still_gets_the_reply() {
    let server = EchoServer::start().await;
    let proxy = FaultProxy::start(server.addr).await.unwrap();
    let mut stream = connect(&proxy).await;
    stream.write_all(b"last words").await.unwrap();
    stream.shutdown().await.unwrap();
    let (seen, reset) = read_until_closed(&mut stream).await;
    assert_eq!(seen, b"last words");
    assert!(!reset, "an orderly close is passed on as EOF");
}

#[tokio::test]
async fn drop_resets_open_connections_and_refuses_new_ones() {
    let server = EchoServer::start().await;
    let proxy = FaultProxy::start(server.addr).await.unwrap();
    let mut open = connect(&proxy).await;
    assert_eq!(round_trip(&mut open, b"before").await, b"before");

    proxy.set_mode(ProxyMode::Drop);
    let (seen, reset) = read_until_closed(&mut open).await;
    assert!(seen.is_empty());
    assert!(reset, "the client sees a reset, not an orderly close");
    wait_for(|| proxy.stats().connections_dropped == 1).await;

    let mut fresh = connect(&proxy).await;
    let (seen, reset) = read_until_closed(&mut fresh).await;
    assert!(seen.is_empty());
    assert!(reset, "a new connection is reset on accept");
    assert_eq!(proxy.stats().connections_refused, 1);
    assert_eq!(
        server.received(),
        6,
        "nothing reached the server while dropping"
    );

    proxy.set_mode(ProxyMode::Pass);
    let mut healed = connect(&proxy).await;
    assert_eq!(round_trip(&mut healed, b"after").await, b"after");
}

#[tokio::test]
async fn stall_holds_bytes_until_the_mode_changes() {
    let server = EchoServer::start().await;
    let proxy = FaultProxy::start(server.addr).await.unwrap();
    let mut stream = connect(&proxy).await;
    assert_eq!(round_trip(&mut stream, b"warm").await, b"warm");

    proxy.set_mode(ProxyMode::Stall);
    stream.write_all(b"held").await.unwrap();
    let mut reply = [0u8; 4];
    assert!(
        timeout(QUIET, stream.read_exact(&mut reply)).await.is_err(),
        "nothing flows while stalled"
    );
    assert_eq!(
        server.received(),
        4,
        "the stalled bytes did not reach the server"
    );

    proxy.set_mode(ProxyMode::Pass);
    timeout(WAIT, stream.read_exact(&mut reply))
        .await
        .expect("held bytes flow after the stall")
        .unwrap();
    assert_eq!(&reply, b"held");
    assert_eq!(server.received(), 8);
}

#[tokio::test]
async fn stall_holds_replies_already_read_from_the_server() {
    let server = EchoServer::start().await;
    let proxy = FaultProxy::start(server.addr).await.unwrap();
    let mut stream = connect(&proxy).await;
    // Slow makes the request reach the server well before its reply is written back, so the
    // stall lands while the reply is held by the proxy.
    proxy.set_mode(ProxyMode::Slow(Duration::from_millis(100)));
    stream.write_all(b"ping").await.unwrap();
    wait_for(|| server.received() == 4).await;
    proxy.set_mode(ProxyMode::Stall);
    let mut reply = [0u8; 4];
    assert!(timeout(QUIET, stream.read_exact(&mut reply)).await.is_err());
    proxy.set_mode(ProxyMode::Pass);
    timeout(WAIT, stream.read_exact(&mut reply))
        .await
        .expect("the held reply flows")
        .unwrap();
    assert_eq!(&reply, b"ping");
}

#[tokio::test]
async fn slow_delays_each_chunk_both_ways() {
    let server = EchoServer::start().await;
    let proxy = FaultProxy::start(server.addr).await.unwrap();
    let mut stream = connect(&proxy).await;
    let started = Instant::now();
    assert_eq!(round_trip(&mut stream, b"quick").await, b"quick");
    let fast = started.elapsed();

    let delay = Duration::from_millis(200);
    proxy.set_mode(ProxyMode::Slow(delay));
    let started = Instant::now();
    assert_eq!(round_trip(&mut stream, b"slow").await, b"slow");
    let slow = started.elapsed();
    assert!(slow >= delay * 2, "one delay each way: {slow:?}");
    assert!(fast < delay, "pass is not delayed: {fast:?}");
}

#[tokio::test]
async fn drop_replies_forwards_requests_discards_replies_then_closes() {
    let server = EchoServer::start().await;
    let proxy = FaultProxy::start(server.addr).await.unwrap();
    let mut stream = connect(&proxy).await;
    assert_eq!(round_trip(&mut stream, b"ok").await, b"ok");

    proxy.set_mode(ProxyMode::DropReplies);
    let started = Instant::now();
    stream.write_all(b"commit").await.unwrap();
    let (seen, _) = read_until_closed(&mut stream).await;
    assert!(seen.is_empty(), "no reply reaches the client: {seen:?}");
    assert!(started.elapsed() >= DROP_REPLIES_CLOSE_AFTER);
    assert_eq!(server.received(), 8, "the request reached the server");
    let stats = proxy.stats();
    assert_eq!(stats.bytes_discarded, 6);
    assert_eq!(stats.bytes_to_client, 2);
}

#[tokio::test]
async fn drop_requests_discards_requests_then_closes() {
    let server = EchoServer::start().await;
    let proxy = FaultProxy::start(server.addr).await.unwrap();
    let mut stream = connect(&proxy).await;
    assert_eq!(round_trip(&mut stream, b"ok").await, b"ok");

    proxy.set_mode(ProxyMode::DropRequests);
    let started = Instant::now();
    stream.write_all(b"commit").await.unwrap();
    let (seen, _) = read_until_closed(&mut stream).await;
    assert!(seen.is_empty(), "nothing was echoed: {seen:?}");
    assert!(started.elapsed() >= DROP_REPLIES_CLOSE_AFTER);
    assert_eq!(server.received(), 2, "the request never reached the server");
    let stats = proxy.stats();
    assert_eq!(stats.bytes_discarded, 6);
    assert_eq!(stats.bytes_to_server, 2);
}

#[tokio::test]
async fn set_target_sends_new_connections_to_the_restarted_server() {
    let first = EchoServer::start().await;
    let proxy = FaultProxy::start(first.addr).await.unwrap();
    let mut old = connect(&proxy).await;
    assert_eq!(round_trip(&mut old, b"one").await, b"one");

    let second = EchoServer::start().await;
    proxy.set_target(second.addr);
    assert_eq!(proxy.target(), second.addr);
    let mut new = connect(&proxy).await;
    assert_eq!(round_trip(&mut new, b"two").await, b"two");
    assert_eq!(round_trip(&mut old, b"old").await, b"old");
    assert_eq!(first.received(), 6);
    assert_eq!(second.received(), 3);
}

#[tokio::test]
async fn unreachable_target_closes_the_client_connection() {
    let gone = {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap()
    };
    let proxy = FaultProxy::start(gone).await.unwrap();
    let mut stream = connect(&proxy).await;
    let (seen, _) = read_until_closed(&mut stream).await;
    assert!(seen.is_empty());
    assert_eq!(proxy.stats().connections_refused, 1);
}

#[tokio::test]
async fn shutdown_closes_the_listener_and_open_connections() {
    let server = EchoServer::start().await;
    let proxy = FaultProxy::start(server.addr).await.unwrap();
    let addr = proxy.local_addr();
    let mut stream = connect(&proxy).await;
    assert_eq!(round_trip(&mut stream, b"hi").await, b"hi");
    proxy.shutdown().await;
    let (seen, _) = read_until_closed(&mut stream).await;
    assert!(seen.is_empty());
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "no longer listening"
    );
}

#[tokio::test]
async fn dropping_the_handle_closes_open_connections() {
    let server = EchoServer::start().await;
    let proxy = FaultProxy::start(server.addr).await.unwrap();
    let mut stream = connect(&proxy).await;
    assert_eq!(round_trip(&mut stream, b"hi").await, b"hi");
    drop(proxy);
    let (seen, _) = read_until_closed(&mut stream).await;
    assert!(seen.is_empty());
}

#[tokio::test]
async fn pass_carries_a_large_transfer_intact() {
    let server = EchoServer::start().await;
    let proxy = FaultProxy::start(server.addr).await.unwrap();
    let stream = connect(&proxy).await;
    let (mut reader, mut writer) = stream.into_split();
    let payload: Vec<u8> = (0..256 * 1024u32).map(|i| (i * 7 % 251) as u8).collect();
    let sent = payload.clone();
    let writing = tokio::spawn(async move {
        writer.write_all(&sent).await.unwrap();
        writer
    });
    let mut echoed = vec![0u8; payload.len()];
    timeout(WAIT, reader.read_exact(&mut echoed))
        .await
        .expect("echo in time")
        .unwrap();
    drop(writing.await.unwrap());
    assert!(echoed == payload, "bytes changed in transit");
    let stats = proxy.stats();
    assert_eq!(stats.bytes_to_server, payload.len() as u64);
    assert_eq!(stats.bytes_to_client, payload.len() as u64);
}

#[tokio::test]
async fn drop_resets_a_stalled_connection() {
    let server = EchoServer::start().await;
    let proxy = FaultProxy::start(server.addr).await.unwrap();
    let mut stream = connect(&proxy).await;
    assert_eq!(round_trip(&mut stream, b"warm").await, b"warm");
    proxy.set_mode(ProxyMode::Stall);
    stream.write_all(b"held").await.unwrap();
    tokio::time::sleep(QUIET).await;
    proxy.set_mode(ProxyMode::Drop);
    let (seen, reset) = read_until_closed(&mut stream).await;
    assert!(seen.is_empty());
    assert!(reset);
    assert_eq!(server.received(), 4, "the held bytes were never forwarded");
    wait_for(|| proxy.stats().connections_dropped == 1).await;
}
