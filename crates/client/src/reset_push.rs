//! RESET_CONSUMER_CLIENT_OFFSET (220): the broker's one-way push telling online consumers
//! that an administrator reset their group's offsets on a topic.
//!
//! The push is a courtesy, not the guarantee: a ferromq broker records the reset durably and
//! fences the consumers that were online (their commits are refused until they pull the queue,
//! answered PULL_OFFSET_MOVED to the reset offset), so a lost push only delays the move to the
//! next pull. Consumers that receive it drop their buffered messages of the queues, freeze
//! in-flight results (they belong to the old generation) and resume at the reset offsets.

use ferromq_protocol::remoting::body::decode_json;
use ferromq_protocol::remoting::body::misc::MessageQueue;
use ferromq_protocol::remoting::body::mq_map::ResetOffsetBody;
use ferromq_protocol::remoting::headers::offset::ResetOffsetRequestHeader;
use ferromq_protocol::remoting::RemotingCommand;
use serde::Deserialize;

/// A decoded 220 push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientReset {
    /// The group whose offsets moved.
    pub group: String,
    /// The topic whose offsets moved.
    pub topic: String,
    /// The new offset (next to consume) of each moved queue; negative wire values are dropped.
    pub offsets: Vec<(MessageQueue, u64)>,
}

/// The list form C++ clients read: `{"offsetTable":[{"topic","brokerName","queueId","offset"}]}`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListBody {
    offset_table: Vec<ListEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListEntry {
    topic: String,
    broker_name: String,
    queue_id: i32,
    offset: i64,
}

/// Decodes a 220 push (Java's map body, or the C++ list body).
///
/// # Errors
/// A text naming what is malformed: the header, or a body in neither form.
pub(crate) fn parse(cmd: &RemotingCommand) -> Result<ClientReset, String> {
    let header = cmd
        .decode_header::<ResetOffsetRequestHeader>()
        .map_err(|e| format!("bad reset header: {e}"))?;
    let body = cmd.body.as_deref().unwrap_or_default();
    let entries: Vec<(MessageQueue, i64)> = match decode_json::<ResetOffsetBody>(body) {
        Ok(map) => map.offset_table.0.into_iter().collect(),
        Err(map_error) => match serde_json::from_slice::<ListBody>(body) {
            Ok(list) => list
                .offset_table
                .into_iter()
                .map(|e| {
                    (
                        MessageQueue {
                            topic: e.topic,
                            broker_name: e.broker_name,
                            queue_id: e.queue_id,
                        },
                        e.offset,
                    )
                })
                .collect(),
            Err(list_error) => {
                return Err(format!(
                    "bad reset body: not a queue map ({map_error}) nor a list ({list_error})"
                ))
            }
        },
    };
    Ok(ClientReset {
        group: header.group,
        topic: header.topic.clone(),
        offsets: entries
            .into_iter()
            .filter(|(q, _)| q.topic == header.topic)
            .filter_map(|(q, o)| u64::try_from(o).ok().map(|o| (q, o)))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferromq_protocol::remoting::body::mq_map::{encode_fastjson, MqMap};
    use ferromq_protocol::remoting::codes::request;

    fn push(body: Vec<u8>) -> RemotingCommand {
        let header = ResetOffsetRequestHeader {
            group: "G".into(),
            topic: "T".into(),
            queue_id: None,
            offset: None,
            timestamp: -1,
            is_force: true,
        };
        RemotingCommand::request_with_header(request::RESET_CONSUMER_CLIENT_OFFSET, &header)
            .with_body(body)
    }

    fn q(id: i32) -> MessageQueue {
        MessageQueue {
            topic: "T".into(),
            broker_name: "b".into(),
            queue_id: id,
        }
    }

    #[test]
    fn both_body_forms_decode_and_negative_offsets_are_dropped() {
        let mut table = MqMap::default();
        table.0.insert(q(0), 7);
        table.0.insert(q(1), -1);
        let java = push(encode_fastjson(&ResetOffsetBody {
            offset_table: table,
        }));
        let reset = parse(&java).unwrap();
        assert_eq!((reset.group.as_str(), reset.topic.as_str()), ("G", "T"));
        assert_eq!(reset.offsets, vec![(q(0), 7)]);
        let cpp = push(
            br#"{"offsetTable":[{"topic":"T","brokerName":"b","queueId":1,"offset":9}]}"#.to_vec(),
        );
        assert_eq!(parse(&cpp).unwrap().offsets, vec![(q(1), 9)]);
        assert!(parse(&push(b"[1,2".to_vec()))
            .unwrap_err()
            .contains("bad reset body"));
    }
}
