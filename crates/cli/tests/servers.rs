//! `ferromq standalone`, `namesrv` and `broker` as processes: clean shutdown on SIGTERM and
//! SIGINT, and configuration errors that name the key.

mod common;

use std::process::{Child, Command, Stdio};

use common::{signal, wait_exit};

fn ferromq() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ferromq"))
}

/// Kills the child on drop so a failed test leaves no process behind.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn first_line(child: &mut Child) -> String {
    common::first_line(child).expect("the server printed its address line within 30 s")
}

#[test]
fn standalone_stops_cleanly_on_sigterm_and_restarts_clean() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let mut child = Running(
        ferromq()
            .args([
                "standalone",
                "--data-dir",
                data,
                "--namesrv-port",
                "0",
                "--broker-port",
                "0",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let line = first_line(&mut child.0);
    assert!(
        line.starts_with("ferromq standalone: namesrv 127.0.0.1:"),
        "{line}"
    );
    assert!(
        line.contains(" broker 127.0.0.1:") && line.contains(" data "),
        "{line}"
    );
    signal(&child.0, "TERM");
    assert!(wait_exit(&mut child.0).success());
    let check = ferromq()
        .args(["standalone", "--check", "--data-dir", data])
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(check.stdout.trim_ascii_end()).unwrap();
    assert_eq!(
        report["clean_shutdown"],
        serde_json::json!(true),
        "{report}"
    );
}

#[test]
fn namesrv_and_broker_run_separately_and_stop_on_sigint() {
    let dir = tempfile::tempdir().unwrap();
    let mut namesrv = Running(
        ferromq()
            .args(["namesrv", "--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let line = first_line(&mut namesrv.0);
    let namesrv_addr = line.trim().rsplit(' ').next().unwrap().to_string();
    assert!(
        line.starts_with("ferromq namesrv: listening on 127.0.0.1:"),
        "{line}"
    );
    let config = dir.path().join("broker.toml");
    std::fs::write(
        &config,
        format!(
            "brokerName = \"broker-x\"\nlistenPort = 0\nnamesrvAddr = \"{namesrv_addr}\"\nstorePathRootDir = \"{}\"\nflushDiskType = \"SYNC_FLUSH\"\n",
            dir.path().join("store").display()
        ),
    )
    .unwrap();
    let mut broker = Running(
        ferromq()
            .args(["broker", "-c", config.to_str().unwrap()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let line = first_line(&mut broker.0);
    assert!(
        line.starts_with("ferromq broker: listening on 127.0.0.1:"),
        "{line}"
    );
    signal(&broker.0, "INT");
    assert!(wait_exit(&mut broker.0).success());
    signal(&namesrv.0, "INT");
    assert!(wait_exit(&mut namesrv.0).success());
}

#[test]
fn bad_broker_config_is_one_line_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for (text, key) in [
        ("brokerNam = \"x\"\n", "brokerNam"),
        ("flushDiskType = \"FAST\"\n", "flushDiskType"),
        ("listenPort = \"ten\"\n", "listenPort"),
        ("namesrvAddr = \"nowhere\"\n", "namesrvAddr"),
        ("brokerRole = \"SLAVE\"\n", "brokerRole"),
    ] {
        let config = dir.path().join("broker.toml");
        std::fs::write(&config, text).unwrap();
        let output = ferromq()
            .args(["broker", "-c", config.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1), "{text}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(errors.len(), 1, "one error line for {text:?}: {stderr}");
        assert!(errors[0].contains(key), "{key} named in {stderr}");
    }
    let missing = ferromq()
        .args(["broker", "-c", "/nonexistent/broker.toml"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/broker.toml"));
}

#[test]
fn standalone_accepts_a_relative_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Running(
        ferromq()
            .current_dir(dir.path())
            .args([
                "standalone",
                "--data-dir",
                "data-rel",
                "--namesrv-port",
                "0",
                "--broker-port",
                "0",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let line = first_line(&mut child.0);
    assert!(line.contains(" data "), "{line}");
    assert!(dir.path().join("data-rel").is_dir());
    signal(&child.0, "TERM");
    assert!(wait_exit(&mut child.0).success());
}
