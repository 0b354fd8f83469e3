//! The master's judgement of a replica's Hello: same broker group, a slave's id, a version it
//! speaks, and a log that is a prefix of the master's (RocketMQ #3015: a "slave" ahead of
//! the master is refused, never streamed to). Pure over the [`LogPrefix`] seam, so the
//! simulation judges with the same code.

use ferromq_protocol::ha::{Hello, RefusalCode, Refused, HA_VERSION};
use ferromq_store::{LogSample, PrefixCheck};

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
}

impl LogPrefix for ferromq_store::MessageStore {
    fn check_prefix(&self, log_end: u64, samples: &[LogSample]) -> Result<PrefixCheck, String> {
        ferromq_store::MessageStore::check_prefix(self, log_end, samples).map_err(|e| e.to_string())
    }
}

/// Accepts `hello` (streaming starts at its log end) or says why not.
pub fn judge_hello(
    identity: &GroupIdentity,
    is_master: bool,
    hello: &Hello,
    log: &dyn LogPrefix,
) -> Result<(), Refused> {
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
        PrefixCheck::Prefix => Ok(()),
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

#[cfg(test)]
mod tests {
    use super::*;

    struct FixedLog(PrefixCheck);

    impl LogPrefix for FixedLog {
        fn check_prefix(&self, _: u64, _: &[LogSample]) -> Result<PrefixCheck, String> {
            Ok(self.0)
        }
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
        }
    }

    fn code(result: Result<(), Refused>) -> RefusalCode {
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
