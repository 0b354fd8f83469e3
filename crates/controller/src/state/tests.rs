//! Unit tests of the state machine's commands and fencing.

use ferromq_protocol::remoting::response;

use super::*;

fn register(state: &mut ControllerState, id: Option<u64>, addr: &str) -> ApplyOutcome {
    state.apply(&Command::RegisterBroker {
        cluster_name: "c".into(),
        broker_name: "b".into(),
        broker_id: id,
        broker_address: addr.into(),
        ha_address: format!("{addr}-ha"),
        election_priority: 0,
    })
}

fn elect(state: &mut ControllerState, id: Option<u64>, expected: u64) -> ApplyOutcome {
    state.apply(&Command::Elect {
        cluster_name: "c".into(),
        broker_name: "b".into(),
        new_master: id,
        expected_master_epoch: expected,
    })
}

fn alter(state: &mut ControllerState, master: (u64, u64), set: &[u64], epoch: u64) -> ApplyOutcome {
    state.apply(&Command::AlterSyncStateSet {
        cluster_name: "c".into(),
        broker_name: "b".into(),
        master_broker_id: master.0,
        master_epoch: master.1,
        new_sync_state_set: set.to_vec(),
        sync_state_set_epoch: epoch,
    })
}

fn code(outcome: &ApplyOutcome) -> Option<i32> {
    match outcome {
        ApplyOutcome::Rejected { code, .. } => Some(*code),
        _ => None,
    }
}

#[test]
fn register_assigns_ids_from_one_and_keeps_known_ids() {
    let mut state = ControllerState::default();
    let first = register(&mut state, None, "a:1");
    assert!(matches!(
        first,
        ApplyOutcome::Registered { broker_id: 1, .. }
    ));
    assert!(matches!(
        register(&mut state, None, "a:2"),
        ApplyOutcome::Registered { broker_id: 2, .. }
    ));
    // A known id keeps its id; its address may change.
    assert!(matches!(
        register(&mut state, Some(1), "a:9"),
        ApplyOutcome::Registered { broker_id: 1, .. }
    ));
    let group = state.group("b").unwrap();
    assert_eq!(group.members[&1].broker_address, "a:9");
    assert_eq!(group.next_broker_id, 3);
    // An id the controller never assigned (kept on disk across a cleanup) is honoured and
    // never handed out again.
    register(&mut state, Some(7), "a:7");
    assert!(matches!(
        register(&mut state, None, "a:8"),
        ApplyOutcome::Registered { broker_id: 8, .. }
    ));
}

#[test]
fn register_refuses_id_zero_and_a_cluster_mismatch() {
    let mut state = ControllerState::default();
    assert_eq!(
        code(&register(&mut state, Some(0), "a:1")),
        Some(response::CONTROLLER_BROKER_ID_INVALID)
    );
    register(&mut state, None, "a:1");
    let other = state.apply(&Command::RegisterBroker {
        cluster_name: "other".into(),
        broker_name: "b".into(),
        broker_id: None,
        broker_address: "x".into(),
        ha_address: "y".into(),
        election_priority: 0,
    });
    assert_eq!(code(&other), Some(response::CONTROLLER_INVALID_REQUEST));
}

#[test]
fn election_bumps_both_epochs_and_resets_the_set() {
    let mut state = ControllerState::default();
    register(&mut state, None, "a:1");
    register(&mut state, None, "a:2");
    assert!(matches!(
        elect(&mut state, Some(1), 0),
        ApplyOutcome::Elected { .. }
    ));
    alter(&mut state, (1, 1), &[1, 2], 1);
    let outcome = elect(&mut state, Some(2), 1);
    let ApplyOutcome::Elected { replica_info } = outcome else {
        panic!("not elected: {outcome:?}")
    };
    assert_eq!(replica_info.master_broker_id, Some(2));
    assert_eq!(replica_info.master_address.as_deref(), Some("a:2"));
    assert_eq!(replica_info.master_epoch, 2);
    assert_eq!(replica_info.sync_state_set, vec![2]);
    assert_eq!(replica_info.sync_state_set_epoch, 3);
}

