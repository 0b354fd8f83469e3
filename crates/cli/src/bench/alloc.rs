//! `ferromq bench alloc`: heap allocations per message on the send and pull paths, for the
//! broker and the Rust client separately, counted by the binary's allocator (`allocator`).
//!
//! One process runs a standalone (name server and broker, started by the code `ferromq
//! standalone` runs, ASYNC_FLUSH, in a scratch directory) on a runtime of its own, and the
//! client on another whose threads are tagged [`Side::Client`]; every other thread (the
//! broker's runtime, the store's threads) counts as the broker. After a warm-up (routes,
//! connections, the store's first files), three phases are counted:
//!
//! - send, synchronous: one producer sends `--messages` messages one after the other;
//! - send, windowed: the same with `--window` sends in flight;
//! - pull: a pull consumer reads everything both phases sent, `--pull-batch` per pull.
//!
//! Figures are allocations and requested bytes per message, per side. They count calls into
//! the allocator, not live memory; background work that happens to run during a phase (the
//! store's flush, a heartbeat) is included, which is why the phases are long.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::value_parser;
use ferromq_client::{Message, MessageQueue, PullConsumer, PullConsumerConfig, PullResult};
use serde_json::json;

use super::client::{self as client_bench, ClientBenchArgs};
use crate::allocator::{self, Counts, Side};

/// Topic the bench sends to.
const TOPIC: &str = "AllocBench";
/// Messages sent and pulled before counting starts.
const WARM_UP_MESSAGES: u64 = 1_000;
/// Bound on waiting for the dispatched queues to show every acknowledged message.
const DISPATCH_WAIT: Duration = Duration::from_secs(10);
/// Worker threads of each runtime: the broker's and the client's get the same.
const RUNTIME_WORKERS: usize = 2;

/// Flags of `ferromq bench alloc`.
#[derive(Debug, Clone, clap::Args)]
pub struct AllocArgs {
    /// Messages per counted phase.
    #[arg(long, value_name = "N", default_value_t = 20_000, value_parser = value_parser!(u64).range(100..=10_000_000))]
    messages: u64,
    /// Body size in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 128, value_parser = value_parser!(u64).range(1..=4_194_304))]
    size: u64,
    /// Sends in flight in the windowed phase.
    #[arg(long, value_name = "W", default_value_t = 32, value_parser = value_parser!(u32).range(1..=4096))]
    window: u32,
    /// Queues of the topic.
    #[arg(long, value_name = "Q", default_value_t = 8, value_parser = value_parser!(i32).range(1..=1024))]
    queues: i32,
    /// Messages asked for per pull.
    #[arg(long, value_name = "K", default_value_t = 32, value_parser = value_parser!(u32).range(1..=1024))]
    pull_batch: u32,
    /// Parent of the scratch directory (default: the system temp directory).
    #[arg(long, value_name = "DIR")]
    dir: Option<std::path::PathBuf>,
    /// Print the result as one JSON object on the last stdout line.
    #[arg(long)]
    json: bool,
}

/// Counts of one phase, per message.
#[derive(Debug, Clone, Copy)]
struct Phase {
    name: &'static str,
    messages: u64,
    counts: Counts,
    elapsed: Duration,
}

impl Phase {
    fn per_message(&self, value: u64) -> f64 {
        value as f64 / self.messages.max(1) as f64
    }

    fn json(&self) -> serde_json::Value {
        let round = |v: f64| client_bench::round(v, 2);
        json!({
            "phase": self.name,
            "messages": self.messages,
            "seconds": client_bench::round(self.elapsed.as_secs_f64(), 3),
            "broker_allocs_per_msg": round(self.per_message(self.counts.broker.allocations)),
            "broker_bytes_per_msg": round(self.per_message(self.counts.broker.bytes)),
            "client_allocs_per_msg": round(self.per_message(self.counts.client.allocations)),
            "client_bytes_per_msg": round(self.per_message(self.counts.client.bytes)),
        })
    }
}

