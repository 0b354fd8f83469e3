//! Transactions over gRPC: a TRANSACTION message is stored as a half message by the same core
//! as a remoting one (`core::transactions`), EndTransaction decides it, and the checker's
//! check-backs reach gRPC producers as `RecoverOrphanedTransactionCommand` on a Telemetry
//! stream of a client that publishes the topic.
//!
//! Rules:
//! 1. A gRPC producer has no producer group: the half's group is its topic, so an END must
//!    name the topic it was sent to (anything else is refused by the core as a wrong group).
//! 2. The transaction id is `fmqx1 <half queue offset> <half CommitLog offset>`: the END names
//!    the half exactly, as remoting's `tranStateTableOffset` and `commitLogOffset` do.
//! 3. `orphaned_transaction_recovery_duration` becomes `CHECK_IMMUNITY_TIME_IN_SECONDS` (the
//!    time before the first check-back).

use ferromq_protocol::grpc::{self as pb, Code, TransactionResolution, TransactionSource};
use ferromq_protocol::remoting::headers::transaction::{
    TRANSACTION_COMMIT_TYPE, TRANSACTION_NOT_TYPE, TRANSACTION_ROLLBACK_TYPE,
};
use tokio::sync::{mpsc, watch};

use super::clients::GrpcClients;
use super::status::{ok, refusal_code, status, write_code};
use crate::context::BrokerContext;
use crate::core::transactions::check::CheckBack;
use crate::core::transactions::decision::{end, EndError, EndOutcome, EndRequest};

/// First word of a transaction id (format 1).
const TRANSACTION_TAG: &str = "fmqx1";

/// The transaction id of a half (rule 2).
pub fn transaction_id(half_queue_offset: u64, half_phys_offset: u64) -> String {
    format!("{TRANSACTION_TAG} {half_queue_offset} {half_phys_offset}")
}

/// The half a transaction id names.
pub(crate) fn parse_transaction_id(id: &str) -> Option<(u64, u64)> {
    let mut words = id.split(' ');
    if words.next()? != TRANSACTION_TAG {
        return None;
    }
    let queue_offset = words.next()?.parse().ok()?;
    let phys_offset = words.next()?.parse().ok()?;
    words
        .next()
        .is_none()
        .then_some((queue_offset, phys_offset))
}

/// Serves EndTransaction.
pub async fn end_transaction(
    ctx: &BrokerContext,
    request: &pb::EndTransactionRequest,
) -> pb::Status {
    let Some(topic) = request
        .topic
        .as_ref()
        .map(|t| t.name.as_str())
        .filter(|t| !t.is_empty())
    else {
        return status(Code::IllegalTopic, "topic.name is required");
    };
    let Some((queue_offset, phys_offset)) = parse_transaction_id(&request.transaction_id) else {
        return status(
            Code::InvalidTransactionId,
            format!(
                "{:?} is not a ferromq transaction id",
                request.transaction_id.chars().take(64).collect::<String>()
            ),
        );
    };
    let commit_or_rollback = match TransactionResolution::try_from(request.resolution) {
        Ok(TransactionResolution::Commit) => TRANSACTION_COMMIT_TYPE,
        Ok(TransactionResolution::Rollback) => TRANSACTION_ROLLBACK_TYPE,
        _ => TRANSACTION_NOT_TYPE,
    };
    let end_request = EndRequest {
        producer_group: topic,
        half_queue_offset: queue_offset as i64,
        half_phys_offset: phys_offset as i64,
        commit_or_rollback,
        from_check: request.source == TransactionSource::SourceServerCheck as i32,
    };
    match end(ctx, &end_request).await {
        Ok(EndOutcome::Decided(_) | EndOutcome::AlreadyDecided(_) | EndOutcome::Unknown) => ok(),
        Err(error) => end_status(&error),
    }
}

fn end_status(error: &EndError) -> pb::Status {
    let code = match error {
        EndError::Refused(refusal) => refusal_code(refusal),
        EndError::Write(error) => write_code(error),
        EndError::Busy { .. } => Code::TooManyRequests,
        EndError::Conflict { .. } | EndError::WrongGroup { .. } | EndError::NoHalf { .. } => {
            Code::InvalidTransactionId
        }
        EndError::Load(_) => Code::InternalServerError,
    };
    status(code, error.to_string())
}

/// Forwards the checker's check-backs to gRPC producers until the broker stops: each to a
/// Telemetry stream of a client publishing its topic; one with no such client is dropped with
/// a log line (the checker counted it, and checks again later).
pub async fn forward_check_backs(
    ctx: std::sync::Arc<BrokerContext>,
    clients: GrpcClients,
    mut checks: mpsc::Receiver<CheckBack>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let check = tokio::select! {
            check = checks.recv() => check,
            _ = stop.changed() => return,
        };
        let Some(check) = check else { return };
        let Some(outbox) = clients.publisher_of(&check.topic) else {
            tracing::info!(topic = %check.topic, half = check.half_queue_offset,
                "transaction check-back: no gRPC producer of the topic is connected");
            continue;
        };
        let queue_id = ferromq_protocol::RecordView::parse(&check.record).map_or(0, |r| r.queue_id);
        let stored = ferromq_store::StoredMessage {
            queue_offset: check.half_queue_offset,
            phys_offset: check.half_phys_offset,
            bytes: check.record.into(),
        };
        let at = super::consume::Placement {
            topic: &check.topic,
            queue_id,
        };
        let Some(message) = super::consume::stored_message_of(&ctx, &stored, at, None, None) else {
            continue;
        };
        let command = pb::TelemetryCommand {
            status: None,
            command: Some(
                pb::telemetry_command::Command::RecoverOrphanedTransactionCommand(
                    pb::RecoverOrphanedTransactionCommand {
                        message: Some(message),
                        transaction_id: transaction_id(
                            check.half_queue_offset,
                            check.half_phys_offset,
                        ),
                    },
                ),
            ),
        };
        if outbox.try_send(Ok(command)).is_err() {
            tracing::info!(topic = %check.topic, half = check.half_queue_offset,
                "transaction check-back not sent: the producer's Telemetry stream is full or closed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transaction_ids_round_trip_and_foreign_ids_are_refused() {
        assert_eq!(
            parse_transaction_id(&transaction_id(7, 4096)),
            Some((7, 4096))
        );
        for bad in [
            "",
            "fmqx1",
            "fmqx1 7",
            "fmqx1 7 x",
            "fmqx2 7 8",
            "fmqx1 7 8 9",
            "01ABCDEF",
        ] {
            assert_eq!(parse_transaction_id(bad), None, "{bad:?}");
        }
    }
}
