//! Crash test (DESIGN.md "Testing"; invariants 2 and 5): a child process appends messages and
//! commits offsets and prints what was acknowledged; the parent SIGKILLs it at a random
//! moment, reopens the store and checks that
//!
//! - every acknowledged message is readable at its queue offset and CommitLog offset with
//!   identical bytes, and no message of an earlier round appears or disappears later;
//! - every queue is dense from min to max and every record in it verifies (nothing
//!   unacknowledged is corrupt: even the message in flight at the kill is either absent or
//!   whole);
//! - the offset view equals the acknowledged commits and resets, plus possibly the single
//!   command in flight at the kill, applied atomically; generations agree; no stored offset
//!   points past its queue's end.
//!
//! Both flush policies promise this for a crash of the *process*: under `SyncFlush` an
//! acknowledged record is fsynced, under `AsyncFlush` it is in the files (the page cache,
//! which survives the kill). Only an OS crash may lose `AsyncFlush`'s unflushed suffix, which
//! a process kill cannot show.
//!
//! Rounds accumulate data in one directory. Seed: `FERROMQ_CRASH_SEED` (printed at start and
//! in every assertion message); rounds: `FERROMQ_CRASH_ROUNDS` (default 24 under `SyncFlush`,
//! 16 under `AsyncFlush`).

mod common;

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferromq_protocol::{Properties, RecordView};
use ferromq_store::offsets::{OffsetCommand, OffsetEntry, OffsetKind, Verdict, OFFSET_TOPIC};
use ferromq_store::{FlushDiskType, MessageStore, StoreConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use common::{draft, read_all};

const CHILD_DIR_ENV: &str = "FERROMQ_CRASH_CHILD_DIR";
const CHILD_ROUND_ENV: &str = "FERROMQ_CRASH_CHILD_ROUND";
/// `sync` or `async`: the flush policy of the child's store.
const CHILD_FLUSH_ENV: &str = "FERROMQ_CRASH_CHILD_FLUSH";
const SEED_ENV: &str = "FERROMQ_CRASH_SEED";
const ROUNDS_ENV: &str = "FERROMQ_CRASH_ROUNDS";
const TOPICS: [&str; 2] = ["CrashA", "CrashB"];
const QUEUES: u32 = 3;
const GROUPS: [&str; 2] = ["G1", "G2"];
const PRODUCERS: u64 = 3;
/// Messages one producer thread sends at most per round (keeps the log and the checks small).
/// Under `AsyncFlush` puts are faster (no fsync): more of them keep the producers busy until
/// the kill.
fn messages_per_producer_max(flush: FlushDiskType) -> u64 {
    match flush {
        FlushDiskType::SyncFlush => 250,
        FlushDiskType::AsyncFlush => 500,
    }
}
/// A child never runs longer than this, even if nobody kills it.
const CHILD_LIFETIME: Duration = Duration::from_secs(10);
const KILL_AFTER_MS: std::ops::RangeInclusive<u64> = 50..=400;
const DEFAULT_ROUNDS: u64 = 24;
const DEFAULT_ROUNDS_ASYNC: u64 = 16;

fn crash_config(root: &Path, flush: FlushDiskType) -> StoreConfig {
    let mut config = StoreConfig::new(root);
    config.segment_size_bytes = 256 * 1024;
    config.max_message_size_bytes = 32 * 1024;
    config.consume_queue_entries_per_file = 64;
    config.flush_disk_type = flush;
    config.checkpoint_interval_ms = 50;
    config.retention_max_age_ms = None;
    config.retention_max_log_bytes = None;
    config
}

fn flush_name(flush: FlushDiskType) -> &'static str {
    match flush {
        FlushDiskType::SyncFlush => "sync",
        FlushDiskType::AsyncFlush => "async",
    }
}

