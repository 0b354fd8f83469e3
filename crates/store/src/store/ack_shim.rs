//! TEMPORARY (replaced by the store's acknowledgement API at merge): the names the broker
//! core is written against.
#![allow(missing_docs)]

use std::time::Duration;

use super::{CommitOutcome, MessageStore, PutReceipt, StoreError};
use crate::error::DurabilityError;
use crate::offsets::OffsetCommand;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckTicket {
    pub end: u64,
    pub epoch: u64,
}

impl PutReceipt {
    pub fn ticket(&self) -> AckTicket {
        AckTicket {
            end: self.end_offset,
            epoch: self.truncation_epoch,
        }
    }
}

impl MessageStore {
    pub async fn acknowledged(&self, ticket: AckTicket) -> Result<(), DurabilityError> {
        let timeout_ms = self.config().sync_flush_timeout_ms;
        match tokio::time::timeout(
            Duration::from_millis(timeout_ms),
            self.acknowledgeable(ticket.end, ticket.epoch),
        )
        .await
        {
            Ok(result) => result,
            Err(_) => Err(DurabilityError::Timeout { timeout_ms }),
        }
    }

    pub fn append_offsets(
        &self,
        command: &OffsetCommand,
    ) -> Result<(CommitOutcome, Option<AckTicket>), StoreError> {
        self.commit_offsets(command).map(|o| (o, None))
    }

    pub fn append_correction(
        &self,
        command: &OffsetCommand,
        expected: &[Option<u64>],
    ) -> Result<(CommitOutcome, Option<AckTicket>), StoreError> {
        self.correct_offsets(command, expected).map(|o| (o, None))
    }
}

/// TEMPORARY: the offset view reader.
pub struct OffsetView<'a> {
    store: &'a MessageStore,
}

impl MessageStore {
    pub async fn offset_view(&self) -> Result<OffsetView<'_>, crate::error::ReadError> {
        self.dispatch_caught_up(Duration::from_millis(self.config().sync_flush_timeout_ms))
            .await;
        Ok(OffsetView { store: self })
    }
}

impl OffsetView<'_> {
    pub fn consumer_offset(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
    ) -> Option<crate::offsets::StoredOffset> {
        self.store.consumer_offset(group, topic, queue_id)
    }
    pub fn generation(&self, group: &str, topic: &str) -> u64 {
        self.store.offset_generation(group, topic)
    }
    pub fn group_offsets(&self, group: &str) -> Vec<(String, u32, crate::offsets::StoredOffset)> {
        self.store.group_offsets(group)
    }
    pub fn groups(&self) -> Vec<String> {
        self.store.groups()
    }
}
