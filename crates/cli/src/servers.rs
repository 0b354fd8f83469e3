//! `ferromq namesrv` and `ferromq broker -c broker.toml`: the two halves of a cluster, run
//! separately. Both stop cleanly on SIGINT or SIGTERM. `ferromq namesrv
//! --enable-controller-in-namesrv` also runs a controller node in the same process, on its
//! own port.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result};
use ferromq_broker::{Broker, BrokerConfig};
use ferromq_namesrv::{NameServer, NamesrvConfig};

/// Flags of `ferromq namesrv`.
#[derive(Debug, clap::Args)]
pub struct NamesrvArgs {
    /// Address to listen on.
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:9876")]
    listen: SocketAddr,
    /// Also run a controller node in this process, on its own port
    /// (`enableControllerInNamesrv`), configured by the controller flags below or
    /// `--controller-config`.
    #[arg(
        long = "enable-controller-in-namesrv",
        alias = "enableControllerInNamesrv"
    )]
    enable_controller: bool,
    /// The embedded controller's configuration (TOML, RocketMQ's key names).
    #[arg(
        long = "controller-config",
        value_name = "FILE",
        requires = "enable_controller"
    )]
    controller_config: Option<PathBuf>,
    #[command(flatten)]
    controller: crate::controller::ControllerFlags,
    /// Turn ACL on for the name server's writes (broker registration, topic deletion, KV
    /// changes, write permission): they must be signed by an admin account of this file
    /// (plain_acl.yml's shape). Reads stay open. Reloaded when it changes.
    #[arg(long = "acl-file", value_name = "FILE")]
    acl_file: Option<PathBuf>,
    /// TLS on the name server port (tls.server.mode, as the broker's): disabled,
    /// permissive or enforcing.
    #[arg(long, value_name = "MODE", default_value = "disabled")]
    tls_mode: String,
    /// PEM certificate chain of the name server port (tls.server.certPath).
    #[arg(long, value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of the name server port (tls.server.keyPath).
    #[arg(long, value_name = "FILE")]
    tls_key: Option<PathBuf>,
}

/// Flags of `ferromq broker`.
#[derive(Debug, clap::Args)]
pub struct BrokerArgs {
    /// Broker configuration (TOML with RocketMQ's key names: brokerName, listenPort,
    /// namesrvAddr, storePathRootDir, flushDiskType, ...).
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Name servers, overriding namesrvAddr (`ip:port;ip:port`).
    #[arg(short = 'n', long = "namesrv", value_name = "ADDRS")]
    namesrv: Option<String>,
}

/// Runs `ferromq namesrv`.
pub fn run_namesrv(args: &NamesrvArgs) -> Result<()> {
    if !args.enable_controller && args.controller.any() {
        anyhow::bail!("controller flags need --enable-controller-in-namesrv");
    }
    let open_files = crate::fd_limit::raise_for_server();
    let controller_config = if args.enable_controller {
        Some(args.controller.config(args.controller_config.as_deref())?)
    } else {
        None
    };
    crate::runtime()?.block_on(async {
        let mut signals = crate::ShutdownSignals::install()?;
        let tls = crate::security::server_tls(
            &args.tls_mode,
            args.tls_cert.as_deref(),
            args.tls_key.as_deref(),
        )?;
        let server = NameServer::bind(NamesrvConfig {
            listen: args.listen,
            ..NamesrvConfig::default()
        })
        .await
        .context("starting the name server")?;
        let server = match &args.acl_file {
            Some(path) => {
                let acl = ferromq_acl::Acl::load(path).context("starting the name server")?;
                server.with_acl(
                    std::sync::Arc::new(acl),
                    ferromq_acl::RELOAD_INTERVAL_DEFAULT,
                )
            }
            None => server,
        };
        let server = server.with_tls(tls);
        println!("ferromq namesrv: listening on {}", server.local_addr());
        eprintln!(
            "ferromq namesrv: {}",
            crate::fd_limit::describe(&open_files)
        );
        // The controller's line follows the name server's (scripts read the first line).
        let controller = match controller_config {
            Some(config) => Some(crate::controller::start(config).await?),
            None => None,
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async move {
            let _ = stopped.await;
        }));
        let reason = signals.recv().await;
        tracing::info!(%reason, "shutting down");
        let _ = stop.send(());
        task.await.context("name server task")?;
        if let Some(controller) = controller {
            controller.shutdown().await;
        }
        Ok(())
    })
}

/// Runs `ferromq broker`.
pub fn run_broker(args: &BrokerArgs) -> Result<()> {
    let open_files = crate::fd_limit::raise_for_server();
    let mut config = match &args.config {
        Some(path) => BrokerConfig::from_file(path)?,
        None => BrokerConfig::default(),
    };
    if let Some(namesrv) = &args.namesrv {
        config.namesrv_addr = namesrv.clone();
    }
    config.validate()?;
    crate::runtime()?.block_on(async {
        let mut signals = crate::ShutdownSignals::install()?;
        let broker = Broker::start(config).await.context("starting the broker")?;
        broker
            .context()
            .metrics
            .open_files
            .set(crate::fd_limit::status(&open_files));
        eprintln!("ferromq broker: {}", crate::fd_limit::describe(&open_files));
        println!(
            "ferromq broker: listening on {} (ha {}, {} brokerId {}{})",
            broker.local_addr(),
            broker.ha_addr(),
            broker.context().replication.role().as_str(),
            broker.context().replication.broker_id(),
            if broker.context().controller.is_some() {
                ", controller mode"
            } else {
                ""
            }
        );
        let reason = signals.recv().await;
        tracing::info!(%reason, "shutting down");
        broker.shutdown().await.context("stopping the broker")
    })
}
