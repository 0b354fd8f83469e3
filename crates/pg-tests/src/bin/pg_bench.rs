//! Throughput of transactional consumption into PostgreSQL against the broker offset store,
//! in the same run, for batch sizes 1, 32 and 256.
//!
//! Both sides do the same application work — one row per message inserted in one database
//! transaction per batch — and differ only in where the offsets go:
//! - `postgres`: [`LitePullConsumer::consume_transactionally`] (offset rows in the same
//!   transaction, exactly once);
//! - `broker`: `poll`, the transaction, then `commit()` to the broker (at least once).
//!
//! The broker runs in-process with SYNC_FLUSH (its commits are fsynced, as PostgreSQL's
//! are). Usage: `pg-bench [--pg-url URL] [--messages N]` (URL defaults to
//! `FERROMQ_TEST_PG_URL`). Prints one line per run and a JSON summary last.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use ferromq_client::offset_store::postgres::{tokio_postgres, PostgresConfig, PostgresOffsets};
use ferromq_client::offset_store::sql_schema::migration_sql;
use ferromq_client::{LitePullConsumer, LitePullConsumerConfig, MessageExt, StartPosition};
use ferromq_pg_tests::cluster::Cluster;

const BATCH_SIZES: [usize; 3] = [1, 32, 256];
const QUEUES: i32 = 4;
const OFFSETS_TABLE: &str = "bench_offsets";
const APP_TABLE: &str = "bench_rows";

fn arg(name: &str) -> Option<String> {
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        if a == name {
            return it.next();
        }
    }
    None
}

async fn insert(
    tx: &tokio_postgres::Transaction<'_>,
    messages: &[MessageExt],
) -> Result<(), tokio_postgres::Error> {
    let statement = tx
        .prepare(&format!(
            "INSERT INTO {APP_TABLE} (queue_id, queue_offset) VALUES ($1, $2)"
        ))
        .await?;
    for m in messages {
        tx.execute(&statement, &[&m.queue_id, &(m.queue_offset as i64)])
            .await?;
    }
    Ok(())
}

fn config(cluster: &Cluster, group: &str, batch: usize) -> LitePullConsumerConfig {
    LitePullConsumerConfig {
        namesrv_addrs: vec![cluster.namesrv],
        group: group.into(),
        start_position: StartPosition::First,
        max_poll_messages: batch,
        pull_batch: 32.max(batch as u32),
        buffer_per_queue: 1024.max(batch * 2),
        ..LitePullConsumerConfig::default()
    }
}

/// Messages per second of the transactional consumer.
async fn run_postgres(
    cluster: &Cluster,
    db: &PostgresOffsets,
    topic: &str,
    batch: usize,
    total: usize,
) -> anyhow::Result<f64> {
    let consumer = LitePullConsumer::start_postgres(
        config(cluster, &format!("pg-{topic}-{batch}"), batch),
        db.clone(),
    )?;
    consumer.subscribe(topic, "*").await?;
    let (mut done, mut started) = (0, None);
    let deadline = Instant::now() + Duration::from_secs(300);
    while done < total {
        if Instant::now() > deadline {
            bail!("postgres batch {batch}: {done} of {total} in 300 s");
        }
        let b = consumer
            .consume_transactionally(Duration::from_secs(1), |tx, m| Box::pin(insert(tx, m)))
            .await?;
        if b.messages > 0 && started.is_none() {
            started = Some(Instant::now());
        }
        done += b.messages;
    }
    let seconds = started.map_or(0.0, |s| s.elapsed().as_secs_f64());
    Ok(done as f64 / seconds.max(1e-9))
}

/// Messages per second of the broker-offset consumer doing the same database work.
async fn run_broker(
    cluster: &Cluster,
    db: &PostgresOffsets,
    topic: &str,
    batch: usize,
    total: usize,
) -> anyhow::Result<f64> {
    let consumer =
        LitePullConsumer::start(config(cluster, &format!("broker-{topic}-{batch}"), batch))?;
    consumer.subscribe(topic, "*").await?;
    let (mut done, mut started) = (0, None);
    let deadline = Instant::now() + Duration::from_secs(300);
    while done < total {
        if Instant::now() > deadline {
            bail!("broker batch {batch}: {done} of {total} in 300 s");
        }
        let messages = consumer.poll(Duration::from_secs(1)).await?;
        if messages.is_empty() {
            continue;
        }
        if started.is_none() {
            started = Some(Instant::now());
        }
        let mut client = db.pool().get().await?;
        let tx = client.transaction().await?;
        insert(&tx, &messages).await?;
        tx.commit().await?;
        let _persisted = consumer.commit().await?;
        done += messages.len();
    }
    let seconds = started.map_or(0.0, |s| s.elapsed().as_secs_f64());
    Ok(done as f64 / seconds.max(1e-9))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let url = arg("--pg-url")
        .or_else(|| std::env::var("FERROMQ_TEST_PG_URL").ok())
        .context("--pg-url or FERROMQ_TEST_PG_URL is required")?;
    let total: usize = arg("--messages").map_or(Ok(5000), |v| v.parse())?;
    let admin = ferromq_pg_tests::pg::connect(&url).await?;
    admin
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {OFFSETS_TABLE}, {OFFSETS_TABLE}_schema, {APP_TABLE}; {} \
             CREATE TABLE {APP_TABLE} (queue_id integer, queue_offset bigint);",
            migration_sql(OFFSETS_TABLE)
        ))
        .await?;
    let mut pg = PostgresConfig::new(url);
    pg.table = OFFSETS_TABLE.into();
    let db = PostgresOffsets::connect(&pg).await?;
    let cluster = Cluster::start_with_flush("SYNC_FLUSH").await?;
    let producer = cluster.producer("bench-producer")?;
    let mut summary = Vec::new();
    for batch in BATCH_SIZES {
        let topic = format!("Bench{batch}");
        cluster.create_topic(&topic, QUEUES).await?;
        cluster
            .produce(&producer, &topic, 0, total, |i| format!("m{i}"))
            .await?;
        let broker = run_broker(&cluster, &db, &topic, batch, total).await?;
        let postgres = run_postgres(&cluster, &db, &topic, batch, total).await?;
        println!(
            "batch {batch:>3}: postgres (exactly once) {postgres:>9.0} msg/s, broker offsets (at least once) {broker:>9.0} msg/s, ratio {:.2}",
            postgres / broker
        );
        summary.push(format!(
            "{{\"batch\":{batch},\"messages\":{total},\"postgres_msgs_per_sec\":{postgres:.0},\"broker_msgs_per_sec\":{broker:.0},\"ratio\":{:.3}}}",
            postgres / broker
        ));
    }
    println!("[{}]", summary.join(","));
    Ok(())
}
