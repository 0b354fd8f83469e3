//! The fault schedule of a run: which fault, when, for how long — drawn from the run's seed.
//!
//! Faults come one after another (inject, hold, heal, pause before the next), so every fault's
//! effect and recovery can be told apart in the history — except that with `overlap` a second
//! fault may strike while one is active (two faults at once: a reset during a kill or a
//! partition, a partition during a pause), nested so that it heals first. The first round
//! injects every requested kind once, in a seeded order, so a run long enough for one round
//! exercises each kind; later faults are drawn at random among the requested kinds. A fault
//! names its node by role ([`Victim`]: the master of a group, a slave, the controller leader,
//! ...), resolved when it strikes. The same [`ScheduleSpec`] always gives the same schedule.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::topology::{Link, Topology, Victim};

/// A kind of fault (`--faults`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// kill -9 of the broker process, then a restart on the same ports and data.
    Kill,
    /// SIGSTOP of the broker process, then SIGCONT.
    Pause,
    /// The proxy between clients and the broker drops, stalls, slows or swallows replies.
    Partition,
    /// A consumer is stopped without its final commit and started as a new session.
    RestartConsumer,
    /// `resetOffsetByTime` for the group, a few seconds back.
    Reset,
}

impl FaultKind {
    /// Every kind, in `--faults` order.
    pub const ALL: [FaultKind; 5] = [
        FaultKind::Kill,
        FaultKind::Pause,
        FaultKind::Partition,
        FaultKind::RestartConsumer,
        FaultKind::Reset,
    ];

    /// The flag spelling (also [`crate::history::Fault::kind`]'s).
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::Pause => "pause",
            FaultKind::Partition => "partition",
            FaultKind::RestartConsumer => "restart-consumer",
            FaultKind::Reset => "reset",
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A `--faults` entry that names no fault kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown fault kind {0:?} (expected kill, pause, partition, restart-consumer or reset)")]
pub struct UnknownFault(pub String);

impl FromStr for FaultKind {
    type Err = UnknownFault;

    fn from_str(text: &str) -> Result<FaultKind, UnknownFault> {
        FaultKind::ALL
            .into_iter()
            .find(|kind| kind.name() == text.trim())
            .ok_or_else(|| UnknownFault(text.to_string()))
    }
}

/// How the proxy misbehaves during a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionMode {
    /// Connections reset.
    Drop,
    /// Nothing forwarded, connections kept.
    Stall,
    /// Every chunk delayed by this much.
    Slow(Duration),
    /// Requests forwarded, replies discarded (one direction dropped).
    DropReplies,
    /// Requests discarded, replies forwarded (the other direction dropped).
    DropRequests,
}

/// One planned fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedFault {
    /// When to inject it, from the start of the run.
    pub at: Duration,
    /// What.
    pub action: FaultAction,
    /// True when it strikes while the previous planned fault is still active (two faults at
    /// once); it heals before that one does.
    pub overlaps: bool,
}

/// A planned fault with its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultAction {
    /// kill -9 of `victim`, then restart after `down`.
    Kill {
        /// Which node.
        victim: Victim,
        /// Time between the kill and the restart.
        down: Duration,
    },
    /// SIGSTOP of `victim` for `hold`, then SIGCONT.
    Pause {
        /// Which node.
        victim: Victim,
        /// How long the process stays stopped.
        hold: Duration,
    },
    /// The proxies of `link` of `victim` in `mode` for `hold`, then healed.
    Partition {
        /// Which node's link.
        victim: Victim,
        /// Which link.
        link: Link,
        /// Proxy behaviour.
        mode: PartitionMode,
        /// How long until it heals.
        hold: Duration,
    },
    /// Restart consumer number `consumer` (index among the run's consumers).
    RestartConsumer {
        /// Which consumer.
        consumer: u32,
    },
    /// Reset the group's offsets to the time `back` before the reset.
    Reset {
        /// How far back.
        back: Duration,
    },
}

impl FaultAction {
    /// The kind of this action.
    pub fn kind(&self) -> FaultKind {
        match self {
            FaultAction::Kill { .. } => FaultKind::Kill,
            FaultAction::Pause { .. } => FaultKind::Pause,
            FaultAction::Partition { .. } => FaultKind::Partition,
            FaultAction::RestartConsumer { .. } => FaultKind::RestartConsumer,
            FaultAction::Reset { .. } => FaultKind::Reset,
        }
    }

