//! Zero-copy pull replies (`transferMsgByHeap=false`): the record bytes of a reply go from the
//! CommitLog segment files to a plain TCP socket with `sendfile(2)`, never through user space
//! (RocketMQ's `FileRegion`/`transferTo`).
//!
//! The connection's writer task (`super::connection`) owns the socket: it writes the reply's
//! head through its codec, flushes, then calls [`send_regions`], then writes the reply's last
//! byte. The socket is non-blocking: each `sendfile` runs once tokio reports the socket
//! writable, a partial send continues where it stopped, EAGAIN waits for readiness again, and
//! a client that reads nothing for `stall` (the connection's idle timeout) ends the reply.
//!
//! Invariant (a record cut by a truncation is never sent as valid): [`send_regions`] sends
//! every byte but the reply's last one and then checks that no region's segment began a
//! truncation since its record was checked (`FileRegion::check_intact`); only then does the
//! writer send the last byte (`FileRegion::LAST_BYTE`, from memory). A peer never holds a
//! whole reply whose bytes may have changed; on any doubt, or when `sendfile` ends early (the
//! file got shorter), the connection is closed and the client pulls again.
//!
//! What is not checked: the body CRC. The store checks each record's head and tail before it
//! hands out a region, not its body (RocketMQ's zero-copy path checks no CRC either);
//! `transferMsgByHeap=true`, the default, reads and verifies every record.
//!
//! Fallback: TLS connections, gRPC and pops copy (the processor decides before reading), and
//! when `sendfile` is refused on its first call of a reply (EINVAL, ENOSYS, EOPNOTSUPP: a file
//! system or socket it does not support) the reply is copied and verified instead, and so is
//! every later one (`observability::transfer`, counted, logged once).

use std::io;
use std::time::Duration;

use ferromq_store::{FileRegion, RegionError};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;

