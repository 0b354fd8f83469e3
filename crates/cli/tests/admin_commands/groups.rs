//! Consumer connections of a group and cloning a group's offsets.

use ferromq_protocol::remoting::extensions::COMMIT_STALE_GENERATION;
use serde_json::Value;

use crate::common::{create_topic, fails, ok, ok_json, start};
use crate::support::{commit, commit_code, connect, heartbeat, queue, runtime, send};

#[test]
fn consumer_connection_and_clone_group_offset() {
    let server = start();
    let n = server.namesrv.clone();
    let b = server.broker.clone();
    create_topic(&n, &b, "CloneTopic", "2");
    let rt = runtime();
    rt.block_on(async {
        let client = connect(&b).await;
        for i in 0..8 {
            send(&client, "CloneTopic", i % 2, "m").await;
        }
        // The source group: offline, with progress.
        commit(&client, "CloneSrc", "CloneTopic", 0, 3).await;
        commit(&client, "CloneSrc", "CloneTopic", 1, 4).await;
        // The destination group: online on its own connection, with older progress.
        let dest = connect(&b).await;
        heartbeat(&dest, "127.0.0.1@clone-dest", "CloneDest", "CloneTopic").await;
        commit(&dest, "CloneDest", "CloneTopic", 0, 1).await;

        // consumerConnection: the destination's member, JSON and human.
        let n2 = n.clone();
        let (json, human) = tokio::task::spawn_blocking(move || {
            (
                ok_json(&["consumerConnection", "-n", &n2, "-g", "CloneDest"]),
                ok(&["consumerConnection", "-n", &n2, "-g", "CloneDest"]),
            )
        })
        .await
        .unwrap();
        let connection = &json["connectionSet"][0];
        assert_eq!(connection["clientId"], "127.0.0.1@clone-dest", "{json}");
        assert_eq!(connection["language"], "RUST", "{json}");
        assert_eq!(connection["version"], 479, "{json}");
        assert_eq!(connection["versionDesc"], "V5_3_3", "{json}");
        assert!(
            connection["clientAddr"]
                .as_str()
                .unwrap()
                .starts_with("127.0.0.1:"),
            "{json}"
        );
        assert_eq!(
            json["subscriptionTable"][0]["topic"], "CloneTopic",
            "{json}"
        );
        assert_eq!(json["subscriptionTable"][0]["subString"], "*", "{json}");
        assert_eq!(json["consumeType"], "CONSUME_PASSIVELY", "{json}");
        assert_eq!(json["messageModel"], "CLUSTERING", "{json}");
        assert_eq!(
            json["consumeFromWhere"], "CONSUME_FROM_LAST_OFFSET",
            "{json}"
        );
        assert!(human.starts_with("#ClientId"), "{human}");
        assert!(
            human.lines().any(|l| l.starts_with("127.0.0.1@clone-dest")
                && l.contains("RUST")
                && l.ends_with("V5_3_3")),
            "{human}"
        );
        assert!(human.contains("Below is subscription:"), "{human}");
        assert!(
            human
                .lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["CloneTopic", "*"]),
            "{human}"
        );
        assert!(human.contains("ConsumeType: CONSUME_PASSIVELY"), "{human}");
        assert!(human.contains("MessageModel: CLUSTERING"), "{human}");

        // cloneGroupOffset: per queue old -> new, as a reset of the destination.
        let n2 = n.clone();
        let (json, human) = tokio::task::spawn_blocking(move || {
            let json = ok_json(&[
                "cloneGroupOffset",
                "-n",
                &n2,
                "-s",
                "CloneSrc",
                "-d",
                "CloneDest",
                "-t",
                "CloneTopic",
            ]);
            let human = ok(&[
                "cloneGroupOffset",
                "-n",
                &n2,
                "-s",
                "CloneSrc",
                "-d",
                "CloneDest2",
                "-t",
                "CloneTopic",
                "-o",
                "true",
            ]);
            (json, human)
        })
        .await
        .unwrap();
        assert_eq!(queue(&json, 0)["oldOffset"], 1, "{json}");
        assert_eq!(queue(&json, 0)["newOffset"], 3, "{json}");
        assert_eq!(queue(&json, 1)["oldOffset"], Value::Null, "{json}");
        assert_eq!(queue(&json, 1)["newOffset"], 4, "{json}");
        let generation = json["generation"].as_u64().unwrap();
        assert!(generation > 0, "{json}");
        assert!(human.starts_with("#brokerName  #topic"), "{human}");
        assert!(
            human
                .lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>()
                    == ["broker-a", "CloneTopic", "1", "-", "4"]),
            "{human}"
        );
        assert!(
            human
                .contains("clone consumer offset from group CloneSrc to group CloneDest2 success."),
            "{human}"
        );

        // The running destination member is fenced like after any reset: its stale commit
        // is rejected and the clone stands.
        assert_eq!(
            commit_code(&dest, "CloneDest", "CloneTopic", 0, 2).await,
            COMMIT_STALE_GENERATION
        );
        let n2 = n.clone();
        let (progress, history) = tokio::task::spawn_blocking(move || {
            (
                ok_json(&[
                    "consumerProgress",
                    "-n",
                    &n2,
                    "-g",
                    "CloneDest",
                    "-t",
                    "CloneTopic",
                ]),
                ok_json(&[
                    "offsetHistory",
                    "-n",
                    &n2,
                    "-g",
                    "CloneDest",
                    "-t",
                    "CloneTopic",
                    "-q",
                    "0",
                ]),
            )
        })
        .await
        .unwrap();
        assert_eq!(queue(&progress, 0)["consumerOffset"], 3, "{progress}");
        assert_eq!(queue(&progress, 1)["consumerOffset"], 4, "{progress}");
        // A destination that never consumed becomes a known group with the copied offsets.
        let n2 = n.clone();
        let groups = tokio::task::spawn_blocking(move || {
            ok_json(&["consumerProgress", "-n", &n2, "-t", "CloneTopic"])
        })
        .await
        .unwrap();
        let fresh = groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["group"] == "CloneDest2")
            .unwrap_or_else(|| panic!("{groups}"));
        assert_eq!(fresh["diffTotal"], 8 - 3 - 4, "{groups}");
        assert_eq!(fresh["count"], 0, "{groups}");
        assert_eq!(fresh["versionDesc"], "OFFLINE", "{groups}");
        let events = history["events"].as_array().unwrap();
        let kinds: Vec<(&str, u64, &str)> = events
            .iter()
            .map(|e| {
                (
                    e["kind"].as_str().unwrap(),
                    e["offset"].as_u64().unwrap(),
                    e["clientId"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            kinds[kinds.len() - 1],
            ("reset", 3, "admin-clone"),
            "{history}"
        );
        assert_eq!(kinds[0].0, "commit", "{history}");
        assert_eq!(
            events.last().unwrap()["generation"],
            generation,
            "{history}"
        );
    });

    // Unknown groups, nothing to clone, and the source equal to the destination.
    let line = fails(&["consumerConnection", "-n", &n, "-g", "NoSuchGroup"], 1);
    assert!(
        line.contains("consumer group NoSuchGroup is not online"),
        "{line}"
    );
    let line = fails(&["consumerConnection", "-n", &n, "-g", "CloneSrc"], 1);
    assert!(line.contains("CloneSrc is not online"), "{line}");
    let line = fails(
        &[
            "cloneGroupOffset",
            "-n",
            &n,
            "-s",
            "NoSuchGroup",
            "-d",
            "X",
            "-t",
            "CloneTopic",
        ],
        1,
    );
    assert!(
        line.contains("consumer group NoSuchGroup does not exist"),
        "{line}"
    );
    ok(&["updateSubGroup", "-n", &n, "-b", &b, "-g", "EmptyGroup"]);
    let line = fails(
        &[
            "cloneGroupOffset",
            "-n",
            &n,
            "-s",
            "EmptyGroup",
            "-d",
            "X",
            "-t",
            "CloneTopic",
        ],
        1,
    );
    assert!(
        line.contains("EmptyGroup has no committed offset on topic CloneTopic"),
        "{line}"
    );
    let line = fails(
        &[
            "cloneGroupOffset",
            "-n",
            &n,
            "-s",
            "CloneSrc",
            "-d",
            "CloneSrc",
            "-t",
            "CloneTopic",
        ],
        1,
    );
    assert!(line.contains("are the same"), "{line}");
    // An online source that subscribes to other topics only: skipped unless -o true.
    let rt = runtime();
    let other = rt.block_on(async {
        let other = connect(&b).await;
        heartbeat(&other, "127.0.0.1@other-src", "OtherSrc", "OtherTopic").await;
        commit(&other, "OtherSrc", "CloneTopic", 1, 2).await;
        other
    });
    let line = fails(
        &[
            "cloneGroupOffset",
            "-n",
            &n,
            "-s",
            "OtherSrc",
            "-d",
            "OtherDest",
            "-t",
            "CloneTopic",
        ],
        1,
    );
    assert!(
        line.contains("OtherSrc is online but does not subscribe to topic CloneTopic")
            && line.contains("-o true"),
        "{line}"
    );
    let json = ok_json(&[
        "cloneGroupOffset",
        "-n",
        &n,
        "-s",
        "OtherSrc",
        "-d",
        "OtherDest",
        "-t",
        "CloneTopic",
        "-o",
        "true",
    ]);
    assert_eq!(queue(&json, 1)["newOffset"], 2, "{json}");
    drop(other);
}
