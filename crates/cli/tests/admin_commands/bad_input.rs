//! Bad input for every command: one `error:` line and a non-zero exit, never a panic.

use crate::common::{create_topic, fails, start};
use crate::support::{commit, connect, runtime, send};

/// The name server of the bad-input table: nothing listens on port 1.
const UNREACHABLE: &str = "127.0.0.1:1";

/// Bad input for every command, old and new: a missing flag (clap's usage error, status 2),
/// an unknown topic or group, an unreachable name server or broker, a bad value (status 1).
/// Each failure is exactly one stderr line and never a panic or a backtrace.
#[test]
fn bad_input_is_one_line_and_a_non_zero_exit() {
    let server = start();
    let n = server.namesrv.as_str();
    let b = server.broker.as_str();
    create_topic(n, b, "BadTopic", "1");
    // A group that exists (it committed) but has no member online.
    runtime().block_on(async {
        let client = connect(b).await;
        send(&client, "BadTopic", 0, "m").await;
        commit(&client, "KnownGroup", "BadTopic", 0, 1).await;
    });

    // Missing flags: clap's usage error, status 2.
    let missing: Vec<Vec<&str>> = vec![
        vec!["updateTopic", "-n", n, "-t", "X"],
        vec!["updateTopic", "-n", n, "-c", "DefaultCluster"],
        vec!["deleteTopic", "-n", n, "-t", "X"],
        vec!["topicRoute", "-n", n],
        vec!["topicStatus", "-n", n],
        vec!["updateSubGroup", "-n", n, "-g", "G"],
        vec!["deleteSubGroup", "-n", n, "-b", b],
        vec!["resetOffsetByTime", "-n", n, "-g", "G"],
        vec![
            "resetOffsetByTime",
            "-n",
            n,
            "-g",
            "G",
            "-t",
            "BadTopic",
            "-o",
            "3",
        ],
        vec!["skipAccumulatedMessage", "-n", n, "-g", "G"],
        vec!["offsetHistory", "-n", n, "-t", "BadTopic"],
        vec!["queryMsgById", "-n", n],
        vec!["queryMsgByKey", "-n", n, "-t", "BadTopic"],
        vec!["queryMsgByUniqueKey", "-n", n, "-t", "BadTopic"],
        vec![
            "queryMsgByOffset",
            "-n",
            n,
            "-t",
            "BadTopic",
            "-b",
            "broker-a",
            "-i",
            "0",
        ],
        vec!["printMsg", "-n", n],
        vec!["consumerConnection", "-n", n],
        vec!["cloneGroupOffset", "-n", n, "-s", "A", "-t", "BadTopic"],
        vec!["consumerProgress", "-n", n, "-g"],
        vec!["updateBrokerConfig", "-n", n, "-v", "x"],
        vec!["brokerStatus", "-n", n, "-b", b, "-c", "DefaultCluster"],
        vec![
            "queryMsgByOffset",
            "-n",
            n,
            "-t",
            "BadTopic",
            "-b",
            "broker-a",
            "-i",
            "x",
            "-o",
            "0",
        ],
    ];
    for args in &missing {
        let line = fails(args, 2);
        assert!(
            line.contains("required")
                || line.contains("--queue")
                || line.contains("value")
                || line.contains("cannot be used with"),
            "{args:?}: {line}"
        );
    }
    // Unknown topic.
    let unknown_topic: Vec<Vec<&str>> = vec![
        vec!["topicStatus", "-n", n, "-t", "NoSuchTopic"],
        vec!["topicRoute", "-n", n, "-t", "NoSuchTopic"],
        vec![
            "resetOffsetByTime",
            "-n",
            n,
            "-g",
            "G",
            "-t",
            "NoSuchTopic",
            "-s",
            "now",
        ],
        vec![
            "skipAccumulatedMessage",
            "-n",
            n,
            "-g",
            "G",
            "-t",
            "NoSuchTopic",
        ],
        vec!["offsetHistory", "-n", n, "-g", "G", "-t", "NoSuchTopic"],
        vec![
            "consumerProgress",
            "-n",
            n,
            "-g",
            "KnownGroup",
            "-t",
            "NoSuchTopic",
        ],
        vec!["queryMsgByKey", "-n", n, "-t", "NoSuchTopic", "-k", "k"],
        vec![
            "queryMsgByUniqueKey",
            "-n",
            n,
            "-t",
            "NoSuchTopic",
            "-i",
            "u",
        ],
        vec![
            "queryMsgByOffset",
            "-n",
            n,
            "-t",
            "NoSuchTopic",
            "-b",
            "broker-a",
            "-i",
            "0",
            "-o",
            "0",
        ],
        vec!["printMsg", "-n", n, "-t", "NoSuchTopic"],
        vec![
            "cloneGroupOffset",
            "-n",
            n,
            "-s",
            "KnownGroup",
            "-d",
            "D",
            "-t",
            "NoSuchTopic",
        ],
    ];
    for args in &unknown_topic {
        let line = fails(args, 1);
        assert!(
            line.starts_with("error: ") && line.contains("NoSuchTopic does not exist"),
            "{args:?}: {line}"
        );
    }
    // Unknown group (and a known one that is not online, for consumerConnection).
    let unknown_group: Vec<Vec<&str>> = vec![
        vec!["consumerProgress", "-n", n, "-g", "NoSuchGroup"],
        vec![
            "resetOffsetByTime",
            "-n",
            n,
            "-g",
            "NoSuchGroup",
            "-t",
            "BadTopic",
            "-s",
            "now",
        ],
        vec![
            "skipAccumulatedMessage",
            "-n",
            n,
            "-g",
            "NoSuchGroup",
            "-t",
            "BadTopic",
        ],
        vec![
            "offsetHistory",
            "-n",
            n,
            "-g",
            "NoSuchGroup",
            "-t",
            "BadTopic",
        ],
        vec!["deleteSubGroup", "-n", n, "-b", b, "-g", "NoSuchGroup"],
        vec![
            "cloneGroupOffset",
            "-n",
            n,
            "-s",
            "NoSuchGroup",
            "-d",
            "D",
            "-t",
            "BadTopic",
        ],
    ];
    for args in &unknown_group {
        let line = fails(args, 1);
        assert!(
            line.starts_with("error: ") && line.contains("NoSuchGroup does not exist"),
            "{args:?}: {line}"
        );
    }
    for group in ["NoSuchGroup", "KnownGroup"] {
        let line = fails(&["consumerConnection", "-n", n, "-g", group], 1);
        assert!(
            line.starts_with("error: ") && line.contains(&format!("{group} is not online")),
            "{line}"
        );
    }
    // Bad values: time formats, ids, offsets, charsets.
    for time in ["yesterday", "2026-01-01 00:00:00", "-5y"] {
        for args in [
            vec![
                "resetOffsetByTime",
                "-n",
                n,
                "-g",
                "G",
                "-t",
                "BadTopic",
                "-s",
                time,
            ],
            vec!["printMsg", "-n", n, "-t", "BadTopic", "-b", time],
            vec![
                "queryMsgByKey",
                "-n",
                n,
                "-t",
                "BadTopic",
                "-k",
                "k",
                "-e",
                time,
            ],
            vec![
                "offsetHistory",
                "-n",
                n,
                "-g",
                "G",
                "-t",
                "BadTopic",
                "--since",
                time,
            ],
        ] {
            let line = fails(&args, 1);
            assert!(
                line.starts_with("error: bad time format"),
                "{args:?}: {line}"
            );
        }
    }
    let bad_values: Vec<(Vec<&str>, &str)> = vec![
        (vec!["queryMsgById", "-n", n, "-i", "XYZ"], "bad message id"),
        (
            vec![
                "queryMsgByOffset",
                "-n",
                n,
                "-t",
                "BadTopic",
                "-b",
                "broker-a",
                "-i",
                "0",
                "-o",
                "-1",
            ],
            "must not be negative",
        ),
        (
            vec![
                "queryMsgByOffset",
                "-n",
                n,
                "-t",
                "BadTopic",
                "-b",
                "broker-a",
                "-i",
                "5",
                "-o",
                "0",
            ],
            "queue",
        ),
        (
            vec![
                "queryMsgByKey",
                "-n",
                n,
                "-t",
                "BadTopic",
                "-k",
                "k",
                "-m",
                "0",
            ],
            "maxNum",
        ),
        (
            vec![
                "printMsg", "-n", n, "-t", "BadTopic", "-b", "now", "-e", "-1h",
            ],
            "begin time is after the end time",
        ),
        (
            vec![
                "cloneGroupOffset",
                "-n",
                n,
                "-s",
                "A",
                "-d",
                "A",
                "-t",
                "BadTopic",
            ],
            "are the same",
        ),
        (vec!["topicList"], "no name server"),
    ];
    for (args, what) in &bad_values {
        let line = fails(args, 1);
        assert!(
            line.starts_with("error: ") && line.contains(what),
            "{args:?}: {line}"
        );
    }

    // An unreachable name server: every command that asks it says so.
    let unreachable: Vec<Vec<&str>> = vec![
        vec!["updateTopic", "-c", "DefaultCluster", "-t", "T"],
        vec!["deleteTopic", "-c", "DefaultCluster", "-t", "T"],
        vec!["topicList"],
        vec!["topicRoute", "-t", "T"],
        vec!["topicStatus", "-t", "T"],
        vec!["updateSubGroup", "-c", "DefaultCluster", "-g", "G"],
        vec!["deleteSubGroup", "-c", "DefaultCluster", "-g", "G"],
        vec!["consumerProgress", "-g", "G"],
        vec!["consumerProgress"],
        vec!["resetOffsetByTime", "-g", "G", "-t", "T", "-s", "now"],
        vec!["skipAccumulatedMessage", "-g", "G", "-t", "T"],
        vec!["offsetHistory", "-g", "G", "-t", "T"],
        vec!["clusterList"],
        vec!["queryMsgByKey", "-t", "T", "-k", "k"],
        vec!["queryMsgByUniqueKey", "-t", "T", "-i", "u"],
        vec![
            "queryMsgByOffset",
            "-t",
            "T",
            "-b",
            "broker-a",
            "-i",
            "0",
            "-o",
            "0",
        ],
        vec!["printMsg", "-t", "T"],
        vec!["consumerConnection", "-g", "G"],
        vec!["cloneGroupOffset", "-s", "A", "-d", "B", "-t", "T"],
        vec!["brokerStatus"],
        vec!["brokerStatus", "-c", "DefaultCluster"],
        vec!["getBrokerConfig"],
        vec![
            "updateBrokerConfig",
            "-k",
            "flushDiskType",
            "-v",
            "SYNC_FLUSH",
        ],
    ];
    for args in &unreachable {
        let mut all = args.clone();
        all.extend(["-n", UNREACHABLE]);
        let line = fails(&all, 1);
        assert!(
            line.starts_with(&format!("error: name server {UNREACHABLE}"))
                && line.contains("cannot connect"),
            "{all:?}: {line}"
        );
    }
    // An unreachable broker: a message id naming it, or -b.
    let id = ferromq_protocol::MessageId {
        store_host: UNREACHABLE.parse().unwrap(),
        phys_offset: 0,
    }
    .encode();
    for args in [
        vec!["queryMsgById", "-i", id.as_str()],
        vec!["consumerConnection", "-g", "G", "-b", UNREACHABLE],
        vec!["updateSubGroup", "-g", "G", "-b", UNREACHABLE],
    ] {
        let line = fails(&args, 1);
        assert!(
            line.starts_with("error: ") && line.contains("cannot connect"),
            "{args:?}: {line}"
        );
    }
}
