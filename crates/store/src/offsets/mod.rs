//! Consumer offsets stored as log records.
//!
//! Offset commits, resets and corrections are [`OffsetCommand`]s encoded as record bodies
//! of the system topic [`OFFSET_TOPIC`] in the CommitLog. The offset table is an
//! [`OffsetView`] materialised by applying those records in log order, checkpointed with
//! [`OffsetView::encode_into`] and rebuilt with [`OffsetView::decode`] plus replay of the
//! records after the checkpoint. An offset is always the *next* queue offset to consume for
//! a (group, topic, queue).
//!
//! # Invariants and how they are enforced
//!
//! * **One log for data and progress (DESIGN.md invariant 1).** This module holds no file
//!   and no clock: the view changes only through [`OffsetView::apply`], which takes a
//!   command as read back from the log and the record's timestamp. Replication, fsync,
//!   truncation and recovery of offsets are therefore those of the log.
//! * **The view is a pure function of the applied sequence.** `apply` reads nothing but
//!   its arguments and the view; the view is built from `BTreeMap`s, so iteration,
//!   [`OffsetView::groups`], [`OffsetView::group_offsets`] and the snapshot encoding are
//!   deterministic. Applying the same sequence to two empty views gives equal views and
//!   byte-identical encodings, and `decode` rejects any snapshot that is not the canonical
//!   encoding of some view (unsorted or duplicate keys, empty groups or topics, a queue
//!   stamped with a generation the topic never reached).
//! * **Progress is monotone (DESIGN.md invariant 3).** Rules, checked per entry in this
//!   order:
//!   1. Each (group, topic) has a reset generation, starting at 0.
//!   2. A commit carrying `Some(g)` is rejected as `StaleGeneration` if `g` is older than
//!      the current generation (it was sent before a reset or correction) and as
//!      `UnknownGeneration` if `g` is newer than any issued. `None` (a legacy client) skips
//!      only this check. Then an offset past the queue's max offset is rejected
//!      (`PastMax`); an offset below the stored one is rejected (`Regression`); an offset
//!      equal to it is `Unchanged` and touches nothing; a higher offset, or a first offset,
//!      is `Applied` and stamped with the current generation and the record's timestamp.
//!      Entries of one commit are judged in order, each seeing the effect of the earlier
//!      ones, so a command may name a queue twice.
//!   3. A reset or correction must name exactly one topic (otherwise every entry is
//!      rejected as `MixedTopics`) and, in a stored record, carry the generation it
//!      establishes, which must be current + 1 (`None` gives `MissingGeneration`, an
//!      older or equal one `StaleGeneration`, a higher one `UnknownGeneration`, for every
//!      entry). Each entry may move its queue backwards or forwards but not past the
//!      queue's max offset (`PastMax`). A valid entry is always `Applied`, even at the
//!      stored offset, because it must be restamped with the new generation. When at least
//!      one entry is applied, the topic's generation becomes the new one; when none is,
//!      nothing changes (a reset with no entries changes nothing). Replaying the same reset
//!      twice is therefore rejected the second time (`StaleGeneration`).
//!   4. [`OffsetView::check`] gives the verdicts `apply` would give without mutating; it
//!      treats a reset or correction without a generation as "the store will assign
//!      current + 1", so it then validates only the topic rule and `PastMax`.
//! * **Commits never point past the log end.** Every stored offset was at most
//!   `queue_max(topic, queue)` when applied; `PastMax` rejects the rest.
//! * **No magic offsets (DESIGN.md invariant 7).** Offsets and generations are `u64`;
//!   absence is `None` from [`OffsetView::get`], never a negative or sentinel value.
//! * **Untrusted bytes never panic.** Both codecs are versioned (first byte = format
//!   version 1), big-endian, bounds-checked, and return an [`OffsetCodecError`] naming
//!   the field and byte position of what is wrong.

pub mod command;
pub mod view;

pub use command::*;
pub use view::*;

/// The system topic whose record bodies are encoded [`OffsetCommand`]s. Only
/// [`crate::MessageStore::commit_offsets`] writes it: a message append naming it is refused.
pub const OFFSET_TOPIC: &str = ferromq_protocol::names::OFFSETS_TOPIC;
