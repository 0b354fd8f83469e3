//! The observer: every period, for every queue of the topic, reads the group's committed
//! offset (QUERY_CONSUMER_OFFSET) and then the queue's max offset (GET_MAX_OFFSET), and
//! records an `Observe` (properties K4, monotone commits, and K5, commit ≤ max).
//!
//! The committed offset is read first: in a correct broker the max offset read after it can
//! only be larger, so `committed > max` in one observation is a real K5 violation, not a race
//! of the observer. An observation whose reads fail (broker down, partitioned) is skipped.
//! The observer is not a member of the group (it never heartbeats), so it does not take part
//! in queue allocation.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferromq_client::{
    BrokerOffsetStore, ClientError, ConnectionPool, MessageQueue, OffsetStore, ReadMode, RouteCache,
};
use ferromq_protocol::remoting::codes::request;
use ferromq_protocol::remoting::headers::offset::{
    GetMaxOffsetRequestHeader, GetMaxOffsetResponseHeader,
};
use ferromq_protocol::remoting::{ClientOptions, RemotingCommand};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::history::{Op, Queue};
use crate::recorder::Recorder;
use crate::workload::{queue_of, stop_task, Target, REQUEST_TIMEOUT, ROUTE_MAX_AGE};

/// What the observer last saw of a queue: (committed offset, max offset).
pub type LastSeen = BTreeMap<Queue, (Option<u64>, u64)>;

/// The running observer.
pub struct Observer {
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    last: Arc<Mutex<LastSeen>>,
}

struct Reader {
    pool: Arc<ConnectionPool>,
    routes: Arc<RouteCache>,
    offsets: BrokerOffsetStore,
    topic: String,
}

impl Observer {
    /// Starts observing `target` every `period`.
    ///
    /// # Errors
    /// The route cache's configuration error.
    pub fn spawn(
        target: &Target,
        recorder: Arc<Recorder>,
        period: Duration,
    ) -> Result<Observer, ClientError> {
        let pool = Arc::new(ConnectionPool::new(ClientOptions {
            connect_timeout: REQUEST_TIMEOUT,
            ..ClientOptions::default()
        }));
        let routes = Arc::new(RouteCache::new(
            target.namesrvs.clone(),
            pool.clone(),
            REQUEST_TIMEOUT,
            ROUTE_MAX_AGE,
        )?);
        let reader = Reader {
            offsets: BrokerOffsetStore::new(
                target.group.clone(),
                routes.clone(),
                pool.clone(),
                REQUEST_TIMEOUT,
            ),
            pool,
            routes,
            topic: target.topic.clone(),
        };
        let (stop, stop_rx) = watch::channel(false);
        let last = Arc::new(Mutex::new(LastSeen::new()));
        let task = tokio::spawn(run(reader, recorder, period, stop_rx, last.clone()));
        Ok(Observer {
            stop,
            task: Some(task),
            last,
        })
    }

    /// What the observer saw last, per queue.
    pub fn last_seen(&self) -> LastSeen {
        self.last
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .clone()
    }

    /// True when at the last observation of every queue its committed offset equalled its
    /// max offset (the group has consumed everything the broker holds).
    pub fn caught_up(&self) -> bool {
        let last = self.last_seen();
        !last.is_empty()
            && last
                .values()
                .all(|(committed, max)| committed.unwrap_or(0) >= *max)
    }

    /// Stops after the observation in progress (bounded).
    pub async fn stop(&mut self) {
        stop_task(&self.stop, &mut self.task, REQUEST_TIMEOUT * 4).await;
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.pool.close_all();
    }
}

async fn run(
    reader: Reader,
    recorder: Arc<Recorder>,
    period: Duration,
    mut stop: watch::Receiver<bool>,
    last: Arc<Mutex<LastSeen>>,
) {
    loop {
        if let Ok(queues) = reader.routes.read_queues(&reader.topic).await {
            for queue in queues {
                if *stop.borrow() {
                    return;
                }
                if let Some((committed, max_offset)) = reader.observe(&queue).await {
                    let q = queue_of(&queue);
                    last.lock()
                        .unwrap_or_else(|poison| poison.into_inner())
                        .insert(q.clone(), (committed, max_offset));
                    recorder.record(Op::Observe {
                        queue: q,
                        committed,
                        max_offset,
                        generation: None,
                    });
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = stop.changed() => return,
        }
    }
}

impl Reader {
    /// (committed, max) of `queue`, committed read first; `None` when either read fails.
    async fn observe(&self, queue: &MessageQueue) -> Option<(Option<u64>, u64)> {
        let committed = self.offsets.read(queue, ReadMode::Store).await.ok()?;
        let max = self.max_offset(queue).await.ok()?;
        Some((committed, max))
    }

    async fn max_offset(&self, queue: &MessageQueue) -> Result<u64, ClientError> {
        let addr = self
            .routes
            .master_addr(&queue.topic, &queue.broker_name)
            .await?;
        let header = GetMaxOffsetRequestHeader {
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
            committed: Some(true),
        };
        let cmd = RemotingCommand::request_with_header(request::GET_MAX_OFFSET, &header);
        let reply = self.pool.invoke_success(addr, cmd, REQUEST_TIMEOUT).await?;
        let h: GetMaxOffsetResponseHeader = ClientError::decode_header(addr, &reply)?;
        u64::try_from(h.offset).map_err(|_| ClientError::Decode {
            addr,
            reason: format!("negative max offset {}", h.offset),
        })
    }
}
