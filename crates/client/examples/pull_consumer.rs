//! Reads `ExampleTopic` queue by queue with a `PullConsumer`, committing explicitly after each
//! batch: a commit that fails is an error here, never a log line.
//!
//! Run after the producer example, against a local standalone server:
//!
//! ```text
//! ferromq standalone --data-dir /tmp/ferromq-example &
//! cargo run -p ferromq-client --example producer
//! cargo run -p ferromq-client --example pull_consumer [NAMESRV_ADDR]
//! ```

use ferromq_client::{PullConsumer, PullConsumerConfig, PullResult};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let namesrv = std::env::args().nth(1).unwrap_or("127.0.0.1:9876".into());
    let consumer = PullConsumer::start(PullConsumerConfig {
        namesrv_addrs: vec![namesrv.parse()?],
        group: "ExamplePullGroup".into(),
        ..PullConsumerConfig::default()
    })?;
    for queue in consumer.fetch_queues("ExampleTopic").await? {
        // `Ok(None)`: the group has no offset yet, so start at the queue's first message.
        // `Err`: the broker could not be asked — stop rather than guess.
        let mut offset = match consumer.read_offset(&queue).await? {
            Some(offset) => offset,
            None => consumer.min_offset(&queue).await?,
        };
        loop {
            match consumer.pull(&queue, "*", offset, 32).await? {
                PullResult::Found {
                    messages,
                    next_offset,
                } => {
                    for m in &messages {
                        println!(
                            "queue {} offset {}: {}",
                            m.queue_id,
                            m.queue_offset,
                            String::from_utf8_lossy(&m.body)
                        );
                    }
                    offset = next_offset;
                    consumer.commit(&queue, offset).await?;
                }
                PullResult::NoMatchedMessage { next_offset } => {
                    offset = next_offset;
                    consumer.commit(&queue, offset).await?;
                }
                PullResult::NoNewMessage { .. } => break,
                PullResult::OffsetIllegal { suggested_offset } => offset = suggested_offset,
            }
        }
        println!("queue {} committed at {offset}", queue.queue_id);
    }
    // Persists anything left and reports queues that failed.
    consumer.shutdown().await?.into_result()?;
    Ok(())
}
