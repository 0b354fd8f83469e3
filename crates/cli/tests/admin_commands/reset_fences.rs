//! Resets under running consumers: a push consumer follows a reset and its stale work is
//! fenced; a consumer that ignores the push has its old commits refused.

use std::time::{Duration, Instant};

use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::extensions::COMMIT_STALE_GENERATION;
use ferromq_protocol::remoting::RemotingCommand;
use serde_json::Value;

use crate::common::{create_topic, ok_json, start};
use crate::support::{
    commit_code, connect, heartbeat, now_ms, producer, pull_count, queue, runtime, send,
    send_keyed, TIMEOUT,
};

/// Every delivery to the push consumer: (queue id, queue offset).
type Deliveries = std::sync::Arc<std::sync::Mutex<Vec<(i32, u64)>>>;

fn delivered(log: &Deliveries, queue_id: i32, offset: u64) -> usize {
    log.lock()
        .unwrap()
        .iter()
        .filter(|d| **d == (queue_id, offset))
        .count()
}

fn highest(log: &Deliveries, queue_id: i32) -> Option<u64> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|d| d.0 == queue_id)
        .map(|d| d.1)
        .max()
}

async fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The end-to-end reset: `resetOffsetByTime` (the binary) moves a running push
/// consumer back to an earlier time while its listener holds messages of the old position.
/// The consumer continues from the reset offset (it receives those messages again); its
/// in-flight work from before the reset never lands: the results of the old generation are
/// dropped (`stale_results`) and every commit it sends before it has pulled at the reset
/// offset is refused by the broker's fence (`stale_rejections`, counted by its offset store);
/// `offsetHistory` shows the commits, the reset, and the commits after it from the reset
/// offset up. (A consumer that ignores the reset push is covered by
/// `reset_fences_the_commits_of_a_consumer_that_ignores_the_push`.)
#[test]
fn reset_under_a_running_push_consumer_is_followed_and_fences_stale_commits() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    use ferromq_client::{
        ConsumeFromWhere, ConsumeStatus, MessageExt, MessageListener, PushConsumer,
        PushConsumerConfig,
    };

    const PER_PHASE: u64 = 15;
    let server = start();
    let n = server.namesrv.clone();
    let b = server.broker.clone();
    create_topic(&n, &b, "LiveTopic", "2");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let producer = producer(&n);
        for i in 0..PER_PHASE * 2 {
            send_keyed(
                &producer,
                "LiveTopic",
                (i % 2) as i32,
                "early",
                "t",
                &format!("early-{i}"),
            )
            .await;
        }
        tokio::time::sleep(Duration::from_millis(60)).await;
        let middle = now_ms();
        tokio::time::sleep(Duration::from_millis(60)).await;
        for i in 0..PER_PHASE * 2 {
            send_keyed(
                &producer,
                "LiveTopic",
                (i % 2) as i32,
                "late",
                "t",
                &format!("late-{i}"),
            )
            .await;
        }
        producer.shutdown();

        // A slow listener that the test can hold, so that the reset lands mid-run.
        let log: Deliveries = Arc::new(Mutex::new(Vec::new()));
        let hold = Arc::new(AtomicBool::new(false));
        let listener = {
            let (log, hold) = (log.clone(), hold.clone());
            MessageListener::concurrently(move |msgs: &[MessageExt]| {
                let deadline = Instant::now() + Duration::from_secs(20);
                while hold.load(Ordering::SeqCst) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(5));
                }
                std::thread::sleep(Duration::from_millis(25));
                let mut log = log.lock().unwrap();
                for m in msgs {
                    log.push((m.queue_id, m.queue_offset));
                }
                ConsumeStatus::ConsumeSuccess
            })
        };
        let config = PushConsumerConfig {
            namesrv_addrs: vec![n.parse().unwrap()],
            group: "LiveGroup".into(),
            consume_from_where: ConsumeFromWhere::FirstOffset,
            consume_threads: 1,
            pull_hold: Duration::from_secs(3),
            pull_error_backoff: Duration::from_millis(100),
            rebalance_interval: Duration::from_secs(5),
            persist_interval: Duration::from_millis(50),
            heartbeat_interval: Duration::from_secs(1),
            shutdown_timeout: Duration::from_secs(3),
            ..PushConsumerConfig::default()
        };
        let consumer =
            PushConsumer::start(config, vec![("LiveTopic".into(), "*".into())], listener)
                .await
                .unwrap();

        // Mid-run: both queues are past the reset point; hold the listener and reset.
        wait_for(
            "consumption past the reset point",
            Duration::from_secs(20),
            || (0..2).all(|q| highest(&log, q).is_some_and(|o| o >= PER_PHASE + 3)),
        )
        .await;
        hold.store(true, Ordering::SeqCst);
        let first_pass = log.lock().unwrap().len();
        assert!(
            first_pass < (PER_PHASE * 4) as usize,
            "the run ended before the reset"
        );
        let n2 = n.clone();
        let reset = tokio::task::spawn_blocking(move || {
            ok_json(&[
                "resetOffsetByTime",
                "-n",
                &n2,
                "-g",
                "LiveGroup",
                "-t",
                "LiveTopic",
                "-s",
                &middle.to_string(),
            ])
        })
        .await
        .unwrap();
        hold.store(false, Ordering::SeqCst);
        let generation = reset["generation"].as_u64().unwrap();
        for q in 0..2 {
            assert_eq!(queue(&reset, q)["newOffset"], PER_PHASE, "{reset}");
            assert!(
                queue(&reset, q)["oldOffset"].as_u64().unwrap() > PER_PHASE,
                "{reset}"
            );
        }

        // The consumer follows the reset: the first late message of each queue comes again,
        // and everything is consumed and committed in the end.
        wait_for(
            "re-delivery from the reset offset",
            Duration::from_secs(20),
            || (0..2).all(|q| delivered(&log, q, PER_PHASE) >= 2),
        )
        .await;
        let n2 = n.clone();
        let mut progress = Value::Null;
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let n3 = n2.clone();
            progress = tokio::task::spawn_blocking(move || {
                ok_json(&[
                    "consumerProgress",
                    "-n",
                    &n3,
                    "-g",
                    "LiveGroup",
                    "-t",
                    "LiveTopic",
                ])
            })
            .await
            .unwrap();
            if progress["totalLag"] == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(progress["totalLag"], 0, "{progress}");
        for q in 0..2 {
            assert_eq!(
                queue(&progress, q)["consumerOffset"],
                PER_PHASE * 2,
                "{progress}"
            );
        }
        // After the reset every queue is consumed from the reset offset on, never below it.
        let after_reset: Vec<(i32, u64)> = log.lock().unwrap()[first_pass..].to_vec();
        for q in 0..2 {
            let offsets: std::collections::BTreeSet<u64> = after_reset
                .iter()
                .filter(|d| d.0 == q)
                .map(|d| d.1)
                .collect();
            assert!(
                (PER_PHASE..PER_PHASE * 2).all(|o| offsets.contains(&o)),
                "queue {q} after the reset: {offsets:?}"
            );
            assert!(
                offsets.iter().all(|o| *o >= PER_PHASE),
                "queue {q} after the reset: {offsets:?}"
            );
        }
        // The results in flight at the reset belong to the old generation: the consumer drops
        // them instead of committing them (its commits of the reset offset itself are accepted
        // as changing nothing); a consumer that does send them is refused by the broker's fence
        // (`reset_fences_the_commits_of_a_consumer_that_ignores_the_push`).
        let rejected = consumer.offset_stats().stale_rejections;
        let stats = consumer.stats();
        println!("reset under a running consumer: {rejected} stale commits rejected; {stats:?}");
        assert!(
            stats.stale_results + stats.batches_discarded >= 1,
            "old-generation results dropped: {stats:?}"
        );
        let report = consumer.shutdown().await.unwrap();
        assert!(report.is_complete(), "{report:?}");

        // The history of each queue: commits, the reset, then commits from the reset offset
        // up, never a stale one.
        for q in 0..2 {
            let n3 = n.clone();
            let history = tokio::task::spawn_blocking(move || {
                ok_json(&[
                    "offsetHistory",
                    "-n",
                    &n3,
                    "-g",
                    "LiveGroup",
                    "-t",
                    "LiveTopic",
                    "-q",
                    &q.to_string(),
                ])
            })
            .await
            .unwrap();
            let events = history["events"].as_array().unwrap();
            let at = events
                .iter()
                .position(|e| e["kind"] == "reset")
                .unwrap_or_else(|| panic!("no reset in {history}"));
            assert_eq!(events[at]["offset"], PER_PHASE, "{history}");
            assert_eq!(events[at]["generation"], generation, "{history}");
            assert!(
                events[..at].iter().any(|e| e["kind"] == "commit"),
                "{history}"
            );
            let after: Vec<u64> = events[at + 1..]
                .iter()
                .map(|e| {
                    // A consumer that missed the push follows PULL_OFFSET_MOVED instead and
                    // may record a correction; either way it never goes below the reset.
                    assert!(
                        e["kind"] == "commit" || e["kind"] == "correction",
                        "{history}"
                    );
                    e["offset"].as_u64().unwrap()
                })
                .collect();
            assert!(!after.is_empty(), "{history}");
            assert!(after[0] >= PER_PHASE, "{history}");
            assert!(after.windows(2).all(|w| w[0] <= w[1]), "{history}");
            assert_eq!(*after.last().unwrap(), PER_PHASE * 2, "{history}");
        }
    });
}

