//! `ferromq bench produce|consume|e2e`: throughput and latency through the Rust client
//! (`ferromq-client`) against any RocketMQ-compatible broker, speaking only the remoting
//! protocol.
//!
//! - produce: `--producers` producers (one connection each), each with `--in-flight`
//!   concurrent senders; every send is `--batch` messages of `--size` body bytes (a batch of
//!   one is a plain SEND_MESSAGE_V2, larger ones SEND_BATCH_MESSAGE). Latency is per send
//!   call (per batch). Runs `--seconds`, or until `--count` messages were acknowledged.
//! - consume: `--consumers` lite pull consumers in a fresh group (`--group` to choose one)
//!   starting at each queue's first message; latency is the duration of each non-empty
//!   `poll`. Runs `--seconds`, or until `--count` messages arrived. Positions are committed
//!   at the end; a failed commit counts as an error.
//! - e2e: consumers start at the queues' ends, then producers send; each body starts with a
//!   run id and the send time, and latency is receive time minus send time per message.
//!
//! Figures are absolute: the baseline for client benches is `ferromq bench store` (the
//! broker's raw append path) run on the same machine. MB/s counts body bytes, 1 MB = 10^6.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::value_parser;
use ferromq_client::{
    ClientError, ConnectionPool, LitePullConsumer, LitePullConsumerConfig, Message, MessageQueue,
    Producer, ProducerConfig, RouteCache, StartPosition,
};
use ferromq_protocol::remoting::body::route::perm;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::admin::CreateTopicRequestHeader;
use ferromq_protocol::remoting::RemotingCommand;
use serde_json::json;

use super::stats::{ns_to_us, Histogram, Probe};
use super::{fsync_probe, rtt_probe};

use super::e2e_stamp::{E2eStamp, STAMP_LEN};

/// Flags of `ferromq bench produce|consume|e2e`.
#[derive(Debug, Clone, clap::Args)]
pub struct ClientBenchArgs {
    /// Name server address.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9876")]
    pub(super) namesrv: SocketAddr,
    /// Topic (auto-created by the first send when the broker allows it).
    #[arg(long, value_name = "T", default_value = "BenchTopic")]
    pub(super) topic: String,
    /// Body size in bytes (at least 24 for e2e, which stamps the body).
    #[arg(long, value_name = "BYTES", default_value_t = 128, value_parser = value_parser!(u64).range(1..=4_194_304))]
    pub(super) size: u64,
    /// Producers, one connection each.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = value_parser!(u32).range(1..=256))]
    pub(super) producers: u32,
    /// Consumers (lite pull consumers in one group).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = value_parser!(u32).range(1..=256))]
    pub(super) consumers: u32,
    /// Messages per send (1: single sends; more: batch sends).
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = value_parser!(u32).range(1..=4096))]
    pub(super) batch: u32,
    /// Concurrent sends per producer.
    #[arg(long, value_name = "W", default_value_t = 1, value_parser = value_parser!(u32).range(1..=4096))]
    pub(super) in_flight: u32,
    /// Duration of the run (the upper bound when --count is given).
    #[arg(long, value_name = "S", default_value_t = 10, value_parser = value_parser!(u64).range(1..=86_400))]
    pub(super) seconds: u64,
    /// Stop after this many messages (sent for produce and e2e, received for consume).
    #[arg(long, value_name = "M")]
    pub(super) count: Option<u64>,
    /// Offered load in messages per second for produce and e2e, spread evenly over the
    /// senders (default: as fast as the in-flight window allows). Latency under a stated load
    /// (e.g. half of the maximum throughput) compares brokers fairly; a sender that falls
    /// behind its schedule sends at once, so the achieved rate shows when the load was too
    /// high.
    #[arg(long, value_name = "MSGS_PER_SEC", value_parser = value_parser!(u64).range(1..=100_000_000))]
    pub(super) rate: Option<u64>,
    /// Queues of an auto-created topic.
    #[arg(long, default_value_t = 8, value_parser = value_parser!(i32).range(1..=1024))]
    pub(super) queues: i32,
    /// Messages each pull of a consumer asks for (the client's `pullBatchSize`; RocketMQ's
    /// default is 32, and a broker returns at most its own limit: ferromq 64, RocketMQ 32).
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = value_parser!(u32).range(1..=1024))]
    pub(super) pull_batch: u32,
    /// Consumer group (default: a fresh group per run).
    #[arg(long)]
    pub(super) group: Option<String>,
    /// Print the result as one JSON object on the last stdout line.
    #[arg(long)]
    pub(super) json: bool,
    /// Send and pull requests (and so their replies) in JSON headers instead of the clients'
    /// default compact binary headers (serialize type ROCKETMQ), to compare the two in one
    /// sitting with the same build.
    #[arg(long)]
    pub(super) json_headers: bool,
    /// consume only: measure both pull transfers of the brokers in one run — RocketMQ's
    /// transferMsgByHeap=true (records copied and verified) and false (zero copy with
    /// sendfile) — switching every master of the topic with UPDATE_BROKER_CONFIG between
    /// phases (alternating, --compare-rounds each, a fresh group each), and report both rates
    /// and the ratio zero_copy / heap. The brokers' setting is restored at the end.
    #[arg(long)]
    pub(super) compare_transfer: bool,
    /// produce only: after the run, time bare 4 KiB write + fdatasync cycles on a file in this
    /// directory (pick the broker's data directory, on the disk a SYNC_FLUSH send waits for)
    /// and report the send p50 against that fdatasync p50, measured in the same run.
    #[arg(long, value_name = "DIR")]
    pub(super) fsync_baseline: Option<std::path::PathBuf>,
    /// produce only: after the run, time bare TCP round trips on loopback between two threads
    /// (a request of the body size plus a header's worth, a reply of a send reply's size) and
    /// report the send p50 against that round trip p50, measured in the same run: the floor
    /// of a single synchronous send on this machine.
    #[arg(long)]
    pub(super) rtt_baseline: bool,
    /// Microseconds each request of a producer spins for its reply before parking (the
    /// client's `ProducerConfig::reply_spin`; 0, the default, parks at once; at most 1000).
    /// Trades CPU for latency where waking a parked thread is slow; pair it with
    /// --current-thread, where the spin also polls the socket.
    #[arg(long, value_name = "US", default_value_t = 0, value_parser = value_parser!(u64).range(0..=1000))]
    pub(super) reply_spin_us: u64,
    /// Run the bench's clients on one thread (a current-thread tokio runtime) instead of one
    /// worker per CPU: a single producer's whole exchange stays on one thread.
    #[arg(long)]
    pub(super) current_thread: bool,
    /// Phases per setting with --compare-transfer (the best of each is reported).
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = value_parser!(u32).range(1..=20))]
    pub(super) compare_rounds: u32,
    /// ACL credentials and TLS of every connection.
    #[command(flatten)]
    pub(super) security: crate::security::SecurityFlags,
}

