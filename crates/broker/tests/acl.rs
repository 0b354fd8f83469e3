//! ACL (`aclEnable`): every request kind, through a real broker on loopback, with the right
//! credentials (served), a wrong secret, no signature, a replayed signature over altered ext
//! fields or an altered body, and an account without the permission — each refused with
//! NO_PERMISSION (16), counted, and the broker still serving. Also: reloading the accounts
//! file, keeping the last good one when it turns bad, a bad file at start, the name server's
//! writes, a bounded burst of bad signatures measured against a normal client's latency, and
//! the offset history naming the access key that moved each offset (across a restart).

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ferromq_broker::{Broker, BrokerConfig};
use ferromq_protocol::remoting::acl::{self, Credentials};
use ferromq_protocol::remoting::client::RemotingClient;
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::{ExtFields, RemotingCommand};

use common::TIMEOUT;

const TOPIC: &str = "Orders";
const GROUP: &str = "G";

const ACCOUNTS: &str = "\
accounts:
  - accessKey: admin01
    secretKey: adminsecret
    admin: true
  - accessKey: user01
    secretKey: usersecret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - Orders=PUB|SUB
    groupPerms:
      - G=SUB
  - accessKey: nobody01
    secretKey: nobodysecret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
";

fn admin() -> Credentials {
    Credentials::new("admin01", "adminsecret")
}

fn user() -> Credentials {
    Credentials::new("user01", "usersecret")
}

fn nobody() -> Credentials {
    Credentials::new("nobody01", "nobodysecret")
}

fn acl_config(dir: &Path, accounts: &Path) -> BrokerConfig {
    BrokerConfig {
        acl_enable: true,
        acl_file: Some(accounts.to_path_buf()),
        acl_reload_interval_millis: 50,
        ..common::broker_config(dir, true)
    }
}

async fn acl_broker(dir: &Path) -> (Broker, std::path::PathBuf) {
    let accounts = dir.join("plain_acl.yml");
    std::fs::write(&accounts, ACCOUNTS).unwrap();
    let broker = Broker::start(acl_config(&dir.join("store"), &accounts))
        .await
        .expect("broker starts with ACL on");
    (broker, accounts)
}

fn command(code: i32, fields: &[(&str, &str)], body: Option<&[u8]>) -> RemotingCommand {
    let ext: ExtFields = fields
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let mut command = RemotingCommand::new_request(code, ext);
    command.body = body.map(Bytes::copy_from_slice);
    command
}

fn heartbeat_body() -> Vec<u8> {
    serde_json::json!({
        "clientID": "acl-test-client",
        "producerDataSet": [],
        "consumerDataSet": [{
            "groupName": GROUP,
            "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "subscriptionDataSet": [{
                "classFilterMode": false, "topic": TOPIC, "subString": "*",
                "tagsSet": [], "codeSet": [], "subVersion": 0, "expressionType": "TAG"
            }],
            "unitMode": false
        }]
    })
    .to_string()
    .into_bytes()
}

