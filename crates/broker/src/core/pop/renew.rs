//! Automatic renewal (gRPC `auto_renew`, what RocketMQ's proxy does for push consumers): the
//! deliveries of a receive that asked for it keep their handle and get a new deadline shortly
//! before the old one, for as long as the receiving client is alive (the adapter says, through
//! [`Pop::set_liveness`]) and at most [`RENEW_FOR_MAX`]; an ack, a change of invisibility or a
//! forward to the dead-letter queue ends it.
//!
//! Each renewal is a `Renew` record whose new handle is the old one (the delivery is the same;
//! the client's handle stays valid), written under the slot's claim like any other change
//! (table invariant 4), so a rebuilt table holds the extended deadline.
//!
//! Bounded: at most [`RENEWALS_MAX`] registered deliveries (more are not renewed, counted), at
//! most [`RENEW_BATCH_MAX`] renewals per tick.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::receive::Delivery;
use super::record::{PopOp, PopRecord};
use super::settle::write_records;
use super::table::Key;
use super::{now_ms, with_loaded, Pop};
use crate::context::BrokerContext;

/// Most deliveries registered for renewal.
pub const RENEWALS_MAX: usize = 100_000;
/// Renewals written per tick.
pub const RENEW_BATCH_MAX: usize = 1_024;
/// How often renewals are looked for.
pub const RENEW_TICK: Duration = Duration::from_secs(1);
/// Longest a delivery is kept invisible by renewals (RocketMQ's proxy: 3 h).
pub const RENEW_FOR_MAX: Duration = Duration::from_secs(3 * 3600);

/// Whether a client (by id) is alive, as the adapter that knows it says.
pub type Liveness = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// One delivery being renewed.
#[derive(Debug, Clone)]
pub struct Renewal {
    client_id: String,
    handle: u64,
    generation: u64,
    invisible_ms: i64,
    until_ms: i64,
}

/// The registered deliveries.
#[derive(Default)]
pub struct Renewals {
    entries: Mutex<HashMap<(Key, u64), Renewal>>,
    liveness: Mutex<Option<Liveness>>,
}

impl std::fmt::Debug for Renewals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Renewals")
            .field("entries", &self.len())
            .finish_non_exhaustive()
    }
}

impl Renewals {
    /// Registered deliveries now.
    pub fn len(&self) -> usize {
        self.entries.lock().expect("renewals lock").len()
    }

    /// Whether none is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Ends the renewal of `offset` of `key` (the client settled or took over the delivery).
    pub fn forget(&self, key: &Key, offset: u64) {
        self.entries
            .lock()
            .expect("renewals lock")
            .remove(&(key.clone(), offset));
    }
}

impl Pop {
    /// Sets how the broker learns whether a client is alive (the gRPC adapter's client table).
    pub fn set_liveness(&self, liveness: Liveness) {
        *self.renewals.liveness.lock().expect("renewals lock") = Some(liveness);
    }
}

/// Registers `deliveries` of `group`, received by `client_id` with `invisible`, for renewal.
pub(super) fn register(
    pop: &Pop,
    client_id: &str,
    group: &str,
    deliveries: &[Delivery],
    invisible: Duration,
) {
    let mut entries = pop.renewals.entries.lock().expect("renewals lock");
    let until_ms = now_ms().saturating_add(RENEW_FOR_MAX.as_millis() as i64);
    for delivery in deliveries {
        if entries.len() >= RENEWALS_MAX {
            pop.renewals_refused.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let key = Key {
            group: group.to_string(),
            topic: delivery.handle.topic.clone(),
            queue_id: delivery.queue_id,
        };
        entries.insert(
            (key, delivery.handle.offset),
            Renewal {
                client_id: client_id.to_string(),
                handle: delivery.handle.handle,
                generation: delivery.handle.generation,
                invisible_ms: invisible.as_millis() as i64,
                until_ms,
            },
        );
    }
}

/// Renews due deliveries until the broker stops (masters only).
pub async fn run_renewals(ctx: Arc<BrokerContext>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(RENEW_TICK);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        if !ctx.replication.role().is_master() || ctx.pop.renewals.is_empty() {
            continue;
        }
        renew_due(&ctx).await;
    }
}

/// What a tick does with one registered delivery.
enum Step {
    Keep,
    Drop,
    Renew,
}

/// One tick: drops registrations that ended, renews those whose deadline is near.
pub async fn renew_due(ctx: &BrokerContext) {
    let now = now_ms();
    let liveness = ctx
        .pop
        .renewals
        .liveness
        .lock()
        .expect("renewals lock")
        .clone();
    let registered: Vec<((Key, u64), Renewal)> = ctx
        .pop
        .renewals
        .entries
        .lock()
        .expect("renewals lock")
        .iter()
        .map(|(k, r)| (k.clone(), r.clone()))
        .collect();
    let mut due = Vec::new();
    for ((key, offset), renewal) in registered {
        let alive = liveness
            .as_ref()
            .is_some_and(|alive| alive(&renewal.client_id));
        let mut step = Step::Drop;
        with_loaded(ctx, |t| {
            let Some(slot) = t.get_mut(&key).and_then(|s| s.slots.get(&offset).copied()) else {
                return;
            };
            if slot.handle != renewal.handle || !alive || now >= renewal.until_ms {
                return;
            }
            let ahead = (renewal.invisible_ms / 3).max(2 * RENEW_TICK.as_millis() as i64);
            step = if slot.deadline_ms - now <= ahead && !slot.busy {
                Step::Renew
            } else {
                Step::Keep
            };
        });
        match step {
            Step::Keep => {}
            Step::Drop => ctx.pop.renewals.forget(&key, offset),
            Step::Renew if due.len() < RENEW_BATCH_MAX => due.push((key, offset, renewal)),
            Step::Renew => {}
        }
    }
    for (key, offset, renewal) in due {
        renew_one(ctx, &key, offset, &renewal, now).await;
    }
}

async fn renew_one(ctx: &BrokerContext, key: &Key, offset: u64, renewal: &Renewal, now: i64) {
    let mut claimed = false;
    with_loaded(ctx, |t| {
        claimed = t.claim(key, offset, renewal.handle).is_ok()
    });
    if !claimed {
        return;
    }
    let deadline_ms = now.saturating_add(renewal.invisible_ms);
    let record = PopRecord {
        group: key.group.clone(),
        topic: key.topic.clone(),
        queue_id: key.queue_id,
        generation: renewal.generation,
        op: PopOp::Renew {
            offset,
            handle: renewal.handle,
            new_handle: renewal.handle,
            deadline_ms,
        },
    };
    let guard = super::Undo::new(|| with_loaded(ctx, |t| t.release(key, offset, renewal.handle)));
    match write_records(ctx, std::slice::from_ref(&record)).await {
        Ok(()) => {
            with_loaded(ctx, |t| {
                t.renewed(key, offset, renewal.handle, renewal.handle, deadline_ms)
            });
            ctx.pop.renewed.fetch_add(1, Ordering::Relaxed);
            guard.disarm();
        }
        Err(error) => {
            tracing::warn!(group = %key.group, topic = %key.topic, queue_id = key.queue_id, offset,
                %error, "automatic renewal failed; retrying on the next tick");
        }
    }
}
