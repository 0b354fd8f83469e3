//! `ferromq bench consume --compare-transfer`: one backlog drained under both pull transfers
//! of the brokers — `transferMsgByHeap=true` (each record read into memory and its CRC
//! verified, the default) and `false` (records sent from the CommitLog files with
//! `sendfile`) — in one run against the same brokers and data.
//!
//! Every master of the topic is switched with UPDATE_BROKER_CONFIG before each phase. The
//! phases alternate heap, zero copy, heap, ... (`--compare-rounds` each), each with a fresh
//! consumer group from the queues' first messages, so page-cache warmth favours neither; the
//! best phase of each setting is reported, with the ratio zero_copy / heap. The brokers'
//! original setting is restored at the end, also after a failed phase.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use ferromq_client::{ConnectionPool, RouteCache};
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::RemotingCommand;
use serde_json::json;

use super::client::{self, rate, round, ClientBenchArgs, Outcome};
use super::stats::ns_to_us;

/// Bound on each admin request to a broker.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);
/// The broker key switched between phases.
const KEY: &str = "transferMsgByHeap";

/// The best phase of one setting.
#[derive(Default)]
struct Best {
    messages: u64,
    msgs_per_sec: f64,
    p99_us: f64,
    phases: Vec<f64>,
}

/// Runs the comparison and prints it.
pub async fn compare(args: &ClientBenchArgs) -> Result<()> {
    let pool = Arc::new(ConnectionPool::new(args.security.client_options()?));
    let brokers = masters(args, &pool).await?;
    let original = setting(&pool, brokers[0]).await?;
    let result = phases(args, &pool, &brokers).await;
    // Restore before reporting, whatever happened.
    for &broker in &brokers {
        if let Err(error) = set(&pool, broker, original).await {
            eprintln!("warning: could not restore {KEY}={original} on {broker}: {error:#}");
        }
    }
    pool.close_all();
    let (heap, zero_copy) = result?;
    report(args, &heap, &zero_copy);
    for best in [&heap, &zero_copy] {
        if let Some(count) = args.count {
            if best.messages < count {
                bail!(
                    "a phase received {} of {count} messages within {} s",
                    best.messages,
                    args.seconds
                );
            }
        }
    }
    Ok(())
}

/// Alternating phases; the best of each setting (heap, zero copy).
async fn phases(
    args: &ClientBenchArgs,
    pool: &ConnectionPool,
    brokers: &[SocketAddr],
) -> Result<(Best, Best)> {
    let mut heap = Best::default();
    let mut zero_copy = Best::default();
    for phase in 0..args.compare_rounds * 2 {
        let by_heap = phase % 2 == 0;
        for &broker in brokers {
            set(pool, broker, by_heap).await?;
        }
        let label = if by_heap { "heap" } else { "zero_copy" };
        eprintln!("phase {}: {KEY}={by_heap} ({label})", phase + 1);
        let (outcome, progress) = client::consume_phase(args).await?;
        let errors = progress.errors.load(std::sync::atomic::Ordering::Relaxed);
        if errors > 0 {
            bail!(
                "{label} phase: {errors} errors, first: {}",
                progress.first_error().unwrap_or_default()
            );
        }
        let best = if by_heap { &mut heap } else { &mut zero_copy };
        best.record(&outcome);
    }
    Ok((heap, zero_copy))
}

impl Best {
    fn record(&mut self, outcome: &Outcome) {
        let msgs_per_sec = rate(outcome.messages, outcome.elapsed);
        eprintln!(
            "  {} msgs in {:.2} s = {msgs_per_sec:.0} msgs/s",
            outcome.messages,
            outcome.elapsed.as_secs_f64()
        );
        self.phases.push(round(msgs_per_sec, 1));
        if msgs_per_sec > self.msgs_per_sec {
            self.messages = outcome.messages;
            self.msgs_per_sec = msgs_per_sec;
            self.p99_us = ns_to_us(outcome.latency.percentile(0.99));
        }
    }
}

