//! Sends ten messages to topic `ExampleTopic` and prints where each landed.
//!
//! Run against a local standalone server (name server on 127.0.0.1:9876):
//!
//! ```text
//! ferromq standalone --data-dir /tmp/ferromq-example &
//! cargo run -p ferromq-client --example producer [NAMESRV_ADDR]
//! ```

use ferromq_client::{Message, Producer, ProducerConfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let namesrv = std::env::args().nth(1).unwrap_or("127.0.0.1:9876".into());
    let producer = Producer::start(ProducerConfig {
        namesrv_addrs: vec![namesrv.parse()?],
        group: "ExampleProducer".into(),
        ..ProducerConfig::default()
    })?;
    for i in 0..10 {
        let message = Message::new("ExampleTopic", format!("hello {i}"))
            .with_tags("example")
            .with_key(format!("key-{i}"));
        // `send` returns only after the broker acknowledged the message; errors are returned.
        let sent = producer.send(message).await?;
        println!(
            "sent {} to queue {} at offset {}",
            sent.msg_id, sent.queue.queue_id, sent.queue_offset
        );
    }
    // Unregisters from the brokers, then closes the connections.
    producer.close().await?;
    Ok(())
}
