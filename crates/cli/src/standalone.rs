//! `ferromq standalone`: a name server and a broker in one process on 127.0.0.1, data under
//! `./data`; the quick start.
//!
//! Once both listen it prints one line, `ferromq standalone: namesrv 127.0.0.1:<port> broker
//! 127.0.0.1:<port> data <dir>`, which scripts and tests parse; before it, on stderr, the
//! open-file limits it runs with (`ferromq standalone: open files: soft limit N, hard limit M`,
//! with the error when raising the soft limit failed: it runs on regardless). SIGINT or SIGTERM stops it
//! cleanly: the broker unregisters, the store flushes and writes a checkpoint, and the next
//! start is a clean one; when the store was poisoned (a failed CommitLog write or fsync), the
//! stop fails with an `error:` line naming it and exit status 1 instead. A process killed with SIGKILL leaves the `abort` marker; the next
//! start runs, and reports, crash recovery, keeping every acknowledged message and commit.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use ferromq_broker::{Broker, BrokerConfig};
use ferromq_namesrv::{NameServer, NamesrvConfig};
use ferromq_store::{check_store, CheckScope, MessageStore, StoreConfig};
use serde_json::json;

use crate::report;
use crate::Flush;

/// Flags of `ferromq standalone`.
#[derive(Debug, clap::Args)]
pub struct StandaloneArgs {
    /// Data directory (RocketMQ storePathRootDir).
    #[arg(long, value_name = "DIR", default_value = "./data")]
    data_dir: PathBuf,
    /// Name server port; 0 picks a free one.
    #[arg(long, value_name = "PORT", default_value_t = 9876)]
    namesrv_port: u16,
    /// Broker port; 0 picks a free one.
    #[arg(long, value_name = "PORT", default_value_t = 10911)]
    broker_port: u16,
    /// Port of the RocketMQ 5.x gRPC endpoint (grpcListenPort): 8081 by default, 0 picks a
    /// free one (the default when --broker-port is 0), -1 turns it off. Printed on stderr
    /// as `ferromq standalone: grpc ADDR`.
    #[arg(long, value_name = "PORT", allow_negative_numbers = true)]
    grpc_port: Option<i32>,
    /// How sends and commits become durable (RocketMQ flushDiskType). ferromq defaults to
    /// sync: a send or commit is acknowledged only once fsynced (group commit).
    #[arg(long, value_enum, default_value_t = Flush::Sync)]
    flush: Flush,
    /// Refuse sends to topics that do not exist (RocketMQ autoCreateTopicEnable=false).
    #[arg(long)]
    no_auto_create_topic: bool,
    /// Serve Prometheus metrics on http://127.0.0.1:PORT/metrics (0 picks a free port; the
    /// address is printed on stderr). Off unless given.
    #[arg(long, value_name = "PORT")]
    metrics_port: Option<u16>,
    /// Check the store read-only and print, as one JSON line, what recovery would do (what it
    /// would cut, quarantine, complete or rebuild); nothing is written. Exits 0 when the
    /// store is as a clean stop leaves it, 2 when recovery would change something.
    #[arg(long, conflicts_with = "repair")]
    check: bool,
    /// With --check: verify every record of the log, not only what follows the checkpoint
    /// (finds damage before the checkpoint; reads the whole log).
    #[arg(long, requires = "check")]
    full: bool,
    /// Run recovery now (cut a torn tail, quarantine damage, rebuild what needs it), print
    /// its report as one JSON line, close the store cleanly and exit.
    #[arg(long)]
    repair: bool,
    /// Register the broker with the name server, and write into message ids, this address
    /// instead of the one it listens on (e.g. a proxy in front of it, as `ferromq chaos`
    /// runs): the broker's brokerIP1 and brokerAdvertisedPort. It still listens on 127.0.0.1.
    #[arg(long, value_name = "ADDR")]
    advertise: Option<SocketAddr>,
    /// A half message undecided this long is checked back with its producer, ms (RocketMQ
    /// transactionTimeOut).
    #[arg(long, value_name = "MS", default_value_t = 6_000)]
    transaction_timeout_ms: u64,
    /// How often the transaction checker runs, ms (RocketMQ transactionCheckInterval).
    #[arg(long, value_name = "MS", default_value_t = 60_000)]
    transaction_check_interval_ms: u64,
    /// Check-backs of a half before it is discarded (RocketMQ transactionCheckMax).
    #[arg(long, value_name = "N", default_value_t = 15)]
    transaction_check_max: u32,
    /// Turn ACL on (aclEnable) with this accounts file (plain_acl.yml's shape), for the broker
    /// and the name server's writes; the broker registers signed by the file's first admin
    /// account (by access key order), so the file needs one.
    #[arg(long, value_name = "FILE")]
    acl_file: Option<PathBuf>,
    /// TLS on the name server and broker ports (tls.server.mode): disabled, permissive or
    /// enforcing. The broker registers with the name server over TLS, trusting --tls-cert.
    #[arg(long, value_name = "MODE", default_value = "disabled")]
    tls_mode: String,
    /// PEM certificate chain of both ports (tls.server.certPath); it must carry 127.0.0.1.
    #[arg(long, value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of both ports (tls.server.keyPath).
    #[arg(long, value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// How pull replies carry messages (RocketMQ transferMsgByHeap): true (default) reads each
    /// record into memory and verifies its CRC; false sends plain-TCP pull replies from the
    /// CommitLog files with sendfile (zero copy), checking each record's head and tail but
    /// not its body CRC. Changeable at run time (updateBrokerConfig).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    transfer_msg_by_heap: bool,
}

