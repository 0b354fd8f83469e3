//! A shared mapping of a span of a segment file, unmapped on drop: the one `mmap` both the
//! committer's writable map (`super::mapping`) and the pull reads' read-only map
//! (`super::read_map`) stand on. It only owns the address range; what may be touched, and
//! when, is the owner's rule.

use std::fs::File;
use std::ptr::NonNull;

/// Whether the mapping may be written through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MapAccess {
    ReadOnly,
    ReadWrite,
}

/// `len` bytes of a file from its start, mapped shared.
#[derive(Debug)]
pub(super) struct FileMap {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: a `FileMap` is an address range it owns; no safe method reads or writes through it
// (its owners do, in `unsafe` blocks that state their own rules), so moving or sharing the
// value across threads is sound.
unsafe impl Send for FileMap {}
// SAFETY: as above.
unsafe impl Sync for FileMap {}

impl FileMap {
    /// Maps `len` bytes of `file` from its start, shared. Nothing is touched.
    #[cfg(target_os = "linux")]
    pub(super) fn map(file: &File, len: u64, access: MapAccess) -> std::io::Result<FileMap> {
        use std::os::fd::AsRawFd;
        let len = usize::try_from(len).map_err(|_| std::io::ErrorKind::InvalidInput)?;
        if len == 0 {
            return Err(std::io::ErrorKind::InvalidInput.into());
        }
        let protection = match access {
            MapAccess::ReadOnly => libc::PROT_READ,
            MapAccess::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
        };
        // SAFETY: a fresh mapping chosen by the kernel (null hint) overlaps no Rust memory;
        // the descriptor is `file`'s, open with the access asked for, alive for the call (the
        // mapping keeps its own reference to the file afterwards).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                protection,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let base = NonNull::new(base.cast::<u8>()).ok_or(std::io::ErrorKind::InvalidData)?;
        Ok(FileMap { base, len })
    }

    #[cfg(not(target_os = "linux"))]
    pub(super) fn map(_file: &File, _len: u64, _access: MapAccess) -> std::io::Result<FileMap> {
        Err(std::io::ErrorKind::Unsupported.into())
    }

    /// The first byte of the mapping.
    pub(super) fn base(&self) -> NonNull<u8> {
        self.base
    }

    /// Length of the mapping in bytes.
    pub(super) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for FileMap {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly the mapping `map` made, unmapped only here, once;
        // no reference into it outlives `self` (owners borrow it only for a copy's duration).
        let rc = unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
        if rc != 0 {
            tracing::warn!(
                error = %std::io::Error::last_os_error(),
                "unmapping a CommitLog segment map failed"
            );
        }
    }
}

/// A new, empty file `segment` under `dir`, open for reading and writing (tests of maps).
#[cfg(test)]
pub(super) fn scratch_file(dir: &std::path::Path) -> File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.join("segment"))
        .expect("scratch segment file")
}
