//! `ferromq`: the command line of ferromq.
//!
//! Subcommands today: `standalone` (name server + broker in one process), `namesrv`, `broker`,
//! `controller` (the failover controller), `cluster` (all of them as child processes),
//! `admin` (mqadmin's commands), `bench` and `chaos` (seeded fault injection).
//!
//! Conventions at this edge:
//! 1. Bad flags exit with clap's status 2 and a one-line message on stderr.
//! 2. Every other failure exits with status 1 and one line, `error: <what>: <cause>`; nothing
//!    panics on bad input.
//! 3. Logs go to stderr, filtered by `RUST_LOG` (default `info`); results go to stdout, and with
//!    `--json` the last stdout line is one JSON object.
//! 4. `FERROMQ_ALLOCATOR=system|mimalloc` chooses the allocator (see `allocator`); any other
//!    value exits with status 1 before anything runs.
//! 5. A command whose stdout is closed early (`| head`) dies of SIGPIPE, silently, like a Unix
//!    tool (see `broken_pipe`); servers and `chaos` keep SIGPIPE ignored.

mod admin;
mod allocator;
mod bench;
mod broken_pipe;
mod chaos;
mod cluster;
mod controller;
mod fd_limit;
mod record;
mod report;
mod security;
mod servers;
mod standalone;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use ferromq_store::FlushDiskType;
use tracing_subscriber::EnvFilter;

/// Every allocation of the binary goes through the allocator `FERROMQ_ALLOCATOR` chose
/// (see `allocator`).
#[global_allocator]
static GLOBAL: allocator::Dispatch = allocator::Dispatch;

/// A RocketMQ-compatible message queue whose consumer offsets never lie.
#[derive(Debug, Parser)]
#[command(name = "ferromq", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a name server and a broker in one process on 127.0.0.1, data under ./data.
    ///
    /// Prints `ferromq standalone: namesrv <addr> broker <addr> data <dir>` once both listen.
    /// Point any RocketMQ client at the name server address. Ctrl-C (SIGINT) or SIGTERM stops
    /// it cleanly; after a kill -9 the next start recovers every acknowledged message and
    /// commit.
    Standalone(standalone::StandaloneArgs),
    /// Run a name server.
    Namesrv(servers::NamesrvArgs),
    /// Run a broker from a TOML config with RocketMQ's key names.
    Broker(servers::BrokerArgs),
    /// Run a whole HA cluster on 127.0.0.1 as child processes: a name server, a controller
    /// group and broker groups in controller mode. Prints every node's address and pid, and
    /// stops them all on Ctrl-C.
    Cluster(cluster::ClusterArgs),
    /// Run one node of a controller group (failover on openraft) from a TOML config and
    /// flags with RocketMQ's key names.
    Controller(controller::ControllerArgs),
    /// Benchmarks that report ratios against a baseline measured in the same run.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// mqadmin's commands (topics, groups, progress, resets, offset history, cluster).
    #[command(subcommand)]
    Admin(admin::AdminCommand),
    /// Seeded fault injection against a standalone it starts itself, checked for loss,
    /// unexpected values, offset regressions and poll skips.
    Chaos(chaos::ChaosArgs),
}

/// How appends become durable (RocketMQ `flushDiskType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Flush {
    /// SYNC_FLUSH: acknowledged after fdatasync; concurrent appends share one (group commit).
    Sync,
    /// ASYNC_FLUSH: acknowledged once written; flushed in the background every 500 ms.
    Async,
}

impl Flush {
    /// The store's setting.
    pub fn disk_type(self) -> FlushDiskType {
        match self {
            Flush::Sync => FlushDiskType::SyncFlush,
            Flush::Async => FlushDiskType::AsyncFlush,
        }
    }

    /// The flag value, for reports.
    pub fn name(self) -> &'static str {
        match self {
            Flush::Sync => "sync",
            Flush::Async => "async",
        }
    }
}

fn main() -> ExitCode {
    if let Err(message) = allocator::check_selection() {
        eprintln!("error: {message}");
        return ExitCode::FAILURE;
    }
    let cli = match Cli::try_parse_from(mqadmin_short_flags(std::env::args_os())) {
        Ok(cli) => cli,
        Err(error) => return usage_error(&error),
    };
    init_tracing();
    let serves = matches!(
        cli.command,
        Command::Standalone(_)
            | Command::Namesrv(_)
            | Command::Broker(_)
            | Command::Cluster(_)
            | Command::Controller(_)
            | Command::Chaos(_)
    );
    if !serves {
        if let Err(error) = broken_pipe::die_when_stdout_closes() {
            eprintln!("error: installing the SIGPIPE handler: {error}");
            return ExitCode::FAILURE;
        }
    }
    let result = match cli.command {
        Command::Standalone(args) => standalone::run(&args),
        Command::Namesrv(args) => servers::run_namesrv(&args),
        Command::Broker(args) => servers::run_broker(&args),
        Command::Cluster(args) => cluster::run(&args),
        Command::Controller(args) => controller::run(&args),
        Command::Bench(command) => bench::run(command),
        Command::Admin(command) => admin::run(command),
        Command::Chaos(args) => chaos::run_chaos(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", one_line(&error_chain(&error)));
            ExitCode::FAILURE
        }
    }
}

/// mqadmin spells some flags as multi-letter short options (`-bn brokerName` of
/// `electMaster` and `cleanBrokerMetadata`); clap cannot, so they are rewritten to their long
/// names before parsing.
fn mqadmin_short_flags(
    args: impl Iterator<Item = std::ffi::OsString>,
) -> impl Iterator<Item = std::ffi::OsString> {
    args.map(|arg| {
        if arg == "-bn" {
            std::ffi::OsString::from("--brokerName")
        } else {
            arg
        }
    })
}

/// Prints help and version as clap does; squeezes every other parse error onto one line.
fn usage_error(error: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let code = u8::try_from(error.exit_code()).unwrap_or(2);
    match error.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            // Nothing sensible remains to do if stdout or stderr is gone.
            let _ = error.print();
        }
        _ => {
            let rendered = error.render().to_string();
            let message: Vec<&str> = rendered
                .lines()
                .map(str::trim)
                .take_while(|line| !line.starts_with("Usage:"))
                .filter(|line| !line.is_empty() && !line.starts_with("For more information"))
                .collect();
            eprintln!("{} (see --help)", message.join(" "));
        }
    }
    ExitCode::from(code)
}

/// The error and its causes joined by `: `, skipping a cause that its parent's message
/// already spells out (some errors print their source as part of their own message).
fn error_chain(error: &anyhow::Error) -> String {
    let mut message = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if message.is_empty() {
            message = text;
        } else if !message.ends_with(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
    }
    message
}

/// Joins the lines of a message so every failure reads as one line.
fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

fn init_tracing() {
    // openraft reports every state transition at info; its warnings are what an operator
    // needs by default.
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,openraft=warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

/// The multi-threaded runtime the servers run on.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    use anyhow::Context;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// SIGINT and SIGTERM handlers, installed before a server announces itself so that a signal
/// sent right after the announcement stops it cleanly instead of killing it.
pub(crate) struct ShutdownSignals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    /// Installs the handlers (inside the runtime).
    pub(crate) fn install() -> anyhow::Result<ShutdownSignals> {
        use anyhow::Context;
        use tokio::signal::unix::{signal, SignalKind};
        Ok(ShutdownSignals {
            interrupt: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
            terminate: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
        })
    }

    /// Resolves on SIGINT or SIGTERM with the signal's name.
    pub(crate) async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.terminate.recv() => "SIGTERM",
        }
    }
}
