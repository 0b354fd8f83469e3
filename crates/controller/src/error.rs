//! Errors of starting and running a controller.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Why a controller could not start (or stopped).
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// A configuration key is missing or wrong.
    #[error("controller configuration: {0}")]
    Config(String),
    /// The listen address cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// A connection limit is unusable.
    #[error(transparent)]
    Limits(#[from] ferromq_protocol::remoting::limits::LimitError),
    /// The store directory cannot be opened or recovered.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// openraft refused to start or to initialize the group.
    #[error("raft: {0}")]
    Raft(String),
}

/// Why the Raft store on disk cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An I/O call failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// A file's content is damaged somewhere other than a torn tail.
    #[error("{path} is corrupt at byte {position}: {why}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where.
        position: u64,
        /// What is wrong.
        why: String,
    },
    /// A JSON file (vote, meta, snapshot) cannot be decoded.
    #[error("{path} cannot be decoded: {source}")]
    Decode {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: serde_json::Error,
    },
}

impl StoreError {
    /// An I/O error with its context.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> StoreError {
        StoreError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
