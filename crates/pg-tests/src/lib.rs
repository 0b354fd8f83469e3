//! Test support for the client's PostgreSQL offset store: an in-process name server and
//! broker on 127.0.0.1 ([`cluster`]), and PostgreSQL servers for tests ([`pg`]): the one
//! `scripts/test` starts (`FERROMQ_TEST_PG_URL`) or a private one a test starts and stops
//! itself from the binaries in `FERROMQ_TEST_PG_BIN`.
//!
//! Without PostgreSQL the tests skip with a printed reason, unless `FERROMQ_INTEROP_REQUIRED`
//! is set (as `scripts/test` does after installing): then they fail.

pub mod cluster;
pub mod pg;

/// True when a missing tool must fail the test rather than skip it.
pub fn required() -> bool {
    std::env::var("FERROMQ_INTEROP_REQUIRED").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Skips (prints `reason`, returns `None`) or, when [`required`], panics.
pub fn skip_or_fail<T>(reason: &str) -> Option<T> {
    if required() {
        panic!("FERROMQ_INTEROP_REQUIRED is set but {reason}");
    }
    eprintln!("SKIPPED: {reason}");
    None
}
