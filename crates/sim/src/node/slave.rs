//! The slave side (production `slave.rs`): Hello from the log's tail, the master's verdict
//! (Welcome, Truncate, Refused), appends through the production `Follower` over the
//! `ReplicaLog` seam, acknowledgements of what is durable, and reconnects.

use ferromq_broker::replication::follower::{Follower, MasterTerm};
use ferromq_broker::replication::handshake::{store_epochs, wire_epochs};
use ferromq_protocol::ha::{HaFrame, Hello, RecordSample, Truncate, Welcome, HA_VERSION};

use super::{
    Broker, LinkPhase, Note, Out, Role, SlaveLink, BACKOFF_MS, HEARTBEAT_INTERVAL_MS,
    REFUSED_BACKOFF_MS, SEGMENT_SIZE_BYTES, WELCOME_TIMEOUT_MS,
};
use crate::controller::{BROKER_NAME, CLUSTER};
use crate::msg::Msg;
use crate::net::NodeId;

impl Broker {
    /// The slave's periodic work: silence and Welcome timeouts, acks, reconnects.
    pub(super) fn slave_tick(&mut self, now_ms: u64, out: &mut Out) {
        let broken = self.link.as_ref().is_some_and(|link| match link.phase {
            LinkPhase::AwaitingWelcome { sent_ms } => now_ms - sent_ms > WELCOME_TIMEOUT_MS,
            LinkPhase::Streaming { .. } => now_ms - link.last_read_ms > 3 * HEARTBEAT_INTERVAL_MS,
        });
        if broken {
            self.break_link(now_ms + BACKOFF_MS, out);
        }
        if self.link.is_some() {
            self.send_ack(out);
            return;
        }
        if let Some(master) = self.following.filter(|_| now_ms >= self.reconnect_at_ms) {
            self.connect(now_ms, master, out);
        }
    }

    /// Production `hello`: this log's end, its last records and its epoch entries.
    fn connect(&mut self, now_ms: u64, master: u64, out: &mut Out) {
        let (log_end, samples) = self.log.log_tail();
        let epochs: Vec<_> = self
            .log
            .epoch_entries()
            .into_iter()
            .filter(|e| e.start <= log_end)
            .collect();
        let hello = Hello {
            version: HA_VERSION,
            cluster: CLUSTER.into(),
            broker_name: BROKER_NAME.into(),
            broker_id: self.id,
            log_end,
            epoch: ferromq_store::epoch::last_epoch(&epochs),
            segment_size: SEGMENT_SIZE_BYTES,
            samples: samples
                .into_iter()
                .map(|s| RecordSample {
                    offset: s.offset,
                    size: s.size,
                    crc: s.crc,
                })
                .collect(),
            epochs: wire_epochs(&epochs),
        };
        self.next_conn += 1;
        let conn = (self.id << 32) | self.next_conn;
        self.link = Some(SlaveLink {
            master,
            conn,
            start: log_end,
            phase: LinkPhase::AwaitingWelcome { sent_ms: now_ms },
            last_read_ms: now_ms,
        });
        let frame = HaFrame::Hello(hello);
        out.sends.push((master as NodeId, Msg::Ha { conn, frame }));
    }

    /// Drops the connection (telling the master, which may not hear it) and reconnects at
    /// `retry_at_ms`.
    fn break_link(&mut self, retry_at_ms: u64, out: &mut Out) {
        if let Some(link) = self.link.take() {
            out.sends
                .push((link.master as NodeId, Msg::HaClosed { conn: link.conn }));
        }
        self.reconnect_at_ms = retry_at_ms;
    }

    /// Acknowledges what is durable here (production: after `acknowledged(ticket)`, and on
    /// the HA heartbeat).
    pub(super) fn send_ack(&mut self, out: &mut Out) {
        let Some(link) = self.link.as_ref() else {
            return;
        };
        if !matches!(link.phase, LinkPhase::Streaming { .. }) {
            return;
        }
        let frame = HaFrame::Ack {
            log_end: self.log.durable_end(),
        };
        out.sends.push((
            link.master as NodeId,
            Msg::Ha {
                conn: link.conn,
                frame,
            },
        ));
    }

