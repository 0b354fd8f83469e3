//! The world of one run: the nodes, the network, the scheduler, and the routing of messages
//! and of the brokers' reports to the checker.
//!
//! Invariants:
//! 1. Events run in (virtual time, sequence) order; the sequence number breaks ties in
//!    scheduling order, so the order is a function of the seed alone.
//! 2. A timer of a crashed broker incarnation is ignored (its process is gone).
//! 3. A message to a crashed node, or over a link cut at delivery time, is lost.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::checker::{Checker, Violation};
use crate::controller::SimController;
use crate::disk::{DiskFaults, SimDisk};
use crate::log::SimLog;
use crate::msg::Msg;
use crate::net::{NetFaults, NodeId, SimNet};
use crate::node::{Broker, Note, Out, CONTROLLER};
use crate::rng::{Rng, Stream};
use crate::swarm::{Swarm, REPLICA_COUNT};
use crate::trace::Trace;
use crate::workload::{Consumer, Producer, CONSUMER, PRODUCER};
use crate::InjectedBug;

/// Something scheduled.
#[derive(Debug, Clone)]
pub enum Event {
    /// A message arrives.
    Deliver {
        /// Sender.
        from: NodeId,
        /// Receiver.
        to: NodeId,
        /// The message.
        msg: Msg,
    },
    /// A broker's periodic work.
    BrokerTick {
        /// The broker.
        id: u64,
        /// Its incarnation when scheduled.
        incarnation: u64,
    },
    /// A broker's fsync completes.
    FlushDone {
        /// The broker.
        id: u64,
        /// Its incarnation when scheduled.
        incarnation: u64,
    },
    /// The controller's failure detector.
    ControllerScan,
    /// The producer's next send.
    ProducerTick,
    /// The consumer's next poll.
    ConsumerTick,
    /// The next fault injection.
    Fault,
    /// A crashed node restarts.
    Restart {
        /// The node.
        node: NodeId,
    },
    /// A cut link is restored.
    HealLink {
        /// One end.
        a: NodeId,
        /// The other.
        b: NodeId,
    },
    /// Faults stop; everything heals and restarts (the liveness phase begins).
    Quiesce,
    /// A node's TCP stack gives up on connection `conn` to `peer` (a lost HA frame).
    Reset {
        /// The node told.
        node: NodeId,
        /// Its peer.
        peer: NodeId,
        /// The connection.
        conn: u64,
    },
}

/// How long a TCP stack takes to give up on a connection that lost a segment, virtual ms.
pub const RESET_DETECTION_MS: u64 = 200;

#[derive(Debug, Clone)]
struct Scheduled {
    at_ms: u64,
    seq: u64,
    event: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at_ms, self.seq) == (other.at_ms, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at_ms, self.seq).cmp(&(other.at_ms, other.seq))
    }
}

/// A broker's process: running, or crashed with only its disk left.
#[derive(Debug)]
pub enum Slot {
    /// Running.
    Up(Box<Broker>),
    /// Crashed.
    Down(SimDisk),
}

/// Counters of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Broker crashes (injected or poisoned).
    pub crashes: u64,
    /// Of which poisoned by a failed fsync.
    pub poisoned: u64,
    /// Controller crashes.
    pub controller_crashes: u64,
    /// Links cut.
    pub links_cut: u64,
    /// Promotions to master.
    pub promotions: u64,
    /// Terms a restarted master ended by asking for a new election (`RoleAction::Renew`)
    /// that the controller applied.
    pub renewals: u64,
    /// Divergent suffixes truncated.
    pub truncations: u64,
    /// Bytes recovery cut from crashed logs (lost or torn tails that survived).
    pub recovery_cut_bytes: u64,
    /// Unsynced bytes lost at crashes.
    pub lost_unsynced_bytes: u64,
    /// Messages lost by the network or to a dead node.
    pub messages_lost: u64,
}

