//! Exactly-once transfers into PostgreSQL: each message moves money between two accounts,
//! and the balance updates commit in the same database transaction as the consumer's
//! offsets, so a crash anywhere never applies a transfer twice or skips one.
//!
//! Run (a `ferromq standalone` on 127.0.0.1:9876 and a PostgreSQL server):
//!
//! ```text
//! ferromq standalone &
//! ferromq admin updateTopic -n 127.0.0.1:9876 -c DefaultCluster -t Transfers
//! FERROMQ_PG_URL='host=127.0.0.1 user=postgres dbname=postgres' \
//!     cargo run -p ferromq-client --features postgres --example exactly_once_postgres
//! ```
//!
//! Environment: `FERROMQ_PG_URL` (required), `FERROMQ_NAMESRV` (default 127.0.0.1:9876),
//! `TRANSFERS` (default 1000). Kill it at any point and run it again with `TRANSFERS=0`:
//! the balances still sum to the starting total and every transfer is applied once.

use std::time::{Duration, Instant};

use ferromq_client::offset_store::postgres::{tokio_postgres, PostgresConfig, PostgresOffsets};
use ferromq_client::{
    LitePullConsumer, LitePullConsumerConfig, Message, Producer, ProducerConfig, StartPosition,
};

const TOPIC: &str = "Transfers";
const ACCOUNTS: u64 = 10;
const OPENING_CENTS: i64 = 100_000;

/// A transfer message body: `from,to,cents`.
fn transfer(i: u64) -> String {
    let from = i % ACCOUNTS;
    let to = (i * 7 + 3) % ACCOUNTS;
    format!("acct-{from},acct-{to},{}", 1 + i % 500)
}

/// Applies one transfer in the batch's transaction and records it in the ledger.
async fn apply(
    tx: &tokio_postgres::Transaction<'_>,
    message: &ferromq_client::MessageExt,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let body = std::str::from_utf8(&message.body)?;
    let mut parts = body.split(',');
    let (Some(from), Some(to), Some(cents)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!("malformed transfer {body:?}").into());
    };
    let cents: i64 = cents.parse()?;
    let debit = "UPDATE accounts SET balance_cents = balance_cents - $2 WHERE id = $1";
    let credit = "UPDATE accounts SET balance_cents = balance_cents + $2 WHERE id = $1";
    tx.execute(debit, &[&from, &cents]).await?;
    tx.execute(credit, &[&to, &cents]).await?;
    tx.execute(
        "INSERT INTO transfers (queue_id, queue_offset, body) VALUES ($1, $2, $3)",
        &[&message.queue_id, &(message.queue_offset as i64), &body],
    )
    .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let url = std::env::var("FERROMQ_PG_URL").map_err(|_| "set FERROMQ_PG_URL")?;
    let namesrv = std::env::var("FERROMQ_NAMESRV").unwrap_or_else(|_| "127.0.0.1:9876".into());
    let count: u64 = std::env::var("TRANSFERS").map_or(Ok(1000), |v| v.parse())?;

    // The offset table (migrate: true runs the idempotent migration; production setups may
    // apply `ferromq admin sqlOffsetSchema` instead) and the application's tables.
    let mut config = PostgresConfig::new(url);
    config.migrate = true;
    let db = PostgresOffsets::connect(&config).await?;
    let client = db.pool().get().await?;
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS accounts (id text PRIMARY KEY, balance_cents bigint NOT NULL);
             CREATE TABLE IF NOT EXISTS transfers (queue_id integer, queue_offset bigint, body text,
                 PRIMARY KEY (queue_id, queue_offset));",
        )
        .await?;
    for a in 0..ACCOUNTS {
        client
            .execute(
                "INSERT INTO accounts VALUES ($1, $2) ON CONFLICT DO NOTHING",
                &[&format!("acct-{a}"), &OPENING_CENTS],
            )
            .await?;
    }
    drop(client);

    let producer = Producer::start(ProducerConfig {
        namesrv_addrs: vec![namesrv.parse()?],
        group: "transfers-producer".into(),
        ..ProducerConfig::default()
    })?;
    for i in 0..count {
        producer.send(Message::new(TOPIC, transfer(i))).await?;
    }

    let consumer = LitePullConsumer::start_postgres(
        LitePullConsumerConfig {
            namesrv_addrs: vec![namesrv.parse()?],
            group: "transfers".into(),
            start_position: StartPosition::First,
            max_poll_messages: 64,
            ..LitePullConsumerConfig::default()
        },
        db.clone(),
    )?;
    consumer.subscribe(TOPIC, "*").await?;
    let mut idle_since = Instant::now();
    while idle_since.elapsed() < Duration::from_secs(3) {
        let batch = consumer
            .consume_transactionally(Duration::from_millis(500), |tx, messages| {
                Box::pin(async move {
                    for m in messages {
                        apply(tx, m).await?;
                    }
                    Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
                })
            })
            .await?;
        if batch.messages > 0 {
            idle_since = Instant::now();
            println!(
                "applied {} transfers: {:?}",
                batch.messages, batch.committed
            );
        }
    }
    let client = db.pool().get().await?;
    let row = client
        .query_one(
            "SELECT sum(balance_cents)::bigint, (SELECT count(*) FROM transfers) FROM accounts",
            &[],
        )
        .await?;
    let (total, applied): (i64, i64) = (row.get(0), row.get(1));
    println!("{applied} transfers applied; balances sum to {total} cents");
    assert_eq!(
        total,
        OPENING_CENTS * ACCOUNTS as i64,
        "money was created or lost"
    );
    Ok(())
}
