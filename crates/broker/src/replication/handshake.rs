//! The master's judgement of a replica's Hello: same broker group, a slave's id, a version it
//! speaks, then where the two logs stop being the same log (invariant 6):
//!
//! 1. From both sides' epoch entries, the last common point ([`ferromq_store::shared_term`]).
//!    A replica whose log goes past it is told to cut there ([`Verdict::Truncate`]) and say
//!    Hello again — unless the shared term is the master's current one, in which case the
//!    replica is ahead of the master in the master's own term (the master lost its tail):
//!    that is refused, never streamed to and never cut (RocketMQ #3015).
//! 2. A replica at or behind the common point is streamed to from its end, after the
//!    sampled-CRC prefix check as a safety net: epochs that say "common" over bytes that
//!    differ are refused (`Diverged`, with the first differing offset), as before epochs.
//!
//! Pure over the [`LogPrefix`] seam, so the simulation judges with the same code.

use ferromq_protocol::ha::{Hello, RefusalCode, Refused, Truncate, HA_EPOCHS_MAX, HA_VERSION};
use ferromq_store::{EpochEntry, LogSample, PrefixCheck};

/// Who the master is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupIdentity {
    /// `brokerClusterName`.
    pub cluster: String,
    /// `brokerName`.
    pub broker_name: String,
    /// `mappedFileSizeCommitLog`: a slave must use the same, or records cannot sit at the
    /// master's offsets.
    pub segment_size: u64,
}

/// How the master compares a replica's tail with its own log (the store, or a simulated log).
pub trait LogPrefix {
    /// See `MessageStore::check_prefix`.
    fn check_prefix(&self, log_end: u64, samples: &[LogSample]) -> Result<PrefixCheck, String>;
    /// The master's epoch entries, oldest first.
    fn epochs(&self) -> Vec<EpochEntry>;
    /// The master's log end (what it can stream).
    fn end(&self) -> u64;
}

impl LogPrefix for ferromq_store::MessageStore {
    fn check_prefix(&self, log_end: u64, samples: &[LogSample]) -> Result<PrefixCheck, String> {
        ferromq_store::MessageStore::check_prefix(self, log_end, samples).map_err(|e| e.to_string())
    }

    fn epochs(&self) -> Vec<EpochEntry> {
        ferromq_store::MessageStore::epochs(self)
    }

    fn end(&self) -> u64 {
        self.committed_end()
    }
}

/// What the master does with an acceptable Hello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Stream from the replica's log end.
    Stream,
    /// The replica cuts its log at `to` and says Hello again.
    Truncate(Truncate),
}

/// The protocol's epoch entries as the store's.
pub fn store_epochs(entries: &[ferromq_protocol::ha::EpochEntry]) -> Vec<EpochEntry> {
    entries
        .iter()
        .map(|e| EpochEntry {
            epoch: e.epoch,
            start: e.start,
        })
        .collect()
}

/// The store's epoch entries as the protocol's: the newest [`HA_EPOCHS_MAX`].
pub fn wire_epochs(entries: &[EpochEntry]) -> Vec<ferromq_protocol::ha::EpochEntry> {
    let skip = entries.len().saturating_sub(HA_EPOCHS_MAX);
    entries[skip..]
        .iter()
        .map(|e| ferromq_protocol::ha::EpochEntry {
            epoch: e.epoch,
            start: e.start,
        })
        .collect()
}

