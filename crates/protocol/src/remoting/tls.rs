//! Client-side TLS for [`super::RemotingClient`] (rustls, ring provider): the server's
//! certificate is checked against a CA file given by the user (PEM), and its name against
//! the server name (by default the IP address the client connects to, so the certificate
//! must carry that IP as a subject alternative name).

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::rustls;

/// Why a client TLS configuration could not be built; names the file.
#[derive(Debug, thiserror::Error)]
pub enum ClientTlsError {
    /// The CA file could not be read.
    #[error("cannot read TLS CA file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The CA file holds no certificate rustls accepts.
    #[error("TLS CA file {path} holds no usable PEM certificate")]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// rustls refused the settings.
    #[error("TLS client settings: {0}")]
    Rustls(String),
}

/// A client TLS configuration, shared by every connection of a client.
#[derive(Clone)]
pub struct ClientTls {
    config: Arc<rustls::ClientConfig>,
    server_name: Option<String>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl PartialEq for ClientTls {
    /// The same configuration object and server name.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.config, &other.config) && self.server_name == other.server_name
    }
}

impl Eq for ClientTls {}

impl ClientTls {
    /// Trusts the certificates of the PEM file `ca_path`. `server_name`: the name the
    /// server's certificate must carry; `None`: the IP address connected to.
    ///
    /// # Errors
    /// [`ClientTlsError`] naming the file.
    pub fn from_ca_file(
        ca_path: &Path,
        server_name: Option<String>,
    ) -> Result<ClientTls, ClientTlsError> {
        let read_error = |source| ClientTlsError::Read {
            path: ca_path.to_owned(),
            source,
        };
        let file = std::fs::File::open(ca_path).map_err(read_error)?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_pemfile::certs(&mut BufReader::new(file)) {
            roots
                .add(cert.map_err(read_error)?)
                .map_err(|e| ClientTlsError::Rustls(e.to_string()))?;
        }
        if roots.is_empty() {
            return Err(ClientTlsError::Empty {
                path: ca_path.to_owned(),
            });
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientTlsError::Rustls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
        Ok(ClientTls {
            config: Arc::new(config),
            server_name: server_name.filter(|s| !s.is_empty()),
        })
    }

    /// The connector.
    pub(crate) fn connector(&self) -> tokio_rustls::TlsConnector {
        tokio_rustls::TlsConnector::from(self.config.clone())
    }

    /// The name to check the server's certificate against when connecting to `addr`.
    pub(crate) fn server_name(
        &self,
        addr: std::net::SocketAddr,
    ) -> Result<rustls::pki_types::ServerName<'static>, std::io::Error> {
        match &self.server_name {
            Some(name) => rustls::pki_types::ServerName::try_from(name.clone()).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("bad TLS server name {name:?}: {e}"),
                )
            }),
            None => Ok(rustls::pki_types::ServerName::IpAddress(addr.ip().into())),
        }
    }
}
