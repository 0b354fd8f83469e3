//! `ferromq bench failover`: how long a master's kill -9 interrupts writes, and what it costs.
//!
//! It starts a local cluster (`ferromq cluster`'s child processes: a name server,
//! `--controllers` controllers, one broker group of `--replicas` brokers in controller mode),
//! keeps `--producers` Rust-client producers sending, and `--kills` times: waits until every
//! replica is in the in-sync set, kills the master with SIGKILL, and measures
//! - **election**: kill → the controller names a new master (epoch + 1);
//! - **failover**: kill → the first send acknowledged by the new master (the store address in
//!   the acknowledged message id), as a producer following routes sees it.
//!
//! Then it restarts the killed broker (it rejoins as a slave) before the next kill.
//!
//! The baseline, measured in the same run, is the producers' throughput and send latency in
//! the steady windows (no failover in progress); the report gives the throughput during the
//! failover windows (kill → first acknowledgement + 1 s) and after, as ratios to it. At the
//! end a consumer drains the topic: acknowledged sends missing are **lost** (must be 0), and
//! values read twice are **duplicates** (sends retried after their first attempt landed),
//! reported per failover.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::value_parser;
use ferromq_client::{
    LitePullConsumer, LitePullConsumerConfig, Message, Producer, ProducerConfig, StartPosition,
};
use ferromq_protocol::controller::client::ControllerClient;
use ferromq_protocol::controller::{GetReplicaInfoRequest, ReplicaInfo};
use ferromq_protocol::remoting::body::route::perm;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::admin::CreateTopicRequestHeader;
use ferromq_protocol::remoting::{RemotingClient, RemotingCommand};
use ferromq_protocol::MessageId;
use serde_json::json;

use super::stats::{ns_to_us, Histogram};
use super::ScratchDir;
use crate::cluster::{ClusterArgs, LocalCluster, MasterRole};
use crate::Flush;

const TOPIC: &str = "FailoverBench";
const QUEUES: i32 = 4;
/// Bound on waiting for an election, a first acknowledgement or a rejoin.
const PHASE_WAIT: Duration = Duration::from_secs(60);
/// How long after the first acknowledgement a failover window lasts (the producers'
/// catch-up).
const SETTLE: Duration = Duration::from_secs(1);

/// Flags of `ferromq bench failover`.
#[derive(Debug, Clone, clap::Args)]
pub struct FailoverBenchArgs {
    /// Master kills.
    #[arg(long, default_value_t = 20, value_parser = value_parser!(u32).range(1..=1000))]
    kills: u32,
    /// Controllers.
    #[arg(long, default_value_t = 3)]
    controllers: usize,
    /// Brokers in the group.
    #[arg(long, default_value_t = 3)]
    replicas: usize,
    /// The master role.
    #[arg(long, value_enum, default_value_t = MasterRole::Sync)]
    role: MasterRole,
    /// How appends become durable.
    #[arg(long, value_enum, default_value_t = Flush::Async)]
    flush: Flush,
    /// Producers, each sending one message at a time.
    #[arg(long, default_value_t = 4, value_parser = value_parser!(u32).range(1..=64))]
    producers: u32,
    /// Body bytes.
    #[arg(long, default_value_t = 128, value_parser = value_parser!(u64).range(16..=65_536))]
    size: u64,
    /// Steady seconds before each kill.
    #[arg(long, default_value_t = 2)]
    steady_seconds: u64,
    /// Print the result as one JSON line.
    #[arg(long)]
    json: bool,
}

/// One acknowledged send: when, by which store, how long it took, its body id.
#[derive(Debug, Clone, Copy)]
struct Ack {
    at: Instant,
    store: SocketAddr,
    latency_ns: u64,
}

#[derive(Default)]
struct Shared {
    acks: Mutex<Vec<Ack>>,
    acked_ids: Mutex<Vec<u64>>,
    errors: AtomicU64,
    stop: AtomicBool,
}

