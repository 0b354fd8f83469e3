//! Tests of the frame, the two header encodings, `RemotingCommand` and `RemotingCodec`,
//! including hand-built captures of the reference's examples and never-panic properties.

use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;
use tokio_util::codec::{Decoder, Encoder};

use super::binary_header::BinaryHeaderError;
use super::json_header::JsonHeaderError;
use super::*;

fn ext(pairs: &[(&str, &str)]) -> ExtFields {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A frame built by hand: length, serialize type + header length, header, body.
fn frame_bytes(ser: u8, header: &[u8], body: &[u8]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_u32((4 + header.len() + body.len()) as u32);
    b.put_u32(((ser as u32) << 24) | header.len() as u32);
    b.put_slice(header);
    b.put_slice(body);
    b.freeze()
}

const REFERENCE_REQUEST: &str = r#"{"code":14,"language":"JAVA","version":479,"opaque":7,"flag":0,"remark":null,"extFields":{"consumerGroup":"G1","topic":"T1","queueId":"0"},"serializeTypeCurrentRPC":"JSON"}"#;
const REFERENCE_REPLY: &str = r#"{"code":0,"flag":1,"language":"JAVA","opaque":7,"serializeTypeCurrentRPC":"JSON","version":0,"extFields":{"offset":"42"}}"#;

// ---- frame ----

#[test]
fn frame_round_trip_with_and_without_body() {
    for body in [&b""[..], b"hello body"] {
        let f = RawFrame {
            serialize_type: SerializeType::RocketMq,
            header: Bytes::from_static(b"hdr"),
            body: Bytes::copy_from_slice(body),
        };
        let mut buf = BytesMut::new();
        f.encode(&mut buf, DEFAULT_MAX_FRAME_LENGTH).unwrap();
        assert_eq!(buf.len(), f.encoded_len());
        assert_eq!(&buf[..4], &((7 + body.len()) as u32).to_be_bytes());
        assert_eq!(buf[4], 1);
        let bytes = buf.clone().freeze();
        assert_eq!(
            RawFrame::decode(&mut buf, DEFAULT_MAX_FRAME_LENGTH).unwrap(),
            Some(f.clone())
        );
        assert!(buf.is_empty());
        assert_eq!(
            RawFrame::from_bytes(bytes, DEFAULT_MAX_FRAME_LENGTH).unwrap(),
            f
        );
    }
}

#[test]
fn partial_frame_consumes_nothing() {
    let whole = frame_bytes(0, b"{}", b"xyz");
    for cut in 0..whole.len() {
        let mut buf = BytesMut::from(&whole[..cut]);
        assert_eq!(RawFrame::decode(&mut buf, 1024).unwrap(), None);
        assert_eq!(buf.len(), cut);
    }
}

#[test]
fn frame_over_limit_rejected_from_length_field_alone() {
    let mut buf = BytesMut::new();
    buf.put_u32(1_000_000);
    assert_eq!(
        RawFrame::decode(&mut buf, 1000),
        Err(FrameError::TooLong {
            size: 1_000_004,
            max: 1000
        })
    );
    // Exactly at the limit is accepted; one byte more is not.
    let f = frame_bytes(0, b"{}", &[0u8; 10]);
    let n = f.len();
    assert!(RawFrame::from_bytes(f.clone(), n).is_ok());
    assert!(matches!(
        RawFrame::from_bytes(f, n - 1),
        Err(FrameError::TooLong { .. })
    ));
    // Default limit: 16 MiB including the length field.
    let mut buf = BytesMut::new();
    buf.put_u32(DEFAULT_MAX_FRAME_LENGTH as u32 - 3);
    assert!(matches!(
        RawFrame::decode(&mut buf, DEFAULT_MAX_FRAME_LENGTH),
        Err(FrameError::TooLong { .. })
    ));
}

#[test]
fn short_or_negative_length_rejected() {
    for length in [0i32, 3, -1, i32::MIN] {
        let mut buf = BytesMut::new();
        buf.put_i32(length);
        assert_eq!(
            RawFrame::decode(&mut buf, DEFAULT_MAX_FRAME_LENGTH),
            Err(FrameError::LengthTooShort { length })
        );
    }
}

#[test]
fn header_length_larger_than_frame_rejected() {
    let mut buf = BytesMut::new();
    buf.put_u32(4 + 2);
    buf.put_u32(3);
    buf.put_slice(b"{}");
    assert_eq!(
        RawFrame::decode(&mut buf, DEFAULT_MAX_FRAME_LENGTH),
        Err(FrameError::HeaderLengthExceedsFrame {
            header_len: 3,
            available: 2
        })
    );
}

#[test]
fn unknown_serialize_type_truncation_and_trailing_bytes_rejected() {
    assert_eq!(
        RawFrame::from_bytes(frame_bytes(2, b"{}", b""), 1024),
        Err(FrameError::UnknownSerializeType(2))
    );
    let whole = frame_bytes(0, b"{}", b"");
    assert!(matches!(
        RawFrame::from_bytes(whole.slice(..whole.len() - 1), 1024),
        Err(FrameError::Truncated { .. })
    ));
    assert!(matches!(
        RawFrame::from_bytes(whole.slice(..2), 1024),
        Err(FrameError::Truncated { .. })
    ));
    let mut extra = BytesMut::from(&whole[..]);
    extra.put_u8(0);
    assert_eq!(
        RawFrame::from_bytes(extra.freeze(), 1024),
        Err(FrameError::TrailingBytes(1))
    );
}

#[test]
fn encoding_over_limit_is_an_error() {
    let cmd = RemotingCommand::new_request(request::SEND_MESSAGE, ExtFields::new())
        .with_body(vec![0u8; 2000]);
    let mut buf = BytesMut::new();
    assert!(matches!(
        cmd.encode(&mut buf, 1024),
        Err(FrameError::TooLong { .. })
    ));
    assert!(buf.is_empty());
}

// ---- JSON header ----

#[test]
fn decodes_reference_json_request() {
    let cmd = RemotingCommand::decode(frame_bytes(0, REFERENCE_REQUEST.as_bytes(), b"")).unwrap();
    assert_eq!(cmd.code, request::QUERY_CONSUMER_OFFSET);
    assert_eq!(cmd.language, LanguageCode::Java);
    assert_eq!(cmd.version, 479);
    assert_eq!(cmd.opaque, 7);
    assert_eq!(cmd.flag, 0);
    assert_eq!(cmd.remark, None);
    assert_eq!(
        cmd.ext_fields,
        ext(&[("consumerGroup", "G1"), ("topic", "T1"), ("queueId", "0")])
    );
    assert_eq!(cmd.body, None);
    assert_eq!(cmd.serialize_type, SerializeType::Json);
    assert!(!cmd.is_response() && !cmd.is_oneway());
}

#[test]
fn decodes_reference_minimal_reply() {
    let cmd = RemotingCommand::decode(frame_bytes(0, REFERENCE_REPLY.as_bytes(), b"")).unwrap();
    assert!(cmd.is_response());
    assert_eq!(
        (cmd.code, cmd.opaque, cmd.version),
        (response::SUCCESS, 7, 0)
    );
    assert_eq!(cmd.ext_fields.get_i64("offset"), Ok(42));
}

#[test]
fn json_ext_values_as_numbers_booleans_and_nested() {
    let header = r#"{"code":11,"language":"CPP","version":63,"opaque":3,"flag":0,
        "extFields":{"queueId":1,"sysFlag":6,"unitMode":"0","batch":true,"off":-5,"f":2.0,
        "big":9007199254740993,"none":null,"obj":{"a":1}},"whatever":[1,2]}"#;
    let cmd = RemotingCommand::decode(frame_bytes(0, header.as_bytes(), b"")).unwrap();
    assert_eq!(cmd.language, LanguageCode::Cpp);
    let e = &cmd.ext_fields;
    assert_eq!(e.get_i32("queueId"), Ok(1));
    assert_eq!(e.get("batch").map(|v| v.as_str()), Some("true"));
    assert_eq!(e.get_bool("batch"), Ok(true));
    assert_eq!(e.get_bool("unitMode"), Ok(false));
    assert_eq!(e.get_i64("off"), Ok(-5));
    assert_eq!(e.get("f").map(|v| v.as_str()), Some("2"));
    assert_eq!(e.get_i64("big"), Ok(9_007_199_254_740_993));
    assert!(!e.contains_key("none"));
    assert_eq!(e.get("obj").map(|v| v.as_str()), Some(r#"{"a":1}"#));
}

#[test]
fn json_leniency_language_number_null_ext_string_numbers() {
    let header = r#"{"code":"34","language":12,"opaque":"9","extFields":null,"remark":""}"#;
    let cmd = json_header::decode(header.as_bytes()).unwrap();
    assert_eq!((cmd.code, cmd.opaque, cmd.version, cmd.flag), (34, 9, 0, 0));
    assert_eq!(cmd.language, LanguageCode::Rust);
    assert!(cmd.ext_fields.is_empty());
    assert_eq!(cmd.remark.as_deref(), Some(""));
    let unknown = json_header::decode(br#"{"code":1,"language":"KOTLIN"}"#).unwrap();
    assert_eq!(unknown.language, LanguageCode::Other);
    let missing = json_header::decode(br#"{"code":1}"#).unwrap();
    assert_eq!(missing.language, LanguageCode::Java);
}

#[test]
fn bad_json_headers_rejected_with_reason() {
    let not_json = RemotingCommand::decode(frame_bytes(0, b"\x00\x01garbage", b""));
    assert!(matches!(
        not_json,
        Err(CommandError::JsonHeader(JsonHeaderError::NotJson(_)))
    ));
    assert_eq!(
        json_header::decode(b"[1,2]"),
        Err(JsonHeaderError::NotObject)
    );
    assert_eq!(
        json_header::decode(b"{\"flag\":1}"),
        Err(JsonHeaderError::MissingCode)
    );
    assert!(matches!(
        json_header::decode(br#"{"code":4294967296}"#),
        Err(JsonHeaderError::InvalidField { field: "code", .. })
    ));
    assert!(matches!(
        json_header::decode(br#"{"code":1,"opaque":1.5}"#),
        Err(JsonHeaderError::InvalidField {
            field: "opaque",
            ..
        })
    ));
    assert!(matches!(
        json_header::decode(br#"{"code":1,"extFields":[1]}"#),
        Err(JsonHeaderError::InvalidField {
            field: "extFields",
            ..
        })
    ));
    assert!(matches!(
        json_header::decode(br#"{"code":1,"language":[1]}"#),
        Err(JsonHeaderError::InvalidField {
            field: "language",
            ..
        })
    ));
}

#[test]
fn json_output_shape() {
    let req = RemotingCommand::decode(frame_bytes(0, REFERENCE_REQUEST.as_bytes(), b"")).unwrap();
    let reply = req.reply(response::SUCCESS, None);
    let text = String::from_utf8(json_header::encode(&reply)).unwrap();
    assert_eq!(
        text,
        r#"{"code":0,"language":"JAVA","version":479,"opaque":7,"flag":1,"extFields":{},"serializeTypeCurrentRPC":"JSON"}"#
    );
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(v.get("remark").is_none());
}

// ---- binary header ----

/// The binary header of §4 built field by field.
fn binary_header(
    code: i16,
    lang: u8,
    version: i16,
    opaque: i32,
    flag: i32,
    remark: &str,
    ext: &[(&str, &str)],
) -> Vec<u8> {
    let mut h = Vec::new();
    h.put_i16(code);
    h.put_u8(lang);
    h.put_i16(version);
    h.put_i32(opaque);
    h.put_i32(flag);
    h.put_i32(remark.len() as i32);
    h.put_slice(remark.as_bytes());
    let mut m = Vec::new();
    for (k, v) in ext {
        m.put_i16(k.len() as i16);
        m.put_slice(k.as_bytes());
        m.put_i32(v.len() as i32);
        m.put_slice(v.as_bytes());
    }
    h.put_i32(m.len() as i32);
    h.put_slice(&m);
    h
}

#[test]
fn decodes_hand_built_binary_header() {
    let h = binary_header(
        15,
        0,
        401,
        77,
        2,
        "",
        &[
            ("consumerGroup", "G"),
            ("commitOffset", "12"),
            ("empty", ""),
        ],
    );
    let cmd = RemotingCommand::decode(frame_bytes(1, &h, b"B")).unwrap();
    assert_eq!(cmd.code, request::UPDATE_CONSUMER_OFFSET);
    assert_eq!(cmd.language, LanguageCode::Java);
    assert_eq!((cmd.version, cmd.opaque), (401, 77));
    assert!(cmd.is_oneway());
    assert_eq!(cmd.remark, None);
    assert_eq!(
        cmd.ext_fields,
        ext(&[("consumerGroup", "G"), ("commitOffset", "12")])
    );
    assert_eq!(cmd.body.as_deref(), Some(&b"B"[..]));
    assert_eq!(cmd.serialize_type, SerializeType::RocketMq);

    let with_remark = binary_header(1, 1, -1, 0, 1, "boom", &[]);
    let cmd = binary_header::decode(&with_remark).unwrap();
    assert_eq!(
        (cmd.code, cmd.version, cmd.language),
        (1, -1, LanguageCode::Cpp)
    );
    assert_eq!(cmd.remark.as_deref(), Some("boom"));
}

#[test]
fn bad_binary_headers_rejected_with_reason() {
    let good = binary_header(10, 0, 1, 1, 0, "r", &[("k", "v")]);
    for cut in 0..good.len() {
        assert!(
            matches!(
                binary_header::decode(&good[..cut]),
                Err(BinaryHeaderError::Truncated { .. })
            ),
            "cut at {cut}"
        );
    }
    let mut trailing = good.clone();
    trailing.push(0);
    assert_eq!(
        binary_header::decode(&trailing),
        Err(BinaryHeaderError::TrailingBytes(1))
    );
    let mut neg = binary_header(10, 0, 1, 1, 0, "", &[]);
    neg[13..17].copy_from_slice(&(-1i32).to_be_bytes());
    assert_eq!(
        binary_header::decode(&neg),
        Err(BinaryHeaderError::NegativeLength {
            field: "remark length",
            length: -1
        })
    );
    let mut bad_utf8 = binary_header(10, 0, 1, 1, 0, "ab", &[]);
    bad_utf8[17] = 0xFF;
    assert_eq!(
        binary_header::decode(&bad_utf8),
        Err(BinaryHeaderError::NotUtf8 { field: "remark" })
    );
    let mut neg_key = binary_header(10, 0, 1, 1, 0, "", &[("k", "v")]);
    neg_key[21..23].copy_from_slice(&(-3i16).to_be_bytes());
    assert!(matches!(
        binary_header::decode(&neg_key),
        Err(BinaryHeaderError::NegativeLength { .. })
    ));
}

/// A binary header's ext fields are kept undecoded until read as a map; a typed header reads
/// them from the bytes. Both ways give the map's answers: the last of a repeated key, empty
/// values and keys dropped, unknown keys ignored, the same errors.
#[test]
fn binary_ext_fields_read_lazily_give_the_maps_answers() {
    use super::ext::{CommandHeader, HeaderError};
    use super::headers::send::SendMessageRequestHeaderV2;

    let fields = [
        ("a", "PG"),
        ("b", "first"),
        ("zz-unknown", "x"),
        ("b", "Topic"),
        ("c", "TBW102"),
        ("d", "4"),
        ("e", "3"),
        ("f", "0"),
        ("g", "1700000000000"),
        ("h", "0"),
        (
            "i",
            "KEYS\u{1}k\u{2}WAIT\u{1}true\u{2}UNIQ_KEY\u{1}0A0B0C0D0E0F\u{2}",
        ),
        ("j", ""),
        ("", "no key"),
        ("l", "16"),
    ];
    let h = binary_header(310, 0, 1, 9, 0, "", &fields);
    let lazy = RemotingCommand::decode(frame_bytes(1, &h, b"")).unwrap();
    assert!(lazy.ext_fields.binary().is_some(), "kept undecoded");
    let eager: super::ext::ExtFields = fields
        .iter()
        .filter(|(k, v)| !k.is_empty() && !v.is_empty())
        .map(|(k, v)| (*k, *v))
        .collect();
    let typed = SendMessageRequestHeaderV2::from_ext(&lazy.ext_fields).unwrap();
    assert_eq!(typed, SendMessageRequestHeaderV2::from_ext(&eager).unwrap());
    assert_eq!(typed.b, "Topic", "the last of a repeated key");
    assert_eq!(typed.j, None, "an empty value is no field");
    assert_eq!(typed.l, Some(16));
    // Read as a map: the same fields in key order, equal to the eagerly built map.
    assert_eq!(lazy.ext_fields, eager);
    assert_eq!(
        lazy.ext_fields
            .keys()
            .map(|k| k.as_str())
            .collect::<Vec<_>>(),
        [
            "a",
            "b",
            "c",
            "d",
            "e",
            "f",
            "g",
            "h",
            "i",
            "l",
            "zz-unknown"
        ]
    );
    assert_eq!(lazy.ext_fields.get("e").map(|v| v.as_str()), Some("3"));

    // A change drops the bytes: the typed header then reads the changed map.
    let mut changed = lazy.clone();
    changed.ext_fields.insert("e", "5");
    assert!(changed.ext_fields.binary().is_none());
    let header = SendMessageRequestHeaderV2::from_ext(&changed.ext_fields).unwrap();
    assert_eq!(header.e, 5);
    assert!(
        lazy.ext_fields.binary().is_some(),
        "a clone's change is its own"
    );

    // The same errors either way.
    for (bad, expected) in [
        (
            vec![("a", "PG"), ("b", "T"), ("c", "TBW102"), ("d", "4")],
            HeaderError::Missing("e"),
        ),
        (
            vec![
                ("a", "PG"),
                ("b", "T"),
                ("c", "TBW102"),
                ("d", "4"),
                ("e", "three"),
            ],
            HeaderError::Invalid {
                field: "e",
                value: "three".into(),
                expected: "a 32-bit integer",
            },
        ),
    ] {
        let h = binary_header(310, 0, 1, 9, 0, "", &bad);
        let lazy = RemotingCommand::decode(frame_bytes(1, &h, b"")).unwrap();
        let eager: super::ext::ExtFields = bad.iter().map(|(k, v)| (*k, *v)).collect();
        let from_bytes = SendMessageRequestHeaderV2::from_ext(&lazy.ext_fields).unwrap_err();
        let from_map = SendMessageRequestHeaderV2::from_ext(&eager).unwrap_err();
        assert_eq!(from_bytes, from_map);
        assert_eq!(from_bytes, expected);
    }
}

// ---- command ----

fn sample(serialize_type: SerializeType) -> RemotingCommand {
    let mut cmd = RemotingCommand::new_request(
        request::SEND_MESSAGE_V2,
        ext(&[
            ("a", "PG"),
            ("b", "T"),
            ("e", "3"),
            ("i", "TAGS\u{1}x\u{2}"),
        ]),
    )
    .with_opaque(-12)
    .with_body(&b"\x00\x01payload"[..]);
    cmd.serialize_type = serialize_type;
    cmd.remark = Some("r\u{e9}mark".into());
    cmd
}

#[test]
fn command_round_trips_in_both_encodings() {
    for st in [SerializeType::Json, SerializeType::RocketMq] {
        let cmd = sample(st);
        let bytes = cmd.to_bytes().unwrap();
        assert_eq!(bytes[4], st.code());
        assert_eq!(RemotingCommand::decode(bytes).unwrap(), cmd);
        let reply = cmd.reply(response::TOPIC_NOT_EXIST, Some("no topic".into()));
        assert_eq!(
            RemotingCommand::decode(reply.to_bytes().unwrap()).unwrap(),
            reply
        );
    }
}

#[test]
fn binary_falls_back_to_json_when_it_cannot_carry_the_command() {
    let mut pop = RemotingCommand::new_request(request::POP_MESSAGE, ext(&[("k", "v")]));
    pop.serialize_type = SerializeType::RocketMq;
    let frame = pop.to_frame();
    assert_eq!(frame.serialize_type, SerializeType::Json);
    let mut back = RemotingCommand::from_frame(frame).unwrap();
    back.serialize_type = SerializeType::RocketMq;
    assert_eq!(back, pop);

    let mut empty_value =
        RemotingCommand::new_request(request::SEND_MESSAGE, ext(&[("properties", "")]));
    empty_value.serialize_type = SerializeType::RocketMq;
    assert_eq!(empty_value.to_frame().serialize_type, SerializeType::Json);
}

#[test]
fn reply_copies_opaque_and_serialize_type() {
    let mut req = sample(SerializeType::RocketMq);
    req.language = LanguageCode::Cpp;
    let reply = req.reply(response::SUCCESS, None);
    assert_eq!(reply.opaque, -12);
    assert_eq!(reply.flag, FLAG_RESPONSE);
    assert!(reply.is_response());
    assert_eq!(reply.language, LanguageCode::Java);
    assert_eq!(reply.serialize_type, SerializeType::RocketMq);
    assert!(reply.ext_fields.is_empty() && reply.body.is_none());

    let standalone = RemotingCommand::new_response(response::SYSTEM_ERROR, Some("x".into()));
    assert!(standalone.is_response() && !standalone.is_oneway());
}

#[test]
fn oneway_flag() {
    let mut cmd = RemotingCommand::new_request(request::UPDATE_CONSUMER_OFFSET, ExtFields::new());
    assert!(!cmd.is_oneway());
    cmd.set_oneway(true);
    assert_eq!(cmd.flag, FLAG_ONEWAY);
    assert!(cmd.is_oneway() && !cmd.is_response());
    cmd.set_oneway(false);
    assert_eq!(cmd.flag, 0);
}

// ---- codec ----

#[test]
fn codec_decodes_back_to_back_and_split_frames() {
    let mut codec = RemotingCodec::default();
    let a = sample(SerializeType::Json);
    let b = sample(SerializeType::RocketMq).reply(response::SUCCESS, None);
    let mut wire = BytesMut::new();
    codec.encode(&a, &mut wire).unwrap();
    codec.encode(b.clone(), &mut wire).unwrap();
    let all = wire.freeze();
    // Feed one byte at a time.
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    for byte in all.iter() {
        buf.put_u8(*byte);
        while let Some(cmd) = codec.decode(&mut buf).unwrap() {
            got.push(cmd);
        }
    }
    assert_eq!(got, vec![a, b]);
    assert!(buf.is_empty());
}

#[test]
fn codec_enforces_configured_limit_both_ways() {
    let mut codec = RemotingCodec::new(64);
    assert_eq!(codec.max_frame_length(), 64);
    let big = sample(SerializeType::Json);
    let mut out = BytesMut::new();
    assert!(matches!(
        codec.encode(&big, &mut out),
        Err(CodecError::Frame(FrameError::TooLong { .. }))
    ));
    let mut wire = BytesMut::from(&big.to_bytes().unwrap()[..]);
    assert!(matches!(
        codec.decode(&mut wire),
        Err(CodecError::Frame(FrameError::TooLong { .. }))
    ));
    let mut bad = BytesMut::from(&frame_bytes(0, b"nope", b"")[..]);
    assert!(matches!(
        codec.decode(&mut bad),
        Err(CodecError::Command(_))
    ));
}

#[tokio::test]
async fn codec_over_a_byte_stream() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_util::codec::{FramedRead, FramedWrite};

    let (client, server) = tokio::io::duplex(64);
    let mut writer = FramedWrite::new(client, RemotingCodec::default());
    let mut reader = FramedRead::new(server, RemotingCodec::default());
    let cmds: Vec<_> = (0..5)
        .map(|i| {
            let mut c = sample(if i % 2 == 0 {
                SerializeType::Json
            } else {
                SerializeType::RocketMq
            });
            c.opaque = i;
            c
        })
        .collect();
    let expected = cmds.clone();
    let send = tokio::spawn(async move {
        for c in cmds {
            writer.send(c).await.unwrap();
        }
    });
    for want in expected {
        assert_eq!(reader.next().await.unwrap().unwrap(), want);
    }
    send.await.unwrap();
}

// ---- properties ----

fn arb_command() -> impl Strategy<Value = RemotingCommand> {
    (
        any::<i32>(),
        0u8..14,
        any::<i32>(),
        any::<i32>(),
        any::<i32>(),
        proptest::option::of(".{0,20}"),
        proptest::collection::btree_map(".{0,12}", ".{0,12}", 0..6),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 1..64)),
        any::<bool>(),
    )
        .prop_map(
            |(code, lang, version, opaque, flag, remark, ext_fields, body, binary)| {
                RemotingCommand {
                    code,
                    language: LanguageCode::from_code_lenient(lang),
                    version,
                    opaque,
                    flag,
                    remark,
                    ext_fields: ext_fields.into_iter().collect::<ExtFields>(),
                    body: body.map(Bytes::from),
                    serialize_type: if binary {
                        SerializeType::RocketMq
                    } else {
                        SerializeType::Json
                    },
                }
            },
        )
}

proptest! {
    #[test]
    fn random_bytes_never_panic_the_frame_decoder(data in proptest::collection::vec(any::<u8>(), 0..512), max in 0usize..1024) {
        let mut buf = BytesMut::from(&data[..]);
        let mut codec = RemotingCodec::new(max);
        while let Ok(Some(_)) = codec.decode(&mut buf) {}
        let mut buf = BytesMut::from(&data[..]);
        while let Ok(Some(_)) = RawFrame::decode(&mut buf, max) {}
    }

    #[test]
    fn random_bytes_never_panic_command_decode(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = RemotingCommand::decode(Bytes::from(data.clone()));
        let _ = json_header::decode(&data);
        let _ = binary_header::decode(&data);
    }

    #[test]
    fn random_headers_in_valid_frames_never_panic(ser in 0u8..2, header in proptest::collection::vec(any::<u8>(), 0..256), body in proptest::collection::vec(any::<u8>(), 0..16)) {
        let _ = RemotingCommand::decode(frame_bytes(ser, &header, &body));
    }

    #[test]
    fn random_json_text_never_panics(text in "\\{.{0,200}") {
        let _ = json_header::decode(text.as_bytes());
        let _ = body::fastjson::normalize(&text);
    }

    /// `encode` and `encode_head` write the frame `to_frame` builds, byte for byte, after
    /// what the buffer held, and refuse what it refuses, appending nothing then.
    #[test]
    fn encoding_in_place_matches_the_built_frame(cmd in arb_command(), max in 0usize..400, body_len in 0usize..100) {
        let mut built = BytesMut::from(&b"before"[..]);
        let mut direct = built.clone();
        let expected = cmd.to_frame().encode(&mut built, max);
        prop_assert_eq!(cmd.encode(&mut direct, max), expected.clone());
        prop_assert_eq!(&direct, &built);
        if expected.is_err() {
            prop_assert_eq!(&direct[..], b"before");
        }
        let mut frame = cmd.to_frame();
        frame.body = Bytes::new();
        let (mut built, mut direct) = (BytesMut::new(), BytesMut::new());
        let expected = frame.encode_head(body_len, &mut built, max);
        prop_assert_eq!(cmd.encode_head(body_len, &mut direct, max), expected);
        prop_assert_eq!(direct, built);
    }

    #[test]
    fn every_command_round_trips(cmd in arb_command()) {
        let bytes = cmd.to_bytes().unwrap();
        let mut back = RemotingCommand::decode(bytes).unwrap();
        back.serialize_type = cmd.serialize_type;
        prop_assert_eq!(back, cmd);
    }
}

#[test]
fn a_frame_head_followed_by_its_body_is_the_whole_frame() {
    let body = Bytes::from_static(b"records sent from a file");
    for serialize_type in [SerializeType::Json, SerializeType::RocketMq] {
        let mut command = RemotingCommand::new_response(0, Some("ok".into()));
        command.serialize_type = serialize_type;
        let whole = command.clone().with_body(body.clone()).to_bytes().unwrap();
        let mut head = BytesMut::new();
        command
            .clone()
            .with_body(Bytes::from_static(b"ignored"))
            .encode_head(body.len(), &mut head, DEFAULT_MAX_FRAME_LENGTH)
            .unwrap();
        head.extend_from_slice(&body);
        assert_eq!(head.freeze(), whole);
        let error = command
            .encode_head(1024, &mut BytesMut::new(), 64)
            .unwrap_err();
        assert!(matches!(error, FrameError::TooLong { .. }), "{error}");
    }
}
