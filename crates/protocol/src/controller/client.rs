//! [`ControllerClient`]: a broker's or admin tool's connection to a controller group.
//!
//! It knows every controller address (`controllerAddr`, `;`-separated) and sends each call
//! to the one it believes is the Raft leader. A `CONTROLLER_NOT_LEADER` reply that names the
//! leader moves the call there at once (when the client was given more than one address, only a
//! hint naming one of them: see `follows_hint`); a reply that names none, or a connection
//! failure, moves it to the next address. Every call is bounded by its timeout overall, connecting and
//! redirects included, and by [`REDIRECTS_MAX`] hops.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::time::Instant;

use super::LEADER_ADDRESS_EXT;
use crate::remoting::{
    response, response_code_name, ClientError, ExtFields, RemotingClient, RemotingCommand,
};

/// Most hops one call takes between controllers before giving up.
pub const REDIRECTS_MAX: usize = 8;

/// Why a controller call failed.
#[derive(Debug, thiserror::Error)]
pub enum ControllerCallError {
    /// No controller address is configured.
    #[error("no controller address configured (controllerAddr)")]
    NoAddress,
    /// The last controller tried could not be reached.
    #[error(transparent)]
    Remoting(#[from] ClientError),
    /// A controller answered with an error code.
    #[error("controller {addr} answered {code} ({}): {}",
        response_code_name(*.code).unwrap_or("unknown"), .remark.as_deref().unwrap_or(""))]
    Rejected {
        /// The controller that answered.
        addr: SocketAddr,
        /// Response code.
        code: i32,
        /// Remark.
        remark: Option<String>,
    },
    /// No controller answered as leader within the call's hops or time.
    #[error("no controller leader found among {tried} tried: {last}")]
    NoLeader {
        /// Controllers tried.
        tried: usize,
        /// What the last one said.
        last: String,
    },
    /// A body could not be encoded or decoded.
    #[error("controller body from {addr}: {source}")]
    Body {
        /// The controller.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: serde_json::Error,
    },
}

