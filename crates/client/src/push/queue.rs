//! One assigned queue: its in-flight set, its pull task and the dispatch to the listener.
//! After a failover (the route names a new master for the queue's broker group) the pull
//! task drops its cache and resumes from the offset committed on the new master (R1).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferromq_protocol::remoting::body::misc::MessageQueue;
use ferromq_protocol::remoting::body::running_info::ProcessQueueInfo;
use ferromq_protocol::remoting::codes::request;
use ferromq_protocol::remoting::headers::client::ConsumerSendMsgBackRequestHeader;
use ferromq_protocol::remoting::headers::offset::{
    SearchOffsetRequestHeader, SearchOffsetResponseHeader,
};
use ferromq_protocol::remoting::RemotingCommand;
use tokio::sync::{watch, OwnedSemaphorePermit};
use tokio::time::Instant;

use super::{ConsumeFromWhere, ConsumeStatus, Counters, Inner, RETRY_TOPIC_PREFIX};
use crate::error::{ClientError, OffsetError};
use crate::message::MessageExt;
use crate::offset_store::{OffsetStore, ReadMode};
use crate::pull_consumer::PullResult;

const RETRY_TOPIC_PROPERTY: &str = "RETRY_TOPIC";

#[derive(Debug, Default)]
struct State {
    /// Pulled, not yet acknowledged: queue offset → body bytes.
    in_flight: BTreeMap<u64, usize>,
    bytes: usize,
    /// Next offset to pull (`None` until the start offset is known).
    next: Option<u64>,
    /// The offset the queue (re)started from: a value the store holds, so the floor of the
    /// uncommitted window until the store acknowledges a commit of this queue.
    baseline: u64,
    /// Bumped by a correction; results of older generations are not committed (C8).
    generation: u64,
    /// Last pull answered (messages or none), ms since the epoch; 0 before the first.
    last_pull_ms: i64,
    /// Last batch acknowledged, ms since the epoch; 0 before the first.
    last_consume_ms: i64,
}

/// The client-side state of one assigned queue.
#[derive(Debug)]
pub(super) struct ProcessQueue {
    pub(super) queue: MessageQueue,
    expression: String,
    state: Mutex<State>,
    /// Set to stop pulling and consuming (removal or shutdown).
    stop: watch::Sender<bool>,
    /// Set when results must no longer be committed (removal, crash-like drop).
    dropped: AtomicBool,
    /// Orderly clustering: the broker lock is trusted until this instant.
    lock_until: Mutex<Option<Instant>>,
    /// Wakes the pull task out of a pull in flight (an offset reset moved the queue).
    interrupt: tokio::sync::Notify,
}