    /// The peer closed HA connection `conn` (either side).
    pub(super) fn on_closed(&mut self, now_ms: u64, from: NodeId, conn: u64, out: &mut Out) {
        self.on_replica_closed(from as u64, conn, out);
        let ours = self
            .link
            .as_ref()
            .is_some_and(|l| l.conn == conn && l.master as NodeId == from);
        if ours {
            self.link = None;
            self.reconnect_at_ms = now_ms + BACKOFF_MS;
        }
    }

    /// One HA frame from a master (or a replica, when this broker is master).
    pub fn on_ha(&mut self, now_ms: u64, from: NodeId, conn: u64, frame: &HaFrame, out: &mut Out) {
        match frame {
            HaFrame::Hello(hello) => self.on_hello(now_ms, conn, hello, out),
            HaFrame::Ack { log_end } => self.on_ack(now_ms, from as u64, conn, *log_end, out),
            _ => self.on_master_frame(now_ms, from, conn, frame, out),
        }
    }

    /// A frame of the master this slave is connected to (stale connections are ignored).
    fn on_master_frame(
        &mut self,
        now_ms: u64,
        from: NodeId,
        conn: u64,
        frame: &HaFrame,
        out: &mut Out,
    ) {
        let current = self
            .link
            .as_ref()
            .is_some_and(|l| l.conn == conn && l.master as NodeId == from);
        if !current || self.role != Role::Slave {
            return;
        }
        if let Some(link) = self.link.as_mut() {
            link.last_read_ms = now_ms;
        }
        match frame {
            HaFrame::Welcome(welcome) => self.on_welcome(now_ms, welcome, out),
            HaFrame::Truncate(truncate) => self.on_truncate(now_ms, truncate, out),
            HaFrame::Refused(_) => self.break_link(now_ms + REFUSED_BACKOFF_MS, out),
            HaFrame::Data(data) => self.on_data(now_ms, data, out),
            HaFrame::Heartbeat {
                watermark,
                master_end,
            } => {
                if let Some(LinkPhase::Streaming { follower, .. }) =
                    self.link.as_mut().map(|l| &mut l.phase)
                {
                    follower.on_heartbeat(&self.log, *watermark, *master_end);
                }
            }
            HaFrame::Hello(_) | HaFrame::Ack { .. } => {}
        }
    }

    /// Production `follow`'s Welcome arms: an older master than the one followed is left, a
    /// Welcome at this log's end starts the stream.
    fn on_welcome(&mut self, now_ms: u64, welcome: &Welcome, out: &mut Out) {
        let Some(link) = self.link.as_mut() else {
            return;
        };
        let awaiting = matches!(link.phase, LinkPhase::AwaitingWelcome { .. });
        if !awaiting || welcome.epoch < self.min_master_epoch || welcome.start != link.start {
            self.break_link(now_ms + BACKOFF_MS, out);
            return;
        }
        link.phase = LinkPhase::Streaming {
            term: MasterTerm {
                epoch: welcome.epoch,
                epochs: store_epochs(&welcome.epochs),
            },
            follower: Follower::default(),
        };
        self.send_ack(out);
    }

    /// Production `truncate_diverged`: cut at the master's last common point, then Hello
    /// again at once.
    fn on_truncate(&mut self, now_ms: u64, truncate: &Truncate, out: &mut Out) {
        let start = self.link.as_ref().map_or(0, |l| l.start);
        if truncate.to > start {
            self.break_link(now_ms + BACKOFF_MS, out);
            return;
        }
        match self.log.truncate_diverged(truncate.to) {
            Ok(dispatched_before) => {
                out.notes.push(Note::Truncated {
                    to: truncate.to,
                    dispatched_before,
                });
                self.break_link(now_ms, out);
                if let Some(master) = self.following {
                    self.connect(now_ms, master, out);
                }
            }
            Err(_) => self.break_link(now_ms + BACKOFF_MS, out),
        }
    }

    /// Production `append`: the `Follower` appends through `ReplicaLog`; a refused frame
    /// breaks the connection (the slave says Hello again from its real end).
    fn on_data(&mut self, now_ms: u64, data: &ferromq_protocol::ha::Data, out: &mut Out) {
        let Some(SlaveLink {
            phase: LinkPhase::Streaming { term, follower },
            ..
        }) = self.link.as_mut()
        else {
            return;
        };
        match follower.on_data(&self.log, data, term) {
            Ok(_ticket) => self.request_flush(out),
            Err(_) => self.break_link(now_ms + BACKOFF_MS, out),
        }
    }
}
