//! The one table from the core's typed errors to RocketMQ's (and ferromq's) response codes.
//! Every remoting processor answers a core error through [`error_reply`]; no other file picks
//! a code for a core outcome.
//!
//! | core error | code |
//! |---|---|
//! | `WriteError::NotDurable`, `WriteError::WriteFailed`, `WriteError::Unexpected` (the first I/O failure, a flush timeout) | NOT_DURABLE (2110) |
//! | `WriteError::NotReplicated` (SYNC_MASTER: appended, but the in-sync replicas did not all hold it in time or the set shrank below the minimum) | NOT_DURABLE (2110) |
//! | `WriteError::NotMaster`, `RefusalKind::NotMaster` (any write or catalog change on a slave) | NOT_MASTER (2111) |
//! | `WriteError::InSyncReplicasNotEnough` | SYSTEM_ERROR (1), remark "in-sync replicas not enough: ..." as RocketMQ |
//! | `WriteError::Poisoned`, `WriteError::Closed` (every later write) | SERVICE_NOT_AVAILABLE (14) |
//! | `WriteError::DispatchStalled`, `ViewError`, `RefusalKind::Busy` | SYSTEM_BUSY (2) |
//! | `WriteError::Invalid`, `RefusalKind::InvalidMessage`, `RefusalKind::PropertiesTooLarge` | MESSAGE_ILLEGAL (13) |
//! | `WriteError::Reserved`, `RefusalKind::Forbidden`, `RefusalKind::TopicPermission` | NO_PERMISSION (16) |
//! | `RefusalKind::InvalidName`, `RefusalKind::InvalidArgument` | INVALID_PARAMETER (25) |
//! | `RefusalKind::TopicMissing` | TOPIC_NOT_EXIST (17) |
//! | `RefusalKind::GroupMissing` | SUBSCRIPTION_GROUP_NOT_EXIST (26) |
//! | `RefusalKind::QueueMissing`, `RefusalKind::Internal` | SYSTEM_ERROR (1) |
//! | `CommitError::Rejected(Regression)`, a correction below the stored offset | COMMIT_REGRESSION (2101) |
//! | `CommitError::Fenced`, `CommitError::Unidentified`, `Rejected(StaleGeneration)` | COMMIT_STALE_GENERATION (2102) |
//! | `Rejected(PastMax)`, a correction past max | COMMIT_PAST_MAX (2103) |
//! | any other commit or correction rejection, `ResetError::Rejected` | COMMIT_REJECTED (2104) |
//! | `QueryError::NotFound` | QUERY_NOT_FOUND (22) |
//! | `QueryError::NotMaster` (controller mode: an offset query to a slave or a lease-less master) | NOT_MASTER (2111) |
//! | `PullError::Damaged` | MESSAGE_DAMAGED (2105) |
//! | `PullError::DispatchStalled`, `PullError::CutUnderRead`, `PullError::Busy`, `PullError::CallerGone` | SYSTEM_BUSY (2) |
//! | `RefusalKind::BadSubscription` | SUBSCRIPTION_PARSE_FAILED (23) |
//! | `PullError::Failed` | SYSTEM_ERROR (1) |
//! | `EndError::NoHalf`, `EndError::Conflict` (END naming no half, or the other decision) | TRANSACTION_FAILED (4) |
//! | `EndError::WrongGroup` | TRANSACTION_STATE_GROUP_WRONG (203) |
//! | `EndError::Busy` (another decision of the half is being written) | SYSTEM_BUSY (2) |
//! | `EndError::Load` (the transaction table could not be rebuilt) | SYSTEM_BUSY (2) |
//!
//! A poisoned store answers SERVICE_NOT_AVAILABLE for every write kind (messages, commits,
//! resets): Java producers then try another broker, and the remark names the failure.

use ferromq_protocol::remoting::codes::response;
use ferromq_protocol::remoting::RemotingCommand;
use ferromq_store::offsets::CommitRejection;