impl ProcessQueue {
    pub(super) fn new(queue: MessageQueue, expression: String) -> Self {
        ProcessQueue {
            queue,
            expression,
            state: Mutex::new(State::default()),
            stop: watch::channel(false).0,
            dropped: AtomicBool::new(false),
            lock_until: Mutex::new(None),
            interrupt: tokio::sync::Notify::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops pulling and delivering. `send_replace`, not `send`: the flag must stick even
    /// when no task is waiting on it at this moment (`send` drops the value when the channel
    /// has no receiver).
    pub(super) fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// Results completing after this are not committed. Taken under the state lock, so a
    /// completion racing with a removal either lands before the removal's persist or not
    /// at all (never re-adds the queue to the store afterwards).
    pub(super) fn drop_results(&self) {
        let _state = self.state();
        self.dropped.store(true, Ordering::SeqCst);
    }

    fn is_stopped(&self) -> bool {
        *self.stop.borrow()
    }

    /// Sleeps `d`; true when the queue was stopped meanwhile.
    async fn sleep(&self, d: Duration) -> bool {
        let mut stop = self.stop.subscribe();
        tokio::select! {
            _ = tokio::time::sleep(d) => self.is_stopped(),
            _ = stop.wait_for(|s| *s) => true,
        }
    }

    pub(super) fn set_locked_until(&self, until: Option<Instant>) {
        *self.lock_until.lock().unwrap_or_else(|e| e.into_inner()) = until;
    }

    fn lock_valid(&self) -> bool {
        self.lock_until
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|until| Instant::now() < until)
    }

    /// The queue's state for GET_CONSUMER_RUNNING_INFO: the offset it would commit now (-1
    /// before its start offset is known, as Java prints "no offset"), the cached (pulled,
    /// unacknowledged) messages, the orderly lock, and the last pull and consume times.
    pub(super) fn running_info(&self) -> ProcessQueueInfo {
        let s = self.state();
        let commit = s.in_flight.keys().next().copied().or(s.next);
        let offset = |o: Option<&u64>| o.map_or(0, |o| i64::try_from(*o).unwrap_or(i64::MAX));
        let lock_until = *self.lock_until.lock().unwrap_or_else(|e| e.into_inner());
        ProcessQueueInfo {
            commit_offset: commit.map_or(-1, |c| i64::try_from(c).unwrap_or(i64::MAX)),
            cached_msg_min_offset: offset(s.in_flight.keys().next()),
            cached_msg_max_offset: offset(s.in_flight.keys().next_back()),
            cached_msg_count: s.in_flight.len() as i64,
            cached_msg_size_in_mi_b: (s.bytes / (1024 * 1024)) as i64,
            locked: lock_until.is_some_and(|until| Instant::now() < until),
            droped: self.dropped.load(Ordering::SeqCst) || self.is_stopped(),
            last_pull_timestamp: s.last_pull_ms,
            last_consume_timestamp: s.last_consume_ms,
            ..ProcessQueueInfo::default()
        }
    }

    pub(super) fn cached(&self) -> (usize, usize) {
        let s = self.state();
        (s.in_flight.len(), s.bytes)
    }

    /// Records pulled messages as in flight and the next pull offset; false when the
    /// generation changed since the pull was sent (the result is stale).
    fn add(&self, generation: u64, messages: &[MessageExt], next: u64) -> bool {
        let mut s = self.state();
        if s.generation != generation || self.dropped.load(Ordering::SeqCst) {
            return false;
        }
        for m in messages {
            if s.in_flight.insert(m.queue_offset, m.body.len()).is_none() {
                s.bytes += m.body.len();
            }
        }
        s.next = Some(next);
        s.last_pull_ms = now_ms();
        true
    }

    /// Acknowledges `offsets`: removes them from the in-flight set and sets the store's
    /// in-memory offset to the smallest one still in flight (or the next pull offset).
    /// Returns false (the result is stale) when the generation changed or the queue was
    /// dropped. The store is updated under the queue's lock so commits never regress.
    fn complete(&self, generation: u64, offsets: &[u64], store: &dyn OffsetStore) -> bool {
        let mut s = self.state();
        if s.generation != generation || self.dropped.load(Ordering::SeqCst) {
            return false;
        }
        for offset in offsets {
            if let Some(bytes) = s.in_flight.remove(offset) {
                s.bytes -= bytes;
            }
        }
        s.last_consume_ms = now_ms();
        let commit = s.in_flight.keys().next().copied().or(s.next);
        if let Some(commit) = commit {
            store.update(&self.queue, commit);
        }
        true
    }

    /// NO_NEW_MSG / NO_MATCHED_MSG: move the next pull offset; with nothing in flight the
    /// committed offset follows it.
    fn advance(&self, generation: u64, next: u64, store: &dyn OffsetStore) {
        let mut s = self.state();
        if s.generation != generation || self.dropped.load(Ordering::SeqCst) {
            return;
        }
        s.next = Some(next);
        s.last_pull_ms = now_ms();
        if s.in_flight.is_empty() {
            store.update(&self.queue, next);
        }
    }

    /// OFFSET_ILLEGAL: new generation at `offset`, nothing in flight.
    fn begin_correction(&self, offset: u64) {
        let mut s = self.state();
        s.generation += 1;
        s.in_flight.clear();
        s.bytes = 0;
        s.next = Some(offset);
        s.baseline = offset;
    }

    /// An offset reset pushed by the broker: new generation at `offset`, cached messages
    /// dropped, the store's in-memory offset set to `offset` (under the queue's lock, so no
    /// result of the old generation lands after it), and the pull in flight interrupted.
    pub(super) fn reset_to(&self, offset: u64, store: &dyn OffsetStore) {
        {
            let mut s = self.state();
            s.generation += 1;
            s.in_flight.clear();
            s.bytes = 0;
            s.next = Some(offset);
            s.baseline = offset;
            if !self.dropped.load(Ordering::SeqCst) {
                // Forget what was persisted: the broker's offset moved, so the next persist
                // must be sent even if it repeats a value acknowledged before the reset.
                store.remove(&self.queue);
                store.update(&self.queue, offset);
            }
        }
        self.interrupt.notify_one();
    }

    /// True while a result of `generation` may still be committed: the queue was not
    /// dropped and neither reset nor corrected since (the same test [`ProcessQueue::complete`]
    /// makes under the lock).
    fn accepts_results(&self, generation: u64) -> bool {
        let s = self.state();
        s.generation == generation && !self.dropped.load(Ordering::SeqCst)
    }

    /// True while a batch pulled in `generation` may be handed to the listener: the queue is
    /// still owned (not stopped by a rebalance or shutdown, not dropped) and was neither reset
    /// nor corrected since. Checked right before every listener call.
    fn delivers(&self, generation: u64) -> bool {
        !self.is_stopped() && self.accepts_results(generation)
    }

    fn cursor(&self) -> (u64, Option<u64>) {
        let s = self.state();
        (s.generation, s.next)
    }

    fn set_start(&self, offset: u64) {
        let mut s = self.state();
        s.next = Some(offset);
        s.baseline = offset;
    }

    /// How far the queue has been pulled past the last commit `store` acknowledged (or past
    /// its start, before the first acknowledgement): what a restart from the store would
    /// deliver again. 0 when the store does not report acknowledgements (no window).
    fn uncommitted(&self, store: &dyn OffsetStore) -> u64 {
        if !store.reports_acknowledged() {
            return 0;
        }
        let s = self.state();
        let floor = store.acknowledged(&self.queue).unwrap_or(s.baseline);
        s.next.map_or(0, |next| next.saturating_sub(floor))
    }
}

/// The pull task of one queue; returns when the queue is stopped.
pub(super) async fn run(inner: Arc<Inner>, pq: Arc<ProcessQueue>) {
    let cfg = &inner.config;
    let orderly = inner.listener.is_orderly();
    // Orderly clustering: nothing (not even the offset read) before the lock is held, so the
    // previous owner's last commit is in place.
    while inner.orderly_locks() && !pq.lock_valid() {
        if pq.sleep(Duration::from_millis(50)).await {
            return;
        }
    }
    let broker = pq.queue.broker_name.clone();
    // The route's master generation the positions were read under (failover, R1).
    let mut master_generation = inner.routes.master_generation(&broker);
    let Some(start) = start_offset(&inner, &pq).await else {
        return;
    };
    pq.set_start(start);
    let mut paused = false;
    let mut window = CommitWindow::default();
    loop {
        if pq.is_stopped() {
            return;
        }
        let now = inner.routes.master_generation(&broker);
        if now != master_generation {
            // A failover gave the group a new master: continue from the offset it holds as
            // committed, never from the in-memory cursor (which it may not hold).
            master_generation = now;
            tracing::info!(queue = ?pq.queue, generation = now,
                "new master for the queue's broker group; resuming from its committed offset");
            inner.offsets.remove(&pq.queue);
            let Some(start) = start_offset(&inner, &pq).await else {
                return;
            };
            pq.reset_to(start, inner.offsets.as_ref());
            continue;
        }
        let (count, bytes) = pq.cached();
        if count >= cfg.max_cached_messages_per_queue.max(1)
            || bytes >= cfg.max_cached_bytes_per_queue.max(1)
        {
            if !paused {
                Counters::add(&inner.counters.flow_control_pauses, 1);
                paused = true;
            }
            if pq.sleep(Duration::from_millis(20)).await {
                return;
            }
            continue;
        }
        paused = false;
        if window.holds(&inner, &pq) {
            if pq.sleep(Duration::from_millis(20)).await {
                return;
            }
            continue;
        }
        if inner.orderly_locks() && !pq.lock_valid() {
            if pq.sleep(Duration::from_millis(50)).await {
                return;
            }
            continue;
        }
        let (generation, next) = pq.cursor();
        let Some(offset) = next else { return };
        let mut stop = pq.stop.subscribe();
        let result = tokio::select! {
            r = inner.pull.pull_blocking(&pq.queue, &pq.expression, offset, cfg.pull_batch_size, cfg.pull_hold) => r,
            _ = stop.wait_for(|s| *s) => return,
            // A reset moved the queue: this pull's answer is stale, pull again from the
            // new cursor.
            _ = pq.interrupt.notified() => continue,
        };
        if inner.routes.master_generation(&broker) != master_generation {
            // Answered after a failover (the pull itself may have found the new master):
            // dropped; the loop re-reads the position from the new master.
            continue;
        }
        match result {
            Ok(PullResult::Found {
                messages,
                next_offset,
            }) => {
                if !pq.add(generation, &messages, next_offset) {
                    Counters::add(&inner.counters.stale_results, messages.len());
                    continue;
                }
                if messages.is_empty() {
                    pq.advance(generation, next_offset, inner.offsets.as_ref());
                    continue;
                }
                let messages: Vec<MessageExt> =
                    messages.into_iter().map(restore_retry_topic).collect();
                if orderly {
                    if !consume_orderly(&inner, &pq, generation, messages).await {
                        return;
                    }
                } else if !dispatch_concurrently(&inner, &pq, generation, messages).await {
                    return;
                }
            }
            Ok(PullResult::NoNewMessage { next_offset })
            | Ok(PullResult::NoMatchedMessage { next_offset }) => {
                pq.advance(generation, next_offset, inner.offsets.as_ref());
            }
            Ok(PullResult::OffsetIllegal { suggested_offset }) => {
                tracing::warn!(queue = ?pq.queue, offset, suggested_offset, "OFFSET_ILLEGAL; correcting");
                Counters::add(&inner.counters.corrections, 1);
                pq.begin_correction(suggested_offset);
                // Persist the correction at once; in-flight results of the old generation
                // can no longer overwrite it.
                loop {
                    match inner.offsets.correct(&pq.queue, suggested_offset).await {
                        Ok(()) => break,
                        Err(error)
                            if error.is_stale()
                                || matches!(error, OffsetError::Rejected { .. }) =>
                        {
                            // The broker's offset is healthy (another member got there, or
                            // this pull was stale): follow the broker rather than our guess.
                            tracing::warn!(queue = ?pq.queue, %error, "the broker refused the correction; re-reading its offset");
                            match inner.offsets.read(&pq.queue, ReadMode::Store).await {
                                Ok(Some(stored)) => pq.begin_correction(stored),
                                Ok(None) => {}
                                Err(error) => {
                                    tracing::warn!(queue = ?pq.queue, %error, "re-reading the offset failed; keeping the suggestion")
                                }
                            }
                            break;
                        }
                        Err(error) if error.is_retriable() => {
                            tracing::warn!(queue = ?pq.queue, %error, "persisting the correction failed; retrying");
                            if pq.sleep(cfg.pull_error_backoff).await {
                                return;
                            }
                        }
                        Err(error) => {
                            tracing::warn!(queue = ?pq.queue, %error, "the store refused the correction");
                            break;
                        }
                    }
                }
            }
            Err(error) => {
                tracing::warn!(queue = ?pq.queue, %error, "pull failed; backing off");
                if error.signals_master_change() {
                    inner.routes.invalidate(&pq.queue.topic);
                }
                if pq.sleep(cfg.pull_error_backoff).await {
                    return;
                }
            }
        }
    }
}

/// The uncommitted-window gate of one queue's pull task
/// ([`PushConsumerConfig::max_uncommitted_per_queue`](super::PushConsumerConfig)).
#[derive(Debug, Default)]
struct CommitWindow {
    /// When the persister was last woken for this queue; `None` while the window is open.
    woke: Option<Instant>,
}

impl CommitWindow {
    /// True while `pq` is at its window: pulling waits. Wakes the persister when the queue
    /// first reaches it and again every persist interval (at least 100 ms apart) while it
    /// stays there, so the wait is one commit round trip, not the rest of the interval.
    fn holds(&mut self, inner: &Inner, pq: &ProcessQueue) -> bool {
        let cfg = &inner.config;
        if pq.uncommitted(inner.offsets.as_ref()) < cfg.max_uncommitted_per_queue.max(1) {
            self.woke = None;
            return false;
        }
        let rewake = cfg.persist_interval.max(Duration::from_millis(100));
        match self.woke {
            None => {
                Counters::add(&inner.counters.commit_window_pauses, 1);
                tracing::debug!(queue = ?pq.queue, "uncommitted window full; pulling waits for a commit");
            }
            Some(at) if at.elapsed() < rewake => return true,
            Some(_) => {}
        }
        self.woke = Some(Instant::now());
        inner.persist_now.notify_one();
        true
    }
}

/// The queue's start offset: the store's, else `ConsumeFromWhere`; waits while the store
/// cannot be asked (C6). `None` when stopped first.
async fn start_offset(inner: &Inner, pq: &ProcessQueue) -> Option<u64> {
    loop {
        match inner.offsets.read(&pq.queue, ReadMode::Store).await {
            Ok(Some(offset)) => return Some(offset),
            Ok(None) => match initial_offset(inner, &pq.queue).await {
                Ok(offset) => {
                    inner.offsets.update(&pq.queue, offset);
                    return Some(offset);
                }
                Err(error) => {
                    tracing::warn!(queue = ?pq.queue, %error, "cannot compute the start offset; retrying")
                }
            },
            Err(error) => {
                tracing::warn!(queue = ?pq.queue, %error, "offset store unreachable; waiting instead of guessing")
            }
        }
        if pq.sleep(inner.config.pull_error_backoff).await {
            return None;
        }
    }
}

async fn initial_offset(inner: &Inner, queue: &MessageQueue) -> Result<u64, ClientError> {
    if queue.topic.starts_with(RETRY_TOPIC_PREFIX) {
        return inner.pull.min_offset(queue).await;
    }
    match inner.config.consume_from_where {
        ConsumeFromWhere::LastOffset => inner.pull.max_offset(queue).await,
        ConsumeFromWhere::FirstOffset => inner.pull.min_offset(queue).await,
        ConsumeFromWhere::Timestamp(ms) => {
            let addr = inner
                .routes
                .master_addr(&queue.topic, &queue.broker_name)
                .await?;
            let header = SearchOffsetRequestHeader {
                topic: queue.topic.clone(),
                queue_id: queue.queue_id,
                timestamp: ms,
                boundary_type: None,
            };
            let cmd =
                RemotingCommand::request_with_header(request::SEARCH_OFFSET_BY_TIMESTAMP, &header);
            let reply = inner
                .pool
                .invoke_success(addr, cmd, inner.config.request_timeout)
                .await?;
            let h: SearchOffsetResponseHeader = ClientError::decode_header(addr, &reply)?;
            ClientError::non_negative_offset(addr, h.offset)
        }
    }
}

/// A message from the retry topic is shown with its original topic (as Java does).
fn restore_retry_topic(mut m: MessageExt) -> MessageExt {
    if m.topic.starts_with(RETRY_TOPIC_PREFIX) {
        if let Some(topic) = m.properties.get(RETRY_TOPIC_PROPERTY) {
            m.topic = Arc::from(topic.as_str());
        }
    }
    m
}

/// Calls the listener with `messages` (pulled from `pq` in `generation`) on the blocking
/// pool. `None` when the batch went stale before the call ([`ProcessQueue::delivers`],
/// checked on the blocking thread right before the listener runs, so a reset that lands
/// while the call waits for a thread is still honoured): the listener was not called.
async fn call_listener(
    inner: &Inner,
    pq: &Arc<ProcessQueue>,
    generation: u64,
    messages: Vec<MessageExt>,
) -> Option<ConsumeStatus> {
    let f = inner.listener.function().clone();
    let pq = pq.clone();
    let call = move || pq.delivers(generation).then(|| f(&messages));
    match tokio::task::spawn_blocking(call).await {
        Ok(status) => status,
        Err(error) => {
            tracing::warn!(%error, "listener panicked; reconsuming later");
            Some(ConsumeStatus::ReconsumeLater)
        }
    }
}

/// Hands `messages` to concurrent consume tasks in batches; false when stopped.
async fn dispatch_concurrently(
    inner: &Arc<Inner>,
    pq: &Arc<ProcessQueue>,
    generation: u64,
    messages: Vec<MessageExt>,
) -> bool {
    let chunks: Vec<&[MessageExt]> = messages
        .chunks(inner.config.consume_batch_max.max(1))
        .collect();
    for (index, chunk) in chunks.iter().enumerate() {
        if !pq.delivers(generation) {
            // Reset, corrected or removed while earlier chunks ran: the rest is stale.
            Counters::add(&inner.counters.batches_discarded, chunks.len() - index);
            return !pq.is_stopped();
        }
        let mut stop = pq.stop.subscribe();
        let permit = tokio::select! {
            // A stopped queue hands out nothing more, even when a permit is free too.
            biased;
            _ = stop.wait_for(|s| *s) => {
                Counters::add(&inner.counters.batches_discarded, chunks.len() - index);
                return false;
            }
            p = inner.permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return false,
            },
        };
        tokio::spawn(consume_concurrently(
            inner.clone(),
            pq.clone(),
            generation,
            chunk.to_vec(),
            permit,
        ));
    }
    true
}