/// The ACL of a standalone: the accounts and the admin account the broker registers with.
fn standalone_acl(
    args: &StandaloneArgs,
) -> Result<Option<(std::sync::Arc<ferromq_acl::Acl>, String, String)>> {
    let Some(path) = &args.acl_file else {
        return Ok(None);
    };
    let acl = ferromq_acl::Acl::load(path).context("starting with ACL on")?;
    let accounts = acl.current();
    let mut admins: Vec<_> = accounts.accounts.values().filter(|a| a.admin).collect();
    admins.sort_by(|a, b| a.access_key.cmp(&b.access_key));
    let Some(admin) = admins.first() else {
        anyhow::bail!(
            "ACL accounts file {} has no admin account: the standalone broker registers with \
             the name server signed by one",
            path.display()
        );
    };
    let (access, secret) = (admin.access_key.clone(), admin.secret_key.clone());
    Ok(Some((std::sync::Arc::new(acl), access, secret)))
}

/// Runs `ferromq standalone`.
pub fn run(args: &StandaloneArgs) -> Result<()> {
    if args.check {
        return check(args);
    }
    if args.repair {
        return repair(args);
    }
    let open_files = crate::fd_limit::raise_for_server();
    let runtime = crate::runtime()?;
    runtime.block_on(serve(args, &open_files))
}

/// Exit status of `--check` when recovery would change the store.
const CHECK_FOUND_WORK: i32 = 2;

fn check(args: &StandaloneArgs) -> Result<()> {
    let mut config = StoreConfig::new(&args.data_dir);
    config.flush_disk_type = args.flush.disk_type();
    let scope = if args.full {
        CheckScope::Full
    } else {
        CheckScope::Recovery
    };
    let report = check_store(&config, scope)
        .with_context(|| format!("checking the store at {}", args.data_dir.display()))?;
    let root = std::fs::canonicalize(&args.data_dir).unwrap_or_else(|_| args.data_dir.clone());
    let mut out = report::check_json(&report);
    out["data_dir"] = json!(root.display().to_string());
    println!("{out}");
    use std::io::Write;
    std::io::stdout().flush().context("writing to stdout")?;
    if !report.is_clean() {
        std::process::exit(CHECK_FOUND_WORK);
    }
    Ok(())
}

fn repair(args: &StandaloneArgs) -> Result<()> {
    let mut config = StoreConfig::new(&args.data_dir);
    config.flush_disk_type = args.flush.disk_type();
    let store = MessageStore::open(config)
        .with_context(|| format!("opening the store at {}", args.data_dir.display()))?;
    let root = std::fs::canonicalize(&args.data_dir).unwrap_or_else(|_| args.data_dir.clone());
    let mut out = report::recovery_json(store.recovery_report());
    out["data_dir"] = json!(root.display().to_string());
    out["flush"] = json!(args.flush.name());
    out["stats"] = report::stats_json(&store.stats());
    println!("{out}");
    store.close().context("closing the store")
}

impl StandaloneArgs {
    /// The flags `argv` (without the program and subcommand names) give, for commands that
    /// run a standalone in-process (`ferromq bench alloc`) exactly as the command line would.
    pub fn from_flags(argv: &[&str]) -> Result<StandaloneArgs> {
        use clap::Parser;
        /// A parser for the flags alone.
        #[derive(Debug, clap::Parser)]
        struct Flags {
            #[command(flatten)]
            args: StandaloneArgs,
        }
        let argv = std::iter::once("standalone").chain(argv.iter().copied());
        Ok(Flags::try_parse_from(argv)
            .context("standalone flags")?
            .args)
    }
}

/// A name server and a broker serving, started by [`start_servers`].
pub struct Servers {
    /// The name server's address.
    pub namesrv_addr: SocketAddr,
    /// The broker.
    pub broker: Broker,
    stop_namesrv: tokio::sync::oneshot::Sender<()>,
    namesrv_task: tokio::task::JoinHandle<()>,
}

impl Servers {
    /// Stops the broker (unregister, flush, checkpoint), then the name server (bounded).
    pub async fn stop(self) -> Result<()> {
        let stopped = self.broker.shutdown().await.context("stopping the broker");
        let _ = self.stop_namesrv.send(());
        let _ = tokio::time::timeout(Duration::from_secs(5), self.namesrv_task).await;
        stopped
    }
}

