//! `ferromq bench`: benchmarks that report a ratio against a baseline measured in the same run
//! on the same disk.
//!
//! - `bench store`: the store's append path (`MessageStore::put`) against plain file writes.
//! - `bench recovery`: restart time after a crash, from the last checkpoint and from nothing.
//! - `bench produce|consume|e2e`: the Rust client against a running broker (absolute figures;
//!   their baseline is `bench store` on the same machine).
//! - `bench transaction`: transactional sends (half + END) against plain sends, same run.
//! - `bench alloc`: allocations per message on the send and pull paths, broker and client.
//! - `bench rss`: the broker's RSS with many topics and idle connections.
//! - `bench grpc`: gRPC sends and receive + ack against remoting sends, same run and broker.
//!
//! Every run works in a scratch directory of its own (under `--dir`, default the system temp
//! directory) and removes it at the end, whatever happened.

mod alloc;
mod client;
mod codec;
mod e2e_stamp;
mod failover;
mod fsync_probe;
mod grpc;
mod recovery;
mod rss;
mod rtt_probe;
mod stats;
mod store;
mod transaction;
mod transfer;

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::Subcommand;

/// Benchmarks.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Append throughput and latency of the store against raw file writes on the same disk.
    ///
    /// Writer threads put one record at a time for --seconds; then one thread writes the same
    /// bytes to a plain file on the same disk: under async flush one write per record, under
    /// sync flush one write of records_per_fsync records (the store's measured group-commit
    /// batch) followed by fdatasync. It stops after as many records as the store took, or
    /// after --seconds. ratio = store msgs/s / baseline msgs/s. --record-size is the encoded
    /// CommitLog record size; the body is sized to match. MB/s counts encoded bytes (10^6).
    Store(store::StoreArgs),
    /// Restart time after a crash: from the last checkpoint, and a full rescan of the log.
    ///
    /// A child process fills an async-flush store with 1 KiB records, fsyncs them, waits for a
    /// checkpoint at the log end and exits without closing the store (a crash). The parent
    /// times opening it (crash recovery from that checkpoint) and, after deleting the files
    /// under checkpoint/, opening it again (full rescan of the log). The page cache is warm.
    Recovery(recovery::RecoveryArgs),
    /// Send throughput and latency through the Rust client against a running broker.
    ///
    /// --producers producers (one connection each) with --in-flight concurrent sends each;
    /// every send carries --batch messages of --size body bytes; latency is per send call.
    /// Runs --seconds or until --count messages were acknowledged. Prints msgs/s, MB/s (body
    /// bytes, 10^6), latency p50/p99/p999/max and errors, with a progress line each second on
    /// stderr. Figures are absolute: the baseline for client benches is `ferromq bench store`
    /// (the broker's raw append path) on the same machine.
    Produce(client::ClientBenchArgs),
    /// Consume throughput through the Rust client (lite pull consumers).
    ///
    /// --consumers consumers in a fresh group (or --group) read --topic from each queue's
    /// first message for --seconds or until --count messages arrived; latency is the duration
    /// of each non-empty poll. Final positions are committed; a failed commit is an error.
    /// Baseline: `ferromq bench store` on the same machine.
    ///
    /// --compare-transfer: the same drain under both pull transfers of the brokers
    /// (transferMsgByHeap true and false, switched at run time), alternating, and the ratio
    /// zero_copy / heap.
    Consume(client::ClientBenchArgs),
    /// End-to-end latency: producers stamp the send time into each body, consumers measure
    /// receive time minus send time.
    ///
    /// Consumers start at the queues' ends, then producers send as in `bench produce`;
    /// msgs/s is the send rate, latency is per message from send to poll. Messages that never
    /// arrive are errors. Baseline: `ferromq bench store` on the same machine.
    E2e(client::ClientBenchArgs),
    /// Failover time and cost: kill -9 of the master of a local cluster `--kills` times.
    ///
    /// Starts a name server, `--controllers` controllers and `--replicas` brokers in
    /// controller mode (child processes), keeps `--producers` Rust-client producers sending,
    /// and per kill measures kill → new master elected and kill → first send acknowledged by
    /// the new master (p50/p99/max). Throughput during failover windows is reported as a
    /// ratio to the steady throughput of the same run; a final drain counts lost (must be 0)
    /// and duplicated messages.
    Failover(failover::FailoverBenchArgs),
    /// Transactional sends (half message + END commit) against plain sends, same run.
    ///
    /// Runs a plain phase, then a transactional phase, each for --seconds (or --count
    /// messages) with --producers producers and --in-flight senders each; every transaction's
    /// local callback commits at once and END is a request. Prints msgs/s and latency
    /// p50/p99/p999 per call for both and ratio = transactional msgs/s / plain msgs/s.
    Transaction(client::ClientBenchArgs),
    /// The gRPC v5 endpoint against remoting on one broker, in one sitting.
    ///
    /// Remoting sends through the Rust client for --seconds (or --count), then the same load
    /// as gRPC SendMessage calls (--producers channels x --in-flight senders, --batch messages
    /// per call) to --grpc, then --consumers gRPC consumers of a fresh group receive and ack
    /// everything sent (drain time). Prints msgs/s and p50/p99 per phase and the ratios
    /// gRPC / remoting.
    Grpc(grpc::GrpcBenchArgs),
    /// Heap allocations per message on the send and pull paths, broker and client apart.
    ///
    /// Runs a standalone (ASYNC_FLUSH, scratch directory) and the Rust client in this process
    /// on two runtimes; the allocator counts calls per side (client runtime threads against
    /// everything else). After a warm-up, counts --messages synchronous sends, --messages
    /// sends with --window in flight, and pulling them all back; prints allocations and bytes
    /// per message for each side. FERROMQ_ALLOCATOR chooses the allocator measured.
    Alloc(alloc::AllocArgs),
    /// The broker's resident memory with many topics and many idle connections.
    ///
    /// Starts `ferromq standalone` as a child (ASYNC_FLUSH, scratch directory, free ports),
    /// creates --topics topics of --queues queues (UPDATE_AND_CREATE_TOPIC), opens
    /// --connections idle TCP connections to the broker, and prints VmRSS and VmHWM at the
    /// idle start, after the topics and after the connections, RSS per queue and per
    /// connection, and the broker's CPU over --idle-seconds before the connections and with
    /// every connection idle. From 1,000 connections it fails when an idle connection costs
    /// more than 24 KiB of RSS or the idle broker more than 5% of a core. Raises this process's open-file limit to the
    /// hard limit first and refuses when that cannot hold the connections.
    Rss(rss::RssArgs),
    /// The CPU cost of a send's remoting frames, without network or store.
    ///
    /// Per frame (a SEND_MESSAGE_V2 request with a 128-byte body, and its reply): encoding
    /// and decoding each with its typed header, against a copy of the request frame into a
    /// new buffer timed in the same round. --rounds rounds of --iterations frames per phase;
    /// each figure is the median of the rounds, in ns per frame and as a ratio to the copy.
    Codec(codec::CodecArgs),
    /// Internal: the child process of `bench recovery` that fills a store and exits without
    /// closing it.
    #[command(hide = true)]
    RecoveryFill(recovery::FillArgs),
}