/// The world of one run.
#[derive(Debug)]
pub struct World {
    /// Virtual now.
    pub now_ms: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<Scheduled>>,
    /// The swarm parameters.
    pub swarm: Swarm,
    pub(crate) net: SimNet,
    pub(crate) faults: Rng,
    /// The controller.
    pub controller: SimController,
    /// The brokers, by id - 1.
    pub brokers: Vec<Slot>,
    incarnations: Vec<u64>,
    pub(crate) producer: Producer,
    pub(crate) consumer: Consumer,
    /// The checker.
    pub checker: Checker,
    /// The trace.
    pub trace: Trace,
    /// Counters.
    pub counters: Counters,
    /// When the liveness phase began.
    pub healed_at_ms: Option<u64>,
    /// The first acknowledgement after it began.
    pub acked_after_heal_ms: Option<u64>,
    bug: InjectedBug,
    /// Delivery time of the last frame of each connection `(from, to, conn)`: frames arrive
    /// in order.
    stream_clock: std::collections::BTreeMap<(NodeId, NodeId, u64), u64>,
}

impl World {
    /// A fresh world for `seed`.
    pub fn new(seed: u64, swarm: Swarm, bug: InjectedBug) -> World {
        let net = SimNet::new(
            seed,
            NetFaults {
                drop_ppm: swarm.drop_ppm,
                duplicate_ppm: swarm.duplicate_ppm,
                latency_ms: swarm.latency_ms,
                jitter_ms: swarm.jitter_ms,
            },
        );
        let disk_faults = DiskFaults {
            fsync_fail_ppm: swarm.fsync_fail_ppm,
            keep_unsynced_ppm: swarm.keep_unsynced_ppm,
            tear_ppm: swarm.tear_ppm,
            epoch_write_fail_ppm: swarm.epoch_write_fail_ppm,
            fsync_ms_max: swarm.fsync_ms_max,
        };
        let brokers = (1..=REPLICA_COUNT)
            .map(|id| {
                let (log, _) = SimLog::open(SimDisk::new(seed, id, disk_faults));
                Slot::Up(Box::new(Broker::new(
                    id,
                    log,
                    swarm.min_in_sync_replicas,
                    bug,
                )))
            })
            .collect();
        World {
            now_ms: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            net,
            faults: Rng::new(seed, Stream::Faults),
            controller: SimController::new(0, bug),
            brokers,
            incarnations: vec![0; REPLICA_COUNT as usize],
            producer: Producer::new(seed, swarm.produce_interval_ms),
            consumer: Consumer::new(seed, swarm.reset_ppm),
            checker: Checker::default(),
            trace: Trace::default(),
            counters: Counters::default(),
            healed_at_ms: None,
            acked_after_heal_ms: None,
            swarm,
            bug,
            stream_clock: Default::default(),
        }
    }

    /// Schedules `event` after `delay_ms`.
    pub fn schedule(&mut self, delay_ms: u64, event: Event) {
        self.seq += 1;
        self.queue.push(Reverse(Scheduled {
            at_ms: self.now_ms + delay_ms,
            seq: self.seq,
            event,
        }));
    }

    /// The next event, with virtual time moved to it.
    pub fn next_event(&mut self) -> Option<Event> {
        let Reverse(next) = self.queue.pop()?;
        debug_assert!(next.at_ms >= self.now_ms, "virtual time never goes back");
        self.now_ms = next.at_ms;
        Some(next.event)
    }

    /// Sends `msg` through the network.
    pub fn send(&mut self, from: NodeId, to: NodeId, msg: Msg) {
        if let Msg::Ha { conn, .. } = msg {
            return self.send_on_connection(from, to, conn, msg);
        }
        let delays = self.net.route(from, to);
        if delays.is_empty() {
            self.counters.messages_lost += 1;
        }
        for delay in delays {
            let msg = msg.clone();
            self.schedule(delay, Event::Deliver { from, to, msg });
        }
    }

