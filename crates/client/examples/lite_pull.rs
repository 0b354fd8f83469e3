//! Subscribes to `ExampleTopic` with a `LitePullConsumer`, polls for five seconds, commits
//! after each non-empty poll, and commits again on shutdown.
//!
//! Run against a local standalone server (produce with the producer example meanwhile):
//!
//! ```text
//! ferromq standalone --data-dir /tmp/ferromq-example &
//! cargo run -p ferromq-client --example lite_pull [NAMESRV_ADDR]
//! ```

use std::time::{Duration, Instant};

use ferromq_client::{LitePullConsumer, LitePullConsumerConfig, StartPosition};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let namesrv = std::env::args().nth(1).unwrap_or("127.0.0.1:9876".into());
    let consumer = LitePullConsumer::start(LitePullConsumerConfig {
        namesrv_addrs: vec![namesrv.parse()?],
        group: "ExampleLitePullGroup".into(),
        // Only when the group has no committed offset for a queue.
        start_position: StartPosition::First,
        ..LitePullConsumerConfig::default()
    })?;
    consumer.subscribe("ExampleTopic", "*").await?;
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        let messages = consumer.poll(Duration::from_millis(500)).await?;
        for m in &messages {
            println!(
                "queue {} offset {}: {}",
                m.queue_id,
                m.queue_offset,
                String::from_utf8_lossy(&m.body)
            );
        }
        if !messages.is_empty() {
            // Request/response: an error here means the position was not stored.
            let _report = consumer.commit().await?;
        }
    }
    let report = consumer.shutdown().await?;
    println!("final commit: {} queues written", report.persisted.len());
    Ok(())
}
