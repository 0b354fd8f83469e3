#!/usr/bin/env node
// Drives the official RocketMQ 5.x gRPC client for Node.js (npm rocketmq-client-nodejs 1.0.8,
// installed by scripts/interop/install.sh into target/interop/node) against ferromq's gRPC
// endpoint, for crates/cli/tests/interop_node_grpc.rs.
//
//   node_grpc.js produce --endpoints HOST:PORT --topic T --count N [--prefix P]
//       [--delayed D] [--delay-ms MS] [--transactions K] [--orphan] [--orphan-wait-s S]
//   node_grpc.js simple --endpoints HOST:PORT --topic T --group G --expect M [--timeout-s S]
//   node_grpc.js push --endpoints HOST:PORT --topic T --group G --expect M [--timeout-s S]
//       [--linger-s S]
//
// The same scenario and JSON lines as scripts/interop/go-grpc/main.go (the tests share one
// checker). Produce sends, in order, each waiting for its receipt:
//   - N messages, body "<prefix>:<i>", tag "Tag<i%3>", keys "<prefix>-key-<i>" and
//     "<prefix>-alt-<i>", user properties {"index": i, "kind": "fifo"|"normal"}; message i is
//     FIFO with message group "<prefix>-group-<floor(i/2)%4>" when i is odd, NORMAL otherwise;
//   - K TRANSACTION messages "<prefix>:tx:<j>", each in its own transaction, committed;
//   - one TRANSACTION message "<prefix>:tx-rollback", rolled back;
//   - with --orphan, one "<prefix>:tx-orphan" neither committed nor rolled back, which the
//     broker must check back (RecoverOrphanedTransactionCommand on the Telemetry stream); the
//     checker commits it (and answers ROLLBACK only for the rolled-back body);
//   - last, D DELAY messages "<prefix>:delay:<j>" delivered MS ms after their send.
//
// stdout carries JSON lines only: per acknowledged send {"kind", "index", "body", "tag",
// "keys", "group", "properties", "message_id", "offset", "deliver_at_ms", "decision",
// "sent_at_ms"}; per check {"checked", "resolution"}; per delivery {"body", "tag", "keys",
// "properties", "message_id", "group", "attempt", "delivery_timestamp_ms", "received_at_ms"}
// (MessageView has no message type: a FIFO message shows its group, a DELAY one its delivery
// timestamp); last a {"summary": {...}} line. Exit 0 ok; 1 a send failed, the expected count
// was not reached or extra deliveries came; 2 bad usage or the client could not start. The
// client's log goes to stderr through a small logger (never to stdout).
'use strict';

const path = require('node:path');
const util = require('node:util');

const nodeModules = process.env.FERROMQ_NODE_MODULES
  || path.join(__dirname, '..', '..', 'target', 'interop', 'node', 'node_modules');
const rmq = require(path.join(nodeModules, 'rocketmq-client-nodejs'));
const { TransactionResolution } = require(path.join(nodeModules,
  'rocketmq-client-nodejs', 'proto', 'apache', 'rocketmq', 'v2', 'definition_pb'));

/** Message groups the FIFO messages are spread over. */
const FIFO_GROUPS = 4;
/** Simple consumer: messages per receive, invisibility and long polling (ms). */
const RECEIVE_BATCH = 32;
const INVISIBLE_MS = 20000;
const AWAIT_MS = 2000;
/** Bound on one request of the client (send, ack, end transaction), ms. */
const REQUEST_TIMEOUT_MS = 10000;

function emit(value) {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}

const logger = {
  info: (...args) => process.stderr.write(`INFO ${util.format(...args)}\n`),
  warn: (...args) => process.stderr.write(`WARN ${util.format(...args)}\n`),
  error: (...args) => process.stderr.write(`ERROR ${util.format(...args)}\n`),
  debug: () => {},
};

function parseArgs(argv) {
  const options = {
    count: 1000, prefix: 'node', delayed: 0, delayMs: 2000, transactions: 0, orphan: false,
    orphanWaitS: 30, expect: 0, timeoutS: 60, lingerS: 3,
  };
  const names = {
    '--endpoints': 'endpoints', '--topic': 'topic', '--count': 'count', '--prefix': 'prefix',
    '--delayed': 'delayed', '--delay-ms': 'delayMs', '--transactions': 'transactions',
    '--orphan-wait-s': 'orphanWaitS', '--group': 'group', '--expect': 'expect',
    '--timeout-s': 'timeoutS', '--linger-s': 'lingerS',
  };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--orphan') {
      options.orphan = true;
      continue;
    }
    const name = names[argv[i]];
    if (!name || i + 1 >= argv.length) {
      throw new Error(`bad argument ${argv[i]}`);
    }
    const value = argv[++i];
    options[name] = typeof options[name] === 'number' ? Number(value) : value;
  }
  if (!options.endpoints || !options.topic) {
    throw new Error('--endpoints and --topic are required');
  }
  return options;
}

