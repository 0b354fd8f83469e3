//! Reads of the consumer-offset view for the core: they wait (asynchronously, bounded) until
//! the view covers everything acknowledged before the read, and fail with [`ViewError`]
//! rather than answer from a stale view (invariant 7).

use ferromq_store::MessageStore;

use super::error::ViewError;

/// The store's offset view once it has caught up; answers without waiting.
pub struct Offsets<'a> {
    view: ferromq_store::OffsetView<'a>,
}

/// Waits until the offset view covers every write acknowledged before the call.
pub async fn offsets(store: &MessageStore) -> Result<Offsets<'_>, ViewError> {
    Ok(Offsets {
        view: store.offset_view().await?,
    })
}

impl Offsets<'_> {
    /// The group's stored offset of the queue (`None`: it never stored one).
    pub fn stored(&self, group: &str, topic: &str, queue_id: u32) -> Option<u64> {
        self.view
            .consumer_offset(group, topic, queue_id)
            .map(|s| s.offset)
    }

    /// The current reset generation of (group, topic).
    pub fn generation(&self, group: &str, topic: &str) -> u64 {
        self.view.generation(group, topic)
    }

    /// Whether the group holds any stored offset.
    pub fn has_group(&self, group: &str) -> bool {
        !self.view.group_offsets(group).is_empty()
    }
}

impl Offsets<'_> {
    /// The groups holding at least one stored offset, in ascending order.
    pub fn groups(&self) -> Vec<String> {
        self.view.groups()
    }

    /// Every stored offset of a group: (topic, queue, offset).
    pub fn group_offsets(&self, group: &str) -> Vec<(String, u32, u64)> {
        self.view
            .group_offsets(group)
            .into_iter()
            .map(|(topic, queue_id, stored)| (topic, queue_id, stored.offset))
            .collect()
    }
}
