//! Exactly-once consumption into PostgreSQL (issue 19), on a real PostgreSQL server.
//!
//! The failure this guards against: with offsets on the broker, an application that writes
//! a message's effect to its database and then commits the offset applies the message twice
//! when it dies between the two, and skips it when the order is reversed. With the offsets
//! in the application's database, written in the same transaction as the effects and fenced
//! by an owner generation, every message's effect appears exactly once.
//!
//! Each test uses its own tables (`offs_<test>_<pid>`, `app_<test>_<pid>`) on the server
//! `scripts/test` starts (`FERROMQ_TEST_PG_URL`), except the outage test, which starts and
//! stops a private server (`FERROMQ_TEST_PG_BIN`). Without PostgreSQL they skip with a
//! printed reason, unless `FERROMQ_INTEROP_REQUIRED` is set.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ferromq_client::offset_store::postgres::{
    tokio_postgres, PostgresConfig, PostgresOffsetStore, PostgresOffsets, PostgresSetupError,
};
use ferromq_client::offset_store::sql_schema::{migration_sql, SCHEMA_VERSION};
use ferromq_client::{
    LitePullConsumer, LitePullConsumerConfig, MessageQueue, OffsetError, OffsetStore, ReadMode,
    StartPosition, TransactionalError,
};
use ferromq_pg_tests::cluster::Cluster;
use ferromq_pg_tests::pg::{self, PgServer};
use tokio::io::AsyncBufReadExt;

/// Most stdout lines kept per child (later ones are counted, not kept).
const CHILD_LINES_MAX: usize = 20_000;

/// Names of one test's tables.
struct Names {
    offsets: String,
    app: String,
    group: String,
    topic: String,
}

fn names(test: &str) -> Names {
    let pid = std::process::id();
    Names {
        offsets: format!("offs_{test}_{pid}"),
        app: format!("app_{test}_{pid}"),
        group: format!("G_{test}_{pid}"),
        topic: format!("T_{test}_{pid}"),
    }
}

/// Creates the offset tables (migration) and the application table.
async fn create_tables(url: &str, n: &Names) -> tokio_postgres::Client {
    let client = pg::connect(url).await.expect("connect");
    client
        .batch_execute(&migration_sql(&n.offsets))
        .await
        .expect("migration");
    client
        .batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {} (queue_id integer NOT NULL, queue_offset bigint NOT NULL, \
             body text NOT NULL, applied_by text NOT NULL)",
            n.app
        ))
        .await
        .expect("app table");
    client
}

/// Rows in the application table: (total, distinct (queue, offset)).
async fn applied(client: &tokio_postgres::Client, app: &str) -> (i64, i64) {
    let row = client
        .query_one(
            &format!("SELECT count(*), count(DISTINCT (queue_id, queue_offset)) FROM {app}"),
            &[],
        )
        .await
        .expect("count");
    (row.get(0), row.get(1))
}

/// Sum of the stored next offsets of `group`.
async fn offsets_sum(client: &tokio_postgres::Client, n: &Names) -> i64 {
    client
        .query_one(
            &format!(
                "SELECT coalesce(sum(next_offset), 0)::bigint FROM {} WHERE consumer_group = $1",
                n.offsets
            ),
            &[&n.group],
        )
        .await
        .expect("sum")
        .get(0)
}

