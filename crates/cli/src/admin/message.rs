//! Message commands: `queryMsgByKey`, `queryMsgByUniqueKey`, `queryMsgByOffset`, `printMsg`.
//!
//! Lookups by key go to every master of the topic's route with QUERY_MESSAGE (12); reads by
//! position pull (11) as the tools group `TOOLS_CONSUMER`, never committing, after
//! SEARCH_OFFSET_BY_TIMESTAMP (29) for a time range. Human output is a table of messages
//! (`queryMsgByKey`, `printMsg`) or mqadmin's detail block per message
//! (`queryMsgByUniqueKey`, `queryMsgByOffset`); `--json` gives every field of every message.

use anyhow::{bail, Context, Result};
use ferromq_protocol::remoting::codes::{request, response};
use ferromq_protocol::remoting::headers::client::{
    QueryMessageRequestHeader, UNIQUE_KEY_QUERY_FLAG,
};
use ferromq_protocol::remoting::headers::offset::{
    GetMaxOffsetRequestHeader, GetMaxOffsetResponseHeader, GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader, SearchOffsetRequestHeader, SearchOffsetResponseHeader,
};
use ferromq_protocol::remoting::headers::pull::{
    PullMessageRequestHeader, PullMessageResponseHeader,
};
use ferromq_protocol::remoting::RemotingCommand;
use ferromq_protocol::{property_names, MessageId, RecordView};
use serde_json::{json, Value};

use super::client::{check, Admin, BrokerRef};
use super::time::{format_time, now_ms, parse_time};
use super::{print_json, print_table, Common};

/// The group mqadmin's tools pull as (`MixAll.TOOLS_CONSUMER_GROUP`); they never commit.
pub const TOOLS_CONSUMER_GROUP: &str = "TOOLS_CONSUMER";
/// Pull sysFlag: the request carries its subscription expression.
const PULL_SYSFLAG_SUBSCRIPTION: i32 = 0x4;
/// Messages asked for per pull by `printMsg`.
const PRINT_PULL_BATCH: i32 = 32;
/// Characters of the body shown in a table.
const BODY_PREFIX_CHARS: usize = 48;
/// Record sysFlag bit: the body is zlib-compressed.
const SYSFLAG_COMPRESSED: i32 = 0x1;

/// Flags of `queryMsgByKey`.
#[derive(Debug, clap::Args)]
pub struct QueryMsgByKeyArgs {
    #[command(flatten)]
    common: Common,
    /// Topic.
    #[arg(short = 't', long = "topic")]
    topic: String,
    /// A word of the messages' `KEYS`.
    #[arg(short = 'k', long = "msgKey")]
    key: String,
    /// Earliest store time (now, epoch ms, yyyy-MM-dd#HH:mm:ss:SSS local time, -1h).
    #[arg(
        short = 'b',
        long = "beginTimestamp",
        visible_alias = "begin",
        allow_hyphen_values = true
    )]
    begin: Option<String>,
    /// Latest store time (same forms).
    #[arg(
        short = 'e',
        long = "endTimestamp",
        visible_alias = "end",
        allow_hyphen_values = true
    )]
    end: Option<String>,
    /// Most messages per broker.
    #[arg(short = 'm', long = "maxNum", default_value_t = 64)]
    max_num: i32,
    /// Only masters of this cluster.
    #[arg(short = 'c', long = "cluster")]
    cluster: Option<String>,
}

/// Flags of `queryMsgByUniqueKey`.
#[derive(Debug, clap::Args)]
pub struct QueryMsgByUniqueKeyArgs {
    #[command(flatten)]
    common: Common,
    /// Topic.
    #[arg(short = 't', long = "topic")]
    topic: String,
    /// The message's unique key (`UNIQ_KEY`, the client message id).
    #[arg(short = 'i', long = "msgId")]
    unique_key: String,
    /// Show every copy (a producer retry can store one message twice), not only the first.
    #[arg(short = 'a', long = "showAll", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    show_all: bool,
    /// Only masters of this cluster.
    #[arg(short = 'c', long = "cluster")]
    cluster: Option<String>,
}

