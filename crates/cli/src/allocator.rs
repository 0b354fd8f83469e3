//! The `ferromq` binary's global allocator: the system allocator (glibc malloc) or mimalloc,
//! chosen at run time by `FERROMQ_ALLOCATOR=system|mimalloc`, with optional allocation
//! counting per side (client or broker) for `ferromq bench alloc`.
//!
//! Why run time rather than a cargo feature: one release build compares both allocators in
//! one sitting (`scripts/bench-allocator`), on the same binary and the same page cache.
//!
//! # The choice is made once
//! The first call into the allocator reads `FERROMQ_ALLOCATOR` with `libc::getenv` on a static
//! C string (which does not allocate) and stores the decision in [`STATE`]; no later call
//! reads the environment again and nothing ever writes [`STATE`] after that. So every
//! `dealloc` and `realloc` goes to the allocator that made the block: the invariant that makes
//! the dispatch sound. The first allocation happens in the runtime's start-up, on the main
//! thread, before any other thread exists (making a thread allocates); should two threads
//! still race on it, both read the same environment and a compare-exchange keeps one value.
//!
//! An unknown value is not silently replaced: the allocator records [`Selection::Invalid`]
//! (and serves with the system allocator, the only one that can serve before `main`), and
//! `main` refuses to run with an `error:` line and exit status 1 (see [`check_selection`]).
//!
//! # Default
//! [`DEFAULT`] is the allocator used when the variable is unset or empty; the figures behind
//! the choice are in docs/performance.md ("Allocator").
//!
//! # Counting
//! [`set_counting`] turns counting on. While off, the only cost is one relaxed atomic load per
//! call. While on, every `alloc`, `alloc_zeroed` and `realloc` adds one allocation and its
//! requested size to the counters of the calling thread's [`Side`] (a const-initialized
//! thread-local without destructor, so reading it never allocates); frees are not counted.
//! Threads are [`Side::Broker`] unless tagged [`Side::Client`] with [`tag_current_thread`].

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

/// The environment variable that chooses the allocator.
pub const ENV_VAR: &str = "FERROMQ_ALLOCATOR";
/// [`ENV_VAR`] as a C string for `getenv`.
const ENV_VAR_C: &CStr = c"FERROMQ_ALLOCATOR";

/// An allocator the binary can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// `std::alloc::System` (glibc malloc on Linux).
    System,
    /// mimalloc, statically linked.
    Mimalloc,
}

impl Choice {
    /// The value of [`ENV_VAR`] that selects it.
    pub fn name(self) -> &'static str {
        match self {
            Choice::System => "system",
            Choice::Mimalloc => "mimalloc",
        }
    }
}

/// The allocator used when [`ENV_VAR`] is unset or empty; see docs/performance.md.
pub const DEFAULT: Choice = Choice::Mimalloc;

/// What the first allocation decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    /// A valid (or default) choice.
    Chosen(Choice),
    /// [`ENV_VAR`] held something else; the process must not run.
    Invalid,
}

const UNDECIDED: u8 = 0;
const SYSTEM: u8 = 1;
const MIMALLOC: u8 = 2;
/// An unknown value: served by the system allocator until `main` exits.
const INVALID: u8 = 3;

/// The decision: [`UNDECIDED`] until the first allocation, then fixed forever.
static STATE: AtomicU8 = AtomicU8::new(UNDECIDED);

/// Which side of a benchmark a thread works for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The broker (and every thread nobody tagged).
    Broker = 0,
    /// The client library and the benchmark driving it.
    Client = 1,
}

thread_local! {
    /// The calling thread's side. Const-initialized and without `Drop`: access never
    /// allocates and never registers a destructor, so the allocator may read it.
    static SIDE: Cell<Side> = const { Cell::new(Side::Broker) };
}

static COUNTING: AtomicBool = AtomicBool::new(false);

/// Allocation counters of one side, on their own cache line.
#[repr(align(64))]
struct SideCounters {
    allocations: AtomicU64,
    bytes: AtomicU64,
}

static COUNTERS: [SideCounters; 2] = [
    SideCounters {
        allocations: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
    },
    SideCounters {
        allocations: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
    },
];

/// Allocations and requested bytes counted for one side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Count {
    /// Calls to `alloc`, `alloc_zeroed` and `realloc`.
    pub allocations: u64,
    /// Bytes those calls asked for (a `realloc` counts its new size).
    pub bytes: u64,
}

impl Count {
    /// `self - earlier`, saturating.
    pub fn since(self, earlier: Count) -> Count {
        Count {
            allocations: self.allocations.saturating_sub(earlier.allocations),
            bytes: self.bytes.saturating_sub(earlier.bytes),
        }
    }
}

/// Counters of both sides at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// [`Side::Broker`].
    pub broker: Count,
    /// [`Side::Client`].
    pub client: Count,
}

impl Counts {
    /// `self - earlier` per side.
    pub fn since(self, earlier: Counts) -> Counts {
        Counts {
            broker: self.broker.since(earlier.broker),
            client: self.client.since(earlier.client),
        }
    }
}

/// Turns counting on or off (it starts off).
pub fn set_counting(on: bool) {
    COUNTING.store(on, Ordering::SeqCst);
}

