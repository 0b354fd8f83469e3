//! Renders the store's recovery report and statistics for people (text) and tools (JSON).
//!
//! The store crate has no serde dependency, so the JSON shape is fixed here; field names are
//! the Rust field names, durations are milliseconds.

use ferromq_store::{CheckReport, CheckScope, QuarantinedRange, RecoveryReport, StoreStats};
use serde_json::{json, Value};

/// The recovery report as a JSON object.
pub fn recovery_json(report: &RecoveryReport) -> Value {
    json!({
        "clean_shutdown": report.clean_shutdown,
        "completed_truncation": report.completed_truncation,
        "checkpoint_position": report.checkpoint_position,
        "checkpoints_rejected": report.checkpoints_rejected,
        "scanned_from": report.scanned_from,
        "scanned_bytes": report.scanned_bytes,
        "log_min": report.log_min,
        "log_end": report.log_end,
        "cut": report.cut.as_ref().map(|cut| json!({
            "phys_offset": cut.phys_offset,
            "bytes_cut": cut.bytes_cut,
            "reason": cut.reason,
        })),
        "quarantined": ranges_json(&report.quarantined),
        "queues_rebuilt": report.queues_rebuilt,
        "queue_torn_tails": report
            .queue_torn_tails
            .iter()
            .map(|(queue, entries)| json!({ "queue": queue, "entries": entries }))
            .collect::<Vec<_>>(),
        "records_dispatched": report.records_dispatched,
        "duration_ms": duration_ms(report.duration),
    })
}

/// Quarantined CommitLog ranges as a JSON array.
pub fn ranges_json(ranges: &[QuarantinedRange]) -> Value {
    ranges
        .iter()
        .map(|range| {
            json!({
                "phys_offset": range.phys_offset,
                "len": range.len,
                "kind": range.kind.as_str(),
                "reason": range.reason,
            })
        })
        .collect()
}

/// A read-only check's findings as a JSON object: what recovery would do.
pub fn check_json(report: &CheckReport) -> Value {
    json!({
        "read_only": true,
        "clean": report.is_clean(),
        "empty": report.empty,
        "clean_shutdown": report.clean_shutdown,
        "pending_truncation": report.pending_truncation,
        "checkpoint_position": report.checkpoint_position,
        "checkpoints_rejected": report.checkpoints_rejected,
        "scope": match report.scope {
            CheckScope::Recovery => "recovery",
            CheckScope::Full => "full",
        },
        "scanned_from": report.scanned_from,
        "verified_bytes": report.scan.verified_bytes,
        "records_verified": report.scan.records,
        "log_min": report.log_min,
        "log_end": report.scan.end,
        "would_cut": report.would_cut.as_ref().map(|cut| json!({
            "phys_offset": cut.phys_offset,
            "bytes_cut": cut.bytes_cut,
            "reason": cut.reason,
        })),
        "would_quarantine": ranges_json(&report.scan.damaged),
        "too_damaged_at": report.scan.stopped_at,
        "queues_would_rebuild": report.queues_would_rebuild,
        "queue_torn_tails": report
            .queue_torn_tails
            .iter()
            .map(|(queue, bytes)| json!({ "queue": queue, "bytes": bytes }))
            .collect::<Vec<_>>(),
        "epochs": report
            .epochs
            .iter()
            .map(|e| json!({ "epoch": e.epoch, "start_offset": e.start }))
            .collect::<Vec<_>>(),
        "epochs_would_drop": report
            .epochs_past_end
            .iter()
            .map(|e| json!({ "epoch": e.epoch, "start_offset": e.start }))
            .collect::<Vec<_>>(),
    })
}

/// The store statistics as a JSON object.
pub fn stats_json(stats: &StoreStats) -> Value {
    json!({
        "log_min_offset": stats.log_min_offset,
        "written_end": stats.written_end,
        "flushed_end": stats.flushed_end,
        "dispatched_end": stats.dispatched_end,
        "checkpoint_position": stats.checkpoint_position,
        "fsync_count": stats.fsync_count,
        "records_appended": stats.records_appended,
        "bytes_cut": stats.bytes_cut,
        "offset_rejections_at_dispatch": stats.offset_rejections_at_dispatch,
        "commits_rejected": stats.commits_rejected,
        "poisoned": stats.poisoned,
        "dispatch_failure": stats.dispatch_failure,
        "checkpoint_failures": stats.checkpoint_failures,
        "last_checkpoint_failure": stats.last_checkpoint_failure,
    })
}

/// The recovery report as aligned `label: value` lines.
pub fn recovery_lines(report: &RecoveryReport) -> Vec<String> {
    let previous_run = if report.clean_shutdown {
        "clean shutdown"
    } else {
        "crash (abort marker found): crash recovery ran"
    };
    let checkpoint = match report.checkpoint_position {
        Some(position) => format!("at CommitLog offset {position}"),
        None => "none usable: derived state rebuilt from the log start".to_string(),
    };
    let cut = match &report.cut {
        Some(cut) => format!(
            "{} bytes cut at offset {} ({})",
            cut.bytes_cut, cut.phys_offset, cut.reason
        ),
        None => "none".to_string(),
    };
    let mut lines = vec![
        format!("previous run : {previous_run}"),
        format!("checkpoint   : {checkpoint}"),
        format!(
            "scan         : {} bytes from offset {}, {} records re-dispatched, {} ms",
            report.scanned_bytes,
            report.scanned_from,
            report.records_dispatched,
            duration_ms(report.duration)
        ),
        format!("tail cut     : {cut}"),
        format!("log          : [{}, {})", report.log_min, report.log_end),
    ];
    if let Some(offset) = report.completed_truncation {
        lines.push(format!(
            "truncation   : completed an interrupted cut at {offset}"
        ));
    }
    if let Some(why) = &report.queues_rebuilt {
        lines.push(format!("queues       : rebuilt from the log start ({why})"));
    }
    for range in &report.quarantined {
        lines.push(format!(
            "quarantined  : {} bytes at offset {} ({}); the records after it are kept",
            range.len, range.phys_offset, range.reason
        ));
    }
    for rejected in &report.checkpoints_rejected {
        lines.push(format!("rejected     : {rejected}"));
    }
    for (queue, entries) in &report.queue_torn_tails {
        lines.push(format!("torn queue   : {queue}: {entries} entries removed"));
    }
    lines
}

/// Milliseconds with microsecond precision.
pub fn duration_ms(duration: std::time::Duration) -> f64 {
    duration.as_micros() as f64 / 1000.0
}