    /// Sends an HA frame: in order after the connection's previous frame, or lost with the
    /// connection reset at both ends.
    fn send_on_connection(&mut self, from: NodeId, to: NodeId, conn: u64, msg: Msg) {
        let Some(delay) = self.net.route_stream(from, to) else {
            self.counters.messages_lost += 1;
            self.reset_connection(from, to, conn);
            return;
        };
        let earliest = self
            .stream_clock
            .get(&(from, to, conn))
            .copied()
            .unwrap_or(0);
        let at_ms = (self.now_ms + delay).max(earliest);
        self.stream_clock.insert((from, to, conn), at_ms);
        self.schedule(at_ms - self.now_ms, Event::Deliver { from, to, msg });
    }

    /// Both ends of `conn` learn it is gone.
    pub fn reset_connection(&mut self, a: NodeId, b: NodeId, conn: u64) {
        self.schedule(
            RESET_DETECTION_MS,
            Event::Reset {
                node: a,
                peer: b,
                conn,
            },
        );
        self.schedule(
            RESET_DETECTION_MS,
            Event::Reset {
                node: b,
                peer: a,
                conn,
            },
        );
    }

    /// The running brokers.
    pub fn up_brokers(&self) -> Vec<&Broker> {
        running(&self.brokers)
    }

    fn broker_mut(&mut self, id: u64) -> Option<&mut Broker> {
        match self.brokers.get_mut(id as usize - 1)? {
            Slot::Up(b) => Some(b),
            Slot::Down(_) => None,
        }
    }

    /// The current incarnation of broker `id`.
    pub fn incarnation(&self, id: u64) -> u64 {
        self.incarnations[id as usize - 1]
    }

    /// Runs a broker handler and applies what it asks.
    pub fn with_broker(
        &mut self,
        id: u64,
        handler: impl FnOnce(&mut Broker, u64, &mut Out),
    ) -> Result<(), Violation> {
        let now = self.now_ms;
        let mut out = Out::default();
        let Some(broker) = self.broker_mut(id) else {
            return Ok(());
        };
        handler(broker, now, &mut out);
        self.apply(id, out)
    }

    fn apply(&mut self, id: u64, out: Out) -> Result<(), Violation> {
        for (to, msg) in out.sends {
            self.send(id as NodeId, to, msg);
        }
        if let Some(delay) = out.flush_in_ms {
            let incarnation = self.incarnation(id);
            self.schedule(delay, Event::FlushDone { id, incarnation });
        }
        for note in out.notes {
            self.report(id, note)?;
        }
        Ok(())
    }

    /// Hands a broker's note to the checker.
    fn report(&mut self, id: u64, note: Note) -> Result<(), Violation> {
        let now = self.now_ms;
        match note {
            Note::Acked { record } => {
                if self.healed_at_ms.is_some_and(|h| now > h) && self.acked_after_heal_ms.is_none()
                {
                    self.acked_after_heal_ms = Some(now);
                }
                let up = running(&self.brokers);
                self.checker.acked(now, id, &record, &up)
            }
            Note::Served { records, limit } => {
                let set = self.controller.group().sync_state_set.clone();
                let up = running(&self.brokers);
                let members: Vec<&Broker> =
                    up.iter().copied().filter(|b| set.contains(&b.id)).collect();
                let Some(server) = up.iter().copied().find(|b| b.id == id) else {
                    return Ok(());
                };
                self.checker.served(server, &records, limit, &members)
            }
            Note::Truncated {
                to,
                dispatched_before,
            } => {
                // A cut may go below what a restarted replica dispatched at open: that is
                // not visible to consumers (only masters serve), and what was committed is
                // checked at every promotion instead.
                self.counters.truncations += 1;
                let what = format!("b{id} truncated to {to} (dispatched {dispatched_before})");
                self.trace.record(now, what);
                Ok(())
            }
            Note::Promoted { epoch } => {
                self.counters.promotions += 1;
                let up = self.up_brokers();
                let master = up.iter().find(|b| b.id == id).copied();
                let acknowledged = self.consumer.acknowledged_commit;
                master.map_or(Ok(()), |m| {
                    self.checker.promoted(m, epoch)?;
                    self.checker.commit_held(m, acknowledged)
                })
            }
            Note::Poisoned { .. } => {
                self.counters.poisoned += 1;
                self.crash_broker(id);
                Ok(())
            }
        }
    }