impl ClientBenchArgs {
    /// The flags `argv` (without program and subcommand names) give, for benches that drive
    /// the client with these settings (`bench alloc`, `bench rss`).
    pub(super) fn from_flags(argv: &[&str]) -> Result<ClientBenchArgs> {
        use clap::Parser;
        /// A parser for the flags alone.
        #[derive(Debug, clap::Parser)]
        struct Flags {
            #[command(flatten)]
            args: ClientBenchArgs,
        }
        let argv = std::iter::once("bench").chain(argv.iter().copied());
        Ok(Flags::try_parse_from(argv)
            .context("client bench flags")?
            .args)
    }
}

/// Which client bench.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `bench produce`.
    Produce,
    /// `bench consume`.
    Consume,
    /// `bench e2e`.
    E2e,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Produce => "produce",
            Kind::Consume => "consume",
            Kind::E2e => "e2e",
        }
    }
}

/// Counters shared by a phase's tasks and the progress printer.
#[derive(Debug, Default)]
pub(super) struct Progress {
    pub(super) messages: AtomicU64,
    pub(super) errors: AtomicU64,
    first_error: Mutex<Option<String>>,
    /// When the last counted message arrived (consume: the end of the busy interval).
    last_message_at: Mutex<Option<Instant>>,
}

impl Progress {
    /// Counts `n` messages received now.
    pub(super) fn received(&self, n: u64) {
        self.messages.fetch_add(n, Ordering::Relaxed);
        if n > 0 {
            *self
                .last_message_at
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        }
    }

    pub(super) fn last_message_at(&self) -> Option<Instant> {
        *self
            .last_message_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn error(&self, error: impl std::fmt::Display) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_error.lock().unwrap_or_else(|e| e.into_inner());
        if first.is_none() {
            *first = Some(error.to_string());
        }
    }

