//! The checker on hand-made histories: one history per property that violates exactly that
//! property (the test asserts the checker names it, and only it, with the right values), the
//! allowed cases that must pass, and a clean run.

use ferromq_chaos::checker::{
    check, CheckOptions, Durability, FloorSource, LossClass, RegressionRule, Report,
};
use ferromq_chaos::history::{
    ConsumerId, ConsumerKind, Fault, History, NodeRole, Op, Queue, Value,
};

/// Writes histories tersely; every event gets the next millisecond.
#[derive(Default)]
struct Builder {
    history: History,
    now_ms: u64,
}

fn queue(queue_id: u32) -> Queue {
    Queue {
        broker: "broker-a".into(),
        queue_id,
    }
}

fn node_of(role: NodeRole) -> String {
    format!("{}-0", role.name())
}

fn consumer(consumer: u32, session: u32) -> ConsumerId {
    ConsumerId { consumer, session }
}

fn v(producer: u32, counter: u64) -> Value {
    Value::new(producer, counter)
}

impl Builder {
    fn new() -> Builder {
        Builder::default()
    }

    fn op(&mut self, op: Op) -> &mut Builder {
        self.now_ms += 1;
        self.history.push(self.now_ms, op);
        self
    }

    /// Invoke and ack `value` at (queue `q`, `offset`).
    fn send(&mut self, value: Value, q: u32, offset: u64) -> &mut Builder {
        self.op(Op::SendInvoke { value }).op(Op::SendOk {
            value,
            queue: queue(q),
            offset,
        })
    }

    /// Invoke `value`; the outcome is unknown.
    fn send_info(&mut self, value: Value) -> &mut Builder {
        self.op(Op::SendInvoke { value }).op(Op::SendInfo {
            value,
            error: "timeout".into(),
        })
    }

    fn send_fail(&mut self, value: Value) -> &mut Builder {
        self.op(Op::SendInvoke { value }).op(Op::SendFail {
            value,
            error: "SYSTEM_BUSY".into(),
        })
    }

    fn start(&mut self, c: ConsumerId, q: u32, offset: u64) -> &mut Builder {
        self.op(Op::QueueStart {
            consumer: c,
            kind: ConsumerKind::Pull,
            queue: queue(q),
            offset,
        })
    }

    fn stop(&mut self, c: ConsumerId, q: u32) -> &mut Builder {
        self.op(Op::QueueStop {
            consumer: c,
            queue: queue(q),
        })
    }

    fn deliver(&mut self, c: ConsumerId, q: u32, offset: u64, value: Value) -> &mut Builder {
        self.op(Op::Deliver {
            consumer: c,
            queue: queue(q),
            offset,
            value,
        })
    }

    fn commit(&mut self, c: ConsumerId, q: u32, offset: u64) -> &mut Builder {
        self.op(Op::CommitOk {
            consumer: c,
            queue: queue(q),
            offset,
            sent_ms: None,
        })
    }

    fn observe(
        &mut self,
        q: u32,
        committed: u64,
        max_offset: u64,
        generation: Option<u64>,
    ) -> &mut Builder {
        self.op(Op::Observe {
            queue: queue(q),
            committed: Some(committed),
            max_offset,
            generation,
        })
    }

    fn reset(&mut self, q: u32, offset: u64, generation: u64) -> &mut Builder {
        self.op(Op::Fault(Fault::Reset)).op(Op::Reset {
            offsets: vec![(queue(q), offset)],
            generation: Some(generation),
        })
    }

    fn fault(&mut self, fault: Fault) -> &mut Builder {
        self.op(Op::Fault(fault))
    }

    fn kill_and_restart(&mut self) -> &mut Builder {
        self.fault(Fault::Kill {
            node: "standalone".into(),
            role: NodeRole::Standalone,
        })
        .fault(Fault::Restart {
            node: "standalone".into(),
            role: NodeRole::Standalone,
        })
    }

    /// kill -9 of the node with `role`, then its restart.
    fn kill_role(&mut self, role: NodeRole) -> &mut Builder {
        let node = node_of(role);
        self.fault(Fault::Kill {
            node: node.clone(),
            role,
        })
        .fault(Fault::Restart { node, role })
    }

    /// SIGSTOP of the node with `role`, then SIGCONT.
    fn pause_role(&mut self, role: NodeRole) -> &mut Builder {
        let node = node_of(role);
        self.fault(Fault::Pause {
            node: node.clone(),
            role,
        })
        .fault(Fault::Resume { node, role })
    }

    fn failover(&mut self, group: &str, epoch: u64) -> &mut Builder {
        self.op(Op::Failover {
            group: group.into(),
            master: format!("{group}-r{epoch}"),
            epoch,
        })
    }

    /// A `CommitOk` whose request was sent at `sent_ms`.
    fn commit_sent(&mut self, c: ConsumerId, q: u32, offset: u64, sent_ms: u64) -> &mut Builder {
        self.op(Op::CommitOk {
            consumer: c,
            queue: queue(q),
            offset,
            sent_ms: Some(sent_ms),
        })
    }

    fn drain(&mut self, complete: bool) -> &mut Builder {
        self.op(Op::DrainStart).op(Op::DrainEnd { complete })
    }

    /// Producer `producer` sends counters `counters` to queue `q` at offsets from `first`.
    fn sends(
        &mut self,
        producer: u32,
        counters: std::ops::Range<u64>,
        q: u32,
        first: u64,
    ) -> &mut Builder {
        for (index, counter) in counters.enumerate() {
            self.send(v(producer, counter), q, first + index as u64);
        }
        self
    }

    /// `c` delivers offsets `offsets` of queue `q` holding producer `producer`'s counters
    /// equal to the offsets (the layout `sends(producer, a..b, q, a)` makes).
    fn delivers(
        &mut self,
        c: ConsumerId,
        q: u32,
        producer: u32,
        offsets: std::ops::Range<u64>,
    ) -> &mut Builder {
        for offset in offsets {
            self.deliver(c, q, offset, v(producer, offset));
        }
        self
    }

    fn check(&self, durability: Durability) -> Report {
        self.check_with(CheckOptions {
            durability,
            duplicate_bound: None,
            failover_slack: 0,
        })
    }

    fn check_with(&self, options: CheckOptions) -> Report {
        let report = check(&self.history, &options);
        // The printed summary and the JSON form never fail to render.
        assert!(report.to_string().contains("valid:"));
        serde_json::to_string(&report).expect("report serialises");
        report
    }
}

/// The names of the failed properties (the text before the first ':').
fn failed(report: &Report) -> Vec<String> {
    report
        .failures()
        .iter()
        .map(|failure| failure.split(':').next().unwrap().to_owned())
        .collect()
}

fn values(listed: &ferromq_chaos::checker::ValueList) -> Vec<String> {
    listed.items.iter().map(ToString::to_string).collect()
}

/// One producer, one queue, one consumer reading it all and committing: nothing wrong.
fn clean() -> Builder {
    let reader = consumer(0, 0);
    let mut builder = Builder::new();
    builder
        .sends(0, 0..5, 0, 0)
        .start(reader, 0, 0)
        .delivers(reader, 0, 0, 0..5)
        .commit(reader, 0, 5)
        .observe(0, 5, 5, None);
    builder
}

#[test]
fn clean_history_is_valid() {
    let a = consumer(0, 0);
    let b = consumer(1, 0);
    let mut builder = Builder::new();
    builder
        .sends(0, 0..3, 0, 0)
        .sends(1, 0..3, 1, 0)
        .start(a, 0, 0)
        .start(b, 1, 0)
        .delivers(a, 0, 0, 0..3)
        .commit(a, 0, 2)
        .observe(0, 2, 3, Some(0))
        .delivers(b, 1, 1, 0..3)
        .commit(b, 1, 3)
        .commit(a, 0, 3)
        .observe(1, 3, 3, Some(0))
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert!(report.valid, "{report}");
    assert!(report.failures().is_empty());
    assert_eq!(report.attempted, 6);
    assert_eq!(report.acked, 6);
    assert_eq!(report.delivered, 6);
    assert_eq!(report.deliveries, 6);
    assert_eq!(report.lost.count, 0);
    assert_eq!(report.duplicates.total, 0);
    assert_eq!(report.offset_violations.count, 0);
    assert!(report.drain_complete);
}

#[test]
fn lost_prefix_is_caught() {
    let reader = consumer(0, 0);
    let mut builder = Builder::new();
    builder
        .sends(0, 0..5, 0, 0)
        .start(reader, 0, 2)
        .delivers(reader, 0, 0, 2..5)
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert_eq!(failed(&report), ["K1 lost"]);
    assert_eq!(report.lost.count, 2);
    assert_eq!(report.lost.failing, 2);
    assert_eq!(report.lost.classes.prefix, 2);
    let lost: Vec<_> = report.lost.values.iter().map(|lost| lost.value).collect();
    assert_eq!(lost, [v(0, 0), v(0, 1)]);
    assert_eq!(report.lost.values[1].offset, 1);
    assert_eq!(report.lost.per_producer[&0].prefix, 2);
    assert_eq!(report.lost.per_queue["broker-a#0"].prefix, 2);
    assert!(!report.valid);
}

#[test]
fn lost_middle_is_caught() {
    let reader = consumer(0, 0);
    let mut builder = Builder::new();
    builder
        .send(v(0, 0), 0, 0)
        .send(v(0, 1), 1, 0)
        .send(v(0, 2), 0, 1)
        .start(reader, 0, 0)
        .deliver(reader, 0, 0, v(0, 0))
        .deliver(reader, 0, 1, v(0, 2))
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert_eq!(failed(&report), ["K1 lost"]);
    assert_eq!(report.lost.count, 1);
    assert_eq!(report.lost.values[0].value, v(0, 1));
    assert_eq!(report.lost.values[0].class, LossClass::Middle);
    assert_eq!(report.lost.per_queue["broker-a#1"].middle, 1);
    assert_eq!(report.lost.classes.middle, 1);
}

