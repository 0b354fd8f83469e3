//! Start-up of the PostgreSQL offset store: configuration, the connection pool, the optional
//! migration and the schema check (module invariant 1).

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use thiserror::Error;
use tokio_postgres::NoTls;

use crate::offset_store::sql_schema::{
    check_table_name, migration_sql, schema_table, DEFAULT_TABLE, SCHEMA_VERSION,
};

/// Settings of [`PostgresOffsets::connect`].
#[derive(Debug, Clone)]
pub struct PostgresConfig {
    /// libpq-style connection string: `postgres://user@127.0.0.1:5432/db` or
    /// `host=127.0.0.1 port=5432 user=u dbname=db`. TLS is not supported (loopback or a
    /// trusted network only).
    pub url: String,
    /// Offset table name (a plain lower-case identifier); its version table is
    /// `<table>_schema`.
    pub table: String,
    /// Run the (idempotent) migration at start. Off: the tables must exist already, e.g.
    /// created from `ferromq admin sqlOffsetSchema`.
    pub migrate: bool,
    /// Most pooled connections.
    pub pool_size_max: usize,
    /// Bound on opening a connection and on waiting for a pooled one.
    pub connect_timeout: Duration,
    /// Bound on each statement the store runs by itself (claims, resets, reads, plain
    /// commits). A claim that waits this long (e.g. on the row lock of a paused owner's open
    /// transaction) fails and is retried by the consumer.
    pub statement_timeout: Duration,
}

impl PostgresConfig {
    /// Settings for `url` with the default table, no migration, 4 connections and 5 s
    /// bounds.
    pub fn new(url: impl Into<String>) -> Self {
        PostgresConfig {
            url: url.into(),
            table: DEFAULT_TABLE.into(),
            migrate: false,
            pool_size_max: 4,
            connect_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(5),
        }
    }
}

/// Why [`PostgresOffsets::connect`] refused to start.
#[derive(Debug, Error)]
pub enum PostgresSetupError {
    /// The connection string does not parse (the string itself is not repeated: it may
    /// hold a password).
    #[error("the PostgreSQL connection string does not parse: {source}")]
    InvalidUrl {
        /// The driver's parse error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The table name is not a plain identifier, or a bound is zero.
    #[error("invalid PostgreSQL offset store configuration: {0}")]
    Config(String),
    /// The pool could not be built.
    #[error("cannot build the PostgreSQL connection pool: {0}")]
    Pool(#[from] deadpool_postgres::BuildError),
    /// No connection could be opened.
    #[error("cannot connect to PostgreSQL: {source}")]
    Connect {
        /// The pool's error (connect, authentication, timeout).
        #[source]
        source: deadpool_postgres::PoolError,
    },
    /// The offset table or its version table does not exist.
    #[error("the offset table {table} does not exist ({missing} is missing); create it with `ferromq admin sqlOffsetSchema --table {table} | psql <url>` or start the store with migrate on")]
    MissingTable {
        /// The configured offset table.
        table: String,
        /// The table that is missing.
        missing: String,
    },
    /// The version table holds another schema version than this client's.
    #[error("the offset table {table} has schema version {found:?}, this client needs version {expected}")]
    SchemaVersion {
        /// The configured offset table.
        table: String,
        /// Highest version found (`None`: the version table is empty).
        found: Option<i32>,
        /// [`SCHEMA_VERSION`].
        expected: i32,
    },
    /// A start-up statement failed.
    #[error("PostgreSQL start-up statement failed ({what}): {source}")]
    Query {
        /// The statement's purpose.
        what: &'static str,
        /// The driver's error.
        #[source]
        source: tokio_postgres::Error,
    },
}

/// A checked pool and offset table: cheap to clone, shared by the stores of one process.
#[derive(Clone)]
pub struct PostgresOffsets {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) pool: Pool,
    pub(super) table: String,
    pub(super) statement_timeout: Duration,
}

impl std::fmt::Debug for PostgresOffsets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresOffsets")
            .field("table", &self.inner.table)
            .field("pool_status", &self.inner.pool.status())
            .finish()
    }
}

impl PostgresOffsets {
    /// Parses `config.url`, opens the pool, runs the migration when `config.migrate`, and
    /// checks the tables and their schema version.
    ///
    /// # Errors
    /// One [`PostgresSetupError`] variant per cause (see its docs).
    pub async fn connect(config: &PostgresConfig) -> Result<PostgresOffsets, PostgresSetupError> {
        check_table_name(&config.table).map_err(PostgresSetupError::Config)?;
        if config.pool_size_max == 0 {
            return Err(PostgresSetupError::Config(
                "pool_size_max must be positive".into(),
            ));
        }
        let mut pg = tokio_postgres::Config::from_str(&config.url)
            .map_err(|source| PostgresSetupError::InvalidUrl { source })?;
        pg.connect_timeout(config.connect_timeout);
        pg.application_name("ferromq-offsets");
        let manager = Manager::from_config(
            pg,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(config.pool_size_max)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(config.connect_timeout))
            .create_timeout(Some(config.connect_timeout))
            .recycle_timeout(Some(config.connect_timeout))
            .build()?;
        let offsets = PostgresOffsets {
            inner: Arc::new(Inner {
                pool,
                table: config.table.clone(),
                statement_timeout: config.statement_timeout,
            }),
        };
        offsets.prepare(config.migrate).await?;
        Ok(offsets)
    }

    /// The offset table's name.
    pub fn table(&self) -> &str {
        &self.inner.table
    }

    /// The connection pool (applications may share it for their own work).
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    async fn prepare(&self, migrate: bool) -> Result<(), PostgresSetupError> {
        let table = &self.inner.table;
        let client = self
            .inner
            .pool
            .get()
            .await
            .map_err(|source| PostgresSetupError::Connect { source })?;
        if migrate {
            client
                .batch_execute(&migration_sql(table))
                .await
                .map_err(|source| PostgresSetupError::Query {
                    what: "run the migration",
                    source,
                })?;
        }
        let versions = schema_table(table);
        let row = client
            .query_one(
                "SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL",
                &[table, &versions],
            )
            .await
            .map_err(|source| PostgresSetupError::Query {
                what: "look the tables up",
                source,
            })?;
        for (present, name) in [(row.get::<_, bool>(0), table), (row.get(1), &versions)] {
            if !present {
                return Err(PostgresSetupError::MissingTable {
                    table: table.clone(),
                    missing: name.clone(),
                });
            }
        }
        let found: Option<i32> = client
            .query_one(&format!("SELECT max(version) FROM {versions}"), &[])
            .await
            .map_err(|source| PostgresSetupError::Query {
                what: "read the schema version",
                source,
            })?
            .get(0);
        if found != Some(SCHEMA_VERSION) {
            return Err(PostgresSetupError::SchemaVersion {
                table: table.clone(),
                found,
                expected: SCHEMA_VERSION,
            });
        }
        Ok(())
    }
}
