#!/usr/bin/env python3
"""Interop client for ferromq: PyPI `rocketmq` 0.4.4 (messense; bundled C++ core, remoting).

Run with the venv made by scripts/interop/install.sh:

    target/interop/venv-remoting/bin/python scripts/interop/py_remoting.py produce \
        --namesrv 127.0.0.1:9876 --topic T --group PG --count 1000 --tag TA --prefix a
    (produce --half sends transaction half messages: TRAN_MSG=true, PGROUP=--group, no END)
    target/interop/venv-remoting/bin/python scripts/interop/py_remoting.py consume \
        --namesrv 127.0.0.1:9876 --topic T --group CG --expect 1000 --timeout 60

Messages: key f"{prefix}-{i}", body f"{prefix}:{i}", tag --tag.

stdout carries JSON only; the last line is always the summary (one JSON object).
  produce: {"client", "cmd": "produce", "sent", "failed", "attempted", "count", "elapsed_s",
            "first_error", "distinct_msg_ids"}; with --each also one line per send:
            {"event": "sent", "i", "status", "msg_id", "offset"} or {"event": "send_failed", ...}.
  consume: {"client", "cmd": "consume", "instance", "received", "distinct", "duplicates",
            "expected", "key_mismatches", "tag_mismatches", "bad_bodies", "examples",
            "by_prefix": {prefix: {"received", "distinct"}}, "elapsed_s", "first_msg_s",
            "exit_reason": expected|timeout|idle|signal, "shutdown_s", "ok"};
            with --events also {"event": "started"} and one {"event": "msg", ...} per delivery.
Exit status: 0 = ok; 1 = sends failed / expected count not reached / bad messages;
2 = bad usage or the client could not start.

The C++ core logs to $HOME/logs/rocketmq-cpp/ (set HOME to keep it out of the real home).
API used (read from site-packages/rocketmq/client.py of 0.4.4): Producer(group),
set_namesrv_addr, set_timeout, start, send_sync(Message) -> SendResult(status, msg_id, offset),
shutdown; Message(topic).set_keys/set_tags/set_body; PushConsumer(group) (CLUSTERING by default),
set_namesrv_addr, set_instance_name, set_thread_count, subscribe(topic, callback, expression),
start, shutdown. The callback returns nothing (CONSUME_SUCCESS) or raises (RECONSUME_LATER);
0.4.4 exports no ConsumeStatus. RecvMessage.body/.tags/.keys are bytes.
"""

import argparse
import json
import os
import re
import signal
import sys
import threading
import time

_print_lock = threading.Lock()
# Why one consume thread by default: this C++ core sets a queue's offset after each consumed
# message outside the lock under which it computed it, and without an "increase only" check.
# With several threads the last writer wins, not the largest offset: a thread that computed an
# older offset (messages still in flight) can write it after another wrote the queue's end, so
# the consumer keeps, commits and at shutdown sends a regressed offset, and a restart
# re-delivers the difference (the likely cause of one CI failure: a queue's committed offset
# stayed at the start of its last pull batch, 26 short of the end). The broker rightly stores
# what it is sent; the interop tests check that committed offsets reach the end, so they
# consume on one thread.
THREADS_HELP = "consume threads (default 1: the C++ core's offset update races between threads)"
BODY_RE = re.compile(r"^(.+):(\d+)$")
CLIENT = "python-rocketmq-0.4.4-cpp"


def emit(obj):
    line = json.dumps(obj, sort_keys=True)
    with _print_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def fail_start(cmd, what, err):
    emit({"client": CLIENT, "cmd": cmd, "error": "%s: %s: %s" % (what, type(err).__name__, err), "ok": False})
    sys.exit(2)


