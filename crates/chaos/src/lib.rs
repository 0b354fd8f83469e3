//! The chaos harness and checker behind `ferromq chaos`.
//!
//! A run records every operation of its producers and consumers as a [`history::History`]:
//! sends (invoked, then acknowledged, failed, or indeterminate), deliveries, commits and
//! offset observations, resets and injected faults. After the faults heal and the consumers
//! drain, [`checker::check`] decides whether the run kept ferromq's promises (properties K1–K7
//! of `offset-pitfalls.md`): nothing acknowledged lost, nothing unexpected, dense and unique
//! queue offsets, monotone commits, no commit past the log end, duplicates within the stated
//! bound, and no poll-skip.

pub mod admin;
pub mod checker;
pub mod cluster;
pub mod failovers;
pub mod faults;
pub mod history;
pub mod inject;
pub mod nodes;
pub mod observer;
pub mod proxy;
pub mod recorder;
pub mod resets;
pub mod run;
pub mod servers;
pub mod topology;
pub mod workload;
