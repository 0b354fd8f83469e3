//! Server-side TLS of a remoting port (rustls, ring provider), shared by the broker and the
//! name server so both speak RocketMQ's `tls.server.mode` the same way:
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
//! or unreadable file, or one holding no certificate or no key, is an error naming the file,
//! which the servers turn into a start-up failure. Client certificates are not asked for.
//! The wait for the first byte and the handshake are bounded by the caller's deadline
//! (`frameReadTimeoutMillis`).

use std::io::BufReader;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio_rustls::rustls;
use tokio_rustls::TlsAcceptor;

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

impl TlsMode {
    /// The mode named `text` (`disabled`, `permissive`, `enforcing`, any case), or `None`.
    pub fn parse(text: &str) -> Option<TlsMode> {
        match text.trim().to_ascii_lowercase().as_str() {
            "disabled" => Some(TlsMode::Disabled),
            "permissive" => Some(TlsMode::Permissive),
            "enforcing" => Some(TlsMode::Enforcing),
            _ => None,
        }
    }
}

/// Why server TLS could not be set up; each names the file or key.
#[derive(Debug, thiserror::Error)]
pub enum ServerTlsError {
    /// A TLS mode without both files.
    #[error("tls.server.mode {mode:?} needs both tls.server.certPath and tls.server.keyPath")]
    MissingFiles {
        /// The mode asked for.
        mode: TlsMode,
    },
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

/// TLS of one remoting port: the mode and, unless disabled, the acceptor.
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

/// A connection after the TLS decision of its port's mode.
pub enum Upgraded {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS, handshake done.
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl ServerTls {
    /// Plain TCP only.
    pub fn disabled() -> ServerTls {
        ServerTls {
            mode: TlsMode::Disabled,
            acceptor: None,
        }
    }

    /// `mode` with the PEM certificate chain `cert` and private key `key` (both needed
    /// unless disabled; ignored when disabled).
    ///
    /// # Errors
    /// [`ServerTlsError`] naming the file that is missing, unreadable or holds nothing
    /// usable.
    pub fn new(
        mode: TlsMode,
        cert: Option<&Path>,
        key: Option<&Path>,
    ) -> Result<ServerTls, ServerTlsError> {
        if mode == TlsMode::Disabled {
            return Ok(ServerTls::disabled());
        }
        let (Some(cert), Some(key)) = (cert, key) else {
            return Err(ServerTlsError::MissingFiles { mode });
        };
        Ok(ServerTls {
            mode,
            acceptor: Some(acceptor(cert, key)?),
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

    /// Applies the mode to a new connection: plain as is; TLS through the handshake;
    /// permissive by the first byte. Both the wait for the first byte and the handshake are
    /// bounded by `deadline`.
    ///
    /// # Errors
    /// Why the connection is refused (for the log line; the caller closes it and counts it).
    pub async fn upgrade(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        deadline: Duration,
    ) -> Result<Upgraded, String> {
        let Some(acceptor) = &self.acceptor else {
            return Ok(Upgraded::Plain(stream));
        };
        if self.mode == TlsMode::Permissive {
            let mut first = [0u8; 1];
            let peeked = tokio::time::timeout(deadline, stream.peek(&mut first)).await;
            match peeked {
                Ok(Ok(1)) if first[0] != TLS_HANDSHAKE_BYTE => return Ok(Upgraded::Plain(stream)),
                Ok(Ok(1)) => {}
                Ok(Ok(_)) => return Err("closed before its first byte".into()),
                Ok(Err(error)) => return Err(format!("read failed: {error}")),
                Err(_) => return Err(format!("no first byte within {deadline:?}")),
            }
        }
        match tokio::time::timeout(deadline, acceptor.accept(stream)).await {
            Ok(Ok(tls)) => {
                tracing::debug!(%peer, "TLS connection");
                Ok(Upgraded::Tls(Box::new(tls)))
            }
            Ok(Err(error)) => Err(format!("TLS handshake failed: {error}")),
            Err(_) => Err(format!("TLS handshake not done within {deadline:?}")),
        }
    }
}

/// A TLS acceptor from a PEM certificate chain and a PEM private key.
///
/// # Errors
/// [`ServerTlsError`] naming the file that is missing, unreadable or holds nothing usable.
pub fn acceptor(cert_path: &Path, key_path: &Path) -> Result<TlsAcceptor, ServerTlsError> {
    let certs = read_certs(cert_path, "tls.server.certPath")?;
    let key = read_key(key_path, "tls.server.keyPath")?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .and_then(|builder| builder.with_no_client_auth().with_single_cert(certs, key))
    .map_err(|error| ServerTlsError::Rejected {
        cert: cert_path.to_owned(),
        key: key_path.to_owned(),
        message: error.to_string(),
    })?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn open(path: &Path, key: &'static str) -> Result<BufReader<std::fs::File>, ServerTlsError> {
    std::fs::File::open(path)
        .map(BufReader::new)
        .map_err(|source| ServerTlsError::Read {
            key,
            path: path.to_owned(),
            source,
        })
}

fn read_certs(
    path: &Path,
    key: &'static str,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, ServerTlsError> {
    let mut reader = open(path, key)?;
    let certs: Vec<_> = rustls_pemfile::certs(&mut reader)
        .collect::<Result<_, _>>()
        .map_err(|source| ServerTlsError::Read {
            key,
            path: path.to_owned(),
            source,
        })?;
    if certs.is_empty() {
        return Err(ServerTlsError::Empty {
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
) -> Result<rustls::pki_types::PrivateKeyDer<'static>, ServerTlsError> {
    let mut reader = open(path, key)?;
    rustls_pemfile::private_key(&mut reader)
        .map_err(|source| ServerTlsError::Read {
            key,
            path: path.to_owned(),
            source,
        })?
        .ok_or_else(|| ServerTlsError::Empty {
            key,
            path: path.to_owned(),
            what: "PEM private key (PKCS#8, PKCS#1 or SEC1)",
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_by_name_in_any_case() {
        assert_eq!(TlsMode::parse("disabled"), Some(TlsMode::Disabled));
        assert_eq!(TlsMode::parse(" Permissive "), Some(TlsMode::Permissive));
        assert_eq!(TlsMode::parse("ENFORCING"), Some(TlsMode::Enforcing));
        assert_eq!(TlsMode::parse("on"), None);
    }

    #[test]
    fn a_mode_without_files_or_with_a_missing_file_is_an_error_naming_it() {
        let error = ServerTls::new(TlsMode::Enforcing, None, None).unwrap_err();
        assert!(error.to_string().contains("tls.server.certPath"), "{error}");
        let missing = Path::new("/nonexistent/ferromq-test-cert.pem");
        let error = ServerTls::new(TlsMode::Permissive, Some(missing), Some(missing)).unwrap_err();
        assert!(
            error.to_string().contains("ferromq-test-cert.pem"),
            "{error}"
        );
        assert_eq!(
            ServerTls::new(TlsMode::Disabled, Some(missing), None)
                .unwrap()
                .mode(),
            TlsMode::Disabled
        );
    }
}