def text(value):
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def produce(args):
    from rocketmq.client import Producer, Message

    start = time.monotonic()
    try:
        producer = Producer(args.group)
        producer.set_namesrv_addr(args.namesrv)
        producer.set_timeout(args.send_timeout_ms)
        if args.instance:
            # Not wrapped by 0.4.4's Python class, but exported by librocketmq.so.
            from rocketmq.ffi import dll
            dll.SetProducerInstanceName(producer._handle, args.instance.encode())
        if args.access_key:
            # ACL 1.0 signing by the C++ core (channel "ALIYUN" is signed as OnsChannel).
            producer.set_session_credentials(args.access_key, args.secret_key, "ALIYUN")
        producer.start()
    except Exception as err:  # noqa: BLE001 - report any start failure as JSON
        fail_start("produce", "producer start", err)

    sent = failed = attempted = 0
    first_error = None
    msg_ids = set()
    for i in range(args.start, args.start + args.count):
        if failed >= args.max_failures:
            break
        attempted += 1
        msg = Message(args.topic)
        msg.set_keys("%s-%d" % (args.prefix, i))
        if args.tag:
            msg.set_tags(args.tag)
        msg.set_body("%s:%d" % (args.prefix, i))
        if args.half:
            # A transaction's half message as Java and the C++ core mark it; 0.4.4 wraps no
            # TransactionMQProducer, so no END follows: the broker checks back.
            msg.set_property("TRAN_MSG", "true")
            msg.set_property("PGROUP", args.group)
        try:
            result = producer.send_sync(msg)
        except Exception as err:  # noqa: BLE001
            failed += 1
            error = "%s: %s" % (type(err).__name__, err)
            if first_error is None:
                first_error = error
            if args.each:
                emit({"event": "send_failed", "i": i, "error": error})
            continue
        status = getattr(result.status, "name", str(result.status))
        if status == "OK":
            sent += 1
            msg_ids.add(result.msg_id)
        else:
            failed += 1
            if first_error is None:
                first_error = "send status %s" % status
        if args.each:
            emit({"event": "sent", "i": i, "status": status, "msg_id": result.msg_id, "offset": result.offset})

    try:
        producer.shutdown()
    except Exception as err:  # noqa: BLE001
        if first_error is None:
            first_error = "shutdown: %s" % err
    emit({
        "client": CLIENT,
        "cmd": "produce",
        "count": args.count,
        "attempted": attempted,
        "sent": sent,
        "failed": failed + (args.count - attempted),
        "distinct_msg_ids": len(msg_ids),
        "first_error": first_error,
        "elapsed_s": round(time.monotonic() - start, 3),
        "ok": sent == args.count,
    })
    # Skip interpreter teardown: the C++ core's destructors are slow and noisy at exit.
    sys.stdout.flush()
    os._exit(0 if sent == args.count else 1)


class Collector:
    """Counts deliveries; thread-safe (the C++ core calls back from its own threads)."""

    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.start = time.monotonic()
        self.last_msg = None
        self.first_msg = None
        self.received = 0
        self.bodies = set()
        self.by_prefix = {}
        self.key_mismatches = 0
        self.tag_mismatches = 0
        self.bad_bodies = 0
        self.examples = []

    def on_message(self, msg):
        body = text(msg.body)
        key = text(msg.keys)
        tag = text(msg.tags)
        now = time.monotonic()
        problem = None
        with self.lock:
            self.received += 1
            if self.first_msg is None:
                self.first_msg = now
            self.last_msg = now
            m = BODY_RE.match(body or "")
            if not m:
                self.bad_bodies += 1
                problem = "bad body"
                prefix = None
            else:
                prefix, index = m.group(1), m.group(2)
                expected_key = "%s-%s" % (prefix, index)
                if key != expected_key:
                    self.key_mismatches += 1
                    problem = "key %r, expected %r" % (key, expected_key)
                if self.args.expect_tag is not None and tag != self.args.expect_tag:
                    self.tag_mismatches += 1
                    problem = (problem + "; " if problem else "") + "tag %r, expected %r" % (tag, self.args.expect_tag)
            stats = self.by_prefix.setdefault(prefix if prefix is not None else "?", {"received": 0, "distinct": 0})
            stats["received"] += 1
            if body not in self.bodies:
                self.bodies.add(body)
                stats["distinct"] += 1
            if problem and len(self.examples) < 5:
                self.examples.append({"body": body, "key": key, "tag": tag, "problem": problem})
        if self.args.events:
            emit({
                "event": "msg",
                "body": body,
                "key": key,
                "tag": tag,
                "queue_id": msg.queue_id,
                "queue_offset": msg.queue_offset,
                "reconsume_times": msg.reconsume_times,
                "msg_id": msg.id,
            })

    def distinct(self):
        with self.lock:
            return len(self.bodies)

    def idle_for(self):
        with self.lock:
            since = self.last_msg if self.last_msg is not None else self.start
        return time.monotonic() - since

    def summary(self, reason, shutdown_s):
        with self.lock:
            distinct = len(self.bodies)
            clean = self.key_mismatches == 0 and self.tag_mismatches == 0 and self.bad_bodies == 0
            reached = self.args.expect <= 0 or distinct >= self.args.expect
            return {
                "client": CLIENT,
                "cmd": "consume",
                "instance": self.args.instance,
                "group": self.args.group,
                "topic": self.args.topic,
                "received": self.received,
                "distinct": distinct,
                "duplicates": self.received - distinct,
                "expected": self.args.expect,
                "key_mismatches": self.key_mismatches,
                "tag_mismatches": self.tag_mismatches,
                "bad_bodies": self.bad_bodies,
                "examples": self.examples,
                "by_prefix": self.by_prefix,
                "elapsed_s": round(time.monotonic() - self.start, 3),
                "first_msg_s": None if self.first_msg is None else round(self.first_msg - self.start, 3),
                "exit_reason": reason,
                "shutdown_s": shutdown_s,
                "ok": clean and reached and reason != "timeout",
            }


