//! One run: the event loop, fault injection, the quiesce and liveness phase, and the
//! failure report.
//!
//! Phases: a *safety* phase of `swarm.run_ms` virtual ms under faults (crashes and restarts
//! of brokers and the controller, symmetric and one-way partitions, and the network's and
//! disks' own faults), then *quiesce*: every link heals, the network stops dropping, the
//! disks stop failing, every node restarts. The *liveness* check then requires a write to be
//! acknowledged within [`LIVENESS_BOUND_MS`].
//!
//! Every loop is bounded: at most [`EVENTS_MAX`] events per run.

use std::fmt;

use crate::checker::Violation;
use crate::msg::Msg;
use crate::net::NodeId;
use crate::node::{Broker, CONTROLLER, HEARTBEAT_INTERVAL_MS};
use crate::swarm::{Swarm, REPLICA_COUNT};
use crate::trace::{Trace, TraceEvent, TRACE_TAIL_MAX};
use crate::workload::{CONSUMER, PRODUCER};
use crate::world::{Counters, Event, World};
use crate::InjectedBug;

/// Most events one run may take (a bound, never expected to be reached).
pub const EVENTS_MAX: u64 = 5_000_000;
/// How long after quiesce a write must be acknowledged, virtual ms.
pub const LIVENESS_BOUND_MS: u64 = 20_000;
/// Nodes faults pick from: the controller and the brokers, then the clients.
const NODES: [NodeId; 6] = [CONTROLLER, 1, 2, 3, PRODUCER, CONSUMER];

/// What a run is asked to do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimConfig {
    /// A deliberately injected bug (test-only switch).
    pub bug: InjectedBug,
    /// Overrides the swarm's safety-phase length, virtual ms.
    pub run_ms: Option<u64>,
    /// How many events a failure shows (default [`TRACE_TAIL_MAX`]).
    pub trace_tail: Option<usize>,
}

/// What a passing run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunStats {
    /// The seed.
    pub seed: u64,
    /// Its parameters.
    pub swarm: Swarm,
    /// Events processed.
    pub events: u64,
    /// Virtual time at the end, ms.
    pub virtual_ms: u64,
    /// The trace hash (determinism fingerprint).
    pub trace_hash: u64,
    /// Records acknowledged by masters.
    pub acknowledged: u64,
    /// Records served to the consumer.
    pub served: u64,
    /// Messages the consumer consumed.
    pub consumed: u64,
    /// Resets the admin sent.
    pub resets: u64,
    /// Fault and recovery counters.
    pub counters: Counters,
}

/// A broken property, with everything needed to replay it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The seed.
    pub seed: u64,
    /// Its parameters (boxed: a failure travels in a `Result`).
    pub swarm: Box<Swarm>,
    /// The broken property.
    pub violation: Violation,
    /// Virtual time of the failure, ms.
    pub at_ms: u64,
    /// The last events before it.
    pub trace: Vec<TraceEvent>,
    /// The trace hash up to the failure.
    pub trace_hash: u64,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "simulation seed {} failed at {} ms: {}",
            self.seed, self.at_ms, self.violation
        )?;
        writeln!(f, "  swarm: {}", self.swarm)?;
        writeln!(
            f,
            "  replay: cargo run -p ferromq-sim --release -- --seed {}",
            self.seed
        )?;
        writeln!(f, "  last {} events:", self.trace.len())?;
        for event in &self.trace {
            writeln!(f, "    {:>7} ms  {}", event.at_ms, event.what)?;
        }
        Ok(())
    }
}

/// Runs one seed.
///
/// # Errors
/// The first broken property, as a [`Failure`] with the seed, the swarm and the trace tail.
pub fn run_seed(seed: u64, config: &SimConfig) -> Result<RunStats, Failure> {
    let mut swarm = Swarm::from_seed(seed);
    if let Some(run_ms) = config.run_ms {
        swarm.run_ms = run_ms;
    }
    let mut world = World::new(seed, swarm.clone(), config.bug);
    world.trace = Trace::with_tail(config.trace_tail.unwrap_or(TRACE_TAIL_MAX));
    start(&mut world);
    let mut events = 0u64;
    let outcome = drive(&mut world, &mut events);
    let fail = |world: &World, violation| Failure {
        seed,
        swarm: Box::new(swarm.clone()),
        violation,
        at_ms: world.now_ms,
        trace: world.trace.tail(),
        trace_hash: world.trace.hash(),
    };
    outcome
        .and_then(|()| final_checks(&world))
        .map_err(|violation| fail(&world, violation))?;
    Ok(RunStats {
        seed,
        swarm: swarm.clone(),
        events,
        virtual_ms: world.now_ms,
        trace_hash: world.trace.hash(),
        acknowledged: world.checker.acknowledged,
        served: world.checker.served,
        consumed: world.consumer.consumed,
        resets: world.consumer.resets,
        counters: world.counters.clone(),
    })
}

