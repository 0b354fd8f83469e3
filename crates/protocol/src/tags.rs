//! RocketMQ tag expressions (`*`, or `tagA || tagB`): parsed once here for the store's
//! filtered reads and the client's subscriptions.
//!
//! A message carries at most one tag (`TAGS` property); the ConsumeQueue keeps its Java
//! `String.hashCode` ([`java_string_hash`]) so a read can skip entries without reading their
//! records, and then checks the tag itself (two tags may share a hash code). A client sends the
//! expression as `subString` with the tags and their hash codes (`tagsSet`, `codeSet`).

use crate::java_string_hash;

/// The text of the expression that selects every message.
pub const ALL_TAGS: &str = "*";

/// The separator between the tags of an expression.
pub const TAG_SEPARATOR: &str = "||";

/// Which messages an expression selects, by tag.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum TagExpression {
    /// Every message (`*` or an empty expression), tagged or not.
    #[default]
    All,
    /// Messages whose tag is one of these (trimmed, in expression order, duplicates kept as
    /// written). An empty list, parsed from an expression such as `||`, selects nothing.
    Tags(Vec<String>),
}

impl TagExpression {
    /// Parses an expression as a broker reads it: `*` or empty (after trimming) is
    /// [`TagExpression::All`]; anything else is split on `||`, each tag trimmed, empty ones
    /// dropped. An expression naming no tag (`||`) selects nothing.
    ///
    /// ```
    /// use ferromq_protocol::tags::TagExpression;
    /// assert_eq!(TagExpression::parse(" * "), TagExpression::All);
    /// assert_eq!(TagExpression::parse("a || b").tags(), ["a", "b"]);
    /// ```
    pub fn parse(expression: &str) -> TagExpression {
        let expression = expression.trim();
        if expression.is_empty() || expression == ALL_TAGS {
            return TagExpression::All;
        }
        TagExpression::Tags(
            expression
                .split(TAG_SEPARATOR)
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty())
                .collect(),
        )
    }

    /// Parses an expression as a client subscribes with it: like [`TagExpression::parse`],
    /// except that an expression naming no tag (`||`) subscribes to every message, the
    /// client's behaviour since its first version.
    pub fn parse_subscription(expression: &str) -> TagExpression {
        match TagExpression::parse(expression) {
            TagExpression::Tags(tags) if tags.is_empty() => TagExpression::All,
            parsed => parsed,
        }
    }

    /// The `subString` a client sends for `expression`: the trimmed expression, or `*` when
    /// it subscribes to every message ([`TagExpression::parse_subscription`]).
    pub fn subscription_text(expression: &str) -> String {
        if TagExpression::parse_subscription(expression).is_all() {
            ALL_TAGS.to_string()
        } else {
            expression.trim().to_string()
        }
    }

    /// Whether this selects every message.
    pub fn is_all(&self) -> bool {
        matches!(self, TagExpression::All)
    }

    /// The tags named, empty for [`TagExpression::All`] (RocketMQ's `tagsSet`).
    pub fn tags(&self) -> &[String] {
        match self {
            TagExpression::All => &[],
            TagExpression::Tags(tags) => tags,
        }
    }

    /// The Java hash codes of [`TagExpression::tags`], in the same order (RocketMQ's
    /// `codeSet`).
    pub fn tag_codes(&self) -> Vec<i32> {
        self.tags().iter().map(|t| java_string_hash(t)).collect()
    }

    /// Whether a ConsumeQueue entry with this tag hash code may match: the first, cheap check
    /// of a filtered read (a hash match still needs [`TagExpression::matches_tag`]).
    pub fn matches_code(&self, tag_code: i64) -> bool {
        match self {
            TagExpression::All => true,
            TagExpression::Tags(tags) => tags
                .iter()
                .any(|t| i64::from(java_string_hash(t)) == tag_code),
        }
    }

    /// Whether a message with this tag (`None`: untagged) is selected.
    pub fn matches_tag(&self, tag: Option<&str>) -> bool {
        match self {
            TagExpression::All => true,
            TagExpression::Tags(tags) => tag.is_some_and(|tag| tags.iter().any(|t| t == tag)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn star_empty_and_blank_select_everything() {
        for text in ["*", " * ", "", "   ", "\t*\n"] {
            let all = TagExpression::parse(text);
            assert_eq!(all, TagExpression::All, "{text:?}");
            assert!(all.is_all());
            assert!(all.matches_tag(None) && all.matches_tag(Some("x")));
            assert!(all.matches_code(0) && all.matches_code(-7));
            assert!(all.tags().is_empty() && all.tag_codes().is_empty());
            assert_eq!(TagExpression::subscription_text(text), "*");
        }
    }

    #[test]
    fn tags_are_split_and_trimmed() {
        let some = TagExpression::parse("  a ||b||   c  ");
        assert_eq!(some.tags(), ["a", "b", "c"]);
        assert!(!some.is_all());
        assert!(some.matches_tag(Some("b")));
        assert!(!some.matches_tag(Some("d")));
        assert!(!some.matches_tag(Some(" b")));
        assert!(!some.matches_tag(None));
        assert_eq!(TagExpression::subscription_text("  a ||b "), "a ||b");
    }

    #[test]
    fn empty_tags_are_dropped_and_no_tag_differs_for_broker_and_client() {
        assert_eq!(TagExpression::parse("a || || b ||").tags(), ["a", "b"]);
        // A broker reading `||` selects nothing; a client subscribing with it gets all.
        let none = TagExpression::parse(" || ");
        assert_eq!(none, TagExpression::Tags(Vec::new()));
        assert!(!none.matches_tag(Some("a")) && !none.matches_tag(None));
        assert!(!none.matches_code(0));
        assert_eq!(
            TagExpression::parse_subscription(" || "),
            TagExpression::All
        );
        assert_eq!(TagExpression::subscription_text(" || "), "*");
    }

    #[test]
    fn duplicates_are_kept_and_match_once() {
        let twice = TagExpression::parse("a || a");
        assert_eq!(twice.tags(), ["a", "a"]);
        assert_eq!(twice.tag_codes(), [97, 97]);
        assert!(twice.matches_tag(Some("a")));
    }

    #[test]
    fn codes_are_java_string_hash_codes() {
        // Values of Java's `"...".hashCode()`.
        let tags = TagExpression::parse("TagA || hello || 😀");
        assert_eq!(
            tags.tag_codes(),
            [2_598_919, 99_162_322, 0xD83D * 31 + 0xDE00]
        );
        assert!(tags.matches_code(2_598_919));
        assert!(tags.matches_code(99_162_322));
        assert!(!tags.matches_code(97));
        // Codes are compared as the ConsumeQueue stores them (i64 of the i32 hash).
        let wrapped = TagExpression::parse("polygenelubricants");
        assert!(wrapped.matches_code(i64::from(i32::MIN)));
        assert!(!wrapped.matches_code(i64::from(i32::MIN) + (1 << 32)));
    }

    #[test]
    fn a_shared_hash_code_is_resolved_by_the_tag() {
        // "Aa" and "BB" have the same Java hash code (2112).
        let aa = TagExpression::parse("Aa");
        assert!(aa.matches_code(i64::from(java_string_hash("BB"))));
        assert!(!aa.matches_tag(Some("BB")));
    }
}