#[test]
fn lost_postfix_is_caught() {
    let reader = consumer(0, 0);
    let mut builder = Builder::new();
    builder
        .sends(0, 0..4, 0, 0)
        .start(reader, 0, 0)
        .delivers(reader, 0, 0, 0..2)
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert_eq!(failed(&report), ["K1 lost"]);
    assert_eq!(report.lost.classes.postfix, 2);
    assert_eq!(report.lost.classes.prefix + report.lost.classes.middle, 0);
    assert!(report.failures()[0].contains("0:2 (broker-a#0@2, postfix)"));
}

#[test]
fn unexpected_value_is_caught() {
    let reader = consumer(0, 0);
    let mut builder = clean();
    builder.deliver(reader, 0, 5, v(9, 0)).drain(true);
    let report = builder.check(Durability::Sync);
    assert_eq!(failed(&report), ["K2 unexpected"]);
    assert_eq!(report.unexpected.count, 1);
    assert_eq!(values(&report.unexpected), ["9:0"]);
}

#[test]
fn recovered_indeterminate_sends_do_not_fail() {
    let reader = consumer(0, 0);
    let mut builder = clean();
    builder
        .send_info(v(0, 5))
        .send_info(v(0, 6))
        .deliver(reader, 0, 5, v(0, 5))
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert!(report.valid, "{report}");
    assert_eq!(values(&report.recovered), ["0:5"]);
    assert_eq!(report.indeterminate, 2);
    assert_eq!(
        report.lost.count, 0,
        "an unacked send that never landed is not lost"
    );
}

#[test]
fn failed_send_that_was_delivered_is_caught() {
    let reader = consumer(0, 0);
    let mut builder = clean();
    builder
        .send_fail(v(0, 5))
        .deliver(reader, 0, 5, v(0, 5))
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert_eq!(failed(&report), ["K2 failed sends delivered"]);
    assert_eq!(values(&report.failed_but_delivered), ["0:5"]);
    assert_eq!(report.recovered.count, 0);
}

#[test]
fn two_values_at_one_offset_are_caught() {
    let a = consumer(0, 0);
    let b = consumer(1, 0);
    let mut builder = Builder::new();
    builder
        .sends(0, 0..2, 0, 0)
        .send(v(1, 0), 0, 1)
        .start(a, 0, 0)
        .delivers(a, 0, 0, 0..2)
        .start(b, 0, 1)
        .deliver(b, 0, 1, v(1, 0))
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert_eq!(failed(&report), ["K3 two values at one offset"]);
    let conflicts = &report.offset_violations.two_values_at_one_offset;
    assert_eq!(conflicts.count, 1);
    assert_eq!(conflicts.items[0].offset, 1);
    assert_eq!(conflicts.items[0].first, v(0, 1));
    assert_eq!(conflicts.items[0].second, v(1, 0));
    // Async mode allows a reused offset only across a kill: there was none.
    let report = builder.check(Durability::Async);
    assert_eq!(failed(&report), ["K3 two values at one offset"]);
}

#[test]
fn acked_send_at_two_offsets_is_caught() {
    let reader = consumer(0, 0);
    let mut builder = Builder::new();
    builder
        .sends(0, 0..2, 0, 0)
        .start(reader, 0, 0)
        .deliver(reader, 0, 0, v(0, 0))
        .deliver(reader, 0, 1, v(0, 1))
        .deliver(reader, 0, 2, v(0, 1))
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert_eq!(failed(&report), ["K3 acked value at two offsets"]);
    let conflicts = &report.offset_violations.acked_at_two_positions;
    assert_eq!(conflicts.count, 1);
    assert_eq!(conflicts.items[0].value, v(0, 1));
    assert_eq!(conflicts.items[0].first.offset, 1);
    assert_eq!(conflicts.items[0].second.offset, 2);
    assert_eq!(report.duplicates.total, 1);
}

#[test]
fn unacked_value_stored_twice_is_only_counted() {
    let reader = consumer(0, 0);
    let mut builder = clean();
    builder
        .send_info(v(0, 5))
        .deliver(reader, 0, 5, v(0, 5))
        .deliver(reader, 0, 6, v(0, 5))
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert!(report.valid, "{report}");
    assert_eq!(report.offset_violations.unacked_at_two_positions, 1);
}

#[test]
fn offset_gap_is_caught() {
    let a = consumer(0, 0);
    let b = consumer(1, 0);
    let mut builder = Builder::new();
    builder
        .send(v(0, 0), 0, 0)
        .send(v(0, 1), 0, 3)
        .start(a, 0, 0)
        .deliver(a, 0, 0, v(0, 0))
        .stop(a, 0)
        .start(b, 0, 3)
        .deliver(b, 0, 3, v(0, 1))
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert_eq!(failed(&report), ["K3 offset gaps"]);
    let gaps = &report.offset_violations.gaps;
    assert_eq!(gaps.count, 1);
    assert_eq!((gaps.items[0].from, gaps.items[0].to), (1, 2));
    assert_eq!(report.offset_violations.gap_offsets, 2);
}

#[test]
fn commit_regression_is_caught() {
    let reader = consumer(0, 0);
    let mut builder = clean();
    builder.commit(reader, 0, 3).drain(true);
    let report = builder.check(Durability::Sync);
    assert_eq!(failed(&report), ["K4 commit regressions"]);
    let regression = &report.commit_regressions.items[0];
    assert_eq!((regression.from, regression.to), (5, 3));
    assert_eq!(regression.by, Some(reader));
    assert_eq!(report.commit_regressions.count, 1);

    // An observer seeing the committed offset go back is caught too.
    let mut builder = clean();
    builder.observe(0, 4, 5, None).drain(true);
    let report = builder.check(Durability::Sync);
    assert_eq!(failed(&report), ["K4 commit regressions"]);
    assert_eq!(report.commit_regressions.items[0].by, None);
}

#[test]
fn commit_regression_across_a_reset_is_allowed() {
    let reader = consumer(0, 0);
    let mut builder = clean();
    builder
        .reset(0, 1, 1)
        .deliver(reader, 0, 1, v(0, 1))
        .commit(reader, 0, 2)
        .observe(0, 2, 5, Some(1))
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert!(report.valid, "{report}");
    assert_eq!(report.duplicates.by_cause.reset, 1);

    // Below the reset's new baseline is a regression again, once the session committed
    // after the reset (its first commit after it may have been sent before it).
    let mut builder = clean();
    builder
        .reset(0, 2, 1)
        .commit(reader, 0, 2)
        .commit(reader, 0, 1)
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert_eq!(failed(&report), ["K4 commit regressions"]);
    let regression = &report.commit_regressions.items[0];
    assert_eq!((regression.from, regression.to), (2, 1));

    // An observation with a higher generation is an acknowledged reset too.
    let mut builder = clean();
    builder.observe(0, 2, 5, Some(7)).drain(true);
    assert!(builder.check(Durability::Sync).valid);
}

#[test]
fn commit_reply_recorded_late_is_no_regression_but_a_stored_regression_is() {
    let a = consumer(0, 0);
    let b = consumer(1, 0);
    let mut builder = Builder::new();
    builder
        .sends(0, 0..5, 0, 0)
        .start(a, 0, 0)
        .delivers(a, 0, 0, 0..3)
        .commit(a, 0, 3)
        .observe(0, 3, 5, None)
        // b took the queue over at 3 and committed 5 ...
        .stop(a, 0)
        .start(b, 0, 3)
        .delivers(b, 0, 0, 3..5)
        .commit(b, 0, 5)
        // ... while a's commit of 4, sent before b's, was applied first; its reply came late.
        .commit(a, 0, 4)
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert!(report.valid, "{report}");

    // The observer still reading 4 after having seen 5 is a stored regression.
    builder
        .observe(0, 5, 5, None)
        .observe(0, 4, 5, None)
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert_eq!(failed(&report), ["K4 commit regressions"]);
    let regression = &report.commit_regressions.items[0];
    assert_eq!(
        (regression.from, regression.to, regression.by),
        (5, 4, None)
    );
}

#[test]
fn commit_during_a_pending_reset_is_no_regression() {
    let reader = consumer(0, 0);
    let mut builder = clean();
    builder
        .commit(reader, 0, 5)
        .fault(Fault::Reset)
        .commit(reader, 0, 2)
        .op(Op::Reset {
            offsets: vec![(queue(0), 2)],
            generation: Some(1),
        })
        .commit(reader, 0, 2)
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert!(report.valid, "{report}");
}

#[test]
fn an_unsettled_reset_stays_pending_across_later_faults_until_acknowledged() {
    // Chaos replicated seed 2004: the reset's reply was lost in a failover, its record landed
    // on the new master; the consumers followed it after the next fault. The harness asks
    // again until one attempt is acknowledged.
    let reader = consumer(0, 0);
    let unsettled = || Op::ResetUnsettled {
        error: "connection closed".into(),
    };
    let mut builder = clean();
    builder
        .fault(Fault::Reset)
        .op(unsettled())
        .fault(Fault::Partition {
            node: "broker-a-r1".into(),
            mode: "drop".into(),
            link: "client-broker".into(),
        })
        .commit(reader, 0, 5)
        .commit(reader, 0, 2)
        .op(Op::Reset {
            offsets: vec![(queue(0), 2)],
            generation: Some(2),
        })
        .commit(reader, 0, 3)
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert!(report.valid, "{report}");

    // Once acknowledged, the window is closed: a later fault does not reopen it.
    let mut builder = clean();
    builder
        .fault(Fault::Reset)
        .op(unsettled())
        .op(Op::Reset {
            offsets: vec![(queue(0), 2)],
            generation: Some(2),
        })
        .commit(reader, 0, 3)
        .fault(Fault::Partition {
            node: "broker-a-r1".into(),
            mode: "drop".into(),
            link: "client-broker".into(),
        })
        .commit(reader, 0, 1)
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert_eq!(failed(&report), ["K4 commit regressions"]);

    // A refused reset (no `ResetUnsettled`) closes at the next fault, as before.
    let mut builder = clean();
    builder
        .fault(Fault::Reset)
        .fault(Fault::Partition {
            node: "broker-a-r1".into(),
            mode: "drop".into(),
            link: "client-broker".into(),
        })
        .commit(reader, 0, 5)
        .commit(reader, 0, 2)
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert_eq!(failed(&report), ["K4 commit regressions"]);
}

