//! The client's example `exactly_once_postgres` (built here as the binary
//! `exactly-once-example`) run as its documentation says, on a real PostgreSQL server and an
//! in-process broker: killed with SIGKILL mid-run, then run again with `TRANSFERS=0`; every
//! transfer is applied exactly once and the balances still sum to the opening total.
//!
//! The example's tables have fixed names, so the test gives it a database of its own on the
//! shared server (`FERROMQ_TEST_PG_URL`). Without PostgreSQL it skips with a printed reason,
//! unless `FERROMQ_INTEROP_REQUIRED` is set.

use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferromq_pg_tests::cluster::Cluster;
use ferromq_pg_tests::pg;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Transfers the first run produces.
const TRANSFERS: i64 = 400;
/// The example's accounts × opening balance.
const OPENING_TOTAL: i64 = 10 * 100_000;
/// Most a run may take.
const RUN_MAX: Duration = Duration::from_secs(90);

/// `url` with its `dbname` replaced by `db` (key=value connection strings).
fn with_dbname(url: &str, db: &str) -> String {
    let mut parts: Vec<String> = url
        .split_whitespace()
        .filter(|p| !p.starts_with("dbname="))
        .map(str::to_owned)
        .collect();
    parts.push(format!("dbname={db}"));
    parts.join(" ")
}

fn example(cluster: &Cluster, url: &str, transfers: i64) -> Child {
    Command::new(env!("CARGO_BIN_EXE_exactly-once-example"))
        .env("FERROMQ_PG_URL", url)
        .env("FERROMQ_NAMESRV", cluster.namesrv.to_string())
        .env("TRANSFERS", transfers.to_string())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the example")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_survives_a_sigkill_and_applies_every_transfer_once() {
    let Some(shared) = pg::shared_url() else {
        return;
    };
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let db = format!("example_{}_{stamp}", std::process::id());
    let admin = pg::connect(&shared).await.unwrap();
    admin
        .batch_execute(&format!("CREATE DATABASE {db}"))
        .await
        .unwrap();
    let url = with_dbname(&shared, &db);
    let cluster = Cluster::start().await.unwrap();
    cluster.create_topic("Transfers", 4).await.unwrap();

    // First run: killed as soon as it reports its first applied batch.
    let mut first = example(&cluster, &url, TRANSFERS);
    let mut lines = BufReader::new(first.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(RUN_MAX, async {
        loop {
            match lines.next_line().await.unwrap() {
                Some(line) if line.starts_with("applied ") => return line,
                Some(_) => continue,
                None => panic!("the example ended before applying a batch"),
            }
        }
    })
    .await
    .expect("a first batch within the bound");
    first.start_kill().unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(10), first.wait()).await;
    let client = pg::connect(&url).await.unwrap();
    let at_kill: i64 = client
        .query_one("SELECT count(*) FROM transfers", &[])
        .await
        .unwrap()
        .get(0);
    println!("killed after {line:?}: {at_kill} transfers applied");

    // Second run: produces nothing, consumes the rest, and checks the balances itself.
    let second = example(&cluster, &url, 0);
    let output = tokio::time::timeout(RUN_MAX, second.wait_with_output())
        .await
        .expect("the second run ends within the bound")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "second run failed:\n{stdout}");
    let summary = format!("{TRANSFERS} transfers applied; balances sum to {OPENING_TOTAL} cents");
    assert!(stdout.contains(&summary), "{stdout}");
    let row = client
        .query_one(
            "SELECT count(*), count(DISTINCT (queue_id, queue_offset)), \
             (SELECT sum(balance_cents)::bigint FROM accounts) FROM transfers",
            &[],
        )
        .await
        .unwrap();
    let (rows, distinct, total): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(
        (rows, distinct),
        (TRANSFERS, TRANSFERS),
        "each transfer once"
    );
    assert_eq!(total, OPENING_TOTAL, "no money created or lost");
    drop(client);
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
        .await
        .unwrap();
}
