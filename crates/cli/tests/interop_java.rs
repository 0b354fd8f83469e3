//! The official Java remoting client (`org.apache.rocketmq:rocketmq-client` 4.9.8 and 5.5.0)
//! against `ferromq standalone`, driven through `scripts/interop/java` (one JVM per test, see
//! `common/java.rs`). Installed by `scripts/interop/install-java.sh`; skipped with a printed
//! reason when it is missing, unless `FERROMQ_INTEROP_REQUIRED` is set.
//!
//! Each scenario runs once per client release:
//! - producer modes (sync, async, one-way, batch, orderly selector, keys, tags, user
//!   properties, delay levels) and push consumers (concurrent with a tag filter, orderly,
//!   broadcasting), with the broker's committed offsets at the end of every queue;
//! - RECONSUME_LATER → `%RETRY%` → `%DLQ%` after `maxReconsumeTimes`;
//! - `DefaultLitePullConsumer` subscribe and assign with seek and `commitSync`;
//! - `DefaultMQPullConsumer` offsets, including the seed scenario (queues not registered,
//!   broker unreachable while persisting), across kill -9;
//! - `TransactionMQProducer` commit, rollback and check-back;
//! - kill -9 of ferromq while a push consumer runs.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::java::{self, Driver, Server, V4, V5};
use common::remoting;
use serde_json::Value;

/// Bound on one producing command.
const PRODUCE: Duration = Duration::from_secs(120);
/// Bound on waiting for a consumer to see what it should.
const CONSUME: Duration = Duration::from_secs(90);
/// Bound on the broker's committed offsets reaching the end of the queues. The push consumer
/// persists every `--persist-ms` (1 s here) after its first run.
const OFFSETS_SETTLE: Duration = Duration::from_secs(30);
/// Queues of every topic the tests create.
const QUEUES: i32 = 4;
/// Delay level 2 is 5 s in RocketMQ's default table.
const DELAY_LEVEL_2_MS: i64 = 5_000;
/// Messages per second the kill -9 test's consumer handles (one thread, 5 ms each)...
const KILL9_RATE: u64 = 200;
/// ...and the duplicates it tolerates: one persist interval (1 s) of consumption plus the
/// same again for the commit in flight when the broker died.
const KILL9_MAX_DUPLICATES: u64 = 2 * KILL9_RATE;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn socket(addr: &str) -> std::net::SocketAddr {
    addr.parse().expect("socket address")
}

/// (max offset, committed offset of `group`) per queue of `topic`, asked of the broker.
fn progress(server: &Server, topic: &str, group: &str) -> Vec<(i64, Option<i64>)> {
    runtime().block_on(async {
        let client = remoting::client(socket(&server.broker)).await;
        let mut out = Vec::new();
        for q in 0..QUEUES {
            let max = remoting::max_offset(&client, topic, q).await.unwrap_or(-1);
            out.push((max, remoting::query_offset(&client, group, topic, q).await));
        }
        client.close();
        out
    })
}

/// The broker's stored offset of (group, topic, queue).
fn stored(server: &Server, group: &str, topic: &str, queue: i32) -> Option<i64> {
    runtime().block_on(async {
        let client = remoting::client(socket(&server.broker)).await;
        let offset = remoting::query_offset(&client, group, topic, queue).await;
        client.close();
        offset
    })
}

/// Polls until the group's committed offsets equal the max offsets of every queue; asserts
/// the topic holds `total` messages.
fn assert_offsets_at_end(server: &Server, topic: &str, group: &str, total: i64) {
    let started = Instant::now();
    let table = loop {
        let table = progress(server, topic, group);
        let done = table.iter().all(|(max, c)| Some(*max) == *c);
        if done || started.elapsed() > OFFSETS_SETTLE {
            break table;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    eprintln!("{topic}/{group}: (max, committed) per queue {table:?}");
    let held: i64 = table.iter().map(|(max, _)| max).sum();
    assert_eq!(
        held, total,
        "{topic} holds {held} messages, expected {total}: {table:?}"
    );
    assert!(
        table.iter().all(|(max, c)| Some(*max) == *c),
        "committed offsets of {group} did not reach the end of {topic} within {} s: {table:?}",
        OFFSETS_SETTLE.as_secs()
    );
}

fn create_topics(server: &Server, topics: &[&str]) {
    for topic in topics {
        common::create_topic(&server.namesrv, &server.broker, topic, &QUEUES.to_string());
    }
}

fn bodies<'a>(msgs: impl Iterator<Item = &'a Value>) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for m in msgs {
        *out.entry(m["body"].as_str().unwrap_or("?").to_string())
            .or_insert(0) += 1;
    }
    out
}

fn expected(prefix: &str, count: u32) -> BTreeSet<String> {
    (0..count).map(|i| format!("{prefix}:{i}")).collect()
}

/// The (prefix, index) of a body `prefix:i`.
fn split_body(body: &str) -> (&str, u32) {
    let (prefix, i) = body.rsplit_once(':').expect("body prefix:i");
    (prefix, i.parse().expect("body index"))
}

/// Asserts key `prefix-i`, tag, user property idx=i (and `extra` properties) on a delivery.
fn assert_message(m: &Value, tag: &str, extra: &[(&str, &str)]) {
    let body = m["body"].as_str().expect("body");
    let (prefix, i) = split_body(body);
    assert_eq!(m["keys"], format!("{prefix}-{i}"), "keys of {m}");
    assert_eq!(m["tags"], tag, "tags of {m}");
    assert_eq!(m["props"]["idx"], i.to_string(), "user property idx of {m}");
    for (k, v) in extra {
        assert_eq!(m["props"][*k], *v, "user property {k} of {m}");
    }
}

struct Setup {
    dir: std::path::PathBuf,
    server: Server,
    driver: Driver,
}

fn setup(version: &str, test: &str, extra: &[&str]) -> Option<Setup> {
    let classpath = java::classpath_or_skip(version, test)?;
    let dir = java::run_dir(test);
    let server = Server::start(&dir, extra);
    let driver = Driver::start(&classpath, &dir, &server.namesrv, &[]);
    assert!(
        driver.version.contains(&version.replace('.', "_")),
        "driver runs rocketmq-client {}, expected {version}",
        driver.version
    );
    Some(Setup {
        dir,
        server,
        driver,
    })
}

// ---------------------------------------------------------------------------------------------
// Producer modes and push consumers

