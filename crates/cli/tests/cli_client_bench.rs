//! `ferromq bench produce|consume|e2e` against a `ferromq standalone` process on 127.0.0.1:
//! each prints one JSON object on its last stdout line, and consume reads back every message
//! produce acknowledged.

mod common;

fn check_figures(report: &serde_json::Value) {
    for key in [
        "msgs_per_sec",
        "mb_per_sec",
        "p50_us",
        "p99_us",
        "p999_us",
        "errors",
    ] {
        assert!(report[key].is_number(), "{key} missing: {report}");
    }
    assert_eq!(report["errors"], 0, "{report}");
    assert!(report["msgs_per_sec"].as_f64().unwrap() > 0.0, "{report}");
    assert!(report["p50_us"].as_f64().unwrap() > 0.0, "{report}");
}

#[test]
fn produce_then_consume_every_message_then_e2e() {
    let server = common::start_with(&["--flush", "async"]);
    let namesrv = server.namesrv.clone();

    let produced = common::bench(
        &[],
        &[
            "produce",
            "--namesrv",
            &namesrv,
            "--topic",
            "CliBench",
            "--size",
            "128",
            "--in-flight",
            "4",
            "--queues",
            "4",
            "--seconds",
            "1",
            "--json",
        ],
    );
    check_figures(&produced);
    assert_eq!(produced["bench"], "produce");
    let n = produced["messages"].as_u64().unwrap();
    assert!(n > 0, "{produced}");

    let consumed = common::bench(
        &[],
        &[
            "consume",
            "--namesrv",
            &namesrv,
            "--topic",
            "CliBench",
            "--consumers",
            "2",
            "--count",
            &n.to_string(),
            "--seconds",
            "60",
            "--json",
        ],
    );
    check_figures(&consumed);
    assert_eq!(consumed["bench"], "consume");
    assert!(consumed["messages"].as_u64().unwrap() >= n, "{consumed}");
    assert_eq!(consumed["measured"], "drain of --count messages");

    // Without --count the rate covers the busy interval, not the idle rest of the window:
    // the backlog drains well within 5 s.
    let busy = common::bench(
        &[],
        &[
            "consume",
            "--namesrv",
            &namesrv,
            "--topic",
            "CliBench",
            "--seconds",
            "5",
            "--json",
        ],
    );
    check_figures(&busy);
    assert_eq!(busy["measured"], "busy interval (start to last message)");
    assert!(busy["messages"].as_u64().unwrap() >= n, "{busy}");
    let seconds = busy["seconds"].as_f64().unwrap();
    assert!(
        seconds > 0.0 && seconds < 4.5,
        "busy {seconds} s of a 5 s window: {busy}"
    );

    let e2e = common::bench(
        &[],
        &[
            "e2e",
            "--namesrv",
            &namesrv,
            "--topic",
            "CliBenchE2e",
            "--size",
            "64",
            "--batch",
            "4",
            "--queues",
            "2",
            "--seconds",
            "1",
            "--rate",
            "500",
            "--json",
        ],
    );
    check_figures(&e2e);
    // Paced at 500 msgs/s for 1 s (unpaced, one sender of batches of 4 sends thousands).
    assert_eq!(e2e["offered_rate"], 500, "{e2e}");
    let paced = e2e["messages"].as_u64().unwrap();
    assert!(
        (100..=600).contains(&paced),
        "{paced} messages at 500/s: {e2e}"
    );
    assert_eq!(e2e["received"], e2e["messages"], "{e2e}");
    // The delivery share (acknowledged → received) is measured and below the whole.
    let delivery = e2e["delivery_p50_us"].as_f64().expect("delivery p50");
    assert!(delivery > 0.0, "{e2e}");
    assert!(
        delivery <= e2e["max_us"].as_f64().unwrap() + 1.0,
        "delivery is part of the end-to-end time: {e2e}"
    );
    assert!(e2e["received_before_ack"].as_u64().is_some(), "{e2e}");
}

#[test]
fn grpc_bench_compares_with_remoting_and_drains_everything_it_sent() {
    // A port the OS just handed out, for the standalone's gRPC endpoint.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let server = common::start_with(&["--flush", "async", "--grpc-port", &port]);
    let report = common::bench(
        &[],
        &[
            "grpc",
            "--namesrv",
            &server.namesrv,
            "--grpc",
            &format!("127.0.0.1:{port}"),
            "--topic",
            "CliBenchGrpc",
            "--in-flight",
            "4",
            "--consumers",
            "2",
            "--queues",
            "4",
            "--seconds",
            "1",
            "--json",
        ],
    );
    for phase in ["remoting_send", "grpc_send", "grpc_receive_ack"] {
        assert_eq!(report[phase]["errors"], 0, "{phase}: {report}");
        assert!(
            report[phase]["msgs_per_sec"].as_f64().unwrap() > 0.0,
            "{phase}: {report}"
        );
        assert!(
            report[phase]["p99_us"].as_f64().unwrap() > 0.0,
            "{phase}: {report}"
        );
    }
    assert_eq!(
        report["received"], report["sent"],
        "the drain got everything: {report}"
    );
    assert!(
        report["ratio_throughput"].as_f64().unwrap() > 0.0,
        "{report}"
    );
}

