//! The call's deadline (the `grpc-timeout` header) bounds how long a held call may wait.
//!
//! A held ReceiveMessage or PullMessage that waits out its whole `long_polling_timeout` must
//! still answer before the client gives up on the call. Clients set the call's deadline
//! differently: the Java, Python and Node clients add their request timeout to the long
//! polling, but the Rust client 5.0.0 sets the deadline to the long-polling timeout itself
//! (40 s by default). Held for the full timeout, an empty receive then ends in
//! CANCELLED "Timeout expired" instead of MESSAGE_NOT_FOUND, and messages found at the last
//! moment are popped for a call nobody reads (invisible until their invisibility ends). So a
//! hold ends [`DEADLINE_RESERVE`] before the deadline (the Java proxy likewise cuts its
//! polling time to the time remaining).

use std::time::Duration;

use tonic::metadata::MetadataMap;

/// The header carrying the call's timeout (gRPC over HTTP/2: `TimeoutValue TimeoutUnit`).
pub const HEADER_GRPC_TIMEOUT: &str = "grpc-timeout";
/// Time kept between the end of a hold and the call's deadline, for the answer to reach the
/// client.
pub const DEADLINE_RESERVE: Duration = Duration::from_millis(500);
/// Most digits of a `grpc-timeout` value (the gRPC spec's limit).
const TIMEOUT_DIGITS_MAX: usize = 8;

/// The call's timeout from its `grpc-timeout` header; `None` when it has none or the header
/// is malformed (then the call has no deadline, as tonic treats it).
pub fn call_timeout(metadata: &MetadataMap) -> Option<Duration> {
    parse_timeout(metadata.get(HEADER_GRPC_TIMEOUT)?.to_str().ok()?)
}

/// A `grpc-timeout` value: at most 8 digits and a unit (`H`, `M`, `S`, `m`, `u`, `n`).
fn parse_timeout(value: &str) -> Option<Duration> {
    if !value.is_ascii() {
        return None;
    }
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty()
        || digits.len() > TIMEOUT_DIGITS_MAX
        || !digits.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// How long a call with `timeout` left may hold for the `wanted` time: `wanted`, cut to end
/// [`DEADLINE_RESERVE`] before the deadline (zero, an immediate answer, when less is left).
pub fn hold_within(wanted: Duration, timeout: Option<Duration>) -> Duration {
    match timeout {
        Some(timeout) => wanted.min(timeout.saturating_sub(DEADLINE_RESERVE)),
        None => wanted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_values_parse_in_every_unit_and_malformed_ones_are_none() {
        assert_eq!(parse_timeout("40S"), Some(Duration::from_secs(40)));
        assert_eq!(parse_timeout("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_timeout("3M"), Some(Duration::from_secs(180)));
        assert_eq!(parse_timeout("39999m"), Some(Duration::from_millis(39_999)));
        assert_eq!(parse_timeout("5000000u"), Some(Duration::from_secs(5)));
        assert_eq!(
            parse_timeout("99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        for bad in [
            "",
            "S",
            "40",
            "40s",
            "123456789S",
            "-1S",
            "4 S",
            "1.5S",
            "40SS",
            "4é",
        ] {
            assert_eq!(parse_timeout(bad), None, "{bad:?}");
        }
        let mut metadata = MetadataMap::new();
        assert_eq!(call_timeout(&metadata), None);
        metadata.insert(HEADER_GRPC_TIMEOUT, "7S".parse().unwrap());
        assert_eq!(call_timeout(&metadata), Some(Duration::from_secs(7)));
    }

    #[test]
    fn a_hold_ends_the_reserve_before_the_deadline() {
        let s = Duration::from_secs;
        // The Rust client: long polling 40 s, deadline 40 s.
        assert_eq!(hold_within(s(40), Some(s(40))), s(40) - DEADLINE_RESERVE);
        // Java, Python, Node: deadline = request timeout + long polling.
        assert_eq!(hold_within(s(20), Some(s(23))), s(20));
        assert_eq!(hold_within(s(20), None), s(20));
        assert_eq!(
            hold_within(s(5), Some(Duration::from_millis(300))),
            Duration::ZERO
        );
    }
}
