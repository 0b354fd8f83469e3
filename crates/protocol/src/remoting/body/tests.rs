//! Body tests: the reference's route example, fastjson input forms, heartbeat dialects of each
//! client, lock bodies and MessageQueue-keyed maps.

use std::collections::BTreeMap;

use super::heartbeat::*;
use super::misc::*;
use super::mq_map::*;
use super::route::*;
use super::topic::*;
use super::{decode_json, encode_json, BodyError};

const REFERENCE_ROUTE: &str = r#"{
  "queueDatas": [
    {"brokerName": "broker-a", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicSysFlag": 0}
  ],
  "brokerDatas": [
    {"cluster": "DefaultCluster", "brokerName": "broker-a",
     "brokerAddrs": {"0": "127.0.0.1:10911", "1": "127.0.0.1:10921"},
     "enableActingMaster": false}
  ],
  "filterServerTable": {}
}"#;

#[test]
fn route_reference_example_round_trips_as_standard_json() {
    let route: TopicRouteData = decode_json(REFERENCE_ROUTE.as_bytes()).unwrap();
    assert_eq!(route.broker_datas[0].master_addr(), Some("127.0.0.1:10911"));
    assert_eq!(route.queue_datas[0].perm, perm::READ | perm::WRITE);
    let text = String::from_utf8(encode_json(&route)).unwrap();
    assert!(
        text.contains(r#""brokerAddrs":{"0":"127.0.0.1:10911","1":"127.0.0.1:10921"}"#),
        "{text}"
    );
    assert!(text.contains(r#""enableActingMaster":false"#));
    assert!(
        !text.contains("orderTopicConf") && !text.contains("zoneName") && !text.contains("null")
    );
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["filterServerTable"], serde_json::json!({}));
    assert_eq!(
        decode_json::<TopicRouteData>(text.as_bytes()).unwrap(),
        route
    );
}

#[test]
fn fastjson_route_with_unquoted_keys_accepted() {
    let fast = r#"{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911"},"brokerName":"b","cluster":"C"}],"queueDatas":[]}"#;
    let route: TopicRouteData = decode_json(fast.as_bytes()).unwrap();
    assert_eq!(route.broker_datas[0].master_addr(), Some("127.0.0.1:10911"));
    assert!(!route.broker_datas[0].enable_acting_master);
    assert!(matches!(
        decode_json::<TopicRouteData>(b"{oops"),
        Err(BodyError::FastJson(_))
    ));
    assert!(matches!(
        decode_json::<TopicRouteData>(b"{\"queueDatas\":5}"),
        Err(BodyError::Invalid { .. })
    ));
}

#[test]
fn cluster_info_round_trips() {
    let route: TopicRouteData = decode_json(REFERENCE_ROUTE.as_bytes()).unwrap();
    let mut info = ClusterInfo::default();
    info.broker_addr_table
        .insert("broker-a".into(), route.broker_datas[0].clone());
    info.cluster_addr_table
        .entry("DefaultCluster".into())
        .or_default()
        .insert("broker-a".into());
    let text = encode_json(&info);
    assert_eq!(decode_json::<ClusterInfo>(&text).unwrap(), info);
}

#[test]
fn heartbeat_cpp_ordinals_and_string_sub_version() {
    let body = r#"{"clientID":"10.0.0.1@4242","producerDataSet":[],"consumerDataSet":[{"groupName":"CG",
        "consumeType":1,"messageModel":1,"consumeFromWhere":0,"unitMode":false,
        "subscriptionDataSet":[{"classFilterMode":false,"topic":"T","subString":"*","tagsSet":[],
        "codeSet":[],"subVersion":"1700000000000","expressionType":"TAG"}]}]}"#;
    let hb: HeartbeatData = decode_json(body.as_bytes()).unwrap();
    let c = &hb.consumer_data_set[0];
    assert_eq!(c.consume_type, ConsumeType::ConsumePassively);
    assert_eq!(c.message_model, MessageModel::Clustering);
    assert_eq!(
        c.consume_from_where,
        ConsumeFromWhere::ConsumeFromLastOffset
    );
    assert_eq!(c.subscription_data_set[0].sub_version, 1_700_000_000_000);
    let out = String::from_utf8(encode_json(&hb)).unwrap();
    assert!(out.contains(r#""consumeType":"CONSUME_PASSIVELY""#) && out.contains(r#""clientID""#));
    assert_eq!(decode_json::<HeartbeatData>(out.as_bytes()).unwrap(), hb);
}

/// rocketmq-client-go v2 writes `codeSet` as strings and enums as Java names; a code that is
/// not a 32-bit integer is still refused.
#[test]
fn heartbeat_go_client_string_code_set() {
    let go = r#"{"clientID":"127.0.0.1@c1","producerDataSet":[],"consumerDataSet":[{"groupName":"CG",
        "consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING",
        "consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":[{"classFilterMode":false,
        "topic":"T","subString":"TagA || TagB","tagsSet":["TagA","TagB"],"codeSet":["2598919","2598920"],
        "subVersion":1764686371000000000,"expressionType":"TAG"}],"unitMode":false}]}"#;
    let hb: HeartbeatData = decode_json(go.as_bytes()).unwrap();
    let sub = &hb.consumer_data_set[0].subscription_data_set[0];
    assert_eq!(sub.code_set, vec![2_598_919, 2_598_920]);
    assert_eq!(sub.tags_set, vec!["TagA".to_string(), "TagB".to_string()]);
    assert_eq!(
        hb.consumer_data_set[0].consume_from_where,
        ConsumeFromWhere::ConsumeFromFirstOffset
    );
    for bad in [r#"["x"]"#, r#"["4294967296"]"#, r#"[true]"#] {
        let body = go.replace(r#"["2598919","2598920"]"#, bad);
        assert!(
            matches!(
                decode_json::<HeartbeatData>(body.as_bytes()),
                Err(BodyError::Invalid { .. })
            ),
            "codeSet {bad} accepted"
        );
    }
}

