//! The simulated network between the controller, the replicas and the clients.
//!
//! Fault model: each datagram-like message (controller and client requests) is independently
//! dropped, delayed (base latency plus a random jitter, which reorders messages), or
//! delivered twice. HA frames travel on TCP connections: they arrive in order and once, and a
//! loss (a drop, or a cut link) resets the connection at both ends instead — TCP retransmits
//! or gives up, it never skips a segment ([`SimNet::route_stream`]). A directed link can be cut
//! (a symmetric partition cuts both directions, an asymmetric one only one). A link cut
//! while a message is in flight loses the message. Nothing is corrupted: frames carry their
//! own checks in production (TCP and the HA codec), and the log's records carry CRCs that
//! the disk model exercises instead.
//!
//! Invariants:
//! 1. Every decision is drawn from the network stream of the seed.
//! 2. A message is delivered at most twice, never before `latency_ms` has passed.

use std::collections::BTreeSet;

use crate::rng::{Rng, Stream};

/// A node of the simulation: the controller, a replica or a client.
pub type NodeId = usize;

/// The network's fault rates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetFaults {
    /// Probability that a message is lost.
    pub drop_ppm: u32,
    /// Probability that a message arrives twice.
    pub duplicate_ppm: u32,
    /// Base one-way latency.
    pub latency_ms: u64,
    /// Random extra delay, at most.
    pub jitter_ms: u64,
}

/// The network: fault rates and cut links.
#[derive(Debug, Clone)]
pub struct SimNet {
    faults: NetFaults,
    rng: Rng,
    /// Cut directed links `(from, to)`.
    cut: BTreeSet<(NodeId, NodeId)>,
}

impl SimNet {
    /// A network with these rates and no cut link.
    pub fn new(seed: u64, faults: NetFaults) -> SimNet {
        SimNet {
            faults,
            rng: Rng::new(seed, Stream::Network),
            cut: BTreeSet::new(),
        }
    }

    /// The delays after which copies of a message sent now from `from` to `to` arrive: none
    /// (dropped, or the link is cut), one, or two (duplicated).
    pub fn route(&mut self, from: NodeId, to: NodeId) -> Vec<u64> {
        if self.is_cut(from, to) || self.rng.chance(self.faults.drop_ppm) {
            return Vec::new();
        }
        let mut delays = vec![self.delay()];
        if self.rng.chance(self.faults.duplicate_ppm) {
            delays.push(self.delay());
        }
        delays
    }

    /// The delay of a frame on a connection `from -> to`, or `None` when it is lost (the
    /// connection resets). No duplicates; order is kept by the caller.
    pub fn route_stream(&mut self, from: NodeId, to: NodeId) -> Option<u64> {
        if self.is_cut(from, to) || self.rng.chance(self.faults.drop_ppm) {
            return None;
        }
        Some(self.delay())
    }

    fn delay(&mut self) -> u64 {
        self.faults.latency_ms + self.rng.below(self.faults.jitter_ms + 1)
    }

    /// Whether the link `from -> to` is cut now (checked again at delivery).
    pub fn is_cut(&self, from: NodeId, to: NodeId) -> bool {
        self.cut.contains(&(from, to))
    }

    /// Cuts `from -> to` (one direction only).
    pub fn cut_one_way(&mut self, from: NodeId, to: NodeId) {
        self.cut.insert((from, to));
    }

    /// Cuts both directions between `a` and `b`.
    pub fn cut_both_ways(&mut self, a: NodeId, b: NodeId) {
        self.cut.insert((a, b));
        self.cut.insert((b, a));
    }

    /// Restores both directions between `a` and `b`.
    pub fn heal_link(&mut self, a: NodeId, b: NodeId) {
        self.cut.remove(&(a, b));
        self.cut.remove(&(b, a));
    }

    /// Restores every link.
    pub fn heal_all(&mut self) {
        self.cut.clear();
    }

    /// How many directed links are cut.
    pub fn cut_count(&self) -> usize {
        self.cut.len()
    }

    /// Stops dropping and duplicating (the liveness phase); delays stay.
    pub fn calm(&mut self) {
        self.faults.drop_ppm = 0;
        self.faults.duplicate_ppm = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::PPM;

    fn faults(drop_ppm: u32, duplicate_ppm: u32) -> NetFaults {
        NetFaults {
            drop_ppm,
            duplicate_ppm,
            latency_ms: 3,
            jitter_ms: 10,
        }
    }

    #[test]
    fn cut_links_drop_in_their_direction_only() {
        let mut net = SimNet::new(1, faults(0, 0));
        net.cut_one_way(1, 2);
        assert!(net.route(1, 2).is_empty());
        assert_eq!(net.route(2, 1).len(), 1);
        net.cut_both_ways(3, 4);
        assert!(net.route(3, 4).is_empty() && net.route(4, 3).is_empty());
        assert_eq!(net.cut_count(), 3);
        net.heal_link(4, 3);
        assert_eq!(net.route(3, 4).len(), 1);
        net.heal_all();
        assert_eq!(net.route(1, 2).len(), 1);
    }

    #[test]
    fn delays_stay_in_bounds_and_rates_show() {
        let mut net = SimNet::new(9, faults(PPM / 10, PPM / 10));
        let (mut dropped, mut doubled) = (0, 0);
        for _ in 0..10_000 {
            let delays = net.route(0, 1);
            dropped += usize::from(delays.is_empty());
            doubled += usize::from(delays.len() == 2);
            assert!(delays.iter().all(|d| (3..=13).contains(d)));
        }
        assert!((700..1300).contains(&dropped), "{dropped}");
        assert!((600..1200).contains(&doubled), "{doubled}");
        net.calm();
        assert!((0..1000).all(|_| net.route(0, 1).len() == 1));
        assert!((0..1000).all(|_| net.route_stream(0, 1).is_some()));
        net.cut_one_way(0, 1);
        assert_eq!(net.route_stream(0, 1), None);
    }
}
