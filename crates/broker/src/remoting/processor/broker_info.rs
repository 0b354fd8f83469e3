//! GET_BROKER_RUNTIME_INFO (28), GET_BROKER_CONFIG (26), UPDATE_BROKER_CONFIG (25),
//! GET_BROKER_HA_STATUS (907) and GET_BROKER_EPOCH_CACHE (1007): what `brokerStatus`,
//! `getBrokerConfig`, `updateBrokerConfig`, `haStatus` and `getBrokerEpoch` ask.
//!
//! - 28 answers a `KVTable` body (`{"table":{key: value}}`), keys as in `broker_stats`.
//! - 26 answers the configuration as Java `Properties` text (`key=value` lines) with the
//!   `version` ext field holding the `DataVersion` JSON, as RocketMQ does.
//! - 25 takes `key=value` lines; only the keys of `config::runtime` may change, all or none.
//!   A refusal is NO_PERMISSION (a key fixed at startup) or INVALID_PARAMETER (an unknown key,
//!   a bad value, a malformed body), with a remark naming the key and why. Accepted changes
//!   last until the broker stops (not persisted; see `config::runtime`).

use ferromq_protocol::remoting::body::misc::KvTable;
use ferromq_protocol::remoting::codes::response;
use ferromq_protocol::remoting::RemotingCommand;

use super::success;
use crate::config::runtime::ConfigUpdateError;
use crate::context::BrokerContext;

/// Largest UPDATE_BROKER_CONFIG body read.
const UPDATE_BODY_MAX: usize = 64 * 1024;

pub(super) fn runtime_info(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let table = KvTable {
        table: ctx.stats.runtime_info(ctx),
    };
    match serde_json::to_vec(&table) {
        Ok(body) => success(command).with_body(body),
        Err(error) => command.reply(
            response::SYSTEM_ERROR,
            Some(format!("cannot encode the runtime info: {error}")),
        ),
    }
}

/// NOTIFY_BROKER_ROLE_CHANGED (1008), from a controller: the group's state changed. The
/// notice only makes the broker heartbeat to the controller leader at once; the role comes
/// from the confirmed heartbeat reply, so a forged notice changes nothing. A broker not in
/// controller mode refuses it. Usually one-way (no reply is sent then).
pub(super) fn role_changed(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    match &ctx.controller {
        Some(link) => {
            link.notice();
            success(command)
        }
        None => {
            ctx.metrics.unsupported(command.code);
            command.reply(
                ferromq_protocol::remoting::response::REQUEST_CODE_NOT_SUPPORTED,
                Some("NOTIFY_BROKER_ROLE_CHANGED: this broker is not in controller mode".into()),
            )
        }
    }
}

/// GET_BROKER_HA_STATUS (907): the master's slaves or the slave's master (`haStatus`).
pub(super) fn ha_status(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let runtime = ctx.replication.runtime();
    let info = crate::replication::status::ha_runtime_info(&runtime, std::time::Instant::now());
    success(command).with_body(ferromq_protocol::remoting::body::encode_json(&info))
}

/// GET_BROKER_EPOCH_CACHE (1007): the broker's epoch entries, each with its end (the next
/// entry's start, or the log end), as the controller and `getBrokerEpoch` read them.
pub(super) fn epoch_cache(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let body = broker_epoch_cache(ctx);
    success(command).with_body(ferromq_protocol::remoting::body::encode_json(&body))
}

/// The [`BrokerEpochCache`](ferromq_protocol::controller::BrokerEpochCache) of this broker.
pub(crate) fn broker_epoch_cache(
    ctx: &BrokerContext,
) -> ferromq_protocol::controller::BrokerEpochCache {
    use ferromq_protocol::controller::{BrokerEpochCache, EpochEntryInfo};
    let identity = ctx.replication.identity();
    let epochs = ctx.store.epochs();
    let max_offset = ctx.store.committed_end();
    let entries = epochs
        .iter()
        .enumerate()
        .map(|(i, entry)| EpochEntryInfo {
            epoch: entry.epoch,
            start_offset: entry.start,
            end_offset: epochs
                .get(i + 1)
                .map_or(max_offset, |next| next.start)
                .max(entry.start),
        })
        .collect();
    BrokerEpochCache {
        cluster_name: identity.cluster.clone(),
        broker_name: identity.broker_name.clone(),
        broker_id: ctx.replication.broker_id(),
        epochs: entries,
        max_offset,
    }
}

pub(super) fn get_config(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let version = ctx.runtime_config.version();
    let version_json = serde_json::json!({
        "stateVersion": 0,
        "timestamp": version.timestamp_ms,
        "counter": version.counter,
    });
    let mut reply = success(command).with_body(ctx.runtime_config.properties(&ctx.config));
    reply.ext_fields.insert("version", version_json.to_string());
    reply
}

pub(super) fn update_config(ctx: &BrokerContext, command: &RemotingCommand) -> RemotingCommand {
    let body = command.body.as_deref().unwrap_or_default();
    if body.len() > UPDATE_BODY_MAX {
        return command.reply(
            response::INVALID_PARAMETER,
            Some(format!(
                "config update body of {} bytes exceeds {UPDATE_BODY_MAX}",
                body.len()
            )),
        );
    }
    let Ok(text) = std::str::from_utf8(body) else {
        return command.reply(
            response::INVALID_PARAMETER,
            Some("config update body is not UTF-8 properties text".into()),
        );
    };
    match ctx.runtime_config.update_from_properties(text) {
        Ok(applied) => {
            for (key, value) in &applied {
                tracing::info!(%key, %value, "broker config changed at run time (not persisted)");
            }
            success(command)
        }
        Err(error) => {
            let code = match error {
                ConfigUpdateError::Fixed { .. } => response::NO_PERMISSION,
                _ => response::INVALID_PARAMETER,
            };
            tracing::warn!(%error, "broker config update refused");
            command.reply(code, Some(error.to_string()))
        }
    }
}
