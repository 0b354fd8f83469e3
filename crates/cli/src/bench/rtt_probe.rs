//! Bare TCP round trips on loopback between two threads: the floor a single synchronous
//! send stands on (one request out, one reply back, each side woken once), measured per cycle
//! so that `bench produce --rtt-baseline` can put its send p50 next to the machine's round
//! trip p50 in the same run.
//!
//! Why it is worth measuring: the round trip is set by the machine, not by the broker. On a
//! VM whose idle vCPUs halt at once (guest halt polling off), waking the other side costs
//! tens of microseconds, and a loopback round trip between two processes takes 60–80 µs
//! instead of the 15–20 µs of a machine that polls before halting (docs/performance.md).
//!
//! Blocking sockets with `TCP_NODELAY`; both sockets carry a read timeout, so a probe never
//! hangs, and the echo thread ends when the client closes its side.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};

use super::stats::Probe;

/// Round trips of `bench produce --rtt-baseline` (fewer when its time bound comes first).
pub const PRODUCE_PROBE_CYCLES: u64 = 20_000;
/// Time bound of `bench produce --rtt-baseline`.
pub const PRODUCE_PROBE_TIME: Duration = Duration::from_secs(3);
/// Bytes a round trip adds to the send's body size on the way out: about the remoting
/// frame and header of a SEND_MESSAGE request.
pub const REQUEST_OVERHEAD_BYTES: usize = 384;
/// Bytes of the reply: about a SEND_MESSAGE reply.
pub const REPLY_BYTES: usize = 256;
/// The longest either side waits for the other's bytes before the probe fails.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Sends `request_bytes` and reads `reply_bytes` back over one loopback connection, `cycles`
/// times or until `max_time` has passed.
///
/// # Errors
/// The connection could not be made, or a read or write failed or timed out.
pub fn run(
    request_bytes: usize,
    reply_bytes: usize,
    cycles: u64,
    max_time: Duration,
) -> Result<Probe> {
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("binding the round-trip probe")?;
    let address = listener.local_addr().context("the probe's address")?;
    // The handshake completes in the kernel's backlog, so accepting after connecting in
    // this thread cannot block.
    let client = TcpStream::connect(address).context("connecting the round-trip probe")?;
    let (server, _) = listener
        .accept()
        .context("accepting the round-trip probe")?;
    for stream in [&client, &server] {
        stream.set_nodelay(true).context("TCP_NODELAY")?;
        stream
            .set_read_timeout(Some(READ_TIMEOUT))
            .context("read timeout")?;
    }
    let echo = thread::Builder::new()
        .name("ferromq-rtt-echo".into())
        .spawn(move || answer(server, request_bytes, reply_bytes))
        .context("starting the echo thread")?;
    let measured = ask(client, request_bytes, reply_bytes, cycles, max_time);
    let answered = echo
        .join()
        .map_err(|_| anyhow!("the round-trip probe's echo thread panicked"))?;
    let probe = measured?;
    answered?;
    Ok(probe)
}

/// [`run`] with the `bench produce` settings for bodies of `body_bytes`.
///
/// # Errors
/// As [`run`].
pub fn run_for_send(body_bytes: usize) -> Result<Probe> {
    run(
        body_bytes + REQUEST_OVERHEAD_BYTES,
        REPLY_BYTES,
        PRODUCE_PROBE_CYCLES,
        PRODUCE_PROBE_TIME,
    )
}

/// The client side: one request, one reply, timed; closes the connection when done (which
/// ends the echo thread).
fn ask(
    mut stream: TcpStream,
    request_bytes: usize,
    reply_bytes: usize,
    cycles: u64,
    max_time: Duration,
) -> Result<Probe> {
    let request = vec![0x5a_u8; request_bytes];
    let mut reply = vec![0_u8; reply_bytes];
    let started = Instant::now();
    let mut probe = Probe::default();
    while probe.cycles < cycles && started.elapsed() < max_time {
        let cycle = Instant::now();
        stream.write_all(&request).context("probe request")?;
        stream.read_exact(&mut reply).context("probe reply")?;
        probe.record(cycle.elapsed());
    }
    probe.elapsed = started.elapsed();
    Ok(probe)
}

/// The echo side: answers each whole request with `reply_bytes` until the client closes.
fn answer(mut stream: TcpStream, request_bytes: usize, reply_bytes: usize) -> Result<()> {
    let mut request = vec![0_u8; request_bytes];
    let reply = vec![0xa5_u8; reply_bytes];
    loop {
        match stream.read_exact(&mut request) {
            Ok(()) => stream.write_all(&reply).context("probe echo reply")?,
            Err(error) if error.kind() == ErrorKind::UnexpectedEof => return Ok(()),
            Err(error) => return Err(error).context("probe echo request"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_counts_its_round_trips() {
        let probe = run(512, 256, 200, Duration::from_secs(30)).expect("probe");
        assert_eq!(probe.cycles, 200);
        assert_eq!(probe.latency.count(), 200);
        assert!(probe.p50_us() > 0.0 && probe.p50_us() <= probe.p99_us());
        assert!(probe.elapsed > Duration::ZERO);
    }

    #[test]
    fn a_probe_stops_at_its_time_bound() {
        let probe = run(1, 1, u64::MAX, Duration::ZERO).expect("probe");
        assert_eq!(probe.cycles, 0, "no round trip starts after the bound");
    }
}