/// Flags of `queryMsgByOffset`.
#[derive(Debug, clap::Args)]
pub struct QueryMsgByOffsetArgs {
    #[command(flatten)]
    common: Common,
    /// Topic.
    #[arg(short = 't', long = "topic")]
    topic: String,
    /// Broker name (`broker-a`).
    #[arg(short = 'b', long = "brokerName")]
    broker_name: String,
    /// Queue id.
    #[arg(short = 'i', long = "queueId", allow_negative_numbers = true)]
    queue_id: i32,
    /// Queue offset.
    #[arg(short = 'o', long = "offset", allow_negative_numbers = true)]
    offset: i64,
}

/// Flags of `printMsg`.
#[derive(Debug, clap::Args)]
pub struct PrintMsgArgs {
    #[command(flatten)]
    common: Common,
    /// Topic.
    #[arg(short = 't', long = "topic")]
    topic: String,
    /// Body charset (only UTF-8; invalid bytes print as U+FFFD).
    #[arg(short = 'c', long = "charsetName", default_value = "UTF-8")]
    charset: String,
    /// Tag expression (`*`, `a || b`).
    #[arg(short = 's', long = "subExpression", default_value = "*")]
    sub_expression: String,
    /// Earliest store time (now, epoch ms, yyyy-MM-dd#HH:mm:ss:SSS local time, -1h).
    #[arg(
        short = 'b',
        long = "beginTimestamp",
        visible_alias = "begin",
        allow_hyphen_values = true
    )]
    begin: Option<String>,
    /// Store time the range ends before (same forms).
    #[arg(
        short = 'e',
        long = "endTimestamp",
        visible_alias = "end",
        allow_hyphen_values = true
    )]
    end: Option<String>,
    /// Print the bodies.
    #[arg(short = 'd', long = "printBody", default_value_t = true, action = clap::ArgAction::Set)]
    print_body: bool,
}

/// One message as the message commands (and `queryMsgById`) show it.
#[derive(Debug, Clone)]
pub struct Shown {
    msg_id: String,
    offset_msg_id: String,
    topic: String,
    broker_name: String,
    queue_id: u32,
    queue_offset: u64,
    phys_offset: u64,
    keys: String,
    tags: String,
    born_timestamp_ms: i64,
    store_timestamp_ms: i64,
    born_host: String,
    store_host: String,
    reconsume_times: i32,
    sys_flag: i32,
    properties: serde_json::Map<String, Value>,
    body: String,
}

impl Shown {
    /// The fields of a stored record; `broker_name` names where it was read.
    pub fn from_view(view: &RecordView<'_>, broker_name: &str) -> Shown {
        let offset_msg_id = MessageId {
            store_host: view.store_host,
            phys_offset: view.phys_offset,
        }
        .encode();
        let properties: serde_json::Map<String, Value> = view
            .properties
            .iter()
            .map(|(k, v)| {
                (
                    String::from_utf8_lossy(k).into_owned(),
                    json!(String::from_utf8_lossy(v)),
                )
            })
            .collect();
        let text = |name: &str| view.properties.get_str(name).unwrap_or("").to_string();
        let body = if view.sys_flag & SYSFLAG_COMPRESSED != 0 {
            format!("<{} compressed bytes>", view.body.len())
        } else {
            String::from_utf8_lossy(view.body).into_owned()
        };
        Shown {
            msg_id: view
                .properties
                .get_str(property_names::UNIQ_KEY)
                .map_or_else(|| offset_msg_id.clone(), str::to_string),
            offset_msg_id,
            topic: view.topic_str().to_string(),
            broker_name: broker_name.to_string(),
            queue_id: view.queue_id,
            queue_offset: view.queue_offset,
            phys_offset: view.phys_offset,
            keys: text(property_names::KEYS),
            tags: text(property_names::TAGS),
            born_timestamp_ms: view.born_timestamp_ms,
            store_timestamp_ms: view.store_timestamp_ms,
            born_host: view.born_host.to_string(),
            store_host: view.store_host.to_string(),
            reconsume_times: view.reconsume_times,
            sys_flag: view.sys_flag,
            properties,
            body,
        }
    }