    pub(super) fn first_error(&self) -> Option<String> {
        self.first_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// What a phase measured.
pub(super) struct Outcome {
    pub(super) messages: u64,
    pub(super) elapsed: Duration,
    pub(super) latency: Histogram,
    /// What `elapsed` covers (printed, and `measured` in the JSON).
    pub(super) measured: &'static str,
}

/// `Outcome::measured` of a bench timed over its whole `--seconds` window.
pub(super) const FIXED_WINDOW: &str = "fixed window";

/// Runs a client bench.
pub fn run(kind: Kind, args: &ClientBenchArgs) -> Result<()> {
    if kind == Kind::E2e && (args.size as usize) < STAMP_LEN {
        bail!("e2e stamps the body: --size must be at least {STAMP_LEN}");
    }
    if args.compare_transfer && kind != Kind::Consume {
        bail!("--compare-transfer compares pull transfers: it applies to bench consume only");
    }
    if args.fsync_baseline.is_some() && kind != Kind::Produce {
        bail!("--fsync-baseline compares send latency with fdatasync: it applies to bench produce only");
    }
    if args.rtt_baseline && kind != Kind::Produce {
        bail!("--rtt-baseline compares send latency with a loopback round trip: it applies to bench produce only");
    }
    let runtime = if args.current_thread {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    }
    .context("starting the tokio runtime")?;
    runtime.block_on(async {
        if kind != Kind::Consume {
            ensure_topic(args).await?;
        }
        match kind {
            Kind::Produce => produce_bench(args).await,
            Kind::Consume if args.compare_transfer => super::transfer::compare(args).await,
            Kind::Consume => consume_bench(args).await,
            Kind::E2e => e2e_bench(args).await,
        }
    })
}

/// Makes sure `--topic` has a route: when the name server knows none, creates the topic with
/// `--queues` queues (UPDATE_AND_CREATE_TOPIC, as `mqadmin updateTopic` does) on every master
/// of the auto-create template `TBW102`, and waits (bounded) for the route to appear.
pub(super) async fn ensure_topic(args: &ClientBenchArgs) -> Result<()> {
    const TIMEOUT: Duration = Duration::from_secs(3);
    let pool = Arc::new(ConnectionPool::new(args.security.client_options()?));
    let routes = RouteCache::new(vec![args.namesrv], pool.clone(), TIMEOUT, Duration::ZERO)
        .context("name server address")?;
    match routes.refresh(&args.topic).await {
        Ok(_) => return Ok(()),
        Err(ClientError::NoRoute { .. }) => {}
        Err(error) => return Err(error).context("asking the name server for the topic's route"),
    }
    let template = routes.refresh("TBW102").await.with_context(|| {
        format!(
            "topic {} does not exist and the brokers do not allow automatic creation; create it first",
            args.topic
        )
    })?;
    let masters: Vec<SocketAddr> = template
        .data
        .broker_datas
        .iter()
        .filter_map(|b| template.master_addr(&b.broker_name))
        .collect();
    if masters.is_empty() {
        bail!("no broker master is registered with the name server");
    }
    for addr in masters {
        let header = CreateTopicRequestHeader::as_java_sends(
            &args.topic,
            args.queues,
            args.queues,
            perm::READ | perm::WRITE,
        );
        let cmd = RemotingCommand::request_with_header(request::UPDATE_AND_CREATE_TOPIC, &header);
        let reply = pool
            .invoke(addr, cmd, TIMEOUT)
            .await
            .with_context(|| format!("creating topic {} on {addr}", args.topic))?;
        if reply.code != response::SUCCESS {
            bail!(
                "broker {addr} refused to create topic {}: code {} {}",
                args.topic,
                reply.code,
                reply.remark.unwrap_or_default()
            );
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match routes.refresh(&args.topic).await {
            Ok(_) => break,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => {
                return Err(error).context("the created topic's route never appeared");
            }
        }
    }
    pool.close_all();
    eprintln!("created topic {} with {} queues", args.topic, args.queues);
    Ok(())
}

pub(super) fn producer(args: &ClientBenchArgs) -> Result<Producer> {
    Producer::start(ProducerConfig {
        namesrv_addrs: vec![args.namesrv],
        group: "ferromq-bench-producer".into(),
        default_topic_queue_nums: args.queues,
        credentials: args.security.credentials()?,
        tls: args.security.tls()?,
        reply_spin: Duration::from_micros(args.reply_spin_us),
        binary_header: !args.json_headers,
        ..ProducerConfig::default()
    })
    .context("starting a producer")
}

/// Closes every producer (unregistering it from its brokers). A failed unregister does not
/// change any figure, so it is reported on stderr rather than counted as a send error.
async fn close_producers(producers: &[Producer]) {
    for p in producers {
        if let Err(error) = p.close().await {
            eprintln!("warning: closing a producer: {error}");
        }
    }
}

fn run_id() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ (u64::from(std::process::id()) << 40)
}

/// Prints a progress line to stderr every second until `stop` is set.
fn spawn_progress(
    progress: Arc<Progress>,
    stop: Arc<AtomicBool>,
    what: &'static str,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let started = Instant::now();
        let mut last = 0;
        let mut last_at = started;
        let mut tick = tokio::time::interval_at(
            tokio::time::Instant::now() + Duration::from_secs(1),
            Duration::from_secs(1),
        );
        while !stop.load(Ordering::Relaxed) {
            tick.tick().await;
            let now = Instant::now();
            let count = progress.messages.load(Ordering::Relaxed);
            let rate = rate(count - last, now - last_at);
            eprintln!(
                "  {:>5.1} s: {count} msgs {what}, {rate:.0} msgs/s, {} errors",
                (now - started).as_secs_f64(),
                progress.errors.load(Ordering::Relaxed)
            );
            (last, last_at) = (count, now);
        }
    })
}