/// One request kind: how to build it, who may make it, and what a served reply is.
struct Case {
    name: &'static str,
    build: fn() -> RemotingCommand,
    /// Needs an admin account (else `user01` may make it).
    admin: bool,
    /// A served reply must be SUCCESS (else: anything but NO_PERMISSION).
    success: bool,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "send",
            build: || {
                let header = common::header_v2(TOPIC);
                RemotingCommand::request_with_header(request::SEND_MESSAGE_V2, &header)
                    .with_body(b"hello".to_vec())
            },
            admin: false,
            success: true,
        },
        Case {
            name: "heartbeat",
            build: || command(request::HEART_BEAT, &[], Some(&heartbeat_body())),
            admin: false,
            success: true,
        },
        Case {
            name: "pull",
            build: || common::pull_request(GROUP, TOPIC, 0, 0, 0, "*", None),
            admin: false,
            success: false,
        },
        Case {
            name: "commit",
            build: || common::commit_request(TOPIC, 0, 1, false),
            admin: false,
            success: true,
        },
        Case {
            name: "query offset",
            build: || {
                let fields = [("consumerGroup", GROUP), ("topic", TOPIC), ("queueId", "0")];
                command(request::QUERY_CONSUMER_OFFSET, &fields, None)
            },
            admin: false,
            success: false,
        },
        Case {
            name: "max offset",
            build: || {
                command(
                    request::GET_MAX_OFFSET,
                    &[("topic", TOPIC), ("queueId", "0")],
                    None,
                )
            },
            admin: false,
            success: true,
        },
        Case {
            name: "query message",
            build: || {
                let fields = [
                    ("topic", TOPIC),
                    ("key", "k1"),
                    ("maxNum", "4"),
                    ("beginTimestamp", "0"),
                    ("endTimestamp", "9999999999999"),
                ];
                command(request::QUERY_MESSAGE, &fields, None)
            },
            admin: false,
            success: false,
        },
        Case {
            name: "consumer list",
            build: || {
                let fields = [("consumerGroup", GROUP)];
                command(request::GET_CONSUMER_LIST_BY_GROUP, &fields, None)
            },
            admin: false,
            success: false,
        },
        Case {
            name: "update topic",
            build: || {
                let fields = [
                    ("topic", "AdminTopic"),
                    ("defaultTopic", "TBW102"),
                    ("readQueueNums", "2"),
                    ("writeQueueNums", "2"),
                    ("perm", "6"),
                    ("topicFilterType", "SINGLE_TAG"),
                ];
                command(request::UPDATE_AND_CREATE_TOPIC, &fields, None)
            },
            admin: true,
            success: true,
        },
        Case {
            name: "update group",
            build: || {
                let body = serde_json::json!({"groupName": "AdminGroup"}).to_string();
                command(
                    request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                    &[],
                    Some(body.as_bytes()),
                )
            },
            admin: true,
            success: true,
        },
        Case {
            name: "reset",
            build: || {
                let fields = [
                    ("topic", TOPIC),
                    ("group", GROUP),
                    ("timestamp", "0"),
                    ("isForce", "true"),
                ];
                command(request::INVOKE_BROKER_TO_RESET_OFFSET, &fields, None)
            },
            admin: true,
            success: false,
        },
        Case {
            name: "broker config",
            build: || command(request::GET_BROKER_CONFIG, &[], None),
            admin: true,
            success: true,
        },
        Case {
            name: "offset history",
            build: || {
                let fields = [("group", GROUP), ("topic", TOPIC)];
                command(ferromq_broker::codes::OFFSET_HISTORY, &fields, None)
            },
            admin: true,
            success: false,
        },
        Case {
            name: "delete topic",
            build: || {
                command(
                    request::DELETE_TOPIC_IN_BROKER,
                    &[("topic", "AdminTopic")],
                    None,
                )
            },
            admin: true,
            success: true,
        },
    ]
}

fn signed(mut command: RemotingCommand, credentials: &Credentials) -> RemotingCommand {
    acl::sign_command(&mut command, credentials);
    command
}

async fn call(client: &RemotingClient, command: RemotingCommand) -> RemotingCommand {
    client.invoke(command, TIMEOUT).await.expect("a reply")
}

