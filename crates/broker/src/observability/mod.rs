//! What the broker tells its operators: Prometheus metrics (served on `metricsPort`) and the
//! runtime table of `brokerStatus`.

pub mod broker_stats;
pub mod log_limit;
pub mod metrics;
pub mod metrics_http;
pub mod open_files;
pub mod transactions;
pub mod transfer;
