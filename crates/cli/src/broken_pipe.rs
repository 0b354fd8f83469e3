//! A closed stdout ends a `ferromq` command the way it ends `cat`, `grep` or `yes`: the process
//! dies of SIGPIPE, silently, and the shell reports status 141 (128 + 13), so
//! `ferromq admin topicList -n ... | head -1` prints one line and no panic.
//!
//! Rust starts every program with SIGPIPE ignored: a write to a closed pipe fails with EPIPE
//! instead, and `println!` turns that failure into a panic ("failed printing to stdout: Broken
//! pipe"). Dying of the signal, rather than exiting 0, is what Unix tools do and tells a caller
//! that checks the producer's status (`set -o pipefail`) that its output was cut short.
//!
//! Why not restore the default disposition, as cargo and rustc do? Under `SIG_DFL` every EPIPE
//! kills the process, not only stdout's: a socket written with `writev` (tokio-util's
//! `FramedWrite` does, and unlike `send(MSG_NOSIGNAL)` it raises SIGPIPE) or a child's closed
//! stdin would end the command without its `error:` line. The handler installed here dies only
//! when stdout itself is the broken pipe, and otherwise returns, leaving the failed write to
//! report EPIPE as before.
//!
//! Servers (`standalone`, `namesrv`, `broker`) and `chaos` do not install it: they are often
//! started by a parent that reads their announcement line and then closes the pipe, and from
//! then on any client hanging up mid-write would kill them.

use std::io;

/// Installs the SIGPIPE handler described in the module docs.
///
/// # Errors
/// `sigaction` refused (it cannot for SIGPIPE on Linux); SIGPIPE stays ignored.
pub fn die_when_stdout_closes() -> io::Result<()> {
    // SAFETY: `action` is fully initialised (zeroed, then every field ferromq relies on set)
    // before it is passed, and `on_sigpipe` is an `extern "C" fn(c_int)` as `sa_sigaction`
    // expects without SA_SIGINFO. The handler only calls async-signal-safe functions (see
    // there), so it is sound whichever thread the signal interrupts.
    let installed = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigpipe as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = 0;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGPIPE, &action, std::ptr::null_mut())
    };
    if installed == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Runs in whichever thread wrote to a pipe or socket without a reader. If stdout is that
/// broken pipe (poll reports POLLERR for a pipe whose readers are gone, POLLHUP for a hung-up
/// terminal or socket), SIGPIPE is set back to its default and raised again: it stays blocked
/// while this handler runs and kills the process as soon as it returns. Otherwise the handler
/// returns and the write fails with EPIPE as if SIGPIPE were ignored.
extern "C" fn on_sigpipe(_signal: libc::c_int) {
    let mut stdout = libc::pollfd {
        fd: libc::STDOUT_FILENO,
        events: 0,
        revents: 0,
    };
    // SAFETY: poll, signal and raise are async-signal-safe (POSIX.1-2008, signal-safety(7));
    // `stdout` outlives the poll call. errno, which poll may change, is saved and restored so
    // the interrupted code still sees its own EPIPE.
    unsafe {
        let errno = *errno_location();
        let broken = libc::poll(&mut stdout, 1, 0) == 1
            && stdout.revents & (libc::POLLERR | libc::POLLHUP) != 0;
        if broken {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            libc::raise(libc::SIGPIPE);
        }
        *errno_location() = errno;
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
unsafe fn errno_location() -> *mut libc::c_int {
    libc::__errno_location()
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
unsafe fn errno_location() -> *mut libc::c_int {
    libc::__error()
}