async fn serve(args: &StandaloneArgs, open_files: &crate::fd_limit::Outcome) -> Result<()> {
    let mut signals = crate::ShutdownSignals::install()?;
    let servers = start_servers(args).await?;
    let broker = &servers.broker;
    broker
        .context()
        .metrics
        .open_files
        .set(crate::fd_limit::status(open_files));
    eprintln!(
        "ferromq standalone: {}",
        crate::fd_limit::describe(open_files)
    );
    if let Some(addr) = broker.metrics_addr() {
        eprintln!("ferromq standalone: metrics http://{addr}/metrics");
    }
    if let Some(addr) = broker.grpc_addr() {
        eprintln!("ferromq standalone: grpc {addr} (RocketMQ 5.x clients: endpoints = {addr})");
    }
    let report = broker.context().store.recovery_report().clone();
    for line in report::recovery_lines(&report) {
        eprintln!("{line}");
    }
    let root = std::fs::canonicalize(&args.data_dir).unwrap_or_else(|_| args.data_dir.clone());
    println!(
        "ferromq standalone: namesrv {} broker {} data {}",
        servers.namesrv_addr,
        broker.local_addr(),
        root.display()
    );
    use std::io::Write;
    std::io::stdout().flush().context("writing to stdout")?;
    let reason = signals.recv().await;
    tracing::info!(%reason, "shutting down");
    servers.stop().await?;
    eprintln!("ferromq standalone stopped cleanly");
    Ok(())
}

/// Starts the name server and the broker `args` describe (what `ferromq standalone` serves).
pub async fn start_servers(args: &StandaloneArgs) -> Result<Servers> {
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let acl = standalone_acl(args)?;
    let tls = crate::security::server_tls(
        &args.tls_mode,
        args.tls_cert.as_deref(),
        args.tls_key.as_deref(),
    )?;
    let tls_on = tls.acceptor().is_some();
    let namesrv = NameServer::bind(NamesrvConfig {
        listen: SocketAddr::new(loopback, args.namesrv_port),
        ..NamesrvConfig::default()
    })
    .await
    .context("starting the name server")?;
    let namesrv = match &acl {
        Some((acl, _, _)) => namesrv.with_acl(acl.clone(), ferromq_acl::RELOAD_INTERVAL_DEFAULT),
        None => namesrv,
    };
    let namesrv = namesrv.with_tls(tls);
    let namesrv_addr = namesrv.local_addr();
    let (stop_namesrv, namesrv_stopped) = tokio::sync::oneshot::channel::<()>();
    let namesrv_task = tokio::spawn(namesrv.run(async move {
        let _ = namesrv_stopped.await;
    }));
    // --advertise registers a different address (a proxy in front of the broker, as
    // `ferromq chaos` runs) through brokerIP1 and brokerAdvertisedPort; the broker still
    // listens on loopback only.
    let config = BrokerConfig {
        broker_ip1: args.advertise.map_or(loopback, |addr| addr.ip()),
        bind_address: Some(loopback),
        broker_advertised_port: args.advertise.map(|addr| addr.port()),
        listen_port: args.broker_port,
        grpc_listen_port: args.grpc_port,
        // A standalone broker has no slaves: its HA port is any free one (logged at start),
        // so a restart on a fixed --broker-port never depends on --broker-port + 1 being free.
        ha_listen_port: Some(0),
        namesrv_addr: namesrv_addr.to_string(),
        store_path_root_dir: args.data_dir.clone(),
        flush_disk_type: match args.flush {
            Flush::Sync => "SYNC_FLUSH".into(),
            Flush::Async => "ASYNC_FLUSH".into(),
        },
        auto_create_topic_enable: !args.no_auto_create_topic,
        metrics_port: args.metrics_port,
        transaction_time_out: args.transaction_timeout_ms,
        transaction_check_interval: args.transaction_check_interval_ms,
        transaction_check_max: args.transaction_check_max,
        acl_enable: acl.is_some(),
        acl_file: args.acl_file.clone(),
        inner_access_key: acl.as_ref().map(|(_, access, _)| access.clone()),
        inner_secret_key: acl.as_ref().map(|(_, _, secret)| secret.clone()),
        tls_server_mode: args.tls_mode.clone(),
        tls_server_cert_path: args.tls_cert.clone(),
        tls_server_key_path: args.tls_key.clone(),
        tls_enable: tls_on,
        tls_client_trust_cert_path: args.tls_cert.clone().filter(|_| tls_on),
        transfer_msg_by_heap: args.transfer_msg_by_heap,
        ..BrokerConfig::default()
    };
    let broker = Broker::start(config).await.context("starting the broker")?;
    Ok(Servers {
        namesrv_addr,
        broker,
        stop_namesrv,
        namesrv_task,
    })
}
