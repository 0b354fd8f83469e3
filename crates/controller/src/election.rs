//! Who becomes master: a pure function of a group's state and what its members last
//! reported, so it can be tested exhaustively and every leader decides the same way.
//!
//! Order (best first): reported epoch desc, reported log end (`max_offset`) desc,
//! `electionPriority` asc, broker id asc. Candidates are the alive members of the in-sync
//! set; when the set is empty (nothing was ever replicated) every alive member is a clean
//! candidate. Only when no in-sync member is alive and unclean election is enabled may an
//! alive member outside the set win (it may lack acknowledged messages).

use std::cmp::Reverse;

use ferromq_protocol::remoting::response;

use crate::state::GroupRecord;

/// What the leader knows of one member for an election.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// Broker id.
    pub broker_id: u64,
    /// Heard from within the heartbeat timeout.
    pub alive: bool,
    /// Newest epoch it reported.
    pub epoch: u64,
    /// Log end it reported.
    pub max_offset: u64,
    /// `electionPriority` (lower preferred).
    pub election_priority: u32,
}

impl Candidate {
    /// The sort key: smaller is better.
    fn order_key(&self) -> (Reverse<u64>, Reverse<u64>, u32, u64) {
        (
            Reverse(self.epoch),
            Reverse(self.max_offset),
            self.election_priority,
            self.broker_id,
        )
    }
}

/// The outcome of [`choose_master`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// This member should be master; `unclean` when it is outside the in-sync set.
    Elect {
        /// The winner.
        broker_id: u64,
        /// It was not in the in-sync set.
        unclean: bool,
    },
    /// No member may become master now.
    NoCandidate,
}

/// Whether `candidate` may become master of `group` (without unclean election).
fn is_clean(group: &GroupRecord, broker_id: u64) -> bool {
    group.sync_state_set.is_empty() || group.sync_state_set.contains(&broker_id)
}

/// Chooses the best alive candidate of `group`; see the module documentation for the order.
/// `candidates` holds one entry per member (members without an entry are not alive).
pub fn choose_master(
    group: &GroupRecord,
    candidates: &[Candidate],
    unclean_enabled: bool,
) -> Choice {
    let best = |clean_only: bool| {
        candidates
            .iter()
            .filter(|c| c.alive && group.members.contains_key(&c.broker_id))
            .filter(|c| !clean_only || is_clean(group, c.broker_id))
            .min_by_key(|c| c.order_key())
            .map(|c| c.broker_id)
    };
    if let Some(broker_id) = best(true) {
        return Choice::Elect {
            broker_id,
            unclean: false,
        };
    }
    match best(false) {
        Some(broker_id) if unclean_enabled => Choice::Elect {
            broker_id,
            unclean: true,
        },
        _ => Choice::NoCandidate,
    }
}

/// Checks an admin's designated master (`electMaster -b id`); the error says why not.
pub fn check_designated(
    group: &GroupRecord,
    candidates: &[Candidate],
    broker_id: u64,
    unclean_enabled: bool,
) -> Result<(), String> {
    if !group.members.contains_key(&broker_id) {
        return Err(format!(
            "broker {broker_id} is not a member of {}",
            group.broker_name
        ));
    }
    // Static facts first, liveness last: the same request gets the same answer whenever
    // it is sent, unless liveness is the only reason.
    if !is_clean(group, broker_id) && !unclean_enabled {
        return Err(format!(
            "broker {broker_id} is not in the in-sync set {:?} and enableElectUncleanMaster is false",
            group.sync_state_set
        ));
    }
    let alive = candidates
        .iter()
        .any(|c| c.broker_id == broker_id && c.alive);
    if !alive {
        return Err(format!(
            "broker {broker_id} is not alive (no heartbeat within the timeout)"
        ));
    }
    Ok(())
}

/// What the leader does for one election request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Propose this master.
    Elect {
        /// The new master.
        broker_id: u64,
        /// It is outside the in-sync set.
        unclean: bool,
    },
    /// The master is dead and nobody may replace it: propose "no master".
    ClearMaster,
    /// Nothing to propose; answer this code and remark.
    Refuse {
        /// A controller response code.
        code: i32,
        /// Why.
        remark: String,
    },
}

