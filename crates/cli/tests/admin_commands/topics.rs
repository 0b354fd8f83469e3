//! Topic, group and cluster commands: their human and JSON output.

use serde_json::Value;

use crate::common::{fails, ok, ok_json, start, wait_route};
use crate::support::{connect, queue, runtime, send};

#[test]
fn topic_group_and_cluster_commands() {
    let server = start();
    let n = server.namesrv.as_str();
    let b = server.broker.as_str();

    let human = ok(&[
        "updateTopic",
        "-n",
        n,
        "-c",
        "DefaultCluster",
        "-t",
        "AdminTopic",
        "-r",
        "2",
        "-w",
        "2",
    ]);
    assert!(
        human.contains(&format!("create topic to {b} success.")),
        "{human}"
    );
    let json = ok_json(&[
        "updateTopic",
        "-n",
        n,
        "-b",
        b,
        "-t",
        "AdminTopic2",
        "-r",
        "3",
        "-w",
        "3",
        "-p",
        "6",
    ]);
    assert_eq!(json["topic"]["readQueueNums"], 3, "{json}");
    assert_eq!(json["brokers"][0]["addr"], b, "{json}");
    assert_eq!(json["brokers"][0]["brokerName"], "broker-a", "{json}");
    wait_route(n, "AdminTopic");
    wait_route(n, "AdminTopic2");

    let route = ok_json(&["topicRoute", "-n", n, "-t", "AdminTopic"]);
    assert_eq!(route["brokerDatas"][0]["brokerAddrs"]["0"], b, "{route}");
    assert_eq!(route["queueDatas"][0]["readQueueNums"], 2, "{route}");
    let human = ok(&["topicRoute", "-n", n, "-t", "AdminTopic"]);
    assert!(human.contains("\"brokerName\": \"broker-a\""), "{human}");

    let list = ok_json(&["topicList", "-n", n]);
    let topics: Vec<&str> = list["topics"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        topics.contains(&"AdminTopic") && topics.contains(&"AdminTopic2"),
        "{list}"
    );
    let human = ok(&["topicList", "-n", n]);
    assert!(human.lines().any(|l| l == "AdminTopic"), "{human}");

    let clusters = ok_json(&["clusterList", "-n", n]);
    assert_eq!(
        clusters["brokers"][0]["cluster"], "DefaultCluster",
        "{clusters}"
    );
    assert_eq!(clusters["brokers"][0]["brokerId"], 0, "{clusters}");
    assert_eq!(clusters["brokers"][0]["addr"], b, "{clusters}");
    let human = ok(&["clusterList", "-n", n]);
    assert!(human.starts_with("#Cluster Name"), "{human}");
    assert!(
        human
            .lines()
            .any(|l| l.contains("DefaultCluster") && l.contains(b)),
        "{human}"
    );

    let rt = runtime();
    let msg_id = rt.block_on(async {
        let client = connect(b).await;
        let id = send(&client, "AdminTopic", 1, "hello admin").await;
        send(&client, "AdminTopic", 1, "second").await;
        id
    });
    let status = ok_json(&["topicStatus", "-n", n, "-t", "AdminTopic"]);
    assert_eq!(queue(&status, 0)["maxOffset"], 0, "{status}");
    assert_eq!(queue(&status, 1)["maxOffset"], 2, "{status}");
    assert_eq!(queue(&status, 1)["minOffset"], 0, "{status}");
    assert!(
        queue(&status, 1)["lastUpdateTimestamp"].as_i64().unwrap() > 0,
        "{status}"
    );
    let human = ok(&["topicStatus", "-n", n, "-t", "AdminTopic"]);
    assert!(
        human.starts_with("#Broker Name  #QID  #Min Offset  #Max Offset  #Last Updated"),
        "{human}"
    );
    assert!(
        human
            .lines()
            .any(|l| l.starts_with("broker-a") && l.split_whitespace().nth(3) == Some("2")),
        "{human}"
    );

    let message = ok_json(&["queryMsgById", "-n", n, "-i", &msg_id]);
    assert_eq!(message["topic"], "AdminTopic", "{message}");
    assert_eq!(message["body"], "hello admin", "{message}");
    assert_eq!(message["tags"], "tagA", "{message}");
    assert_eq!(message["queueId"], 1, "{message}");
    assert_eq!(message["queueOffset"], 0, "{message}");
    assert_eq!(message["msgId"], msg_id.as_str(), "{message}");
    assert_eq!(message["offsetMsgId"], msg_id.as_str(), "{message}");
    assert_eq!(message["brokerName"], "broker-a", "{message}");
    let human = ok(&["queryMsgById", "-n", n, "-i", &msg_id]);
    assert!(
        human
            .lines()
            .any(|l| l.starts_with("Message Body:") && l.ends_with("hello admin")),
        "{human}"
    );

    let human = ok(&["updateSubGroup", "-n", n, "-b", b, "-g", "AdminGroup"]);
    assert!(human.contains("create subscription group to"), "{human}");
    let json = ok_json(&[
        "updateSubGroup",
        "-n",
        n,
        "-c",
        "DefaultCluster",
        "-g",
        "AdminGroup2",
        "-r",
        "3",
    ]);
    assert_eq!(json["group"]["retryMaxTimes"], 3, "{json}");
    let progress = ok_json(&[
        "consumerProgress",
        "-n",
        n,
        "-g",
        "AdminGroup",
        "-t",
        "AdminTopic",
    ]);
    assert_eq!(progress["totalLag"], 2, "{progress}");
    let json = ok_json(&["deleteSubGroup", "-n", n, "-b", b, "-g", "AdminGroup2"]);
    assert_eq!(json["deletedFrom"][0]["addr"], b, "{json}");
    let human = ok(&[
        "deleteSubGroup",
        "-n",
        n,
        "-c",
        "DefaultCluster",
        "-g",
        "AdminGroup",
    ]);
    assert!(
        human.contains("delete subscription group [AdminGroup]"),
        "{human}"
    );
    let line = fails(&["deleteSubGroup", "-n", n, "-b", b, "-g", "AdminGroup"], 1);
    assert!(
        line.starts_with("error: ") && line.contains("does not exist"),
        "{line}"
    );

    let json = ok_json(&[
        "deleteTopic",
        "-n",
        n,
        "-c",
        "DefaultCluster",
        "-t",
        "AdminTopic2",
    ]);
    assert_eq!(json["deletedFrom"][0]["addr"], b, "{json}");
    let human = ok(&[
        "deleteTopic",
        "-n",
        n,
        "-c",
        "DefaultCluster",
        "-t",
        "AdminTopic",
    ]);
    assert!(
        human.contains("delete topic [AdminTopic] from broker"),
        "{human}"
    );
    let line = fails(&["topicRoute", "-n", n, "-t", "AdminTopic"], 1);
    assert!(line.contains("topic AdminTopic does not exist"), "{line}");
}