/// The body of message `counter` of producer `thread` in `round`: a parseable prefix, padded
/// with bytes derived from the same numbers, so any body can be regenerated and compared.
fn body_for(round: u64, thread: u64, counter: u64, len: usize) -> Vec<u8> {
    let mut body = format!("{round}:{thread}:{counter}:").into_bytes();
    let seed = round * 31 + thread * 7 + counter;
    while body.len() < len {
        body.push(b'a' + ((seed + body.len() as u64 * 13) % 26) as u8);
    }
    body
}

/// (round, thread, counter) from a body prefix.
fn parse_body_prefix(body: &[u8]) -> Option<(u64, u64, u64)> {
    let text = std::str::from_utf8(body.get(..body.len().min(64))?).ok()?;
    let mut parts = text.splitn(4, ':');
    let round = parts.next()?.parse().ok()?;
    let thread = parts.next()?.parse().ok()?;
    let counter = parts.next()?.parse().ok()?;
    parts.next()?;
    Some((round, thread, counter))
}

fn format_entries(entries: &[OffsetEntry]) -> String {
    entries
        .iter()
        .map(|e| format!("{}:{}={}", e.topic, e.queue_id, e.offset))
        .collect::<Vec<_>>()
        .join(" ")
}

// ---------------------------------------------------------------------------------------------
// Child
// ---------------------------------------------------------------------------------------------

/// One line to stdout, flushed, under a lock so lines never interleave.
fn emit(out: &Mutex<()>, line: &str) {
    let _guard = out.lock().expect("emit lock");
    let mut stdout = std::io::stdout().lock();
    // A failed write means the parent is gone; nothing useful can be done about it.
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

/// The child process: runs only when the parent sets `FERROMQ_CRASH_CHILD_DIR`.
#[test]
#[ignore = "child process of the crash_recovery_* tests"]
fn crash_child_process() {
    let Ok(dir) = std::env::var(CHILD_DIR_ENV) else {
        return;
    };
    let round: u64 = std::env::var(CHILD_ROUND_ENV)
        .expect("round")
        .parse()
        .expect("round number");
    let seed: u64 = std::env::var(SEED_ENV)
        .expect("seed")
        .parse()
        .expect("seed number");
    let flush = match std::env::var(CHILD_FLUSH_ENV).as_deref() {
        Ok("async") => FlushDiskType::AsyncFlush,
        Ok("sync") => FlushDiskType::SyncFlush,
        other => panic!("{CHILD_FLUSH_ENV} must be sync or async, not {other:?}"),
    };
    let out = Arc::new(Mutex::new(()));
    // The test harness may have printed a partial line; start on a fresh one.
    emit(&out, "\nOPENING");
    let store = match MessageStore::open(crash_config(Path::new(&dir), flush)) {
        Ok(store) => Arc::new(store),
        Err(e) => {
            emit(&out, &format!("ERR open {e}"));
            return;
        }
    };
    emit(&out, "OPENED");
    let deadline = Instant::now() + CHILD_LIFETIME;
    // Next offset after the highest acknowledged message, per (topic index, queue).
    let acked: Arc<Mutex<HashMap<(usize, u32), u64>>> = Arc::new(Mutex::new(HashMap::new()));
    for (t, topic) in TOPICS.iter().enumerate() {
        for q in 0..QUEUES {
            if let Some((_, max)) = store.queue_bounds(topic, q) {
                acked.lock().expect("acked lock").insert((t, q), max);
            }
        }
    }
    let mut threads = Vec::new();
    for thread in 0..PRODUCERS {
        let (store, out, acked) = (store.clone(), out.clone(), acked.clone());
        threads.push(std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(seed ^ (round << 16) ^ (thread + 1));
            for counter in 0..messages_per_producer_max(flush) {
                if Instant::now() >= deadline {
                    return;
                }
                let t = rng.gen_range(0..TOPICS.len());
                let queue = rng.gen_range(0..QUEUES);
                let len = if rng.gen_bool(0.2) {
                    rng.gen_range(1024..8192)
                } else {
                    rng.gen_range(16..1024)
                };
                let body = body_for(round, thread, counter, len);
                let keys = format!("k{round}-{thread}-{counter}");
                let properties = Properties::encode([("KEYS", keys.as_str()), ("TAGS", "crash")]);
                match store.put(&[draft(TOPICS[t], queue, &body, &properties)]) {
                    Ok(receipt) => {
                        let p = &receipt.placements[0];
                        let mut acked = acked.lock().expect("acked lock");
                        let next = acked.entry((t, queue)).or_insert(0);
                        *next = (*next).max(p.queue_offset + 1);
                        drop(acked);
                        emit(
                            &out,
                            &format!(
                                "ACK {} {queue} {} {} {round} {thread} {counter} {}",
                                TOPICS[t],
                                p.queue_offset,
                                p.phys_offset,
                                body.len()
                            ),
                        );
                    }
                    // A flush that outlives the sync timeout (a loaded CI disk) is an
                    // indeterminate outcome, not a failure: the record may or may not survive,
                    // and this producer stops, as the checks allow one unacknowledged put.
                    Err(e) if is_timeout(&e) => {
                        emit(&out, &format!("INFO put timed out: {e}"));
                        return;
                    }
                    Err(e) => {
                        emit(&out, &format!("ERR put {e}"));
                        return;
                    }
                }
                // Spread the puts over the kill window, so kills land among them.
                std::thread::sleep(Duration::from_micros(rng.gen_range(0..1500)));
            }
            emit(&out, &format!("IDLE {thread}"));
        }));
    }
    for (g, group) in GROUPS.iter().enumerate() {
        let (store, out, acked) = (store.clone(), out.clone(), acked.clone());
        threads.push(std::thread::spawn(move || {
            committer(
                &store,
                &out,
                &acked,
                group,
                StdRng::seed_from_u64(seed ^ (round << 16) ^ (100 + g as u64)),
                deadline,
            )
        }));
    }
    for thread in threads {
        if thread.join().is_err() {
            emit(&out, "ERR a child thread panicked");
        }
    }
    // Every thread ended (all sent, or a timeout, rejection or error, each printed): wait for
    // the kill, which then lands after the last write. Only a crash of the child (a panic, an
    // abort) ends it before the parent kills it.
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whether a put or commit failed only because its flush outlived the sync timeout.
fn is_timeout(error: &ferromq_store::StoreError) -> bool {
    matches!(
        error,
        ferromq_store::StoreError::Durability(ferromq_store::DurabilityError::Timeout { .. })
    )
}

