//! RocketMQ ACL 1.0 for ferromq: the accounts file ([`accounts`], `plain_acl.yml`'s shape),
//! the decision for one request ([`decide`]), and [`Acl`], the live accounts that reload when
//! the file changes. Request signing itself (what the clients compute) is
//! `ferromq_protocol::remoting::acl`.
//!
//! Used by the broker core, for every request kind, and by the name server, for its writes.
//!
//! Reloading: [`Acl::reload_if_changed`] looks at the file's modification time, length and
//! inode; when they change it reads and parses the file again. A file that cannot be read or
//! parsed is an error returned to the caller (the watcher logs it and counts it) and the last
//! good accounts stay in force. At start-up ([`Acl::load`]) a bad file is an error.

pub mod accounts;
pub mod address;
pub mod decide;
pub mod perm;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

pub use accounts::{Account, Accounts};
pub use decide::{Denial, Granted, Needs, Presented, Resource, DENIAL_REASONS};
pub use perm::Perm;

/// Why an accounts file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AccountsError {
    /// The file could not be read.
    #[error("cannot read ACL accounts file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The file is larger than [`accounts::FILE_BYTES_MAX`].
    #[error("ACL accounts file {path} is {bytes} bytes, more than the {max} allowed")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        bytes: u64,
        /// The bound.
        max: u64,
    },
    /// The content is malformed; the text names the entry.
    #[error("invalid ACL accounts: {0}")]
    Invalid(String),
    /// [`AccountsError::Invalid`] in a named file.
    #[error("ACL accounts file {path}: {message}")]
    InFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// Default interval of the accounts file watcher.
pub const RELOAD_INTERVAL_DEFAULT: Duration = Duration::from_secs(1);

/// What identifies a version of the file without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

/// The accounts in force, from a file that is reloaded when it changes.
#[derive(Debug)]
pub struct Acl {
    path: PathBuf,
    current: RwLock<Arc<Accounts>>,
    stamp: Mutex<Option<Stamp>>,
    reloads: AtomicU64,
    reload_failures: AtomicU64,
}

impl Acl {
    /// Loads the accounts file; a missing, unreadable or malformed file is an error naming it.
    pub fn load(path: &Path) -> Result<Acl, AccountsError> {
        let stamp = stamp(path)?;
        let accounts = read(path)?;
        Ok(Acl {
            path: path.to_owned(),
            current: RwLock::new(Arc::new(accounts)),
            stamp: Mutex::new(Some(stamp)),
            reloads: AtomicU64::new(0),
            reload_failures: AtomicU64::new(0),
        })
    }

    /// The accounts in force.
    pub fn current(&self) -> Arc<Accounts> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The accounts file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Successful reloads so far.
    pub fn reloads(&self) -> u64 {
        self.reloads.load(Ordering::Relaxed)
    }

    /// Failed reloads so far (the last good accounts stayed in force).
    pub fn reload_failures(&self) -> u64 {
        self.reload_failures.load(Ordering::Relaxed)
    }

    /// Reloads the file if it changed since the last look. `Ok(true)`: new accounts are in
    /// force; `Ok(false)`: unchanged; `Err`: the changed file is bad and the last good
    /// accounts stay (the same bad version is not reported again until it changes).
    pub fn reload_if_changed(&self) -> Result<bool, AccountsError> {
        let mut last = self.stamp.lock().unwrap_or_else(|e| e.into_inner());
        let now = match stamp(&self.path) {
            Ok(now) => now,
            Err(error) => {
                if last.take().is_some() {
                    self.reload_failures.fetch_add(1, Ordering::Relaxed);
                    return Err(error);
                }
                return Ok(false);
            }
        };
        if *last == Some(now) {
            return Ok(false);
        }
        *last = Some(now);
        match read(&self.path) {
            Ok(accounts) => {
                *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(accounts);
                self.reloads.fetch_add(1, Ordering::Relaxed);
                Ok(true)
            }
            Err(error) => {
                self.reload_failures.fetch_add(1, Ordering::Relaxed);
                Err(error)
            }
        }
    }

    /// Polls the file every `interval` until `stop` turns true, reloading it when it changes;
    /// a bad file is logged as an error (naming the file and the entry) and counted.
    pub async fn watch(
        self: Arc<Self>,
        interval: Duration,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(10)));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = stop.changed() => return,
            }
            if *stop.borrow() {
                return;
            }
            match self.reload_if_changed() {
                Ok(true) => tracing::info!(path = %self.path.display(), "ACL accounts reloaded"),
                Ok(false) => {}
                Err(error) => tracing::error!(
                    %error,
                    "ACL accounts file is bad; the last good accounts stay in force"
                ),
            }
        }
    }
}

fn stamp(path: &Path) -> Result<Stamp, AccountsError> {
    let meta = std::fs::metadata(path).map_err(|source| AccountsError::Read {
        path: path.to_owned(),
        source,
    })?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&meta);
    #[cfg(not(unix))]
    let inode = 0;
    Ok(Stamp {
        modified: meta.modified().ok(),
        len: meta.len(),
        inode,
    })
}

fn read(path: &Path) -> Result<Accounts, AccountsError> {
    let read_error = |source| AccountsError::Read {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_error)?;
    let mut text = String::new();
    file.take(accounts::FILE_BYTES_MAX + 1)
        .read_to_string(&mut text)
        .map_err(read_error)?;
    if text.len() as u64 > accounts::FILE_BYTES_MAX {
        return Err(AccountsError::TooLarge {
            path: path.to_owned(),
            bytes: text.len() as u64,
            max: accounts::FILE_BYTES_MAX,
        });
    }
    Accounts::parse(&text).map_err(|error| match error {
        AccountsError::Invalid(message) => AccountsError::InFile {
            path: path.to_owned(),
            message,
        },
        other => other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "accounts:\n  - accessKey: user01\n    secretKey: secret01\n";
    const OTHER: &str = "accounts:\n  - accessKey: user02\n    secretKey: secret02\n";

    #[test]
    fn a_changed_file_reloads_and_a_bad_one_keeps_the_last_good() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plain_acl.yml");
        std::fs::write(&path, GOOD).unwrap();
        let acl = Acl::load(&path).unwrap();
        assert!(acl.current().accounts.contains_key("user01"));
        assert!(!acl.reload_if_changed().unwrap());
        // A new file (new inode) is a change even within one mtime tick.
        let staged = dir.path().join("staged");
        std::fs::write(&staged, OTHER).unwrap();
        std::fs::rename(&staged, &path).unwrap();
        assert!(acl.reload_if_changed().unwrap());
        assert!(acl.current().accounts.contains_key("user02"));
        std::fs::write(&staged, "accounts: [\n").unwrap();
        std::fs::rename(&staged, &path).unwrap();
        let error = acl.reload_if_changed().unwrap_err().to_string();
        assert!(error.contains("plain_acl.yml"), "{error}");
        assert!(acl.current().accounts.contains_key("user02"));
        assert_eq!((acl.reloads(), acl.reload_failures()), (1, 1));
        // The same bad version is reported once.
        assert!(!acl.reload_if_changed().unwrap());
    }

    #[test]
    fn a_bad_file_at_start_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("acl.yml");
        let missing = Acl::load(&path).unwrap_err().to_string();
        assert!(missing.contains("acl.yml"), "{missing}");
        std::fs::write(&path, "accounts:\n  - accessKey: x\n").unwrap();
        let bad = Acl::load(&path).unwrap_err().to_string();
        assert!(bad.contains("acl.yml"), "{bad}");
    }
}
