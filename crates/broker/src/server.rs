//! The broker process: opens the store, listens, registers with name servers, and shuts
//! down cleanly (stop accepting, unregister, flush and checkpoint the store).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ferromq_protocol::remoting::limits::{self, Acceptor, ConnectionGuard};
use ferromq_store::MessageStore;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::catalog::groups::{GroupError, GroupManager};
use crate::catalog::topics::{TopicError, TopicManager};
use crate::config::{BrokerConfig, ConfigError};
use crate::context::{BrokerContext, BrokerCounters};
use crate::observability::{broker_stats, metrics_http};
use crate::remoting::{connection, processor, registration};
use crate::replication::handshake::GroupIdentity;
use crate::replication::{master, slave, Replication};
use crate::sessions::registry::{ClientRegistry, QueueLocks};

/// How often silent clients are looked for.
const CLIENT_SCAN_PERIOD: Duration = Duration::from_secs(10);

/// Why the broker could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// Bad configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The metrics socket could not be opened.
    #[error("cannot listen for metrics on {addr} (metricsPort): {source}")]
    MetricsListen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// The listening socket could not be opened.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// The gRPC socket could not be opened.
    #[error(
        "cannot listen for gRPC on {addr} (grpcListenPort; -1 turns the endpoint off): {source}"
    )]
    GrpcListen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// The HA (replication) socket could not be opened.
    #[error("cannot listen for replication on {addr} (haListenPort): {source}")]
    HaListen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// A name server knows a live master of this broker name at another address.
    #[error("brokerName, brokerId: {0}")]
    SecondMaster(String),
    /// Controller mode could not start (no controller registered the broker, or its
    /// identity file is unusable).
    #[error("controller mode: {0}")]
    Controller(#[from] crate::replication::controlled::ControlledError),
    /// The store could not open.
    #[error("cannot open the store: {0}")]
    Store(#[from] ferromq_store::OpenError),
    /// The reset fences recorded in the log could not be read at start (serving without them
    /// would let stale consumers undo resets).
    #[error("cannot recover the reset fences from the store: {0}")]
    Fences(#[source] ferromq_store::ReadError),
    /// The store did not close cleanly (the next start recovers).
    #[error("store did not close cleanly: {0}")]
    StoreClose(#[from] ferromq_store::StoreError),
    /// Topic configs could not be loaded.
    #[error(transparent)]
    Topics(#[from] TopicError),
    /// Subscription groups could not be loaded.
    #[error(transparent)]
    Groups(#[from] GroupError),
    /// Unregistering from name servers failed.
    #[error("unregistering from name servers failed: {0}")]
    Unregister(String),
    /// A broker task failed.
    #[error("broker task failed: {0}")]
    Task(String),
    /// The ACL accounts file (`aclFile`) is missing or bad at start.
    #[error("cannot start with ACL on: {0}")]
    Acl(#[from] ferromq_acl::AccountsError),
    /// A TLS certificate or key file (`tls.server.*`) is missing or bad at start.
    #[error(transparent)]
    Tls(#[from] crate::remoting::tls::TlsError),
}

/// A running broker.
pub struct Broker {
    ctx: Arc<BrokerContext>,
    local_addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    grpc_addr: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Broker {
    /// Opens the store and starts serving. `listenPort = 0` picks a free port; the chosen one
    /// is [`Broker::local_addr`].
    pub async fn start(config: BrokerConfig) -> Result<Broker, BrokerError> {
        config.validate()?;
        let connection_limits = connection_guard(&config)?;
        let acl = match (config.acl_enable, &config.acl_file) {
            (true, Some(path)) => Some(Arc::new(ferromq_acl::Acl::load(path)?)),
            _ => None,
        };
        let tls = crate::remoting::tls::from_config(&config)?;
        let namesrv_tls = crate::remoting::tls::client_from_config(&config)?;
        let bind = SocketAddr::new(config.bind_ip(), config.listen_port);
        let listener = TcpListener::bind(bind)
            .await
            .map_err(|source| BrokerError::Listen { addr: bind, source })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| BrokerError::Listen { addr: bind, source })?;
        let metrics_listener = match config.metrics_port {
            Some(port) => {
                let ip = config
                    .metrics_bind_address
                    .unwrap_or(std::net::Ipv4Addr::LOCALHOST.into());
                let addr = SocketAddr::new(ip, port);
                let listener = TcpListener::bind(addr)
                    .await
                    .map_err(|source| BrokerError::MetricsListen { addr, source })?;
                let bound = listener
                    .local_addr()
                    .map_err(|source| BrokerError::MetricsListen { addr, source })?;
                Some((listener, bound))
            }
            None => None,
        };
        let grpc_listener = match config.grpc_port() {
            Some(port) => {
                let addr = SocketAddr::new(config.bind_ip(), port);
                let listener = TcpListener::bind(addr)
                    .await
                    .map_err(|source| BrokerError::GrpcListen { addr, source })?;
                let bound = listener
                    .local_addr()
                    .map_err(|source| BrokerError::GrpcListen { addr, source })?;
                Some((listener, bound))
            }
            None => None,
        };
        // The address registered with the name servers and written into message ids.
        let broker_addr = config.advertised_addr(local_addr.port());
        let mut store_config = config.store_config()?;
        store_config.store_host = broker_addr;
        // The fences the log recorded come back with the store: a consumer fenced by a reset
        // before a restart is still fenced after it.
        let (store, recorded_fences) = tokio::task::spawn_blocking(move || {
            let store = MessageStore::open(store_config)?;
            let fences = store.offset_fences().map_err(BrokerError::Fences)?;
            Ok::<_, BrokerError>((store, fences))
        })
        .await
        .map_err(|e| BrokerError::Task(e.to_string()))??;
        let fences = crate::core::fences::ResetFences::default();
        if !recorded_fences.is_empty() {
            tracing::info!(
                queues = recorded_fences.len(),
                "reset fences recovered from the log"
            );
        }
        fences.recover(recorded_fences);
        let report = store.recovery_report().clone();
        tracing::info!(clean = report.clean_shutdown, log_end = report.log_end, cut = ?report.cut, "store opened");
        let topics = TopicManager::load(
            &config.store_path_root_dir,
            config.auto_create_topic_enable,
            config.default_topic_queue_nums,
        )?;
        let groups = GroupManager::load(&config.store_path_root_dir, config.max_reconsume_times)?;
        let namesrvs = config.namesrv_addrs()?;
        let delay_levels_ms = config.delay_levels_ms()?;
        let store = Arc::new(store);
        let mut replication_settings = config.replication_settings()?;
        let controller_settings = config.controller_mode_settings()?;
        if controller_settings.is_some() {
            // The controller decides: until it names this broker master, it is a slave.
            replication_settings.role = crate::replication::BrokerRole::Slave;
        }
        let ha_bind = SocketAddr::new(config.bind_ip(), replication_settings.ha_listen_port);
        let ha_listener =
            TcpListener::bind(ha_bind)
                .await
                .map_err(|source| BrokerError::HaListen {
                    addr: ha_bind,
                    source,
                })?;
        let ha_addr = config.advertised_ha_addr(
            ha_listener
                .local_addr()
                .map_err(|source| BrokerError::HaListen {
                    addr: ha_bind,
                    source,
                })?
                .port(),
        );
        let replication = Replication::new(
            replication_settings,
            GroupIdentity {
                cluster: config.broker_cluster_name.clone(),
                broker_name: config.broker_name.clone(),
                segment_size: config.mapped_file_size_commit_log,
            },
            store.clone(),
            Duration::from_millis(config.sync_flush_timeout.max(1)),
        );
        let controller = controller_settings.map(|settings| {
            crate::replication::controlled::ControllerLink::new(
                settings,
                replication.clone(),
                broker_addr,
                ha_addr,
            )
        });
        if let Some(link) = &controller {
            link.register(&config.store_path_root_dir).await?;
        }
        let ctx = Arc::new(BrokerContext {
            controller: controller.clone(),
            broker_addr,
            ha_addr,
            replication: replication.clone(),
            catalog_log: Default::default(),
            store,
            topics,
            groups,
            clients: ClientRegistry::default(),
            delay_levels_ms,
            register_now: Default::default(),
            counters: BrokerCounters::default(),
            locks: QueueLocks::default(),
            namesrv_client: ferromq_namesrv::NamesrvClient::with_credentials(
                config.inner_credentials(),
            )
            .with_tls(namesrv_tls),
            fences,
            sessions: crate::sessions::identity::Sessions::new(std::time::Instant::now()),
            metrics: Default::default(),
            stats: Default::default(),
            runtime_config: crate::config::runtime::RuntimeConfig::new(&config),
            held_pulls: Arc::new(crate::core::work_limits::HeldPulls::new(
                config.pull_hold_max,
                config.pull_hold_max_per_connection,
            )),
            transactions: crate::core::transactions::Transactions::new(
                crate::core::transactions::TransactionSettings::of(&config),
            ),
            pop: Default::default(),
            timers: crate::core::timer::Timers::new(crate::core::timer::TimerSettings {
                max_delay_ms: (config.timer_max_delay_sec as i64).saturating_mul(1_000),
                tracked_max: config.timer_tracked_max as usize,
            }),
            acl: acl.clone(),
            tls,
            config,
            connection_limits,
        });
        refuse_second_master(&ctx, &namesrvs).await?;
        let (stop, stop_rx) = watch::channel(false);
        let controller_task = controller.map(|link| {
            tokio::spawn(link.run(ctx.config.store_path_root_dir.clone(), stop_rx.clone()))
        });
        let acceptor = Acceptor::new(listener, ctx.connection_limits.clone());
        let mut tasks = vec![
            tokio::spawn(accept_loop(ctx.clone(), acceptor, stop_rx.clone())),
            tokio::spawn(expire_clients(ctx.clone(), stop_rx.clone())),
            tokio::spawn(processor::run_scheduler(ctx.clone(), stop_rx.clone())),
            tokio::spawn(crate::core::transactions::check::run_checker(
                ctx.clone(),
                stop_rx.clone(),
            )),
            tokio::spawn(crate::core::timer::fire::run_timer(
                ctx.clone(),
                stop_rx.clone(),
            )),
            tokio::spawn(crate::core::pop::renew::run_renewals(
                ctx.clone(),
                stop_rx.clone(),
            )),
            tokio::spawn(broker_stats::run_sampler(ctx.clone(), stop_rx.clone())),
            tokio::spawn(crate::catalog::groups::run_saver(
                ctx.clone(),
                stop_rx.clone(),
            )),
            tokio::spawn(master::serve(
                replication.clone(),
                ha_listener,
                stop_rx.clone(),
            )),
            tokio::spawn(slave::run(replication.clone(), stop_rx.clone())),
            tokio::spawn(replication.clone().run_ticks(stop_rx.clone())),
            tokio::spawn(crate::replication::catalog_log::run(
                ctx.clone(),
                stop_rx.clone(),
            )),
        ];
        tasks.extend(controller_task);
        if let Some(acl) = acl {
            let interval = Duration::from_millis(ctx.config.acl_reload_interval_millis);
            tasks.push(tokio::spawn(acl.watch(interval, stop_rx.clone())));
        }
        let metrics_addr = metrics_listener.map(|(listener, addr)| {
            tasks.push(tokio::spawn(metrics_http::serve(
                ctx.clone(),
                listener,
                stop_rx.clone(),
            )));
            tracing::info!(%addr, "metrics endpoint listening (GET /metrics)");
            addr
        });
        let grpc_addr = grpc_listener.map(|(listener, addr)| {
            let advertised = SocketAddr::new(ctx.broker_addr.ip(), addr.port());
            tasks.push(tokio::spawn(crate::grpc::serve(
                ctx.clone(),
                listener,
                advertised,
                stop_rx.clone(),
            )));
            tracing::info!(%addr, "gRPC endpoint listening (RocketMQ 5.x clients)");
            addr
        });
        if !namesrvs.is_empty() {
            tasks.push(tokio::spawn(registration::run(
                ctx.clone(),
                namesrvs,
                stop_rx,
            )));
        }
        tracing::info!(
            addr = %local_addr,
            advertised = %broker_addr,
            ha = %ha_addr,
            broker = %ctx.config.broker_name,
            broker_id = ctx.replication.broker_id(),
            role = ctx.replication.role().as_str(),
            controller_mode = ctx.controller.is_some(),
            "broker listening"
        );
        Ok(Broker {
            ctx,
            local_addr,
            metrics_addr,
            grpc_addr,
            stop,
            tasks,
        })
    }

    /// The address the broker listens on. It registers `context().broker_addr`, which differs
    /// when `brokerIP1`, `bindAddress` or `brokerAdvertisedPort` say so.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The HA (replication) address slaves connect to (`brokerIP1:haListenPort`).
    pub fn ha_addr(&self) -> SocketAddr {
        self.ctx.ha_addr
    }

    /// The address of the metrics endpoint (`http://<addr>/metrics`), when `metricsPort` is
    /// set; with `metricsPort = 0` this is the port the OS chose.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// The address of the gRPC endpoint (RocketMQ 5.x clients' `endpoints`), unless
    /// `grpcListenPort = -1`; with port 0 this is the port the OS chose.
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc_addr
    }

    /// Shared state (for tests and the admin endpoints).
    pub fn context(&self) -> &Arc<BrokerContext> {
        &self.ctx
    }

    /// Stops accepting, unregisters from name servers, and flushes and checkpoints the store.
    ///
    /// # Errors
    /// Unregistration or the store's final flush failed; the store is stopped either way.
    pub async fn shutdown(self) -> Result<(), BrokerError> {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        let namesrvs = self.ctx.config.namesrv_addrs()?;
        let unregister_errors = registration::unregister_all(&self.ctx, &namesrvs).await;
        let store = self.ctx.store.clone();
        tokio::task::spawn_blocking(move || store.close_shared())
            .await
            .map_err(|e| BrokerError::Task(e.to_string()))??;
        if !unregister_errors.is_empty() {
            let text: Vec<String> = unregister_errors.iter().map(ToString::to_string).collect();
            return Err(BrokerError::Unregister(text.join("; ")));
        }
        Ok(())
    }
}

/// Registers once before serving: a name server that already knows a live master of this
/// `brokerName` at another address refuses a second one, and the broker does not start (two
/// masters of one group would each accept writes the other never sees). Any other failure
/// is retried by the registration loop.
async fn refuse_second_master(
    ctx: &BrokerContext,
    namesrvs: &[SocketAddr],
) -> Result<(), BrokerError> {
    for error in registration::register_all(ctx, namesrvs).await {
        if error.source.is_second_master() {
            return Err(BrokerError::SecondMaster(error.to_string()));
        }
        tracing::warn!(%error, "first registration with a name server failed; retrying");
    }
    Ok(())
}

/// The connection limits of `config`, with `maxConnections` capped by the open-file limit
/// (logged, with a warning when the cap lowers it).
fn connection_guard(config: &BrokerConfig) -> Result<Arc<ConnectionGuard>, ConfigError> {
    let settings = config.connection_limits();
    let limit = limits::connection_limit(settings.max_connections)?;
    if limit.limit < limit.configured as usize {
        tracing::warn!(max_connections = limit.configured, limit = limit.limit,
            open_file_limit = ?limit.open_file_limit, reserved = limit.reserved,
            "maxConnections capped by the open-file limit, keeping descriptors for the store");
    } else {
        tracing::info!(limit = limit.limit, open_file_limit = ?limit.open_file_limit,
            "connection limit");
    }
    Ok(ConnectionGuard::new(settings, limit.limit))
}

/// Admits connections (under the connection limit, pausing when descriptors run out) until
/// the broker stops.
async fn accept_loop(
    ctx: Arc<BrokerContext>,
    mut acceptor: Acceptor,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            accepted = acceptor.accept() => {
                tokio::spawn(connection::serve(ctx.clone(), accepted, stop.clone()));
            }
            _ = stop.changed() => return,
        }
    }
}

async fn expire_clients(ctx: Arc<BrokerContext>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(CLIENT_SCAN_PERIOD) => {
                // channelExpiredTimeout may change at run time (updateBrokerConfig).
                let timeout = Duration::from_millis(ctx.runtime_config.channel_expired_timeout());
                let changed = ctx.clients.expire(timeout);
                ctx.notify_ids_changed(&changed);
            }
            _ = stop.changed() => return,
        }
    }
}
