//! Timer messages (RocketMQ 5's arbitrary delivery time): a message whose properties name a
//! delivery time is stored in [`TIMER_TOPIC`] queue 0 with its real topic and queue, and moved
//! there once due.
//!
//! - [`due_ms`]: the delivery time a send asks for: `TIMER_DELIVER_MS` or `__STARTDELIVERTIME`
//!   (ms since the Unix epoch), `TIMER_DELAY_SEC` or `TIMER_DELAY_MS` (from now). A time not in
//!   the future is delivered at once (a normal send); one further than `timerMaxDelaySec` is
//!   refused.
//! - [`schedule`]: stores a timer message (its target checked first, as for delay levels).
//! - [`fire`]: the task that moves due messages, and [`recall`]: cancelling one before it is due
//!   (gRPC RecallMessage).
//!
//! Invariants:
//! 1. Everything is log records (I1): the timer record, and an op record in
//!    [`TIMER_OP_TOPIC`] for each settled one (fired, recalled, dead-lettered). A firing appends
//!    the real message and its op record in one append, so they are acknowledged together; a
//!    restarted or promoted broker rebuilds the table from the log (from the watermarks kept
//!    as offsets of [`TIMER_GROUP`]) and fires every pending message once, never a settled one.
//! 2. A send is acknowledged only after its timer record is (I2); its entry is in the table
//!    from the append on (so no watermark passes it) and removed again if the record is not
//!    acknowledged.
//! 3. Bounded: at most `timerTrackedMax` pending messages (a send past it is refused busy,
//!    counted), [`FIRE_BATCH_MAX`] fired per tick.
//! 4. A master's table belongs to its term; a slave fires nothing.

pub mod fire;
pub mod schedule;
pub mod table;

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::Duration;

use ferromq_protocol::Properties;
use table::TimerTable;

use super::error::{Refusal, RefusalKind, ViewError};
use super::system_queue::QueueReadError;
use crate::context::BrokerContext;

/// The topic holding timer messages until they are due (queue 0).
pub const TIMER_TOPIC: &str = "RMQ_SYS_FERROMQ_TIMER";
/// The topic of op records settling timer messages (queue 0).
pub const TIMER_OP_TOPIC: &str = "RMQ_SYS_FERROMQ_TIMER_OP";
/// The internal group whose offsets on the two topics are where a rebuild starts.
pub const TIMER_GROUP: &str = "CID_RMQ_SYS_FERROMQ_TIMER";
/// Absolute delivery time, ms (RocketMQ 5).
pub const PROPERTY_TIMER_DELIVER_MS: &str = "TIMER_DELIVER_MS";
/// Delay from the send, seconds (RocketMQ 5).
pub const PROPERTY_TIMER_DELAY_SEC: &str = "TIMER_DELAY_SEC";
/// Delay from the send, ms (RocketMQ 5).
pub const PROPERTY_TIMER_DELAY_MS: &str = "TIMER_DELAY_MS";
/// Absolute delivery time, ms (RocketMQ 4.x clients of timed delivery).
pub const PROPERTY_START_DELIVER_TIME: &str = "__STARTDELIVERTIME";
/// Property of a stored timer message: its absolute due time, ms.
pub const PROPERTY_TIMER_DUE: &str = "FERROMQ_TIMER_DUE";
/// How often due messages are looked for.
pub const FIRE_TICK: Duration = Duration::from_millis(100);
/// Messages fired per tick.
pub const FIRE_BATCH_MAX: usize = 256;
/// Records between two commits of the watermarks.
const WATERMARK_EVERY: u64 = 256;

/// The timer settings (`timerMaxDelaySec`, `timerTrackedMax`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerSettings {
    /// Longest delay a send may ask for.
    pub max_delay_ms: i64,
    /// Most pending timer messages.
    pub tracked_max: usize,
}

