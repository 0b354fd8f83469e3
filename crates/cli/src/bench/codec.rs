//! `ferromq bench codec`: the CPU cost of a send's remoting frames, without a network or a
//! store, so a change to header encoding or decoding can be measured on a noisy machine
//! (whole-system runs of `bench produce` vary by a third from run to run on the project's VM).
//!
//! Each round times, per frame: a copy of the request frame into a new buffer (the
//! baseline: the least any decoder does), encoding a SEND_MESSAGE_V2 request from its typed
//! header, decoding it back with its typed header (the broker's side), encoding the send
//! reply, and decoding the reply with its typed header (the client's side). The frames are a
//! 128-byte body with the header fields ferromq's client writes. Every figure is the median
//! of the rounds, in nanoseconds, with its ratio to the same round's copy.

use std::hint::black_box;
use std::time::Instant;

use anyhow::{ensure, Context, Result};
use bytes::{Bytes, BytesMut};
use clap::{value_parser, Args};
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::send::{
    SendMessageRequestHeaderV2, SendMessageResponseHeader,
};
use ferromq_protocol::remoting::{
    CommandHeader, RemotingCommand, SerializeType, DEFAULT_MAX_FRAME_LENGTH,
};
use serde_json::json;

/// Arguments of `ferromq bench codec`.
#[derive(Debug, Args)]
pub struct CodecArgs {
    /// Frames per phase and round.
    #[arg(long, value_name = "N", default_value_t = 200_000, value_parser = value_parser!(u64).range(1..=100_000_000))]
    iterations: u64,
    /// Rounds; each figure is the median of the rounds.
    #[arg(long, value_name = "R", default_value_t = 5, value_parser = value_parser!(u32).range(1..=1_000))]
    rounds: u32,
    /// Print the result as one JSON object on the last stdout line.
    #[arg(long)]
    json: bool,
}

/// The phases of a round, in the order they run and are printed.
const PHASES: [&str; 5] = [
    "copy",
    "request_encode",
    "request_decode",
    "reply_encode",
    "reply_decode",
];

/// The frames and headers every round works on.
struct Frames {
    request_header: SendMessageRequestHeaderV2,
    body: Bytes,
    request: Bytes,
    reply_header: SendMessageResponseHeader,
    reply: Bytes,
}

/// Runs the bench.
///
/// # Errors
/// A frame did not decode back to what was encoded (a codec bug, not a measurement).
pub fn run(args: &CodecArgs) -> Result<()> {
    let frames = Frames::build()?;
    let mut rounds: Vec<[f64; PHASES.len()]> = Vec::new();
    for _ in 0..args.rounds {
        rounds.push(round(&frames, args.iterations)?);
    }
    let medians: Vec<f64> = (0..PHASES.len())
        .map(|phase| median(rounds.iter().map(|r| r[phase]).collect()))
        .collect();
    let copy = medians[0];
    for (name, ns) in PHASES.iter().zip(&medians) {
        println!(
            "{name:<15} {ns:>9.1} ns/frame  {:>6.2} x copy",
            ns / copy.max(f64::MIN_POSITIVE)
        );
    }
    if args.json {
        let mut result = json!({
            "bench": "codec",
            "baseline": "copy of the request frame into a new buffer",
            "iterations": args.iterations,
            "rounds": args.rounds,
            "request_frame_bytes": frames.request.len(),
            "reply_frame_bytes": frames.reply.len(),
        });
        for (name, ns) in PHASES.iter().zip(&medians) {
            result[format!("{name}_ns")] = json!(ns);
            result[format!("{name}_to_copy")] = json!(ns / copy.max(f64::MIN_POSITIVE));
        }
        println!("{result}");
    }
    Ok(())
}

