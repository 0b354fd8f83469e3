//! The messages nodes exchange. Broker↔controller and replica↔master messages are the
//! production request, reply and HA frame types; client messages are the simulation's own
//! (the client wire protocol is not what the simulation tests).

use ferromq_protocol::controller::{
    AlterSyncStateSetReply, AlterSyncStateSetRequest, ElectMasterRequest, HeartbeatReply,
    HeartbeatRequest, ReplicaInfo,
};
use ferromq_protocol::ha::HaFrame;
use ferromq_store::offsets::OffsetCommand;

/// A message between two nodes.
#[derive(Debug, Clone)]
pub enum Msg {
    /// Broker → controller: BROKER_HEARTBEAT, and when it was sent (virtual ms).
    Heartbeat {
        /// The production request.
        request: HeartbeatRequest,
        /// Send time: the lease runs from it.
        sent_at_ms: u64,
    },
    /// Controller → broker: the heartbeat's reply.
    HeartbeatReply {
        /// The production reply.
        reply: HeartbeatReply,
        /// The heartbeat's send time, echoed.
        sent_at_ms: u64,
    },
    /// Master → controller: CONTROLLER_ALTER_SYNC_STATE_SET.
    Alter(AlterSyncStateSetRequest),
    /// Controller → master: the set change's outcome.
    AlterReply {
        /// The master epoch the request was made at.
        master_epoch: u64,
        /// The new set, or why not.
        outcome: Result<AlterSyncStateSetReply, String>,
    },
    /// Restarted master → controller: CONTROLLER_ELECT_MASTER with `renew` (a new term).
    Renew(ElectMasterRequest),
    /// Controller → broker: the renewal's outcome.
    RenewReply {
        /// The epoch the renewal asked to end.
        epoch: u64,
        /// The group after the election, or why not.
        outcome: Result<ReplicaInfo, String>,
    },
    /// Controller → broker: NOTIFY_BROKER_ROLE_CHANGED (only wakes a heartbeat).
    Notice,
    /// One HA frame on connection `conn`.
    Ha {
        /// The connection (chosen by the replica).
        conn: u64,
        /// The production frame.
        frame: HaFrame,
    },
    /// Either side closed HA connection `conn` (TCP FIN/RST).
    HaClosed {
        /// The connection.
        conn: u64,
    },
    /// Client → controller: who is master?
    Route,
    /// Controller → client.
    RouteReply {
        /// The master's broker id.
        master: Option<u64>,
    },
    /// Producer → master: send message `msg_id`.
    Send {
        /// Request id.
        req: u64,
        /// The message id (the body's first 8 bytes).
        msg_id: u64,
        /// Body filler length.
        padding: usize,
    },
    /// Master → producer.
    SendReply {
        /// Request id.
        req: u64,
        /// The record's CommitLog offset, or why not acknowledged.
        outcome: Result<u64, String>,
    },
    /// Consumer → master: messages from this queue offset.
    Pull {
        /// Request id.
        req: u64,
        /// The first queue offset wanted.
        from: u64,
    },
    /// Master → consumer.
    PullReply {
        /// Request id.
        req: u64,
        /// What was read, or why not.
        outcome: Result<Pulled, String>,
    },
    /// Consumer or admin → master: an offset commit or reset.
    Offsets {
        /// Request id.
        req: u64,
        /// The command (a reset's generation is assigned by the master).
        command: OffsetCommand,
    },
    /// Master → consumer or admin.
    OffsetsReply {
        /// Request id.
        req: u64,
        /// Acknowledged, or why not.
        outcome: Result<(), String>,
    },
}

/// A pull's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pulled {
    /// `(queue offset, message id)`, in order.
    pub messages: Vec<(u64, u64)>,
    /// The group's stored offset in the master's dispatched view.
    pub stored: Option<u64>,
    /// Its reset generation.
    pub generation: u64,
}

impl Msg {
    /// A short description for the trace (no payload bytes).
    pub fn describe(&self) -> String {
        match self {
            Msg::Heartbeat { request, .. } => format!(
                "heartbeat(id {} epoch {} end {})",
                request.broker_id, request.epoch, request.max_offset
            ),
            Msg::HeartbeatReply { reply, .. } => {
                let info = &reply.replica_info;
                format!(
                    "heartbeat-reply(master {:?} epoch {} set {:?})",
                    info.master_broker_id, info.master_epoch, info.sync_state_set
                )
            }
            Msg::Alter(r) => format!(
                "alter(master {} epoch {} set {:?})",
                r.master_broker_id, r.master_epoch, r.new_sync_state_set
            ),
            Msg::AlterReply { outcome, .. } => format!("alter-reply({:?})", outcome.as_ref().ok()),
            Msg::Renew(r) => format!("renew({:?})", r.renew),
            Msg::RenewReply { epoch, outcome } => format!(
                "renew-reply(epoch {epoch}: {:?})",
                outcome
                    .as_ref()
                    .map(|i| (i.master_broker_id, i.master_epoch))
            ),
            Msg::Notice => "notice".into(),
            Msg::Ha { conn, frame } => format!("ha#{conn} {}", describe_frame(frame)),
            Msg::HaClosed { conn } => format!("ha#{conn} closed"),
            Msg::Route => "route".into(),
            Msg::RouteReply { master } => format!("route-reply({master:?})"),
            Msg::Send { req, msg_id, .. } => format!("send#{req}(msg {msg_id})"),
            Msg::SendReply { req, outcome } => {
                format!("send-reply#{req}({:?})", outcome.as_ref().ok())
            }
            Msg::Pull { req, from } => format!("pull#{req}(from {from})"),
            Msg::PullReply { req, outcome } => match outcome {
                Ok(p) => format!(
                    "pull-reply#{req}({} msgs gen {})",
                    p.messages.len(),
                    p.generation
                ),
                Err(_) => format!("pull-reply#{req}(refused)"),
            },
            Msg::Offsets { req, command } => format!(
                "{}#{req}({:?})",
                command.kind,
                command.entries.first().map(|e| e.offset)
            ),
            Msg::OffsetsReply { req, outcome } => {
                format!("offsets-reply#{req}({})", outcome.is_ok())
            }
        }
    }
}

fn describe_frame(frame: &HaFrame) -> String {
    match frame {
        HaFrame::Hello(h) => format!(
            "hello(id {} end {} epoch {})",
            h.broker_id, h.log_end, h.epoch
        ),
        HaFrame::Welcome(w) => format!(
            "welcome(epoch {} start {} end {})",
            w.epoch, w.start, w.master_end
        ),
        HaFrame::Refused(r) => format!("refused({})", r.code),
        HaFrame::Truncate(t) => format!("truncate(to {})", t.to),
        HaFrame::Data(d) => format!(
            "data(at {} len {} wm {})",
            d.offset,
            d.bytes.len(),
            d.watermark
        ),
        HaFrame::Heartbeat {
            watermark,
            master_end,
        } => format!("hb(wm {watermark} end {master_end})"),
        HaFrame::Ack { log_end } => format!("ack({log_end})"),
    }
}
