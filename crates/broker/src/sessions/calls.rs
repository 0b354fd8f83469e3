//! Requests the broker sends to a client on the client's own connection and waits for
//! (RocketMQ's `Broker2Client.callClient`): GET_CONSUMER_RUNNING_INFO is forwarded this way.
//!
//! Each call gets a fresh opaque; the connection's reader hands every response frame to
//! [`PendingCalls::complete`], which wakes the call waiting for that opaque. Bounds: at most
//! [`MAX_PENDING_CALLS_PER_CONNECTION`] calls wait on one connection (one more is refused at
//! once), and every wait ends after the caller's timeout; a reply that arrives after its
//! call gave up is dropped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use ferromq_protocol::remoting::RemotingCommand;
use thiserror::Error;
use tokio::sync::{mpsc, oneshot};

/// Calls waiting for their reply on one connection.
pub const MAX_PENDING_CALLS_PER_CONNECTION: usize = 16;

/// Why a call to a client got no reply.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CallError {
    /// [`MAX_PENDING_CALLS_PER_CONNECTION`] calls already wait on this connection.
    #[error("{0} calls to this client are already waiting for its reply")]
    TooMany(usize),
    /// The connection closed (or its writer queue is full) before the request left.
    #[error("the client's connection is closed or its write queue is full")]
    NotSent,
    /// No reply within the timeout.
    #[error("the client did not answer within {0:?}")]
    Timeout(Duration),
    /// The connection closed while the call waited.
    #[error("the client's connection closed before it answered")]
    Closed,
}

/// The calls waiting on one connection, by opaque.
#[derive(Debug)]
pub struct PendingCalls {
    next_opaque: AtomicI32,
    waiting: Mutex<HashMap<i32, oneshot::Sender<RemotingCommand>>>,
}

impl Default for PendingCalls {
    fn default() -> Self {
        PendingCalls {
            // Far from the small opaques a client uses for its own requests, for log reading.
            next_opaque: AtomicI32::new(1 << 30),
            waiting: Mutex::default(),
        }
    }
}

impl PendingCalls {
    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<i32, oneshot::Sender<RemotingCommand>>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends `request` through `tx` (the connection's writer queue) and waits at most
    /// `timeout` for the client's reply.
    ///
    /// # Errors
    /// [`CallError`]: too many calls waiting, the request could not be queued, no reply in
    /// time, or the connection closed.
    pub async fn call(
        &self,
        tx: &mpsc::Sender<crate::remoting::outbound::Outbound>,
        mut request: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, CallError> {
        let opaque = self.next_opaque.fetch_add(1, Ordering::Relaxed) & i32::MAX;
        request.opaque = opaque;
        request.set_oneway(false);
        let (reply_tx, reply_rx) = oneshot::channel();
        {
            let mut waiting = self.waiting();
            if waiting.len() >= MAX_PENDING_CALLS_PER_CONNECTION {
                return Err(CallError::TooMany(waiting.len()));
            }
            waiting.insert(opaque, reply_tx);
        }
        let _forget = Forget {
            calls: self,
            opaque,
        };
        if tx.try_send(request.into()).is_err() {
            return Err(CallError::NotSent);
        }
        match tokio::time::timeout(timeout, reply_rx).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(_)) => Err(CallError::Closed),
            Err(_) => Err(CallError::Timeout(timeout)),
        }
    }

    /// Hands a response frame to the call waiting for its opaque; false when none waits
    /// (a reply to a one-way push, or one that came after its call gave up).
    pub fn complete(&self, reply: RemotingCommand) -> bool {
        let Some(waiter) = self.waiting().remove(&reply.opaque) else {
            return false;
        };
        waiter.send(reply).is_ok()
    }

    /// Ends every waiting call with [`CallError::Closed`] (the connection closed).
    pub fn close(&self) {
        self.waiting().clear();
    }

    /// Calls waiting now.
    pub fn len(&self) -> usize {
        self.waiting().len()
    }

    /// True when no call waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Removes a call's entry however the call ends (reply, timeout, cancellation).
struct Forget<'a> {
    calls: &'a PendingCalls,
    opaque: i32,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.calls.waiting().remove(&self.opaque);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remoting::outbound::Outbound;
    use ferromq_protocol::remoting::codes::{request, response};
    use std::sync::Arc;

    fn probe() -> RemotingCommand {
        RemotingCommand::new_request(request::GET_CONSUMER_RUNNING_INFO, Default::default())
    }

    #[tokio::test]
    async fn the_reply_with_the_calls_opaque_ends_the_call() {
        let calls = Arc::new(PendingCalls::default());
        let (tx, mut rx) = mpsc::channel::<Outbound>(4);
        let answerer = {
            let calls = calls.clone();
            tokio::spawn(async move {
                let Some(Outbound::Frame(sent)) = rx.recv().await else {
                    panic!("the call's request is a frame");
                };
                assert!(!calls.complete(sent.reply(response::SUCCESS, None).with_opaque(1)));
                assert!(calls.complete(sent.reply(response::SUCCESS, Some("here".into()))));
            })
        };
        let reply = calls
            .call(&tx, probe(), Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(reply.remark.as_deref(), Some("here"));
        answerer.await.unwrap();
        assert!(calls.is_empty());
    }

    #[tokio::test]
    async fn no_reply_times_out_and_leaves_nothing_behind() {
        let calls = PendingCalls::default();
        let (tx, _rx) = mpsc::channel(4);
        let error = calls
            .call(&tx, probe(), Duration::from_millis(50))
            .await
            .unwrap_err();
        assert_eq!(error, CallError::Timeout(Duration::from_millis(50)));
        assert!(calls.is_empty());
    }

    #[tokio::test]
    async fn closed_connection_and_too_many_calls_are_errors() {
        let calls = Arc::new(PendingCalls::default());
        let (tx, rx) = mpsc::channel(64);
        drop(rx);
        let error = calls
            .call(&tx, probe(), Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(error, CallError::NotSent);

        let (tx, _rx) = mpsc::channel(64);
        let mut waiting = Vec::new();
        for _ in 0..MAX_PENDING_CALLS_PER_CONNECTION {
            let (calls, tx) = (calls.clone(), tx.clone());
            waiting.push(tokio::spawn(async move {
                calls.call(&tx, probe(), Duration::from_secs(30)).await
            }));
        }
        tokio::time::timeout(Duration::from_secs(5), async {
            while calls.len() < MAX_PENDING_CALLS_PER_CONNECTION {
                tokio::task::yield_now().await;
            }
        })
        .await
        .unwrap();
        let error = calls
            .call(&tx, probe(), Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(error, CallError::TooMany(MAX_PENDING_CALLS_PER_CONNECTION));
        calls.close();
        for call in waiting {
            assert_eq!(call.await.unwrap().unwrap_err(), CallError::Closed);
        }
    }
}
