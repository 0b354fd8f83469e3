//! JSON bodies of remoting commands: routes, cluster info, heartbeats, consumer lists, queue
//! locks, topic configs, broker registration, and maps keyed by `MessageQueue`.
//!
//! Field names are Java's (camelCase, with Java's odd spellings where they exist). Output is
//! always standard JSON except where a Java tool needs fastjson's object keys (`mq_map`).
//! Input is lenient where clients differ (`lenient`): enums as names or ordinals, numbers as
//! JSON numbers or strings, booleans as `true`/`"true"`/`1`/`"1"`, missing collections as empty.

pub mod fastjson;
pub mod ha_runtime;
pub mod heartbeat;
pub mod lenient;
pub mod misc;
pub mod mq_map;
pub mod route;
pub mod running_info;
pub mod topic;

#[cfg(test)]
mod tests;

use thiserror::Error;

/// Why a body cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BodyError {
    /// The body is not valid JSON for the expected type.
    #[error("body is not a valid {what}: {reason}")]
    Invalid {
        /// Expected type.
        what: &'static str,
        /// What serde_json reported.
        reason: String,
    },
    /// The body is not even fastjson-style JSON.
    #[error(transparent)]
    FastJson(#[from] fastjson::FastJsonError),
}

/// Decodes a JSON body, also accepting fastjson's unquoted integer keys and object keys.
pub fn decode_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, BodyError> {
    let what = std::any::type_name::<T>()
        .rsplit("::")
        .next()
        .unwrap_or("body");
    match serde_json::from_slice(body) {
        Ok(v) => Ok(v),
        Err(first) => {
            let text = std::str::from_utf8(body).map_err(|e| BodyError::Invalid {
                what,
                reason: e.to_string(),
            })?;
            let normalized = fastjson::normalize(text)?;
            if normalized == text {
                return Err(BodyError::Invalid {
                    what,
                    reason: first.to_string(),
                });
            }
            serde_json::from_str(&normalized).map_err(|e| BodyError::Invalid {
                what,
                reason: e.to_string(),
            })
        }
    }
}

/// Encodes a body as standard JSON.
pub fn encode_json<T: serde::Serialize>(value: &T) -> Vec<u8> {
    // The body types hold only strings, numbers, booleans and string- or integer-keyed maps,
    // which serde_json always serialises.
    serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec())
}
