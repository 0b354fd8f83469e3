//! Wake-ups of readers waiting for one queue (long-polled pulls), sent by the dispatcher to
//! the queues that got new entries, not to every waiter.
//!
//! A held pull used to wake on every move of the dispatched end and look at its queue under
//! the `derived` lock: with thousands of pulls held on quiet queues, every dispatch pass of a
//! busy topic woke all of them (4,000 held pulls cut another topic's sends from 158k to 59k
//! msgs/s on the 2-core VM, session 21). Now a waiter registers for its queue
//! ([`QueueWaiters::register`]) and the dispatcher, after each hold of the lock, wakes only the
//! queues it appended entries to.
//!
//! Invariants:
//! 1. A waiter enables its [`tokio::sync::Notified`] before it checks its queue, so an entry
//!    dispatched after the check wakes it (no lost wake-up).
//! 2. The dispatcher reads [`QueueWaiters::any`] under the `derived` lock at the start of a
//!    hold; a waiter registers before its check takes that lock, so a hold that does not track
//!    its queues started after that check, whose answer then already included the hold's
//!    entries, or before it.
//! 3. The map holds only queues with a registered waiter (an entry goes with its last waiter),
//!    so it is bounded by the broker's held pulls (`pullHoldMax`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::futures::Notified;
use tokio::sync::Notify;

/// Waiters by queue.
#[derive(Debug, Default)]
pub struct QueueWaiters {
    /// Registered waiters in all, read without the lock on the dispatcher's path.
    registered: AtomicUsize,
    /// By topic, then queue id (looked up by `&str`: no allocation on the dispatcher's path).
    queues: Mutex<HashMap<String, HashMap<u32, Waiting>>>,
}

#[derive(Debug)]
struct Waiting {
    notify: Arc<Notify>,
    waiters: usize,
}

impl QueueWaiters {
    /// Registers a waiter for `topic`/`queue_id` until the returned guard is dropped.
    pub fn register(&self, topic: &str, queue_id: u32) -> QueueWait<'_> {
        let mut queues = self.queues.lock().expect("queue waiters lock");
        let topic_queues = match queues.get_mut(topic) {
            Some(existing) => existing,
            None => queues.entry(topic.to_string()).or_default(),
        };
        let waiting = topic_queues.entry(queue_id).or_insert_with(|| Waiting {
            notify: Arc::new(Notify::new()),
            waiters: 0,
        });
        waiting.waiters += 1;
        let notify = Arc::clone(&waiting.notify);
        self.registered.fetch_add(1, Ordering::SeqCst);
        QueueWait {
            waiters: self,
            topic: topic.to_string(),
            queue_id,
            notify,
        }
    }

    /// Whether anyone waits at all (the dispatcher tracks the queues it touches only then).
    pub fn any(&self) -> bool {
        self.registered.load(Ordering::SeqCst) > 0
    }

    /// Wakes the waiters of each queue of `touched`.
    pub fn wake<'a>(&self, touched: impl IntoIterator<Item = (&'a str, u32)>) {
        let queues = self.queues.lock().expect("queue waiters lock");
        for (topic, queue_id) in touched {
            // Queues without waiters are simply absent.
            if let Some(waiting) = queues.get(topic).and_then(|q| q.get(&queue_id)) {
                waiting.notify.notify_waiters();
            }
        }
    }

    /// Wakes every waiter (the touched queues were too many to track, or the store closes).
    pub fn wake_all(&self) {
        let queues = self.queues.lock().expect("queue waiters lock");
        for waiting in queues.values().flat_map(HashMap::values) {
            waiting.notify.notify_waiters();
        }
    }

    /// Queues with at least one waiter.
    pub fn queues_waited_on(&self) -> usize {
        let queues = self.queues.lock().expect("queue waiters lock");
        queues.values().map(HashMap::len).sum()
    }

    fn unregister(&self, topic: &str, queue_id: u32) {
        let mut queues = self.queues.lock().expect("queue waiters lock");
        if let Some(topic_queues) = queues.get_mut(topic) {
            if let Some(waiting) = topic_queues.get_mut(&queue_id) {
                waiting.waiters -= 1;
                if waiting.waiters == 0 {
                    topic_queues.remove(&queue_id);
                }
            }
            if topic_queues.is_empty() {
                queues.remove(topic);
            }
        }
        self.registered.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One registered waiter; unregisters when dropped.
#[derive(Debug)]
pub struct QueueWait<'a> {
    waiters: &'a QueueWaiters,
    topic: String,
    queue_id: u32,
    notify: Arc<Notify>,
}

impl QueueWait<'_> {
    /// The next wake-up of this queue. Enable it (`Notified::enable`) before checking the
    /// queue, so a wake-up between the check and the wait is not lost (invariant 1).
    pub fn notified(&self) -> Notified<'_> {
        self.notify.notified()
    }
}

impl Drop for QueueWait<'_> {
    fn drop(&mut self) {
        self.waiters.unregister(&self.topic, self.queue_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_the_touched_queues_waiters_wake() {
        let waiters = QueueWaiters::default();
        assert!(!waiters.any());
        let a = waiters.register("A", 0);
        let b = waiters.register("B", 1);
        assert!(waiters.any());
        let mut woken_a = std::pin::pin!(a.notified());
        woken_a.as_mut().enable();
        let mut woken_b = std::pin::pin!(b.notified());
        woken_b.as_mut().enable();
        waiters.wake([("A", 0), ("B", 0), ("C", 7)]);
        assert!(futures_ready(woken_a.as_mut()), "queue A/0 was touched");
        assert!(!futures_ready(woken_b.as_mut()), "B/1 was not (B/0 was)");
        waiters.wake_all();
        assert!(futures_ready(woken_b.as_mut()));
    }

    #[test]
    fn the_map_keeps_a_queue_only_while_someone_waits_for_it() {
        let waiters = QueueWaiters::default();
        let first = waiters.register("T", 3);
        let second = waiters.register("T", 3);
        let other = waiters.register("T", 4);
        assert_eq!(waiters.queues_waited_on(), 2);
        drop(first);
        assert_eq!(waiters.queues_waited_on(), 2);
        drop(second);
        assert_eq!(waiters.queues_waited_on(), 1);
        drop(other);
        assert_eq!(waiters.queues_waited_on(), 0);
        assert!(
            waiters.queues.lock().unwrap().is_empty(),
            "no topic left behind"
        );
        assert!(!waiters.any());
    }

    /// Polls a future once with a no-op waker.
    fn futures_ready<F: std::future::Future>(future: std::pin::Pin<&mut F>) -> bool {
        let waker = std::task::Waker::noop();
        let mut context = std::task::Context::from_waker(waker);
        future.poll(&mut context).is_ready()
    }
}