/// Why the timer table could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TimerError {
    /// The log could not be read for a rebuild.
    #[error("rebuilding the timer table: {0}")]
    Load(#[from] QueueReadError),
    /// The watermarks could not be read.
    #[error(transparent)]
    View(#[from] ViewError),
    /// The master term changed during the rebuild.
    #[error("the broker's master term changed while the timer table was rebuilt")]
    TermChanged,
}

#[derive(Debug)]
struct Loaded {
    epoch: u64,
    table: TimerTable,
}

/// The timer state of a broker.
#[derive(Debug)]
pub struct Timers {
    /// Settings.
    pub settings: TimerSettings,
    loaded: Mutex<Option<Loaded>>,
    loading: tokio::sync::Mutex<()>,
    ops_since_watermark: AtomicU64,
    /// Timer messages moved to their topic.
    pub fired: AtomicU64,
    /// Timer messages recalled before they were due.
    pub recalled: AtomicU64,
    /// Timer sends refused because `timerTrackedMax` messages are pending.
    pub refused_full: AtomicU64,
}

impl Timers {
    /// No table yet: the first use on a master rebuilds it from the log.
    pub fn new(settings: TimerSettings) -> Timers {
        Timers {
            settings,
            loaded: Mutex::new(None),
            loading: tokio::sync::Mutex::new(()),
            ops_since_watermark: AtomicU64::new(0),
            fired: AtomicU64::new(0),
            recalled: AtomicU64::new(0),
            refused_full: AtomicU64::new(0),
        }
    }

    fn with_table<R>(&self, epoch: u64, f: impl FnOnce(&mut TimerTable) -> R) -> Option<R> {
        let mut loaded = self.loaded.lock().expect("timer lock");
        match loaded.as_mut() {
            Some(l) if l.epoch == epoch => Some(f(&mut l.table)),
            _ => None,
        }
    }

    /// Pending timer messages of the loaded table (0 when none is loaded).
    pub fn pending(&self) -> usize {
        self.loaded
            .lock()
            .expect("timer lock")
            .as_ref()
            .map_or(0, |l| l.table.len())
    }
}

/// Runs `f` on the table of the current master term, rebuilding it from the log first.
///
/// # Errors
/// The rebuild's error.
pub async fn with_table<R>(
    ctx: &BrokerContext,
    f: impl FnOnce(&mut TimerTable) -> R,
) -> Result<R, TimerError> {
    let timers = &ctx.timers;
    let epoch = ctx.replication.epoch();
    let mut f = Some(f);
    if let Some(r) = timers.with_table(epoch, |t| (f.take().expect("called once"))(t)) {
        return Ok(r);
    }
    let _turn = timers.loading.lock().await;
    if timers.with_table(epoch, |_| ()).is_none() {
        let table = fire::rebuild(ctx).await?;
        *timers.loaded.lock().expect("timer lock") = Some(Loaded { epoch, table });
    }
    timers
        .with_table(epoch, |t| (f.take().expect("called once"))(t))
        .ok_or(TimerError::TermChanged)
}

/// Runs `f` on the loaded table of the current term, if any.
pub(crate) fn with_loaded(ctx: &BrokerContext, f: impl FnOnce(&mut TimerTable)) {
    let _ = ctx.timers.with_table(ctx.replication.epoch(), f);
}

/// A message's timer properties, each as [`Properties::get_str`] finds it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimerProperties<'a> {
    /// `TIMER_DELIVER_MS`: the delivery time, ms since the epoch.
    pub deliver_ms: Option<&'a str>,
    /// `__STARTDELIVERTIME`: the same, under the name older clients use.
    pub start_deliver_time: Option<&'a str>,
    /// `TIMER_DELAY_SEC`: a delay from now, seconds.
    pub delay_sec: Option<&'a str>,
    /// `TIMER_DELAY_MS`: a delay from now, ms.
    pub delay_ms: Option<&'a str>,
}

impl<'a> TimerProperties<'a> {
    /// Their names, in the order [`TimerProperties::from_values`] takes the values.
    pub const NAMES: [&'static str; 4] = [
        PROPERTY_TIMER_DELIVER_MS,
        PROPERTY_START_DELIVER_TIME,
        PROPERTY_TIMER_DELAY_SEC,
        PROPERTY_TIMER_DELAY_MS,
    ];

