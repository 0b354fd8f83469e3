//! `ferromq cluster`: a whole HA cluster on 127.0.0.1 from one command — a name server,
//! `--controllers` controllers (a Raft group) and `--groups` broker groups of `--replicas`
//! brokers each in controller mode — for trying failover on one machine, and for tests.
//!
//! Every node is a child process of this binary (`ferromq namesrv|controller|broker`), so a
//! test or a user can `kill -9` any one of them and watch the controller elect a new master.
//! Configs, data and each node's log live under `--dir`. Once every node listens it prints one
//! line per node and then `ferromq cluster: ready <json>` (the JSON names every node's kind,
//! name, address and pid). SIGINT or SIGTERM stops brokers, then controllers, then the name
//! server, each with SIGTERM and a bounded wait ([`STOP_WAIT`]) before SIGKILL.
//!
//! The cluster does not restart nodes that die: what happens after a kill is the point.

use std::fs;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::json;

use crate::Flush;

/// How long every node together may take to start listening.
const READY_WAIT: Duration = Duration::from_secs(60);
/// How long one node may take to stop after SIGTERM before it is killed.
const STOP_WAIT: Duration = Duration::from_secs(15);
/// Most controllers, groups and replicas per group the command starts.
const NODES_MAX: usize = 9;

/// The master role the brokers take when elected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MasterRole {
    /// SYNC_MASTER: a write is acknowledged once every in-sync replica holds it.
    Sync,
    /// ASYNC_MASTER: replicas follow asynchronously.
    Async,
}

/// Flags of `ferromq cluster`.
#[derive(Debug, clap::Args)]
pub struct ClusterArgs {
    /// Controllers in the Raft group (1, 3, 5, ...).
    #[arg(long, default_value_t = 3)]
    pub(crate) controllers: usize,
    /// Broker groups (broker names `broker-0`, `broker-1`, ...).
    #[arg(long, default_value_t = 1)]
    pub(crate) groups: usize,
    /// Brokers per group (one master, the rest slaves).
    #[arg(long, default_value_t = 3)]
    pub(crate) replicas: usize,
    /// The master role.
    #[arg(long, value_enum, default_value_t = MasterRole::Sync)]
    pub(crate) role: MasterRole,
    /// How appends become durable on each broker.
    #[arg(long, value_enum, default_value_t = Flush::Async)]
    pub(crate) flush: Flush,
    /// Directory for configs, data and logs (created; reused across runs, so a restarted
    /// cluster recovers its data).
    #[arg(long, value_name = "DIR", default_value = "./cluster")]
    pub(crate) dir: PathBuf,
    /// Name server port (0 picks a free one).
    #[arg(long, default_value_t = 9876)]
    pub(crate) namesrv_port: u16,
    /// Allow electing a master outside the in-sync set (may lose acknowledged writes).
    #[arg(long)]
    pub(crate) enable_elect_unclean_master: bool,
    /// Extra `key = value` TOML lines for every broker config (e.g. `minInSyncReplicas = 2`).
    #[arg(long = "broker-config", value_name = "LINE")]
    pub(crate) broker_config: Vec<String>,
}

/// One node of the cluster.
#[derive(Debug)]
struct Node {
    kind: &'static str,
    name: String,
    addr: SocketAddr,
    /// `None` while killed.
    child: Option<Child>,
    log: PathBuf,
    /// Its `ferromq` arguments.
    argv: Vec<String>,
}

/// Runs `ferromq cluster`.
pub fn run(args: &ClusterArgs) -> Result<()> {
    let mut cluster = LocalCluster::start(args)?;
    for node in &cluster.nodes {
        println!(
            "ferromq cluster: {} {} {} pid {} log {}",
            node.kind,
            node.name,
            node.addr,
            node.child.as_ref().map_or(0, Child::id),
            node.log.display()
        );
    }
    println!("ferromq cluster: ready {}", cluster.summary());
    let reason = crate::runtime()?.block_on(async {
        let mut signals = crate::ShutdownSignals::install()?;
        anyhow::Ok(signals.recv().await)
    })?;
    tracing::info!(%reason, "stopping the cluster");
    cluster.stop_all();
    Ok(())
}

