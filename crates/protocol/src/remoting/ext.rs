//! Lenient, typed access to a command's ext fields (its custom header).
//!
//! Every ext value travels as text. Clients differ in how they write it (numbers, booleans,
//! `"0"`/`"1"`, enum names or ordinals; reference §10), so reads here accept all forms real
//! clients send and report anything else as a [`HeaderError`] naming the field, the value and
//! what was expected. Writes use Java's `toString()` forms, which every client reads.
//!
//! Optional fields: an absent key, or an empty value for a non-string field, reads as `None`.

use thiserror::Error;

/// Text forms of numbers (and any `Display`) as an [`ExtText`], inline when short.
pub use compact_str::ToCompactString;

pub use super::ext_map::{ExtFields, ExtText, OrderedLookup};

/// Why ext fields do not form a valid header.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HeaderError {
    /// A required field is absent.
    #[error("required header field {0} is missing")]
    Missing(&'static str),
    /// A field's value cannot be read as its type.
    #[error("header field {field} has value {value:?}, expected {expected}")]
    Invalid {
        /// Ext key.
        field: &'static str,
        /// The value as received.
        value: String,
        /// What the field must hold.
        expected: &'static str,
    },
}

/// A typed request or response header carried in ext fields.
pub trait CommandHeader: Sized {
    /// Reads the header, failing on a missing required field or an unreadable value.
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError>;
    /// Writes the header; optional fields that are `None` are left out.
    fn to_ext(&self) -> ExtFields;
    /// [`to_ext`](Self::to_ext) of a header no longer needed: its strings move into the map
    /// (one allocation fewer per string field on the send path).
    fn into_ext(self) -> ExtFields {
        self.to_ext()
    }
}

/// A value type an ext field can hold.
pub trait ExtValue: Sized {
    /// What a valid value looks like, for error messages.
    const EXPECTED: &'static str;
    /// Parses the text form; `None` when it is not a valid value.
    fn parse_ext(text: &str) -> Option<Self>;
    /// [`parse_ext`](Self::parse_ext) of a map's own text: a text value is cloned, which
    /// for a short one is a copy of whole words rather than a rebuild byte by byte.
    fn parse_found(text: &ExtText) -> Option<Self> {
        Self::parse_ext(text)
    }
    /// The text form written on the wire.
    fn to_ext_text(&self) -> ExtText;
    /// [`to_ext_text`](Self::to_ext_text) of a value no longer needed: a long string moves
    /// into the ext map instead of being copied.
    fn into_ext_text(self) -> ExtText {
        self.to_ext_text()
    }
    /// Whether an empty text means "absent" for an optional field (true except for strings).
    const EMPTY_IS_ABSENT: bool = true;
    /// Writes the value as the field `key` of `ext`.
    fn write_ext(&self, ext: &mut ExtFields, key: &'static str) {
        ext.insert(ExtText::const_new(key), self.to_ext_text());
    }
    /// [`write_ext`](Self::write_ext) of a value no longer needed (see
    /// [`into_ext_text`](Self::into_ext_text)).
    fn write_ext_owned(self, ext: &mut ExtFields, key: &'static str) {
        ext.insert(ExtText::const_new(key), self.into_ext_text());
    }
}

impl ExtValue for String {
    const EXPECTED: &'static str = "a string";
    const EMPTY_IS_ABSENT: bool = false;
    fn parse_ext(text: &str) -> Option<Self> {
        Some(text.to_owned())
    }
    fn to_ext_text(&self) -> ExtText {
        ExtText::from(self.as_str())
    }
    fn into_ext_text(self) -> ExtText {
        ExtText::from(self)
    }
    fn write_ext(&self, ext: &mut ExtFields, key: &'static str) {
        ext.insert_str(key, self);
    }
}

impl ExtValue for ExtText {
    const EXPECTED: &'static str = "a string";
    const EMPTY_IS_ABSENT: bool = false;
    fn parse_ext(text: &str) -> Option<Self> {
        Some(ExtText::from(text))
    }
    fn parse_found(text: &ExtText) -> Option<Self> {
        Some(text.clone())
    }
    fn to_ext_text(&self) -> ExtText {
        self.clone()
    }
    fn into_ext_text(self) -> ExtText {
        self
    }
    // Short text is copied into the map's entry in place (`ExtFields::insert_str`); long text
    // moves its heap buffer in.
    fn write_ext(&self, ext: &mut ExtFields, key: &'static str) {
        ext.insert_str(key, self);
    }
    fn write_ext_owned(self, ext: &mut ExtFields, key: &'static str) {
        if self.is_heap_allocated() {
            ext.insert(ExtText::const_new(key), self);
        } else {
            ext.insert_str(key, &self);
        }
    }
}