fn producer_modes_and_push_consumers(version: &str, test: &str) {
    let Some(Setup {
        server, mut driver, ..
    }) = setup(version, test, &[])
    else {
        return;
    };
    create_topics(&server, &["JP", "JO", "JB", "JD"]);
    let d = &mut driver;
    for (mode, prefix) in [
        ("sync", "s"),
        ("async", "a"),
        ("oneway", "o"),
        ("batch", "b"),
    ] {
        let reply = d.ok(
            &format!(
                "produce --topic JP --group PG_{prefix} --mode {mode} --count 100 --prefix {prefix} --tag TA --prop color=red"
            ),
            PRODUCE,
        );
        assert_eq!(reply["sent"], 100, "{mode}: {reply}");
        if mode != "oneway" {
            assert_eq!(reply["distinct_msg_ids"], 100, "{mode}: {reply}");
        }
    }
    d.ok("produce --topic JP --count 50 --prefix x --tag TB", PRODUCE);

    // Concurrent, clustering, tag filter TA: the 400 TA messages, none of TB.
    d.ok(
        "push-start --name c1 --topic JP --group G_conc --expr TA",
        PRODUCE,
    );
    let mut want = BTreeSet::new();
    for p in ["s", "a", "o", "b"] {
        want.extend(expected(p, 100));
    }
    let got_all = d.wait_events(CONSUME, |ev| {
        let seen: BTreeSet<&str> = ev
            .iter()
            .filter(|e| e["consumer"] == "c1")
            .filter_map(|e| e["body"].as_str())
            .collect();
        want.iter().all(|b| seen.contains(b.as_str()))
    });
    std::thread::sleep(Duration::from_secs(2));
    d.pump();
    let seen = bodies(d.deliveries("c1"));
    assert!(got_all, "c1 saw {} of {} bodies", seen.len(), want.len());
    let unexpected: Vec<&String> = seen.keys().filter(|b| !want.contains(*b)).collect();
    assert!(
        unexpected.is_empty(),
        "tag filter TA let through {unexpected:?}"
    );
    for m in d.deliveries("c1") {
        assert_message(m, "TA", &[("color", "red")]);
        assert_eq!(m["topic"], "JP");
    }
    assert_offsets_at_end(&server, "JP", "G_conc", 450);
    let stop = d.ok("push-stop --name c1", CONSUME);
    eprintln!(
        "{test}: c1 delivered {} ({} distinct)",
        stop["delivered"],
        seen.len()
    );

    // Orderly: 4 shards through a MessageQueueSelector, each consumed in send order.
    let reply = d.ok(
        "produce --topic JO --mode orderly --count 200 --prefix r --shards 4",
        PRODUCE,
    );
    let queue_of_shard = reply["queue_of_shard"].clone();
    d.ok(
        "push-start --name o1 --topic JO --group G_ord --orderly",
        PRODUCE,
    );
    let want = expected("r", 200);
    let done = d.wait_events(CONSUME, |ev| {
        let n: BTreeSet<&str> = ev
            .iter()
            .filter(|e| e["consumer"] == "o1")
            .filter_map(|e| e["body"].as_str())
            .collect();
        n.len() >= want.len()
    });
    assert!(
        done,
        "orderly consumer saw too few: {:?}",
        bodies(d.deliveries("o1")).len()
    );
    let mut last: BTreeMap<u32, u32> = BTreeMap::new();
    for m in d.deliveries("o1") {
        let (_, i) = split_body(m["body"].as_str().unwrap());
        let shard = i % 4;
        assert_eq!(
            m["queue"],
            queue_of_shard[shard.to_string()],
            "shard {shard} consumed from another queue than it was sent to: {m}"
        );
        if let Some(prev) = last.insert(shard, i) {
            assert!(prev < i, "shard {shard}: {i} consumed after {prev}");
        }
    }
    d.ok("push-stop --name o1", CONSUME);
    assert_offsets_at_end(&server, "JO", "G_ord", 200);

    // Broadcasting: two consumers of one group each get every message.
    d.ok(
        "push-start --name b1 --topic JB --group G_bc --broadcast",
        PRODUCE,
    );
    d.ok(
        "push-start --name b2 --topic JB --group G_bc --broadcast",
        PRODUCE,
    );
    std::thread::sleep(Duration::from_secs(2));
    d.ok("produce --topic JB --count 40 --prefix c", PRODUCE);
    let want = expected("c", 40);
    let done = d.wait_events(CONSUME, |ev| {
        ["b1", "b2"].iter().all(|name| {
            let n: BTreeSet<&str> = ev
                .iter()
                .filter(|e| e["consumer"] == *name)
                .filter_map(|e| e["body"].as_str())
                .collect();
            want.iter().all(|b| n.contains(b.as_str()))
        })
    });
    assert!(
        done,
        "broadcast: b1 saw {}, b2 saw {} of 40",
        bodies(d.deliveries("b1")).len(),
        bodies(d.deliveries("b2")).len()
    );
    d.ok("push-stop --name b1", CONSUME);
    d.ok("push-stop --name b2", CONSUME);

    // Delay level 2 (5 s): delivered no earlier than 5 s after it was sent.
    d.ok("push-start --name d1 --topic JD --group G_delay", PRODUCE);
    d.ok("produce --topic JD --count 3 --prefix d --delay 2", PRODUCE);
    let done = d.wait_events(CONSUME, |ev| {
        ev.iter().filter(|e| e["consumer"] == "d1").count() >= 3
    });
    assert!(
        done,
        "delayed messages not delivered within {} s",
        CONSUME.as_secs()
    );
    for m in d.deliveries("d1") {
        let waited = m["recv_ms"].as_i64().unwrap() - m["born_ms"].as_i64().unwrap();
        eprintln!("{test}: delay level 2 delivered after {waited} ms");
        assert!(
            (DELAY_LEVEL_2_MS - 500..DELAY_LEVEL_2_MS + 20_000).contains(&waited),
            "delay level 2 message delivered {waited} ms after it was born: {m}"
        );
        assert_eq!(m["topic"], "JD");
        assert_message(m, "TA", &[]);
    }
    d.ok("push-stop --name d1", CONSUME);
}

#[test]
fn java4_producer_modes_and_push_consumers() {
    producer_modes_and_push_consumers(V4, "java4_producer_modes_and_push_consumers");
}

#[test]
fn java5_producer_modes_and_push_consumers() {
    producer_modes_and_push_consumers(V5, "java5_producer_modes_and_push_consumers");
}

// ---------------------------------------------------------------------------------------------
// Retry and dead letters

