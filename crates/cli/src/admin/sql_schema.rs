//! `ferromq admin sqlOffsetSchema` (ferromq): prints the SQL migration that creates the
//! PostgreSQL offset table of the Rust client's `PostgresOffsetStore` (exactly-once
//! consumption, see docs/exactly-once-postgres.md), for `psql` or a migration tool. Needs no
//! server; the SQL is idempotent.

use anyhow::{bail, Result};
use ferromq_client::offset_store::sql_schema::{
    check_table_name, migration_sql, DEFAULT_TABLE, SCHEMA_VERSION,
};

/// Flags of `sqlOffsetSchema`.
#[derive(Debug, Clone, clap::Args)]
pub struct SqlOffsetSchemaArgs {
    /// Offset table name (a plain lower-case SQL identifier); the version table is
    /// `<table>_schema`.
    #[arg(long, default_value = DEFAULT_TABLE)]
    pub table: String,
    /// Print one JSON object `{"table", "schemaVersion", "sql"}` instead of the SQL.
    #[arg(long)]
    pub json: bool,
}

/// Prints the migration of `args.table`.
pub fn print(args: SqlOffsetSchemaArgs) -> Result<()> {
    if let Err(reason) = check_table_name(&args.table) {
        bail!("{reason}");
    }
    let sql = migration_sql(&args.table);
    if args.json {
        let value = serde_json::json!({
            "table": args.table,
            "schemaVersion": SCHEMA_VERSION,
            "sql": sql,
        });
        println!("{value}");
    } else {
        print!("{sql}");
    }
    Ok(())
}
