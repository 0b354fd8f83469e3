//! The process's open-file limit (`RLIMIT_NOFILE`) as the `ferromq` command left it at start,
//! and whether raising the soft limit to the hard one failed. Every client connection takes a
//! descriptor and the connection limit follows the soft limit, so a failed raise caps the
//! broker's connections: it is shown where operators look (metrics, `brokerStatus`), not only
//! in a log line. The launcher raises the limit before the broker starts and reports the outcome
//! with [`OpenFileMetrics::set`]; a broker embedded without that report shows none of this.
//!
//! Metrics:
//! - `ferromq_open_files_soft_limit`, `ferromq_open_files_hard_limit`: the limits in force
//!   after start (-1: unlimited, as procfs-based process collectors report it); absent when
//!   they could not be read.
//! - `ferromq_open_files_raise_failed`: 1 when raising the soft limit failed, else 0.
//!
//! GET_BROKER_RUNTIME_INFO keys: `openFilesSoftLimit`, `openFilesHardLimit` (a number,
//! `unlimited`, or empty when unknown) and `openFilesRaiseError` (the error, empty when none).

use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// The open-file limits after the launcher's raise, and the raise's error if it failed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenFileStatus {
    /// The soft limit in force (`u64::MAX`: unlimited); `None` when it could not be read.
    pub soft: Option<u64>,
    /// The hard limit (`u64::MAX`: unlimited); `None` when it could not be read.
    pub hard: Option<u64>,
    /// Why raising the soft limit failed; `None` when it was raised or already at the hard
    /// limit.
    pub raise_error: Option<String>,
}

/// The reported status, shared with the collector that renders it at scrape time.
#[derive(Debug, Default)]
pub struct OpenFileMetrics {
    status: Arc<Mutex<Option<OpenFileStatus>>>,
}

impl OpenFileMetrics {
    /// Registers the gauges in `registry` (rendered from the status at each scrape).
    pub fn register(&self, registry: &mut Registry) {
        registry.register_collector(Box::new(StatusCollector {
            status: Arc::clone(&self.status),
        }));
    }

    /// Records what the launcher found and did; a later report replaces an earlier one.
    pub fn set(&self, status: OpenFileStatus) {
        *self.status.lock().unwrap_or_else(PoisonError::into_inner) = Some(status);
    }

