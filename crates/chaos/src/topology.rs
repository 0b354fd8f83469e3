//! What a chaos run runs on (`--topology`, `--role`) and the names faults use for its parts:
//! node [`Victim`]s, chosen by role when the fault strikes, and proxied [`Link`]s.
//!
//! | Topology | Name servers | Controllers | Broker groups × replicas |
//! |---|---|---|---|
//! | `single` | in `ferromq standalone` | — | 1 × 1 (the standalone broker) |
//! | `replicated` | 1 | 1 | 1 × 3 |
//! | `ha` | 2 | 3 (a Raft group) | 2 × 3 |

use std::fmt;
use std::str::FromStr;

/// `--topology`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Topology {
    /// `ferromq standalone` behind one proxy.
    Single,
    /// One controller, one name server, one group of a master and two slaves.
    Replicated,
    /// Three controllers, two name servers, two groups of three replicas.
    Ha,
}

impl Topology {
    /// Every topology, in `--topology` order.
    pub const ALL: [Topology; 3] = [Topology::Single, Topology::Replicated, Topology::Ha];

    /// The flag spelling.
    pub fn name(self) -> &'static str {
        match self {
            Topology::Single => "single",
            Topology::Replicated => "replicated",
            Topology::Ha => "ha",
        }
    }

    /// Name servers started.
    pub fn namesrvs(self) -> usize {
        match self {
            Topology::Single | Topology::Replicated => 1,
            Topology::Ha => 2,
        }
    }

    /// Controllers started (a Raft group when more than one).
    pub fn controllers(self) -> usize {
        match self {
            Topology::Single => 0,
            Topology::Replicated => 1,
            Topology::Ha => 3,
        }
    }

    /// Broker groups.
    pub fn groups(self) -> usize {
        match self {
            Topology::Single | Topology::Replicated => 1,
            Topology::Ha => 2,
        }
    }

    /// Brokers per group.
    pub fn replicas(self) -> usize {
        match self {
            Topology::Single => 1,
            Topology::Replicated | Topology::Ha => 3,
        }
    }
}

/// A `--topology` value that names none.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown topology {0:?} (expected single, replicated or ha)")]
pub struct UnknownTopology(pub String);

impl FromStr for Topology {
    type Err = UnknownTopology;

    fn from_str(text: &str) -> Result<Topology, UnknownTopology> {
        Topology::ALL
            .into_iter()
            .find(|t| t.name() == text.trim())
            .ok_or_else(|| UnknownTopology(text.to_string()))
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `--role`: how an elected master acknowledges writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MasterMode {
    /// SYNC_MASTER: acknowledged once every in-sync replica holds the write.
    #[default]
    Sync,
    /// ASYNC_MASTER: acknowledged by the master alone; a failover may lose the unreplicated
    /// tail.
    Async,
}

impl MasterMode {
    /// The flag spelling.
    pub fn name(self) -> &'static str {
        match self {
            MasterMode::Sync => "sync",
            MasterMode::Async => "async",
        }
    }

    /// RocketMQ's `brokerRole` value.
    pub fn broker_role(self) -> &'static str {
        match self {
            MasterMode::Sync => "SYNC_MASTER",
            MasterMode::Async => "ASYNC_MASTER",
        }
    }
}

/// A proxied connection kind a partition cuts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Link {
    /// Producers, consumers and admin → a broker's remoting port.
    ClientBroker,
    /// Slaves → a broker's HA listener (cuts replication when the broker is master).
    Ha,
    /// A broker → every controller.
    BrokerController,
    /// A controller ↔ every other controller (both directions of each pair).
    ControllerController,
    /// A broker → every name server (registration and heartbeats).
    BrokerNamesrv,
}

impl Link {
    /// Every link.
    pub const ALL: [Link; 5] = [
        Link::ClientBroker,
        Link::Ha,
        Link::BrokerController,
        Link::ControllerController,
        Link::BrokerNamesrv,
    ];

    /// The name in fault records (`Fault::Partition { link }`).
    pub fn name(self) -> &'static str {
        match self {
            Link::ClientBroker => "client-broker",
            Link::Ha => "ha",
            Link::BrokerController => "broker-controller",
            Link::ControllerController => "controller-controller",
            Link::BrokerNamesrv => "broker-namesrv",
        }
    }

    /// The links a topology has.
    pub fn of(topology: Topology) -> Vec<Link> {
        match topology {
            Topology::Single => vec![Link::ClientBroker],
            Topology::Replicated => vec![
                Link::ClientBroker,
                Link::Ha,
                Link::BrokerController,
                Link::BrokerNamesrv,
            ],
            Topology::Ha => Link::ALL.to_vec(),
        }
    }
}

/// Which node a fault strikes, resolved to a node when it is injected (the master of a group
/// is whoever the controller names at that moment).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Victim {
    /// The `ferromq standalone` process.
    Standalone,
    /// The master of broker group `group`.
    Master {
        /// Group index.
        group: usize,
    },
    /// A slave of broker group `group`: the `pick`-th (modulo their number) of the group's
    /// brokers that are not its master.
    Slave {
        /// Group index.
        group: usize,
        /// Which slave.
        pick: usize,
    },
    /// The controllers' Raft leader.
    ControllerLeader,
    /// A controller that is not the leader: the `pick`-th (modulo their number).
    ControllerFollower {
        /// Which follower.
        pick: usize,
    },
    /// Name server `index` (modulo their number).
    Namesrv {
        /// Which name server.
        index: usize,
    },
}

impl fmt::Display for Victim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Victim::Standalone => f.write_str("standalone"),
            Victim::Master { group } => write!(f, "master of broker-{group}"),
            Victim::Slave { group, pick } => write!(f, "slave #{pick} of broker-{group}"),
            Victim::ControllerLeader => f.write_str("controller leader"),
            Victim::ControllerFollower { pick } => write!(f, "controller follower #{pick}"),
            Victim::Namesrv { index } => write!(f, "namesrv #{index}"),
        }
    }
}

impl Victim {
    /// True for a broker (the standalone one included).
    pub fn is_broker(self) -> bool {
        matches!(
            self,
            Victim::Standalone | Victim::Master { .. } | Victim::Slave { .. }
        )
    }

    /// True for a controller.
    pub fn is_controller(self) -> bool {
        matches!(
            self,
            Victim::ControllerLeader | Victim::ControllerFollower { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topologies_parse_and_size_as_documented() {
        assert_eq!("ha".parse::<Topology>().unwrap(), Topology::Ha);
        assert!("mesh".parse::<Topology>().is_err());
        let ha = Topology::Ha;
        assert_eq!(
            (ha.namesrvs(), ha.controllers(), ha.groups(), ha.replicas()),
            (2, 3, 2, 3)
        );
        let replicated = Topology::Replicated;
        assert_eq!(
            (
                replicated.namesrvs(),
                replicated.controllers(),
                replicated.groups(),
                replicated.replicas()
            ),
            (1, 1, 1, 3)
        );
        assert!(!Link::of(Topology::Replicated).contains(&Link::ControllerController));
        assert_eq!(Link::of(Topology::Single), vec![Link::ClientBroker]);
    }
}
