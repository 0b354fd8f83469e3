//! End-of-run verdicts: the Jepsen sets, lost classification, async suffix losses, gaps,
//! start-of-session skips and restart and failover duplicate bounds, from the state of the
//! pass.

use std::collections::HashMap;

use super::cluster::FailoverState;
use super::report::{
    AsyncLoss, Duplicates, FailoverDuplicates, FailoverRecord, Gap, KillLoss, Listed, LossClass,
    LostReport, LostValue, OffsetViolations, Position, PositionConflict, Report, RestartDuplicates,
    SuffixHole, ValueList, ValueText,
};
use super::scan::{QueueIndex, Scan, Slot};
use super::{CheckOptions, Durability, LISTED_MAX};
use crate::history::Value;

/// Values sorted into the report's sets.
#[derive(Default)]
struct Sets {
    attempted: u64,
    acked: u64,
    failed: u64,
    indeterminate: u64,
    delivered: u64,
    duplicates: u64,
    unexpected: Vec<Value>,
    failed_but_delivered: Vec<Value>,
    recovered: Vec<Value>,
    /// Acked, never delivered: (value, acked slot, index of its invoke, else of its ack).
    lost: Vec<(Value, Slot, usize)>,
    /// Acked at two slots: (value, first, second).
    two_positions: Vec<(Value, Slot, Slot)>,
    unacked_two_positions: u64,
    /// Per producer, the lowest and highest delivered counters.
    delivered_range: HashMap<u32, (u64, u64)>,
}

pub(super) fn finish(scan: Scan, options: &CheckOptions) -> Report {
    let sets = sort_values(&scan);
    let (lost, skipped_by_reset, async_loss) = judge_lost(&scan, &sets);
    let offset_violations = offsets(&scan, &sets);
    let mut duplicates = duplicates(&scan, &sets, options);
    let failovers = failover_duplicates(&scan, options, &mut duplicates);
    let mut poll_skips = scan.poll_skips.clone();
    for mismatch in &scan.start_mismatches {
        if scan.slots.contains_key(&mismatch.slot) {
            poll_skips.push(mismatch.skip.clone());
        }
    }
    let mut report = Report {
        durability: scan.durability,
        duplicate_bound: options.duplicate_bound,
        events: scan.events,
        attempted: sets.attempted,
        acked: sets.acked,
        failed: sets.failed,
        indeterminate: sets.indeterminate,
        delivered: sets.delivered,
        deliveries: scan.deliveries,
        lost,
        skipped_by_reset: listed_values(&skipped_by_reset),
        unexpected: listed_values(&sets.unexpected),
        failed_but_delivered: listed_values(&sets.failed_but_delivered),
        recovered: listed_values(&sets.recovered),
        duplicates,
        offset_violations,
        commit_regressions: scan.regressions.clone(),
        ack_order_regressions: scan.ack_order_regressions,
        commits_past_max: scan.past_max.clone(),
        past_watermark: scan.past_watermark.clone(),
        poll_skips,
        drain_recorded: scan.drain_complete.is_some(),
        drain_complete: scan.drain_complete.unwrap_or(false),
        async_loss,
        kills_by_role: scan.kills_by_role,
        pauses_by_role: scan.pauses_by_role,
        failovers,
        valid: false,
    };
    report.valid = report.failures().is_empty();
    report
}

fn listed_values(values: &[Value]) -> ValueList {
    let mut listed = Listed::default();
    for value in values {
        listed.push(ValueText(*value));
    }
    listed
}