async fn consume_concurrently(
    inner: Arc<Inner>,
    pq: Arc<ProcessQueue>,
    generation: u64,
    mut messages: Vec<MessageExt>,
    _permit: OwnedSemaphorePermit,
) {
    let store = inner.offsets.as_ref();
    let mut attempts = 0;
    loop {
        let offsets: Vec<u64> = messages.iter().map(|m| m.queue_offset).collect();
        let Some(status) = call_listener(&inner, &pq, generation, messages.clone()).await else {
            Counters::add(&inner.counters.batches_discarded, 1);
            return;
        };
        match status {
            ConsumeStatus::ConsumeSuccess => {
                Counters::add(&inner.counters.consumed_ok, messages.len());
                if !pq.complete(generation, &offsets, store) {
                    Counters::add(&inner.counters.stale_results, offsets.len());
                }
                return;
            }
            ConsumeStatus::ReconsumeLater => {
                Counters::add(&inner.counters.reconsume_later, messages.len());
                if !pq.accepts_results(generation) {
                    // The queue moved on: sending these back would deliver them once more
                    // through the retry topic on top of the re-read from the new position.
                    Counters::add(&inner.counters.stale_results, messages.len());
                    return;
                }
                attempts += 1;
                let mut failed = Vec::new();
                if inner.clustering() {
                    let mut done = Vec::new();
                    for m in messages {
                        match send_back(&inner, &pq.queue, &m, inner.config.send_back_delay_level)
                            .await
                        {
                            Ok(()) => {
                                Counters::add(&inner.counters.sent_back, 1);
                                done.push(m.queue_offset);
                            }
                            Err(error) => {
                                tracing::warn!(%error, msg_id = %m.msg_id, "send-back failed; retrying locally");
                                Counters::add(&inner.counters.send_back_failed, 1);
                                failed.push(m);
                            }
                        }
                    }
                    if !done.is_empty() && !pq.complete(generation, &done, store) {
                        Counters::add(&inner.counters.stale_results, done.len());
                    }
                } else if attempts > inner.config.max_reconsume_times.max(0) as usize {
                    tracing::warn!(
                        count = messages.len(),
                        "broadcast messages dropped after the local retries"
                    );
                    Counters::add(&inner.counters.dropped_after_retries, messages.len());
                    let all: Vec<u64> = messages.iter().map(|m| m.queue_offset).collect();
                    if !pq.complete(generation, &all, store) {
                        Counters::add(&inner.counters.stale_results, all.len());
                    }
                } else {
                    failed = messages;
                }
                if failed.is_empty() {
                    return;
                }
                for m in &mut failed {
                    m.reconsume_times += 1;
                }
                messages = failed;
                // Stopped: the messages stay unacknowledged and are delivered again later.
                if pq.sleep(inner.config.local_retry_delay).await {
                    return;
                }
            }
        }
    }
}