    /// How long the fault lasts before it is healed (zero for instant ones).
    pub fn hold(&self) -> Duration {
        match self {
            FaultAction::Kill { down, .. } => *down,
            FaultAction::Pause { hold, .. } | FaultAction::Partition { hold, .. } => *hold,
            FaultAction::RestartConsumer { .. } | FaultAction::Reset { .. } => Duration::ZERO,
        }
    }
}

impl fmt::Display for PlannedFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = self.at.as_secs_f64();
        let with = if self.overlaps {
            " (during the previous)"
        } else {
            ""
        };
        match &self.action {
            FaultAction::Kill { victim, down } => {
                write!(
                    f,
                    "{at:7.2}s kill -9 {victim}, restart after {down:?}{with}"
                )
            }
            FaultAction::Pause { victim, hold } => {
                write!(f, "{at:7.2}s SIGSTOP {victim} for {hold:?}{with}")
            }
            FaultAction::Partition {
                victim,
                link,
                mode,
                hold,
            } => write!(
                f,
                "{at:7.2}s partition {} of {victim} ({mode:?}) for {hold:?}{with}",
                link.name()
            ),
            FaultAction::RestartConsumer { consumer } => {
                write!(f, "{at:7.2}s restart consumer {consumer}{with}")
            }
            FaultAction::Reset { back } => {
                write!(f, "{at:7.2}s resetOffsetByTime to {back:?} ago{with}")
            }
        }
    }
}

/// Time before the first fault (producers and consumers settle).
pub const WARM_UP: Duration = Duration::from_secs(3);

/// What a schedule is drawn for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleSpec {
    /// The run's seed.
    pub seed: u64,
    /// Length of the fault phase.
    pub seconds: u64,
    /// Kinds to inject.
    pub kinds: Vec<FaultKind>,
    /// Consumers of the run.
    pub consumers: u32,
    /// What the faults strike.
    pub topology: Topology,
    /// Plan two faults at once: a second fault may strike while the first is active (and
    /// heals before it).
    pub overlap: bool,
}

/// Draws the schedule of a fault phase. No fault is planned to be still active at the end of
/// the phase. The first round injects every requested kind once, in a seeded order; with
/// `overlap`, a reset of the first round strikes during the first kill or partition, and any
/// later fault may strike during the previous one (then it is not a kill, and it heals first).
pub fn schedule(spec: &ScheduleSpec) -> Vec<PlannedFault> {
    let mut kinds: Vec<FaultKind> = spec.kinds.clone();
    kinds.sort();
    kinds.dedup();
    if spec.consumers == 0 {
        kinds.retain(|k| *k != FaultKind::RestartConsumer);
    }
    let mut faults: Vec<PlannedFault> = Vec::new();
    if kinds.is_empty() {
        return faults;
    }
    // Salted so the schedule does not share its stream with anything else drawn from the seed.
    let mut rng = StdRng::seed_from_u64(spec.seed ^ 0x6661_756c_7473);
    let end = Duration::from_secs(spec.seconds);
    let mut first_round = kinds.clone();
    first_round.shuffle(&mut rng);
    let mut at = WARM_UP;
    // The window of the last fault that others may nest in: (start, end).
    let mut window: Option<(Duration, Duration)> = None;
    loop {
        let kind = if faults.len() < first_round.len() {
            first_round[faults.len()]
        } else {
            kinds[rng.gen_range(0..kinds.len())]
        };
        let action = draw(&mut rng, kind, spec);
        if let Some(nested) = nest(&mut rng, spec, &faults, &action, window, first_round.len()) {
            faults.push(PlannedFault {
                at: nested,
                action,
                overlaps: true,
            });
            continue;
        }
        // Kills also spend a few seconds on recovery (a failover, a restart).
        let busy = action.hold()
            + match kind {
                FaultKind::Kill => Duration::from_secs(3),
                _ => Duration::from_millis(500),
            };
        if at + busy > end {
            break;
        }
        window = (action.hold() >= Duration::from_millis(400)
            && matches!(
                kind,
                FaultKind::Kill | FaultKind::Partition | FaultKind::Pause
            ))
        .then_some((at, at + action.hold()));
        faults.push(PlannedFault {
            at,
            action,
            overlaps: false,
        });
        at += busy + Duration::from_millis(rng.gen_range(1_000..3_000));
    }
    faults
}

