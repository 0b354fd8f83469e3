#!/usr/bin/env node
// Interop client for ferromq: npm `ali-ons` 3.12.0 (pure JS, remoting; SEND_MESSAGE_V2).
//
// Run with node, after scripts/interop/install.sh:
//   node scripts/interop/ali_ons.js produce --namesrv 127.0.0.1:9876 --topic T --group PG \
//       --count 1000 --tag TA --prefix a
//   node scripts/interop/ali_ons.js consume --namesrv 127.0.0.1:9876 --topic T --group CG \
//       --expect 1000 --timeout 60
//
//   node scripts/interop/ali_ons.js create-topic --namesrv 127.0.0.1:9876 --broker 127.0.0.1:10911 \
//       --topic T [--queues 8] [--wait 40]
//
// Same flags and the same JSON on stdout as py_remoting.py (see its docstring): the last stdout
// line is the summary; --each / --events add one line per send / delivery. Exit status 0 = ok,
// 1 = failed sends / expected count not reached / bad messages, 2 = bad usage or start failure.
//
// ali-ons specifics (read in node_modules/ali-ons/lib of 3.12.0):
// - `httpclient` is asserted even when `nameSrv` is given (an empty object does: it is only used
//   to fetch the name server list from `onsAddr`, an Aliyun URL, when `nameSrv` is absent -
//   so `nameSrv` must always be set, or the client would go to the internet).
// - Credentials are optional: without accessKey/secretKey no signature ext fields are sent.
// - `clientIP` defaults to the first non-loopback address (only used in the client id); set to
//   127.0.0.1 here.
// - Consumer: cluster mode (`isBroadcast: false`); `consumeFromWhere` defaults to
//   CONSUME_FROM_LAST_OFFSET, which for a group without a committed offset (readOffset -1)
//   starts at the queue's max offset; CONSUME_FROM_FIRST_OFFSET (used here) starts at 0.
// - Logs: warn/error to the console (stderr), nothing on disk; info/debug are dropped.
// - No auto-create: when the name server answers TOPIC_NOT_EXIST for the topic, send() throws
//   ("No topic route info in name server for the topic") instead of falling back to the TBW102
//   route as the Java and C++ producers do. So `create-topic` sends UPDATE_AND_CREATE_TOPIC (17,
//   what `mqadmin updateTopic` sends) to the broker through ali-ons' own remoting client, then
//   polls the name server until it routes the topic.
'use strict';

const path = require('path');

const repoRoot = path.resolve(__dirname, '..', '..');
const modulePath = path.join(repoRoot, 'target', 'interop', 'node', 'node_modules', 'ali-ons');
let ons;
try {
  ons = require(modulePath);
} catch (err) {
  process.stdout.write(JSON.stringify({ error: `cannot load ali-ons from ${modulePath} (run scripts/interop/install.sh): ${err.message}`, ok: false }) + '\n');
  process.exit(2);
}
const { Producer, Consumer, Message } = ons;

const CLIENT = 'node-ali-ons-3.12.0';
const BODY_RE = /^(.+):(\d+)$/;

function emit(obj) {
  const sorted = {};
  for (const k of Object.keys(obj).sort()) sorted[k] = obj[k];
  process.stdout.write(JSON.stringify(sorted) + '\n');
}

// stdout is a pipe: exit only once it has been written out.
function exitAfterFlush(code) {
  process.stdout.write('', () => process.exit(code));
  setTimeout(() => process.exit(code), 2000).unref();
}

function usage(msg) {
  process.stderr.write(`ali_ons.js: ${msg}\n` +
    'usage: ali_ons.js produce --namesrv ADDR --topic T --group PG --count N --prefix P [--tag TAG]\n' +
    '         [--start I] [--instance NAME] [--send-timeout-ms MS] [--max-failures K] [--each]\n' +
    '       ali_ons.js consume --namesrv ADDR --topic T --group G --timeout S [--expect N]\n' +
    '         [--idle-exit S] [--linger S] [--instance NAME] [--subscribe EXPR] [--expect-tag TAG]\n' +
    '         [--shutdown-timeout S] [--events]\n' +
    '       ali_ons.js create-topic --namesrv ADDR --broker ADDR --topic T [--queues N] [--wait S]\n');
  process.exit(2);
}