/// Commits (and now and then resets) offsets of `group`, one command at a time, printing
/// `TRY` before and `DONE` after each acknowledged command.
fn committer(
    store: &MessageStore,
    out: &Mutex<()>,
    acked: &Mutex<HashMap<(usize, u32), u64>>,
    group: &str,
    mut rng: StdRng,
    deadline: Instant,
) {
    let mut current: HashMap<(usize, u32), u64> = HashMap::new();
    let mut generation = [0u64; TOPICS.len()];
    for (t, topic) in TOPICS.iter().enumerate() {
        generation[t] = store.offset_generation(group, topic).expect("offset view");
        for q in 0..QUEUES {
            if let Some(stored) = store.consumer_offset(group, topic, q).expect("offset view") {
                current.insert((t, q), stored.offset);
            }
        }
    }
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(rng.gen_range(1..6)));
        let acked_now = acked.lock().expect("acked lock").clone();
        if acked_now.is_empty() {
            continue;
        }
        let reset = rng.gen_bool(0.08);
        let t = rng.gen_range(0..TOPICS.len());
        let legacy = !reset && rng.gen_bool(0.2);
        let mut entries = Vec::new();
        for (&(et, q), &max) in &acked_now {
            if (!legacy && et != t) || !rng.gen_bool(0.6) {
                continue;
            }
            let from = current.get(&(et, q)).copied().unwrap_or(0);
            let offset = if reset {
                rng.gen_range(0..=max)
            } else {
                rng.gen_range(from.min(max)..=max)
            };
            entries.push(OffsetEntry {
                topic: TOPICS[et].to_string(),
                queue_id: q,
                offset,
            });
        }
        if entries.is_empty() {
            continue;
        }
        entries.sort_by(|a, b| (&a.topic, a.queue_id).cmp(&(&b.topic, b.queue_id)));
        let kind = if reset {
            OffsetKind::Reset
        } else {
            OffsetKind::Commit
        };
        let command = OffsetCommand {
            kind,
            group: group.to_string(),
            client_id: format!("crash-{group}"),
            generation: if reset || legacy {
                None
            } else {
                Some(generation[t])
            },
            entries,
            fenced_clients: Vec::new(),
            access_key: None,
        };
        emit(
            out,
            &format!("TRY {group} {kind} {}", format_entries(&command.entries)),
        );
        match store.commit_offsets(&command) {
            Ok(outcome)
                if outcome
                    .verdicts
                    .iter()
                    .all(|v| matches!(v, Verdict::Applied | Verdict::Unchanged)) =>
            {
                for entry in &command.entries {
                    let t = TOPICS
                        .iter()
                        .position(|x| *x == entry.topic)
                        .expect("known topic");
                    current.insert((t, entry.queue_id), entry.offset);
                }
                if reset {
                    generation[t] = outcome
                        .generation
                        .expect("a reset establishes a generation");
                }
                let shown = outcome
                    .generation
                    .map_or("-".to_string(), |g| g.to_string());
                emit(out, &format!("DONE {group} {kind} {shown}"));
            }
            Ok(outcome) => {
                emit(
                    out,
                    &format!("REJECTED {group} {kind} {:?}", outcome.verdicts),
                );
                return;
            }
            // Indeterminate, like a timed-out put: the command stays the group's one
            // in-flight command (TRY without DONE) and the committer stops.
            Err(e) if is_timeout(&e) => {
                emit(out, &format!("INFO commit {group} timed out: {e}"));
                return;
            }
            Err(e) => {
                emit(out, &format!("ERR commit {group}: {e}"));
                return;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Parent
// ---------------------------------------------------------------------------------------------

/// (round, producer thread, counter): identifies a message.
type MessageKey = (u64, u64, u64);
/// (topic, queue, queue offset, CommitLog offset, body length): where a message is.
type Place = (String, u32, u64, u64, usize);

#[derive(Debug, Clone)]
struct Ack {
    topic: String,
    queue_id: u32,
    queue_offset: u64,
    phys_offset: u64,
    round: u64,
    thread: u64,
    counter: u64,
    len: usize,
}

#[derive(Debug, Clone)]
struct Op {
    kind: OffsetKind,
    entries: Vec<(String, u32, u64)>,
    /// `Some(generation or None)` once acknowledged.
    done: Option<Option<u64>>,
}

/// What one child run printed.
#[derive(Debug, Default)]
struct ChildOutput {
    opened: bool,
    /// Producers that had sent all their messages when the child was killed.
    idle_producers: u64,
    acks: Vec<Ack>,
    ops: BTreeMap<String, Vec<Op>>,
    failures: Vec<String>,
}

fn parse_child_output(stdout: &str) -> ChildOutput {
    let mut output = ChildOutput::default();
    // Only complete lines count: the last one may be torn by the kill.
    let complete = match stdout.rfind('\n') {
        Some(end) => &stdout[..end],
        None => "",
    };
    for line in complete.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.first().copied() {
            Some("OPENED") => output.opened = true,
            Some("IDLE") => output.idle_producers += 1,
            Some("ACK") if words.len() == 9 => {
                let n = |i: usize| -> u64 {
                    words[i]
                        .parse()
                        .unwrap_or_else(|_| panic!("bad ACK line {line:?}"))
                };
                output.acks.push(Ack {
                    topic: words[1].to_string(),
                    queue_id: n(2) as u32,
                    queue_offset: n(3),
                    phys_offset: n(4),
                    round: n(5),
                    thread: n(6),
                    counter: n(7),
                    len: n(8) as usize,
                });
            }
            Some("TRY") if words.len() >= 4 => {
                let kind = match words[2] {
                    "commit" => OffsetKind::Commit,
                    "reset" => OffsetKind::Reset,
                    other => panic!("bad kind {other:?} in {line:?}"),
                };
                let entries = words[3..]
                    .iter()
                    .map(|w| {
                        let (key, offset) = w.split_once('=').expect("entry has =");
                        let (topic, queue) = key.split_once(':').expect("entry has :");
                        (
                            topic.to_string(),
                            queue.parse().expect("queue"),
                            offset.parse().expect("offset"),
                        )
                    })
                    .collect();
                output
                    .ops
                    .entry(words[1].to_string())
                    .or_default()
                    .push(Op {
                        kind,
                        entries,
                        done: None,
                    });
            }
            Some("DONE") if words.len() == 4 => {
                let op = output
                    .ops
                    .get_mut(words[1])
                    .and_then(|ops| ops.last_mut())
                    .unwrap_or_else(|| panic!("DONE without TRY: {line:?}"));
                assert!(op.done.is_none(), "DONE twice: {line:?}");
                op.done = Some(words[3].parse().ok());
            }
            Some("ERR") | Some("REJECTED") => output.failures.push(line.to_string()),
            Some(w) if w.starts_with("ACK") || w.starts_with("TRY") || w.starts_with("DONE") => {
                output.failures.push(format!("malformed line {line:?}"));
            }
            _ => {}
        }
    }
    output
}

/// The parent's model of the offset view: offsets by (group, topic, queue) and generations by
/// (group, topic).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct OffsetModel {
    offsets: BTreeMap<(String, String, u32), u64>,
    generations: BTreeMap<(String, String), u64>,
}