/// When `action` should strike during the open `window` instead of after it, the instant;
/// `None` to plan it on its own. Never nests a kill (a restart must not wait behind another
/// fault's healing), nests at most one fault per window, and always heals inside it.
fn nest(
    rng: &mut StdRng,
    spec: &ScheduleSpec,
    faults: &[PlannedFault],
    action: &FaultAction,
    window: Option<(Duration, Duration)>,
    first_round: usize,
) -> Option<Duration> {
    let (start, end) = window?;
    if !spec.overlap || action.kind() == FaultKind::Kill || faults.last()?.overlaps {
        return None;
    }
    let in_first_round = faults.len() < first_round;
    let wanted = if in_first_round {
        action.kind() == FaultKind::Reset
    } else {
        rng.gen_bool(0.5)
    };
    let room = end.checked_sub(start + Duration::from_millis(100))?;
    if !wanted || action.hold() + Duration::from_millis(100) > room {
        return None;
    }
    let slack = room - action.hold();
    let offset = Duration::from_millis(rng.gen_range(0..=slack.as_millis() as u64));
    Some(start + Duration::from_millis(50) + offset)
}

fn draw(rng: &mut StdRng, kind: FaultKind, spec: &ScheduleSpec) -> FaultAction {
    let ms =
        |rng: &mut StdRng, low: u64, high: u64| Duration::from_millis(rng.gen_range(low..high));
    match kind {
        // A cluster node stays down long enough, most of the time, for the controllers to
        // notice (their heartbeat timeout is 1 s) and fail its group over.
        FaultKind::Kill if spec.topology != Topology::Single => FaultAction::Kill {
            victim: draw_victim(rng, spec.topology, false),
            down: ms(rng, 300, 3_000),
        },
        FaultKind::Kill => FaultAction::Kill {
            victim: draw_victim(rng, spec.topology, false),
            down: ms(rng, 200, 1_500),
        },
        FaultKind::Pause => FaultAction::Pause {
            victim: draw_victim(rng, spec.topology, false),
            hold: ms(rng, 500, 3_000),
        },
        FaultKind::Partition => {
            let links = Link::of(spec.topology);
            let link = links[rng.gen_range(0..links.len())];
            let victim = if link == Link::ControllerController {
                draw_controller(rng)
            } else {
                draw_victim(rng, spec.topology, true)
            };
            let mode = match rng.gen_range(0..5) {
                0 => PartitionMode::Drop,
                1 => PartitionMode::Stall,
                2 => PartitionMode::Slow(ms(rng, 50, 400)),
                3 => PartitionMode::DropReplies,
                _ => PartitionMode::DropRequests,
            };
            FaultAction::Partition {
                victim,
                link,
                mode,
                hold: ms(rng, 500, 3_000),
            }
        }
        FaultKind::RestartConsumer => FaultAction::RestartConsumer {
            consumer: rng.gen_range(0..spec.consumers.max(1)),
        },
        FaultKind::Reset => FaultAction::Reset {
            back: ms(rng, 1_000, 5_000),
        },
    }
}

/// A node of `topology` (a broker only, with `brokers_only`): masters most often, since
/// their faults are the ones that move data.
fn draw_victim(rng: &mut StdRng, topology: Topology, brokers_only: bool) -> Victim {
    if topology == Topology::Single {
        return Victim::Standalone;
    }
    let group = rng.gen_range(0..topology.groups());
    let pick = rng.gen_range(0..topology.replicas());
    let roll = if brokers_only {
        rng.gen_range(0..5)
    } else {
        rng.gen_range(0..8)
    };
    match roll {
        0..=2 => Victim::Master { group },
        3 | 4 => Victim::Slave { group, pick },
        5 => Victim::Namesrv {
            index: rng.gen_range(0..topology.namesrvs()),
        },
        _ if topology.controllers() > 1 => draw_controller(rng),
        _ => Victim::ControllerLeader,
    }
}

fn draw_controller(rng: &mut StdRng) -> Victim {
    if rng.gen_bool(0.5) {
        Victim::ControllerLeader
    } else {
        Victim::ControllerFollower {
            pick: rng.gen_range(0..2),
        }
    }
}

