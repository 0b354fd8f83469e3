//! A master's view of its replicas: who is in the in-sync set, how far each has acknowledged,
//! and the high watermark (invariant 4).
//!
//! Pure state: it reads no clock, socket or disk. Callers pass `now` and the master's own
//! durable end, so the deterministic simulation drives this very code.
//!
//! Rules:
//! 1. A replica is *caught up* when it acknowledges the end the master had when the replica
//!    last caught up (or more); a replica that has not caught up for `max_lag` leaves the set,
//!    and one whose connection closes leaves it at once. A replica that acknowledges
//!    everything the master holds is caught up whatever came before.
//! 2. A replica joins (or rejoins) the set only when its acknowledged end reaches the
//!    watermark, so joining never lowers it.
//! 3. The watermark is the smallest acknowledged end over the set, the master included
//!    (its durable end). It never decreases; while the set has fewer than
//!    `min_in_sync_replicas` members it does not advance at all, so nothing a failover to an
//!    in-sync replica could cut becomes visible (R6).
//! 4. A replica acknowledging past the master's end is a bad peer ([`AckError`]).
//! 5. Controller mode: the controller's copy of the set (its *SyncStateSet*) is what an
//!    election picks from, so every write this master acknowledges must be held by each of
//!    its members. The master therefore counts a replica the controller lists
//!    ([`InSyncSet::set_controlled`]) as a member even after it lagged or disconnected here,
//!    until the controller confirms the smaller set: the master never shrinks the set on its
//!    own (it may grow it first, which only adds replicas to wait for). A listed replica this
//!    master has not heard from yet counts as holding nothing.
//! 6. Controller mode, growth in flight: once the master asks the controller to add replicas
//!    to its set, the controller may apply the change at any moment, and an election may then
//!    pick a replica it added. So from the request on, the master counts the replicas it asked
//!    for as members too (the caller passes the union to [`InSyncSet::set_controlled`], see
//!    `controlled::members_to_wait_for`) until the controller's answer (or a later heartbeat)
//!    says what the set is. Found by the deterministic simulation: a replica
//!    requested while caught up, disconnected before the controller applied the growth,
//!    missed writes the master acknowledged alone in between.
//! 7. A new master term starts the watermark afresh at the master's log end
//!    ([`InSyncSet::begin_term`]): the watermark never decreases within a term, but a broker
//!    that recovered or truncated may carry an older term's watermark above its own log end,
//!    which no replica could ever reach. Found by the deterministic simulation (seed 754):
//!    with `minInSyncReplicas` 2 the new master refused every write forever.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Most replicas one master tracks (connected or remembered).
pub const REPLICAS_MAX: usize = 64;

/// The in-sync rules' settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InSyncSettings {
    /// `haMaxTimeSlaveNotCatchup`.
    pub max_lag: Duration,
    /// `minInSyncReplicas` (the master counts).
    pub min_in_sync_replicas: usize,
}

/// One replica as the master sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaStatus {
    /// Its broker id.
    pub id: u64,
    /// Its address (the HA connection's peer).
    pub addr: String,
    /// The end it last acknowledged.
    pub acked: u64,
    /// Whether it is in the in-sync set.
    pub in_sync: bool,
    /// Whether its HA connection is open.
    pub connected: bool,
    /// How long since it last caught up.
    pub behind_for: Duration,
}

#[derive(Debug, Clone)]
struct Replica {
    addr: String,
    acked: u64,
    in_sync: bool,
    connected: bool,
    caught_up_at: Instant,
    /// The master's end when the replica last caught up: reaching it is catching up again.
    target: u64,
}

/// A bad acknowledgement.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AckError {
    /// The replica claims more than the master holds (RocketMQ #3015).
    #[error("replica {id} acknowledged {acked}, past the master's end {master_end}")]
    PastMasterEnd {
        /// The replica.
        id: u64,
        /// What it claimed.
        acked: u64,
        /// The master's end.
        master_end: u64,
    },
    /// No replica with that id is connected.
    #[error("replica {0} is not connected")]
    Unknown(u64),
}

/// Why a replica may not connect.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectError {
    /// A replica with this id is connected already.
    #[error("a replica with broker id {0} is connected already")]
    DuplicateId(u64),
    /// The master tracks [`REPLICAS_MAX`] replicas already.
    #[error("the master tracks {REPLICAS_MAX} replicas already")]
    TooMany,
}

/// Whether a write ending at some offset is held by the in-sync set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replicated {
    /// Every member holds it.
    Yes,
    /// Some member does not yet.
    Pending,
    /// The set has fewer members than the minimum: it cannot be acknowledged now.
    NotEnough {
        /// Members now, the master included.
        members: usize,
        /// The minimum.
        needed: usize,
    },
}