impl OffsetModel {
    fn apply(&mut self, group: &str, op: &Op) {
        for (topic, queue, offset) in &op.entries {
            self.offsets
                .insert((group.to_string(), topic.clone(), *queue), *offset);
        }
        if op.kind == OffsetKind::Reset {
            let topic = op.entries[0].0.clone();
            *self
                .generations
                .entry((group.to_string(), topic))
                .or_insert(0) += 1;
        }
    }

    fn observe(store: &MessageStore) -> OffsetModel {
        let mut model = OffsetModel::default();
        for group in GROUPS {
            for topic in TOPICS {
                let generation = store.offset_generation(group, topic).expect("offset view");
                if generation > 0 {
                    model
                        .generations
                        .insert((group.to_string(), topic.to_string()), generation);
                }
                for q in 0..QUEUES {
                    if let Some(stored) =
                        store.consumer_offset(group, topic, q).expect("offset view")
                    {
                        model
                            .offsets
                            .insert((group.to_string(), topic.to_string(), q), stored.offset);
                    }
                }
            }
        }
        model
    }
}

/// State the parent carries across rounds.
#[derive(Default)]
struct Expected {
    acks: Vec<Ack>,
    /// Messages present per (round, producer) once checked: must never change afterwards.
    present: BTreeMap<(u64, u64), u64>,
    /// Offsets as verified after the previous round.
    offsets: OffsetModel,
}

