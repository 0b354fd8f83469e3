//! `ferromq controller`: one node of a controller group, configured from `-c controller.toml`
//! (RocketMQ's key names) and flags of the same names, flags winning. Also the flags that
//! `ferromq namesrv --enable-controller-in-namesrv` takes to embed a controller.
//!
//! Prints `ferromq controller: listening on <addr> self n<id> peers <peers>` once serving;
//! SIGINT or SIGTERM stops it cleanly.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use ferromq_controller::{
    format_peers, parse_node_id, parse_peers, Controller, ControllerConfig, Peer,
};
use serde::Deserialize;

/// The controller keys, as flags (each overrides the file's key of the same name).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ControllerFlags {
    /// `controllerDLegerGroup`: the controller group's name.
    #[arg(long = "controllerDLegerGroup", value_name = "NAME")]
    group: Option<String>,
    /// `controllerDLegerPeers`: `n0-127.0.0.1:9878;n1-127.0.0.1:9868;n2-127.0.0.1:9858`.
    #[arg(long = "controllerDLegerPeers", value_name = "PEERS")]
    peers: Option<String>,
    /// `controllerDLegerSelfId`: this node's id among the peers (`n0`).
    #[arg(long = "controllerDLegerSelfId", value_name = "ID")]
    self_id: Option<String>,
    /// `controllerStorePath`: where the Raft log, vote and snapshots live.
    #[arg(long = "controllerStorePath", value_name = "DIR")]
    store_path: Option<PathBuf>,
    /// `enableElectUncleanMaster`: elect a member outside the in-sync set when none in it
    /// is alive (may lose acknowledged messages).
    #[arg(long = "enableElectUncleanMaster", value_name = "BOOL")]
    unclean: Option<bool>,
    /// `controllerHeartBeatTimeoutMills`: a broker silent this long is dead (default 1000).
    #[arg(long = "controllerHeartBeatTimeoutMills", value_name = "MS")]
    heartbeat_timeout_millis: Option<u64>,
    /// `brokerLeaseMillis`: the lease granted by a heartbeat reply (default 600).
    #[arg(long = "brokerLeaseMillis", value_name = "MS")]
    lease_millis: Option<u64>,
    /// `scanNotActiveBrokerInterval`: how often the leader looks for dead masters (100).
    #[arg(long = "scanNotActiveBrokerInterval", value_name = "MS")]
    scan_interval_millis: Option<u64>,
}

/// `controller.toml`: the same keys as the flags.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ControllerFile {
    #[serde(rename = "controllerDLegerGroup")]
    group: Option<String>,
    #[serde(rename = "controllerDLegerPeers")]
    peers: Option<String>,
    #[serde(rename = "controllerDLegerSelfId")]
    self_id: Option<String>,
    #[serde(rename = "controllerStorePath")]
    store_path: Option<PathBuf>,
    #[serde(rename = "enableElectUncleanMaster")]
    unclean: Option<bool>,
    #[serde(rename = "controllerHeartBeatTimeoutMills")]
    heartbeat_timeout_millis: Option<u64>,
    #[serde(rename = "brokerLeaseMillis")]
    lease_millis: Option<u64>,
    #[serde(rename = "scanNotActiveBrokerInterval")]
    scan_interval_millis: Option<u64>,
}

impl ControllerFile {
    fn read(path: &Path) -> Result<ControllerFile> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }

    /// Lays `flags` over the file's values.
    fn merge(self, flags: &ControllerFlags) -> ControllerFlags {
        ControllerFlags {
            group: flags.group.clone().or(self.group),
            peers: flags.peers.clone().or(self.peers),
            self_id: flags.self_id.clone().or(self.self_id),
            store_path: flags.store_path.clone().or(self.store_path),
            unclean: flags.unclean.or(self.unclean),
            heartbeat_timeout_millis: flags
                .heartbeat_timeout_millis
                .or(self.heartbeat_timeout_millis),
            lease_millis: flags.lease_millis.or(self.lease_millis),
            scan_interval_millis: flags.scan_interval_millis.or(self.scan_interval_millis),
        }
    }
}

impl ControllerFlags {
    /// Whether any controller key was given.
    pub fn any(&self) -> bool {
        self.peers.is_some() || self.self_id.is_some() || self.store_path.is_some()
    }

    /// The controller settings: defaults, then `file`, then these flags.
    pub fn config(&self, file: Option<&Path>) -> Result<ControllerConfig> {
        let merged = match file {
            Some(path) => ControllerFile::read(path)?.merge(self),
            None => self.clone(),
        };
        let mut config = ControllerConfig::default();
        if let Some(group) = merged.group {
            config.group = group;
        }
        if let Some(peers) = merged.peers {
            config.peers = parse_peers(&peers)?;
        }
        if let Some(id) = merged.self_id {
            config.self_id = parse_node_id(&id)?;
        }
        if let Some(path) = merged.store_path {
            config.store_path = path;
        }
        if let Some(unclean) = merged.unclean {
            config.enable_elect_unclean_master = unclean;
        }
        if let Some(ms) = merged.heartbeat_timeout_millis {
            config.heartbeat_timeout = Duration::from_millis(ms);
        }
        if let Some(ms) = merged.lease_millis {
            config.broker_lease = Duration::from_millis(ms);
        }
        if let Some(ms) = merged.scan_interval_millis {
            config.scan_interval = Duration::from_millis(ms);
        }
        config.validate()?;
        Ok(config)
    }
}

/// Flags of `ferromq controller`.
#[derive(Debug, clap::Args)]
pub struct ControllerArgs {
    /// Controller configuration (TOML with RocketMQ's key names, e.g.
    /// `controllerDLegerPeers = "n0-127.0.0.1:9878"`).
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(flatten)]
    flags: ControllerFlags,
}

/// Starts a controller and prints its address line.
pub async fn start(config: ControllerConfig) -> Result<Controller> {
    let controller = Controller::start(config.clone())
        .await
        .context("starting the controller")?;
    // A closed stdout (a supervisor that read only the first line) must not stop a server.
    let mut stdout = std::io::stdout();
    let _ = writeln!(
        stdout,
        "ferromq controller: listening on {} self n{} peers {}",
        controller.local_addr(),
        controller.self_id(),
        format_peers(&bound_peers(&controller, &config))
    )
    .and_then(|()| stdout.flush());
    Ok(controller)
}

/// The peers with this node's bound address (its configured port may be 0).
fn bound_peers(controller: &Controller, config: &ControllerConfig) -> Vec<Peer> {
    config
        .peers
        .iter()
        .map(|peer| match peer.id == controller.self_id() {
            true => Peer {
                id: peer.id,
                addr: controller.local_addr(),
            },
            false => *peer,
        })
        .collect()
}

/// Runs `ferromq controller`.
pub fn run(args: &ControllerArgs) -> Result<()> {
    let config = args.flags.config(args.config.as_deref())?;
    crate::runtime()?.block_on(async {
        let mut signals = crate::ShutdownSignals::install()?;
        let controller = start(config).await?;
        let reason = signals.recv().await;
        tracing::info!(%reason, "shutting down");
        controller.shutdown().await;
        Ok(())
    })
}
