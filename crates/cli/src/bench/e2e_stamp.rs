//! The e2e bench's body stamp and acknowledgement book: where a message's end-to-end time goes.
//!
//! Every e2e body starts with the run id, the send time and a sequence number. Producers note
//! in the [`AckBook`] when each sequence number's send was acknowledged; consumers look it up
//! on receipt, so the bench splits a message's latency into the send (start → acknowledged)
//! and the delivery (acknowledged → received by `poll`): the delivery part is the broker's
//! dispatch and long-poll wake-up plus the consumer's pull, without the producer's share.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Bytes at the start of an e2e body: run id (8), send time in ns since the run's start (8),
/// sequence number (8).
pub(super) const STAMP_LEN: usize = 24;

/// Sequence numbers whose acknowledgement time is kept (16 MiB of slots); later messages of a
/// longer run are still timed end to end but not split.
const ACK_BOOK_SLOTS: usize = 1 << 21;

/// One run's stamp: what producers write into bodies and consumers read back.
pub(super) struct E2eStamp {
    run: u64,
    base: Instant,
    next_seq: AtomicU64,
    acks: AckBook,
}

/// Acknowledgement times by sequence number (ns since the run's start, plus one; zero means
/// not yet acknowledged).
struct AckBook {
    slots: Vec<AtomicU64>,
}

/// What a consumer learns from a received body of this run.
pub(super) struct Receipt {
    /// Send start to receipt, ns.
    pub(super) end_to_end: u64,
    /// Acknowledgement to receipt, ns; `None` when the producer had not yet seen the
    /// acknowledgement (the message overtook it) or the sequence number is past the book.
    pub(super) after_ack: Option<u64>,
}

impl E2eStamp {
    pub(super) fn new(run: u64) -> E2eStamp {
        E2eStamp {
            run,
            base: Instant::now(),
            next_seq: AtomicU64::new(0),
            acks: AckBook {
                slots: (0..ACK_BOOK_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            },
        }
    }

    /// ns since the run's start.
    pub(super) fn now(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    /// A body stamped with this run, the current time and the next sequence number; returns
    /// the body and its sequence number.
    pub(super) fn stamp(&self, filler: &[u8]) -> (bytes::Bytes, u64) {
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let mut body = filler.to_vec();
        body[..8].copy_from_slice(&self.run.to_le_bytes());
        body[8..16].copy_from_slice(&self.now().to_le_bytes());
        body[16..STAMP_LEN].copy_from_slice(&seq.to_le_bytes());
        (bytes::Bytes::from(body), seq)
    }

    /// Notes that the sends of `seqs` were acknowledged now.
    pub(super) fn acknowledged(&self, seqs: &[u64]) {
        let at = self.now() + 1;
        for &seq in seqs {
            if let Some(slot) = usize::try_from(seq)
                .ok()
                .and_then(|i| self.acks.slots.get(i))
            {
                slot.store(at, Ordering::Relaxed);
            }
        }
    }

    /// Reads a received body: `None` when it does not belong to this run.
    pub(super) fn receipt(&self, body: &[u8]) -> Option<Receipt> {
        let field = |at: usize| -> Option<u64> {
            Some(u64::from_le_bytes(body.get(at..at + 8)?.try_into().ok()?))
        };
        if field(0)? != self.run {
            return None;
        }
        let (sent, seq) = (field(8)?, field(16)?);
        let now = self.now();
        let acked = usize::try_from(seq)
            .ok()
            .and_then(|i| self.acks.slots.get(i))
            .map(|slot| slot.load(Ordering::Relaxed))
            .filter(|&at| at > 0);
        Some(Receipt {
            end_to_end: now.saturating_sub(sent),
            after_ack: acked.map(|at| now.saturating_sub(at - 1)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamped_body_is_read_back_with_its_acknowledgement() {
        let stamp = E2eStamp::new(7);
        let (body, seq) = stamp.stamp(&[0u8; 32]);
        let early = stamp.receipt(&body).expect("this run's body");
        assert!(early.after_ack.is_none(), "not acknowledged yet");
        std::thread::sleep(std::time::Duration::from_millis(2));
        stamp.acknowledged(&[seq]);
        std::thread::sleep(std::time::Duration::from_millis(3));
        let late = stamp.receipt(&body).expect("this run's body");
        let after = late.after_ack.expect("acknowledged");
        assert!(after >= 3_000_000, "{after}");
        assert!(
            late.end_to_end >= after + 2_000_000,
            "{} {after}",
            late.end_to_end
        );
        assert!(E2eStamp::new(8).receipt(&body).is_none(), "another run");
        assert!(stamp.receipt(&body[..10]).is_none(), "short body");
    }
}
