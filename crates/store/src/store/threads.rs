//! The store's background threads: flusher, dispatcher, checkpointer.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::checkpoint_health::RetryPace;
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
    vec![flusher, dispatcher, checkpointer]
}

fn spawn(name: &str, body: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(body)
        .expect("spawning a store thread")
}

fn dispatch_loop(inner: &Inner) {
    let mut seen = 0;
    loop {
        let pass_started = Instant::now();
        let closed = inner.closed.load(Ordering::Acquire);
        if inner.config.flush_disk_type == FlushDiskType::AsyncFlush {
            // Commits what appenders left without waiting for an acknowledgement (acknowledged
            // records are in the files already). A failure poisons the store inside
            // commit_tail; dispatch goes on below what the files hold.
            let _ = inner.commit_tail_in_background();
        }
        inner.note_dispatch(inner.dispatch_once().map_err(|error| error.to_string()));
        if closed {
            return;
        }
        seen = inner.dispatch_signal.wait(seen, DISPATCH_TICK);
        if let Some(rest) = DISPATCH_SPACING_MIN.checked_sub(pass_started.elapsed()) {
            std::thread::sleep(rest);
        }
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
                .dispatch_signal
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
