//! The simulated clients: one producer and one consumer (which also plays the admin issuing
//! resets). They find the master through the controller (production: the name server's
//! route), keep one request in flight, give up on it after [`REQUEST_TIMEOUT_MS`] (its
//! outcome then unknown), and forget the master on any refusal.
//!
//! Invariants:
//! 1. Every draw comes from the workload stream of the seed.
//! 2. The consumer commits only what it read, with the reset generation it read it under,
//!    and follows a reset (a new generation) by adopting the stored offset.
//! 3. A commit that was not acknowledged (refused, failed or unanswered) is sent again, with
//!    the same value, before the consumer reads on — as a real consumer's persister resends
//!    its offset — at most [`COMMIT_RETRIES_MAX`] times. The resend may find its value
//!    already held by the first attempt's record ("unchanged"), which must then be
//!    acknowledged no earlier than that record (`ferromq chaos` seed 2006).

use ferromq_store::offsets::{OffsetCommand, OffsetEntry, OffsetKind};

use crate::log::{GROUP, QUEUE_ID, TOPIC};
use crate::msg::{Msg, Pulled};
use crate::net::NodeId;
use crate::node::CONTROLLER;
use crate::rng::{Rng, Stream};

/// The producer's node id.
pub const PRODUCER: NodeId = 4;
/// The consumer's node id.
pub const CONSUMER: NodeId = 5;
/// How long a client waits for a reply before giving up on it.
pub const REQUEST_TIMEOUT_MS: u64 = 2_500;
/// How often the consumer polls, virtual ms.
pub const CONSUME_INTERVAL_MS: u64 = 60;
/// Resends of one unacknowledged commit before the consumer reads on without it.
pub const COMMIT_RETRIES_MAX: u32 = 3;
/// Most filler bytes in a message body.
pub const PADDING_MAX: u64 = 48;

/// A client's view of its one request and of the master.
#[derive(Debug, Clone, Default)]
struct Session {
    master: Option<u64>,
    in_flight: Option<(u64, u64)>,
    next_req: u64,
}

impl Session {
    /// Where the next request goes, or the route request to send first; `None` while a
    /// request is in flight (expired ones are dropped).
    fn target(&mut self, now_ms: u64, out: &mut Vec<(NodeId, Msg)>) -> Option<(NodeId, u64)> {
        if let Some((_, sent)) = self.in_flight {
            if now_ms.saturating_sub(sent) <= REQUEST_TIMEOUT_MS {
                return None;
            }
            self.in_flight = None;
            self.master = None;
        }
        let Some(master) = self.master else {
            out.push((CONTROLLER, Msg::Route));
            return None;
        };
        self.next_req += 1;
        self.in_flight = Some((self.next_req, now_ms));
        Some((master as NodeId, self.next_req))
    }

    fn answered(&mut self, req: u64, ok: bool) -> bool {
        if self.in_flight.is_none_or(|(r, _)| r != req) {
            return false;
        }
        self.in_flight = None;
        if !ok {
            self.master = None;
        }
        true
    }
}

/// The producer.
#[derive(Debug, Clone)]
pub struct Producer {
    rng: Rng,
    session: Session,
    next_msg_id: u64,
    interval_ms: u64,
    /// Sends the producer saw acknowledged.
    pub acknowledged: u64,
}

impl Producer {
    /// A producer sending every `interval_ms` on average.
    pub fn new(seed: u64, interval_ms: u64) -> Producer {
        Producer {
            rng: Rng::new(seed ^ 0x5052_4f44, Stream::Workload),
            session: Session::default(),
            next_msg_id: 1,
            interval_ms,
            acknowledged: 0,
        }
    }

    /// Sends the next message if nothing is in flight; the delay to the next tick.
    pub fn tick(&mut self, now_ms: u64, out: &mut Vec<(NodeId, Msg)>) -> u64 {
        if let Some((master, req)) = self.session.target(now_ms, out) {
            let msg_id = self.next_msg_id;
            self.next_msg_id += 1;
            let padding = self.rng.below(PADDING_MAX + 1) as usize;
            out.push((
                master,
                Msg::Send {
                    req,
                    msg_id,
                    padding,
                },
            ));
        }
        1 + self.rng.below(2 * self.interval_ms)
    }

    /// A reply.
    pub fn on_message(&mut self, msg: &Msg) {
        match msg {
            Msg::RouteReply { master } => self.session.master = *master,
            Msg::SendReply { req, outcome } if self.session.answered(*req, outcome.is_ok()) => {
                self.acknowledged += u64::from(outcome.is_ok());
            }
            _ => {}
        }
    }
}