/// Runs `ferromq bench alloc`.
pub fn run(args: &AllocArgs) -> Result<()> {
    let choice = allocator::check_selection().map_err(anyhow::Error::msg)?;
    let scratch = super::ScratchDir::create(args.dir.as_deref())?;
    let data_dir = scratch.path().join("store");
    let data_dir_text = data_dir.to_string_lossy().into_owned();
    let standalone = crate::standalone::StandaloneArgs::from_flags(&[
        "--data-dir",
        &data_dir_text,
        "--namesrv-port",
        "0",
        "--broker-port",
        "0",
        "--grpc-port",
        "-1",
        "--flush",
        "async",
    ])?;
    let broker_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(RUNTIME_WORKERS)
        .thread_name("broker")
        .enable_all()
        .build()
        .context("starting the broker's runtime")?;
    let client_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(RUNTIME_WORKERS)
        .thread_name("client")
        .on_thread_start(|| allocator::tag_current_thread(Side::Client))
        .enable_all()
        .build()
        .context("starting the client's runtime")?;
    let servers = broker_runtime.block_on(crate::standalone::start_servers(&standalone))?;
    let namesrv = servers.namesrv_addr.to_string();
    // The main thread drives the client from here on (block_on runs the driver on it).
    allocator::tag_current_thread(Side::Client);
    let result = client_runtime.block_on(measure(args, &namesrv));
    allocator::set_counting(false);
    allocator::tag_current_thread(Side::Broker);
    client_runtime.shutdown_timeout(Duration::from_secs(2));
    let stopped = broker_runtime.block_on(servers.stop());
    let phases = result?;
    stopped?;
    report(args, choice, &phases);
    Ok(())
}

/// Warms up, then counts the three phases.
async fn measure(args: &AllocArgs, namesrv: &str) -> Result<Vec<Phase>> {
    let queues = args.queues.to_string();
    let bench_args = ClientBenchArgs::from_flags(&[
        "--namesrv",
        namesrv,
        "--topic",
        TOPIC,
        "--queues",
        &queues,
    ])?;
    client_bench::ensure_topic(&bench_args).await?;
    let producer = client_bench::producer(&bench_args)?;
    let consumer = PullConsumer::start(PullConsumerConfig {
        namesrv_addrs: vec![bench_args.namesrv],
        group: "ferromq-bench-alloc".into(),
        ..PullConsumerConfig::default()
    })
    .context("starting the pull consumer")?;
    let topic_queues = consumer
        .fetch_queues(TOPIC)
        .await
        .context("fetching the topic's queues")?;
    let body = bytes::Bytes::from(client_bench::incompressible(args.size as usize));

    send_sequential(&producer, &body, WARM_UP_MESSAGES).await?;
    let warm_ends = wait_dispatched(&consumer, &topic_queues, None).await?;
    let mut positions = vec![0; topic_queues.len()];
    let warm_total = warm_ends.iter().sum::<u64>();
    pull_all(
        &consumer,
        &topic_queues,
        &mut positions,
        args.pull_batch,
        Some(warm_total),
    )
    .await?;

    let mut phases = Vec::new();
    let counted = Counted::start();
    send_sequential(&producer, &body, args.messages).await?;
    phases.push(counted.stop("send, synchronous", args.messages));

    let counted = Counted::start();
    send_windowed(&producer, &body, args.messages, args.window).await?;
    phases.push(counted.stop("send, windowed", args.messages));

    let expected = warm_total + 2 * args.messages;
    wait_dispatched(&consumer, &topic_queues, Some(expected)).await?;
    let counted = Counted::start();
    let pulled = pull_all(
        &consumer,
        &topic_queues,
        &mut positions,
        args.pull_batch,
        Some(expected),
    )
    .await?;
    phases.push(counted.stop("pull", pulled));
    if pulled != 2 * args.messages {
        bail!("pulled {pulled} messages, sent {}", 2 * args.messages);
    }
    if let Err(error) = producer.close().await {
        eprintln!("warning: closing the producer: {error}");
    }
    // Nothing was committed, so there is nothing in the persist report.
    let _report = consumer.shutdown().await.context("closing the consumer")?;
    Ok(phases)
}

/// A phase being counted.
struct Counted {
    before: Counts,
    started: Instant,
}

impl Counted {
    fn start() -> Counted {
        allocator::set_counting(true);
        Counted {
            before: allocator::counts(),
            started: Instant::now(),
        }
    }

    fn stop(self, name: &'static str, messages: u64) -> Phase {
        let after = allocator::counts();
        allocator::set_counting(false);
        Phase {
            name,
            messages,
            counts: after.since(self.before),
            elapsed: self.started.elapsed(),
        }
    }
}