/// Sends for `--seconds` (or `--count` messages) from every producer and in-flight slot.
/// With `stamp = Some((run, base))` each body starts with the run id and the send time.
async fn produce_phase(
    args: &ClientBenchArgs,
    producers: &[Producer],
    stamp: Option<Arc<E2eStamp>>,
    progress: &Arc<Progress>,
) -> Outcome {
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let claimed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let senders = u64::from(args.in_flight) * producers.len() as u64;
    // Each sender's interval between sends at the offered rate.
    let pace = args.rate.map(|rate| {
        Duration::from_secs_f64((senders * u64::from(args.batch)) as f64 / rate as f64)
    });
    let mut tasks = Vec::new();
    for (index, p) in producers
        .iter()
        .flat_map(|p| std::iter::repeat_n(p, args.in_flight as usize))
        .enumerate()
    {
        {
            let (p, progress, claimed, stamp) =
                (p.clone(), progress.clone(), claimed.clone(), stamp.clone());
            let (topic, size, batch, count) = (
                args.topic.clone(),
                args.size as usize,
                u64::from(args.batch),
                args.count,
            );
            tasks.push(tokio::spawn(async move {
                let mut latency = Histogram::default();
                // Without a stamp every message shares one body buffer (a reference-counted
                // clone), so the bench measures the client, not its own copying. The bytes are
                // pseudo-random: a body over the client's compression threshold (4 KiB) must
                // not shrink to a few bytes, or the figures would count bytes never sent.
                let filler = bytes::Bytes::from(incompressible(size));
                // Senders start spread over one interval, so paced sends do not come in bursts.
                let mut next =
                    pace.map(|pace| started + pace.mul_f64(index as f64 / senders as f64));
                while Instant::now() < deadline {
                    if let (Some(at), Some(pace)) = (next.as_mut(), pace) {
                        tokio::time::sleep_until((*at).into()).await;
                        *at += pace;
                    }
                    let n = match count {
                        Some(max) => {
                            let at = claimed.fetch_add(batch, Ordering::Relaxed);
                            if at >= max {
                                break;
                            }
                            batch.min(max - at)
                        }
                        None => batch,
                    };
                    let begin = Instant::now();
                    let mut seqs = Vec::new();
                    let mut body = || match &stamp {
                        None => filler.clone(),
                        Some(stamp) => {
                            let (body, seq) = stamp.stamp(&filler);
                            seqs.push(seq);
                            body
                        }
                    };
                    let result = if n == 1 {
                        p.send(Message::new(topic.as_str(), body()))
                            .await
                            .map(|_| ())
                    } else {
                        let messages = (0..n)
                            .map(|_| Message::new(topic.as_str(), body()))
                            .collect();
                        p.send_batch(messages).await.map(|_| ())
                    };
                    match result {
                        Ok(()) => {
                            if let Some(stamp) = &stamp {
                                stamp.acknowledged(&seqs);
                            }
                            latency.record(begin.elapsed().as_nanos() as u64);
                            progress.messages.fetch_add(n, Ordering::Relaxed);
                        }
                        Err(error) => {
                            progress.error(error);
                            // Do not spin on a dead broker.
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                    }
                }
                latency
            }));
        }
    }
    let latency = merge_latencies(tasks, progress).await;
    Outcome {
        messages: progress.messages.load(Ordering::Relaxed),
        elapsed: started.elapsed(),
        latency,
        measured: FIXED_WINDOW,
    }
}

/// Waits for every task and merges their latencies; a task that failed is counted an error.
pub(super) async fn merge_latencies(
    tasks: Vec<tokio::task::JoinHandle<Histogram>>,
    progress: &Progress,
) -> Histogram {
    let mut latency = Histogram::default();
    for task in tasks {
        match task.await {
            Ok(h) => latency.merge(&h),
            Err(error) => progress.error(format!("task failed: {error}")),
        }
    }
    latency
}

/// The produce phase of `bench produce` with its own producers, closed after it.
pub(super) async fn produce_only(args: &ClientBenchArgs) -> Result<(Outcome, Arc<Progress>)> {
    let producers = (0..args.producers)
        .map(|_| producer(args))
        .collect::<Result<Vec<_>>>()?;
    let progress = Arc::new(Progress::default());
    let stop = Arc::new(AtomicBool::new(false));
    let printer = spawn_progress(progress.clone(), stop.clone(), "sent");
    let outcome = produce_phase(args, &producers, None, &progress).await;
    stop.store(true, Ordering::Relaxed);
    printer.abort();
    close_producers(&producers).await;
    Ok((outcome, progress))
}

async fn produce_bench(args: &ClientBenchArgs) -> Result<()> {
    let (outcome, progress) = produce_only(args).await?;
    let fsync = match &args.fsync_baseline {
        Some(dir) => {
            let dir = dir.clone();
            let probe = tokio::task::spawn_blocking(move || fsync_probe::run_in(&dir))
                .await
                .context("the fdatasync baseline task")??;
            Some(probe)
        }
        None => None,
    };
    let rtt = if args.rtt_baseline {
        let body = args.size as usize;
        let probe = tokio::task::spawn_blocking(move || rtt_probe::run_for_send(body))
            .await
            .context("the round-trip baseline task")??;
        Some(probe)
    } else {
        None
    };
    report(
        Kind::Produce,
        args,
        &outcome,
        &progress,
        "per send call",
        Extra {
            e2e: None,
            fsync: fsync.as_ref(),
            rtt: rtt.as_ref(),
        },
    );
    Ok(())
}

fn lite_config(
    args: &ClientBenchArgs,
    group: &str,
    start: StartPosition,
) -> Result<LitePullConsumerConfig> {
    Ok(LitePullConsumerConfig {
        namesrv_addrs: vec![args.namesrv],
        group: group.into(),
        start_position: start,
        rebalance_interval: Duration::from_millis(500),
        pull_batch: args.pull_batch,
        credentials: args.security.credentials()?,
        tls: args.security.tls()?,
        binary_header: !args.json_headers,
        ..LitePullConsumerConfig::default()
    })
}

/// Starts `--consumers` consumers of the topic in one group and waits (bounded) until the
/// queues are split among them and every queue's start position is known.
async fn start_consumers(
    args: &ClientBenchArgs,
    start: StartPosition,
) -> Result<Vec<Arc<LitePullConsumer>>> {
    let group = args
        .group
        .clone()
        .unwrap_or_else(|| format!("ferromq-bench-{}", run_id()));
    let mut consumers = Vec::new();
    for _ in 0..args.consumers {
        let c = LitePullConsumer::start(lite_config(args, &group, start)?)
            .context("starting a consumer")?;
        c.subscribe(&args.topic, "*")
            .await
            .with_context(|| format!("subscribing to {}", args.topic))?;
        consumers.push(Arc::new(c));
    }
    let total = consumers[0]
        .pull_consumer()
        .fetch_queues(&args.topic)
        .await
        .context("fetching the topic's queues")?
        .len();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let owned: Vec<Vec<MessageQueue>> = consumers.iter().map(|c| c.assignment()).collect();
        let distinct: HashSet<&MessageQueue> = owned.iter().flatten().collect();
        let positioned = consumers
            .iter()
            .zip(&owned)
            .all(|(c, qs)| qs.iter().all(|q| c.position(q).is_some()));
        let sum: usize = owned.iter().map(Vec::len).sum();
        if distinct.len() == total && sum == total && positioned {
            return Ok(consumers);
        }
        if Instant::now() > deadline {
            bail!(
                "consumers did not settle within 15 s ({sum} assignments of {total} queues, positions known: {positioned})"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the consumers measured.
#[derive(Default)]
struct Polled {
    /// Per non-empty poll (consume) or per message from send to receipt (e2e).
    latency: Histogram,
    /// e2e: per message from the producer seeing its acknowledgement to receipt.
    after_ack: Histogram,
    /// e2e: messages received before their producer saw the acknowledgement.
    overtook_ack: u64,
}

impl Polled {
    fn merge(&mut self, other: &Polled) {
        self.latency.merge(&other.latency);
        self.after_ack.merge(&other.after_ack);
        self.overtook_ack += other.overtook_ack;
    }
}

/// Polls every consumer until `stop` or `until`, counting what arrives. Without `stamp`,
/// records the duration of each non-empty poll; with it, counts only this run's messages and
/// records each one's send-to-receive and acknowledgement-to-receive latency.
async fn poll_phase(
    consumers: Vec<Arc<LitePullConsumer>>,
    until: Instant,
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
    stamp: Option<Arc<E2eStamp>>,
) -> Polled {
    let mut tasks = Vec::new();
    for c in consumers {
        let (stop, progress, stamp) = (stop.clone(), progress.clone(), stamp.clone());
        tasks.push(tokio::spawn(async move {
            let mut polled = Polled::default();
            while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                let begin = Instant::now();
                match c.poll(Duration::from_millis(100)).await {
                    Ok(messages) if messages.is_empty() => {}
                    Ok(messages) => {
                        let mut counted = 0;
                        match &stamp {
                            None => {
                                polled.latency.record(begin.elapsed().as_nanos() as u64);
                                counted = messages.len() as u64;
                            }
                            Some(stamp) => {
                                for receipt in
                                    messages.iter().filter_map(|m| stamp.receipt(&m.body))
                                {
                                    polled.latency.record(receipt.end_to_end);
                                    match receipt.after_ack {
                                        Some(after) => polled.after_ack.record(after),
                                        None => polled.overtook_ack += 1,
                                    }
                                    counted += 1;
                                }
                            }
                        }
                        progress.received(counted);
                    }
                    Err(error) => progress.error(error),
                }
            }
            polled
        }));
    }
    let mut polled = Polled::default();
    for task in tasks {
        match task.await {
            Ok(p) => polled.merge(&p),
            Err(error) => progress.error(format!("consumer task failed: {error}")),
        }
    }
    polled
}

/// Shuts every consumer down; failed final commits count as errors.
async fn close_consumers(consumers: Vec<Arc<LitePullConsumer>>, progress: &Progress) {
    for c in consumers {
        match Arc::try_unwrap(c) {
            Ok(c) => {
                let stats = c.stats();
                if stats.pull_errors > 0 {
                    progress.error(format!("{} pulls failed (retried)", stats.pull_errors));
                }
                if let Err(error) = c.shutdown().await {
                    progress.error(format!("final commit failed: {error}"));
                }
            }
            Err(_) => progress.error("a consumer was still in use at shutdown"),
        }
    }
}

/// `p50` (µs) over a baseline's p50; 0 when the baseline measured nothing.
fn ratio_to(p50: f64, baseline: &Probe) -> f64 {
    let base = baseline.p50_us();
    if base > 0.0 {
        p50 / base
    } else {
        0.0
    }
}

/// The JSON `baseline` field: which baselines this run measured.
fn baseline_names(fsync: bool, rtt: bool) -> &'static str {
    match (fsync, rtt) {
        (true, true) => "fdatasync, loopback round trip",
        (true, false) => "fdatasync",
        (false, true) => "loopback round trip",
        (false, false) => "ferromq bench store",
    }
}

async fn consume_bench(args: &ClientBenchArgs) -> Result<()> {
    let (outcome, progress) = consume_phase(args).await?;
    report(
        Kind::Consume,
        args,
        &outcome,
        &progress,
        "per non-empty poll",
        Extra::default(),
    );
    if let Some(count) = args.count {
        if outcome.messages < count {
            bail!(
                "received {} of {count} messages within {} s",
                outcome.messages,
                args.seconds
            );
        }
    }
    Ok(())
}

/// One consume phase: consumers of a fresh group (or --group) from each queue's first
/// message, for --seconds or until --count arrived.
pub(super) async fn consume_phase(args: &ClientBenchArgs) -> Result<(Outcome, Arc<Progress>)> {
    let consumers = start_consumers(args, StartPosition::First).await?;
    let progress = Arc::new(Progress::default());
    let stop = Arc::new(AtomicBool::new(false));
    let printer = spawn_progress(progress.clone(), stop.clone(), "received");
    let started = Instant::now();
    let until = started + Duration::from_secs(args.seconds);
    let watcher = args.count.map(|count| {
        let (progress, stop) = (progress.clone(), stop.clone());
        tokio::spawn(async move {
            while progress.messages.load(Ordering::Relaxed) < count && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            stop.store(true, Ordering::Relaxed);
            Instant::now()
        })
    });
    let latency = poll_phase(
        consumers.clone(),
        until,
        stop.clone(),
        progress.clone(),
        None,
    )
    .await
    .latency;
    // With --count: the time to drain that backlog. Without: the busy interval, from the
    // start to the last message received — not the whole window, which would divide the
    // backlog by the idle time after it drained.
    let (ended, measured) = match watcher {
        Some(w) => (
            w.await.unwrap_or_else(|_| Instant::now()),
            "drain of --count messages",
        ),
        None => (
            progress.last_message_at().unwrap_or(started),
            "busy interval (start to last message)",
        ),
    };
    stop.store(true, Ordering::Relaxed);
    printer.abort();
    close_consumers(consumers, &progress).await;
    let outcome = Outcome {
        messages: progress.messages.load(Ordering::Relaxed),
        elapsed: ended.min(Instant::now()) - started,
        latency,
        measured,
    };
    Ok((outcome, progress))
}

async fn e2e_bench(args: &ClientBenchArgs) -> Result<()> {
    let producers = (0..args.producers)
        .map(|_| producer(args))
        .collect::<Result<Vec<_>>>()?;
    // One send makes sure the topic exists (auto-creation) before consumers look it up; its
    // body carries no run id, so consumers ignore it.
    producers[0]
        .send(Message::new(
            args.topic.as_str(),
            vec![0u8; args.size as usize],
        ))
        .await
        .context("warm-up send")?;
    let consumers = start_consumers(args, StartPosition::Last).await?;
    let stamp = Arc::new(E2eStamp::new(run_id()));
    let received = Arc::new(Progress::default());
    let receiving = Arc::new(AtomicBool::new(false));
    let consume_until = Instant::now() + Duration::from_secs(args.seconds + 10);
    let poller = tokio::spawn(poll_phase(
        consumers.clone(),
        consume_until,
        receiving.clone(),
        received.clone(),
        Some(stamp.clone()),
    ));
    let sent = Arc::new(Progress::default());
    let stop = Arc::new(AtomicBool::new(false));
    let printer = spawn_progress(sent.clone(), stop.clone(), "sent");
    let produced = produce_phase(args, &producers, Some(stamp), &sent).await;
    stop.store(true, Ordering::Relaxed);
    printer.abort();
    // Let the consumers catch up with everything acknowledged (bounded).
    while received.messages.load(Ordering::Relaxed) < produced.messages
        && Instant::now() < consume_until
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    receiving.store(true, Ordering::Relaxed);
    let polled = poller.await.context("consumer tasks")?;
    close_consumers(consumers, &received).await;
    close_producers(&producers).await;
    let got = received.messages.load(Ordering::Relaxed);
    if got < produced.messages {
        received.error(format!(
            "{} of {} acknowledged messages never arrived",
            produced.messages - got,
            produced.messages
        ));
    }
    let errors = Progress::default();
    errors.errors.store(
        sent.errors.load(Ordering::Relaxed) + received.errors.load(Ordering::Relaxed),
        Ordering::Relaxed,
    );
    *errors.first_error.lock().unwrap_or_else(|e| e.into_inner()) =
        sent.first_error().or_else(|| received.first_error());
    let outcome = Outcome {
        messages: produced.messages,
        elapsed: produced.elapsed,
        latency: polled.latency,
        measured: "produce window (receives timed per message)",
    };
    report(
        Kind::E2e,
        args,
        &outcome,
        &errors,
        "end to end, send to receive, per message",
        Extra {
            e2e: Some(E2eSplit {
                send: &produced.latency,
                received: got,
                after_ack: &polled.after_ack,
                overtook_ack: polled.overtook_ack,
            }),
            fsync: None,
            rtt: None,
        },
    );
    Ok(())
}

pub(super) fn rate(count: u64, elapsed: Duration) -> f64 {
    let seconds = elapsed.as_secs_f64();
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}

pub(super) fn round(value: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (value * scale).round() / scale
}

/// The e2e figures beside the end-to-end latency: the send's share and the delivery's.
struct E2eSplit<'a> {
    send: &'a Histogram,
    received: u64,
    after_ack: &'a Histogram,
    overtook_ack: u64,
}

/// What a report adds to the common figures.
#[derive(Default)]
struct Extra<'a> {
    /// e2e: the send and delivery split.
    e2e: Option<E2eSplit<'a>>,
    /// produce --fsync-baseline: the bare fdatasync cycles measured after the run.
    fsync: Option<&'a Probe>,
    /// produce --rtt-baseline: the bare loopback round trips measured after the run.
    rtt: Option<&'a Probe>,
}

