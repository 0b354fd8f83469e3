//! `ferromq admin brokerStatus | getBrokerConfig | updateBrokerConfig` against a running
//! `ferromq standalone`: human and JSON output, a run-time key changed and visible after, a
//! key fixed at startup refused, and bad input (unreachable name server, missing flag) as one
//! `error:` line with a non-zero exit. Also `standalone --metrics-port 0` serves a scrape.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{admin, fails, ok, ok_json, start};

/// Waits (bounded) until the broker has registered with the name server.
fn wait_registered(namesrv: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = admin(&["clusterList", "-n", namesrv, "--json"]);
        let listed =
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains("DefaultCluster");
        if listed {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the broker did not register within 20 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn broker_status_and_config_read_and_change_a_running_broker() {
    let server = start();
    let (ns, broker) = (server.namesrv.as_str(), server.broker.as_str());
    wait_registered(ns);

    let human = ok(&["brokerStatus", "-n", ns, "-b", broker]);
    let line = human
        .lines()
        .find(|l| l.starts_with("commitLogMaxOffset"))
        .unwrap_or_else(|| panic!("no commitLogMaxOffset line: {human}"));
    assert!(line.contains(": "), "{line}");
    assert!(human.contains("putTps"), "{human}");
    let status = ok_json(&["brokerStatus", "-n", ns, "-c", "DefaultCluster"]);
    let brokers = status["brokers"].as_array().expect("brokers");
    assert_eq!(brokers.len(), 1, "{status}");
    assert_eq!(brokers[0]["addr"], broker);
    assert_eq!(brokers[0]["brokerName"], "broker-a");
    let table = &brokers[0]["table"];
    assert_eq!(
        table["putTps"].as_str().unwrap().split(' ').count(),
        3,
        "{table}"
    );
    let max: u64 = table["commitLogMaxOffset"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let min: u64 = table["commitLogMinOffset"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(max >= min, "{table}");
    assert!(table["flushLatencyP99Micros"].as_str().is_some(), "{table}");

    let human = ok(&["getBrokerConfig", "-n", ns, "-b", broker]);
    assert!(
        human.contains(&format!("============{broker}============")),
        "{human}"
    );
    assert!(
        human
            .lines()
            .any(|l| l.starts_with("autoCreateTopicEnable") && l.ends_with("true")),
        "{human}"
    );
    let config = ok_json(&["getBrokerConfig", "-n", ns, "-b", broker]);
    assert_eq!(
        config["brokers"][0]["config"]["autoCreateTopicEnable"], "true",
        "{config}"
    );
    assert_eq!(config["brokers"][0]["version"]["counter"], 0, "{config}");

    // A run-time key: accepted and visible after, on -b and through -c.
    let updated = ok(&[
        "updateBrokerConfig",
        "-n",
        ns,
        "-b",
        broker,
        "-k",
        "autoCreateTopicEnable",
        "-v",
        "false",
    ]);
    assert!(
        updated.contains(&format!("update broker config success, {broker}")),
        "{updated}"
    );
    let updated = ok_json(&[
        "updateBrokerConfig",
        "-n",
        ns,
        "-c",
        "DefaultCluster",
        "-k",
        "defaultTopicQueueNums",
        "-v",
        "3",
    ]);
    assert_eq!(updated["updated"][0]["addr"], broker, "{updated}");
    let config = ok_json(&["getBrokerConfig", "-n", ns, "-c", "DefaultCluster"]);
    let values = &config["brokers"][0]["config"];
    assert_eq!(values["autoCreateTopicEnable"], "false", "{config}");
    assert_eq!(values["defaultTopicQueueNums"], "3", "{config}");
    assert_eq!(config["brokers"][0]["version"]["counter"], 2, "{config}");

    // A key fixed at startup, an unknown key and a bad value: one line each, naming the key.
    let fixed = fails(
        &[
            "updateBrokerConfig",
            "-n",
            ns,
            "-b",
            broker,
            "-k",
            "listenPort",
            "-v",
            "1",
        ],
        1,
    );
    assert!(fixed.starts_with("error: "), "{fixed}");
    assert!(fixed.contains("listenPort"), "{fixed}");
    assert!(fixed.contains("NO_PERMISSION"), "{fixed}");
    let unknown = fails(
        &[
            "updateBrokerConfig",
            "-n",
            ns,
            "-b",
            broker,
            "-k",
            "noSuchKey",
            "-v",
            "1",
        ],
        1,
    );
    assert!(unknown.contains("noSuchKey"), "{unknown}");
    let bad = fails(
        &[
            "updateBrokerConfig",
            "-n",
            ns,
            "-b",
            broker,
            "-k",
            "defaultTopicQueueNums",
            "-v",
            "0",
        ],
        1,
    );
    assert!(bad.contains("defaultTopicQueueNums"), "{bad}");
    let config = ok_json(&["getBrokerConfig", "-n", ns, "-b", broker]);
    assert_eq!(
        config["brokers"][0]["config"]["defaultTopicQueueNums"], "3",
        "refusals change nothing: {config}"
    );
}

#[test]
fn standalone_serves_metrics_on_metrics_port() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferromq"))
        .args(["standalone", "--namesrv-port", "0", "--broker-port", "0"])
        .args(["--metrics-port", "0", "--data-dir"])
        .arg(dir.path().join("data"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The address line is on stderr; keep draining it so the server never blocks on a pipe.
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("ferromq standalone: metrics http://") {
                let _ = tx.send(url.trim_end_matches("/metrics").to_string());
            }
        }
    });
    let addr = rx.recv_timeout(Duration::from_secs(30));
    let scraped = addr.as_ref().ok().map(|addr| {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(addr.as_str()).expect("connect to metrics");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
            .unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).expect("read the scrape");
        reply
    });
    let _ = child.kill();
    let _ = child.wait();
    let reply = scraped.expect("standalone printed its metrics address within 30 s");
    assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
    assert!(reply.contains("\nferromq_client_connections "), "{reply}");
    assert!(
        reply.contains("ferromq_flush_latency_seconds_count"),
        "{reply}"
    );
}

#[test]
fn unreachable_servers_and_missing_flags_are_one_line_errors() {
    // Nothing listens on port 1 of the loopback.
    let dead = "127.0.0.1:1";
    for command in ["brokerStatus", "getBrokerConfig"] {
        let line = fails(&[command, "-n", dead, "-c", "DefaultCluster"], 1);
        assert!(line.starts_with("error: "), "{line}");
        assert!(line.contains(dead), "{line}");
        let line = fails(&[command, "-n", dead, "-b", dead], 1);
        assert!(line.contains(dead), "{line}");
    }
    let line = fails(
        &[
            "updateBrokerConfig",
            "-n",
            dead,
            "-c",
            "DefaultCluster",
            "-k",
            "autoCreateTopicEnable",
            "-v",
            "true",
        ],
        1,
    );
    assert!(line.contains(dead), "{line}");
    let line = fails(
        &["updateBrokerConfig", "-n", dead, "-b", dead, "-k", "x"],
        2,
    );
    assert!(line.contains("--value"), "{line}");
    let line = fails(&["brokerStatus", "-b", "a:1", "-c", "c"], 2);
    assert!(line.contains("cannot be used with"), "{line}");
}