/// The consumer (and admin).
#[derive(Debug, Clone)]
pub struct Consumer {
    rng: Rng,
    session: Session,
    next_offset: u64,
    generation: u64,
    reset_ppm: u32,
    /// The commit in flight: (request, generation, offset).
    commit_in_flight: Option<(u64, u64, u64)>,
    /// A commit not yet acknowledged: (generation, offset, resends so far).
    unacknowledged: Option<(u64, u64, u32)>,
    /// The highest (generation, offset) commit acknowledged to this consumer.
    pub acknowledged_commit: Option<(u64, u64)>,
    /// Messages consumed.
    pub consumed: u64,
    /// Resets sent.
    pub resets: u64,
}

impl Consumer {
    /// A consumer that issues a reset instead of a pull with probability `reset_ppm`.
    pub fn new(seed: u64, reset_ppm: u32) -> Consumer {
        Consumer {
            rng: Rng::new(seed ^ 0x434f_4e53, Stream::Workload),
            session: Session::default(),
            next_offset: 0,
            generation: 0,
            reset_ppm,
            commit_in_flight: None,
            unacknowledged: None,
            acknowledged_commit: None,
            consumed: 0,
            resets: 0,
        }
    }

    fn command(&self, kind: OffsetKind, offset: u64, generation: Option<u64>) -> OffsetCommand {
        OffsetCommand {
            kind,
            group: GROUP.into(),
            client_id: if kind == OffsetKind::Commit {
                "consumer"
            } else {
                "admin"
            }
            .into(),
            generation,
            entries: vec![OffsetEntry {
                topic: TOPIC.into(),
                queue_id: QUEUE_ID,
                offset,
            }],
            fenced_clients: Vec::new(),
            access_key: None,
        }
    }

    /// Pulls (or resets) if nothing is in flight; the delay to the next tick.
    pub fn tick(&mut self, now_ms: u64, out: &mut Vec<(NodeId, Msg)>) -> u64 {
        let Some((master, req)) = self.session.target(now_ms, out) else {
            return CONSUME_INTERVAL_MS;
        };
        if let Some((generation, offset, resends)) = self.unacknowledged {
            if generation == self.generation && resends < COMMIT_RETRIES_MAX {
                self.unacknowledged = Some((generation, offset, resends + 1));
                self.send_commit(master, req, generation, offset, out);
                return CONSUME_INTERVAL_MS;
            }
            self.unacknowledged = None;
        }
        if self.rng.chance(self.reset_ppm) {
            self.resets += 1;
            let offset = self.rng.below(self.next_offset + 1);
            let command = self.command(OffsetKind::Reset, offset, None);
            out.push((master, Msg::Offsets { req, command }));
        } else {
            let from = self.next_offset;
            out.push((master, Msg::Pull { req, from }));
        }
        CONSUME_INTERVAL_MS
    }

    /// A reply; may send the commit of what was read.
    pub fn on_message(&mut self, now_ms: u64, msg: &Msg, out: &mut Vec<(NodeId, Msg)>) {
        match msg {
            Msg::RouteReply { master } => self.session.master = *master,
            Msg::OffsetsReply { req, outcome } if self.session.answered(*req, outcome.is_ok()) => {
                self.on_offsets_reply(*req, outcome.is_ok());
            }
            Msg::PullReply { req, outcome } if self.session.answered(*req, outcome.is_ok()) => {
                if let Ok(pulled) = outcome {
                    self.on_pulled(now_ms, pulled, out);
                }
            }
            _ => {}
        }
    }

    fn on_pulled(&mut self, now_ms: u64, pulled: &Pulled, out: &mut Vec<(NodeId, Msg)>) {
        if pulled.generation != self.generation {
            // A reset moved the group: continue from where it put the queue.
            self.generation = pulled.generation;
            self.next_offset = pulled.stored.unwrap_or(0);
            return;
        }
        let Some((last, _)) = pulled.messages.last() else {
            return;
        };
        self.consumed += pulled.messages.len() as u64;
        self.next_offset = last + 1;
        // Not acknowledged until the reply says so (a lost reply leaves it to resend).
        self.unacknowledged = Some((self.generation, self.next_offset, 0));
        if let Some((master, req)) = self.session.target(now_ms, out) {
            self.send_commit(master, req, self.generation, self.next_offset, out);
        }
    }

    fn send_commit(
        &mut self,
        master: NodeId,
        req: u64,
        generation: u64,
        offset: u64,
        out: &mut Vec<(NodeId, Msg)>,
    ) {
        let command = self.command(OffsetKind::Commit, offset, Some(generation));
        self.commit_in_flight = Some((req, generation, offset));
        out.push((master, Msg::Offsets { req, command }));
    }