    /// Every field, for `--json`.
    pub fn to_json(&self, with_body: bool) -> Value {
        json!({
            "msgId": self.msg_id,
            "offsetMsgId": self.offset_msg_id,
            "topic": self.topic,
            "brokerName": self.broker_name,
            "queueId": self.queue_id,
            "queueOffset": self.queue_offset,
            "commitLogOffset": self.phys_offset,
            "keys": self.keys,
            "tags": self.tags,
            "bornTimestamp": self.born_timestamp_ms,
            "storeTimestamp": self.store_timestamp_ms,
            "bornHost": self.born_host,
            "storeHost": self.store_host,
            "reconsumeTimes": self.reconsume_times,
            "sysFlag": self.sys_flag,
            "properties": self.properties,
            "body": if with_body { json!(self.body) } else { Value::Null },
        })
    }

    fn row(&self, with_body: bool) -> Vec<String> {
        let body = if with_body {
            let prefix: String = self.body.chars().take(BODY_PREFIX_CHARS).collect();
            if prefix.len() < self.body.len() {
                format!("{prefix}...")
            } else {
                prefix
            }
        } else {
            "NOT PRINT BODY".into()
        };
        vec![
            self.msg_id.clone(),
            self.broker_name.clone(),
            self.queue_id.to_string(),
            self.queue_offset.to_string(),
            self.keys.clone(),
            self.tags.clone(),
            format_time(self.store_timestamp_ms),
            body.replace(['\n', '\r'], " "),
        ]
    }

    /// mqadmin's detail block (`queryMsgById` and friends).
    pub fn print_detail(&self) {
        let lines = [
            ("OffsetID:", self.offset_msg_id.clone()),
            ("Topic:", self.topic.clone()),
            ("Tags:", format!("[{}]", self.tags)),
            ("Keys:", format!("[{}]", self.keys)),
            ("Broker Name:", self.broker_name.clone()),
            ("Queue ID:", self.queue_id.to_string()),
            ("Queue Offset:", self.queue_offset.to_string()),
            ("CommitLog Offset:", self.phys_offset.to_string()),
            ("Reconsume Times:", self.reconsume_times.to_string()),
            ("Born Timestamp:", format_time(self.born_timestamp_ms)),
            ("Store Timestamp:", format_time(self.store_timestamp_ms)),
            ("Born Host:", self.born_host.clone()),
            ("Store Host:", self.store_host.clone()),
            ("System Flag:", self.sys_flag.to_string()),
            (
                "Properties:",
                Value::Object(self.properties.clone()).to_string(),
            ),
            ("Message Body:", self.body.clone()),
        ];
        for (name, value) in lines {
            println!("{name:<20}{value}");
        }
    }
}

const TABLE_HEADERS: [&str; 8] = [
    "Message ID",
    "Broker Name",
    "QID",
    "Offset",
    "Keys",
    "Tags",
    "Store Time",
    "Body",
];

/// Splits a reply body of concatenated stored records; a malformed record is an error.
fn records(body: &[u8], broker_name: &str) -> Result<Vec<Shown>> {
    let mut shown = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let view = RecordView::parse(rest)
            .with_context(|| format!("broker {broker_name} returned a malformed message"))?;
        shown.push(Shown::from_view(&view, broker_name));
        rest = &rest[view.total_size()..];
    }
    Ok(shown)
}