/// Judges `hello`: stream from its log end, tell it to truncate, or refuse (see the module
/// documentation for the order of the checks).
pub fn judge_hello(
    identity: &GroupIdentity,
    is_master: bool,
    hello: &Hello,
    log: &dyn LogPrefix,
) -> Result<Verdict, Refused> {
    let refuse = |code, differs_at, reason: String| {
        Err(Refused {
            code,
            differs_at,
            reason,
        })
    };
    if hello.version != HA_VERSION {
        return refuse(
            RefusalCode::BadVersion,
            None,
            format!(
                "HA version {} (this master speaks {HA_VERSION})",
                hello.version
            ),
        );
    }
    if !is_master {
        return refuse(
            RefusalCode::NotMaster,
            None,
            "this broker is not a master now".into(),
        );
    }
    if hello.cluster != identity.cluster || hello.broker_name != identity.broker_name {
        return refuse(
            RefusalCode::WrongGroup,
            None,
            format!(
                "replica of {}/{}, but this master is {}/{}",
                hello.cluster, hello.broker_name, identity.cluster, identity.broker_name
            ),
        );
    }
    if hello.broker_id == 0 {
        return refuse(
            RefusalCode::BadHello,
            None,
            "broker id 0 is the master's; a slave has brokerId above 0".into(),
        );
    }
    if hello.segment_size != identity.segment_size {
        return refuse(
            RefusalCode::BadHello,
            None,
            format!(
                "mappedFileSizeCommitLog differs: the slave's is {}, the master's {}; a slave \
                 holds the master's records at the master's offsets, so both must use the same",
                hello.segment_size, identity.segment_size
            ),
        );
    }
    if hello.log_end > 0 && hello.samples.is_empty() {
        return refuse(
            RefusalCode::BadHello,
            None,
            format!("log ends at {} but no record was described", hello.log_end),
        );
    }
    if let Some(verdict) = judge_epochs(hello, log)? {
        return Ok(verdict);
    }
    let samples: Vec<LogSample> = hello
        .samples
        .iter()
        .map(|s| LogSample {
            offset: s.offset,
            size: s.size,
            crc: s.crc,
        })
        .collect();
    let check = log
        .check_prefix(hello.log_end, &samples)
        .map_err(|reason| Refused {
            code: RefusalCode::Diverged,
            differs_at: None,
            reason: format!("the master could not read its log to compare: {reason}"),
        })?;
    match check {
        PrefixCheck::Prefix => Ok(Verdict::Stream),
        PrefixCheck::Ahead { end } => refuse(
            RefusalCode::AheadOfMaster,
            None,
            format!(
                "the replica's log ends at {}, past the master's end {end}",
                hello.log_end
            ),
        ),
        PrefixCheck::DiffersAt(offset) => refuse(
            RefusalCode::Diverged,
            Some(offset),
            format!(
                "the replica's record at CommitLog offset {offset} differs from the master's: \
                 its log is not a prefix of the master's (truncation arrives with failover \
                 epochs)"
            ),
        ),
        PrefixCheck::Purged { min } => refuse(
            RefusalCode::Diverged,
            None,
            format!(
                "the replica's log ends at {}, below the master's oldest kept offset {min}",
                hello.log_end
            ),
        ),
    }
}

