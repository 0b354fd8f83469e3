//! NOTIFY_BROKER_ROLE_CHANGED (1008) to a group's members after an election: one-way and
//! best effort (a broker learns the same from its next heartbeat reply), so failures are
//! logged at debug level only and never block the election.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ferromq_protocol::controller::ReplicaInfo;
use ferromq_protocol::remoting::{request, RemotingCommand};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

/// Most notices being sent at once; more are dropped (best effort).
pub const NOTICES_IN_FLIGHT_MAX: usize = 64;
/// Bound on connecting to and writing to one broker.
pub const NOTICE_TIMEOUT: Duration = Duration::from_millis(500);

/// Sends role-change notices.
#[derive(Debug, Clone)]
pub struct Notifier {
    permits: Arc<Semaphore>,
}

impl Default for Notifier {
    fn default() -> Self {
        Notifier {
            permits: Arc::new(Semaphore::new(NOTICES_IN_FLIGHT_MAX)),
        }
    }
}

impl Notifier {
    /// Sends `info` to each address in the background.
    pub fn notify(&self, info: &ReplicaInfo, addresses: Vec<String>) {
        let body = match serde_json::to_vec(info) {
            Ok(body) => body,
            Err(error) => {
                tracing::warn!(%error, "role-change notice cannot be encoded");
                return;
            }
        };
        for address in addresses {
            let Ok(permit) = self.permits.clone().try_acquire_owned() else {
                tracing::debug!(%address, "too many role-change notices in flight; dropped");
                continue;
            };
            let mut command = RemotingCommand::new_request(
                request::NOTIFY_BROKER_ROLE_CHANGED,
                info.ext_fields(),
            )
            .with_body(body.clone());
            command.set_oneway(true);
            tokio::spawn(async move {
                let _permit = permit;
                if let Err(why) = send(&address, command).await {
                    tracing::debug!(%address, %why, "role-change notice not delivered");
                }
            });
        }
    }
}

/// Writes the one-way frame on a fresh connection and closes it once written (a one-way
/// request has no reply to wait for; the frame is flushed before the close).
async fn send(address: &str, command: RemotingCommand) -> Result<(), String> {
    let addr: SocketAddr = address.parse().map_err(|e| format!("address: {e}"))?;
    let frame = command.to_bytes().map_err(|e| format!("encode: {e}"))?;
    let written = tokio::time::timeout(NOTICE_TIMEOUT, async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(&frame).await?;
        stream.flush().await?;
        stream.shutdown().await
    })
    .await;
    match written {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("not written within {NOTICE_TIMEOUT:?}")),
    }
}