#[test]
fn commit_sent_before_a_reset_and_acknowledged_after_it_does_not_raise_the_baseline() {
    // Chaos `--faults reset --seed 8`: the broker applied 4 before the reset record, but its
    // reply was recorded after the reset op; the session's next commits start from the reset.
    let reader = consumer(0, 0);
    let mut builder = clean();
    builder
        .reset(0, 1, 1)
        .commit(reader, 0, 3)
        .reset(0, 1, 2)
        .commit(reader, 0, 4)
        .commit(reader, 0, 2)
        .observe(0, 2, 5, Some(2))
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert!(report.valid, "{report}");

    // Below the reset's baseline is still a regression.
    let mut builder = clean();
    builder
        .reset(0, 1, 1)
        .commit(reader, 0, 3)
        .reset(0, 2, 2)
        .commit(reader, 0, 4)
        .commit(reader, 0, 1)
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert_eq!(failed(&report), ["K4 commit regressions"]);
    let regression = &report.commit_regressions.items[0];
    assert_eq!((regression.from, regression.to), (2, 1));
}

#[test]
fn async_commit_rollback_across_a_kill_is_allowed() {
    let reader = consumer(0, 0);
    let mut builder = clean();
    builder
        .kill_and_restart()
        .commit(reader, 0, 3)
        .observe(0, 3, 5, None)
        .drain(true);
    let report = builder.check(Durability::Async);
    assert!(report.valid, "{report}");
    assert_eq!(report.async_loss.as_ref().unwrap().commit_rollbacks, 2);
    let report = builder.check(Durability::Sync);
    assert_eq!(failed(&report), ["K4 commit regressions"]);
    assert_eq!(report.commit_regressions.count, 2);
}

#[test]
fn commit_past_max_is_caught() {
    let reader = consumer(0, 0);
    let mut builder = clean();
    builder.commit(reader, 0, 6).drain(true);
    let report = builder.check(Durability::Sync);
    assert_eq!(failed(&report), ["K5 commits past max offset"]);
    let past = &report.commits_past_max.items[0];
    assert_eq!((past.committed, past.known_max), (6, 5));

    // An observed committed offset above every known max, from an observer.
    let mut builder = clean();
    builder.observe(0, 7, 6, None).drain(true);
    let report = builder.check(Durability::Sync);
    assert_eq!(failed(&report), ["K5 commits past max offset"]);
    assert_eq!(report.commits_past_max.items[0].known_max, 6);

    // A larger observed max makes the same commit fine.
    let mut builder = clean();
    builder
        .observe(0, 5, 6, None)
        .commit(reader, 0, 6)
        .drain(true);
    assert!(builder.check(Durability::Sync).valid);
}

#[test]
fn poll_skip_at_session_start_is_caught() {
    let old = consumer(0, 0);
    let new = consumer(0, 1);
    let mut builder = Builder::new();
    builder
        .sends(0, 0..4, 0, 0)
        .start(old, 0, 0)
        .delivers(old, 0, 0, 0..3)
        .commit(old, 0, 1)
        .fault(Fault::RestartConsumer { consumer: 0 })
        .start(new, 0, 1)
        .delivers(new, 0, 0, 2..4)
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert_eq!(failed(&report), ["K7 poll skips"]);
    let skip = &report.poll_skips.items[0];
    assert!(skip.at_start);
    assert_eq!((skip.expected, skip.delivered), (1, 2));
    assert_eq!(skip.consumer, new);
    assert_eq!(report.poll_skips.count, 1);

    // Starting past the end (nothing ever at the start offset) is no skip.
    let reader = consumer(0, 0);
    let mut builder = Builder::new();
    builder
        .sends(0, 0..2, 0, 0)
        .start(reader, 0, 0)
        .delivers(reader, 0, 0, 0..2)
        .stop(reader, 0)
        .start(reader, 0, 5)
        .deliver(reader, 0, 1, v(0, 1))
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert_eq!(report.poll_skips.count, 0, "{report}");
}

#[test]
fn poll_skip_mid_session_is_caught() {
    let a = consumer(0, 0);
    let b = consumer(1, 0);
    let mut builder = Builder::new();
    builder
        .sends(0, 0..3, 0, 0)
        .start(a, 0, 0)
        .deliver(a, 0, 0, v(0, 0))
        .deliver(a, 0, 2, v(0, 2))
        .stop(a, 0)
        .start(b, 0, 1)
        .delivers(b, 0, 0, 1..3)
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert_eq!(failed(&report), ["K7 poll skips"]);
    let skip = &report.poll_skips.items[0];
    assert!(!skip.at_start);
    assert_eq!((skip.expected, skip.delivered), (1, 2));
    assert_eq!(skip.consumer, a);
    assert_eq!(report.duplicates.by_cause.rebalance, 1);
}

#[test]
fn jump_to_a_reset_offset_is_no_poll_skip() {
    let reader = consumer(0, 0);
    let mut builder = Builder::new();
    builder
        .sends(0, 0..6, 0, 0)
        .start(reader, 0, 0)
        .delivers(reader, 0, 0, 0..3)
        .reset(0, 1, 1)
        .deliver(reader, 0, 3, v(0, 3))
        .delivers(reader, 0, 0, 1..6)
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert!(report.valid, "{report}");
    assert_eq!(report.duplicates.by_cause.reset, 3);
    // The reset allows one jump; a second jump back to it is a skip.
    builder.deliver(reader, 0, 1, v(0, 1));
    let report = builder.check(Durability::Sync);
    assert_eq!(failed(&report), ["K7 poll skips"]);
}

#[test]
fn duplicates_are_attributed_to_each_cause() {
    let a0 = consumer(0, 0);
    let a1 = consumer(0, 1);
    let b = consumer(1, 0);
    let mut builder = Builder::new();
    builder
        .sends(0, 0..3, 0, 0)
        // other: the same session re-reads offset 0 with nothing in between.
        .start(a0, 0, 0)
        .deliver(a0, 0, 0, v(0, 0))
        .stop(a0, 0)
        .start(a0, 0, 0)
        .delivers(a0, 0, 0, 0..2)
        .commit(a0, 0, 1)
        // consumer restart: the new session re-reads offset 1.
        .fault(Fault::RestartConsumer { consumer: 0 })
        .start(a1, 0, 1)
        .deliver(a1, 0, 1, v(0, 1))
        // broker restart: the session re-reads offset 1 once more.
        .kill_and_restart()
        .stop(a1, 0)
        .start(a1, 0, 1)
        .deliver(a1, 0, 1, v(0, 1))
        // rebalance: consumer 1 takes the queue over at 1.
        .stop(a1, 0)
        .start(b, 0, 1)
        .delivers(b, 0, 0, 1..3)
        // reset: back to 0.
        .reset(0, 0, 1)
        .deliver(b, 0, 0, v(0, 0))
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert!(report.valid, "{report}");
    let causes = report.duplicates.by_cause;
    assert_eq!(causes.other, 1);
    assert_eq!(causes.consumer_restart, 1);
    assert_eq!(causes.broker_restart, 1);
    assert_eq!(causes.rebalance, 1);
    assert_eq!(causes.reset, 1);
    assert_eq!(report.duplicates.total, 5);
    assert_eq!(report.duplicates.restarts, 1);
    assert_eq!(report.duplicates.max_per_restart, 1);
}

#[test]
fn overlapping_owners_duplicates_are_a_rebalance() {
    let pull = consumer(0, 0);
    let push = consumer(1, 0);
    let mut builder = Builder::new();
    builder
        .sends(0, 0..2, 0, 0)
        // Both took the queue while they were joining: neither stopped it first.
        .start(push, 0, 0)
        .start(pull, 0, 0)
        .delivers(push, 0, 0, 0..2)
        .delivers(pull, 0, 0, 0..2)
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert!(report.valid, "{report}");
    assert_eq!(report.duplicates.by_cause.rebalance, 2);
    assert_eq!(report.duplicates.by_cause.other, 0);
}

#[test]
fn takeover_of_a_restarted_consumers_queue_is_a_rebalance() {
    let a = consumer(0, 0);
    let b = consumer(1, 0);
    let mut builder = Builder::new();
    builder
        .sends(0, 0..2, 0, 0)
        .start(a, 0, 0)
        .delivers(a, 0, 0, 0..2)
        .fault(Fault::RestartConsumer { consumer: 0 })
        .start(b, 0, 0)
        .deliver(b, 0, 0, v(0, 0))
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert!(report.valid, "{report}");
    assert_eq!(report.duplicates.by_cause.rebalance, 1);
}

#[test]
fn restart_beats_the_rebalance_it_caused_but_not_a_later_reset() {
    let a0 = consumer(0, 0);
    let a1 = consumer(0, 1);
    let b = consumer(1, 0);
    let mut builder = Builder::new();
    builder
        .sends(0, 0..4, 0, 0)
        .start(a0, 0, 0)
        .delivers(a0, 0, 0, 0..4)
        .commit(a0, 0, 2)
        .fault(Fault::RestartConsumer { consumer: 0 })
        // b held the queue while a was away; a's new session takes it back before b lets go.
        .start(b, 0, 2)
        .start(a1, 0, 2)
        .stop(b, 0)
        .delivers(a1, 0, 0, 2..4)
        // A later reset rewinds below what the old session read.
        .reset(0, 0, 1)
        .deliver(a1, 0, 0, v(0, 0))
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert!(report.valid, "{report}");
    let causes = report.duplicates.by_cause;
    assert_eq!((causes.consumer_restart, causes.reset), (2, 1));
    assert_eq!(causes.rebalance, 0);
    assert_eq!(report.duplicates.max_per_restart, 2);
}

