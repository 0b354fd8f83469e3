//! TLS on the remoting port, with RocketMQ's modes (`tls.server.mode`):
//!
//! - `disabled`: plain TCP only (the default);
//! - `permissive`: TLS and plain connections on the same port. The first byte tells them
//!   apart: a TLS connection opens with a handshake record (content type 22, `0x16`), while
//!   a plain remoting frame opens with the high byte of its length, which would be `0x16` only
//!   for a frame of 369 MB or more, far past any `maxFrameLength`;
//! - `enforcing`: TLS only; a plain client's first bytes fail the handshake and the
//!   connection is closed.
//!
//! Certificates come from PEM files (`tls.server.certPath`, `tls.server.keyPath`); a missing
//! or unreadable file, or one holding no certificate or no key, stops the broker at start
//! with an error naming the file. Client certificates are not asked for. The handshake is
//! bounded by `frameReadTimeoutMillis`, like a frame.

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::rustls;
use tokio_rustls::TlsAcceptor;

use crate::config::{BrokerConfig, ConfigError};

/// The first byte of a TLS handshake record.
pub const TLS_HANDSHAKE_BYTE: u8 = 0x16;

/// RocketMQ's `tls.server.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    /// Plain TCP only.
    Disabled,
    /// TLS or plain, by the first byte.
    Permissive,
    /// TLS only.
    Enforcing,
}

/// Why TLS could not be set up at start; each names the file or key.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A bad `tls.server.*` key.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A file could not be read.
    #[error("cannot read TLS file {path} ({key}): {source}")]
    Read {
        /// The config key naming the file.
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// A file holds no usable PEM item of the kind needed.
    #[error("TLS file {path} ({key}) holds no {what}")]
    Empty {
        /// The config key naming the file.
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// What was looked for.
        what: &'static str,
    },
    /// rustls refused the certificate and key.
    #[error("TLS certificate {cert} and key {key}: {message}")]
    Rejected {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// rustls's reason.
        message: String,
    },
}

/// TLS of the remoting port: the mode and, unless disabled, the acceptor.
#[derive(Clone)]
pub struct ServerTls {
    mode: TlsMode,
    acceptor: Option<TlsAcceptor>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("mode", &self.mode)
            .finish()
    }
}

impl ServerTls {
    /// Plain TCP only.
    pub fn disabled() -> ServerTls {
        ServerTls {
            mode: TlsMode::Disabled,
            acceptor: None,
        }
    }

    /// Reads the mode and files of `config`.
    ///
    /// # Errors
    /// [`TlsError`] naming the key or file that is missing or bad.
    pub fn from_config(config: &BrokerConfig) -> Result<ServerTls, TlsError> {
        let mode = config.tls_mode()?;
        if mode == TlsMode::Disabled {
            return Ok(ServerTls::disabled());
        }
        let (Some(cert), Some(key)) = (&config.tls_server_cert_path, &config.tls_server_key_path)
        else {
            return Err(TlsError::Config(ConfigError::Invalid {
                key: "tls.server.certPath, tls.server.keyPath",
                message: "a TLS mode needs both files".into(),
            }));
        };
        let acceptor = acceptor(cert, key)?;
        Ok(ServerTls {
            mode,
            acceptor: Some(acceptor),
        })
    }

    /// The mode.
    pub fn mode(&self) -> TlsMode {
        self.mode
    }

    /// The acceptor (`None` when disabled).
    pub fn acceptor(&self) -> Option<&TlsAcceptor> {
        self.acceptor.as_ref()
    }
}

/// A TLS acceptor from a PEM certificate chain and a PEM private key.
///
/// # Errors
/// [`TlsError`] naming the file that is missing, unreadable or holds nothing usable.
pub fn acceptor(cert_path: &Path, key_path: &Path) -> Result<TlsAcceptor, TlsError> {
    let certs = read_certs(cert_path, "tls.server.certPath")?;
    let key = read_key(key_path, "tls.server.keyPath")?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .and_then(|builder| builder.with_no_client_auth().with_single_cert(certs, key))
    .map_err(|error| TlsError::Rejected {
        cert: cert_path.to_owned(),
        key: key_path.to_owned(),
        message: error.to_string(),
    })?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn open(path: &Path, key: &'static str) -> Result<BufReader<std::fs::File>, TlsError> {
    std::fs::File::open(path)
        .map(BufReader::new)
        .map_err(|source| TlsError::Read {
            key,
            path: path.to_owned(),
            source,
        })
}

fn read_certs(
    path: &Path,
    key: &'static str,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, TlsError> {
    let mut reader = open(path, key)?;
    let certs: Vec<_> = rustls_pemfile::certs(&mut reader)
        .collect::<Result<_, _>>()
        .map_err(|source| TlsError::Read {
            key,
            path: path.to_owned(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            key,
            path: path.to_owned(),
            what: "PEM certificate",
        });
    }
    Ok(certs)
}

fn read_key(
    path: &Path,
    key: &'static str,
) -> Result<rustls::pki_types::PrivateKeyDer<'static>, TlsError> {
    let mut reader = open(path, key)?;
    rustls_pemfile::private_key(&mut reader)
        .map_err(|source| TlsError::Read {
            key,
            path: path.to_owned(),
            source,
        })?
        .ok_or_else(|| TlsError::Empty {
            key,
            path: path.to_owned(),
            what: "PEM private key (PKCS#8, PKCS#1 or SEC1)",
        })
}
