//! `ferromq bench transaction`: transactional sends (half message, local transaction that
//! commits at once, END as a request) against plain sends, in the same run, with the same
//! producers, in-flight senders, body size and duration. The plain phase is the baseline:
//! `ratio` = transactional msgs/s / plain msgs/s. Latency is per `send` / per
//! `send_in_transaction` call (half + END). An END the broker did not acknowledge is an error.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use ferromq_client::{Message, Producer, ProducerConfig, TransactionProducer, TransactionState};
use serde_json::json;

use super::client::{ensure_topic, incompressible, rate, round, ClientBenchArgs};
use super::stats::{ns_to_us, Histogram};

/// One sender of a phase.
#[derive(Clone)]
enum Sender {
    Plain(Producer),
    Transactional(TransactionProducer),
}

impl Sender {
    async fn send(&self, message: Message) -> Result<(), String> {
        match self {
            Sender::Plain(p) => p.send(message).await.map(|_| ()).map_err(|e| e.to_string()),
            Sender::Transactional(p) => {
                let result = p
                    .send_in_transaction(message, |_, _| TransactionState::Commit)
                    .await
                    .map_err(|e| e.to_string())?;
                result.end.map_err(|e| format!("END not acknowledged: {e}"))
            }
        }
    }

    fn producer(&self) -> &Producer {
        match self {
            Sender::Plain(p) => p,
            Sender::Transactional(p) => p.producer(),
        }
    }
}

/// What one phase measured.
struct Phase {
    messages: u64,
    errors: u64,
    first_error: Option<String>,
    elapsed: Duration,
    latency: Histogram,
}

/// Runs the bench: plain phase, then transactional phase.
pub fn run(args: &ClientBenchArgs) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(async {
        ensure_topic(args).await?;
        let plain = senders(args, false)?;
        let plain_phase = phase(args, &plain).await;
        close(&plain).await;
        let transactional = senders(args, true)?;
        let tx_phase = phase(args, &transactional).await;
        close(&transactional).await;
        report(args, &plain_phase, &tx_phase);
        Ok(())
    })
}

fn senders(args: &ClientBenchArgs, transactional: bool) -> Result<Vec<Sender>> {
    (0..args.producers)
        .map(|_| {
            let config = ProducerConfig {
                namesrv_addrs: vec![args.namesrv],
                group: "ferromq-bench-tx-producer".into(),
                default_topic_queue_nums: args.queues,
                ..ProducerConfig::default()
            };
            Ok(if transactional {
                // Every transaction is ended at once; a check-back means an END was lost.
                Sender::Transactional(TransactionProducer::start(config, |_| {
                    TransactionState::Commit
                })?)
            } else {
                Sender::Plain(Producer::start(config)?)
            })
        })
        .collect::<Result<Vec<_>, ferromq_client::ClientError>>()
        .context("starting producers")
}

async fn close(senders: &[Sender]) {
    for sender in senders {
        if let Err(error) = sender.producer().close().await {
            eprintln!("warning: closing a producer: {error}");
        }
    }
}

/// Sends from every producer and in-flight slot for `--seconds` (or `--count` messages).
async fn phase(args: &ClientBenchArgs, senders: &[Sender]) -> Phase {
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let (claimed, errors) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let first_error = Arc::new(std::sync::Mutex::new(None::<String>));
    let body = bytes::Bytes::from(incompressible(args.size as usize));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for sender in senders {
        for _ in 0..args.in_flight {
            let (sender, claimed, errors, first_error) = (
                sender.clone(),
                claimed.clone(),
                errors.clone(),
                first_error.clone(),
            );
            let (topic, body, count) = (args.topic.clone(), body.clone(), args.count);
            tasks.push(tokio::spawn(async move {
                let (mut latency, mut sent) = (Histogram::default(), 0u64);
                while Instant::now() < deadline {
                    if count.is_some_and(|max| claimed.fetch_add(1, Ordering::Relaxed) >= max) {
                        break;
                    }
                    let begin = Instant::now();
                    match sender
                        .send(Message::new(topic.as_str(), body.clone()))
                        .await
                    {
                        Ok(()) => {
                            latency.record(begin.elapsed().as_nanos() as u64);
                            sent += 1;
                        }
                        Err(error) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            first_error
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .get_or_insert(error);
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                    }
                }
                (latency, sent)
            }));
        }
    }
    let (mut latency, mut messages) = (Histogram::default(), 0);
    for task in tasks {
        if let Ok((h, sent)) = task.await {
            latency.merge(&h);
            messages += sent;
        }
    }
    let first_error = first_error
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    Phase {
        messages,
        errors: errors.load(Ordering::Relaxed),
        first_error,
        elapsed: started.elapsed(),
        latency,
    }
}

fn report(args: &ClientBenchArgs, plain: &Phase, tx: &Phase) {
    let line = |name: &str, p: &Phase| {
        let msgs_per_sec = rate(p.messages, p.elapsed);
        let [p50, p99, p999] = [0.5, 0.99, 0.999].map(|q| ns_to_us(p.latency.percentile(q)));
        println!(
            "{name:<13}: {} msgs in {:.2} s = {msgs_per_sec:.0} msgs/s; latency p50 {p50} us, p99 {p99} us, p999 {p999} us; {} errors",
            p.messages, p.elapsed.as_secs_f64(), p.errors
        );
        if let Some(error) = &p.first_error {
            println!("  first error: {error}");
        }
        json!({"messages": p.messages, "seconds": round(p.elapsed.as_secs_f64(), 3),
            "msgs_per_sec": round(msgs_per_sec, 1), "p50_us": p50, "p99_us": p99, "p999_us": p999,
            "errors": p.errors, "first_error": p.first_error})
    };
    println!(
        "transaction bench: {} B bodies, {} producers, in-flight {} (latency per call)",
        args.size, args.producers, args.in_flight
    );
    let plain_json = line("plain send", plain);
    let tx_json = line("transactional", tx);
    let ratio =
        rate(tx.messages, tx.elapsed) / rate(plain.messages, plain.elapsed).max(f64::MIN_POSITIVE);
    let p99_ratio =
        tx.latency.percentile(0.99) as f64 / (plain.latency.percentile(0.99).max(1)) as f64;
    println!("ratio        : transactional / plain = {ratio:.3} (throughput), {p99_ratio:.2} (p99 latency)");
    if args.json {
        let out = json!({"bench": "transaction", "size": args.size, "producers": args.producers,
            "in_flight": args.in_flight, "plain": plain_json, "transactional": tx_json,
            "ratio": round(ratio, 3), "p99_ratio": round(p99_ratio, 3), "baseline": "plain send, same run"});
        println!("{out}");
    }
}
