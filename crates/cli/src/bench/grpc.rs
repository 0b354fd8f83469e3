//! `ferromq bench grpc`: the gRPC v5 endpoint against the remoting protocol, in one sitting on
//! one broker: remoting sends (the Rust client), then the same load as gRPC SendMessage calls,
//! then receive + ack of everything sent, over gRPC. Prints each phase and the ratios
//! gRPC / remoting.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use ferromq_protocol::grpc::messaging_service_client::MessagingServiceClient;
use ferromq_protocol::grpc::{self as pb, Code};
use serde_json::json;
use tonic::transport::{Channel, Endpoint};

use super::client::{self, ClientBenchArgs, Outcome, Progress};
use super::stats::{ns_to_us, Histogram};

/// Flags of `ferromq bench grpc`.
#[derive(Debug, Clone, clap::Args)]
pub struct GrpcBenchArgs {
    /// The broker's gRPC endpoint (`grpcListenPort`).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8081")]
    pub grpc: std::net::SocketAddr,
    /// Messages one receive asks for.
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(i32).range(1..=32))]
    pub receive_batch: i32,
    /// The remoting and common flags.
    #[command(flatten)]
    pub common: ClientBenchArgs,
}

/// How long a receive waits when nothing is there.
const RECEIVE_LONG_POLL: Duration = Duration::from_secs(1);
/// Receives in a row that find nothing before a consumer decides the drain is over.
const EMPTY_RECEIVES_MAX: u32 = 3;
/// Time the drain may take beyond `--seconds`.
const DRAIN_SLACK: Duration = Duration::from_secs(60);

/// Runs the bench.
pub fn run(args: &GrpcBenchArgs) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(async {
        let common = &args.common;
        client::ensure_topic(common).await?;
        let remoting = client::produce_only(common).await?;
        let channels = connect(args).await?;
        let grpc = send_phase(common, &channels).await;
        let total = remoting.0.messages + grpc.0.messages;
        let receive = receive_phase(args, &channels, total).await;
        report(args, &remoting, &grpc, &receive, total);
        Ok(())
    })
}

async fn connect(args: &GrpcBenchArgs) -> Result<Vec<MessagingServiceClient<Channel>>> {
    let mut channels = Vec::new();
    for _ in 0..args.common.producers.max(args.common.consumers) {
        let channel = Endpoint::from_shared(format!("http://{}", args.grpc))
            .context("gRPC endpoint")?
            .connect_timeout(Duration::from_secs(3))
            .timeout(Duration::from_secs(10))
            .connect()
            .await
            .with_context(|| format!("connecting to the gRPC endpoint {}", args.grpc))?;
        channels.push(MessagingServiceClient::new(channel));
    }
    Ok(channels)
}

fn request<T>(body: T, client_id: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(body);
    if let Ok(value) = client_id.parse() {
        request.metadata_mut().insert("x-mq-client-id", value);
    }
    request
}

