//! Tests of the HA wire format and codec.

use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;
use tokio_util::codec::{Decoder, Encoder};

use super::*;

fn hello() -> Hello {
    Hello {
        version: HA_VERSION,
        cluster: "DefaultCluster".to_owned(),
        broker_name: "broker-a".to_owned(),
        broker_id: 1,
        log_end: 4096,
        epoch: 3,
        segment_size: 1 << 30,
        samples: vec![
            RecordSample {
                offset: 0,
                size: 2048,
                crc: 0xdead_beef,
            },
            RecordSample {
                offset: 2048,
                size: 2048,
                crc: 7,
            },
        ],
        epochs: vec![
            EpochEntry { epoch: 1, start: 0 },
            EpochEntry {
                epoch: 3,
                start: 2048,
            },
        ],
    }
}

fn every_kind() -> Vec<HaFrame> {
    vec![
        HaFrame::Hello(hello()),
        HaFrame::Welcome(Welcome {
            epoch: 4,
            master_end: 8192,
            start: 4096,
            watermark: 4000,
            epochs: vec![EpochEntry {
                epoch: 4,
                start: 100,
            }],
        }),
        HaFrame::Truncate(Truncate {
            to: 2048,
            reason: "epoch 3 ended at 2048 on the master".to_owned(),
        }),
        HaFrame::Refused(Refused {
            code: RefusalCode::Diverged,
            differs_at: Some(2048),
            reason: "record at 2048 has another CRC".to_owned(),
        }),
        HaFrame::Refused(Refused {
            code: RefusalCode::NotMaster,
            differs_at: None,
            reason: String::new(),
        }),
        HaFrame::Data(Data {
            offset: 4096,
            watermark: 4000,
            master_end: 8192,
            bytes: Bytes::from_static(b"commitlog bytes"),
        }),
        HaFrame::Data(Data {
            offset: 1,
            watermark: 2,
            master_end: 3,
            bytes: Bytes::new(),
        }),
        HaFrame::Heartbeat {
            watermark: 10,
            master_end: u64::MAX,
        },
        HaFrame::Ack { log_end: 8192 },
    ]
}

fn encode(frame: &HaFrame) -> BytesMut {
    let mut buf = BytesMut::new();
    HaCodec::default()
        .encode(frame, &mut buf)
        .expect("frame within bounds encodes");
    buf
}

/// A raw frame: the length field, the kind byte and `payload`.
fn raw(kind: u8, payload: &[u8]) -> BytesMut {
    let mut buf = BytesMut::new();
    buf.put_u32(1 + payload.len() as u32);
    buf.put_u8(kind);
    buf.put_slice(payload);
    buf
}

/// Decodes every frame in `buf`, stopping at the first error or incomplete frame.
fn decode_all(codec: &mut HaCodec, buf: &mut BytesMut) -> Result<Vec<HaFrame>, HaFrameError> {
    let mut frames = Vec::new();
    while let Some(frame) = codec.decode(buf)? {
        frames.push(frame);
    }
    Ok(frames)
}

#[test]
fn every_kind_round_trips() {
    for frame in every_kind() {
        let mut buf = encode(&frame);
        let decoded = HaCodec::default().decode(&mut buf).expect("decodes");
        assert_eq!(decoded.as_ref(), Some(&frame), "{}", frame.kind_name());
        assert!(buf.is_empty(), "{} left bytes behind", frame.kind_name());
    }
}

#[test]
fn the_layout_is_big_endian_with_a_length_prefix() {
    let buf = encode(&HaFrame::Ack { log_end: 0x0102 });
    assert_eq!(&buf[..], &[0, 0, 0, 9, KIND_ACK, 0, 0, 0, 0, 0, 0, 1, 2]);
    let buf = encode(&HaFrame::Refused(Refused {
        code: RefusalCode::BadHello,
        differs_at: None,
        reason: "x".to_owned(),
    }));
    let mut expected = vec![0, 0, 0, 14, KIND_REFUSED, 0, 7];
    expected.extend_from_slice(&u64::MAX.to_be_bytes());
    expected.extend_from_slice(&[0, 1, b'x']);
    assert_eq!(&buf[..], &expected[..]);
}