#[test]
fn new_session_without_a_fault_is_a_consumer_restart() {
    let mut builder = Builder::new();
    builder
        .sends(0, 0..2, 0, 0)
        .start(consumer(0, 0), 0, 0)
        .delivers(consumer(0, 0), 0, 0, 0..2)
        .start(consumer(0, 1), 0, 0)
        .delivers(consumer(0, 1), 0, 0, 0..2)
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert!(report.valid, "{report}");
    assert_eq!(report.duplicates.by_cause.consumer_restart, 2);
    assert_eq!(report.duplicates.restarts, 1);
}

/// Session 0 reads 0..5 and commits `committed`; the restarted session resumes at
/// `resume` and reads to the end.
fn restart_history(committed: u64, resume: u64) -> Builder {
    let old = consumer(0, 0);
    let new = consumer(0, 1);
    let mut builder = Builder::new();
    builder
        .sends(0, 0..5, 0, 0)
        .start(old, 0, 0)
        .delivers(old, 0, 0, 0..5)
        .commit(old, 0, committed)
        .fault(Fault::RestartConsumer { consumer: 0 })
        .start(new, 0, resume)
        .delivers(new, 0, 0, resume..5)
        .drain(true);
    builder
}

/// Chaos ha seeds 3014 and 3016: a reset retried for seconds (its `Fault::Reset` recorded,
/// its op not yet), a consumer restart meanwhile, then the consumer follows the broker's reset
/// push — restarts the queue at the reset offset and reads again — before the harness records
/// the op. Those duplicates are the reset's; without the op's offset matching, they stay the
/// restart's.
#[test]
fn a_reset_followed_before_its_op_was_recorded_is_the_duplicates_cause() {
    let build = |reset_offset: u64| {
        let old = consumer(0, 0);
        let new = consumer(0, 1);
        let mut builder = Builder::new();
        builder
            .sends(0, 0..8, 0, 0)
            .start(old, 0, 0)
            .delivers(old, 0, 0, 0..5)
            .commit(old, 0, 5)
            .fault(Fault::Reset)
            .fault(Fault::RestartConsumer { consumer: 0 })
            .start(new, 0, 5)
            .delivers(new, 0, 0, 5..8)
            .commit(new, 0, 8)
            .stop(new, 0)
            .start(new, 0, 2)
            .delivers(new, 0, 0, 2..4)
            .op(Op::Reset {
                offsets: vec![(queue(0), reset_offset)],
                generation: Some(1),
            })
            .delivers(new, 0, 0, 4..8)
            .drain(true);
        builder.check_with(options(Durability::Sync, Some(100)))
    };
    let report = build(2);
    assert!(report.valid, "{report}");
    assert_eq!(report.duplicates.by_cause.reset, 6);
    assert_eq!(report.duplicates.by_cause.consumer_restart, 0);

    // The op names another offset: the restart at 2 was not the reset's; its two
    // duplicates before the op stay the consumer restart's, over its bound of 0.
    let report = build(3);
    assert_eq!(failed(&report), ["K6 duplicates over bound"]);
    assert_eq!(report.duplicates.by_cause.consumer_restart, 2);
}

#[test]
fn duplicate_bound_exceeded_is_caught() {
    // The failover slack does not loosen a consumer restart's bound.
    let bounded = CheckOptions {
        durability: Durability::Sync,
        duplicate_bound: Some(100),
        failover_slack: 50,
    };
    // Committed 3 of 5 delivered: at most 2 may come again; 4 came again.
    let builder = restart_history(3, 1);
    let report = builder.check_with(bounded);
    assert_eq!(failed(&report), ["K6 duplicates over bound"]);
    let exceeded = &report.duplicates.bound_exceeded.items[0];
    assert_eq!((exceeded.duplicates, exceeded.bound), (4, 2));
    assert_eq!(exceeded.consumer, 0);
    assert_eq!(exceeded.session, Some(1));
    assert_eq!(report.duplicates.max_per_restart, 4);

    // Without a bound the same run is valid, the excess still listed.
    let report = builder.check(Durability::Sync);
    assert!(report.valid, "{report}");
    assert_eq!(report.duplicates.bound_exceeded.count, 1);

    // Within the computed bound: valid.
    let report = restart_history(3, 3).check_with(bounded);
    assert!(report.valid, "{report}");
    assert_eq!(report.duplicates.max_per_restart, 2);

    // Within the computed bound but over the absolute cap.
    let capped = CheckOptions {
        duplicate_bound: Some(1),
        ..bounded
    };
    let report = restart_history(3, 3).check_with(capped);
    assert_eq!(failed(&report), ["K6 duplicates over bound"]);
    let exceeded = &report.duplicates.bound_exceeded.items[0];
    assert_eq!(exceeded.queue, None);
    assert_eq!((exceeded.duplicates, exceeded.bound), (2, 1));
}

/// Values 0..3 acked on queue 0; only offset 0 read before the kill; after it the broker
/// reuses offsets 1 and 2 for new values 3 and 4.
fn async_suffix_loss() -> Builder {
    let reader = consumer(0, 0);
    let mut builder = Builder::new();
    builder
        .sends(0, 0..3, 0, 0)
        .start(reader, 0, 0)
        .deliver(reader, 0, 0, v(0, 0))
        .commit(reader, 0, 1)
        .kill_and_restart()
        .send(v(0, 3), 0, 1)
        .send(v(0, 4), 0, 2)
        .deliver(reader, 0, 1, v(0, 3))
        .deliver(reader, 0, 2, v(0, 4))
        .commit(reader, 0, 3)
        .drain(false);
    builder
}

#[test]
fn async_suffix_loss_is_accepted() {
    let report = async_suffix_loss().check(Durability::Async);
    assert!(report.valid, "{report}");
    assert_eq!(report.lost.count, 2);
    assert_eq!(report.lost.failing, 0);
    let loss = report.async_loss.as_ref().unwrap();
    assert_eq!(loss.kills.len(), 1);
    assert_eq!(loss.kills[0].lost, 2);
    assert_eq!(loss.lost_in_kills, 2);
    assert_eq!(loss.holes.count, 0);
    assert_eq!(report.offset_violations.offset_reuses.count, 2);
    assert!(report
        .lost
        .values
        .iter()
        .all(|lost| lost.lost_in_kill_at_ms.is_some()));

    // The same history under sync flush loses acknowledged data and reuses offsets.
    let report = async_suffix_loss().check(Durability::Sync);
    assert_eq!(
        failed(&report),
        ["K1 lost", "K3 two values at one offset", "drain"]
    );
    assert_eq!(report.lost.failing, 2);
}

#[test]
fn async_loss_after_the_last_kill_is_caught() {
    let mut builder = async_suffix_loss();
    builder.send(v(0, 5), 0, 3);
    let report = builder.check(Durability::Async);
    assert_eq!(failed(&report), ["K1 lost"]);
    assert_eq!(report.lost.failing, 1);
    assert_eq!(report.lost.values[0].value, v(0, 5));
}

#[test]
fn async_middle_hole_is_rejected() {
    let a = consumer(0, 0);
    let b = consumer(1, 0);
    let mut builder = Builder::new();
    builder
        .sends(0, 0..3, 0, 0)
        .start(a, 0, 0)
        .deliver(a, 0, 0, v(0, 0))
        .stop(a, 0)
        .start(b, 0, 2)
        .deliver(b, 0, 2, v(0, 2))
        .kill_and_restart()
        .drain(false);
    let report = builder.check(Durability::Async);
    assert_eq!(failed(&report), ["K1 lost", "K1 async loss not a suffix"]);
    let holes = &report.async_loss.as_ref().unwrap().holes;
    assert_eq!(holes.count, 1);
    let hole = &holes.items[0];
    assert_eq!((hole.lost, hole.lost_offset), (v(0, 1), 1));
    assert_eq!((hole.survivor, hole.survivor_offset), (v(0, 2), 2));
    assert_eq!(report.lost.failing, 1);
}

#[test]
fn async_offset_reuse_is_accepted_only_for_values_lost_in_a_kill() {
    let reader = consumer(0, 0);
    // Without a kill between them, two values at one offset fail even in async mode.
    let mut builder = Builder::new();
    builder
        .send(v(0, 0), 0, 0)
        .send(v(0, 1), 0, 0)
        .start(reader, 0, 0)
        .deliver(reader, 0, 0, v(0, 1))
        .drain(false);
    let report = builder.check(Durability::Async);
    assert!(failed(&report).contains(&"K3 two values at one offset".to_owned()));
    assert_eq!(report.offset_violations.offset_reuses.count, 0);

    // With a kill between them the first value was lost with the unflushed tail: allowed.
    let mut builder = Builder::new();
    builder
        .send(v(0, 0), 0, 0)
        .kill_and_restart()
        .send(v(0, 1), 0, 0)
        .start(reader, 0, 0)
        .deliver(reader, 0, 0, v(0, 1))
        .drain(false);
    let report = builder.check(Durability::Async);
    assert!(report.valid, "{report}");
    assert_eq!(report.offset_violations.offset_reuses.count, 1);

    // The lost value showing up again at its old offset was not lost: caught.
    let other = consumer(1, 0);
    builder
        .start(other, 0, 0)
        .deliver(other, 0, 0, v(0, 0))
        .drain(false);
    let report = builder.check(Durability::Async);
    assert_eq!(failed(&report), ["K3 two values at one offset"]);
    assert_eq!(
        report.offset_violations.two_values_at_one_offset.items[0].second,
        v(0, 0)
    );
}