impl ControllerCallError {
    /// The response code, when a controller answered with an error code.
    pub fn code(&self) -> Option<i32> {
        match self {
            ControllerCallError::Rejected { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// Connections to a controller group, following its leader.
#[derive(Debug)]
pub struct ControllerClient {
    addrs: Vec<SocketAddr>,
    /// Index into `addrs` of the controller believed to be the leader, or an address learned
    /// from a redirect.
    leader: Mutex<Option<SocketAddr>>,
    connections: tokio::sync::Mutex<std::collections::HashMap<SocketAddr, Arc<RemotingClient>>>,
}

impl ControllerClient {
    /// A client of the controllers at `addrs`.
    pub fn new(addrs: Vec<SocketAddr>) -> ControllerClient {
        ControllerClient {
            addrs,
            leader: Mutex::new(None),
            connections: Default::default(),
        }
    }

    /// Parses `controllerAddr`: addresses separated by `;` (or `,`), blanks ignored.
    pub fn parse_addrs(text: &str) -> Result<Vec<SocketAddr>, String> {
        text.split([';', ','])
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<SocketAddr>()
                    .map_err(|e| format!("controller address {s:?}: {e}"))
            })
            .collect()
    }

    /// The configured addresses.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The controller last seen as leader.
    pub fn leader(&self) -> Option<SocketAddr> {
        *self.leader.lock().expect("leader lock")
    }

    /// Sends `request` (a JSON body) with `code` to the leader and decodes its JSON reply.
    pub async fn call<Q: Serialize, R: DeserializeOwned>(
        &self,
        code: i32,
        request: &Q,
        timeout: Duration,
    ) -> Result<R, ControllerCallError> {
        let reply = self.call_raw(code, request, timeout).await?;
        let addr = reply.0;
        serde_json::from_slice(reply.1.body.as_deref().unwrap_or(b"null"))
            .map_err(|source| ControllerCallError::Body { addr, source })
    }

    /// Like [`ControllerClient::call`], returning the answering controller and its whole
    /// SUCCESS reply.
    pub async fn call_raw<Q: Serialize>(
        &self,
        code: i32,
        request: &Q,
        timeout: Duration,
    ) -> Result<(SocketAddr, RemotingCommand), ControllerCallError> {
        if self.addrs.is_empty() {
            return Err(ControllerCallError::NoAddress);
        }
        let body = serde_json::to_vec(request).map_err(|source| ControllerCallError::Body {
            addr: self.addrs[0],
            source,
        })?;
        let deadline = Instant::now() + timeout;
        let mut next = self.leader().unwrap_or(self.addrs[0]);
        let mut tried = 0usize;
        let mut last = String::from("no reply");
        while tried < REDIRECTS_MAX.max(self.addrs.len()) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            tried += 1;
            let command =
                RemotingCommand::new_request(code, ExtFields::new()).with_body(body.clone());
            match self.invoke(next, command, left).await {
                Ok(reply) if reply.code == response::SUCCESS => {
                    *self.leader.lock().expect("leader lock") = Some(next);
                    return Ok((next, reply));
                }
                Ok(reply) if reply.code == response::CONTROLLER_NOT_LEADER => {
                    last = format!(
                        "{next}: not the leader ({})",
                        reply.remark.as_deref().unwrap_or("")
                    );
                    let hint = reply
                        .ext_fields
                        .get(LEADER_ADDRESS_EXT)
                        .and_then(|a| a.parse::<SocketAddr>().ok())
                        .filter(|a| *a != next && self.follows_hint(*a));
                    next = hint.unwrap_or_else(|| self.after(next));
                    // Without a hint the group may be electing: give it a moment.
                    if hint.is_none() && tried >= self.addrs.len() {
                        tokio::time::sleep(Duration::from_millis(50).min(left)).await;
                    }
                }
                Ok(reply) => {
                    return Err(ControllerCallError::Rejected {
                        addr: next,
                        code: reply.code,
                        remark: reply.remark,
                    })
                }
                Err(error) => {
                    last = format!("{next}: {error}");
                    self.forget(next).await;
                    if self.addrs.len() == 1 {
                        return Err(error.into());
                    }
                    next = self.after(next);
                }
            }
        }
        Err(ControllerCallError::NoLeader { tried, last })
    }

    /// Whether a leader hint naming `addr` is followed: always by a client given one address
    /// (an admin tool pointed at any controller), otherwise only when `addr` is one of the
    /// configured addresses. A broker configured with every controller thus reaches them only
    /// where it was told to (they may sit behind proxies or NAT, and the hint carries the
    /// address from the Raft membership); an unknown hint moves it to the next configured one.
    fn follows_hint(&self, addr: SocketAddr) -> bool {
        self.addrs.len() == 1 || self.addrs.contains(&addr)
    }

    /// The configured address after `addr` (the first if `addr` is not configured).
    fn after(&self, addr: SocketAddr) -> SocketAddr {
        match self.addrs.iter().position(|a| *a == addr) {
            Some(i) => self.addrs[(i + 1) % self.addrs.len()],
            None => self.addrs[0],
        }
    }

    async fn invoke(
        &self,
        addr: SocketAddr,
        command: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, ClientError> {
        let client = {
            let mut connections = self.connections.lock().await;
            match connections.get(&addr) {
                Some(client) if !client.is_closed() => client.clone(),
                _ => {
                    // Connecting under the lock: one connection per controller, never two.
                    let client = Arc::new(RemotingClient::connect(addr, timeout).await?);
                    connections.insert(addr, client.clone());
                    client
                }
            }
        };
        // Calls share the connection concurrently (replies are matched by opaque): a slow
        // in-sync set change never holds back a heartbeat.
        client.invoke(command, timeout).await
    }

    async fn forget(&self, addr: SocketAddr) {
        if let Some(client) = self.connections.lock().await.remove(&addr) {
            client.close();
        }
        let mut leader = self.leader.lock().expect("leader lock");
        if *leader == Some(addr) {
            *leader = None;
        }
    }
}
