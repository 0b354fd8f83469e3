//! Interop with the official RocketMQ 5.x gRPC client for Node.js, npm
//! `rocketmq-client-nodejs` 1.0.8 (installed by `scripts/interop/install.sh` into
//! `target/interop/node`), through the driver `scripts/interop/node_grpc.js`, against
//! `ferromq standalone`'s gRPC endpoint.
//!
//! One test, one standalone: the Node producer sends the scenario of
//! `common::grpc_interop` (1,000 normal and FIFO messages, DELAY, committed, rolled-back and
//! checked-back TRANSACTION messages); then a SimpleConsumer and a PushConsumer, each of its
//! own FIFO (orderly) group, receive and ack everything, and the test checks every delivery.
//!
//! When the driver is missing the test prints why and passes, unless `FERROMQ_INTEROP_REQUIRED`
//! is set (as `scripts/test` does after installing): then it fails. Logs (the drivers' stdout
//! and stderr, where the driver sends the client's log, and the standalone's) are kept in
//! `target/interop/runs/<test>/`; every child is killed when its guard drops and every wait has
//! a deadline.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::grpc_interop::{
    self as interop, check_consumed, orderly_group, produced, run_driver, start_standalone, COUNT,
    DELAYED, DELAY_MS, TRANSACTIONS,
};

/// Deadline for the producer (1,008 sends, waiting for the orphan's check-back).
const PRODUCE_DEADLINE: Duration = Duration::from_secs(60);
/// The consumers' own timeout, and the harness's deadline above it (the push consumer's
/// GracefulStop waits up to the long polling, 20 s, for its held receives).
const CONSUME_TIMEOUT_S: u64 = 40;
const CONSUME_DEADLINE: Duration = Duration::from_secs(CONSUME_TIMEOUT_S + 35);

fn node_modules() -> PathBuf {
    interop::interop_dir().join("node").join("node_modules")
}

fn node_command(log_dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new("node");
    command
        .arg(interop::repo_root().join("scripts/interop/node_grpc.js"))
        .args(args)
        .env("FERROMQ_NODE_MODULES", node_modules())
        .env("HOME", log_dir);
    command
}

#[test]
fn node_grpc_client_produces_every_type_and_simple_and_push_consumers_receive_them() {
    let test = "node_grpc_client_produces_every_type_and_simple_and_push_consumers_receive_them";
    let stamp = interop::interop_dir().join("installed.stamp");
    let package = node_modules()
        .join("rocketmq-client-nodejs")
        .join("package.json");
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let installed = node
        && package.exists()
        && fs::read_to_string(&stamp).is_ok_and(|s| s.contains("rocketmq-client-nodejs"));
    let why = format!(
        "node, {} or a stamp naming rocketmq-client-nodejs in {} is missing",
        package.display(),
        stamp.display()
    );
    if interop::present_or_skip(test, installed, &why, "scripts/interop/install.sh").is_none() {
        return;
    }
    let log_dir = interop::log_dir(test);
    let data = tempfile::tempdir().unwrap();
    // Check-backs 1 s after a half is stored, so the undecided transaction is resolved soon.
    let standalone = start_standalone(
        data.path(),
        &log_dir,
        &[
            "--transaction-timeout-ms",
            "1000",
            "--transaction-check-interval-ms",
            "1000",
        ],
    );
    let grpc = standalone.grpc.clone();
    let topic = "InteropGrpcNode";
    let (simple_group, push_group) = ("CG_node_simple", "CG_node_push");
    orderly_group(&standalone.broker, simple_group);
    orderly_group(&standalone.broker, push_group);

    let (count, delayed, delay_ms, transactions) = (
        COUNT.to_string(),
        DELAYED.to_string(),
        DELAY_MS.to_string(),
        TRANSACTIONS.to_string(),
    );
    let started = Instant::now();
    let lines = run_driver(
        node_command(
            &log_dir,
            &[
                "produce",
                "--endpoints",
                &grpc,
                "--topic",
                topic,
                "--count",
                &count,
                "--prefix",
                "node",
                "--delayed",
                &delayed,
                "--delay-ms",
                &delay_ms,
                "--transactions",
                &transactions,
                "--orphan",
            ],
        ),
        &log_dir,
        "produce",
        PRODUCE_DEADLINE,
    );
    let produced = produced(test, &lines, "node");
    let produce_s = started.elapsed().as_secs_f64();

    let expect = produced.expected().len().to_string();
    let timeout = CONSUME_TIMEOUT_S.to_string();
    let mut timings = Vec::new();
    for (kind, group) in [("simple", simple_group), ("push", push_group)] {
        let started = Instant::now();
        let lines = run_driver(
            node_command(
                &log_dir,
                &[
                    kind,
                    "--endpoints",
                    &grpc,
                    "--topic",
                    topic,
                    "--group",
                    group,
                    "--expect",
                    &expect,
                    "--timeout-s",
                    &timeout,
                ],
            ),
            &log_dir,
            kind,
            CONSUME_DEADLINE,
        );
        let consumed = check_consumed(test, kind, &lines, &produced);
        timings.push(format!(
            "{kind} consumer {} messages in {:.1} s (DELAY messages {}..{} ms after their time)",
            consumed.received,
            started.elapsed().as_secs_f64(),
            consumed.delay_lateness_min_ms,
            consumed.delay_lateness_max_ms
        ));
    }
    eprintln!(
        "{test}: produced {} messages in {produce_s:.1} s ({} check-backs); {}",
        produced.sent.len(),
        produced.checks.len(),
        timings.join("; ")
    );
    drop(standalone);
}
