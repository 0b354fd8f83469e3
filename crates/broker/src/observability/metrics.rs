//! The broker's metrics: counters the request processors bump (one call each), and gauges
//! computed at scrape time from the store and the registries, rendered in the Prometheus text
//! format (0.0.4) by `prometheus-client`.
//!
//! Counters (all `_total`):
//! - `ferromq_messages_in_total{topic}`, `ferromq_bytes_in_total{topic}`: messages stored by
//!   sends and the request body bytes that carried them.
//! - `ferromq_messages_out_total{topic}`, `ferromq_bytes_out_total{topic}`: messages returned
//!   by pulls and their record bytes.
//! - `ferromq_commits_accepted_total`: commits applied or already stored.
//! - `ferromq_commits_rejected_total{reason}`: `regression`, `stale_generation`, `past_max`,
//!   `other`, and `negative_ignored` (answered SUCCESS, never stored).
//! - `ferromq_offset_resets_total{cause}`: `admin` (INVOKE_BROKER_TO_RESET_OFFSET, clone),
//!   `offline_commit` (a backward commit of a group with no consumer online).
//! - `ferromq_offset_corrections_total{cause}`: `offset_outside_queue` (a correction record),
//!   `pull_out_of_range` (a consumer told PULL_OFFSET_MOVED).
//! - `ferromq_requests_refused_total{reason,request}`: requests refused for what they name
//!   (`processor::access`): `reason` is `reserved_topic`, `internal_group`, `invalid_name`,
//!   `schedule_target`, `transaction_target` (a half message's real topic or queue), `reserved_record`
//!   or `bad_commitlog_offset`; `consumer_not_online` / `consumer_no_answer` for a
//!   GET_CONSUMER_RUNNING_INFO the named client could not answer (`request="client"`);
//!   `request` the operation.
//! - `ferromq_scheduler_dead_letters_total`: delayed messages whose target was invalid when
//!   they fired, moved to `RMQ_SYS_FERROMQ_SCHEDULE_DLQ` (or dropped when even that failed).
//!
//! Computed at scrape time:
//! - `ferromq_consumer_lag{group,topic,queue}`: queue max offset - committed offset, for every
//!   stored offset of the offset view.
//! - `ferromq_flush_latency_seconds`: histogram of the store's CommitLog fsyncs.
//! - `ferromq_dispatch_behind_bytes`: CommitLog bytes written but not yet dispatched.
//! - `ferromq_commitlog_min_offset`, `ferromq_commitlog_max_offset`: CommitLog bounds, bytes.
//! - `ferromq_client_connections`: open remoting connections (a gauge kept by `connection`).
//! - `ferromq_connections_refused_total{reason="limit"}`: connections closed at accept because
//!   the connection limit was reached; `ferromq_connection_limit`: that limit.
//! - `ferromq_accept_errors_total{kind}`: failed accepts, `fd_exhausted` (EMFILE/ENFILE; each
//!   pauses the acceptor) or `other`.
//! - `ferromq_connections_closed_total{reason}`: connections closed by a limit, `idle`,
//!   `frame_timeout`, `frame_budget`.
//! - `ferromq_partial_frame_bytes`: memory held by incomplete frames, charged to the
//!   partial-frame budget (`ferromq_partial_frame_budget_bytes`).
//! - `ferromq_checkpoint_failures_total`: store checkpoints that failed (each is retried and
//!   none poisons the store; the latest is in the store's stats until one succeeds).
//! - `ferromq_store_undispatchable_records`: records the store quarantined because no
//!   ConsumeQueue can hold them (since the store opened).
//! - `ferromq_store_preallocation_failures_total`: CommitLog space preallocations that
//!   failed (the commits went on as plain appends, a little slower under SYNC_FLUSH).
//! - `ferromq_store_map_windows_populated_ahead_total` /
//!   `ferromq_store_map_windows_populated_inline_total`: windows of the committer's CommitLog
//!   map populated by the populating thread ahead of the commits, and by the committer itself.
//! - `ferromq_config_save_failures_total{file}`: failed saves of a config table (kept in
//!   memory and retried; see `groups`).
//! - `ferromq_quarantined_ranges`: CommitLog ranges quarantined (damaged, undispatchable).
//!
//! Transactional messages have their own counters, listed in `super::transactions`; how
//! pull replies carried their messages (zero copy or not), in `super::transfer`; the
//! process's open-file limits and whether raising them failed, in `super::open_files`.
//!
//! - `ferromq_requests_unsupported_total{request}`: requests answered
//!   REQUEST_CODE_NOT_SUPPORTED, labelled with RocketMQ's name of the code (`unknown` for a
//!   code RocketMQ does not define).
//!
//! - `ferromq_grpc_requests_unsupported_total{rpc}`: gRPC requests answered UNSUPPORTED
//!   (`grpc`), by RPC name; `ferromq_grpc_requests_limited_total{limit}`: gRPC requests refused
//!   by a client or Telemetry stream limit (`clients`, `telemetry`, `telemetry_per_client`).
//!
//! Also counted: `ferromq_damaged_reads_total`, pulls answered MESSAGE_DAMAGED;
//! `ferromq_requests_busy_total{reason}`, requests answered SYSTEM_BUSY by a work limit
//! (`held_pulls`, `held_pulls_per_connection`, `in_flight_per_connection`; see
//! `work_limits`); and the gauge `ferromq_held_pulls`, long-poll pulls held now.
//!
//! Every reset and correction also gets one log line naming group, topic, queue, old and new
//! offset and the cause ([`BrokerMetrics::offset_moved`]).

