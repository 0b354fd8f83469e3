//! Maps keyed by `MessageQueue` (`ConsumeStats`, `TopicStatsTable`, `ResetOffsetBody`).
//!
//! Java's fastjson writes such a key as a JSON object, which is not JSON (reference §7.3).
//! In memory a [`MqMap`] is an ordered map. Standard serialisation writes each key as a string
//! holding the queue's JSON (`{"{\"brokerName\":\"b\",...}":5}`); [`encode_fastjson`] writes
//! the object-key form Java mqadmin reads. Decoding (through `body::decode_json`) accepts both
//! forms.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::de::{self, Deserializer};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::lenient::i64_any;
use super::misc::MessageQueue;

/// An ordered map keyed by [`MessageQueue`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MqMap<V>(pub BTreeMap<MessageQueue, V>);

impl<V: Serialize> Serialize for MqMap<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (mq, v) in &self.0 {
            let key = serde_json::to_string(mq).map_err(serde::ser::Error::custom)?;
            map.serialize_entry(&key, v)?;
        }
        map.end()
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for MqMap<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = BTreeMap::<String, V>::deserialize(d)?;
        let mut out = BTreeMap::new();
        for (key, v) in raw {
            let mq: MessageQueue = serde_json::from_str(&key).map_err(|e| {
                de::Error::custom(format!("map key {key:?} is not a MessageQueue: {e}"))
            })?;
            out.insert(mq, v);
        }
        Ok(MqMap(out))
    }
}

/// Serialises `value` like standard JSON, except that object keys holding a JSON object's text
/// are written as the bare object (fastjson's form for `MessageQueue` keys).
pub fn encode_fastjson<T: Serialize>(value: &T) -> Vec<u8> {
    let v = serde_json::to_value(value).unwrap_or(Value::Null);
    let mut out = String::new();
    write_value(&mut out, &v);
    out.into_bytes()
}

fn write_value(out: &mut String, v: &Value) {
    match v {
        Value::Object(map) => {
            out.push('{');
            for (i, (k, val)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                match serde_json::from_str::<Value>(k) {
                    Ok(obj @ Value::Object(_)) if k.starts_with('{') => write_value(out, &obj),
                    _ => out.push_str(&Value::String(k.clone()).to_string()),
                }
                out.push(':');
                write_value(out, val);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        scalar => {
            let _ = write!(out, "{scalar}");
        }
    }
}

/// INVOKE_BROKER_TO_RESET_OFFSET (222) reply and RESET_CONSUMER_CLIENT_OFFSET (220) body.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResetOffsetBody {
    /// New offset per queue.
    #[serde(default)]
    pub offset_table: MqMap<i64>,
}

/// Offsets of one queue in `TopicStatsTable`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicOffset {
    /// Smallest stored offset.
    #[serde(default, deserialize_with = "i64_any")]
    pub min_offset: i64,
    /// Next offset to be written.
    #[serde(default, deserialize_with = "i64_any")]
    pub max_offset: i64,
    /// Store time of the last message, ms.
    #[serde(default, deserialize_with = "i64_any")]
    pub last_update_timestamp: i64,
}

/// GET_TOPIC_STATS_INFO (202) reply body.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicStatsTable {
    /// Offsets per queue.
    #[serde(default)]
    pub offset_table: MqMap<TopicOffset>,
    /// Put rate.
    #[serde(default)]
    pub topic_put_tps: f64,
}

/// One queue's progress in `ConsumeStats`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OffsetWrapper {
    /// Queue max offset.
    #[serde(default, deserialize_with = "i64_any")]
    pub broker_offset: i64,
    /// Stored consumer offset (negative shown as 0).
    #[serde(default, deserialize_with = "i64_any")]
    pub consumer_offset: i64,
    /// Max of consumer offset and last pulled offset.
    #[serde(default, deserialize_with = "i64_any")]
    pub pull_offset: i64,
    /// Store time of the message before `consumer_offset`, ms.
    #[serde(default, deserialize_with = "i64_any")]
    pub last_timestamp: i64,
}

/// GET_CONSUME_STATS (208) reply body.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumeStats {
    /// Consume rate.
    #[serde(default)]
    pub consume_tps: f64,
    /// Progress per queue.
    #[serde(default)]
    pub offset_table: MqMap<OffsetWrapper>,
}
