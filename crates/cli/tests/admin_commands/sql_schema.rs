//! `ferromq admin sqlOffsetSchema`: the PostgreSQL offset table's migration, printed
//! without any server; a bad table name is one `error:` line.

use crate::common::{fails, ok, ok_json};

#[test]
fn sql_offset_schema_prints_an_idempotent_migration() {
    let sql = ok(&["sqlOffsetSchema"]);
    assert!(
        sql.contains("CREATE TABLE IF NOT EXISTS ferromq_consumer_offsets ("),
        "{sql}"
    );
    assert!(sql.contains("CREATE TABLE IF NOT EXISTS ferromq_consumer_offsets_schema ("));
    assert!(sql.contains("generation bigint NOT NULL"));
    assert!(sql.contains("ON CONFLICT (version) DO NOTHING"));
    let custom = ok_json(&["sqlOffsetSchema", "--table", "shop_offsets"]);
    assert_eq!(custom["table"], "shop_offsets");
    assert_eq!(custom["schemaVersion"], 1);
    assert!(custom["sql"]
        .as_str()
        .unwrap()
        .contains("CREATE TABLE IF NOT EXISTS shop_offsets ("));
    let error = fails(&["sqlOffsetSchema", "--table", "x; DROP TABLE y"], 1);
    assert!(error.contains("plain lower-case SQL identifier"), "{error}");
}
