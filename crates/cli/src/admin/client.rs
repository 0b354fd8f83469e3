//! Connections of one admin command to the name servers and brokers, and the lookups every
//! command shares (routes, cluster info, master brokers).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use ferromq_protocol::remoting::body::decode_json;
use ferromq_protocol::remoting::body::route::{ClusterInfo, TopicRouteData};
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::namesrv::GetRouteInfoRequestHeader;
use ferromq_protocol::remoting::{response_code_name, RemotingClient, RemotingCommand};
use tokio::sync::Mutex;

use super::Common;

/// Bound on establishing a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Bound on one request's reply.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A broker master: its name and address.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct BrokerRef {
    /// Broker group name (`broker-a`), or the address when unknown.
    pub name: String,
    /// `ip:port`.
    pub addr: String,
}

/// The connections of one admin command.
#[derive(Debug)]
pub struct Admin {
    namesrv: Vec<String>,
    /// Credentials and TLS of every connection.
    options: ferromq_protocol::remoting::ClientOptions,
    clients: Mutex<HashMap<String, Arc<RemotingClient>>>,
}

impl Admin {
    /// An admin session with the flags' name servers.
    ///
    /// # Errors
    /// A bad credentials or TLS flag (a missing CA file, a key without its secret).
    pub fn new(common: &Common) -> Result<Admin> {
        let namesrv = common
            .namesrv
            .as_deref()
            .unwrap_or_default()
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        let mut options = common.security.client_options()?;
        options.connect_timeout = CONNECT_TIMEOUT;
        Ok(Admin {
            namesrv,
            options,
            clients: Mutex::new(HashMap::new()),
        })
    }

