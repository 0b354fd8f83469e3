//! Permissions of ACL 1.0: `DENY`, `PUB`, `SUB`, `PUB|SUB`, as `plain_acl.yml` writes them.

use crate::AccountsError;

/// What an account may do with a topic or a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Perm(u8);

impl Perm {
    /// Nothing: overrides any other bit, as in RocketMQ.
    pub const DENY: Perm = Perm(1);
    /// Publish (send).
    pub const PUB: Perm = Perm(2);
    /// Subscribe (pull, commit, query offsets).
    pub const SUB: Perm = Perm(4);
    /// Publish and subscribe.
    pub const ANY: Perm = Perm(2 | 4);

    /// Whether holding `self` grants `needed` (a single PUB or SUB): a DENY grants nothing.
    pub fn grants(self, needed: Perm) -> bool {
        debug_assert!(needed == Perm::PUB || needed == Perm::SUB);
        self.0 & Perm::DENY.0 == 0 && self.0 & needed.0 == needed.0
    }

    /// The name used in remarks and files.
    pub fn name(self) -> &'static str {
        match self {
            Perm::PUB => "PUB",
            Perm::SUB => "SUB",
            Perm::ANY => "PUB|SUB",
            _ => "DENY",
        }
    }

    /// Parses `DENY`, `PUB`, `SUB`, `PUB|SUB` or `SUB|PUB` (surrounding spaces ignored).
    /// RocketMQ reads anything else as DENY; ferromq refuses the file instead, so a typo
    /// never silently takes a permission away (or is mistaken for one).
    pub fn parse(text: &str, what: &str) -> Result<Perm, AccountsError> {
        match text.trim() {
            "DENY" => Ok(Perm::DENY),
            "PUB" => Ok(Perm::PUB),
            "SUB" => Ok(Perm::SUB),
            "PUB|SUB" | "SUB|PUB" => Ok(Perm::ANY),
            other => Err(AccountsError::Invalid(format!(
                "{what}: permission {other:?} is not one of DENY, PUB, SUB, PUB|SUB"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deny_grants_nothing_and_any_grants_both() {
        assert!(!Perm::DENY.grants(Perm::PUB));
        assert!(!Perm::DENY.grants(Perm::SUB));
        assert!(Perm::ANY.grants(Perm::PUB) && Perm::ANY.grants(Perm::SUB));
        assert!(Perm::PUB.grants(Perm::PUB) && !Perm::PUB.grants(Perm::SUB));
        assert!(Perm::SUB.grants(Perm::SUB) && !Perm::SUB.grants(Perm::PUB));
    }

    #[test]
    fn parse_accepts_rocketmq_spellings_only() {
        assert_eq!(Perm::parse(" SUB|PUB ", "x").unwrap(), Perm::ANY);
        assert_eq!(Perm::parse("DENY", "x").unwrap(), Perm::DENY);
        let error = Perm::parse("PUBB", "topicPerms of ak")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("PUBB") && error.contains("topicPerms of ak"),
            "{error}"
        );
    }
}