/// Decides an election for `group` (`designated`: an admin's `electMaster -b`), from the
/// leader's view of its members. Exhaustive over (designated or not) × (master alive or not)
/// × (candidate found or not).
pub fn decide(
    group: &GroupRecord,
    candidates: &[Candidate],
    designated: Option<u64>,
    unclean_enabled: bool,
) -> Decision {
    let master_alive = !needs_election(group, candidates);
    let refuse = |code: i32, remark: String| Decision::Refuse { code, remark };
    match designated {
        Some(id) if master_alive && group.master_id == Some(id) => refuse(
            response::CONTROLLER_MASTER_STILL_EXIST,
            format!(
                "broker {id} is already the live master at epoch {}",
                group.master_epoch
            ),
        ),
        Some(id) => match check_designated(group, candidates, id, unclean_enabled) {
            Ok(()) => Decision::Elect {
                broker_id: id,
                unclean: !is_clean(group, id),
            },
            Err(why) => refuse(response::CONTROLLER_ELECT_MASTER_FAILED, why),
        },
        None if master_alive => refuse(
            response::CONTROLLER_MASTER_STILL_EXIST,
            format!(
                "broker {:?} is the live master at epoch {}",
                group.master_id, group.master_epoch
            ),
        ),
        None => match choose_master(group, candidates, unclean_enabled) {
            Choice::Elect { broker_id, unclean } => Decision::Elect { broker_id, unclean },
            Choice::NoCandidate if group.master_id.is_some() => Decision::ClearMaster,
            Choice::NoCandidate => refuse(
                response::CONTROLLER_ELECT_MASTER_FAILED,
                format!(
                    "no alive member of {} may become master (in-sync set {:?}, \
                     enableElectUncleanMaster={unclean_enabled})",
                    group.broker_name, group.sync_state_set
                ),
            ),
        },
    }
}

/// Decides a restarted master's renewal (`ElectMasterRequest::renew`): `requester` says the
/// controller names it master of `master_epoch`, the epoch its own log ends with, and it
/// restarted. Its term is over: whatever it lost of its unflushed tail, its replicas may
/// hold, and whatever it recovered beyond what they hold was never replicated. A fresh
/// election in the usual order (reported epoch, then log end) picks the member holding the
/// most, the requester included; the election always begins a new epoch and restarts the
/// in-sync set at the winner, so neither the lost tail nor the unreplicated one can be
/// served by a set that does not hold it. Unclean candidates are never considered here: the
/// requester itself is a clean candidate.
pub fn decide_renewal(
    group: &GroupRecord,
    candidates: &[Candidate],
    requester: u64,
    master_epoch: u64,
) -> Decision {
    let refuse = |code: i32, remark: String| Decision::Refuse { code, remark };
    if group.master_id != Some(requester) || group.master_epoch != master_epoch {
        return refuse(
            response::CONTROLLER_FENCED_MASTER_EPOCH,
            format!(
                "broker {requester} asks to renew epoch {master_epoch}, but the master of {} \
                 is {:?} at epoch {}",
                group.broker_name, group.master_id, group.master_epoch
            ),
        );
    }
    match choose_master(group, candidates, false) {
        Choice::Elect { broker_id, unclean } => Decision::Elect { broker_id, unclean },
        Choice::NoCandidate => refuse(
            response::CONTROLLER_ELECT_MASTER_FAILED,
            format!(
                "broker {requester} asks to renew epoch {master_epoch}, but no member of {} is \
                 alive in the in-sync set {:?} (the requester's heartbeat has not arrived)",
                group.broker_name, group.sync_state_set
            ),
        ),
    }
}