use ferromq_protocol::remoting::limits::LimitSnapshot;
use ferromq_store::flush_latency::{FlushLatencySnapshot, FLUSH_LATENCY_BOUNDS_MICROS};
use ferromq_store::offsets::{CommitRejection, OffsetKind, Verdict};
use ferromq_store::{GetResult, GetStatus, Stored};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::context::BrokerContext;

type TopicLabel = [(&'static str, String); 1];

/// One topic's message and byte counters, in and out (handles into the families: a counter
/// is shared, so incrementing a handle increments the family's series).
#[derive(Debug, Clone)]
struct TopicIo {
    messages_in: Counter,
    bytes_in: Counter,
    messages_out: Counter,
    bytes_out: Counter,
}
type StaticLabel = [(&'static str, &'static str); 1];
type RefusalLabel = [(&'static str, &'static str); 2];

/// Every `request` label value of `ferromq_requests_refused_total`.
pub const REFUSED_REQUESTS: &[&str] = &[
    "send",
    "send_back",
    "commit",
    "pull",
    "reset",
    "clone",
    "delete_topic",
    "update_topic",
    "delete_group",
    "update_group",
    "view_message",
    "schedule",
    "query_offset",
    "queue_info",
    "query_message",
    "client",
    "end_transaction",
    "admin",
    "connection",
];

/// How a commit ended, as the `reason` label of the rejected counter (or accepted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitCount {
    /// Applied, or the offset was already stored.
    Accepted,
    /// Below the stored offset within the generation (invariant 3).
    Regression,
    /// Made before a reset (an old generation, or a fenced connection).
    StaleGeneration,
    /// Beyond the queue's max offset.
    PastMax,
    /// Any other rejection.
    Other,
    /// A negative offset (ali-ons sends -1): answered SUCCESS, never stored.
    NegativeIgnored,
}

impl CommitCount {
    /// The count for a store verdict.
    pub fn of(verdict: &Verdict) -> CommitCount {
        match verdict {
            Verdict::Applied | Verdict::Unchanged => CommitCount::Accepted,
            Verdict::Rejected(CommitRejection::Regression { .. }) => CommitCount::Regression,
            Verdict::Rejected(CommitRejection::StaleGeneration { .. }) => {
                CommitCount::StaleGeneration
            }
            Verdict::Rejected(CommitRejection::PastMax { .. }) => CommitCount::PastMax,
            Verdict::Rejected(_) => CommitCount::Other,
        }
    }

    /// The count for a refused correction.
    pub fn of_correction(refusal: &crate::core::error::CorrectionRefusal) -> CommitCount {
        use crate::core::error::CorrectionRefusal;
        match refusal {
            CorrectionRefusal::PastMax { .. } => CommitCount::PastMax,
            CorrectionRefusal::Healthy { offset, stored, .. } if offset < stored => {
                CommitCount::Regression
            }
            _ => CommitCount::Other,
        }
    }

    fn reason(self) -> &'static str {
        match self {
            CommitCount::Accepted => "accepted",
            CommitCount::Regression => "regression",
            CommitCount::StaleGeneration => "stale_generation",
            CommitCount::PastMax => "past_max",
            CommitCount::Other => "other",
            CommitCount::NegativeIgnored => "negative_ignored",
        }
    }
}

/// A consumer offset (or position) moved by a reset or a correction, for the log line and
/// the counters.
#[derive(Debug, Clone, Copy)]
pub struct OffsetMove<'a> {
    /// Reset or correction (a commit is not a move).
    pub kind: OffsetKind,
    /// Short cause for the counter label, e.g. `admin`, `offline_commit`, `pull_out_of_range`.
    pub cause: &'static str,
    /// Consumer group.
    pub group: &'a str,
    /// Topic.
    pub topic: &'a str,
    /// Queue.
    pub queue_id: u32,
    /// Offset before (`None`: nothing stored).
    pub old: Option<u64>,
    /// Offset after.
    pub new: u64,
    /// Human explanation for the log line.
    pub detail: &'a str,
}

/// Counters and the gauges fed by the processors; scrape-time values come from the context.
#[derive(Debug)]
pub struct BrokerMetrics {
    registry: Registry,
    messages_in: Family<TopicLabel, Counter>,
    bytes_in: Family<TopicLabel, Counter>,
    messages_out: Family<TopicLabel, Counter>,
    bytes_out: Family<TopicLabel, Counter>,
    /// The four per-topic counters above, by topic: a send or pull finds them with one
    /// lookup by `&str` instead of building a label (a `String`) and looking up each family.
    /// Holds one entry per topic the families hold, so it is bounded as they are.
    topic_io: std::sync::RwLock<std::collections::HashMap<String, TopicIo>>,
    commits_accepted: Counter,
    commits_rejected: Family<StaticLabel, Counter>,
    resets: Family<StaticLabel, Counter>,
    corrections: Family<StaticLabel, Counter>,
    connections: Gauge,
    refusals: Family<RefusalLabel, Counter>,
    unsupported: Family<StaticLabel, Counter>,
    oneway_failures: Family<StaticLabel, Counter>,
    scheduler_dead_letters: Counter,
    damaged_reads: Counter,
    held_pulls: Gauge,
    busy: Family<StaticLabel, Counter>,
    grpc_unsupported: Family<StaticLabel, Counter>,
    grpc_limited: Family<StaticLabel, Counter>,
    /// Transactional messages (`super::transactions`).
    pub transactions: super::transactions::TransactionMetrics,
    /// How pull replies carried their messages (`super::transfer`).
    pub transfer: super::transfer::TransferMetrics,
    /// The open-file limits the launcher reported (`super::open_files`).
    pub open_files: super::open_files::OpenFileMetrics,
}

