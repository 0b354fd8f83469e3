//! `json_bodies`: JSON body decoding (`decode_json`) and `fastjson::normalize`.
//!
//! Checks, for any input:
//! 1. `decode_json::<T>` never panics for `HeartbeatData`, `TopicRouteData`,
//!    `RegisterBrokerBody` and `LockBatchRequestBody`; a decoded value re-encodes with
//!    `encode_json` and that decodes to an equal value.
//! 2. `fastjson::normalize` never panics (nor exhausts stack or memory: libFuzzer's
//!    -rss_limit_mb / -malloc_limit_mb turn that into a reported crash); its output is
//!    idempotent (`normalize(normalize(x)) == normalize(x)`); and for standard JSON it keeps
//!    the value (`serde_json` parses input and output to the same `Value`).

#![no_main]

use ferromq_protocol::remoting::body::{
    decode_json, encode_json, fastjson, heartbeat::HeartbeatData, misc::LockBatchRequestBody,
    route::TopicRouteData, topic::RegisterBrokerBody,
};
use libfuzzer_sys::fuzz_target;

fn body<T>(data: &[u8])
where
    T: serde::de::DeserializeOwned + serde::Serialize + PartialEq + std::fmt::Debug,
{
    if let Ok(v) = decode_json::<T>(data) {
        let bytes = encode_json(&v);
        match decode_json::<T>(&bytes) {
            Ok(again) => assert_eq!(again, v, "encode_json/decode_json round trip changed the value"),
            Err(e) => panic!(
                "re-encoded {} does not decode: {e}\n{}",
                std::any::type_name::<T>(),
                String::from_utf8_lossy(&bytes)
            ),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    body::<HeartbeatData>(data);
    body::<TopicRouteData>(data);
    body::<RegisterBrokerBody>(data);
    body::<LockBatchRequestBody>(data);

    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let normalized = fastjson::normalize(text);
    if let Ok(n) = &normalized {
        assert_eq!(fastjson::normalize(n).as_ref(), Ok(n), "normalize is not idempotent");
    }
    if let Ok(original) = serde_json::from_str::<serde_json::Value>(text) {
        match &normalized {
            Ok(n) => {
                let after: serde_json::Value =
                    serde_json::from_str(n).expect("normalized standard JSON is JSON");
                assert_eq!(after, original, "normalize changed standard JSON");
            }
            Err(fastjson::FastJsonError::TooDeep) => {}
            Err(e) => panic!("normalize rejects standard JSON: {e}"),
        }
    }
});