/// The in-sync set and the high watermark.
#[derive(Debug, Clone)]
pub struct InSyncSet {
    settings: InSyncSettings,
    replicas: BTreeMap<u64, Replica>,
    watermark: u64,
    /// Controller mode: the replicas (the master excluded) of the controller's set, members
    /// whatever their local state (rule 5). `None` outside controller mode.
    controlled: Option<std::collections::BTreeSet<u64>>,
}

impl InSyncSet {
    /// An empty set (the master alone) whose watermark starts at `watermark` (what consumers
    /// could see already).
    pub fn new(settings: InSyncSettings, watermark: u64) -> InSyncSet {
        InSyncSet {
            settings,
            replicas: BTreeMap::new(),
            watermark,
            controlled: None,
        }
    }

    /// Controller mode: the controller's set now, without the master (rule 5). At most
    /// [`REPLICAS_MAX`] ids are kept.
    pub fn set_controlled(&mut self, replicas: impl IntoIterator<Item = u64>) {
        self.controlled = Some(replicas.into_iter().take(REPLICAS_MAX).collect());
    }

    /// A new master term begins with the log ending at `end` (rule 7): the replicas of older
    /// connections are forgotten and the watermark restarts at `end`, which the promotion
    /// exposed already.
    pub fn begin_term(&mut self, end: u64) {
        self.replicas.clear();
        self.watermark = end;
    }

    /// The replicas this master has in its local set (caught up, connected): what it asks the
    /// controller's set to become.
    pub fn local_members(&self) -> Vec<u64> {
        self.replicas
            .iter()
            .filter(|(_, r)| r.in_sync)
            .map(|(id, _)| *id)
            .collect()
    }

    /// The replicas of the controller's set (controller mode), if any.
    pub fn controlled(&self) -> Option<Vec<u64>> {
        self.controlled
            .as_ref()
            .map(|c| c.iter().copied().collect())
    }

    /// Whether replica `id` counts as a member: in the local set, or listed by the
    /// controller (rule 5).
    fn counts(&self, id: u64, replica: &Replica) -> bool {
        replica.in_sync || self.is_controlled(id)
    }

    fn is_controlled(&self, id: u64) -> bool {
        self.controlled.as_ref().is_some_and(|c| c.contains(&id))
    }

