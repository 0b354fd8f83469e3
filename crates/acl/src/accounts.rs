//! The accounts file, in the shape of RocketMQ's `plain_acl.yml`:
//!
//! ```yaml
//! globalWhiteRemoteAddresses:
//!   - 10.10.103.*
//! accounts:
//!   - accessKey: RocketMQ
//!     secretKey: 12345678
//!     whiteRemoteAddress:
//!     admin: false
//!     defaultTopicPerm: DENY
//!     defaultGroupPerm: SUB
//!     topicPerms:
//!       - topicA=DENY
//!       - topicB=PUB|SUB
//!     groupPerms:
//!       - groupA=SUB
//! ```
//!
//! Differences from RocketMQ, all on the side of refusing a doubtful file: an unknown key, an
//! unknown permission word, a malformed `name=PERM` entry or address pattern, a duplicate
//! access key, or a key shorter than 6 characters (RocketMQ's minimum) make the whole file
//! invalid, with an error naming the entry. Scalars may be written as numbers
//! (`secretKey: 12345678`), as RocketMQ's own example does. A missing default permission is
//! DENY, as in RocketMQ.

use std::collections::HashMap;

use serde::Deserialize;

use crate::address::AddressPattern;
use crate::perm::Perm;
use crate::AccountsError;

/// Largest accounts file read (1 MiB): far above any real one, and bounds memory.
pub const FILE_BYTES_MAX: u64 = 1 << 20;
/// Most accounts in one file.
pub const ACCOUNTS_MAX: usize = 10_000;
/// Shortest access or secret key (RocketMQ's `AclUtils` minimum).
pub const KEY_CHARS_MIN: usize = 6;

/// One account.
#[derive(Clone, PartialEq, Eq)]
pub struct Account {
    /// Public name of the account.
    pub access_key: String,
    /// Shared secret.
    pub secret_key: String,
    /// Whether it may run administrators' requests.
    pub admin: bool,
    /// Addresses whose requests under this access key skip the signature and permission checks.
    pub white_remote_address: Option<AddressPattern>,
    /// Permission on a topic not in `topic_perms`.
    pub default_topic_perm: Perm,
    /// Permission on a group not in `group_perms`.
    pub default_group_perm: Perm,
    /// Per-topic permissions.
    pub topic_perms: HashMap<String, Perm>,
    /// Per-group permissions.
    pub group_perms: HashMap<String, Perm>,
}

impl std::fmt::Debug for Account {
    /// Never prints the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Account")
            .field("access_key", &self.access_key)
            .field("admin", &self.admin)
            .field("default_topic_perm", &self.default_topic_perm)
            .field("default_group_perm", &self.default_group_perm)
            .field("topic_perms", &self.topic_perms)
            .field("group_perms", &self.group_perms)
            .finish_non_exhaustive()
    }
}

