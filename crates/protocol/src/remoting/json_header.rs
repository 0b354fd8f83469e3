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

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Number, Value};
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
pub fn decode(header: &[u8]) -> Result<RemotingCommand, JsonHeaderError> {
    let value: Value =
        serde_json::from_slice(header).map_err(|e| JsonHeaderError::NotJson(e.to_string()))?;
    let Value::Object(obj) = value else {
        return Err(JsonHeaderError::NotObject);
    };
    let code = match obj.get("code") {
        None | Some(Value::Null) => return Err(JsonHeaderError::MissingCode),
        Some(v) => int_field("code", v)?,
    };
    Ok(RemotingCommand {
        code,
        language: language_field(obj.get("language"))?,
        version: opt_int_field(&obj, "version")?,
        opaque: opt_int_field(&obj, "opaque")?,
        flag: opt_int_field(&obj, "flag")?,
        remark: remark_field(obj.get("remark"))?,
        ext_fields: ext_fields(obj.get("extFields"))?,
        body: None,
        serialize_type: SerializeType::Json,
    })
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
    ext_fields: &'a BTreeMap<String, String>,
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
    serde_json::to_vec(&out).unwrap_or_else(|_| b"{}".to_vec())
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

fn opt_int_field(obj: &Map<String, Value>, field: &'static str) -> Result<i32, JsonHeaderError> {
    match obj.get(field) {
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

fn ext_fields(v: Option<&Value>) -> Result<BTreeMap<String, String>, JsonHeaderError> {
    match v {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(map)) => Ok(map
            .iter()
            .filter_map(|(k, v)| ext_value_text(v).map(|t| (k.clone(), t)))
            .collect()),
        Some(other) => Err(JsonHeaderError::InvalidField {
            field: "extFields",
            reason: format!("expected an object or null, got {}", kind(other)),
        }),
    }
}

/// Text of one ext value: scalars as Java's `toString()` would give them, nested JSON as its
/// JSON text, null as absent.
fn ext_value_text(v: &Value) -> Option<String> {
    match v {
        Value::Array(_) | Value::Object(_) => Some(v.to_string()),
        scalar => scalar_text(scalar),
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