    async fn connect(&self, addr: &str) -> Result<Arc<RemotingClient>> {
        let mut clients = self.clients.lock().await;
        if let Some(client) = clients.get(addr).filter(|c| !c.is_closed()) {
            return Ok(client.clone());
        }
        let resolved: SocketAddr = match addr.parse() {
            Ok(resolved) => resolved,
            Err(_) => tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host(addr))
                .await
                .map_err(|_| anyhow!("resolving {addr} timed out"))?
                .with_context(|| format!("bad address {addr:?} (expected host:port)"))?
                .next()
                .ok_or_else(|| anyhow!("address {addr:?} resolves to nothing"))?,
        };
        // --tls is for every server, name servers included (as Java's `tls.enable`).
        let options = self.options.clone();
        let client = Arc::new(RemotingClient::connect_with(resolved, options).await?);
        clients.insert(addr.to_string(), client.clone());
        Ok(client)
    }

    /// Sends a request to `addr` and returns its reply, whatever its code.
    pub async fn call(&self, addr: &str, command: RemotingCommand) -> Result<RemotingCommand> {
        let client = self.connect(addr).await?;
        Ok(client.invoke(command, REQUEST_TIMEOUT).await?)
    }

    /// Sends a request to `addr`; a reply other than SUCCESS is an error naming its code and
    /// remark.
    /// Sends a header-less request `code` to the broker at `addr` and decodes its JSON body;
    /// the error text names the broker and what went wrong (`what`: the body's name).
    pub async fn ask_json<T: serde::de::DeserializeOwned>(
        &self,
        addr: &str,
        code: i32,
        what: &str,
    ) -> std::result::Result<T, String> {
        let command = RemotingCommand::new_request(code, Default::default());
        let reply = self
            .call(addr, command)
            .await
            .map_err(|e| format!("broker {addr} cannot be asked: {e:#}"))?;
        check(&reply, &format!("broker {addr}")).map_err(|e| e.to_string())?;
        ferromq_protocol::remoting::body::decode_json(reply.body.as_deref().unwrap_or_default())
            .map_err(|e| format!("broker {addr} sent an unreadable {what}: {e}"))
    }

    pub async fn call_ok(&self, addr: &str, command: RemotingCommand) -> Result<RemotingCommand> {
        let reply = self.call(addr, command).await?;
        check(&reply, &format!("broker {addr}"))?;
        Ok(reply)
    }

    /// Sends a request to the first name server that can be reached; returns its reply.
    pub async fn namesrv_call(&self, command: RemotingCommand) -> Result<RemotingCommand> {
        if self.namesrv.is_empty() {
            bail!("no name server given: pass -n host:port");
        }
        let mut last = None;
        for addr in &self.namesrv {
            match self.call(addr, command.clone()).await {
                Ok(reply) => return Ok(reply),
                Err(error) => last = Some(error.context(format!("name server {addr}"))),
            }
        }
        Err(last.unwrap_or_else(|| anyhow!("no name server answered")))
    }

    /// Every name server address given.
    pub fn namesrv_addrs(&self) -> &[String] {
        &self.namesrv
    }

    /// The route of `topic`; an unknown topic is an error saying so.
    pub async fn route(&self, topic: &str) -> Result<TopicRouteData> {
        let header = GetRouteInfoRequestHeader {
            topic: topic.to_string(),
            accept_standard_json_only: Some(true),
        };
        let reply = self
            .namesrv_call(RemotingCommand::request_with_header(
                request::GET_ROUTEINFO_BY_TOPIC,
                &header,
            ))
            .await?;
        if reply.code == response::TOPIC_NOT_EXIST {
            bail!("topic {topic} does not exist (no route on the name server)");
        }
        check(&reply, "name server")?;
        decode_json(reply.body.as_deref().unwrap_or_default())
            .with_context(|| format!("bad route of topic {topic}"))
    }

    /// The name server's cluster info.
    pub async fn cluster_info(&self) -> Result<ClusterInfo> {
        let reply = self
            .namesrv_call(RemotingCommand::new_request(
                request::GET_BROKER_CLUSTER_INFO,
                Default::default(),
            ))
            .await?;
        check(&reply, "name server")?;
        decode_json(reply.body.as_deref().unwrap_or_default()).context("bad cluster info")
    }

    /// Masters of every broker group (of `cluster`, when given).
    pub async fn masters(&self, cluster: Option<&str>) -> Result<Vec<BrokerRef>> {
        let info = self.cluster_info().await?;
        let mut masters = Vec::new();
        for (name, data) in &info.broker_addr_table {
            if cluster.is_some_and(|c| c != data.cluster) {
                continue;
            }
            if let Some(addr) = data.master_addr() {
                masters.push(BrokerRef {
                    name: name.clone(),
                    addr: addr.to_string(),
                });
            }
        }
        if let Some(cluster) = cluster {
            if masters.is_empty() {
                bail!("cluster {cluster} has no master broker on the name server");
            }
        }
        masters.sort();
        Ok(masters)
    }

    /// Masters serving `topic` (of `cluster`, when given).
    pub async fn topic_masters(
        &self,
        topic: &str,
        cluster: Option<&str>,
    ) -> Result<Vec<BrokerRef>> {
        let route = self.route(topic).await?;
        let mut masters: Vec<BrokerRef> = route
            .broker_datas
            .iter()
            .filter(|b| cluster.is_none_or(|c| c == b.cluster))
            .filter_map(|b| {
                b.master_addr().map(|addr| BrokerRef {
                    name: b.broker_name.clone(),
                    addr: addr.to_string(),
                })
            })
            .collect();
        if masters.is_empty() {
            bail!("topic {topic} has no master broker in its route");
        }
        masters.sort();
        Ok(masters)
    }

    /// `-b addr` (named from the cluster info when a name server is given), else the masters
    /// of `-c cluster` or of every cluster.
    pub async fn targets(
        &self,
        broker: Option<&str>,
        cluster: Option<&str>,
    ) -> Result<Vec<BrokerRef>> {
        match broker {
            Some(addr) => Ok(vec![self.named(addr).await]),
            None => {
                let masters = self.masters(cluster).await?;
                if masters.is_empty() {
                    bail!("the name server knows no master broker");
                }
                Ok(masters)
            }
        }
    }

    /// `-b addr` with its broker name when the name server knows it.
    pub async fn named(&self, addr: &str) -> BrokerRef {
        let mut name = addr.to_string();
        if !self.namesrv.is_empty() {
            if let Ok(info) = self.cluster_info().await {
                for (broker, data) in &info.broker_addr_table {
                    if data.broker_addrs.values().any(|a| a == addr) {
                        name = broker.clone();
                    }
                }
            }
        }
        BrokerRef {
            name,
            addr: addr.to_string(),
        }
    }
}

/// An error unless `reply` is SUCCESS; the message names the code and the remark.
pub fn check(reply: &RemotingCommand, who: &str) -> Result<()> {
    if reply.code == response::SUCCESS {
        return Ok(());
    }
    bail!(
        "{who} answered {} ({}): {}",
        response_code_name(reply.code).unwrap_or("ferromq code"),
        reply.code,
        reply.remark.as_deref().unwrap_or("no remark")
    )
}