/// A consumer that keeps committing its old positions after a reset (RocketMQ commits carry
/// no generation; a client may miss or ignore the one-way reset push): every such commit is
/// rejected (COMMIT_STALE_GENERATION) and counted here, its next pull is answered
/// PULL_OFFSET_MOVED to the reset offset, and only commits made after it follows are stored.
#[test]
fn reset_fences_the_commits_of_a_consumer_that_ignores_the_push() {
    use ferromq_protocol::remoting::headers::pull::{
        PullMessageRequestHeader, PullMessageResponseHeader,
    };

    let server = start();
    let n = server.namesrv.clone();
    let b = server.broker.clone();
    create_topic(&n, &b, "FenceTopic", "1");
    runtime().block_on(async {
        let consumer = connect(&b).await;
        for i in 0..10 {
            send(&consumer, "FenceTopic", 0, &format!("m{i}")).await;
        }
        heartbeat(&consumer, "127.0.0.1@legacy", "FenceGroup", "FenceTopic").await;
        assert_eq!(
            pull_count(&consumer, "FenceGroup", "FenceTopic", 0, 0, 10).await,
            10
        );
        for offset in [3, 6] {
            assert_eq!(
                commit_code(&consumer, "FenceGroup", "FenceTopic", 0, offset).await,
                0
            );
        }
        let n2 = n.clone();
        let reset = tokio::task::spawn_blocking(move || {
            ok_json(&[
                "resetOffsetByTime",
                "-n",
                &n2,
                "-g",
                "FenceGroup",
                "-t",
                "FenceTopic",
                "-q",
                "0",
                "-o",
                "2",
                "-s",
                "now",
            ])
        })
        .await
        .unwrap();
        assert_eq!(queue(&reset, 0)["oldOffset"], 6, "{reset}");
        assert_eq!(queue(&reset, 0)["newOffset"], 2, "{reset}");

        // The consumer goes on as if nothing happened: every commit of its old positions,
        // forward or not, is refused; one of the reset offset itself changes nothing and is
        // accepted.
        let mut rejected = 0;
        for offset in [8, 9, 10, 3] {
            let code = commit_code(&consumer, "FenceGroup", "FenceTopic", 0, offset).await;
            assert_eq!(
                code, COMMIT_STALE_GENERATION,
                "commit of {offset} after the reset"
            );
            rejected += 1;
        }
        assert_eq!(
            commit_code(&consumer, "FenceGroup", "FenceTopic", 0, 2).await,
            0,
            "a commit equal to the stored offset"
        );
        println!("commits refused after the reset: {rejected}");
        // Its next pull moves it to the reset offset; from there its commits count again.
        let header = PullMessageRequestHeader {
            consumer_group: "FenceGroup".into(),
            topic: "FenceTopic".into(),
            queue_id: 0,
            queue_offset: 10,
            max_msg_nums: 32,
            ..PullMessageRequestHeader::default()
        };
        let reply = consumer
            .invoke(
                RemotingCommand::request_with_header(request::PULL_MESSAGE, &header),
                TIMEOUT,
            )
            .await
            .unwrap();
        assert_eq!(
            reply.code,
            response::PULL_OFFSET_MOVED,
            "{:?}",
            reply.remark
        );
        let moved: PullMessageResponseHeader = reply.decode_header().unwrap();
        assert_eq!(moved.next_begin_offset, 2);
        assert_eq!(
            pull_count(&consumer, "FenceGroup", "FenceTopic", 0, 2, 3).await,
            3
        );
        assert_eq!(
            commit_code(&consumer, "FenceGroup", "FenceTopic", 0, 5).await,
            0
        );

        let n2 = n.clone();
        let (history, progress) = tokio::task::spawn_blocking(move || {
            (
                ok_json(&[
                    "offsetHistory",
                    "-n",
                    &n2,
                    "-g",
                    "FenceGroup",
                    "-t",
                    "FenceTopic",
                ]),
                ok_json(&["consumerProgress", "-n", &n2, "-g", "FenceGroup"]),
            )
        })
        .await
        .unwrap();
        let events: Vec<(&str, u64)> = history["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["kind"].as_str().unwrap(), e["offset"].as_u64().unwrap()))
            .collect();
        assert_eq!(
            events,
            [("commit", 3), ("commit", 6), ("reset", 2), ("commit", 5)],
            "{history}"
        );
        assert_eq!(queue(&progress, 0)["consumerOffset"], 5, "{progress}");
        assert_eq!(queue(&progress, 0)["lag"], 5, "{progress}");
    });
}