#[test]
fn heartbeat_java_names_and_mxsm_producer_form() {
    let java = r#"{"clientID":"c","consumerDataSet":[{"groupName":"G","consumeType":"CONSUME_ACTIVELY",
        "messageModel":"BROADCASTING","consumeFromWhere":"CONSUME_FROM_TIMESTAMP",
        "subscriptionDataSet":[{"topic":"T","subString":"a || b","tagsSet":["a","b"],"codeSet":[97,98],"subVersion":1}],
        "unitMode":"1"}],"producerDataSet":null}"#;
    let hb: HeartbeatData = decode_json(java.as_bytes()).unwrap();
    let c = &hb.consumer_data_set[0];
    assert_eq!(c.consume_type, ConsumeType::ConsumeActively);
    assert_eq!(c.consume_from_where, ConsumeFromWhere::ConsumeFromTimestamp);
    assert!(c.unit_mode);
    assert_eq!(
        ConsumeType::parse("push"),
        Some(ConsumeType::ConsumePassively)
    );
    assert_eq!(ConsumeFromWhere::ConsumeFromFirstOffset.ordinal(), 4);

    let mxsm = r#"{"clientID":"c","producerDataSet":[{"groupName":"PG"},{"groupName":"CLIENT_INNER_PRODUCER"}],
        "consumerDataSet":[],"heartbeatFingerprint":0,"withoutSub":false}"#;
    let hb: HeartbeatData = decode_json(mxsm.as_bytes()).unwrap();
    assert_eq!(hb.producer_data_set.len(), 2);
    assert_eq!(
        (hb.heartbeat_fingerprint, hb.without_sub),
        (Some(0), Some(false))
    );

    let bad = r#"{"clientID":"c","consumerDataSet":[{"groupName":"G","consumeType":9,"messageModel":1,"consumeFromWhere":0}]}"#;
    assert!(matches!(
        decode_json::<HeartbeatData>(bad.as_bytes()),
        Err(BodyError::Invalid { .. })
    ));
}