async fn send_sequential(
    producer: &ferromq_client::Producer,
    body: &bytes::Bytes,
    count: u64,
) -> Result<()> {
    for _ in 0..count {
        producer
            .send(Message::new(TOPIC, body.clone()))
            .await
            .context("a send failed")?;
    }
    Ok(())
}

async fn send_windowed(
    producer: &ferromq_client::Producer,
    body: &bytes::Bytes,
    count: u64,
    window: u32,
) -> Result<()> {
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..window {
        let (producer, body, next) = (producer.clone(), body.clone(), next.clone());
        tasks.spawn(async move {
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < count {
                producer.send(Message::new(TOPIC, body.clone())).await?;
            }
            Ok::<(), ferromq_client::ClientError>(())
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined
            .context("a sender task failed")?
            .context("a send failed")?;
    }
    Ok(())
}

/// Waits (bounded) until the queues' max offsets add up to `expected` (or, with `None`, are
/// stable and non-zero) and returns them.
async fn wait_dispatched(
    consumer: &PullConsumer,
    queues: &[MessageQueue],
    expected: Option<u64>,
) -> Result<Vec<u64>> {
    let deadline = Instant::now() + DISPATCH_WAIT;
    let mut last = None;
    loop {
        let mut offsets = Vec::with_capacity(queues.len());
        for queue in queues {
            offsets.push(
                consumer
                    .max_offset(queue)
                    .await
                    .context("reading a max offset")?,
            );
        }
        let total: u64 = offsets.iter().sum();
        let done = match expected {
            Some(expected) => total >= expected,
            None => total >= WARM_UP_MESSAGES && last == Some(total),
        };
        if done {
            return Ok(offsets);
        }
        if Instant::now() > deadline {
            bail!(
                "the queues show {total} messages after {DISPATCH_WAIT:?}, expected {expected:?}"
            );
        }
        last = Some(total);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Pulls every queue from `positions` to its end; returns how many messages arrived. With
/// `expected`, stops once the positions add up to it.
async fn pull_all(
    consumer: &PullConsumer,
    queues: &[MessageQueue],
    positions: &mut [u64],
    batch: u32,
    expected: Option<u64>,
) -> Result<u64> {
    let mut pulled = 0;
    for (queue, position) in queues.iter().zip(positions.iter_mut()) {
        // Every pull either advances or finds the tail, so this loop ends.
        loop {
            match consumer
                .pull(queue, "*", *position, batch)
                .await
                .context("a pull failed")?
            {
                PullResult::Found {
                    messages,
                    next_offset,
                } => {
                    pulled += messages.len() as u64;
                    *position = next_offset;
                }
                PullResult::NoNewMessage { .. } => break,
                other => bail!("unexpected pull result {other:?}"),
            }
        }
    }
    if let Some(expected) = expected {
        let total: u64 = positions.iter().sum();
        if total != expected {
            bail!("pulled up to offset total {total}, expected {expected}");
        }
    }
    Ok(pulled)
}

fn report(args: &AllocArgs, choice: allocator::Choice, phases: &[Phase]) {
    println!(
        "bench alloc: allocator {}, {} B bodies, {} queues, window {}, {} per pull",
        choice.name(),
        args.size,
        args.queues,
        args.window,
        args.pull_batch
    );
    println!(
        "{:<18} {:>9} {:>14} {:>14} {:>14} {:>14}",
        "phase", "messages", "broker allocs", "broker bytes", "client allocs", "client bytes"
    );
    for phase in phases {
        println!(
            "{:<18} {:>9} {:>14.2} {:>14.1} {:>14.2} {:>14.1}",
            phase.name,
            phase.messages,
            phase.per_message(phase.counts.broker.allocations),
            phase.per_message(phase.counts.broker.bytes),
            phase.per_message(phase.counts.client.allocations),
            phase.per_message(phase.counts.client.bytes),
        );
    }
    println!("(per message; allocations are calls to alloc/realloc, bytes what they asked for)");
    if args.json {
        let out = json!({
            "bench": "alloc",
            "allocator": choice.name(),
            "size": args.size,
            "queues": args.queues,
            "window": args.window,
            "pull_batch": args.pull_batch,
            "phases": phases.iter().map(Phase::json).collect::<Vec<_>>(),
        });
        println!("{out}");
    }
}