/// One kill's figures.
#[derive(Debug, Clone, Copy)]
struct Failover {
    killed_at: Instant,
    elected: Duration,
    first_ack: Duration,
}

/// Runs `ferromq bench failover`.
pub fn run(args: &FailoverBenchArgs) -> Result<()> {
    let scratch = ScratchDir::create(None)?;
    let cluster_args = ClusterArgs {
        controllers: args.controllers,
        groups: 1,
        replicas: args.replicas,
        role: args.role,
        flush: args.flush,
        dir: scratch.path().to_path_buf(),
        namesrv_port: 0,
        enable_elect_unclean_master: false,
        broker_config: Vec::new(),
    };
    let mut cluster = LocalCluster::start(&cluster_args).context("starting the cluster")?;
    let outcome = crate::runtime()?.block_on(measure(args, &mut cluster));
    cluster.stop_all();
    let report = outcome?;
    if args.json {
        println!("{report}");
    } else {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(())
}

async fn measure(
    args: &FailoverBenchArgs,
    cluster: &mut LocalCluster,
) -> Result<serde_json::Value> {
    let controller = ControllerClient::new(cluster.controllers().to_vec());
    let info = wait_info(&controller, 1, args.replicas, |_| true).await?;
    create_topic(master_addr(&info)?).await?;
    let shared = Arc::new(Shared::default());
    let started = Instant::now();
    let producers = start_producers(args, cluster.namesrv(), &shared)?;
    let mut failovers = Vec::new();
    let mut epoch = info.master_epoch;
    for kill in 0..args.kills {
        let info = wait_info(&controller, epoch, args.replicas, |_| true).await?;
        tokio::time::sleep(Duration::from_secs(args.steady_seconds)).await;
        let victim = broker_named(cluster, master_addr(&info)?)?;
        cluster.kill(&victim)?;
        let killed_at = Instant::now();
        let new = wait_info(&controller, info.master_epoch + 1, 1, |i| {
            i.master_broker_id.is_some() && i.master_broker_id != info.master_broker_id
        })
        .await?;
        let elected = killed_at.elapsed();
        let new_master = master_addr(&new)?;
        let first_ack = first_ack_by(&shared, new_master, killed_at).await?;
        epoch = new.master_epoch;
        tracing::info!(kill, ?elected, ?first_ack, "failover");
        failovers.push(Failover {
            killed_at,
            elected,
            first_ack,
        });
        cluster.restart(&victim)?;
    }
    tokio::time::sleep(SETTLE).await;
    shared.stop.store(true, Ordering::Relaxed);
    for producer in producers {
        let _ = producer.await;
    }
    let finished = Instant::now();
    let (delivered, duplicates) = drain(cluster.namesrv(), &shared).await?;
    Ok(report(
        args, &shared, &failovers, started, finished, delivered, duplicates,
    ))
}

fn master_addr(info: &ReplicaInfo) -> Result<SocketAddr> {
    info.master_address
        .as_deref()
        .context("the controller names no master address")?
        .parse()
        .context("the master address")
}

fn broker_named(cluster: &LocalCluster, addr: SocketAddr) -> Result<String> {
    cluster
        .brokers(0)
        .into_iter()
        .find(|(_, a)| *a == addr)
        .map(|(name, _)| name)
        .with_context(|| format!("no broker of the cluster listens on {addr}"))
}

/// Waits for a group state of at least `epoch` with `members` in sync that `accept` takes.
async fn wait_info(
    controller: &ControllerClient,
    epoch: u64,
    members: usize,
    accept: impl Fn(&ReplicaInfo) -> bool,
) -> Result<ReplicaInfo> {
    let deadline = Instant::now() + PHASE_WAIT;
    loop {
        let info: Result<ReplicaInfo, _> = controller
            .call(
                request::CONTROLLER_GET_REPLICA_INFO,
                &GetReplicaInfoRequest {
                    broker_name: "broker-0".into(),
                },
                Duration::from_secs(2),
            )
            .await;
        if let Ok(info) = info {
            if info.master_broker_id.is_some()
                && info.master_epoch >= epoch
                && info.sync_state_set.len() >= members
                && accept(&info)
            {
                return Ok(info);
            }
        }
        if Instant::now() >= deadline {
            bail!("no master of epoch >= {epoch} with {members} in sync within {PHASE_WAIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn create_topic(master: SocketAddr) -> Result<()> {
    let client = RemotingClient::connect(master, Duration::from_secs(3)).await?;
    let header =
        CreateTopicRequestHeader::as_java_sends(TOPIC, QUEUES, QUEUES, perm::READ | perm::WRITE);
    let reply = client
        .invoke(
            RemotingCommand::request_with_header(request::UPDATE_AND_CREATE_TOPIC, &header),
            Duration::from_secs(10),
        )
        .await?;
    if reply.code != response::SUCCESS {
        bail!("creating {TOPIC}: {} {:?}", reply.code, reply.remark);
    }
    Ok(())
}

fn start_producers(
    args: &FailoverBenchArgs,
    namesrv: SocketAddr,
    shared: &Arc<Shared>,
) -> Result<Vec<tokio::task::JoinHandle<()>>> {
    let mut tasks = Vec::new();
    for p in 0..args.producers {
        let producer = Producer::start(ProducerConfig {
            namesrv_addrs: vec![namesrv],
            group: "failover-bench".into(),
            ..ProducerConfig::default()
        })?;
        let shared = shared.clone();
        let size = args.size as usize;
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !shared.stop.load(Ordering::Relaxed) {
                let id = (u64::from(p) << 40) | n;
                n += 1;
                let mut body = vec![b'x'; size];
                body[..8].copy_from_slice(&id.to_be_bytes());
                let sent = Instant::now();
                match producer.send(Message::new(TOPIC, body)).await {
                    Ok(result) => {
                        let store = MessageId::decode(&result.offset_msg_id)
                            .map(|m| m.store_host)
                            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
                        let at = Instant::now();
                        shared.acks.lock().expect("acks").push(Ack {
                            at,
                            store,
                            latency_ns: at.duration_since(sent).as_nanos() as u64,
                        });
                        shared.acked_ids.lock().expect("ids").push(id);
                    }
                    Err(_) => {
                        shared.errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            producer.shutdown();
        }));
    }
    Ok(tasks)
}

/// Time from `since` to the first send acknowledged by `master`.
async fn first_ack_by(shared: &Shared, master: SocketAddr, since: Instant) -> Result<Duration> {
    let deadline = Instant::now() + PHASE_WAIT;
    loop {
        let found = shared
            .acks
            .lock()
            .expect("acks")
            .iter()
            .rev()
            .take_while(|a| a.at >= since)
            .filter(|a| a.store == master)
            .map(|a| a.at)
            .min();
        if let Some(at) = found {
            return Ok(at.duration_since(since));
        }
        if Instant::now() >= deadline {
            bail!("no send acknowledged by the new master {master} within {PHASE_WAIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Reads the whole topic in a fresh group; returns (distinct acknowledged ids read, values
/// read more than once).
async fn drain(namesrv: SocketAddr, shared: &Shared) -> Result<(usize, u64)> {
    let acked: std::collections::HashSet<u64> = shared
        .acked_ids
        .lock()
        .expect("ids")
        .iter()
        .copied()
        .collect();
    let consumer = LitePullConsumer::start(LitePullConsumerConfig {
        namesrv_addrs: vec![namesrv],
        group: "failover-bench-drain".into(),
        start_position: StartPosition::First,
        ..LitePullConsumerConfig::default()
    })?;
    consumer.subscribe(TOPIC, "*").await?;
    let mut seen: HashMap<u64, u32> = HashMap::new();
    let deadline = Instant::now() + PHASE_WAIT;
    let mut idle_since = Instant::now();
    loop {
        let batch = consumer.poll(Duration::from_millis(500)).await?;
        if batch.is_empty() {
            let complete = acked.iter().all(|id| seen.contains_key(id));
            if (complete && idle_since.elapsed() > Duration::from_secs(1))
                || Instant::now() >= deadline
            {
                break;
            }
        } else {
            idle_since = Instant::now();
        }
        for message in batch {
            if let Some(id) = message.body.get(..8) {
                let id = u64::from_be_bytes(id.try_into().expect("8 bytes"));
                *seen.entry(id).or_default() += 1;
            }
        }
    }
    let _ = consumer.shutdown().await;
    let delivered = acked.iter().filter(|id| seen.contains_key(id)).count();
    let duplicates = seen.values().map(|n| u64::from(n - 1)).sum();
    Ok((delivered, duplicates))
}

fn report(
    args: &FailoverBenchArgs,
    shared: &Shared,
    failovers: &[Failover],
    started: Instant,
    finished: Instant,
    delivered: usize,
    duplicates: u64,
) -> serde_json::Value {
    let acks = shared.acks.lock().expect("acks").clone();
    let windows: Vec<(Instant, Instant)> = failovers
        .iter()
        .map(|f| (f.killed_at, f.killed_at + f.first_ack + SETTLE))
        .collect();
    let in_window = |at: Instant| windows.iter().any(|(a, b)| at >= *a && at < *b);
    let window_time: Duration = windows.iter().map(|(a, b)| *b - *a).sum();
    let total = finished.duration_since(started);
    let steady_time = total.saturating_sub(window_time).as_secs_f64().max(1e-9);
    let (mut steady, mut during) = (Histogram::default(), Histogram::default());
    for ack in &acks {
        if in_window(ack.at) {
            during.record(ack.latency_ns);
        } else {
            steady.record(ack.latency_ns);
        }
    }
    let steady_rate = steady.count() as f64 / steady_time;
    let during_rate = during.count() as f64 / window_time.as_secs_f64().max(1e-9);
    let percentiles = |values: &mut Vec<Duration>| {
        values.sort();
        let pick = |q: f64| {
            let i = ((values.len() as f64 * q).ceil() as usize).clamp(1, values.len()) - 1;
            values[i].as_secs_f64() * 1000.0
        };
        json!({"p50_ms": pick(0.5), "p99_ms": pick(0.99), "max_ms": pick(1.0)})
    };
    let mut elected: Vec<Duration> = failovers.iter().map(|f| f.elected).collect();
    let mut first: Vec<Duration> = failovers.iter().map(|f| f.first_ack).collect();
    let lat = |h: &Histogram| {
        json!({"p50_us": ns_to_us(h.percentile(0.5)), "p99_us": ns_to_us(h.percentile(0.99)),
               "max_us": ns_to_us(h.max())})
    };
    json!({
        "bench": "failover",
        "kills": failovers.len(),
        "controllers": args.controllers,
        "replicas": args.replicas,
        "role": format!("{:?}", args.role),
        "flush": args.flush.name(),
        "producers": args.producers,
        "size": args.size,
        "election": percentiles(&mut elected),
        "failover_kill_to_first_ack": percentiles(&mut first),
        "baseline_steady_msgs_per_sec": steady_rate,
        "during_failover_msgs_per_sec": during_rate,
        "ratio_during_to_steady": during_rate / steady_rate.max(1e-9),
        "send_latency_steady": lat(&steady),
        "send_latency_during_failover": lat(&during),
        "acked": shared.acked_ids.lock().expect("ids").len(),
        "send_errors": shared.errors.load(Ordering::Relaxed),
        "lost": shared.acked_ids.lock().expect("ids").len().saturating_sub(delivered),
        "duplicates": duplicates,
        "duplicates_per_failover": duplicates as f64 / failovers.len().max(1) as f64,
    })
}
