//! The one table from the core's typed errors to gRPC `Code`s (the gRPC twin of
//! `remoting::processor::code_map`). Only codes every released client knows are sent
//! (`ferromq_protocol::grpc::codes::is_safe`, checked in debug builds and by the tests).
//!
//! | core error | code |
//! |---|---|
//! | `WriteError::NotDurable`, `WriteError::WriteFailed`, `WriteError::Unexpected` (flush timeout or failure) | MASTER_PERSISTENCE_TIMEOUT (50401) |
//! | `WriteError::NotReplicated` (SYNC_MASTER: the in-sync replicas did not all hold it) | SLAVE_PERSISTENCE_TIMEOUT (50402) |
//! | `WriteError::InSyncReplicasNotEnough` | HA_NOT_AVAILABLE (50002) |
//! | `WriteError::NotMaster`, `WriteError::LeaseExpired`, `RefusalKind::NotMaster` | FORBIDDEN (40300); clients refresh the route |
//! | `WriteError::Poisoned`, `WriteError::Closed`, `WriteError::DispatchStalled`, `RefusalKind::Internal` | INTERNAL_SERVER_ERROR (50001) |
//! | `WriteError::Invalid` (record too large or malformed) | MESSAGE_BODY_TOO_LARGE (41301) when too large, else BAD_REQUEST (40000) |
//! | `WriteError::Reserved`, `RefusalKind::Forbidden`, `RefusalKind::TopicPermission` | FORBIDDEN (40300) |
//! | `RefusalKind::InvalidName` | ILLEGAL_TOPIC (40002) |
//! | `RefusalKind::TopicMissing` | TOPIC_NOT_FOUND (40402) |
//! | `RefusalKind::GroupMissing` | CONSUMER_GROUP_NOT_FOUND (40403) |
//! | `RefusalKind::PropertiesTooLarge` | MESSAGE_PROPERTIES_TOO_LARGE (43101) |
//! | `RefusalKind::InvalidMessage` | BAD_REQUEST (40000) |
//! | `RefusalKind::InvalidArgument`, `RefusalKind::QueueMissing` | BAD_REQUEST (40000) |
//! | `RefusalKind::BadSubscription` | ILLEGAL_FILTER_EXPRESSION (40010) |
//! | `RefusalKind::Busy` | TOO_MANY_REQUESTS (42900) |
//! | `CommitError::Rejected(Regression)`, `Rejected(StaleGeneration)`, `Rejected(UnknownGeneration)`, `Rejected(Moved)`, `CommitError::Fenced`, `CommitError::Unidentified` (the commit conflicts with the group's stored progress: invariant 3) | PRECONDITION_FAILED (42800) |
//! | `Rejected(PastMax)`, any other rejection, `CommitError::CorrectionRefused` (an offset outside the queue; ILLEGAL_OFFSET 40019 is not safe) | BAD_REQUEST (40000) |
//! | `QueryError::NotFound` ("no offset"; OFFSET_NOT_FOUND 40404 is not safe) | NOT_FOUND (40400) |
//! | `QueryError::NotMaster` | as its `WriteError` (FORBIDDEN) |
//! | `ViewError` (the offset view cannot be read now: never "no offset", invariant 7) | INTERNAL_SERVER_ERROR (50001) |
//! | `PullError::Busy`, `PullError::DispatchStalled`, `PullError::CutUnderRead` | TOO_MANY_REQUESTS (42900) |
//! | `PullError::Damaged`, `PullError::Failed`, `PullError::View`, `PullError::CallerGone` | INTERNAL_SERVER_ERROR (50001) |

use ferromq_protocol::grpc::codes::is_safe;
use ferromq_protocol::grpc::{Code, Status};
use ferromq_store::AppendError;

use ferromq_store::offsets::CommitRejection;

use crate::core::error::{
    CommitError, PullError, QueryError, Refusal, RefusalKind, SendError, WriteError,
};

/// A `Status` of `code` with `message`.
pub fn status(code: Code, message: impl Into<String>) -> Status {
    debug_assert!(
        is_safe(code),
        "{code:?} must not be sent to released clients"
    );
    Status {
        code: code as i32,
        message: message.into(),
    }
}

/// `OK`.
pub fn ok() -> Status {
    status(Code::Ok, "OK")
}

/// The code of a refusal.
pub fn refusal_code(refusal: &Refusal) -> Code {
    match refusal.kind {
        RefusalKind::NotMaster | RefusalKind::Forbidden | RefusalKind::TopicPermission => {
            Code::Forbidden
        }
        RefusalKind::InvalidName => Code::IllegalTopic,
        RefusalKind::TopicMissing => Code::TopicNotFound,
        RefusalKind::GroupMissing => Code::ConsumerGroupNotFound,
        RefusalKind::PropertiesTooLarge => Code::MessagePropertiesTooLarge,
        RefusalKind::InvalidMessage | RefusalKind::InvalidArgument | RefusalKind::QueueMissing => {
            Code::BadRequest
        }
        RefusalKind::BadSubscription => Code::IllegalFilterExpression,
        RefusalKind::Internal => Code::InternalServerError,
        RefusalKind::Busy => Code::TooManyRequests,
    }
}

