//! Carries out a fault schedule on a run's servers: every planned fault begins at its time
//! and, if it lasts, ends (heals) after its hold; faults may overlap (see
//! [`crate::faults::schedule`]). Every injection and healing is recorded as an `Op::Fault`
//! with the struck node's name and role at the moment it struck.
//!
//! A fault that cannot be carried out is a [`FaultError`]. It is *expected* when the system
//! was meant to refuse or when nothing fits: a reset refused while another fault is active
//! (the master may be down or cut off) or by a master elected moments ago (it refuses resets
//! for `resetWaitAfterPromotionMillis`), or a fault whose victim does not exist at that moment
//! (no master mid-failover, every slave already down). Any other fault error fails the run.
//!
//! A reset that fails without a definite answer may still land later (its record can be in a
//! log that a failover exposes), so the injector asks again with the same timestamp every
//! [`RESET_RETRY`] until one attempt is acknowledged, and at the end of the faults for at most
//! [`RESET_SETTLE_MAX`]; a reset never acknowledged by then fails the run. The history says
//! `Op::ResetUnsettled` for each failed attempt and `Op::Reset` for the acknowledged one.
//!
//! Invariants:
//! 1. Steps run in time order, a healing before a beginning planned at the same instant.
//! 2. Every fault that began is healed: by its own end step, or by [`Injector::heal_all`].
//! 3. A (node, link) is partitioned by at most one fault at a time; a node is killed or
//!    paused by at most one (resolution only picks healthy nodes).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::time::Instant;

use crate::admin::Admin;
use crate::faults::{FaultAction, PartitionMode, PlannedFault};
use crate::history::{Fault, NodeRole, Op};
use crate::nodes::NodeError;
use crate::proxy::ProxyMode;
use crate::recorder::Recorder;
use crate::servers::{Servers, Struck};
use crate::topology::Link;
use crate::workload::consumers::Consumers;

/// How often an unsettled reset is asked again.
pub const RESET_RETRY: Duration = Duration::from_secs(1);
/// How long after the faults an unsettled reset may take to be acknowledged.
pub const RESET_SETTLE_MAX: Duration = Duration::from_secs(30);

/// A reset whose last attempt failed: asked again until acknowledged.
#[derive(Debug, Clone)]
struct UnsettledReset {
    planned: PlannedFault,
    timestamp_ms: u64,
    attempts: u32,
    last_error: String,
}

/// A fault that could not be carried out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FaultError {
    /// The planned fault, as text.
    pub fault: String,
    /// What went wrong.
    pub error: String,
    /// True when the refusal was expected (see the module docs); false fails the run.
    pub expected: bool,
}

/// What an active fault must undo.
#[derive(Debug, Clone)]
enum Active {
    Killed(Struck, String, NodeRole),
    Paused(Struck, String, NodeRole),
    Partitioned(Struck, Link, String),
}

/// One step of the timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    /// Heal planned fault `i` (sorted before a `Begin` at the same instant).
    End(usize),
    /// Inject planned fault `i`.
    Begin(usize),
}

/// What faults act on.
pub struct Injector<'a> {
    /// The servers.
    pub servers: &'a mut Servers,
    /// The consumers (restart-consumer faults).
    pub consumers: &'a mut Consumers,
    /// Admin commands (resets).
    pub admin: &'a Admin,
    /// Where faults are recorded.
    pub recorder: &'a Recorder,
    /// The group and topic resets apply to.
    pub group_topic: (&'a str, &'a str),
    active: BTreeMap<usize, Active>,
    errors: Vec<FaultError>,
    unsettled: Option<UnsettledReset>,
}