/// Consumes `messages` one at a time in order; false when stopped.
async fn consume_orderly(
    inner: &Arc<Inner>,
    pq: &Arc<ProcessQueue>,
    generation: u64,
    messages: Vec<MessageExt>,
) -> bool {
    let store = inner.offsets.as_ref();
    let total = messages.len();
    for (index, mut m) in messages.into_iter().enumerate() {
        let mut attempts = 0;
        loop {
            if pq.is_stopped() {
                return false;
            }
            if !pq.delivers(generation) {
                // Reset or corrected: the rest of this batch is stale; the pull task goes on
                // from the queue's new position.
                Counters::add(&inner.counters.batches_discarded, total - index);
                return true;
            }
            if inner.orderly_locks() && !pq.lock_valid() {
                if pq.sleep(Duration::from_millis(50)).await {
                    return false;
                }
                continue;
            }
            let permit = match inner.permits.clone().acquire_owned().await {
                Ok(p) => p,
                Err(_) => return false,
            };
            let status = call_listener(inner, pq, generation, vec![m.clone()]).await;
            drop(permit);
            let Some(status) = status else {
                Counters::add(&inner.counters.batches_discarded, total - index);
                return !pq.is_stopped();
            };
            match status {
                ConsumeStatus::ConsumeSuccess => {
                    Counters::add(&inner.counters.consumed_ok, 1);
                    if !pq.complete(generation, &[m.queue_offset], store) {
                        Counters::add(&inner.counters.stale_results, 1);
                    }
                    break;
                }
                ConsumeStatus::ReconsumeLater => {
                    Counters::add(&inner.counters.reconsume_later, 1);
                    attempts += 1;
                    if !pq.accepts_results(generation) {
                        // The queue moved on: no send-back, and the rest of the batch is
                        // stale.
                        Counters::add(&inner.counters.stale_results, 1);
                        Counters::add(&inner.counters.batches_discarded, total - index - 1);
                        return !pq.is_stopped();
                    }
                    if attempts > inner.config.max_reconsume_times.max(0) {
                        let gone = if inner.clustering() {
                            // Straight to the DLQ (negative delay level).
                            match send_back(inner, &pq.queue, &m, -1).await {
                                Ok(()) => {
                                    Counters::add(&inner.counters.sent_back, 1);
                                    true
                                }
                                Err(error) => {
                                    tracing::warn!(%error, "orderly send-back to the DLQ failed; retrying locally");
                                    Counters::add(&inner.counters.send_back_failed, 1);
                                    false
                                }
                            }
                        } else {
                            Counters::add(&inner.counters.dropped_after_retries, 1);
                            true
                        };
                        if gone {
                            if !pq.complete(generation, &[m.queue_offset], store) {
                                Counters::add(&inner.counters.stale_results, 1);
                            }
                            break;
                        }
                    }
                    m.reconsume_times += 1;
                    if pq.sleep(inner.config.orderly_suspend).await {
                        return false;
                    }
                }
            }
        }
    }
    true
}