macro_rules! int_ext_value {
    ($($ty:ty => $expected:literal),*) => {$(
        impl ExtValue for $ty {
            const EXPECTED: &'static str = $expected;
            fn parse_ext(text: &str) -> Option<Self> {
                parse_int(text)
            }
            fn to_ext_text(&self) -> ExtText {
                self.to_compact_string()
            }
            // Formatted straight into the map's entry (`ExtFields::insert_int`): an integer
            // built as a text and then moved in costs a store-forwarding stall per field.
            fn write_ext(&self, ext: &mut ExtFields, key: &'static str) {
                ext.insert_int(key, *self);
            }
            fn write_ext_owned(self, ext: &mut ExtFields, key: &'static str) {
                ext.insert_int(key, self);
            }
        }
    )*};
}

int_ext_value!(i32 => "a 32-bit integer", i64 => "a 64-bit integer", u32 => "an unsigned 32-bit integer");

/// Parses an integer, tolerating surrounding blanks, a leading `+`, and a float with no
/// fraction (`"3.0"`), which some JSON writers produce.
fn parse_int<T: std::str::FromStr + TryFrom<i64>>(text: &str) -> Option<T> {
    let t = text.trim();
    if let Ok(v) = t.parse::<T>() {
        return Some(v);
    }
    let f: f64 = t.parse().ok()?;
    if f.fract() != 0.0 || !f.is_finite() || f.abs() > 9.0e15 {
        return None;
    }
    T::try_from(f as i64).ok()
}

impl ExtValue for bool {
    const EXPECTED: &'static str = "a boolean (true/false/1/0)";
    fn parse_ext(text: &str) -> Option<Self> {
        parse_bool(text)
    }
    fn to_ext_text(&self) -> ExtText {
        ExtText::const_new(if *self { "true" } else { "false" })
    }
    fn write_ext(&self, ext: &mut ExtFields, key: &'static str) {
        ext.insert_str(key, if *self { "true" } else { "false" });
    }
}

/// Parses `true`/`false` in any case, or `1`/`0`.
pub fn parse_bool(text: &str) -> Option<bool> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("true") || t == "1" {
        Some(true)
    } else if t.eq_ignore_ascii_case("false") || t == "0" {
        Some(false)
    } else {
        None
    }
}