/// Every message is answered RECONSUME_LATER (delay level 1): with maxReconsumeTimes 2 each is
/// delivered with reconsumeTimes 0, 1 and 2, then lands in `%DLQ%<group>` with its body, keys
/// and tag intact.
fn retry_then_dead_letter(version: &str, test: &str) {
    let Some(Setup {
        server, mut driver, ..
    }) = setup(version, test, &[])
    else {
        return;
    };
    create_topics(&server, &["JR"]);
    let d = &mut driver;
    d.ok("produce --topic JR --count 10 --prefix f --tag TR", PRODUCE);
    d.ok(
        "push-start --name f1 --topic JR --group G_dlq --expr TR --fail-all --max-reconsume 2",
        PRODUCE,
    );
    let want = expected("f", 10);
    let done = d.wait_events(CONSUME, |ev| {
        let third: BTreeSet<&str> = ev
            .iter()
            .filter(|e| e["consumer"] == "f1" && e["reconsume"] == 2)
            .filter_map(|e| e["body"].as_str())
            .collect();
        third.len() >= want.len()
    });
    assert!(
        done,
        "not every message was redelivered twice: {:?}",
        bodies(d.deliveries("f1"))
    );
    // Give a fourth delivery (a bug) the time to show.
    std::thread::sleep(Duration::from_secs(4));
    d.pump();
    let mut attempts: BTreeMap<String, BTreeSet<i64>> = BTreeMap::new();
    for m in d.deliveries("f1") {
        let body = m["body"].as_str().unwrap().to_string();
        attempts
            .entry(body)
            .or_default()
            .insert(m["reconsume"].as_i64().unwrap());
        assert_message(m, "TR", &[]);
    }
    for body in &want {
        assert_eq!(
            attempts
                .get(body)
                .map(|s| s.iter().copied().collect::<Vec<_>>()),
            Some(vec![0, 1, 2]),
            "reconsume times of {body}"
        );
    }
    let delivered = d.ok("push-stop --name f1", CONSUME)["delivered"]
        .as_u64()
        .unwrap();
    assert!(
        delivered <= 3 * 10 + 5,
        "{delivered} deliveries for 10 messages × 3 attempts"
    );
    // The dead-letter queue, read from the broker directly.
    let dlq: Vec<(u64, Vec<u8>)> = runtime().block_on(async {
        let client = remoting::client(socket(&server.broker)).await;
        let end = remoting::max_offset(&client, "%DLQ%G_dlq", 0)
            .await
            .unwrap_or(0);
        let out = remoting::pull_range(&client, "%DLQ%G_dlq", 0, 0, end).await;
        client.close();
        out
    });
    let dead: BTreeSet<String> = dlq
        .iter()
        .map(|(_, b)| String::from_utf8_lossy(b).to_string())
        .collect();
    assert_eq!(dead, want, "%DLQ%G_dlq holds {dead:?}");
    assert_eq!(dlq.len(), want.len(), "duplicates in the DLQ: {dlq:?}");
}

#[test]
fn java4_reconsume_later_goes_to_retry_then_dlq() {
    retry_then_dead_letter(V4, "java4_reconsume_later_goes_to_retry_then_dlq");
}

#[test]
fn java5_reconsume_later_goes_to_retry_then_dlq() {
    retry_then_dead_letter(V5, "java5_reconsume_later_goes_to_retry_then_dlq");
}

// ---------------------------------------------------------------------------------------------
// DefaultLitePullConsumer

fn lite_pull(version: &str, test: &str) {
    let Some(Setup {
        server, mut driver, ..
    }) = setup(version, test, &[])
    else {
        return;
    };
    create_topics(&server, &["JL"]);
    let d = &mut driver;
    d.ok("produce --topic JL --count 100 --prefix l", PRODUCE);
    // subscribe + commitSync: every message, committed offsets at the end.
    // 4.9.x: commitSync() only updates the client's memory; the persist timer (first run
    // 10 s after the client starts) sends it. 5.x persists in commitSync.
    let linger = if version == V4 { 12_000 } else { 0 };
    let reply = d.ok(
        &format!(
            "lite-pull --topic JL --group G_ls --expect 100 --timeout 60 --linger-ms {linger}"
        ),
        CONSUME,
    );
    let seen = bodies(d.events.iter().filter(|e| e["consumer"] == "lite"));
    assert_eq!(
        seen.keys().cloned().collect::<BTreeSet<_>>(),
        expected("l", 100)
    );
    let progress = progress(&server, "JL", "G_ls");
    for (q, (max, committed)) in progress.iter().enumerate() {
        assert_eq!(*committed, Some(*max), "G_ls queue {q}: {progress:?}");
        assert_eq!(
            reply["committed"][q.to_string()],
            *max,
            "committed(mq) of queue {q}: {reply}"
        );
    }
    d.events.clear();

    // assign + seek queue 0 to 10: queue 0 starts at 10, the others at 0. The driver assigns
    // and pauses queue 0 before start() and seeks before resume(): 4.9.8's seek can lose the
    // seek offset to a pull task that is already past its checks (first seen as "first offset
    // of queue 0: 20" in a loaded CI run); see `litePull` in the driver.
    let q0_max = progress[0].0;
    let expect = 100 - 10;
    let reply = d.ok(
        &format!(
            "lite-pull --topic JL --group G_la --assign --seek-queue 0 --seek-offset 10 --expect {expect} --timeout 60 --linger-ms {linger}"
        ),
        CONSUME,
    );
    let mut first_of_queue: BTreeMap<i64, i64> = BTreeMap::new();
    for m in d.events.iter().filter(|e| e["consumer"] == "lite") {
        let q = m["queue"].as_i64().unwrap();
        let offset = m["offset"].as_i64().unwrap();
        first_of_queue.entry(q).or_insert(offset);
        if q == 0 {
            assert!(
                offset >= 10,
                "queue 0 delivered offset {offset} before the seek target"
            );
        }
    }
    assert_eq!(
        first_of_queue.get(&0),
        Some(&10),
        "first offset of queue 0 after seek"
    );
    for q in 1..QUEUES as i64 {
        assert_eq!(
            first_of_queue.get(&q),
            Some(&0),
            "first offset of queue {q}"
        );
    }
    assert_eq!(reply["committed"]["0"], q0_max, "{reply}");
    assert_offsets_at_end(&server, "JL", "G_la", 100);
}

#[test]
fn java4_lite_pull_subscribe_assign_seek_commit() {
    lite_pull(V4, "java4_lite_pull_subscribe_assign_seek_commit");
}

#[test]
fn java5_lite_pull_subscribe_assign_seek_commit() {
    lite_pull(V5, "java5_lite_pull_subscribe_assign_seek_commit");
}

// ---------------------------------------------------------------------------------------------
// DefaultMQPullConsumer: the seed scenario

