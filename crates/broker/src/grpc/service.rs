//! The `MessagingService` implementation: each RPC decodes its request, calls the core or
//! the gRPC client table, and answers with a `Status` in the body (the gRPC transport status
//! stays OK for every answer the broker gives; tonic itself answers a request it cannot
//! decode or that is too large with a transport status).

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ferromq_protocol::grpc::messaging_service_server::MessagingService;
use ferromq_protocol::grpc::{self as pb, Code, Endpoints};
use futures_util::Stream;
use tokio::sync::{mpsc, watch};
use tonic::{Request, Response, Status as RpcStatus, Streaming};

use super::clients::GrpcClients;
use super::send::{Origin, QueueCursor};
use super::status::{ok, status};
use crate::context::BrokerContext;

/// Header naming the client (ties Heartbeat, Telemetry and sends together).
pub const HEADER_CLIENT_ID: &str = "x-mq-client-id";

/// Replies a Telemetry stream may have queued before its reader blocks.
pub const TELEMETRY_OUTBOX_MAX: usize = 16;

/// A stream of replies.
pub type ReplyStream<T> = Pin<Box<dyn Stream<Item = Result<T, RpcStatus>> + Send + 'static>>;

/// The gRPC service of one broker.
#[derive(Debug, Clone)]
pub struct GrpcService {
    ctx: Arc<BrokerContext>,
    clients: GrpcClients,
    cursor: Arc<QueueCursor>,
    own_endpoints: Endpoints,
    stop: watch::Receiver<bool>,
}

impl GrpcService {
    /// A service over `ctx`, reachable at `own_endpoints`, ending its streams on `stop`.
    pub fn new(
        ctx: Arc<BrokerContext>,
        own_endpoints: Endpoints,
        stop: watch::Receiver<bool>,
    ) -> GrpcService {
        let clients = GrpcClients::default();
        let (alive, expiry) = (
            clients.clone(),
            Duration::from_millis(ctx.runtime_config.channel_expired_timeout()),
        );
        ctx.pop
            .set_liveness(Arc::new(move |client| alive.is_alive(client, expiry)));
        tokio::spawn(super::transaction::forward_check_backs(
            ctx.clone(),
            clients.clone(),
            ctx.transactions.open_check_backs(),
            stop.clone(),
        ));
        GrpcService {
            ctx,
            clients,
            cursor: Arc::default(),
            own_endpoints,
            stop,
        }
    }

    /// The gRPC clients known now.
    pub fn clients(&self) -> &GrpcClients {
        &self.clients
    }

    fn expiry(&self) -> Duration {
        Duration::from_millis(self.ctx.runtime_config.channel_expired_timeout())
    }
}

