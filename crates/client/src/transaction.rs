//! [`TransactionProducer`]: RocketMQ's transactional messages. A message is first stored as a
//! half message the broker keeps from consumers; the local transaction runs; the producer then
//! tells the broker to commit or roll back (END_TRANSACTION). When the producer could not say
//! (it crashed, or the local transaction's outcome is unknown) the broker asks later
//! (CHECK_TRANSACTION_STATE) and the check callback answers.
//!
//! Invariants:
//! 1. The local transaction runs only after the broker acknowledged the half message; a failed
//!    half send returns the error and runs nothing.
//! 2. END is a request, not one-way (Java and the C++ core send it one-way and never learn of
//!    a failure): [`TransactionSendResult::end`] holds the broker's answer or the transport
//!    error, and the local outcome is reported either way.
//! 3. A local callback that panics counts as [`TransactionState::Unknown`]: the broker checks
//!    back later; the panic never reaches the runtime.
//! 4. Check-backs arrive on the connections this producer heartbeats; a relay per connection
//!    (re-established each `heartbeat_interval` after a reconnect) runs the check callback on
//!    the blocking pool and answers with an END marked `fromTransactionCheck`. At most
//!    [`CHECKS_IN_FLIGHT_MAX`] check callbacks run at once; a check past it is left for the
//!    broker's next check.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};

use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::transaction::{
    CheckTransactionStateRequestHeader, EndTransactionRequestHeader, TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE, TRANSACTION_ROLLBACK_TYPE,
};
use ferromq_protocol::remoting::{RemotingClient, RemotingCommand};
use ferromq_protocol::MessageId;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::error::ClientError;
use crate::message::{decode_pull_body, Message, MessageExt};
use crate::producer::{Producer, ProducerConfig, SendResult};

/// Check callbacks running at once, per producer.
pub const CHECKS_IN_FLIGHT_MAX: usize = 64;

/// A local transaction's outcome, as the callbacks report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionState {
    /// Expose the message to consumers.
    Commit,
    /// Never expose it.
    Rollback,
    /// Not known yet: the broker checks back later.
    Unknown,
}

impl TransactionState {
    fn commit_or_rollback(self) -> i32 {
        match self {
            TransactionState::Commit => TRANSACTION_COMMIT_TYPE,
            TransactionState::Rollback => TRANSACTION_ROLLBACK_TYPE,
            TransactionState::Unknown => TRANSACTION_NOT_TYPE,
        }
    }
}

/// What [`TransactionProducer::send_in_transaction`] reports.
#[derive(Debug)]
pub struct TransactionSendResult {
    /// The half message's send.
    pub send: SendResult,
    /// What the local transaction returned.
    pub local_state: TransactionState,
    /// The broker's answer to END: `Ok` when it acknowledged the decision (recorded durably,
    /// or already recorded), else the error. A failed END leaves the half to the check-back.
    pub end: Result<(), ClientError>,
}

impl TransactionSendResult {
    /// Whether the broker acknowledged the END.
    pub fn end_acknowledged(&self) -> bool {
        self.end.is_ok()
    }
}

/// The check callback: the half message (real topic and queue) → the local outcome.
pub type CheckCallback = Arc<dyn Fn(&MessageExt) -> TransactionState + Send + Sync>;

/// A transactional producer. Cheap to clone; clones share the producer and its relays.
#[derive(Clone)]
pub struct TransactionProducer {
    producer: Producer,
    relays: Arc<Relays>,
}

impl std::fmt::Debug for TransactionProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransactionProducer")
            .field("producer", &self.producer)
            .finish_non_exhaustive()
    }
}

/// The check-back relays of a producer's broker connections.
struct Relays {
    check: CheckCallback,
    group: String,
    end_timeout: std::time::Duration,
    in_flight: Arc<Semaphore>,
    connections: Mutex<HashMap<SocketAddr, Weak<RemotingClient>>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for Relays {
    fn drop(&mut self) {
        for task in self
            .tasks
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            task.abort();
        }
    }
}

impl TransactionProducer {
    /// Starts a producer of `config.group` whose check-backs `check` answers.
    ///
    /// # Errors
    /// As [`Producer::start`].
    pub fn start(
        config: ProducerConfig,
        check: impl Fn(&MessageExt) -> TransactionState + Send + Sync + 'static,
    ) -> Result<TransactionProducer, ClientError> {
        let period = config.heartbeat_interval;
        let producer = Producer::start(config)?;
        let relays = Arc::new(Relays {
            check: Arc::new(check),
            group: producer.config().group.clone(),
            end_timeout: producer.config().send_timeout,
            in_flight: Arc::new(Semaphore::new(CHECKS_IN_FLIGHT_MAX)),
            connections: Mutex::new(HashMap::new()),
            tasks: Mutex::new(Vec::new()),
        });
        let keeper = spawn_relay_keeper(producer.clone(), Arc::downgrade(&relays), period);
        relays
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(keeper);
        Ok(TransactionProducer { producer, relays })
    }

