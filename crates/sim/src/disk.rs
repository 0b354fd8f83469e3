//! A replica's simulated disk: two files, the CommitLog and the epoch file, each with live
//! bytes (what reads see) and durable bytes (what survives a crash).
//!
//! # Fault model, per file kind
//! - **CommitLog tail** (appended, then fsynced by a flush): bytes appended since the last
//!   successful fsync are live but not durable. At a crash they are lost, or a prefix of them
//!   survives (`keep_unsynced_ppm`), and that prefix may end in a torn write whose last byte
//!   is garbage (`tear_ppm`). The record CRC and layout checks must catch a torn record and
//!   recovery cuts the log there. Bytes fsynced are never lost or changed (the disk does not
//!   lie about a completed fsync). An fsync may fail (`fsync_fail_ppm`): nothing becomes
//!   durable and the replica must poison itself (production: a failed fsync poisons the store
//!   until recovery), which the simulation turns into a crash.
//! - **Truncation** of the CommitLog is durable when it returns (production writes a truncate
//!   intent first, so a crash mid-cut is finished at open; the model skips the intermediate
//!   state).
//! - **Epoch file**: written whole with write-temp + fsync + rename + fsync(dir) in
//!   production, so a crash leaves the old or the new file, never a mix; a write may fail
//!   (`epoch_write_fail_ppm`), leaving the old file. A successful write is durable.
//!
//! Invariants:
//! 1. The durable CommitLog bytes are always a prefix of the live ones.
//! 2. After a crash the live bytes are the durable bytes plus at most a prefix of what was
//!    unsynced (possibly with its last byte damaged), and all of it counts as durable.

use crate::rng::{Rng, Stream};

/// The disk's fault rates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskFaults {
    /// Probability that an fsync of the CommitLog fails.
    pub fsync_fail_ppm: u32,
    /// At a crash, probability that part of the unsynced tail survives.
    pub keep_unsynced_ppm: u32,
    /// Probability that a surviving tail ends in a damaged byte.
    pub tear_ppm: u32,
    /// Probability that an epoch-file write fails.
    pub epoch_write_fail_ppm: u32,
    /// Longest fsync, virtual ms.
    pub fsync_ms_max: u64,
}

/// A disk operation that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiskError {
    /// An fsync of the CommitLog failed: nothing new became durable.
    #[error("simulated fsync failure of the CommitLog (nothing past {durable} is durable)")]
    FsyncFailed {
        /// The durable length, unchanged.
        durable: u64,
    },
    /// The epoch file could not be replaced; the old one stays.
    #[error("simulated failure writing the epoch file (the old file stays)")]
    EpochWriteFailed,
}

/// What a crash did to the CommitLog tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CrashLoss {
    /// Unsynced bytes lost.
    pub lost: u64,
    /// Unsynced bytes that survived.
    pub kept: u64,
    /// Whether the surviving tail ends in a damaged byte.
    pub torn: bool,
}

/// One replica's disk.
#[derive(Debug, Clone)]
pub struct SimDisk {
    faults: DiskFaults,
    rng: Rng,
    log: Vec<u8>,
    log_durable: usize,
    epoch_file: Vec<u8>,
}

impl SimDisk {
    /// An empty disk; `salt` tells the replicas' disks apart within one seed.
    pub fn new(seed: u64, salt: u64, faults: DiskFaults) -> SimDisk {
        SimDisk {
            faults,
            rng: Rng::new(seed ^ salt.wrapping_mul(0x9E37_79B9), Stream::Disk),
            log: Vec::new(),
            log_durable: 0,
            epoch_file: Vec::new(),
        }
    }

    /// A disk with no bytes and no faults: a placeholder while a process slot changes hands.
    pub fn blank() -> SimDisk {
        let faults = DiskFaults {
            fsync_fail_ppm: 0,
            keep_unsynced_ppm: 0,
            tear_ppm: 0,
            epoch_write_fail_ppm: 0,
            fsync_ms_max: 1,
        };
        SimDisk::new(0, 0, faults)
    }

    /// The live CommitLog bytes.
    pub fn log(&self) -> &[u8] {
        &self.log
    }

    /// How many CommitLog bytes are durable.
    pub fn durable_len(&self) -> u64 {
        self.log_durable as u64
    }

    /// Appends to the CommitLog (live, not durable).
    pub fn append_log(&mut self, bytes: &[u8]) {
        self.log.extend_from_slice(bytes);
    }

    /// Makes the CommitLog durable up to `upto` (what was appended when the flush began).
    ///
    /// # Errors
    /// [`DiskError::FsyncFailed`]: nothing new is durable.
    pub fn fsync_log(&mut self, upto: u64) -> Result<(), DiskError> {
        if self.rng.chance(self.faults.fsync_fail_ppm) {
            return Err(DiskError::FsyncFailed {
                durable: self.durable_len(),
            });
        }
        let upto = (upto as usize).min(self.log.len());
        self.log_durable = self.log_durable.max(upto);
        Ok(())
    }

