//! Header tests: every client's value forms, required-field errors, V2 to V1 conversion and
//! round trips through ext fields and whole commands.

use super::admin::*;
use super::client::*;
use super::enums::*;
use super::namesrv::*;
use super::offset::*;
use super::pull::*;
use super::send::*;
use crate::remoting::ext::{CommandHeader, ExtFields, HeaderError};
use crate::remoting::{request, RemotingCommand, SerializeType};

fn ext(pairs: &[(&str, &str)]) -> ExtFields {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn round_trip<H: CommandHeader + PartialEq + std::fmt::Debug>(h: &H) {
    assert_eq!(&H::from_ext(&h.to_ext()).unwrap(), h);
}

fn v1() -> SendMessageRequestHeader {
    SendMessageRequestHeader {
        producer_group: "PG".into(),
        topic: "T".into(),
        default_topic: "TBW102".into(),
        default_topic_queue_nums: 4,
        queue_id: 2,
        sys_flag: 0,
        born_timestamp: 1_700_000_000_000,
        flag: 0,
        properties: Some("TAGS\u{1}a\u{2}".into()),
        reconsume_times: Some(0),
        unit_mode: Some(false),
        batch: None,
        max_reconsume_times: Some(16),
        broker_name: Some("broker-a".into()),
    }
}

#[test]
fn send_v2_converts_to_v1_and_back() {
    let v2: SendMessageRequestHeaderV2 = v1().into();
    let e = v2.to_ext();
    assert_eq!(e.get("a").map(|v| v.as_str()), Some("PG"));
    assert_eq!(e.get("l").map(|v| v.as_str()), Some("16"));
    assert_eq!(e.get("n").map(|v| v.as_str()), Some("broker-a"));
    assert!(!e.contains_key("m"));
    let back: SendMessageRequestHeader = SendMessageRequestHeaderV2::from_ext(&e).unwrap().into();
    assert_eq!(back, v1());
    round_trip(&v1());
    assert_eq!(
        v1().to_ext().get("bname").map(|v| v.as_str()),
        Some("broker-a")
    );
}

#[test]
fn send_v1_from_cpp_json_numbers() {
    // C++ core: numbers as JSON numbers, batch/unitMode as "0"/"1", SEND_MESSAGE (10).
    let header = r#"{"code":10,"language":"CPP","version":63,"opaque":1,"flag":0,"extFields":{
        "producerGroup":"PG","topic":"T","defaultTopic":"TBW102","defaultTopicQueueNums":4,
        "queueId":1,"sysFlag":0,"bornTimestamp":1700000000000,"flag":0,"properties":"",
        "reconsumeTimes":0,"unitMode":"0","batch":"1","maxReconsumeTimes":""}}"#;
    let cmd = crate::remoting::json_header::decode(header.as_bytes()).unwrap();
    let h: SendMessageRequestHeader = cmd.decode_header().unwrap();
    assert_eq!(h.queue_id, 1);
    assert_eq!(h.born_timestamp, 1_700_000_000_000);
    assert_eq!(h.unit_mode, Some(false));
    assert_eq!(h.batch, Some(true));
    assert_eq!(h.properties.as_deref(), Some(""));
    assert_eq!(h.max_reconsume_times, None);
}

#[test]
fn send_v2_from_ali_ons_json_booleans() {
    let header = r#"{"code":310,"language":"JAVA","version":121,"opaque":2,"flag":0,"extFields":{
        "a":"PG","b":"T","c":"TBW102","d":4,"e":0,"f":0,"g":1700000000000,"h":0,"i":"",
        "j":0,"k":false,"m":false,"AccessKey":"ak","Signature":"s","OnsChannel":"ALIYUN"}}"#;
    let cmd = crate::remoting::json_header::decode(header.as_bytes()).unwrap();
    let h: SendMessageRequestHeader = cmd
        .decode_header::<SendMessageRequestHeaderV2>()
        .unwrap()
        .into();
    assert_eq!((h.producer_group.as_str(), h.queue_id), ("PG", 0));
    assert_eq!((h.unit_mode, h.batch), (Some(false), Some(false)));
}

#[test]
fn missing_and_invalid_fields_named() {
    let mut e = v1().to_ext();
    e.remove("queueId");
    assert_eq!(
        SendMessageRequestHeader::from_ext(&e),
        Err(HeaderError::Missing("queueId"))
    );
    e.insert("queueId", "zero");
    assert!(matches!(
        SendMessageRequestHeader::from_ext(&e),
        Err(HeaderError::Invalid {
            field: "queueId",
            ..
        })
    ));
    let bad_bool = ext(&[
        ("consumerGroup", "G"),
        ("topic", "T"),
        ("queueId", "0"),
        ("setZeroIfNotFound", "maybe"),
    ]);
    assert!(matches!(
        QueryConsumerOffsetRequestHeader::from_ext(&bad_bool),
        Err(HeaderError::Invalid {
            field: "setZeroIfNotFound",
            ..
        })
    ));
}