/// A cluster of child processes on 127.0.0.1 (`ferromq cluster`, `ferromq bench failover`).
/// Dropping it stops every node.
pub struct LocalCluster {
    exe: PathBuf,
    plan: Plan,
    nodes: Vec<Node>,
}

impl LocalCluster {
    /// Writes the configs and starts every node; returns once all listen.
    pub fn start(args: &ClusterArgs) -> Result<LocalCluster> {
        check_sizes(args)?;
        fs::create_dir_all(args.dir.join("logs")).context("creating the cluster directory")?;
        let exe = std::env::current_exe().context("finding the ferromq binary")?;
        let plan = Plan::new(args)?;
        let mut cluster = LocalCluster {
            exe,
            plan,
            nodes: Vec::new(),
        };
        let started = cluster.start_all(args);
        if let Err(error) = started.and_then(|()| wait_ready(cluster.nodes.iter_mut())) {
            cluster.stop_all();
            return Err(error);
        }
        Ok(cluster)
    }

    /// The name server's address.
    pub fn namesrv(&self) -> SocketAddr {
        self.plan.namesrv
    }

    /// The controllers' addresses.
    pub fn controllers(&self) -> &[SocketAddr] {
        &self.plan.controllers
    }

    /// The brokers of group `g`: (name, address).
    pub fn brokers(&self, group: usize) -> Vec<(String, SocketAddr)> {
        let prefix = format!("broker-{group}-");
        self.nodes
            .iter()
            .filter(|n| n.kind == "broker" && n.name.starts_with(&prefix))
            .map(|n| (n.name.clone(), n.addr))
            .collect()
    }

    /// Every node as JSON (kind, name, address, pid; pid 0 for a stopped node).
    pub fn summary(&self) -> serde_json::Value {
        let nodes: Vec<_> = self
            .nodes
            .iter()
            .map(|n| {
                json!({"kind": n.kind, "name": n.name, "addr": n.addr.to_string(),
                       "pid": n.child.as_ref().map_or(0, Child::id), "log": n.log.display().to_string()})
            })
            .collect();
        json!({"namesrv": self.plan.namesrv.to_string(),
               "controllers": self.plan.controller_addr(), "nodes": nodes})
    }

    fn node(&mut self, name: &str) -> Result<&mut Node> {
        self.nodes
            .iter_mut()
            .find(|n| n.name == name)
            .with_context(|| format!("no node named {name}"))
    }

    /// Kills node `name` with SIGKILL and reaps it.
    pub fn kill(&mut self, name: &str) -> Result<()> {
        let node = self.node(name)?;
        if let Some(mut child) = node.child.take() {
            child.kill().with_context(|| format!("killing {name}"))?;
            child.wait().with_context(|| format!("reaping {name}"))?;
        }
        Ok(())
    }

    /// Starts a killed node again on its config and data; returns once it listens.
    pub fn restart(&mut self, name: &str) -> Result<()> {
        let exe = self.exe.clone();
        let node = self.node(name)?;
        if node.child.is_some() {
            bail!("{name} still runs");
        }
        node.child = Some(spawn_child(&exe, &node.argv, &node.log, true)?);
        wait_ready(std::iter::once(node))
    }

    /// Stops every node (brokers, controllers, then the name server).
    pub fn stop_all(&mut self) {
        stop_all(&mut self.nodes);
    }