/// CONSUMER_SEND_MSG_BACK of `m` (pulled from `queue`) to the broker that stores it.
async fn send_back(
    inner: &Inner,
    queue: &MessageQueue,
    m: &MessageExt,
    delay_level: i32,
) -> Result<(), ClientError> {
    let addr = inner
        .routes
        .master_addr(&queue.topic, &queue.broker_name)
        .await?;
    let offset = i64::try_from(m.commit_log_offset)
        .map_err(|_| ClientError::InvalidMessage("commit log offset exceeds i64".into()))?;
    let header = ConsumerSendMsgBackRequestHeader {
        offset,
        group: inner.config.group.clone(),
        delay_level,
        origin_msg_id: Some(m.msg_id.clone()),
        origin_topic: Some(m.topic.to_string()),
        unit_mode: Some(false),
        max_reconsume_times: Some(inner.config.max_reconsume_times),
    };
    let cmd = RemotingCommand::request_with_header(request::CONSUMER_SEND_MSG_BACK, &header);
    inner
        .pool
        .invoke_success(addr, cmd, inner.config.request_timeout)
        .await?;
    Ok(())
}

/// Milliseconds since the epoch.
pub(super) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::OffsetError;
    use crate::offset_store::{BoxFuture, OffsetStoreStats, PersistReport};

    #[derive(Debug, Default)]
    struct MemoryStore(Mutex<BTreeMap<MessageQueue, u64>>);

    impl MemoryStore {
        fn get(&self, q: &MessageQueue) -> Option<u64> {
            self.0.lock().unwrap().get(q).copied()
        }
    }

    impl OffsetStore for MemoryStore {
        fn update(&self, queue: &MessageQueue, offset: u64) {
            self.0.lock().unwrap().insert(queue.clone(), offset);
        }
        fn correct<'a>(
            &'a self,
            queue: &'a MessageQueue,
            offset: u64,
        ) -> BoxFuture<'a, Result<(), OffsetError>> {
            self.update(queue, offset);
            Box::pin(async { Ok(()) })
        }
        fn persist<'a>(&'a self, _: &'a MessageQueue) -> BoxFuture<'a, Result<(), OffsetError>> {
            Box::pin(async { Ok(()) })
        }
        fn persist_all(&self) -> BoxFuture<'_, Result<PersistReport, OffsetError>> {
            Box::pin(async { Ok(PersistReport::default()) })
        }
        fn read<'a>(
            &'a self,
            queue: &'a MessageQueue,
            _: ReadMode,
        ) -> BoxFuture<'a, Result<Option<u64>, OffsetError>> {
            let v = self.get(queue);
            Box::pin(async move { Ok(v) })
        }
        fn remove(&self, queue: &MessageQueue) {
            self.0.lock().unwrap().remove(queue);
        }
        fn stats(&self) -> OffsetStoreStats {
            OffsetStoreStats::default()
        }
    }

    fn msg(offset: u64) -> MessageExt {
        let addr: std::net::SocketAddr = "127.0.0.1:1".parse().unwrap();
        MessageExt {
            topic: "T".into(),
            queue_id: 0,
            broker_name: "b".into(),
            queue_offset: offset,
            commit_log_offset: 0,
            body: bytes::Bytes::from_static(b"0123456789"),
            tags: None,
            keys: Vec::new(),
            properties: BTreeMap::new(),
            msg_id: String::new(),
            born_timestamp_ms: 0,
            store_timestamp_ms: 0,
            born_host: addr,
            store_host: addr,
            reconsume_times: 0,
            sys_flag: 0,
            flag: 0,
            delay_level: None,
        }
    }

    fn pq() -> ProcessQueue {
        ProcessQueue::new(
            MessageQueue {
                topic: "T".into(),
                broker_name: "b".into(),
                queue_id: 0,
            },
            "*".into(),
        )
    }

    #[test]
    fn commits_the_smallest_in_flight_offset() {
        let store = MemoryStore::default();
        let pq = pq();
        pq.set_start(10);
        let (generation, _) = pq.cursor();
        assert!(pq.add(generation, &[msg(10), msg(11), msg(12)], 13));
        assert_eq!(pq.cached(), (3, 30));
        assert!(pq.complete(generation, &[11], &store));
        assert_eq!(store.get(&pq.queue), Some(10), "10 is still in flight");
        assert!(pq.complete(generation, &[10], &store));
        assert_eq!(store.get(&pq.queue), Some(12));
        assert!(pq.complete(generation, &[12], &store));
        assert_eq!(
            store.get(&pq.queue),
            Some(13),
            "nothing in flight: next pull offset"
        );
        pq.advance(generation, 20, &store);
        assert_eq!(store.get(&pq.queue), Some(20));
    }

    #[test]
    fn results_from_before_a_correction_cannot_overwrite_it() {
        let store = MemoryStore::default();
        let pq = pq();
        pq.set_start(100);
        let (old, _) = pq.cursor();
        assert!(pq.add(old, &[msg(100), msg(101)], 102));
        pq.begin_correction(40);
        store.update(&pq.queue, 40);
        assert!(
            !pq.complete(old, &[100, 101], &store),
            "stale result refused"
        );
        assert!(!pq.add(old, &[msg(102)], 103), "stale pull refused");
        pq.advance(old, 103, &store);
        assert_eq!(store.get(&pq.queue), Some(40));
        let (new, next) = pq.cursor();
        assert_eq!(next, Some(40));
        assert!(pq.add(new, &[msg(40)], 41));
        assert!(pq.complete(new, &[40], &store));
        assert_eq!(store.get(&pq.queue), Some(41));
    }

    #[test]
    fn a_reset_drops_the_cache_and_freezes_results_of_the_old_generation() {
        let store = MemoryStore::default();
        let pq = pq();
        pq.set_start(10);
        let (old, _) = pq.cursor();
        assert!(pq.add(old, &[msg(10), msg(11)], 12));
        assert!(pq.complete(old, &[10], &store));
        assert_eq!(store.get(&pq.queue), Some(11));
        pq.reset_to(3, &store);
        assert_eq!(pq.cached(), (0, 0), "cached messages dropped");
        assert_eq!(store.get(&pq.queue), Some(3), "memory follows the reset");
        assert!(!pq.complete(old, &[11], &store), "old result frozen");
        assert_eq!(store.get(&pq.queue), Some(3));
        let (new, next) = pq.cursor();
        assert_eq!(next, Some(3));
        assert!(pq.add(new, &[msg(3)], 4));
        assert!(pq.complete(new, &[3], &store));
        assert_eq!(store.get(&pq.queue), Some(4));
    }

    #[test]
    fn a_batch_is_delivered_only_while_its_queue_is_owned_and_unmoved() {
        let store = MemoryStore::default();
        let pq = pq();
        pq.set_start(10);
        let (old, _) = pq.cursor();
        assert!(pq.delivers(old));
        pq.reset_to(3, &store);
        assert!(!pq.delivers(old), "reset since the pull");
        assert!(!pq.accepts_results(old));
        let (current, _) = pq.cursor();
        assert!(pq.delivers(current));
        pq.begin_correction(7);
        assert!(!pq.delivers(current), "corrected since the pull");
        let (current, _) = pq.cursor();
        pq.stop();
        assert!(
            !pq.delivers(current),
            "stopped: rebalanced away or shut down"
        );
        assert!(
            pq.accepts_results(current),
            "a running call may still commit"
        );
        pq.drop_results();
        assert!(!pq.accepts_results(current), "dropped");
    }

    #[test]
    fn dropped_queue_commits_nothing() {
        let store = MemoryStore::default();
        let pq = pq();
        pq.set_start(0);
        let (generation, _) = pq.cursor();
        assert!(pq.add(generation, &[msg(0)], 1));
        pq.drop_results();
        assert!(!pq.complete(generation, &[0], &store));
        assert_eq!(store.get(&pq.queue), None);
    }

    #[test]
    fn retry_messages_show_their_original_topic() {
        let mut m = msg(0);
        m.topic = "%RETRY%g".into();
        m.properties.insert("RETRY_TOPIC".into(), "T".into());
        assert_eq!(&*restore_retry_topic(m).topic, "T");
    }
}