function viewLine(view) {
  return {
    body: view.body.toString(),
    tag: view.tag ?? null,
    keys: [...view.keys].sort(),
    properties: Object.fromEntries(view.properties),
    message_id: view.messageId,
    // The client reads an absent message group as '' (the protobuf getter's default).
    group: view.messageGroup || null,
    attempt: view.deliveryAttempt ?? null,
    delivery_timestamp_ms: view.deliveryTimestamp ? view.deliveryTimestamp.getTime() : null,
    received_at_ms: Date.now(),
  };
}

async function produce(o) {
  const rollbackBody = `${o.prefix}:tx-rollback`;
  const orphanBody = `${o.prefix}:tx-orphan`;
  let checks = 0;
  let orphanChecked;
  const orphanCheck = new Promise(resolve => { orphanChecked = resolve; });
  const checker = {
    async check(view) {
      const body = view.body.toString();
      const rollback = body === rollbackBody;
      checks++;
      emit({ checked: body, resolution: rollback ? 'rollback' : 'commit', message_id: view.messageId });
      if (body === orphanBody) {
        // The client sends the decision (EndTransaction) once this promise resolves.
        setTimeout(() => orphanChecked(true), 500);
      }
      return rollback ? TransactionResolution.ROLLBACK : TransactionResolution.COMMIT;
    },
  };
  const producer = new rmq.Producer({
    endpoints: o.endpoints, namespace: '', topics: [o.topic], checker, logger,
    requestTimeout: REQUEST_TIMEOUT_MS,
  });
  await producer.startup();
  let sent = 0;
  let failed = 0;
  const build = (kind, index, body, tag, keys) => {
    const properties = { index: String(index), kind };
    return {
      message: {
        topic: o.topic, body: Buffer.from(body), tag, keys,
        properties: new Map(Object.entries(properties)),
      },
      line: {
        kind, index, body, tag, keys, group: null, properties, message_id: null, offset: null,
        deliver_at_ms: null, decision: null, sent_at_ms: Date.now(),
      },
    };
  };
  const report = (line, receipt) => {
    sent++;
    line.message_id = receipt.messageId;
    line.offset = Number(receipt.offset);
    emit(line);
  };
  const failure = (line, error) => {
    failed++;
    emit({ kind: line.kind, index: line.index, body: line.body, error: String(error && error.stack || error) });
  };
  for (let i = 0; i < o.count; i++) {
    const kind = i % 2 === 1 ? 'fifo' : 'normal';
    const { message, line } = build(kind, i, `${o.prefix}:${i}`, `Tag${i % 3}`,
      [`${o.prefix}-key-${i}`, `${o.prefix}-alt-${i}`]);
    if (kind === 'fifo') {
      message.messageGroup = `${o.prefix}-group-${Math.floor(i / 2) % FIFO_GROUPS}`;
      line.group = message.messageGroup;
    }
    try {
      report(line, await producer.send(message));
    } catch (error) {
      failure(line, error);
    }
  }
  const transact = async (index, body, decision) => {
    const { message, line } = build('transaction', index, body, 'TagTx',
      [`${o.prefix}-tx-${index}`, `${o.prefix}-tx-alt-${index}`]);
    line.decision = decision;
    try {
      const transaction = producer.beginTransaction();
      const receipt = await producer.send(message, transaction);
      if (decision === 'commit') {
        await transaction.commit();
      } else if (decision === 'rollback') {
        await transaction.rollback();
      }
      report(line, receipt);
    } catch (error) {
      failure(line, error);
    }
  };
  for (let j = 0; j < o.transactions; j++) {
    await transact(j, `${o.prefix}:tx:${j}`, 'commit');
  }
  await transact(o.transactions, rollbackBody, 'rollback');
  if (o.orphan) {
    await transact(o.transactions + 1, orphanBody, 'orphan');
    let timer;
    const timedOut = new Promise(resolve => { timer = setTimeout(() => resolve(false), o.orphanWaitS * 1000); });
    const checked = await Promise.race([ orphanCheck, timedOut ]);
    clearTimeout(timer);
    if (!checked) {
      failed++;
      emit({ body: orphanBody, error: 'the broker did not check the orphaned transaction in time' });
    } else {
      // Let the client's EndTransaction for the check go out before shutting down.
      await new Promise(resolve => setTimeout(resolve, 500));
    }
  }
  // DELAY messages last, so a consumer started right after this run would see one that came
  // early.
  for (let j = 0; j < o.delayed; j++) {
    const { message, line } = build('delay', j, `${o.prefix}:delay:${j}`, 'TagDelay',
      [`${o.prefix}-delay-${j}`, `${o.prefix}-delay-alt-${j}`]);
    line.deliver_at_ms = line.sent_at_ms + o.delayMs;
    message.deliveryTimestamp = new Date(line.deliver_at_ms);
    try {
      report(line, await producer.send(message));
    } catch (error) {
      failure(line, error);
    }
  }
  await producer.shutdown();
  emit({ summary: { sent, failed, checks } });
  return failed === 0 ? 0 : 1;
}