    /// The reported status, `None` before any report.
    pub fn status(&self) -> Option<OpenFileStatus> {
        self.status
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The GET_BROKER_RUNTIME_INFO keys (see the module docs).
    pub fn runtime_entries(&self) -> [(&'static str, String); 3] {
        let status = self.status().unwrap_or_default();
        let limit = |value: Option<u64>| match value {
            None => String::new(),
            Some(u64::MAX) => "unlimited".to_string(),
            Some(value) => value.to_string(),
        };
        [
            ("openFilesSoftLimit", limit(status.soft)),
            ("openFilesHardLimit", limit(status.hard)),
            (
                "openFilesRaiseError",
                status.raise_error.unwrap_or_default(),
            ),
        ]
    }
}

/// Renders the status at scrape time.
#[derive(Debug)]
struct StatusCollector {
    status: Arc<Mutex<Option<OpenFileStatus>>>,
}

/// A limit as a gauge value: -1 for unlimited.
fn gauge_value(limit: u64) -> i64 {
    if limit == u64::MAX {
        -1
    } else {
        i64::try_from(limit).unwrap_or(i64::MAX)
    }
}

impl Collector for StatusCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(status) = self
            .status
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        else {
            return Ok(());
        };
        let limits = [
            (
                "ferromq_open_files_soft_limit",
                "The soft open-file limit (RLIMIT_NOFILE) in force after start; -1: unlimited",
                status.soft,
            ),
            (
                "ferromq_open_files_hard_limit",
                "The hard open-file limit (RLIMIT_NOFILE); -1: unlimited",
                status.hard,
            ),
        ];
        for (name, help, value) in limits {
            if let Some(value) = value {
                let gauge = ConstGauge::new(gauge_value(value));
                gauge.encode(encoder.encode_descriptor(
                    name,
                    help,
                    None,
                    gauge.metric_type(),
                )?)?;
            }
        }
        let failed = ConstGauge::new(i64::from(status.raise_error.is_some()));
        failed.encode(encoder.encode_descriptor(
            "ferromq_open_files_raise_failed",
            "1 when raising the soft open-file limit to the hard limit failed at start \
             (connections stay capped by the lower soft limit), else 0",
            None,
            failed.metric_type(),
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(metrics: &OpenFileMetrics) -> String {
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, &registry).unwrap();
        out
    }

    /// The value of the sample named `name`, if present.
    fn sample(text: &str, name: &str) -> Option<String> {
        text.lines()
            .filter(|line| !line.starts_with('#'))
            .find_map(|line| Some(line.strip_prefix(name)?.strip_prefix(' ')?.to_string()))
    }

    #[test]
    fn nothing_is_rendered_before_the_launcher_reports() {
        let metrics = OpenFileMetrics::default();
        assert_eq!(
            sample(&rendered(&metrics), "ferromq_open_files_raise_failed"),
            None
        );
        let entries = metrics.runtime_entries();
        assert!(
            entries.iter().all(|(_, value)| value.is_empty()),
            "{entries:?}"
        );
    }

    #[test]
    fn a_failed_raise_renders_gauge_one_and_its_error_in_the_runtime_info() {
        let metrics = OpenFileMetrics::default();
        metrics.set(OpenFileStatus {
            soft: Some(1_024),
            hard: Some(4_096),
            raise_error: Some("setrlimit(RLIMIT_NOFILE) from 1024 to 4096: EPERM".into()),
        });
        let text = rendered(&metrics);
        assert_eq!(
            sample(&text, "ferromq_open_files_raise_failed").as_deref(),
            Some("1")
        );
        assert_eq!(
            sample(&text, "ferromq_open_files_soft_limit").as_deref(),
            Some("1024")
        );
        assert_eq!(
            sample(&text, "ferromq_open_files_hard_limit").as_deref(),
            Some("4096")
        );
        assert_eq!(
            metrics.runtime_entries(),
            [
                ("openFilesSoftLimit", "1024".to_string()),
                ("openFilesHardLimit", "4096".to_string()),
                (
                    "openFilesRaiseError",
                    "setrlimit(RLIMIT_NOFILE) from 1024 to 4096: EPERM".to_string()
                ),
            ]
        );
    }

    #[test]
    fn a_raised_limit_renders_gauge_zero_and_unlimited_as_minus_one() {
        let metrics = OpenFileMetrics::default();
        metrics.set(OpenFileStatus {
            soft: Some(1 << 20),
            hard: Some(u64::MAX),
            raise_error: None,
        });
        let text = rendered(&metrics);
        assert_eq!(
            sample(&text, "ferromq_open_files_raise_failed").as_deref(),
            Some("0")
        );
        assert_eq!(
            sample(&text, "ferromq_open_files_soft_limit").as_deref(),
            Some("1048576")
        );
        assert_eq!(
            sample(&text, "ferromq_open_files_hard_limit").as_deref(),
            Some("-1")
        );
        let entries = metrics.runtime_entries();
        assert_eq!(entries[1], ("openFilesHardLimit", "unlimited".to_string()));
        assert_eq!(entries[2], ("openFilesRaiseError", String::new()));
    }

    #[test]
    fn unreadable_limits_leave_their_gauges_out_but_report_the_failure() {
        let metrics = OpenFileMetrics::default();
        metrics.set(OpenFileStatus {
            soft: None,
            hard: None,
            raise_error: Some("getrlimit(RLIMIT_NOFILE): EFAULT".into()),
        });
        let text = rendered(&metrics);
        assert_eq!(sample(&text, "ferromq_open_files_soft_limit"), None);
        assert_eq!(sample(&text, "ferromq_open_files_hard_limit"), None);
        assert_eq!(
            sample(&text, "ferromq_open_files_raise_failed").as_deref(),
            Some("1")
        );
    }
}