impl Default for BrokerMetrics {
    fn default() -> Self {
        BrokerMetrics::new()
    }
}

impl BrokerMetrics {
    /// Empty counters, registered under their names.
    pub fn new() -> BrokerMetrics {
        let metrics = BrokerMetrics {
            registry: Registry::default(),
            messages_in: Family::default(),
            bytes_in: Family::default(),
            messages_out: Family::default(),
            bytes_out: Family::default(),
            topic_io: Default::default(),
            commits_accepted: Counter::default(),
            commits_rejected: Family::default(),
            resets: Family::default(),
            corrections: Family::default(),
            connections: Gauge::default(),
            refusals: Family::default(),
            unsupported: Family::default(),
            oneway_failures: Family::default(),
            scheduler_dead_letters: Counter::default(),
            damaged_reads: Counter::default(),
            held_pulls: Gauge::default(),
            busy: Family::default(),
            grpc_unsupported: Family::default(),
            grpc_limited: Family::default(),
            transactions: Default::default(),
            transfer: Default::default(),
            open_files: Default::default(),
        };
        let mut registry = Registry::default();
        let families = [
            (
                "ferromq_messages_in",
                "Messages stored by sends",
                &metrics.messages_in,
            ),
            (
                "ferromq_bytes_in",
                "Message body bytes received by sends",
                &metrics.bytes_in,
            ),
            (
                "ferromq_messages_out",
                "Messages returned by pulls",
                &metrics.messages_out,
            ),
            (
                "ferromq_bytes_out",
                "Record bytes returned by pulls",
                &metrics.bytes_out,
            ),
        ];
        for (name, help, family) in families {
            registry.register(name, help, family.clone());
        }
        registry.register(
            "ferromq_commits_accepted",
            "Offset commits applied or already stored",
            metrics.commits_accepted.clone(),
        );
        registry.register(
            "ferromq_commits_rejected",
            "Offset commits rejected (or ignored), by reason",
            metrics.commits_rejected.clone(),
        );
        registry.register(
            "ferromq_offset_resets",
            "Queue offsets moved by resets, by cause",
            metrics.resets.clone(),
        );
        registry.register(
            "ferromq_offset_corrections",
            "Queue offsets or consumer positions moved by corrections, by cause",
            metrics.corrections.clone(),
        );
        registry.register(
            "ferromq_client_connections",
            "Open remoting connections",
            metrics.connections.clone(),
        );
        registry.register(
            "ferromq_requests_refused",
            "Requests refused for the topic, group or offset they name, by reason and request",
            metrics.refusals.clone(),
        );
        registry.register(
            "ferromq_requests_unsupported",
            "Requests answered REQUEST_CODE_NOT_SUPPORTED, by the request code's RocketMQ name",
            metrics.unsupported.clone(),
        );
        registry.register(
            "ferromq_oneway_requests_failed",
            "One-way requests that failed (their error reply has nowhere to go), by the request \
             code's RocketMQ name",
            metrics.oneway_failures.clone(),
        );
        registry.register(
            "ferromq_scheduler_dead_letters",
            "Delayed messages whose target was invalid when they fired",
            metrics.scheduler_dead_letters.clone(),
        );
        registry.register(
            "ferromq_damaged_reads",
            "Pulls answered MESSAGE_DAMAGED: the next record of the queue is quarantined",
            metrics.damaged_reads.clone(),
        );
        registry.register(
            "ferromq_held_pulls",
            "Long-poll pulls held now, waiting for a message",
            metrics.held_pulls.clone(),
        );
        registry.register(
            "ferromq_requests_busy",
            "Requests answered SYSTEM_BUSY because a work limit was reached, by reason",
            metrics.busy.clone(),
        );
        registry.register(
            "ferromq_grpc_requests_unsupported",
            "gRPC requests answered UNSUPPORTED, by RPC",
            metrics.grpc_unsupported.clone(),
        );
        registry.register(
            "ferromq_grpc_requests_limited",
            "gRPC requests refused by a client or stream limit, by limit",
            metrics.grpc_limited.clone(),
        );
        metrics.transactions.register(&mut registry);
        metrics.transfer.register(&mut registry);
        metrics.open_files.register(&mut registry);
        BrokerMetrics {
            registry,
            ..metrics
        }
    }

    /// A send stored `count` messages of `topic` from a request body of `bytes`.
    pub fn record_send(&self, topic: &str, count: usize, bytes: usize) {
        self.with_topic_io(topic, |io| {
            io.messages_in.inc_by(count as u64);
            io.bytes_in.inc_by(bytes as u64);
        });
    }

