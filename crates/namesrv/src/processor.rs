//! `Processor`: maps one name server request to its reply (RocketMQ's
//! `DefaultRequestProcessor` and `ClientRequestProcessor`).
//!
//! Invariants: every request gets exactly one reply command (the server drops it for one-way
//! requests); the reply carries the request's opaque and header encoding; an unreadable header
//! or body is answered SYSTEM_ERROR with a remark naming what is wrong, as Java does; an
//! unknown or unsupported code is answered REQUEST_CODE_NOT_SUPPORTED with a remark naming
//! the code. Handlers never block or await, so the connection task can run them inline.

use std::sync::Arc;

use ferromq_protocol::body_crc;
use ferromq_protocol::remoting::body::misc::KvTable;
use ferromq_protocol::remoting::body::route::TopicRouteData;
use ferromq_protocol::remoting::body::topic::{DataVersion, RegisterBrokerBody};
use ferromq_protocol::remoting::body::{decode_json, encode_json};
use ferromq_protocol::remoting::extensions::MASTER_EPOCH_EXT;
use ferromq_protocol::remoting::headers::namesrv::{
    AddWritePermOfBrokerRequestHeader, AddWritePermOfBrokerResponseHeader,
    DeleteTopicFromNamesrvRequestHeader, GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader, QueryDataVersionRequestHeader, QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader, RegisterBrokerResponseHeader, UnregisterBrokerRequestHeader,
    WipeWritePermOfBrokerRequestHeader, WipeWritePermOfBrokerResponseHeader,
};
use ferromq_protocol::remoting::{
    request, request_code_name, response, ExtFieldsExt, HeaderError, RemotingCommand,
};

use crate::kv::{KvConfig, NAMESPACE_ORDER_TOPIC_CONFIG};
use crate::route_registry::{ConnectionId, RouteRegistry};

/// Whether `code` changes the name server's state (and so needs an admin account with ACL on).
pub fn is_write(code: i32) -> bool {
    matches!(
        code,
        request::REGISTER_BROKER
            | request::UNREGISTER_BROKER
            | request::DELETE_TOPIC_IN_NAMESRV
            | request::REGISTER_TOPIC_IN_NAMESRV
            | request::WIPE_WRITE_PERM_OF_BROKER
            | request::ADD_WRITE_PERM_OF_BROKER
            | request::PUT_KV_CONFIG
            | request::DELETE_KV_CONFIG
    )
}

/// Why a request could not be served; becomes a SYSTEM_ERROR reply with this text.
#[derive(Debug, thiserror::Error)]
enum RequestError {
    #[error("bad request header: {0}")]
    Header(#[from] HeaderError),
    #[error("bad request body: {0}")]
    Body(String),
}

/// Serves name server requests against a [`RouteRegistry`] and a [`KvConfig`].
#[derive(Debug, Clone)]
pub struct Processor {
    registry: Arc<RouteRegistry>,
    kv: Arc<KvConfig>,
    /// ACL for writes (`None`: off).
    acl: Option<Arc<ferromq_acl::Acl>>,
    /// Writes refused by ACL so far.
    acl_refusals: Arc<std::sync::atomic::AtomicU64>,
}

impl Processor {
    /// A processor over the given tables.
    pub fn new(registry: Arc<RouteRegistry>, kv: Arc<KvConfig>) -> Self {
        Processor {
            registry,
            kv,
            acl: None,
            acl_refusals: Arc::default(),
        }
    }

    /// Turns ACL on for writes: every request that changes the name server's state
    /// ([`is_write`]) must be signed by an admin account of `acl`.
    pub fn with_acl(mut self, acl: Arc<ferromq_acl::Acl>) -> Self {
        self.acl = Some(acl);
        self
    }

    /// The ACL in force, if on.
    pub fn acl(&self) -> Option<&Arc<ferromq_acl::Acl>> {
        self.acl.as_ref()
    }

