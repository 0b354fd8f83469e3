//! Topic and group names: RocketMQ's rules, and the names reserved for the broker itself.
//!
//! [`validate`] is the one check every topic and group name passes before the broker or the
//! store uses it, and in particular before any file path is built from it (a ConsumeQueue
//! lives in `consumequeue/<topic>/<queueId>/`). The rules are RocketMQ's `TopicValidator`:
//! - characters `^[%|a-zA-Z0-9_-]+$` only, so a name can never hold `/`, `.`, a NUL or any
//!   other byte a path could be steered with;
//! - a topic has at most [`TOPIC_NAME_MAX_LEN`] (127) characters, except a group's retry or
//!   dead-letter topic (`%RETRY%<group>`, `%DLQ%<group>`), which has at most
//!   [`RETRY_OR_DLQ_TOPIC_MAX_LEN`] (255): the longest name a file system directory may carry;
//! - a group has at most [`GROUP_NAME_MAX_LEN`] (255) characters, the Java client's
//!   `Validators.CHARACTER_MAX_LENGTH` (RocketMQ 5's broker auto-creates groups of at most 120
//!   only; ferromq accepts what clients accept, and refuses a retry topic that would not fit).
//!
//! The reserved names are those only the broker may write or move: RocketMQ's system topics
//! clients may not send to (`TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET`), the delay scheduler's
//! topic, the transaction topics, ferromq's offsets topic, the auto-create template, and the
//! groups the broker commits for itself ([`SCHEDULE_GROUP`], RocketMQ's `CID_RMQ_SYS_`
//! groups). The message trace topic and `BenchmarkTest` are RocketMQ system topics too, but
//! real clients send to them, so they are not reserved.

/// Longest topic name (RocketMQ `TopicValidator.TOPIC_MAX_LENGTH`); the CommitLog record's
/// one-byte topic length (magic V1) holds it.
pub const TOPIC_NAME_MAX_LEN: usize = 127;
/// Longest retry or dead-letter topic name (RocketMQ `RETRY_OR_DLQ_TOPIC_MAX_LENGTH`), and the
/// longest directory name (`NAME_MAX`) of common file systems.
pub const RETRY_OR_DLQ_TOPIC_MAX_LEN: usize = 255;
/// Longest group name (RocketMQ client `Validators.CHARACTER_MAX_LENGTH`).
pub const GROUP_NAME_MAX_LEN: usize = 255;
/// Prefix of a group's retry topic.
pub const RETRY_TOPIC_PREFIX: &str = "%RETRY%";
/// Prefix of a group's dead-letter topic.
pub const DLQ_TOPIC_PREFIX: &str = "%DLQ%";

/// The delay scheduler's topic: one queue per delay level.
pub const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";
/// The group whose offsets record the delay scheduler's progress.
pub const SCHEDULE_GROUP: &str = "%SCHEDULE%";
/// Where the scheduler puts a delayed message whose target is invalid when it fires.
pub const SCHEDULE_DLQ_TOPIC: &str = "RMQ_SYS_FERROMQ_SCHEDULE_DLQ";
/// The system topic of consumer offset records (see `ferromq_store::offsets`).
pub const OFFSETS_TOPIC: &str = "RMQ_SYS_FERROMQ_OFFSETS";
/// The system topic of catalog records: a master's topic and subscription-group configs,
/// replicated to its slaves with the log (see `ferromq_broker::replication::catalog_log`).
pub const CATALOG_TOPIC: &str = "RMQ_SYS_FERROMQ_CATALOG";
/// Half (prepared) messages of transactions.
pub const TRANS_HALF_TOPIC: &str = "RMQ_SYS_TRANS_HALF_TOPIC";
/// Commit/rollback markers of half messages.
pub const TRANS_OP_HALF_TOPIC: &str = "RMQ_SYS_TRANS_OP_HALF_TOPIC";
/// The message trace topic: a RocketMQ system topic that trace-enabled clients send to.
pub const TRACE_TOPIC: &str = "RMQ_SYS_TRACE_TOPIC";
/// The auto-create template topic.
pub const AUTO_CREATE_TOPIC: &str = "TBW102";

