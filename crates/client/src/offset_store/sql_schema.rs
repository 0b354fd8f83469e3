//! The PostgreSQL offset table: its definition (the migration), the schema version it
//! carries, and the table-name rule. Plain text and pure functions, built without the
//! `postgres` feature so that `ferromq admin sqlOffsetSchema` can print the migration.
//!
//! Layout of the offset table `<table>` (one row per group and queue):
//!
//! | column | type | meaning |
//! |---|---|---|
//! | `consumer_group`, `topic`, `broker_name`, `queue_id` | key | the queue of the group |
//! | `next_offset` | `bigint NULL` | next queue offset to consume; `NULL`: none committed yet |
//! | `generation` | `bigint` | owner generation: +1 at every claim and every reset |
//! | `updated_at` | `timestamptz` | time of the last write |
//! | `updated_by` | `text` | client id of the last writer, or `reset@<client id>` |
//!
//! The version table `<table>_schema` holds one row per applied schema version; the store
//! refuses to start unless its highest version is [`SCHEMA_VERSION`].
//!
//! Invariants: the migration is idempotent (`IF NOT EXISTS`, `ON CONFLICT DO NOTHING`), so
//! running it on an installed schema changes nothing; a table name is a plain lower-case
//! identifier (checked by [`check_table_name`]), so it can be spliced into SQL safely.

/// The schema version this client writes and reads.
pub const SCHEMA_VERSION: i32 = 1;

/// The offset table's default name.
pub const DEFAULT_TABLE: &str = "ferromq_consumer_offsets";

/// Longest accepted table name (PostgreSQL truncates identifiers at 63 bytes, and the
/// version table adds `_schema`).
pub const TABLE_NAME_LEN_MAX: usize = 48;

/// Checks that `table` is a lower-case identifier (`[a-z_][a-z0-9_]*`, at most
/// [`TABLE_NAME_LEN_MAX`] bytes), so it can be spliced into SQL text.
///
/// # Errors
/// A sentence naming what is wrong with the name.
pub fn check_table_name(table: &str) -> Result<(), String> {
    let mut chars = table.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !first_ok || !rest_ok {
        return Err(format!(
            "offset table name {table:?} must match [a-z_][a-z0-9_]* (a plain lower-case SQL identifier)"
        ));
    }
    if table.len() > TABLE_NAME_LEN_MAX {
        return Err(format!(
            "offset table name {table:?} is {} bytes, more than the maximum of {TABLE_NAME_LEN_MAX}",
            table.len()
        ));
    }
    Ok(())
}

/// The name of the version table of `table`.
pub fn schema_table(table: &str) -> String {
    format!("{table}_schema")
}

/// The migration that creates `table` and its version table at [`SCHEMA_VERSION`]
/// (idempotent). The caller checks the name first ([`check_table_name`]).
pub fn migration_sql(table: &str) -> String {
    let schema = schema_table(table);
    format!(
        "-- ferromq consumer offsets in PostgreSQL, schema version {SCHEMA_VERSION}.
-- Idempotent: running it again changes nothing.
CREATE TABLE IF NOT EXISTS {schema} (
    version integer PRIMARY KEY,
    installed_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO {schema} (version) VALUES ({SCHEMA_VERSION}) ON CONFLICT (version) DO NOTHING;
CREATE TABLE IF NOT EXISTS {table} (
    consumer_group text NOT NULL,
    topic text NOT NULL,
    broker_name text NOT NULL,
    queue_id integer NOT NULL CHECK (queue_id >= 0),
    next_offset bigint CHECK (next_offset >= 0),
    generation bigint NOT NULL CHECK (generation > 0),
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text NOT NULL,
    PRIMARY KEY (consumer_group, topic, broker_name, queue_id)
);
"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_plain_identifiers() {
        assert!(check_table_name(DEFAULT_TABLE).is_ok());
        assert!(check_table_name("_t9").is_ok());
        for bad in ["", "9t", "T", "t-1", "t;drop table x", "t x", "\"t\""] {
            assert!(check_table_name(bad).is_err(), "{bad:?}");
        }
        let long = "t".repeat(TABLE_NAME_LEN_MAX + 1);
        assert!(check_table_name(&long).unwrap_err().contains("maximum"));
    }

    #[test]
    fn migration_names_both_tables_and_the_version() {
        let sql = migration_sql("offs");
        assert!(sql.contains("CREATE TABLE IF NOT EXISTS offs ("));
        assert!(sql.contains("CREATE TABLE IF NOT EXISTS offs_schema ("));
        assert!(sql.contains(&format!("VALUES ({SCHEMA_VERSION})")));
    }
}
