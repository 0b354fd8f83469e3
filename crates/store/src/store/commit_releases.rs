//! The release signal of the commit lock: an `AsyncFlush` waiter whose record a running commit
//! holds (`commit`), and a master's replication streams, wait on it instead of blocking.
//!
//! Why a gate in front of the watch: bumping a tokio `watch` notifies through all of its
//! internal waiter lists, each behind a mutex, whether anyone waits or not — 7% of a lone
//! appender's thread in `bench store`, paid once per commit. So a release bumps the watch
//! only while somebody watches: a watcher is counted ([`CommitWatch`]) for as long as it may
//! wait, and a release with nobody counted costs one fence and one load.
//!
//! Invariant (no lost wake-up): a watcher counts itself, then, after a `SeqCst` fence, looks at
//! what it waits to change (the commit lock, the committed end). A releaser changes it (the
//! commit publishes the committed end and releases the lock), then, after a `SeqCst` fence,
//! reads the count. The fences are totally ordered: if the releaser's read missed the count,
//! its fence came first, and the watcher's look after its own fence sees the change.

use std::sync::atomic::{fence, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::watch;

/// The commit lock's release signal and the count of its watchers.
#[derive(Debug)]
pub(crate) struct CommitReleases {
    /// Bumped after a release while anyone watches.
    done: watch::Sender<u64>,
    /// Live [`CommitWatch`]es.
    watchers: Arc<AtomicUsize>,
}

impl Default for CommitReleases {
    fn default() -> Self {
        CommitReleases {
            done: watch::Sender::new(0),
            watchers: Arc::default(),
        }
    }
}

impl CommitReleases {
    /// Called right after the commit lock is released (see the invariant).
    pub(crate) fn released(&self) {
        fence(Ordering::SeqCst);
        if self.watchers.load(Ordering::Relaxed) > 0 {
            self.done
                .send_modify(|count| *count = count.wrapping_add(1));
        }
    }

    /// Starts watching: counted first, so any release after the caller's next look wakes it.
    pub(crate) fn watch(&self) -> CommitWatch {
        self.watchers.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        CommitWatch {
            releases: self.done.subscribe(),
            watchers: self.watchers.clone(),
        }
    }

    /// Releases signalled so far (tests).
    #[cfg(test)]
    pub(crate) fn bumps(&self) -> u64 {
        *self.done.borrow()
    }
}

/// A counted watcher of the commit lock's releases (and so of the committed end): look at
/// the state, then wait for [`CommitWatch::changed`]; a release after the look wakes it.
#[derive(Debug)]
pub struct CommitWatch {
    releases: watch::Receiver<u64>,
    watchers: Arc<AtomicUsize>,
}

impl CommitWatch {
    /// Marks every release so far as seen: the next [`CommitWatch::changed`] waits for a new
    /// one.
    pub fn mark_seen(&mut self) {
        self.releases.borrow_and_update();
    }

    /// Waits for a release not yet seen; an error once the store is gone.
    pub async fn changed(&mut self) -> Result<(), watch::error::RecvError> {
        self.releases.changed().await
    }
}

impl Drop for CommitWatch {
    fn drop(&mut self) {
        self.watchers.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Duration;

    #[test]
    fn a_release_bumps_the_watch_only_while_someone_watches() {
        let releases = CommitReleases::default();
        releases.released();
        assert_eq!(releases.bumps(), 0, "nobody watches");
        let watch = releases.watch();
        releases.released();
        assert_eq!(releases.bumps(), 1);
        let second = releases.watch();
        drop(watch);
        releases.released();
        assert_eq!(releases.bumps(), 2, "one watcher left");
        drop(second);
        releases.released();
        assert_eq!(releases.bumps(), 2, "all gone");
    }

    /// A watcher that found the lock held is woken by its holder's release, every time.
    #[tokio::test]
    async fn a_watcher_that_found_the_lock_held_is_woken_by_its_release() {
        let shared = Arc::new((Mutex::new(()), CommitReleases::default()));
        for round in 0..2_000 {
            let (held_tx, held_rx) = std::sync::mpsc::channel();
            let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
            let holder = {
                let shared = shared.clone();
                std::thread::spawn(move || {
                    let guard = shared.0.lock().expect("lock");
                    held_tx.send(()).expect("send");
                    let _ = go_rx.recv();
                    drop(guard);
                    shared.1.released();
                })
            };
            held_rx.recv().expect("held");
            let mut watch = shared.1.watch();
            watch.mark_seen();
            assert!(
                shared.0.try_lock().is_err(),
                "round {round}: the holder still holds the lock"
            );
            go_tx.send(()).expect("go");
            tokio::time::timeout(Duration::from_secs(5), watch.changed())
                .await
                .unwrap_or_else(|_| panic!("round {round}: the release was lost"))
                .expect("the sender lives");
            holder.join().expect("holder");
            assert!(shared.0.try_lock().is_ok(), "round {round}: released");
        }
    }
}
