//! Consumes `ExampleTopic` with a clustering `PushConsumer` and a concurrent listener for ten
//! seconds, then shuts down, persisting offsets and reporting anything that failed.
//!
//! Run against a local standalone server (produce with the producer example meanwhile):
//!
//! ```text
//! ferromq standalone --data-dir /tmp/ferromq-example &
//! cargo run -p ferromq-client --example push_consumer [NAMESRV_ADDR]
//! ```

use std::time::Duration;

use ferromq_client::{
    ConsumeFromWhere, ConsumeStatus, MessageListener, PushConsumer, PushConsumerConfig,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let namesrv = std::env::args().nth(1).unwrap_or("127.0.0.1:9876".into());
    let listener = MessageListener::concurrently(|messages| {
        for m in messages {
            println!(
                "queue {} offset {}: {}",
                m.queue_id,
                m.queue_offset,
                String::from_utf8_lossy(&m.body)
            );
        }
        ConsumeStatus::ConsumeSuccess
    });
    let consumer = PushConsumer::start(
        PushConsumerConfig {
            namesrv_addrs: vec![namesrv.parse()?],
            group: "ExamplePushGroup".into(),
            // Only when the group has no committed offset for a queue.
            consume_from_where: ConsumeFromWhere::FirstOffset,
            ..PushConsumerConfig::default()
        },
        vec![("ExampleTopic".into(), "*".into())],
        listener,
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let report = consumer.shutdown().await?;
    if !report.is_complete() {
        eprintln!("shutdown incomplete: {report:?}");
    }
    Ok(())
}
