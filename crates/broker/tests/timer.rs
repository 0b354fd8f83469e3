//! Timer messages (`core::timer`): each timer property delivers the message at its time (not
//! before, and within a second of it), a restart fires pending timers once and never refires a
//! fired one, a delay past `timerMaxDelaySec` is refused, and over gRPC a DELAY message's
//! `delivery_timestamp` is honoured, its recall handle cancels it, and it is received as DELAY.

mod common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::grpc::{grpc_client, message, resource, send as grpc_send, with_client_id};
use common::{broker, broker_config, client, pull_command, records, send_to, TIMEOUT};
use ferromq_broker::Broker;
use ferromq_protocol::grpc::{self as pb, Code, SystemProperties};
use ferromq_protocol::remoting::client::RemotingClient;
use ferromq_protocol::RecordView;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn topic(broker: &Broker, name: &str) {
    let config = ferromq_broker::catalog::topics::topic_with_queues(name, 1);
    broker.context().topics.upsert(config).unwrap();
}

/// Bodies in `topic` queue 0 now.
async fn bodies(remoting: &RemotingClient, topic: &str) -> Vec<Vec<u8>> {
    let reply = remoting
        .invoke(pull_command(topic, 0, 0, 0, "*"), TIMEOUT)
        .await
        .expect("pull reply");
    records(&reply)
        .iter()
        .map(|r| RecordView::parse(r).unwrap().body.to_vec())
        .collect()
}

/// Waits (at most `within`) until `topic` holds `n` messages; the time it took.
async fn until_count(
    remoting: &RemotingClient,
    topic: &str,
    n: usize,
    within: Duration,
) -> Duration {
    let started = Instant::now();
    loop {
        let got = bodies(remoting, topic).await.len();
        if got >= n {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "{topic}: {got} of {n} messages after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (bounded) until the scrape's unlabelled counter `name` reads `want`: the counters
/// move just after the deliveries a consumer already sees.
async fn until_counter(broker: &Broker, name: &str, want: f64) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let metrics = common::parse(&broker.context().metrics.render(broker.context()));
        let got = common::value(&metrics, name, &[]);
        if got == want {
            return;
        }
        assert!(Instant::now() < deadline, "{name} is {got}, not {want}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn each_timer_property_delivers_at_its_time_not_before() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), false).await;
    let remoting = client(broker.local_addr()).await;
    let due_at = (now_ms() + 1_500).to_string();
    let cases: [(&str, &str, &str); 4] = [
        ("TimerAt", "TIMER_DELIVER_MS", due_at.as_str()),
        ("TimerStart", "__STARTDELIVERTIME", due_at.as_str()),
        ("TimerSec", "TIMER_DELAY_SEC", "1"),
        ("TimerMs", "TIMER_DELAY_MS", "1500"),
    ];
    let sent = Instant::now();
    for (name, property, value) in cases {
        topic(&broker, name);
        let reply = send_to(
            &remoting,
            name,
            0,
            name.as_bytes(),
            &[(property, value), ("TAGS", "t")],
        )
        .await;
        assert_eq!(reply.code, 0, "{name}: {:?}", reply.remark);
    }
    assert_eq!(broker.context().timers.pending(), 4);
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (name, _, _) in cases {
        assert!(
            bodies(&remoting, name).await.is_empty(),
            "{name} delivered early"
        );
    }
    for (name, property, _) in cases {
        until_count(&remoting, name, 1, Duration::from_secs(5)).await;
        let due = if property == "TIMER_DELAY_SEC" {
            1_000
        } else {
            1_500
        };
        let late = sent.elapsed().as_millis() as i64 - due;
        assert!(late < 1_000, "{name} delivered {late} ms after its time");
        let reply = remoting
            .invoke(pull_command(name, 0, 0, 0, "*"), TIMEOUT)
            .await
            .unwrap();
        let record = records(&reply).remove(0);
        let view = RecordView::parse(&record).unwrap();
        assert_eq!(view.body, name.as_bytes());
        assert_eq!(view.properties.get_str("TAGS"), Some("t"));
        assert_eq!(
            view.properties.get_str("REAL_TOPIC"),
            None,
            "broker properties removed"
        );
        assert_eq!(view.properties.get_str("FERROMQ_TIMER_DUE"), None);
    }
    assert_eq!(broker.context().timers.pending(), 0);
    until_counter(&broker, "ferromq_timer_fired_total", 4.0).await;
    // Further than timerMaxDelaySec (3 days): refused, nothing stored.
    let reply = send_to(
        &remoting,
        "TimerSec",
        0,
        b"far",
        &[("TIMER_DELAY_SEC", "864000")],
    )
    .await;
    assert_ne!(reply.code, 0);
    assert!(reply
        .remark
        .unwrap_or_default()
        .contains("timerMaxDelaySec"));
    broker.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_restart_fires_pending_timers_once_and_never_refires_fired_ones() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), false).await;
    topic(&broker, "TimerR");
    let remoting = client(broker.local_addr()).await;
    let soon = (now_ms() + 300).to_string();
    let later = (now_ms() + 2_500).to_string();
    for (body, at) in [("soon", &soon), ("later", &later)] {
        let reply = send_to(
            &remoting,
            "TimerR",
            0,
            body.as_bytes(),
            &[("TIMER_DELIVER_MS", at)],
        )
        .await;
        assert_eq!(reply.code, 0, "{:?}", reply.remark);
    }
    until_count(&remoting, "TimerR", 1, Duration::from_secs(5)).await;
    drop(remoting);
    broker.shutdown().await.unwrap();

    let broker = Broker::start(broker_config(dir.path(), false))
        .await
        .unwrap();
    let remoting = client(broker.local_addr()).await;
    until_count(&remoting, "TimerR", 2, Duration::from_secs(6)).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        bodies(&remoting, "TimerR").await,
        vec![b"soon".to_vec(), b"later".to_vec()],
        "each fired exactly once across the restart"
    );
    broker.shutdown().await.unwrap();
}

