//! `ferromq bench alloc` and `ferromq bench rss`, run small, print real figures; and the
//! allocator chosen by `FERROMQ_ALLOCATOR` is the one reported, while an unknown value is
//! refused before anything runs.

mod common;

use std::process::Command;

fn ferromq() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ferromq"))
}

/// Runs `ferromq bench <args>` with `FERROMQ_ALLOCATOR=allocator` and returns its last stdout
/// line as JSON.
fn bench(allocator: &str, args: &[&str]) -> serde_json::Value {
    common::bench(
        &[("FERROMQ_ALLOCATOR", allocator), ("RUST_LOG", "warn")],
        args,
    )
}

#[test]
fn an_unknown_allocator_is_refused_before_anything_runs() {
    let out = ferromq()
        .env("FERROMQ_ALLOCATOR", "jemalloc")
        .arg("--version")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("error: FERROMQ_ALLOCATOR=jemalloc is not an allocator"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn bench_alloc_counts_both_sides_of_send_and_pull_under_either_allocator() {
    for allocator in ["system", "mimalloc"] {
        let report = bench(allocator, &["alloc", "--messages", "300", "--json"]);
        assert_eq!(report["allocator"], allocator, "{report}");
        let phases = report["phases"].as_array().unwrap();
        let names: Vec<&str> = phases
            .iter()
            .map(|p| p["phase"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["send, synchronous", "send, windowed", "pull"]);
        assert_eq!(phases[2]["messages"], 600, "{report}");
        // A pulled message costs the broker less than one allocation of its own (the records
        // of a pull share one buffer) and the client two (its id; names are shared per
        // pull): a string or buffer per message again shows here (3.6 and 4.7 before).
        let pull = &phases[2];
        let broker = pull["broker_allocs_per_msg"].as_f64().unwrap();
        let client = pull["client_allocs_per_msg"].as_f64().unwrap();
        assert!(broker < 2.0 && client < 2.5, "{report}");
        for phase in phases {
            for key in [
                "broker_allocs_per_msg",
                "broker_bytes_per_msg",
                "client_allocs_per_msg",
                "client_bytes_per_msg",
            ] {
                let value = phase[key].as_f64().unwrap_or(0.0);
                // Every path allocates something on both sides (a response, a decoded
                // message), and far less than a thousand times per message.
                assert!(
                    value > 0.0 && value < 100_000.0,
                    "{key} = {value}: {report}"
                );
            }
        }
    }
}

#[test]
fn bench_rss_reports_memory_at_each_point() {
    let report = bench(
        "system",
        &[
            "rss",
            "--topics",
            "20",
            "--connections",
            "100",
            "--idle-seconds",
            "1",
            "--json",
        ],
    );
    assert_eq!(report["topics"], 20);
    assert_eq!(report["connections"], 100);
    assert_eq!(report["allocator"], "system");
    let idle = report["idle_rss_kib"].as_u64().unwrap();
    let topics = report["topics_rss_kib"].as_u64().unwrap();
    let connected = report["connections_rss_kib"].as_u64().unwrap();
    let hwm = report["connections_hwm_kib"].as_u64().unwrap();
    // A broker with a store and two servers takes megabytes, and the high-water mark is at
    // least the current RSS.
    assert!(idle > 4 * 1024, "{report}");
    assert!(topics > 0 && connected > 0, "{report}");
    assert!(hwm >= connected, "{report}");
    assert!(report["rss_per_connection_bytes"].is_u64(), "{report}");
    assert!(
        report["idle_cpu_share"].as_f64().unwrap() >= 0.0,
        "{report}"
    );
}