/// Why a zero-copy send stopped.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// `sendfile` refused its first call: nothing of the body was sent; copy instead.
    #[error("sendfile is not supported here: {0}")]
    Unsupported(#[source] io::Error),
    /// A region was truncated after its check, or the file ended before the region did.
    #[error(transparent)]
    Truncated(#[from] RegionError),
    /// The file ended before the region did (`sendfile` returned 0).
    #[error("sendfile stopped {missing} bytes short: the file ended early")]
    Short { missing: u64 },
    /// The client read nothing for the whole stall bound.
    #[error("the client read nothing for {0:?}")]
    Stalled(Duration),
    /// The socket failed.
    #[error("sendfile failed: {0}")]
    Io(#[source] io::Error),
}

/// A connection's write side that may be a plain TCP socket (zero copy possible) or not
/// (TLS: the bytes must pass through the encryption).
pub trait MaybeTcp {
    /// The socket, when the write side writes straight to one.
    fn tcp(&self) -> Option<&TcpStream>;
}

impl MaybeTcp for OwnedWriteHalf {
    fn tcp(&self) -> Option<&TcpStream> {
        Some(self.as_ref())
    }
}

impl<T> MaybeTcp for tokio::io::WriteHalf<T> {
    fn tcp(&self) -> Option<&TcpStream> {
        None
    }
}

/// Sends the regions, in order, to `stream` with `sendfile`, except the very last byte of
/// the last region; then checks every region is still intact (see the module invariant).
/// Returns the bytes sent. `stall` bounds each wait for the socket to take more bytes.
///
/// # Errors
/// [`SendError`]; after any but `Unsupported` the connection must be closed (part of a reply
/// may have been sent).
pub async fn send_regions(
    stream: &TcpStream,
    regions: &[FileRegion],
    stall: Duration,
) -> Result<u64, SendError> {
    let mut sent = 0u64;
    let last = regions.len().saturating_sub(1);
    for (index, region) in regions.iter().enumerate() {
        let len = if index == last {
            region.len().saturating_sub(1)
        } else {
            region.len()
        };
        let end = region.pos() + len;
        let mut pos = region.pos();
        while pos < end {
            match tokio::time::timeout(stall, stream.writable()).await {
                Err(_) => return Err(SendError::Stalled(stall)),
                Ok(Err(error)) => return Err(SendError::Io(error)),
                Ok(Ok(())) => {}
            }
            let want = end - pos;
            let result = stream.try_io(tokio::io::Interest::WRITABLE, || {
                sys::sendfile(stream, region, pos, want)
            });
            match result {
                Ok(0) => return Err(SendError::Short { missing: end - pos }),
                Ok(n) => {
                    pos += n;
                    sent += n;
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) if sent == 0 && sys::is_unsupported(&error) => {
                    return Err(SendError::Unsupported(error))
                }
                Err(error) => return Err(SendError::Io(error)),
            }
        }
    }
    FileRegion::check_all_intact(regions)?;
    Ok(sent)
}

#[cfg(target_os = "linux")]
mod sys {
    use std::io;
    use std::os::fd::{AsFd, AsRawFd};

    use ferromq_store::FileRegion;
    use tokio::net::TcpStream;

    /// One `sendfile(2)` of at most `len` bytes of `region`'s file from `pos` to `stream`;
    /// returns the bytes the kernel took (0: the file ends at `pos`).
    pub(super) fn sendfile(
        stream: &TcpStream,
        region: &FileRegion,
        pos: u64,
        len: u64,
    ) -> io::Result<u64> {
        let mut offset = libc::off_t::try_from(pos)
            .map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        // Linux sends at most 0x7ffff000 bytes per call; the loop sends the rest.
        let count = usize::try_from(len).unwrap_or(usize::MAX);
        let file = region.segment().as_fd();
        // SAFETY: both descriptors are open for the call (the socket is borrowed from the
        // stream, the file from the region's segment, an `Arc` the region holds); `offset`
        // is a live local the kernel reads and updates; no memory of ours is written.
        let sent =
            unsafe { libc::sendfile(stream.as_raw_fd(), file.as_raw_fd(), &mut offset, count) };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(sent as u64)
    }

    /// Errors that mean "sendfile cannot do this here", not "the socket broke".
    pub(super) fn is_unsupported(error: &io::Error) -> bool {
        matches!(
            error.raw_os_error(),
            Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)
        )
    }
}

#[cfg(not(target_os = "linux"))]
mod sys {
    use std::io;

    use ferromq_store::FileRegion;
    use tokio::net::TcpStream;

    /// No `sendfile` with Linux's semantics here: always "unsupported".
    pub(super) fn sendfile(
        _stream: &TcpStream,
        _region: &FileRegion,
        _pos: u64,
        _len: u64,
    ) -> io::Result<u64> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "zero-copy pull replies use Linux sendfile",
        ))
    }

    pub(super) fn is_unsupported(error: &io::Error) -> bool {
        error.kind() == io::ErrorKind::Unsupported
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ferromq_protocol::{DraftRecord, Properties};
    use ferromq_store::{MessageStore, StoreConfig, StoredRegion, TagFilter};
    use tokio::io::AsyncReadExt;
    use tokio::net::{TcpListener, TcpStream};

    use super::{send_regions, SendError};

    const STALL: Duration = Duration::from_secs(5);

    /// A store holding five records on queue 0 of topic `t`, and the regions of all five.
    fn store_with_regions(dir: &std::path::Path) -> (MessageStore, Vec<StoredRegion>) {
        let store = MessageStore::open(StoreConfig::new(dir)).unwrap();
        let props = Properties::encode([("TAGS", "a")]);
        for i in 0..5u8 {
            let body = vec![i; 1000];
            store
                .put(&[DraftRecord {
                    topic: "t",
                    queue_id: 0,
                    flag: 0,
                    sys_flag: 0,
                    born_timestamp_ms: 1,
                    born_host: "127.0.0.1:1".parse().unwrap(),
                    store_host: "127.0.0.1:2".parse().unwrap(),
                    reconsume_times: 0,
                    prepared_tx_offset: 0,
                    body: &body,
                    properties: &props,
                }])
                .unwrap();
        }
        let end = store.committed_end();
        store.wait_dispatched(end, STALL);
        let read = store
            .get_message_regions("t", 0, 0, 5, usize::MAX, &TagFilter::All)
            .unwrap();
        assert_eq!(read.messages.len(), 5);
        (store, read.messages)
    }

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap());
        let (client, accepted) = tokio::join!(client, listener.accept());
        (accepted.unwrap().0, client.unwrap())
    }

    /// Everything the peer receives until the sender's side is dropped.
    async fn received(mut peer: TcpStream) -> Vec<u8> {
        let mut out = Vec::new();
        tokio::time::timeout(STALL, peer.read_to_end(&mut out))
            .await
            .unwrap()
            .unwrap();
        out
    }

    #[tokio::test]
    async fn intact_regions_are_sent_but_for_their_last_byte() {
        let dir = tempfile::tempdir().unwrap();
        let (store, messages) = store_with_regions(dir.path());
        let regions: Vec<_> = messages.iter().map(|m| m.region.clone()).collect();
        let (sender, peer) = pair().await;
        let sent = send_regions(&sender, &regions, STALL).await.unwrap();
        drop(sender);
        let total: u64 = regions.iter().map(|r| r.len()).sum();
        assert_eq!(sent, total - 1);
        let expected: Vec<u8> = regions.iter().flat_map(|r| r.read().unwrap()).collect();
        assert_eq!(received(peer).await, expected[..expected.len() - 1]);
        assert_eq!(expected.last(), Some(&ferromq_store::FileRegion::LAST_BYTE));
        store.close().unwrap();
    }

    #[tokio::test]
    async fn a_truncation_after_the_check_stops_the_reply_before_its_last_byte() {
        let dir = tempfile::tempdir().unwrap();
        let (store, messages) = store_with_regions(dir.path());
        // The first three records stay in the file; a truncation behind them still began
        // after their check, so the reply must not complete.
        let regions: Vec<_> = messages[..3].iter().map(|m| m.region.clone()).collect();
        store.truncate(messages[3].phys_offset).unwrap();
        let (sender, peer) = pair().await;
        let error = send_regions(&sender, &regions, STALL).await.unwrap_err();
        drop(sender);
        assert!(matches!(error, SendError::Truncated(_)), "{error}");
        let total: u64 = regions.iter().map(|r| r.len()).sum();
        assert!((received(peer).await.len() as u64) < total);
        store.close().unwrap();
    }

    #[tokio::test]
    async fn bytes_cut_from_the_file_end_the_send_short() {
        let dir = tempfile::tempdir().unwrap();
        let (store, messages) = store_with_regions(dir.path());
        let regions: Vec<_> = messages.iter().map(|m| m.region.clone()).collect();
        store.truncate(messages[2].phys_offset).unwrap();
        let (sender, peer) = pair().await;
        let error = send_regions(&sender, &regions, STALL).await.unwrap_err();
        drop(sender);
        assert!(matches!(error, SendError::Short { .. }), "{error}");
        let cut = messages[2].region.pos();
        assert_eq!(received(peer).await.len() as u64, cut);
        store.close().unwrap();
    }
}
