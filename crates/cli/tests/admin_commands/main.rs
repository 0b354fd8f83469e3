//! `ferromq admin` against a running `ferromq standalone`: every command's human and JSON
//! output, resets of an offline group (with `consumerProgress` and `offsetHistory` showing
//! their effect), a reset under a running push consumer, message queries, group connections
//! and clones, lag of a scripted run, and bad input (one `error:` line, non-zero exit).
//! Every command runs with `TZ=UTC0` (POSIX form: no zone database needed) unless a test
//! says otherwise.
//!
//! One test binary, one module per command area; `support` holds the helpers they share,
//! `common` those shared with the other process tests.

#[path = "../common/mod.rs"]
mod common;

mod bad_input;
mod epoch;
mod groups;
mod ha;
mod messages;
mod progress;
mod reset_fences;
mod resets;
mod sql_schema;
mod support;
mod topics;
mod wire;
