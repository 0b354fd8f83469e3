//! The controller's TCP listener: remoting frames under the shared connection limits
//! (`ferromq_protocol::remoting::limits`: bounded connections, frame limits, idle timeout,
//! partial-frame budget), serving the controller API and Raft RPCs on one port.
//!
//! Each connection has a reader (this task), one task per request (a heartbeat waits on a
//! quorum round, so requests must not queue behind each other), and a writer task that
//! sends replies as they complete. At most [`REQUESTS_IN_FLIGHT_MAX`] requests per
//! connection run at once; at the bound the reader stops reading (back-pressure).
//!
//! Invariant: network input never panics; a bad frame, read/write error, idle connection or
//! write timeout closes only that connection.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use ferromq_protocol::remoting::limits::{Accepted, Acceptor, FrameReader};
use ferromq_protocol::remoting::{response, RemotingCommand, DEFAULT_MAX_FRAME_LENGTH};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinSet;

use crate::api;
use crate::core::Core;

/// Requests of one connection handled at once.
pub const REQUESTS_IN_FLIGHT_MAX: usize = 64;
/// Bound on writing one batch of replies.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepts connections until `shutdown` turns true, then aborts them all.
pub async fn serve(mut acceptor: Acceptor, core: Arc<Core>, mut shutdown: watch::Receiver<bool>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() {
                    break;
                }
            }
            accepted = acceptor.accept() => {
                connections.spawn(serve_connection(accepted, core.clone()));
            }
            Some(done) = connections.join_next(), if !connections.is_empty() => {
                if let Err(error) = done {
                    if error.is_panic() {
                        tracing::error!(%error, "controller connection task panicked");
                    }
                }
            }
        }
    }
    connections.shutdown().await;
}

async fn serve_connection(accepted: Accepted, core: Arc<Core>) {
    let Accepted {
        stream,
        permit: _permit,
        peer,
        ..
    } = accepted;
    let _ = stream.set_nodelay(true);
    let guard = core_guard(&core);
    let (read_half, write_half) = stream.into_split();
    let mut reader = FrameReader::new(read_half, guard);
    let (replies_tx, replies_rx) = mpsc::channel::<RemotingCommand>(REQUESTS_IN_FLIGHT_MAX);
    let writer = tokio::spawn(write_replies(
        write_half,
        replies_rx,
        reader.activity().clone(),
    ));
    let permits = Arc::new(Semaphore::new(REQUESTS_IN_FLIGHT_MAX));
    let mut requests = JoinSet::new();
    let why = loop {
        let command = match reader.next_frame().await {
            Ok(Some(command)) => command,
            Ok(None) => break "peer closed".to_string(),
            Err(error) => break error.to_string(),
        };
        if command.is_response() {
            continue;
        }
        let Ok(permit) = permits.clone().acquire_owned().await else {
            break "semaphore closed".to_string();
        };
        let in_flight = reader.activity().begin();
        let core = core.clone();
        let replies = replies_tx.clone();
        requests.spawn(async move {
            let _permit = permit;
            let _in_flight = in_flight;
            let reply = api::handle(&core, &command).await;
            if !command.is_oneway() {
                let _ = replies.send(reply).await;
            }
        });
        while let Some(done) = requests.try_join_next() {
            if let Err(error) = done {
                if error.is_panic() {
                    tracing::error!(%peer, %error, "controller request task panicked");
                }
            }
        }
        if writer.is_finished() {
            break "write failed".to_string();
        }
    };
    tracing::debug!(%peer, why, "controller connection closed");
    requests.shutdown().await;
    drop(replies_tx);
    let _ = writer.await;
}

fn core_guard(core: &Core) -> Arc<ferromq_protocol::remoting::limits::ConnectionGuard> {
    core.connection_guard.clone()
}

async fn write_replies(
    mut stream: OwnedWriteHalf,
    mut replies: mpsc::Receiver<RemotingCommand>,
    activity: Arc<ferromq_protocol::remoting::limits::Activity>,
) {
    let mut output = BytesMut::new();
    while let Some(reply) = replies.recv().await {
        encode(&reply, &mut output);
        while let Ok(more) = replies.try_recv() {
            encode(&more, &mut output);
        }
        match tokio::time::timeout(WRITE_TIMEOUT, stream.write_all(&output)).await {
            Ok(Ok(())) => activity.touch(),
            Ok(Err(error)) => {
                tracing::debug!(%error, "controller reply write failed");
                return;
            }
            Err(_) => {
                tracing::warn!(timeout = ?WRITE_TIMEOUT, "controller reply write timed out");
                return;
            }
        }
        output.clear();
    }
}

fn encode(reply: &RemotingCommand, output: &mut BytesMut) {
    if let Err(error) = reply.encode(output, DEFAULT_MAX_FRAME_LENGTH) {
        tracing::warn!(code = reply.code, %error, "reply cannot be encoded; answering SYSTEM_ERROR");
        let fallback = RemotingCommand::new_response(
            response::SYSTEM_ERROR,
            Some(format!("reply cannot be encoded: {error}")),
        )
        .with_opaque(reply.opaque);
        let _ = fallback.encode(output, DEFAULT_MAX_FRAME_LENGTH);
    }
}