fn start(world: &mut World) {
    for id in 1..=REPLICA_COUNT {
        world.schedule(id * 7, Event::BrokerTick { id, incarnation: 0 });
    }
    let scan = world.controller.scan_interval_ms();
    world.schedule(scan, Event::ControllerScan);
    world.schedule(50, Event::ProducerTick);
    world.schedule(80, Event::ConsumerTick);
    let first_fault = world.swarm.fault_interval_ms;
    world.schedule(first_fault, Event::Fault);
    let run_ms = world.swarm.run_ms;
    world.schedule(run_ms, Event::Quiesce);
}

/// The event loop: until liveness is shown, its bound passes, or a property breaks.
fn drive(world: &mut World, events: &mut u64) -> Result<(), Violation> {
    let deadline = world.swarm.run_ms + LIVENESS_BOUND_MS;
    while *events < EVENTS_MAX {
        let Some(event) = world.next_event() else {
            break;
        };
        *events += 1;
        if world.now_ms > deadline || world.acked_after_heal_ms.is_some() {
            break;
        }
        step(world, event)?;
        world.check_step()?;
    }
    if world.acked_after_heal_ms.is_none() {
        let waited_ms = world.now_ms.saturating_sub(world.swarm.run_ms);
        return Err(Violation::NoProgress { waited_ms });
    }
    Ok(())
}

/// After the liveness phase: the master holds every committed record and every acknowledged
/// commit.
fn final_checks(world: &World) -> Result<(), Violation> {
    let group = world.controller.group();
    let up = world.up_brokers();
    let master = up.iter().find(|b| Some(b.id) == group.master_id);
    match master {
        Some(master) => {
            world.checker.promoted(master, group.master_epoch)?;
            world
                .checker
                .commit_held(master, world.consumer.acknowledged_commit)
        }
        None => Ok(()),
    }
}

fn step(world: &mut World, event: Event) -> Result<(), Violation> {
    let now = world.now_ms;
    match event {
        Event::Deliver { from, to, msg } => {
            world
                .trace
                .record(now, format!("{from}->{to} {}", msg.describe()));
            deliver(world, from, to, msg)?;
        }
        Event::BrokerTick { id, incarnation } => {
            if incarnation == world.incarnation(id) {
                world.with_broker(id, |b: &mut Broker, now, out| b.tick(now, out))?;
                world.schedule(HEARTBEAT_INTERVAL_MS, Event::BrokerTick { id, incarnation });
            }
        }
        Event::FlushDone { id, incarnation } => {
            if incarnation == world.incarnation(id) {
                world.trace.record(now, format!("flush b{id}"));
                world.with_broker(id, |b: &mut Broker, now, out| b.on_flush_done(now, out))?;
            }
        }
        Event::ControllerScan => scan(world),
        Event::ProducerTick => {
            let mut sends = Vec::new();
            let delay = world.producer.tick(now, &mut sends);
            send_all(world, PRODUCER, sends);
            world.schedule(delay, Event::ProducerTick);
        }
        Event::ConsumerTick => {
            let mut sends = Vec::new();
            let delay = world.consumer.tick(now, &mut sends);
            send_all(world, CONSUMER, sends);
            world.schedule(delay, Event::ConsumerTick);
        }
        Event::Fault => inject_fault(world),
        Event::Restart { node } => restart(world, node),
        Event::HealLink { a, b } => {
            world.trace.record(now, format!("heal {a}<->{b}"));
            world.net.heal_link(a, b);
        }
        Event::Quiesce => quiesce(world),
        Event::Reset { node, peer, conn } => {
            world
                .trace
                .record(now, format!("reset {node}<-{peer} ha#{conn}"));
            if World::is_broker(node) {
                let msg = Msg::HaClosed { conn };
                world.with_broker(node as u64, |b: &mut Broker, now, out| {
                    b.on_message(now, peer, &msg, out)
                })?;
            }
        }
    }
    Ok(())
}