/// The counters now.
pub fn counts() -> Counts {
    let read = |side: Side| {
        let c = &COUNTERS[side as usize];
        Count {
            allocations: c.allocations.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
        }
    };
    Counts {
        broker: read(Side::Broker),
        client: read(Side::Client),
    }
}

/// Attributes the calling thread's later allocations to `side`.
pub fn tag_current_thread(side: Side) {
    SIDE.with(|s| s.set(side));
}

/// What the first allocation decided (deciding now if nothing was allocated yet).
pub fn selection() -> Selection {
    match state() {
        SYSTEM => Selection::Chosen(Choice::System),
        MIMALLOC => Selection::Chosen(Choice::Mimalloc),
        _ => Selection::Invalid,
    }
}

/// `Err` with the message `main` prints when [`ENV_VAR`] held an unknown value.
pub fn check_selection() -> Result<Choice, String> {
    match selection() {
        Selection::Chosen(choice) => Ok(choice),
        Selection::Invalid => {
            let value = std::env::var_os(ENV_VAR).unwrap_or_default();
            Err(format!(
                "{ENV_VAR}={} is not an allocator; use system or mimalloc (unset: {})",
                value.to_string_lossy(),
                DEFAULT.name()
            ))
        }
    }
}

/// The decided state, deciding on first use.
#[inline]
fn state() -> u8 {
    let state = STATE.load(Ordering::Relaxed);
    if state != UNDECIDED {
        return state;
    }
    let decided = decide();
    match STATE.compare_exchange(UNDECIDED, decided, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => decided,
        Err(earlier) => earlier,
    }
}

/// Reads [`ENV_VAR`] without allocating.
#[cold]
fn decide() -> u8 {
    // SAFETY: `ENV_VAR_C` is a NUL-terminated static string. getenv returns null or a pointer
    // into the environment, valid until the environment is modified; this runs at the first
    // allocation, before any thread but the main one exists and before anything in this
    // program calls setenv, and the bytes are compared before returning.
    let value = unsafe { libc::getenv(ENV_VAR_C.as_ptr()) };
    if value.is_null() {
        return choice_state(DEFAULT);
    }
    // SAFETY: a non-null getenv result points to a NUL-terminated string (see above).
    let bytes = unsafe { CStr::from_ptr(value) }.to_bytes();
    match bytes {
        b"" => choice_state(DEFAULT),
        b"system" => SYSTEM,
        b"mimalloc" => MIMALLOC,
        _ => INVALID,
    }
}

fn choice_state(choice: Choice) -> u8 {
    match choice {
        Choice::System => SYSTEM,
        Choice::Mimalloc => MIMALLOC,
    }
}

/// Adds one allocation of `size` bytes to the calling thread's side, when counting is on.
#[inline]
fn count(size: usize) {
    if !COUNTING.load(Ordering::Relaxed) {
        return;
    }
    let side = SIDE.try_with(Cell::get).unwrap_or(Side::Broker);
    let c = &COUNTERS[side as usize];
    c.allocations.fetch_add(1, Ordering::Relaxed);
    c.bytes.fetch_add(size as u64, Ordering::Relaxed);
}

/// The global allocator: dispatches every call to the allocator [`STATE`] names.
pub struct Dispatch;

// SAFETY: every method forwards to the allocator fixed in `STATE` by the first call (the
// module docs show it never changes afterwards), so a block is always freed or resized by the
// allocator that made it, with the layout the caller passed, as `GlobalAlloc` requires of
// both `System` and `MiMalloc`. Counting only touches atomics and a const thread-local.
unsafe impl GlobalAlloc for Dispatch {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's contract (non-zero size) is passed on unchanged.
        unsafe {
            match state() {
                MIMALLOC => mimalloc::MiMalloc.alloc(layout),
                _ => System.alloc(layout),
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: as `alloc`.
        unsafe {
            match state() {
                MIMALLOC => mimalloc::MiMalloc.alloc_zeroed(layout),
                _ => System.alloc_zeroed(layout),
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from the same allocator (the state never changes once decided,
        // and it was decided by the allocation that made `ptr`).
        unsafe {
            match state() {
                MIMALLOC => mimalloc::MiMalloc.dealloc(ptr, layout),
                _ => System.dealloc(ptr, layout),
            }
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: as `dealloc`: `ptr` belongs to the allocator the state names.
        unsafe {
            match state() {
                MIMALLOC => mimalloc::MiMalloc.realloc(ptr, layout, new_size),
                _ => System.realloc(ptr, layout, new_size),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counting_attributes_allocations_to_the_tagged_side() {
        // Other tests allocate concurrently on untagged (broker) threads; only this test
        // tags a thread, so the client counter moves by what that thread counts.
        set_counting(true);
        let before = counts();
        std::thread::spawn(|| {
            tag_current_thread(Side::Client);
            count(100);
            count(28);
        })
        .join()
        .unwrap();
        let after = counts().since(before);
        set_counting(false);
        assert!(after.client.allocations >= 2);
        assert!(after.client.bytes >= 128);
        let quiet = counts();
        count(1_000);
        assert_eq!(counts().since(quiet).client, Count::default());
    }

    #[test]
    fn the_decision_is_a_valid_state_and_stable() {
        let first = state();
        assert!(matches!(first, SYSTEM | MIMALLOC | INVALID));
        assert_eq!(state(), first);
    }
}
