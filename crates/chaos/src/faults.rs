//! The fault schedule of a run: which fault, when, for how long — drawn from the run's seed.
//!
//! Faults are injected one at a time (inject, hold, heal, pause before the next), so every
//! fault's effect and recovery can be told apart in the history. The first round injects
//! every requested kind once, in a seeded order, so a run long enough for one round exercises
//! each kind; later faults are drawn at random among the requested kinds. The same seed,
//! duration, kinds and consumer count always give the same schedule.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

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
    /// Requests forwarded, replies discarded.
    DropReplies,
}

/// One planned fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedFault {
    /// When to inject it, from the start of the run.
    pub at: Duration,
    /// What.
    pub action: FaultAction,
}

/// A planned fault with its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultAction {
    /// kill -9, then restart after `down`.
    Kill {
        /// Time between the kill and the restart.
        down: Duration,
    },
    /// SIGSTOP for `hold`, then SIGCONT.
    Pause {
        /// How long the process stays stopped.
        hold: Duration,
    },
    /// The proxy in `mode` for `hold`, then healed.
    Partition {
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
            FaultAction::Kill { down } => *down,
            FaultAction::Pause { hold } | FaultAction::Partition { hold, .. } => *hold,
            FaultAction::RestartConsumer { .. } | FaultAction::Reset { .. } => Duration::ZERO,
        }
    }
}

impl fmt::Display for PlannedFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = self.at.as_secs_f64();
        match &self.action {
            FaultAction::Kill { down } => {
                write!(f, "{at:7.2}s kill -9 broker, restart after {down:?}")
            }
            FaultAction::Pause { hold } => write!(f, "{at:7.2}s SIGSTOP broker for {hold:?}"),
            FaultAction::Partition { mode, hold } => {
                write!(f, "{at:7.2}s partition ({mode:?}) for {hold:?}")
            }
            FaultAction::RestartConsumer { consumer } => {
                write!(f, "{at:7.2}s restart consumer {consumer}")
            }
            FaultAction::Reset { back } => {
                write!(f, "{at:7.2}s resetOffsetByTime to {back:?} ago")
            }
        }
    }
}

/// Time before the first fault (producers and consumers settle).
pub const WARM_UP: Duration = Duration::from_secs(3);

/// Draws the schedule of a `seconds`-long fault phase. No fault is planned to be still active
/// at the end of the phase.
pub fn schedule(seed: u64, seconds: u64, kinds: &[FaultKind], consumers: u32) -> Vec<PlannedFault> {
    let mut kinds: Vec<FaultKind> = kinds.to_vec();
    kinds.sort();
    kinds.dedup();
    if consumers == 0 {
        kinds.retain(|k| *k != FaultKind::RestartConsumer);
    }
    let mut faults = Vec::new();
    if kinds.is_empty() {
        return faults;
    }
    // Salted so the schedule does not share its stream with anything else drawn from the seed.
    let mut rng = StdRng::seed_from_u64(seed ^ 0x6661_756c_7473);
    let end = Duration::from_secs(seconds);
    let mut first_round = kinds.clone();
    first_round.shuffle(&mut rng);
    let mut at = WARM_UP;
    loop {
        let kind = if faults.len() < first_round.len() {
            first_round[faults.len()]
        } else {
            kinds[rng.gen_range(0..kinds.len())]
        };
        let action = draw(&mut rng, kind, consumers);
        // Kills also spend a few seconds on recovery.
        let busy = action.hold()
            + match kind {
                FaultKind::Kill => Duration::from_secs(2),
                _ => Duration::from_millis(500),
            };
        if at + busy > end {
            break;
        }
        faults.push(PlannedFault { at, action });
        at += busy + Duration::from_millis(rng.gen_range(1_000..3_000));
    }
    faults
}

fn draw(rng: &mut StdRng, kind: FaultKind, consumers: u32) -> FaultAction {
    let ms =
        |rng: &mut StdRng, low: u64, high: u64| Duration::from_millis(rng.gen_range(low..high));
    match kind {
        FaultKind::Kill => FaultAction::Kill {
            down: ms(rng, 200, 1_500),
        },
        FaultKind::Pause => FaultAction::Pause {
            hold: ms(rng, 500, 3_000),
        },
        FaultKind::Partition => {
            let mode = match rng.gen_range(0..4) {
                0 => PartitionMode::Drop,
                1 => PartitionMode::Stall,
                2 => PartitionMode::Slow(ms(rng, 50, 400)),
                _ => PartitionMode::DropReplies,
            };
            FaultAction::Partition {
                mode,
                hold: ms(rng, 500, 3_000),
            }
        }
        FaultKind::RestartConsumer => FaultAction::RestartConsumer {
            consumer: rng.gen_range(0..consumers.max(1)),
        },
        FaultKind::Reset => FaultAction::Reset {
            back: ms(rng, 1_000, 5_000),
        },
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

    #[test]
    fn schedules_are_seeded_cover_every_kind_and_end_in_time() {
        let a = schedule(7, 40, &FaultKind::ALL, 2);
        assert_eq!(a, schedule(7, 40, &FaultKind::ALL, 2));
        assert_ne!(a, schedule(8, 40, &FaultKind::ALL, 2));
        for kind in FaultKind::ALL {
            assert!(a.iter().any(|f| f.action.kind() == kind), "{kind} missing");
        }
        assert!(a.windows(2).all(|w| w[0].at + w[0].action.hold() < w[1].at));
        assert!(a
            .iter()
            .all(|f| f.at + f.action.hold() <= Duration::from_secs(40)));
        assert!(a.iter().all(|f| match f.action {
            FaultAction::RestartConsumer { consumer } => consumer < 2,
            _ => true,
        }));
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
        assert!(schedule(1, 40, &[], 2).is_empty());
        assert!(schedule(1, 40, &[FaultKind::RestartConsumer], 0).is_empty());
    }
}