    /// The underlying producer (plain sends, stats, close).
    pub fn producer(&self) -> &Producer {
        &self.producer
    }

    /// Sends `message` as a half message, runs `local` once the broker holds it, and ends the
    /// transaction with `local`'s outcome.
    ///
    /// # Durability
    /// `Ok` means the half message is durable on the broker. If [`TransactionSendResult::end`]
    /// is `Ok`, the decision is durable too (a committed message reaches consumers exactly
    /// once); otherwise the broker checks back and the check callback decides.
    ///
    /// # Cancel safety
    /// Dropping the future before the half is acknowledged abandons it (it may be stored, and
    /// is then checked back); dropping it later leaves the END unsent or unanswered, which
    /// the check-back covers.
    ///
    /// # Errors
    /// The half send's error ([`Producer::send`]'s errors; a message with a delay level is
    /// [`ClientError::InvalidMessage`]); the local transaction has not run then.
    ///
    /// # Example
    /// ```no_run
    /// use ferromq_client::producer::ProducerConfig;
    /// use ferromq_client::transaction::{TransactionProducer, TransactionState};
    /// use ferromq_client::Message;
    ///
    /// # async fn run() -> Result<(), ferromq_client::ClientError> {
    /// let config = ProducerConfig {
    ///     namesrv_addrs: vec!["127.0.0.1:9876".parse().unwrap()],
    ///     group: "orders".into(),
    ///     ..ProducerConfig::default()
    /// };
    /// // Asked when the broker did not hear an outcome: look the order up.
    /// let producer = TransactionProducer::start(config, |_half| TransactionState::Commit)?;
    /// let result = producer
    ///     .send_in_transaction(Message::new("Orders", "order 42"), |_message, _sent| {
    ///         // Write the order to the database here.
    ///         TransactionState::Commit
    ///     })
    ///     .await?;
    /// assert_eq!(result.local_state, TransactionState::Commit);
    /// result.end?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn send_in_transaction<F>(
        &self,
        message: Message,
        local: F,
    ) -> Result<TransactionSendResult, ClientError>
    where
        F: FnOnce(&Message, &SendResult) -> TransactionState,
    {
        let send = self.producer.send_half(&message).await?;
        let local_state =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| local(&message, &send)))
                .unwrap_or_else(|_| {
                    tracing::warn!(msg_id = %send.msg_id, "local transaction panicked; ending it as unknown");
                    TransactionState::Unknown
                });
        let end = self.end(&send, local_state).await;
        Ok(TransactionSendResult {
            send,
            local_state,
            end,
        })
    }

    /// Sends END_TRANSACTION for a half this producer sent, as a request (invariant 2).
    async fn end(&self, send: &SendResult, state: TransactionState) -> Result<(), ClientError> {
        let addr = self
            .producer
            .routes()
            .master_addr(&send.queue.topic, &send.queue.broker_name)
            .await?;
        self.relays.ensure(&self.producer, addr).await;
        let phys_offset = MessageId::decode(&send.offset_msg_id)
            .map_err(|e| ClientError::Decode {
                addr,
                reason: format!("the half's message id {}: {e}", send.offset_msg_id),
            })?
            .phys_offset;
        let header = EndTransactionRequestHeader {
            producer_group: self.relays.group.clone(),
            tran_state_table_offset: send.queue_offset as i64,
            commit_log_offset: phys_offset as i64,
            commit_or_rollback: state.commit_or_rollback(),
            from_transaction_check: Some(false),
            msg_id: Some(send.msg_id.clone()),
            transaction_id: Some(send.msg_id.clone()),
        };
        let command = RemotingCommand::request_with_header(request::END_TRANSACTION, &header);
        let reply = self
            .producer
            .pool()
            .invoke(addr, command, self.relays.end_timeout)
            .await?;
        expect_success(addr, &reply)
    }
}

