//! `ferromq admin` commands the harness runs as child processes (the same binary): topic
//! creation, `resetOffsetByTime` mid-run, and `offsetHistory` at the end. Going through the
//! CLI exercises what an operator would run, and its `--json` output is the contract.
//!
//! Every command is bounded by [`ADMIN_TIMEOUT`] and killed if it overruns.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value as Json;
use tokio::process::Command;

use crate::history::Queue;

/// Longest an admin command may run.
pub const ADMIN_TIMEOUT: Duration = Duration::from_secs(20);

/// An admin command that did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// It could not be run, or overran its timeout.
    #[error("ferromq admin {command}: {reason}")]
    Run {
        /// The subcommand.
        command: String,
        /// What happened.
        reason: String,
    },
    /// It exited with a failure.
    #[error("ferromq admin {command} failed ({status}): {stderr}")]
    Failed {
        /// The subcommand.
        command: String,
        /// Exit status.
        status: String,
        /// Its stderr, on one line.
        stderr: String,
    },
    /// Its `--json` output was not what the harness expects.
    #[error("ferromq admin {command}: unexpected output: {reason}")]
    Output {
        /// The subcommand.
        command: String,
        /// What is wrong.
        reason: String,
    },
}

/// The result of `resetOffsetByTime`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResetResult {
    /// New offset per queue.
    pub offsets: Vec<(Queue, u64)>,
    /// The reset generation the broker assigned (highest over brokers).
    pub generation: Option<u64>,
}

/// One event of `offsetHistory`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetEvent {
    /// The queue.
    pub queue: Queue,
    /// `commit`, `reset`, `correction`, ... as the broker names it.
    pub kind: String,
    /// The offset committed or reset to.
    pub offset: u64,
    /// Reset generation carried, if any.
    pub generation: Option<u64>,
    /// Who wrote it (`offline-reset` for a backward commit the broker took as a reset
    /// because the group had no online consumer).
    pub client_id: String,
}

/// Runs `program admin ...` against the run's name servers.
#[derive(Debug, Clone)]
pub struct Admin {
    program: PathBuf,
    /// `-n`: the name servers, `;`-separated.
    namesrvs: String,
}

impl Admin {
    /// Admin commands of `program` against `namesrvs`.
    pub fn new(program: &Path, namesrvs: &[SocketAddr]) -> Admin {
        let namesrvs: Vec<String> = namesrvs.iter().map(SocketAddr::to_string).collect();
        Admin {
            program: program.to_path_buf(),
            namesrvs: namesrvs.join(";"),
        }
    }

    /// Creates `topic` with `queues` read and write queues on every master of `cluster`.
    ///
    /// # Errors
    /// [`AdminError`].
    pub async fn update_topic_on_cluster(
        &self,
        topic: &str,
        queues: u32,
        cluster: &str,
    ) -> Result<(), AdminError> {
        let queues = queues.to_string();
        self.run(
            "updateTopic",
            &["-c", cluster, "-t", topic, "-r", &queues, "-w", &queues],
        )
        .await
        .map(|_| ())
    }

    /// Creates `topic` with `queues` read and write queues on the broker at `broker`.
    ///
    /// # Errors
    /// [`AdminError`].
    pub async fn update_topic(
        &self,
        topic: &str,
        queues: u32,
        broker: SocketAddr,
    ) -> Result<(), AdminError> {
        let queues = queues.to_string();
        self.run(
            "updateTopic",
            &[
                "-b",
                &broker.to_string(),
                "-t",
                topic,
                "-r",
                &queues,
                "-w",
                &queues,
            ],
        )
        .await
        .map(|_| ())
    }

    /// Resets `group` on `topic` to the time `timestamp_ms` (ms since the epoch).
    ///
    /// # Errors
    /// [`AdminError`].
    pub async fn reset_by_time(
        &self,
        group: &str,
        topic: &str,
        timestamp_ms: u64,
    ) -> Result<ResetResult, AdminError> {
        let json = self
            .run(
                "resetOffsetByTime",
                &["-g", group, "-t", topic, "-s", &timestamp_ms.to_string()],
            )
            .await?;
        parse_reset(&json).map_err(|reason| AdminError::Output {
            command: "resetOffsetByTime".into(),
            reason,
        })
    }

    /// Every commit, reset and correction of `group` on `topic` still in the broker's log.
    ///
    /// # Errors
    /// [`AdminError`].
    pub async fn offset_history(
        &self,
        group: &str,
        topic: &str,
    ) -> Result<Vec<OffsetEvent>, AdminError> {
        let json = self
            .run("offsetHistory", &["-g", group, "-t", topic])
            .await?;
        parse_history(&json).map_err(|reason| AdminError::Output {
            command: "offsetHistory".into(),
            reason,
        })
    }