#[test]
fn pull_request_from_numbers_and_response_required_fields() {
    let e = ext(&[
        ("consumerGroup", "G"),
        ("topic", "T"),
        ("queueId", "3"),
        ("queueOffset", "100"),
        ("maxMsgNums", "32"),
        ("sysFlag", "7"),
        ("commitOffset", "99"),
        ("suspendTimeoutMillis", "15000"),
        ("subscription", "*"),
        ("subVersion", "1700000000000"),
    ]);
    let p = PullMessageRequestHeader::from_ext(&e).unwrap();
    assert_eq!((p.queue_offset, p.sys_flag, p.commit_offset), (100, 7, 99));
    assert_eq!(p.expression_type, None);
    round_trip(&p);
    let r = PullMessageResponseHeader {
        next_begin_offset: 5,
        max_offset: 9,
        ..Default::default()
    };
    let out = r.to_ext();
    for key in [
        "suggestWhichBrokerId",
        "nextBeginOffset",
        "minOffset",
        "maxOffset",
    ] {
        assert!(out.contains_key(key), "{key}");
    }
    round_trip(&r);
}

#[test]
fn offset_headers_round_trip_and_parse_enums() {
    round_trip(&QueryConsumerOffsetRequestHeader {
        consumer_group: "G".into(),
        topic: "T".into(),
        queue_id: 1,
        set_zero_if_not_found: Some(true),
    });
    round_trip(&QueryConsumerOffsetResponseHeader { offset: 42 });
    round_trip(&UpdateConsumerOffsetRequestHeader {
        consumer_group: "G".into(),
        topic: "T".into(),
        queue_id: 1,
        commit_offset: -1,
    });
    round_trip(&GetMaxOffsetRequestHeader {
        topic: "T".into(),
        queue_id: 0,
        committed: Some(true),
    });
    round_trip(&GetMaxOffsetResponseHeader { offset: 7 });
    round_trip(&GetMinOffsetRequestHeader {
        topic: "T".into(),
        queue_id: 0,
    });
    round_trip(&GetMinOffsetResponseHeader { offset: 0 });
    round_trip(&GetEarliestMsgStoretimeRequestHeader {
        topic: "T".into(),
        queue_id: 0,
    });
    round_trip(&GetEarliestMsgStoretimeResponseHeader { timestamp: 5 });
    round_trip(&SearchOffsetResponseHeader { offset: 3 });
    round_trip(&GetConsumeStatsRequestHeader {
        consumer_group: "G".into(),
        topic: None,
        topic_list: Some("A;B".into()),
    });
    round_trip(&ResetOffsetRequestHeader {
        group: "G".into(),
        topic: "T".into(),
        queue_id: Some(-1),
        offset: None,
        timestamp: -1,
        is_force: true,
    });
    round_trip(&CloneGroupOffsetRequestHeader {
        src_group: "A".into(),
        dest_group: "B".into(),
        topic: None,
        offline: Some(false),
    });
    round_trip(&QueryCorrectionOffsetHeader {
        filter_groups: None,
        compare_group: "G".into(),
        topic: "T".into(),
    });

    for (text, want) in [
        ("LOWER", BoundaryType::Lower),
        ("upper", BoundaryType::Upper),
        ("1", BoundaryType::Upper),
        ("0", BoundaryType::Lower),
    ] {
        let e = ext(&[
            ("topic", "T"),
            ("queueId", "0"),
            ("timestamp", "5"),
            ("boundaryType", text),
        ]);
        assert_eq!(
            SearchOffsetRequestHeader::from_ext(&e)
                .unwrap()
                .boundary_type,
            Some(want)
        );
    }
    let bad = ext(&[
        ("topic", "T"),
        ("queueId", "0"),
        ("timestamp", "5"),
        ("boundaryType", "MIDDLE"),
    ]);
    assert!(matches!(
        SearchOffsetRequestHeader::from_ext(&bad),
        Err(HeaderError::Invalid {
            field: "boundaryType",
            ..
        })
    ));
    let reset = ResetOffsetRequestHeader {
        is_force: true,
        ..Default::default()
    }
    .to_ext();
    assert_eq!(reset.get("isForce").map(|v| v.as_str()), Some("true"));
}

