//! The simulated disk and log under the production seams: recovery cuts a torn tail at the
//! last whole record (the CRC catches the tear), the production `Follower` appends a master's
//! bytes verbatim and refuses gaps and damaged records, and the production `judge_hello`
//! tells a replica on a deposed master's branch to cut it.

use ferromq_broker::replication::follower::{Follower, MasterTerm};
use ferromq_broker::replication::handshake::{judge_hello, wire_epochs, GroupIdentity, Verdict};
use ferromq_protocol::ha::{Data, Hello, RecordSample, HA_VERSION};
use ferromq_sim::disk::{DiskFaults, SimDisk};
use ferromq_sim::log::{message_body, SimLog};
use ferromq_sim::rng::PPM;

fn faults(keep_unsynced_ppm: u32, tear_ppm: u32) -> DiskFaults {
    DiskFaults {
        fsync_fail_ppm: 0,
        keep_unsynced_ppm,
        tear_ppm,
        epoch_write_fail_ppm: 0,
        fsync_ms_max: 1,
    }
}

fn log_with(seed: u64, faults: DiskFaults, messages: u64) -> SimLog {
    let (log, _) = SimLog::open(SimDisk::new(seed, 1, faults));
    for id in 0..messages {
        log.append_message(&message_body(id, 10 + id as usize), id)
            .expect("appends");
    }
    log
}

#[test]
fn recovery_cuts_a_torn_tail_at_the_last_whole_record() {
    let mut torn_seen = 0;
    for seed in 0..100 {
        let log = log_with(seed, faults(PPM, PPM), 4);
        let first_end = log.record_at(0).expect("record 0").end();
        log.with_disk(|d| d.fsync_log(first_end)).expect("fsync");
        let end_before = log.end();
        let mut disk = log.into_disk();
        let loss = disk.crash();
        let (recovered, cut) = SimLog::open(disk);
        assert!(recovered.end() >= first_end, "durable bytes survive");
        assert!(recovered.end() <= end_before);
        assert_eq!(cut.end, recovered.end());
        // The recovered end is a record boundary: every record up to it parses.
        let mut at = 0;
        while at < recovered.end() {
            at = recovered.record_at(at).expect("whole records only").end();
        }
        assert_eq!(at, recovered.end());
        if loss.torn {
            torn_seen += 1;
            assert!(
                cut.bytes_cut > 0,
                "a torn record is cut (seed {seed}: {loss:?})"
            );
        }
    }
    assert!(torn_seen > 10, "tears were injected: {torn_seen}");
}

#[test]
fn a_crash_without_kept_tail_loses_exactly_what_was_not_fsynced() {
    let log = log_with(1, faults(0, 0), 3);
    let durable = log.record_at(0).unwrap().end();
    log.with_disk(|d| d.fsync_log(durable)).unwrap();
    let mut disk = log.into_disk();
    disk.crash();
    let (recovered, cut) = SimLog::open(disk);
    assert_eq!((recovered.end(), cut.bytes_cut), (durable, 0));
}

#[test]
fn the_follower_appends_verbatim_and_refuses_gaps_and_damage() {
    let master = log_with(2, faults(0, 0), 3);
    let (slave, _) = SimLog::open(SimDisk::new(2, 2, faults(0, 0)));
    let mut follower = Follower::default();
    let term = MasterTerm::default();
    let (bytes, next) = master.chunk(0, 1 << 20).expect("chunk");
    let data = |offset: u64, bytes: Vec<u8>| Data {
        offset,
        watermark: 0,
        master_end: master.end(),
        bytes: bytes.into(),
    };
    let mut damaged = bytes.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 1;
    assert!(follower.on_data(&slave, &data(0, damaged), &term).is_err());
    assert_eq!(slave.end(), 0, "nothing of a damaged batch lands");
    assert!(follower
        .on_data(&slave, &data(5, bytes.clone()), &term)
        .is_err());
    let ticket = follower.on_data(&slave, &data(0, bytes), &term).unwrap();
    assert_eq!((ticket.end, slave.end()), (next, master.end()));
    assert_eq!(slave.bytes(), master.bytes());
}

#[test]
fn a_replica_on_a_deposed_branch_is_told_to_cut_it() {
    // Both logs share epoch 1 up to the first record; the replica went on in epoch 1 while
    // the new master began epoch 2 there.
    let old = log_with(3, faults(0, 0), 0);
    old.begin_epoch(1).unwrap();
    old.append_message(&message_body(1, 5), 1).unwrap();
    let (new_master, _) = SimLog::open(SimDisk::new(3, 2, faults(0, 0)));
    new_master.begin_epoch(1).unwrap();
    let (bytes, _) = old.chunk(0, 1 << 20).unwrap();
    new_master.with_disk(|d| d.append_log(&bytes));
    let mut disk = new_master.into_disk();
    disk.fsync_log(bytes.len() as u64).unwrap();
    let (new_master, _) = SimLog::open(disk);
    let common = new_master.end();
    new_master.begin_epoch(2).unwrap();
    old.append_message(&message_body(9, 3), 9).unwrap();
    let (log_end, samples) = old.log_tail();
    let hello = Hello {
        version: HA_VERSION,
        cluster: "c".into(),
        broker_name: "b".into(),
        broker_id: 2,
        log_end,
        epoch: 1,
        segment_size: 1 << 30,
        samples: samples
            .iter()
            .map(|s| RecordSample {
                offset: s.offset,
                size: s.size,
                crc: s.crc,
            })
            .collect(),
        epochs: wire_epochs(&old.epoch_entries()),
    };
    let identity = GroupIdentity {
        cluster: "c".into(),
        broker_name: "b".into(),
        segment_size: 1 << 30,
    };
    match judge_hello(&identity, true, &hello, &new_master) {
        Ok(Verdict::Truncate(truncate)) => assert_eq!(truncate.to, common),
        other => panic!("expected a truncation to {common}, got {other:?}"),
    }
    old.truncate_diverged(common).unwrap();
    assert_eq!(old.end(), common);
    assert_eq!(
        old.epoch_entries().len(),
        1,
        "epoch 1 starts at 0, below the cut"
    );
}
