//! Interop driver for the official RocketMQ 5.x Rust gRPC client (crates.io `rocketmq`
//! 5.0.0, apache/rocketmq-clients `rust/`), used by `crates/cli/tests/interop_rust_grpc.rs`.
//! Built by `scripts/interop/install-rust-grpc.sh` into `target/interop/rust-grpc/`; it is
//! not a member of the ferromq workspace.
//!
//! Commands (every line on stdout is one JSON object; the client's own log goes to stderr):
//!
//! ```text
//! produce --endpoints HOST:PORT --topic T --prefix P --count N [--fifo-groups G]
//!     Sends N messages with one Producer: body "P:i", tag "TagA"/"TagB"/"TagC" (i mod 3),
//!     keys ["P-i", "k<i>"], properties {"index": i, "prefix": P}. Odd i are FIFO messages of
//!     group "P-g<(i/2) mod G>" (G = 4 by default; 0 sends only normal messages).
//!     One line per message {index, body, tag, keys, properties, group, message_id}, or
//!     {index, error}; then {"summary": {sent, failed, elapsed_s}}.
//! specials --endpoints HOST:PORT --topic T --prefix P [--delay S]
//!     With one transaction producer: three DELAY messages "P:delay:j" due S seconds ahead
//!     (3 by default; the client sends whole seconds), two TRANSACTION messages
//!     "P:commit:j" committed and one "P:rollback:0" rolled back. One line per message
//!     {body, kind ("delay" | "commit" | "rollback"), message_id, deliver_ms?}, or
//!     {body, error}; then {"summary": {sent, failed}}.
//! consume --endpoints HOST:PORT --topic T --group G --count N
//!         [--timeout S] [--long-polling S] [--invisible S]
//!     One SimpleConsumer receives (batch 32) and acks until N distinct bodies arrived or S
//!     seconds passed, then receives once more, which must find nothing. One line per
//!     delivery {body, tag, keys, properties, message_id, group, attempt, topic, acked,
//!     received_ms (Unix time)}; then
//!     {"summary": {received, duplicates, receive_errors, ack_errors, final_empty,
//!     final_error, elapsed_s, final_receive_s}}.
//! ```
//!
//! Exits 0 when the command ran to the end (the summary says what happened), 2 on bad
//! arguments, 1 when the client could not start.

use std::collections::{BTreeSet, HashMap};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rocketmq::conf::{ClientOption, ProducerOption, SimpleConsumerOption};
use rocketmq::model::common::{FilterExpression, FilterType};
use rocketmq::model::message::MessageBuilder;
use rocketmq::model::transaction::{Transaction, TransactionResolution};
use rocketmq::{Producer, SimpleConsumer};
use serde_json::{json, Value};

/// Messages asked for by one receive (the client's own default).
const RECEIVE_BATCH: i32 = 32;
/// Bound on receives that fail in a row before the consumer gives up.
const MAX_RECEIVE_ERRORS: u32 = 20;
/// Pause after a failed receive.
const RECEIVE_ERROR_PAUSE: Duration = Duration::from_millis(200);

fn usage() -> ExitCode {
    eprintln!(
        "usage: ferromq-rust-grpc-interop produce --endpoints HOST:PORT --topic T --prefix P \
         --count N [--fifo-groups G]\n       ferromq-rust-grpc-interop specials --endpoints \
         HOST:PORT --topic T --prefix P [--delay S]\n       ferromq-rust-grpc-interop consume --endpoints \
         HOST:PORT --topic T --group G --count N [--timeout S] [--long-polling S] \
         [--invisible S]"
    );
    ExitCode::from(2)
}

/// `--name value` pairs after the command.
fn options(args: &[String]) -> Option<HashMap<String, String>> {
    let mut out = HashMap::new();
    let mut it = args.iter();
    while let Some(name) = it.next() {
        let name = name.strip_prefix("--")?;
        out.insert(name.to_string(), it.next()?.clone());
    }
    Some(out)
}