use crate::codes;
use crate::core::error::{
    CommitError, CorrectionRefusal, PullError, QueryError, RefusalKind, ResetError, SendError,
    ViewError, WriteError,
};
use crate::core::transactions::decision::EndError;

/// A core error's remoting response code.
pub trait ResponseCode: std::fmt::Display {
    /// The code.
    fn code(&self) -> i32;
}

/// The reply to `command` for a core error: its code and its message as the remark.
pub fn error_reply(command: &RemotingCommand, error: &impl ResponseCode) -> RemotingCommand {
    command.reply(error.code(), Some(error.to_string()))
}

/// The code of a refusal kind.
pub fn refusal_code(kind: RefusalKind) -> i32 {
    match kind {
        RefusalKind::InvalidName | RefusalKind::InvalidArgument => response::INVALID_PARAMETER,
        RefusalKind::Forbidden | RefusalKind::TopicPermission => response::NO_PERMISSION,
        RefusalKind::InvalidMessage | RefusalKind::PropertiesTooLarge => response::MESSAGE_ILLEGAL,
        RefusalKind::TopicMissing => response::TOPIC_NOT_EXIST,
        RefusalKind::GroupMissing => response::SUBSCRIPTION_GROUP_NOT_EXIST,
        RefusalKind::QueueMissing | RefusalKind::Internal => response::SYSTEM_ERROR,
        RefusalKind::Busy => response::SYSTEM_BUSY,
        RefusalKind::NotMaster => codes::NOT_MASTER,
        RefusalKind::BadSubscription => response::SUBSCRIPTION_PARSE_FAILED,
    }
}

impl ResponseCode for crate::core::error::Refusal {
    fn code(&self) -> i32 {
        refusal_code(self.kind)
    }
}

impl ResponseCode for WriteError {
    fn code(&self) -> i32 {
        match self {
            WriteError::NotDurable { .. }
            | WriteError::WriteFailed { .. }
            | WriteError::NotReplicated { .. }
            | WriteError::Unexpected { .. } => codes::NOT_DURABLE,
            WriteError::NotMaster { .. } | WriteError::LeaseExpired { .. } => codes::NOT_MASTER,
            // RocketMQ answers IN_SYNC_REPLICAS_NOT_ENOUGH with SYSTEM_ERROR and this remark;
            // Java producers retry another broker on it.
            WriteError::InSyncReplicasNotEnough { .. } => response::SYSTEM_ERROR,
            WriteError::Poisoned { .. } | WriteError::Closed => response::SERVICE_NOT_AVAILABLE,
            WriteError::DispatchStalled(_) => response::SYSTEM_BUSY,
            WriteError::Invalid(_) => response::MESSAGE_ILLEGAL,
            WriteError::Reserved(_) => response::NO_PERMISSION,
        }
    }
}

impl ResponseCode for ViewError {
    fn code(&self) -> i32 {
        response::SYSTEM_BUSY
    }
}

fn rejection_code(rejection: &CommitRejection) -> i32 {
    match rejection {
        CommitRejection::Regression { .. } => codes::COMMIT_REGRESSION,
        CommitRejection::StaleGeneration { .. } => codes::COMMIT_STALE_GENERATION,
        CommitRejection::PastMax { .. } => codes::COMMIT_PAST_MAX,
        _ => codes::COMMIT_REJECTED,
    }
}

fn correction_code(refusal: &CorrectionRefusal) -> i32 {
    match refusal {
        CorrectionRefusal::PastMax { .. } => codes::COMMIT_PAST_MAX,
        CorrectionRefusal::Healthy { offset, stored, .. } if offset < stored => {
            codes::COMMIT_REGRESSION
        }
        CorrectionRefusal::Healthy { .. } | CorrectionRefusal::BelowMin { .. } => {
            codes::COMMIT_REJECTED
        }
    }
}