/// QUERY_MESSAGE to every master of the topic; messages sorted by store time.
async fn query(
    admin: &Admin,
    topic: &str,
    key: &str,
    unique: bool,
    range: (i64, i64),
    max_num: i32,
    cluster: Option<&str>,
) -> Result<Vec<Shown>> {
    let brokers = admin.topic_masters(topic, cluster).await?;
    let header = QueryMessageRequestHeader {
        topic: topic.to_string(),
        key: key.to_string(),
        max_num,
        begin_timestamp: range.0,
        end_timestamp: range.1,
    };
    let mut found = Vec::new();
    for broker in &brokers {
        let mut command = RemotingCommand::request_with_header(request::QUERY_MESSAGE, &header);
        if unique {
            command.ext_fields.insert(UNIQUE_KEY_QUERY_FLAG, "true");
        }
        let reply = admin.call(&broker.addr, command).await?;
        if reply.code == response::QUERY_NOT_FOUND {
            continue;
        }
        check(&reply, &format!("broker {}", broker.addr))?;
        found.extend(records(
            reply.body.as_deref().unwrap_or_default(),
            &broker.name,
        )?);
    }
    found.sort_by_key(|m| (m.store_timestamp_ms, m.broker_name.clone(), m.queue_offset));
    Ok(found)
}

fn time_range(begin: Option<&str>, end: Option<&str>) -> Result<(i64, i64)> {
    let now = now_ms();
    let begin = begin.map(|t| parse_time(t, now)).transpose()?.unwrap_or(0);
    let end = end
        .map(|t| parse_time(t, now))
        .transpose()?
        .unwrap_or(i64::MAX);
    if begin > end {
        bail!("the begin time is after the end time");
    }
    Ok((begin, end))
}

pub async fn by_key(args: QueryMsgByKeyArgs) -> Result<()> {
    if args.max_num <= 0 {
        bail!("bad maxNum {}: must be positive", args.max_num);
    }
    let range = time_range(args.begin.as_deref(), args.end.as_deref())?;
    let admin = Admin::new(&args.common)?;
    let found = query(
        &admin,
        &args.topic,
        &args.key,
        false,
        range,
        args.max_num,
        args.cluster.as_deref(),
    )
    .await?;
    if found.is_empty() {
        bail!(
            "no message of topic {} has key {} in the time range",
            args.topic,
            args.key
        );
    }
    if args.common.json {
        print_json(&json!({
            "topic": args.topic,
            "key": args.key,
            "messages": found.iter().map(|m| m.to_json(true)).collect::<Vec<_>>(),
        }));
    } else {
        let rows: Vec<Vec<String>> = found.iter().map(|m| m.row(true)).collect();
        print_table(&TABLE_HEADERS, &rows);
    }
    Ok(())
}

pub async fn by_unique_key(args: QueryMsgByUniqueKeyArgs) -> Result<()> {
    let admin = Admin::new(&args.common)?;
    let mut found = query(
        &admin,
        &args.topic,
        args.unique_key.trim(),
        true,
        (0, i64::MAX),
        32,
        args.cluster.as_deref(),
    )
    .await?;
    if found.is_empty() {
        bail!(
            "no message of topic {} has unique key {}",
            args.topic,
            args.unique_key.trim()
        );
    }
    if !args.show_all {
        found.truncate(1);
    }
    if args.common.json {
        print_json(&json!({
            "topic": args.topic,
            "uniqueKey": args.unique_key.trim(),
            "messages": found.iter().map(|m| m.to_json(true)).collect::<Vec<_>>(),
        }));
    } else {
        for (index, message) in found.iter().enumerate() {
            if index > 0 {
                println!();
            }
            message.print_detail();
        }
    }
    Ok(())
}

/// The master of `broker_name` in the topic's route.
async fn broker_of(admin: &Admin, topic: &str, broker_name: &str) -> Result<BrokerRef> {
    let masters = admin.topic_masters(topic, None).await?;
    masters
        .into_iter()
        .find(|b| b.name == broker_name)
        .ok_or_else(|| anyhow::anyhow!("broker {broker_name} does not serve topic {topic}"))
}