async function simple(o) {
  const consumer = new rmq.SimpleConsumer({
    endpoints: o.endpoints, namespace: '', consumerGroup: o.group,
    subscriptions: new Map([[ o.topic, '*' ]]), awaitDuration: AWAIT_MS, logger,
    requestTimeout: REQUEST_TIMEOUT_MS,
  });
  await consumer.startup();
  let received = 0;
  let receiveErrors = 0;
  let ackErrors = 0;
  let lastError = null;
  const receive = async () => {
    try {
      return await consumer.receive(RECEIVE_BATCH, INVISIBLE_MS);
    } catch (error) {
      // MESSAGE_NOT_FOUND (nothing within the long polling) may surface as an error.
      receiveErrors++;
      lastError = String(error && error.message || error);
      return [];
    }
  };
  const ack = async view => {
    try {
      await consumer.ack(view);
    } catch (error) {
      ackErrors++;
      emit({ ack_error: String(error && error.message || error), body: view.body.toString() });
    }
  };
  const deadline = Date.now() + o.timeoutS * 1000;
  while (received < o.expect && Date.now() < deadline) {
    for (const view of await receive()) {
      const line = viewLine(view);
      await ack(view);
      received++;
      emit(line);
    }
  }
  let extra = 0;
  if (received >= o.expect) {
    for (const view of await receive()) {
      extra++;
      emit({ ...viewLine(view), extra: true });
      await ack(view);
    }
  }
  await consumer.shutdown();
  emit({ summary: { received, extra, receive_errors: receiveErrors, ack_errors: ackErrors, last_receive_error: lastError } });
  return received === o.expect && extra === 0 && ackErrors === 0 ? 0 : 1;
}

async function push(o) {
  let received = 0;
  let reached;
  const reachedPromise = new Promise(resolve => { reached = resolve; });
  const consumer = new rmq.PushConsumer({
    endpoints: o.endpoints, namespace: '', consumerGroup: o.group,
    subscriptions: new Map([[ o.topic, '*' ]]), logger, requestTimeout: REQUEST_TIMEOUT_MS,
    longPollingTimeout: AWAIT_MS,
    messageListener: {
      consume(view) {
        received++;
        const line = viewLine(view);
        if (received > o.expect) {
          line.extra = true;
        }
        emit(line);
        if (received === o.expect) {
          reached(true);
        }
        return rmq.ConsumeResult.SUCCESS;
      },
    },
  });
  await consumer.startup();
  if (o.expect === 0) {
    reached(true);
  }
  let timer;
  const timedOut = new Promise(resolve => { timer = setTimeout(() => resolve(false), o.timeoutS * 1000); });
  const ok = await Promise.race([ reachedPromise, timedOut ]);
  clearTimeout(timer);
  if (ok) {
    // Acks go out after the listener returns; wait for them and for any extra delivery.
    await new Promise(resolve => setTimeout(resolve, o.lingerS * 1000));
  }
  await consumer.shutdown();
  const extra = Math.max(0, received - o.expect);
  emit({ summary: { received: received - extra, extra } });
  return received === o.expect ? 0 : 1;
}

async function main() {
  const [ command, ...rest ] = process.argv.slice(2);
  let options;
  try {
    options = parseArgs(rest);
  } catch (error) {
    process.stderr.write(`usage: node_grpc.js produce|simple|push --endpoints E --topic T ...: ${error.message}\n`);
    return 2;
  }
  const commands = { produce, simple, push };
  if (!commands[command]) {
    process.stderr.write(`unknown command ${command}\n`);
    return 2;
  }
  try {
    return await commands[command](options);
  } catch (error) {
    emit({ fatal: String(error && error.stack || error) });
    return 2;
  }
}

main().then(code => process.exit(code));
