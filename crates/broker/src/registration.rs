//! Registration with name servers: on start, after every topic change, and every
//! `registerNameServerPeriod`; unregistration at shutdown.
//!
//! A name server that cannot be reached is retried at the next period; the failure is logged
//! with the address and counted in the outcome returned to the caller of `register_all`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ferromq_protocol::remoting::body::encode_json;
use ferromq_protocol::remoting::body::topic::RegisterBrokerBody;
use ferromq_protocol::remoting::client::{ClientError, RemotingClient};
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::namesrv::{
    RegisterBrokerRequestHeader, UnregisterBrokerRequestHeader,
};
use ferromq_protocol::remoting::RemotingCommand;

use crate::context::BrokerContext;

/// How long one registration request may take.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(3);

/// Why a name server did not accept a registration.
#[derive(Debug, thiserror::Error)]
pub enum RegistrationError {
    /// The name server could not be reached or did not answer.
    #[error("name server {addr}: {source}")]
    Transport {
        addr: SocketAddr,
        source: ClientError,
    },
    /// The name server answered with an error code.
    #[error("name server {addr} refused the request: code {code}, {remark}")]
    Refused {
        addr: SocketAddr,
        code: i32,
        remark: String,
    },
}

/// Registers with every name server; returns one error per name server that failed.
pub async fn register_all(ctx: &BrokerContext, namesrvs: &[SocketAddr]) -> Vec<RegistrationError> {
    let body = RegisterBrokerBody {
        topic_config_serialize_wrapper: ctx.topics.snapshot(),
        filter_server_list: Vec::new(),
    };
    let body = encode_json(&body);
    let header = RegisterBrokerRequestHeader {
        broker_name: ctx.config.broker_name.clone(),
        broker_addr: ctx.broker_addr.to_string(),
        cluster_name: ctx.config.broker_cluster_name.clone(),
        ha_server_addr: String::new(),
        broker_id: ctx.config.broker_id as i64,
        heartbeat_timeout_millis: Some(ctx.config.channel_expired_timeout as i64),
        enable_acting_master: Some(false),
        compressed: Some(false),
        body_crc32: Some(crc32fast::hash(&body) as i32),
    };
    let mut errors = Vec::new();
    for addr in namesrvs {
        let command = RemotingCommand::request_with_header(request::REGISTER_BROKER, &header)
            .with_body(body.clone());
        if let Err(error) = send(*addr, command).await {
            errors.push(error);
        }
    }
    errors
}

/// Unregisters from every name server; returns the failures.
pub async fn unregister_all(
    ctx: &BrokerContext,
    namesrvs: &[SocketAddr],
) -> Vec<RegistrationError> {
    let header = UnregisterBrokerRequestHeader {
        broker_name: ctx.config.broker_name.clone(),
        broker_addr: ctx.broker_addr.to_string(),
        cluster_name: ctx.config.broker_cluster_name.clone(),
        broker_id: ctx.config.broker_id as i64,
    };
    let mut errors = Vec::new();
    for addr in namesrvs {
        let command = RemotingCommand::request_with_header(request::UNREGISTER_BROKER, &header);
        if let Err(error) = send(*addr, command).await {
            errors.push(error);
        }
    }
    errors
}

async fn send(addr: SocketAddr, command: RemotingCommand) -> Result<(), RegistrationError> {
    let transport = |source| RegistrationError::Transport { addr, source };
    let client = RemotingClient::connect(addr, REGISTER_TIMEOUT)
        .await
        .map_err(transport)?;
    let reply = client
        .invoke(command, REGISTER_TIMEOUT)
        .await
        .map_err(transport);
    client.close();
    let reply = reply?;
    if reply.code != response::SUCCESS {
        return Err(RegistrationError::Refused {
            addr,
            code: reply.code,
            remark: reply.remark.unwrap_or_default(),
        });
    }
    Ok(())
}

/// Registers now, after every topic change and every period, until `stop` fires.
pub async fn run(
    ctx: Arc<BrokerContext>,
    namesrvs: Vec<SocketAddr>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let period = Duration::from_millis(ctx.config.register_name_server_period.max(1_000));
    loop {
        for error in register_all(&ctx, &namesrvs).await {
            tracing::warn!(%error, "registration with a name server failed; retrying next period");
        }
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = ctx.register_now.notified() => {}
            _ = stop.changed() => return,
        }
    }
}
