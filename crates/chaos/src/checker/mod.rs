//! The checker: decides whether a recorded [`History`] kept ferromq's promises.
//!
//! [`check`] reads the history once, in order (linear in its length: hash maps keyed by value,
//! queue and (queue, offset), no pairwise scans), and returns a [`Report`] of the Jepsen
//! total-queue sets and of properties K1–K7 of `offset-pitfalls.md`. Every rule below is the
//! exact rule implemented; `Report::failures` names each failed property.
//!
//! # Node roles
//! Every `Kill`, `Restart`, `Pause` and `Resume` fault carries the role the node had when it
//! was hit ([`NodeRole`](crate::history::NodeRole)). A *master-log kill* is a `Kill` whose
//! role holds its group's log (`standalone` or `master`): only those can take acknowledged
//! data with them, so only they excuse anything below (async losses and offset reuses, K4
//! rollbacks, K5 watermark rollbacks) and only they (and `Restart`s of those roles) are the
//! K6 cause `broker_restart`. A kill of a slave, controller or name server excuses nothing
//! and is no duplicate cause (none of them moves consumers); neither does any pause or
//! partition. `kills_by_role` and `pauses_by_role` count `Kill` and `Pause` faults per role.
//! A master-log kill counts for every queue (a kill names a node, not its broker group).
//! In [`Durability::Async`] (ASYNC_MASTER) a `Failover` also counts as a master-log kill (listed
//! as `failover of <group> to <master>`): however the old master was deposed — killed, paused
//! or cut off — the tail it had not replicated is cut from the group's log. Under
//! [`Durability::Sync`] a failover excuses nothing.
//!
//! # Sets (Jepsen total-queue)
//! - *attempted*: values of any send operation; *acked*: values with a `SendOk`; *delivered*:
//!   distinct values of `Deliver`.
//! - **K1 lost** = acked − delivered, minus values *skipped by a reset*: a `Reset` that moves a
//!   queue forward past offsets no consumer had delivered yet skips them on purpose, so a lost
//!   value whose acked offset lies in `[highest delivered offset + 1, reset offset)` of such a
//!   reset is reported as `skipped_by_reset`, not lost. Each lost value is classified against
//!   the delivered values of its producer: `prefix` (counter below the lowest delivered one, or
//!   nothing of that producer was delivered), `middle` (between the lowest and highest),
//!   `postfix` (above the highest); counts are kept per producer and per queue.
//! - **K2 unexpected** = delivered − attempted. A value whose send *failed* (`SendFail`, "the
//!   broker definitely did not store it") and was delivered anyway is listed as
//!   `failed_but_delivered` and fails K2 too. *recovered* = delivered values that were attempted
//!   but neither acked nor failed (indeterminate sends that landed): reported, never failing.
//!
//! # K3: dense, unique offsets
//! Every `SendOk` and `Deliver` observes a value at a (queue, offset) *slot*.
//! - An acked value observed at two different slots fails (`acked_at_two_positions`). An
//!   unacked value at two slots (a retried indeterminate send stored twice) is only counted.
//! - A slot observed with two different values fails (`two_values_at_one_offset`; R5, also
//!   across failover truncations), except in [`Durability::Async`] when a master-log kill was
//!   recorded after the old value may have been stored (its `SendInvoke`, else its first
//!   observation at the slot) and before the new value's observation: the old value was lost
//!   with the unflushed or unreplicated tail and the broker reused its offset
//!   (`offset_reuses`, reported). That is the only excuse: a kill of a slave, controller or
//!   name server never excuses it, nor does a `Failover` by itself (in either durability).
//!   The old value coming back to that slot later needs another master-log kill to be
//!   allowed. Each slot is reported once, with the first two values seen there; every
//!   conflict and reuse lists `kills_between` (the roles of all nodes killed in that window,
//!   each once) and `failover_between` (a `Failover` of the queue's group in that window).
//! - Gaps: per queue, every offset in `0..=highest observed offset` must be observed by some
//!   `SendOk` or `Deliver`. Offsets inside a forward reset's skipped range (see K1) are not
//!   gaps: an indeterminate send that landed there is never read.
//!
//! # K4: monotone commits
//! Per queue, the committed offsets of `CommitOk` and `Observe.committed` never go below the
//! highest committed offset known *at the recorder's reference point*: an event recorded
//! certainly before that commit was sent or that read was made. For a `CommitOk` it is the
//! session's previous `CommitOk`/`CommitFail` (a session commits one at a time), or for its
//! first commit its `QueueStart` of the queue; for an `Observe`, the previous `Observe` (the
//! observer reads queues one after another). Comparing with the state at the reply instead
//! would flag a commit the broker applied before another one whose reply was recorded first.
//! A persistent regression is still caught by the next observation. Allowed lower offsets:
//! - a reset recorded after the reference point (`Fault::Reset` or the `Reset` op naming the
//!   queue), or pending (its `Fault::Reset` recorded, its op not yet: the harness records
//!   the fault before asking); the `Reset` op's offset starts a new baseline;
//! - an `Observe` (with a committed offset) whose `generation` is higher than any seen for
//!   that queue: a new baseline;
//! - in [`Durability::Async`], a master-log kill after the reference point: commits are log
//!   records and the unflushed tail may be lost with them; the offset is a new baseline,
//!   counted in `async_loss.commit_rollbacks`.
//!
//! A commit or observation with no reference point is not compared (it still raises the
//! running maximum). After a regression the maximum stays, so later commits below it are
//! listed too.
//!
//! *Acknowledgement order* (a second rule, for a `CommitOk` with `sent_ms = Some(s)`): its
//! offset must not be below the offset of any `CommitOk` of the same queue (any consumer or
//! session) whose acknowledgement was recorded strictly before `s` (`at_ms < s`), unless
//! after that earlier acknowledgement and up to this commit the queue had a `Reset` fault, a
//! `Reset` op naming the queue, a pending reset (as above), an `Observe` with a new
//! generation, or in async mode a master-log kill. Acknowledgement times are taken as
//! non-decreasing in history order (one recorded below an earlier one counts from that
//! earlier time). A commit below both rules is listed once, with `rule: reference`; one only
//! this rule catches has `rule: ack_order` and is counted in `ack_order_regressions`.
//! Commits without `sent_ms` are judged by the reference-point rule only.
//!
//! # K5: no commit past the log end
//! Per queue, the known max offset at a point of the history is the maximum of every
//! `Observe.max_offset` and every acked or delivered offset + 1 seen so far. A `CommitOk`
//! offset, or an `Observe.committed` (checked after taking that observation's `max_offset`
//! into account), above it fails.
//!
//! *Replicated watermark* (`past_watermark`): consumers read only below the replicated
//! watermark, so nothing a consumer saw can vanish, not even in a failover. Per queue, an
//! `Observe.max_offset` must be ≥ every delivered offset + 1 and every `CommitOk` offset of
//! the queue recorded before the previous `Observe` (the observer's reference point: its
//! reads of this observation were sent after that record, so a delivery recorded in between
//! may come from a pull served after the read). In async mode only those recorded after the
//! last master-log kill count; an observation below what was seen before that kill (but not
//! below anything since) is allowed, counted in `async_loss.watermark_rollbacks`, and its
//! max offset becomes the queue's new floor (baseline) from the next observation on.
//!
//! # K6: bounded duplicates
//! A delivery of a value already delivered is a duplicate. It is attributed to the most recent
//! (by history position) of: the latest restart of the delivering consumer (a
//! `RestartConsumer` fault or the first event of a new session of it: one restart when both
//! occur) → `consumer_restart`; a `Kill` or `Restart` fault of a standalone or master node →
//! `broker_restart`; a `QueueStart` of the queue by a consumer other than the one of the
//! queue's last `QueueStop`, or while another consumer still holds it (a restarted consumer's
//! old session counts as stopped) → `rebalance`; a `Reset` op naming the queue, a `Reset`
//! fault, or a `QueueStart` that followed a pending reset at the very offset its op then names
//! (the consumer acted on the broker's reset push before the harness recorded the op) →
//! `reset`; a `Failover` whose `group` is the queue's `broker` → `failover`; none →
//! `other`.
//! One exception: when the value's previous delivery was by an older session of the same
//! consumer, before that consumer's restart, a rebalance does not beat the restart (the
//! restart moved the queue; the duplicate is the old session's uncommitted in-flight message).
//!
//! Restart bound: at each consumer restart the checker snapshots, per queue, `H` = the highest
//! offset delivered on that queue by any consumer so far and `C` = the last committed offset
//! of the queue (`CommitOk` or `Reset`; 0 when none). The duplicates attributed to that restart
//! on queue q must be ≤ `max(H + 1 − C, 0)` (0 when nothing was delivered on q): only messages
//! delivered but not committed before the restart may come again. `H` counts every consumer,
//! not only the restarted one, because the new session may take over queues others read. With
//! [`CheckOptions::duplicate_bound`] set, the total duplicates of one restart must also be ≤
//! that cap. Restarts over either bound are always listed; they fail K6 only when
//! `duplicate_bound` is set (duplicates are legal at-least-once otherwise).
//!
//! Failover bound, the same per failover: at each `Failover` the checker snapshots, per queue
//! of the group known so far, `H` and `C` as above; the duplicates attributed to that
//! failover on queue q must be ≤ `max(H + 1 − C, 0) + S` (`H + 1 − C` is 0 when nothing was
//! delivered on q; `S` is [`CheckOptions::failover_slack`]: a consumer learns of a failover
//! only after it, and what it reads meanwhile is not committed, up to its window), and
//! with `duplicate_bound` set the failover's total must be ≤ that cap. Over-bound failovers
//! are always listed (`duplicates.failover_bound_exceeded`) and fail K6 only when
//! `duplicate_bound` is set. `failovers` lists every failover with its duplicates;
//! `duplicates.max_per_failover` is the largest such total.
//!
//! # K7: no poll-skip
//! Per consumer session and queue: the first `Deliver` after a `QueueStart` must be at the
//! start offset when any value is ever observed at that slot; every later `Deliver` must be at
//! the previous offset + 1 (topics are tag-less, so every offset is delivered). Either may
//! instead land on the offset of a `Reset` of that queue recorded since the `QueueStart` (or
//! since the reading's last such jump), which a fenced consumer follows.
//!
//! # Async durability
//! In [`Durability::Async`] a lost value is attributed to the first master-log kill recorded
//! after its `SendInvoke` (its ack may be recorded just after the kill record: the reply was
//! on its way); kills of slaves, controllers and name servers are ignored here. Losses
//! attributed to a kill are allowed when they are a suffix: for each (kill, queue), every
//! lost offset must be above every *delivered* value of that queue whose ack was recorded
//! between the previous master-log kill and this one (certainly stored before it); a lost
//! offset below such a survivor is a hole (`async_loss.holes`) and always fails. A loss
//! invoked after the last master-log kill fails K1 as in sync mode. `async_loss.kills` has
//! one entry per master-log kill.
//!
//! # Drain
//! A history without `DrainEnd` fails (the run was cut short). `DrainEnd { complete: false }`
//! fails in [`Durability::Sync`]; in async mode it is expected after kill losses and only
//! reported.
//!
//! Lists of offending items in the report are capped at [`LISTED_MAX`] entries; every count is
//! exact.

