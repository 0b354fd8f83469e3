//! The RocketMQ 5.x gRPC adapter (`apache.rocketmq.v2.MessagingService`, docs/grpc.md): its
//! own listener on `grpcListenPort`, serving the official 5.x clients unchanged. Like the
//! remoting adapter it only translates: sends go through `core::send` (same checks, same
//! acknowledgement, invariant 2), and core errors map to gRPC codes in one table
//! ([`status`]).
//!
//! Served now: QueryRoute ([`route`]), Heartbeat and NotifyClientTermination ([`clients`]),
//! Telemetry ([`telemetry`]), SendMessage ([`send`]), and the consumers' QueryAssignment,
//! ReceiveMessage, AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue
//! ([`consume`], over `core::pop`, whose state is log records), and the offset-based pull
//! consumer's PullMessage, UpdateOffset, GetOffset and QueryOffset ([`offsets`], over
//! `core::pull` and `core::offsets`: one view of a group's offsets whichever protocol
//! commits them). Every other RPC (EndTransaction, RecallMessage) answers UNSUPPORTED (50500)
//! naming it, counted in `ferromq_grpc_requests_unsupported_total`.
//!
//! Invariants:
//! 1. Every answer carries a `Status` whose code released clients know
//!    (`ferromq_protocol::grpc::codes::is_safe`).
//! 2. Bad input never panics: a request that does not decode or is larger than
//!    [`max_request_bytes`] is answered by tonic with a transport status; fields that are
//!    missing or wrong are answered with a `Status` naming them.
//! 3. Everything is bounded: request size, messages per request
//!    (`send::SEND_MESSAGES_PER_REQUEST_MAX`), clients and Telemetry streams
//!    (`clients`), queued Telemetry replies (`service::TELEMETRY_OUTBOX_MAX`), held
//!    PullMessage calls (`pullHoldMax`, and `pullHoldMaxPerConnection` per client), and
//!    a held receive or pull ends before the call's deadline (`grpc-timeout`).

pub mod clients;
pub mod consume;
pub mod offsets;
pub mod route;
pub mod send;
pub mod service;
pub mod status;
pub mod telemetry;
pub mod transaction;

#[cfg(test)]
mod fuzz;

use std::net::SocketAddr;
use std::sync::Arc;

use ferromq_protocol::grpc::messaging_service_server::MessagingServiceServer;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::context::BrokerContext;

/// Room a request may take beyond the largest message body: properties (at most 32 KiB a
/// message), the protobuf framing, and a batch's other messages.
pub const GRPC_REQUEST_HEADROOM_BYTES: usize = 1 << 20;

/// How long a stopping broker waits for gRPC calls to finish before closing their
/// connections (clients keep Telemetry streams open for as long as they run).
pub const GRPC_SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// The largest request the endpoint decodes: `maxMessageSize` plus the headroom.
pub fn max_request_bytes(ctx: &BrokerContext) -> usize {
    ctx.config
        .max_message_size
        .saturating_add(GRPC_REQUEST_HEADROOM_BYTES)
}

/// Serves gRPC on `listener` until `stop` turns true. `advertised` is the address the routes
/// name when a request carries no endpoints.
pub async fn serve(
    ctx: Arc<BrokerContext>,
    listener: TcpListener,
    advertised: SocketAddr,
    stop: watch::Receiver<bool>,
) {
    let limit = max_request_bytes(&ctx);
    let service = service::GrpcService::new(ctx, route::endpoints_of(advertised), stop.clone());
    let server = MessagingServiceServer::new(service)
        .max_decoding_message_size(limit)
        .max_encoding_message_size(limit);
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    let stopped = {
        let mut stop = stop.clone();
        async move {
            while !*stop.borrow() {
                if stop.changed().await.is_err() {
                    return;
                }
            }
        }
    };
    let server =
        tonic::transport::Server::builder().serve_with_incoming_shutdown(server, incoming, stopped);
    let mut stop = stop;
    let grace_over = async move {
        while !*stop.borrow() {
            if stop.changed().await.is_err() {
                break;
            }
        }
        tokio::time::sleep(GRPC_SHUTDOWN_GRACE).await;
    };
    tokio::select! {
        result = server => {
            if let Err(error) = result {
                tracing::error!(%error, "gRPC endpoint stopped");
            }
        }
        () = grace_over => {
            tracing::info!(grace = ?GRPC_SHUTDOWN_GRACE, "gRPC calls still open at shutdown; closing their connections");
        }
    }
}