/// The code of a write that was not acknowledged.
pub fn write_code(error: &WriteError) -> Code {
    match error {
        WriteError::NotDurable { .. }
        | WriteError::WriteFailed { .. }
        | WriteError::Unexpected { .. } => Code::MasterPersistenceTimeout,
        WriteError::NotReplicated { .. } => Code::SlavePersistenceTimeout,
        WriteError::InSyncReplicasNotEnough { .. } => Code::HaNotAvailable,
        WriteError::NotMaster { .. } | WriteError::LeaseExpired { .. } => Code::Forbidden,
        WriteError::Poisoned { .. } | WriteError::Closed | WriteError::DispatchStalled(_) => {
            Code::InternalServerError
        }
        WriteError::Invalid(AppendError::MessageTooLarge { .. }) => Code::MessageBodyTooLarge,
        WriteError::Invalid(_) => Code::BadRequest,
        WriteError::Reserved(_) => Code::Forbidden,
    }
}

/// The status of a send that failed.
pub fn send_error(error: &SendError) -> Status {
    let code = match error {
        SendError::Refused(refusal) => refusal_code(refusal),
        SendError::Write(error) => write_code(error),
    };
    status(code, error.to_string())
}

/// The code of a commit (UpdateOffset) that was not stored.
pub fn commit_code(error: &CommitError) -> Code {
    match error {
        CommitError::Refused(refusal) => refusal_code(refusal),
        CommitError::Fenced { .. } | CommitError::Unidentified { .. } => Code::PreconditionFailed,
        CommitError::Rejected(
            CommitRejection::Regression { .. }
            | CommitRejection::StaleGeneration { .. }
            | CommitRejection::UnknownGeneration { .. }
            | CommitRejection::Moved { .. },
        ) => Code::PreconditionFailed,
        CommitError::Rejected(_) | CommitError::CorrectionRefused(_) => Code::BadRequest,
        CommitError::Write(error) => write_code(error),
        CommitError::View(_) => Code::InternalServerError,
    }
}

/// The code of an offset query (GetOffset) that has no answer.
pub fn query_code(error: &QueryError) -> Code {
    match error {
        QueryError::NotFound { .. } => Code::NotFound,
        QueryError::NotMaster(error) => write_code(error),
        QueryError::View(_) => Code::InternalServerError,
    }
}

/// The code of a pull (PullMessage) that could not read its queue.
pub fn pull_code(error: &PullError) -> Code {
    match error {
        PullError::Refused(refusal) => refusal_code(refusal),
        PullError::Busy(_) | PullError::DispatchStalled(_) | PullError::CutUnderRead(_) => {
            Code::TooManyRequests
        }
        PullError::Damaged(_)
        | PullError::Failed { .. }
        | PullError::View(_)
        | PullError::CallerGone => Code::InternalServerError,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_kind_maps_to_a_safe_code() {
        use RefusalKind::*;
        for kind in [
            NotMaster,
            InvalidName,
            Forbidden,
            InvalidArgument,
            InvalidMessage,
            PropertiesTooLarge,
            TopicMissing,
            GroupMissing,
            TopicPermission,
            QueueMissing,
            Internal,
            Busy,
            BadSubscription,
        ] {
            let code = refusal_code(&Refusal::new(kind, "x"));
            assert!(is_safe(code), "{kind:?} -> {code:?}");
        }
        assert_eq!(
            refusal_code(&Refusal::new(TopicMissing, "x")),
            Code::TopicNotFound
        );
        assert_eq!(
            refusal_code(&Refusal::new(InvalidName, "x")),
            Code::IllegalTopic
        );
    }

    #[test]
    fn offset_outcomes_map_to_safe_codes_and_no_offset_is_not_an_error() {
        let regression = CommitError::Rejected(CommitRejection::Regression {
            stored: 4,
            proposed: 2,
        });
        assert_eq!(commit_code(&regression), Code::PreconditionFailed);
        let past_max = CommitError::Rejected(CommitRejection::PastMax {
            max: 5,
            proposed: 9,
        });
        assert_eq!(commit_code(&past_max), Code::BadRequest);
        let not_found = QueryError::NotFound {
            group: "G".into(),
            topic: "T".into(),
            queue_id: 0,
        };
        assert_eq!(query_code(&not_found), Code::NotFound);
        let not_master = QueryError::NotMaster(WriteError::Closed);
        assert_ne!(query_code(&not_master), Code::NotFound);
        assert_eq!(
            pull_code(&PullError::Busy("held".into())),
            Code::TooManyRequests
        );
        assert_eq!(
            pull_code(&PullError::Refused(Refusal::new(
                RefusalKind::BadSubscription,
                "x"
            ))),
            Code::IllegalFilterExpression
        );
        for code in [
            commit_code(&regression),
            commit_code(&past_max),
            query_code(&not_found),
            pull_code(&PullError::CallerGone),
        ] {
            assert!(is_safe(code), "{code:?}");
        }
    }

    #[test]
    fn store_failures_map_to_persistence_codes() {
        let not_replicated = WriteError::NotReplicated {
            what: "message",
            reason: "timeout".into(),
        };
        assert_eq!(write_code(&not_replicated), Code::SlavePersistenceTimeout);
        let not_enough = WriteError::InSyncReplicasNotEnough {
            what: "message",
            members: 1,
            needed: 2,
        };
        assert_eq!(write_code(&not_enough), Code::HaNotAvailable);
        let not_master = WriteError::NotMaster {
            what: "message",
            broker: "b".into(),
            broker_id: 1,
            role: "SLAVE",
        };
        assert_eq!(write_code(&not_master), Code::Forbidden);
        assert_eq!(write_code(&WriteError::Closed), Code::InternalServerError);
    }
}
