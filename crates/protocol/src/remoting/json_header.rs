//! The JSON header (serialize type 0): `RemotingCommand`'s fields as a JSON object.
//!
//! Output follows Java: `language` as the enum name, `remark` left out when absent,
//! `extFields` always present (an empty object when there are none, because Java clients read
//! reply ext fields without a null check), and `serializeTypeCurrentRPC: "JSON"`.
//!
//! Input is lenient, because real clients disagree: integer fields accept a JSON number or a
//! numeric string; `language` accepts a name or an ordinal; `extFields` may be null and its
//! values may be strings, numbers or booleans (converted to their text, booleans to
//! `"true"`/`"false"`); unknown keys and `serializeTypeCurrentRPC` are ignored. Only `code` is
//! required; other missing fields take Java's defaults (JAVA, 0, no remark).

use super::ext::{ExtFields, ExtText};

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};
use thiserror::Error;

use super::command::RemotingCommand;
use super::frame::SerializeType;
use super::language::LanguageCode;

/// Why a JSON header cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum JsonHeaderError {
    /// The header bytes are not JSON text.
    #[error("header is not valid JSON: {0}")]
    NotJson(String),
    /// The header is JSON but not an object.
    #[error("header is JSON but not an object")]
    NotObject,
    /// The header has no `code`.
    #[error("header has no code")]
    MissingCode,
    /// A field has a type or value the header cannot hold.
    #[error("header field {field} is invalid: {reason}")]
    InvalidField {
        /// JSON key of the field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// Decodes a JSON header into a command without body (serialize type JSON).
///
/// The object is read field by field ([`HeaderIn`]) rather than through a `serde_json::Value`
/// tree: keys are matched without allocating and ext fields go straight into the command's
/// map, which roughly halves the allocations of the hottest decode on every connection.
pub fn decode(header: &[u8]) -> Result<RemotingCommand, JsonHeaderError> {
    let parsed: Parsed = serde_json::from_slice(header).map_err(|e| {
        if e.to_string().starts_with(NOT_OBJECT) {
            JsonHeaderError::NotObject
        } else {
            JsonHeaderError::NotJson(e.to_string())
        }
    })?;
    let obj = parsed.0;
    let code = match &obj.code {
        None | Some(Value::Null) => return Err(JsonHeaderError::MissingCode),
        Some(v) => int_field("code", v)?,
    };
    Ok(RemotingCommand {
        code,
        language: language_field(obj.language.as_ref())?,
        version: opt_int_field(obj.version.as_ref(), "version")?,
        opaque: opt_int_field(obj.opaque.as_ref(), "opaque")?,
        flag: opt_int_field(obj.flag.as_ref(), "flag")?,
        remark: remark_field(obj.remark.as_ref())?,
        ext_fields: match obj.ext_fields {
            ExtIn::Absent => ExtFields::new(),
            ExtIn::Map(map) => map,
            ExtIn::Other(kind) => {
                return Err(JsonHeaderError::InvalidField {
                    field: "extFields",
                    reason: format!("expected an object or null, got {kind}"),
                })
            }
        },
        body: None,
        serialize_type: SerializeType::Json,
    })
}

/// Text of the custom error raised when the header is JSON but not an object.
const NOT_OBJECT: &str = "ferromq: header is not an object";

/// The header's fields as read; values other than `extFields` stay JSON values (scalars in
/// practice, so cheap) and are checked by the same lenient helpers as before.
#[derive(Default)]
struct HeaderIn {
    code: Option<Value>,
    language: Option<Value>,
    version: Option<Value>,
    opaque: Option<Value>,
    flag: Option<Value>,
    remark: Option<Value>,
    ext_fields: ExtIn,
}

struct Parsed(HeaderIn);

/// `extFields` as read: absent or null, an object of texts, or something else (an error).
#[derive(Default)]
enum ExtIn {
    #[default]
    Absent,
    Map(ExtFields),
    Other(&'static str),
}

/// Known top-level keys, matched on the borrowed key text.
enum Key {
    Code,
    Language,
    Version,
    Opaque,
    Flag,
    Remark,
    ExtFields,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a header field name")
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<Key, E> {
                Ok(match key {
                    "code" => Key::Code,
                    "language" => Key::Language,
                    "version" => Key::Version,
                    "opaque" => Key::Opaque,
                    "flag" => Key::Flag,
                    "remark" => Key::Remark,
                    "extFields" => Key::ExtFields,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

impl<'de> Deserialize<'de> for Parsed {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(HeaderVisitor)
    }
}

struct HeaderVisitor;

impl<'de> Visitor<'de> for HeaderVisitor {
    type Value = Parsed;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Parsed, A::Error> {
        let mut h = HeaderIn::default();
        // A repeated key keeps its last value, as a JSON object parsed into a map does.
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Code => h.code = Some(map.next_value()?),
                Key::Language => h.language = Some(map.next_value()?),
                Key::Version => h.version = Some(map.next_value()?),
                Key::Opaque => h.opaque = Some(map.next_value()?),
                Key::Flag => h.flag = Some(map.next_value()?),
                Key::Remark => h.remark = Some(map.next_value()?),
                Key::ExtFields => h.ext_fields = map.next_value::<ExtInSeed>()?.0,
                Key::Other => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        Ok(Parsed(h))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<Parsed, A::Error> {
        Err(de::Error::custom(NOT_OBJECT))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Parsed, E> {
        Err(E::custom(NOT_OBJECT))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Parsed, E> {
        Err(E::custom(NOT_OBJECT))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Parsed, E> {
        Err(E::custom(NOT_OBJECT))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Parsed, E> {
        Err(E::custom(NOT_OBJECT))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Parsed, E> {
        Err(E::custom(NOT_OBJECT))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Parsed, E> {
        Err(E::custom(NOT_OBJECT))
    }
}

/// Reads `extFields`: an object's values become texts as [`ext_value_text`] gives them.
struct ExtInSeed(ExtIn);

impl<'de> Deserialize<'de> for ExtInSeed {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ExtVisitor).map(ExtInSeed)
    }
}

struct ExtVisitor;

impl<'de> Visitor<'de> for ExtVisitor {
    type Value = ExtIn;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object or null")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ExtIn, A::Error> {
        // A null value is absent; a later null for a repeated key removes it, as parsing
        // into a map and then filtering nulls would: collected with the nulls, sorted once
        // (the last value of a key wins), then the nulls dropped.
        let mut pairs: Vec<(ExtText, Option<ExtText>)> = Vec::new();
        while let Some(key) = map.next_key::<ExtText>()? {
            let value = map.next_value::<ExtValueText>()?;
            pairs.push((key, value.0));
        }
        super::ext_map::sort_keeping_last_by(&mut pairs, |a, b| a.0.cmp(&b.0));
        let present = pairs
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect();
        Ok(ExtIn::Map(ExtFields::from_pairs(present)))
    }

    fn visit_unit<E: de::Error>(self) -> Result<ExtIn, E> {
        Ok(ExtIn::Absent)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<ExtIn, A::Error> {
        while seq.next_element::<de::IgnoredAny>()?.is_some() {}
        Ok(ExtIn::Other("an array"))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<ExtIn, E> {
        Ok(ExtIn::Other("a boolean"))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<ExtIn, E> {
        Ok(ExtIn::Other("a number"))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<ExtIn, E> {
        Ok(ExtIn::Other("a number"))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<ExtIn, E> {
        Ok(ExtIn::Other("a number"))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<ExtIn, E> {
        Ok(ExtIn::Other("a string"))
    }
}

/// An ext field's JSON value as its text, read straight from the parser: a string becomes an
/// inline text when short, with no `serde_json::Value` or `String` in between; numbers and
/// booleans their text; an array or object its JSON text; null absent (`None`). Same texts
/// as [`ext_value_into_text`] of the parsed value.
struct ExtValueText(Option<ExtText>);

impl<'de> Deserialize<'de> for ExtValueText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ExtValueVisitor)
    }
}

struct ExtValueVisitor;

impl<'de> Visitor<'de> for ExtValueVisitor {
    type Value = ExtValueText;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<ExtValueText, E> {
        Ok(ExtValueText(Some(ExtText::from(v))))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<ExtValueText, E> {
        Ok(ExtValueText(Some(ExtText::from(v))))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<ExtValueText, E> {
        Ok(ExtValueText(Some(ExtText::const_new(if v {
            "true"
        } else {
            "false"
        }))))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<ExtValueText, E> {
        Ok(ExtValueText(Some(
            super::ext::ToCompactString::to_compact_string(&v),
        )))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<ExtValueText, E> {
        Ok(ExtValueText(Some(
            super::ext::ToCompactString::to_compact_string(&v),
        )))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<ExtValueText, E> {
        // Through `Number`, so a float reads exactly as `number_text` of the parsed value.
        Ok(ExtValueText(
            Number::from_f64(v).map(|n| ExtText::from(number_text(&n))),
        ))
    }
    fn visit_unit<E: de::Error>(self) -> Result<ExtValueText, E> {
        Ok(ExtValueText(None))
    }
    fn visit_none<E: de::Error>(self) -> Result<ExtValueText, E> {
        Ok(ExtValueText(None))
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<ExtValueText, A::Error> {
        let value = Value::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        Ok(ExtValueText(ext_value_into_text(value).map(ExtText::from)))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ExtValueText, A::Error> {
        let value = Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(ExtValueText(ext_value_into_text(value).map(ExtText::from)))
    }
}

#[derive(Serialize)]
struct JsonHeaderOut<'a> {
    code: i32,
    language: &'static str,
    version: i32,
    opaque: i32,
    flag: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    remark: Option<&'a str>,
    #[serde(rename = "extFields")]
    ext_fields: &'a ExtFields,
    #[serde(rename = "serializeTypeCurrentRPC")]
    serialize_type: &'static str,
}

/// Encodes the header fields of `cmd` as JSON text.
pub fn encode(cmd: &RemotingCommand) -> Vec<u8> {
    let out = JsonHeaderOut {
        code: cmd.code,
        language: cmd.language.name(),
        version: cmd.version,
        opaque: cmd.opaque,
        flag: cmd.flag,
        remark: cmd.remark.as_deref(),
        ext_fields: &cmd.ext_fields,
        serialize_type: SerializeType::Json.name(),
    };
    // Serialising plain integers, strings and a string-keyed map cannot fail; an empty object
    // would only ever be written if serde_json changed that contract.
    let mut buf = Vec::with_capacity(128 + 48 * cmd.ext_fields.len());
    match serde_json::to_writer(&mut buf, &out) {
        Ok(()) => buf,
        Err(_) => b"{}".to_vec(),
    }
}

fn int_field(field: &'static str, v: &Value) -> Result<i32, JsonHeaderError> {
    let invalid = |reason: String| JsonHeaderError::InvalidField { field, reason };
    match v {
        Value::Number(n) => n
            .as_i64()
            .and_then(|i| i32::try_from(i).ok())
            .ok_or_else(|| invalid(format!("{n} is not a 32-bit integer"))),
        Value::String(s) => s
            .trim()
            .parse::<i32>()
            .map_err(|_| invalid(format!("{s:?} is not a 32-bit integer"))),
        other => Err(invalid(format!("expected an integer, got {}", kind(other)))),
    }
}

fn opt_int_field(v: Option<&Value>, field: &'static str) -> Result<i32, JsonHeaderError> {
    match v {
        None | Some(Value::Null) => Ok(0),
        Some(v) => int_field(field, v),
    }
}

fn language_field(v: Option<&Value>) -> Result<LanguageCode, JsonHeaderError> {
    match v {
        None | Some(Value::Null) => Ok(LanguageCode::Java),
        Some(Value::String(s)) => Ok(match s.trim().parse::<u8>() {
            Ok(code) => LanguageCode::from_code_lenient(code),
            Err(_) => LanguageCode::from_name_lenient(s),
        }),
        Some(Value::Number(n)) => Ok(n
            .as_u64()
            .and_then(|c| u8::try_from(c).ok())
            .map_or(LanguageCode::Other, LanguageCode::from_code_lenient)),
        Some(other) => Err(JsonHeaderError::InvalidField {
            field: "language",
            reason: format!("expected a name or an ordinal, got {}", kind(other)),
        }),
    }
}

fn remark_field(v: Option<&Value>) -> Result<Option<String>, JsonHeaderError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(_)) | Some(Value::Array(_)) => Err(JsonHeaderError::InvalidField {
            field: "remark",
            reason: "expected a string".to_owned(),
        }),
        Some(scalar) => Ok(scalar_text(scalar)),
    }
}

/// Text of one ext value: scalars as Java's `toString()` would give them, nested JSON as its
/// JSON text, null as absent. A string is moved, not copied.
fn ext_value_into_text(v: Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s),
        Value::Array(_) | Value::Object(_) => Some(v.to_string()),
        scalar => scalar_text(&scalar),
    }
}

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(number_text(n)),
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// Integers stay integers; a float with no fraction (`3.0`) becomes `3` so it parses as an int.
fn number_text(n: &Number) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    match n.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => format!("{}", f as i64),
        _ => n.to_string(),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_by_field_decoding_keeps_the_lenient_rules() {
        let cmd = decode(
            br#"{"code":"310","opaque":7,"flag":0,"unknown":{"deep":[1,2]},
                "extFields":{"a":"x","n":12,"f":3.0,"b":true,"nested":{"k":[1]},"gone":null,
                             "twice":"1","twice":"2","dropped":"1","dropped":null},
                "remark":5,"language":"RUST","version":479}"#,
        )
        .unwrap();
        assert_eq!(cmd.code, 310);
        assert_eq!(cmd.opaque, 7);
        assert_eq!(cmd.remark.as_deref(), Some("5"));
        assert_eq!(cmd.language, LanguageCode::Rust);
        let ext: Vec<(&str, &str)> = cmd
            .ext_fields
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            ext,
            [
                ("a", "x"),
                ("b", "true"),
                ("f", "3"),
                ("n", "12"),
                ("nested", r#"{"k":[1]}"#),
                ("twice", "2"),
            ]
        );
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-1.0e20f64..1.0e20).prop_map(Value::from),
            (-100i32..100).prop_map(|n| Value::from(f64::from(n))),
            ".{0,40}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z]{1,3}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// An ext field's value read straight from the parser has the text (or absence) the
        /// same value has when parsed into a `serde_json::Value` first.
        #[test]
        fn ext_values_read_directly_as_through_a_value(value in json_value()) {
            let text = format!(r#"{{"code":1,"extFields":{{"k":{value}}}}}"#);
            let cmd = decode(text.as_bytes()).unwrap();
            let reparsed: Value = serde_json::from_str(&value.to_string()).unwrap();
            let expected = ext_value_into_text(reparsed);
            proptest::prop_assert_eq!(
                cmd.ext_fields.get("k").map(|v| v.as_str().to_string()),
                expected
            );
        }
    }

    #[test]
    fn non_objects_and_bad_ext_fields_are_named() {
        for text in [&b"5"[..], b"\"x\"", b"null", b"true", b"[1,{}]"] {
            assert_eq!(decode(text), Err(JsonHeaderError::NotObject), "{text:?}");
        }
        assert!(matches!(
            decode(b"{\"code\":1"),
            Err(JsonHeaderError::NotJson(_))
        ));
        assert!(matches!(
            decode(br#"{"code":1} trailing"#),
            Err(JsonHeaderError::NotJson(_))
        ));
        for (ext, kind) in [
            ("\"s\"", "a string"),
            ("1", "a number"),
            ("false", "a boolean"),
        ] {
            let text = format!(r#"{{"code":1,"extFields":{ext}}}"#);
            match decode(text.as_bytes()) {
                Err(JsonHeaderError::InvalidField { field, reason }) => {
                    assert_eq!(field, "extFields");
                    assert!(reason.ends_with(kind), "{reason}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        let cmd = decode(br#"{"code":1,"extFields":null}"#).unwrap();
        assert!(cmd.ext_fields.is_empty());
    }
}