fn emit(value: Value) {
    println!("{value}");
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = args.split_first() else {
        return usage();
    };
    let Some(opts) = options(rest) else {
        return usage();
    };
    let text = |name: &str| opts.get(name).cloned();
    let number = |name: &str, default: Option<u64>| match opts.get(name) {
        Some(v) => v.parse::<u64>().ok(),
        None => default,
    };
    let count_default = (command == "specials").then_some(0);
    let (Some(endpoints), Some(topic), Some(count)) = (
        text("endpoints"),
        text("topic"),
        number("count", count_default),
    ) else {
        return usage();
    };
    let mut client = ClientOption::default();
    client.set_access_url(endpoints);
    client.set_enable_tls(false);
    match command.as_str() {
        "produce" => {
            let (Some(prefix), Some(groups)) = (text("prefix"), number("fifo-groups", Some(4)))
            else {
                return usage();
            };
            produce(client, &topic, &prefix, count, groups).await
        }
        "specials" => {
            let (Some(prefix), Some(delay)) = (text("prefix"), number("delay", Some(3))) else {
                return usage();
            };
            specials(client, &topic, &prefix, delay).await
        }
        "consume" => {
            let (Some(group), Some(timeout), Some(polling), Some(invisible)) = (
                text("group"),
                number("timeout", Some(60)),
                number("long-polling", Some(5)),
                number("invisible", Some(30)),
            ) else {
                return usage();
            };
            client.set_long_polling_timeout(Duration::from_secs(polling));
            let plan = Consume {
                topic,
                group,
                count,
                timeout: Duration::from_secs(timeout),
                invisible: Duration::from_secs(invisible),
            };
            consume(client, plan).await
        }
        _ => usage(),
    }
}

