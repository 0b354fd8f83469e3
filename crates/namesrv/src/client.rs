//! Broker-side calls to name servers: REGISTER_BROKER and UNREGISTER_BROKER.
//!
//! [`NamesrvClient`] keeps one [`RemotingClient`] connection per name server and reuses it
//! across calls, reconnecting when it has closed. This matters for correctness, not only
//! speed: a name server removes a broker when the connection it registered over closes
//! (RocketMQ's `onChannelDestroy`), so a registration must travel over a connection that stays
//! open until the next one. The free functions [`register_broker`] and [`unregister_broker`]
//! do one call over a connection the caller owns.
//!
//! Invariant: every call is bounded by its timeout, connecting included.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ferromq_protocol::body_crc;
use ferromq_protocol::remoting::body::misc::KvTable;
use ferromq_protocol::remoting::body::topic::RegisterBrokerBody;
use ferromq_protocol::remoting::body::{decode_json, encode_json, BodyError};
use ferromq_protocol::remoting::extensions::MASTER_EPOCH_EXT;
use ferromq_protocol::remoting::headers::namesrv::{
    RegisterBrokerRequestHeader, RegisterBrokerResponseHeader, UnregisterBrokerRequestHeader,
};
use ferromq_protocol::remoting::{
    request, response, response_code_name, ClientError, HeaderError, RemotingClient,
    RemotingCommand,
};
use tokio::time::Instant;

use crate::route_registry::RegisterBrokerResult;

/// Errors of broker-to-name-server calls.
#[derive(Debug, thiserror::Error)]
pub enum NamesrvClientError {
    /// Connecting, sending or waiting for the reply failed.
    #[error(transparent)]
    Remoting(#[from] ClientError),
    /// The name server answered with an error code.
    #[error("name server {addr} answered {code} ({}): {}",
        response_code_name(*.code).unwrap_or("unknown"), .remark.as_deref().unwrap_or(""))]
    Rejected {
        /// Name server.
        addr: SocketAddr,
        /// Response code.
        code: i32,
        /// Response remark.
        remark: Option<String>,
    },
    /// The reply header is malformed.
    #[error("malformed reply header: {0}")]
    ReplyHeader(#[from] HeaderError),
    /// The reply body is malformed.
    #[error("malformed reply body: {0}")]
    ReplyBody(#[from] BodyError),
}

impl NamesrvClientError {
    /// The response code and remark when the name server answered with an error code, e.g.
    /// SYSTEM_ERROR with "broker name … already has a live master at …" for a second master
    /// of a broker name; `None` for transport and decoding failures.
    pub fn rejection(&self) -> Option<(i32, Option<&str>)> {
        match self {
            NamesrvClientError::Rejected { code, remark, .. } => Some((*code, remark.as_deref())),
            _ => None,
        }
    }

    /// Whether the name server refused a registration because the broker name already has a
    /// live master at another address (a broker should not retry as master until it is gone).
    pub fn is_second_master(&self) -> bool {
        self.rejection().is_some_and(|(code, remark)| {
            code == response::SYSTEM_ERROR && remark.is_some_and(|r| r.contains(SECOND_MASTER_MARK))
        })
    }

    /// Whether the name server refused a master registration whose master epoch is below the
    /// group's (a master deposed by failover; it must register as a slave).
    pub fn is_deposed_master(&self) -> bool {
        self.rejection().is_some_and(|(code, remark)| {
            code == response::SYSTEM_ERROR
                && remark.is_some_and(|r| r.contains(DEPOSED_MASTER_MARK))
        })
    }
}

/// The part of the name server's second-master refusal remark that identifies it.
const SECOND_MASTER_MARK: &str = "a second master with the same brokerName is refused";

/// The part of the name server's deposed-master refusal remark that identifies it.
const DEPOSED_MASTER_MARK: &str = "a deposed master must re-register as a slave";

/// What a broker learns from a registration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RegisterBrokerReply {
    /// Master and HA addresses, for a slave whose master is registered.
    pub result: RegisterBrokerResult,
    /// The name server's `ORDER_TOPIC_CONFIG` table (topic → `broker:queueNums;…`).
    pub order_topic_config: KvTable,
}