/// What ferromq guarantees to `DefaultMQPullConsumer`, and what the client itself drops:
/// 1. `updateConsumeOffset` + `persistConsumerOffset` on a queue NOT registered through
///    `registerMessageQueueListener`/`setRegisterTopics`: the client never sends it (the seed
///    problem); the broker holds nothing.
/// 2. The commit that does reach the broker (`updateConsumeOffsetToBroker`, or persist of a
///    registered topic) is acknowledged and read back exactly by a fresh client instance.
/// 3. With the broker down, `OffsetStore.persist` returns normally (swallowed), the explicit
///    `updateConsumeOffsetToBroker` throws.
/// 4. After kill -9 and restart, every commit that reached the broker is there unchanged (no
///    rewind), and the swallowed one is absent.
fn pull_consumer_seed(version: &str, test: &str) {
    let Some(Setup {
        server, mut driver, ..
    }) = setup(version, test, &[])
    else {
        return;
    };
    create_topics(&server, &["JS"]);
    let d = &mut driver;
    d.ok("produce --topic JS --count 40 --prefix p", PRODUCE);

    // 1. Unregistered queue: update + persist never reach the broker.
    let open = d.ok("pull-open --name p1 --group G_seed --topic JS", PRODUCE);
    assert_eq!(open["queues"], serde_json::json!([0, 1, 2, 3]));
    d.ok(
        "pull-update --name p1 --topic JS --queue 0 --offset 5",
        PRODUCE,
    );
    let persist = d.ok("pull-persist --name p1", PRODUCE);
    assert_eq!(persist["threw"], false, "{persist}");
    let broker_q0 = stored(&server, "G_seed", "JS", 0);
    let memory_q0 = d.ok(
        "pull-fetch --name p1 --topic JS --queue 0 --memory",
        PRODUCE,
    )["offset"]
        .clone();
    eprintln!(
        "{test}: unregistered queue: after updateConsumeOffset(5) + persistConsumerOffset the \
         broker holds {broker_q0:?}, the client's memory {memory_q0}"
    );
    assert_eq!(
        broker_q0, None,
        "the Java client sent an unregistered queue's offset (seed fixed upstream?)"
    );

    // 2. Commits that reach the broker are read back exactly.
    let r = d.ok(
        "pull-to-broker --name p1 --topic JS --queue 0 --offset 7",
        PRODUCE,
    );
    assert_eq!(r["threw"], false, "{r}");
    assert_eq!(stored(&server, "G_seed", "JS", 0), Some(7));
    // A group of its own: sharing G_seed with p1 would give p1 half of the queues.
    d.ok(
        "pull-open --name p2 --group G_reg --topic JS --register",
        PRODUCE,
    );
    // persistConsumerOffset covers the queues the rebalance assigned (it runs at start and
    // every 20 s), so the registered topic's offset lands once that has happened.
    let started = Instant::now();
    let landed = loop {
        d.ok(
            "pull-update --name p2 --topic JS --queue 1 --offset 9",
            PRODUCE,
        );
        let persist = d.ok("pull-persist --name p2", PRODUCE);
        assert_eq!(persist["threw"], false, "{persist}");
        let landed = stored(&server, "G_reg", "JS", 1);
        if landed.is_some() || started.elapsed() > Duration::from_secs(45) {
            break landed;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    eprintln!(
        "{test}: registered topic: persistConsumerOffset landed after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(landed, Some(9), "registered topic's persist");
    d.ok("pull-open --name p3 --group G_seed --topic JS", PRODUCE);
    let fetched = d.ok("pull-fetch --name p3 --topic JS --queue 0", PRODUCE);
    assert_eq!(
        fetched["offset"], 7,
        "fresh instance reads the stored offset: {fetched}"
    );
    d.ok("pull-close --name p3", PRODUCE);

    // 3. Broker unreachable while persisting.
    let (data, ports, extra, runs) = server.kill9();
    d.ok(
        "pull-update --name p2 --topic JS --queue 2 --offset 4",
        PRODUCE,
    );
    let swallowed = d.ok("pull-persist-queue --name p2 --topic JS --queue 2", PRODUCE);
    let persisted_all = d.ok("pull-persist --name p2", PRODUCE);
    let explicit = d.ok(
        "pull-to-broker --name p2 --topic JS --queue 2 --offset 4",
        PRODUCE,
    );
    let down_read = d.call("pull-fetch --name p2 --topic JS --queue 1", PRODUCE);
    eprintln!(
        "{test}: broker down: OffsetStore.persist threw={} persistConsumerOffset threw={} \
         updateConsumeOffsetToBroker threw={} ({}) fetchConsumeOffset(fromStore) = {}",
        swallowed["threw"], persisted_all["threw"], explicit["threw"], explicit["error"], down_read
    );
    assert_eq!(
        swallowed["threw"], false,
        "OffsetStore.persist surfaced the error (client changed?)"
    );
    assert_eq!(persisted_all["threw"], false);
    assert_eq!(
        explicit["threw"], true,
        "updateConsumeOffsetToBroker with the broker down: {explicit}"
    );

    // 4. kill -9 lost nothing that was acknowledged; the swallowed commit is absent.
    let server = Server::restart(data, ports, extra, runs);
    assert_eq!(
        stored(&server, "G_seed", "JS", 0),
        Some(7),
        "queue 0 after kill -9"
    );
    assert_eq!(
        stored(&server, "G_reg", "JS", 1),
        Some(9),
        "queue 1 after kill -9"
    );
    assert_eq!(
        stored(&server, "G_reg", "JS", 2),
        None,
        "queue 2's swallowed persist"
    );
    d.ok("pull-open --name p4 --group G_seed --topic JS", PRODUCE);
    let deadline = Instant::now() + Duration::from_secs(60);
    let fetched = loop {
        let reply = d.call("pull-fetch --name p4 --topic JS --queue 0", PRODUCE);
        if reply["offset"] == 7 || Instant::now() > deadline {
            break reply;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(
        fetched["offset"], 7,
        "fetchConsumeOffset after restart: {fetched}"
    );
    let read = d.ok(
        "pull-read --name p4 --topic JS --queue 0 --offset 7 --max 1",
        PRODUCE,
    );
    assert_eq!(read["status"], "FOUND", "{read}");
    assert_eq!(read["msgs"][0]["offset"], 7, "{read}");
}

#[test]
fn java4_pull_consumer_offsets_seed_scenario() {
    pull_consumer_seed(V4, "java4_pull_consumer_offsets_seed_scenario");
}

#[test]
fn java5_pull_consumer_offsets_seed_scenario() {
    pull_consumer_seed(V5, "java5_pull_consumer_offsets_seed_scenario");
}

// ---------------------------------------------------------------------------------------------
// Transactions

fn transactions(version: &str, test: &str) {
    let Some(Setup {
        server, mut driver, ..
    }) = setup(
        version,
        test,
        &[
            "--transaction-timeout-ms",
            "1000",
            "--transaction-check-interval-ms",
            "1000",
        ],
    )
    else {
        return;
    };
    create_topics(&server, &["JT"]);
    let d = &mut driver;
    d.ok("push-start --name t1 --topic JT --group G_tx", PRODUCE);
    let r = d.ok(
        "tx --topic JT --group PG_tc --count 5 --prefix tc --outcome commit",
        PRODUCE,
    );
    assert_eq!(r["checks"], 0, "{r}");
    d.ok(
        "tx --topic JT --group PG_tr --count 5 --prefix tr --outcome rollback",
        PRODUCE,
    );
    let r = d.ok(
        "tx --topic JT --group PG_tu --count 5 --prefix tu --outcome unknown --check commit --wait-checks 5 --timeout 60",
        Duration::from_secs(90),
    );
    assert_eq!(r["checked_keys"].as_array().map(Vec::len), Some(5), "{r}");
    let r = d.ok(
        "tx --topic JT --group PG_tx --count 5 --prefix tx --outcome unknown --check rollback --wait-checks 5 --timeout 60",
        Duration::from_secs(90),
    );
    assert_eq!(r["checked_keys"].as_array().map(Vec::len), Some(5), "{r}");
    let mut want = expected("tc", 5);
    want.extend(expected("tu", 5));
    let done = d.wait_events(CONSUME, |ev| {
        let seen: BTreeSet<&str> = ev
            .iter()
            .filter(|e| e["consumer"] == "t1")
            .filter_map(|e| e["body"].as_str())
            .collect();
        want.iter().all(|b| seen.contains(b.as_str()))
    });
    // Rolled-back halves must never show up: wait two more check intervals.
    std::thread::sleep(Duration::from_secs(3));
    d.pump();
    let seen = bodies(d.deliveries("t1"));
    assert!(done, "committed transactions not all delivered: {seen:?}");
    let seen: BTreeSet<String> = seen.into_keys().collect();
    assert_eq!(seen, want, "delivered transactional messages");
    for m in d.deliveries("t1") {
        assert_eq!(m["topic"], "JT");
        assert_message(m, "TA", &[]);
    }
    let checks: Vec<&Value> = d.events.iter().filter(|e| e["event"] == "check").collect();
    assert!(
        checks.iter().all(|c| c["topic"] == "JT"),
        "check-back names the real topic: {checks:?}"
    );
    d.ok("push-stop --name t1", CONSUME);
    assert_offsets_at_end(&server, "JT", "G_tx", 10);
}

#[test]
fn java4_transactions_commit_rollback_check_back() {
    transactions(V4, "java4_transactions_commit_rollback_check_back");
}

#[test]
fn java5_transactions_commit_rollback_check_back() {
    transactions(V5, "java5_transactions_commit_rollback_check_back");
}

// ---------------------------------------------------------------------------------------------
// kill -9 mid-run

/// 1,000 messages; the push consumer handles ~200/s (one thread, 5 ms each) and persists every
/// second. ferromq is killed with -9 after 300 deliveries and restarted on the same ports and
/// data: every message is delivered, duplicates stay within `KILL9_MAX_DUPLICATES`, and the
/// committed offsets reach the end.
fn kill9_mid_run(version: &str, test: &str) {
    let Some(Setup {
        dir,
        server,
        mut driver,
    }) = setup(version, test, &[])
    else {
        return;
    };
    create_topics(&server, &["JK"]);
    let d = &mut driver;
    d.ok("produce --topic JK --count 1000 --prefix k", PRODUCE);
    d.ok(
        "push-start --name k1 --topic JK --group G_kill --threads 1 --sleep-ms 5 --persist-ms 1000",
        PRODUCE,
    );
    let reached = d.wait_events(CONSUME, |ev| {
        ev.iter().filter(|e| e["consumer"] == "k1").count() >= 300
    });
    assert!(reached, "consumer did not reach 300 deliveries");
    let killed_at = d.deliveries("k1").count();
    let server = server.kill9_and_restart(Duration::from_millis(500));
    let restarted = Instant::now();
    let want = expected("k", 1000);
    let done = d.wait_events(CONSUME, |ev| {
        let seen: BTreeSet<&str> = ev
            .iter()
            .filter(|e| e["consumer"] == "k1")
            .filter_map(|e| e["body"].as_str())
            .collect();
        want.iter().all(|b| seen.contains(b.as_str()))
    });
    let seen = bodies(d.deliveries("k1"));
    assert!(
        done,
        "after kill -9 and restart only {} of 1000 delivered\n{}",
        seen.len(),
        server.stderr_tail()
    );
    let delivered: u64 = seen.values().sum();
    let duplicates = delivered - seen.len() as u64;
    eprintln!(
        "{test}: killed after {killed_at} deliveries; all 1000 delivered {:.1} s after the \
         restart; {duplicates} duplicates (bound {KILL9_MAX_DUPLICATES}); run dir {}",
        restarted.elapsed().as_secs_f64(),
        dir.display()
    );
    assert!(
        duplicates <= KILL9_MAX_DUPLICATES,
        "{duplicates} duplicates after kill -9, bound {KILL9_MAX_DUPLICATES}"
    );
    assert_offsets_at_end(&server, "JK", "G_kill", 1000);
    d.ok("push-stop --name k1", CONSUME);
}

#[test]
fn java4_kill9_mid_run_redelivers_within_bound() {
    kill9_mid_run(V4, "java4_kill9_mid_run_redelivers_within_bound");
}

#[test]
fn java5_kill9_mid_run_redelivers_within_bound() {
    kill9_mid_run(V5, "java5_kill9_mid_run_redelivers_within_bound");
}

// ---------------------------------------------------------------------------------------------
// Java mqadmin (rocketmq-tools 5.5.0 MQAdminStartup, run inside the driver's JVM)

/// What one mqadmin command did against ferromq.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    /// Same meaning as against RocketMQ: the output holds what the check looks for.
    Works(&'static str),
    /// A clear refusal: a RocketMQ exception carrying ferromq's response code and remark.
    Refused(String),
    /// A Java stack trace from a malformed or missing reply, or output without the expected
    /// content.
    Broken(String),
    /// Not run, and why.
    NotRun(&'static str),
}

impl Outcome {
    fn cell(&self) -> String {
        match self {
            Outcome::Works(what) => format!("works: {what}"),
            Outcome::Refused(why) => format!("clear refusal: {why}"),
            Outcome::Broken(why) => format!("BROKEN: {why}"),
            Outcome::NotRun(why) => format!("not run: {why}"),
        }
    }
}

/// The remark of a RocketMQ exception (`CODE: n  DESC: remark`), if the output has one.
fn refusal(text: &str) -> Option<String> {
    let at = text.find("CODE: ")?;
    let rest = &text[at + 6..];
    let code: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '-')
        .collect();
    let desc_at = rest.find("DESC: ")?;
    let desc = &rest[desc_at + 6..];
    let end = [" BROKER: ", "  For more", "\n", ", For more"]
        .iter()
        .filter_map(|m| desc.find(m))
        .min()
        .unwrap_or(desc.len());
    let desc = desc[..end].trim();
    (!desc.is_empty() && desc != "null").then(|| format!("code {code}, \"{desc}\""))
}

fn classify(reply: &Value, check: &'static str, expect: impl Fn(&str) -> bool) -> Outcome {
    let stdout = reply["stdout"].as_str().unwrap_or_default();
    let stderr = reply["stderr"].as_str().unwrap_or_default();
    let all = format!("{stdout}\n{stderr}");
    // The expected content first: queryMsgBy* print a per-group track after the message, and
    // a group's own error there (as RocketMQ prints it) does not undo the answer.
    if expect(stdout) && !all.contains("\tat ") {
        return Outcome::Works(check);
    }
    if let Some(why) = refusal(&all) {
        return Outcome::Refused(why);
    }
    if all.contains("Exception") || all.contains("\tat ") {
        let line = all
            .lines()
            .find(|l| l.contains("Exception"))
            .unwrap_or("stack trace");
        return Outcome::Broken(line.trim().chars().take(160).collect());
    }
    {
        let first = stdout
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("(no output)");
        Outcome::Broken(format!(
            "unexpected output: {}",
            first.trim().chars().take(120).collect::<String>()
        ))
    }
}

/// Replaces this run's addresses and times so the table is the same on every run.
fn stable(text: &str, server: &Server) -> String {
    text.replace(&server.namesrv, "NAMESRV")
        .replace(&server.broker, "BROKER")
}

/// The path of the compatibility table this test writes.
fn compat_path() -> std::path::PathBuf {
    java::repo_root().join("docs/compat.md")
}

fn render_compat(rows: &[(String, String, Outcome)], version: &str) -> String {
    let mut out = String::new();
    out.push_str("# Java mqadmin against ferromq\n\n");
    out.push_str(&format!(
        "Generated by `crates/cli/tests/interop_java.rs` (`java5_mqadmin_commands_against_ferromq`) \
         from its own run of `org.apache.rocketmq:rocketmq-tools` {version} `MQAdminStartup` \
         against `ferromq standalone`; do not edit by hand. The test fails when its run differs \
         from this file; `FERROMQ_UPDATE_COMPAT=1` rewrites it.\n\n"
    ));
    out.push_str(
        "Results: **works** = the output has the same meaning as against RocketMQ (what the \
                  test checked is named); **clear refusal** = a RocketMQ exception carrying \
                  ferromq's response code and remark; **BROKEN** = a Java stack trace from a \
                  malformed reply or output without the expected content; **not run** = why.\n\n",
    );
    out.push_str("| Command | Flags | Result |\n|---|---|---|\n");
    for (command, flags, outcome) in rows {
        out.push_str(&format!(
            "| `{command}` | `{flags}` | {} |\n",
            outcome.cell().replace('|', "\\|")
        ));
    }
    out
}

/// A ferromq (Rust) push consumer run inside the test, for mqadmin consumerStatus.
struct RustConsumer {
    runtime: tokio::runtime::Runtime,
    consumer: Option<ferromq_client::PushConsumer>,
    consumed: std::sync::Arc<std::sync::atomic::AtomicU64>,
    client_id: String,
}

impl RustConsumer {
    fn start(namesrv: &str, group: &str, topic: &str) -> RustConsumer {
        use ferromq_client::push::{
            ConsumeFromWhere, ConsumeStatus, MessageListener, PushConsumer, PushConsumerConfig,
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let consumed = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = consumed.clone();
        let config = PushConsumerConfig {
            namesrv_addrs: vec![socket(namesrv)],
            group: group.to_string(),
            consume_from_where: ConsumeFromWhere::FirstOffset,
            persist_interval: Duration::from_millis(200),
            pull_hold: Duration::from_secs(2),
            ..PushConsumerConfig::default()
        };
        let listener = MessageListener::concurrently(move |batch| {
            counter.fetch_add(batch.len() as u64, std::sync::atomic::Ordering::Relaxed);
            ConsumeStatus::ConsumeSuccess
        });
        let consumer = runtime
            .block_on(PushConsumer::start(
                config,
                vec![(topic.to_string(), "*".to_string())],
                listener,
            ))
            .expect("Rust push consumer starts");
        let client_id = consumer.client_id().to_string();
        RustConsumer {
            runtime,
            consumer: Some(consumer),
            consumed,
            client_id,
        }
    }

    fn wait_consumed(&self, count: u64) {
        let started = Instant::now();
        while self.consumed.load(std::sync::atomic::Ordering::Relaxed) < count {
            assert!(
                started.elapsed() < CONSUME,
                "the Rust push consumer consumed {} of {count}",
                self.consumed.load(std::sync::atomic::Ordering::Relaxed)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn shutdown(mut self) {
        if let Some(consumer) = self.consumer.take() {
            let report = self.runtime.block_on(consumer.shutdown());
            let report = report.expect("Rust push consumer shutdown");
            assert!(report.is_complete(), "{report:?}");
        }
    }
}

/// `consumerStatus -i` of the Rust consumer: its push type, its subscription to JA, and under
/// `#Consumer Offset#` one line per queue of JA on `broker_name` whose offsets add up to
/// `total` (everything consumed and committed).
fn rust_running_info_ok(out: &str, broker_name: &str, total: i64) -> bool {
    let Some(offsets) = out.split("#Consumer Offset#").nth(1) else {
        return false;
    };
    let offsets = offsets
        .split("#Consumer MQ Detail#")
        .next()
        .unwrap_or_default();
    let rows: Vec<Vec<&str>> = offsets
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| w.len() == 4 && w[0] == "JA" && w[1] == broker_name)
        .collect();
    let sum: i64 = rows.iter().filter_map(|w| w[3].parse::<i64>().ok()).sum();
    out.contains("CONSUME_PASSIVELY")
        && out.contains("Topic: JA ")
        && out.contains("Topic: %RETRY%G_rs ")
        && rows.len() == QUEUES as usize
        && sum == total
}

#[test]
fn java5_mqadmin_commands_against_ferromq() {
    let test = "java5_mqadmin_commands_against_ferromq";
    let Some(Setup {
        server, mut driver, ..
    }) = setup(V5, test, &[])
    else {
        return;
    };
    let d = &mut driver;
    let ns = server.namesrv.clone();
    let broker = server.broker.clone();
    // The cluster and broker names, from clusterList.
    let listed = d.ok(&format!("mqadmin clusterList -n {ns}"), PRODUCE);
    let row = listed["stdout"]
        .as_str()
        .unwrap_or_default()
        .lines()
        .find(|l| l.contains(&broker))
        .unwrap_or_else(|| panic!("clusterList has no row for {broker}: {listed}"))
        .to_string();
    let words: Vec<&str> = row.split_whitespace().collect();
    let (cluster, broker_name) = (words[0].to_string(), words[1].to_string());

    // Data for the message and consumer commands.
    let produced = d.ok(
        &format!("mqadmin updateTopic -n {ns} -b {broker} -t JA -r 4 -w 4"),
        PRODUCE,
    );
    assert!(
        produced["stdout"]
            .as_str()
            .unwrap_or_default()
            .contains("success"),
        "{produced}"
    );
    common::wait_route(&ns, "JA");
    let sent = d.ok("produce --topic JA --count 20 --prefix q --tag TQ", PRODUCE);
    let sample = sent["sample"][3].clone();
    let offset_msg_id = sample["offset_msg_id"]
        .as_str()
        .expect("offset msg id")
        .to_string();
    let uniq = sample["msg_id"].as_str().expect("msg id").to_string();
    let (sample_queue, sample_offset) = (sample["queue"].clone(), sample["offset"].clone());
    d.ok("push-start --name a1 --topic JA --group G_adm", PRODUCE);
    assert!(
        d.wait_events(CONSUME, |ev| ev
            .iter()
            .filter(|e| e["consumer"] == "a1")
            .count()
            >= 20),
        "G_adm did not consume"
    );
    // The Java client persists offsets on a timer (first run 10 s after it starts).
    assert_offsets_at_end(&server, "JA", "G_adm", 20);
    // A Rust push consumer in its own group, for consumerStatus against ferromq's client.
    let rust = RustConsumer::start(&ns, "G_rs", "JA");
    rust.wait_consumed(20);
    assert_offsets_at_end(&server, "JA", "G_rs", 20);
    let rust_id = rust.client_id.clone();

    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    type Check = Box<dyn Fn(&str) -> bool>;
    let contains = |needle: String| -> Check { Box::new(move |out: &str| out.contains(&needle)) };
    let cases: Vec<(&str, String, &'static str, Check)> = vec![
        (
            "updateTopic",
            format!("-n {ns} -b {broker} -t JA2 -r 2 -w 2"),
            "create topic … success",
            contains("success".into()),
        ),
        (
            "updateTopic",
            format!("-n {ns} -c {cluster} -t JA3"),
            "create topic … success",
            contains("success".into()),
        ),
        (
            "topicList",
            format!("-n {ns}"),
            "lists JA",
            contains("JA".into()),
        ),
        (
            "topicList",
            format!("-n {ns} -c"),
            "lists JA with its cluster",
            contains("JA".into()),
        ),
        (
            "topicRoute",
            format!("-n {ns} -t JA"),
            "route JSON names the broker",
            contains(broker.clone()),
        ),
        (
            "topicStatus",
            format!("-n {ns} -t JA"),
            "per-queue min/max offsets",
            contains(broker_name.clone()),
        ),
        (
            "clusterList",
            format!("-n {ns}"),
            "lists the broker",
            contains(broker.clone()),
        ),
        (
            "brokerStatus",
            format!("-n {ns} -b {broker}"),
            "runtime stats",
            contains("commitLogMaxOffset".into()),
        ),
        (
            "getBrokerConfig",
            format!("-n {ns} -b {broker}"),
            "configuration",
            contains("brokerName".into()),
        ),
        (
            "updateBrokerConfig",
            format!("-n {ns} -b {broker} -k defaultTopicQueueNums -v 8"),
            "updated",
            contains("success".into()),
        ),
        (
            "updateBrokerConfig",
            format!("-n {ns} -b {broker} -k flushDiskType -v ASYNC_FLUSH"),
            "updated",
            contains("success".into()),
        ),
        (
            "updateSubGroup",
            format!("-n {ns} -b {broker} -g G_new"),
            "created",
            contains("success".into()),
        ),
        (
            "deleteSubGroup",
            format!("-n {ns} -b {broker} -g G_new"),
            "deleted",
            contains("success".into()),
        ),
        (
            "consumerProgress",
            format!("-n {ns} -g G_adm"),
            "per-queue offsets of the group",
            contains("JA".into()),
        ),
        (
            "consumerProgress",
            format!("-n {ns}"),
            "one line per group",
            contains("G_adm".into()),
        ),
        (
            "consumerConnection",
            format!("-n {ns} -g G_adm"),
            "client id and subscription",
            contains("JA".into()),
        ),
        (
            "consumerStatus",
            format!("-n {ns} -g G_adm"),
            "the Java consumer's running info, same subscriptions, rebalance OK",
            Box::new(|out: &str| {
                out.contains("V5_5_0")
                    && out.contains("Same subscription")
                    && out.contains("Rebalance OK")
            }),
        ),
        (
            "consumerStatus",
            format!("-n {ns} -g G_rs -i {rust_id}"),
            "the Rust push consumer's properties, subscriptions and committed offset per queue",
            Box::new({
                let broker_name = broker_name.clone();
                move |out: &str| rust_running_info_ok(out, &broker_name, 20)
            }),
        ),
        (
            "resetOffsetByTime",
            format!("-n {ns} -g G_adm -t JA -s {now_ms}"),
            "new (broker-side) path",
            contains("JA".into()),
        ),
        (
            "skipAccumulatedMessage",
            format!("-n {ns} -g G_adm -t JA"),
            "every queue at its max offset",
            contains(format!("{broker_name} ")),
        ),
        (
            "cloneGroupOffset",
            format!("-n {ns} -s G_adm -d G_clone -t JA"),
            "cloned",
            contains("success".into()),
        ),
        // 5.x mqadmin has no resetOffsetByTimeOld command: it takes the old client-side path
        // (UPDATE_CONSUMER_OFFSET per queue) only when the broker answers CONSUMER_NOT_ONLINE.
        // G_clone has offsets and no member.
        (
            "resetOffsetByTime",
            format!("-n {ns} -g G_clone -t JA -s {now_ms}"),
            "offline group",
            contains("JA".into()),
        ),
        (
            "queryMsgById",
            format!("-n {ns} -t JA -i {offset_msg_id}"),
            "the message's key",
            contains("q-3".into()),
        ),
        (
            "queryMsgByKey",
            format!("-n {ns} -t JA -k q-3"),
            "the message id",
            contains(uniq.clone()),
        ),
        (
            "queryMsgByUniqueKey",
            format!("-n {ns} -t JA -i {uniq}"),
            "the message's key",
            contains("q-3".into()),
        ),
        (
            "queryMsgByOffset",
            format!("-n {ns} -t JA -b {broker_name} -i {sample_queue} -o {sample_offset}"),
            "the message's key",
            contains("q-3".into()),
        ),
        (
            "printMsg",
            format!("-n {ns} -t JA -d true"),
            "bodies",
            contains("q:3".into()),
        ),
        (
            "deleteTopic",
            format!("-n {ns} -t JA3 -c {cluster}"),
            "deleted",
            contains("success".into()),
        ),
        (
            "haStatus",
            format!("-n {ns} -b {broker}"),
            "HA runtime info (no slaves)",
            contains("#MasterAddr".into()),
        ),
    ];
    let mut rows = Vec::new();
    for (command, flags, check, expect) in cases {
        let reply = d.ok(
            &format!("mqadmin {command} {flags}"),
            Duration::from_secs(120),
        );
        let outcome = classify(&reply, check, expect);
        let outcome = match outcome {
            Outcome::Refused(why) => Outcome::Refused(stable(&why, &server)),
            Outcome::Broken(why) => Outcome::Broken(stable(&why, &server)),
            other => other,
        };
        eprintln!("mqadmin {command}: {}", outcome.cell());
        if !matches!(outcome, Outcome::Works(_)) {
            eprintln!(
                "--- stdout:\n{}\n--- stderr:\n{}",
                reply["stdout"].as_str().unwrap_or_default(),
                reply["stderr"].as_str().unwrap_or_default()
            );
        }
        let flags = stable(&flags, &server)
            .replace(&offset_msg_id, "OFFSET_MSG_ID")
            .replace(&uniq, "UNIQ_KEY")
            .replace(&now_ms.to_string(), "NOW_MS")
            .replace(&rust_id, "RUST_CLIENT_ID")
            .replace(&format!("-c {cluster}"), "-c CLUSTER")
            .replace(&format!("-b {broker_name}"), "-b BROKER_NAME")
            .replace(
                &format!("-i {sample_queue} -o {sample_offset}"),
                "-i QUEUE -o OFFSET",
            );
        rows.push((command.to_string(), flags, outcome));
    }
    for (command, flags) in [
        ("getSyncStateSet", "-a CONTROLLER -b broker-0"),
        ("getControllerMetaData", "-a CONTROLLER"),
        ("getBrokerEpoch", "-n NAMESRV -b broker-0"),
    ] {
        rows.push((
            command.to_string(),
            flags.to_string(),
            Outcome::NotRun(
                "here (needs a controller-mode cluster): `interop_java_ha.rs` \
                 (`java5_mqadmin_ha_commands_against_a_controller_cluster`) runs it against \
                 `ferromq cluster` and checks the leader, master, in-sync set and epochs",
            ),
        ));
    }
    d.ok("push-stop --name a1", CONSUME);
    rust.shutdown();

    let table = render_compat(&rows, V5);
    let path = compat_path();
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if std::env::var("FERROMQ_UPDATE_COMPAT").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &table).expect("writing docs/compat.md");
        eprintln!("{test}: wrote {}", path.display());
    } else {
        assert_eq!(
            committed, table,
            "docs/compat.md differs from this run's results; rerun with FERROMQ_UPDATE_COMPAT=1 \
             to rewrite it (and review the diff)"
        );
    }
    let broken: Vec<String> = rows
        .iter()
        .filter(|(_, _, o)| matches!(o, Outcome::Broken(_)))
        .map(|(c, f, o)| format!("{c} {f}: {}", o.cell()))
        .collect();
    assert!(
        broken.is_empty(),
        "mqadmin commands broken against ferromq:\n{}",
        broken.join("\n")
    );
}

/// mqadmin 4.9.8 (run with a quiet `logback_tools.xml`, without which 4.9.x mqadmin runs no
/// command) resets an offline group: `resetOffsetByTime -s 1` moves every queue of the group
/// back to offset 0, read back from the broker. 4.9.8's `MQAdminStartup` does not register
/// `resetOffsetByTimeOld`; its `resetOffsetByTime` takes the old client-side path only when
/// the broker answers CONSUMER_NOT_ONLINE, which ferromq does not (it resets offline groups
/// itself, durably).
#[test]
fn java4_mqadmin_resets_an_offline_group() {
    let test = "java4_mqadmin_resets_an_offline_group";
    let Some(Setup {
        server, mut driver, ..
    }) = setup(V4, test, &[])
    else {
        return;
    };
    create_topics(&server, &["JO"]);
    let d = &mut driver;
    d.ok("produce --topic JO --count 20 --prefix o", PRODUCE);
    d.ok(
        "push-start --name o1 --topic JO --group G_old --persist-ms 1000",
        PRODUCE,
    );
    assert!(
        d.wait_events(CONSUME, |ev| ev
            .iter()
            .filter(|e| e["consumer"] == "o1")
            .count()
            >= 20),
        "G_old did not consume"
    );
    assert_offsets_at_end(&server, "JO", "G_old", 20);
    d.ok("push-stop --name o1", CONSUME);
    let ns = server.namesrv.clone();
    let old = d.ok(
        &format!("mqadmin resetOffsetByTimeOld -n {ns} -g G_old -t JO -s 1"),
        Duration::from_secs(120),
    );
    assert!(
        old["stdout"]
            .as_str()
            .unwrap_or_default()
            .contains("resetOffsetByTimeOld not exist"),
        "4.9.8 mqadmin now has resetOffsetByTimeOld: {old}"
    );
    let reply = d.ok(
        &format!("mqadmin resetOffsetByTime -n {ns} -g G_old -t JO -s 1"),
        Duration::from_secs(120),
    );
    let out = reply["stdout"].as_str().unwrap_or_default();
    eprintln!("resetOffsetByTime (4.9.8):\n{out}");
    assert!(out.contains("#brokerName"), "{reply}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| w.len() == 3 && !w[0].starts_with('#'))
        .collect();
    assert_eq!(rows.len(), QUEUES as usize, "one row per queue: {reply}");
    assert!(rows.iter().all(|w| w[2] == "0"), "{reply}");
    for q in 0..QUEUES {
        assert_eq!(
            stored(&server, "G_old", "JO", q),
            Some(0),
            "queue {q} not reset: {reply}"
        );
    }
}
