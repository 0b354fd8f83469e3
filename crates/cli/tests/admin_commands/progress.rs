//! `consumerProgress`: the lag of a scripted run is produced minus consumed.

use crate::common::{admin_in_zone, create_topic, ok, ok_json, start};
use crate::support::{commit, connect, heartbeat, pull_count, queue, runtime, send, utc};

#[test]
fn consumer_progress_lag_is_produced_minus_consumed() {
    let server = start();
    let n = server.namesrv.clone();
    let b = server.broker.clone();
    create_topic(&n, &b, "LagTopic", "3");
    // Produced per queue, pulled per queue, committed per queue.
    let produced = [7_i64, 5, 0];
    let pulled = [5_i64, 5, 0];
    let committed = [4_i64, 2, 0];
    let rt = runtime();
    rt.block_on(async {
        let client = connect(&b).await;
        for (queue_id, count) in produced.iter().enumerate() {
            for i in 0..*count {
                send(
                    &client,
                    "LagTopic",
                    queue_id as i32,
                    &format!("q{queue_id}-{i}"),
                )
                .await;
            }
        }
        heartbeat(&client, "127.0.0.1@lag-test", "LagGroup", "LagTopic").await;
        for queue_id in 0..3 {
            if pulled[queue_id] > 0 {
                let got = pull_count(
                    &client,
                    "LagGroup",
                    "LagTopic",
                    queue_id as i32,
                    0,
                    pulled[queue_id] as i32,
                )
                .await;
                assert_eq!(got as i64, pulled[queue_id]);
            }
            if committed[queue_id] > 0 {
                commit(
                    &client,
                    "LagGroup",
                    "LagTopic",
                    queue_id as i32,
                    committed[queue_id],
                )
                .await;
            }
        }
        let n2 = n.clone();
        let (json, human, all, all_human, of_topic) = tokio::task::spawn_blocking(move || {
            (
                ok_json(&["consumerProgress", "-n", &n2, "-g", "LagGroup"]),
                ok(&[
                    "consumerProgress",
                    "-n",
                    &n2,
                    "-g",
                    "LagGroup",
                    "-t",
                    "LagTopic",
                ]),
                ok_json(&["consumerProgress", "-n", &n2]),
                ok(&["consumerProgress", "-n", &n2]),
                ok_json(&["consumerProgress", "-n", &n2, "-t", "LagTopic"]),
            )
        })
        .await
        .unwrap();
        let mut total = 0;
        for queue_id in 0..3 {
            let q = queue(&json, queue_id as i64);
            let lag = produced[queue_id] - committed[queue_id];
            total += lag;
            assert_eq!(q["brokerOffset"], produced[queue_id], "{json}");
            assert_eq!(q["consumerOffset"], committed[queue_id], "{json}");
            assert_eq!(q["lag"], lag, "{json}");
            assert_eq!(q["diff"], lag, "{json}");
            assert_eq!(
                q["inflight"],
                pulled[queue_id] - committed[queue_id],
                "{json}"
            );
        }
        assert_eq!(json["totalLag"], total, "{json}");
        assert_eq!(json["diffTotal"], total, "{json}");
        assert_eq!(json["totalInflight"], 1 + 3, "{json}");
        assert!(json["consumeTps"].as_f64().unwrap() > 0.0, "{json}");
        // Last consume time: the store time of the message just before the committed offset.
        let last = queue(&json, 0)["lastTimestamp"].as_i64().unwrap();
        let n2 = n.clone();
        let at = tokio::task::spawn_blocking(move || {
            ok_json(&[
                "queryMsgByOffset",
                "-n",
                &n2,
                "-t",
                "LagTopic",
                "-b",
                "broker-a",
                "-i",
                "0",
                "-o",
                "3",
            ])
        })
        .await
        .unwrap();
        assert_eq!(at["storeTimestamp"], last, "{at}");
        assert_eq!(queue(&json, 2)["lastTimestamp"], 0, "{json}");
        assert_eq!(
            queue(&json, 0)["lastTime"],
            utc(last, "%Y-%m-%d %H:%M:%S"),
            "{json}"
        );

        assert!(human.starts_with("#Topic  "), "{human}");
        let row: Vec<&str> = human
            .lines()
            .find(|l| l.starts_with("LagTopic") && l.split_whitespace().nth(2) == Some("0"))
            .unwrap()
            .split_whitespace()
            .collect();
        let last_utc = utc(last, "%Y-%m-%d %H:%M:%S");
        let expected: Vec<&str> = ["LagTopic", "broker-a", "0", "7", "4", "3", "1"]
            .into_iter()
            .chain(last_utc.split(' '))
            .collect();
        assert_eq!(row, expected, "{human}");
        assert!(
            human.contains(&format!("Consume Diff Total: {total}")),
            "{human}"
        );
        assert!(human.contains("Consume Inflight Total: 4"), "{human}");
        assert!(
            human
                .lines()
                .any(|l| l.starts_with("LagTopic") && l.ends_with("N/A")),
            "{human}"
        );

        // Without -g: one line per group, with its members and total lag.
        let line = all["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["group"] == "LagGroup")
            .unwrap_or_else(|| panic!("{all}"));
        assert_eq!(line["count"], 1, "{all}");
        assert_eq!(line["versionDesc"], "V5_3_3", "{all}");
        assert_eq!(line["consumeType"], "CONSUME_PASSIVELY", "{all}");
        assert_eq!(line["messageModel"], "CLUSTERING", "{all}");
        assert_eq!(line["diffTotal"], total, "{all}");
        assert!(line["consumeTps"].as_f64().unwrap() > 0.0, "{all}");
        assert!(
            all["groups"]
                .as_array()
                .unwrap()
                .iter()
                .all(|g| g["group"] != "TOOLS_CONSUMER"),
            "{all}"
        );
        let of_topic: Vec<&str> = of_topic["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["group"].as_str().unwrap())
            .collect();
        assert_eq!(of_topic, ["LagGroup"], "groups of LagTopic");
        assert!(all_human.starts_with("#Group  "), "{all_human}");
        let row: Vec<&str> = all_human
            .lines()
            .find(|l| l.starts_with("LagGroup"))
            .unwrap()
            .split_whitespace()
            .collect();
        assert_eq!(
            row[..5],
            ["LagGroup", "1", "V5_3_3", "PUSH", "CLUSTERING"],
            "{all_human}"
        );
        assert_eq!(row[6], total.to_string(), "{all_human}");
    });

    // A reset makes pulled positions of the old generation meaningless: nothing is in flight
    // until the group pulls again.
    ok(&[
        "resetOffsetByTime",
        "-n",
        &n,
        "-g",
        "LagGroup",
        "-t",
        "LagTopic",
        "-s",
        "-1h",
    ]);
    let after = ok_json(&["consumerProgress", "-n", &n, "-g", "LagGroup"]);
    assert_eq!(queue(&after, 0)["consumerOffset"], 0, "{after}");
    assert_eq!(after["totalInflight"], 0, "{after}");
    assert_eq!(after["totalLag"], 12, "{after}");
    ok(&[
        "resetOffsetByTime",
        "-n",
        &n,
        "-g",
        "LagGroup",
        "-t",
        "LagTopic",
        "-q",
        "0",
        "-o",
        "4",
        "-s",
        "now",
    ]);
    ok(&[
        "resetOffsetByTime",
        "-n",
        &n,
        "-g",
        "LagGroup",
        "-t",
        "LagTopic",
        "-q",
        "1",
        "-o",
        "2",
        "-s",
        "now",
    ]);

    // Times follow TZ: the same LastTime eight hours later in UTC-8's reading of the clock.
    let utc_human = ok(&[
        "consumerProgress",
        "-n",
        &n,
        "-g",
        "LagGroup",
        "-t",
        "LagTopic",
    ]);
    let shifted = admin_in_zone(
        &[
            "consumerProgress",
            "-n",
            &n,
            "-g",
            "LagGroup",
            "-t",
            "LagTopic",
        ],
        "XXX-8",
    );
    assert!(shifted.status.success(), "{shifted:?}");
    let shifted = String::from_utf8(shifted.stdout).unwrap();
    let time_of = |text: &str| -> String {
        let row: Vec<&str> = text
            .lines()
            .find(|l| l.starts_with("LagTopic") && l.split_whitespace().nth(2) == Some("0"))
            .unwrap()
            .split_whitespace()
            .collect();
        row[7..].join(" ")
    };
    let parse = |t: &str| chrono::NaiveDateTime::parse_from_str(t, "%Y-%m-%d %H:%M:%S").unwrap();
    assert_eq!(
        parse(&time_of(&shifted)) - parse(&time_of(&utc_human)),
        chrono::TimeDelta::hours(8),
        "{utc_human}\n{shifted}"
    );
}