/// SendMessage calls of `--batch` messages with `--producers` × `--in-flight` senders.
async fn send_phase(
    args: &ClientBenchArgs,
    channels: &[MessagingServiceClient<Channel>],
) -> (Outcome, Arc<Progress>) {
    let progress = Arc::new(Progress::default());
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let claimed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let body = client::incompressible(args.size as usize);
    let mut tasks = Vec::new();
    for (p, channel) in channels.iter().take(args.producers as usize).enumerate() {
        for slot in 0..args.in_flight {
            let (mut grpc, progress, claimed, body) = (
                channel.clone(),
                progress.clone(),
                claimed.clone(),
                body.clone(),
            );
            let (topic, batch, count) = (args.topic.clone(), u64::from(args.batch), args.count);
            let client_id = format!("bench-grpc-{}-{p}", std::process::id());
            tasks.push(tokio::spawn(async move {
                let mut latency = Histogram::default();
                let mut sequence = 0u64;
                while Instant::now() < deadline {
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
                    let messages = (0..n)
                        .map(|_| {
                            sequence += 1;
                            message(&topic, &format!("B{p:04X}{slot:04X}{sequence:016X}"), &body)
                        })
                        .collect();
                    let begin = Instant::now();
                    let reply = grpc
                        .send_message(request(pb::SendMessageRequest { messages }, &client_id))
                        .await;
                    match reply.map(|r| r.into_inner()) {
                        Ok(reply)
                            if reply
                                .status
                                .as_ref()
                                .is_some_and(|s| s.code == Code::Ok as i32) =>
                        {
                            latency.record(begin.elapsed().as_nanos() as u64);
                            progress.messages.fetch_add(n, Ordering::Relaxed);
                        }
                        Ok(reply) => progress.error(format!("SendMessage: {:?}", reply.status)),
                        Err(status) => {
                            progress.error(format!("SendMessage: {status}"));
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                    }
                }
                latency
            }));
        }
    }
    let latency = client::merge_latencies(tasks, &progress).await;
    let outcome = Outcome {
        messages: progress.messages.load(Ordering::Relaxed),
        elapsed: started.elapsed(),
        latency,
        measured: client::FIXED_WINDOW,
    };
    (outcome, progress)
}

fn message(topic: &str, id: &str, body: &[u8]) -> pb::Message {
    pb::Message {
        topic: Some(pb::Resource {
            resource_namespace: String::new(),
            name: topic.to_string(),
        }),
        user_properties: Default::default(),
        system_properties: Some(pb::SystemProperties {
            message_id: id.to_string(),
            body_encoding: pb::Encoding::Identity as i32,
            message_type: pb::MessageType::Normal as i32,
            ..Default::default()
        }),
        body: body.to_vec(),
    }
}

/// `--consumers` consumers of a fresh group receive and ack until `total` messages came (the
/// drain is timed from the first receive to the last message) or `--seconds` +
/// [`DRAIN_SLACK`] passed, or until every consumer found nothing [`EMPTY_RECEIVES_MAX`] times
/// in a row.
async fn receive_phase(
    args: &GrpcBenchArgs,
    channels: &[MessagingServiceClient<Channel>],
    total: u64,
) -> (Outcome, Arc<Progress>) {
    let common = &args.common;
    let progress = Arc::new(Progress::default());
    let group = common
        .group
        .clone()
        .unwrap_or_else(|| format!("bench-grpc-{}", std::process::id()));
    let deadline = Instant::now() + Duration::from_secs(common.seconds) + DRAIN_SLACK;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (c, channel) in channels.iter().take(common.consumers as usize).enumerate() {
        let (mut grpc, progress, group, topic) = (
            channel.clone(),
            progress.clone(),
            group.clone(),
            common.topic.clone(),
        );
        let batch = args.receive_batch;
        let client_id = format!("bench-grpc-consumer-{}-{c}", std::process::id());
        tasks.push(tokio::spawn(async move {
            let mut latency = Histogram::default();
            let mut empty = 0;
            while Instant::now() < deadline
                && progress.messages.load(Ordering::Relaxed) < total
                && empty < EMPTY_RECEIVES_MAX
            {
                let begin = Instant::now();
                match receive_and_ack(&mut grpc, &client_id, &group, &topic, batch).await {
                    Ok(0) => empty += 1,
                    Ok(n) => {
                        empty = 0;
                        latency.record(begin.elapsed().as_nanos() as u64);
                        progress.received(n);
                    }
                    Err(error) => {
                        progress.error(error);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
            latency
        }));
    }
    let latency = client::merge_latencies(tasks, &progress).await;
    let elapsed = progress
        .last_message_at()
        .map_or_else(|| started.elapsed(), |at| at - started);
    let outcome = Outcome {
        messages: progress.messages.load(Ordering::Relaxed),
        elapsed,
        latency,
        measured: "drain: first receive to last message",
    };
    (outcome, progress)
}

/// One receive and the ack of what it brought; the number of messages.
async fn receive_and_ack(
    grpc: &mut MessagingServiceClient<Channel>,
    client_id: &str,
    group: &str,
    topic: &str,
    batch: i32,
) -> Result<u64, String> {
    let resource = |name: &str| {
        Some(pb::Resource {
            resource_namespace: String::new(),
            name: name.to_string(),
        })
    };
    let receive = pb::ReceiveMessageRequest {
        group: resource(group),
        message_queue: Some(pb::MessageQueue {
            topic: resource(topic),
            id: -1,
            ..Default::default()
        }),
        batch_size: batch,
        invisible_duration: Some(prost_types::Duration {
            seconds: 60,
            nanos: 0,
        }),
        long_polling_timeout: Some(prost_types::Duration {
            seconds: RECEIVE_LONG_POLL.as_secs() as i64,
            nanos: 0,
        }),
        ..Default::default()
    };
    let mut stream = grpc
        .receive_message(request(receive, client_id))
        .await
        .map_err(|s| format!("ReceiveMessage: {s}"))?
        .into_inner();
    let mut entries = Vec::new();
    while let Some(item) = stream
        .message()
        .await
        .map_err(|s| format!("ReceiveMessage: {s}"))?
    {
        match item.content {
            Some(pb::receive_message_response::Content::Message(m)) => {
                let system = m.system_properties.unwrap_or_default();
                entries.push(pb::AckMessageEntry {
                    message_id: system.message_id,
                    receipt_handle: system.receipt_handle.unwrap_or_default(),
                    lite_topic: None,
                });
            }
            Some(pb::receive_message_response::Content::Status(s))
                if s.code != Code::Ok as i32 && s.code != Code::MessageNotFound as i32 =>
            {
                return Err(format!("ReceiveMessage: {} {}", s.code, s.message));
            }
            _ => {}
        }
    }
    if entries.is_empty() {
        return Ok(0);
    }
    let n = entries.len() as u64;
    let ack = grpc
        .ack_message(request(
            pb::AckMessageRequest {
                group: resource(group),
                topic: resource(topic),
                entries,
            },
            client_id,
        ))
        .await
        .map_err(|s| format!("AckMessage: {s}"))?
        .into_inner();
    match ack.status {
        Some(s) if s.code == Code::Ok as i32 => Ok(n),
        other => Err(format!("AckMessage: {other:?}")),
    }
}

fn report(
    args: &GrpcBenchArgs,
    remoting: &(Outcome, Arc<Progress>),
    grpc: &(Outcome, Arc<Progress>),
    receive: &(Outcome, Arc<Progress>),
    total: u64,
) {
    let line = |name: &str, (outcome, progress): &(Outcome, Arc<Progress>)| {
        let rate = client::rate(outcome.messages, outcome.elapsed);
        let h = &outcome.latency;
        let [p50, p99] = [0.5, 0.99].map(|q| ns_to_us(h.percentile(q)));
        let errors = progress.errors.load(Ordering::Relaxed);
        println!(
            "{name:<16}: {} msgs in {:.2} s = {rate:.0} msgs/s, p50 {p50} us, p99 {p99} us, {errors} errors ({})",
            outcome.messages,
            outcome.elapsed.as_secs_f64(),
            outcome.measured
        );
        if let Some(error) = progress.first_error() {
            println!("  first error: {error}");
        }
        json!({"messages": outcome.messages, "msgs_per_sec": client::round(rate, 1),
               "p50_us": p50, "p99_us": p99, "errors": errors, "measured": outcome.measured})
    };
    let r = line("remoting send", remoting);
    let g = line("grpc send", grpc);
    let c = line("grpc receive+ack", receive);
    let ratio = |a: &serde_json::Value, b: &serde_json::Value, key: &str| {
        let (a, b) = (
            a[key].as_f64().unwrap_or(0.0),
            b[key].as_f64().unwrap_or(0.0),
        );
        if b > 0.0 {
            client::round(a / b, 3)
        } else {
            0.0
        }
    };
    let (thr, p50, p99) = (
        ratio(&g, &r, "msgs_per_sec"),
        ratio(&g, &r, "p50_us"),
        ratio(&g, &r, "p99_us"),
    );
    println!("ratio grpc/remoting: throughput {thr}, p50 {p50}, p99 {p99}");
    println!(
        "received {} of the {total} sent ({} B bodies, {} producers x {} in flight, batch {}, {} consumers)",
        receive.0.messages, args.common.size, args.common.producers, args.common.in_flight,
        args.common.batch, args.common.consumers
    );
    if args.common.json {
        println!(
            "{}",
            json!({"bench": "grpc", "remoting_send": r, "grpc_send": g, "grpc_receive_ack": c,
                   "ratio_throughput": thr, "ratio_p50": p50, "ratio_p99": p99, "sent": total,
                   "received": receive.0.messages, "size": args.common.size,
                   "producers": args.common.producers, "in_flight": args.common.in_flight,
                   "batch": args.common.batch, "consumers": args.common.consumers})
        );
    }
}