impl ResponseCode for CommitError {
    fn code(&self) -> i32 {
        match self {
            CommitError::Refused(refusal) => refusal.code(),
            CommitError::Fenced { .. } | CommitError::Unidentified { .. } => {
                codes::COMMIT_STALE_GENERATION
            }
            CommitError::Rejected(rejection) => rejection_code(rejection),
            CommitError::CorrectionRefused(refusal) => correction_code(refusal),
            CommitError::Write(error) => error.code(),
            CommitError::View(error) => error.code(),
        }
    }
}

impl ResponseCode for ResetError {
    fn code(&self) -> i32 {
        match self {
            ResetError::Refused(refusal) => refusal.code(),
            ResetError::Rejected(_) => codes::COMMIT_REJECTED,
            ResetError::Write(error) => error.code(),
            ResetError::View(error) => error.code(),
        }
    }
}

impl ResponseCode for SendError {
    fn code(&self) -> i32 {
        match self {
            SendError::Refused(refusal) => refusal.code(),
            SendError::Write(error) => error.code(),
        }
    }
}

impl ResponseCode for QueryError {
    fn code(&self) -> i32 {
        match self {
            QueryError::NotFound { .. } => response::QUERY_NOT_FOUND,
            QueryError::View(error) => error.code(),
            QueryError::NotMaster(error) => error.code(),
        }
    }
}

impl ResponseCode for PullError {
    fn code(&self) -> i32 {
        match self {
            PullError::Refused(refusal) => refusal.code(),
            PullError::Damaged(_) => codes::MESSAGE_DAMAGED,
            PullError::DispatchStalled(_) | PullError::CutUnderRead(_) => response::SYSTEM_BUSY,
            PullError::Failed { .. } => response::SYSTEM_ERROR,
            PullError::View(error) => error.code(),
            PullError::Busy(_) | PullError::CallerGone => response::SYSTEM_BUSY,
        }
    }
}

impl ResponseCode for EndError {
    fn code(&self) -> i32 {
        match self {
            EndError::Refused(refusal) => refusal.code(),
            EndError::NoHalf { .. } | EndError::Conflict { .. } => response::TRANSACTION_FAILED,
            EndError::WrongGroup { .. } => response::TRANSACTION_STATE_GROUP_WRONG,
            EndError::Busy { .. } | EndError::Load(_) => response::SYSTEM_BUSY,
            EndError::Write(error) => error.code(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observability::metrics::BrokerMetrics;
    use ferromq_store::ReadError;

    /// A read a truncation kept cutting under is a retry (busy), never damage or a system
    /// error, on both transports; damage keeps its own code.
    #[test]
    fn a_read_cut_under_it_is_busy_and_damage_stays_damage() {
        let metrics = BrokerMetrics::new();
        let cut = ReadError::CutUnderRead {
            topic: "T".to_string(),
            queue_id: 1,
            queue_offset: 5,
            phys_offset: 99,
        };
        let error = PullError::from_read(&metrics, "T", 1, cut);
        assert!(matches!(error, PullError::CutUnderRead(_)), "{error:?}");
        assert_eq!(error.code(), response::SYSTEM_BUSY);
        assert_eq!(
            crate::grpc::status::pull_code(&error),
            ferromq_protocol::grpc::Code::TooManyRequests
        );
        assert!(error.to_string().contains("retry"), "{error}");

        let damaged = ReadError::Damaged {
            topic: "T".to_string(),
            queue_id: 1,
            queue_offset: 5,
            phys_offset: 99,
            reason: "bad CRC".to_string(),
        };
        let error = PullError::from_read(&metrics, "T", 1, damaged);
        assert_eq!(error.code(), codes::MESSAGE_DAMAGED);
        let stalled = ReadError::DispatchStalled("EMFILE".to_string());
        let error = PullError::from_read(&metrics, "T", 1, stalled);
        assert_eq!(error.code(), response::SYSTEM_BUSY);
    }
}
