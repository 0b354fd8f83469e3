//! A chaos producer: sends `producer:counter` values one at a time and records each outcome.
//!
//! Client retries are off (`retries_max = 0`): a retried send could store one value at two
//! offsets, and the retry would hide the first attempt's indeterminate outcome. Instead every
//! send is recorded exactly once as `SendOk` (with the queue and offset the broker assigned),
//! `SendFail` (the broker answered that it did not store it, or no request was sent) or
//! `SendInfo` (anything else: timeout, closed connection, an error after the write such as a
//! flush timeout — the value may or may not be stored).

use std::sync::Arc;
use std::time::Duration;

use ferromq_client::{ClientError, Message, Producer, ProducerConfig};
use ferromq_protocol::remoting::codes::response;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{queue_of, stop_task, Target, REQUEST_TIMEOUT, ROUTE_MAX_AGE};
use crate::history::{Op, Value};
use crate::recorder::Recorder;

/// A running producer task.
#[derive(Debug)]
pub struct ProducerTask {
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

/// What a failed send says about the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Definitely not stored.
    Failed,
    /// Maybe stored.
    Unknown,
}

fn classify(error: &ClientError) -> Outcome {
    match error {
        ClientError::RetriesExhausted { last, .. } => classify(last),
        // Refused before any request reached a broker.
        ClientError::Config(_)
        | ClientError::InvalidMessage(_)
        | ClientError::BodyTooLarge { .. }
        | ClientError::NoRoute { .. }
        | ClientError::NoBrokerAddress { .. }
        | ClientError::NoQueue { .. } => Outcome::Failed,
        // Codes the broker answers before it appends anything.
        ClientError::Broker { code, .. }
            if matches!(
                *code,
                response::MESSAGE_ILLEGAL | response::NO_PERMISSION | response::TOPIC_NOT_EXIST
            ) =>
        {
            Outcome::Failed
        }
        _ => Outcome::Unknown,
    }
}

impl ProducerTask {
    /// Starts producer `id`, sending to `target.topic` with `pace` between sends.
    ///
    /// # Errors
    /// The client's configuration error.
    pub fn spawn(
        id: u32,
        target: &Target,
        recorder: Arc<Recorder>,
        pace: Duration,
    ) -> Result<ProducerTask, ClientError> {
        let producer = Producer::start(ProducerConfig {
            namesrv_addrs: target.namesrvs.clone(),
            group: format!("chaos-producer-{id}"),
            send_timeout: REQUEST_TIMEOUT,
            retries_max: 0,
            connect_timeout: REQUEST_TIMEOUT,
            route_max_age: ROUTE_MAX_AGE,
            ..ProducerConfig::default()
        })?;
        let (stop, stop_rx) = watch::channel(false);
        let topic = target.topic.clone();
        let task = tokio::spawn(run(id, producer, topic, recorder, pace, stop_rx));
        Ok(ProducerTask {
            stop,
            task: Some(task),
        })
    }

    /// Stops after the send in progress (bounded by the send timeout); the producer's last
    /// send always has its outcome recorded.
    pub async fn stop(&mut self) {
        stop_task(&self.stop, &mut self.task, REQUEST_TIMEOUT * 3).await;
    }
}

impl Drop for ProducerTask {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

async fn run(
    id: u32,
    producer: Producer,
    topic: String,
    recorder: Arc<Recorder>,
    pace: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut counter = 0u64;
    while !*stop.borrow() {
        let value = Value::new(id, counter);
        counter += 1;
        recorder.record(Op::SendInvoke { value });
        let message = Message::new(topic.clone(), value.to_string());
        // The client bounds the send by `send_timeout`; this bounds it again in case a route
        // lookup and the send add up.
        let result = tokio::time::timeout(REQUEST_TIMEOUT * 2, producer.send(message)).await;
        let op = match result {
            Ok(Ok(sent)) => Op::SendOk {
                value,
                queue: queue_of(&sent.queue),
                offset: sent.queue_offset,
            },
            Ok(Err(error)) => match classify(&error) {
                Outcome::Failed => Op::SendFail {
                    value,
                    error: error.to_string(),
                },
                Outcome::Unknown => Op::SendInfo {
                    value,
                    error: error.to_string(),
                },
            },
            Err(_) => Op::SendInfo {
                value,
                error: "send timed out".into(),
            },
        };
        let failed = !matches!(op, Op::SendOk { .. });
        recorder.record(op);
        // After a failure, pause a little longer: the broker is down or cut off.
        let wait = if failed {
            pace.max(Duration::from_millis(100))
        } else {
            pace
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => {}
        }
    }
    producer.shutdown();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_refusals_before_the_write_are_definite_failures() {
        let addr = "127.0.0.1:1".parse().unwrap();
        let broker = |code| ClientError::Broker {
            addr,
            code,
            remark: String::new(),
        };
        assert_eq!(
            classify(&broker(response::TOPIC_NOT_EXIST)),
            Outcome::Failed
        );
        assert_eq!(classify(&broker(response::SYSTEM_ERROR)), Outcome::Unknown);
        assert_eq!(
            classify(&broker(response::FLUSH_DISK_TIMEOUT)),
            Outcome::Unknown
        );
        let wrapped = ClientError::RetriesExhausted {
            attempts: 1,
            last: Box::new(broker(response::NO_PERMISSION)),
        };
        assert_eq!(classify(&wrapped), Outcome::Failed);
    }
}