    /// The answer to request `req`: an acknowledged commit is remembered (and needs no
    /// resend); a refused one stays to be resent.
    fn on_offsets_reply(&mut self, req: u64, ok: bool) {
        let Some((sent, generation, offset)) = self.commit_in_flight else {
            return;
        };
        if sent != req {
            return;
        }
        self.commit_in_flight = None;
        if !ok {
            return;
        }
        let acked = (generation, offset);
        self.acknowledged_commit = Some(self.acknowledged_commit.map_or(acked, |a| a.max(acked)));
        if self.unacknowledged.is_some_and(|(g, o, _)| (g, o) == acked) {
            self.unacknowledged = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_routes_first_keeps_one_request_and_gives_up_after_the_timeout() {
        let mut producer = Producer::new(1, 50);
        let mut out = Vec::new();
        producer.tick(0, &mut out);
        assert!(matches!(out.as_slice(), [(CONTROLLER, Msg::Route)]));
        producer.on_message(&Msg::RouteReply { master: Some(2) });
        out.clear();
        producer.tick(1, &mut out);
        assert!(matches!(
            out.as_slice(),
            [(
                2,
                Msg::Send {
                    req: 1,
                    msg_id: 1,
                    ..
                }
            )]
        ));
        out.clear();
        producer.tick(2, &mut out);
        assert!(out.is_empty(), "one request in flight");
        producer.tick(3 + REQUEST_TIMEOUT_MS, &mut out);
        assert!(
            matches!(out.as_slice(), [(CONTROLLER, Msg::Route)]),
            "gave up, re-routes"
        );
        producer.on_message(&Msg::SendReply {
            req: 1,
            outcome: Ok(0),
        });
        assert_eq!(
            producer.acknowledged, 0,
            "a reply to an abandoned request is ignored"
        );
    }

    #[test]
    fn the_consumer_commits_what_it_read_and_follows_a_reset() {
        let mut consumer = Consumer::new(1, 0);
        let mut out = Vec::new();
        consumer.on_message(0, &Msg::RouteReply { master: Some(1) }, &mut out);
        consumer.tick(0, &mut out);
        let pulled = Pulled {
            messages: vec![(0, 10), (1, 11)],
            stored: None,
            generation: 0,
        };
        consumer.on_message(
            1,
            &Msg::PullReply {
                req: 1,
                outcome: Ok(pulled),
            },
            &mut out,
        );
        let Some((1, Msg::Offsets { command, .. })) = out.last() else {
            panic!("expected a commit, got {out:?}");
        };
        assert_eq!(
            (command.entries[0].offset, command.generation),
            (2, Some(0))
        );
        consumer.on_message(
            2,
            &Msg::OffsetsReply {
                req: 2,
                outcome: Ok(()),
            },
            &mut out,
        );
        consumer.tick(3, &mut out);
        let reset = Pulled {
            messages: vec![],
            stored: Some(1),
            generation: 1,
        };
        consumer.on_message(
            4,
            &Msg::PullReply {
                req: 3,
                outcome: Ok(reset),
            },
            &mut out,
        );
        assert_eq!((consumer.next_offset, consumer.generation), (1, 1));
    }

    #[test]
    fn an_unacknowledged_commit_is_resent_before_the_consumer_reads_on() {
        let mut consumer = Consumer::new(1, 0);
        let mut out = Vec::new();
        consumer.on_message(0, &Msg::RouteReply { master: Some(1) }, &mut out);
        consumer.tick(0, &mut out);
        let pulled = Pulled {
            messages: vec![(0, 10)],
            stored: None,
            generation: 0,
        };
        let reply = Msg::PullReply {
            req: 1,
            outcome: Ok(pulled),
        };
        consumer.on_message(1, &reply, &mut out);
        let refused = Msg::OffsetsReply {
            req: 2,
            outcome: Err("not replicated in time".into()),
        };
        consumer.on_message(2, &refused, &mut out);
        assert_eq!(consumer.acknowledged_commit, None);
        for resend in 0..COMMIT_RETRIES_MAX {
            out.clear();
            consumer.on_message(3, &Msg::RouteReply { master: Some(1) }, &mut out);
            consumer.tick(4, &mut out);
            let Some((1, Msg::Offsets { req, command })) = out.last() else {
                panic!("resend {resend}: expected the commit again, got {out:?}");
            };
            assert_eq!(command.entries[0].offset, 1);
            if resend + 1 < COMMIT_RETRIES_MAX {
                let refused = Msg::OffsetsReply {
                    req: *req,
                    outcome: Err("refused".into()),
                };
                consumer.on_message(5, &refused, &mut out);
            } else {
                let acked = Msg::OffsetsReply {
                    req: *req,
                    outcome: Ok(()),
                };
                consumer.on_message(5, &acked, &mut out);
            }
        }
        assert_eq!(consumer.acknowledged_commit, Some((0, 1)));
        out.clear();
        consumer.tick(6, &mut out);
        assert!(
            matches!(out.last(), Some((1, Msg::Pull { from: 1, .. }))),
            "reads on once acknowledged: {out:?}"
        );
    }
}