#[test]
fn forward_reset_skips_are_not_lost_nor_gaps() {
    let reader = consumer(0, 0);
    let mut builder = Builder::new();
    builder
        .sends(0, 0..2, 0, 0)
        .send_info(v(0, 2))
        .sends(0, 3..6, 0, 3)
        .start(reader, 0, 0)
        .deliver(reader, 0, 0, v(0, 0))
        .reset(0, 4, 1)
        .delivers(reader, 0, 0, 4..6)
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert!(report.valid, "{report}");
    assert_eq!(values(&report.skipped_by_reset), ["0:1", "0:3"]);
    assert_eq!(report.offset_violations.gaps.count, 0);
    assert_eq!(report.lost.count, 0);
}

#[test]
fn an_incomplete_drain_is_explained_only_by_values_a_reset_skipped() {
    let reader = consumer(0, 0);
    let mut builder = Builder::new();
    builder
        .sends(0, 0..6, 0, 0)
        .start(reader, 0, 0)
        .deliver(reader, 0, 0, v(0, 0))
        .reset(0, 4, 1)
        .delivers(reader, 0, 0, 4..6)
        .drain(false);
    let report = builder.check(Durability::Sync);
    assert!(report.valid, "{report}");
    assert_eq!(values(&report.skipped_by_reset), ["0:1", "0:2", "0:3"]);

    // One more acknowledged value that nobody read and no reset skipped: lost, and the
    // drain is not explained.
    builder.history.events.pop();
    builder.send(v(0, 6), 0, 6).drain(false);
    let report = builder.check(Durability::Sync);
    assert_eq!(failed(&report), ["K1 lost", "drain"]);
}

#[test]
fn missing_or_incomplete_drain_fails() {
    let report = clean().check(Durability::Sync);
    assert_eq!(failed(&report), ["drain"]);
    assert!(!report.drain_recorded);
    let mut builder = clean();
    builder.drain(false);
    let report = builder.check(Durability::Sync);
    assert_eq!(failed(&report), ["drain"]);
    assert!(report.drain_recorded && !report.drain_complete);
    assert!(builder.check(Durability::Async).valid);
}

#[test]
fn history_round_trips_through_json_lines_then_checks_the_same() {
    let reader = consumer(0, 0);
    let mut builder = clean();
    builder
        .send(v(1, 0), 0, 5)
        .send_info(v(1, 1))
        .commit(reader, 0, 4)
        .kill_and_restart()
        .drain(true);
    let text = builder.history.to_json_lines();
    let parsed = History::from_json_lines(&text).expect("parses");
    assert_eq!(parsed, builder.history);
    let options = CheckOptions::default();
    let direct = check(&builder.history, &options);
    let reparsed = check(&parsed, &options);
    assert_eq!(direct, reparsed);
    assert_eq!(failed(&reparsed), ["K1 lost", "K4 commit regressions"]);
    assert_eq!(reparsed.lost.values[0].value, v(1, 0));
    let json: serde_json::Value = serde_json::to_value(&reparsed).unwrap();
    assert_eq!(json["lost"]["count"], 1);
    assert_eq!(json["commit_regressions"]["count"], 1);
    assert_eq!(json["valid"], false);
}

#[test]
fn async_ack_recorded_after_the_kill_still_belongs_to_it() {
    let reader = consumer(0, 0);
    let mut builder = Builder::new();
    builder
        .send(v(0, 0), 0, 0)
        .start(reader, 0, 0)
        .deliver(reader, 0, 0, v(0, 0))
        .op(Op::SendInvoke { value: v(0, 1) })
        .fault(Fault::Kill {
            node: "standalone".into(),
            role: NodeRole::Standalone,
        })
        // The reply left the broker before it died.
        .op(Op::SendOk {
            value: v(0, 1),
            queue: queue(0),
            offset: 1,
        })
        .fault(Fault::Restart {
            node: "standalone".into(),
            role: NodeRole::Standalone,
        })
        .send(v(0, 2), 0, 1)
        .deliver(reader, 0, 1, v(0, 2))
        .drain(false);
    let report = builder.check(Durability::Async);
    assert!(report.valid, "{report}");
    assert_eq!(report.async_loss.as_ref().unwrap().kills[0].lost, 1);
    assert_eq!(report.offset_violations.offset_reuses.count, 1);
    assert_eq!(
        failed(&builder.check(Durability::Sync)),
        ["K1 lost", "K3 two values at one offset", "drain"]
    );
}

/// A run-sized history: 8 queues, 4 producers, 2 consumers, ~600k events.
#[test]
fn large_history_is_checked_in_linear_time() {
    const QUEUES: u32 = 8;
    const PER_PRODUCER: u64 = 50_000;
    let mut history = History::new();
    let mut next_offset = [0u64; QUEUES as usize];
    let mut stored = Vec::new();
    for counter in 0..PER_PRODUCER {
        for producer in 0..4 {
            let value = v(producer, counter);
            let q = ((counter + u64::from(producer)) % u64::from(QUEUES)) as u32;
            let offset = next_offset[q as usize];
            next_offset[q as usize] += 1;
            history.push(0, Op::SendInvoke { value });
            history.push(
                0,
                Op::SendOk {
                    value,
                    queue: queue(q),
                    offset,
                },
            );
            stored.push((q, offset, value));
        }
    }
    let mut per_queue: Vec<Vec<Value>> = vec![Vec::new(); QUEUES as usize];
    for (q, _, value) in &stored {
        per_queue[*q as usize].push(*value);
    }
    for (q, values) in per_queue.iter().enumerate() {
        let q = q as u32;
        let owner = consumer(q % 2, 0);
        history.push(0, start_op(owner, q, 0));
        for (offset, value) in values.iter().enumerate() {
            let offset = offset as u64;
            history.push(0, deliver_op(owner, q, offset, *value));
            if offset % 32 == 31 {
                history.push(0, commit_op(owner, q, offset + 1));
            }
        }
    }
    history.push(0, Op::DrainEnd { complete: true });
    let events = history.events.len();
    assert!(events > 600_000, "{events}");
    let started = std::time::Instant::now();
    let report = check(&history, &CheckOptions::default());
    let elapsed = started.elapsed();
    eprintln!("checked {events} events in {elapsed:?}");
    assert!(report.valid, "{report}");
    assert_eq!(report.acked, 4 * PER_PRODUCER);
    assert_eq!(report.delivered, 4 * PER_PRODUCER);
    // Generous: a quadratic pass over this many events would take hours.
    assert!(elapsed < std::time::Duration::from_secs(60), "{elapsed:?}");
}

fn start_op(c: ConsumerId, q: u32, offset: u64) -> Op {
    Op::QueueStart {
        consumer: c,
        kind: ConsumerKind::Pull,
        queue: queue(q),
        offset,
    }
}

fn deliver_op(c: ConsumerId, q: u32, offset: u64, value: Value) -> Op {
    Op::Deliver {
        consumer: c,
        queue: queue(q),
        offset,
        value,
    }
}

fn commit_op(c: ConsumerId, q: u32, offset: u64) -> Op {
    Op::CommitOk {
        consumer: c,
        queue: queue(q),
        offset,
        sent_ms: None,
    }
}

// ---- Replicated clusters: node roles, failovers, acknowledgement order, watermark. ----

const ROLES: [NodeRole; 5] = [
    NodeRole::Standalone,
    NodeRole::Master,
    NodeRole::Slave,
    NodeRole::Controller,
    NodeRole::Namesrv,
];

fn options(durability: Durability, duplicate_bound: Option<u64>) -> CheckOptions {
    CheckOptions {
        durability,
        duplicate_bound,
        failover_slack: 0,
    }
}

/// `async_suffix_loss` with the kill hitting the node with `role`: values 1 and 2 are lost
/// and their offsets reused by values 3 and 4.
fn async_loss_with_kill(role: NodeRole) -> Builder {
    let reader = consumer(0, 0);
    let mut builder = Builder::new();
    builder
        .sends(0, 0..3, 0, 0)
        .start(reader, 0, 0)
        .deliver(reader, 0, 0, v(0, 0))
        .commit(reader, 0, 1)
        .kill_role(role)
        .send(v(0, 3), 0, 1)
        .send(v(0, 4), 0, 2)
        .deliver(reader, 0, 1, v(0, 3))
        .deliver(reader, 0, 2, v(0, 4))
        .commit(reader, 0, 3)
        .drain(false);
    builder
}

#[test]
fn async_master_kill_excuses_a_lost_suffix() {
    let report = async_loss_with_kill(NodeRole::Master).check(Durability::Async);
    assert!(report.valid, "{report}");
    assert_eq!((report.lost.count, report.lost.failing), (2, 0));
    let loss = report.async_loss.as_ref().unwrap();
    assert_eq!(loss.kills.len(), 1);
    assert_eq!(loss.kills[0].role, NodeRole::Master);
    assert_eq!(loss.kills[0].node, "master-0");
    assert_eq!(loss.kills[0].lost, 2);
    assert_eq!(loss.lost_in_kills, 2);
    let reuses = &report.offset_violations.offset_reuses;
    assert_eq!(reuses.count, 2);
    assert_eq!(reuses.items[0].kills_between, [NodeRole::Master]);
    assert_eq!(report.kills_by_role.master, 1);
    assert_eq!(report.kills_by_role.total(), 1);
}

