//! END_TRANSACTION (37): decode the header, call `core::transactions::decision::end`, map the
//! outcome. Java and the C++ core send END one-way (no reply leaves); ferromq's client sends
//! it as a request and reads the code and remark.

use ferromq_protocol::remoting::codes::response;
use ferromq_protocol::remoting::headers::transaction::EndTransactionRequestHeader;
use ferromq_protocol::remoting::RemotingCommand;

use super::bad_header;
use super::code_map::error_reply;
use crate::context::BrokerContext;
use crate::core::transactions::decision::{end, EndOutcome, EndRequest};

pub(super) async fn handle(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let header = match command.decode_header::<EndTransactionRequestHeader>() {
        Ok(header) => header,
        Err(error) => {
            ctx.metrics.transactions.end_refused("bad_argument");
            return bad_header(command, error);
        }
    };
    let request = EndRequest {
        producer_group: &header.producer_group,
        half_queue_offset: header.tran_state_table_offset,
        half_phys_offset: header.commit_log_offset,
        commit_or_rollback: header.commit_or_rollback,
        from_check: header.from_transaction_check.unwrap_or(false),
    };
    match end(ctx, &request).await {
        Ok(outcome) => {
            let remark = match outcome {
                EndOutcome::Decided(decision) => format!("{} recorded", decision.as_str()),
                EndOutcome::AlreadyDecided(decision) => {
                    format!("already decided ({}); nothing changed", decision.as_str())
                }
                EndOutcome::Unknown => "unknown noted; the broker will check back".to_string(),
            };
            command.reply(response::SUCCESS, Some(remark))
        }
        Err(error) => error_reply(command, &error),
    }
}