fn sort_values(scan: &Scan) -> Sets {
    let mut sets = Sets::default();
    for (value, state) in &scan.values {
        let value = *value;
        let delivered = state.deliveries > 0;
        sets.attempted += u64::from(state.attempted);
        sets.duplicates += state.deliveries.saturating_sub(1);
        if delivered {
            sets.delivered += 1;
            let range = sets
                .delivered_range
                .entry(value.producer)
                .or_insert((value.counter, value.counter));
            range.0 = range.0.min(value.counter);
            range.1 = range.1.max(value.counter);
        }
        if let (Some(first), Some(second)) = (state.position, state.other_position) {
            if state.ack.is_some() {
                sets.two_positions.push((value, first, second));
            } else {
                sets.unacked_two_positions += 1;
            }
        }
        match state.ack {
            Some((slot, index)) => {
                sets.acked += 1;
                if !delivered {
                    let since = state.invoked_at.unwrap_or(index).min(index);
                    sets.lost.push((value, slot, since));
                }
            }
            None if state.failed => {
                sets.failed += 1;
                if delivered {
                    sets.failed_but_delivered.push(value);
                }
            }
            None => {
                sets.indeterminate += u64::from(state.indeterminate);
                if delivered && state.attempted {
                    sets.recovered.push(value);
                }
            }
        }
        if delivered && !state.attempted {
            sets.unexpected.push(value);
        }
    }
    // HashMap order is arbitrary: sort so reports are reproducible.
    sets.unexpected.sort_unstable();
    sets.failed_but_delivered.sort_unstable();
    sets.recovered.sort_unstable();
    sets.lost.sort_unstable();
    sets.two_positions.sort_unstable();
    sets
}

fn class_of(value: Value, sets: &Sets) -> LossClass {
    match sets.delivered_range.get(&value.producer) {
        None => LossClass::Prefix,
        Some((lowest, _)) if value.counter < *lowest => LossClass::Prefix,
        Some((_, highest)) if value.counter > *highest => LossClass::Postfix,
        Some(_) => LossClass::Middle,
    }
}

fn in_ranges(ranges: &[(u64, u64)], offset: u64) -> bool {
    ranges
        .iter()
        .any(|(from, to)| *from <= offset && offset < *to)
}

/// K1 with reset skips and async suffix losses.
fn judge_lost(scan: &Scan, sets: &Sets) -> (LostReport, Vec<Value>, Option<AsyncLoss>) {
    let asynchronous = scan.durability == Durability::Async;
    let survivors = if asynchronous {
        highest_survivors(scan)
    } else {
        HashMap::new()
    };
    let mut report = LostReport::default();
    let mut skipped = Vec::new();
    let mut async_loss = AsyncLoss {
        commit_rollbacks: scan.commit_rollbacks,
        watermark_rollbacks: scan.watermark_rollbacks,
        ..AsyncLoss::default()
    };
    let mut kill_losses = vec![0u64; scan.kills.len()];
    let mut allowed = Vec::new();
    for (value, (queue, offset), stored_from) in &sets.lost {
        if in_ranges(&scan.queue_states[*queue as usize].skipped, *offset) {
            skipped.push(*value);
            continue;
        }
        let class = class_of(*value, sets);
        let kill = kill_after(scan, *stored_from).filter(|_| asynchronous);
        let mut lost = LostValue {
            value: *value,
            queue: scan.queues[*queue as usize].clone(),
            offset: *offset,
            class,
            lost_in_kill_at_ms: None,
        };
        if let Some(kill) = kill {
            kill_losses[kill] += 1;
            async_loss.lost_in_kills += 1;
            match survivors.get(&(kill, *queue)) {
                Some((survivor_offset, survivor)) if survivor_offset > offset => {
                    async_loss.holes.push(SuffixHole {
                        queue: lost.queue.clone(),
                        lost: *value,
                        lost_offset: *offset,
                        survivor: *survivor,
                        survivor_offset: *survivor_offset,
                        kill_at_ms: scan.kills[kill].at_ms,
                    });
                }
                _ => lost.lost_in_kill_at_ms = Some(scan.kills[kill].at_ms),
            }
        }
        count_lost(&mut report, &lost);
        if lost.lost_in_kill_at_ms.is_some() {
            allowed.push(lost);
        } else {
            report.failing += 1;
            if report.values.len() < LISTED_MAX {
                report.values.push(lost);
            }
        }
    }
    let room = LISTED_MAX.saturating_sub(report.values.len());
    report.values.extend(allowed.into_iter().take(room));
    async_loss.kills = kill_report(scan, kill_losses);
    (report, skipped, asynchronous.then_some(async_loss))
}

