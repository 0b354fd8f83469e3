//! The fences recorded in the log: which consumers a reset or correction fenced off which
//! queues and have not committed there since (see [`crate::offsets::OffsetFence`]).

use super::MessageStore;
use crate::error::ReadError;
use crate::offsets::OffsetFence;

impl MessageStore {
    /// Every fence of the offset view, once the view has caught up with everything
    /// acknowledged before the call (blocking, bounded by the flush timeout: call it from a
    /// blocking context). The broker rebuilds its fences from this at start, so a consumer
    /// fenced before a restart (or a failover) stays fenced after it.
    ///
    /// # Errors
    /// The view could not catch up ([`ReadError::ViewBehind`], [`ReadError::DispatchStalled`]):
    /// the fences it holds might be stale.
    pub fn offset_fences(&self) -> Result<Vec<OffsetFence>, ReadError> {
        self.catch_up_dispatch()?;
        Ok(self.inner.derived.lock().view.fences())
    }
}
