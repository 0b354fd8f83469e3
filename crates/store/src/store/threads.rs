//! The store's background threads: flusher, dispatcher, checkpointer, and those working
//! ahead of the commits (next segment, map population, zeros).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::checkpoint_health::RetryPace;
use super::zero_ahead::{ZERO_TICK_BUSY, ZERO_TICK_IDLE};
use super::Inner;
use crate::config::FlushDiskType;

/// The dispatcher's tick when idle: under `AsyncFlush` it also commits the appender's tail, so
/// this bounds how long an unacknowledged record waits before consumers can see it. While a
/// reader waits for dispatch, records whose acknowledgement committed them (`AsyncFlush`) or
/// flushed them (`SyncFlush`) wake the dispatcher at once instead.
const DISPATCH_TICK: Duration = Duration::from_millis(1);
const RETENTION_EVERY: Duration = Duration::from_secs(10);
/// Least time between the starts of two dispatch passes. A waiting reader wakes the
/// dispatcher per acknowledged commit; under load the passes would then each carry a record
/// or two, and every held pull would be answered with one message and come back (e2e
/// throughput fell by a fifth with 200 µs). Spacing the passes batches them (at most one per
/// spacing) while a lone record still goes at once.
const DISPATCH_SPACING_MIN: Duration = Duration::from_micros(500);
/// The same under `SyncFlush`, where the wake-ups are already batched: readers see what is
/// flushed, and the flusher wakes the dispatcher once per fsync, which covers every record
/// that arrived while the previous one ran; 500 µs there delayed each group by up to that
/// (delivery p50 380-480 µs at 10k msgs/s). Without any spacing the passes took CPU the
/// sends on a 2-core machine then lacked (send p50 +15%); 200 µs kept the sends and halved
/// the delivery (docs/performance.md, session 23: "Dispatch passes 200 µs apart under SYNC_FLUSH").
const DISPATCH_SPACING_MIN_SYNC: Duration = Duration::from_micros(200);
/// Passes in a row that found no new record before the dispatcher naps.
const EMPTY_PASSES_BEFORE_NAP: u32 = 200;
/// The dispatcher's tick while it naps: an idle store wakes 10 times a second instead of a
/// thousand (its ticks were the idle broker's CPU). An append, a commit or a flush wakes a
/// napping dispatcher at once (`Inner::wake_napping_dispatcher`), so a nap delays nothing.
const DISPATCH_NAP_TICK: Duration = Duration::from_millis(100);

pub(super) fn start(inner: &Arc<Inner>) -> Vec<JoinHandle<()>> {
    let flusher = {
        let inner = inner.clone();
        let interval = match inner.config.flush_disk_type {
            FlushDiskType::SyncFlush => None,
            FlushDiskType::AsyncFlush => {
                Some(Duration::from_millis(inner.config.flush_interval_ms))
            }
        };
        let sync = interval.is_none();
        spawn("ferromq-flush", move || {
            inner.flush.run(
                &inner.log,
                interval,
                &|| inner.commit_tail_in_background(),
                // Under SyncFlush readers see what is flushed: a waiting reader wakes the
                // dispatcher per fsync (one wake-up per group commit), not at its tick.
                &|| {
                    if sync {
                        inner.wake_dispatcher_for_readers();
                    }
                },
            )
        })
    };
    let dispatcher = {
        let inner = inner.clone();
        spawn("ferromq-dispatch", move || dispatch_loop(&inner))
    };
    let checkpointer = {
        let inner = inner.clone();
        spawn("ferromq-checkpoint", move || checkpoint_loop(&inner))
    };
    let mut threads = vec![flusher, dispatcher, checkpointer];
    if inner
        .log
        .preallocator()
        .is_some_and(|p| p.next_segment().is_some())
    {
        let inner = inner.clone();
        threads.push(spawn("ferromq-next-seg", move || prepare_loop(&inner)));
    }
    if inner
        .log
        .preallocator()
        .is_some_and(|p| p.populate_ahead().is_some())
    {
        let inner = inner.clone();
        threads.push(spawn("ferromq-populate", move || {
            if let Some(populate) = inner.log.preallocator().and_then(|p| p.populate_ahead()) {
                populate.run();
            }
        }));
    }
    if inner.log.preallocator().is_some_and(|p| p.zeroes()) {
        let inner = inner.clone();
        threads.push(spawn("ferromq-zeroes", move || zero_loop(&inner)));
    }
    threads
}

