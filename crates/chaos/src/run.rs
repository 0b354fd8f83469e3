//! One chaos run: start the servers, run the workload, inject the seeded faults, heal, drain,
//! and hand back the recorded history.
//!
//! Phases, in order (each recorded or visible in the progress line):
//! 1. **setup** — a temporary directory the run owns; for `single`, a [`FaultProxy`] and
//!    `ferromq standalone` registering the proxy's address as the broker's, so that clients
//!    reach the broker only through the proxy (name-server traffic goes direct); for
//!    `replicated` and `ha`, a [`ChaosCluster`] with a proxy on every link and a
//!    [`FailoverWatch`]; the topic; consumers, observer, producers.
//! 2. **faults** — the schedule of [`crate::faults::schedule`] (faults one after another, or
//!    two at once with `overlap`), carried out by an [`Injector`] for `seconds`; every
//!    injection and healing is an `Op::Fault`, every failover an `Op::Failover`.
//! 3. **drain** — everything healed, producers stopped, then `DrainStart`; consumers keep
//!    going until every acknowledged value was delivered (`DrainEnd { complete: true }`), or
//!    the deadline passes, or nothing new arrives for [`DRAIN_STALL`] while the group's
//!    committed offsets equal the queues' max offsets (nothing left to read: whatever is
//!    still missing is lost) → `DrainEnd { complete: false }`.
//! 4. **teardown** — consumers shut down, the broker's offset history is read, the server is
//!    stopped, the directory removed.
//!
//! Invariants: every wait is bounded; on every path out — success, error, or the future being
//! dropped (Ctrl-C) — child processes are killed ([`crate::nodes::Node`]'s drop) and the
//! directory removed ([`tempfile::TempDir`]'s drop).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::admin::{history_regressions, offline_resets, Admin, AdminError};
use crate::cluster::{ChaosCluster, ClusterError, ClusterSpec, CLUSTER_NAME};
use crate::failovers::FailoverWatch;
use crate::faults::{schedule, FaultKind, PlannedFault, ScheduleSpec};
use crate::history::{History, Op, Queue};
use crate::inject::{FaultError, Injector};
use crate::nodes::{Flush, NodeError, Standalone};
use crate::observer::Observer;
use crate::proxy::FaultProxy;
use crate::recorder::{Recorder, Totals};
use crate::servers::Servers;
use crate::topology::{MasterMode, Topology};
use crate::workload::consumers::Consumers;
use crate::workload::producer::ProducerTask;
use crate::workload::{Shared, Target};

/// Topic of every run.
pub const TOPIC: &str = "ChaosTopic";
/// Consumer group of every run.
pub const GROUP: &str = "chaos-group";
/// How long the drain may see no new delivery, with nothing left to read, before it ends.
pub const DRAIN_STALL: Duration = Duration::from_secs(5);
/// How often the observer reads committed and max offsets.
pub const OBSERVE_PERIOD: Duration = Duration::from_millis(500);

/// Settings of a run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The `ferromq` binary (for `standalone` and `admin`).
    pub program: PathBuf,
    /// Seed of the fault schedule.
    pub seed: u64,
    /// Length of the fault phase.
    pub seconds: u64,
    /// Fault kinds to inject.
    pub faults: Vec<FaultKind>,
    /// What runs: `single`, `replicated` or `ha`.
    pub topology: Topology,
    /// How masters acknowledge (cluster topologies).
    pub master: MasterMode,
    /// Plan two faults at once (see [`crate::faults::schedule`]).
    pub overlap: bool,
    /// Every broker's flush policy.
    pub flush: Flush,
    /// Producers.
    pub producers: u32,
    /// Consumers (even slots pull, odd slots push).
    pub consumers: u32,
    /// Queues of the topic.
    pub queues: u32,
    /// Pause between two sends of one producer.
    pub pace: Duration,
    /// Longest drain.
    pub drain_timeout: Duration,
    /// Print a progress line on stderr every second.
    pub progress: bool,
    /// Keep the run's directory (broker data and log) instead of removing it, when the run
    /// completes (for a failed check's post-mortem).
    pub keep_dir: bool,
}

impl RunConfig {
    /// A run of `seconds` with every fault kind, sync flush, 2 producers, 2 consumers.
    pub fn new(program: PathBuf, seed: u64, seconds: u64) -> RunConfig {
        RunConfig {
            program,
            seed,
            seconds,
            faults: FaultKind::ALL.to_vec(),
            topology: Topology::Single,
            master: MasterMode::Sync,
            overlap: false,
            flush: Flush::Sync,
            producers: 2,
            consumers: 2,
            queues: 4,
            pace: Duration::from_millis(5),
            drain_timeout: Duration::from_secs(40),
            progress: false,
            keep_dir: false,
        }
    }