/// Topics only the broker writes, moves or deletes (see the module header).
const RESERVED_TOPICS: &[&str] = &[
    SCHEDULE_TOPIC,
    "SCHEDULE_TOPIC_XXXX_V2",
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT",
    "CHECKPOINT_TOPIC",
    OFFSETS_TOPIC,
    SCHEDULE_DLQ_TOPIC,
    AUTO_CREATE_TOPIC,
];
/// RocketMQ's system topic prefix (`TopicValidator.SYSTEM_TOPIC_PREFIX`).
const SYSTEM_TOPIC_PREFIX: &str = "rmq_sys_";
/// Prefix of RocketMQ's and ferromq's named system topics (every one but [`TRACE_TOPIC`] is
/// broker-only).
const SYSTEM_TOPIC_PREFIX_UPPER: &str = "RMQ_SYS_";
/// RocketMQ's system consumer group prefix (`MixAll.CID_RMQ_SYS_PREFIX`).
const SYSTEM_GROUP_PREFIX: &str = "CID_RMQ_SYS_";

/// What a name names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    /// A topic.
    Topic,
    /// A consumer (or producer) group.
    Group,
}

impl NameKind {
    fn as_str(self) -> &'static str {
        match self {
            NameKind::Topic => "topic",
            NameKind::Group => "group",
        }
    }
}

/// The rule a name breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// The name is empty.
    Empty,
    /// The name is longer than the kind allows.
    TooLong {
        /// Characters in the name.
        len: usize,
        /// Most allowed.
        max: usize,
    },
    /// A character outside `[%|a-zA-Z0-9_-]`, at this byte position.
    IllegalCharacter {
        /// Byte position of the first illegal character.
        at: usize,
    },
}

impl std::fmt::Display for NameRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NameRule::Empty => write!(f, "it is empty"),
            NameRule::TooLong { len, max } => {
                write!(f, "it is {len} characters long, at most {max} are allowed")
            }
            NameRule::IllegalCharacter { at } => write!(
                f,
                "it has an illegal character at byte {at}; only ^[%|a-zA-Z0-9_-]+$ is allowed"
            ),
        }
    }
}

/// Longest prefix of an invalid name an error message quotes.
const QUOTED_NAME_MAX: usize = 64;

/// A topic or group name that breaks RocketMQ's rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {} name {quoted}: {rule}", kind.as_str())]
pub struct NameError {
    /// Topic or group.
    pub kind: NameKind,
    /// The rule broken.
    pub rule: NameRule,
    /// The start of the name, escaped (no control bytes) and cut at [`QUOTED_NAME_MAX`]
    /// characters, so a hostile name cannot flood a log line or a reply remark.
    pub quoted: String,
}

/// Checks a topic or group name against RocketMQ's rules (see the module header).
///
/// # Errors
/// [`NameError`] naming the rule broken.
pub fn validate(kind: NameKind, name: &str) -> Result<(), NameError> {
    let fail = |rule| {
        Err(NameError {
            kind,
            rule,
            quoted: quote(name),
        })
    };
    if name.is_empty() {
        return fail(NameRule::Empty);
    }
    if let Some(at) = name
        .bytes()
        .position(|b| !(b.is_ascii_alphanumeric() || b"%|_-".contains(&b)))
    {
        return fail(NameRule::IllegalCharacter { at });
    }
    let max = match kind {
        NameKind::Group => GROUP_NAME_MAX_LEN,
        NameKind::Topic if is_retry_or_dlq_topic(name) => RETRY_OR_DLQ_TOPIC_MAX_LEN,
        NameKind::Topic => TOPIC_NAME_MAX_LEN,
    };
    if name.len() > max {
        return fail(NameRule::TooLong {
            len: name.len(),
            max,
        });
    }
    Ok(())
}

/// [`validate`] for a topic.
pub fn validate_topic(name: &str) -> Result<(), NameError> {
    validate(NameKind::Topic, name)
}

/// [`validate`] for a group.
pub fn validate_group(name: &str) -> Result<(), NameError> {
    validate(NameKind::Group, name)
}