const SPEC = {
  'create-topic': {
    required: [ 'namesrv', 'broker', 'topic' ],
    values: { namesrv: 's', broker: 's', topic: 's', queues: 'i', wait: 'f' },
    flags: [],
    defaults: { queues: 8, wait: 40, instance: 'create-topic' },
  },
  produce: {
    required: [ 'namesrv', 'topic', 'group', 'count', 'prefix' ],
    values: { namesrv: 's', topic: 's', group: 's', count: 'i', tag: 's', prefix: 's', start: 'i', instance: 's', 'send-timeout-ms': 'i', 'max-failures': 'i', 'access-key': 's', 'secret-key': 's' },
    flags: [ 'each' ],
    defaults: { tag: '', start: 0, instance: null, 'send-timeout-ms': 3000, 'max-failures': 5, each: false },
  },
  consume: {
    required: [ 'namesrv', 'topic', 'group', 'timeout' ],
    values: { namesrv: 's', topic: 's', group: 's', expect: 'i', timeout: 'f', 'idle-exit': 'f', linger: 'f', instance: 's', subscribe: 's', 'expect-tag': 's', 'shutdown-timeout': 'f', threads: 'i', 'access-key': 's', 'secret-key': 's' },
    flags: [ 'events' ],
    defaults: { expect: 0, 'idle-exit': null, linger: 0, instance: null, subscribe: '*', 'expect-tag': null, 'shutdown-timeout': 20, threads: 4, events: false },
  },
};

function parseArgs(argv) {
  const cmd = argv[0];
  const spec = SPEC[cmd];
  if (!spec) usage(`unknown subcommand ${JSON.stringify(cmd)}`);
  const out = Object.assign({ cmd }, spec.defaults);
  for (let i = 1; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith('--')) usage(`unexpected argument ${a}`);
    const name = a.slice(2);
    if (spec.flags.includes(name)) {
      out[name] = true;
      continue;
    }
    const type = spec.values[name];
    if (!type) usage(`unknown option ${a}`);
    const v = argv[++i];
    if (v === undefined) usage(`${a} needs a value`);
    if (type === 's') {
      out[name] = v;
    } else {
      const n = type === 'i' ? parseInt(v, 10) : parseFloat(v);
      if (Number.isNaN(n)) usage(`${a} needs a number, got ${v}`);
      out[name] = n;
    }
  }
  for (const r of spec.required) {
    if (out[r] === undefined) usage(`--${r} is required`);
  }
  return out;
}

// Options shared by producer and consumer: plain name server, loopback id, credentials if given.
function baseOptions(args) {
  const opts = {
    httpclient: {},
    nameSrv: args.namesrv,
    clientIP: '127.0.0.1',
    logger: {
      info() {},
      debug() {},
      warn(...a) { console.warn('[ali-ons warn]', ...a); },
      error(...a) { console.error('[ali-ons error]', ...a); },
    },
  };
  if (args.instance) opts.instanceName = args.instance;
  // ACL 1.0: ali-ons signs every request when both are given (--access-key, --secret-key).
  if (args['access-key']) {
    opts.accessKeyId = args['access-key'];
    opts.accessKeySecret = args['secret-key'] || '';
  }
  return opts;
}

function errText(err) {
  return `${err && err.name ? err.name : 'Error'}: ${err && err.message ? err.message : err}`;
}

async function produce(args) {
  const start = Date.now();
  const producer = new Producer(Object.assign(baseOptions(args), {
    producerGroup: args.group,
    sendMsgTimeout: args['send-timeout-ms'],
  }));
  producer.on('error', err => console.error('[producer error]', errText(err)));
  try {
    await producer.ready();
  } catch (err) {
    emit({ client: CLIENT, cmd: 'produce', error: `producer start: ${errText(err)}`, ok: false });
    return exitAfterFlush(2);
  }
  let sent = 0;
  let failed = 0;
  let attempted = 0;
  let firstError = null;
  const msgIds = new Set();
  for (let i = args.start; i < args.start + args.count; i++) {
    if (failed >= args['max-failures']) break;
    attempted++;
    const msg = new Message(args.topic, args.tag || null, `${args.prefix}:${i}`);
    msg.keys = [ `${args.prefix}-${i}` ];
    let result;
    try {
      result = await producer.send(msg);
    } catch (err) {
      failed++;
      const e = errText(err);
      if (firstError === null) firstError = e;
      if (args.each) emit({ event: 'send_failed', i, error: e });
      continue;
    }
    if (result.sendStatus === 'SEND_OK') {
      sent++;
      msgIds.add(result.msgId);
    } else {
      failed++;
      if (firstError === null) firstError = `send status ${result.sendStatus}`;
    }
    if (args.each) {
      emit({ event: 'sent', i, status: result.sendStatus, msg_id: result.msgId, offset: result.queueOffset, queue_id: result.messageQueue && result.messageQueue.queueId });
    }
  }
  try {
    await withTimeout(producer.close(), 10000, 'producer close');
  } catch (err) {
    if (firstError === null) firstError = `close: ${errText(err)}`;
  }
  emit({
    client: CLIENT,
    cmd: 'produce',
    count: args.count,
    attempted,
    sent,
    failed: failed + (args.count - attempted),
    distinct_msg_ids: msgIds.size,
    first_error: firstError,
    elapsed_s: (Date.now() - start) / 1000,
    ok: sent === args.count,
  });
  exitAfterFlush(sent === args.count ? 0 : 1);
}