    /// Runs `f` on `topic`'s counters, registering them in the families on first use.
    fn with_topic_io(&self, topic: &str, f: impl FnOnce(&TopicIo)) {
        if let Some(io) = self
            .topic_io
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(topic)
        {
            return f(io);
        }
        let label = [("topic", topic.to_string())];
        let io = TopicIo {
            messages_in: self.messages_in.get_or_create(&label).clone(),
            bytes_in: self.bytes_in.get_or_create(&label).clone(),
            messages_out: self.messages_out.get_or_create(&label).clone(),
            bytes_out: self.bytes_out.get_or_create(&label).clone(),
        };
        f(&io);
        self.topic_io
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(topic.to_string())
            .or_insert(io);
    }

    /// A pull of `group` on `topic`/`queue_id` from `requested` ended with `result`: counts the
    /// messages it returns, and logs and counts a correction when the consumer is told to move
    /// (PULL_OFFSET_MOVED; the same statuses `pull::reply_for` maps to it).
    pub fn record_pull<M: Stored>(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
        requested: u64,
        result: &GetResult<M>,
    ) {
        let moved_to = match result.status {
            GetStatus::Found => {
                let count = result.messages.len() as u64;
                let bytes: usize = result.messages.iter().map(Stored::stored_len).sum();
                self.with_topic_io(topic, |io| {
                    io.messages_out.inc_by(count);
                    io.bytes_out.inc_by(bytes as u64);
                });
                return;
            }
            GetStatus::NoMessageInQueue | GetStatus::NoMatchedLogicQueue if requested > 0 => 0,
            GetStatus::OffsetTooSmall | GetStatus::OffsetOverflowBadly => result.next_begin_offset,
            _ => return,
        };
        let detail = format!(
            "pull position {requested} is outside the queue's range [{}, {}]",
            result.min_offset, result.max_offset
        );
        self.offset_moved(&OffsetMove {
            kind: OffsetKind::Correction,
            cause: "pull_out_of_range",
            group,
            topic,
            queue_id,
            old: Some(requested),
            new: moved_to,
            detail: &detail,
        });
    }

    /// Counts one commit outcome.
    pub fn commit(&self, count: CommitCount) {
        match count {
            CommitCount::Accepted => {
                self.commits_accepted.inc();
            }
            other => {
                self.commits_rejected
                    .get_or_create(&[("reason", other.reason())])
                    .inc();
            }
        }
    }

    /// Counts each entry's verdict of a commit.
    pub fn commit_verdicts(&self, verdicts: &[Verdict]) {
        for verdict in verdicts {
            self.commit(CommitCount::of(verdict));
        }
    }

    /// Counts each entry's verdict of a commit's outcome, and passes the outcome on.
    pub fn count_outcome<E>(
        &self,
        result: Result<ferromq_store::CommitOutcome, E>,
    ) -> Result<ferromq_store::CommitOutcome, E> {
        if let Ok(outcome) = &result {
            self.commit_verdicts(&outcome.verdicts);
        }
        result
    }

    /// Counts a reset or correction whose caller already logs it (with group, topic, queue,
    /// old and new offset and cause); see [`BrokerMetrics::offset_moved`] otherwise.
    pub fn count_offset_move(&self, kind: OffsetKind, cause: &'static str) {
        let family = match kind {
            OffsetKind::Correction => &self.corrections,
            _ => &self.resets,
        };
        family.get_or_create(&[("cause", cause)]).inc();
    }

    /// Logs and counts a reset or a correction. Every path that moves a consumer's offset (or
    /// tells a consumer to move its position) other than by its own commit calls this once per
    /// queue.
    pub fn offset_moved(&self, event: &OffsetMove<'_>) {
        let OffsetMove {
            kind,
            cause,
            group,
            topic,
            queue_id,
            old,
            new,
            detail,
        } = *event;
        self.count_offset_move(kind, cause);
        let verb = match kind {
            OffsetKind::Correction => "corrected",
            _ => "reset",
        };
        tracing::info!(%group, %topic, queue_id, old = ?old, new, kind = kind.as_str(), %cause,
            %detail, "consumer offset {verb}");
    }

    /// Counts a request refused for `reason` (see the module header); `request` names the
    /// operation (`send`, `commit`, `reset`, ...).
    pub fn refused(&self, reason: &'static str, request: &'static str) {
        self.refusals
            .get_or_create(&[("reason", reason), ("request", request)])
            .inc();
    }

    /// Requests refused so far for `reason`, over every request kind.
    pub fn refused_count(&self, reason: &'static str) -> u64 {
        REFUSED_REQUESTS
            .iter()
            .map(|request| {
                self.refusals
                    .get(&[("reason", reason), ("request", request)])
                    .map_or(0, |c| c.get())
            })
            .sum()
    }

    /// Counts a delayed message moved to the scheduler's dead-letter topic (or dropped).
    pub fn scheduler_dead_letter(&self) {
        self.scheduler_dead_letters.inc();
    }

    /// Delayed messages dead-lettered so far.
    pub fn scheduler_dead_letters(&self) -> u64 {
        self.scheduler_dead_letters.get()
    }

    /// A pull reached a damaged (quarantined) record.
    pub fn damaged_read(&self) {
        self.damaged_reads.inc();
    }

    /// A pull started being held (long polling).
    pub fn held_pull_started(&self) {
        self.held_pulls.inc();
    }

    /// A held pull ended: answered, timed out, or dropped with its connection.
    pub fn held_pull_ended(&self) {
        self.held_pulls.dec();
    }