fn spawn_child(dir: &Path, round: u64, seed: u64, flush: FlushDiskType) -> std::process::Child {
    Command::new(std::env::current_exe().expect("test executable"))
        .args([
            "--ignored",
            "--exact",
            "crash_child_process",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env(CHILD_DIR_ENV, dir)
        .env(CHILD_ROUND_ENV, round.to_string())
        .env(SEED_ENV, seed.to_string())
        .env(CHILD_FLUSH_ENV, flush_name(flush))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn child")
}

fn collect(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

#[test]
fn crash_recovery_keeps_everything_acknowledged() {
    run_crash_rounds(FlushDiskType::SyncFlush, DEFAULT_ROUNDS);
}

/// `AsyncFlush` acknowledges a record once it is in the files, so a killed process loses
/// nothing acknowledged either (a record acknowledged from the in-memory tail would be lost).
#[test]
fn crash_recovery_async_flush_keeps_everything_acknowledged() {
    run_crash_rounds(FlushDiskType::AsyncFlush, DEFAULT_ROUNDS_ASYNC);
}

/// Kills a child `rounds` times (or `FERROMQ_CRASH_ROUNDS`) and checks every recovery.
fn run_crash_rounds(flush: FlushDiskType, default_rounds: u64) {
    let seed: u64 = match std::env::var(SEED_ENV) {
        Ok(s) => s.parse().expect("FERROMQ_CRASH_SEED must be a number"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_nanos() as u64,
    };
    let rounds: u64 = std::env::var(ROUNDS_ENV)
        .ok()
        .map(|s| s.parse().expect("FERROMQ_CRASH_ROUNDS"))
        .unwrap_or(default_rounds);
    let flush_label = flush_name(flush);
    eprintln!("crash test: {SEED_ENV}={seed} rounds={rounds} flush={flush_label}");
    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().expect("temp dir");
    let mut expected = Expected::default();
    let (mut kills_after_open, mut kills_while_producing, mut cuts, mut total_cut) = (0, 0, 0, 0);
    for round in 0..rounds {
        let ctx = format!("{flush_label} flush, seed {seed} round {round}");
        let mut child = spawn_child(dir.path(), round, seed, flush);
        let stdout = collect(child.stdout.take().expect("stdout"));
        let stderr = collect(child.stderr.take().expect("stderr"));
        let kill_at = Instant::now() + Duration::from_millis(rng.gen_range(KILL_AFTER_MS));
        let early_exit = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break Some(status);
            }
            if Instant::now() >= kill_at {
                break None;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        if early_exit.is_none() {
            child.kill().expect("SIGKILL child");
        }
        let status = child.wait().expect("wait child");
        let (stdout, stderr) = (
            stdout.join().expect("stdout reader"),
            stderr.join().expect("stderr reader"),
        );
        let output = parse_child_output(&stdout);
        assert!(
            output.failures.is_empty(),
            "{ctx}: child reported {:?}\nstderr:\n{stderr}",
            output.failures
        );
        assert!(
            early_exit.is_none(),
            "{ctx}: child exited by itself ({status:?})\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
        assert!(
            !stderr.contains("panicked"),
            "{ctx}: child panicked:\n{stderr}"
        );
        kills_after_open += u64::from(output.opened);
        kills_while_producing += u64::from(output.opened && output.idle_producers < PRODUCERS);

        let store = MessageStore::open(crash_config(dir.path(), flush))
            .unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
        let report = store.recovery_report().clone();
        if output.opened {
            assert!(
                !report.clean_shutdown,
                "{ctx}: a killed run must not look clean: {report:?}"
            );
        }
        assert_eq!(
            report.log_end,
            store.stats().written_end,
            "{ctx}: report vs stats"
        );
        if let Some(cut) = &report.cut {
            assert_eq!(cut.phys_offset, report.log_end, "{ctx}: cut {cut:?}");
            assert_eq!(store.stats().bytes_cut, cut.bytes_cut, "{ctx}: bytes_cut");
            cuts += 1;
            total_cut += cut.bytes_cut;
        }
        expected.acks.extend(output.acks.iter().cloned());
        check_messages(&store, &mut expected, &output, &ctx);
        check_offsets(&store, &mut expected, &output, &ctx);
        assert_eq!(
            store.stats().offset_rejections_at_dispatch,
            0,
            "{ctx}: dispatcher rejected offset entries"
        );
        if round % 2 == 0 {
            store
                .close()
                .unwrap_or_else(|e| panic!("{ctx}: close: {e}"));
        } else {
            drop(store);
        }
    }
    let elapsed = started.elapsed();
    eprintln!(
        "crash test: {flush_label} flush, seed {seed}: {rounds} rounds in {elapsed:?}, {} acknowledged messages, {kills_after_open} kills \
         after open, {kills_while_producing} while producing, {cuts} log cuts ({total_cut} bytes)",
        expected.acks.len()
    );
    assert!(
        !expected.acks.is_empty(),
        "seed {seed}: no message was ever acknowledged; the test tested nothing"
    );
}

/// Every queue is dense and verifies; every acknowledged message is where it was
/// acknowledged, with identical bytes; unacknowledged messages are whole and at most one per
/// producer per round; nothing checked earlier changed.
fn check_messages(store: &MessageStore, expected: &mut Expected, output: &ChildOutput, ctx: &str) {
    let mut found: HashMap<MessageKey, Place> = HashMap::new();
    let mut topics = store.topics();
    topics.sort();
    for topic in &topics {
        for queue_id in store.queue_ids(topic) {
            let messages = read_all(store, topic, queue_id);
            if let Some((min, _)) = store.queue_bounds(topic, queue_id) {
                assert_eq!(
                    min, 0,
                    "{ctx}: {topic}/{queue_id} lost its head (no retention configured)"
                );
            }
            for message in &messages {
                let view = RecordView::parse(&message.bytes).expect("verified by read_all");
                if topic == OFFSET_TOPIC {
                    OffsetCommand::decode(view.body).unwrap_or_else(|e| {
                        panic!(
                            "{ctx}: offset record at {} does not decode: {e}",
                            message.phys_offset
                        )
                    });
                    continue;
                }
                assert!(
                    TOPICS.contains(&topic.as_str()),
                    "{ctx}: unexpected topic {topic}"
                );
                let key = parse_body_prefix(view.body).unwrap_or_else(|| {
                    panic!(
                        "{ctx}: {topic}/{queue_id} at {}: foreign body",
                        message.queue_offset
                    )
                });
                let regenerated = body_for(key.0, key.1, key.2, view.body.len());
                assert!(
                    view.body == regenerated.as_slice(),
                    "{ctx}: {topic}/{queue_id} at {}: body of {key:?} is damaged",
                    message.queue_offset
                );
                let place = (
                    topic.clone(),
                    queue_id,
                    message.queue_offset,
                    message.phys_offset,
                    view.body.len(),
                );
                if let Some(previous) = found.insert(key, place) {
                    panic!(
                        "{ctx}: message {key:?} stored twice: {previous:?} and at {}",
                        message.phys_offset
                    );
                }
            }
        }
    }
    for ack in &expected.acks {
        let key = (ack.round, ack.thread, ack.counter);
        let place = found
            .get(&key)
            .unwrap_or_else(|| panic!("{ctx}: acknowledged message lost: {ack:?}"));
        assert_eq!(
            place,
            &(
                ack.topic.clone(),
                ack.queue_id,
                ack.queue_offset,
                ack.phys_offset,
                ack.len
            ),
            "{ctx}: acknowledged message {key:?} moved or changed"
        );
    }
    // Per (round, producer): counters present are exactly 0..m, m = acked or acked + 1.
    let mut counts: BTreeMap<(u64, u64), Vec<u64>> = BTreeMap::new();
    for &(round, thread, counter) in found.keys() {
        counts.entry((round, thread)).or_default().push(counter);
    }
    let mut acked_counts: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    for ack in &output.acks {
        *acked_counts.entry((ack.round, ack.thread)).or_insert(0) += 1;
    }
    for (producer, counters) in &mut counts {
        counters.sort_unstable();
        let m = counters.len() as u64;
        assert!(
            counters.iter().copied().eq(0..m),
            "{ctx}: producer {producer:?} has gaps: {counters:?}"
        );
        if let Some(&checked) = expected.present.get(producer) {
            assert_eq!(
                m, checked,
                "{ctx}: producer {producer:?} of an earlier round changed"
            );
        } else {
            let acked = acked_counts.get(producer).copied().unwrap_or(0);
            assert!(
                m == acked || m == acked + 1,
                "{ctx}: producer {producer:?}: {m} messages present, {acked} acknowledged (at most one in flight)"
            );
            expected.present.insert(*producer, m);
        }
    }
    for (producer, checked) in &expected.present {
        let m = counts.get(producer).map_or(0, |c| c.len() as u64);
        assert_eq!(
            m, *checked,
            "{ctx}: producer {producer:?} of an earlier round changed"
        );
    }
}

/// The view equals the acknowledged commands, plus possibly the one in flight per group, and
/// never points past a queue's end.
fn check_offsets(store: &MessageStore, expected: &mut Expected, output: &ChildOutput, ctx: &str) {
    let observed = OffsetModel::observe(store);
    let mut acked = expected.offsets.clone();
    // For each group, its in-flight command (the last TRY without DONE), if any.
    let mut in_flight: Vec<(String, Op)> = Vec::new();
    for (group, ops) in &output.ops {
        for (i, op) in ops.iter().enumerate() {
            match op.done {
                Some(generation) => {
                    acked.apply(group, op);
                    if op.kind == OffsetKind::Reset {
                        let topic = &op.entries[0].0;
                        assert_eq!(
                            generation,
                            acked
                                .generations
                                .get(&(group.clone(), topic.clone()))
                                .copied(),
                            "{ctx}: reset of {group}/{topic} established an unexpected generation"
                        );
                    }
                }
                None => {
                    assert_eq!(
                        i,
                        ops.len() - 1,
                        "{ctx}: {group}: a command before the last was not acknowledged"
                    );
                    in_flight.push((group.clone(), op.clone()));
                }
            }
        }
    }
    // Every combination of in-flight commands made durable or not (at most one per group).
    let mut candidates = vec![acked];
    for (group, op) in &in_flight {
        let with: Vec<OffsetModel> = candidates
            .iter()
            .map(|m| {
                let mut m = m.clone();
                m.apply(group, op);
                m
            })
            .collect();
        candidates.extend(with);
    }
    assert!(
        candidates.contains(&observed),
        "{ctx}: offset view does not match the acknowledged commands\nobserved: {observed:?}\nacceptable: \
         {candidates:?}\nin flight: {in_flight:?}"
    );
    for ((group, topic, queue_id), offset) in &observed.offsets {
        let max = store
            .queue_bounds(topic, *queue_id)
            .map_or(0, |(_, max)| max);
        assert!(
            *offset <= max,
            "{ctx}: {group} {topic}/{queue_id} offset {offset} is past the queue end {max}"
        );
    }
    expected.offsets = observed;
}

#[test]
fn child_output_parser_ignores_torn_last_line() {
    let output = parse_child_output(
        "test crash_child_process ... \nOPENING\nOPENED\nACK CrashA 1 0 0 3 0 0 40\nTRY G1 commit CrashA:1=1\n\
         DONE G1 commit 0\nTRY G2 reset CrashB:0=0 CrashB:2=0\nACK CrashB 2 7 123",
    );
    assert!(output.opened);
    assert_eq!(output.acks.len(), 1);
    assert_eq!(output.acks[0].phys_offset, 0);
    assert_eq!(output.acks[0].len, 40);
    assert_eq!(output.ops["G1"].len(), 1);
    assert_eq!(output.ops["G1"][0].done, Some(Some(0)));
    assert_eq!(output.ops["G2"][0].done, None);
    assert_eq!(
        output.ops["G2"][0].entries,
        vec![("CrashB".to_string(), 0, 0), ("CrashB".to_string(), 2, 0)]
    );
    assert!(output.failures.is_empty());
    assert_eq!(
        parse_body_prefix(&body_for(3, 2, 17, 100)),
        Some((3, 2, 17))
    );
    assert_eq!(body_for(3, 2, 17, 100).len(), 100);
}