// UPDATE_AND_CREATE_TOPIC to the broker, then wait until the name server routes the topic.
async function createTopic(args) {
  const start = Date.now();
  const RemotingCommand = require(path.join(modulePath, 'lib', 'protocol', 'command', 'remoting_command'));
  const producer = new Producer(Object.assign(baseOptions(args), { producerGroup: 'FERROMQ_INTEROP_ADMIN' }));
  producer.on('error', err => console.error('[producer error]', errText(err)));
  const result = { client: CLIENT, cmd: 'create-topic', topic: args.topic, broker: args.broker, queues: args.queues };
  try {
    await producer.ready();
    const client = producer._mqClient;
    const request = RemotingCommand.createRequestCommand(17, {
      topic: args.topic,
      defaultTopic: 'TBW102',
      readQueueNums: args.queues,
      writeQueueNums: args.queues,
      perm: 6,
      topicFilterType: 'SINGLE_TAG',
      topicSysFlag: 0,
      order: false,
    });
    const response = await client.invoke(args.broker, request, 5000);
    result.create_code = response.code;
    result.create_remark = response.remark;
    if (response.code !== 0) {
      throw new Error(`UPDATE_AND_CREATE_TOPIC answered code ${response.code}: ${response.remark}`);
    }
    let lastError = null;
    for (;;) {
      try {
        const route = await client.getTopicRouteInfoFromNameServer(args.topic, 3000);
        if (route && route.queueDatas && route.queueDatas.length) {
          result.route_queue_datas = route.queueDatas;
          break;
        }
        lastError = 'empty route';
      } catch (err) {
        lastError = errText(err);
      }
      if (Date.now() - start > args.wait * 1000) {
        throw new Error(`the name server did not route ${args.topic} within ${args.wait} s after the broker created it (last: ${lastError})`);
      }
      await new Promise(r => setTimeout(r, 200));
    }
    result.ok = true;
  } catch (err) {
    result.ok = false;
    result.error = errText(err);
  }
  result.elapsed_s = (Date.now() - start) / 1000;
  try {
    await withTimeout(producer.close(), 5000, 'producer close');
  } catch (_) {
    // the result is what matters
  }
  emit(result);
  exitAfterFlush(result.ok ? 0 : 1);
}

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