fn send_all(world: &mut World, from: NodeId, sends: Vec<(NodeId, Msg)>) {
    for (to, msg) in sends {
        world.send(from, to, msg);
    }
}

fn deliver(world: &mut World, from: NodeId, to: NodeId, msg: Msg) -> Result<(), Violation> {
    if world.net.is_cut(from, to) {
        world.counters.messages_lost += 1;
        if let Msg::Ha { conn, .. } = msg {
            world.reset_connection(from, to, conn);
        }
        return Ok(());
    }
    if World::is_broker(to) {
        return world.with_broker(to as u64, |b: &mut Broker, now, out| {
            b.on_message(now, from, &msg, out)
        });
    }
    world.deliver_other(from, to, &msg);
    Ok(())
}

fn scan(world: &mut World) {
    let now = world.now_ms;
    if world.controller.up {
        if let Some(info) = world.controller.scan(now) {
            world.trace.record(
                now,
                format!(
                    "elected {:?} epoch {}",
                    info.master_broker_id, info.master_epoch
                ),
            );
            // Production notifies every member (NOTIFY_BROKER_ROLE_CHANGED).
            for id in 1..=REPLICA_COUNT {
                world.send(CONTROLLER, id as NodeId, Msg::Notice);
            }
        }
    }
    let interval = world.controller.scan_interval_ms();
    world.schedule(interval, Event::ControllerScan);
}

/// One fault: a crash (restarted later) or a partition (healed later).
fn inject_fault(world: &mut World) {
    if world.healed_at_ms.is_some() {
        return;
    }
    let interval = world.swarm.fault_interval_ms;
    let next = 1 + world.faults.below(2 * interval);
    world.schedule(next, Event::Fault);
    if world.faults.chance(world.swarm.crash_ppm) {
        // The controller is one node in seven; each broker two.
        let node = world.faults.pick(&[CONTROLLER, 1, 1, 2, 2, 3, 3]);
        crash(world, node);
        let downtime = world.faults.between(200, 3_000);
        world.schedule(downtime, Event::Restart { node });
        return;
    }
    let a = world.faults.pick(&NODES);
    let b = world.faults.pick(&NODES);
    let duration = world.faults.between(300, 4_000);
    let now = world.now_ms;
    match world.faults.below(3) {
        _ if a == b => {}
        0 => {
            world.trace.record(now, format!("partition {a}<->{b}"));
            world.net.cut_both_ways(a, b);
            world.counters.links_cut += 2;
            world.schedule(duration, Event::HealLink { a, b });
        }
        1 => {
            world
                .trace
                .record(now, format!("partition {a}->{b} one way"));
            world.net.cut_one_way(a, b);
            world.counters.links_cut += 1;
            world.schedule(duration, Event::HealLink { a, b });
        }
        _ => {
            world.trace.record(now, format!("isolate {a}"));
            for other in NODES.into_iter().filter(|n| *n != a) {
                world.net.cut_both_ways(a, other);
                world.counters.links_cut += 2;
                world.schedule(duration, Event::HealLink { a, b: other });
            }
        }
    }
}

fn crash(world: &mut World, node: NodeId) {
    if node == CONTROLLER {
        if world.controller.up {
            world.controller.crash();
            world.counters.controller_crashes += 1;
            world.trace.record(world.now_ms, "crash controller".into());
        }
        return;
    }
    if World::is_broker(node) {
        world.crash_broker(node as u64);
    }
}

fn restart(world: &mut World, node: NodeId) {
    if node == CONTROLLER {
        if !world.controller.up {
            world.controller.restart(world.now_ms);
            world
                .trace
                .record(world.now_ms, "restart controller".into());
        }
        return;
    }
    if World::is_broker(node) {
        world.restart_broker(node as u64);
    }
}

/// The liveness phase begins: heal, calm, restart everything.
fn quiesce(world: &mut World) {
    let now = world.now_ms;
    world.trace.record(now, "quiesce".into());
    world.healed_at_ms = Some(now);
    world.net.heal_all();
    world.net.calm();
    for node in [CONTROLLER, 1, 2, 3] {
        restart(world, node);
    }
    for slot in &mut world.brokers {
        match slot {
            crate::world::Slot::Up(b) => b.log.with_disk(|d| d.calm()),
            crate::world::Slot::Down(d) => d.calm(),
        }
    }
}
