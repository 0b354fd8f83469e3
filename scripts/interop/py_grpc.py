#!/usr/bin/env python3
"""Produces messages through ferromq's gRPC endpoint with the official RocketMQ 5.x Python
client (PyPI rocketmq-python-client 5.1.2), for crates/cli/tests/interop_grpc.rs.

Usage: py_grpc.py --endpoints HOST:PORT --topic TOPIC --count N [--prefix P]
       py_grpc.py --endpoints HOST:PORT --topic TOPIC --count N --consume GROUP

Consuming: a SimpleConsumer of GROUP receives (batches of 32, invisible 20 s, long polling 2 s)
until N messages came or 60 s passed, acks each, prints one JSON line per message (body, tag,
keys, properties, message id, message group, delivery attempt), then receives once more
(which must find nothing: every message was acked) and prints {"summary": {"received": ...,
"extra": ...}}.

Message i is FIFO (group "<prefix>-group-<(i // 2) % 4>") when i is odd, NORMAL otherwise; it has
tag "Tag<i % 3>", keys "<prefix>-key-<i>" and "<prefix>-alt-<i>", user properties
{"index": i, "kind": "fifo"|"normal"} and body "<prefix>:<i>". Prints one JSON line per
acknowledged send (what was sent, and the broker's message id and offset), then a summary
line {"summary": {...}}; exits non-zero when a send fails.
"""

import argparse
import json
import sys

import time

from rocketmq import (ClientConfiguration, Credentials, FilterExpression, Message, Producer,
                      SimpleConsumer)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoints", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--prefix", default="py")
    parser.add_argument("--consume", metavar="GROUP")
    args = parser.parse_args()

    config = ClientConfiguration(args.endpoints, Credentials(), request_timeout=10)
    if args.consume:
        consume(config, args)
        return
    producer = Producer(config, (args.topic,))
    producer.startup()
    sent = 0
    failed = 0
    try:
        for i in range(args.count):
            fifo = i % 2 == 1
            message = Message()
            message.topic = args.topic
            message.body = f"{args.prefix}:{i}".encode()
            message.tag = f"Tag{i % 3}"
            keys = [f"{args.prefix}-key-{i}", f"{args.prefix}-alt-{i}"]
            for key in keys:  # the property setter takes one key and adds it to a set
                message.keys = key
            properties = {"index": str(i), "kind": "fifo" if fifo else "normal"}
            for name, value in properties.items():
                message.add_property(name, value)
            group = None
            if fifo:
                group = f"{args.prefix}-group-{(i // 2) % 4}"
                message.message_group = group
            try:
                receipt = producer.send(message)
            except Exception as error:  # reported, counted, and the exit code says so
                failed += 1
                print(json.dumps({"index": i, "error": str(error)}), flush=True)
                continue
            sent += 1
            print(
                json.dumps(
                    {
                        "index": i,
                        "body": f"{args.prefix}:{i}",
                        "tag": f"Tag{i % 3}",
                        "keys": keys,
                        "group": group,
                        "properties": properties,
                        "message_id": receipt.message_id,
                        "offset": receipt.offset,
                    }
                ),
                flush=True,
            )
    finally:
        producer.shutdown()
    print(json.dumps({"summary": {"sent": sent, "failed": failed}}), flush=True)
    sys.exit(0 if failed == 0 else 1)


def consume(config, args):
    consumer = SimpleConsumer(config, args.consume, {args.topic: FilterExpression()}, await_duration=2)
    consumer.startup()
    received = 0
    extra = 0
    try:
        deadline = time.monotonic() + 60
        while received < args.count and time.monotonic() < deadline:
            for message in consumer.receive(32, 20) or []:
                consumer.ack(message)
                received += 1
                print(
                    json.dumps(
                        {
                            "body": message.body.decode(),
                            "tag": message.tag,
                            "keys": sorted(message.keys or []),
                            "properties": dict(message.properties or {}),
                            "message_id": message.message_id,
                            "group": message.message_group,
                            "attempt": message.delivery_attempt,
                        }
                    ),
                    flush=True,
                )
        extra = len(consumer.receive(32, 20) or [])
    finally:
        consumer.shutdown()
    print(json.dumps({"summary": {"received": received, "extra": extra}}), flush=True)
    sys.exit(0 if received == args.count and extra == 0 else 1)


if __name__ == "__main__":
    main()