#[test]
fn slave_controller_and_namesrv_kills_never_excuse_an_async_loss() {
    for role in [NodeRole::Slave, NodeRole::Controller, NodeRole::Namesrv] {
        let report = async_loss_with_kill(role).check(Durability::Async);
        assert_eq!(
            failed(&report),
            ["K1 lost", "K3 two values at one offset"],
            "{role:?}: {report}"
        );
        assert_eq!((report.lost.count, report.lost.failing), (2, 2));
        let loss = report.async_loss.as_ref().unwrap();
        assert!(loss.kills.is_empty(), "{role:?}");
        assert_eq!(loss.lost_in_kills, 0);
        let conflicts = &report.offset_violations.two_values_at_one_offset;
        assert_eq!(conflicts.count, 2);
        assert_eq!(conflicts.items[0].kills_between, [role]);
        assert!(!conflicts.items[0].failover_between);
        assert_eq!(report.offset_violations.offset_reuses.count, 0);
        assert_eq!(report.kills_by_role.total(), 1);
        assert_eq!(
            report.kills_by_role.master + report.kills_by_role.standalone,
            0
        );
    }
    let report = async_loss_with_kill(NodeRole::Namesrv).check(Durability::Async);
    assert_eq!(report.kills_by_role.namesrv, 1);
    assert!(
        report.failures()[1].contains("broker-a#0@1: 0:1 then 0:3 (killed between: namesrv)"),
        "{report}"
    );
}

#[test]
fn only_master_log_kills_excuse_async_commit_rollbacks() {
    let reader = consumer(0, 0);
    for role in ROLES {
        let mut builder = clean();
        builder
            .kill_role(role)
            .commit(reader, 0, 3)
            .observe(0, 3, 5, None)
            .drain(true);
        let report = builder.check(Durability::Async);
        let rollbacks = report.async_loss.as_ref().unwrap().commit_rollbacks;
        if role.holds_master_log() {
            assert!(report.valid, "{role:?}: {report}");
            assert_eq!(rollbacks, 2);
        } else {
            assert_eq!(failed(&report), ["K4 commit regressions"], "{role:?}");
            assert_eq!(report.commit_regressions.count, 2);
            assert_eq!(rollbacks, 0);
        }
    }
}

#[test]
fn only_master_log_kills_and_restarts_cause_broker_restart_duplicates() {
    let reader = consumer(0, 0);
    for role in ROLES {
        let mut builder = Builder::new();
        builder
            .sends(0, 0..2, 0, 0)
            .start(reader, 0, 0)
            .delivers(reader, 0, 0, 0..2)
            .kill_role(role)
            .pause_role(role)
            .stop(reader, 0)
            .start(reader, 0, 0)
            .delivers(reader, 0, 0, 0..2)
            .drain(true);
        let report = builder.check(Durability::Sync);
        assert!(report.valid, "{report}");
        let causes = report.duplicates.by_cause;
        let expected = if role.holds_master_log() {
            (2, 0)
        } else {
            (0, 2)
        };
        assert_eq!((causes.broker_restart, causes.other), expected, "{role:?}");
        assert_eq!(report.kills_by_role.total(), 1);
        assert_eq!(report.pauses_by_role.total(), 1);
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["kills_by_role"][role.name()], 1, "{role:?}");
        assert_eq!(json["pauses_by_role"][role.name()], 1, "{role:?}");
    }

    // A master's restart alone is a broker restart too; a slave's is not.
    for (role, broker_restart) in [(NodeRole::Master, 1), (NodeRole::Slave, 0)] {
        let mut builder = Builder::new();
        builder
            .send(v(0, 0), 0, 0)
            .start(reader, 0, 0)
            .deliver(reader, 0, 0, v(0, 0))
            .fault(Fault::Restart {
                node: node_of(role),
                role,
            })
            .stop(reader, 0)
            .start(reader, 0, 0)
            .deliver(reader, 0, 0, v(0, 0))
            .drain(true);
        let report = builder.check(Durability::Sync);
        assert_eq!(report.duplicates.by_cause.broker_restart, broker_restart);
        assert_eq!(report.duplicates.by_cause.other, 1 - broker_restart);
        assert!(report.to_string().contains(
            "faults: kills by role (standalone 0, master 0, slave 0, controller 0, namesrv 0)"
        ));
    }
}

/// Consumer 0 reads 0..5 of queue 0 (group `broker-a`) and commits `committed`; the master
/// is killed and group `group` fails over; the consumer takes the queue again at `resume`
/// and reads to the end.
fn failover_history(group: &str, committed: u64, resume: u64) -> Builder {
    let reader = consumer(0, 0);
    let mut builder = Builder::new();
    builder
        .sends(0, 0..5, 0, 0)
        .start(reader, 0, 0)
        .delivers(reader, 0, 0, 0..5)
        .commit(reader, 0, committed)
        .kill_role(NodeRole::Master)
        .failover(group, 2)
        .stop(reader, 0)
        .start(reader, 0, resume)
        .delivers(reader, 0, 0, resume..5)
        .drain(true);
    builder
}

#[test]
fn failover_duplicates_within_their_bound_pass() {
    let bounded = options(Durability::Sync, Some(100));
    // Committed 3 of 5 delivered: at most 2 may come again; 2 came again.
    let report = failover_history("broker-a", 3, 3).check_with(bounded);
    assert!(report.valid, "{report}");
    let causes = report.duplicates.by_cause;
    assert_eq!(
        (causes.failover, causes.broker_restart, causes.other),
        (2, 0, 0)
    );
    assert_eq!(report.failovers.count, 1);
    let failover = &report.failovers.items[0];
    assert_eq!(
        (failover.group.as_str(), failover.master.as_str()),
        ("broker-a", "broker-a-r2")
    );
    assert_eq!((failover.epoch, failover.duplicates), (2, 2));
    assert_eq!(report.duplicates.max_per_failover, 2);
    assert_eq!(report.duplicates.failover_bound_exceeded.count, 0);
    assert_eq!(report.duplicates.restarts, 0);

    // Another group's failover is no cause on this queue: the master kill before it is.
    let report = failover_history("broker-b", 3, 3).check_with(bounded);
    assert!(report.valid, "{report}");
    let causes = report.duplicates.by_cause;
    assert_eq!((causes.failover, causes.broker_restart), (0, 2));
    assert_eq!(report.failovers.count, 1);
    assert_eq!(report.failovers.items[0].duplicates, 0);
    assert_eq!(report.duplicates.max_per_failover, 0);
}

#[test]
fn failover_slack_covers_what_a_consumer_read_before_it_learned_of_the_failover() {
    // Consumer 0 reads 0..5 and commits 3; the master dies and the group fails over; the
    // consumer, still on the old route, reads 5..7 without a commit, then learns of the
    // failover and resumes at 3: 3, 4, 5 and 6 come again.
    let reader = consumer(0, 0);
    let mut builder = Builder::new();
    builder
        .sends(0, 0..8, 0, 0)
        .start(reader, 0, 0)
        .delivers(reader, 0, 0, 0..5)
        .commit(reader, 0, 3)
        .kill_role(NodeRole::Master)
        .failover("broker-a", 2)
        .delivers(reader, 0, 0, 5..7)
        .stop(reader, 0)
        .start(reader, 0, 3)
        .delivers(reader, 0, 0, 3..8)
        .drain(true);
    let strict = builder.check_with(options(Durability::Sync, Some(100)));
    assert_eq!(failed(&strict), ["K6 failover duplicates over bound"]);
    let item = &strict.duplicates.failover_bound_exceeded.items[0];
    assert_eq!((item.duplicates, item.bound), (4, 2));

    let mut slack = options(Durability::Sync, Some(100));
    slack.failover_slack = 2;
    let report = builder.check_with(slack);
    assert!(report.valid, "{report}");
    assert_eq!(report.duplicates.by_cause.failover, 4);

    slack.failover_slack = 1;
    let report = builder.check_with(slack);
    assert_eq!(failed(&report), ["K6 failover duplicates over bound"]);
    let item = &report.duplicates.failover_bound_exceeded.items[0];
    assert_eq!((item.duplicates, item.bound), (4, 3));
}

#[test]
fn failover_duplicates_over_their_bound_are_caught() {
    let bounded = options(Durability::Sync, Some(100));
    // Committed 3 of 5 delivered: at most 2 may come again; 4 came again.
    let builder = failover_history("broker-a", 3, 1);
    let report = builder.check_with(bounded);
    assert_eq!(failed(&report), ["K6 failover duplicates over bound"]);
    let exceeded = &report.duplicates.failover_bound_exceeded;
    assert_eq!(exceeded.count, 1);
    let item = &exceeded.items[0];
    assert_eq!(item.queue, Some(queue(0)));
    assert_eq!((item.duplicates, item.bound), (4, 2));
    assert_eq!((item.group.as_str(), item.epoch), ("broker-a", 2));
    assert_eq!(report.duplicates.max_per_failover, 4);
    assert_eq!(report.duplicates.by_cause.failover, 4);
    assert!(
        report.failures()[0]
            .contains("broker-a to broker-a-r2 (epoch 2) at 20 ms on broker-a#0: 4 > 2"),
        "{report}"
    );

    // Without a bound the same run is valid, the excess still listed.
    let report = builder.check(Durability::Sync);
    assert!(report.valid, "{report}");
    assert_eq!(report.duplicates.failover_bound_exceeded.count, 1);

    // Within the computed bound but over the absolute cap.
    let capped = options(Durability::Sync, Some(1));
    let report = failover_history("broker-a", 3, 3).check_with(capped);
    assert_eq!(failed(&report), ["K6 failover duplicates over bound"]);
    let item = &report.duplicates.failover_bound_exceeded.items[0];
    assert_eq!(item.queue, None);
    assert_eq!((item.duplicates, item.bound), (2, 1));
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["failovers"]["count"], 1);
    assert_eq!(json["failovers"]["items"][0]["duplicates"], 2);
    assert_eq!(json["duplicates"]["max_per_failover"], 2);
    assert_eq!(json["duplicates"]["failover_bound_exceeded"]["count"], 1);
    assert_eq!(json["duplicates"]["by_cause"]["failover"], 2);
}