function consume(args) {
  const start = Date.now();
  const st = {
    received: 0,
    bodies: new Set(),
    byPrefix: {},
    keyMismatches: 0,
    tagMismatches: 0,
    badBodies: 0,
    examples: [],
    firstMsg: null,
    lastMsg: null,
  };
  let stopping = false;
  let reason = 'timeout';
  let reachedAt = null;

  const consumer = new Consumer(Object.assign(baseOptions(args), {
    consumerGroup: args.group,
    isBroadcast: false,
    consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET',
  }));
  consumer.on('error', err => console.error('[consumer error]', errText(err)));

  consumer.subscribe(args.topic, args.subscribe, async msg => {
    const now = Date.now();
    const body = msg.body ? msg.body.toString('utf8') : '';
    const key = msg.keys === undefined ? null : msg.keys;
    const tag = msg.tags === undefined ? null : msg.tags;
    st.received++;
    if (st.firstMsg === null) st.firstMsg = now;
    st.lastMsg = now;
    let problem = null;
    const m = BODY_RE.exec(body);
    let prefix = '?';
    if (!m) {
      st.badBodies++;
      problem = 'bad body';
    } else {
      prefix = m[1];
      const expectedKey = `${m[1]}-${m[2]}`;
      if (key !== expectedKey) {
        st.keyMismatches++;
        problem = `key ${JSON.stringify(key)}, expected ${JSON.stringify(expectedKey)}`;
      }
      if (args['expect-tag'] !== null && tag !== args['expect-tag']) {
        st.tagMismatches++;
        problem = (problem ? problem + '; ' : '') + `tag ${JSON.stringify(tag)}, expected ${JSON.stringify(args['expect-tag'])}`;
      }
    }
    const stats = st.byPrefix[prefix] || (st.byPrefix[prefix] = { received: 0, distinct: 0 });
    stats.received++;
    if (!st.bodies.has(body)) {
      st.bodies.add(body);
      stats.distinct++;
    }
    if (problem && st.examples.length < 5) st.examples.push({ body, key, tag, problem });
    if (args.events) {
      emit({ event: 'msg', body, key, tag, queue_id: msg.queueId, queue_offset: msg.queueOffset, reconsume_times: msg.reconsumeTimes, msg_id: msg.msgId });
    }
  });

  consumer.ready().then(() => {
    if (args.events) emit({ event: 'started', instance: args.instance, after_s: (Date.now() - start) / 1000 });
  }, err => {
    emit({ client: CLIENT, cmd: 'consume', error: `push consumer start: ${errText(err)}`, ok: false });
    exitAfterFlush(2);
  });

  const summary = shutdownS => {
    const distinct = st.bodies.size;
    const clean = st.keyMismatches === 0 && st.tagMismatches === 0 && st.badBodies === 0;
    const reached = args.expect <= 0 || distinct >= args.expect;
    return {
      client: CLIENT,
      cmd: 'consume',
      instance: args.instance,
      group: args.group,
      topic: args.topic,
      received: st.received,
      distinct,
      duplicates: st.received - distinct,
      expected: args.expect,
      key_mismatches: st.keyMismatches,
      tag_mismatches: st.tagMismatches,
      bad_bodies: st.badBodies,
      examples: st.examples,
      by_prefix: st.byPrefix,
      elapsed_s: (Date.now() - start) / 1000,
      first_msg_s: st.firstMsg === null ? null : (st.firstMsg - start) / 1000,
      exit_reason: reason,
      shutdown_s: shutdownS,
      ok: clean && reached && reason !== 'timeout',
    };
  };

  const stop = async why => {
    if (stopping) return;
    stopping = true;
    reason = why;
    clearInterval(ticker);
    const t0 = Date.now();
    let shutdownError = null;
    try {
      // close() persists every queue's offset (UPDATE_CONSUMER_OFFSET) and unregisters.
      await withTimeout(consumer.close(), args['shutdown-timeout'] * 1000, 'consumer close');
    } catch (err) {
      shutdownError = errText(err);
    }
    const s = summary(shutdownError ? null : (Date.now() - t0) / 1000);
    if (shutdownError) {
      s.shutdown_error = shutdownError;
      s.ok = false;
    }
    emit(s);
    // The consumer's inner producer keeps channels open: exit explicitly.
    exitAfterFlush(s.ok ? 0 : 1);
  };

  process.on('SIGTERM', () => stop('signal'));
  process.on('SIGINT', () => stop('signal'));

  const ticker = setInterval(() => {
    const now = Date.now();
    if (args.expect > 0 && reachedAt === null && st.bodies.size >= args.expect) reachedAt = now;
    if (reachedAt !== null && now - reachedAt >= args.linger * 1000) return stop('expected');
    const since = st.lastMsg === null ? start : st.lastMsg;
    if (args['idle-exit'] !== null && now - since >= args['idle-exit'] * 1000) return stop('idle');
    if (now - start >= args.timeout * 1000) return stop(reachedAt !== null ? 'expected' : 'timeout');
  }, 50);
}

const args = parseArgs(process.argv.slice(2));
if (args.cmd === 'produce') {
  produce(args).catch(err => {
    emit({ client: CLIENT, cmd: 'produce', error: errText(err), ok: false });
    exitAfterFlush(2);
  });
} else if (args.cmd === 'create-topic') {
  createTopic(args).catch(err => {
    emit({ client: CLIENT, cmd: 'create-topic', error: errText(err), ok: false });
    exitAfterFlush(2);
  });
} else {
  consume(args);
}