    fn start_all(&mut self, args: &ClusterArgs) -> Result<()> {
        let logs = args.dir.join("logs");
        let plan = &self.plan;
        let mut specs: Vec<(&'static str, String, SocketAddr, Vec<String>)> = vec![(
            "namesrv",
            "namesrv".into(),
            plan.namesrv,
            vec![
                "namesrv".into(),
                "--listen".into(),
                plan.namesrv.to_string(),
            ],
        )];
        for (i, addr) in plan.controllers.iter().enumerate() {
            let name = format!("n{i}");
            let config = args.dir.join(format!("{name}.controller.toml"));
            let text = format!(
                "controllerDLegerGroup = \"ferromq-controllers\"\n\
                 controllerDLegerPeers = \"{}\"\n\
                 controllerDLegerSelfId = \"{name}\"\n\
                 controllerStorePath = \"{}\"\n\
                 enableElectUncleanMaster = {}\n",
                plan.peers(),
                toml_path(&args.dir.join("controller").join(&name)),
                args.enable_elect_unclean_master,
            );
            fs::write(&config, text).with_context(|| format!("writing {}", config.display()))?;
            let argv = vec![
                "controller".into(),
                "-c".into(),
                config.display().to_string(),
            ];
            specs.push(("controller", name, *addr, argv));
        }
        for (g, group) in plan.brokers.iter().enumerate() {
            for (r, (listen, ha)) in group.iter().enumerate() {
                let name = format!("broker-{g}-r{r}");
                let config = args.dir.join(format!("{name}.broker.toml"));
                fs::write(&config, broker_toml(args, plan, g, *listen, *ha, &name))
                    .with_context(|| format!("writing {}", config.display()))?;
                let argv = vec!["broker".into(), "-c".into(), config.display().to_string()];
                specs.push(("broker", name, *listen, argv));
            }
        }
        for (kind, name, addr, argv) in specs {
            let log = logs.join(format!("{name}.log"));
            let child = spawn_child(&self.exe, &argv, &log, false)
                .with_context(|| format!("starting {kind} {name}"))?;
            self.nodes.push(Node {
                kind,
                name,
                addr,
                child: Some(child),
                log,
                argv,
            });
        }
        Ok(())
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop_all();
    }
}

fn check_sizes(args: &ClusterArgs) -> Result<()> {
    if args.controllers == 0 || args.controllers.is_multiple_of(2) || args.controllers > NODES_MAX {
        bail!(
            "--controllers {}: an odd number from 1 to {NODES_MAX} (a Raft majority)",
            args.controllers
        );
    }
    if !(1..=NODES_MAX).contains(&args.groups) || !(1..=NODES_MAX).contains(&args.replicas) {
        bail!("--groups and --replicas: from 1 to {NODES_MAX}");
    }
    Ok(())
}

/// Every node's addresses, chosen before anything starts (controllers must know their
/// peers).
struct Plan {
    namesrv: SocketAddr,
    controllers: Vec<SocketAddr>,
    /// Per group, per replica: (listen, HA).
    brokers: Vec<Vec<(SocketAddr, SocketAddr)>>,
}

impl Plan {
    fn new(args: &ClusterArgs) -> Result<Plan> {
        let namesrv = if args.namesrv_port == 0 {
            free_port()?
        } else {
            SocketAddr::from(([127, 0, 0, 1], args.namesrv_port))
        };
        let controllers = (0..args.controllers)
            .map(|_| free_port())
            .collect::<Result<_>>()?;
        let brokers = (0..args.groups)
            .map(|_| {
                (0..args.replicas)
                    .map(|_| Ok((free_port()?, free_port()?)))
                    .collect::<Result<_>>()
            })
            .collect::<Result<_>>()?;
        Ok(Plan {
            namesrv,
            controllers,
            brokers,
        })
    }

    fn controller_addr(&self) -> String {
        let addrs: Vec<String> = self.controllers.iter().map(|a| a.to_string()).collect();
        addrs.join(";")
    }

    fn peers(&self) -> String {
        let peers: Vec<String> = self
            .controllers
            .iter()
            .enumerate()
            .map(|(i, a)| format!("n{i}-{a}"))
            .collect();
        peers.join(";")
    }
}

/// A port the OS says is free now (it could be taken before the node binds it; the node then
/// fails to start and the command says so).
fn free_port() -> Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    listener.local_addr().context("finding a free port")
}