fn report(args: &ClientBenchArgs, heap: &Best, zero_copy: &Best) {
    let ratio = if heap.msgs_per_sec > 0.0 {
        zero_copy.msgs_per_sec / heap.msgs_per_sec
    } else {
        0.0
    };
    for (name, best) in [("heap", heap), ("zero_copy", zero_copy)] {
        println!(
            "{name:<9}: {:.0} msgs/s, {:.1} MB/s, p99 {} us per poll (best of {:?} msgs/s; {} B bodies, {} consumers)",
            best.msgs_per_sec,
            best.msgs_per_sec * args.size as f64 / 1e6,
            best.p99_us,
            best.phases,
            args.size,
            args.consumers,
        );
    }
    println!("ratio    : zero_copy / heap = {ratio:.3}");
    if args.json {
        println!(
            "{}",
            json!({
                "bench": "consume --compare-transfer",
                "topic": args.topic,
                "size": args.size,
                "consumers": args.consumers,
                "count": args.count,
                "heap_msgs_per_sec": round(heap.msgs_per_sec, 1),
                "zero_copy_msgs_per_sec": round(zero_copy.msgs_per_sec, 1),
                "heap_phases": heap.phases,
                "zero_copy_phases": zero_copy.phases,
                "ratio": round(ratio, 3),
            })
        );
    }
}

/// The master of every broker that serves the topic.
async fn masters(args: &ClientBenchArgs, pool: &Arc<ConnectionPool>) -> Result<Vec<SocketAddr>> {
    let routes = RouteCache::new(
        vec![args.namesrv],
        pool.clone(),
        ADMIN_TIMEOUT,
        Duration::ZERO,
    )
    .context("name server address")?;
    let route = routes
        .refresh(&args.topic)
        .await
        .with_context(|| format!("the route of {} (fill the backlog first)", args.topic))?;
    let masters: Vec<SocketAddr> = route
        .data
        .broker_datas
        .iter()
        .filter_map(|b| route.master_addr(&b.broker_name))
        .collect();
    if masters.is_empty() {
        bail!("no master serves {}", args.topic);
    }
    Ok(masters)
}

/// The broker's `transferMsgByHeap` now.
async fn setting(pool: &ConnectionPool, broker: SocketAddr) -> Result<bool> {
    let command = RemotingCommand::new_request(request::GET_BROKER_CONFIG, Default::default());
    let reply = pool
        .invoke(broker, command, ADMIN_TIMEOUT)
        .await
        .with_context(|| format!("reading the config of {broker}"))?;
    if reply.code != response::SUCCESS {
        bail!("{broker} refused GET_BROKER_CONFIG: {:?}", reply.remark);
    }
    let text = String::from_utf8_lossy(reply.body.as_deref().unwrap_or_default()).into_owned();
    let value = text
        .lines()
        .find_map(|line| line.trim().strip_prefix(KEY)?.strip_prefix('='))
        .with_context(|| format!("{broker} has no {KEY} key: not a broker that can switch it"))?;
    match value.trim() {
        "true" => Ok(true),
        "false" => Ok(false),
        other => bail!("{broker} reports {KEY}={other}"),
    }
}

/// Sets the broker's `transferMsgByHeap`.
async fn set(pool: &ConnectionPool, broker: SocketAddr, by_heap: bool) -> Result<()> {
    let command = RemotingCommand::new_request(request::UPDATE_BROKER_CONFIG, Default::default())
        .with_body(format!("{KEY}={by_heap}\n"));
    let reply = pool
        .invoke(broker, command, ADMIN_TIMEOUT)
        .await
        .with_context(|| format!("setting {KEY}={by_heap} on {broker}"))?;
    if reply.code != response::SUCCESS {
        bail!(
            "{broker} refused {KEY}={by_heap}: {}",
            reply.remark.unwrap_or_default()
        );
    }
    Ok(())
}
