//! `ferromq` with its stdout closed early (`ferromq admin topicList ... | head -1`): the command
//! dies of SIGPIPE like a Unix tool, with no panic message on stderr; a closed stdout under
//! `--help` is ignored by clap (status 0). The pipe's read end is closed before the command
//! starts, so every write to stdout fails and the test does not depend on timing.

mod common;

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus, Stdio};

use common::start;
use std::time::{Duration, Instant};

/// SIGPIPE's number on every Unix ferromq builds for.
const SIGPIPE: i32 = 13;

/// Runs `ferromq args` with stdout a pipe nobody reads (its read end already closed); returns
/// the status and stderr. Waits at most 20 s.
fn run_with_stdout_closed(args: &[&str]) -> (ExitStatus, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferromq"))
        .args(args)
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reading = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ferromq {args:?} did not exit within 20 s with stdout closed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status, reading.join().unwrap())
}

#[test]
fn admin_output_into_a_closed_pipe_dies_of_sigpipe_without_a_panic() {
    let server = start();
    let args = ["admin", "topicList", "-n", server.namesrv.as_str()];
    // The command does print: once the broker has registered, topicList lists TBW102.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let output = Command::new(env!("CARGO_BIN_EXE_ferromq"))
            .args(args)
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        if String::from_utf8_lossy(&output.stdout)
            .lines()
            .any(|line| line == "TBW102")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "topicList never listed TBW102: {output:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let (status, stderr) = run_with_stdout_closed(&args);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!stderr.contains("Broken pipe"), "{stderr}");
    assert_eq!(
        status.signal(),
        Some(SIGPIPE),
        "{status:?}, stderr: {stderr}"
    );
}

#[test]
fn help_into_a_closed_pipe_exits_quietly() {
    let (status, stderr) = run_with_stdout_closed(&["admin", "--help"]);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(status.code(), Some(0), "{status:?}, stderr: {stderr}");
}
