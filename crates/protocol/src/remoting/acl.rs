//! RocketMQ ACL 1.0 request signing, as the real clients do it (Java `AclClientRPCHook`, the
//! C++ core's `set_session_credentials`, ali-ons `accessKeyId`/`accessKeySecret`).
//!
//! A signed request carries its access key in the ext field [`ACCESS_KEY`] (and an optional
//! [`SECURITY_TOKEN`]) and a signature in [`SIGNATURE`]. The signature is
//! `base64(HMAC-SHA1(secret, content))` where `content` is the UTF-8 concatenation of the
//! values of every other ext field, ordered by key (byte order, as Java's `TreeMap` of
//! ASCII keys), followed by the body bytes. Two fields are left out of the content:
//! [`SIGNATURE`] itself, and [`UNIQUE_MSG_QUERY_FLAG`] (RocketMQ's broker leaves it out too;
//! its clients add it after signing). Because every other field is signed, including
//! `AccessKey`, `OnsChannel` and the request's own header, a replayed signature with any ext
//! field or body byte changed no longer matches.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha1::Sha1;

use super::{ExtFields, RemotingCommand};

/// Ext key of the access key.
pub const ACCESS_KEY: &str = "AccessKey";
/// Ext key of the signature.
pub const SIGNATURE: &str = "Signature";
/// Ext key of the optional security token (signed like any other field).
pub const SECURITY_TOKEN: &str = "SecurityToken";
/// Ext key the C++ core and ali-ons add (`ALIYUN` by default); signed like any other field.
pub const ONS_CHANNEL: &str = "OnsChannel";
/// Ext key RocketMQ's query-by-unique-key adds outside the signature.
pub const UNIQUE_MSG_QUERY_FLAG: &str = "_UNIQUE_KEY_QUERY";

/// A client's credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// Public name of the account.
    pub access_key: String,
    /// Shared secret; never logged.
    pub secret_key: String,
    /// Optional session token, sent and signed when present.
    pub security_token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    /// Never prints the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key", &self.access_key)
            .field("secret_key", &"<hidden>")
            .field(
                "security_token",
                &self.security_token.as_ref().map(|_| "<hidden>"),
            )
            .finish()
    }
}

impl Credentials {
    /// Credentials without a security token.
    pub fn new(access_key: impl Into<String>, secret_key: impl Into<String>) -> Self {
        Credentials {
            access_key: access_key.into(),
            secret_key: secret_key.into(),
            security_token: None,
        }
    }
}

/// The bytes a signature covers: the values of `ext` ordered by key (without
/// [`SIGNATURE`] and [`UNIQUE_MSG_QUERY_FLAG`]) followed by `body`.
pub fn signed_content(ext: &ExtFields, body: Option<&[u8]>) -> Vec<u8> {
    let body = body.unwrap_or_default();
    let values_len: usize = ext.values().map(|v| v.len()).sum();
    let mut content = Vec::with_capacity(values_len + body.len());
    // `ExtFields` is a BTreeMap: iteration is in key order, as Java's TreeMap.
    for (key, value) in ext {
        if key != SIGNATURE && key != UNIQUE_MSG_QUERY_FLAG {
            content.extend_from_slice(value.as_bytes());
        }
    }
    content.extend_from_slice(body);
    content
}

/// `base64(HMAC-SHA1(secret, content))`.
pub fn signature(secret_key: &str, content: &[u8]) -> String {
    let mut mac = Hmac::<Sha1>::new_from_slice(secret_key.as_bytes())
        .expect("HMAC accepts keys of any length");
    mac.update(content);
    STANDARD.encode(mac.finalize().into_bytes())
}

/// Whether `claimed` is the signature of `content` under `secret_key`, compared in constant
/// time (a timing difference would let a caller guess a signature byte by byte).
pub fn verify(secret_key: &str, content: &[u8], claimed: &str) -> bool {
    let Ok(claimed) = STANDARD.decode(claimed.as_bytes()) else {
        return false;
    };
    let mut mac = Hmac::<Sha1>::new_from_slice(secret_key.as_bytes())
        .expect("HMAC accepts keys of any length");
    mac.update(content);
    mac.verify_slice(&claimed).is_ok()
}

/// Signs a request in place: sets [`ACCESS_KEY`] (and [`SECURITY_TOKEN`]), then
/// [`SIGNATURE`] over everything else. A previous signature is replaced.
pub fn sign_command(command: &mut RemotingCommand, credentials: &Credentials) {
    command.ext_fields.remove(SIGNATURE);
    command
        .ext_fields
        .insert(ACCESS_KEY.to_owned(), credentials.access_key.clone());
    if let Some(token) = &credentials.security_token {
        command
            .ext_fields
            .insert(SECURITY_TOKEN.to_owned(), token.clone());
    }
    let content = signed_content(&command.ext_fields, command.body.as_deref());
    let value = signature(&credentials.secret_key, &content);
    command.ext_fields.insert(SIGNATURE.to_owned(), value);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_sha1_matches_the_rfc_2202_vector() {
        // RFC 2202 test case 2: key "Jefe", data "what do ya want for nothing?".
        let value = signature("Jefe", b"what do ya want for nothing?");
        let bytes = STANDARD.decode(value).unwrap();
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79");
    }

    #[test]
    fn content_is_sorted_values_then_body_without_signature() {
        let mut ext = ExtFields::new();
        ext.insert("b", "2");
        ext.insert("AccessKey", "ak");
        ext.insert("a", "1");
        ext.insert(SIGNATURE, "sig");
        ext.insert(UNIQUE_MSG_QUERY_FLAG, "true");
        // "AccessKey" < "a" < "b" in byte order (upper case first, as Java's String order).
        assert_eq!(signed_content(&ext, Some(b"body")), b"ak12body".to_vec());
        assert_eq!(signed_content(&ext, None), b"ak12".to_vec());
    }

    #[test]
    fn a_signed_command_verifies_and_any_change_breaks_it() {
        let mut ext = ExtFields::new();
        ext.insert("topic", "T");
        let mut command = RemotingCommand::new_request(10, ext);
        command.body = Some(bytes::Bytes::from_static(b"hello"));
        let credentials = Credentials::new("ak0001", "secret01");
        sign_command(&mut command, &credentials);
        let claimed = command.ext_fields[SIGNATURE].clone();
        let content = signed_content(&command.ext_fields, command.body.as_deref());
        assert!(verify("secret01", &content, &claimed));
        assert!(!verify("secret02", &content, &claimed));
        assert!(!verify("secret01", &content, "not base64!"));
        let mut altered = command.ext_fields.clone();
        altered.insert("topic", "U");
        assert!(!verify(
            "secret01",
            &signed_content(&altered, Some(b"hello")),
            &claimed
        ));
        assert!(!verify(
            "secret01",
            &signed_content(&command.ext_fields, Some(b"hellO")),
            &claimed
        ));
    }
}