/// The epoch step: `Some(Truncate)` for a replica past the last common point, `None` to go on
/// to the prefix check, or a refusal.
fn judge_epochs(hello: &Hello, log: &dyn LogPrefix) -> Result<Option<Verdict>, Refused> {
    let replica = store_epochs(&hello.epochs);
    if let Err(reason) = ferromq_store::epoch::validate(&replica) {
        return Err(Refused {
            code: RefusalCode::BadHello,
            differs_at: None,
            reason: format!("the replica's epoch entries are invalid: {reason}"),
        });
    }
    let (master, master_end) = (log.epochs(), log.end());
    let shared = ferromq_store::shared_term(&replica, hello.log_end, &master, master_end);
    let Some(shared) = shared else {
        if hello.log_end == 0 {
            return Ok(None);
        }
        if hello.epochs.len() >= HA_EPOCHS_MAX {
            return Err(Refused {
                code: RefusalCode::Diverged,
                differs_at: None,
                reason: format!(
                    "none of the replica's newest {HA_EPOCHS_MAX} epoch entries is the \
                     master's; rebuild the replica"
                ),
            });
        }
        return Ok(Some(Verdict::Truncate(Truncate {
            to: 0,
            reason: format!(
                "no epoch of the replica (last {}) is one of the master's (last {}): the logs \
                 share nothing",
                ferromq_store::epoch::last_epoch(&replica),
                ferromq_store::epoch::last_epoch(&master)
            ),
        })));
    };
    if hello.log_end <= shared.common {
        return Ok(None);
    }
    if shared.masters_current {
        return Err(Refused {
            code: RefusalCode::AheadOfMaster,
            differs_at: None,
            reason: format!(
                "the replica's log ends at {}, past the master's end {master_end} in the \
                 master's current epoch {}",
                hello.log_end, shared.epoch
            ),
        });
    }
    Ok(Some(Verdict::Truncate(Truncate {
        to: shared.common,
        reason: format!(
            "the replica's log ends at {}, but it shares the master's log only up to {} \
             (epoch {}, last common point); the master is at epoch {}",
            hello.log_end,
            shared.common,
            shared.epoch,
            ferromq_store::epoch::last_epoch(&master)
        ),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct FixedLog(PrefixCheck);

    impl LogPrefix for FixedLog {
        fn check_prefix(&self, _: u64, _: &[LogSample]) -> Result<PrefixCheck, String> {
            Ok(self.0)
        }

        fn epochs(&self) -> Vec<EpochEntry> {
            Vec::new()
        }

        fn end(&self) -> u64 {
            u64::MAX
        }
    }

    /// A master log with epochs and an end; its bytes match any replica's samples.
    struct EpochLog(Vec<EpochEntry>, u64);

    impl LogPrefix for EpochLog {
        fn check_prefix(&self, log_end: u64, _: &[LogSample]) -> Result<PrefixCheck, String> {
            Ok(if log_end > self.1 {
                PrefixCheck::Ahead { end: self.1 }
            } else {
                PrefixCheck::Prefix
            })
        }

        fn epochs(&self) -> Vec<EpochEntry> {
            self.0.clone()
        }

        fn end(&self) -> u64 {
            self.1
        }
    }

    fn ep(epoch: u64, start: u64) -> ferromq_protocol::ha::EpochEntry {
        ferromq_protocol::ha::EpochEntry { epoch, start }
    }

    fn se(epoch: u64, start: u64) -> EpochEntry {
        EpochEntry { epoch, start }
    }

    fn with(log_end: u64, epochs: Vec<ferromq_protocol::ha::EpochEntry>) -> Hello {
        Hello {
            log_end,
            epochs,
            samples: vec![ferromq_protocol::ha::RecordSample {
                offset: 0,
                size: 1,
                crc: 0,
            }],
            ..hello()
        }
    }

    #[test]
    fn epochs_decide_truncate_stream_or_refuse() {
        let id = identity();
        // The old master (epoch 1, end 150) follows the new one (epoch 2 from 100).
        let master = EpochLog(vec![se(1, 0), se(2, 100)], 300);
        match judge_hello(&id, true, &with(150, vec![ep(1, 0)]), &master) {
            Ok(Verdict::Truncate(t)) => assert_eq!(t.to, 100, "{}", t.reason),
            other => panic!("expected a truncation, got {other:?}"),
        }
        // Even when the new master has written nothing yet.
        let fresh = EpochLog(vec![se(1, 0), se(2, 100)], 100);
        match judge_hello(&id, true, &with(150, vec![ep(1, 0)]), &fresh) {
            Ok(Verdict::Truncate(t)) => assert_eq!(t.to, 100),
            other => panic!("expected a truncation, got {other:?}"),
        }
        // Behind the common point: stream.
        assert_eq!(
            judge_hello(&id, true, &with(80, vec![ep(1, 0)]), &master),
            Ok(Verdict::Stream)
        );
        // Already on the new term: stream.
        assert_eq!(
            judge_hello(&id, true, &with(250, vec![ep(1, 0), ep(2, 100)]), &master),
            Ok(Verdict::Stream)
        );
        // A replica with its own newer epoch the master never had: cut back to its start.
        match judge_hello(&id, true, &with(250, vec![ep(1, 0), ep(3, 120)]), &master) {
            Ok(Verdict::Truncate(t)) => assert_eq!(t.to, 100),
            other => panic!("expected a truncation, got {other:?}"),
        }
        // Ahead of the master in the master's own current term: refused, never cut.
        let refused = judge_hello(&id, true, &with(350, vec![ep(1, 0), ep(2, 100)]), &master)
            .expect_err("ahead");
        assert_eq!(refused.code, RefusalCode::AheadOfMaster);
        // Nothing shared: cut everything.
        let other = EpochLog(vec![se(5, 0)], 300);
        match judge_hello(&id, true, &with(10, vec![ep(4, 0)]), &other) {
            Ok(Verdict::Truncate(t)) => assert_eq!(t.to, 0),
            other => panic!("expected a truncation, got {other:?}"),
        }
        // An empty replica streams whatever the master's epochs.
        assert_eq!(
            judge_hello(&id, true, &hello(), &other),
            Ok(Verdict::Stream)
        );
        // Invalid entries are a bad Hello.
        let refused =
            judge_hello(&id, true, &with(10, vec![ep(2, 0), ep(1, 5)]), &master).expect_err("bad");
        assert_eq!(refused.code, RefusalCode::BadHello);
    }

    #[test]
    fn epochs_common_but_bytes_differ_is_refused() {
        struct Differs;
        impl LogPrefix for Differs {
            fn check_prefix(&self, _: u64, _: &[LogSample]) -> Result<PrefixCheck, String> {
                Ok(PrefixCheck::DiffersAt(40))
            }
            fn epochs(&self) -> Vec<EpochEntry> {
                vec![EpochEntry { epoch: 1, start: 0 }]
            }
            fn end(&self) -> u64 {
                500
            }
        }
        let refused = judge_hello(&identity(), true, &with(100, vec![ep(1, 0)]), &Differs)
            .expect_err("differs");
        assert_eq!(
            (refused.code, refused.differs_at),
            (RefusalCode::Diverged, Some(40))
        );
    }

    fn identity() -> GroupIdentity {
        GroupIdentity {
            cluster: "C".into(),
            broker_name: "b".into(),
            segment_size: 1024,
        }
    }

    fn hello() -> Hello {
        Hello {
            version: HA_VERSION,
            cluster: "C".into(),
            broker_name: "b".into(),
            broker_id: 1,
            log_end: 0,
            epoch: 0,
            segment_size: 1024,
            samples: Vec::new(),
            epochs: Vec::new(),
        }
    }

    fn code(result: Result<Verdict, Refused>) -> RefusalCode {
        result.expect_err("refused").code
    }

    #[test]
    fn each_bad_hello_gets_its_refusal() {
        let ok = FixedLog(PrefixCheck::Prefix);
        assert!(judge_hello(&identity(), true, &hello(), &ok).is_ok());
        let other_group = Hello {
            broker_name: "x".into(),
            ..hello()
        };
        assert_eq!(
            code(judge_hello(&identity(), true, &other_group, &ok)),
            RefusalCode::WrongGroup
        );
        let master_id = Hello {
            broker_id: 0,
            ..hello()
        };
        assert_eq!(
            code(judge_hello(&identity(), true, &master_id, &ok)),
            RefusalCode::BadHello
        );
        assert_eq!(
            code(judge_hello(&identity(), false, &hello(), &ok)),
            RefusalCode::NotMaster
        );
        let future = Hello {
            version: 9,
            ..hello()
        };
        assert_eq!(
            code(judge_hello(&identity(), true, &future, &ok)),
            RefusalCode::BadVersion
        );
        let ahead = FixedLog(PrefixCheck::Ahead { end: 5 });
        assert_eq!(
            code(judge_hello(&identity(), true, &hello(), &ahead)),
            RefusalCode::AheadOfMaster
        );
        let diverged = judge_hello(
            &identity(),
            true,
            &hello(),
            &FixedLog(PrefixCheck::DiffersAt(77)),
        )
        .expect_err("diverged");
        assert_eq!(diverged.code, RefusalCode::Diverged);
        assert_eq!(diverged.differs_at, Some(77));
        assert!(diverged.reason.contains("77"), "{}", diverged.reason);
        let other_segments = Hello {
            segment_size: 2048,
            ..hello()
        };
        let refused = judge_hello(&identity(), true, &other_segments, &ok).expect_err("segments");
        assert_eq!(refused.code, RefusalCode::BadHello);
        assert!(
            refused.reason.contains("mappedFileSizeCommitLog"),
            "{}",
            refused.reason
        );
        let no_samples = Hello {
            log_end: 10,
            ..hello()
        };
        assert_eq!(
            code(judge_hello(&identity(), true, &no_samples, &ok)),
            RefusalCode::BadHello
        );
    }
}