    /// Reads them from `properties` in one scan.
    pub fn read(properties: &'a [u8]) -> TimerProperties<'a> {
        TimerProperties::from_values(Properties(properties).get_strs(Self::NAMES))
    }

    /// From the values of [`TimerProperties::NAMES`], found by the caller's own scan.
    pub fn from_values(values: [Option<&'a str>; 4]) -> TimerProperties<'a> {
        let [deliver_ms, start_deliver_time, delay_sec, delay_ms] = values;
        TimerProperties {
            deliver_ms,
            start_deliver_time,
            delay_sec,
            delay_ms,
        }
    }

    /// No timer property at all: a normal message, whatever the clock says.
    pub fn is_none(&self) -> bool {
        *self == TimerProperties::default()
    }
}

/// The delivery time `timer` asks for, if any: `Ok(None)` for a normal message (no timer
/// property, or a time not after `now_ms`). The first property present decides, in the
/// order of [`TimerProperties::NAMES`].
///
/// # Errors
/// A timer property that is not a number, or a time further than `max_delay_ms` from now.
pub fn due_ms(
    timer: TimerProperties<'_>,
    now_ms: i64,
    max_delay_ms: i64,
) -> Result<Option<i64>, Refusal> {
    let number = |name: &str, value: Option<&str>| -> Result<Option<i64>, Refusal> {
        value
            .map(|v| {
                v.trim().parse::<i64>().map_err(|_| {
                    Refusal::new(
                        RefusalKind::InvalidMessage,
                        format!("timer property {name} is not a number: {:?}", cut(v)),
                    )
                })
            })
            .transpose()
    };
    let due = if let Some(at) = number(PROPERTY_TIMER_DELIVER_MS, timer.deliver_ms)? {
        at
    } else if let Some(at) = number(PROPERTY_START_DELIVER_TIME, timer.start_deliver_time)? {
        at
    } else if let Some(sec) = number(PROPERTY_TIMER_DELAY_SEC, timer.delay_sec)? {
        now_ms.saturating_add(sec.saturating_mul(1_000))
    } else if let Some(ms) = number(PROPERTY_TIMER_DELAY_MS, timer.delay_ms)? {
        now_ms.saturating_add(ms)
    } else {
        return Ok(None);
    };
    if due <= now_ms {
        return Ok(None);
    }
    if due - now_ms > max_delay_ms {
        return Err(Refusal::new(
            RefusalKind::InvalidMessage,
            format!(
                "timer message due in {} ms; timerMaxDelaySec allows at most {} ms",
                due - now_ms,
                max_delay_ms
            ),
        ));
    }
    Ok(Some(due))
}

fn cut(text: &str) -> String {
    text.chars().take(32).collect()
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> Vec<u8> {
        Properties::encode(pairs.iter().copied())
    }

    #[test]
    fn each_timer_property_names_a_due_time_and_bounds_hold() {
        let now = 1_000_000;
        let max = 10_000;
        assert_eq!(
            due_ms(TimerProperties::read(&props(&[])), now, max).unwrap(),
            None
        );
        let at = props(&[(PROPERTY_TIMER_DELIVER_MS, "1005000")]);
        assert_eq!(
            due_ms(TimerProperties::read(&at), now, max).unwrap(),
            Some(1_005_000)
        );
        let start = props(&[(PROPERTY_START_DELIVER_TIME, "1002000")]);
        assert_eq!(
            due_ms(TimerProperties::read(&start), now, max).unwrap(),
            Some(1_002_000)
        );
        let sec = props(&[(PROPERTY_TIMER_DELAY_SEC, "3")]);
        assert_eq!(
            due_ms(TimerProperties::read(&sec), now, max).unwrap(),
            Some(1_003_000)
        );
        let ms = props(&[(PROPERTY_TIMER_DELAY_MS, "1500")]);
        assert_eq!(
            due_ms(TimerProperties::read(&ms), now, max).unwrap(),
            Some(1_001_500)
        );
        let past = props(&[(PROPERTY_TIMER_DELIVER_MS, "999999")]);
        assert_eq!(
            due_ms(TimerProperties::read(&past), now, max).unwrap(),
            None,
            "past: deliver at once"
        );
        let far = props(&[(PROPERTY_TIMER_DELAY_SEC, "11")]);
        assert!(due_ms(TimerProperties::read(&far), now, max).is_err());
        let bad = props(&[(PROPERTY_TIMER_DELAY_SEC, "soon")]);
        assert!(due_ms(TimerProperties::read(&bad), now, max).is_err());
        let huge = props(&[(PROPERTY_TIMER_DELAY_SEC, "9223372036854775807")]);
        assert!(
            due_ms(TimerProperties::read(&huge), now, max).is_err(),
            "saturates, then refused"
        );
    }
}