fn report(
    kind: Kind,
    args: &ClientBenchArgs,
    outcome: &Outcome,
    progress: &Progress,
    latency_of: &str,
    extra: Extra<'_>,
) {
    let Extra { e2e, fsync, rtt } = extra;
    let msgs_per_sec = rate(outcome.messages, outcome.elapsed);
    let mb_per_sec = msgs_per_sec * args.size as f64 / 1e6;
    let h = &outcome.latency;
    let [p50, p99, p999] = [0.5, 0.99, 0.999].map(|q| ns_to_us(h.percentile(q)));
    let max = ns_to_us(h.max());
    let errors = progress.errors.load(Ordering::Relaxed);
    let first_error = progress.first_error();
    let mut clients = match kind {
        Kind::Produce => format!("{} producers", args.producers),
        Kind::Consume => format!(
            "{} consumers, pull batch {}",
            args.consumers, args.pull_batch
        ),
        Kind::E2e => format!(
            "{} producers, {} consumers, pull batch {}",
            args.producers, args.consumers, args.pull_batch
        ),
    };
    if args.json_headers {
        clients.push_str(", JSON headers");
    }
    let mut offered = match args.rate {
        Some(rate) if kind != Kind::Consume => format!(", offered {rate} msgs/s"),
        _ => String::new(),
    };
    if args.reply_spin_us > 0 && kind != Kind::Consume {
        offered.push_str(&format!(", reply spin {} us", args.reply_spin_us));
    }
    if args.current_thread {
        offered.push_str(", one client thread");
    }
    println!(
        "{:<8} : {} msgs in {:.2} s = {msgs_per_sec:.0} msgs/s, {mb_per_sec:.1} MB/s ({} B bodies, {clients}, batch {}, in-flight {}{offered}), {errors} errors",
        kind.name(),
        outcome.messages,
        outcome.elapsed.as_secs_f64(),
        args.size,
        args.batch,
        args.in_flight,
    );
    println!("measured : {}", outcome.measured);
    println!("latency  : p50 {p50} us, p99 {p99} us, p999 {p999} us, max {max} us ({latency_of})");
    if let Some(split) = &e2e {
        let line = |h: &Histogram| {
            format!(
                "p50 {} us, p99 {} us, p999 {} us, max {} us",
                ns_to_us(h.percentile(0.5)),
                ns_to_us(h.percentile(0.99)),
                ns_to_us(h.percentile(0.999)),
                ns_to_us(h.max())
            )
        };
        println!(
            "send     : {} (per send call); {} received",
            line(split.send),
            split.received
        );
        println!(
            "delivery : {} (acknowledgement seen by the producer to receipt); {} received before it",
            line(split.after_ack),
            split.overtook_ack
        );
    }
    if let Some(error) = &first_error {
        println!("first error: {error}");
    }
    let p50_to_fsync = fsync.map(|probe| ratio_to(p50, probe));
    let p50_to_rtt = rtt.map(|probe| ratio_to(p50, probe));
    if let (Some(probe), Some(ratio)) = (fsync, p50_to_fsync) {
        println!(
            "baseline : {} bare {} B write + fdatasync cycles in {}: p50 {} us, p99 {} us; send p50 / fdatasync p50 = {ratio:.3}",
            probe.cycles,
            fsync_probe::PRODUCE_PROBE_WRITE_BYTES,
            args.fsync_baseline.as_deref().unwrap_or(std::path::Path::new("?")).display(),
            probe.p50_us(),
            probe.p99_us(),
        );
    }
    if let (Some(probe), Some(ratio)) = (rtt, p50_to_rtt) {
        println!(
            "baseline : {} bare loopback TCP round trips ({} B out, {} B back, two threads): p50 {} us, p99 {} us; send p50 / round trip p50 = {ratio:.3}",
            probe.cycles,
            args.size as usize + rtt_probe::REQUEST_OVERHEAD_BYTES,
            rtt_probe::REPLY_BYTES,
            probe.p50_us(),
            probe.p99_us(),
        );
    }
    if fsync.is_none() && rtt.is_none() {
        println!(
            "baseline : none in this run; compare with `ferromq bench store` on the same machine"
        );
    }
    if args.json {
        let mut out = json!({
            "bench": kind.name(),
            "topic": args.topic,
            "size": args.size,
            "producers": args.producers,
            "consumers": args.consumers,
            "batch": args.batch,
            "in_flight": args.in_flight,
            "pull_batch": args.pull_batch,
            "headers": if args.json_headers { "json" } else { "binary" },
            "offered_rate": args.rate,
            "reply_spin_us": args.reply_spin_us,
            "current_thread": args.current_thread,
            "seconds": round(outcome.elapsed.as_secs_f64(), 3),
            "measured": outcome.measured,
            "messages": outcome.messages,
            "msgs_per_sec": round(msgs_per_sec, 1),
            "mb_per_sec": round(mb_per_sec, 3),
            "p50_us": p50,
            "p99_us": p99,
            "p999_us": p999,
            "max_us": max,
            "latency": latency_of,
            "errors": errors,
            "first_error": first_error,
            "baseline": baseline_names(fsync.is_some(), rtt.is_some()),
        });
        if let (Some(probe), Some(ratio)) = (fsync, p50_to_fsync) {
            out["fsync_cycles"] = json!(probe.cycles);
            out["fsync_write_bytes"] = json!(fsync_probe::PRODUCE_PROBE_WRITE_BYTES);
            out["fsync_p50_us"] = json!(probe.p50_us());
            out["fsync_p99_us"] = json!(probe.p99_us());
            out["p50_to_fsync_p50"] = json!(round(ratio, 4));
        }
        if let (Some(probe), Some(ratio)) = (rtt, p50_to_rtt) {
            out["rtt_cycles"] = json!(probe.cycles);
            out["rtt_request_bytes"] =
                json!(args.size as usize + rtt_probe::REQUEST_OVERHEAD_BYTES);
            out["rtt_reply_bytes"] = json!(rtt_probe::REPLY_BYTES);
            out["rtt_p50_us"] = json!(probe.p50_us());
            out["rtt_p99_us"] = json!(probe.p99_us());
            out["p50_to_rtt_p50"] = json!(round(ratio, 4));
        }
        if let Some(split) = &e2e {
            out["received"] = json!(split.received);
            out["send_p50_us"] = json!(ns_to_us(split.send.percentile(0.5)));
            out["send_p99_us"] = json!(ns_to_us(split.send.percentile(0.99)));
            out["send_p999_us"] = json!(ns_to_us(split.send.percentile(0.999)));
            out["delivery_p50_us"] = json!(ns_to_us(split.after_ack.percentile(0.5)));
            out["delivery_p99_us"] = json!(ns_to_us(split.after_ack.percentile(0.99)));
            out["delivery_p999_us"] = json!(ns_to_us(split.after_ack.percentile(0.999)));
            out["received_before_ack"] = json!(split.overtook_ack);
        }
        println!("{out}");
    }
}

/// `len` pseudo-random bytes (xorshift64; the same every run).
pub(super) fn incompressible(len: usize) -> Vec<u8> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 56) as u8
        })
        .collect()
}