/// Sends REGISTER_BROKER over `client`. Sets `bodyCrc32` (CRC32 of the body masked to 31 bits,
/// as Java computes it) and `compressed=false`; other header fields are sent as given.
pub async fn register_broker(
    client: &RemotingClient,
    header: &RegisterBrokerRequestHeader,
    body: &RegisterBrokerBody,
    timeout: Duration,
) -> Result<RegisterBrokerReply, NamesrvClientError> {
    register_broker_with_epoch(client, header, None, body, timeout).await
}

/// [`register_broker`] carrying `master_epoch` in the
/// [`MASTER_EPOCH_EXT`](ferromq_protocol::remoting::extensions::MASTER_EPOCH_EXT) ext field
/// when it is `Some` and above 0 (a broker in controller mode); an epoch of 0 or `None`
/// sends the plain RocketMQ request.
pub async fn register_broker_with_epoch(
    client: &RemotingClient,
    header: &RegisterBrokerRequestHeader,
    master_epoch: Option<u64>,
    body: &RegisterBrokerBody,
    timeout: Duration,
) -> Result<RegisterBrokerReply, NamesrvClientError> {
    let bytes = encode_json(body);
    let header = RegisterBrokerRequestHeader {
        compressed: Some(false),
        body_crc32: Some(body_crc(&bytes) as i32),
        ..header.clone()
    };
    let mut cmd =
        RemotingCommand::request_with_header(request::REGISTER_BROKER, &header).with_body(bytes);
    if let Some(epoch) = master_epoch.filter(|e| *e > 0) {
        cmd.ext_fields
            .insert(MASTER_EPOCH_EXT.to_owned(), epoch.to_string());
    }
    let reply = checked(client, cmd, timeout).await?;
    let h: RegisterBrokerResponseHeader = reply.decode_header()?;
    let order_topic_config = match reply.body.as_deref() {
        Some(b) if !b.is_empty() && b != b"null" => decode_json(b)?,
        _ => KvTable::default(),
    };
    Ok(RegisterBrokerReply {
        result: RegisterBrokerResult {
            ha_server_addr: h.ha_server_addr.filter(|a| !a.is_empty()),
            master_addr: h.master_addr.filter(|a| !a.is_empty()),
        },
        order_topic_config,
    })
}

/// Sends UNREGISTER_BROKER over `client`.
pub async fn unregister_broker(
    client: &RemotingClient,
    header: &UnregisterBrokerRequestHeader,
    timeout: Duration,
) -> Result<(), NamesrvClientError> {
    let cmd = RemotingCommand::request_with_header(request::UNREGISTER_BROKER, header);
    checked(client, cmd, timeout).await.map(drop)
}

async fn checked(
    client: &RemotingClient,
    cmd: RemotingCommand,
    timeout: Duration,
) -> Result<RemotingCommand, NamesrvClientError> {
    let reply = client.invoke(cmd, timeout).await?;
    if reply.code != response::SUCCESS {
        return Err(NamesrvClientError::Rejected {
            addr: client.peer_addr(),
            code: reply.code,
            remark: reply.remark,
        });
    }
    Ok(reply)
}

/// Cached connections to name servers for a broker's periodic registration. Share it behind
/// an `Arc`; calls to different name servers may run concurrently.
#[derive(Debug, Default)]
pub struct NamesrvClient {
    connections: tokio::sync::Mutex<HashMap<SocketAddr, Arc<RemotingClient>>>,
    /// Credentials every request is signed with (name servers with ACL on).
    credentials: Option<Arc<ferromq_protocol::remoting::acl::Credentials>>,
    /// TLS of every connection (name servers with `tls.server.mode` enforcing).
    tls: Option<ferromq_protocol::remoting::tls::ClientTls>,
}