    /// Pulls held now.
    pub fn held_pulls(&self) -> i64 {
        self.held_pulls.get()
    }

    /// Counts a request answered SYSTEM_BUSY for `reason`.
    pub fn busy(&self, reason: crate::core::work_limits::Busy) {
        self.busy.get_or_create(&[("reason", reason.label())]).inc();
    }

    /// Requests answered SYSTEM_BUSY so far for `reason`.
    pub fn busy_count(&self, reason: crate::core::work_limits::Busy) -> u64 {
        self.busy
            .get(&[("reason", reason.label())])
            .map_or(0, |c| c.get())
    }

    /// A request answered REQUEST_CODE_NOT_SUPPORTED. The label is RocketMQ's name of the
    /// code, or `unknown` for a code RocketMQ does not define, so clients cannot grow the
    /// label set without bound.
    pub fn unsupported(&self, code: i32) {
        let name = ferromq_protocol::remoting::request_code_name(code).unwrap_or("unknown");
        self.unsupported.get_or_create(&[("request", name)]).inc();
    }

    /// Requests answered REQUEST_CODE_NOT_SUPPORTED so far under `name` (a RocketMQ request
    /// code name, or `unknown`).
    pub fn unsupported_count(&self, name: &'static str) -> u64 {
        self.unsupported
            .get(&[("request", name)])
            .map_or(0, |c| c.get())
    }

    /// A one-way request that failed: the client asked for no reply, so this counter (and a
    /// rate-limited log line) is all that says so. Labelled like [`Self::unsupported`].
    pub fn oneway_failed(&self, code: i32) {
        let name = ferromq_protocol::remoting::request_code_name(code).unwrap_or("unknown");
        self.oneway_failures
            .get_or_create(&[("request", name)])
            .inc();
    }

    /// One-way requests that failed so far under `name` (a RocketMQ request code name, or
    /// `unknown`).
    pub fn oneway_failed_count(&self, name: &'static str) -> u64 {
        self.oneway_failures
            .get(&[("request", name)])
            .map_or(0, |c| c.get())
    }

    /// A gRPC request answered UNSUPPORTED; `rpc` is the RPC's name.
    pub fn grpc_unsupported(&self, rpc: &'static str) {
        self.grpc_unsupported.get_or_create(&[("rpc", rpc)]).inc();
    }

    /// gRPC requests answered UNSUPPORTED so far for `rpc`.
    pub fn grpc_unsupported_count(&self, rpc: &'static str) -> u64 {
        self.grpc_unsupported
            .get(&[("rpc", rpc)])
            .map_or(0, |c| c.get())
    }

    /// A gRPC request refused by the limit `limit` (`grpc::clients::Limit`).
    pub fn grpc_limited(&self, limit: &'static str) {
        self.grpc_limited.get_or_create(&[("limit", limit)]).inc();
    }

    /// A remoting connection opened.
    pub fn connection_opened(&self) {
        self.connections.inc();
    }

    /// A remoting connection closed.
    pub fn connection_closed(&self) {
        self.connections.dec();
    }

    /// Open remoting connections.
    pub fn connections(&self) -> i64 {
        self.connections.get()
    }

    /// The scrape: every counter, then the values computed now from `ctx`. The consumer-lag
    /// gauges come from the offset view once it has caught up (awaited, never blocking a
    /// worker); while it cannot, the scrape carries no lag rather than a stale one (the stall
    /// itself has its own gauges).
    pub async fn scrape(&self, ctx: &BrokerContext) -> String {
        let lags = match ctx.store.offset_view().await {
            Ok(view) => lags_of(ctx, &view),
            Err(error) => {
                tracing::debug!(%error, "consumer lag left out of the scrape");
                Vec::new()
            }
        };
        self.render_with(ctx, lags)
    }

    /// [`BrokerMetrics::scrape`] for a blocking caller (tests, the shutdown report).
    pub fn render(&self, ctx: &BrokerContext) -> String {
        let lags = blocking_lags(ctx);
        self.render_with(ctx, lags)
    }

    fn render_with(&self, ctx: &BrokerContext, lags: Vec<Lag>) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail; an encoder error would be a library bug, and the
        // scrape then carries what was written before it.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry);
        let mut live = Registry::default();
        live.register_collector(Box::new(ScrapeValues::of(ctx, lags)));
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &live);
        out
    }
}