/// One pull as the tools group: the messages from `offset` (at most `count`), and where
/// the next pull starts. `Ok(None)` when the queue has nothing at `offset`.
async fn pull(
    admin: &Admin,
    broker: &BrokerRef,
    topic: &str,
    queue_id: i32,
    offset: i64,
    count: i32,
    expression: &str,
) -> Result<Option<(Vec<Shown>, i64)>> {
    let header = PullMessageRequestHeader {
        consumer_group: TOOLS_CONSUMER_GROUP.into(),
        topic: topic.into(),
        queue_id,
        queue_offset: offset,
        max_msg_nums: count,
        sys_flag: PULL_SYSFLAG_SUBSCRIPTION,
        commit_offset: 0,
        suspend_timeout_millis: 0,
        subscription: Some(expression.into()),
        sub_version: 0,
        expression_type: Some("TAG".into()),
        max_msg_bytes: None,
        request_source: None,
        proxy_forward_client_id: None,
    };
    let reply = admin
        .call(
            &broker.addr,
            RemotingCommand::request_with_header(request::PULL_MESSAGE, &header),
        )
        .await?;
    let moved = |reply: &RemotingCommand| {
        reply
            .decode_header::<PullMessageResponseHeader>()
            .map(|h| h.next_begin_offset)
    };
    match reply.code {
        response::SUCCESS => {
            let next = moved(&reply).context("bad pull reply header")?;
            let shown = records(reply.body.as_deref().unwrap_or_default(), &broker.name)?;
            Ok(Some((shown, next)))
        }
        // Every entry scanned was filtered out: continue after them.
        response::PULL_RETRY_IMMEDIATELY => {
            let next = moved(&reply).context("bad pull reply header")?;
            Ok(Some((Vec::new(), next)))
        }
        response::PULL_NOT_FOUND | response::PULL_OFFSET_MOVED => Ok(None),
        _ => {
            check(&reply, &format!("broker {}", broker.addr))?;
            Ok(None)
        }
    }
}

async fn queue_offset(
    admin: &Admin,
    broker: &BrokerRef,
    topic: &str,
    queue_id: i32,
    code: i32,
) -> Result<i64> {
    let reply = match code {
        request::GET_MIN_OFFSET => {
            let header = GetMinOffsetRequestHeader {
                topic: topic.into(),
                queue_id,
            };
            let reply = admin
                .call_ok(
                    &broker.addr,
                    RemotingCommand::request_with_header(code, &header),
                )
                .await?;
            reply.decode_header::<GetMinOffsetResponseHeader>()?.offset
        }
        _ => {
            let header = GetMaxOffsetRequestHeader {
                topic: topic.into(),
                queue_id,
                committed: Some(true),
            };
            let reply = admin
                .call_ok(
                    &broker.addr,
                    RemotingCommand::request_with_header(code, &header),
                )
                .await?;
            reply.decode_header::<GetMaxOffsetResponseHeader>()?.offset
        }
    };
    Ok(reply)
}

async fn search_offset(
    admin: &Admin,
    broker: &BrokerRef,
    topic: &str,
    queue_id: i32,
    timestamp: i64,
) -> Result<i64> {
    let header = SearchOffsetRequestHeader {
        topic: topic.into(),
        queue_id,
        timestamp,
        boundary_type: None,
    };
    let reply = admin
        .call_ok(
            &broker.addr,
            RemotingCommand::request_with_header(request::SEARCH_OFFSET_BY_TIMESTAMP, &header),
        )
        .await?;
    Ok(reply.decode_header::<SearchOffsetResponseHeader>()?.offset)
}

