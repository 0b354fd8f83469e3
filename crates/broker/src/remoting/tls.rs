//! TLS on the broker's remoting port (`tls.server.mode`, `tls.server.certPath`,
//! `tls.server.keyPath`): the broker's keys read into the server TLS the name server shares
//! (`ferromq_protocol::remoting::tls_server`, which documents the three modes). A missing or
//! unreadable file, or one holding no certificate or no key, stops the broker at start with
//! an error naming the file. The handshake is bounded by `frameReadTimeoutMillis`, like a
//! frame.

pub use ferromq_protocol::remoting::tls_server::{
    ServerTls, ServerTlsError, TlsMode, Upgraded, TLS_HANDSHAKE_BYTE,
};

use ferromq_protocol::remoting::tls::{ClientTls, ClientTlsError};

use crate::config::{BrokerConfig, ConfigError};

/// Why TLS could not be set up at start; each names the key or file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A bad `tls.server.*` key.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A file is missing, unreadable or holds nothing usable (named).
    #[error(transparent)]
    Server(#[from] ServerTlsError),
    /// `tls.enable` without `tls.client.trustCertPath`.
    #[error("tls.enable = true needs tls.client.trustCertPath (the CA the name servers' certificates are checked against)")]
    NoTrustFile,
    /// The trust file is missing or holds no certificate (named).
    #[error("tls.client.trustCertPath: {0}")]
    Client(#[from] ClientTlsError),
}

/// The TLS of the broker's connections to the name servers (`tls.enable`,
/// `tls.client.trustCertPath`); `None` with `tls.enable = false`.
///
/// # Errors
/// [`TlsError::NoTrustFile`], or the trust file is missing or bad (named).
pub fn client_from_config(config: &BrokerConfig) -> Result<Option<ClientTls>, TlsError> {
    if !config.tls_enable {
        return Ok(None);
    }
    let Some(ca) = &config.tls_client_trust_cert_path else {
        return Err(TlsError::NoTrustFile);
    };
    Ok(Some(ClientTls::from_ca_file(ca, None)?))
}

/// The server TLS of `config`'s `tls.server.*` keys.
///
/// # Errors
/// [`TlsError`] naming the key or file that is missing or bad.
pub fn from_config(config: &BrokerConfig) -> Result<ServerTls, TlsError> {
    let mode = config.tls_mode()?;
    Ok(ServerTls::new(
        mode,
        config.tls_server_cert_path.as_deref(),
        config.tls_server_key_path.as_deref(),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registration_tls_needs_a_readable_trust_file_named_in_the_error() {
        let mut config = BrokerConfig::default();
        assert!(client_from_config(&config).unwrap().is_none());
        config.tls_enable = true;
        let error = client_from_config(&config).unwrap_err().to_string();
        assert!(error.contains("tls.client.trustCertPath"), "{error}");
        config.tls_client_trust_cert_path = Some("/nonexistent/ferromq-ca-test.pem".into());
        let error = client_from_config(&config).unwrap_err().to_string();
        assert!(error.contains("ferromq-ca-test.pem"), "{error}");
    }
}