/// `Ok` for SUCCESS, the broker's code and remark otherwise.
fn expect_success(addr: SocketAddr, reply: &RemotingCommand) -> Result<(), ClientError> {
    if reply.code == response::SUCCESS {
        return Ok(());
    }
    Err(ClientError::Broker {
        addr,
        code: reply.code,
        remark: reply.remark.clone().unwrap_or_default(),
    })
}

/// Re-establishes the relays of every known broker each `period` (invariant 4).
fn spawn_relay_keeper(
    producer: Producer,
    relays: Weak<Relays>,
    period: std::time::Duration,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let period = period.min(std::time::Duration::from_secs(1));
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(relays) = relays.upgrade() else {
                return;
            };
            for addr in producer.routes().known_masters() {
                relays.ensure(&producer, addr).await;
            }
        }
    })
}

impl Relays {
    /// Starts relaying `addr`'s connection's server requests unless it is relayed already.
    async fn ensure(self: &Arc<Self>, producer: &Producer, addr: SocketAddr) {
        let Ok(conn) = producer.pool().get(addr, self.end_timeout).await else {
            return;
        };
        {
            let mut connections = self.connections.lock().unwrap_or_else(|e| e.into_inner());
            if connections
                .get(&addr)
                .and_then(Weak::upgrade)
                .is_some_and(|c| Arc::ptr_eq(&c, &conn))
            {
                return;
            }
            connections.insert(addr, Arc::downgrade(&conn));
        }
        let Some(mut requests) = conn.take_server_requests() else {
            return;
        };
        let relays = Arc::downgrade(self);
        let task = tokio::spawn(async move {
            while let Some(command) = requests.recv().await {
                let Some(relays) = relays.upgrade() else {
                    return;
                };
                relays.serve(&conn, addr, command);
            }
        });
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
    }

    /// Handles one server request: a check-back runs on its own task; anything else two-way
    /// is answered REQUEST_CODE_NOT_SUPPORTED.
    fn serve(
        self: &Arc<Self>,
        conn: &Arc<RemotingClient>,
        addr: SocketAddr,
        command: RemotingCommand,
    ) {
        if command.code != request::CHECK_TRANSACTION_STATE {
            if !command.is_oneway() {
                let conn = conn.clone();
                tokio::spawn(async move {
                    let reply = command.reply(response::REQUEST_CODE_NOT_SUPPORTED, None);
                    let _ = conn.reply(reply).await;
                });
            }
            return;
        }
        let Ok(permit) = self.in_flight.clone().try_acquire_owned() else {
            tracing::warn!(broker = %addr, "transaction check-back dropped: {CHECKS_IN_FLIGHT_MAX} are running; the broker checks again");
            return;
        };
        let (relays, conn) = (self.clone(), conn.clone());
        tokio::spawn(async move {
            if let Err(error) = relays.answer_check(&conn, addr, &command).await {
                tracing::warn!(broker = %addr, %error, "transaction check-back not answered; the broker checks again");
            }
            drop(permit);
        });
    }

    /// Runs the check callback and answers with an END marked `fromTransactionCheck`.
    async fn answer_check(
        &self,
        conn: &RemotingClient,
        addr: SocketAddr,
        command: &RemotingCommand,
    ) -> Result<(), ClientError> {
        let header: CheckTransactionStateRequestHeader =
            command.decode_header().map_err(|e| ClientError::Decode {
                addr,
                reason: format!("check-back header: {e}"),
            })?;
        let body = command.body.clone().unwrap_or_default();
        let broker_name = header.broker_name.clone().unwrap_or_default();
        let message = decode_pull_body(&body, &broker_name)
            .map_err(|reason| ClientError::Decode {
                addr,
                reason: format!("check-back body: {reason}"),
            })?
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::Decode {
                addr,
                reason: "check-back without a message".into(),
            })?;
        let check = self.check.clone();
        let state = tokio::task::spawn_blocking(move || {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&message)))
                .unwrap_or(TransactionState::Unknown)
        })
        .await
        .unwrap_or(TransactionState::Unknown);
        let end = EndTransactionRequestHeader {
            producer_group: self.group.clone(),
            tran_state_table_offset: header.tran_state_table_offset,
            commit_log_offset: header.commit_log_offset,
            commit_or_rollback: state.commit_or_rollback(),
            from_transaction_check: Some(true),
            msg_id: header.msg_id.clone(),
            transaction_id: header.transaction_id.clone(),
        };
        let request = RemotingCommand::request_with_header(request::END_TRANSACTION, &end);
        let reply = conn
            .invoke(request, self.end_timeout)
            .await
            .map_err(|source| ClientError::Transport { addr, source })?;
        expect_success(addr, &reply)
    }
}
