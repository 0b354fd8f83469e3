//! Consumer offsets in PostgreSQL (cargo feature `postgres`): [`PostgresOffsets`], the
//! checked connection pool and table, and [`PostgresOffsetStore`], an [`OffsetStore`] whose
//! rows carry an owner generation.
//!
//! Why `tokio-postgres` with `deadpool-postgres` rather than `sqlx`: the client already runs
//! on tokio and needs nothing but a few fixed statements and a transaction handed to the
//! application; `tokio-postgres` is the driver `sqlx` itself does not share code with but
//! that many Rust services use directly, it builds without proc macros or a query-checking
//! database at compile time, and `deadpool-postgres` adds a small, bounded pool with
//! timeouts. `sqlx` would bring its macro stack and several database back ends' worth of
//! dependencies to a crate that must stay lean on 2-core builds.
//!
//! Invariants:
//! 1. **Start-up is checked.** [`PostgresOffsets::connect`] refuses an unparsable connection
//!    string, an unreachable server, a missing table and a wrong schema version, each with
//!    its own [`PostgresSetupError`] variant, before any consumer runs.
//! 2. **Claims fence.** Every claim and every reset adds one to the row's `generation`;
//!    every commit is `UPDATE … WHERE generation = <held>` and refused with
//!    [`OffsetError::Fenced`] when no row matched, so two consumers that both believe they
//!    own a queue cannot both commit (the second claimant wins).
//! 3. **No regression, no replay.** A commit also requires the stored offset to be at or
//!    below the batch's first offset (plain commits: at or below the new offset), so a batch
//!    already covered by the stored offset is never committed twice.
//! 4. **"No offset" is `Ok(None)`** (no row, or a row whose `next_offset` is `NULL`); any
//!    database failure is [`OffsetError::Database`] — never a guessed position.
//! 5. Every wait is bounded: the pool's wait/create/recycle timeouts and
//!    [`PostgresConfig::statement_timeout`] around each store statement.

mod setup;
mod store;

pub use setup::{PostgresConfig, PostgresOffsets, PostgresSetupError};
pub use store::PostgresOffsetStore;

/// The driver, re-exported so applications use the same version for their statements in
/// [`LitePullConsumer::consume_transactionally`](crate::LitePullConsumer::consume_transactionally).
pub use tokio_postgres;

#[allow(unused_imports)]
use super::OffsetStore;
