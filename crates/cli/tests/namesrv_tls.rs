//! TLS on the name server's port through the `ferromq` binary: a bad certificate file stops
//! `ferromq namesrv` at start with an error naming it; `ferromq standalone --tls-mode
//! enforcing` serves both ports with TLS — its broker registers over TLS, `ferromq admin`
//! and the Rust client (`ferromq bench produce`) reach the name server with `--tls`, and a
//! plain `ferromq admin` is refused. Certificates are made per test (rcgen, 127.0.0.1).

mod common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `ferromq args` to its end (killed after 60 s: a failure).
fn ferromq(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferromq"))
        .args(args)
        .env_remove("FERROMQ_ACCESS_KEY")
        .env_remove("FERROMQ_SECRET_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("ferromq {args:?} did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn a_bad_certificate_file_stops_the_name_server_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let (_, key) = common::certificate(dir.path());
    let missing = dir.path().join("missing-cert.pem");
    let not_pem = dir.path().join("not-a-cert.pem");
    std::fs::write(&not_pem, "hello\n").unwrap();
    for cert in [&missing, &not_pem] {
        let output = ferromq(&[
            "namesrv",
            "--listen",
            "127.0.0.1:0",
            "--tls-mode",
            "enforcing",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ]);
        let said = text(&output);
        assert!(!output.status.success(), "started with {cert:?}: {said}");
        let name = cert.file_name().unwrap().to_str().unwrap();
        assert!(
            said.contains(name),
            "the error does not name {name}: {said}"
        );
    }
    // A TLS mode without files, and an unknown mode.
    let output = ferromq(&[
        "namesrv",
        "--listen",
        "127.0.0.1:0",
        "--tls-mode",
        "enforcing",
    ]);
    assert!(!output.status.success());
    assert!(
        text(&output).contains("tls.server.certPath"),
        "{}",
        text(&output)
    );
    let output = ferromq(&[
        "namesrv",
        "--listen",
        "127.0.0.1:0",
        "--tls-mode",
        "sometimes",
    ]);
    assert!(!output.status.success());
    assert!(text(&output).contains("sometimes"), "{}", text(&output));
}

#[test]
fn an_enforcing_standalone_serves_tls_admin_and_clients_and_refuses_plain_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = common::certificate(dir.path());
    let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let server = common::start_with(&[
        "--tls-mode",
        "enforcing",
        "--tls-cert",
        cert,
        "--tls-key",
        key,
    ]);
    let tls = ["--tls", "--tls-ca", cert];
    // The broker registered over TLS: a TLS admin sees it in the cluster list.
    let deadline = Instant::now() + Duration::from_secs(20);
    let listed = loop {
        let mut args = vec!["admin", "clusterList", "-n", &server.namesrv, "--json"];
        args.extend(tls);
        let output = ferromq(&args);
        if output.status.success() && text(&output).contains(&server.broker) {
            break text(&output);
        }
        assert!(
            Instant::now() < deadline,
            "the broker never showed up over TLS: {}",
            text(&output)
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(listed.contains("broker-a"), "{listed}");
    // A plain admin is refused by the name server.
    let output = ferromq(&["admin", "clusterList", "-n", &server.namesrv]);
    assert!(
        !output.status.success(),
        "a plain admin was served: {}",
        text(&output)
    );
    // The Rust client (bench) routes through the TLS name server and sends over TLS.
    let mut args = vec![
        "bench",
        "produce",
        "--namesrv",
        &server.namesrv,
        "--topic",
        "TlsBench",
        "--count",
        "50",
        "--seconds",
        "20",
        "--json",
    ];
    args.extend(tls);
    let output = ferromq(&args);
    assert!(output.status.success(), "bench over TLS: {}", text(&output));
    let last = String::from_utf8_lossy(&output.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    let report: serde_json::Value =
        serde_json::from_str(&last).unwrap_or_else(|e| panic!("{last}: {e}"));
    assert_eq!(report["messages"], 50, "{report}");
    assert_eq!(report["errors"], 0, "{report}");
    server.stop();
}