/// How a header field is read and written: required (`T`) or optional (`Option<T>`).
pub trait ExtField: Sized {
    /// Reads the field named `key`.
    fn read(ext: &ExtFields, key: &'static str) -> Result<Self, HeaderError>;
    /// Reads the field named `key` from its text as already looked up (`None`: absent).
    fn read_found(found: Option<&ExtText>, key: &'static str) -> Result<Self, HeaderError>;
    /// [`read_found`](Self::read_found) of the field's text in a binary header's ext bytes
    /// ([`ExtFields::binary`]), read without building the map.
    fn read_text(found: Option<&str>, key: &'static str) -> Result<Self, HeaderError>;
    /// Writes the field named `key` unless it is absent.
    fn write(&self, ext: &mut ExtFields, key: &'static str);
    /// [`write`](Self::write), moving the value (see [`ExtValue::into_ext_text`]).
    fn write_owned(self, ext: &mut ExtFields, key: &'static str);
}

impl<T: ExtValue> ExtField for T {
    fn read(ext: &ExtFields, key: &'static str) -> Result<Self, HeaderError> {
        Self::read_found(ext.get(key), key)
    }
    fn read_found(found: Option<&ExtText>, key: &'static str) -> Result<Self, HeaderError> {
        let text = found.ok_or(HeaderError::Missing(key))?;
        parse_value(key, text)
    }
    fn read_text(found: Option<&str>, key: &'static str) -> Result<Self, HeaderError> {
        let text = found.ok_or(HeaderError::Missing(key))?;
        parse_text(key, text)
    }
    fn write(&self, ext: &mut ExtFields, key: &'static str) {
        self.write_ext(ext, key);
    }
    fn write_owned(self, ext: &mut ExtFields, key: &'static str) {
        self.write_ext_owned(ext, key);
    }
}

impl<T: ExtValue> ExtField for Option<T> {
    fn read(ext: &ExtFields, key: &'static str) -> Result<Self, HeaderError> {
        Self::read_found(ext.get(key), key)
    }
    fn read_found(found: Option<&ExtText>, key: &'static str) -> Result<Self, HeaderError> {
        match found {
            None => Ok(None),
            Some(text) if T::EMPTY_IS_ABSENT && text.trim().is_empty() => Ok(None),
            Some(text) => parse_value(key, text).map(Some),
        }
    }
    fn read_text(found: Option<&str>, key: &'static str) -> Result<Self, HeaderError> {
        match found {
            None => Ok(None),
            Some(text) if T::EMPTY_IS_ABSENT && text.trim().is_empty() => Ok(None),
            Some(text) => parse_text(key, text).map(Some),
        }
    }
    fn write(&self, ext: &mut ExtFields, key: &'static str) {
        if let Some(v) = self {
            v.write(ext, key);
        }
    }
    fn write_owned(self, ext: &mut ExtFields, key: &'static str) {
        if let Some(v) = self {
            v.write_owned(ext, key);
        }
    }
}

fn parse_text<T: ExtValue>(field: &'static str, text: &str) -> Result<T, HeaderError> {
    T::parse_ext(text).ok_or_else(|| HeaderError::Invalid {
        field,
        value: text.to_string(),
        expected: T::EXPECTED,
    })
}

fn parse_value<T: ExtValue>(field: &'static str, text: &ExtText) -> Result<T, HeaderError> {
    T::parse_found(text).ok_or_else(|| HeaderError::Invalid {
        field,
        value: text.to_string(),
        expected: T::EXPECTED,
    })
}

/// Typed reads on [`ExtFields`]; `get_*` require the field, `opt_*` allow it to be absent.
pub trait ExtFieldsExt {
    /// A required string field.
    fn get_str(&self, key: &'static str) -> Result<&str, HeaderError>;
    /// An optional string field.
    fn opt_str(&self, key: &'static str) -> Option<&str>;
    /// A required `i32` field.
    fn get_i32(&self, key: &'static str) -> Result<i32, HeaderError>;
    /// A required `i64` field.
    fn get_i64(&self, key: &'static str) -> Result<i64, HeaderError>;
    /// A required `u32` field.
    fn get_u32(&self, key: &'static str) -> Result<u32, HeaderError>;
    /// A required boolean field (`true`/`false` in any case, `1`/`0`).
    fn get_bool(&self, key: &'static str) -> Result<bool, HeaderError>;
    /// An optional field of any [`ExtValue`] type.
    fn opt<T: ExtValue>(&self, key: &'static str) -> Result<Option<T>, HeaderError>;
}

impl ExtFieldsExt for ExtFields {
    fn get_str(&self, key: &'static str) -> Result<&str, HeaderError> {
        self.get(key)
            .map(ExtText::as_str)
            .ok_or(HeaderError::Missing(key))
    }
    fn opt_str(&self, key: &'static str) -> Option<&str> {
        self.get(key).map(ExtText::as_str)
    }
    fn get_i32(&self, key: &'static str) -> Result<i32, HeaderError> {
        <i32 as ExtField>::read(self, key)
    }
    fn get_i64(&self, key: &'static str) -> Result<i64, HeaderError> {
        <i64 as ExtField>::read(self, key)
    }
    fn get_u32(&self, key: &'static str) -> Result<u32, HeaderError> {
        <u32 as ExtField>::read(self, key)
    }
    fn get_bool(&self, key: &'static str) -> Result<bool, HeaderError> {
        <bool as ExtField>::read(self, key)
    }
    fn opt<T: ExtValue>(&self, key: &'static str) -> Result<Option<T>, HeaderError> {
        <Option<T> as ExtField>::read(self, key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(pairs: &[(&str, &str)]) -> ExtFields {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<ExtFields>()
    }

    #[test]
    fn booleans_in_every_client_form() {
        let e = ext(&[
            ("a", "true"),
            ("b", "False"),
            ("c", "1"),
            ("d", "0"),
            ("e", "True"),
            ("f", "yes"),
        ]);
        assert!(e.get_bool("a").unwrap());
        assert!(!e.get_bool("b").unwrap());
        assert!(e.get_bool("c").unwrap());
        assert!(!e.get_bool("d").unwrap());
        assert!(e.get_bool("e").unwrap());
        assert_eq!(
            e.get_bool("f"),
            Err(HeaderError::Invalid {
                field: "f",
                value: "yes".into(),
                expected: bool::EXPECTED
            })
        );
        assert_eq!(e.get_bool("z"), Err(HeaderError::Missing("z")));
    }

    #[test]
    fn integers_lenient_but_checked() {
        let e = ext(&[
            ("a", " 42 "),
            ("b", "-7"),
            ("c", "3.0"),
            ("d", "3.5"),
            ("e", "x"),
            ("f", "9999999999"),
            ("g", ""),
        ]);
        assert_eq!(e.get_i32("a"), Ok(42));
        assert_eq!(e.get_i64("b"), Ok(-7));
        assert_eq!(e.get_i32("c"), Ok(3));
        assert!(matches!(
            e.get_i32("d"),
            Err(HeaderError::Invalid { field: "d", .. })
        ));
        assert!(matches!(
            e.get_i64("e"),
            Err(HeaderError::Invalid { field: "e", .. })
        ));
        assert!(matches!(
            e.get_i32("f"),
            Err(HeaderError::Invalid { field: "f", .. })
        ));
        assert_eq!(e.get_i64("f"), Ok(9_999_999_999));
        assert!(matches!(
            e.get_u32("b"),
            Err(HeaderError::Invalid { field: "b", .. })
        ));
        assert_eq!(e.opt::<i32>("g"), Ok(None));
        assert_eq!(e.opt::<String>("g"), Ok(Some(String::new())));
        assert_eq!(e.opt::<i32>("missing"), Ok(None));
        assert_eq!(e.get_str("e"), Ok("x"));
    }
}
