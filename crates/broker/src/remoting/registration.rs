//! Registration with name servers: on start, after every topic change, at once when the
//! broker's role changes (failover: a promoted slave registers as master, brokerId 0, a
//! demoted master as a slave under its own id), and every `registerNameServerPeriod`;
//! unregistration at shutdown.
//!
//! A master whose master epoch is above 0 (controller mode) sends it in the
//! [`MASTER_EPOCH_EXT`] ext field: a ferromq name server lets it replace a live master of a
//! lower epoch and refuses a deposed master of a lower epoch.
//!
//! A name server that cannot be reached is retried at the next period; the failure is logged
//! with the address and counted in the outcome returned to the caller of `register_all`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ferromq_namesrv::NamesrvClientError;
use ferromq_protocol::remoting::body::topic::RegisterBrokerBody;
use ferromq_protocol::remoting::headers::namesrv::{
    RegisterBrokerRequestHeader, UnregisterBrokerRequestHeader,
};

use ferromq_protocol::remoting::extensions::MASTER_EPOCH_EXT;

use crate::context::BrokerContext;

/// How long one registration request may take.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(3);

/// A name server that did not accept a registration or unregistration.
#[derive(Debug, thiserror::Error)]
#[error("name server {addr}: {source}")]
pub struct RegistrationError {
    /// The name server.
    pub addr: SocketAddr,
    /// What went wrong.
    pub source: NamesrvClientError,
}

/// Registers with every name server; returns one error per name server that failed.
///
/// Connections to name servers are kept open between registrations: a name server drops a
/// broker whose connection closes.
pub async fn register_all(ctx: &BrokerContext, namesrvs: &[SocketAddr]) -> Vec<RegistrationError> {
    let body = RegisterBrokerBody {
        topic_config_serialize_wrapper: ctx.topics.snapshot(),
        filter_server_list: Vec::new(),
    };
    let header = RegisterBrokerRequestHeader {
        broker_name: ctx.config.broker_name.clone(),
        broker_addr: ctx.broker_addr.to_string(),
        cluster_name: ctx.config.broker_cluster_name.clone(),
        ha_server_addr: ctx.ha_addr.to_string(),
        broker_id: ctx.replication.registered_broker_id() as i64,
        heartbeat_timeout_millis: Some(ctx.config.channel_expired_timeout as i64),
        enable_acting_master: Some(false),
        compressed: Some(false),
        body_crc32: None,
    };
    let master_epoch = epoch_to_send(ctx.replication.role().is_master(), ctx.replication.epoch());
    tracing::debug!(epoch = ?master_epoch, ext = MASTER_EPOCH_EXT, broker_id = header.broker_id,
        "registering with name servers");
    let mut errors = Vec::new();
    for addr in namesrvs {
        match ctx
            .namesrv_client
            .register_broker_with_epoch(*addr, &header, master_epoch, &body, REGISTER_TIMEOUT)
            .await
        {
            Ok(reply) => learn_master(ctx, &reply.result),
            Err(source) => errors.push(RegistrationError {
                addr: *addr,
                source,
            }),
        }
    }
    errors
}

/// The master epoch a registration carries in [`MASTER_EPOCH_EXT`]: only a master fences
/// with its epoch, and epoch 0 (no controller) sends the plain RocketMQ request.
fn epoch_to_send(is_master: bool, epoch: u64) -> Option<u64> {
    (is_master && epoch > 0).then_some(epoch)
}

/// A slave learns its master's HA address from the registration reply, as RocketMQ slaves
/// do (unless `haMasterAddress` fixes it).
fn learn_master(ctx: &BrokerContext, result: &ferromq_namesrv::RegisterBrokerResult) {
    if ctx.replication.role().is_master() {
        return;
    }
    match result
        .ha_server_addr
        .as_deref()
        .map(str::parse::<SocketAddr>)
    {
        Some(Ok(addr)) => ctx.replication.learn_master_addr(addr),
        Some(Err(_)) => tracing::warn!(ha_server_addr = ?result.ha_server_addr,
            "a name server returned an unusable master HA address"),
        None => tracing::debug!("no master registered yet for this broker name"),
    }
}

/// Unregisters from every name server and closes the connections; returns the failures.
pub async fn unregister_all(
    ctx: &BrokerContext,
    namesrvs: &[SocketAddr],
) -> Vec<RegistrationError> {
    let header = UnregisterBrokerRequestHeader {
        broker_name: ctx.config.broker_name.clone(),
        broker_addr: ctx.broker_addr.to_string(),
        cluster_name: ctx.config.broker_cluster_name.clone(),
        broker_id: ctx.replication.registered_broker_id() as i64,
    };
    let mut errors = Vec::new();
    for addr in namesrvs {
        if let Err(source) = ctx
            .namesrv_client
            .unregister_broker(*addr, &header, REGISTER_TIMEOUT)
            .await
        {
            errors.push(RegistrationError {
                addr: *addr,
                source,
            });
        }
    }
    ctx.namesrv_client.close_all().await;
    errors
}

/// Registers now, after every topic change, every role change and every period, until
/// `stop` fires.
pub async fn run(
    ctx: Arc<BrokerContext>,
    namesrvs: Vec<SocketAddr>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let period = Duration::from_millis(ctx.config.register_name_server_period.max(1_000));
    let mut role = ctx.replication.subscribe_role();
    role.mark_unchanged();
    loop {
        for error in register_all(&ctx, &namesrvs).await {
            tracing::warn!(%error, "registration with a name server failed; retrying next period");
        }
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = ctx.register_now.notified() => {}
            changed = role.changed() => {
                if changed.is_ok() {
                    let now = *role.borrow_and_update();
                    tracing::info!(role = ?now, broker_id = ctx.replication.registered_broker_id(),
                        "broker role changed; registering with the name servers now");
                } else {
                    // The replication state is gone (shutdown): wait for the stop signal.
                    let _ = stop.changed().await;
                    return;
                }
            }
            _ = stop.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::epoch_to_send;

    #[test]
    fn only_a_master_with_an_epoch_sends_it() {
        assert_eq!(epoch_to_send(true, 0), None);
        assert_eq!(epoch_to_send(true, 3), Some(3));
        assert_eq!(epoch_to_send(false, 3), None);
        assert_eq!(epoch_to_send(false, 0), None);
    }
}