/// Waits (bounded) until the application table holds `count` rows.
async fn wait_applied(client: &tokio_postgres::Client, app: &str, count: i64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let (total, _) = applied(client, app).await;
        if total >= count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "only {total} of {count} rows applied within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A `pg-consumer` child; killed (SIGKILL) on drop.
struct ChildConsumer {
    child: tokio::process::Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl ChildConsumer {
    fn spawn(cluster: &Cluster, url: &str, n: &Names, extra: &[&str]) -> ChildConsumer {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_pg-consumer"))
            .args(["--namesrv", &cluster.namesrv.to_string()])
            .args(["--group", &n.group, "--topic", &n.topic, "--pg-url", url])
            .args(["--table", &n.offsets, "--app-table", &n.app])
            .args(extra)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn pg-consumer");
        let stdout = child.stdout.take().expect("stdout");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        tokio::spawn(async move {
            let mut reader = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                let mut kept = sink.lock().unwrap();
                if kept.len() < CHILD_LINES_MAX {
                    kept.push(line);
                }
            }
        });
        ChildConsumer { child, lines }
    }

    fn pid(&self) -> i32 {
        self.child.id().expect("running") as i32
    }

    fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .args([signal, &self.pid().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {signal} failed");
    }

    /// Waits (bounded) for a line starting with `prefix`; returns it.
    async fn wait_line(&self, prefix: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            if let Some(line) = self
                .lines
                .lock()
                .unwrap()
                .iter()
                .find(|l| l.starts_with(prefix))
            {
                return line.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no {prefix:?} line within {within:?}; got {:?}",
                self.lines.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn kill9(mut self) {
        self.signal("-KILL");
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }
}

/// A small xorshift generator seeded from the clock (the seed is printed).
struct Rng(u64);

impl Rng {
    fn from_clock() -> Rng {
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            | 1;
        println!("random seed {seed}");
        Rng(seed)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn consumer_config(cluster: &Cluster, n: &Names, batch: usize) -> LitePullConsumerConfig {
    LitePullConsumerConfig {
        namesrv_addrs: vec![cluster.namesrv],
        group: n.group.clone(),
        start_position: StartPosition::First,
        max_poll_messages: batch,
        retry_delay: Duration::from_millis(100),
        pull_hold: Duration::from_millis(200),
        rebalance_interval: Duration::from_secs(1),
        ..LitePullConsumerConfig::default()
    }
}

/// Inserts each message as a row of `app` in the batch's transaction.
async fn insert_rows(
    tx: &tokio_postgres::Transaction<'_>,
    app: &str,
    messages: &[ferromq_client::MessageExt],
) -> Result<(), tokio_postgres::Error> {
    let statement = tx
        .prepare(&format!(
            "INSERT INTO {app} (queue_id, queue_offset, body, applied_by) VALUES ($1, $2, $3, 'in-process')"
        ))
        .await?;
    for m in messages {
        let body = String::from_utf8_lossy(&m.body).to_string();
        tx.execute(&statement, &[&m.queue_id, &(m.queue_offset as i64), &body])
            .await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_points_applies_every_message_exactly_once() {
    const MESSAGES: usize = 10_000;
    const KILLS: usize = 12;
    let Some(url) = pg::shared_url() else { return };
    let n = names("crash");
    let db = create_tables(&url, &n).await;
    let cluster = Cluster::start().await.unwrap();
    cluster.create_topic(&n.topic, 4).await.unwrap();
    let producer = cluster.producer("P").unwrap();
    cluster
        .produce(&producer, &n.topic, 0, MESSAGES, |i| format!("m{i}"))
        .await
        .unwrap();
    let mut rng = Rng::from_clock();
    let args = ["--batch", "16"];
    for kill in 0..KILLS {
        let child = ChildConsumer::spawn(&cluster, &url, &n, &args);
        // Killed at a random point after its first commit: mid-batch, mid-commit or
        // between batches.
        child.wait_line("COMMITTED", Duration::from_secs(20)).await;
        tokio::time::sleep(Duration::from_millis(rng.below(150))).await;
        child.kill9().await;
        let (total, distinct) = applied(&db, &n.app).await;
        println!("kill {kill}: {total} rows applied");
        assert_eq!(
            total, distinct,
            "a message was applied twice before kill {kill}"
        );
    }
    let (before_last, _) = applied(&db, &n.app).await;
    assert!(
        (before_last as usize) < MESSAGES,
        "the kills came too late to land mid-run ({before_last} rows already)"
    );
    let last = ChildConsumer::spawn(&cluster, &url, &n, &args);
    wait_applied(&db, &n.app, MESSAGES as i64, Duration::from_secs(60)).await;
    // Let any batch in flight finish, then stop the last child too.
    tokio::time::sleep(Duration::from_millis(500)).await;
    last.kill9().await;
    let (total, distinct) = applied(&db, &n.app).await;
    assert_eq!(total, MESSAGES as i64, "every message applied exactly once");
    assert_eq!(distinct, MESSAGES as i64);
    let bodies: i64 = db
        .query_one(&format!("SELECT count(DISTINCT body) FROM {}", n.app), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(bodies, MESSAGES as i64);
    assert_eq!(
        offsets_sum(&db, &n).await,
        MESSAGES as i64,
        "offsets cover every message"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_owner_is_fenced_after_a_forced_rebalance() {
    const MESSAGES: usize = 400;
    let Some(url) = pg::shared_url() else { return };
    let n = names("fence");
    let db = create_tables(&url, &n).await;
    let cluster = Cluster::start().await.unwrap();
    cluster.create_topic(&n.topic, 4).await.unwrap();
    let producer = cluster.producer("P").unwrap();
    cluster
        .produce(&producer, &n.topic, 0, MESSAGES, |i| format!("m{i}"))
        .await
        .unwrap();
    // A owns every queue (alone in the group) and holds each batch 300 ms in its open
    // transaction; it is paused (SIGSTOP) in the middle of one.
    let owner = ChildConsumer::spawn(
        &cluster,
        &url,
        &n,
        &[
            "--batch",
            "8",
            "--apply-sleep-ms",
            "300",
            "--rebalance-ms",
            "60000",
        ],
    );
    owner.wait_line("APPLYING", Duration::from_secs(20)).await;
    owner.signal("-STOP");
    // The forced rebalance: B is assigned every queue and claims them all.
    let taker = ChildConsumer::spawn(
        &cluster,
        &url,
        &n,
        &["--batch", "50", "--mode", "assign", "--queues", "4"],
    );
    taker.wait_line("COMMITTED", Duration::from_secs(20)).await;
    owner.signal("-CONT");
    let fenced = owner.wait_line("FENCED", Duration::from_secs(20)).await;
    assert!(fenced.contains("fenced"), "{fenced}");
    owner.kill9().await;
    wait_applied(&db, &n.app, MESSAGES as i64, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (total, distinct) = applied(&db, &n.app).await;
    assert_eq!(total, distinct, "no batch applied twice");
    assert_eq!(total, MESSAGES as i64);
    assert_eq!(offsets_sum(&db, &n).await, MESSAGES as i64);
    taker.kill9().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_mid_run_fails_commits_and_loses_nothing() {
    const MESSAGES: usize = 300;
    let Some(bin) = pg::bin_dir() else { return };
    let server = Arc::new(Mutex::new(
        PgServer::start(&bin).expect("private PostgreSQL"),
    ));
    let url = server.lock().unwrap().url();
    let n = names("outage");
    let db = create_tables(&url, &n).await;
    let cluster = Cluster::start().await.unwrap();
    cluster.create_topic(&n.topic, 2).await.unwrap();
    let producer = cluster.producer("P").unwrap();
    cluster
        .produce(&producer, &n.topic, 0, MESSAGES, |i| format!("m{i}"))
        .await
        .unwrap();
    let mut config = PostgresConfig::new(url.clone());
    config.table = n.offsets.clone();
    config.statement_timeout = Duration::from_secs(2);
    config.connect_timeout = Duration::from_secs(2);
    let offsets = PostgresOffsets::connect(&config).await.unwrap();
    let consumer =
        LitePullConsumer::start_postgres(consumer_config(&cluster, &n, 10), offsets).unwrap();
    consumer.subscribe(&n.topic, "*").await.unwrap();
    let app = n.app.clone();
    let mut done = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while done < 100 {
        assert!(
            Instant::now() < deadline,
            "only {done} consumed before the outage"
        );
        let app = app.clone();
        let batch = consumer
            .consume_transactionally(Duration::from_millis(500), move |tx, m| {
                Box::pin(async move { insert_rows(tx, &app, m).await })
            })
            .await
            .expect("commit while PostgreSQL is up");
        done += batch.messages;
    }
    let stored_before = offsets_sum(&db, &n).await;
    assert_eq!(stored_before, done as i64);
    let queues: Vec<MessageQueue> = (0..2)
        .map(|queue_id| MessageQueue {
            topic: n.topic.clone(),
            broker_name: "b0".into(),
            queue_id,
        })
        .collect();
    let mut stored_per_queue = Vec::new();
    for queue in &queues {
        let row = db
            .query_one(
                &format!("SELECT next_offset FROM {} WHERE queue_id = $1", n.offsets),
                &[&queue.queue_id],
            )
            .await
            .unwrap();
        stored_per_queue.push(row.get::<_, Option<i64>>(0).map(|o| o as u64));
    }
    drop(db);
    // The outage starts inside a batch: its rows are written, then the server stops before
    // the offsets and COMMIT.
    let (stopper, app_in_outage) = (server.clone(), app.clone());
    let outcome = consumer
        .consume_transactionally(Duration::from_secs(5), move |tx, m| {
            let app = app_in_outage;
            Box::pin(async move {
                insert_rows(tx, &app, m).await?;
                stopper.lock().unwrap().stop().expect("stop PostgreSQL");
                Ok::<(), tokio_postgres::Error>(())
            })
        })
        .await;
    let error = outcome.expect_err("a commit with PostgreSQL stopped must fail");
    assert!(
        matches!(
            error,
            TransactionalError::Offset(OffsetError::Database { .. })
        ),
        "{error}"
    );
    for _ in 0..3 {
        let app = app.clone();
        let outcome = consumer
            .consume_transactionally(Duration::from_millis(300), move |tx, m| {
                Box::pin(async move { insert_rows(tx, &app, m).await })
            })
            .await;
        match outcome {
            Ok(batch) => assert_eq!(
                batch.messages, 0,
                "nothing commits while PostgreSQL is down"
            ),
            Err(error) => assert!(
                matches!(error, TransactionalError::Offset(_)),
                "unexpected error {error}"
            ),
        }
    }
    // The position did not move: a queue of a failed batch re-reads the database (not
    // reachable yet: no position); any other queue stays at its stored offset.
    for (queue, stored) in queues.iter().zip(&stored_per_queue) {
        let position = consumer.position(queue);
        assert!(
            position.is_none() || position == *stored,
            "{queue:?} moved to {position:?} on an error (stored {stored:?})"
        );
        // Reading the store with the database down is an error, never "no offset".
        let read = consumer
            .pull_consumer()
            .offset_store()
            .read(queue, ReadMode::Store)
            .await;
        assert!(
            matches!(read, Err(OffsetError::Database { .. })),
            "{read:?}"
        );
    }
    server
        .lock()
        .unwrap()
        .start_again()
        .expect("restart PostgreSQL");
    let db = pg::connect(&url).await.unwrap();
    assert_eq!(
        offsets_sum(&db, &n).await,
        stored_before,
        "no commit landed during the outage"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (total, _) = applied(&db, &n.app).await;
        if total >= MESSAGES as i64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {total} rows after the outage"
        );
        let app = app.clone();
        let _ = consumer
            .consume_transactionally(Duration::from_millis(300), move |tx, m| {
                Box::pin(async move { insert_rows(tx, &app, m).await })
            })
            .await;
    }
    let (total, distinct) = applied(&db, &n.app).await;
    assert_eq!((total, distinct), (MESSAGES as i64, MESSAGES as i64));
    assert_eq!(offsets_sum(&db, &n).await, MESSAGES as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_reset_by_time_is_applied_to_the_database_with_a_new_generation() {
    // Two batches of 100: one per queue.
    const MESSAGES: usize = 200;
    let Some(url) = pg::shared_url() else { return };
    let n = names("reset");
    let db = create_tables(&url, &n).await;
    let cluster = Cluster::start().await.unwrap();
    cluster.create_topic(&n.topic, 2).await.unwrap();
    let before_messages = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        - 1_000;
    let producer = cluster.producer("P").unwrap();
    cluster
        .produce(&producer, &n.topic, 0, MESSAGES, |i| format!("m{i}"))
        .await
        .unwrap();
    let mut config = PostgresConfig::new(url.clone());
    config.table = n.offsets.clone();
    let offsets = PostgresOffsets::connect(&config).await.unwrap();
    let consumer =
        LitePullConsumer::start_postgres(consumer_config(&cluster, &n, 20), offsets).unwrap();
    consumer.subscribe(&n.topic, "*").await.unwrap();
    let app = n.app.clone();
    let consume_until = |rows: i64| {
        let (consumer, app, db) = (&consumer, app.clone(), &db);
        async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            while applied(db, &app).await.0 < rows {
                assert!(Instant::now() < deadline, "{rows} rows never applied");
                let app = app.clone();
                let outcome = consumer
                    .consume_transactionally(Duration::from_millis(300), move |tx, m| {
                        Box::pin(async move { insert_rows(tx, &app, m).await })
                    })
                    .await;
                // A batch polled just before the reset is fenced by it: allowed, dropped.
                if let Err(error) = outcome {
                    assert!(matches!(error, TransactionalError::Fenced(_)), "{error}");
                }
            }
        }
    };
    consume_until(MESSAGES as i64).await;
    let sql = format!(
        "SELECT queue_id, generation, next_offset, updated_by FROM {} WHERE consumer_group = $1 ORDER BY queue_id",
        n.offsets
    );
    let generations = || async {
        db.query(&sql, &[&n.group])
            .await
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r.get::<_, i32>(0),
                    r.get::<_, i64>(1),
                    r.get::<_, Option<i64>>(2),
                    r.get::<_, String>(3),
                )
            })
            .collect::<Vec<_>>()
    };
    let before = generations().await;
    assert_eq!(before.len(), 2, "{before:?}");
    cluster
        .reset_offsets_by_time(&n.group, &n.topic, before_messages)
        .await
        .unwrap();
    // The reset reaches the consumer (RESET_CONSUMER_CLIENT_OFFSET), which writes it to its
    // rows under a new generation and consumes every message once more from offset 0.
    consume_until(2 * MESSAGES as i64).await;
    let after = generations().await;
    for (b, a) in before.iter().zip(&after) {
        assert!(
            a.1 > b.1,
            "generation of queue {} did not move: {b:?} -> {a:?}",
            a.0
        );
        assert_eq!(a.2, b.2, "queue {} consumed up to the same end again", a.0);
    }
    assert!(consumer.stats().resets_applied >= 1);
    let twice: i64 = db
        .query_one(
            &format!(
                "SELECT count(*) FROM (SELECT queue_id, queue_offset FROM {} GROUP BY 1, 2 HAVING count(*) = 2) AS t",
                n.app
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        twice, MESSAGES as i64,
        "each message once per pass, two passes"
    );
}

#[tokio::test]
async fn bad_input_is_a_clear_error_at_start() {
    // A connection string that does not parse (no server needed).
    let error = PostgresOffsets::connect(&PostgresConfig::new("host=127.0.0.1 port=not-a-port"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, PostgresSetupError::InvalidUrl { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("does not parse"), "{error}");
    let mut bad_table = PostgresConfig::new("host=127.0.0.1");
    bad_table.table = "offsets; DROP TABLE x".into();
    let error = PostgresOffsets::connect(&bad_table).await.unwrap_err();
    assert!(matches!(error, PostgresSetupError::Config(_)), "{error}");
    // Nothing listens: a connect error, not a hang.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut unreachable = PostgresConfig::new(format!("host=127.0.0.1 port={closed} user=x"));
    unreachable.connect_timeout = Duration::from_secs(2);
    let error = PostgresOffsets::connect(&unreachable).await.unwrap_err();
    assert!(
        matches!(error, PostgresSetupError::Connect { .. }),
        "{error}"
    );

    let Some(url) = pg::shared_url() else { return };
    let n = names("badinput");
    let mut missing = PostgresConfig::new(url.clone());
    missing.table = n.offsets.clone();
    let error = PostgresOffsets::connect(&missing).await.unwrap_err();
    assert!(
        matches!(error, PostgresSetupError::MissingTable { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("sqlOffsetSchema"), "{error}");
    let db = create_tables(&url, &n).await;
    PostgresOffsets::connect(&missing)
        .await
        .expect("the migrated table is accepted");
    db.execute(
        &format!("INSERT INTO {}_schema (version) VALUES (99)", n.offsets),
        &[],
    )
    .await
    .unwrap();
    let error = PostgresOffsets::connect(&missing).await.unwrap_err();
    match &error {
        PostgresSetupError::SchemaVersion {
            found, expected, ..
        } => {
            assert_eq!((*found, *expected), (Some(99), SCHEMA_VERSION));
        }
        other => panic!("expected SchemaVersion, got {other}"),
    }
}

#[tokio::test]
async fn store_contract_none_is_not_an_error_and_a_second_claim_fences_the_first() {
    let Some(url) = pg::shared_url() else { return };
    let n = names("contract");
    let _db = create_tables(&url, &n).await;
    let mut config = PostgresConfig::new(url.clone());
    config.table = n.offsets.clone();
    let offsets = PostgresOffsets::connect(&config).await.unwrap();
    let first = PostgresOffsetStore::new(offsets.clone(), n.group.clone());
    let second = PostgresOffsetStore::new(offsets, n.group.clone());
    let queue = MessageQueue {
        topic: n.topic.clone(),
        broker_name: "b0".into(),
        queue_id: 0,
    };
    assert_eq!(first.read(&queue, ReadMode::Store).await.unwrap(), None);
    let claim = first.claim(&queue).await.unwrap();
    assert_eq!((claim.offset, claim.generation), (None, Some(1)));
    first.update(&queue, 5);
    first.persist(&queue).await.unwrap();
    assert_eq!(second.read(&queue, ReadMode::Store).await.unwrap(), Some(5));
    let taken = second.claim(&queue).await.unwrap();
    assert_eq!((taken.offset, taken.generation), (Some(5), Some(2)));
    first.update(&queue, 9);
    let error = first.persist(&queue).await.unwrap_err();
    match &error {
        OffsetError::Fenced {
            generation,
            current_generation,
            current_offset,
            ..
        } => assert_eq!(
            (*generation, *current_generation, *current_offset),
            (1, 2, Some(5))
        ),
        other => panic!("expected Fenced, got {other}"),
    }
    assert_eq!(first.stats().stale_rejections, 1);
    // A regression is refused too, even by the owner.
    second.update(&queue, 3);
    assert!(second.persist(&queue).await.unwrap_err().is_fenced());
}