    /// Writes refused by ACL so far.
    pub fn acl_refusals(&self) -> u64 {
        self.acl_refusals.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The NO_PERMISSION reply to `req` from `remote` when ACL refuses it; `None` when it
    /// may be served. Reads (routes, cluster info, KV reads) are open, as in RocketMQ: clients
    /// need routes before anything else, and routes hold no message data.
    pub fn authorise(
        &self,
        req: &RemotingCommand,
        remote: std::net::IpAddr,
    ) -> Option<RemotingCommand> {
        use ferromq_protocol::remoting::acl;
        let acl_handle = self.acl.as_ref()?;
        if !is_write(req.code) {
            return None;
        }
        let presented = ferromq_acl::Presented {
            access_key: req.ext_fields.get(acl::ACCESS_KEY).map(|v| v.as_str()),
            signature: req.ext_fields.get(acl::SIGNATURE).map(|v| v.as_str()),
            remote,
        };
        let needs = ferromq_acl::Needs {
            admin: true,
            resources: Vec::new(),
        };
        let content = || acl::signed_content(&req.ext_fields, req.body.as_deref());
        let denial = acl_handle
            .current()
            .authorise(presented, content, &needs)
            .err()?;
        self.acl_refusals
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::debug!(code = req.code, %remote, reason = denial.reason(), "name server write refused");
        Some(req.reply(response::NO_PERMISSION, Some(denial.to_string())))
    }

    /// The route tables.
    pub fn registry(&self) -> &Arc<RouteRegistry> {
        &self.registry
    }

    /// The key-value store.
    pub fn kv(&self) -> &Arc<KvConfig> {
        &self.kv
    }

    /// The reply to `req`, which arrived on connection `conn`.
    pub fn process(&self, req: &RemotingCommand, conn: ConnectionId) -> RemotingCommand {
        let result = match req.code {
            request::REGISTER_BROKER => self.register_broker(req, conn),
            request::UNREGISTER_BROKER => self.unregister_broker(req),
            request::GET_ROUTEINFO_BY_TOPIC => self.route(req),
            request::GET_BROKER_CLUSTER_INFO => {
                Ok(success(req).with_body(encode_json(&self.registry.cluster_info())))
            }
            request::GET_ALL_TOPIC_LIST_FROM_NAMESERVER => {
                Ok(success(req).with_body(encode_json(&self.registry.all_topics())))
            }
            request::GET_SYSTEM_TOPIC_LIST_FROM_NS => {
                Ok(success(req).with_body(encode_json(&self.registry.system_topics())))
            }
            request::GET_TOPICS_BY_CLUSTER => self.topics_by_cluster(req),
            request::DELETE_TOPIC_IN_NAMESRV => self.delete_topic(req),
            request::REGISTER_TOPIC_IN_NAMESRV => self.register_topic(req),
            request::QUERY_DATA_VERSION => self.query_data_version(req),
            request::WIPE_WRITE_PERM_OF_BROKER => self.wipe_write_perm(req),
            request::ADD_WRITE_PERM_OF_BROKER => self.add_write_perm(req),
            request::PUT_KV_CONFIG => self.put_kv(req),
            request::GET_KV_CONFIG => self.get_kv(req),
            request::DELETE_KV_CONFIG => self.delete_kv(req),
            request::GET_KVLIST_BY_NAMESPACE => self.kv_list(req),
            code => Ok(not_supported(req, code)),
        };
        result.unwrap_or_else(|e| {
            tracing::warn!(code = req.code, error = %e, "name server request rejected");
            req.reply(response::SYSTEM_ERROR, Some(e.to_string()))
        })
    }

    fn register_broker(
        &self,
        req: &RemotingCommand,
        conn: ConnectionId,
    ) -> Result<RemotingCommand, RequestError> {
        let header: RegisterBrokerRequestHeader = req.decode_header()?;
        let raw = req.body.as_deref().unwrap_or_default();
        if let Some(expected) = header.body_crc32.filter(|c| *c != 0) {
            let actual = body_crc(raw) as i32;
            if actual != expected {
                return Ok(req.reply(
                    response::SYSTEM_ERROR,
                    Some(format!(
                        "crc32 not match: header bodyCrc32 {expected}, body crc32 {actual}"
                    )),
                ));
            }
        }
        if header.compressed == Some(true) {
            return Ok(req.reply(
                response::SYSTEM_ERROR,
                Some("compressed REGISTER_BROKER bodies are not supported; set compressedRegister=false".to_owned()),
            ));
        }
        let body: RegisterBrokerBody = if raw.is_empty() {
            RegisterBrokerBody::default()
        } else {
            decode_json(raw).map_err(|e| RequestError::Body(e.to_string()))?
        };
        // ferromq's master epoch (controller mode); absent for classic brokers and RocketMQ's.
        let master_epoch = match req.ext_fields.get(MASTER_EPOCH_EXT) {
            None => None,
            Some(text) => match text.trim().parse::<u64>() {
                Ok(epoch) => Some(epoch),
                Err(_) => {
                    return Ok(req.reply(
                        response::SYSTEM_ERROR,
                        Some(format!(
                            "{MASTER_EPOCH_EXT} must be a non-negative integer, got {text:?}"
                        )),
                    ))
                }
            },
        };
        // A refusal (a second or deposed master for the group) is SYSTEM_ERROR, as RocketMQ
        // answers a registration its route manager rejects, with a remark naming the conflict.
        let result =
            match self
                .registry
                .register_broker_with_epoch(&header, master_epoch, &body, Some(conn))
            {
                Ok(result) => result,
                Err(e) => return Ok(req.reply(response::SYSTEM_ERROR, Some(e.to_string()))),
            };
        // A slave's reply carries its master's `masterAddr` and `haServerAddr` ext fields.
        let reply_header = RegisterBrokerResponseHeader {
            ha_server_addr: result.ha_server_addr,
            master_addr: result.master_addr,
        };
        let order = KvTable {
            table: self
                .kv
                .list(NAMESPACE_ORDER_TOPIC_CONFIG)
                .unwrap_or_default(),
        };
        Ok(success(req)
            .with_header(&reply_header)
            .with_body(encode_json(&order)))
    }

    fn unregister_broker(&self, req: &RemotingCommand) -> Result<RemotingCommand, RequestError> {
        let h: UnregisterBrokerRequestHeader = req.decode_header()?;
        let known = self.registry.unregister_broker(
            &h.cluster_name,
            &h.broker_addr,
            &h.broker_name,
            h.broker_id,
        );
        tracing::info!(cluster = %h.cluster_name, broker = %h.broker_name, addr = %h.broker_addr,
            id = h.broker_id, known, "broker unregistered");
        Ok(success(req))
    }

    fn route(&self, req: &RemotingCommand) -> Result<RemotingCommand, RequestError> {
        let h: GetRouteInfoRequestHeader = req.decode_header()?;
        match self.registry.topic_route(&h.topic) {
            Some(mut route) => {
                route.order_topic_conf = self.kv.get(NAMESPACE_ORDER_TOPIC_CONFIG, &h.topic);
                Ok(success(req).with_body(encode_json(&route)))
            }
            None => {
                tracing::debug!(topic = %h.topic, "route requested for unknown topic");
                Ok(req.reply(
                    response::TOPIC_NOT_EXIST,
                    Some(format!(
                        "No topic route info in name server for the topic: {}",
                        h.topic
                    )),
                ))
            }
        }
    }

    fn topics_by_cluster(&self, req: &RemotingCommand) -> Result<RemotingCommand, RequestError> {
        let h: GetTopicsByClusterRequestHeader = req.decode_header()?;
        Ok(success(req).with_body(encode_json(&self.registry.topics_by_cluster(&h.cluster))))
    }

    fn delete_topic(&self, req: &RemotingCommand) -> Result<RemotingCommand, RequestError> {
        let h: DeleteTopicFromNamesrvRequestHeader = req.decode_header()?;
        let cluster = h.cluster_name.as_deref().filter(|c| !c.is_empty());
        self.registry.delete_topic(&h.topic, cluster);
        Ok(success(req))
    }

    fn register_topic(&self, req: &RemotingCommand) -> Result<RemotingCommand, RequestError> {
        let topic = req.ext_fields.get_str("topic")?;
        let route: TopicRouteData = match req.body.as_deref() {
            Some(b) if !b.is_empty() => {
                decode_json(b).map_err(|e| RequestError::Body(e.to_string()))?
            }
            _ => TopicRouteData::default(),
        };
        self.registry.register_topic(topic, &route.queue_datas);
        Ok(success(req))
    }

    fn query_data_version(&self, req: &RemotingCommand) -> Result<RemotingCommand, RequestError> {
        let h: QueryDataVersionRequestHeader = req.decode_header()?;
        let version: DataVersion = match req.body.as_deref() {
            Some(b) if !b.is_empty() => {
                decode_json(b).map_err(|e| RequestError::Body(e.to_string()))?
            }
            _ => DataVersion::default(),
        };
        let (changed, registered) =
            self.registry
                .query_data_version(&h.cluster_name, &h.broker_addr, &version);
        let mut reply = success(req).with_header(&QueryDataVersionResponseHeader {
            changed: Some(changed),
        });
        if let Some(v) = registered {
            reply = reply.with_body(encode_json(&v));
        }
        Ok(reply)
    }

    fn wipe_write_perm(&self, req: &RemotingCommand) -> Result<RemotingCommand, RequestError> {
        let h: WipeWritePermOfBrokerRequestHeader = req.decode_header()?;
        let count = self.registry.wipe_write_perm(&h.broker_name);
        tracing::info!(broker = %h.broker_name, topics = count, "write permission wiped");
        Ok(
            success(req).with_header(&WipeWritePermOfBrokerResponseHeader {
                wipe_topic_count: count,
            }),
        )
    }

    fn add_write_perm(&self, req: &RemotingCommand) -> Result<RemotingCommand, RequestError> {
        let h: AddWritePermOfBrokerRequestHeader = req.decode_header()?;
        let count = self.registry.add_write_perm(&h.broker_name);
        tracing::info!(broker = %h.broker_name, topics = count, "write permission added");
        Ok(
            success(req).with_header(&AddWritePermOfBrokerResponseHeader {
                add_topic_count: count,
            }),
        )
    }

    fn put_kv(&self, req: &RemotingCommand) -> Result<RemotingCommand, RequestError> {
        let ext = &req.ext_fields;
        self.kv.put(
            ext.get_str("namespace")?,
            ext.get_str("key")?,
            ext.get_str("value")?,
        );
        Ok(success(req))
    }

    fn get_kv(&self, req: &RemotingCommand) -> Result<RemotingCommand, RequestError> {
        let ext = &req.ext_fields;
        let (ns, key) = (ext.get_str("namespace")?, ext.get_str("key")?);
        Ok(match self.kv.get(ns, key) {
            Some(value) => {
                let mut reply = success(req);
                reply.ext_fields.insert("value".to_owned(), value);
                reply
            }
            None => req.reply(
                response::QUERY_NOT_FOUND,
                Some(format!("No config item, Namespace: {ns} Key: {key}")),
            ),
        })
    }

    fn delete_kv(&self, req: &RemotingCommand) -> Result<RemotingCommand, RequestError> {
        let ext = &req.ext_fields;
        self.kv
            .delete(ext.get_str("namespace")?, ext.get_str("key")?);
        Ok(success(req))
    }

    fn kv_list(&self, req: &RemotingCommand) -> Result<RemotingCommand, RequestError> {
        let ns = req.ext_fields.get_str("namespace")?;
        Ok(match self.kv.list(ns) {
            Some(table) => success(req).with_body(encode_json(&KvTable { table })),
            None => req.reply(
                response::QUERY_NOT_FOUND,
                Some(format!("No config item, Namespace: {ns}")),
            ),
        })
    }
}

fn success(req: &RemotingCommand) -> RemotingCommand {
    req.reply(response::SUCCESS, None)
}

fn not_supported(req: &RemotingCommand, code: i32) -> RemotingCommand {
    let name = request_code_name(code).unwrap_or("unknown");
    tracing::debug!(code, name, "request code not supported by the name server");
    req.reply(
        response::REQUEST_CODE_NOT_SUPPORTED,
        Some(format!(
            "request code {code} ({name}) is not supported by the name server"
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferromq_protocol::remoting::ExtFields;

    fn processor() -> Processor {
        Processor::new(
            Arc::new(RouteRegistry::default()),
            Arc::new(KvConfig::new()),
        )
    }

    fn req(code: i32, pairs: &[(&str, &str)]) -> RemotingCommand {
        let ext: ExtFields = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        RemotingCommand::new_request(code, ext).with_opaque(42)
    }

    #[test]
    fn missing_header_field_is_system_error_naming_it() {
        let reply = processor().process(&req(request::GET_ROUTEINFO_BY_TOPIC, &[]), 1);
        assert_eq!(reply.code, response::SYSTEM_ERROR);
        assert_eq!(reply.opaque, 42);
        assert!(reply.remark.unwrap().contains("topic"));
    }

    #[test]
    fn bad_crc_and_bad_body_are_rejected() {
        let p = processor();
        let base = [
            ("brokerName", "a"),
            ("brokerAddr", "h:1"),
            ("clusterName", "C"),
            ("haServerAddr", "h:2"),
            ("brokerId", "0"),
        ];
        let mut with_crc = base.to_vec();
        with_crc.push(("bodyCrc32", "12345"));
        let r = p.process(
            &req(request::REGISTER_BROKER, &with_crc).with_body(&b"{}"[..]),
            1,
        );
        assert_eq!(r.code, response::SYSTEM_ERROR);
        assert!(r.remark.unwrap().contains("crc32"));
        let r = p.process(
            &req(request::REGISTER_BROKER, &base).with_body(&b"nope"[..]),
            1,
        );
        assert_eq!(r.code, response::SYSTEM_ERROR);
        let crc = body_crc(b"{}").to_string();
        let mut good = base.to_vec();
        good.push(("bodyCrc32", &crc));
        let r = p.process(
            &req(request::REGISTER_BROKER, &good).with_body(&b"{}"[..]),
            1,
        );
        assert_eq!(r.code, response::SUCCESS);
    }

    #[test]
    fn kv_round_trip_and_order_conf_in_route() {
        let p = processor();
        let put = req(
            request::PUT_KV_CONFIG,
            &[
                ("namespace", "ORDER_TOPIC_CONFIG"),
                ("key", "T"),
                ("value", "a:4"),
            ],
        );
        assert_eq!(p.process(&put, 1).code, response::SUCCESS);
        let get = req(
            request::GET_KV_CONFIG,
            &[("namespace", "ORDER_TOPIC_CONFIG"), ("key", "T")],
        );
        let r = p.process(&get, 1);
        assert_eq!(r.ext_fields.get("value").map(|v| v.as_str()), Some("a:4"));
        let list = req(request::GET_KVLIST_BY_NAMESPACE, &[("namespace", "nope")]);
        assert_eq!(p.process(&list, 1).code, response::QUERY_NOT_FOUND);
        let del = req(
            request::DELETE_KV_CONFIG,
            &[("namespace", "ORDER_TOPIC_CONFIG"), ("key", "T")],
        );
        assert_eq!(p.process(&del, 1).code, response::SUCCESS);
        assert_eq!(p.process(&get, 1).code, response::QUERY_NOT_FOUND);
    }

    fn register(
        p: &Processor,
        name: &str,
        addr: &str,
        id: &str,
        conn: ConnectionId,
    ) -> RemotingCommand {
        let ha = format!("{addr}-ha");
        let fields = [
            ("brokerName", name),
            ("brokerAddr", addr),
            ("clusterName", "C"),
            ("haServerAddr", ha.as_str()),
            ("brokerId", id),
        ];
        p.process(&req(request::REGISTER_BROKER, &fields), conn)
    }

    #[test]
    fn slave_reply_carries_master_and_ha_addresses_in_ext_fields() {
        let p = processor();
        let master = register(&p, "a", "m:1", "0", 1);
        assert_eq!(master.code, response::SUCCESS);
        assert!(!master.ext_fields.contains_key("masterAddr"));
        let slave = register(&p, "a", "s:1", "1", 2);
        assert_eq!(slave.code, response::SUCCESS);
        assert_eq!(
            slave.ext_fields.get("masterAddr").map(|v| v.as_str()),
            Some("m:1")
        );
        assert_eq!(
            slave.ext_fields.get("haServerAddr").map(|v| v.as_str()),
            Some("m:1-ha")
        );
    }

    #[test]
    fn second_master_is_system_error_naming_the_keys() {
        let p = processor();
        assert_eq!(register(&p, "a", "m:1", "0", 1).code, response::SUCCESS);
        let r = register(&p, "a", "m:2", "0", 2);
        assert_eq!(r.code, response::SYSTEM_ERROR);
        assert_eq!(r.opaque, 42);
        let remark = r.remark.unwrap();
        assert!(
            remark.contains(
                "broker name a already has a live master at m:1 (brokerName, brokerId=0)"
            ),
            "{remark}"
        );
    }
}
