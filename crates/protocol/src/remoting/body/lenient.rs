//! Serde helpers that read a value in any form real clients write it, and the `wire_enum!`
//! macro for enums that travel as names (Java) or ordinals (C++ core).

use serde::de::{self, Deserializer, Unexpected};
use serde::Deserialize;
use serde_json::Value;

/// Reads an `i64` from a JSON number (integral) or a numeric string.
pub fn i64_any<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let v = Value::deserialize(d)?;
    value_to_i64(&v).ok_or_else(|| de::Error::invalid_value(unexpected(&v), &"an integer"))
}

/// Reads an `i32` from a JSON number (integral) or a numeric string.
pub fn i32_any<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    let v = Value::deserialize(d)?;
    value_to_i64(&v)
        .and_then(|i| i32::try_from(i).ok())
        .ok_or_else(|| de::Error::invalid_value(unexpected(&v), &"a 32-bit integer"))
}

/// Reads a boolean from `true`/`false`, `"true"`/`"false"` (any case), `0`/`1` or `"0"`/`"1"`;
/// null is false.
pub fn bool_any<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    let v = Value::deserialize(d)?;
    match &v {
        Value::Null => Some(false),
        Value::Bool(b) => Some(*b),
        Value::Number(n) => match n.as_i64() {
            Some(0) => Some(false),
            Some(1) => Some(true),
            _ => None,
        },
        Value::String(s) => crate::remoting::ext::parse_bool(s),
        _ => None,
    }
    .ok_or_else(|| de::Error::invalid_value(unexpected(&v), &"a boolean"))
}

/// Reads a string, accepting a number or boolean as its text and null as empty.
pub fn string_any<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let v = Value::deserialize(d)?;
    match v {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(s),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        other => Err(de::Error::invalid_value(unexpected(&other), &"a string")),
    }
}

/// Reads a JSON array or null (as empty).
pub fn vec_or_null<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

/// Reads an array of `i32`s, each a JSON number or a numeric string (rocketmq-client-go
/// writes a subscription's `codeSet` as strings), or null (as empty).
pub fn vec_i32_any<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<i32>, D::Error> {
    let items = Option::<Vec<Value>>::deserialize(d)?.unwrap_or_default();
    items
        .iter()
        .map(|v| {
            value_to_i64(v)
                .and_then(|i| i32::try_from(i).ok())
                .ok_or_else(|| de::Error::invalid_value(unexpected(v), &"a 32-bit integer"))
        })
        .collect()
}

pub(crate) fn value_to_i64(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                .map(|f| f as i64)
        }),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

pub(crate) fn unexpected(v: &Value) -> Unexpected<'_> {
    match v {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(_) => Unexpected::Other("number"),
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

/// Declares an enum that serialises as its Java name and deserialises from the name (any
/// case, plus listed aliases), the ordinal as a number, or the ordinal as a string.
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $java:literal $(| $alias:literal)* ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )*
        }

        impl $name {
            const VARIANTS: &'static [($name, &'static str)] = &[$(($name::$variant, $java)),*];

            /// The Java enum name.
            pub fn name(self) -> &'static str {
                Self::VARIANTS
                    .iter()
                    .find(|(v, _)| *v == self)
                    .map_or("", |(_, n)| n)
            }

            /// The Java ordinal (declaration order).
            pub fn ordinal(self) -> usize {
                Self::VARIANTS.iter().position(|(v, _)| *v == self).unwrap_or(0)
            }

            /// Parses a name (any case), an alias or an ordinal.
            pub fn parse(text: &str) -> Option<Self> {
                let t = text.trim();
                if let Ok(i) = t.parse::<usize>() {
                    return Self::VARIANTS.get(i).map(|(v, _)| *v);
                }
                $(
                    if t.eq_ignore_ascii_case($java) $(|| t.eq_ignore_ascii_case($alias))* {
                        return Some($name::$variant);
                    }
                )*
                None
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let v = serde_json::Value::deserialize(d)?;
                let parsed = match &v {
                    serde_json::Value::String(s) => $name::parse(s),
                    serde_json::Value::Number(n) => n
                        .as_u64()
                        .and_then(|i| Self::VARIANTS.get(i as usize))
                        .map(|(v, _)| *v),
                    _ => None,
                };
                parsed.ok_or_else(|| {
                    serde::de::Error::invalid_value(
                        $crate::remoting::body::lenient::unexpected(&v),
                        &concat!("a ", stringify!($name), " name or ordinal"),
                    )
                })
            }
        }
    };
}

pub(crate) use wire_enum;