/// One counter family computed at scrape time: name, help, label key, (label value, count)s.
type LabelledCounters = (
    &'static str,
    &'static str,
    &'static str,
    Vec<(&'static str, u64)>,
);

/// Values computed at scrape time.
#[derive(Debug)]
struct ScrapeValues {
    lags: Vec<Lag>,
    flush: FlushLatencySnapshot,
    dispatch_behind_bytes: u64,
    dispatch_stalled: u64,
    log_min_offset: u64,
    log_max_offset: u64,
    limits: LimitSnapshot,
    connection_limit: u64,
    partial_frame_bytes: u64,
    partial_frame_budget_bytes: u64,
    checkpoint_failures: u64,
    undispatchable_records: u64,
    group_save_failures: u64,
    quarantined_ranges: u64,
    replication: crate::replication::status::HaRuntime,
    /// Unlabelled counters: replication, controller, pop and timer (name, help, value).
    plain_counters: Vec<(&'static str, &'static str, u64)>,
    /// Controller mode: how long the master's lease still holds (0 without one).
    lease_remaining_ms: Option<u64>,
    /// The newest epoch of the broker's epoch file.
    master_epoch: u64,
}

/// One consumer-lag gauge: group, topic, queue, messages behind.
type Lag = (String, String, u32, u64);

/// Every group's stored offsets: (group, [(topic, queue, offset)]).
type GroupOffsets = Vec<(
    String,
    Vec<(String, u32, ferromq_store::offsets::StoredOffset)>,
)>;

/// The lag of every stored offset against its queue's max offset.
fn lags_from(ctx: &BrokerContext, offsets: GroupOffsets) -> Vec<Lag> {
    let mut lags = Vec::new();
    for (group, queues) in offsets {
        for (topic, queue_id, stored) in queues {
            let max = ctx
                .store
                .queue_bounds(&topic, queue_id)
                .map_or(0, |(_, max)| max);
            lags.push((
                group.clone(),
                topic,
                queue_id,
                max.saturating_sub(stored.offset),
            ));
        }
    }
    lags
}

/// The lags from a caught-up view.
fn lags_of(ctx: &BrokerContext, view: &ferromq_store::OffsetView<'_>) -> Vec<Lag> {
    let offsets = view
        .groups()
        .into_iter()
        .map(|group| {
            let queues = view.group_offsets(&group);
            (group, queues)
        })
        .collect();
    lags_from(ctx, offsets)
}

/// The lags for a blocking caller, through the store's blocking reads (bounded by the flush
/// timeout); none while the view cannot catch up.
fn blocking_lags(ctx: &BrokerContext) -> Vec<Lag> {
    let offsets: Result<GroupOffsets, _> = ctx.store.groups().and_then(|groups| {
        groups
            .into_iter()
            .map(|group| {
                ctx.store
                    .group_offsets(&group)
                    .map(|queues| (group, queues))
            })
            .collect()
    });
    offsets.map_or_else(|_| Vec::new(), |offsets| lags_from(ctx, offsets))
}

impl ScrapeValues {
    fn of(ctx: &BrokerContext, lags: Vec<Lag>) -> ScrapeValues {
        let stats = ctx.store.stats();
        ScrapeValues {
            lags,
            flush: ctx.store.flush_latency().snapshot(),
            dispatch_behind_bytes: stats.written_end.saturating_sub(stats.dispatched_end),
            dispatch_stalled: u64::from(stats.dispatch_failure.is_some()),
            log_min_offset: stats.log_min_offset,
            log_max_offset: stats.written_end,
            limits: ctx.connection_limits.counters().snapshot(),
            connection_limit: ctx.connection_limits.limit() as u64,
            partial_frame_bytes: ctx.connection_limits.partial_frame_bytes(),
            partial_frame_budget_bytes: ctx.connection_limits.settings().partial_frame_budget_bytes,
            checkpoint_failures: stats.checkpoint_failures,
            undispatchable_records: stats.undispatchable_records,
            group_save_failures: ctx.groups.save_failures(),
            quarantined_ranges: ctx.store.quarantined().total,
            replication: ctx.replication.runtime(),
            plain_counters: replication_counters(ctx)
                .into_iter()
                .chain(pop_and_timer_counters(ctx))
                .chain([
                    (
                        "ferromq_store_preallocation_failures",
                        "CommitLog space preallocations that failed (the commits appended without them)",
                        stats.preallocation_failures,
                    ),
                    (
                        "ferromq_store_map_windows_populated_ahead",
                        "Windows of the CommitLog map populated ahead of the commits by the populating thread",
                        stats.map_windows_populated_ahead,
                    ),
                    (
                        "ferromq_store_map_windows_populated_inline",
                        "Windows of the CommitLog map the committer populated itself",
                        stats.map_windows_populated_inline,
                    ),
                ])
                .collect(),
            lease_remaining_ms: ctx
                .replication
                .lease_remaining()
                .map(|lease| lease.as_millis() as u64),
            master_epoch: ctx.replication.epoch(),
        }
    }
}

/// The replication counters: name, help, value.
fn replication_counters(ctx: &BrokerContext) -> Vec<(&'static str, &'static str, u64)> {
    use std::sync::atomic::Ordering::Relaxed;
    let c = &ctx.replication.counters;
    let mut counters = vec![
        (
            "ferromq_replication_bytes_streamed",
            "CommitLog bytes a master sent to its slaves",
            c.bytes_streamed.load(Relaxed),
        ),
        (
            "ferromq_replication_bytes_received",
            "CommitLog bytes a slave appended from its master",
            c.bytes_received.load(Relaxed),
        ),
        (
            "ferromq_replication_malformed_frames",
            "HA connections closed for a malformed or unexpected frame",
            c.malformed_frames.load(Relaxed),
        ),
        (
            "ferromq_replication_peers_refused",
            "HA peers refused (wrong group, ahead of the master, diverged, too many)",
            c.peers_refused.load(Relaxed),
        ),
        (
            "ferromq_replication_not_master_refusals",
            "Writes refused because this broker is not master",
            c.not_master_refusals.load(Relaxed),
        ),
        (
            "ferromq_replication_timeouts",
            "SYNC_MASTER writes appended but not held by every in-sync slave (in time, or before the set shrank below minInSyncReplicas)",
            c.replication_timeouts.load(Relaxed),
        ),
        (
            "ferromq_controller_lease_refusals",
            "Writes refused, or acknowledgements withheld, because the master held no controller lease",
            c.lease_refusals.load(Relaxed),
        ),
    ];
    if let Some(link) = &ctx.controller {
        let k = &link.counters;
        counters.extend([
            (
                "ferromq_controller_promotions",
                "Times this broker was promoted to master by the controller (failovers it took over)",
                k.promotions.load(Relaxed),
            ),
            (
                "ferromq_controller_promotions_without_lease",
                "Promotions that found no lease (made by a registration's or renewal's reply), each followed by a heartbeat at once to get one",
                k.promotions_without_lease.load(Relaxed),
            ),
            (
                "ferromq_controller_term_renewals",
                "Times this broker, restarted while still named master, asked the controller for a new term instead of resuming",
                k.renewals.load(Relaxed),
            ),
            (
                "ferromq_controller_term_renewal_failures",
                "Term renewals that failed (no leader, timeout, refusal); the next heartbeat asks again",
                k.renewal_failures.load(Relaxed),
            ),
            (
                "ferromq_controller_demotions",
                "Times this broker started following another master or stepped down",
                k.demotions.load(Relaxed),
            ),
            (
                "ferromq_controller_heartbeats_confirmed",
                "Heartbeats the controller leader confirmed (each renews a master's lease)",
                k.heartbeats_confirmed.load(Relaxed),
            ),
            (
                "ferromq_controller_heartbeats_failed",
                "Heartbeats to the controller that failed (no leader, timeout, refusal)",
                k.heartbeats_failed.load(Relaxed),
            ),
            (
                "ferromq_controller_sync_state_set_changes_failed",
                "In-sync set changes the controller refused or that failed",
                k.alter_failures.load(Relaxed),
            ),
        ]);
    }
    counters
}

/// The pop (`POP_MESSAGE`, gRPC receive) and timer-message counters: name, help, value.
fn pop_and_timer_counters(ctx: &BrokerContext) -> [(&'static str, &'static str, u64); 7] {
    use std::sync::atomic::Ordering::Relaxed;
    let (pop, timers) = (&ctx.pop, &ctx.timers);
    [
        (
            "ferromq_pop_dead_lettered",
            "Popped messages moved to their group's dead-letter queue after their last delivery attempt",
            pop.dead_lettered.load(Relaxed),
        ),
        (
            "ferromq_pop_offset_commit_failures",
            "Offset commits of acknowledged pop prefixes that failed (the acks were durable; the next advance commits again)",
            pop.commit_failures.load(Relaxed),
        ),
        (
            "ferromq_pop_renewals_written",
            "Automatic invisibility renewals of popped messages written",
            pop.renewed.load(Relaxed),
        ),
        (
            "ferromq_pop_renewals_refused",
            "Popped messages not registered for automatic renewal because the renewal table was full",
            pop.renewals_refused.load(Relaxed),
        ),
        (
            "ferromq_timer_fired",
            "Timer messages moved to their topic when due",
            timers.fired.load(Relaxed),
        ),
        (
            "ferromq_timer_recalled",
            "Timer messages recalled before they were due",
            timers.recalled.load(Relaxed),
        ),
        (
            "ferromq_timer_refused_full",
            "Timer sends refused because timerTrackedMax messages were pending",
            timers.refused_full.load(Relaxed),
        ),
    ]
}

impl ScrapeValues {
    /// Replication: in-sync members, watermark and per-slave lag.
    fn encode_replication(&self, encoder: &mut DescriptorEncoder) -> std::fmt::Result {
        let r = &self.replication;
        for (name, help, value) in [
            (
                "ferromq_replication_in_sync_members",
                "Members of the in-sync set, the master included (a slave reports 0)",
                if r.role.is_master() {
                    r.in_sync_members as u64
                } else {
                    0
                },
            ),
            (
                "ferromq_replication_watermark",
                "The high watermark: consumers see the log only below it",
                r.watermark,
            ),
            (
                "ferromq_replication_master_epoch",
                "The newest master epoch in this broker's epoch file",
                self.master_epoch,
            ),
        ] {
            let gauge = ConstGauge::new(value as i64);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        if let Some(remaining) = self.lease_remaining_ms {
            let gauge = ConstGauge::new(remaining as i64);
            gauge.encode(encoder.encode_descriptor(
                "ferromq_controller_lease_remaining_millis",
                "Controller mode: how long the master's lease still holds (0: no lease, writes refused)",
                None,
                gauge.metric_type(),
            )?)?;
        }
        for (name, help, pick) in [
            (
                "ferromq_replication_lag_bytes",
                "CommitLog bytes a slave is behind its master",
                (|s: &crate::replication::status::SlaveRuntime| s.lag_bytes)
                    as fn(&crate::replication::status::SlaveRuntime) -> u64,
            ),
            (
                "ferromq_replication_lag_millis",
                "How long since a slave last caught up with its master",
                |s| s.lag_time_ms,
            ),
            (
                "ferromq_replication_slave_in_sync",
                "1 while a slave is in the in-sync set",
                |s| u64::from(s.in_sync),
            ),
        ] {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for slave in &r.slaves {
                let id = slave.broker_id.to_string();
                ConstGauge::new(pick(slave) as i64)
                    .encode(family.encode_family(&[("slave", id.as_str())])?)?;
            }
        }
        Ok(())
    }

    /// The unlabelled counters.
    fn encode_plain_counters(&self, encoder: &mut DescriptorEncoder) -> std::fmt::Result {
        for &(name, help, value) in &self.plain_counters {
            ConstCounter::new(value).encode(encoder.encode_descriptor(
                name,
                help,
                None,
                MetricType::Counter,
            )?)?;
        }
        Ok(())
    }

    /// The checkpoint-failure counter and the connection-limit counters (one labelled family
    /// each).
    fn encode_limit_counters(&self, encoder: &mut DescriptorEncoder) -> std::fmt::Result {
        let l = &self.limits;
        let families: [LabelledCounters; 3] = [
            (
                "ferromq_connections_refused",
                "Connections closed at accept, by reason (limit: maxConnections reached)",
                "reason",
                vec![("limit", l.refused_over_limit)],
            ),
            (
                "ferromq_accept_errors",
                "Failed accepts, by kind (fd_exhausted: EMFILE/ENFILE, the acceptor paused)",
                "kind",
                vec![
                    ("fd_exhausted", l.accept_fd_exhausted),
                    ("other", l.accept_failed_other),
                ],
            ),
            (
                "ferromq_connections_closed",
                "Connections closed by a limit, by reason",
                "reason",
                vec![
                    ("idle", l.closed_idle),
                    ("frame_timeout", l.closed_frame_timeout),
                    ("frame_budget", l.closed_frame_budget),
                ],
            ),
        ];
        let checkpoints = ConstCounter::new(self.checkpoint_failures);
        checkpoints.encode(encoder.encode_descriptor(
            "ferromq_checkpoint_failures",
            "Store checkpoints that failed (retried; they do not poison the store)",
            None,
            MetricType::Counter,
        )?)?;
        for (name, help, label, values) in families {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (value, count) in values {
                ConstCounter::new(count).encode(family.encode_family(&[(label, value)])?)?;
            }
        }
        Ok(())
    }
}

impl Collector for ScrapeValues {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        {
            let mut lag = encoder.encode_descriptor(
                "ferromq_consumer_lag",
                "Messages between a group's committed offset and the queue's max offset",
                None,
                MetricType::Gauge,
            )?;
            for (group, topic, queue_id, value) in &self.lags {
                let queue = queue_id.to_string();
                let labels = [
                    ("group", group.as_str()),
                    ("topic", topic.as_str()),
                    ("queue", queue.as_str()),
                ];
                ConstGauge::new(*value as i64).encode(lag.encode_family(&labels)?)?;
            }
        }
        {
            let mut saves = encoder.encode_descriptor(
                "ferromq_config_save_failures",
                "Failed saves of a config table (kept in memory and retried), by file",
                None,
                MetricType::Counter,
            )?;
            let labels = [("file", crate::catalog::groups::GROUPS_FILE_LABEL)];
            ConstCounter::new(self.group_save_failures).encode(saves.encode_family(&labels)?)?;
        }
        let gauges = [
            (
                "ferromq_dispatch_behind_bytes",
                "CommitLog bytes written but not yet dispatched to consume queues",
                self.dispatch_behind_bytes,
            ),
            (
                "ferromq_dispatch_stalled",
                "1 while the dispatcher's passes fail (writes refused SYSTEM_BUSY, empty reads \
                 answered SYSTEM_BUSY), else 0",
                self.dispatch_stalled,
            ),
            (
                "ferromq_commitlog_min_offset",
                "First CommitLog byte still stored",
                self.log_min_offset,
            ),
            (
                "ferromq_commitlog_max_offset",
                "CommitLog bytes written",
                self.log_max_offset,
            ),
            (
                "ferromq_connection_limit",
                "Connections served at once (maxConnections capped by the open-file limit)",
                self.connection_limit,
            ),
            (
                "ferromq_partial_frame_bytes",
                "Bytes held by incomplete frames, charged to the partial-frame budget",
                self.partial_frame_bytes,
            ),
            (
                "ferromq_partial_frame_budget_bytes",
                "The partial-frame budget (partialFrameBudgetBytes)",
                self.partial_frame_budget_bytes,
            ),
            (
                "ferromq_store_undispatchable_records",
                "Records quarantined because no ConsumeQueue can hold them, since the store opened",
                self.undispatchable_records,
            ),
            (
                "ferromq_quarantined_ranges",
                "CommitLog ranges kept but not served: damaged ones and undispatchable records",
                self.quarantined_ranges,
            ),
        ];
        for (name, help, value) in gauges {
            let gauge = ConstGauge::new(value as i64);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        self.encode_limit_counters(&mut encoder)?;
        self.encode_replication(&mut encoder)?;
        self.encode_plain_counters(&mut encoder)?;
        let buckets: Vec<(f64, u64)> = self
            .flush
            .bucket_counts
            .iter()
            .enumerate()
            .map(|(i, count)| {
                let bound = FLUSH_LATENCY_BOUNDS_MICROS
                    .get(i)
                    .map_or(f64::INFINITY, |micros| *micros as f64 / 1e6);
                (bound, *count)
            })
            .collect();
        let mut flush = encoder.encode_descriptor(
            "ferromq_flush_latency_seconds",
            "Duration of the CommitLog fsyncs",
            None,
            MetricType::Histogram,
        )?;
        flush.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
            self.flush.sum_micros as f64 / 1e6,
            self.flush.count,
            &buckets,
            None,
        )
    }
}
