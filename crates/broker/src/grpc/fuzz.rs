//! Property tests of the decoding paths that take client input (issue 17: "fuzz the proto
//! decoding paths"): arbitrary bytes decoded as each request a client may send, and arbitrary
//! field values run through the adapter's pure translations (receive requests, receipt
//! handles, transaction ids, recall handles, message properties and bodies). None may panic;
//! each answers a value or a status with a safe code.

use proptest::prelude::*;
use prost::Message as _;

use ferromq_protocol::grpc::codes::is_safe;
use ferromq_protocol::grpc::{self as pb, Code};

use super::consume::receive_request;
use super::send::{decode_body, encode_properties};
use super::transaction::parse_transaction_id;
use crate::core::pop::ReceiptHandle;
use crate::core::timer::schedule::parse_recall_handle;

fn safe(status: &pb::Status) -> bool {
    Code::try_from(status.code).is_ok_and(is_safe)
}

fn duration() -> impl Strategy<Value = Option<prost_types::Duration>> {
    proptest::option::of(
        (any::<i64>(), any::<i32>())
            .prop_map(|(seconds, nanos)| prost_types::Duration { seconds, nanos }),
    )
}

fn resource() -> impl Strategy<Value = Option<pb::Resource>> {
    proptest::option::of(".{0,40}".prop_map(|name| pb::Resource {
        resource_namespace: String::new(),
        name,
    }))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_decode_to_a_request_or_an_error(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = pb::SendMessageRequest::decode(bytes.as_slice());
        let _ = pb::AckMessageRequest::decode(bytes.as_slice());
        let _ = pb::ChangeInvisibleDurationRequest::decode(bytes.as_slice());
        let _ = pb::EndTransactionRequest::decode(bytes.as_slice());
        let _ = pb::TelemetryCommand::decode(bytes.as_slice());
        if let Ok(request) = pb::ReceiveMessageRequest::decode(bytes.as_slice()) {
            if let Err(status) = receive_request(&request, None) {
                prop_assert!(safe(&status), "{status:?}");
            }
        }
    }

    #[test]
    fn any_receive_request_is_translated_or_refused_with_a_safe_code(
        group in resource(),
        topic in resource(),
        id in any::<i32>(),
        batch in any::<i32>(),
        invisible in duration(),
        polling in duration(),
        filter in proptest::option::of((0i32..4, ".{0,20}")),
        deadline_ms in proptest::option::of(0u64..100_000),
    ) {
        let request = pb::ReceiveMessageRequest {
            group,
            message_queue: Some(pb::MessageQueue { topic, id, ..Default::default() }),
            filter_expression: filter.map(|(r#type, expression)| pb::FilterExpression { r#type, expression }),
            batch_size: batch,
            invisible_duration: invisible,
            long_polling_timeout: polling,
            ..Default::default()
        };
        match receive_request(&request, deadline_ms.map(std::time::Duration::from_millis)) {
            Ok(parsed) => {
                prop_assert!(parsed.wait <= crate::core::pop::RECEIVE_WAIT_MAX);
                prop_assert!(parsed.invisible >= crate::core::pop::INVISIBLE_MIN);
                prop_assert!(parsed.invisible <= crate::core::pop::INVISIBLE_MAX);
            }
            Err(status) => prop_assert!(safe(&status), "{status:?}"),
        }
    }

    #[test]
    fn handles_and_ids_from_clients_parse_or_are_refused(text in ".{0,80}", n in any::<u64>()) {
        let _ = ReceiptHandle::parse(&text);
        let _ = parse_transaction_id(&text);
        let _ = parse_recall_handle(&text);
        let handle = format!("fmq1 T {n} {n} {n} {n}");
        prop_assert_eq!(ReceiptHandle::parse(&handle).is_ok(), n <= u64::from(u32::MAX));
        let _ = ReceiptHandle::parse(&format!("fmq1 {text} 1 2 3 4"));
    }

    #[test]
    fn any_message_properties_and_body_are_encoded_or_refused(
        tag in proptest::option::of(".{0,20}"),
        keys in proptest::collection::vec(".{0,10}", 0..4),
        id in ".{0,40}",
        group in proptest::option::of(".{0,20}"),
        user in proptest::collection::btree_map(".{0,10}", ".{0,10}", 0..4),
        encoding in 0i32..4,
        body in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let system = pb::SystemProperties {
            tag,
            keys,
            message_id: id,
            message_group: group,
            body_encoding: encoding,
            ..Default::default()
        };
        let message = pb::Message {
            topic: None,
            user_properties: user.into_iter().collect(),
            system_properties: Some(system.clone()),
            body: body.clone(),
        };
        if let Err(status) = encode_properties(&message, &system) {
            prop_assert!(safe(&status), "{status:?}");
        }
        match decode_body(&system, &body, 32) {
            Ok(decoded) => prop_assert!(decoded.len() <= 32),
            Err(status) => prop_assert!(safe(&status), "{status:?}"),
        }
    }
}
