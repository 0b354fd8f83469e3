//! PostgreSQL for tests: the shared server of `scripts/test` ([`shared_url`]) and private
//! servers a test controls ([`PgServer`]: initdb into a temporary directory, `pg_ctl` start
//! and stop on a free loopback port). As root (scripts/test may run as root, and initdb
//! refuses root) the server runs as the `postgres` user created by Debian's package, with a
//! data directory it owns.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{bail, Context};
use ferromq_client::offset_store::postgres::tokio_postgres;

use crate::skip_or_fail;

/// Environment variable naming the shared server's connection string.
pub const URL_VAR: &str = "FERROMQ_TEST_PG_URL";
/// Environment variable naming the directory of `initdb` and `pg_ctl`.
pub const BIN_VAR: &str = "FERROMQ_TEST_PG_BIN";

/// The shared server's connection string, or `None` (skipped) when unset.
pub fn shared_url() -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => skip_or_fail(&format!(
            "{URL_VAR} is not set (scripts/test starts PostgreSQL with scripts/tools/postgres.sh)"
        )),
    }
}

/// The directory holding `initdb` and `pg_ctl`: `FERROMQ_TEST_PG_BIN`, else the newest
/// `/usr/lib/postgresql/<version>/bin`; `None` (skipped) when there is none.
pub fn bin_dir() -> Option<PathBuf> {
    if let Ok(dir) = std::env::var(BIN_VAR) {
        if !dir.is_empty() {
            return Some(PathBuf::from(dir));
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|bin| bin.join("initdb").exists())
        .collect();
    found.sort();
    match found.pop() {
        Some(dir) => Some(dir),
        None => skip_or_fail(&format!(
            "no PostgreSQL server binaries ({BIN_VAR} unset, none in /usr/lib/postgresql; \
             scripts/tools/install-postgres.sh installs them)"
        )),
    }
}

/// Connects a plain client (for the tests' own statements) to `url`.
///
/// # Errors
/// The connection failed.
pub async fn connect(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .context("connect to PostgreSQL")?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// A private PostgreSQL server; stopped (immediate mode) and deleted on drop.
pub struct PgServer {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    running: bool,
    _root: tempfile::TempDir,
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Runs `program` (as `postgres` when this process is root).
fn run_as_server_user(program: &Path, args: &[&str]) -> anyhow::Result<Output> {
    let output = if is_root() {
        Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(program)
            .args(args)
            .output()
    } else {
        Command::new(program).args(args).output()
    }
    .with_context(|| format!("run {}", program.display()))?;
    Ok(output)
}

fn check(output: Output, what: &str) -> anyhow::Result<()> {
    if !output.status.success() {
        bail!(
            "{what} failed ({}): {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl PgServer {
    /// Initialises a cluster with the binaries in `bin` and starts it.
    ///
    /// # Errors
    /// initdb or pg_ctl failed (their output is in the error).
    pub fn start(bin: &Path) -> anyhow::Result<PgServer> {
        let root = tempfile::Builder::new().prefix("ferromq-pg").tempdir()?;
        let data = root.path().join("data");
        std::fs::create_dir(&data)?;
        if is_root() {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755))?;
            let owner = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(&data)
                .output()?;
            check(owner, "chown of the data directory to postgres")?;
        }
        let data_arg = data.to_string_lossy().to_string();
        let init = run_as_server_user(
            &bin.join("initdb"),
            &[
                "-D",
                &data_arg,
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        )?;
        check(init, "initdb")?;
        let mut server = PgServer {
            bin: bin.to_path_buf(),
            data,
            port: free_port()?,
            running: false,
            _root: root,
        };
        server.start_again()?;
        Ok(server)
    }

    /// The connection string (user `postgres`, database `postgres`).
    pub fn url(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres connect_timeout=2",
            self.port
        )
    }

    /// Starts the (stopped) server again on the same port.
    ///
    /// # Errors
    /// pg_ctl failed.
    pub fn start_again(&mut self) -> anyhow::Result<()> {
        let data = self.data.to_string_lossy().to_string();
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=50",
            self.port, data
        );
        let log = self.data.join("server.log").to_string_lossy().to_string();
        let out = run_as_server_user(
            &self.bin.join("pg_ctl"),
            &[
                "-D", &data, "-o", &options, "-l", &log, "-w", "-t", "30", "start",
            ],
        )?;
        check(out, "pg_ctl start")?;
        self.running = true;
        Ok(())
    }

    /// Stops the server (`fast`: sessions are ended at once).
    ///
    /// # Errors
    /// pg_ctl failed.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        self.stop_mode("fast")
    }

    fn stop_mode(&mut self, mode: &str) -> anyhow::Result<()> {
        let data = self.data.to_string_lossy().to_string();
        let out = run_as_server_user(
            &self.bin.join("pg_ctl"),
            &["-D", &data, "-m", mode, "-w", "-t", "30", "stop"],
        )?;
        self.running = false;
        check(out, "pg_ctl stop")
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if self.running {
            let _ = self.stop_mode("immediate");
        }
    }
}