/// The `x-mq-client-id` header, when present and not empty.
fn client_id<T>(request: &Request<T>) -> Option<String> {
    request
        .metadata()
        .get(HEADER_CLIENT_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

fn client_id_required() -> pb::Status {
    status(
        Code::ClientIdRequired,
        format!("the {HEADER_CLIENT_ID} header is required"),
    )
}

/// A stream of exactly the given items.
fn once<T: Send + 'static>(items: Vec<T>) -> ReplyStream<T> {
    Box::pin(futures_util::stream::iter(items.into_iter().map(Ok)))
}

#[tonic::async_trait]
impl MessagingService for GrpcService {
    async fn query_route(
        &self,
        request: Request<pb::QueryRouteRequest>,
    ) -> Result<Response<pb::QueryRouteResponse>, RpcStatus> {
        let reply = super::route::query_route(&self.ctx, request.get_ref(), &self.own_endpoints);
        Ok(Response::new(reply))
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, RpcStatus> {
        let Some(client) = client_id(&request) else {
            return Ok(Response::new(pb::HeartbeatResponse {
                status: Some(client_id_required()),
            }));
        };
        let body = request.get_ref();
        let group = body.group.as_ref().map(|g| g.name.as_str());
        let reply = match self
            .clients
            .touch(&client, body.client_type, group, self.expiry())
        {
            Ok(()) => ok(),
            Err(limit) => {
                let (label, remark) = limit.describe();
                self.ctx.metrics.grpc_limited(label);
                status(Code::TooManyRequests, remark)
            }
        };
        Ok(Response::new(pb::HeartbeatResponse {
            status: Some(reply),
        }))
    }

    async fn send_message(
        &self,
        request: Request<pb::SendMessageRequest>,
    ) -> Result<Response<pb::SendMessageResponse>, RpcStatus> {
        let client = client_id(&request).unwrap_or_default();
        let origin = Origin {
            peer: request.remote_addr(),
            client_id: &client,
        };
        let messages = &request.get_ref().messages;
        if messages.is_empty() {
            return Ok(Response::new(pb::SendMessageResponse {
                status: Some(status(Code::BadRequest, "SendMessage carries no message")),
                entries: Vec::new(),
            }));
        }
        let entries = super::send::send_all(&self.ctx, &self.cursor, origin, messages).await;
        Ok(Response::new(pb::SendMessageResponse {
            status: Some(super::send::overall_status(&entries)),
            entries,
        }))
    }

    async fn query_assignment(
        &self,
        request: Request<pb::QueryAssignmentRequest>,
    ) -> Result<Response<pb::QueryAssignmentResponse>, RpcStatus> {
        Ok(Response::new(super::consume::query_assignment(
            &self.ctx,
            request.get_ref(),
            &self.own_endpoints,
        )))
    }

    type ReceiveMessageStream = ReplyStream<pb::ReceiveMessageResponse>;

    async fn receive_message(
        &self,
        request: Request<pb::ReceiveMessageRequest>,
    ) -> Result<Response<Self::ReceiveMessageStream>, RpcStatus> {
        let client = client_id(&request);
        let deadline = request
            .metadata()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(super::consume::grpc_timeout);
        let outcome = match super::consume::receive_request(request.get_ref(), deadline) {
            Ok(mut receive) => {
                // auto_renew: the broker extends the deliveries while this client is alive.
                receive.auto_renew = client.filter(|_| request.get_ref().auto_renew);
                crate::core::pop::receive::receive(&self.ctx, &receive)
                    .await
                    .map_err(|e| super::consume::pop_status(&e))
            }
            Err(refused) => Err(refused),
        };
        Ok(Response::new(once(super::consume::receive_stream(
            &self.ctx, outcome,
        ))))
    }

    async fn ack_message(
        &self,
        request: Request<pb::AckMessageRequest>,
    ) -> Result<Response<pb::AckMessageResponse>, RpcStatus> {
        Ok(Response::new(
            super::consume::ack(&self.ctx, request.get_ref()).await,
        ))
    }

    async fn forward_message_to_dead_letter_queue(
        &self,
        request: Request<pb::ForwardMessageToDeadLetterQueueRequest>,
    ) -> Result<Response<pb::ForwardMessageToDeadLetterQueueResponse>, RpcStatus> {
        let status = super::consume::forward_to_dead_letter(&self.ctx, request.get_ref()).await;
        Ok(Response::new(pb::ForwardMessageToDeadLetterQueueResponse {
            status: Some(status),
        }))
    }

    type PullMessageStream = ReplyStream<pb::PullMessageResponse>;

    async fn pull_message(
        &self,
        request: Request<pb::PullMessageRequest>,
    ) -> Result<Response<Self::PullMessageStream>, RpcStatus> {
        use pb::pull_message_response::Content;
        let refuse = |status| {
            Ok(Response::new(once(vec![pb::PullMessageResponse {
                content: Some(Content::Status(status)),
            }])))
        };
        let Some(client) = client_id(&request) else {
            return refuse(client_id_required());
        };
        let held = match self.clients.held_pulls(&client, self.expiry()) {
            Ok(held) => held,
            Err(limit) => {
                let (label, remark) = limit.describe();
                self.ctx.metrics.grpc_limited(label);
                return refuse(status(Code::TooManyRequests, remark));
            }
        };
        let replies = super::offsets::pull_message(
            &self.ctx,
            client,
            held,
            request.get_ref(),
            request
                .metadata()
                .get("grpc-timeout")
                .and_then(|v| v.to_str().ok())
                .and_then(super::consume::grpc_timeout),
            self.stop.clone(),
        )
        .await;
        Ok(Response::new(once(replies)))
    }

    async fn update_offset(
        &self,
        request: Request<pb::UpdateOffsetRequest>,
    ) -> Result<Response<pb::UpdateOffsetResponse>, RpcStatus> {
        let reply = match client_id(&request) {
            Some(client) => {
                super::offsets::update_offset(&self.ctx, client, request.get_ref()).await
            }
            None => client_id_required(),
        };
        Ok(Response::new(pb::UpdateOffsetResponse {
            status: Some(reply),
        }))
    }

    async fn get_offset(
        &self,
        request: Request<pb::GetOffsetRequest>,
    ) -> Result<Response<pb::GetOffsetResponse>, RpcStatus> {
        Ok(Response::new(
            super::offsets::get_offset(&self.ctx, request.get_ref()).await,
        ))
    }

    async fn query_offset(
        &self,
        request: Request<pb::QueryOffsetRequest>,
    ) -> Result<Response<pb::QueryOffsetResponse>, RpcStatus> {
        Ok(Response::new(
            super::offsets::query_offset(&self.ctx, request.get_ref()).await,
        ))
    }

    async fn end_transaction(
        &self,
        request: Request<pb::EndTransactionRequest>,
    ) -> Result<Response<pb::EndTransactionResponse>, RpcStatus> {
        let status = super::transaction::end_transaction(&self.ctx, request.get_ref()).await;
        Ok(Response::new(pb::EndTransactionResponse {
            status: Some(status),
        }))
    }

    type TelemetryStream = ReplyStream<pb::TelemetryCommand>;

    async fn telemetry(
        &self,
        request: Request<Streaming<pb::TelemetryCommand>>,
    ) -> Result<Response<Self::TelemetryStream>, RpcStatus> {
        let refuse = |status| {
            Ok(Response::new(once(vec![pb::TelemetryCommand {
                status: Some(status),
                command: None,
            }])))
        };
        let Some(client) = client_id(&request) else {
            return refuse(client_id_required());
        };
        let guard = match self.clients.open_stream(&client, self.expiry()) {
            Ok(guard) => guard,
            Err(limit) => {
                let (label, remark) = limit.describe();
                self.ctx.metrics.grpc_limited(label);
                return refuse(status(Code::TooManyRequests, remark));
            }
        };
        let (tx, rx) = mpsc::channel(TELEMETRY_OUTBOX_MAX);
        let mut inbound = request.into_inner();
        let mut stop = self.stop.clone();
        let ctx = self.ctx.clone();
        let clients = self.clients.clone();
        let expiry = self.expiry();
        tokio::spawn(async move {
            let _guard = guard;
            loop {
                let command = tokio::select! {
                    command = inbound.message() => command,
                    _ = stop.changed() => break,
                };
                let command = match command {
                    Ok(Some(command)) => command,
                    Ok(None) => break,
                    Err(error) => {
                        tracing::debug!(%client, %error, "telemetry stream ended");
                        break;
                    }
                };
                if let Some(pb::telemetry_command::Command::Settings(settings)) = &command.command {
                    let group = match &settings.pub_sub {
                        Some(pb::settings::PubSub::Subscription(s)) => {
                            s.group.as_ref().map(|g| g.name.clone())
                        }
                        _ => None,
                    };
                    let client_type = settings.client_type.unwrap_or(0);
                    let _ = clients.touch(&client, client_type, group.as_deref(), expiry);
                    if let Some(pb::settings::PubSub::Publishing(p)) = &settings.pub_sub {
                        let topics = p.topics.iter().map(|t| t.name.clone()).collect();
                        clients.publishes(&client, topics, tx.clone());
                    }
                }
                let reply = super::telemetry::reply(&ctx, command);
                if tx.send(Ok(reply)).await.is_err() {
                    break;
                }
            }
        });
        let replies = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|reply| (reply, rx))
        });
        Ok(Response::new(Box::pin(replies)))
    }

    async fn notify_client_termination(
        &self,
        request: Request<pb::NotifyClientTerminationRequest>,
    ) -> Result<Response<pb::NotifyClientTerminationResponse>, RpcStatus> {
        let reply = match client_id(&request) {
            Some(client) => {
                self.clients.remove(&client);
                ok()
            }
            None => client_id_required(),
        };
        Ok(Response::new(pb::NotifyClientTerminationResponse {
            status: Some(reply),
        }))
    }

    async fn change_invisible_duration(
        &self,
        request: Request<pb::ChangeInvisibleDurationRequest>,
    ) -> Result<Response<pb::ChangeInvisibleDurationResponse>, RpcStatus> {
        Ok(Response::new(
            super::consume::change_invisible(&self.ctx, request.get_ref()).await,
        ))
    }

    async fn recall_message(
        &self,
        request: Request<pb::RecallMessageRequest>,
    ) -> Result<Response<pb::RecallMessageResponse>, RpcStatus> {
        Ok(Response::new(
            super::consume::recall(&self.ctx, request.get_ref()).await,
        ))
    }
}
