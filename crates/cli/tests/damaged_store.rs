//! A store with one damaged record in the middle, through the `ferromq` binary: the
//! read-only `standalone --check` (and `--check --full`) report it without writing a byte,
//! a consumer's read stops at it with an error naming it, `admin quarantineList` lists it,
//! and `admin skipDamagedMessage` moves a group past it as a recorded reset.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{create_topic, fails, ok, ok_json, start_in};
use serde_json::Value;

fn body(i: usize) -> String {
    format!("damaged-store message {i:03} {}", "y".repeat(100))
}

async fn produce(namesrv: &str, count: usize) {
    let producer = ferromq_client::Producer::start(ferromq_client::ProducerConfig {
        namesrv_addrs: vec![namesrv.parse().unwrap()],
        group: "DamageTestProducer".into(),
        send_timeout: Duration::from_secs(10),
        ..ferromq_client::ProducerConfig::default()
    })
    .unwrap();
    let queue = ferromq_client::MessageQueue {
        topic: "T".into(),
        broker_name: "broker-a".into(),
        queue_id: 0,
    };
    for i in 0..count {
        let message = ferromq_client::Message::new("T", body(i));
        let sent = producer.send_to_queue(message, &queue).await.unwrap();
        assert_eq!(sent.queue_offset, i as u64);
    }
    producer.shutdown();
}

/// Flips one byte inside message `i`'s body in the CommitLog files.
fn damage_message(data: &Path, i: usize) {
    let needle = body(i).into_bytes();
    for item in std::fs::read_dir(data.join("commitlog")).unwrap() {
        let path = item.unwrap().path();
        let mut bytes = std::fs::read(&path).unwrap();
        if let Some(at) = bytes
            .windows(needle.len())
            .position(|w| w == needle.as_slice())
        {
            bytes[at + 25] ^= 0x08;
            std::fs::write(&path, bytes).unwrap();
            return;
        }
    }
    panic!("message {i} not found");
}

fn snapshot(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for item in std::fs::read_dir(&dir).unwrap() {
            let path = item.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                out.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

/// `admin queryMsgByOffset` of T/broker-a/0 at `offset`.
fn query_by_offset<'a>(ns: &'a str, offset: &'a str) -> [&'a str; 11] {
    [
        "queryMsgByOffset",
        "-n",
        ns,
        "-t",
        "T",
        "-b",
        "broker-a",
        "-i",
        "0",
        "-o",
        offset,
    ]
}

/// Runs `ferromq standalone --check [--full]`; returns the exit code and the JSON line.
fn check(data: &Path, full: bool) -> (Option<i32>, Value) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferromq"));
    command
        .args(["standalone", "--check", "--data-dir"])
        .arg(data);
    if full {
        command.arg("--full");
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let last = stdout.lines().last().unwrap_or_default().to_string();
    let report = serde_json::from_str(&last).unwrap_or_else(|e| panic!("{last:?}: {e}"));
    (output.status.code(), report)
}

#[test]
fn damaged_record_is_reported_read_only_named_on_read_and_skipped_by_an_admin() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let standalone = start_in(&data, &[]);
    // The broker registers with the name server after it prints its address: create the
    // topic and wait for its route before producing.
    create_topic(&standalone.namesrv, &standalone.broker, "T", "1");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(produce(&standalone.namesrv, 6));
    standalone.stop();
    damage_message(&data, 2);

    // The quick check verifies what recovery would: from the checkpoint (the clean stop's,
    // past the damage) on. The full check reads every record and finds it. Neither writes.
    let before = snapshot(&data);
    let (code, quick) = check(&data, false);
    assert_eq!(code, Some(0), "{quick}");
    assert_eq!(quick["clean"], true, "{quick}");
    let (code, full) = check(&data, true);
    assert_eq!(code, Some(2), "the full check finds work: {full}");
    assert_eq!(full["read_only"], true);
    assert!(
        full["would_cut"].is_null(),
        "nothing valid would be cut: {full}"
    );
    let ranges = full["would_quarantine"].as_array().unwrap();
    assert_eq!(ranges.len(), 1, "{full}");
    assert!(
        ranges[0]["reason"].as_str().unwrap().contains("CRC"),
        "{full}"
    );
    assert!(
        before == snapshot(&data),
        "a check changed the store's files"
    );

    let standalone = start_in(&data, &[]);
    let ns = standalone.namesrv.clone();
    let listed = ok_json(&["quarantineList", "-n", &ns]);
    assert_eq!(listed["brokers"][0]["total"], 0, "not found yet: {listed}");
    ok(&[
        "updateSubGroup",
        "-n",
        &ns,
        "-b",
        &standalone.broker,
        "-g",
        "G",
    ]);
    // A read of the damaged offset names it; the records around it read fine.
    let error = fails(&query_by_offset(&ns, "2"), 1);
    assert!(
        error.contains("damaged") && error.contains("queue offset 2"),
        "{error}"
    );
    ok(&query_by_offset(&ns, "3"));
    let listed = ok_json(&["quarantineList", "-n", &ns]);
    assert_eq!(listed["brokers"][0]["total"], 1, "{listed}");
    assert_eq!(
        listed["brokers"][0]["ranges"][0]["kind"], "damaged",
        "{listed}"
    );

    // Only the damaged record can be skipped; the skip is a recorded reset.
    let refused = fails(
        &[
            "skipDamagedMessage",
            "-n",
            &ns,
            "-g",
            "G",
            "-t",
            "T",
            "-q",
            "0",
            "-o",
            "3",
        ],
        1,
    );
    assert!(refused.contains("not damaged"), "{refused}");
    let skipped = ok_json(&[
        "skipDamagedMessage",
        "-n",
        &ns,
        "-g",
        "G",
        "-t",
        "T",
        "-q",
        "0",
        "-o",
        "2",
    ]);
    assert_eq!(skipped["newOffset"], 3, "{skipped}");
    let history = ok_json(&["offsetHistory", "-n", &ns, "-g", "G", "-t", "T"]);
    let events = history["events"].as_array().unwrap();
    let last = events.last().unwrap();
    assert_eq!(last["kind"], "reset", "{history}");
    assert_eq!(last["clientId"], "admin-skip-damaged", "{history}");
    assert_eq!(last["offset"], 3, "{history}");
    standalone.stop();
}
