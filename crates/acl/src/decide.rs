//! The decision for one request: who signed it, and may that account do what it asks.
//!
//! Order, as RocketMQ's `PlainPermissionManager`: a global allow-listed address passes; a
//! request without an access key is refused; an unknown access key is refused; the account's
//! own allow-listed address passes; the signature must verify under the account's secret;
//! an administrators' request needs an admin account; then every named topic and group needs
//! its permission (the per-resource one if listed, else the account's default). An admin
//! account with no per-resource permissions at all may use every topic and group.

use std::net::IpAddr;

use ferromq_protocol::remoting::acl;

use crate::accounts::{Account, Accounts};
use crate::perm::Perm;

/// A topic or a group a request names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource<'a> {
    /// A topic.
    Topic(&'a str),
    /// A consumer or producer group.
    Group(&'a str),
}

/// What a request needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Needs<'a> {
    /// An administrators' request (topic and group changes, resets, broker config).
    pub admin: bool,
    /// Each named resource and the permission it needs.
    pub resources: Vec<(Resource<'a>, Perm)>,
}

/// The credentials a request carries.
#[derive(Debug, Clone, Copy)]
pub struct Presented<'a> {
    /// The `AccessKey` ext field.
    pub access_key: Option<&'a str>,
    /// The `Signature` ext field.
    pub signature: Option<&'a str>,
    /// The remote address of the connection.
    pub remote: IpAddr,
}

/// Why a request was refused. Every variant's text names what is missing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denial {
    /// No `AccessKey` ext field (an unsigned request).
    #[error("the request is not signed: ACL is on and the request carries no AccessKey")]
    Unsigned,
    /// No account has this access key.
    #[error("no account has access key {0}")]
    UnknownAccessKey(String),
    /// The signature is absent or does not match the content under the account's secret.
    #[error("the signature of access key {0} does not match the request (wrong secret, or ext fields or body changed after signing)")]
    BadSignature(String),
    /// An administrators' request from a non-admin account.
    #[error("access key {0} is not an admin account: this request needs admin permission")]
    NotAdmin(String),
    /// A resource's permission is missing.
    #[error("access key {access_key} has no {} permission on {kind} {name}", .perm.name())]
    NoPermission {
        /// Who asked.
        access_key: String,
        /// `topic` or `group`.
        kind: &'static str,
        /// The resource.
        name: String,
        /// The permission needed.
        perm: Perm,
    },
}

impl Denial {
    /// The `reason` label of the refusal counter.
    pub fn reason(&self) -> &'static str {
        match self {
            Denial::Unsigned => "acl_unsigned",
            Denial::UnknownAccessKey(_) => "acl_unknown_access_key",
            Denial::BadSignature(_) => "acl_bad_signature",
            Denial::NotAdmin(_) => "acl_not_admin",
            Denial::NoPermission { .. } => "acl_no_permission",
        }
    }
}

/// Every `reason` label [`Denial::reason`] returns.
pub const DENIAL_REASONS: &[&str] = &[
    "acl_unsigned",
    "acl_unknown_access_key",
    "acl_bad_signature",
    "acl_not_admin",
    "acl_no_permission",
];

/// Who a granted request is attributed to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Granted {
    /// An allow-listed address (global or the account's): checks skipped. Holds the access
    /// key if one was presented.
    AllowListed(Option<String>),
    /// A verified account.
    Account(String),
}

impl Granted {
    /// The access key the request is attributed to, if any.
    pub fn access_key(&self) -> Option<&str> {
        match self {
            Granted::AllowListed(key) => key.as_deref(),
            Granted::Account(key) => Some(key),
        }
    }
}

impl Accounts {
    /// Decides one request. `content` builds the signed bytes
    /// ([`acl::signed_content`]); it is called only when a signature must be checked.
    pub fn authorise(
        &self,
        presented: Presented<'_>,
        content: impl FnOnce() -> Vec<u8>,
        needs: &Needs<'_>,
    ) -> Result<Granted, Denial> {
        if self
            .global_white
            .iter()
            .any(|p| p.matches(presented.remote))
        {
            return Ok(Granted::AllowListed(
                presented.access_key.map(str::to_owned),
            ));
        }
        let access_key = presented.access_key.ok_or(Denial::Unsigned)?;
        let account = self
            .accounts
            .get(access_key)
            .ok_or_else(|| Denial::UnknownAccessKey(access_key.to_owned()))?;
        if account
            .white_remote_address
            .as_ref()
            .is_some_and(|p| p.matches(presented.remote))
        {
            return Ok(Granted::AllowListed(Some(access_key.to_owned())));
        }
        let signature = presented
            .signature
            .ok_or_else(|| Denial::BadSignature(access_key.to_owned()))?;
        if !acl::verify(&account.secret_key, &content(), signature) {
            return Err(Denial::BadSignature(access_key.to_owned()));
        }
        check_perms(account, needs)?;
        Ok(Granted::Account(access_key.to_owned()))
    }
}