#[test]
fn racing_elections_cannot_both_apply() {
    let mut state = ControllerState::default();
    register(&mut state, None, "a:1");
    register(&mut state, None, "a:2");
    // Two elections decided at epoch 0: the second is fenced and changes nothing.
    elect(&mut state, Some(1), 0);
    let before = state.clone();
    assert_eq!(
        code(&elect(&mut state, Some(2), 0)),
        Some(response::CONTROLLER_FENCED_MASTER_EPOCH)
    );
    assert_eq!(state, before);
}

#[test]
fn electing_no_master_keeps_the_set_and_bumps_the_master_epoch() {
    let mut state = ControllerState::default();
    register(&mut state, None, "a:1");
    elect(&mut state, Some(1), 0);
    elect(&mut state, None, 1);
    let group = state.group("b").unwrap();
    assert_eq!(group.master_id, None);
    assert_eq!(group.master_epoch, 2);
    assert_eq!(group.sync_state_set, BTreeSet::from([1]));
    assert_eq!(group.replica_info().master_address, None);
}

#[test]
fn alter_sync_state_set_is_fenced_by_master_then_set_epoch_then_members() {
    let mut state = ControllerState::default();
    register(&mut state, None, "a:1");
    register(&mut state, None, "a:2");
    elect(&mut state, Some(1), 0);
    let before = state.clone();
    let cases = [
        (
            (2, 1),
            vec![1, 2],
            1,
            response::CONTROLLER_FENCED_MASTER_EPOCH,
        ),
        (
            (1, 0),
            vec![1, 2],
            1,
            response::CONTROLLER_FENCED_MASTER_EPOCH,
        ),
        (
            (1, 1),
            vec![1, 2],
            0,
            response::CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
        ),
        ((1, 1), vec![2], 1, response::CONTROLLER_INVALID_REPLICAS),
        ((1, 1), vec![1, 3], 1, response::CONTROLLER_INVALID_REPLICAS),
    ];
    for (master, set, epoch, expected) in cases {
        let outcome = alter(&mut state, master, &set, epoch);
        assert_eq!(code(&outcome), Some(expected), "{master:?} {set:?} {epoch}");
        assert_eq!(state, before, "a rejected change must change nothing");
    }
    let outcome = alter(&mut state, (1, 1), &[1, 2], 1);
    assert_eq!(
        outcome,
        ApplyOutcome::SyncStateSetAltered {
            reply: AlterSyncStateSetReply {
                sync_state_set: vec![1, 2],
                sync_state_set_epoch: 2
            }
        }
    );
    // The same request again now holds a stale set epoch.
    assert_eq!(
        code(&alter(&mut state, (1, 1), &[1], 1)),
        Some(response::CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH)
    );
}

#[test]
fn cleaning_the_master_clears_it_and_fences_its_epoch() {
    let mut state = ControllerState::default();
    register(&mut state, None, "a:1");
    register(&mut state, None, "a:2");
    elect(&mut state, Some(1), 0);
    alter(&mut state, (1, 1), &[1, 2], 1);
    let clean = |ids: Vec<u64>| Command::CleanBrokerData {
        cluster_name: "c".into(),
        broker_name: "b".into(),
        broker_ids: ids,
    };
    assert_eq!(
        code(&state.apply(&clean(vec![5]))),
        Some(response::CONTROLLER_INVALID_CLEAN_BROKER_METADATA)
    );
    assert_eq!(state.apply(&clean(vec![1])), ApplyOutcome::Cleaned);
    let group = state.group("b").unwrap();
    assert_eq!(group.master_id, None);
    assert_eq!(group.master_epoch, 2);
    assert_eq!(group.sync_state_set, BTreeSet::from([2]));
    assert_eq!(state.apply(&clean(vec![])), ApplyOutcome::Cleaned);
    assert!(state.group("b").is_none());
    assert_eq!(
        code(&state.apply(&clean(vec![]))),
        Some(response::CONTROLLER_BROKER_METADATA_NOT_EXIST)
    );
}

#[test]
fn state_round_trips_through_json() {
    let mut state = ControllerState::default();
    register(&mut state, None, "a:1");
    elect(&mut state, Some(1), 0);
    let text = serde_json::to_string(&state).unwrap();
    let back: ControllerState = serde_json::from_str(&text).unwrap();
    assert_eq!(back, state);
}