/// A parsed, validated accounts file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Accounts {
    /// Addresses whose requests skip every check, signed or not.
    pub global_white: Vec<AddressPattern>,
    /// Accounts by access key.
    pub accounts: HashMap<String, Account>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileModel {
    #[serde(default)]
    global_white_remote_addresses: Option<Vec<Scalar>>,
    #[serde(default)]
    accounts: Option<Vec<AccountModel>>,
    /// Written by RocketMQ's `updateAclConfig`; ignored.
    #[serde(default)]
    #[allow(dead_code)]
    data_version: Option<serde_yaml::Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AccountModel {
    access_key: Scalar,
    secret_key: Scalar,
    #[serde(default)]
    white_remote_address: Option<Scalar>,
    #[serde(default)]
    admin: Option<bool>,
    #[serde(default)]
    default_topic_perm: Option<Scalar>,
    #[serde(default)]
    default_group_perm: Option<Scalar>,
    #[serde(default)]
    topic_perms: Option<Vec<Scalar>>,
    #[serde(default)]
    group_perms: Option<Vec<Scalar>>,
}

/// A YAML scalar read as text (`12345678` and `"12345678"` alike).
#[derive(Deserialize)]
#[serde(untagged)]
enum Scalar {
    Text(String),
    Integer(i64),
    Float(f64),
    Bool(bool),
}

impl Scalar {
    fn text(self) -> String {
        match self {
            Scalar::Text(text) => text,
            Scalar::Integer(value) => value.to_string(),
            Scalar::Float(value) => value.to_string(),
            Scalar::Bool(value) => value.to_string(),
        }
    }
}

impl Accounts {
    /// Parses and validates the text of an accounts file.
    pub fn parse(text: &str) -> Result<Accounts, AccountsError> {
        let model: FileModel =
            serde_yaml::from_str(text).map_err(|e| AccountsError::Invalid(e.to_string()))?;
        let mut global_white = Vec::new();
        for entry in model.global_white_remote_addresses.unwrap_or_default() {
            global_white.extend(AddressPattern::parse(&entry.text())?);
        }
        let models = model.accounts.unwrap_or_default();
        if models.len() > ACCOUNTS_MAX {
            return Err(AccountsError::Invalid(format!(
                "{} accounts, more than the {ACCOUNTS_MAX} allowed",
                models.len()
            )));
        }
        let mut accounts = HashMap::with_capacity(models.len());
        for model in models {
            let account = account(model)?;
            if accounts.contains_key(&account.access_key) {
                return Err(AccountsError::Invalid(format!(
                    "access key {} is listed twice",
                    account.access_key
                )));
            }
            accounts.insert(account.access_key.clone(), account);
        }
        Ok(Accounts {
            global_white,
            accounts,
        })
    }
}

fn account(model: AccountModel) -> Result<Account, AccountsError> {
    let access_key = model.access_key.text();
    let secret_key = model.secret_key.text();
    if access_key.chars().count() < KEY_CHARS_MIN {
        return Err(AccountsError::Invalid(format!(
            "access key {access_key:?} is shorter than {KEY_CHARS_MIN} characters"
        )));
    }
    if secret_key.chars().count() < KEY_CHARS_MIN {
        return Err(AccountsError::Invalid(format!(
            "the secret key of {access_key} is shorter than {KEY_CHARS_MIN} characters"
        )));
    }
    let perm = |value: Option<Scalar>, what: &str| match value {
        Some(value) => Perm::parse(&value.text(), &format!("{what} of {access_key}")),
        None => Ok(Perm::DENY),
    };
    let default_topic_perm = perm(model.default_topic_perm, "defaultTopicPerm")?;
    let default_group_perm = perm(model.default_group_perm, "defaultGroupPerm")?;
    let white_remote_address = match model.white_remote_address {
        Some(text) => AddressPattern::parse(&text.text())?,
        None => None,
    };
    let topic_perms = resource_perms(model.topic_perms, "topicPerms", &access_key)?;
    let group_perms = resource_perms(model.group_perms, "groupPerms", &access_key)?;
    Ok(Account {
        access_key,
        secret_key,
        admin: model.admin.unwrap_or(false),
        white_remote_address,
        default_topic_perm,
        default_group_perm,
        topic_perms,
        group_perms,
    })
}

/// Reads `name=PERM` entries.
fn resource_perms(
    entries: Option<Vec<Scalar>>,
    what: &str,
    access_key: &str,
) -> Result<HashMap<String, Perm>, AccountsError> {
    let mut perms = HashMap::new();
    for entry in entries.unwrap_or_default() {
        let entry = entry.text();
        let Some((name, perm)) = entry.split_once('=') else {
            return Err(AccountsError::Invalid(format!(
                "{what} of {access_key}: entry {entry:?} is not name=PERM"
            )));
        };
        let name = name.trim();
        if name.is_empty() {
            return Err(AccountsError::Invalid(format!(
                "{what} of {access_key}: entry {entry:?} names no resource"
            )));
        }
        let perm = Perm::parse(perm, &format!("{what} of {access_key}"))?;
        perms.insert(name.to_owned(), perm);
    }
    Ok(perms)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "\
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      - groupA=DENY
      - groupB=PUB|SUB
  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    admin: true
";

    #[test]
    fn rocketmqs_example_file_parses() {
        let accounts = Accounts::parse(EXAMPLE).unwrap();
        assert_eq!(accounts.global_white.len(), 2);
        let first = &accounts.accounts["RocketMQ"];
        assert_eq!(first.secret_key, "12345678");
        assert!(!first.admin);
        assert_eq!(first.default_topic_perm, Perm::DENY);
        assert_eq!(first.default_group_perm, Perm::SUB);
        assert_eq!(first.topic_perms["topicB"], Perm::ANY);
        assert_eq!(first.group_perms["groupA"], Perm::DENY);
        assert_eq!(first.white_remote_address, None);
        let second = &accounts.accounts["rocketmq2"];
        assert!(second.admin);
        assert_eq!(second.default_topic_perm, Perm::DENY);
        assert!(second.white_remote_address.is_some());
    }

    #[test]
    fn doubtful_files_are_refused_with_the_entry_named() {
        let cases = [
            ("accounts:\n  - accessKey: abcdef\n    secretKey: 123\n", "shorter"),
            (
                "accounts:\n  - accessKey: abcdef\n    secretKey: 1234567\n    topicPerms: [t=PUBB]\n",
                "PUBB",
            ),
            (
                "accounts:\n  - accessKey: abcdef\n    secretKey: 1234567\n    topicPerms: [tPUB]\n",
                "tPUB",
            ),
            (
                "accounts:\n  - accessKey: abcdef\n    secretKey: 1234567\n  - accessKey: abcdef\n    secretKey: 1234567\n",
                "twice",
            ),
            ("acounts: []\n", "acounts"),
            ("accounts: [\n", ""),
        ];
        for (text, needle) in cases {
            let error = Accounts::parse(text).unwrap_err().to_string();
            assert!(error.contains(needle), "{text}: {error}");
        }
    }
}