    /// The per-step checks.
    pub fn check_step(&mut self) -> Result<(), Violation> {
        let now = self.now_ms;
        let group = self.controller.group().clone();
        let up = running(&self.brokers);
        self.checker.step(now, &up, &group)
    }

    /// Crashes broker `id`: its disk loses (or tears) what was not fsynced.
    pub fn crash_broker(&mut self, id: u64) {
        let slot = &mut self.brokers[id as usize - 1];
        let Slot::Up(_) = slot else {
            return;
        };
        let Slot::Up(broker) = std::mem::replace(slot, Slot::Down(SimDisk::blank())) else {
            return;
        };
        let mut disk = broker.log.into_disk();
        let loss = disk.crash();
        self.counters.crashes += 1;
        self.counters.lost_unsynced_bytes += loss.lost;
        self.brokers[id as usize - 1] = Slot::Down(disk);
        self.incarnations[id as usize - 1] += 1;
        self.trace
            .record(self.now_ms, format!("crash b{id} {loss:?}"));
    }

    /// Restarts broker `id` on its disk (recovery cuts torn tails).
    pub fn restart_broker(&mut self, id: u64) {
        let slot = &mut self.brokers[id as usize - 1];
        if let Slot::Up(_) = slot {
            return;
        }
        let Slot::Down(disk) = std::mem::replace(slot, Slot::Down(SimDisk::blank())) else {
            return;
        };
        let (log, cut) = SimLog::open(disk);
        self.counters.recovery_cut_bytes += cut.bytes_cut;
        let broker = Broker::new(id, log, self.swarm.min_in_sync_replicas, self.bug);
        self.brokers[id as usize - 1] = Slot::Up(Box::new(broker));
        self.trace
            .record(self.now_ms, format!("restart b{id} {cut:?}"));
        let incarnation = self.incarnation(id);
        self.schedule(1, Event::BrokerTick { id, incarnation });
    }

    /// Whether `node` is a broker id.
    pub fn is_broker(node: NodeId) -> bool {
        (1..=REPLICA_COUNT as NodeId).contains(&node)
    }

    /// Delivers a message to a controller or client.
    pub fn deliver_other(&mut self, from: NodeId, to: NodeId, msg: &Msg) {
        let now = self.now_ms;
        let mut sends = Vec::new();
        match to {
            CONTROLLER if self.controller.up => {
                let reply = match msg {
                    Msg::Heartbeat {
                        request,
                        sent_at_ms,
                    } => Some(self.controller.on_heartbeat(now, request, *sent_at_ms)),
                    Msg::Alter(request) => Some(self.controller.on_alter(request.clone())),
                    Msg::Renew(request) => {
                        let reply = self.controller.on_renew(now, request);
                        if matches!(reply, Msg::RenewReply { outcome: Ok(_), .. }) {
                            self.counters.renewals += 1;
                        }
                        Some(reply)
                    }
                    Msg::Route => Some(self.controller.route()),
                    _ => None,
                };
                sends.extend(reply.map(|r| (from, r)));
            }
            PRODUCER => self.producer.on_message(msg),
            CONSUMER => self.consumer.on_message(now, msg, &mut sends),
            _ => self.counters.messages_lost += 1,
        }
        for (dest, reply) in sends {
            self.send(to, dest, reply);
        }
    }
}

/// The running brokers of `slots`.
fn running(slots: &[Slot]) -> Vec<&Broker> {
    slots
        .iter()
        .filter_map(|slot| match slot {
            Slot::Up(b) => Some(&**b),
            Slot::Down(_) => None,
        })
        .collect()
}