#[test]
fn kind_names_and_refusal_codes() {
    let names: Vec<_> = every_kind().iter().map(HaFrame::kind_name).collect();
    assert_eq!(
        names,
        [
            "Hello",
            "Welcome",
            "Truncate",
            "Refused",
            "Refused",
            "Data",
            "Data",
            "Heartbeat",
            "Ack"
        ]
    );
    for (i, code) in RefusalCode::ALL.into_iter().enumerate() {
        assert_eq!(usize::from(code.code()), i + 1);
        assert_eq!(RefusalCode::from_code(code.code()), Some(code));
        assert!(!code.to_string().is_empty());
    }
    assert_eq!(RefusalCode::from_code(0), None);
    assert_eq!(RefusalCode::from_code(8), None);
    assert_eq!(RefusalCode::Diverged.to_string(), "diverged");
}

#[test]
fn data_is_decoded_without_copying() {
    let frame = HaFrame::Data(Data {
        offset: 0,
        watermark: 0,
        master_end: 0,
        bytes: Bytes::from(vec![9u8; 1000]),
    });
    let mut buf = encode(&frame);
    let start = buf.as_ptr() as usize;
    let end = start + buf.len();
    let Some(HaFrame::Data(data)) = HaCodec::default().decode(&mut buf).expect("decodes") else {
        panic!("not a Data frame");
    };
    let at = data.bytes.as_ptr() as usize;
    assert!(
        (start..end).contains(&at),
        "Data bytes point into the read buffer"
    );
    assert_eq!(data.bytes.len(), 1000);
}