async fn produce(
    client: ClientOption,
    topic: &str,
    prefix: &str,
    count: u64,
    groups: u64,
) -> ExitCode {
    let mut option = ProducerOption::default();
    option.set_topics(vec![topic]);
    let mut producer = match Producer::new(option, client) {
        Ok(p) => p,
        Err(e) => return fail("producer new", &e),
    };
    if let Err(e) = producer.start().await {
        return fail("producer start", &e);
    }
    let started = Instant::now();
    let (mut sent, mut failed) = (0u64, 0u64);
    for i in 0..count {
        let body = format!("{prefix}:{i}");
        let tag = ["TagA", "TagB", "TagC"][(i % 3) as usize];
        let keys = vec![format!("{prefix}-{i}"), format!("k{i}")];
        let properties: HashMap<String, String> = [
            ("index".to_string(), i.to_string()),
            ("prefix".to_string(), prefix.to_string()),
        ]
        .into();
        let group = (groups > 0 && i % 2 == 1).then(|| format!("{prefix}-g{}", (i / 2) % groups));
        let mut builder = MessageBuilder::builder()
            .set_topic(topic)
            .set_body(body.clone().into_bytes())
            .set_tag(tag)
            .set_keys(keys.clone())
            .set_properties(properties.clone());
        if let Some(group) = &group {
            builder = builder.set_message_group(group.clone());
        }
        let message = match builder.build() {
            Ok(m) => m,
            Err(e) => return fail("message build", &e),
        };
        match producer.send(message).await {
            Ok(receipt) => {
                sent += 1;
                emit(json!({
                    "index": i, "body": body, "tag": tag, "keys": keys,
                    "properties": properties, "group": group,
                    "message_id": receipt.message_id(),
                }));
            }
            Err(e) => {
                failed += 1;
                emit(json!({"index": i, "body": body, "error": e.to_string()}));
            }
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let shutdown = producer.shutdown().await.err().map(|e| e.to_string());
    emit(json!({"summary": {
        "sent": sent, "failed": failed, "elapsed_s": elapsed, "shutdown_error": shutdown,
    }}));
    ExitCode::SUCCESS
}

async fn specials(client: ClientOption, topic: &str, prefix: &str, delay_s: u64) -> ExitCode {
    let mut option = ProducerOption::default();
    option.set_topics(vec![topic]);
    // Every transaction is ended by the driver; a check-back (an orphaned transaction) rolls
    // back, so a missed end shows as a missing message.
    let checker = Box::new(|_: String, _| TransactionResolution::ROLLBACK);
    let mut producer = match Producer::new_transaction_producer(option, client, checker) {
        Ok(p) => p,
        Err(e) => return fail("producer new", &e),
    };
    if let Err(e) = producer.start().await {
        return fail("producer start", &e);
    }
    let (mut sent, mut failed) = (0u64, 0u64);
    let deliver_s = (unix_ms() / 1000 + delay_s) as i64;
    for j in 0..3 {
        let body = format!("{prefix}:delay:{j}");
        let message =
            MessageBuilder::delay_message_builder(topic, body.clone().into_bytes(), deliver_s)
                .set_tag("Delay")
                .build();
        let message = match message {
            Ok(m) => m,
            Err(e) => return fail("message build", &e),
        };
        match producer.send(message).await {
            Ok(receipt) => {
                sent += 1;
                emit(
                    json!({"body": body, "kind": "delay", "message_id": receipt.message_id(),
                    "deliver_ms": deliver_s * 1000}),
                );
            }
            Err(e) => {
                failed += 1;
                emit(json!({"body": body, "error": e.to_string()}));
            }
        }
    }
    for (kind, j) in [("commit", 0), ("commit", 1), ("rollback", 0)] {
        let body = format!("{prefix}:{kind}:{j}");
        let message = MessageBuilder::transaction_message_builder(topic, body.clone().into_bytes())
            .set_tag("Tx")
            .build();
        let message = match message {
            Ok(m) => m,
            Err(e) => return fail("message build", &e),
        };
        let outcome = match producer.send_transaction_message(message).await {
            Ok(transaction) => {
                let id = transaction.message_id().to_string();
                let ended = if kind == "commit" {
                    transaction.commit().await
                } else {
                    transaction.rollback().await
                };
                ended.map(|()| id)
            }
            Err(e) => Err(e),
        };
        match outcome {
            Ok(id) => {
                sent += 1;
                emit(json!({"body": body, "kind": kind, "message_id": id}));
            }
            Err(e) => {
                failed += 1;
                emit(json!({"body": body, "error": e.to_string()}));
            }
        }
    }
    let shutdown = producer.shutdown().await.err().map(|e| e.to_string());
    emit(json!({"summary": {"sent": sent, "failed": failed, "shutdown_error": shutdown}}));
    ExitCode::SUCCESS
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

struct Consume {
    topic: String,
    group: String,
    count: u64,
    timeout: Duration,
    invisible: Duration,
}

async fn consume(client: ClientOption, plan: Consume) -> ExitCode {
    let mut option = SimpleConsumerOption::default();
    option.set_topics(vec![plan.topic.as_str()]);
    option.set_consumer_group(plan.group.as_str());
    let mut consumer = match SimpleConsumer::new(option, client) {
        Ok(c) => c,
        Err(e) => return fail("consumer new", &e),
    };
    if let Err(e) = consumer.start().await {
        return fail("consumer start", &e);
    }
    let filter = FilterExpression::new(FilterType::Tag, "*");
    let started = Instant::now();
    let mut bodies = BTreeSet::new();
    let (mut duplicates, mut receive_errors, mut ack_errors, mut errors_in_a_row) =
        (0u64, 0u64, 0u64, 0u32);
    while (bodies.len() as u64) < plan.count && started.elapsed() < plan.timeout {
        let messages = match consumer
            .receive_with(&plan.topic, &filter, RECEIVE_BATCH, plan.invisible)
            .await
        {
            Ok(messages) => {
                errors_in_a_row = 0;
                messages
            }
            Err(e) => {
                receive_errors += 1;
                errors_in_a_row += 1;
                emit(json!({"receive_error": e.to_string()}));
                if errors_in_a_row >= MAX_RECEIVE_ERRORS {
                    break;
                }
                tokio::time::sleep(RECEIVE_ERROR_PAUSE).await;
                continue;
            }
        };
        for message in messages {
            let body = String::from_utf8_lossy(message.body()).into_owned();
            if !bodies.insert(body.clone()) {
                duplicates += 1;
            }
            let acked = match consumer.ack(&message).await {
                Ok(()) => Value::Bool(true),
                Err(e) => {
                    ack_errors += 1;
                    Value::String(e.to_string())
                }
            };
            emit(json!({
                "body": body, "tag": message.tag(), "keys": message.keys(),
                "properties": message.properties(), "message_id": message.message_id(),
                "group": message.message_group(), "attempt": message.delivery_attempt(),
                "topic": message.topic(), "acked": acked, "received_ms": unix_ms(),
            }));
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    // Everything was acked: one more receive (held for the long-polling timeout) must find
    // nothing.
    let final_started = Instant::now();
    let (final_empty, final_error) = match consumer
        .receive_with(&plan.topic, &filter, RECEIVE_BATCH, plan.invisible)
        .await
    {
        Ok(messages) => {
            for message in &messages {
                emit(json!({
                    "extra": String::from_utf8_lossy(message.body()),
                    "attempt": message.delivery_attempt(),
                }));
            }
            (messages.is_empty(), None)
        }
        Err(e) => (false, Some(e.to_string())),
    };
    let final_receive = final_started.elapsed().as_secs_f64();
    let shutdown = consumer.shutdown().await.err().map(|e| e.to_string());
    emit(json!({"summary": {
        "received": bodies.len(), "duplicates": duplicates, "receive_errors": receive_errors,
        "ack_errors": ack_errors, "final_empty": final_empty, "final_error": final_error,
        "elapsed_s": elapsed, "final_receive_s": final_receive, "shutdown_error": shutdown,
    }}));
    ExitCode::SUCCESS
}

fn fail(what: &str, error: &dyn std::fmt::Display) -> ExitCode {
    emit(json!({"fatal": what, "error": error.to_string()}));
    eprintln!("ferromq-rust-grpc-interop: {what}: {error}");
    ExitCode::from(1)
}