/// Keeps zeroed space ahead of the commits (`zero_ahead`) until the store closes: a round
/// every [`ZERO_TICK_BUSY`] while the log grows, every [`ZERO_TICK_IDLE`] while it stands
/// still (the close is seen within one tick).
fn zero_loop(inner: &Inner) {
    let mut last_end = inner.log.committed_end();
    while !inner.closed.load(Ordering::Acquire) {
        let written = inner.zero_ahead();
        let end = inner.log.committed_end();
        let tick = if written > 0 || end != last_end {
            ZERO_TICK_BUSY
        } else {
            ZERO_TICK_IDLE
        };
        last_end = end;
        std::thread::sleep(tick);
    }
}

/// Mapped writes, half way through each segment until the store closes: moves the
/// preallocation record to the active segment (`Preallocator::advance_cover`), then
/// prepares the next segment's file (`commitlog::next_segment`), both ahead of the roll.
/// Not once the store is poisoned: it writes nothing more.
fn prepare_loop(inner: &Inner) {
    let Some(space) = inner.log.preallocator() else {
        return;
    };
    if let Some(next) = space.next_segment() {
        next.run(
            inner.log.segment_size(),
            &|| {
                if !inner.flush.is_poisoned() {
                    space.advance_cover(&inner.log);
                }
                !inner.flush.is_poisoned()
            },
            &|error| space.note_next_segment_failure(error),
        );
    }
}

fn spawn(name: &str, body: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(body)
        .expect("spawning a store thread")
}

fn dispatch_loop(inner: &Inner) {
    let spacing = match inner.config.flush_disk_type {
        FlushDiskType::AsyncFlush => DISPATCH_SPACING_MIN,
        FlushDiskType::SyncFlush => DISPATCH_SPACING_MIN_SYNC,
    };
    let mut seen = 0;
    let mut empty_passes = 0u32;
    loop {
        let pass_started = Instant::now();
        let dispatched_before = *inner.dispatched.borrow();
        let closed = inner.closed.load(Ordering::Acquire);
        if inner.config.flush_disk_type == FlushDiskType::AsyncFlush {
            // Commits what appenders left without waiting for an acknowledgement (acknowledged
            // records are in the files already). A failure poisons the store inside
            // commit_tail; dispatch goes on below what the files hold.
            let _ = inner.commit_tail_unless_busy();
        }
        inner.note_dispatch(inner.dispatch_once().map_err(|error| error.to_string()));
        if closed {
            return;
        }
        empty_passes = if *inner.dispatched.borrow() == dispatched_before {
            empty_passes.saturating_add(1)
        } else {
            0
        };
        let tick = if empty_passes >= EMPTY_PASSES_BEFORE_NAP {
            nap_unless_work(inner)
        } else {
            DISPATCH_TICK
        };
        seen = inner.dispatch_signal.wait(seen, tick);
        inner.dispatcher_napping.store(false, Ordering::Relaxed);
        if let Some(rest) = spacing.checked_sub(pass_started.elapsed()) {
            std::thread::sleep(rest);
        }
    }
}

/// Announces a nap and returns its tick, or the short tick when records are waiting after
/// all. The fence pairs with `Inner::wake_napping_dispatcher`: an append or commit either
/// happened before it (then its records are seen here) or sees the nap and wakes the
/// dispatcher.
fn nap_unless_work(inner: &Inner) -> Duration {
    inner.dispatcher_napping.store(true, Ordering::Relaxed);
    std::sync::atomic::fence(Ordering::SeqCst);
    if inner.log.appended_end() > *inner.dispatched.borrow() {
        DISPATCH_TICK
    } else {
        DISPATCH_NAP_TICK
    }
}

