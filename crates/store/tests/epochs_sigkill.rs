//! R9 with a real process killed during `truncate_diverged`. Its own test binary: spawning
//! the child forks this process, and a fork while another test of the same process holds a
//! store's lock file open kept that lock alive until the child's `exec` (`common/terms.rs`).

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ferromq_store::MessageStore;

use common::terms::{assert_cut, e, two_terms};
use common::{read_all, test_config};

const CHILD_DIR_ENV: &str = "FERROMQ_R9_CHILD_DIR";
const CHILD_CUT_ENV: &str = "FERROMQ_R9_CHILD_CUT";

/// R9 with a real process: a child opens the store and runs `truncate_diverged`; the parent
/// SIGKILLs it right after the call returns, or as soon as it starts (in the middle, or
/// before anything happened). On restart the store is either untouched (the kill came
/// before the intent) or cut exactly — never the suffix back in the log, the ConsumeQueue or
/// the offset view, and never an epoch entry past the log end.
#[test]
fn r9_truncate_diverged_survives_sigkill() {
    for (round, wait_for) in ["DONE", "TRUNCATING", "TRUNCATING", "TRUNCATING"]
        .into_iter()
        .enumerate()
    {
        let dir = tempfile::tempdir().unwrap();
        let (cut, end) = two_terms(dir.path());
        let mut child = Command::new(std::env::current_exe().expect("test executable"))
            .args([
                "--ignored",
                "--exact",
                "r9_child_process",
                "--nocapture",
                "--test-threads=1",
                "-q",
            ])
            .env(CHILD_DIR_ENV, dir.path())
            .env(CHILD_CUT_ENV, cut.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("stdout");
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut seen = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let line = line.expect("child output");
            seen.push(line.clone());
            if line == wait_for || line.starts_with("ERR") || Instant::now() > deadline {
                break;
            }
        }
        child.kill().expect("SIGKILL child");
        child.wait().expect("reap child");
        assert!(
            seen.iter().any(|l| l == wait_for),
            "round {round}: child said {seen:?}"
        );
        let store = MessageStore::open(test_config(dir.path())).expect("reopen");
        let log_end = store.stats().committed_end;
        assert!(
            store.epochs().iter().all(|x| x.start <= log_end),
            "round {round}: an epoch entry past the log end {log_end}: {:?}",
            store.epochs()
        );
        drop(store);
        if wait_for == "DONE" || log_end != end {
            assert_cut(dir.path(), cut);
        } else {
            // Killed before the intent: nothing changed.
            let store = MessageStore::open(test_config(dir.path())).unwrap();
            assert_eq!(store.epochs(), vec![e(1, 0), e(2, cut)]);
            assert_eq!(read_all(&store, "T", 0).len(), 18);
        }
    }
}

/// The child of `r9_truncate_diverged_survives_sigkill` (runs only when the parent sets
/// the environment): opens, truncates, says so, and waits to be killed.
#[test]
#[ignore = "child process of r9_truncate_diverged_survives_sigkill"]
fn r9_child_process() {
    let Ok(dir) = std::env::var(CHILD_DIR_ENV) else {
        return;
    };
    let cut: u64 = std::env::var(CHILD_CUT_ENV)
        .expect("cut")
        .parse()
        .expect("cut number");
    let say = |line: &str| {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "\n{line}");
        let _ = out.flush();
    };
    let store = match MessageStore::open(test_config(Path::new(&dir))) {
        Ok(store) => store,
        Err(error) => return say(&format!("ERR open {error}")),
    };
    say("TRUNCATING");
    match store.truncate_diverged(cut) {
        Ok(_) => say("DONE"),
        Err(error) => say(&format!("ERR truncate {error}")),
    }
    std::thread::sleep(Duration::from_secs(60));
}
