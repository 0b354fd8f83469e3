//! Consumer offsets in PostgreSQL (cargo feature `postgres`): [`PostgresOffsets`], the
//! checked connection pool and table, and [`PostgresOffsetStore`], an
//! [`OffsetStore`](crate::OffsetStore) whose
//! rows carry an owner generation.
//!
//! Why `tokio-postgres` with `deadpool-postgres` rather than `sqlx`: the client already runs
//! on tokio and needs only a handful of fixed statements plus a transaction handed to the
//! application. `tokio-postgres` builds without proc macros or a database at compile time;
//! `deadpool-postgres` adds a small bounded pool with wait, create and recycle timeouts.
//! `sqlx` would bring its macro stack and more dependencies to a crate that must build fast
//! on two cores.
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