/// Checkpoints every interval and runs retention; a failed checkpoint is logged and retried
/// with a growing, bounded back-off (`checkpoint_health`), and the store keeps serving.
fn checkpoint_loop(inner: &Inner) {
    let mut pace = RetryPace::new(Duration::from_millis(inner.config.checkpoint_interval_ms));
    let mut last_retention = Instant::now();
    let mut seen = 0;
    while !inner.closed.load(Ordering::Acquire) {
        let started = Instant::now();
        let wait = pace.wait();
        while started.elapsed() < wait && !inner.closed.load(Ordering::Acquire) {
            seen = inner
                .close_signal
                .wait(seen, wait.min(Duration::from_millis(100)));
        }
        if inner.closed.load(Ordering::Acquire) {
            return;
        }
        match inner.checkpoint() {
            Ok(()) => pace.succeeded(),
            Err(error) => {
                pace.failed();
                tracing::error!(%error, retry_in = ?pace.wait(),
                    "checkpoint failed; retrying (the store keeps serving)");
            }
        }
        if last_retention.elapsed() >= RETENTION_EVERY {
            last_retention = Instant::now();
            if let Err(error) = inner.delete_expired_segments() {
                tracing::error!(%error, "retention failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MessageStore;
    use crate::{StoreConfig, TagFilter};
    use ferromq_protocol::DraftRecord;

    /// Well past any scheduling delay, well below the nap tick: a record appended while the
    /// dispatcher naps is readable within this only if the append woke it.
    const WOKEN_WITHIN: Duration = Duration::from_millis(50);
    const BOUND: Duration = Duration::from_secs(10);

    fn draft(body: &[u8]) -> DraftRecord<'_> {
        let host = std::net::SocketAddr::from(([127, 0, 0, 1], 1));
        DraftRecord::plain("Nap", 0, body, &[], host, 1_700_000_000_000)
    }

    fn wait_until(what: &str, done: impl Fn() -> bool) -> Duration {
        let started = Instant::now();
        while !done() {
            assert!(started.elapsed() < BOUND, "{what} within {BOUND:?}");
            std::thread::sleep(Duration::from_micros(200));
        }
        started.elapsed()
    }

    /// An idle dispatcher naps; the next record, appended and acknowledged under either flush
    /// policy, wakes it at once instead of waiting out the nap.
    #[test]
    fn an_idle_dispatcher_naps_and_the_next_record_wakes_it() {
        for flush in [FlushDiskType::AsyncFlush, FlushDiskType::SyncFlush] {
            let dir = tempfile::tempdir().unwrap();
            let mut config = StoreConfig::new(dir.path());
            config.segment_size_bytes = 64 * 1024;
            config.max_message_size_bytes = 16 * 1024;
            config.flush_disk_type = flush;
            let store = MessageStore::open(config).unwrap();
            for round in 0..3u64 {
                let napping = || store.inner.dispatcher_napping.load(Ordering::Relaxed);
                wait_until("a nap", napping);
                store.put(&[draft(b"after a nap")]).unwrap();
                let readable = || {
                    store
                        .get_messages("Nap", 0, round, 1, usize::MAX, &TagFilter::All)
                        .is_ok_and(|got| got.messages.len() == 1)
                };
                let took = wait_until("the record readable", readable);
                assert!(
                    took < WOKEN_WITHIN,
                    "{flush:?} round {round}: readable after {took:?}, the nap was not cut short"
                );
            }
            store.close().unwrap();
        }
    }

    /// An ASYNC_FLUSH store with 64 KiB segments in a fresh directory (kept alive by the
    /// returned guard).
    fn small_store() -> (tempfile::TempDir, MessageStore) {
        let dir = tempfile::tempdir().unwrap();
        let mut config = StoreConfig::new(dir.path());
        config.segment_size_bytes = 64 * 1024;
        config.max_message_size_bytes = 16 * 1024;
        let store = MessageStore::open(config).unwrap();
        (dir, store)
    }

    /// A commit or fsync wakes the dispatcher (`wake_dispatcher_for_readers`) for a held pull
    /// (a queue waiter) as for a reader subscribed to the dispatched end, and for nobody
    /// otherwise (the tick serves).
    #[test]
    fn a_held_pull_counts_as_a_reader_waiting_for_dispatch() {
        let (_dir, store) = small_store();
        let inner = &store.inner;
        assert!(!inner.readers_wait_for_dispatch(), "nobody waits");
        let held = store.wait_for_queue("T", 0);
        assert!(inner.readers_wait_for_dispatch(), "a held pull waits");
        drop(held);
        assert!(!inner.readers_wait_for_dispatch());
        let caught_up = inner.dispatched.subscribe();
        assert!(
            inner.readers_wait_for_dispatch(),
            "a subscribed reader waits"
        );
        drop(caught_up);
        store.close().unwrap();
    }

    /// The checkpointer sleeps on its own signal, not on the dispatcher's (which every commit
    /// notifies while a reader waits): only the dispatcher ever sleeps on `dispatch_signal`.
    #[test]
    fn the_checkpointer_sleeps_apart_from_the_dispatch_signal() {
        let (_dir, store) = small_store();
        let inner = &store.inner;
        wait_until("the checkpointer asleep on the close signal", || {
            inner.close_signal.sleepers.load(Ordering::SeqCst) == 1
        });
        let held = store.wait_for_queue("T", 0);
        for _ in 0..1_000 {
            inner.wake_dispatcher_for_readers();
            assert!(inner.dispatch_signal.sleepers.load(Ordering::SeqCst) <= 1);
        }
        drop(held);
        let started = Instant::now();
        store.close().unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "a close wakes the checkpointer"
        );
    }
}