/// Parses `--faults` (comma-separated kinds; empty entries ignored).
///
/// # Errors
/// [`UnknownFault`] naming the first entry that is no kind.
pub fn parse_kinds(text: &str) -> Result<Vec<FaultKind>, UnknownFault> {
    text.split(',')
        .filter(|part| !part.trim().is_empty())
        .map(str::parse)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(seed: u64, seconds: u64, topology: Topology, overlap: bool) -> ScheduleSpec {
        ScheduleSpec {
            seed,
            seconds,
            kinds: FaultKind::ALL.to_vec(),
            consumers: 2,
            topology,
            overlap,
        }
    }

    #[test]
    fn schedules_are_seeded_cover_every_kind_and_end_in_time() {
        let a = schedule(&spec(7, 40, Topology::Single, false));
        assert_eq!(a, schedule(&spec(7, 40, Topology::Single, false)));
        assert_ne!(a, schedule(&spec(8, 40, Topology::Single, false)));
        for kind in FaultKind::ALL {
            assert!(a.iter().any(|f| f.action.kind() == kind), "{kind} missing");
        }
        assert!(a.windows(2).all(|w| w[0].at + w[0].action.hold() < w[1].at));
        assert!(a
            .iter()
            .all(|f| f.at + f.action.hold() <= Duration::from_secs(40)));
        assert!(a.iter().all(|f| match f.action {
            FaultAction::RestartConsumer { consumer } => consumer < 2,
            FaultAction::Kill { victim, .. } | FaultAction::Pause { victim, .. } =>
                victim == Victim::Standalone,
            FaultAction::Partition { victim, link, .. } =>
                victim == Victim::Standalone && link == Link::ClientBroker,
            FaultAction::Reset { .. } => true,
        }));
    }

    #[test]
    fn overlapping_faults_nest_inside_the_previous_one_and_a_reset_meets_a_fault() {
        for seed in 0..40 {
            let plan = schedule(&spec(seed, 120, Topology::Ha, true));
            assert!(plan.iter().any(|f| f.overlaps), "seed {seed}: no overlap");
            for (i, fault) in plan.iter().enumerate() {
                if !fault.overlaps {
                    continue;
                }
                assert_ne!(fault.action.kind(), FaultKind::Kill, "seed {seed}");
                let outer = plan[..i].iter().rev().find(|f| !f.overlaps).unwrap();
                assert!(fault.at > outer.at, "seed {seed}: {fault}");
                assert!(
                    fault.at + fault.action.hold() < outer.at + outer.action.hold(),
                    "seed {seed}: {fault} heals after {outer}"
                );
            }
            let first_reset = plan
                .iter()
                .find(|f| f.action.kind() == FaultKind::Reset)
                .unwrap();
            let before = plan.iter().take_while(|f| *f != first_reset).last();
            if let Some(previous) = before {
                if matches!(
                    previous.action.kind(),
                    FaultKind::Partition | FaultKind::Pause
                ) && previous.action.hold() >= Duration::from_millis(600)
                {
                    assert!(first_reset.overlaps, "seed {seed}: {first_reset}");
                }
            }
        }
        let solo = schedule(&spec(3, 120, Topology::Ha, false));
        assert!(solo.iter().all(|f| !f.overlaps));
    }

    #[test]
    fn cluster_victims_and_links_fit_the_topology() {
        let mut victims = std::collections::BTreeSet::new();
        let mut links = std::collections::BTreeSet::new();
        for seed in 0..60 {
            for fault in schedule(&spec(seed, 120, Topology::Replicated, true)) {
                match fault.action {
                    FaultAction::Kill { victim, .. } | FaultAction::Pause { victim, .. } => {
                        assert!(!matches!(victim, Victim::ControllerFollower { .. }));
                        victims.insert(victim.to_string());
                    }
                    FaultAction::Partition { victim, link, .. } => {
                        assert!(victim.is_broker() && victim != Victim::Standalone);
                        assert_ne!(link, Link::ControllerController);
                        links.insert(link);
                    }
                    _ => {}
                }
            }
        }
        for expected in ["master of broker-0", "controller leader", "namesrv #0"] {
            assert!(victims.contains(expected), "{expected} never drawn");
        }
        assert!(victims.iter().any(|v| v.starts_with("slave")));
        assert_eq!(links.len(), 4, "{links:?}");
        let ha: Vec<_> = (0..60)
            .flat_map(|seed| schedule(&spec(seed, 120, Topology::Ha, true)))
            .collect();
        assert!(ha.iter().any(|f| matches!(
            f.action,
            FaultAction::Partition { link: Link::ControllerController, victim, .. }
                if victim.is_controller()
        )));
    }

    #[test]
    fn fault_lists_parse_and_reject_unknown_kinds() {
        assert_eq!(
            parse_kinds("kill,restart-consumer").unwrap(),
            vec![FaultKind::Kill, FaultKind::RestartConsumer]
        );
        assert_eq!(
            parse_kinds("kill,explode").unwrap_err(),
            UnknownFault("explode".into())
        );
        let none = ScheduleSpec {
            kinds: Vec::new(),
            ..spec(1, 40, Topology::Single, false)
        };
        assert!(schedule(&none).is_empty());
        let consumers_only = ScheduleSpec {
            kinds: vec![FaultKind::RestartConsumer],
            consumers: 0,
            ..spec(1, 40, Topology::Single, false)
        };
        assert!(schedule(&consumers_only).is_empty());
    }
}
