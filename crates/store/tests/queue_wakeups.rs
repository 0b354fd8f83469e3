//! Long-poll wake-ups go to the queue that got new entries only: a reader registered for one
//! queue sleeps through other queues' records and wakes for its own, and a close wakes it.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use ferromq_store::MessageStore;

use common::{draft, test_config};

/// Bound of every wait in this test.
const BOUND: Duration = Duration::from_secs(10);

fn ready<F: Future>(future: Pin<&mut F>) -> bool {
    let mut context = Context::from_waker(Waker::noop());
    matches!(future.poll(&mut context), Poll::Ready(_))
}

fn put_dispatched(store: &MessageStore, topic: &str, queue_id: u32, count: usize) {
    for i in 0..count {
        let body = format!("{topic}-{queue_id}-{i}");
        store
            .put(&[draft(topic, queue_id, body.as_bytes(), b"")])
            .expect("put");
    }
    let end = store.stats().written_end;
    assert_eq!(store.wait_dispatched(end, BOUND), end, "dispatched");
}

#[test]
fn a_waiter_wakes_for_its_own_queue_only() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(test_config(dir.path())).unwrap();
    let wait = store.wait_for_queue("Q", 0);
    let mut woken = Box::pin(wait.notified());
    woken.as_mut().enable();
    // Other queues of the topic, another topic: many dispatch passes, no wake-up.
    put_dispatched(&store, "Q", 1, 20);
    put_dispatched(&store, "OTHER", 0, 20);
    assert!(!ready(woken.as_mut()), "woken by another queue's records");
    put_dispatched(&store, "Q", 0, 1);
    assert!(ready(woken.as_mut()), "not woken by its own queue's record");
    assert_eq!(store.queue_bounds("Q", 0), Some((0, 1)));
    drop(woken);
    drop(wait);
    store.close().unwrap();
}

#[test]
fn closing_the_store_wakes_its_waiters() {
    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(MessageStore::open(test_config(dir.path())).unwrap());
    let wait = store.wait_for_queue("Q", 0);
    let mut woken = std::pin::pin!(wait.notified());
    woken.as_mut().enable();
    assert!(!ready(woken.as_mut()));
    store.close_shared().unwrap();
    assert!(
        ready(woken.as_mut()),
        "a close leaves no waiter asleep until its timeout"
    );
    assert!(store.is_closed());
}
