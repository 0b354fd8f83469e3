//! The send API of [`Producer`]: one message (awaited, asynchronous, with a callback, to
//! a chosen queue, one-way) and batches.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use ferromq_protocol::remoting::body::misc::MessageQueue;
use ferromq_protocol::remoting::codes::request;
use ferromq_protocol::remoting::headers::transaction;
use tokio::sync::OwnedSemaphorePermit;

use super::attempt::{non_negative, Prepared};
use super::config::{QueueSelection, QueueSelector};
use super::outcome::{BatchSendResult, SendHandle, SendResult};
use super::Producer;
use crate::error::ClientError;
use crate::message::{encode_batch, new_uniq_key, Message};

impl Producer {
    /// Sends `message` to a round-robin queue and waits for the broker's answer.
    ///
    /// # Durability
    /// `Ok` means the broker acknowledged the message, which a ferromq broker does only once
    /// it is durable under its flush and replication policy.
    ///
    /// # Cancel safety
    /// Dropping the future abandons the send: the message may or may not have been stored.
    /// Use [`Producer::send_async`] for a send that finishes on its own.
    ///
    /// # Errors
    /// [`ClientError::InvalidMessage`] / [`ClientError::BodyTooLarge`] before any traffic;
    /// a non-retriable broker answer at once; [`ClientError::RetriesExhausted`] when every
    /// attempt failed; [`ClientError::Shutdown`] after [`Producer::shutdown`].
    pub async fn send(&self, message: Message) -> Result<SendResult, ClientError> {
        self.send_with(message, &QueueSelection::RoundRobin).await
    }

    /// Sends `message` to the queue `selection` picks.
    ///
    /// # Errors
    /// As [`Producer::send`].
    pub async fn send_with(
        &self,
        message: Message,
        selection: &QueueSelection,
    ) -> Result<SendResult, ClientError> {
        self.check(&message)?;
        let uniq = new_uniq_key();
        let prepared = self.prepare_single(&message, &uniq);
        let (sent, attempts) = self.send_retrying(&prepared, selection, &message).await?;
        Ok(SendResult {
            msg_id: uniq,
            offset_msg_id: sent.header.msg_id.into(),
            queue: sent.queue,
            queue_offset: non_negative(sent.header.queue_offset),
            attempts,
        })
    }

    /// Sends `message` as a half (prepared) message of this producer's group: `TRAN_MSG` and
    /// `PGROUP` set, sysFlag prepared type. The broker keeps it from consumers until an
    /// END_TRANSACTION commits it (see `crate::transaction`).
    pub(crate) async fn send_half(&self, message: &Message) -> Result<SendResult, ClientError> {
        self.check(message)?;
        if message.delay_level.is_some() {
            return Err(ClientError::InvalidMessage(
                "a transactional message cannot have a delay level".into(),
            ));
        }
        let mut half = message.clone();
        half.properties.insert(
            transaction::PROPERTY_TRANSACTION_PREPARED.into(),
            "true".into(),
        );
        half.properties.insert(
            transaction::PROPERTY_PRODUCER_GROUP.into(),
            self.inner.config.group.clone(),
        );
        let uniq = new_uniq_key();
        let mut prepared = self.prepare_single(&half, &uniq);
        prepared.sys_flag |= transaction::TRANSACTION_PREPARED_TYPE;
        let (sent, attempts) = self
            .send_retrying(&prepared, &QueueSelection::RoundRobin, &half)
            .await?;
        Ok(SendResult {
            msg_id: uniq,
            offset_msg_id: sent.header.msg_id.into(),
            queue: sent.queue,
            queue_offset: non_negative(sent.header.queue_offset),
            attempts,
        })
    }

    /// Starts sending `message` (round robin) on a task of its own and returns a handle that
    /// resolves to the result. Waits for a slot when `async_sends_max` sends are outstanding.
    ///
    /// # Errors
    /// Validation errors at once; [`ClientError::AsyncSendsFull`] when no slot frees up within
    /// `send_timeout`. Errors of the send itself come from the handle.
    pub async fn send_async(&self, message: Message) -> Result<SendHandle, ClientError> {
        let permit = self.async_slot(&message).await?;
        let producer = self.clone();
        let task = tokio::spawn(async move {
            let result = producer.send(message).await;
            drop(permit);
            result
        });
        Ok(SendHandle { task })
    }

    /// Starts sending `message` (round robin) on a task of its own and calls `callback` with
    /// the result when it finishes (Java's `send(msg, SendCallback)`). Waits for a slot when
    /// `async_sends_max` sends are outstanding, which bounds the memory held by sends in
    /// flight.
    ///
    /// `callback` runs on a runtime worker: it should return quickly.
    ///
    /// # Errors
    /// Validation errors at once (the callback is not called); [`ClientError::AsyncSendsFull`]
    /// when no slot frees up within `send_timeout`. Every other outcome goes to `callback`.
    pub async fn send_with_callback<F>(
        &self,
        message: Message,
        callback: F,
    ) -> Result<(), ClientError>
    where
        F: FnOnce(Result<SendResult, ClientError>) + Send + 'static,
    {
        let permit = self.async_slot(&message).await?;
        let producer = self.clone();
        tokio::spawn(async move {
            let result = producer.send(message).await;
            // Free the slot before the callback, so a callback that sends again finds one.
            drop(permit);
            callback(result);
        });
        Ok(())
    }

