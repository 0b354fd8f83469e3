//! Recent rates for GET_BROKER_RUNTIME_INFO (`brokerStatus`): a sampler records the put and
//! get counters and the flush histogram once a second, and [`runtime_info`] turns the samples
//! into RocketMQ's runtime keys.
//!
//! Keys kept from RocketMQ (`BrokerController`/`AdminBrokerProcessor.prepareRuntimeInfo`,
//! `DefaultMessageStore.getRuntimeInfo`, `StoreStatsService`): `brokerVersionDesc`,
//! `bootTimestamp`, `runtime`, `commitLogMinOffset`, `commitLogMaxOffset`,
//! `dispatchBehindBytes`, `putTps` and `getTransferredTps` (three rates, over 10 s, 1 min and
//! 10 min, space separated), `putMessageTimesTotal`, `msgPutTotalTodayNow`,
//! `msgPutTotalTodayMorning`, `msgPutTotalYesterdayMorning` and the `msgGet...` trio (counters
//! since startup and their values at the last two midnights, UTC). ferromq's own keys:
//! `flushLatencyP50Micros`, `flushLatencyP99Micros` (bucket upper bounds) and
//! `flushLatencyMaxMicros` over the last minute, `flushCountLastMinute`, `flushCountTotal`,
//! `clientConnections`, `commitsRejectedTotal`, and the open-file keys of
//! `super::open_files` (`openFilesSoftLimit`, `openFilesHardLimit`, `openFilesRaiseError`).
//!
//! Bound: the sampler keeps [`SAMPLES_MAX`] samples (10 minutes), dropping the oldest.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ferromq_store::flush_latency::FlushLatencySnapshot;
use tokio::sync::watch;

use crate::context::BrokerContext;

/// Period of the sampler.
const SAMPLE_PERIOD: Duration = Duration::from_secs(1);
/// Samples kept: ten minutes and one.
pub const SAMPLES_MAX: usize = 601;
/// The window of the flush latency keys.
const FLUSH_WINDOW: Duration = Duration::from_secs(60);
/// The windows of the TPS keys, as RocketMQ's `putTps`.
const TPS_WINDOWS: [Duration; 3] = [
    Duration::from_secs(10),
    Duration::from_secs(60),
    Duration::from_secs(600),
];
const DAY_MS: u64 = 86_400_000;

#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    put: u64,
    get: u64,
    flush: FlushLatencySnapshot,
    /// Longest fsync in the second before `at`, µs.
    flush_max_micros: u64,
}

#[derive(Debug, Default, Clone, Copy)]
struct Daily {
    /// Days since the epoch of the last sample (UTC).
    day: u64,
    put_today_morning: u64,
    put_yesterday_morning: u64,
    get_today_morning: u64,
    get_yesterday_morning: u64,
}

/// The samples of a running broker.
#[derive(Debug)]
pub struct BrokerStats {
    boot: Instant,
    boot_ms: u64,
    samples: Mutex<(VecDeque<Sample>, Daily)>,
}

impl Default for BrokerStats {
    fn default() -> Self {
        BrokerStats::new()
    }
}

impl BrokerStats {
    /// Starts the clock: the first sample is all zeros, now.
    pub fn new() -> BrokerStats {
        let now = Instant::now();
        let boot_ms = epoch_ms();
        let first = Sample {
            at: now,
            put: 0,
            get: 0,
            flush: FlushLatencySnapshot::default(),
            flush_max_micros: 0,
        };
        let daily = Daily {
            day: boot_ms / DAY_MS,
            ..Daily::default()
        };
        BrokerStats {
            boot: now,
            boot_ms,
            samples: Mutex::new((VecDeque::from([first]), daily)),
        }
    }

