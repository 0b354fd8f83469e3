//! The admin requests as a Java admin sees them on the wire (codes, headers, refusals).

use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::RemotingCommand;

use crate::common::{create_topic, start};
use crate::support::{commit, connect, producer, runtime, send_keyed, TIMEOUT};

/// The new requests as a Java admin sees them on the wire: QUERY_MESSAGE (12) with Java's
/// header and the unique-key flag, QUERY_NOT_FOUND, GET_CONSUMER_CONNECTION_LIST (203)
/// answering CONSUMER_NOT_ONLINE (206), CLONE_GROUP_OFFSET (314) refusals; bad headers are
/// INVALID_PARAMETER, never a dropped connection.
#[test]
fn wire_replies_of_query_connection_and_clone_requests() {
    use ferromq_protocol::remoting::headers::admin::GetConsumerConnectionListRequestHeader;
    use ferromq_protocol::remoting::headers::client::{
        QueryMessageRequestHeader, QueryMessageResponseHeader,
    };
    use ferromq_protocol::remoting::headers::offset::CloneGroupOffsetRequestHeader;

    let server = start();
    let n = server.namesrv.clone();
    let b = server.broker.clone();
    create_topic(&n, &b, "WireTopic", "1");
    runtime().block_on(async {
        let producer = producer(&n);
        let (unique, _) = send_keyed(&producer, "WireTopic", 0, "wire-key", "t", "wire-body").await;
        send_keyed(&producer, "WireTopic", 0, "wire-key", "t", "wire-body-2").await;
        producer.shutdown();
        let client = connect(&b).await;
        let query = |key: &str, max_num: i32, unique_flag: bool| {
            let header = QueryMessageRequestHeader {
                topic: "WireTopic".into(),
                key: key.into(),
                max_num,
                begin_timestamp: 0,
                end_timestamp: i64::MAX,
            };
            let mut command = RemotingCommand::request_with_header(request::QUERY_MESSAGE, &header);
            if unique_flag {
                command.ext_fields.insert("_UNIQUE_KEY_QUERY", "true");
            }
            command
        };
        let records = |reply: &RemotingCommand| -> Vec<String> {
            let mut body = reply.body.as_deref().unwrap_or_default();
            let mut bodies = Vec::new();
            while !body.is_empty() {
                let view = ferromq_protocol::RecordView::parse(body).unwrap();
                bodies.push(String::from_utf8_lossy(view.body).into_owned());
                body = &body[view.total_size()..];
            }
            bodies
        };
        let reply = client
            .invoke(query("wire-key", 1, false), TIMEOUT)
            .await
            .unwrap();
        assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
        assert_eq!(records(&reply).len(), 1, "maxNum bounds the answer");
        let header: QueryMessageResponseHeader = reply.decode_header().unwrap();
        assert!(header.index_last_update_timestamp > 0, "{header:?}");
        let reply = client
            .invoke(query("wire-key", 32, false), TIMEOUT)
            .await
            .unwrap();
        let mut bodies = records(&reply);
        bodies.sort();
        assert_eq!(bodies, ["wire-body", "wire-body-2"]);
        let reply = client
            .invoke(query(&unique, 32, true), TIMEOUT)
            .await
            .unwrap();
        assert_eq!(records(&reply), ["wire-body"]);
        // The key of a unique-key query is not a KEYS word, and the other way round.
        let reply = client
            .invoke(query(&unique, 32, false), TIMEOUT)
            .await
            .unwrap();
        assert_eq!(reply.code, response::QUERY_NOT_FOUND, "{:?}", reply.remark);
        let reply = client
            .invoke(query("wire-key", 32, true), TIMEOUT)
            .await
            .unwrap();
        assert_eq!(reply.code, response::QUERY_NOT_FOUND, "{:?}", reply.remark);
        let reply = client
            .invoke(query("wire-key", 0, false), TIMEOUT)
            .await
            .unwrap();
        assert_eq!(
            reply.code,
            response::INVALID_PARAMETER,
            "{:?}",
            reply.remark
        );
        let mut no_key = query("wire-key", 1, false);
        no_key.ext_fields.remove("key");
        let reply = client.invoke(no_key, TIMEOUT).await.unwrap();
        assert_eq!(
            reply.code,
            response::INVALID_PARAMETER,
            "{:?}",
            reply.remark
        );
        assert!(reply.remark.unwrap().contains("key"));

        let header = GetConsumerConnectionListRequestHeader {
            consumer_group: "Nobody".into(),
        };
        let reply = client
            .invoke(
                RemotingCommand::request_with_header(
                    request::GET_CONSUMER_CONNECTION_LIST,
                    &header,
                ),
                TIMEOUT,
            )
            .await
            .unwrap();
        assert_eq!(
            reply.code,
            response::CONSUMER_NOT_ONLINE,
            "{:?}",
            reply.remark
        );
        assert!(reply.remark.unwrap().contains("Nobody"));

        let clone = |src: &str, dest: &str, topic: &str| {
            let header = CloneGroupOffsetRequestHeader {
                src_group: src.into(),
                dest_group: dest.into(),
                topic: Some(topic.into()),
                offline: None,
            };
            RemotingCommand::request_with_header(request::CLONE_GROUP_OFFSET, &header)
        };
        commit(&client, "WireSrc", "WireTopic", 0, 1).await;
        for (command, code) in [
            (
                clone("WireSrc", "WireSrc", "WireTopic"),
                response::INVALID_PARAMETER,
            ),
            (
                clone("Nobody", "WireDest", "WireTopic"),
                response::SUBSCRIPTION_GROUP_NOT_EXIST,
            ),
            (
                clone("WireSrc", "WireDest", "NoTopic"),
                response::TOPIC_NOT_EXIST,
            ),
            (clone("WireSrc", "WireDest", "WireTopic"), response::SUCCESS),
        ] {
            let reply = client.invoke(command, TIMEOUT).await.unwrap();
            assert_eq!(reply.code, code, "{:?}", reply.remark);
        }
    });
}
