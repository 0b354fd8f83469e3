//! Raft RPCs to controller peers over remoting frames.
//!
//! A request is a remoting request with code [`RAFT_APPEND_ENTRIES`], [`RAFT_VOTE`] or
//! [`RAFT_INSTALL_SNAPSHOT`] and the openraft message as a JSON body; the reply is SUCCESS
//! with a JSON body holding `Result<response, RaftError>` (see `server`), so a remote Raft
//! error comes back typed. Transport failures (connect, timeout, closed connection, an
//! error code) are `Unreachable` for openraft, which backs off and retries; nothing here
//! panics on a peer's input.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ferromq_protocol::controller::{RAFT_APPEND_ENTRIES, RAFT_INSTALL_SNAPSHOT, RAFT_VOTE};
use ferromq_protocol::remoting::{response, ExtFields, RemotingClient, RemotingCommand};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::raft_types::TypeConfig;

/// Why one Raft RPC failed on the way.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The peer's address is not a socket address.
    #[error("peer {target} has no usable address {addr:?}: {source}")]
    Address {
        /// Node id.
        target: u64,
        /// What the membership says.
        addr: String,
        /// Cause.
        #[source]
        source: std::net::AddrParseError,
    },
    /// Connecting or invoking failed.
    #[error("raft rpc to n{target}: {source}")]
    Remoting {
        /// Node id.
        target: u64,
        /// Cause.
        #[source]
        source: ferromq_protocol::remoting::ClientError,
    },
    /// The peer answered with an error code.
    #[error("raft rpc to n{target} answered {code}: {remark}")]
    Refused {
        /// Node id.
        target: u64,
        /// Code.
        code: i32,
        /// Remark.
        remark: String,
    },
    /// A body did not encode or decode.
    #[error("raft rpc to n{target}: body: {source}")]
    Body {
        /// Node id.
        target: u64,
        /// Cause.
        #[source]
        source: serde_json::Error,
    },
}

/// Makes one [`PeerConnection`] per peer.
///
/// A peer is dialled at the address this node's own `controllerDLegerPeers` names for it, not
/// the one in the Raft membership: the membership is fixed and equal to the configured peers,
/// but the address one node reaches another at may differ per node (a proxy or NAT in front
/// of a peer; `ferromq chaos` puts a fault proxy on every controller-to-controller link this
/// way). A peer missing from the map is dialled at its membership address.
#[derive(Debug, Clone)]
pub struct NetworkFactory {
    /// Bound on one RPC (connecting included).
    pub rpc_timeout: Duration,
    /// Where to dial each peer, by node id (this node's configured peers).
    pub dial: BTreeMap<u64, SocketAddr>,
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerConnection;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> PeerConnection {
        PeerConnection {
            target,
            addr: self
                .dial
                .get(&target)
                .map_or_else(|| node.addr.clone(), SocketAddr::to_string),
            client: None,
            rpc_timeout: self.rpc_timeout,
        }
    }
}

/// A lazily connected remoting connection to one peer; reconnects after a failure.
#[derive(Debug)]
pub struct PeerConnection {
    target: u64,
    addr: String,
    client: Option<Arc<RemotingClient>>,
    rpc_timeout: Duration,
}

type RpcResult<T, E> = Result<T, RPCError<u64, BasicNode, RaftError<u64, E>>>;

impl PeerConnection {
    async fn connection(
        &mut self,
        timeout: Duration,
    ) -> Result<Arc<RemotingClient>, TransportError> {
        if let Some(client) = &self.client {
            if !client.is_closed() {
                return Ok(client.clone());
            }
        }
        let addr: SocketAddr = self
            .addr
            .parse()
            .map_err(|source| TransportError::Address {
                target: self.target,
                addr: self.addr.clone(),
                source,
            })?;
        let client = RemotingClient::connect(addr, timeout)
            .await
            .map_err(|source| TransportError::Remoting {
                target: self.target,
                source,
            })?;
        let client = Arc::new(client);
        self.client = Some(client.clone());
        Ok(client)
    }

    /// Sends one RPC and decodes the peer's `Result<R, RaftError<E>>`.
    async fn send<Q, R, E>(&mut self, code: i32, request: &Q, option: &RPCOption) -> RpcResult<R, E>
    where
        Q: Serialize,
        R: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let timeout = option
            .hard_ttl()
            .min(self.rpc_timeout.max(Duration::from_millis(1)));
        let reply = match self.exchange(code, request, timeout).await {
            Ok(reply) => reply,
            Err(error) => {
                if matches!(error, TransportError::Remoting { .. }) {
                    if let Some(client) = self.client.take() {
                        client.close();
                    }
                }
                return Err(RPCError::Unreachable(Unreachable::new(&error)));
            }
        };
        let decoded: Result<R, RaftError<u64, E>> =
            serde_json::from_slice(&reply).map_err(|source| {
                let error = TransportError::Body {
                    target: self.target,
                    source,
                };
                RPCError::Network(NetworkError::new(&error))
            })?;
        decoded.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn exchange<Q: Serialize>(
        &mut self,
        code: i32,
        request: &Q,
        timeout: Duration,
    ) -> Result<Vec<u8>, TransportError> {
        let body = serde_json::to_vec(request).map_err(|source| TransportError::Body {
            target: self.target,
            source,
        })?;
        let client = self.connection(timeout).await?;
        let command = RemotingCommand::new_request(code, ExtFields::new()).with_body(body);
        let reply =
            client
                .invoke(command, timeout)
                .await
                .map_err(|source| TransportError::Remoting {
                    target: self.target,
                    source,
                })?;
        if reply.code != response::SUCCESS {
            return Err(TransportError::Refused {
                target: self.target,
                code: reply.code,
                remark: reply.remark.unwrap_or_default(),
            });
        }
        Ok(reply.body.map(|b| b.to_vec()).unwrap_or_default())
    }
}

impl RaftNetwork<TypeConfig> for PeerConnection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<u64>, openraft::error::Infallible> {
        self.send(RAFT_APPEND_ENTRIES, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<u64>, InstallSnapshotError> {
        self.send(RAFT_INSTALL_SNAPSHOT, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<u64>, openraft::error::Infallible> {
        self.send(RAFT_VOTE, &rpc, &option).await
    }
}