    /// Takes one sample of `ctx` now.
    pub fn sample(&self, ctx: &BrokerContext) {
        let sample = Sample {
            at: Instant::now(),
            put: ctx.counters.messages_put.load(Ordering::Relaxed),
            get: ctx.counters.messages_pulled.load(Ordering::Relaxed),
            flush: ctx.store.flush_latency().snapshot(),
            flush_max_micros: ctx.store.flush_latency().take_max_micros(),
        };
        let day = epoch_ms() / DAY_MS;
        let mut guard = self.samples.lock().expect("stats lock");
        let (samples, daily) = &mut *guard;
        if day != daily.day {
            // Midnight passed: today's morning becomes yesterday's.
            daily.put_yesterday_morning = daily.put_today_morning;
            daily.get_yesterday_morning = daily.get_today_morning;
            daily.put_today_morning = sample.put;
            daily.get_today_morning = sample.get;
            daily.day = day;
        }
        if samples.len() >= SAMPLES_MAX {
            samples.pop_front();
        }
        samples.push_back(sample);
    }

    /// The runtime table of GET_BROKER_RUNTIME_INFO (see the module docs for the keys).
    pub fn runtime_info(&self, ctx: &BrokerContext) -> BTreeMap<String, String> {
        let now = Instant::now();
        let put = ctx.counters.messages_put.load(Ordering::Relaxed);
        let get = ctx.counters.messages_pulled.load(Ordering::Relaxed);
        let flush_now = ctx.store.flush_latency().snapshot();
        let guard = self.samples.lock().expect("stats lock");
        let (samples, daily) = &*guard;
        let rates = |value: fn(&Sample) -> u64, current: u64| -> String {
            TPS_WINDOWS
                .iter()
                .map(|window| {
                    let base = sample_before(samples, now, *window);
                    let seconds = now.duration_since(base.at).as_secs_f64();
                    let delta = current.saturating_sub(value(base)) as f64;
                    format!("{:.2}", if seconds > 0.0 { delta / seconds } else { 0.0 })
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        let flush_base = sample_before(samples, now, FLUSH_WINDOW);
        let flush_window = flush_now.since(&flush_base.flush);
        let flush_max = samples
            .iter()
            .filter(|s| now.duration_since(s.at) <= FLUSH_WINDOW)
            .map(|s| s.flush_max_micros)
            .max()
            .unwrap_or(0);
        let quantile = |q: f64| match flush_window.quantile_upper_micros(q) {
            None => 0,
            Some(u64::MAX) => flush_max,
            Some(bound) => bound,
        };
        let stats = ctx.store.stats();
        let uptime = now.duration_since(self.boot).as_secs();
        let ha = ctx.replication.runtime();
        let (streamed, received) = ctx.replication.bytes_moved();
        let lease = ctx.replication.lease_remaining();
        let controller = ctx.controller.as_ref();
        let mut entries: Vec<(&str, String)> = vec![
            ("controllerMode", controller.is_some().to_string()),
            (
                "controllerLeader",
                controller
                    .and_then(|c| c.controller_leader())
                    .map(|a| a.to_string())
                    .unwrap_or_default(),
            ),
            (
                "leaseRemainingMs",
                lease.map(|l| l.as_millis().to_string()).unwrap_or_default(),
            ),
            (
                "controllerPromotions",
                controller
                    .map(|c| c.counters.promotions.load(Ordering::Relaxed).to_string())
                    .unwrap_or_default(),
            ),
            ("brokerRole", ha.role.as_str().to_string()),
            ("brokerId", ha.broker_id.to_string()),
            ("haWatermark", ha.watermark.to_string()),
            ("haInSyncMembers", ha.in_sync_members.to_string()),
            ("masterEpoch", ha.epoch.to_string()),
            ("epochEntries", ha.epoch_entries.to_string()),
            ("haBytesStreamed", streamed.to_string()),
            ("haBytesReceived", received.to_string()),
            (
                "haRefusal",
                ha.follower
                    .as_ref()
                    .and_then(|f| f.refusal.clone())
                    .unwrap_or_default(),
            ),
            (
                "brokerVersionDesc",
                format!("ferromq-{}", env!("CARGO_PKG_VERSION")),
            ),
            ("bootTimestamp", self.boot_ms.to_string()),
            ("runtime", describe_uptime(uptime)),
            ("commitLogMinOffset", stats.log_min_offset.to_string()),
            ("commitLogMaxOffset", stats.written_end.to_string()),
            (
                "dispatchBehindBytes",
                stats
                    .written_end
                    .saturating_sub(stats.dispatched_end)
                    .to_string(),
            ),
            ("putTps", rates(|s| s.put, put)),
            ("getTransferredTps", rates(|s| s.get, get)),
            ("putMessageTimesTotal", put.to_string()),
            ("msgPutTotalTodayNow", put.to_string()),
            (
                "msgPutTotalTodayMorning",
                daily.put_today_morning.to_string(),
            ),
            (
                "msgPutTotalYesterdayMorning",
                daily.put_yesterday_morning.to_string(),
            ),
            ("msgGetTotalTodayNow", get.to_string()),
            (
                "msgGetTotalTodayMorning",
                daily.get_today_morning.to_string(),
            ),
            (
                "msgGetTotalYesterdayMorning",
                daily.get_yesterday_morning.to_string(),
            ),
            ("flushLatencyP50Micros", quantile(0.5).to_string()),
            ("flushLatencyP99Micros", quantile(0.99).to_string()),
            ("flushLatencyMaxMicros", flush_max.to_string()),
            ("flushCountLastMinute", flush_window.count.to_string()),
            ("flushCountTotal", flush_now.count.to_string()),
            ("clientConnections", ctx.metrics.connections().to_string()),
            (
                "commitsRejectedTotal",
                ctx.counters
                    .commits_rejected
                    .load(Ordering::Relaxed)
                    .to_string(),
            ),
        ];
        let tx = &ctx.metrics.transactions;
        entries.extend([
            ("transactionHalfPending", tx.pending().to_string()),
            ("transactionChecksTotal", tx.checks().to_string()),
            (
                "transactionCommitsTotal",
                tx.decisions("commit").to_string(),
            ),
            (
                "transactionRollbacksTotal",
                tx.decisions("rollback").to_string(),
            ),
            ("transactionDiscardsTotal", tx.discards().to_string()),
        ]);
        entries.extend(ctx.metrics.open_files.runtime_entries());
        entries
            .into_iter()
            .map(|(key, value)| (key.to_string(), value))
            .collect()
    }
}

/// The newest sample at least `window` old, else the oldest one (the broker is younger than
/// the window). The deque is never empty: it starts with the boot sample and only drops the
/// oldest when full.
fn sample_before(samples: &VecDeque<Sample>, now: Instant, window: Duration) -> &Sample {
    samples
        .iter()
        .rev()
        .find(|s| now.duration_since(s.at) >= window)
        .or_else(|| samples.front())
        .expect("the sample deque is never empty")
}

/// RocketMQ's `runtime` format: `[ 0 days, 1 hours, 2 minutes, 3 seconds ]`.
fn describe_uptime(seconds: u64) -> String {
    format!(
        "[ {} days, {} hours, {} minutes, {} seconds ]",
        seconds / 86_400,
        seconds % 86_400 / 3_600,
        seconds % 3_600 / 60,
        seconds % 60
    )
}

fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Samples `ctx` every second until `stop` fires.
pub async fn run_sampler(ctx: Arc<BrokerContext>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(SAMPLE_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => ctx.stats.sample(&ctx),
            _ = stop.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uptime_reads_like_rocketmq() {
        assert_eq!(
            describe_uptime(90_061),
            "[ 1 days, 1 hours, 1 minutes, 1 seconds ]"
        );
    }

    #[test]
    fn the_base_sample_is_the_newest_old_enough_one() {
        let now = Instant::now();
        let at = |ago: u64| Sample {
            at: now - Duration::from_secs(ago),
            put: ago,
            get: 0,
            flush: FlushLatencySnapshot::default(),
            flush_max_micros: 0,
        };
        let samples: VecDeque<Sample> = [at(30), at(12), at(9), at(1)].into();
        assert_eq!(
            sample_before(&samples, now, Duration::from_secs(10)).put,
            12
        );
        assert_eq!(
            sample_before(&samples, now, Duration::from_secs(600)).put,
            30
        );
    }
}