/// `bench produce --rtt-baseline` (with `--fsync-baseline` too): after the sends it times bare
/// loopback round trips of a send's size and reports the send p50 against their p50, next to
/// the fdatasync figures; the other benches refuse the flag.
#[test]
fn produce_reports_its_p50_against_a_loopback_round_trip_of_the_same_run() {
    let server = common::start();
    let probe_dir = tempfile::tempdir().unwrap();
    let dir = probe_dir.path().to_str().unwrap();
    let produced = common::bench(
        &[],
        &[
            "produce",
            "--namesrv",
            &server.namesrv,
            "--topic",
            "RttBase",
            "--queues",
            "2",
            "--seconds",
            "1",
            "--size",
            "200",
            "--rtt-baseline",
            "--fsync-baseline",
            dir,
            "--json",
        ],
    );
    check_figures(&produced);
    assert_eq!(
        produced["baseline"], "fdatasync, loopback round trip",
        "{produced}"
    );
    assert_eq!(produced["rtt_request_bytes"], 200 + 384, "{produced}");
    assert_eq!(produced["rtt_reply_bytes"], 256, "{produced}");
    let cycles = produced["rtt_cycles"].as_u64().unwrap();
    assert!((1..=20_000).contains(&cycles), "{produced}");
    common::assert_p50_ratio(
        &produced,
        "p50_to_rtt_p50",
        "p50_us",
        "rtt_p50_us",
        "rtt_p99_us",
    );
    common::assert_p50_ratio(
        &produced,
        "p50_to_fsync_p50",
        "p50_us",
        "fsync_p50_us",
        "fsync_p99_us",
    );

    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_ferromq"))
        .args(["bench", "e2e", "--namesrv", &server.namesrv])
        .args(["--topic", "RttBase", "--rtt-baseline"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("applies to bench produce only"), "{stderr}");
}

/// `bench produce --current-thread --reply-spin-us 200`: one client thread whose sends spin
/// for their replies; every send is acknowledged and the report names the mode (its JSON
/// too). A spin past the client's cap is refused as a flag.
#[test]
fn produce_on_one_thread_with_a_reply_spin_sends_everything_and_says_so() {
    let server = common::start();
    let produced = common::bench(
        &[],
        &[
            "produce",
            "--namesrv",
            &server.namesrv,
            "--topic",
            "SpinSend",
            "--queues",
            "2",
            "--seconds",
            "20",
            "--count",
            "500",
            "--current-thread",
            "--reply-spin-us",
            "200",
            "--json",
        ],
    );
    check_figures(&produced);
    assert_eq!(produced["messages"], 500, "{produced}");
    assert_eq!(produced["errors"], 0, "{produced}");
    assert_eq!(produced["reply_spin_us"], 200, "{produced}");
    assert_eq!(produced["current_thread"], true, "{produced}");

    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_ferromq"))
        .args(["bench", "produce", "--namesrv", &server.namesrv])
        .args(["--topic", "SpinSend", "--reply-spin-us", "5000"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("reply-spin-us"), "{stderr}");
}

/// `bench produce --fsync-baseline DIR` against a SYNC_FLUSH broker: after the sends it times
/// bare 4 KiB write + fdatasync cycles in DIR and reports the send p50 against their p50
/// (the ratio is computed from the two figures it prints), leaving nothing in DIR; the other
/// benches refuse the flag.
#[test]
fn produce_reports_its_p50_against_a_bare_fdatasync_p50_of_the_same_run() {
    let server = common::start_with(&["--flush", "sync"]);
    let probe_dir = tempfile::tempdir().unwrap();
    let dir = probe_dir.path().to_str().unwrap();
    let produced = common::bench(
        &[],
        &[
            "produce",
            "--namesrv",
            &server.namesrv,
            "--topic",
            "FsyncBase",
            "--queues",
            "2",
            "--seconds",
            "1",
            "--fsync-baseline",
            dir,
            "--json",
        ],
    );
    check_figures(&produced);
    assert_eq!(produced["baseline"], "fdatasync", "{produced}");
    assert_eq!(produced["fsync_write_bytes"], 4096, "{produced}");
    let cycles = produced["fsync_cycles"].as_u64().unwrap();
    assert!((1..=2_000).contains(&cycles), "{produced}");
    common::assert_p50_ratio(
        &produced,
        "p50_to_fsync_p50",
        "p50_us",
        "fsync_p50_us",
        "fsync_p99_us",
    );
    let left: Vec<_> = std::fs::read_dir(probe_dir.path()).unwrap().collect();
    assert!(left.is_empty(), "the probe left {left:?}");

    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_ferromq"))
        .args(["bench", "consume", "--namesrv", &server.namesrv])
        .args(["--topic", "FsyncBase", "--fsync-baseline", dir])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("applies to bench produce only"), "{stderr}");
}