pub async fn by_offset(args: QueryMsgByOffsetArgs) -> Result<()> {
    if args.queue_id < 0 || args.offset < 0 {
        bail!("queue id and offset must not be negative");
    }
    let admin = Admin::new(&args.common)?;
    let broker = broker_of(&admin, &args.topic, &args.broker_name).await?;
    let pulled = pull(
        &admin,
        &broker,
        &args.topic,
        args.queue_id,
        args.offset,
        1,
        "*",
    )
    .await?;
    let Some(message) = pulled.and_then(|(shown, _)| shown.into_iter().next()) else {
        let max = queue_offset(
            &admin,
            &broker,
            &args.topic,
            args.queue_id,
            request::GET_MAX_OFFSET,
        )
        .await?;
        let min = queue_offset(
            &admin,
            &broker,
            &args.topic,
            args.queue_id,
            request::GET_MIN_OFFSET,
        )
        .await?;
        bail!(
            "no message at offset {} of {}/{}/{} (stored offsets: [{min}, {max}))",
            args.offset,
            args.topic,
            args.broker_name,
            args.queue_id
        );
    };
    if args.common.json {
        print_json(&message.to_json(true));
    } else {
        message.print_detail();
    }
    Ok(())
}

pub async fn print(args: PrintMsgArgs) -> Result<()> {
    let charset = args.charset.replace(['-', '_'], "").to_ascii_lowercase();
    if charset != "utf8" {
        bail!(
            "charset {} is not supported: ferromq prints bodies as UTF-8",
            args.charset
        );
    }
    let now = now_ms();
    let begin = args
        .begin
        .as_deref()
        .map(|t| parse_time(t, now))
        .transpose()?;
    let end = args
        .end
        .as_deref()
        .map(|t| parse_time(t, now))
        .transpose()?;
    if let (Some(begin), Some(end)) = (begin, end) {
        if begin > end {
            bail!("the begin time is after the end time");
        }
    }
    let admin = Admin::new(&args.common)?;
    let route = admin.route(&args.topic).await?;
    let masters = admin.topic_masters(&args.topic, None).await?;
    let mut printed = Vec::new();
    for broker in &masters {
        let read_queues = route
            .queue_datas
            .iter()
            .find(|q| q.broker_name == broker.name)
            .map_or(0, |q| q.read_queue_nums.max(0));
        for queue_id in 0..read_queues {
            let from = match begin {
                Some(t) => search_offset(&admin, broker, &args.topic, queue_id, t).await?,
                None => {
                    queue_offset(
                        &admin,
                        broker,
                        &args.topic,
                        queue_id,
                        request::GET_MIN_OFFSET,
                    )
                    .await?
                }
            };
            let to = match end {
                Some(t) => search_offset(&admin, broker, &args.topic, queue_id, t).await?,
                None => {
                    queue_offset(
                        &admin,
                        broker,
                        &args.topic,
                        queue_id,
                        request::GET_MAX_OFFSET,
                    )
                    .await?
                }
            };
            let mut offset = from;
            // Bounded: every round moves `offset` forward or ends the queue.
            while offset < to {
                let batch = PRINT_PULL_BATCH.min((to - offset) as i32);
                let pulled = pull(
                    &admin,
                    broker,
                    &args.topic,
                    queue_id,
                    offset,
                    batch,
                    &args.sub_expression,
                )
                .await?;
                let Some((messages, next)) = pulled else {
                    break;
                };
                printed.extend(messages.into_iter().filter(|m| m.queue_offset < to as u64));
                if next <= offset {
                    break;
                }
                offset = next;
            }
        }
    }
    if args.common.json {
        print_json(&json!({
            "topic": args.topic,
            "messages": printed.iter().map(|m| m.to_json(args.print_body)).collect::<Vec<_>>(),
        }));
    } else {
        let rows: Vec<Vec<String>> = printed.iter().map(|m| m.row(args.print_body)).collect();
        print_table(&TABLE_HEADERS, &rows);
    }
    Ok(())
}
