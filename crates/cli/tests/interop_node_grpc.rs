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

use common::grpc_interop as interop;

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
    interop::run_every_type_scenario(test, "node", "InteropGrpcNode", &node_command);
}