    /// Cuts the CommitLog at `to`, durably.
    pub fn truncate_log(&mut self, to: u64) {
        let to = (to as usize).min(self.log.len());
        self.log.truncate(to);
        self.log_durable = self.log_durable.min(to);
    }

    /// The epoch file's bytes (empty: no file).
    pub fn epoch_file(&self) -> &[u8] {
        &self.epoch_file
    }

    /// Replaces the epoch file atomically and durably.
    ///
    /// # Errors
    /// [`DiskError::EpochWriteFailed`]: the old file stays.
    pub fn write_epoch_file(&mut self, bytes: Vec<u8>) -> Result<(), DiskError> {
        if self.rng.chance(self.faults.epoch_write_fail_ppm) {
            return Err(DiskError::EpochWriteFailed);
        }
        self.epoch_file = bytes;
        Ok(())
    }

    /// How long the next fsync takes, virtual ms.
    pub fn fsync_delay_ms(&mut self) -> u64 {
        self.rng.between(1, self.faults.fsync_ms_max.max(1))
    }

    /// The power goes out: the unsynced tail is lost, or partly kept and maybe torn
    /// (invariant 2).
    pub fn crash(&mut self) -> CrashLoss {
        let unsynced = (self.log.len() - self.log_durable) as u64;
        let kept = if unsynced > 0 && self.rng.chance(self.faults.keep_unsynced_ppm) {
            self.rng.below(unsynced + 1)
        } else {
            0
        };
        self.log.truncate(self.log_durable + kept as usize);
        let torn = kept > 0 && self.rng.chance(self.faults.tear_ppm);
        if let Some(last) = self.log.last_mut().filter(|_| torn) {
            *last ^= 0xA5;
        }
        self.log_durable = self.log.len();
        CrashLoss {
            lost: unsynced - kept,
            kept,
            torn,
        }
    }

    /// Stops injecting faults (the liveness phase).
    pub fn calm(&mut self) {
        self.faults.fsync_fail_ppm = 0;
        self.faults.epoch_write_fail_ppm = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::PPM;

    fn faults(fsync_fail_ppm: u32, keep_unsynced_ppm: u32, tear_ppm: u32) -> DiskFaults {
        DiskFaults {
            fsync_fail_ppm,
            keep_unsynced_ppm,
            tear_ppm,
            epoch_write_fail_ppm: 0,
            fsync_ms_max: 5,
        }
    }

    #[test]
    fn a_crash_loses_exactly_the_unsynced_tail() {
        let mut disk = SimDisk::new(1, 0, faults(0, 0, 0));
        disk.append_log(b"durable-");
        disk.fsync_log(8).unwrap();
        disk.append_log(b"volatile");
        assert_eq!((disk.log().len(), disk.durable_len()), (16, 8));
        let loss = disk.crash();
        assert_eq!(
            loss,
            CrashLoss {
                lost: 8,
                kept: 0,
                torn: false
            }
        );
        assert_eq!(disk.log(), b"durable-");
    }

    #[test]
    fn a_kept_tail_is_a_prefix_and_a_torn_one_differs_in_its_last_byte() {
        for seed in 0..200 {
            let mut disk = SimDisk::new(seed, 0, faults(0, PPM, PPM));
            disk.append_log(b"0123");
            disk.fsync_log(4).unwrap();
            disk.append_log(b"456789");
            let loss = disk.crash();
            assert_eq!(loss.lost + loss.kept, 6);
            let log = disk.log().to_vec();
            assert_eq!(&log[..4], b"0123", "durable bytes never change");
            assert_eq!(disk.durable_len(), log.len() as u64);
            if loss.kept > 0 {
                assert!(loss.torn);
                let end = log.len();
                assert_eq!(&log[4..end - 1], &b"456789"[..end - 5]);
                assert_ne!(log[end - 1], b"456789"[end - 5]);
            }
        }
    }

    #[test]
    fn a_failed_fsync_makes_nothing_durable_and_truncation_is_durable() {
        let mut disk = SimDisk::new(3, 0, faults(PPM, 0, 0));
        disk.append_log(b"abc");
        assert_eq!(
            disk.fsync_log(3),
            Err(DiskError::FsyncFailed { durable: 0 })
        );
        disk.calm();
        disk.fsync_log(3).unwrap();
        disk.truncate_log(1);
        assert_eq!((disk.log(), disk.durable_len()), (&b"a"[..], 1));
    }

    #[test]
    fn the_epoch_file_is_replaced_whole_or_not_at_all() {
        let mut disk = SimDisk::new(4, 0, faults(0, 0, 0));
        disk.write_epoch_file(b"one".to_vec()).unwrap();
        let mut failing = SimDisk::new(
            4,
            0,
            DiskFaults {
                epoch_write_fail_ppm: PPM,
                ..faults(0, 0, 0)
            },
        );
        failing.write_epoch_file(b"one".to_vec()).unwrap_err();
        assert_eq!(failing.epoch_file(), b"");
        disk.crash();
        assert_eq!(disk.epoch_file(), b"one");
    }
}
