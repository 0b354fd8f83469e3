//! Interop with the official RocketMQ 5.x gRPC client for Go,
//! `github.com/apache/rocketmq-clients/golang/v5` v5.1.4 (pinned in
//! `scripts/interop/go-grpc/go.mod`), through the driver `scripts/interop/go-grpc/main.go`
//! built by `scripts/interop/install-go.sh` into
//! `target/interop/go/bin/ferromq-go-grpc-interop`, against `ferromq standalone`'s gRPC
//! endpoint.
//!
//! One test, one standalone: the Go producer sends the scenario of
//! `common::grpc_interop` (1,000 normal and FIFO messages, DELAY, committed, rolled-back and
//! checked-back TRANSACTION messages); then a SimpleConsumer and a PushConsumer, each of its
//! own FIFO (orderly) group, receive and ack everything, and the test checks every delivery.
//!
//! When the driver is missing the test prints why and passes, unless `FERROMQ_INTEROP_REQUIRED`
//! is set (as `scripts/test` does after installing): then it fails. Logs (the drivers' stdout
//! and stderr, the Go client's own log under `logs/rocketmq/`, the standalone's) are kept in
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

fn driver() -> PathBuf {
    interop::interop_dir()
        .join("go")
        .join("bin")
        .join("ferromq-go-grpc-interop")
}

fn go_command(log_dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(driver());
    // The Go client logs to $HOME/logs/rocketmq/rocketmq_client_go.log.
    command.args(args).env("HOME", log_dir);
    command
}

#[test]
fn go_grpc_client_produces_every_type_and_simple_and_push_consumers_receive_them() {
    let test = "go_grpc_client_produces_every_type_and_simple_and_push_consumers_receive_them";
    let stamp = interop::interop_dir().join("go").join("installed.stamp");
    let installed = driver().exists()
        && fs::read_to_string(&stamp).is_ok_and(|s| s.contains("rocketmq-clients/golang/v5"));
    let why = format!(
        "{} or a stamp naming rocketmq-clients/golang/v5 in {} is missing",
        driver().display(),
        stamp.display()
    );
    if interop::present_or_skip(test, installed, &why, "scripts/interop/install-go.sh").is_none() {
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
    let topic = "InteropGrpcGo";
    let (simple_group, push_group) = ("CG_go_simple", "CG_go_push");
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
        go_command(
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
                "go",
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
    let produced = produced(test, &lines, "go");
    let produce_s = started.elapsed().as_secs_f64();

    let expect = produced.expected().len().to_string();
    let timeout = CONSUME_TIMEOUT_S.to_string();
    let mut timings = Vec::new();
    for (kind, group) in [("simple", simple_group), ("push", push_group)] {
        let started = Instant::now();
        let lines = run_driver(
            go_command(
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