/// Runs a bench subcommand.
pub fn run(command: BenchCommand) -> Result<()> {
    match command {
        BenchCommand::Store(args) => store::run(&args),
        BenchCommand::Alloc(args) => alloc::run(&args),
        BenchCommand::Rss(args) => rss::run(&args),
        BenchCommand::Codec(args) => codec::run(&args),
        BenchCommand::Recovery(args) => recovery::run(&args),
        BenchCommand::RecoveryFill(args) => recovery::fill(&args),
        BenchCommand::Produce(args) => client::run(client::Kind::Produce, &args),
        BenchCommand::Consume(args) => client::run(client::Kind::Consume, &args),
        BenchCommand::E2e(args) => client::run(client::Kind::E2e, &args),
        BenchCommand::Failover(args) => failover::run(&args),
        BenchCommand::Transaction(args) => transaction::run(&args),
        BenchCommand::Grpc(args) => grpc::run(&args),
    }
}

/// A directory of the run's own, removed (with everything in it) when dropped.
#[derive(Debug)]
pub struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    /// Creates `ferromq-bench-<pid>-<nanos>` under `parent` (default: the system temp dir).
    pub fn create(parent: Option<&Path>) -> Result<ScratchDir> {
        let parent = parent.map_or_else(std::env::temp_dir, Path::to_path_buf);
        std::fs::create_dir_all(&parent)
            .with_context(|| format!("creating the bench directory {}", parent.display()))?;
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = parent.join(format!("ferromq-bench-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&path)
            .with_context(|| format!("creating the bench directory {}", path.display()))?;
        Ok(ScratchDir { path })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_dir_all(&self.path) {
            tracing::warn!(path = %self.path.display(), %error, "could not remove the bench directory");
        }
    }
}

/// Parses a byte count: a plain number, or one with a `KiB`, `MiB` or `GiB` suffix.
pub fn parse_bytes(text: &str) -> Result<u64> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, ""),
    };
    let multiplier: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        other => bail!("unknown unit {other:?} in {text:?}; use bytes or KiB, MiB, GiB"),
    };
    let count: u64 = digits
        .parse()
        .with_context(|| format!("{text:?} is not a byte count"))?;
    count
        .checked_mul(multiplier)
        .with_context(|| format!("{text} does not fit in 64 bits"))
}

/// `parse_bytes` for clap, which wants a `String` error.
fn byte_count(text: &str) -> Result<u64, String> {
    parse_bytes(text).map_err(|e| format!("{e:#}"))
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn byte_counts_accept_plain_numbers_and_binary_units() {
        assert_eq!(parse_bytes("268435456").unwrap(), 268_435_456);
        assert_eq!(parse_bytes("256MiB").unwrap(), 256 << 20);
        assert_eq!(parse_bytes("4 KiB").unwrap(), 4096);
        assert_eq!(parse_bytes("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_bytes("12B").unwrap(), 12);
    }

    #[test]
    fn byte_counts_reject_garbage() {
        for bad in ["", "MiB", "12MB", "-1", "1.5GiB", "99999999999GiB"] {
            assert!(parse_bytes(bad).is_err(), "{bad} was accepted");
        }
    }
}
