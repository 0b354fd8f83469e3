//! Enum-valued header fields. Each reads its Java name (case-insensitive) or its ordinal, as
//! clients send either (reference §10), and writes the Java name.

use super::super::ext::ExtValue;

/// Which offset `SEARCH_OFFSET_BY_TIMESTAMP` returns when several messages match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BoundaryType {
    /// First offset whose store time is at or after the timestamp (Java's default).
    #[default]
    Lower,
    /// Last offset whose store time is at or before the timestamp.
    Upper,
}

impl ExtValue for BoundaryType {
    const EXPECTED: &'static str = "LOWER or UPPER (or ordinal 0/1)";
    fn parse_ext(text: &str) -> Option<Self> {
        match text.trim().to_ascii_uppercase().as_str() {
            "LOWER" | "0" => Some(BoundaryType::Lower),
            "UPPER" | "1" => Some(BoundaryType::Upper),
            _ => None,
        }
    }
    fn to_ext_text(&self) -> crate::remoting::ext::ExtText {
        crate::remoting::ext::ExtText::const_new(match self {
            BoundaryType::Lower => "LOWER",
            BoundaryType::Upper => "UPPER",
        })
    }
}

/// A topic's tag filter type (`TopicFilterType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TopicFilterType {
    /// One tag per message (the only type in use).
    #[default]
    SingleTag,
    /// Several tags per message.
    MultiTag,
}

impl TopicFilterType {
    /// The Java enum name.
    pub fn name(self) -> &'static str {
        match self {
            TopicFilterType::SingleTag => "SINGLE_TAG",
            TopicFilterType::MultiTag => "MULTI_TAG",
        }
    }
}

impl ExtValue for TopicFilterType {
    const EXPECTED: &'static str = "SINGLE_TAG or MULTI_TAG (or ordinal 0/1)";
    fn parse_ext(text: &str) -> Option<Self> {
        match text.trim().to_ascii_uppercase().as_str() {
            "SINGLE_TAG" | "0" => Some(TopicFilterType::SingleTag),
            "MULTI_TAG" | "1" => Some(TopicFilterType::MultiTag),
            _ => None,
        }
    }
    fn to_ext_text(&self) -> crate::remoting::ext::ExtText {
        crate::remoting::ext::ExtText::const_new(self.name())
    }
}
