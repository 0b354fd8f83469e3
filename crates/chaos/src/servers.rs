//! The servers of a run, whatever the topology: `ferromq standalone` behind one proxy, or a
//! [`ChaosCluster`]. Faults name nodes by role ([`Victim`]); [`Servers::resolve`] turns a
//! role into the node it is at that moment ([`Struck`]), and the other methods act on it.
//!
//! Invariant: a struck node is always healthy when resolved (running, not paused), so two
//! faults never act on one process at once.

use std::net::SocketAddr;

use crate::cluster::{ChaosCluster, NodeRef};
use crate::history::NodeRole;
use crate::nodes::{Node, NodeError, Standalone};
use crate::proxy::{FaultProxy, ProxyMode};
use crate::topology::{Link, Victim};

/// The servers a run started.
pub enum Servers {
    /// `ferromq standalone`, clients reaching its broker through `proxy`.
    Single {
        /// The process (boxed: far larger than a cluster's handle).
        server: Box<Standalone>,
        /// The client → broker proxy.
        proxy: FaultProxy,
    },
    /// A replicated cluster.
    Cluster(ChaosCluster),
}

/// A node a fault struck.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Struck {
    /// The standalone process.
    Standalone,
    /// A cluster node.
    Node(NodeRef),
}

impl Servers {
    /// The name servers' addresses.
    pub fn namesrvs(&self) -> Vec<SocketAddr> {
        match self {
            Servers::Single { server, .. } => vec![server.namesrv],
            Servers::Cluster(cluster) => cluster.namesrv_addrs(),
        }
    }

    /// The node `victim` names now, if a healthy one fits.
    pub async fn resolve(&mut self, victim: Victim) -> Option<Struck> {
        match self {
            Servers::Single { server, .. } => {
                let node = server.node();
                (victim == Victim::Standalone && node.is_running() && !node.is_paused())
                    .then_some(Struck::Standalone)
            }
            Servers::Cluster(cluster) => cluster.resolve(victim).await.map(Struck::Node),
        }
    }

    /// What `struck` is now.
    pub async fn role(&self, struck: Struck) -> NodeRole {
        match (self, struck) {
            (Servers::Cluster(cluster), Struck::Node(node)) => cluster.role(node).await,
            _ => NodeRole::Standalone,
        }
    }

    /// The process of `struck`; `None` when `struck` is not of this topology (a cluster
    /// node of a single run, or the reverse), which [`Servers::resolve`] never returns.
    pub fn node(&mut self, struck: Struck) -> Option<&mut Node> {
        match (self, struck) {
            (Servers::Cluster(cluster), Struck::Node(node)) => Some(cluster.node(node)),
            (Servers::Single { server, .. }, Struck::Standalone) => Some(server.node()),
            _ => None,
        }
    }

    /// The name of `struck` in fault records.
    pub fn name(&mut self, struck: Struck) -> String {
        self.node(struck)
            .map_or_else(|| format!("{struck:?}"), |node| node.name().to_string())
    }

    /// Starts a killed node again.
    ///
    /// # Errors
    /// The last attempt's error.
    pub async fn restart(&mut self, struck: Struck) -> Result<(), NodeError> {
        match (self, struck) {
            (Servers::Cluster(cluster), Struck::Node(node)) => cluster.restart(node).await,
            (Servers::Single { server, .. }, Struck::Standalone) => server.restart().await,
            _ => Ok(()),
        }
    }

    /// Puts `link` of `struck` in `mode`; false when it has no such link.
    pub fn set_link(&self, struck: Struck, link: Link, mode: ProxyMode) -> bool {
        match (self, struck) {
            (Servers::Single { proxy, .. }, Struck::Standalone) if link == Link::ClientBroker => {
                proxy.set_mode(mode);
                true
            }
            (Servers::Cluster(cluster), Struck::Node(node)) => cluster.set_link(node, link, mode),
            _ => false,
        }
    }

    /// Every proxy back to `Pass`.
    pub fn heal_links(&self) {
        match self {
            Servers::Single { proxy, .. } => proxy.set_mode(ProxyMode::Pass),
            Servers::Cluster(cluster) => cluster.heal_links(),
        }
    }

    /// Every node a fault can strike.
    pub fn all(&self) -> Vec<Struck> {
        match self {
            Servers::Single { .. } => vec![Struck::Standalone],
            Servers::Cluster(cluster) => cluster.nodes().into_iter().map(Struck::Node).collect(),
        }
    }

    /// Stops every server.
    ///
    /// # Errors
    /// The first node that could not be stopped.
    pub async fn stop(&mut self) -> Result<(), NodeError> {
        match self {
            Servers::Single { server, .. } => server.node().stop().await,
            Servers::Cluster(cluster) => cluster.stop().await,
        }
    }
}