impl Frames {
    /// Encodes the request and its reply once, and checks both decode back to their headers.
    fn build() -> Result<Frames> {
        let request_header = SendMessageRequestHeaderV2 {
            a: "BenchProducerGroup".into(),
            b: "BenchTopic".into(),
            c: "TBW102".into(),
            d: 4,
            e: 3,
            f: 0,
            g: 1_765_000_000_123,
            h: 0,
            i: Some("UNIQ_KEY\u{1}7F0000010A2B18B4AAC2123456780000\u{2}WAIT\u{1}true\u{2}".into()),
            j: Some(0),
            k: Some(false),
            l: None,
            m: None,
            n: Some("broker-a".into()),
        };
        let body = Bytes::from(vec![0x5a_u8; 128]);
        let request = encode_request(&request_header, &body)?;
        let decoded = decode_request(&request)?;
        ensure!(
            decoded == request_header,
            "the request decoded as {decoded:?}"
        );
        let reply_header = SendMessageResponseHeader {
            msg_id: "7F00000100002A9F0000000000123456".into(),
            queue_id: 3,
            queue_offset: 123_456,
            transaction_id: None,
            batch_uniq_id: None,
            recall_handle: None,
            msg_region: Some("DefaultRegion".into()),
            trace_on: Some("false".into()),
        };
        let command = RemotingCommand::decode(request.clone()).context("decoding the request")?;
        let reply = encode_reply(&command, &reply_header)?;
        let decoded = decode_reply(&reply)?;
        ensure!(decoded == reply_header, "the reply decoded as {decoded:?}");
        Ok(Frames {
            request_header,
            body,
            request,
            reply_header,
            reply,
        })
    }
}

/// One round: nanoseconds per frame of each phase.
fn round(frames: &Frames, iterations: u64) -> Result<[f64; PHASES.len()]> {
    let command = RemotingCommand::decode(frames.request.clone())?;
    let copy = time(iterations, || {
        black_box(Bytes::copy_from_slice(black_box(&frames.request)));
        Ok(())
    })?;
    let request_encode = time(iterations, || {
        black_box(encode_request(&frames.request_header, &frames.body)?);
        Ok(())
    })?;
    let request_decode = time(iterations, || {
        black_box(decode_request(&frames.request)?);
        Ok(())
    })?;
    let reply_encode = time(iterations, || {
        black_box(encode_reply(&command, &frames.reply_header)?);
        Ok(())
    })?;
    let reply_decode = time(iterations, || {
        black_box(decode_reply(&frames.reply)?);
        Ok(())
    })?;
    Ok([
        copy,
        request_encode,
        request_decode,
        reply_encode,
        reply_decode,
    ])
}

/// Runs `step` `iterations` times; nanoseconds per call.
fn time(iterations: u64, mut step: impl FnMut() -> Result<()>) -> Result<f64> {
    let started = Instant::now();
    for _ in 0..iterations {
        step()?;
    }
    Ok(started.elapsed().as_nanos() as f64 / iterations as f64)
}

/// A SEND_MESSAGE_V2 request frame with the ROCKETMQ binary header, as ferromq's client sends.
fn encode_request(header: &SendMessageRequestHeaderV2, body: &Bytes) -> Result<Bytes> {
    let mut command = RemotingCommand::new_request(request::SEND_MESSAGE_V2, header.to_ext());
    command.serialize_type = SerializeType::RocketMq;
    command.body = Some(body.clone());
    encode(&command)
}

/// What the broker does with a send's frame before the send itself.
fn decode_request(frame: &Bytes) -> Result<SendMessageRequestHeaderV2> {
    let command = RemotingCommand::decode(frame.clone())?;
    Ok(command.decode_header::<SendMessageRequestHeaderV2>()?)
}

/// The broker's SUCCESS reply to `request`.
fn encode_reply(request: &RemotingCommand, header: &SendMessageResponseHeader) -> Result<Bytes> {
    let reply = request
        .reply(response::SUCCESS, None)
        .with_owned_header(header.clone());
    encode(&reply)
}

/// What the client does with a send's reply.
fn decode_reply(frame: &Bytes) -> Result<SendMessageResponseHeader> {
    let command = RemotingCommand::decode(frame.clone())?;
    Ok(SendMessageResponseHeader::from_ext(&command.ext_fields)?)
}

fn encode(command: &RemotingCommand) -> Result<Bytes> {
    let mut buffer = BytesMut::new();
    command.encode(&mut buffer, DEFAULT_MAX_FRAME_LENGTH)?;
    Ok(buffer.freeze())
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or_default()
}