fn broker_toml(
    args: &ClusterArgs,
    plan: &Plan,
    group: usize,
    listen: SocketAddr,
    ha: SocketAddr,
    name: &str,
) -> String {
    let role = match args.role {
        MasterRole::Sync => "SYNC_MASTER",
        MasterRole::Async => "ASYNC_MASTER",
    };
    let flush = match args.flush {
        Flush::Sync => "SYNC_FLUSH",
        Flush::Async => "ASYNC_FLUSH",
    };
    let mut text = format!(
        "brokerClusterName = \"FerroCluster\"\n\
         brokerName = \"broker-{group}\"\n\
         brokerIP1 = \"127.0.0.1\"\n\
         listenPort = {}\n\
         grpcListenPort = -1\n\
         haListenPort = {}\n\
         namesrvAddr = \"{}\"\n\
         storePathRootDir = \"{}\"\n\
         brokerRole = \"{role}\"\n\
         flushDiskType = \"{flush}\"\n\
         enableControllerMode = true\n\
         controllerAddr = \"{}\"\n",
        listen.port(),
        ha.port(),
        plan.namesrv,
        toml_path(&args.dir.join("data").join(name)),
        plan.controller_addr(),
    );
    for line in &args.broker_config {
        text.push_str(line);
        text.push('\n');
    }
    text
}

/// A path as a TOML basic string's contents.
fn toml_path(path: &Path) -> String {
    path.display()
        .to_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
}

/// Starts `ferromq <argv>` with its output going to `log` (appended when `append`), dying
/// with this process.
fn spawn_child(exe: &Path, argv: &[String], log: &Path, append: bool) -> Result<Child> {
    let out = fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    let err = out.try_clone().context("opening the node log")?;
    let mut command = Command::new(exe);
    // SAFETY: the closure runs in the forked child before exec and only calls prctl(2),
    // which is async-signal-safe; it allocates nothing and touches no lock.
    unsafe {
        use std::os::unix::process::CommandExt;
        command.pre_exec(|| {
            // A node dies with this command, even when the command is killed with SIGKILL.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command
        .args(argv)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .context("spawning a node")
}

/// Waits until every node accepts connections, or one exits, or [`READY_WAIT`] passes.
fn wait_ready<'a>(nodes: impl Iterator<Item = &'a mut Node>) -> Result<()> {
    let deadline = Instant::now() + READY_WAIT;
    for node in nodes {
        let Some(child) = node.child.as_mut() else {
            continue;
        };
        loop {
            if let Some(status) = child.try_wait().context("watching a node")? {
                let tail = log_tail(&node.log);
                bail!(
                    "{} {} exited ({status}) before listening on {}: {tail}",
                    node.kind,
                    node.name,
                    node.addr
                );
            }
            if TcpStream::connect_timeout(&node.addr, Duration::from_millis(200)).is_ok() {
                break;
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} {} did not listen on {} within {READY_WAIT:?}: {}",
                    node.kind,
                    node.name,
                    node.addr,
                    log_tail(&node.log)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
}

/// The last lines of a node's log, on one line.
fn log_tail(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().rev().take(3).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

/// Stops brokers, then controllers, then the name server: SIGTERM, a bounded wait, SIGKILL.
fn stop_all(nodes: &mut [Node]) {
    for kind in ["broker", "controller", "namesrv"] {
        for node in nodes.iter_mut().filter(|n| n.kind == kind) {
            let Some(child) = node.child.as_mut() else {
                continue;
            };
            if let Ok(Some(_)) = child.try_wait() {
                continue;
            }
            // SAFETY: kill(2) with a pid this process spawned and has not reaped yet (checked
            // just above with try_wait), so the pid cannot name another process.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + STOP_WAIT;
        for node in nodes.iter_mut().filter(|n| n.kind == kind) {
            let Some(mut child) = node.child.take() else {
                continue;
            };
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            if matches!(child.try_wait(), Ok(None)) {
                tracing::warn!(node = %node.name, "did not stop in time; killing it");
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}