    /// The fault schedule this configuration runs.
    pub fn schedule(&self) -> Vec<PlannedFault> {
        schedule(&ScheduleSpec {
            seed: self.seed,
            seconds: self.seconds,
            kinds: self.faults.clone(),
            consumers: self.consumers,
            topology: self.topology,
            overlap: self.overlap,
        })
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// [`RunError::Config`] naming the first bad setting.
    pub fn validate(&self) -> Result<(), RunError> {
        let bad = |what: &str| Err(RunError::Config(what.to_string()));
        if self.seconds == 0 {
            return bad("--seconds must be at least 1");
        }
        if self.producers == 0 {
            return bad("--producers must be at least 1");
        }
        if self.consumers == 0 {
            return bad("--consumers must be at least 1");
        }
        if self.queues == 0 {
            return bad("the topic needs at least one queue");
        }
        Ok(())
    }
}

/// Why a run could not be carried out (a checker failure is not a run error).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Bad settings.
    #[error("{0}")]
    Config(String),
    /// A file-system or network setup step failed.
    #[error("{what}: {source}")]
    Io {
        /// The step.
        what: &'static str,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A server process could not be started, signalled or restarted.
    #[error(transparent)]
    Node(#[from] NodeError),
    /// The cluster could not be started.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// An admin command needed for setup failed.
    #[error(transparent)]
    Admin(#[from] AdminError),
    /// A client could not be configured.
    #[error("client setup: {0}")]
    Client(#[from] ferromq_client::ClientError),
}

/// What the broker's own offset history says about the run's commits.
#[derive(Debug, Clone, Default)]
pub struct OffsetHistoryCheck {
    /// Events read.
    pub events: usize,
    /// Commits lower than the previous event of their queue: (queue, previous, offset).
    pub regressions: Vec<(Queue, u64, u64)>,
    /// Backward commits the broker recorded as offline resets (no online consumer).
    pub offline_resets: Vec<(Queue, u64)>,
    /// Why the history could not be read, if it could not.
    pub error: Option<String>,
}

/// Everything a run produced.
#[derive(Debug)]
pub struct RunOutcome {
    /// The recorded history.
    pub history: History,
    /// Totals at the end.
    pub totals: Totals,
    /// Injected faults per kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// The schedule that was run.
    pub schedule: Vec<PlannedFault>,
    /// True when every acknowledged value was delivered before the drain ended.
    pub drain_complete: bool,
    /// How long the drain took.
    pub drain: Duration,
    /// Messages whose body was not a chaos value.
    pub foreign_messages: u64,
    /// Faults that could not be carried out (e.g. a reset the broker refused).
    pub fault_errors: Vec<FaultError>,
    /// Failovers the watch recorded (cluster topologies).
    pub failovers: u64,
    /// The broker's offset history, checked.
    pub offset_history: OffsetHistoryCheck,
    /// Wall time of the whole run.
    pub elapsed: Duration,
    /// The run's directory, when it was kept.
    pub kept_dir: Option<PathBuf>,
}

/// Shared phase name for the progress line.
type Phase = Arc<Mutex<&'static str>>;

fn set_phase(phase: &Phase, name: &'static str) {
    *phase.lock().unwrap_or_else(|p| p.into_inner()) = name;
}

/// Runs one chaos run.
///
/// # Errors
/// [`RunError`] when the run could not be carried out; the servers are killed and the
/// directory removed before it returns.
pub async fn run(config: &RunConfig) -> Result<RunOutcome, RunError> {
    config.validate()?;
    let started = Instant::now();
    let dir = tempfile::Builder::new()
        .prefix("ferromq-chaos-")
        .tempdir()
        .map_err(|source| RunError::Io {
            what: "creating the run directory",
            source,
        })?;
    let mut servers = start_servers(config, dir.path()).await?;
    let admin = Admin::new(&config.program, &servers.namesrvs());
    create_topic(&servers, &admin, config.queues).await?;
    let target = Target {
        namesrvs: servers.namesrvs(),
        topic: TOPIC.to_string(),
        group: GROUP.to_string(),
    };
    let recorder = Arc::new(Recorder::new());
    let watch = match &servers {
        Servers::Cluster(cluster) => {
            let (groups, names) = cluster.broker_addresses();
            Some(FailoverWatch::spawn(
                cluster.controller_client(),
                groups,
                names,
                recorder.clone(),
            ))
        }
        Servers::Single { .. } => None,
    };
    let shared = Arc::new(Shared::default());
    let phase: Phase = Arc::new(Mutex::new("setup"));
    let _progress = config
        .progress
        .then(|| Progress::spawn(recorder.clone(), phase.clone()));
    let mut consumers =
        Consumers::start(config.consumers, &target, recorder.clone(), shared.clone()).await?;
    let mut observer = Observer::spawn(&target, recorder.clone(), OBSERVE_PERIOD)?;
    let mut producers = Vec::new();
    for id in 0..config.producers {
        producers.push(ProducerTask::spawn(
            id,
            &target,
            recorder.clone(),
            config.pace,
        )?);
    }

    set_phase(&phase, "faults");
    let plan = config.schedule();
    let mut injector = Injector::new(
        &mut servers,
        &mut consumers,
        &admin,
        &recorder,
        (GROUP, TOPIC),
    );
    injector.run(&plan, started).await?;
    injector
        .wait_until(started + Duration::from_secs(config.seconds))
        .await;
    injector.heal_all().await?;
    let fault_errors = injector.take_errors();
    drop(injector);

    set_phase(&phase, "drain");
    for producer in &mut producers {
        producer.stop().await;
    }
    recorder.record(Op::DrainStart);
    let drain_started = Instant::now();
    let drain_complete = drain(&recorder, &observer, config.drain_timeout).await;
    recorder.record(Op::DrainEnd {
        complete: drain_complete,
    });
    let drain = drain_started.elapsed();

    set_phase(&phase, "teardown");
    consumers.shutdown().await;
    // One more look at the offsets the consumers' final commits left.
    tokio::time::sleep(OBSERVE_PERIOD * 2).await;
    observer.stop().await;
    drop(watch);
    let offset_history = check_offset_history(&admin).await;
    servers.stop().await?;
    let history = recorder.history();
    let failovers = history
        .events
        .iter()
        .filter(|e| matches!(e.op, Op::Failover { .. }))
        .count() as u64;
    let mut outcome = RunOutcome {
        history,
        totals: recorder.totals(),
        faults: recorder.fault_kinds(),
        schedule: plan,
        drain_complete,
        drain,
        foreign_messages: shared
            .foreign_messages
            .load(std::sync::atomic::Ordering::Relaxed),
        fault_errors,
        failovers,
        offset_history,
        elapsed: started.elapsed(),
        kept_dir: None,
    };
    drop(servers);
    if config.keep_dir {
        outcome.kept_dir = Some(dir.keep());
    } else {
        dir.close().map_err(|source| RunError::Io {
            what: "removing the run directory",
            source,
        })?;
    }
    Ok(outcome)
}

/// Starts what `config.topology` names under `dir`.
async fn start_servers(config: &RunConfig, dir: &Path) -> Result<Servers, RunError> {
    if config.topology == Topology::Single {
        // The proxy needs a target to start; the real one is known once the broker runs.
        let placeholder = SocketAddr::from(([127, 0, 0, 1], 9));
        let proxy = FaultProxy::start(placeholder)
            .await
            .map_err(|source| RunError::Io {
                what: "starting the fault proxy",
                source,
            })?;
        let server = Standalone::start(
            &config.program,
            &dir.join("data"),
            config.flush,
            proxy.local_addr(),
            dir.join("standalone.log"),
        )
        .await?;
        proxy.set_target(server.broker);
        return Ok(Servers::Single {
            server: Box::new(server),
            proxy,
        });
    }
    let spec = ClusterSpec {
        topology: config.topology,
        master: config.master,
        flush: config.flush,
    };
    Ok(Servers::Cluster(
        ChaosCluster::start(&config.program, dir, spec).await?,
    ))
}

async fn create_topic(servers: &Servers, admin: &Admin, queues: u32) -> Result<(), RunError> {
    match servers {
        Servers::Single { server, .. } => admin.update_topic(TOPIC, queues, server.broker).await?,
        Servers::Cluster(_) => {
            admin
                .update_topic_on_cluster(TOPIC, queues, CLUSTER_NAME)
                .await?
        }
    }
    Ok(())
}

/// Waits for the drain to end; true when every acknowledged value was delivered.
async fn drain(recorder: &Recorder, observer: &Observer, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let mut deliveries = recorder.totals().deliveries;
    let mut quiet_since = Instant::now();
    loop {
        let totals = recorder.totals();
        if totals.pending == 0 {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        if totals.deliveries != deliveries {
            deliveries = totals.deliveries;
            quiet_since = Instant::now();
        } else if quiet_since.elapsed() >= DRAIN_STALL && observer.caught_up() {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn check_offset_history(admin: &Admin) -> OffsetHistoryCheck {
    match admin.offset_history(GROUP, TOPIC).await {
        Ok(events) => OffsetHistoryCheck {
            events: events.len(),
            regressions: history_regressions(&events),
            offline_resets: offline_resets(&events)
                .into_iter()
                .map(|e| (e.queue.clone(), e.offset))
                .collect(),
            error: None,
        },
        Err(error) => OffsetHistoryCheck {
            error: Some(error.to_string()),
            ..OffsetHistoryCheck::default()
        },
    }
}

/// The progress line: every second on stderr, until dropped.
struct Progress(tokio::task::JoinHandle<()>);

impl Progress {
    fn spawn(recorder: Arc<Recorder>, phase: Phase) -> Progress {
        Progress(tokio::spawn(async move {
            let started = Instant::now();
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let t = recorder.totals();
                let name = *phase.lock().unwrap_or_else(|p| p.into_inner());
                eprintln!(
                    "chaos {:6.1}s {name:8} acked {} delivered {} pending {} indeterminate {} \
                     failed {} commits {} faults {}",
                    started.elapsed().as_secs_f64(),
                    t.acked,
                    t.delivered,
                    t.pending,
                    t.indeterminate,
                    t.failed,
                    t.commits_ok,
                    t.faults,
                );
            }
        }))
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.0.abort();
    }
}