    /// Runs one subcommand with `-n NAMESRV --json`; returns its last stdout line as JSON.
    async fn run(&self, command: &str, args: &[&str]) -> Result<Json, AdminError> {
        let mut child = Command::new(&self.program);
        child
            .arg("admin")
            .arg(command)
            .args(args)
            .args(["-n", &self.namesrvs, "--json"])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let run_error = |reason: String| AdminError::Run {
            command: command.to_string(),
            reason,
        };
        let output = tokio::time::timeout(ADMIN_TIMEOUT, child.output())
            .await
            .map_err(|_| run_error(format!("no answer within {ADMIN_TIMEOUT:?}")))?
            .map_err(|e| run_error(e.to_string()))?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            return Err(AdminError::Failed {
                command: command.to_string(),
                status: output.status.to_string(),
                stderr: stderr.lines().map(str::trim).collect::<Vec<_>>().join(" "),
            });
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        let last = stdout.lines().rev().find(|l| !l.trim().is_empty());
        let last = last.ok_or_else(|| AdminError::Output {
            command: command.to_string(),
            reason: "no output".into(),
        })?;
        serde_json::from_str(last).map_err(|e| AdminError::Output {
            command: command.to_string(),
            reason: format!("{e}: {last}"),
        })
    }
}

fn queue_field(entry: &Json, broker_key: &str) -> Result<Queue, String> {
    let broker = entry[broker_key]
        .as_str()
        .ok_or_else(|| format!("no {broker_key} in {entry}"))?;
    let queue_id = entry["queueId"]
        .as_u64()
        .and_then(|q| u32::try_from(q).ok())
        .ok_or_else(|| format!("no queueId in {entry}"))?;
    Ok(Queue {
        broker: broker.to_string(),
        queue_id,
    })
}

/// Parses `resetOffsetByTime --json`: `{"queues":[{"brokerName","queueId","newOffset"}],
/// "generation"}`.
fn parse_reset(json: &Json) -> Result<ResetResult, String> {
    let queues = json["queues"]
        .as_array()
        .ok_or_else(|| format!("no queues in {json}"))?;
    let mut offsets = Vec::new();
    for entry in queues {
        let queue = queue_field(entry, "brokerName")?;
        let offset = entry["newOffset"]
            .as_u64()
            .ok_or_else(|| format!("no newOffset in {entry}"))?;
        offsets.push((queue, offset));
    }
    Ok(ResetResult {
        offsets,
        generation: json["generation"].as_u64(),
    })
}

/// Parses `offsetHistory --json`: `{"events":[{"brokerName","queueId","offset","kind",
/// "generation"}]}`.
fn parse_history(json: &Json) -> Result<Vec<OffsetEvent>, String> {
    let events = json["events"]
        .as_array()
        .ok_or_else(|| format!("no events in {json}"))?;
    events
        .iter()
        .map(|entry| {
            Ok(OffsetEvent {
                queue: queue_field(entry, "brokerName")?,
                kind: entry["kind"].as_str().unwrap_or("").to_string(),
                offset: entry["offset"]
                    .as_u64()
                    .ok_or_else(|| format!("no offset in {entry}"))?,
                generation: entry["generation"].as_u64(),
                client_id: entry["clientId"].as_str().unwrap_or("").to_string(),
            })
        })
        .collect()
}

/// Resets in the broker's offset history that no administrator asked for: backward commits
/// the broker recorded as offline resets (the group had no online consumer at that moment).
pub fn offline_resets(events: &[OffsetEvent]) -> Vec<&OffsetEvent> {
    events
        .iter()
        .filter(|e| e.kind == "reset" && e.client_id == "offline-reset")
        .collect()
}

/// Commits in the broker's offset history that went backwards: per queue, a commit lower
/// than the previous commit with no reset or correction between them. Returned as
/// (queue, previous offset, offset).
pub fn history_regressions(events: &[OffsetEvent]) -> Vec<(Queue, u64, u64)> {
    let mut last: std::collections::BTreeMap<Queue, u64> = Default::default();
    let mut regressions = Vec::new();
    for event in events {
        if event.kind == "commit" {
            if let Some(&previous) = last.get(&event.queue) {
                if event.offset < previous {
                    regressions.push((event.queue.clone(), previous, event.offset));
                }
            }
        }
        // Any event (commit, reset, correction) sets the new baseline.
        last.insert(event.queue.clone(), event.offset);
    }
    regressions
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn q(id: u32) -> Queue {
        Queue {
            broker: "broker-a".into(),
            queue_id: id,
        }
    }

    #[test]
    fn reset_and_history_outputs_parse() {
        let reset = parse_reset(&json!({
            "group": "g", "topic": "t", "timestamp": 1,
            "queues": [{"brokerName": "broker-a", "queueId": 1, "oldOffset": 9, "newOffset": 4}],
            "generation": 3,
        }))
        .unwrap();
        assert_eq!(reset.offsets, vec![(q(1), 4)]);
        assert_eq!(reset.generation, Some(3));
        assert!(parse_reset(&json!({"queues": [{"queueId": 1}]})).is_err());
        let events = parse_history(&json!({"events": [
            {"brokerName": "broker-a", "queueId": 0, "offset": 5, "kind": "commit", "generation": null},
        ]}))
        .unwrap();
        assert_eq!(events[0].offset, 5);
        assert_eq!(events[0].generation, None);
    }

    #[test]
    fn history_regressions_ignore_resets_and_find_backward_commits() {
        let event = |id, kind: &str, offset| OffsetEvent {
            queue: q(id),
            kind: kind.into(),
            offset,
            generation: None,
            client_id: String::new(),
        };
        let events = vec![
            event(0, "commit", 10),
            event(0, "reset", 2),
            event(0, "commit", 5),
            event(1, "commit", 7),
            event(1, "commit", 6),
        ];
        assert_eq!(history_regressions(&events), vec![(q(1), 7, 6)]);
    }
}