/// One entry per master-log kill with the acknowledged values lost in it.
fn kill_report(scan: &Scan, kill_losses: Vec<u64>) -> Vec<KillLoss> {
    scan.kills
        .iter()
        .zip(kill_losses)
        .map(|(kill, lost)| KillLoss {
            at_ms: kill.at_ms,
            node: kill.node.clone(),
            role: kill.role,
            lost,
        })
        .collect()
}

fn count_lost(report: &mut LostReport, lost: &LostValue) {
    report.count += 1;
    report.classes.add(lost.class);
    report
        .per_producer
        .entry(lost.value.producer)
        .or_default()
        .add(lost.class);
    report
        .per_queue
        .entry(lost.queue.to_string())
        .or_default()
        .add(lost.class);
}

/// The first kill of a master-log node recorded after the event at `index`, as an index into
/// `scan.kills`.
fn kill_after(scan: &Scan, index: usize) -> Option<usize> {
    let kill = scan.kills.partition_point(|kill| kill.index < index);
    (kill < scan.kills.len()).then_some(kill)
}

/// Per (kill, queue): the delivered value with the highest offset among those acked before
/// that kill and after the previous one.
fn highest_survivors(scan: &Scan) -> HashMap<(usize, QueueIndex), (u64, Value)> {
    let mut survivors: HashMap<(usize, QueueIndex), (u64, Value)> = HashMap::new();
    for (value, state) in &scan.values {
        let Some(((queue, offset), ack_index)) = state.ack else {
            continue;
        };
        if state.deliveries == 0 {
            continue;
        }
        let Some(kill) = kill_after(scan, ack_index) else {
            continue;
        };
        let entry = survivors.entry((kill, queue)).or_insert((offset, *value));
        if offset > entry.0 {
            *entry = (offset, *value);
        }
    }
    survivors
}

fn offsets(scan: &Scan, sets: &Sets) -> OffsetViolations {
    let position = |(queue, offset): Slot| Position {
        queue: scan.queues[queue as usize].clone(),
        offset,
    };
    let mut violations = OffsetViolations {
        two_values_at_one_offset: scan.conflicts.clone(),
        offset_reuses: scan.reuses.clone(),
        unacked_at_two_positions: sets.unacked_two_positions,
        ..OffsetViolations::default()
    };
    for (value, first, second) in &sets.two_positions {
        violations.acked_at_two_positions.push(PositionConflict {
            value: *value,
            first: position(*first),
            second: position(*second),
        });
    }
    let (gaps, gap_offsets) = gaps(scan);
    violations.gaps = gaps;
    violations.gap_offsets = gap_offsets;
    violations.count = violations.acked_at_two_positions.count
        + violations.two_values_at_one_offset.count
        + violations.gap_offsets;
    violations
}

/// Offsets in `0..=highest observed` of each queue never observed, outside reset skips.
fn gaps(scan: &Scan) -> (Listed<Gap>, u64) {
    let mut offsets_per_queue: Vec<Vec<u64>> = vec![Vec::new(); scan.queues.len()];
    for (queue, offset) in scan.slots.keys() {
        offsets_per_queue[*queue as usize].push(*offset);
    }
    let mut gaps = Listed::default();
    let mut gap_offsets = 0;
    for (queue, offsets) in offsets_per_queue.iter_mut().enumerate() {
        offsets.sort_unstable();
        let skipped = &scan.queue_states[queue].skipped;
        let mut expected = 0u64;
        for offset in offsets.iter() {
            if *offset > expected {
                for (from, to) in subtract_ranges(expected, *offset, skipped) {
                    gap_offsets += to - from;
                    gaps.push(Gap {
                        queue: scan.queues[queue].clone(),
                        from,
                        to: to - 1,
                    });
                }
            }
            expected = offset + 1;
        }
    }
    (gaps, gap_offsets)
}

/// `[from, to)` minus the union of `ranges`, as sorted disjoint `[from, to)` pieces.
fn subtract_ranges(from: u64, to: u64, ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut cuts: Vec<(u64, u64)> = ranges
        .iter()
        .filter(|(start, end)| *start < to && *end > from)
        .copied()
        .collect();
    cuts.sort_unstable();
    let mut pieces = Vec::new();
    let mut cursor = from;
    for (start, end) in cuts {
        if start > cursor {
            pieces.push((cursor, start.min(to)));
        }
        cursor = cursor.max(end);
    }
    if cursor < to {
        pieces.push((cursor, to));
    }
    pieces
}