def consume(args):
    from rocketmq.client import PushConsumer

    stop = threading.Event()
    signalled = []

    def on_signal(signum, _frame):
        signalled.append(signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    collector = Collector(args)
    try:
        consumer = PushConsumer(args.group)
        consumer.set_namesrv_addr(args.namesrv)
        if args.instance:
            consumer.set_instance_name(args.instance)
        consumer.set_thread_count(args.threads)
        if args.access_key:
            consumer.set_session_credentials(args.access_key, args.secret_key, "ALIYUN")
        consumer.subscribe(args.topic, collector.on_message, args.subscribe)
        consumer.start()
    except Exception as err:  # noqa: BLE001
        fail_start("consume", "push consumer start", err)
    if args.events:
        emit({"event": "started", "instance": args.instance, "after_s": round(time.monotonic() - collector.start, 3)})

    deadline = collector.start + args.timeout
    reason = "timeout"
    reached_at = None
    while True:
        if stop.is_set():
            reason = "signal"
            break
        now = time.monotonic()
        if args.expect > 0 and reached_at is None and collector.distinct() >= args.expect:
            reached_at = now
        if reached_at is not None and now - reached_at >= args.linger:
            reason = "expected"
            break
        if args.idle_exit is not None and collector.idle_for() >= args.idle_exit:
            reason = "idle"
            break
        if now >= deadline:
            reason = "expected" if reached_at is not None else "timeout"
            break
        stop.wait(0.05)

    # shutdown() persists the offsets (UPDATE_CONSUMER_OFFSET) and unregisters the client. A dead
    # broker could make it hang: a watchdog reports and exits instead.
    t0 = time.monotonic()

    def watchdog():
        if not done.wait(args.shutdown_timeout):
            summary = collector.summary(reason, None)
            summary["error"] = "shutdown did not finish within %s s" % args.shutdown_timeout
            summary["ok"] = False
            emit(summary)
            os._exit(1)

    done = threading.Event()
    threading.Thread(target=watchdog, daemon=True).start()
    shutdown_error = None
    try:
        consumer.shutdown()
    except Exception as err:  # noqa: BLE001
        shutdown_error = "%s: %s" % (type(err).__name__, err)
    done.set()
    summary = collector.summary(reason, round(time.monotonic() - t0, 3))
    if shutdown_error:
        summary["shutdown_error"] = shutdown_error
    emit(summary)
    sys.stdout.flush()
    os._exit(0 if summary["ok"] else 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("produce", help="send --count messages synchronously")
    p.add_argument("--namesrv", required=True, help="name server host:port (127.0.0.1 only)")
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True, help="producer group")
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--tag", default="")
    p.add_argument("--prefix", required=True)
    p.add_argument("--start", type=int, default=0, help="first index i (default 0)")
    p.add_argument("--instance", default=None, help="client instance name")
    p.add_argument("--send-timeout-ms", type=int, default=3000)
    p.add_argument("--max-failures", type=int, default=5, help="stop after this many failed sends")
    p.add_argument("--each", action="store_true", help="print one JSON line per send")
    p.add_argument("--access-key", default=None, help="ACL access key (set_session_credentials)")
    p.add_argument("--secret-key", default=None, help="ACL secret key")
    p.add_argument("--half", action="store_true",
                   help="send transaction half messages (TRAN_MSG=true, PGROUP=--group); no END follows")

    c = sub.add_parser("consume", help="push-consume (cluster mode) until --expect distinct bodies")
    c.add_argument("--namesrv", required=True)
    c.add_argument("--topic", required=True)
    c.add_argument("--group", required=True, help="consumer group")
    c.add_argument("--expect", type=int, default=0, help="exit once this many distinct bodies arrived (0: never)")
    c.add_argument("--timeout", type=float, required=True, help="exit after this many seconds in any case")
    c.add_argument("--idle-exit", type=float, default=None, help="exit after this many seconds without a message")
    c.add_argument("--linger", type=float, default=0.0, help="keep consuming this long after --expect is reached")
    c.add_argument("--instance", default=None, help="client instance name (distinct per process in a group)")
    c.add_argument("--subscribe", default="*", help="subscription expression (default *)")
    c.add_argument("--expect-tag", default=None, help="tag every message must carry")
    c.add_argument("--threads", type=int, default=1, help=THREADS_HELP)
    c.add_argument("--shutdown-timeout", type=float, default=20.0)
    c.add_argument("--events", action="store_true", help="print a JSON line per delivery")
    c.add_argument("--access-key", default=None, help="ACL access key (set_session_credentials)")
    c.add_argument("--secret-key", default=None, help="ACL secret key")

    args = parser.parse_args()
    if args.cmd == "produce":
        produce(args)
    else:
        consume(args)


if __name__ == "__main__":
    main()