impl NamesrvClient {
    /// A client with no connection yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A client whose requests are signed with `credentials` (`None`: unsigned).
    pub fn with_credentials(
        credentials: Option<ferromq_protocol::remoting::acl::Credentials>,
    ) -> Self {
        NamesrvClient {
            connections: Default::default(),
            credentials: credentials.map(Arc::new),
            tls: None,
        }
    }

    /// The same client connecting with `tls` (`None`: plain TCP).
    pub fn with_tls(mut self, tls: Option<ferromq_protocol::remoting::tls::ClientTls>) -> Self {
        self.tls = tls;
        self
    }

    /// Registers with `namesrv` (see [`register_broker`]), within `timeout` overall.
    pub async fn register_broker(
        &self,
        namesrv: SocketAddr,
        header: &RegisterBrokerRequestHeader,
        body: &RegisterBrokerBody,
        timeout: Duration,
    ) -> Result<RegisterBrokerReply, NamesrvClientError> {
        self.register_broker_with_epoch(namesrv, header, None, body, timeout)
            .await
    }

    /// Registers with `namesrv` carrying a master epoch (see
    /// [`register_broker_with_epoch`]), within `timeout` overall.
    pub async fn register_broker_with_epoch(
        &self,
        namesrv: SocketAddr,
        header: &RegisterBrokerRequestHeader,
        master_epoch: Option<u64>,
        body: &RegisterBrokerBody,
        timeout: Duration,
    ) -> Result<RegisterBrokerReply, NamesrvClientError> {
        let deadline = Instant::now() + timeout;
        let client = self
            .connection(namesrv, timeout, request::REGISTER_BROKER)
            .await?;
        let left = deadline.saturating_duration_since(Instant::now());
        register_broker_with_epoch(&client, header, master_epoch, body, left).await
    }

    /// Unregisters from `namesrv` (see [`unregister_broker`]), within `timeout` overall.
    pub async fn unregister_broker(
        &self,
        namesrv: SocketAddr,
        header: &UnregisterBrokerRequestHeader,
        timeout: Duration,
    ) -> Result<(), NamesrvClientError> {
        let deadline = Instant::now() + timeout;
        let client = self
            .connection(namesrv, timeout, request::UNREGISTER_BROKER)
            .await?;
        let left = deadline.saturating_duration_since(Instant::now());
        unregister_broker(&client, header, left).await
    }

    /// Closes every cached connection. A name server removes the brokers registered over
    /// them, so call it after unregistering, on shutdown.
    pub async fn close_all(&self) {
        for (_, c) in self.connections.lock().await.drain() {
            c.close();
        }
    }

    /// The open connection to `addr`, connecting (within `timeout`) if there is none; `code`
    /// names the request in a timeout error.
    async fn connection(
        &self,
        addr: SocketAddr,
        timeout: Duration,
        code: i32,
    ) -> Result<Arc<RemotingClient>, NamesrvClientError> {
        let mut connections = match tokio::time::timeout(timeout, self.connections.lock()).await {
            Ok(guard) => guard,
            Err(_) => {
                return Err(ClientError::Timeout {
                    code,
                    after: timeout,
                }
                .into())
            }
        };
        if let Some(c) = connections.get(&addr) {
            if !c.is_closed() {
                return Ok(c.clone());
            }
            tracing::info!(namesrv = %addr, "name server connection closed; reconnecting");
        }
        let options = ferromq_protocol::remoting::ClientOptions {
            connect_timeout: timeout,
            credentials: self.credentials.clone(),
            tls: self.tls.clone(),
            ..Default::default()
        };
        let client = Arc::new(RemotingClient::connect_with(addr, options).await?);
        connections.insert(addr, client.clone());
        Ok(client)
    }
}