/// Consumers a and b both hold queue 0; a reads 0..5 and commits 5 (acknowledged at 18 ms);
/// `between` happens; b's commit of 3, sent at `sent(18)` (`None`: not recorded), is
/// acknowledged. b's only reference point (its `QueueStart`) precedes a's commit: only the
/// acknowledgement order can catch it.
fn ack_order_history(
    sent: impl FnOnce(u64) -> Option<u64>,
    between: impl FnOnce(&mut Builder),
) -> Builder {
    let a = consumer(0, 0);
    let b = consumer(1, 0);
    let mut builder = Builder::new();
    builder
        .sends(0, 0..5, 0, 0)
        .start(a, 0, 0)
        .start(b, 0, 0)
        .delivers(a, 0, 0, 0..5)
        .commit(a, 0, 5);
    let acked_ms = builder.now_ms;
    assert_eq!(acked_ms, 18);
    between(&mut builder);
    match sent(acked_ms) {
        Some(sent_ms) => builder.commit_sent(b, 0, 3, sent_ms),
        None => builder.commit(b, 0, 3),
    };
    builder.drain(true);
    builder
}

fn after_the_ack(acked_ms: u64) -> Option<u64> {
    Some(acked_ms + 1)
}

#[test]
fn commit_below_an_earlier_acknowledged_commit_is_a_regression() {
    let report = ack_order_history(after_the_ack, |_| {}).check(Durability::Sync);
    assert_eq!(failed(&report), ["K4 commit regressions"]);
    assert_eq!(report.commit_regressions.count, 1);
    assert_eq!(report.ack_order_regressions, 1);
    let regression = &report.commit_regressions.items[0];
    assert_eq!(regression.rule, RegressionRule::AckOrder);
    assert_eq!((regression.from, regression.to), (5, 3));
    assert_eq!(regression.by, Some(consumer(1, 0)));
    assert_eq!(regression.sent_ms, Some(19));
    assert!(report.failures()[0].contains("(1 by acknowledgement order)"));
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["ack_order_regressions"], 1);
    assert_eq!(json["commit_regressions"]["items"][0]["rule"], "ack_order");

    // Sent in the millisecond of a's acknowledgement or before it: not ordered after it.
    for sent in [Some(18), Some(17)] {
        let report = ack_order_history(|_| sent, |_| {}).check(Durability::Sync);
        assert!(report.valid, "{sent:?}: {report}");
    }
    // Without `sent_ms` only the reference point judges it, and it says nothing.
    let report = ack_order_history(|_| None, |_| {}).check(Durability::Sync);
    assert!(report.valid, "{report}");
}

#[test]
fn a_commit_below_both_rules_is_listed_once_as_a_reference_regression() {
    let reader = consumer(0, 0);
    let mut builder = clean();
    let sent_ms = builder.now_ms + 1;
    builder.commit_sent(reader, 0, 3, sent_ms).drain(true);
    let report = builder.check(Durability::Sync);
    assert_eq!(failed(&report), ["K4 commit regressions"]);
    assert_eq!(report.commit_regressions.count, 1);
    assert_eq!(report.ack_order_regressions, 0);
    let regression = &report.commit_regressions.items[0];
    assert_eq!(regression.rule, RegressionRule::Reference);
    assert_eq!((regression.from, regression.to), (5, 3));
    assert_eq!(regression.sent_ms, Some(sent_ms));
}

#[test]
fn resets_and_new_generations_excuse_a_commit_below_an_earlier_acknowledgement() {
    // A reset between a's acknowledgement and b's commit (fault and op).
    let report = ack_order_history(after_the_ack, |builder| {
        builder.reset(0, 2, 1);
    })
    .check(Durability::Sync);
    assert!(report.valid, "{report}");
    // The reset fault alone: the reset is pending.
    let report = ack_order_history(after_the_ack, |builder| {
        builder.fault(Fault::Reset);
    })
    .check(Durability::Sync);
    assert!(report.valid, "{report}");
    // A reset op naming the queue.
    let reset_of = |q: u32| {
        move |builder: &mut Builder| {
            builder.op(Op::Reset {
                offsets: vec![(queue(q), 2)],
                generation: Some(1),
            });
        }
    };
    let report = ack_order_history(after_the_ack, reset_of(0)).check(Durability::Sync);
    assert!(report.valid, "{report}");
    // A reset op of another queue only excuses nothing here.
    let report = ack_order_history(after_the_ack, reset_of(1)).check(Durability::Sync);
    assert_eq!(failed(&report), ["K4 commit regressions"]);
    assert_eq!(report.ack_order_regressions, 1);
    // An observation of a new generation.
    let report = ack_order_history(after_the_ack, |builder| {
        builder.observe(0, 5, 5, Some(1));
    })
    .check(Durability::Sync);
    assert!(report.valid, "{report}");
    // An observation without a new generation excuses nothing.
    let report = ack_order_history(after_the_ack, |builder| {
        builder.observe(0, 5, 5, None);
    })
    .check(Durability::Sync);
    assert_eq!(failed(&report), ["K4 commit regressions"]);
    assert_eq!(report.ack_order_regressions, 1);
}

#[test]
fn only_an_async_master_log_kill_excuses_a_commit_below_an_earlier_acknowledgement() {
    let kill = |role| {
        move |builder: &mut Builder| {
            builder.kill_role(role);
        }
    };
    for role in ROLES {
        let async_report = ack_order_history(after_the_ack, kill(role)).check(Durability::Async);
        let sync_report = ack_order_history(after_the_ack, kill(role)).check(Durability::Sync);
        assert_eq!(sync_report.ack_order_regressions, 1, "{role:?}");
        if role.holds_master_log() {
            assert!(async_report.valid, "{role:?}: {async_report}");
        } else {
            assert_eq!(failed(&async_report), ["K4 commit regressions"], "{role:?}");
            assert_eq!(async_report.ack_order_regressions, 1);
        }
    }
    // A failover excuses nothing under SYNC_MASTER; under ASYNC_MASTER it cuts the deposed
    // master's unreplicated tail (commits included) as a kill of it would.
    let report = ack_order_history(after_the_ack, |builder| {
        builder.failover("broker-a", 2);
    })
    .check(Durability::Sync);
    assert_eq!(failed(&report), ["K4 commit regressions"]);
    assert_eq!(report.ack_order_regressions, 1);
    let report = ack_order_history(after_the_ack, |builder| {
        builder.failover("broker-a", 2);
    })
    .check(Durability::Async);
    assert!(report.valid, "{report}");
    assert_eq!(report.ack_order_regressions, 0);
    // A kill before the earlier acknowledgement excuses nothing either.
    let mut builder = Builder::new();
    let (a, b) = (consumer(0, 0), consumer(1, 0));
    builder
        .sends(0, 0..5, 0, 0)
        .start(a, 0, 0)
        .start(b, 0, 0)
        .delivers(a, 0, 0, 0..5)
        .kill_role(NodeRole::Master)
        .commit(a, 0, 5);
    let sent_ms = builder.now_ms + 1;
    builder.commit_sent(b, 0, 3, sent_ms).drain(true);
    let report = builder.check(Durability::Async);
    assert_eq!(failed(&report), ["K4 commit regressions"]);
    assert_eq!(report.ack_order_regressions, 1);
}

#[test]
fn max_offset_below_what_consumers_saw_is_past_the_watermark() {
    // clean's observation (max 5) is the reference; the next one sees the log end at 3
    // although offsets 3 and 4 were delivered.
    let mut builder = clean();
    builder.observe(0, 5, 3, None).drain(true);
    let report = builder.check(Durability::Sync);
    assert_eq!(failed(&report), ["K5 past watermark"]);
    let past = &report.past_watermark;
    assert_eq!(past.count, 1);
    let item = &past.items[0];
    assert_eq!(item.queue, queue(0));
    assert_eq!((item.max_offset, item.floor), (3, 5));
    assert_eq!(item.source, FloorSource::Delivered);
    assert!(report.failures()[0].contains("broker-a#0 max 3 < delivered 5"));
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["past_watermark"]["count"], 1);
    assert_eq!(json["past_watermark"]["items"][0]["source"], "delivered");

    // A master kill and a failover change nothing in sync mode; every low observation counts.
    let mut builder = clean();
    builder
        .kill_role(NodeRole::Master)
        .failover("broker-a", 2)
        .observe(0, 5, 3, None)
        .observe(0, 5, 4, None)
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert_eq!(failed(&report), ["K5 past watermark"]);
    assert_eq!(report.past_watermark.count, 2);

    // An acknowledged commit above every delivered offset sets the floor too.
    let reader = consumer(0, 0);
    let mut builder = Builder::new();
    builder
        .sends(0, 0..5, 0, 0)
        .start(reader, 0, 0)
        .delivers(reader, 0, 0, 0..2)
        .commit(reader, 0, 4)
        .observe(0, 4, 5, None)
        .observe(0, 4, 3, None)
        .delivers(reader, 0, 0, 2..5)
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert_eq!(failed(&report), ["K5 past watermark"]);
    let item = &report.past_watermark.items[0];
    assert_eq!((item.max_offset, item.floor), (3, 4));
    assert_eq!(item.source, FloorSource::Committed);
}

#[test]
fn watermark_counts_only_what_was_recorded_before_the_previous_observation() {
    let reader = consumer(0, 0);
    let mut builder = Builder::new();
    builder
        .observe(0, 0, 0, None)
        .sends(0, 0..5, 0, 0)
        .start(reader, 0, 0)
        .delivers(reader, 0, 0, 0..5)
        .commit(reader, 0, 5)
        // The observer read max 0 before those sends and pulls; its record came after them.
        .observe(0, 0, 0, None)
        .drain(true);
    let report = builder.check(Durability::Sync);
    assert!(report.valid, "{report}");
    assert_eq!(report.past_watermark.count, 0);

    // Its next observation must see them.
    builder.observe(0, 5, 4, None).drain(true);
    let report = builder.check(Durability::Sync);
    assert_eq!(failed(&report), ["K5 past watermark"]);
    let item = &report.past_watermark.items[0];
    assert_eq!((item.max_offset, item.floor), (4, 5));
}

