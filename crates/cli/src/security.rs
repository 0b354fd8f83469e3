//! Credentials and TLS flags shared by `ferromq admin` and `ferromq bench`: ACL access and
//! secret keys (flags or the `FERROMQ_ACCESS_KEY` / `FERROMQ_SECRET_KEY` environment
//! variables, so secrets stay out of shell history and process listings), and TLS with a CA
//! file to trust.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use ferromq_protocol::remoting::acl::Credentials;
use ferromq_protocol::remoting::tls::ClientTls;
use ferromq_protocol::remoting::ClientOptions;

/// The server TLS of a name server's port from the `--tls-mode`, `--tls-cert`, `--tls-key`
/// flags (the broker's `tls.server.mode`, `tls.server.certPath`, `tls.server.keyPath`).
///
/// # Errors
/// An unknown mode, a mode without both files, or a file that is missing or bad (named).
pub fn server_tls(
    mode: &str,
    cert: Option<&std::path::Path>,
    key: Option<&std::path::Path>,
) -> Result<ferromq_protocol::remoting::tls_server::ServerTls> {
    use ferromq_protocol::remoting::tls_server::{ServerTls, TlsMode};
    let Some(mode) = TlsMode::parse(mode) else {
        bail!("--tls-mode (tls.server.mode) {mode:?} is not disabled, permissive or enforcing");
    };
    ServerTls::new(mode, cert, key).context("setting up the name server's TLS")
}

/// `--access-key`, `--secret-key`, `--tls`, `--tls-ca`, `--tls-server-name`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SecurityFlags {
    /// ACL access key every request is signed with (RocketMQ ACL 1.0).
    #[arg(long = "access-key", env = "FERROMQ_ACCESS_KEY", value_name = "KEY")]
    pub access_key: Option<String>,
    /// ACL secret key of --access-key.
    #[arg(
        long = "secret-key",
        env = "FERROMQ_SECRET_KEY",
        value_name = "SECRET",
        hide_env_values = true
    )]
    pub secret_key: Option<String>,
    /// Connect with TLS to every server, name servers included (their tls.server.mode must
    /// be permissive or enforcing).
    #[arg(long = "tls", requires = "tls_ca")]
    pub tls: bool,
    /// PEM file of the CA (or self-signed certificate) to trust for --tls.
    #[arg(long = "tls-ca", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// Name the server's certificate must carry (default: the IP address connected to).
    #[arg(long = "tls-server-name", value_name = "NAME")]
    pub tls_server_name: Option<String>,
}

impl SecurityFlags {
    /// The credentials, if given.
    ///
    /// # Errors
    /// An access key without a secret, or the reverse.
    pub fn credentials(&self) -> Result<Option<Credentials>> {
        match (&self.access_key, &self.secret_key) {
            (Some(access), Some(secret)) => Ok(Some(Credentials::new(access, secret))),
            (None, None) => Ok(None),
            _ => bail!("give both --access-key and --secret-key (or FERROMQ_ACCESS_KEY and FERROMQ_SECRET_KEY)"),
        }
    }

    /// The TLS settings, if --tls.
    ///
    /// # Errors
    /// The CA file is missing or holds no certificate (named).
    pub fn tls(&self) -> Result<Option<ClientTls>> {
        if !self.tls {
            return Ok(None);
        }
        let Some(ca) = &self.tls_ca else {
            bail!("--tls needs --tls-ca FILE");
        };
        let tls =
            ClientTls::from_ca_file(ca, self.tls_server_name.clone()).context("setting up TLS")?;
        Ok(Some(tls))
    }

    /// Connection options carrying the credentials and TLS.
    ///
    /// # Errors
    /// As [`SecurityFlags::credentials`] and [`SecurityFlags::tls`].
    pub fn client_options(&self) -> Result<ClientOptions> {
        Ok(ClientOptions {
            credentials: self.credentials()?.map(Arc::new),
            tls: self.tls()?,
            ..ClientOptions::default()
        })
    }
}
