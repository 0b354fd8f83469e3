//! An in-process name server and one broker (`b0`) on 127.0.0.1 ports chosen by
//! the OS, with helpers to create topics, produce, and reset a group's offsets by time.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use ferromq_broker::{Broker, BrokerConfig};
use ferromq_client::{ClientError, ConnectionPool, Message, Producer, ProducerConfig, RouteCache};
use ferromq_namesrv::{NameServer, NamesrvConfig};
use ferromq_protocol::remoting::body::route::perm;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::admin::CreateTopicRequestHeader;
use ferromq_protocol::remoting::headers::offset::ResetOffsetRequestHeader;
use ferromq_protocol::remoting::{ClientOptions, RemotingClient, RemotingCommand};
use tokio::sync::oneshot;

/// Bound on every request of the helpers.
pub const T: Duration = Duration::from_secs(5);

/// Messages per batch send of [`Cluster::produce`].
pub const PRODUCE_BATCH_MAX: usize = 100;

/// A name server and a broker serving topics; both stop on drop.
pub struct Cluster {
    /// The name server's address.
    pub namesrv: SocketAddr,
    /// The broker's address.
    pub broker: SocketAddr,
    _stop_namesrv: oneshot::Sender<()>,
    runtime: Option<tokio::runtime::Runtime>,
    _broker: Option<Broker>,
    _dir: tempfile::TempDir,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self._broker.take();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Cluster {
    /// Starts the name server and an ASYNC_FLUSH broker (on its own runtime).
    ///
    /// # Errors
    /// A server that does not start.
    pub async fn start() -> anyhow::Result<Cluster> {
        Self::start_with_flush("ASYNC_FLUSH").await
    }

    /// Starts the name server and a broker with `flush_disk_type` (`SYNC_FLUSH` or
    /// `ASYNC_FLUSH`).
    ///
    /// # Errors
    /// A server that does not start.
    pub async fn start_with_flush(flush_disk_type: &str) -> anyhow::Result<Cluster> {
        let server = NameServer::bind(NamesrvConfig {
            listen: "127.0.0.1:0".parse()?,
            ..NamesrvConfig::default()
        })
        .await
        .context("name server binds")?;
        let namesrv = server.local_addr();
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(server.run(async move {
            let _ = stopped.await;
        }));
        let dir = tempfile::tempdir()?;
        let config = BrokerConfig {
            broker_name: "b0".into(),
            listen_port: 0,
            ha_listen_port: Some(0),
            namesrv_addr: namesrv.to_string(),
            store_path_root_dir: dir.path().to_path_buf(),
            flush_disk_type: flush_disk_type.into(),
            auto_create_topic_enable: false,
            default_topic_queue_nums: 2,
            mapped_file_size_commit_log: 16 << 20,
            ..BrokerConfig::default()
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let broker = runtime
            .spawn(Broker::start(config))
            .await?
            .map_err(|e| anyhow::anyhow!("broker starts: {e}"))?;
        Ok(Cluster {
            namesrv,
            broker: broker.local_addr(),
            _stop_namesrv: stop,
            runtime: Some(runtime),
            _broker: Some(broker),
            _dir: dir,
        })
    }

    /// Creates `topic` with `queues` read/write queues and waits for its route.
    ///
    /// # Errors
    /// The broker refused, or the route never appeared within [`T`].
    pub async fn create_topic(&self, topic: &str, queues: i32) -> anyhow::Result<()> {
        let client = RemotingClient::connect(self.broker, T).await?;
        let header = CreateTopicRequestHeader {
            topic: topic.into(),
            default_topic: "TBW102".into(),
            read_queue_nums: queues,
            write_queue_nums: queues,
            perm: perm::READ | perm::WRITE,
            ..Default::default()
        };
        let cmd = RemotingCommand::request_with_header(request::UPDATE_AND_CREATE_TOPIC, &header);
        let reply = client.invoke(cmd, T).await?;
        if reply.code != response::SUCCESS {
            bail!(
                "create topic {topic}: code {} {:?}",
                reply.code,
                reply.remark
            );
        }
        let pool = std::sync::Arc::new(ConnectionPool::new(ClientOptions::default()));
        let routes = RouteCache::new(vec![self.namesrv], pool, T, Duration::ZERO)?;
        let deadline = Instant::now() + T;
        loop {
            match routes.refresh(topic).await {
                Ok(route) if !route.data.broker_datas.is_empty() => return Ok(()),
                Ok(_) | Err(ClientError::NoRoute { .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                other => bail!("route of {topic} never appeared: {other:?}"),
            }
        }
    }

    /// A producer routed by the name server.
    ///
    /// # Errors
    /// A bad configuration.
    pub fn producer(&self, group: &str) -> anyhow::Result<Producer> {
        Ok(Producer::start(ProducerConfig {
            namesrv_addrs: vec![self.namesrv],
            group: group.into(),
            send_timeout: T,
            ..ProducerConfig::default()
        })?)
    }

    /// Sends `count` messages with bodies `body(i)` for `i` in `from..from + count`, in
    /// batches of [`PRODUCE_BATCH_MAX`] (each batch to the next queue, round robin).
    ///
    /// # Errors
    /// The first failed send.
    pub async fn produce(
        &self,
        producer: &Producer,
        topic: &str,
        from: usize,
        count: usize,
        body: impl Fn(usize) -> String,
    ) -> anyhow::Result<()> {
        let ids: Vec<usize> = (from..from + count).collect();
        for chunk in ids.chunks(PRODUCE_BATCH_MAX) {
            let batch = chunk
                .iter()
                .map(|&i| Message::new(topic, body(i)).with_key(format!("k{i}")))
                .collect();
            producer
                .send_batch(batch)
                .await
                .with_context(|| format!("send messages from {}", chunk[0]))?;
        }
        Ok(())
    }

    /// Resets `group`'s offsets of `topic` to the first message stored at or after
    /// `timestamp_ms` (INVOKE_BROKER_TO_RESET_OFFSET, as `resetOffsetByTime`).
    ///
    /// # Errors
    /// The broker refused.
    pub async fn reset_offsets_by_time(
        &self,
        group: &str,
        topic: &str,
        timestamp_ms: i64,
    ) -> anyhow::Result<()> {
        let client = RemotingClient::connect(self.broker, T).await?;
        let header = ResetOffsetRequestHeader {
            group: group.into(),
            topic: topic.into(),
            queue_id: None,
            offset: None,
            timestamp: timestamp_ms,
            is_force: true,
        };
        let cmd =
            RemotingCommand::request_with_header(request::INVOKE_BROKER_TO_RESET_OFFSET, &header);
        let reply = client.invoke(cmd, T).await?;
        if reply.code != response::SUCCESS {
            bail!("reset: code {} {:?}", reply.code, reply.remark);
        }
        Ok(())
    }
}