fn check_perms(account: &Account, needs: &Needs<'_>) -> Result<(), Denial> {
    if needs.admin && !account.admin {
        return Err(Denial::NotAdmin(account.access_key.clone()));
    }
    if account.admin && account.topic_perms.is_empty() && account.group_perms.is_empty() {
        return Ok(());
    }
    for (resource, needed) in &needs.resources {
        let (kind, name, owned) = match resource {
            Resource::Topic(name) => (
                "topic",
                *name,
                account
                    .topic_perms
                    .get(*name)
                    .copied()
                    .unwrap_or(account.default_topic_perm),
            ),
            Resource::Group(name) => (
                "group",
                *name,
                account
                    .group_perms
                    .get(*name)
                    .copied()
                    .unwrap_or(account.default_group_perm),
            ),
        };
        if !owned.grants(*needed) {
            return Err(Denial::NoPermission {
                access_key: account.access_key.clone(),
                kind,
                name: name.to_owned(),
                perm: *needed,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferromq_protocol::remoting::{acl::Credentials, RemotingCommand};

    const FILE: &str = "\
globalWhiteRemoteAddresses:
  - 10.9.9.9
accounts:
  - accessKey: user01
    secretKey: secret01
    whiteRemoteAddress: 10.0.0.*
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
    topicPerms:
      - orders=PUB|SUB
      - secret=DENY
  - accessKey: admin01
    secretKey: secret02
    admin: true
";

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn decide(
        accounts: &Accounts,
        command: &RemotingCommand,
        remote: &str,
        needs: &Needs<'_>,
    ) -> Result<Granted, Denial> {
        let presented = Presented {
            access_key: command.ext_fields.get(acl::ACCESS_KEY).map(|v| v.as_str()),
            signature: command.ext_fields.get(acl::SIGNATURE).map(|v| v.as_str()),
            remote: ip(remote),
        };
        let content = || acl::signed_content(&command.ext_fields, command.body.as_deref());
        accounts.authorise(presented, content, needs)
    }

    fn signed(access_key: &str, secret: &str) -> RemotingCommand {
        let mut command = RemotingCommand::new_request(10, Default::default());
        command.ext_fields.insert("topic", "orders");
        acl::sign_command(&mut command, &Credentials::new(access_key, secret));
        command
    }

    fn publish(topic: &str) -> Needs<'_> {
        Needs {
            admin: false,
            resources: vec![(Resource::Topic(topic), Perm::PUB)],
        }
    }

    #[test]
    fn each_rule_decides_as_documented() {
        let accounts = Accounts::parse(FILE).unwrap();
        let good = signed("user01", "secret01");
        assert_eq!(
            decide(&accounts, &good, "127.0.0.1", &publish("orders")),
            Ok(Granted::Account("user01".into()))
        );
        let no_pub = decide(&accounts, &good, "127.0.0.1", &publish("other")).unwrap_err();
        assert_eq!(no_pub.reason(), "acl_no_permission");
        assert!(no_pub
            .to_string()
            .contains("no PUB permission on topic other"));
        let wrong = signed("user01", "secret02");
        assert_eq!(
            decide(&accounts, &wrong, "127.0.0.1", &publish("orders")),
            Err(Denial::BadSignature("user01".into()))
        );
        let unsigned = RemotingCommand::new_request(10, Default::default());
        assert_eq!(
            decide(&accounts, &unsigned, "127.0.0.1", &publish("orders")),
            Err(Denial::Unsigned)
        );
        let unknown = signed("nobody", "secret01");
        assert_eq!(
            decide(&accounts, &unknown, "127.0.0.1", &publish("orders"))
                .unwrap_err()
                .reason(),
            "acl_unknown_access_key"
        );
        let mut replayed = good.clone();
        replayed.ext_fields.insert("topic", "other");
        assert_eq!(
            decide(&accounts, &replayed, "127.0.0.1", &publish("orders")),
            Err(Denial::BadSignature("user01".into()))
        );
        let admin = Needs {
            admin: true,
            resources: vec![],
        };
        assert_eq!(
            decide(&accounts, &good, "127.0.0.1", &admin),
            Err(Denial::NotAdmin("user01".into()))
        );
        let root = signed("admin01", "secret02");
        assert!(decide(&accounts, &root, "127.0.0.1", &admin).is_ok());
        assert!(decide(&accounts, &root, "127.0.0.1", &publish("secret")).is_ok());
        // Allow lists skip the checks.
        assert_eq!(
            decide(&accounts, &unsigned, "10.9.9.9", &admin),
            Ok(Granted::AllowListed(None))
        );
        assert!(decide(&accounts, &wrong, "10.0.0.7", &publish("secret")).is_ok());
    }
}