/// Whether the group's master is missing or dead: the failure detector's trigger.
pub fn needs_election(group: &GroupRecord, candidates: &[Candidate]) -> bool {
    match group.master_id {
        None => true,
        Some(id) => !candidates.iter().any(|c| c.broker_id == id && c.alive),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use ferromq_protocol::controller::BrokerMember;
    use proptest::prelude::*;

    use super::*;

    fn group(members: &[u64], set: &[u64]) -> GroupRecord {
        GroupRecord {
            cluster_name: "c".into(),
            broker_name: "b".into(),
            members: members
                .iter()
                .map(|id| {
                    let member = BrokerMember {
                        broker_id: *id,
                        ..BrokerMember::default()
                    };
                    (*id, member)
                })
                .collect(),
            master_id: None,
            master_epoch: 1,
            sync_state_set: set.iter().copied().collect::<BTreeSet<_>>(),
            sync_state_set_epoch: 1,
            next_broker_id: 10,
        }
    }

    fn candidate(broker_id: u64, alive: bool, epoch: u64, max_offset: u64, prio: u32) -> Candidate {
        Candidate {
            broker_id,
            alive,
            epoch,
            max_offset,
            election_priority: prio,
        }
    }

    fn elected(id: u64, unclean: bool) -> Choice {
        Choice::Elect {
            broker_id: id,
            unclean,
        }
    }

    #[test]
    fn order_is_epoch_then_offset_then_priority_then_id() {
        let g = group(&[1, 2, 3, 4], &[1, 2, 3, 4]);
        let c = [
            candidate(1, true, 1, 900, 0),
            candidate(2, true, 2, 100, 5),
            candidate(3, true, 2, 100, 1),
            candidate(4, true, 2, 50, 0),
        ];
        assert_eq!(choose_master(&g, &c, false), elected(3, false));
        let c = [candidate(2, true, 2, 100, 1), candidate(3, true, 2, 100, 1)];
        assert_eq!(choose_master(&g, &c, false), elected(2, false));
        let c = [candidate(2, true, 2, 100, 1), candidate(3, true, 2, 101, 9)];
        assert_eq!(choose_master(&g, &c, false), elected(3, false));
    }

    #[test]
    fn dead_and_out_of_set_members_are_skipped_unless_unclean() {
        let g = group(&[1, 2, 3], &[1, 2]);
        let c = [
            candidate(1, false, 9, 999, 0),
            candidate(2, true, 1, 10, 0),
            candidate(3, true, 9, 999, 0),
        ];
        assert_eq!(choose_master(&g, &c, false), elected(2, false));
        let c = [
            candidate(1, false, 9, 999, 0),
            candidate(3, true, 9, 999, 0),
        ];
        assert_eq!(choose_master(&g, &c, false), Choice::NoCandidate);
        assert_eq!(choose_master(&g, &c, true), elected(3, true));
    }

    #[test]
    fn a_renewal_elects_the_member_holding_most_at_a_new_term_and_is_fenced() {
        let mut g = group(&[1, 2, 3], &[1, 2]);
        g.master_id = Some(1);
        // The restarted master lost a tail its in-sync replica holds: the replica wins.
        let c = [
            candidate(1, true, 1, 500, 0),
            candidate(2, true, 1, 700, 0),
            candidate(3, true, 1, 900, 0),
        ];
        let elect = |id| Decision::Elect {
            broker_id: id,
            unclean: false,
        };
        assert_eq!(decide_renewal(&g, &c, 1, 1), elect(2));
        // It recovered a tail nobody else holds: it wins again (a new epoch all the same).
        let c = [candidate(1, true, 1, 800, 0), candidate(2, true, 1, 700, 0)];
        assert_eq!(decide_renewal(&g, &c, 1, 1), elect(1));
        // Only the master may renew, and only the epoch it leads.
        let fenced = |d: Decision| matches!(d, Decision::Refuse { code, .. } if code == response::CONTROLLER_FENCED_MASTER_EPOCH);
        assert!(fenced(decide_renewal(&g, &c, 2, 1)));
        assert!(fenced(decide_renewal(&g, &c, 1, 0)));
        // No alive in-sync member (the requester's heartbeat lost): refused, not unclean.
        let c = [
            candidate(1, false, 1, 800, 0),
            candidate(3, true, 1, 900, 0),
        ];
        assert!(matches!(
            decide_renewal(&g, &c, 1, 1),
            Decision::Refuse { code, .. } if code == response::CONTROLLER_ELECT_MASTER_FAILED
        ));
    }

    #[test]
    fn an_empty_set_makes_every_alive_member_clean() {
        let g = group(&[1, 2], &[]);
        let c = [candidate(2, true, 0, 0, 0)];
        assert_eq!(choose_master(&g, &c, false), elected(2, false));
    }

    #[test]
    fn designated_master_must_be_alive_and_in_sync() {
        let g = group(&[1, 2, 3], &[1, 2]);
        let c = [
            candidate(1, false, 0, 0, 0),
            candidate(2, true, 0, 0, 0),
            candidate(3, true, 0, 0, 0),
        ];
        assert!(check_designated(&g, &c, 2, false).is_ok());
        assert!(check_designated(&g, &c, 1, false)
            .unwrap_err()
            .contains("not alive"));
        assert!(check_designated(&g, &c, 3, false)
            .unwrap_err()
            .contains("in-sync"));
        assert!(check_designated(&g, &c, 3, true).is_ok());
        assert!(check_designated(&g, &c, 9, true)
            .unwrap_err()
            .contains("not a member"));
    }

    #[test]
    fn election_is_needed_when_the_master_is_absent_or_dead() {
        let mut g = group(&[1, 2], &[1, 2]);
        let c = [candidate(1, true, 0, 0, 0)];
        assert!(needs_election(&g, &c));
        g.master_id = Some(1);
        assert!(!needs_election(&g, &c));
        assert!(needs_election(&g, &[candidate(1, false, 0, 0, 0)]));
    }

    #[test]
    fn decisions_cover_designated_alive_and_candidate_cases() {
        let mut g = group(&[1, 2, 3], &[1, 2]);
        g.master_id = Some(1);
        let all_alive = [
            candidate(1, true, 0, 0, 0),
            candidate(2, true, 0, 0, 0),
            candidate(3, true, 0, 0, 0),
        ];
        let master_dead = [
            candidate(1, false, 0, 0, 0),
            candidate(2, true, 0, 0, 0),
            candidate(3, true, 0, 0, 0),
        ];
        let only_outsider = [candidate(1, false, 0, 0, 0), candidate(3, true, 0, 0, 0)];
        let code = |d: Decision| match d {
            Decision::Refuse { code, .. } => Some(code),
            _ => None,
        };
        use ferromq_protocol::remoting::response as r;
        assert_eq!(
            code(decide(&g, &all_alive, Some(1), false)),
            Some(r::CONTROLLER_MASTER_STILL_EXIST)
        );
        assert_eq!(
            decide(&g, &all_alive, Some(2), false),
            Decision::Elect {
                broker_id: 2,
                unclean: false
            }
        );
        assert_eq!(
            code(decide(&g, &all_alive, Some(3), false)),
            Some(r::CONTROLLER_ELECT_MASTER_FAILED)
        );
        assert_eq!(
            decide(&g, &all_alive, Some(3), true),
            Decision::Elect {
                broker_id: 3,
                unclean: true
            }
        );
        assert_eq!(
            code(decide(&g, &all_alive, None, false)),
            Some(r::CONTROLLER_MASTER_STILL_EXIST)
        );
        assert_eq!(
            decide(&g, &master_dead, None, false),
            Decision::Elect {
                broker_id: 2,
                unclean: false
            }
        );
        assert_eq!(
            decide(&g, &only_outsider, None, false),
            Decision::ClearMaster
        );
        assert_eq!(
            decide(&g, &only_outsider, None, true),
            Decision::Elect {
                broker_id: 3,
                unclean: true
            }
        );
        g.master_id = None;
        assert_eq!(
            code(decide(&g, &only_outsider, None, false)),
            Some(r::CONTROLLER_ELECT_MASTER_FAILED)
        );
    }

    proptest! {
        /// The winner is alive, clean unless reported unclean, and no eligible candidate
        /// beats it in the order.
        #[test]
        fn the_winner_is_the_best_eligible_candidate(
            raw in proptest::collection::vec((any::<bool>(), any::<bool>(), 0u64..4, 0u64..4, 0u32..3), 1..8),
            unclean_enabled in any::<bool>(),
        ) {
            let ids: Vec<u64> = (1..=raw.len() as u64).collect();
            let set: Vec<u64> = raw.iter().zip(&ids).filter(|(r, _)| r.1).map(|(_, id)| *id).collect();
            let g = group(&ids, &set);
            let c: Vec<Candidate> = raw.iter().zip(&ids)
                .map(|(r, id)| candidate(*id, r.0, r.2, r.3, r.4)).collect();
            let clean = |x: &Candidate| set.is_empty() || set.contains(&x.broker_id);
            match choose_master(&g, &c, unclean_enabled) {
                Choice::Elect { broker_id, unclean } => {
                    let winner = c.iter().find(|x| x.broker_id == broker_id).unwrap();
                    prop_assert!(winner.alive);
                    prop_assert_eq!(unclean, !clean(winner));
                    prop_assert!(!unclean || unclean_enabled);
                    let pool = c.iter().filter(|x| x.alive && (clean(x) || unclean));
                    for other in pool {
                        prop_assert!(winner.order_key() <= other.order_key());
                    }
                }
                Choice::NoCandidate => {
                    prop_assert!(!c.iter().any(|x| x.alive && (clean(x) || unclean_enabled)));
                }
            }
        }
    }
}
