//! Telemetry: the client writes its `Settings`; the broker answers each one on the same
//! stream with `status OK` and the settings merged with the broker's values, and keeps the
//! stream open (server-initiated commands will use it). Other commands from a client answer
//! commands this broker never sends: they are answered UNSUPPORTED and counted.

use std::time::Duration;

use ferromq_protocol::grpc::retry_policy::Strategy;
use ferromq_protocol::grpc::settings::PubSub;
use ferromq_protocol::grpc::telemetry_command::Command;
use ferromq_protocol::grpc::{
    ClientType, Code, CustomizedBackoff, ExponentialBackoff, Metric, RetryPolicy, Settings,
    TelemetryCommand,
};

use super::status::{ok, status};
use crate::catalog::groups::SubscriptionGroupConfig;
use crate::context::BrokerContext;
use crate::core::pop::RECEIVE_BATCH_MAX;

/// Producer retries (the Java proxy's values): 3 attempts, 10 ms doubling up to 1 s.
pub const PRODUCER_MAX_ATTEMPTS: i32 = 3;
/// First producer backoff.
pub const PRODUCER_BACKOFF_INITIAL: Duration = Duration::from_millis(10);
/// Longest producer backoff.
pub const PRODUCER_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Long polling a consumer is told to use.
pub const CONSUMER_LONG_POLLING_TIMEOUT: Duration = Duration::from_secs(20);

/// The reply to one command of a Telemetry stream.
pub fn reply(ctx: &BrokerContext, command: TelemetryCommand) -> TelemetryCommand {
    match command.command {
        Some(Command::Settings(settings)) => TelemetryCommand {
            status: Some(ok()),
            command: Some(Command::Settings(merged(ctx, settings))),
        },
        other => {
            let name = other.as_ref().map_or("an empty command", command_name);
            ctx.metrics.grpc_unsupported("Telemetry");
            TelemetryCommand {
                status: Some(status(
                    Code::Unsupported,
                    format!(
                        "Telemetry: ferromq does not handle {name} from clients (it sends no \
                         command that {name} would answer)"
                    ),
                )),
                command: None,
            }
        }
    }
}

fn command_name(command: &Command) -> &'static str {
    match command {
        Command::Settings(_) => "settings",
        Command::ThreadStackTrace(_) => "thread_stack_trace",
        Command::VerifyMessageResult(_) => "verify_message_result",
        Command::RecoverOrphanedTransactionCommand(_) => "recover_orphaned_transaction_command",
        Command::PrintThreadStackTraceCommand(_) => "print_thread_stack_trace_command",
        Command::VerifyMessageCommand(_) => "verify_message_command",
        Command::ReconnectEndpointsCommand(_) => "reconnect_endpoints_command",
        Command::NotifyUnsubscribeLiteCommand(_) => "notify_unsubscribe_lite_command",
    }
}

/// The client's settings with the broker's values: retry policy, body size limit, type
/// validation, long polling; client metrics stay off (no OTLP collector here).
pub fn merged(ctx: &BrokerContext, mut settings: Settings) -> Settings {
    let client_type = settings
        .client_type
        .and_then(|t| ClientType::try_from(t).ok())
        .unwrap_or(ClientType::Unspecified);
    match settings.pub_sub.as_mut() {
        Some(PubSub::Publishing(publishing)) => {
            publishing.max_body_size =
                i32::try_from(ctx.config.max_message_size).unwrap_or(i32::MAX);
            publishing.validate_message_type = true;
            settings.backoff_policy = Some(producer_backoff());
        }
        Some(PubSub::Subscription(subscription)) => {
            subscription.long_polling_timeout = Some(duration(CONSUMER_LONG_POLLING_TIMEOUT));
            // The Java push consumer asks for exactly this many messages per receive: left
            // out, it asks for 0 and gets one message per receive.
            subscription.receive_batch_size = Some(RECEIVE_BATCH_MAX as i32);
            // The group's settings decide (as the Java proxy does): its orderly flag FIFO
            // consumption, its retryMaxTimes the attempts — the same limit the broker
            // dead-letters at (`core::pop::receive`). A group not made yet gets what a receive
            // would make it with.
            let group = subscription
                .group
                .as_ref()
                .and_then(|g| ctx.groups.get(&g.name))
                .unwrap_or_default();
            subscription.fifo = Some(group.consume_message_orderly);
            settings.backoff_policy = Some(consumer_backoff(ctx, &group));
        }
        None if client_type == ClientType::Producer => {
            settings.backoff_policy = Some(producer_backoff());
        }
        None => {}
    }
    settings.metric = Some(Metric {
        on: false,
        endpoints: None,
    });
    settings
}

fn producer_backoff() -> RetryPolicy {
    RetryPolicy {
        max_attempts: PRODUCER_MAX_ATTEMPTS,
        strategy: Some(Strategy::ExponentialBackoff(ExponentialBackoff {
            initial: Some(duration(PRODUCER_BACKOFF_INITIAL)),
            max: Some(duration(PRODUCER_BACKOFF_MAX)),
            multiplier: 2.0,
        })),
    }
}

/// The group's `retryMaxTimes + 1` attempts, waiting the broker's delay levels from the third
/// (RocketMQ's retry schedule: 10 s, 30 s, 1 min, ...).
fn consumer_backoff(ctx: &BrokerContext, group: &SubscriptionGroupConfig) -> RetryPolicy {
    RetryPolicy {
        max_attempts: group.retry_max_times.max(0).saturating_add(1),
        strategy: Some(Strategy::CustomizedBackoff(CustomizedBackoff {
            next: ctx
                .delay_levels_ms
                .iter()
                .skip(2)
                .map(|ms| duration(Duration::from_millis(*ms)))
                .collect(),
        })),
    }
}

fn duration(value: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: value.as_secs() as i64,
        nanos: value.subsec_nanos() as i32,
    }
}
