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

use common::grpc_interop as interop;

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
    interop::run_every_type_scenario(test, "go", "InteropGrpcGo", &go_command);
}
