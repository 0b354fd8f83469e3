//! Message queries by key, unique key, offset and time range.

use std::time::Duration;

use serde_json::Value;

use crate::common::{create_topic, fails, ok, ok_json, start};
use crate::support::{now_ms, producer, runtime, send_keyed, utc};

fn messages(value: &Value) -> &Vec<Value> {
    value["messages"].as_array().unwrap()
}

#[test]
fn message_queries_by_key_unique_key_offset_and_time_range() {
    let server = start();
    let n = server.namesrv.as_str();
    let b = server.broker.as_str();
    create_topic(n, b, "MsgTopic", "2");
    let rt = runtime();
    let (early, middle, late) = rt.block_on(async {
        let producer = producer(n);
        let mut early = Vec::new();
        for i in 0..3 {
            early.push(
                send_keyed(
                    &producer,
                    "MsgTopic",
                    i % 2,
                    "order-1",
                    "tagA",
                    &format!("early-{i}"),
                )
                .await,
            );
        }
        tokio::time::sleep(Duration::from_millis(60)).await;
        let middle = now_ms();
        tokio::time::sleep(Duration::from_millis(60)).await;
        let mut late = Vec::new();
        for i in 0..4 {
            late.push(
                send_keyed(
                    &producer,
                    "MsgTopic",
                    i % 2,
                    "order-2",
                    if i % 2 == 0 { "tagA" } else { "tagB" },
                    &format!("late-{i}"),
                )
                .await,
            );
        }
        producer.shutdown();
        (early, middle, late)
    });

    // By key: every message with the key, bodies and positions as sent.
    let found = ok_json(&["queryMsgByKey", "-n", n, "-t", "MsgTopic", "-k", "order-1"]);
    let list = messages(&found);
    assert_eq!(list.len(), 3, "{found}");
    let mut bodies: Vec<&str> = list.iter().map(|m| m["body"].as_str().unwrap()).collect();
    bodies.sort();
    assert_eq!(bodies, ["early-0", "early-1", "early-2"], "{found}");
    for message in list {
        assert_eq!(message["keys"], "order-1", "{found}");
        assert_eq!(message["tags"], "tagA", "{found}");
        assert_eq!(message["brokerName"], "broker-a", "{found}");
        let sent = early
            .iter()
            .find(|(id, _)| message["msgId"] == id.as_str())
            .unwrap_or_else(|| panic!("unknown msgId in {found}"));
        assert_eq!(message["queueOffset"], sent.1, "{found}");
    }
    let human = ok(&["queryMsgByKey", "-n", n, "-t", "MsgTopic", "-k", "order-2"]);
    assert!(human.starts_with("#Message ID"), "{human}");
    let (id, offset) = &late[1];
    let row: Vec<&str> = human
        .lines()
        .find(|l| l.starts_with(id.as_str()))
        .unwrap_or_else(|| panic!("{human}"))
        .split_whitespace()
        .collect();
    assert_eq!(
        row[1..6],
        ["broker-a", "1", &offset.to_string(), "order-2", "tagB"],
        "{human}"
    );
    assert_eq!(row.last(), Some(&"late-1"), "{human}");
    // A time range: only messages stored in it.
    let line = fails(
        &[
            "queryMsgByKey",
            "-n",
            n,
            "-t",
            "MsgTopic",
            "-k",
            "order-2",
            "--end",
            &middle.to_string(),
        ],
        1,
    );
    assert!(
        line.starts_with("error: no message of topic MsgTopic has key order-2"),
        "{line}"
    );
    let after = ok_json(&[
        "queryMsgByKey",
        "-n",
        n,
        "-t",
        "MsgTopic",
        "-k",
        "order-1",
        "-b",
        "-1h",
        "-e",
        &middle.to_string(),
    ]);
    assert_eq!(messages(&after).len(), 3, "{after}");
    let none = fails(
        &[
            "queryMsgByKey",
            "-n",
            n,
            "-t",
            "MsgTopic",
            "-k",
            "order-1",
            "-b",
            &middle.to_string(),
        ],
        1,
    );
    assert!(none.contains("no message"), "{none}");

    // By unique key: the detail block, and JSON.
    let (unique, unique_offset) = &late[2];
    let found = ok_json(&[
        "queryMsgByUniqueKey",
        "-n",
        n,
        "-t",
        "MsgTopic",
        "-i",
        unique,
    ]);
    assert_eq!(messages(&found).len(), 1, "{found}");
    let message = &messages(&found)[0];
    assert_eq!(message["body"], "late-2", "{found}");
    assert_eq!(message["queueId"], 0, "{found}");
    assert_eq!(message["queueOffset"], *unique_offset, "{found}");
    assert_eq!(message["msgId"], unique.as_str(), "{found}");
    let store_time = message["storeTimestamp"].as_i64().unwrap();
    assert!(store_time > middle, "{found}");
    let human = ok(&[
        "queryMsgByUniqueKey",
        "-n",
        n,
        "-t",
        "MsgTopic",
        "-i",
        unique,
    ]);
    let field = |name: &str| -> String {
        human
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in {human}"))[name.len()..]
            .trim()
            .to_string()
    };
    assert_eq!(field("Message Body:"), "late-2", "{human}");
    assert_eq!(field("Keys:"), "[order-2]", "{human}");
    assert_eq!(field("Queue Offset:"), unique_offset.to_string(), "{human}");
    // Times print in the local zone: TZ=UTC here.
    assert_eq!(
        field("Store Timestamp:"),
        utc(store_time, "%Y-%m-%d %H:%M:%S%.3f"),
        "{human}"
    );
    let line = fails(
        &[
            "queryMsgByUniqueKey",
            "-n",
            n,
            "-t",
            "MsgTopic",
            "-i",
            "0A0B0C",
        ],
        1,
    );
    assert!(
        line.contains("no message of topic MsgTopic has unique key 0A0B0C"),
        "{line}"
    );

    // By offset: the message at (broker, queue, offset); past the end is an error.
    let at = ok_json(&[
        "queryMsgByOffset",
        "-n",
        n,
        "-t",
        "MsgTopic",
        "-b",
        "broker-a",
        "-i",
        "1",
        "-o",
        "1",
    ]);
    assert_eq!(at["queueId"], 1, "{at}");
    assert_eq!(at["queueOffset"], 1, "{at}");
    assert_eq!(at["body"], "late-1", "{at}");
    let human = ok(&[
        "queryMsgByOffset",
        "-n",
        n,
        "-t",
        "MsgTopic",
        "-b",
        "broker-a",
        "-i",
        "0",
        "-o",
        "0",
    ]);
    assert!(
        human
            .lines()
            .any(|l| l.starts_with("Message Body:") && l.ends_with("early-0")),
        "{human}"
    );
    let line = fails(
        &[
            "queryMsgByOffset",
            "-n",
            n,
            "-t",
            "MsgTopic",
            "-b",
            "broker-a",
            "-i",
            "0",
            "-o",
            "9",
        ],
        1,
    );
    assert!(
        line.contains("no message at offset 9") && line.contains("[0, 4)"),
        "{line}"
    );
    let line = fails(
        &[
            "queryMsgByOffset",
            "-n",
            n,
            "-t",
            "MsgTopic",
            "-b",
            "broker-z",
            "-i",
            "0",
            "-o",
            "0",
        ],
        1,
    );
    assert!(
        line.contains("broker broker-z does not serve topic MsgTopic"),
        "{line}"
    );

    // printMsg: every queue in a store-time range, with a tag filter.
    let all = ok_json(&["printMsg", "-n", n, "-t", "MsgTopic"]);
    assert_eq!(messages(&all).len(), 7, "{all}");
    let late_only = ok_json(&[
        "printMsg",
        "-n",
        n,
        "-t",
        "MsgTopic",
        "-b",
        &middle.to_string(),
    ]);
    let mut bodies: Vec<&str> = messages(&late_only)
        .iter()
        .map(|m| m["body"].as_str().unwrap())
        .collect();
    bodies.sort();
    assert_eq!(
        bodies,
        ["late-0", "late-1", "late-2", "late-3"],
        "{late_only}"
    );
    let early_only = ok_json(&[
        "printMsg",
        "-n",
        n,
        "-t",
        "MsgTopic",
        "-e",
        &middle.to_string(),
    ]);
    assert_eq!(messages(&early_only).len(), 3, "{early_only}");
    let tagged = ok_json(&[
        "printMsg",
        "-n",
        n,
        "-t",
        "MsgTopic",
        "-b",
        &middle.to_string(),
        "-s",
        "tagB",
    ]);
    let bodies: Vec<&str> = messages(&tagged)
        .iter()
        .map(|m| m["body"].as_str().unwrap())
        .collect();
    assert_eq!(bodies, ["late-1", "late-3"], "{tagged}");
    let human = ok(&[
        "printMsg",
        "-n",
        n,
        "-t",
        "MsgTopic",
        "-b",
        &middle.to_string(),
    ]);
    assert!(
        human.starts_with("#Message ID  ")
            && human.contains("#Store Time")
            && human.contains("#Body"),
        "{human}"
    );
    assert_eq!(
        human.lines().filter(|l| l.contains("late-")).count(),
        4,
        "{human}"
    );
    let row = human.lines().find(|l| l.ends_with("late-2")).unwrap();
    assert!(
        row.contains(&utc(store_time, "%Y-%m-%d %H:%M:%S%.3f")),
        "{row}"
    );
    let hidden = ok(&["printMsg", "-n", n, "-t", "MsgTopic", "-d", "false"]);
    assert!(
        !hidden.contains("early-0") && hidden.contains("NOT PRINT BODY"),
        "{hidden}"
    );
    let line = fails(&["printMsg", "-n", n, "-t", "MsgTopic", "-c", "GBK"], 1);
    assert!(line.contains("charset GBK is not supported"), "{line}");
}
