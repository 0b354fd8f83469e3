//! Which `Code`s ferromq may send to a client.
//!
//! Released clients were generated from older copies of the protos. The Rust client 5.0.0
//! converts `status.code` with an unwrap, so a code missing from its enum panics it; the
//! Java proxy likewise picks codes by client version. ferromq therefore sends only the codes
//! every released client knows ([`is_safe`]); the newest codes (40019–40021, 40404, 41302,
//! 42901, 42902) are never sent.

use super::Code;

/// Codes no released client is known to lack, so ferromq may send them to any client.
pub fn is_safe(code: Code) -> bool {
    !matches!(
        code,
        Code::Unspecified
            | Code::IllegalOffset
            | Code::IllegalLiteTopic
            | Code::InvalidClientProperties
            | Code::OffsetNotFound
            | Code::MessageBodyEmpty
            | Code::LiteTopicQuotaExceeded
            | Code::LiteSubscriptionQuotaExceeded
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_codes_are_not_safe_and_the_rest_are() {
        for unsafe_code in [40019, 40020, 40021, 40404, 41302, 42901, 42902] {
            let code = Code::try_from(unsafe_code).expect("a code of the enum");
            assert!(!is_safe(code), "{unsafe_code} must not be sent");
        }
        for safe in [
            20000, 30000, 40000, 40002, 40014, 40018, 40402, 41301, 50401, 50500,
        ] {
            let code = Code::try_from(safe).expect("a code of the enum");
            assert!(is_safe(code), "{safe} is safe");
        }
    }
}
