//! The consumer child process of the PostgreSQL tests: consumes a topic transactionally
//! into an application table until killed, printing one line per outcome on stdout
//! (`READY`, `APPLYING <n>`, `COMMITTED <n>`, `FENCED <error>`, `ERROR <error>`).
//!
//! Usage: `pg-consumer --namesrv ADDR --group G --topic T --pg-url URL --table OFFSETS
//! --app-table APP [--mode subscribe|assign] [--batch N] [--apply-sleep-ms MS]
//! [--rebalance-ms MS] [--queues N]`
//!
//! Each message becomes one row `(queue_id, queue_offset, body, applied_by)` of the
//! application table, written in the same transaction as the offsets.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Context};
use ferromq_client::offset_store::postgres::{tokio_postgres, PostgresConfig, PostgresOffsets};
use ferromq_client::{
    LitePullConsumer, LitePullConsumerConfig, MessageQueue, StartPosition, TransactionalError,
};

fn args() -> anyhow::Result<BTreeMap<String, String>> {
    let mut map = BTreeMap::new();
    let mut it = std::env::args().skip(1);
    while let Some(key) = it.next() {
        let Some(name) = key.strip_prefix("--") else {
            bail!("unexpected argument {key:?}");
        };
        let value = it
            .next()
            .with_context(|| format!("--{name} needs a value"))?;
        map.insert(name.to_string(), value);
    }
    Ok(map)
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let a = args()?;
    let get = |k: &str| {
        a.get(k)
            .cloned()
            .with_context(|| format!("--{k} is required"))
    };
    let num = |k: &str, default: u64| -> anyhow::Result<u64> {
        a.get(k)
            .map_or(Ok(default), |v| v.parse().with_context(|| format!("--{k}")))
    };
    let topic = get("topic")?;
    let app_table = get("app-table")?;
    let apply_sleep = Duration::from_millis(num("apply-sleep-ms", 0)?);
    let mut pg = PostgresConfig::new(get("pg-url")?);
    pg.table = get("table")?;
    pg.statement_timeout = Duration::from_secs(2);
    let db = PostgresOffsets::connect(&pg).await?;
    let consumer = LitePullConsumer::start_postgres(
        LitePullConsumerConfig {
            namesrv_addrs: vec![get("namesrv")?.parse()?],
            group: get("group")?,
            start_position: StartPosition::First,
            max_poll_messages: num("batch", 32)? as usize,
            rebalance_interval: Duration::from_millis(num("rebalance-ms", 1000)?),
            retry_delay: Duration::from_millis(100),
            pull_hold: Duration::from_millis(200),
            ..LitePullConsumerConfig::default()
        },
        db,
    )?;
    match a.get("mode").map(|v| v.as_str()).unwrap_or("subscribe") {
        "assign" => {
            let queues = num("queues", 4)? as i32;
            let all = (0..queues)
                .map(|queue_id| MessageQueue {
                    topic: topic.clone(),
                    broker_name: "b0".into(),
                    queue_id,
                })
                .collect();
            consumer.assign(all).await?;
        }
        _ => consumer.subscribe(&topic, "*").await?,
    }
    say("READY");
    let me = consumer.pull_consumer().client_id().to_string();
    let insert = format!(
        "INSERT INTO {app_table} (queue_id, queue_offset, body, applied_by) VALUES ($1, $2, $3, $4)"
    );
    loop {
        let (insert, me) = (insert.clone(), me.clone());
        let outcome = consumer
            .consume_transactionally(Duration::from_millis(500), move |tx, messages| {
                Box::pin(async move {
                    if !apply_sleep.is_zero() {
                        say(&format!("APPLYING {}", messages.len()));
                        tokio::time::sleep(apply_sleep).await;
                    }
                    let statement = tx.prepare(&insert).await?;
                    for m in messages {
                        let body = String::from_utf8_lossy(&m.body).to_string();
                        let offset = m.queue_offset as i64;
                        tx.execute(&statement, &[&m.queue_id, &offset, &body, &me])
                            .await?;
                    }
                    Ok::<(), tokio_postgres::Error>(())
                })
            })
            .await;
        match outcome {
            Ok(batch) if batch.messages > 0 => say(&format!("COMMITTED {}", batch.messages)),
            Ok(_) => {}
            Err(TransactionalError::Fenced(error)) => say(&format!("FENCED {error}")),
            Err(error) => say(&format!("ERROR {error}")),
        }
    }
}