    async fn async_slot(&self, message: &Message) -> Result<OwnedSemaphorePermit, ClientError> {
        self.check(message)?;
        let wait = self.inner.config.send_timeout;
        match tokio::time::timeout(wait, self.inner.async_sends.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) => Err(ClientError::Shutdown),
            Err(_) => Err(ClientError::AsyncSendsFull {
                max: self.inner.config.async_sends_max,
                waited: wait,
            }),
        }
    }

    /// Sends `message` to exactly `queue`, retrying on that queue only.
    ///
    /// # Errors
    /// As [`Producer::send`].
    pub async fn send_to_queue(
        &self,
        message: Message,
        queue: &MessageQueue,
    ) -> Result<SendResult, ClientError> {
        #[derive(Debug)]
        struct Fixed(MessageQueue);
        impl QueueSelector for Fixed {
            fn select(&self, queues: &[MessageQueue], _: &Message) -> usize {
                queues.iter().position(|q| *q == self.0).unwrap_or(0)
            }
        }
        if message.topic != queue.topic {
            return Err(ClientError::InvalidMessage(format!(
                "message topic {} differs from the queue's topic {}",
                message.topic, queue.topic
            )));
        }
        let selection = QueueSelection::Custom(Arc::new(Fixed(queue.clone())));
        self.send_with(message, &selection).await
    }

    /// Sends `message` one-way to a round-robin queue: returns once the request is queued for
    /// writing, without any answer from the broker and without retries.
    ///
    /// # Errors
    /// Validation errors, route errors, and [`ClientError::Transport`] when the request could
    /// not be queued.
    pub async fn send_oneway(&self, message: Message) -> Result<(), ClientError> {
        self.check(&message)?;
        let prepared = self.prepare_single(&message, &new_uniq_key());
        let route = self.publish_route(&message.topic).await?;
        let index =
            self.inner.next_queue.fetch_add(1, Ordering::Relaxed) % route.write_queues.len();
        let queue = &route.write_queues[index];
        let addr = self
            .inner
            .routes
            .master_addr(&message.topic, &queue.broker_name)
            .await?;
        self.register_on_first_contact(addr);
        let cmd = self.command(&prepared, queue);
        self.inner
            .pool
            .invoke_oneway(addr, cmd, self.inner.config.send_timeout)
            .await
    }

    /// Sends `messages` as one SEND_BATCH_MESSAGE to one round-robin queue; they get
    /// consecutive queue offsets. All must share a topic; delay levels are not allowed.
    /// Batch bodies are never compressed (as in RocketMQ).
    ///
    /// # Errors
    /// [`ClientError::InvalidMessage`] for an empty batch, mixed topics or a delay level;
    /// [`ClientError::BodyTooLarge`] when the encoded batch exceeds `max_body_bytes`; else
    /// as [`Producer::send`].
    pub async fn send_batch(&self, messages: Vec<Message>) -> Result<BatchSendResult, ClientError> {
        let Some(first) = messages.first() else {
            return Err(ClientError::InvalidMessage("empty batch".into()));
        };
        let topic = first.topic.clone();
        for (i, m) in messages.iter().enumerate() {
            m.validate()
                .map_err(|e| ClientError::InvalidMessage(format!("batch message {i}: {e}")))?;
            if m.topic != topic {
                return Err(ClientError::InvalidMessage(format!(
                    "batch message {i} has topic {}, the batch's is {topic}",
                    m.topic
                )));
            }
            if m.delay_level.is_some() {
                return Err(ClientError::InvalidMessage(format!(
                    "batch message {i} has a delay level; batches cannot be delayed"
                )));
            }
        }
        let ids: Vec<String> = messages.iter().map(|_| new_uniq_key()).collect();
        let body = encode_batch(&messages, &ids).map_err(ClientError::InvalidMessage)?;
        // Size check before any traffic.
        if body.len() > self.inner.config.max_body_bytes {
            return Err(ClientError::BodyTooLarge {
                size: body.len(),
                max: self.inner.config.max_body_bytes,
            });
        }
        let prepared = Prepared {
            topic,
            code: request::SEND_BATCH_MESSAGE,
            body: Bytes::from(body),
            sys_flag: 0,
            flag: 0,
            properties: None,
            batch: true,
            delay: false,
        };
        let (sent, attempts) = self
            .send_retrying(&prepared, &QueueSelection::RoundRobin, &messages[0])
            .await?;
        let offset_msg_ids: Vec<String> =
            sent.header.msg_id.split(',').map(str::to_string).collect();
        Ok(BatchSendResult {
            msg_ids: ids,
            offset_msg_ids,
            queue: sent.queue,
            first_queue_offset: non_negative(sent.header.queue_offset),
            attempts,
        })
    }
}