mod cluster;
mod report;
mod scan;
mod verdict;

pub use report::{
    AsyncLoss, CommitPastMax, CommitRegression, DuplicateCauses, Duplicates, FailoverDuplicates,
    FailoverRecord, FloorSource, Gap, KillLoss, Listed, LossClass, LostCounts, LostReport,
    LostValue, OffsetConflict, OffsetViolations, PastWatermark, PollSkip, Position,
    PositionConflict, RegressionRule, Report, RestartDuplicates, RoleCounts, SuffixHole, ValueList,
    ValueText,
};

use serde::{Deserialize, Serialize};

use crate::history::History;

/// At most this many offending items are listed per list of a [`Report`].
pub const LISTED_MAX: usize = 200;

/// The broker's flush policy during the run: what a broker kill may lose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// SYNC_FLUSH: acknowledged means fsynced; a kill loses nothing acknowledged.
    #[default]
    Sync,
    /// ASYNC_FLUSH: a kill may lose the unflushed suffix of each queue (never a hole).
    Async,
}

/// How to judge a history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CheckOptions {
    /// The broker's flush policy during the run.
    pub durability: Durability,
    /// When set, K6 fails on a consumer restart or a failover whose duplicates exceed the
    /// bound computed from the history, or exceed this absolute cap.
    pub duplicate_bound: Option<u64>,
    /// Per queue, added to each failover's computed bound: how many messages a consumer may
    /// deliver past its last acknowledged commit before it learns of the failover (its
    /// uncommitted window plus one pull batch). A consumer goes on reading from the deposed
    /// master's route until it sees the new one, and its commits are refused meanwhile; what
    /// it read then comes again from the new master's committed offset.
    pub failover_slack: u64,
}

/// Checks `history` against K1–K7; see the module docs for the exact rules.
///
/// # Example
/// ```
/// use ferromq_chaos::checker::{check, CheckOptions};
/// use ferromq_chaos::history::{History, Op, Queue, Value};
///
/// let queue = Queue { broker: "broker-a".into(), queue_id: 0 };
/// let value = Value::new(0, 0);
/// let mut history = History::new();
/// history.push(0, Op::SendInvoke { value });
/// history.push(1, Op::SendOk { value, queue, offset: 0 });
/// history.push(2, Op::DrainEnd { complete: false });
/// let report = check(&history, &CheckOptions::default());
/// assert!(!report.valid);
/// assert_eq!(report.lost.count, 1);
/// assert!(report.failures()[0].starts_with("K1 lost"));
/// ```
pub fn check(history: &History, options: &CheckOptions) -> Report {
    let mut scan = scan::Scan::new(options.durability)
        .with_reset_follows(scan::reset_follows(&history.events));
    for (index, event) in history.events.iter().enumerate() {
        scan.observe(index, event);
    }
    verdict::finish(scan, options)
}
