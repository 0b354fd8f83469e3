//! Topic and subscription-group configs travel with the log.
//!
//! A master appends its whole catalog — every topic config and subscription group — as one
//! record of the system topic [`CATALOG_TOPIC`] whenever it changes (an admin change awaits
//! its record's acknowledgement; automatic creations are published within
//! [`CATALOG_POLL`]), and once at start. A slave receives those records in the same byte
//! stream as messages and offsets, and replaces its catalog with the newest one its
//! dispatcher exposed. So a slave's catalog is always its master's as of the slave's
//! position in the log: it never serves a topic its master had deleted at that point, and
//! it has every topic its replicated messages belong to once the record reaches it — no
//! side channel, no timer of its own.
//!
//! The record body is the catalog as JSON, deflated. A catalog whose record would exceed
//! the largest message is refused (the admin change fails, and the publisher logs and counts
//! it) rather than silently not replicated.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferromq_protocol::remoting::body::topic::TopicConfig;
use ferromq_protocol::{DraftRecord, RecordView};
use ferromq_store::TagFilter;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::catalog::groups::SubscriptionGroupConfig;
use crate::context::BrokerContext;
use crate::core::error::WriteError;

pub use ferromq_protocol::names::CATALOG_TOPIC;

/// How often the publisher (master) and the follower (slave) look for a change.
pub const CATALOG_POLL: Duration = Duration::from_millis(100);

/// Largest inflated catalog a slave accepts from a record.
pub const CATALOG_INFLATED_MAX: u64 = 256 * 1024 * 1024;

/// The catalog as one record carries it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogSnapshot {
    /// Every topic config, by name.
    pub topics: BTreeMap<String, TopicConfig>,
    /// Every subscription group, by name.
    pub groups: Vec<SubscriptionGroupConfig>,
}

/// Why a catalog record could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The record could not be read from the store.
    #[error("cannot read the catalog record: {0}")]
    Read(#[from] ferromq_store::ReadError),
    /// The record's body is not a deflated catalog.
    #[error("catalog record at queue offset {offset} is malformed: {reason}")]
    Malformed {
        /// Its queue offset.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// The catalog could not be applied.
    #[error("cannot apply the master's catalog: {0}")]
    Apply(String),
}

/// The publisher's and follower's state.
#[derive(Debug, Default)]
pub struct CatalogLog {
    /// (topic version, group version) of the last catalog published (master).
    published: Mutex<Option<(i64, u64)>>,
    /// Held by [`publish`] from its check to its record's acknowledgement, so an admin
    /// change and the publisher loop racing on the same change append one record, not two.
    publishing: tokio::sync::Mutex<()>,
    /// Queue offset after the newest catalog record applied (slave).
    applied: AtomicU64,
    /// Catalog records that could not be published or applied.
    pub failures: AtomicU64,
    /// The last failure, while failing (logged once per distinct failure).
    last_failure: Mutex<Option<String>>,
}

impl CatalogLog {
    /// Counts a failure; logs it when it differs from the previous one.
    fn failed(&self, what: &str, error: &dyn std::fmt::Display) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        let text = error.to_string();
        let mut last = self.last_failure.lock().expect("catalog lock");
        if last.as_deref() != Some(text.as_str()) {
            tracing::error!(error = %text, "{what}; retrying every {CATALOG_POLL:?}");
            *last = Some(text);
        }
    }

    fn succeeded(&self) {
        if self
            .last_failure
            .lock()
            .expect("catalog lock")
            .take()
            .is_some()
        {
            tracing::info!("catalog replication resumed");
        }
    }
}

/// The catalog now.
fn snapshot(ctx: &BrokerContext) -> CatalogSnapshot {
    let mut groups = ctx.groups.all();
    groups.sort_by(|a, b| a.group_name.cmp(&b.group_name));
    CatalogSnapshot {
        topics: ctx.topics.snapshot().topic_config_table,
        groups,
    }
}

fn encode(snapshot: &CatalogSnapshot) -> Vec<u8> {
    let json = serde_json::to_vec(snapshot).unwrap_or_default();
    let mut encoder = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
    // Writing to a Vec cannot fail.
    let _ = encoder.write_all(&json);
    encoder.finish().unwrap_or_default()
}

fn decode(body: &[u8], offset: u64) -> Result<CatalogSnapshot, CatalogError> {
    let malformed = |reason: String| CatalogError::Malformed { offset, reason };
    let mut json = Vec::new();
    flate2::read::DeflateDecoder::new(body)
        .take(CATALOG_INFLATED_MAX + 1)
        .read_to_end(&mut json)
        .map_err(|e| malformed(e.to_string()))?;
    if json.len() as u64 > CATALOG_INFLATED_MAX {
        return Err(malformed(format!(
            "inflates past {CATALOG_INFLATED_MAX} bytes"
        )));
    }
    serde_json::from_slice(&json).map_err(|e| malformed(e.to_string()))
}