#[test]
fn async_master_kill_excuses_a_lower_watermark_and_sets_a_new_baseline() {
    let mut builder = clean();
    builder
        .kill_role(NodeRole::Master)
        .observe(0, 5, 3, None)
        .drain(true);
    let report = builder.check(Durability::Async);
    assert!(report.valid, "{report}");
    assert_eq!(report.past_watermark.count, 0);
    assert_eq!(report.async_loss.as_ref().unwrap().watermark_rollbacks, 1);
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["async_loss"]["watermark_rollbacks"], 1);
    // The same history in sync mode is past the watermark.
    assert_eq!(
        failed(&builder.check(Durability::Sync)),
        ["K5 past watermark"]
    );

    // The observed max is the new baseline: going below it needs another master-log kill.
    builder.observe(0, 5, 2, None).drain(true);
    let report = builder.check(Durability::Async);
    assert_eq!(failed(&report), ["K5 past watermark"]);
    let item = &report.past_watermark.items[0];
    assert_eq!((item.max_offset, item.floor), (2, 3));
    assert_eq!(item.source, FloorSource::Baseline);
    assert_eq!(report.async_loss.as_ref().unwrap().watermark_rollbacks, 1);
}

#[test]
fn async_watermark_is_not_excused_by_other_kills_nor_for_what_followed_the_kill() {
    for role in [NodeRole::Slave, NodeRole::Controller, NodeRole::Namesrv] {
        let mut builder = clean();
        builder.kill_role(role).observe(0, 5, 3, None).drain(true);
        let report = builder.check(Durability::Async);
        assert_eq!(failed(&report), ["K5 past watermark"], "{role:?}");
        let item = &report.past_watermark.items[0];
        assert_eq!((item.max_offset, item.floor), (3, 5));
        assert_eq!(report.async_loss.as_ref().unwrap().watermark_rollbacks, 0);
    }

    // Delivered after the master kill: a later lower max offset is not excused by it.
    let reader = consumer(0, 0);
    let mut builder = clean();
    builder
        .kill_role(NodeRole::Master)
        .send(v(0, 5), 0, 5)
        .deliver(reader, 0, 5, v(0, 5))
        .observe(0, 5, 6, None)
        .observe(0, 5, 5, None)
        .drain(true);
    let report = builder.check(Durability::Async);
    assert_eq!(failed(&report), ["K5 past watermark"]);
    let item = &report.past_watermark.items[0];
    assert_eq!((item.max_offset, item.floor), (5, 6));
    assert_eq!(item.source, FloorSource::Delivered);
    assert_eq!(report.async_loss.as_ref().unwrap().watermark_rollbacks, 0);
}

/// Value 0:0 is acked at offset 0 of queue 0; `faults` happen; value 0:1 is acked at the same
/// offset and read there.
fn offset_reused_after(faults: impl FnOnce(&mut Builder)) -> Builder {
    let reader = consumer(0, 0);
    let mut builder = Builder::new();
    builder.send(v(0, 0), 0, 0);
    faults(&mut builder);
    builder
        .send(v(0, 1), 0, 0)
        .start(reader, 0, 0)
        .deliver(reader, 0, 0, v(0, 1))
        .drain(true);
    builder
}

#[test]
fn offset_reuse_is_excused_only_by_an_async_master_log_kill() {
    // Async, a master kill (and the failover it caused): the old value was lost with it.
    let master_failover = |builder: &mut Builder| {
        builder.kill_role(NodeRole::Master).failover("broker-a", 2);
    };
    let report = offset_reused_after(master_failover).check(Durability::Async);
    assert!(report.valid, "{report}");
    let reuses = &report.offset_violations.offset_reuses;
    assert_eq!(reuses.count, 1);
    assert_eq!(reuses.items[0].kills_between, [NodeRole::Master]);
    assert!(reuses.items[0].failover_between);
    assert_eq!(report.async_loss.as_ref().unwrap().kills[0].lost, 1);

    // Sync: the same kill and failover excuse nothing.
    let report = offset_reused_after(master_failover).check(Durability::Sync);
    assert_eq!(failed(&report), ["K1 lost", "K3 two values at one offset"]);
    let conflict = &report.offset_violations.two_values_at_one_offset.items[0];
    assert_eq!((conflict.first, conflict.second), (v(0, 0), v(0, 1)));
    assert_eq!(conflict.kills_between, [NodeRole::Master]);
    assert!(conflict.failover_between);
    assert!(
        report.failures()[1].contains("0:0 then 0:1 (killed between: master) (failover between)"),
        "{report}"
    );

    // A failover by itself (no kill in the window: the slave kill came before): under
    // ASYNC_MASTER the deposed master's unreplicated tail is cut however it was deposed (a
    // pause, a partition), so the reuse is excused; under SYNC_MASTER it fails.
    let failover_alone = || {
        let reader = consumer(0, 0);
        let mut builder = Builder::new();
        builder
            .kill_role(NodeRole::Slave)
            .send(v(0, 0), 0, 0)
            .failover("broker-a", 2)
            .send(v(0, 1), 0, 0)
            .start(reader, 0, 0)
            .deliver(reader, 0, 0, v(0, 1))
            .drain(false);
        builder
    };
    let report = failover_alone().check(Durability::Async);
    assert!(report.valid, "{report}");
    assert_eq!(report.offset_violations.offset_reuses.count, 1);
    let loss = report.async_loss.as_ref().unwrap();
    assert_eq!(loss.kills.len(), 1);
    assert_eq!(loss.kills[0].node, "failover of broker-a to broker-a-r2");
    assert_eq!(loss.lost_in_kills, 1);
    let report = failover_alone().check(Durability::Sync);
    assert_eq!(
        failed(&report),
        ["K1 lost", "K3 two values at one offset", "drain"]
    );
    let conflict = &report.offset_violations.two_values_at_one_offset.items[0];
    assert!(conflict.kills_between.is_empty(), "{conflict:?}");
    assert!(conflict.failover_between);

    // Kills of a slave, a controller and a name server plus a failover, under SYNC_MASTER:
    // nothing excuses the reuse.
    let report = offset_reused_after(|builder| {
        builder
            .kill_role(NodeRole::Namesrv)
            .kill_role(NodeRole::Slave)
            .kill_role(NodeRole::Controller)
            .failover("broker-a", 2);
    })
    .check(Durability::Sync);
    assert_eq!(failed(&report), ["K1 lost", "K3 two values at one offset"]);
    let conflicts = &report.offset_violations.two_values_at_one_offset;
    assert_eq!(conflicts.count, 1);
    assert_eq!(
        conflicts.items[0].kills_between,
        [NodeRole::Slave, NodeRole::Controller, NodeRole::Namesrv]
    );
    assert_eq!(report.offset_violations.offset_reuses.count, 0);
    assert_eq!(report.kills_by_role.total(), 3);
    let json = serde_json::to_value(&report).unwrap();
    let listed = &json["offset_violations"]["two_values_at_one_offset"]["items"][0];
    assert_eq!(listed["kills_between"][0], "slave");
    assert_eq!(listed["failover_between"], true);
}

/// A run-sized replicated history: 8 queues, 500k events with commits carrying send times,
/// an observation after every 16 deliveries and a master kill and failover every 5,000
/// deliveries: still one linear pass.
#[test]
fn large_cluster_history_is_checked_in_linear_time() {
    const QUEUES: u32 = 8;
    const PER_QUEUE: u64 = 20_000;
    let mut history = History::new();
    let mut now = 0u64;
    let mut push = |history: &mut History, op: Op| {
        now += 1;
        history.push(now, op);
        now
    };
    for q in 0..QUEUES {
        for offset in 0..PER_QUEUE {
            let value = v(q, offset);
            push(&mut history, Op::SendInvoke { value });
            let op = Op::SendOk {
                value,
                queue: queue(q),
                offset,
            };
            push(&mut history, op);
        }
    }
    let mut epoch = 1;
    let mut failovers = 0;
    for q in 0..QUEUES {
        let owner = consumer(q % 2, 0);
        push(&mut history, start_op(owner, q, 0));
        for offset in 0..PER_QUEUE {
            let at = push(&mut history, deliver_op(owner, q, offset, v(q, offset)));
            if offset % 16 == 15 {
                let commit = Op::CommitOk {
                    consumer: owner,
                    queue: queue(q),
                    offset: offset + 1,
                    sent_ms: Some(at),
                };
                push(&mut history, commit);
                let observe = Op::Observe {
                    queue: queue(q),
                    committed: Some(offset + 1),
                    max_offset: PER_QUEUE,
                    generation: None,
                };
                push(&mut history, observe);
            }
            if offset % 5_000 == 4_999 {
                failovers += 1;
                let kill = Op::Fault(Fault::Kill {
                    node: "broker-a-r0".into(),
                    role: NodeRole::Master,
                });
                push(&mut history, kill);
                epoch += 1;
                let failover = Op::Failover {
                    group: "broker-a".into(),
                    master: format!("broker-a-r{epoch}"),
                    epoch,
                };
                push(&mut history, failover);
            }
        }
    }
    history.push(now + 1, Op::DrainEnd { complete: true });
    let events = history.events.len();
    assert!(events > 400_000, "{events}");
    let started = std::time::Instant::now();
    let report = check(&history, &options(Durability::Sync, Some(16)));
    let elapsed = started.elapsed();
    eprintln!("checked {events} events in {elapsed:?}");
    assert!(report.valid, "{report}");
    assert_eq!(report.delivered, u64::from(QUEUES) * PER_QUEUE);
    assert_eq!(failovers, 4 * u64::from(QUEUES));
    assert_eq!(report.failovers.count, failovers);
    assert_eq!(report.kills_by_role.master, failovers);
    assert_eq!(report.past_watermark.count, 0);
    assert!(elapsed < std::time::Duration::from_secs(60), "{elapsed:?}");
}