#[test]
fn client_namesrv_admin_headers_round_trip() {
    round_trip(&UnregisterClientRequestHeader {
        client_id: "1.2.3.4@1".into(),
        producer_group: Some("PG".into()),
        consumer_group: None,
    });
    assert!(UnregisterClientRequestHeader::default()
        .to_ext()
        .contains_key("clientID"));
    round_trip(&GetConsumerListByGroupRequestHeader {
        consumer_group: "G".into(),
    });
    round_trip(&NotifyConsumerIdsChangedRequestHeader {
        consumer_group: "G".into(),
    });
    round_trip(&ConsumerSendMsgBackRequestHeader {
        offset: 100,
        group: "G".into(),
        delay_level: 0,
        origin_msg_id: Some("ID".into()),
        origin_topic: Some("T".into()),
        unit_mode: Some(false),
        max_reconsume_times: Some(16),
    });
    round_trip(&HeartbeatResponseHeader {
        is_support_heart_beat_v2: Some(false),
        is_sub_change: Some(true),
    });
    round_trip(&ViewMessageRequestHeader {
        offset: 9,
        topic: None,
    });
    round_trip(&GetRouteInfoRequestHeader {
        topic: "T".into(),
        accept_standard_json_only: Some(true),
    });
    round_trip(&RegisterBrokerRequestHeader {
        broker_name: "b".into(),
        broker_addr: "127.0.0.1:10911".into(),
        cluster_name: "C".into(),
        ha_server_addr: "127.0.0.1:10912".into(),
        broker_id: 0,
        heartbeat_timeout_millis: Some(120_000),
        enable_acting_master: Some(false),
        compressed: Some(false),
        body_crc32: Some(-5),
    });
    round_trip(&RegisterBrokerResponseHeader {
        ha_server_addr: None,
        master_addr: Some("m".into()),
    });
    round_trip(&UnregisterBrokerRequestHeader {
        broker_name: "b".into(),
        broker_addr: "a".into(),
        cluster_name: "C".into(),
        broker_id: 1,
    });
    round_trip(&QueryDataVersionRequestHeader {
        broker_name: "b".into(),
        broker_addr: "a".into(),
        cluster_name: "C".into(),
        broker_id: 0,
    });
    round_trip(&QueryDataVersionResponseHeader {
        changed: Some(true),
    });
    round_trip(&GetTopicsByClusterRequestHeader {
        cluster: "C".into(),
    });
    round_trip(&DeleteTopicFromNamesrvRequestHeader {
        topic: "T".into(),
        cluster_name: None,
    });
    round_trip(&WipeWritePermOfBrokerRequestHeader {
        broker_name: "b".into(),
    });
    round_trip(&WipeWritePermOfBrokerResponseHeader {
        wipe_topic_count: 3,
    });
    round_trip(&AddWritePermOfBrokerRequestHeader {
        broker_name: "b".into(),
    });
    round_trip(&AddWritePermOfBrokerResponseHeader { add_topic_count: 3 });
    round_trip(&CreateTopicRequestHeader {
        topic: "T".into(),
        default_topic: "TBW102".into(),
        read_queue_nums: 8,
        write_queue_nums: 8,
        perm: 6,
        topic_filter_type: TopicFilterType::SingleTag,
        topic_sys_flag: Some(0),
        order: Some(false),
        attributes: Some("+message.type=NORMAL".into()),
        force: None,
    });
    let java = CreateTopicRequestHeader::as_java_sends("T", 4, 2, 6).to_ext();
    for (key, value) in [
        ("topic", "T"),
        ("defaultTopic", "TBW102"),
        ("readQueueNums", "4"),
        ("writeQueueNums", "2"),
        ("perm", "6"),
        ("topicFilterType", "SINGLE_TAG"),
        ("topicSysFlag", "0"),
        ("order", "false"),
    ] {
        assert_eq!(java.get(key).map(|v| v.as_str()), Some(value), "{key}");
    }
    round_trip(&DeleteTopicRequestHeader { topic: "T".into() });
    round_trip(&GetTopicConfigRequestHeader { topic: "T".into() });
    round_trip(&GetTopicStatsInfoRequestHeader { topic: "T".into() });
    round_trip(&GetSubscriptionGroupConfigRequestHeader { group: "G".into() });
    round_trip(&DeleteSubscriptionGroupRequestHeader {
        group_name: "G".into(),
        clean_offset: Some(true),
    });
    round_trip(&GetConsumerConnectionListRequestHeader {
        consumer_group: "G".into(),
    });
    round_trip(&GetProducerConnectionListRequestHeader {
        producer_group: "PG".into(),
    });
    round_trip(&QueryConsumeQueueRequestHeader {
        topic: "T".into(),
        queue_id: 0,
        index: 0,
        count: 10,
        consumer_group: None,
    });
    let tf = ext(&[
        ("topic", "T"),
        ("defaultTopic", "D"),
        ("readQueueNums", "1"),
        ("writeQueueNums", "1"),
        ("perm", "6"),
        ("topicFilterType", "MULTI_TAG"),
    ]);
    assert_eq!(
        CreateTopicRequestHeader::from_ext(&tf)
            .unwrap()
            .topic_filter_type,
        TopicFilterType::MultiTag
    );
}

#[test]
fn typed_headers_survive_whole_command_round_trip() {
    for st in [SerializeType::Json, SerializeType::RocketMq] {
        let mut cmd = RemotingCommand::request_with_header(request::SEND_MESSAGE, &v1());
        cmd.serialize_type = st;
        let back = RemotingCommand::decode(cmd.to_bytes().unwrap()).unwrap();
        assert_eq!(
            back.decode_header::<SendMessageRequestHeader>().unwrap(),
            v1()
        );
        let reply = back.reply(0, None).with_header(&SendMessageResponseHeader {
            msg_id: "0A".into(),
            queue_id: 2,
            queue_offset: 5,
            ..Default::default()
        });
        let r = RemotingCommand::decode(reply.to_bytes().unwrap()).unwrap();
        assert_eq!(
            r.decode_header::<SendMessageResponseHeader>()
                .unwrap()
                .queue_offset,
            5
        );
    }
}
