//! Headers of name server requests: routes, broker registration, topic lists, write
//! permission.

header! {
    /// GET_ROUTEINFO_BY_TOPIC (105) request.
    pub struct GetRouteInfoRequestHeader {
        /// Topic.
        topic: String = "topic",
        /// Ask for standard JSON (ferromq always writes it).
        accept_standard_json_only: Option<bool> = "acceptStandardJsonOnly",
    }
}

header! {
    /// REGISTER_BROKER (103) request; the body is a `RegisterBrokerBody`.
    pub struct RegisterBrokerRequestHeader {
        /// Broker group name.
        broker_name: String = "brokerName",
        /// `ip:port` of this broker.
        broker_addr: String = "brokerAddr",
        /// Cluster.
        cluster_name: String = "clusterName",
        /// `ip:port` of its HA service.
        ha_server_addr: String = "haServerAddr",
        /// 0 for the master.
        broker_id: i64 = "brokerId",
        /// How long the name server keeps the broker without a new registration.
        heartbeat_timeout_millis: Option<i64> = "heartbeatTimeoutMillis",
        /// Acting-master mode.
        enable_acting_master: Option<bool> = "enableActingMaster",
        /// Body is deflated.
        compressed: Option<bool> = "compressed",
        /// CRC32 of the body; checked when non-zero.
        body_crc32: Option<i32> = "bodyCrc32",
    }
}

header! {
    /// REGISTER_BROKER (103) reply.
    pub struct RegisterBrokerResponseHeader {
        /// HA address of the master.
        ha_server_addr: Option<String> = "haServerAddr",
        /// Address of the master.
        master_addr: Option<String> = "masterAddr",
    }
}

header! {
    /// UNREGISTER_BROKER (104) request.
    pub struct UnregisterBrokerRequestHeader {
        /// Broker group name.
        broker_name: String = "brokerName",
        /// `ip:port`.
        broker_addr: String = "brokerAddr",
        /// Cluster.
        cluster_name: String = "clusterName",
        /// Broker id.
        broker_id: i64 = "brokerId",
    }
}

header! {
    /// QUERY_DATA_VERSION (322) request: should the broker re-register?
    pub struct QueryDataVersionRequestHeader {
        /// Broker group name.
        broker_name: String = "brokerName",
        /// `ip:port`.
        broker_addr: String = "brokerAddr",
        /// Cluster.
        cluster_name: String = "clusterName",
        /// Broker id.
        broker_id: i64 = "brokerId",
    }
}

header! {
    /// QUERY_DATA_VERSION (322) reply.
    pub struct QueryDataVersionResponseHeader {
        /// The name server's data version differs from the broker's.
        changed: Option<bool> = "changed",
    }
}

header! {
    /// GET_TOPICS_BY_CLUSTER (224) request.
    pub struct GetTopicsByClusterRequestHeader {
        /// Cluster.
        cluster: String = "cluster",
    }
}

header! {
    /// DELETE_TOPIC_IN_NAMESRV (216) request.
    pub struct DeleteTopicFromNamesrvRequestHeader {
        /// Topic.
        topic: String = "topic",
        /// Limit to one cluster.
        cluster_name: Option<String> = "clusterName",
    }
}

header! {
    /// WIPE_WRITE_PERM_OF_BROKER (205) request.
    pub struct WipeWritePermOfBrokerRequestHeader {
        /// Broker group name.
        broker_name: String = "brokerName",
    }
}

header! {
    /// WIPE_WRITE_PERM_OF_BROKER (205) reply.
    pub struct WipeWritePermOfBrokerResponseHeader {
        /// Topics changed.
        wipe_topic_count: i32 = "wipeTopicCount",
    }
}

header! {
    /// ADD_WRITE_PERM_OF_BROKER (327) request.
    pub struct AddWritePermOfBrokerRequestHeader {
        /// Broker group name.
        broker_name: String = "brokerName",
    }
}

header! {
    /// ADD_WRITE_PERM_OF_BROKER (327) reply.
    pub struct AddWritePermOfBrokerResponseHeader {
        /// Topics changed.
        add_topic_count: i32 = "addTopicCount",
    }
}