/// Whether the catalog as it is now has been published (master): tests wait for this before
/// they arm a store fault, so the publisher's own record does not meet the fault first.
pub fn is_published(ctx: &BrokerContext) -> bool {
    let versions = (ctx.topics.version(), ctx.groups.version());
    *ctx.catalog_log.published.lock().expect("catalog lock") == Some(versions)
}

/// Appends the catalog as a record (master) through the one acknowledgement path, unless
/// the catalog has not changed since the last one.
///
/// Invariant: one record per catalog version. Publishes are serialized (`publishing`), so a
/// caller that finds the catalog unpublished is the only one appending it; a caller that
/// waited finds it published and returns once that record is acknowledged.
///
/// # Errors
/// The record was not acknowledged (not master, not durable, too large, ...).
pub async fn publish(ctx: &BrokerContext) -> Result<(), WriteError> {
    let _one_at_a_time = ctx.catalog_log.publishing.lock().await;
    let versions = (ctx.topics.version(), ctx.groups.version());
    if is_published(ctx) {
        return Ok(());
    }
    let body = encode(&snapshot(ctx));
    let draft = DraftRecord {
        topic: CATALOG_TOPIC,
        queue_id: 0,
        flag: 0,
        sys_flag: 0,
        born_timestamp_ms: now_ms(),
        born_host: ctx.broker_addr,
        store_host: ctx.broker_addr,
        reconsume_times: 0,
        prepared_tx_offset: 0,
        body: &body,
        properties: &[],
    };
    crate::core::ack::put_messages(ctx, &[draft]).await?;
    *ctx.catalog_log.published.lock().expect("catalog lock") = Some(versions);
    Ok(())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Replaces this broker's catalog with the newest catalog record its dispatcher exposed
/// (slave); returns whether one was applied.
///
/// # Errors
/// [`CatalogError`]: the record is unreadable or malformed, or the catalog files could not
/// be written.
pub fn apply_newest(ctx: &BrokerContext) -> Result<bool, CatalogError> {
    let Some((_, max)) = ctx.store.queue_bounds(CATALOG_TOPIC, 0) else {
        return Ok(false);
    };
    if max == 0 || ctx.catalog_log.applied.load(Ordering::Acquire) >= max {
        return Ok(false);
    }
    let offset = max - 1;
    let read = ctx.store.get_messages(
        CATALOG_TOPIC,
        0,
        offset,
        1,
        usize::MAX,
        &TagFilter::default(),
    )?;
    let Some(message) = read.messages.first() else {
        return Ok(false);
    };
    let record = RecordView::parse(&message.bytes).map_err(|e| CatalogError::Malformed {
        offset,
        reason: e.to_string(),
    })?;
    let catalog = decode(record.body, offset)?;
    let topics = ctx
        .topics
        .replace_all(catalog.topics)
        .map_err(|e| CatalogError::Apply(e.to_string()))?;
    let groups = ctx
        .groups
        .replace_all(catalog.groups)
        .map_err(|e| CatalogError::Apply(e.to_string()))?;
    ctx.catalog_log.applied.store(max, Ordering::Release);
    if topics || groups {
        tracing::info!(
            queue_offset = offset,
            topics,
            groups,
            "catalog replaced by the master's"
        );
        ctx.register_now.notify_one();
    }
    Ok(true)
}

/// Publishes (master) or follows (slave) the catalog until `stop`.
pub async fn run(ctx: Arc<BrokerContext>, mut stop: watch::Receiver<bool>) {
    let log = &ctx.catalog_log;
    // A broker that becomes master (a promotion) first adopts the newest catalog record of
    // its log, so it never republishes a catalog older than its former master's last one.
    // In controller mode every broker starts as a slave; a classic master's catalog files
    // are its own.
    let mut was_master = ctx.controller.is_none() && ctx.replication.role().is_master();
    loop {
        let master = ctx.replication.role().is_master();
        if master && !was_master {
            if let Err(error) = apply_newest(&ctx) {
                log.failed("the newest catalog record not adopted on promotion", &error);
            }
        }
        was_master = master;
        if master {
            match publish(&ctx).await {
                Ok(()) => log.succeeded(),
                Err(error) => log.failed("catalog not published to the log", &error),
            }
        } else {
            match apply_newest(&ctx) {
                Ok(_) => log.succeeded(),
                Err(error) => log.failed("the master's catalog not applied", &error),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(CATALOG_POLL) => {}
            _ = ctx.topics.changed.notified() => {}
            _ = ctx.groups.changed.notified() => {}
            _ = stop.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_catalog_round_trips_through_its_record_body_and_bombs_are_refused() {
        let mut topics = BTreeMap::new();
        topics.insert("T".to_string(), TopicConfig::new("T"));
        let catalog = CatalogSnapshot {
            topics,
            groups: vec![SubscriptionGroupConfig {
                group_name: "G".into(),
                ..Default::default()
            }],
        };
        assert_eq!(decode(&encode(&catalog), 0).unwrap(), catalog);
        assert!(matches!(
            decode(b"not deflate", 3),
            Err(CatalogError::Malformed { offset: 3, .. })
        ));
    }
}
