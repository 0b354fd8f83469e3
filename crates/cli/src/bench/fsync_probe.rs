//! A bare `write` + `fdatasync` loop on a plain file: the floor a SYNC_FLUSH acknowledgement
//! stands on, measured per cycle so that a bench can put its own p50 next to the disk's p50
//! in the same run (`bench store --flush sync`, `bench produce --fsync-baseline DIR`).
//!
//! Each cycle appends `write_bytes` to the file and fdatasyncs it, as an append to the
//! CommitLog does: the file grows, so every fsync also makes the new length durable.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::stats::Probe;
use super::ScratchDir;

/// Cycles of `bench produce --fsync-baseline` (fewer when its time bound comes first).
pub const PRODUCE_PROBE_CYCLES: u64 = 2_000;
/// Time bound of `bench produce --fsync-baseline`.
pub const PRODUCE_PROBE_TIME: Duration = Duration::from_secs(3);
/// Bytes per cycle of `bench produce --fsync-baseline`: one 4 KiB page.
pub const PRODUCE_PROBE_WRITE_BYTES: usize = 4096;

/// Appends `write_bytes` and fdatasyncs, `cycles` times or until `max_time` has passed, to a
/// new file at `path` (which the caller removes).
///
/// # Errors
/// The file could not be created, written or synced.
pub fn run(path: &Path, write_bytes: usize, cycles: u64, max_time: Duration) -> Result<Probe> {
    let mut file = File::create(path)
        .with_context(|| format!("creating the fsync baseline file {}", path.display()))?;
    let buffer = vec![0x5a_u8; write_bytes];
    let started = Instant::now();
    let mut probe = Probe::default();
    while probe.cycles < cycles && started.elapsed() < max_time {
        let cycle = Instant::now();
        file.write_all(&buffer)
            .with_context(|| format!("baseline write to {}", path.display()))?;
        file.sync_data()
            .with_context(|| format!("baseline fdatasync of {}", path.display()))?;
        probe.record(cycle.elapsed());
    }
    probe.elapsed = started.elapsed();
    Ok(probe)
}

/// [`run`] with the `bench produce` settings in a scratch directory under `dir` (removed
/// afterwards): the disk the broker's data is on.
///
/// # Errors
/// As [`run`], or the scratch directory could not be made.
pub fn run_in(dir: &Path) -> Result<Probe> {
    let scratch = ScratchDir::create(Some(dir))?;
    run(
        &scratch.path().join("fsync-probe"),
        PRODUCE_PROBE_WRITE_BYTES,
        PRODUCE_PROBE_CYCLES,
        PRODUCE_PROBE_TIME,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_counts_its_cycles_and_leaves_the_bytes_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("probe");
        let probe = run(&path, 4096, 20, Duration::from_secs(30)).expect("probe");
        assert_eq!(probe.cycles, 20);
        assert_eq!(probe.latency.count(), 20);
        assert!(probe.p50_us() > 0.0 && probe.p50_us() <= probe.p99_us());
        assert_eq!(std::fs::metadata(&path).expect("stat").len(), 20 * 4096);
    }

    #[test]
    fn a_probe_stops_at_its_time_bound() {
        let dir = tempfile::tempdir().expect("tempdir");
        let probe = run(&dir.path().join("probe"), 1, u64::MAX, Duration::ZERO).expect("probe");
        assert_eq!(probe.cycles, 0, "no cycle starts after the bound");
    }

    #[test]
    fn run_in_removes_its_scratch_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let probe = run_in(dir.path()).expect("probe");
        assert!(probe.cycles > 0);
        let left: Vec<_> = std::fs::read_dir(dir.path()).expect("read_dir").collect();
        assert!(left.is_empty(), "scratch left behind: {left:?}");
    }
}