/// Whether `topic` is a group's retry or dead-letter topic.
pub fn is_retry_or_dlq_topic(topic: &str) -> bool {
    topic.starts_with(RETRY_TOPIC_PREFIX) || topic.starts_with(DLQ_TOPIC_PREFIX)
}

/// Whether only the broker may write, commit, reset or delete `topic` (see the module header).
pub fn is_reserved_topic(topic: &str) -> bool {
    RESERVED_TOPICS.contains(&topic)
        || topic.starts_with(SYSTEM_TOPIC_PREFIX)
        || (topic.starts_with(SYSTEM_TOPIC_PREFIX_UPPER) && topic != TRACE_TOPIC)
}

/// Whether `group` is one the broker commits for itself, which clients and administrators may
/// not commit, reset, clone or delete.
pub fn is_internal_group(group: &str) -> bool {
    group == SCHEDULE_GROUP || group.starts_with(SYSTEM_GROUP_PREFIX)
}

/// The start of `name`, escaped and cut, for messages.
fn quote(name: &str) -> String {
    let mut quoted: String = name.chars().take(QUOTED_NAME_MAX).collect();
    if quoted.len() < name.len() {
        quoted.push_str("...");
    }
    format!("{quoted:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rocketmq_character_set_and_lengths() {
        for ok in ["T", "Orders_v2-eu|x", "%RETRY%G", "a%b"] {
            assert_eq!(validate_topic(ok), Ok(()), "{ok}");
            assert_eq!(validate_group(ok), Ok(()), "{ok}");
        }
        assert_eq!(validate_topic(&"t".repeat(127)), Ok(()));
        let long = validate_topic(&"t".repeat(128)).unwrap_err();
        assert_eq!(long.rule, NameRule::TooLong { len: 128, max: 127 });
        assert_eq!(validate_group(&"g".repeat(255)), Ok(()));
        assert!(validate_group(&"g".repeat(256)).is_err());
        let retry = format!("%RETRY%{}", "g".repeat(248));
        assert_eq!(validate_topic(&retry), Ok(()));
        assert!(validate_topic(&format!("{retry}g")).is_err());
        assert!(validate_topic(&format!("%DLQ%{}", "g".repeat(200))).is_ok());
        assert_eq!(validate_topic("").unwrap_err().rule, NameRule::Empty);
    }

    #[test]
    fn path_characters_are_refused_and_quoted_safely() {
        for bad in ["../../x", "a/b", ".", "a b", "x\u{0}", "é", "a\u{1}b\u{2}"] {
            let error = validate_topic(bad).unwrap_err();
            assert!(
                matches!(error.rule, NameRule::IllegalCharacter { .. }),
                "{bad:?}"
            );
            let text = error.to_string();
            assert!(!text.contains('\u{1}') && !text.contains('\u{0}'), "{text}");
        }
        let flood = validate_topic(&"x/".repeat(10_000))
            .unwrap_err()
            .to_string();
        assert!(flood.len() < 200, "{}", flood.len());
    }

    #[test]
    fn reserved_topics_and_internal_groups() {
        for reserved in [
            SCHEDULE_TOPIC,
            OFFSETS_TOPIC,
            TRANS_HALF_TOPIC,
            TRANS_OP_HALF_TOPIC,
            "rmq_sys_wheel_timer",
            "RMQ_SYS_ANYTHING",
            AUTO_CREATE_TOPIC,
        ] {
            assert!(is_reserved_topic(reserved), "{reserved}");
            assert_eq!(validate_topic(reserved), Ok(()));
        }
        for open in [TRACE_TOPIC, "BenchmarkTest", "%RETRY%G", "%DLQ%G", "Orders"] {
            assert!(!is_reserved_topic(open), "{open}");
        }
        assert!(is_internal_group(SCHEDULE_GROUP));
        assert!(is_internal_group("CID_RMQ_SYS_TRANS"));
        assert!(!is_internal_group("G"));
        assert!(!is_internal_group("TOOLS_CONSUMER"));
    }
}