    /// The acknowledged ends of every member but the master; a controller-listed replica
    /// never heard from counts as holding nothing.
    fn member_acks(&self) -> impl Iterator<Item = u64> + '_ {
        let heard = self
            .replicas
            .iter()
            .filter(|(id, r)| self.counts(**id, r))
            .map(|(_, r)| r.acked);
        let unheard = self
            .controlled
            .iter()
            .flatten()
            .filter(|id| !self.replicas.contains_key(id))
            .map(|_| 0);
        heard.chain(unheard)
    }

    /// The settings.
    pub fn settings(&self) -> InSyncSettings {
        self.settings
    }

    /// A replica passed the handshake with its log ending at `end`. It starts out of the set
    /// unless it was a member when its last connection closed and has not lagged for too
    /// long since (rule 1).
    ///
    /// # Errors
    /// [`ConnectError`]: the id is connected already, or too many replicas are tracked.
    pub fn connect(
        &mut self,
        id: u64,
        addr: &str,
        end: u64,
        now: Instant,
    ) -> Result<(), ConnectError> {
        let tracked = self.replicas.len();
        match self.replicas.get_mut(&id) {
            Some(replica) if replica.connected => return Err(ConnectError::DuplicateId(id)),
            Some(replica) => {
                replica.connected = true;
                replica.addr = addr.to_string();
                replica.acked = end;
            }
            None if tracked >= REPLICAS_MAX => return Err(ConnectError::TooMany),
            None => {
                self.replicas.insert(
                    id,
                    Replica {
                        addr: addr.to_string(),
                        acked: end,
                        in_sync: false,
                        connected: true,
                        caught_up_at: now,
                        target: end,
                    },
                );
            }
        }
        Ok(())
    }

    /// A replica's connection closed: it leaves the set at once (a replica that cannot
    /// receive the log holds nothing new, and waiting `max_lag` for it would stall every
    /// SYNC_MASTER write). It rejoins when it reconnects and catches up (rule 2). Returns
    /// whether it was a member.
    pub fn disconnect(&mut self, id: u64) -> bool {
        let Some(replica) = self.replicas.get_mut(&id) else {
            return false;
        };
        replica.connected = false;
        let was_member = std::mem::replace(&mut replica.in_sync, false);
        if was_member {
            tracing::warn!(
                replica = id,
                acked = replica.acked,
                "replica left the in-sync set: its HA connection closed"
            );
        }
        was_member
    }

    /// A replica acknowledged `end`; `master_end` is the master's committed end now and
    /// `master_durable` its durable end. Returns whether membership changed.
    ///
    /// # Errors
    /// [`AckError`]: an end past the master's, or an unknown replica.
    pub fn ack(
        &mut self,
        id: u64,
        end: u64,
        master_end: u64,
        master_durable: u64,
        now: Instant,
    ) -> Result<bool, AckError> {
        if self.alone_suffices() {
            // Nobody bounds the watermark: it follows the master (rule 3), so a joining
            // replica must reach what consumers may already see (rule 2).
            self.watermark = self.watermark.max(master_durable);
        }
        let watermark = self.watermark;
        let replica = self.replicas.get_mut(&id).ok_or(AckError::Unknown(id))?;
        if end > master_end {
            return Err(AckError::PastMasterEnd {
                id,
                acked: end,
                master_end,
            });
        }
        replica.acked = replica.acked.max(end);
        if replica.acked >= replica.target || replica.acked >= master_end {
            replica.caught_up_at = now;
            replica.target = master_end;
        }
        let joins = !replica.in_sync && replica.acked >= watermark && replica.caught_up_at == now;
        if joins {
            replica.in_sync = true;
            tracing::info!(
                replica = id,
                acked = replica.acked,
                "replica joined the in-sync set"
            );
        }
        Ok(joins)
    }

    /// Drops from the set every replica that has not caught up for `max_lag` (rule 1);
    /// returns the ids that left.
    pub fn tick(&mut self, master_end: u64, now: Instant) -> Vec<u64> {
        let max_lag = self.settings.max_lag;
        let mut left = Vec::new();
        for (id, replica) in &mut self.replicas {
            if replica.connected && replica.acked >= master_end {
                replica.caught_up_at = now;
                replica.target = master_end;
            }
            if replica.in_sync && now.saturating_duration_since(replica.caught_up_at) > max_lag {
                replica.in_sync = false;
                tracing::warn!(
                    replica = id,
                    acked = replica.acked,
                    master_end,
                    lagged_ms = now
                        .saturating_duration_since(replica.caught_up_at)
                        .as_millis() as u64,
                    "replica left the in-sync set (haMaxTimeSlaveNotCatchup)"
                );
                left.push(*id);
            }
        }
        // Forget long-gone replicas that are out of the set, to keep the table bounded.
        let controlled = self.controlled.clone().unwrap_or_default();
        self.replicas.retain(|id, r| {
            r.connected
                || r.in_sync
                || controlled.contains(id)
                || now.saturating_duration_since(r.caught_up_at) < 10 * max_lag
        });
        left
    }

    /// Members of the set, the master included.
    pub fn members(&self) -> usize {
        1 + self.member_acks().count()
    }

    /// Whether the master alone makes a big enough set and no replica bounds it.
    fn alone_suffices(&self) -> bool {
        self.members() == 1 && self.settings.min_in_sync_replicas <= 1
    }

    /// The cap the store's dispatcher must respect (`None`: only the master's own flush
    /// policy, the master being the whole, big enough, set), advancing the watermark to
    /// the smallest acknowledged end over the set (rule 3).
    pub fn bound(&mut self, master_durable: u64) -> Option<u64> {
        if self.alone_suffices() {
            self.watermark = self.watermark.max(master_durable);
            return None;
        }
        if self.members() >= self.settings.min_in_sync_replicas {
            let replicas_min = self.member_acks().min().unwrap_or(u64::MAX);
            self.watermark = self.watermark.max(replicas_min.min(master_durable));
        }
        Some(self.watermark)
    }

    /// The watermark as of the last [`InSyncSet::bound`] or [`InSyncSet::ack`].
    pub fn watermark(&self) -> u64 {
        self.watermark
    }

    /// Whether a write ending at `end` is held by every member but the master (whose own
    /// policy the caller has waited for).
    pub fn replicated(&self, end: u64) -> Replicated {
        let members = self.members();
        let needed = self.settings.min_in_sync_replicas;
        if members < needed {
            return Replicated::NotEnough { members, needed };
        }
        let all = self.member_acks().all(|acked| acked >= end);
        if all {
            Replicated::Yes
        } else {
            Replicated::Pending
        }
    }

    /// The end every in-sync replica holds (`None`: no replica is in the set), or the
    /// shortage `(members, needed)` when the set is below the minimum.
    pub fn replicated_end(&self) -> Result<Option<u64>, (usize, usize)> {
        let (members, needed) = (self.members(), self.settings.min_in_sync_replicas);
        if members < needed {
            return Err((members, needed));
        }
        Ok(self.member_acks().min())
    }

    /// Every tracked replica, by id.
    pub fn status(&self, now: Instant) -> Vec<ReplicaStatus> {
        self.replicas
            .iter()
            .map(|(id, r)| ReplicaStatus {
                id: *id,
                addr: r.addr.clone(),
                acked: r.acked,
                in_sync: self.counts(*id, r),
                connected: r.connected,
                behind_for: now.saturating_duration_since(r.caught_up_at),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const LAG: Duration = Duration::from_secs(2);

    fn set(min: usize) -> InSyncSet {
        InSyncSet::new(
            InSyncSettings {
                max_lag: LAG,
                min_in_sync_replicas: min,
            },
            0,
        )
    }

    #[test]
    fn a_caught_up_replica_joins_and_bounds_the_watermark() {
        let t0 = Instant::now();
        let mut s = set(1);
        assert_eq!(s.bound(100), None, "the master alone");
        s.connect(1, "r1", 0, t0).unwrap();
        assert!(
            !s.ack(1, 50, 100, 100, t0).unwrap(),
            "behind the watermark: not yet"
        );
        assert_eq!(
            s.replicated(100),
            Replicated::Yes,
            "not a member: not waited for"
        );
        assert!(s.ack(1, 100, 100, 100, t0).unwrap());
        assert_eq!(s.members(), 2);
        assert_eq!(s.bound(150), Some(100), "the replica holds 100 only");
        assert_eq!(s.replicated(150), Replicated::Pending);
        s.ack(1, 150, 150, 150, t0).unwrap();
        assert_eq!(s.replicated(150), Replicated::Yes);
        assert_eq!(s.bound(150), Some(150));
    }

    #[test]
    fn a_controller_listed_replica_counts_until_the_controller_drops_it() {
        let t0 = Instant::now();
        let mut s = set(1);
        s.set_controlled([1, 2]);
        assert_eq!(s.members(), 3, "listed replicas count before they connect");
        assert_eq!(
            s.replicated(10),
            Replicated::Pending,
            "an unheard listed replica holds nothing"
        );
        s.connect(1, "r1", 0, t0).unwrap();
        s.ack(1, 100, 100, 100, t0).unwrap();
        assert_eq!(
            s.bound(100),
            Some(0),
            "replica 2 still bounds the watermark"
        );
        assert_eq!(s.local_members(), vec![1]);
        // Replica 1 disconnects: it leaves the local set but stays a member for
        // acknowledgements, since the controller still lists it (rule 5).
        s.disconnect(1);
        assert!(s.local_members().is_empty());
        assert_eq!(s.members(), 3);
        assert_eq!(s.tick(100, t0 + LAG * 20), Vec::<u64>::new());
        assert_eq!(s.status(t0).len(), 1, "a listed replica is never forgotten");
        // The controller confirms the smaller set: only then the master stops waiting.
        s.set_controlled([]);
        assert_eq!(s.members(), 1);
        assert_eq!(s.replicated(100), Replicated::Yes);
        assert_eq!(s.controlled(), Some(vec![]));
    }

    #[test]
    fn a_new_term_restarts_the_watermark_at_the_log_end() {
        let t0 = Instant::now();
        // A broker recovered with 2853 dispatched, then truncated to 2663 and was promoted.
        let mut s = InSyncSet::new(
            InSyncSettings {
                max_lag: LAG,
                min_in_sync_replicas: 2,
            },
            2853,
        );
        s.begin_term(2663);
        assert_eq!(s.watermark(), 2663);
        s.connect(1, "r1", 2663, t0).unwrap();
        assert!(
            s.ack(1, 2663, 2663, 2663, t0).unwrap(),
            "a replica holding the whole log joins"
        );
        assert_eq!(s.replicated(2663), Replicated::Yes);
    }

    #[test]
    fn a_requested_replica_is_waited_for_before_the_controller_answers() {
        let t0 = Instant::now();
        let mut s = set(1);
        s.set_controlled([]);
        s.connect(2, "r2", 0, t0).unwrap();
        s.ack(2, 100, 100, 100, t0).unwrap();
        assert_eq!(s.local_members(), vec![2]);
        // The master asks for {2} and waits for the union of the controller's set ({}) and
        // {2}; then replica 2 disconnects before the controller answers.
        s.set_controlled([2]);
        s.disconnect(2);
        assert_eq!(
            s.replicated(150),
            Replicated::Pending,
            "a write past what 2 holds waits: the controller may add 2 any moment"
        );
        assert_eq!(s.controlled(), Some(vec![2]));
        // The controller refused (or answered the old set): only then 2 is not waited for.
        s.set_controlled([]);
        assert_eq!(s.replicated(150), Replicated::Yes);
    }

    #[test]
    fn a_lagging_replica_leaves_after_max_lag_and_rejoins_when_caught_up() {
        let t0 = Instant::now();
        let mut s = set(1);
        s.connect(1, "r1", 0, t0).unwrap();
        s.ack(1, 0, 0, 0, t0).unwrap();
        assert_eq!(s.members(), 2);
        assert!(s.tick(500, t0 + LAG / 2).is_empty(), "within max lag");
        assert_eq!(s.bound(500), Some(0), "a silent member holds the watermark");
        assert_eq!(s.tick(500, t0 + LAG * 2), vec![1]);
        assert_eq!(s.members(), 1);
        assert_eq!(s.bound(500), None, "alone again: the master's policy only");
        s.disconnect(1);
        s.connect(1, "r1", 0, t0 + LAG * 2).unwrap();
        let t1 = t0 + LAG * 3;
        assert!(!s.ack(1, 300, 600, 600, t1).unwrap(), "behind: out");
        assert!(s.ack(1, 600, 600, 600, t1).unwrap(), "caught up: in");
    }

    #[test]
    fn below_the_minimum_writes_are_refused_and_the_watermark_stops() {
        let t0 = Instant::now();
        let mut s = set(2);
        assert_eq!(
            s.replicated(10),
            Replicated::NotEnough {
                members: 1,
                needed: 2
            }
        );
        assert_eq!(
            s.bound(10),
            Some(0),
            "the watermark waits for a second member"
        );
        s.connect(1, "r1", 0, t0).unwrap();
        s.ack(1, 10, 10, 10, t0).unwrap();
        assert_eq!(s.bound(10), Some(10));
        assert!(
            s.disconnect(1),
            "a closed connection leaves the set at once"
        );
        assert_eq!(s.members(), 1);
        assert_eq!(s.bound(20), Some(10), "frozen below the minimum");
        assert!(matches!(s.replicated(20), Replicated::NotEnough { .. }));
    }

    #[test]
    fn bad_peers_are_refused() {
        let t0 = Instant::now();
        let mut s = set(1);
        s.connect(1, "r1", 0, t0).unwrap();
        assert_eq!(
            s.connect(1, "r1-again", 0, t0),
            Err(ConnectError::DuplicateId(1))
        );
        assert!(matches!(
            s.ack(1, 11, 10, 10, t0),
            Err(AckError::PastMasterEnd { .. })
        ));
        assert_eq!(s.ack(9, 1, 10, 10, t0), Err(AckError::Unknown(9)));
    }

    proptest! {
        /// Whatever the acks, ticks and disconnects, the watermark never decreases, never
        /// passes the master's durable end or a member's acknowledged end, and stops while the
        /// set is below the minimum.
        #[test]
        fn the_watermark_is_monotone_and_held_by_every_member(
            min in 1usize..4,
            steps in proptest::collection::vec((0u8..4, 0u64..3, 0u64..50, 0u64..300), 1..200),
        ) {
            let t0 = Instant::now();
            let mut s = set(min);
            let mut master_end = 0u64;
            let mut last = s.watermark();
            let mut acked = [0u64; 3];
            for (i, (op, id, grow, dt)) in steps.into_iter().enumerate() {
                let now = t0 + Duration::from_millis(dt * i as u64);
                master_end += grow;
                match op {
                    0 => { let _ = s.connect(id, "r", acked[id as usize], now); }
                    1 => { s.disconnect(id); }
                    2 => {
                        let end = (acked[id as usize] + grow * 2).min(master_end);
                        if s.ack(id, end, master_end, master_end, now).is_ok() {
                            acked[id as usize] = end;
                        }
                    }
                    _ => { s.tick(master_end, now); }
                }
                let before = s.members();
                let bound = s.bound(master_end);
                let w = s.watermark();
                prop_assert!(w >= last, "watermark went back {last} -> {w}");
                prop_assert!(w <= master_end);
                if let Some(b) = bound {
                    for status in s.status(now).iter().filter(|r| r.in_sync) {
                        prop_assert!(status.acked >= b || before < min);
                    }
                }
                if before < min {
                    prop_assert_eq!(w, last, "advanced below the minimum");
                }
                last = w;
            }
        }
    }
}
