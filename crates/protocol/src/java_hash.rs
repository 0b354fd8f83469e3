//! Java's `String.hashCode`, which RocketMQ stores as a message's tag code.
//!
//! The ConsumeQueue keeps `TAGS.hashCode()` so a pull can filter by tag without reading the
//! record; clients compute the same value for their subscription, so it must match Java bit
//! for bit, including for text outside ASCII (Java hashes UTF-16 code units).

/// `s.hashCode()` as Java computes it: `h = 31 * h + c` over UTF-16 code units, wrapping.
///
/// ```
/// assert_eq!(ferromq_protocol::java_string_hash("TagA"), 2_598_919);
/// assert_eq!(ferromq_protocol::java_string_hash(""), 0);
/// ```
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_java_for_known_values() {
        // Values printed by `"...".hashCode()` in Java.
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("hello"), 99_162_322);
        assert_eq!(java_string_hash("TagA"), 2_598_919);
        // Overflows wrap as in Java.
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
        // Non-BMP text hashes surrogate pairs: "😀" is 0xD83D 0xDE00.
        assert_eq!(java_string_hash("😀"), 0xD83D * 31 + 0xDE00);
    }
}