/// K6: totals by cause and restarts over their bounds.
fn duplicates(scan: &Scan, sets: &Sets, options: &CheckOptions) -> Duplicates {
    let mut duplicates = Duplicates {
        total: sets.duplicates,
        by_cause: scan.causes,
        restarts: scan.restarts.len() as u64,
        ..Duplicates::default()
    };
    for restart in &scan.restarts {
        let total: u64 = restart.duplicates.values().sum();
        duplicates.max_per_restart = duplicates.max_per_restart.max(total);
        let mut queues: Vec<_> = restart.duplicates.iter().collect();
        queues.sort_unstable();
        for (queue, count) in queues {
            let (max_delivered, committed) = restart
                .snapshot
                .get(*queue as usize)
                .copied()
                .unwrap_or((None, None));
            let bound =
                max_delivered.map_or(0, |max| (max + 1).saturating_sub(committed.unwrap_or(0)));
            if *count > bound {
                duplicates.bound_exceeded.push(RestartDuplicates {
                    consumer: restart.consumer,
                    session: restart.session,
                    at_ms: restart.at_ms,
                    queue: Some(scan.queues[*queue as usize].clone()),
                    duplicates: *count,
                    bound,
                });
            }
        }
        if let Some(cap) = options.duplicate_bound.filter(|cap| total > *cap) {
            duplicates.bound_exceeded.push(RestartDuplicates {
                consumer: restart.consumer,
                session: restart.session,
                at_ms: restart.at_ms,
                queue: None,
                duplicates: total,
                bound: cap,
            });
        }
    }
    duplicates
}

/// K6 per failover: the failovers with their duplicates, and (into `duplicates`) the maximum
/// per failover and the failovers over their bounds.
fn failover_duplicates(
    scan: &Scan,
    options: &CheckOptions,
    duplicates: &mut Duplicates,
) -> Listed<FailoverRecord> {
    let mut records = Listed::default();
    for failover in &scan.failovers {
        let total: u64 = failover.duplicates.values().sum();
        duplicates.max_per_failover = duplicates.max_per_failover.max(total);
        records.push(FailoverRecord {
            group: failover.group.clone(),
            master: failover.master.clone(),
            epoch: failover.epoch,
            at_ms: failover.at_ms,
            duplicates: total,
        });
        let exceeded = |queue, duplicates, bound| FailoverDuplicates {
            group: failover.group.clone(),
            master: failover.master.clone(),
            epoch: failover.epoch,
            at_ms: failover.at_ms,
            queue,
            duplicates,
            bound,
        };
        let mut queues: Vec<_> = failover.duplicates.iter().collect();
        queues.sort_unstable();
        for (queue, count) in queues {
            let bound = failover_bound(failover, *queue, options.failover_slack);
            if *count > bound {
                let queue = Some(scan.queues[*queue as usize].clone());
                let item = exceeded(queue, *count, bound);
                duplicates.failover_bound_exceeded.push(item);
            }
        }
        if let Some(cap) = options.duplicate_bound.filter(|cap| total > *cap) {
            let item = exceeded(None, total, cap);
            duplicates.failover_bound_exceeded.push(item);
        }
    }
    records
}

/// `max(H + 1 − C, 0) + slack` for `queue` at `failover` (`H + 1 − C` is 0 when nothing was
/// delivered on it); `slack` is [`CheckOptions::failover_slack`].
fn failover_bound(failover: &FailoverState, queue: QueueIndex, slack: u64) -> u64 {
    let (max_delivered, committed) = failover
        .snapshot
        .get(&queue)
        .copied()
        .unwrap_or((None, None));
    let uncommitted =
        max_delivered.map_or(0, |max| (max + 1).saturating_sub(committed.unwrap_or(0)));
    uncommitted.saturating_add(slack)
}