#[test]
fn oversize_length_is_refused_from_the_length_field_alone() {
    let mut codec = HaCodec::new(100);
    let mut buf = BytesMut::new();
    buf.put_u32(101);
    match codec.decode(&mut buf) {
        Err(HaFrameError::TooLarge { len: 101, max: 100 }) => {}
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert!(
        buf.capacity() < 101,
        "nothing reserved for the refused frame"
    );

    let mut buf = BytesMut::new();
    buf.put_u32(u32::MAX);
    assert!(matches!(
        HaCodec::default().decode(&mut buf),
        Err(HaFrameError::TooLarge { .. })
    ));

    // Exactly the bound is fine: it waits for the body.
    let mut buf = BytesMut::new();
    buf.put_u32(100);
    assert!(matches!(codec.decode(&mut buf), Ok(None)));
}

#[test]
fn fewer_than_four_bytes_wait() {
    let mut codec = HaCodec::default();
    for n in 0..4 {
        let mut buf = BytesMut::from(&[0xffu8, 0xff, 0xff, 0xff][..n]);
        assert!(matches!(codec.decode(&mut buf), Ok(None)));
        assert_eq!(buf.len(), n, "nothing consumed");
    }
}

#[test]
fn empty_frame_is_refused() {
    let mut buf = BytesMut::from(&[0u8, 0, 0, 0][..]);
    assert!(matches!(
        HaCodec::default().decode(&mut buf),
        Err(HaFrameError::EmptyFrame)
    ));
}

#[test]
fn encoding_refuses_a_frame_over_the_bound_and_writes_nothing() {
    let frame = HaFrame::Data(Data {
        offset: 0,
        watermark: 0,
        master_end: 0,
        bytes: Bytes::from(vec![0u8; 100]),
    });
    // len = 1 + 24 + 100 = 125.
    let mut buf = BytesMut::new();
    assert!(matches!(
        HaCodec::new(124).encode(&frame, &mut buf),
        Err(HaFrameError::TooLarge { len: 125, max: 124 })
    ));
    assert!(buf.is_empty());
    HaCodec::new(125)
        .encode(&frame, &mut buf)
        .expect("exactly the bound encodes");
    assert_eq!(buf.len(), 4 + 125);
}

#[test]
fn encoding_refuses_strings_samples_and_differs_at_past_their_bounds() {
    let mut codec = HaCodec::default();
    let mut buf = BytesMut::new();

    let mut long = hello();
    long.cluster = "c".repeat(HA_STRING_MAX + 1);
    assert!(matches!(
        codec.encode(HaFrame::Hello(long), &mut buf),
        Err(HaFrameError::BadString {
            field: "cluster",
            source: HaStringError::TooLong { .. },
            ..
        })
    ));

    let mut many = hello();
    many.samples = vec![
        RecordSample {
            offset: 0,
            size: 0,
            crc: 0
        };
        HA_SAMPLES_MAX + 1
    ];
    assert!(matches!(
        codec.encode(HaFrame::Hello(many), &mut buf),
        Err(HaFrameError::TooManySamples { count: 65, max: 64 })
    ));

    let reserved = Refused {
        code: RefusalCode::Diverged,
        differs_at: Some(u64::MAX),
        reason: String::new(),
    };
    assert!(matches!(
        codec.encode(HaFrame::Refused(reserved), &mut buf),
        Err(HaFrameError::ReservedDiffersAt)
    ));
    assert!(buf.is_empty(), "refused frames write nothing");

    // The bounds themselves are fine.
    let mut full = hello();
    full.cluster = "c".repeat(HA_STRING_MAX);
    full.broker_name = "é".repeat(HA_STRING_MAX / 2);
    full.samples = vec![
        RecordSample {
            offset: 1,
            size: 2,
            crc: 3
        };
        HA_SAMPLES_MAX
    ];
    let frame = HaFrame::Hello(full);
    codec.encode(&frame, &mut buf).expect("bounds encode");
    assert_eq!(codec.decode(&mut buf).expect("decodes"), Some(frame));
}

#[test]
fn decoding_refuses_strings_and_sample_lists_past_their_bounds() {
    // A Refused whose reason claims HA_STRING_MAX + 1 bytes (and has them).
    let mut payload = vec![0, 1];
    payload.extend_from_slice(&u64::MAX.to_be_bytes());
    payload.extend_from_slice(&((HA_STRING_MAX + 1) as u16).to_be_bytes());
    payload.extend(std::iter::repeat_n(b'r', HA_STRING_MAX + 1));
    assert!(matches!(
        HaCodec::default().decode(&mut raw(KIND_REFUSED, &payload)),
        Err(HaFrameError::BadString {
            kind: "Refused",
            field: "reason",
            source: HaStringError::TooLong { .. }
        })
    ));

    // Not UTF-8.
    let mut payload = vec![0, 1];
    payload.extend_from_slice(&u64::MAX.to_be_bytes());
    payload.extend_from_slice(&[0, 2, 0xff, 0xfe]);
    let err = HaCodec::default()
        .decode(&mut raw(KIND_REFUSED, &payload))
        .expect_err("not UTF-8");
    assert!(matches!(
        err,
        HaFrameError::BadString {
            source: HaStringError::NotUtf8(_),
            ..
        }
    ));
    assert!(
        std::error::Error::source(&err).is_some(),
        "the cause is kept"
    );

    // A Hello claiming 65 samples.
    let mut buf = encode(&HaFrame::Hello(Hello {
        samples: Vec::new(),
        epochs: Vec::new(),
        ..hello()
    }));
    let count_at = buf.len() - 4;
    buf[count_at..count_at + 2].copy_from_slice(&65u16.to_be_bytes());
    assert!(matches!(
        HaCodec::default().decode(&mut buf),
        Err(HaFrameError::TooManySamples { count: 65, max: 64 })
    ));
}

#[test]
fn epoch_lists_past_their_bound_are_refused_both_ways() {
    let many: Vec<EpochEntry> = (0..=HA_EPOCHS_MAX as u64)
        .map(|i| EpochEntry {
            epoch: i + 1,
            start: i,
        })
        .collect();
    let mut buf = BytesMut::new();
    let too_many = HaFrame::Hello(Hello {
        epochs: many.clone(),
        ..hello()
    });
    assert!(matches!(
        HaCodec::default().encode(&too_many, &mut buf),
        Err(HaFrameError::TooManyEpochs { kind: "Hello", count, .. }) if count == HA_EPOCHS_MAX + 1
    ));
    assert!(buf.is_empty(), "nothing written");
    let welcome = HaFrame::Welcome(Welcome {
        epoch: 1,
        master_end: 0,
        start: 0,
        watermark: 0,
        epochs: many[..HA_EPOCHS_MAX].to_vec(),
    });
    // Exactly the bound round-trips.
    let mut buf = encode(&welcome);
    assert_eq!(HaCodec::default().decode(&mut buf).unwrap(), Some(welcome));
    // A Welcome whose count field claims one more than the bound is refused before any
    // entry is read.
    let mut payload = vec![0u8; 32];
    payload.extend_from_slice(&((HA_EPOCHS_MAX + 1) as u16).to_be_bytes());
    assert!(matches!(
        HaCodec::default().decode(&mut raw(KIND_WELCOME, &payload)),
        Err(HaFrameError::TooManyEpochs {
            kind: "Welcome",
            ..
        })
    ));
    // A count larger than what follows is truncated, not a huge allocation.
    let mut payload = vec![0u8; 32];
    payload.extend_from_slice(&100u16.to_be_bytes());
    assert!(matches!(
        HaCodec::default().decode(&mut raw(KIND_WELCOME, &payload)),
        Err(HaFrameError::Truncated { .. })
    ));
}

#[test]
fn a_version_one_hello_decodes_without_epochs() {
    let v1 = Hello {
        version: 1,
        epochs: Vec::new(),
        ..hello()
    };
    let mut buf = encode(&HaFrame::Hello(v1.clone()));
    // Drop the (empty) epoch list and fix the length: the version-1 layout.
    buf.truncate(buf.len() - 2);
    let len = (buf.len() - 4) as u32;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    assert_eq!(
        HaCodec::default().decode(&mut buf).unwrap(),
        Some(HaFrame::Hello(v1))
    );
    // Version 2 must carry the list.
    let mut buf = encode(&HaFrame::Hello(Hello {
        epochs: Vec::new(),
        ..hello()
    }));
    buf.truncate(buf.len() - 2);
    let len = (buf.len() - 4) as u32;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    assert!(matches!(
        HaCodec::default().decode(&mut buf),
        Err(HaFrameError::Truncated { .. })
    ));
}

#[test]
fn truncate_layout_and_bounds() {
    let buf = encode(&HaFrame::Truncate(Truncate {
        to: 0x0a0b,
        reason: "r".to_owned(),
    }));
    let mut expected = vec![0, 0, 0, 12, KIND_TRUNCATE, 0, 0, 0, 0, 0, 0, 0x0a, 0x0b];
    expected.extend_from_slice(&[0, 1, b'r']);
    assert_eq!(&buf[..], &expected[..]);
    let mut out = BytesMut::new();
    let long = HaFrame::Truncate(Truncate {
        to: 1,
        reason: "x".repeat(HA_STRING_MAX + 1),
    });
    assert!(matches!(
        HaCodec::default().encode(&long, &mut out),
        Err(HaFrameError::BadString {
            kind: "Truncate",
            field: "reason",
            ..
        })
    ));
    assert!(out.is_empty());
    // Short and long payloads.
    assert!(matches!(
        HaCodec::default().decode(&mut raw(KIND_TRUNCATE, &[0, 0, 0])),
        Err(HaFrameError::Truncated { .. })
    ));
    let mut payload = 5u64.to_be_bytes().to_vec();
    payload.extend_from_slice(&[0, 0, 9]);
    assert!(matches!(
        HaCodec::default().decode(&mut raw(KIND_TRUNCATE, &payload)),
        Err(HaFrameError::Trailing {
            kind: "Truncate",
            extra: 1
        })
    ));
}

#[test]
fn truncated_frames_are_refused() {
    let mut codec = HaCodec::default();
    for frame in every_kind() {
        let full = encode(&frame);
        // A Data frame may end anywhere after its 24-byte header.
        let shortest = match frame {
            HaFrame::Data(_) => 4 + 1 + 24,
            _ => full.len(),
        };
        for cut in 5..shortest {
            let mut buf = raw(frame.kind(), &full[5..cut]);
            match codec.decode(&mut buf) {
                Err(HaFrameError::Truncated { kind, .. }) => assert_eq!(kind, frame.kind_name()),
                other => panic!("{} cut at {cut}: {other:?}", frame.kind_name()),
            }
            assert!(buf.is_empty(), "the bad frame is consumed");
        }
    }
}

#[test]
fn trailing_bytes_are_refused() {
    let mut codec = HaCodec::default();
    for frame in every_kind() {
        if matches!(frame, HaFrame::Data(_)) {
            continue;
        }
        let full = encode(&frame);
        let mut payload = full[5..].to_vec();
        payload.push(0);
        match codec.decode(&mut raw(frame.kind(), &payload)) {
            Err(HaFrameError::Trailing { kind, extra: 1 }) => {
                assert_eq!(kind, frame.kind_name())
            }
            other => panic!("{}: {other:?}", frame.kind_name()),
        }
    }
}

#[test]
fn unknown_kind_is_refused() {
    for kind in [0u8, 8, 200, 255] {
        match HaCodec::default().decode(&mut raw(kind, &[1, 2, 3])) {
            Err(HaFrameError::UnknownKind(k)) => assert_eq!(k, kind),
            other => panic!("kind {kind}: {other:?}"),
        }
    }
}

#[test]
fn unknown_refusal_code_is_refused() {
    for code in [0u16, 8, 0xffff] {
        let mut payload = code.to_be_bytes().to_vec();
        payload.extend_from_slice(&u64::MAX.to_be_bytes());
        payload.extend_from_slice(&[0, 0]);
        match HaCodec::default().decode(&mut raw(KIND_REFUSED, &payload)) {
            Err(HaFrameError::UnknownRefusal(c)) => assert_eq!(c, code),
            other => panic!("code {code}: {other:?}"),
        }
    }
}

#[test]
fn a_frame_split_across_small_reads_decodes_once_complete() {
    let mut codec = HaCodec::default();
    for frame in every_kind() {
        let full = encode(&frame);
        let mut buf = BytesMut::new();
        for (i, byte) in full.iter().enumerate() {
            buf.put_u8(*byte);
            let decoded = codec.decode(&mut buf).expect("no error");
            if i + 1 < full.len() {
                assert_eq!(decoded, None, "{} after {} bytes", frame.kind_name(), i + 1);
            } else {
                assert_eq!(decoded.as_ref(), Some(&frame));
            }
        }
        assert!(buf.is_empty());
    }
}

#[test]
fn two_frames_in_one_buffer_decode_in_order() {
    let frames = every_kind();
    let mut buf = BytesMut::new();
    let mut codec = HaCodec::default();
    for frame in &frames {
        codec.encode(frame, &mut buf).expect("encodes");
    }
    // Every pair, and then all of them at once.
    for pair in frames.windows(2) {
        let mut two = encode(&pair[0]);
        two.extend_from_slice(&encode(&pair[1]));
        assert_eq!(decode_all(&mut codec, &mut two).expect("decodes"), pair);
        assert!(two.is_empty());
    }
    assert_eq!(decode_all(&mut codec, &mut buf).expect("decodes"), frames);
}

#[tokio::test]
async fn frames_cross_a_stream() {
    use futures_util::SinkExt;
    use tokio_util::codec::{FramedRead, FramedWrite};

    let (client, server) = tokio::io::duplex(64);
    let frames = every_kind();
    let sent = frames.clone();
    let writer = tokio::spawn(async move {
        let mut sink = FramedWrite::new(client, HaCodec::default());
        for frame in sent {
            sink.send(frame).await.expect("sends");
        }
    });
    let mut stream = FramedRead::new(server, HaCodec::default());
    let mut got = Vec::new();
    while let Some(frame) = futures_util::StreamExt::next(&mut stream).await {
        got.push(frame.expect("decodes"));
    }
    writer.await.expect("writer finishes");
    assert_eq!(got, frames);
}

fn ha_string() -> impl Strategy<Value = String> {
    // At most 64 chars of at most 4 bytes: well within HA_STRING_MAX.
    "\\PC{0,64}"
}

fn arb_frame() -> impl Strategy<Value = HaFrame> {
    let sample = (any::<u64>(), any::<u32>(), any::<u32>())
        .prop_map(|(offset, size, crc)| RecordSample { offset, size, crc });
    let hello = (
        any::<u16>(),
        ha_string(),
        ha_string(),
        any::<[u64; 4]>(),
        proptest::collection::vec(sample, 0..=HA_SAMPLES_MAX),
        proptest::collection::vec(arb_epoch(), 0..40),
    )
        .prop_map(
            |(
                version,
                cluster,
                broker_name,
                [broker_id, log_end, epoch, segment_size],
                samples,
                epochs,
            )| {
                HaFrame::Hello(Hello {
                    version,
                    cluster,
                    broker_name,
                    broker_id,
                    log_end,
                    epoch,
                    segment_size,
                    samples,
                    epochs,
                })
            },
        );
    let welcome = (
        any::<[u64; 4]>(),
        proptest::collection::vec(arb_epoch(), 0..40),
    )
        .prop_map(|([epoch, master_end, start, watermark], epochs)| {
            HaFrame::Welcome(Welcome {
                epoch,
                master_end,
                start,
                watermark,
                epochs,
            })
        });
    let truncate = (any::<u64>(), ha_string())
        .prop_map(|(to, reason)| HaFrame::Truncate(Truncate { to, reason }));
    let refused = (
        proptest::sample::select(RefusalCode::ALL.to_vec()),
        proptest::option::of(0..u64::MAX),
        ha_string(),
    )
        .prop_map(|(code, differs_at, reason)| {
            HaFrame::Refused(Refused {
                code,
                differs_at,
                reason,
            })
        });
    let data = (
        any::<[u64; 3]>(),
        proptest::collection::vec(any::<u8>(), 0..2048),
    )
        .prop_map(|([offset, watermark, master_end], bytes)| {
            HaFrame::Data(Data {
                offset,
                watermark,
                master_end,
                bytes: Bytes::from(bytes),
            })
        });
    let heartbeat = any::<[u64; 2]>().prop_map(|[watermark, master_end]| HaFrame::Heartbeat {
        watermark,
        master_end,
    });
    let ack = any::<u64>().prop_map(|log_end| HaFrame::Ack { log_end });
    prop_oneof![hello, welcome, truncate, refused, data, heartbeat, ack]
}

fn arb_epoch() -> impl Strategy<Value = EpochEntry> {
    (any::<u64>(), any::<u64>()).prop_map(|(epoch, start)| EpochEntry { epoch, start })
}

proptest! {
    #[test]
    fn arbitrary_frames_round_trip(frames in proptest::collection::vec(arb_frame(), 1..6)) {
        let mut codec = HaCodec::default();
        let mut buf = BytesMut::new();
        for frame in &frames {
            codec.encode(frame, &mut buf).expect("within bounds");
        }
        prop_assert_eq!(decode_all(&mut codec, &mut buf).expect("decodes"), frames);
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn arbitrary_frames_round_trip_in_random_chunks(
        frame in arb_frame(),
        chunk in 1usize..64,
    ) {
        let full = encode(&frame);
        let mut codec = HaCodec::default();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for piece in full.chunks(chunk) {
            buf.extend_from_slice(piece);
            got.extend(decode_all(&mut codec, &mut buf).expect("no error"));
        }
        prop_assert_eq!(got, vec![frame]);
    }

    #[test]
    fn decoding_random_bytes_never_panics(
        bytes in proptest::collection::vec(any::<u8>(), 0..512),
        max_frame in prop_oneof![Just(HA_FRAME_MAX_DEFAULT), 0usize..600],
    ) {
        let mut codec = HaCodec::new(max_frame);
        let mut buf = BytesMut::from(&bytes[..]);
        // Ok(None), Ok(Some) or Err are all fine; a panic fails the test.
        let _ = decode_all(&mut codec, &mut buf);
    }

    #[test]
    fn decoding_well_framed_random_payloads_never_panics(
        kind in 0u8..8,
        payload in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let _ = HaCodec::default().decode(&mut raw(kind, &payload));
    }

    #[test]
    fn decoding_corrupted_frames_never_panics(
        frame in arb_frame(),
        at in any::<proptest::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let mut buf = encode(&frame);
        let i = at.index(buf.len());
        buf[i] = byte;
        let _ = decode_all(&mut HaCodec::default(), &mut buf);
    }
}