impl<'a> Injector<'a> {
    /// An injector with nothing active.
    pub fn new(
        servers: &'a mut Servers,
        consumers: &'a mut Consumers,
        admin: &'a Admin,
        recorder: &'a Recorder,
        group_topic: (&'a str, &'a str),
    ) -> Injector<'a> {
        Injector {
            servers,
            consumers,
            admin,
            recorder,
            group_topic,
            active: BTreeMap::new(),
            errors: Vec::new(),
            unsettled: None,
        }
    }

    /// The fault errors so far.
    pub fn take_errors(&mut self) -> Vec<FaultError> {
        std::mem::take(&mut self.errors)
    }

    /// Runs `plan`, times counted from `start`.
    ///
    /// # Errors
    /// [`NodeError`] when a killed node cannot be started again.
    pub async fn run(&mut self, plan: &[PlannedFault], start: Instant) -> Result<(), NodeError> {
        let mut steps: Vec<(Duration, Step)> = Vec::new();
        for (i, fault) in plan.iter().enumerate() {
            steps.push((fault.at, Step::Begin(i)));
            if !fault.action.hold().is_zero() {
                steps.push((fault.at + fault.action.hold(), Step::End(i)));
            }
        }
        steps.sort();
        for (at, step) in steps {
            self.wait_until(start + at).await;
            match step {
                Step::Begin(i) => self.begin(i, &plan[i]).await?,
                Step::End(i) => self.end(i).await?,
            }
        }
        Ok(())
    }

    fn refuse(&mut self, planned: &PlannedFault, error: String, expected: bool) {
        tracing::warn!(fault = %planned, %error, expected, "fault not carried out");
        self.errors.push(FaultError {
            fault: planned.to_string(),
            error,
            expected,
        });
    }

    async fn begin(&mut self, i: usize, planned: &PlannedFault) -> Result<(), NodeError> {
        match &planned.action {
            FaultAction::Kill { victim, .. } | FaultAction::Pause { victim, .. } => {
                let Some(struck) = self.servers.resolve(*victim).await else {
                    self.refuse(planned, format!("no healthy {victim} now"), true);
                    return Ok(());
                };
                let kill = matches!(planned.action, FaultAction::Kill { .. });
                self.strike(i, struck, kill).await
            }
            FaultAction::Partition {
                victim, link, mode, ..
            } => {
                let Some(struck) = self.servers.resolve(*victim).await else {
                    self.refuse(planned, format!("no healthy {victim} now"), true);
                    return Ok(());
                };
                self.partition(i, planned, struck, *link, *mode);
                Ok(())
            }
            FaultAction::RestartConsumer { consumer } => {
                // Records the fault itself, once the old session is gone.
                self.consumers
                    .restart(*consumer)
                    .await
                    .map_err(|error| NodeError::Io {
                        node: format!("consumer {consumer}"),
                        action: "restarting a consumer",
                        source: std::io::Error::other(error.to_string()),
                    })
            }
            FaultAction::Reset { back } => {
                self.reset(planned, *back).await;
                Ok(())
            }
        }
    }

    /// kill -9 (or SIGSTOP) of `struck`, recorded with its role at this moment.
    async fn strike(&mut self, i: usize, struck: Struck, kill: bool) -> Result<(), NodeError> {
        let role = self.servers.role(struck).await;
        let name = self.servers.name(struck);
        let Some(node) = self.servers.node(struck) else {
            return Ok(());
        };
        if kill {
            self.recorder.record(Op::Fault(Fault::Kill {
                node: name.clone(),
                role,
            }));
            node.kill().await?;
            self.active.insert(i, Active::Killed(struck, name, role));
        } else {
            self.recorder.record(Op::Fault(Fault::Pause {
                node: name.clone(),
                role,
            }));
            node.pause().await?;
            self.active.insert(i, Active::Paused(struck, name, role));
        }
        Ok(())
    }

    fn partition(
        &mut self,
        i: usize,
        planned: &PlannedFault,
        struck: Struck,
        link: Link,
        mode: PartitionMode,
    ) {
        let busy = self
            .active
            .values()
            .any(|a| matches!(a, Active::Partitioned(s, l, _) if *s == struck && *l == link));
        if busy {
            self.refuse(planned, "that link is already partitioned".into(), true);
            return;
        }
        let mode = proxy_mode(mode);
        let name = self.servers.name(struck);
        if !self.servers.set_link(struck, link, mode) {
            self.refuse(
                planned,
                format!("{name} has no {} link", link.name()),
                false,
            );
            return;
        }
        self.recorder.record(Op::Fault(Fault::Partition {
            node: name.clone(),
            mode: mode.name().to_string(),
            link: link.name().to_string(),
        }));
        self.active
            .insert(i, Active::Partitioned(struck, link, name));
    }

    /// Sleeps until `deadline`, asking an unsettled reset again every [`RESET_RETRY`].
    pub async fn wait_until(&mut self, deadline: Instant) {
        while self.unsettled.is_some() {
            let next = Instant::now() + RESET_RETRY;
            if next >= deadline {
                break;
            }
            tokio::time::sleep_until(next).await;
            self.retry_reset().await;
        }
        tokio::time::sleep_until(deadline).await;
    }

    async fn reset(&mut self, planned: &PlannedFault, back: Duration) {
        // A new reset supersedes an unsettled one: once it is acknowledged, the older record
        // (if it ever lands) lies before it in the master's log.
        self.unsettled = None;
        self.recorder.record(Op::Fault(Fault::Reset));
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let timestamp_ms = now_ms.saturating_sub(back.as_millis() as u64);
        if let Err(error) = self.ask_reset(timestamp_ms).await {
            // During another fault the master may be down or cut off, and a master that has
            // just been elected refuses resets until its consumers have heartbeated to it:
            // a failure is the right answer then. With nothing active it is a defect.
            let expected =
                !self.active.is_empty() || error.contains("resetWaitAfterPromotionMillis");
            self.refuse(
                planned,
                format!("reset: {error} (asked again until acknowledged)"),
                expected,
            );
            self.unsettled = Some(UnsettledReset {
                planned: planned.clone(),
                timestamp_ms,
                attempts: 1,
                last_error: error,
            });
        }
    }

    /// Asks for the reset to `timestamp_ms` once and records the outcome: `Op::Reset` when
    /// acknowledged, `Op::ResetUnsettled` (and the error) otherwise.
    async fn ask_reset(&mut self, timestamp_ms: u64) -> Result<(), String> {
        let (group, topic) = self.group_topic;
        match self.admin.reset_by_time(group, topic, timestamp_ms).await {
            Ok(result) => {
                self.recorder.record(Op::Reset {
                    offsets: result.offsets,
                    generation: result.generation,
                });
                Ok(())
            }
            Err(error) => {
                let error = error.to_string();
                self.recorder.record(Op::ResetUnsettled {
                    error: error.clone(),
                });
                Err(error)
            }
        }
    }

    /// One more attempt of the unsettled reset, if any.
    async fn retry_reset(&mut self) {
        let Some(mut unsettled) = self.unsettled.take() else {
            return;
        };
        if let Err(error) = self.ask_reset(unsettled.timestamp_ms).await {
            unsettled.attempts += 1;
            unsettled.last_error = error;
            self.unsettled = Some(unsettled);
        }
    }

    /// After the faults: asks an unsettled reset again until it is acknowledged, for at most
    /// [`RESET_SETTLE_MAX`]; one never acknowledged is an unexpected fault error.
    async fn settle_reset(&mut self) {
        let deadline = Instant::now() + RESET_SETTLE_MAX;
        while self.unsettled.is_some() && Instant::now() < deadline {
            self.retry_reset().await;
            if self.unsettled.is_some() {
                tokio::time::sleep(RESET_RETRY).await;
            }
        }
        if let Some(unsettled) = self.unsettled.take() {
            let error = format!(
                "reset never acknowledged after {} attempts: {}",
                unsettled.attempts, unsettled.last_error
            );
            self.refuse(&unsettled.planned, error, false);
        }
    }

    async fn end(&mut self, i: usize) -> Result<(), NodeError> {
        let Some(active) = self.active.remove(&i) else {
            return Ok(());
        };
        self.undo(active).await
    }

    async fn undo(&mut self, active: Active) -> Result<(), NodeError> {
        match active {
            Active::Killed(struck, node, role) => {
                self.servers.restart(struck).await?;
                self.recorder
                    .record(Op::Fault(Fault::Restart { node, role }));
            }
            Active::Paused(struck, node, role) => {
                if let Some(process) = self.servers.node(struck) {
                    process.resume().await?;
                }
                self.recorder
                    .record(Op::Fault(Fault::Resume { node, role }));
            }
            Active::Partitioned(struck, link, node) => {
                self.servers.set_link(struck, link, ProxyMode::Pass);
                self.recorder.record(Op::Fault(Fault::Heal {
                    node,
                    link: link.name().to_string(),
                }));
            }
        }
        Ok(())
    }

    /// Heals whatever is still broken: active faults first (recorded), then any proxy, paused
    /// or stopped process left over.
    ///
    /// # Errors
    /// [`NodeError`] when a node cannot be resumed or started again.
    pub async fn heal_all(&mut self) -> Result<(), NodeError> {
        let active = std::mem::take(&mut self.active);
        for (_, fault) in active.into_iter().rev() {
            self.undo(fault).await?;
        }
        self.servers.heal_links();
        for struck in self.servers.all() {
            let name = self.servers.name(struck);
            let role = self.servers.role(struck).await;
            let Some(node) = self.servers.node(struck) else {
                continue;
            };
            if node.is_paused() {
                node.resume().await?;
                self.recorder
                    .record(Op::Fault(Fault::Resume { node: name, role }));
            } else if !node.is_running() {
                self.servers.restart(struck).await?;
                self.recorder
                    .record(Op::Fault(Fault::Restart { node: name, role }));
            }
        }
        self.settle_reset().await;
        Ok(())
    }
}

fn proxy_mode(mode: PartitionMode) -> ProxyMode {
    match mode {
        PartitionMode::Drop => ProxyMode::Drop,
        PartitionMode::Stall => ProxyMode::Stall,
        PartitionMode::Slow(delay) => ProxyMode::Slow(delay),
        PartitionMode::DropReplies => ProxyMode::DropReplies,
        PartitionMode::DropRequests => ProxyMode::DropRequests,
    }
}