fn assert_refused(case: &str, how: &str, reply: &RemotingCommand, remark_has: &str) {
    assert_eq!(
        reply.code,
        response::NO_PERMISSION,
        "{case} with {how}: {:?}",
        reply.remark
    );
    let remark = reply.remark.clone().unwrap_or_default();
    assert!(
        remark.contains(remark_has),
        "{case} with {how}: remark {remark:?} lacks {remark_has:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_kind_is_served_signed_and_refused_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, _accounts) = acl_broker(dir.path()).await;
    let client = common::client(broker.local_addr()).await;
    for case in cases() {
        let owner = if case.admin { admin() } else { user() };
        // Wrong secret.
        let wrong = Credentials::new(owner.access_key.clone(), "not-the-secret");
        let reply = call(&client, signed((case.build)(), &wrong)).await;
        assert_refused(case.name, "a wrong secret", &reply, "signature");
        // No signature at all.
        let reply = call(&client, (case.build)()).await;
        assert_refused(case.name, "no signature", &reply, "not signed");
        // A good signature replayed over altered ext fields.
        let mut altered = signed((case.build)(), &owner);
        altered.ext_fields.insert("injected", "by an attacker");
        let reply = call(&client, altered).await;
        assert_refused(case.name, "altered ext fields", &reply, "signature");
        // A good signature replayed over an altered body.
        let mut altered = signed((case.build)(), &owner);
        let mut body = altered.body.clone().unwrap_or_default().to_vec();
        body.push(b' ');
        altered.body = Some(Bytes::from(body));
        let reply = call(&client, altered).await;
        assert_refused(case.name, "an altered body", &reply, "signature");
        // An account without the permission.
        let (weak, missing) = if case.admin {
            (user(), "not an admin")
        } else {
            (nobody(), "permission on")
        };
        let reply = call(&client, signed((case.build)(), &weak)).await;
        assert_refused(
            case.name,
            "an account without the permission",
            &reply,
            missing,
        );
        // The right credentials: served.
        let reply = call(&client, signed((case.build)(), &owner)).await;
        assert_ne!(
            reply.code,
            response::NO_PERMISSION,
            "{}: {:?}",
            case.name,
            reply.remark
        );
        if case.success {
            assert_eq!(
                reply.code,
                response::SUCCESS,
                "{}: {:?}",
                case.name,
                reply.remark
            );
        }
    }
    let metrics = &broker.context().metrics;
    let cases = cases().len() as u64;
    assert_eq!(metrics.refused_count("acl_unsigned"), cases);
    assert_eq!(metrics.refused_count("acl_bad_signature"), 3 * cases);
    let weak = metrics.refused_count("acl_not_admin") + metrics.refused_count("acl_no_permission");
    assert_eq!(weak, cases);
    // Still serving.
    let reply = call(&client, signed((cases_send())(), &user())).await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    broker.shutdown().await.unwrap();
}

fn cases_send() -> fn() -> RemotingCommand {
    cases()[0].build
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_accounts_file_reloads_and_a_bad_one_keeps_the_last_good() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, accounts) = acl_broker(dir.path()).await;
    let client = common::client(broker.local_addr()).await;
    let send = cases_send();
    let reply = call(&client, signed(send(), &nobody())).await;
    assert_eq!(reply.code, response::NO_PERMISSION);
    // Grant nobody01 PUB on Orders.
    let granted = ACCOUNTS.replace(
        "  - accessKey: nobody01\n    secretKey: nobodysecret\n    defaultTopicPerm: DENY\n",
        "  - accessKey: nobody01\n    secretKey: nobodysecret\n    defaultTopicPerm: PUB\n",
    );
    assert_ne!(granted, ACCOUNTS);
    replace_file(&accounts, &granted);
    let served = wait_until(Duration::from_secs(5), || async {
        call(&client, signed(send(), &nobody())).await.code == response::SUCCESS
    })
    .await;
    assert!(served, "the changed file was not reloaded within 5 s");
    // A malformed file: the last good accounts stay.
    replace_file(&accounts, "accounts: [\n");
    let acl = broker.context().acl.clone().expect("ACL is on");
    let failed = wait_until(Duration::from_secs(5), || async {
        acl.reload_failures() > 0
    })
    .await;
    assert!(failed, "the bad file was never looked at");
    let reply = call(&client, signed(send(), &nobody())).await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    broker.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_bad_accounts_file_at_start_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let accounts = dir.path().join("broken_acl.yml");
    std::fs::write(&accounts, "accounts:\n  - accessKey: x\n").unwrap();
    let error = Broker::start(acl_config(&dir.path().join("store"), &accounts))
        .await
        .err()
        .expect("start fails")
        .to_string();
    assert!(error.contains("broken_acl.yml"), "{error}");
    let mut config = common::broker_config(&dir.path().join("store2"), true);
    config.acl_enable = true;
    let error = Broker::start(config)
        .await
        .err()
        .expect("start fails")
        .to_string();
    assert!(error.contains("aclFile"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn name_server_writes_need_an_admin_account_and_the_broker_registers_signed() {
    use ferromq_namesrv::{NameServer, NamesrvConfig};
    let dir = tempfile::tempdir().unwrap();
    let accounts = dir.path().join("plain_acl.yml");
    std::fs::write(&accounts, ACCOUNTS).unwrap();
    let acl = Arc::new(ferromq_acl::Acl::load(&accounts).unwrap());
    let server = NameServer::bind(NamesrvConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..NamesrvConfig::default()
    })
    .await
    .unwrap()
    .with_acl(acl, Duration::from_millis(50));
    let namesrv = server.local_addr();
    let registry = server.registry();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    let client = common::client(namesrv).await;
    let put = || {
        command(
            request::PUT_KV_CONFIG,
            &[("namespace", "ns"), ("key", "k"), ("value", "v")],
            None,
        )
    };
    let reply = call(&client, put()).await;
    assert_refused("put kv", "no signature", &reply, "not signed");
    let reply = call(&client, signed(put(), &user())).await;
    assert_refused("put kv", "a non-admin account", &reply, "not an admin");
    let reply = call(&client, signed(put(), &admin())).await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    // Reads stay open.
    let route = command(request::GET_BROKER_CLUSTER_INFO, &[], None);
    assert_eq!(call(&client, route).await.code, response::SUCCESS);
    // A broker with inner credentials registers; its topics get routes.
    let mut config = common::broker_config(&dir.path().join("store"), true);
    config.namesrv_addr = namesrv.to_string();
    config.inner_access_key = Some("admin01".into());
    config.inner_secret_key = Some("adminsecret".into());
    let broker = Broker::start(config).await.unwrap();
    let registered = wait_until(Duration::from_secs(10), || async {
        !registry.cluster_info().broker_addr_table.is_empty()
    })
    .await;
    assert!(registered, "the signed registration was not accepted");
    broker.shutdown().await.unwrap();
    let _ = stop.send(());
    task.await.unwrap();
}

/// Attacking connections of the burst test.
const ATTACKERS: usize = 4;
/// Each attacker sends at most one request per period (about 4 000 requests a second in all).
const ATTACK_PERIOD: Duration = Duration::from_millis(1);
/// Bound on the requests of one burst.
const BURST_MAX: usize = 50_000;

/// A bounded burst of badly signed requests (on their own connections, paced by
/// [`ATTACK_PERIOD`]) while a normal client sends. Its p99 send latency under the burst stays
/// within [`BURST_SLOWDOWN_MAX`] times its p99 alone, and within [`BAD_VS_GOOD_MAX`] times
/// its p99 under the same burst of correctly signed sends (bad signatures cost the broker no
/// more than good requests). Everything shares one 2-thread runtime on a shared 2-core
/// machine, so the factors include plain CPU contention.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_bad_signatures_does_not_starve_normal_clients() {
    const SENDS: usize = 400;
    const BURST_SLOWDOWN_MAX: f64 = 8.0;
    const BAD_VS_GOOD_MAX: f64 = 2.0;
    let dir = tempfile::tempdir().unwrap();
    let (broker, _accounts) = acl_broker(dir.path()).await;
    let addr = broker.local_addr();
    let client = common::client(addr).await;
    for _ in 0..20 {
        let reply = call(&client, signed(cases_send()(), &user())).await;
        assert_eq!(reply.code, response::SUCCESS);
    }
    let alone = p99_send(&client, SENDS).await;
    let bad = Credentials::new("user01", "guessed-secret");
    let (under_bad, refused) =
        under_burst(&client, addr, bad, response::NO_PERMISSION, SENDS).await;
    let (under_good, _) = under_burst(&client, addr, user(), response::SUCCESS, SENDS).await;
    let factor = under_bad.as_secs_f64() / alone.as_secs_f64().max(1e-6);
    let versus_good = under_bad.as_secs_f64() / under_good.as_secs_f64().max(1e-6);
    println!(
        "bad-signature burst: {refused} refused requests from {ATTACKERS} connections; normal \
         client's send p99 {alone:?} alone, {under_bad:?} under the bad burst (x{factor:.2}), \
         {under_good:?} under the same burst of good sends (bad/good x{versus_good:.2})"
    );
    assert!(refused > 0);
    assert!(
        factor <= BURST_SLOWDOWN_MAX,
        "p99 x{factor:.2} under the burst"
    );
    assert!(
        versus_good <= BAD_VS_GOOD_MAX,
        "bad burst x{versus_good:.2} the good one"
    );
    broker.shutdown().await.unwrap();
}

/// The normal client's p99 while [`ATTACKERS`] connections send signed by `credentials`
/// (each reply must have `code`); also the attackers' request count.
async fn under_burst(
    client: &RemotingClient,
    addr: std::net::SocketAddr,
    credentials: Credentials,
    code: i32,
    sends: usize,
) -> (Duration, usize) {
    let running = Arc::new(AtomicBool::new(true));
    let mut attackers = Vec::new();
    for _ in 0..ATTACKERS {
        let (running, credentials) = (running.clone(), credentials.clone());
        attackers.push(tokio::spawn(async move {
            let attacker = common::client(addr).await;
            let mut sent = 0;
            let mut pace = tokio::time::interval(ATTACK_PERIOD);
            pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            while running.load(Ordering::Relaxed) && sent < BURST_MAX / ATTACKERS {
                pace.tick().await;
                let reply = call(&attacker, signed(cases_send()(), &credentials)).await;
                assert_eq!(reply.code, code);
                sent += 1;
            }
            sent
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let p99 = p99_send(client, sends).await;
    running.store(false, Ordering::Relaxed);
    let mut burst = 0;
    for attacker in attackers {
        burst += attacker.await.unwrap();
    }
    (p99, burst)
}

async fn p99_send(client: &RemotingClient, sends: usize) -> Duration {
    let mut latencies = Vec::with_capacity(sends);
    for _ in 0..sends {
        let started = Instant::now();
        let reply = call(client, signed(cases_send()(), &user())).await;
        latencies.push(started.elapsed());
        assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    }
    latencies.sort();
    latencies[(sends * 99 / 100).min(sends - 1)]
}

/// (kind, queue offset, access key) of each event of GROUP on TOPIC queue 0, asked as admin01
/// (ACL on) or unsigned (ACL off).
async fn history_of(
    client: &RemotingClient,
    credentials: Option<&Credentials>,
) -> Vec<(String, u64, Option<String>)> {
    let fields = [("group", GROUP), ("topic", TOPIC), ("queueId", "0")];
    let mut ask = command(ferromq_broker::codes::OFFSET_HISTORY, &fields, None);
    if let Some(credentials) = credentials {
        ask = signed(ask, credentials);
    }
    let reply = call(client, ask).await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    let events: Vec<serde_json::Value> =
        serde_json::from_slice(reply.body.as_deref().unwrap_or_default()).unwrap();
    events
        .iter()
        .map(|event| {
            assert!(
                event.get("accessKey").is_some(),
                "every event has the field: {event}"
            );
            (
                event["kind"].as_str().unwrap().to_string(),
                event["offset"].as_u64().unwrap(),
                event["accessKey"].as_str().map(str::to_string),
            )
        })
        .collect()
}

/// Sends three messages to TOPIC queue 0, commits 2 as `committer`, resets the group to
/// offset 1 as `resetter` (each signed when given).
async fn commit_then_reset(
    client: &RemotingClient,
    committer: Option<&Credentials>,
    resetter: Option<&Credentials>,
) {
    let sign = |command: RemotingCommand, credentials: Option<&Credentials>| match credentials {
        Some(credentials) => signed(command, credentials),
        None => command,
    };
    for _ in 0..3 {
        let reply = call(client, sign(cases_send()(), committer)).await;
        assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    }
    let commit = common::commit_request(TOPIC, 0, 2, false);
    let reply = call(client, sign(commit, committer)).await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
    let fields = [
        ("topic", TOPIC),
        ("group", GROUP),
        ("queueId", "0"),
        ("offset", "1"),
        ("timestamp", "0"),
        ("isForce", "true"),
    ];
    let reset = command(request::INVOKE_BROKER_TO_RESET_OFFSET, &fields, None);
    let reply = call(client, sign(reset, resetter)).await;
    assert_eq!(reply.code, response::SUCCESS, "{:?}", reply.remark);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_offset_history_names_the_access_key_that_moved_each_offset() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, accounts) = acl_broker(dir.path()).await;
    let client = common::client(broker.local_addr()).await;
    commit_then_reset(&client, Some(&user()), Some(&admin())).await;
    let expected = vec![
        ("commit".to_string(), 2, Some("user01".to_string())),
        ("reset".to_string(), 1, Some("admin01".to_string())),
    ];
    assert_eq!(history_of(&client, Some(&admin())).await, expected);
    drop(client);
    broker.shutdown().await.unwrap();

    // The records keep the keys: a restarted broker recovers them from its log.
    let broker = Broker::start(acl_config(&dir.path().join("store"), &accounts))
        .await
        .expect("broker restarts");
    let client = common::client(broker.local_addr()).await;
    assert_eq!(history_of(&client, Some(&admin())).await, expected);
    broker.shutdown().await.unwrap();

    // ACL off: the same moves name no access key.
    let plain_dir = tempfile::tempdir().unwrap();
    let broker = common::broker(plain_dir.path(), true).await;
    let client = common::client(broker.local_addr()).await;
    commit_then_reset(&client, None, None).await;
    assert_eq!(
        history_of(&client, None).await,
        vec![
            ("commit".to_string(), 2, None),
            ("reset".to_string(), 1, None)
        ]
    );
    broker.shutdown().await.unwrap();
}

fn replace_file(path: &Path, text: &str) {
    let staged = path.with_extension("staged");
    std::fs::write(&staged, text).unwrap();
    std::fs::rename(&staged, path).unwrap();
}

async fn wait_until<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    false
}