#[test]
fn consumer_list_and_lock_bodies() {
    let list = ConsumerListBody {
        consumer_id_list: vec!["a".into(), "b".into()],
    };
    assert_eq!(
        String::from_utf8(encode_json(&list)).unwrap(),
        r#"{"consumerIdList":["a","b"]}"#
    );
    let req = r#"{"consumerGroup":"G","clientId":"c","onlyThisBroker":true,"mqSet":[{"topic":"T","brokerName":"b","queueId":"1"}]}"#;
    let lock: LockBatchRequestBody = decode_json(req.as_bytes()).unwrap();
    assert_eq!(lock.mq_set[0].queue_id, 1);
    let reply = LockBatchResponseBody {
        lock_ok_mq_set: lock.mq_set.clone(),
    };
    let text = String::from_utf8(encode_json(&reply)).unwrap();
    assert!(text.starts_with(r#"{"lockOKMQSet":[{"topic":"T","brokerName":"b","queueId":1}]"#));
}

#[test]
fn register_broker_body_parses_reference_shape() {
    let body = r#"{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"topicName":"T","readQueueNums":4,
        "writeQueueNums":4,"perm":6,"topicFilterType":"SINGLE_TAG","topicSysFlag":0,"order":false,"attributes":{}}},
        "dataVersion":{"stateVersion":0,"timestamp":1700000000000,"counter":3}},"filterServerList":[]}"#;
    let b: RegisterBrokerBody = decode_json(body.as_bytes()).unwrap();
    let w = &b.topic_config_serialize_wrapper;
    assert_eq!(w.topic_config_table["T"].read_queue_nums, 4);
    assert_eq!(w.data_version.counter, 3);
    assert_eq!(
        decode_json::<RegisterBrokerBody>(&encode_json(&b)).unwrap(),
        b
    );
    let minimal: TopicConfig = decode_json(br#"{"topicName":"X"}"#).unwrap();
    assert_eq!(minimal, TopicConfig::new("X"));
}

#[test]
fn message_queue_keyed_maps_in_both_forms() {
    let mq = MessageQueue {
        topic: "T".into(),
        broker_name: "b".into(),
        queue_id: 0,
    };
    let body = ResetOffsetBody {
        offset_table: MqMap(BTreeMap::from([(mq.clone(), 12)])),
    };
    // fastjson form, as Java mqadmin reads and writes it.
    let fast = String::from_utf8(encode_fastjson(&body)).unwrap();
    assert_eq!(
        fast,
        r#"{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:12}}"#
    );
    assert_eq!(
        decode_json::<ResetOffsetBody>(fast.as_bytes()).unwrap(),
        body
    );
    // Standard form (key as a string holding the queue's JSON).
    let std_text = encode_json(&body);
    assert!(serde_json::from_slice::<serde_json::Value>(&std_text).is_ok());
    assert_eq!(decode_json::<ResetOffsetBody>(&std_text).unwrap(), body);
    // The reference's TopicStatsTable example.
    let stats = r#"{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"maxOffset":5,"minOffset":0,"lastUpdateTimestamp":0}},"topicPutTps":0.0}"#;
    let t: TopicStatsTable = decode_json(stats.as_bytes()).unwrap();
    assert_eq!(t.offset_table.0[&mq].max_offset, 5);
    let cs = ConsumeStats {
        consume_tps: 0.0,
        offset_table: MqMap(BTreeMap::from([(
            mq,
            OffsetWrapper {
                broker_offset: 5,
                consumer_offset: 3,
                pull_offset: 4,
                last_timestamp: 1,
            },
        )])),
    };
    assert_eq!(
        decode_json::<ConsumeStats>(&encode_fastjson(&cs)).unwrap(),
        cs
    );
    assert!(decode_json::<ResetOffsetBody>(br#"{"offsetTable":{"notaqueue":1}}"#).is_err());
}
