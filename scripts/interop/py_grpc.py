#!/usr/bin/env python3
"""Produces messages through ferromq's gRPC endpoint with the official RocketMQ 5.x Python
client (PyPI rocketmq-python-client 5.1.2), for crates/cli/tests/interop_grpc.rs.

Usage: py_grpc.py --endpoints HOST:PORT --topic TOPIC --count N [--prefix P]
       py_grpc.py --endpoints HOST:PORT --topic TOPIC --count N --consume GROUP
       py_grpc.py --endpoints HOST:PORT --topic TOPIC --count N --push GROUP
       py_grpc.py --endpoints HOST:PORT --topic TOPIC --specials

Specials: 3 DELAY messages (delivery 2-3 s after the send, whole seconds: the client puts
delivery_timestamp into Timestamp.seconds; body "<prefix>:delay:<i>"), and 3
TRANSACTION messages of which "<prefix>:commit:0" and ":commit:1" are committed and
"<prefix>:rollback:0" rolled back; one JSON line each (body, kind, send time in ms, delivery
time for DELAY), then a summary.

Push: a PushConsumer of GROUP acknowledges (SUCCESS) every message and prints the same lines
as the SimpleConsumer (plus "received_ms") until N came or 60 s passed, waits 2 s more for
extras, then a summary {"received", "extra"}.

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

import threading

from rocketmq import (ClientConfiguration, ConsumeResult, Credentials, FilterExpression,
                      Message, MessageListener, Producer, PushConsumer, SimpleConsumer,
                      TransactionChecker, TransactionResolution)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoints", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--prefix", default="py")
    parser.add_argument("--consume", metavar="GROUP")
    parser.add_argument("--push", metavar="GROUP")
    parser.add_argument("--specials", action="store_true")
    args = parser.parse_args()

    config = ClientConfiguration(args.endpoints, Credentials(), request_timeout=10)
    if args.consume:
        consume(config, args)
        return
    if args.push:
        push(config, args)
        return
    if args.specials:
        specials(config, args)
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


def line_of(message):
    """One JSON-ready line describing a received message."""
    return {
        "body": message.body.decode(),
        "tag": message.tag,
        "keys": sorted(message.keys or []),
        "properties": dict(message.properties or {}),
        "message_id": message.message_id,
        "group": message.message_group,
        "attempt": message.delivery_attempt,
        "received_ms": int(time.time() * 1000),
    }


class CommitAll(TransactionChecker):
    """Answers check-backs: the test commits or rolls back explicitly, so none should come."""

    def check(self, message):
        print(json.dumps({"check": message.body.decode()}), flush=True)
        return TransactionResolution.COMMIT


def specials(config, args):
    producer = Producer(config, (args.topic,), CommitAll())
    producer.startup()
    sent = 0
    try:
        for i in range(3):
            message = Message()
            message.topic = args.topic
            message.body = f"{args.prefix}:delay:{i}".encode()
            # The client puts delivery_timestamp into Timestamp.seconds: it is in seconds.
            now = int(time.time() * 1000)
            at_seconds = now // 1000 + 3
            message.delivery_timestamp = at_seconds
            producer.send(message)
            sent += 1
            print(json.dumps({"body": message.body.decode(), "kind": "delay", "sent_ms": now,
                              "deliver_ms": at_seconds * 1000}), flush=True)
        for kind, i in (("commit", 0), ("commit", 1), ("rollback", 0)):
            message = Message()
            message.topic = args.topic
            message.body = f"{args.prefix}:{kind}:{i}".encode()
            transaction = producer.begin_transaction()
            producer.send(message, transaction)
            if kind == "commit":
                transaction.commit()
            else:
                transaction.rollback()
            sent += 1
            print(json.dumps({"body": message.body.decode(), "kind": kind,
                              "sent_ms": int(time.time() * 1000)}), flush=True)
    finally:
        producer.shutdown()
    print(json.dumps({"summary": {"sent": sent}}), flush=True)


class Collect(MessageListener):
    """Acknowledges every message and prints its line."""

    def __init__(self):
        self.count = 0
        self.lock = threading.Lock()

    def consume(self, message):
        with self.lock:
            self.count += 1
            print(json.dumps(line_of(message)), flush=True)
        return ConsumeResult.SUCCESS


def push(config, args):
    listener = Collect()
    consumer = PushConsumer(config, args.push, listener, {args.topic: FilterExpression()})
    consumer.startup()
    try:
        deadline = time.monotonic() + 60
        while listener.count < args.count and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(2)
    finally:
        consumer.shutdown()
    with listener.lock:
        received = min(listener.count, args.count)
        extra = listener.count - received
    print(json.dumps({"summary": {"received": received, "extra": extra}}), flush=True)
    sys.exit(0 if received == args.count and extra == 0 else 1)


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
                print(json.dumps(line_of(message)), flush=True)
        extra = len(consumer.receive(32, 20) or [])
    finally:
        consumer.shutdown()
    print(json.dumps({"summary": {"received": received, "extra": extra}}), flush=True)
    sys.exit(0 if received == args.count and extra == 0 else 1)


if __name__ == "__main__":
    main()