#[tokio::test]
async fn grpc_delay_messages_are_timed_recallable_and_received_as_delay() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), false).await;
    topic(&broker, "TimerG");
    let mut grpc = grpc_client(&broker).await;
    let at = now_ms() + 1_200;
    let delayed = |id: &str, body: &[u8]| {
        let mut m = message("TimerG", id, body, SystemProperties::default());
        let system = m.system_properties.as_mut().unwrap();
        system.message_type = pb::MessageType::Delay as i32;
        system.delivery_timestamp = Some(prost_types::Timestamp {
            seconds: at / 1000,
            nanos: ((at % 1000) * 1_000_000) as i32,
        });
        m
    };
    let reply = grpc_send(
        &mut grpc,
        vec![delayed("KEEP", b"keep"), delayed("DROP", b"drop")],
    )
    .await;
    assert_eq!(reply.status.unwrap().code, Code::Ok as i32);
    let handles: Vec<String> = reply
        .entries
        .iter()
        .map(|e| e.recall_handle.clone())
        .collect();
    assert!(handles.iter().all(|h| !h.is_empty()), "{handles:?}");
    let recalled = grpc
        .recall_message(with_client_id(pb::RecallMessageRequest {
            topic: resource("TimerG"),
            recall_handle: handles[1].clone(),
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(recalled.status.unwrap().code, Code::Ok as i32);
    assert_eq!(recalled.message_id, "DROP");
    let again = grpc
        .recall_message(with_client_id(pb::RecallMessageRequest {
            topic: resource("TimerG"),
            recall_handle: handles[1].clone(),
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        again.status.unwrap().code,
        Code::BadRequest as i32,
        "not pending any more"
    );

    let remoting = client(broker.local_addr()).await;
    assert!(
        bodies(&remoting, "TimerG").await.is_empty(),
        "nothing before the time"
    );
    until_count(&remoting, "TimerG", 1, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        bodies(&remoting, "TimerG").await,
        vec![b"keep".to_vec()],
        "the recalled one never comes"
    );
    until_counter(&broker, "ferromq_timer_recalled_total", 1.0).await;

    let mut stream = grpc
        .receive_message(with_client_id(pb::ReceiveMessageRequest {
            group: resource("G"),
            message_queue: Some(pb::MessageQueue {
                topic: resource("TimerG"),
                id: -1,
                ..Default::default()
            }),
            batch_size: 1,
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_inner();
    let mut received = None;
    while let Some(item) = stream.message().await.unwrap() {
        if let Some(pb::receive_message_response::Content::Message(m)) = item.content {
            received = Some(m);
        }
    }
    let system = received
        .expect("the delay message")
        .system_properties
        .unwrap();
    assert_eq!(system.message_type, pb::MessageType::Delay as i32);
    let delivery = system.delivery_timestamp.expect("delivery_timestamp");
    assert_eq!(
        delivery.seconds * 1000 + i64::from(delivery.nanos) / 1_000_000,
        at
    );
    // Too far ahead: ILLEGAL_DELIVERY_TIME.
    let mut far = delayed("FAR", b"far");
    far.system_properties.as_mut().unwrap().delivery_timestamp = Some(prost_types::Timestamp {
        seconds: now_ms() / 1000 + 10 * 86_400,
        nanos: 0,
    });
    let reply = grpc_send(&mut grpc, vec![far]).await;
    assert_eq!(
        reply.entries[0].status.as_ref().unwrap().code,
        Code::IllegalDeliveryTime as i32
    );
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_timers_due_together_arrive_within_a_second_under_load() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), false).await;
    topic(&broker, "TimerLoad");
    topic(&broker, "Busy");
    let addr = broker.local_addr();
    let due = now_ms() + 8_000;
    let at = due.to_string();
    let mut senders = Vec::new();
    for s in 0..8 {
        let at = at.clone();
        senders.push(tokio::spawn(async move {
            let remoting = client(addr).await;
            for i in 0..125 {
                let body = format!("t{s}-{i}");
                let reply = send_to(
                    &remoting,
                    "TimerLoad",
                    0,
                    body.as_bytes(),
                    &[("TIMER_DELIVER_MS", &at)],
                )
                .await;
                assert_eq!(reply.code, 0, "{:?}", reply.remark);
            }
        }));
    }
    for sender in senders {
        sender.await.unwrap();
    }
    assert!(
        now_ms() < due - 500,
        "sending took too long for the test's margin"
    );
    // Load while they fire: a stream of ordinary sends to another topic.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let busy = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let remoting = client(addr).await;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let reply = send_to(&remoting, "Busy", 0, b"load", &[]).await;
                assert_eq!(reply.code, 0);
            }
        })
    };
    let remoting = client(addr).await;
    let mut count = 0;
    while count < 1_000 {
        let reply = remoting
            .invoke(pull_command("TimerLoad", 0, count as i64, 0, "*"), TIMEOUT)
            .await
            .unwrap();
        let got = records(&reply).len();
        if got == 0 {
            assert!(now_ms() < due + 5_000, "only {count} of 1,000 after 5 s");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if count == 0 && got > 0 {
            let early = due - now_ms();
            assert!(early < 150, "delivered {early} ms before the due time");
        }
        count += got;
    }
    let late = now_ms() - due;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    busy.await.unwrap();
    assert!(
        late < 1_000,
        "the last of 1,000 arrived {late} ms after the due time"
    );
    eprintln!("1,000 timers due together: the last arrived {late} ms after the due time");
    broker.shutdown().await.unwrap();
}
