package ferromq.interop;

import com.alibaba.fastjson.JSONObject;
import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.ClientConfig;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.RPCHook;

/**
 * The Java interop driver of ferromq: the official RocketMQ remoting client (4.9.x or 5.x, the
 * same source compiles against both) driven by crates/cli/tests/interop_java.rs.
 *
 * <p>Usage (classpath from scripts/interop/install-java.sh):
 *
 * <pre>
 *   java -cp CLASSES:CLASSPATH ferromq.interop.Driver [global flags] serve
 *       reads one command per stdin line ("produce --topic T ...") until EOF or "quit";
 *   java -cp ... ferromq.interop.Driver [global flags] COMMAND [flags]
 *       runs one command.
 *
 * Global flags (before the command):
 *   --namesrv HOST:PORT        name server (default 127.0.0.1:9876)
 *   --access-key K --secret-key S
 *                              sign every request with AclClientRPCHook (ACL 1.0 style)
 *   --tls                      connect with TLS (-Dtls.enable=true and ClientConfig.useTLS)
 *
 * Commands (flags in any order; every reply is one JSON object with "seq", "cmd", "ok"):
 *   produce --topic T --group G --count N [--mode sync|async|oneway|batch|orderly]
 *           [--prefix P] [--tag TAG] [--prop K=V] [--delay LEVEL] [--shards S]
 *       key "P-i", body "P:i", user property idx=i; orderly: shard i % S goes to queue
 *       (shard % queues) through a MessageQueueSelector. The reply's "sample" lists the
 *       first 10 sync sends (msg_id, offset_msg_id, queue, offset, broker).
 *   push-start --name N --topic T --group G [--expr TAGS] [--orderly] [--broadcast]
 *           [--fail-all] [--max-reconsume K] [--sleep-ms MS] [--persist-ms MS] [--threads T]
 *       a DefaultMQPushConsumer; each delivery is an event {"event":"msg","consumer":N,...};
 *       --fail-all answers RECONSUME_LATER (delay level 1) / SUSPEND_CURRENT_QUEUE_A_MOMENT.
 *   push-stop --name N           shuts it down, reply has "delivered".
 *   lite-pull --topic T --group G --expect N [--assign] [--seek-queue Q --seek-offset O]
 *           [--timeout S] [--expr TAGS] [--linger-ms MS]
 *       a DefaultLitePullConsumer (autoCommit off): polls until N messages, commitSync(),
 *       reports committed(mq) of every queue, waits --linger-ms, shuts down.
 *   pull-open --name N --group G --topic T [--register]
 *   pull-update --name N --queue Q --offset O    updateConsumeOffset (memory only)
 *   pull-persist --name N          persistConsumerOffset(): the reply says whether it threw
 *   pull-persist-queue --name N --queue Q        OffsetStore.persist(mq) (also swallows)
 *   pull-to-broker --name N --queue Q --offset O updateConsumeOffsetToBroker (not one-way)
 *   pull-fetch --name N --queue Q [--memory]     fetchConsumeOffset(mq, fromStore)
 *   pull-read --name N --queue Q --offset O --max M
 *   pull-close --name N
 *   tx --topic T --group G --count N --outcome commit|rollback|unknown
 *           [--check commit|rollback] [--prefix P] [--wait-checks C] [--timeout S]
 *       a TransactionMQProducer; executeLocalTransaction answers --outcome, the check-back
 *       answers --check (event {"event":"check",...}); waits for C check-backs.
 *   mqadmin ARGS...              runs MQAdminStartup.main0 in this JVM, capturing its output:
 *       reply {"stdout","stderr"}.
 *   sleep --ms MS | quit
 * </pre>
 *
 * <p>stdout carries JSON lines only (client logs go to -Drocketmq.client.logRoot).
 */
public final class Driver {
    private static final PrintStream OUT = System.out;
    private static final Object PRINT_LOCK = new Object();
    /** Bound on messages one command sends or waits for. */
    private static final int MAX_COUNT = 100_000;
    /** Bound on the seconds one command waits. */
    private static final int MAX_TIMEOUT_S = 600;

    private String namesrv = "127.0.0.1:9876";
    private RPCHook hook;
    private boolean tls;
    private int seq;
    private final Map<String, DefaultMQPushConsumer> pushConsumers = new HashMap<>();
    private final Map<String, AtomicInteger> pushCounts = new HashMap<>();
    private final Map<String, DefaultMQPullConsumer> pullConsumers = new HashMap<>();

    public static void main(String[] args) {
        Driver driver = new Driver();
        int i = 0;
        while (i < args.length && args[i].startsWith("--")) {
            switch (args[i]) {
                case "--namesrv": driver.namesrv = args[++i]; break;
                case "--access-key": {
                    if (i + 3 >= args.length || !"--secret-key".equals(args[i + 2])) {
                        usage("--access-key K needs --secret-key S right after it");
                    }
                    String ak = args[i + 1];
                    String sk = args[i + 3];
                    i += 3;
                    driver.hook = new AclClientRPCHook(new SessionCredentials(ak, sk));
                    break;
                }
                case "--tls":
                    driver.tls = true;
                    System.setProperty("tls.enable", "true");
                    break;
                default: usage("unknown global flag " + args[i]);
            }
            i++;
        }
        if (i >= args.length) usage("no command");
        if ("serve".equals(args[i])) {
            driver.serve();
        } else {
            String[] rest = new String[args.length - i];
            System.arraycopy(args, i, rest, 0, rest.length);
            boolean ok = driver.run(rest);
            driver.closeAll();
            System.exit(ok ? 0 : 1);
        }
    }

    private static void usage(String why) {
        emit(obj("cmd", "usage", "ok", false, "error", why));
        System.err.println("usage: Driver [--namesrv H:P] [--access-key K --secret-key S] [--tls] "
                + "serve|COMMAND [flags]  (see the class comment in Driver.java)");
        System.exit(2);
    }

    private void serve() {
        emit(obj("event", "ready", "version", clientVersion()));
        try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
            String line;
            while ((line = in.readLine()) != null) {
                line = line.trim();
                if (line.isEmpty()) continue;
                if ("quit".equals(line)) break;
                run(line.split("\\s+"));
            }
        } catch (Exception e) {
            emit(obj("event", "stdin_error", "error", e.toString()));
        }
        closeAll();
        emit(obj("event", "bye"));
        System.exit(0);
    }

    private static String clientVersion() {
        try {
            Class<?> c = Class.forName("org.apache.rocketmq.common.MQVersion");
            Object v = c.getField("CURRENT_VERSION").get(null);
            Method m = c.getMethod("getVersionDesc", int.class);
            return String.valueOf(m.invoke(null, v));
        } catch (Exception e) {
            return "unknown";
        }
    }

    /** Runs one command; emits exactly one reply line carrying "seq". */
    private boolean run(String[] words) {
        int mySeq = ++seq;
        String cmd = words[0];
        JSONObject reply;
        try {
            Args a = "mqadmin".equals(cmd) ? null : new Args(words);
            switch (cmd) {
                case "produce": reply = produce(a); break;
                case "push-start": reply = pushStart(a); break;
                case "push-stop": reply = pushStop(a); break;
                case "lite-pull": reply = litePull(a); break;
                case "pull-open": reply = pullOpen(a); break;
                case "pull-update": reply = pullUpdate(a); break;
                case "pull-persist": reply = pullPersist(a); break;
                case "pull-persist-queue": reply = pullPersistQueue(a); break;
                case "pull-to-broker": reply = pullToBroker(a); break;
                case "pull-fetch": reply = pullFetch(a); break;
                case "pull-read": reply = pullRead(a); break;
                case "pull-close": reply = pullClose(a); break;
                case "tx": reply = transactions(a); break;
                case "mqadmin": reply = mqadmin(words); break;
                case "sleep":
                    Thread.sleep(Math.min(a.intOr("ms", 0), MAX_TIMEOUT_S * 1000));
                    reply = obj("ok", true);
                    break;
                default: reply = obj("ok", false, "error", "unknown command " + cmd);
            }
        } catch (Throwable e) {
            reply = obj("ok", false, "error", describe(e));
        }
        reply.put("seq", mySeq);
        reply.put("cmd", cmd);
        emit(reply);
        return Boolean.TRUE.equals(reply.get("ok"));
    }

    // ------------------------------------------------------------------------------------------
    // Producer

    private <T extends ClientConfig> T configure(T client, String instance) {
        client.setNamesrvAddr(namesrv);
        client.setUseTLS(tls);
        client.setInstanceName(instance);
        return client;
    }

    private JSONObject produce(Args a) throws Exception {
        String topic = a.req("topic");
        int count = a.count("count");
        String mode = a.or("mode", "sync");
        String prefix = a.or("prefix", "m");
        int shards = a.intOr("shards", 4);
        DefaultMQProducer producer = configure(new DefaultMQProducer(a.or("group", "PG_" + prefix), hook),
                "producer-" + prefix + "-" + System.nanoTime());
        producer.setSendMsgTimeout(10_000);
        producer.start();
        int sent = 0;
        int failed = 0;
        String firstError = null;
        Map<String, Integer> queueOfShard = new LinkedHashMap<>();
        Set<String> msgIds = new TreeSet<>();
        List<JSONObject> sample = new ArrayList<>();
        try {
            if ("batch".equals(mode)) {
                int batch = a.intOr("batch-size", 32);
                for (int start = 0; start < count; start += batch) {
                    List<Message> msgs = new ArrayList<>();
                    for (int i = start; i < Math.min(count, start + batch); i++) msgs.add(message(a, topic, prefix, i));
                    try {
                        SendResult r = producer.send(msgs);
                        if (r.getSendStatus().name().equals("SEND_OK")) {
                            sent += msgs.size();
                            for (String id : r.getMsgId().split(",")) msgIds.add(id);
                        } else {
                            failed += msgs.size();
                            if (firstError == null) firstError = "status " + r.getSendStatus();
                        }
                    } catch (Exception e) {
                        failed += msgs.size();
                        if (firstError == null) firstError = describe(e);
                    }
                }
            } else if ("async".equals(mode)) {
                CountDownLatch done = new CountDownLatch(count);
                AtomicInteger ok = new AtomicInteger();
                AtomicReference<String> err = new AtomicReference<>();
                Set<String> ids = ConcurrentHashMap.newKeySet();
                for (int i = 0; i < count; i++) {
                    producer.send(message(a, topic, prefix, i), new SendCallback() {
                        @Override public void onSuccess(SendResult r) {
                            ok.incrementAndGet();
                            ids.add(r.getMsgId());
                            done.countDown();
                        }
                        @Override public void onException(Throwable e) {
                            err.compareAndSet(null, describe(e));
                            done.countDown();
                        }
                    });
                }
                if (!done.await(a.intOr("timeout", 120), TimeUnit.SECONDS)) {
                    firstError = "async callbacks missing after timeout: " + done.getCount();
                }
                sent = ok.get();
                failed = count - sent;
                msgIds.addAll(ids);
                if (firstError == null) firstError = err.get();
            } else {
                for (int i = 0; i < count; i++) {
                    Message msg = message(a, topic, prefix, i);
                    try {
                        switch (mode) {
                            case "oneway":
                                producer.sendOneway(msg);
                                sent++;
                                break;
                            case "orderly": {
                                int shard = i % shards;
                                SendResult r = producer.send(msg, (mqs, m, arg) -> mqs.get((Integer) arg % mqs.size()), shard);
                                msgIds.add(r.getMsgId());
                                Integer prev = queueOfShard.put(String.valueOf(shard), r.getMessageQueue().getQueueId());
                                if (prev != null && prev != r.getMessageQueue().getQueueId()) {
                                    throw new IllegalStateException("shard " + shard + " moved queues");
                                }
                                sent++;
                                break;
                            }
                            case "sync": {
                                SendResult r = producer.send(msg);
                                msgIds.add(r.getMsgId());
                                if (sent < 10) {
                                    sample.add(obj("i", i, "msg_id", r.getMsgId(), "offset_msg_id", r.getOffsetMsgId(),
                                            "queue", r.getMessageQueue().getQueueId(), "offset", r.getQueueOffset(),
                                            "broker", r.getMessageQueue().getBrokerName()));
                                }
                                sent++;
                                break;
                            }
                            default: throw new IllegalArgumentException("unknown --mode " + mode);
                        }
                    } catch (IllegalArgumentException e) {
                        throw e;
                    } catch (Exception e) {
                        failed++;
                        if (firstError == null) firstError = describe(e);
                    }
                }
            }
        } finally {
            producer.shutdown();
        }
        return obj("ok", failed == 0, "sent", sent, "failed", failed, "first_error", firstError,
                "distinct_msg_ids", msgIds.size(), "queue_of_shard", queueOfShard, "sample", sample);
    }

    private static Message message(Args a, String topic, String prefix, int i) {
        Message msg = new Message(topic, a.or("tag", "TA"), prefix + "-" + i,
                (prefix + ":" + i).getBytes(StandardCharsets.UTF_8));
        msg.putUserProperty("idx", String.valueOf(i));
        for (String kv : a.all("prop")) {
            int eq = kv.indexOf('=');
            msg.putUserProperty(kv.substring(0, eq), kv.substring(eq + 1));
        }
        int delay = a.intOr("delay", 0);
        if (delay > 0) msg.setDelayTimeLevel(delay);
        return msg;
    }

    // ------------------------------------------------------------------------------------------
    // Push consumer

    private JSONObject pushStart(Args a) throws Exception {
        String name = a.req("name");
        if (pushConsumers.containsKey(name)) throw new IllegalArgumentException("consumer " + name + " exists");
        DefaultMQPushConsumer consumer = configure(
                new DefaultMQPushConsumer(a.req("group"), hook, new AllocateMessageQueueAveragely()),
                "push-" + name);
        consumer.subscribe(a.req("topic"), a.or("expr", "*"));
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setPersistConsumerOffsetInterval(a.intOr("persist-ms", 1000));
        consumer.setMaxReconsumeTimes(a.intOr("max-reconsume", 16));
        int threads = a.intOr("threads", 4);
        consumer.setConsumeThreadMin(threads);
        consumer.setConsumeThreadMax(threads);
        if (a.flag("broadcast")) setEnum(consumer, "setMessageModel", "BROADCASTING");
        boolean failAll = a.flag("fail-all");
        int sleepMs = a.intOr("sleep-ms", 0);
        AtomicInteger delivered = new AtomicInteger();
        if (a.flag("orderly")) {
            consumer.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                for (MessageExt m : msgs) deliver(name, m, delivered, sleepMs);
                return failAll ? ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT : ConsumeOrderlyStatus.SUCCESS;
            });
        } else {
            consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt m : msgs) deliver(name, m, delivered, sleepMs);
                if (failAll) {
                    ctx.setDelayLevelWhenNextConsume(1);
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
        }
        consumer.start();
        pushConsumers.put(name, consumer);
        pushCounts.put(name, delivered);
        return obj("ok", true, "name", name);
    }

    private static void deliver(String consumer, MessageExt m, AtomicInteger delivered, int sleepMs) {
        delivered.incrementAndGet();
        JSONObject e = msgJson(m);
        e.put("event", "msg");
        e.put("consumer", consumer);
        e.put("recv_ms", System.currentTimeMillis());
        emit(e);
        if (sleepMs > 0) {
            try {
                Thread.sleep(sleepMs);
            } catch (InterruptedException ignored) {
                Thread.currentThread().interrupt();
            }
        }
    }

    private JSONObject pushStop(Args a) {
        String name = a.req("name");
        DefaultMQPushConsumer consumer = pushConsumers.remove(name);
        if (consumer == null) throw new IllegalArgumentException("no consumer " + name);
        consumer.shutdown();
        return obj("ok", true, "name", name, "delivered", pushCounts.remove(name).get());
    }

    // ------------------------------------------------------------------------------------------
    // Lite pull consumer

    private JSONObject litePull(Args a) throws Exception {
        String topic = a.req("topic");
        int expect = a.count("expect");
        long deadline = System.currentTimeMillis() + 1000L * Math.min(a.intOr("timeout", 60), MAX_TIMEOUT_S);
        DefaultLitePullConsumer consumer = configure(new DefaultLitePullConsumer(a.req("group"), hook),
                "lite-" + a.req("group") + "-" + System.nanoTime());
        consumer.setAutoCommit(false);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setPollTimeoutMillis(1000);
        consumer.setPersistConsumerOffsetInterval(1000);
        List<MessageQueue> queues = new ArrayList<>();
        boolean assign = a.flag("assign");
        MessageQueue seekQueue = null;
        if (assign) {
            // Assign (and pause the queue to seek) BEFORE start, so that no pull task of that
            // queue runs before the seek. DefaultLitePullConsumerImpl.seek (4.9.8) cancels the
            // queue's running pull task and stores the seek offset, but a task that already
            // passed its cancelled/paused checks can still take the seek offset in
            // nextPullOffset and then return as cancelled: the seek is lost and the new task
            // pulls from the old pull offset. A task paused from its first run never reaches
            // nextPullOffset, so the seek below cannot race.
            queues.addAll(probeQueues(topic));
            queues.sort(null);
            consumer.assign(queues);
            if (a.has("seek-queue")) {
                seekQueue = queueById(queues, a.intOr("seek-queue", 0));
                consumer.pause(Collections.singletonList(seekQueue));
            }
        } else {
            consumer.subscribe(topic, a.or("expr", "*"));
        }
        consumer.start();
        int received = 0;
        JSONObject committed = new JSONObject(true);
        try {
            if (!assign) {
                queues.addAll(consumer.fetchMessageQueues(topic));
                queues.sort(null);
            }
            if (seekQueue != null) {
                consumer.seek(seekQueue, Long.parseLong(a.req("seek-offset")));
                consumer.resume(Collections.singletonList(seekQueue));
            }
            while (received < expect && System.currentTimeMillis() < deadline) {
                for (MessageExt m : consumer.poll(1000)) {
                    received++;
                    JSONObject e = msgJson(m);
                    e.put("event", "msg");
                    e.put("consumer", "lite");
                    emit(e);
                }
            }
            consumer.commitSync();
            for (MessageQueue mq : queues) {
                committed.put(String.valueOf(mq.getQueueId()), consumer.committed(mq));
            }
            // 4.9.x commitSync only updates memory: the offsets reach the broker on the
            // client's persist timer (first run 10 s after start) or one-way at shutdown.
            Thread.sleep(Math.min(a.intOr("linger-ms", 0), MAX_TIMEOUT_S * 1000));
        } finally {
            consumer.shutdown();
        }
        return obj("ok", received >= expect, "received", received, "committed", committed);
    }

    /** The topic's queues, read by a short-lived client of its own (a lite pull consumer can
     *  only read them once started, and assign-before-start needs them earlier). */
    private Collection<MessageQueue> probeQueues(String topic) throws Exception {
        DefaultMQProducer probe = configure(new DefaultMQProducer("PG_probe_" + System.nanoTime(), hook),
                "probe-" + System.nanoTime());
        probe.start();
        try {
            return probe.fetchPublishMessageQueues(topic);
        } finally {
            probe.shutdown();
        }
    }

    private static MessageQueue queueById(Collection<MessageQueue> queues, int id) {
        for (MessageQueue mq : queues) if (mq.getQueueId() == id) return mq;
        throw new IllegalArgumentException("no queue " + id + " in " + queues);
    }

    // ------------------------------------------------------------------------------------------
    // DefaultMQPullConsumer (the seed scenario)

    private JSONObject pullOpen(Args a) throws Exception {
        String name = a.req("name");
        String topic = a.req("topic");
        DefaultMQPullConsumer consumer = configure(new DefaultMQPullConsumer(a.req("group"), hook), "pull-" + name);
        if (a.flag("register")) {
            Set<String> topics = new TreeSet<>();
            topics.add(topic);
            consumer.setRegisterTopics(topics);
        }
        consumer.start();
        pullConsumers.put(name, consumer);
        List<Integer> ids = new ArrayList<>();
        for (MessageQueue mq : consumer.fetchSubscribeMessageQueues(topic)) ids.add(mq.getQueueId());
        ids.sort(null);
        return obj("ok", true, "queues", ids);
    }

    private DefaultMQPullConsumer pull(Args a) {
        DefaultMQPullConsumer c = pullConsumers.get(a.req("name"));
        if (c == null) throw new IllegalArgumentException("no pull consumer " + a.req("name"));
        return c;
    }

    private MessageQueue pullQueue(DefaultMQPullConsumer c, Args a) throws Exception {
        String topic = a.or("topic", null);
        if (topic == null) {
            Set<String> topics = c.getRegisterTopics();
            topic = topics.isEmpty() ? null : topics.iterator().next();
        }
        if (topic == null) throw new IllegalArgumentException("--topic needed");
        return queueById(c.fetchSubscribeMessageQueues(topic), a.intOr("queue", 0));
    }

    private JSONObject pullUpdate(Args a) throws Exception {
        DefaultMQPullConsumer c = pull(a);
        c.updateConsumeOffset(pullQueue(c, a), Long.parseLong(a.req("offset")));
        return obj("ok", true);
    }

    private JSONObject pullPersist(Args a) {
        DefaultMQPullConsumer c = pull(a);
        try {
            c.getDefaultMQPullConsumerImpl().persistConsumerOffset();
            return obj("ok", true, "threw", false);
        } catch (Throwable e) {
            return obj("ok", true, "threw", true, "error", describe(e));
        }
    }

    private JSONObject pullPersistQueue(Args a) throws Exception {
        DefaultMQPullConsumer c = pull(a);
        MessageQueue mq = pullQueue(c, a);
        try {
            c.getOffsetStore().persist(mq);
            return obj("ok", true, "threw", false);
        } catch (Throwable e) {
            return obj("ok", true, "threw", true, "error", describe(e));
        }
    }

    private JSONObject pullToBroker(Args a) throws Exception {
        DefaultMQPullConsumer c = pull(a);
        MessageQueue mq = pullQueue(c, a);
        long offset = Long.parseLong(a.req("offset"));
        try {
            c.getOffsetStore().updateConsumeOffsetToBroker(mq, offset, false);
            return obj("ok", true, "threw", false);
        } catch (Throwable e) {
            return obj("ok", true, "threw", true, "error", describe(e));
        }
    }

    private JSONObject pullFetch(Args a) throws Exception {
        DefaultMQPullConsumer c = pull(a);
        MessageQueue mq = pullQueue(c, a);
        long offset = c.fetchConsumeOffset(mq, !a.flag("memory"));
        return obj("ok", true, "offset", offset);
    }

    private JSONObject pullRead(Args a) throws Exception {
        DefaultMQPullConsumer c = pull(a);
        MessageQueue mq = pullQueue(c, a);
        PullResult r = c.pull(mq, a.or("expr", "*"), Long.parseLong(a.req("offset")), a.intOr("max", 32));
        List<JSONObject> msgs = new ArrayList<>();
        if (r.getMsgFoundList() != null) for (MessageExt m : r.getMsgFoundList()) msgs.add(msgJson(m));
        return obj("ok", true, "status", r.getPullStatus().name(), "next", r.getNextBeginOffset(),
                "min", r.getMinOffset(), "max", r.getMaxOffset(), "msgs", msgs);
    }

    private JSONObject pullClose(Args a) {
        DefaultMQPullConsumer c = pullConsumers.remove(a.req("name"));
        if (c == null) throw new IllegalArgumentException("no pull consumer " + a.req("name"));
        c.shutdown();
        return obj("ok", true);
    }

    // ------------------------------------------------------------------------------------------
    // Transactions

    private JSONObject transactions(Args a) throws Exception {
        String topic = a.req("topic");
        int count = a.count("count");
        String prefix = a.or("prefix", "t");
        LocalTransactionState outcome = txState(a.or("outcome", "commit"));
        LocalTransactionState check = txState(a.or("check", "commit"));
        int waitChecks = a.intOr("wait-checks", 0);
        AtomicInteger checks = new AtomicInteger();
        CountDownLatch checked = new CountDownLatch(waitChecks);
        Set<String> checkedKeys = ConcurrentHashMap.newKeySet();
        TransactionMQProducer producer = configure(new TransactionMQProducer(a.req("group"), hook),
                "tx-" + prefix + "-" + System.nanoTime());
        producer.setTransactionListener(new TransactionListener() {
            @Override public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                return outcome;
            }
            @Override public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                checks.incrementAndGet();
                if (checkedKeys.add(msg.getKeys())) checked.countDown();
                emit(obj("event", "check", "keys", msg.getKeys(), "topic", msg.getTopic(),
                        "answer", check.name(), "transaction_id", msg.getTransactionId()));
                return check;
            }
        });
        producer.start();
        int sent = 0;
        String firstError = null;
        List<String> states = new ArrayList<>();
        boolean allChecked;
        try {
            for (int i = 0; i < count; i++) {
                try {
                    TransactionSendResult r = producer.sendMessageInTransaction(message(a, topic, prefix, i), null);
                    states.add(String.valueOf(r.getLocalTransactionState()));
                    if (r.getSendStatus().name().equals("SEND_OK")) sent++;
                } catch (Exception e) {
                    if (firstError == null) firstError = describe(e);
                }
            }
            allChecked = checked.await(Math.min(a.intOr("timeout", 60), MAX_TIMEOUT_S), TimeUnit.SECONDS);
        } finally {
            producer.shutdown();
        }
        return obj("ok", sent == count && allChecked, "sent", sent, "first_error", firstError,
                "local_states", states, "checks", checks.get(), "checked_keys", new TreeSet<>(checkedKeys));
    }

    private static LocalTransactionState txState(String s) {
        switch (s) {
            case "commit": return LocalTransactionState.COMMIT_MESSAGE;
            case "rollback": return LocalTransactionState.ROLLBACK_MESSAGE;
            case "unknown": return LocalTransactionState.UNKNOW;
            default: throw new IllegalArgumentException("unknown transaction state " + s);
        }
    }

    // ------------------------------------------------------------------------------------------
    // mqadmin in this JVM

    private JSONObject mqadmin(String[] words) throws Exception {
        String[] args = new String[words.length - 1];
        System.arraycopy(words, 1, args, 0, args.length);
        for (int i = 0; i < args.length; i++) args[i] = args[i].replace("%20", " ");
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        PrintStream oldOut = System.out;
        PrintStream oldErr = System.err;
        Class<?> startup = Class.forName("org.apache.rocketmq.tools.command.MQAdminStartup");
        Method main0 = startup.getMethod("main0", String[].class, RPCHook.class);
        long started = System.currentTimeMillis();
        synchronized (PRINT_LOCK) {
            System.setOut(new PrintStream(out, true, "UTF-8"));
            System.setErr(new PrintStream(err, true, "UTF-8"));
            try {
                main0.invoke(null, args, hook);
            } catch (java.lang.reflect.InvocationTargetException e) {
                e.getCause().printStackTrace();
            } finally {
                System.setOut(oldOut);
                System.setErr(oldErr);
            }
        }
        return obj("ok", true, "stdout", out.toString("UTF-8"), "stderr", err.toString("UTF-8"),
                "elapsed_ms", System.currentTimeMillis() - started);
    }

    // ------------------------------------------------------------------------------------------
    // Helpers

    private void closeAll() {
        for (DefaultMQPushConsumer c : pushConsumers.values()) c.shutdown();
        for (DefaultMQPullConsumer c : pullConsumers.values()) c.shutdown();
        pushConsumers.clear();
        pullConsumers.clear();
    }

    /** Sets an enum-typed property whose enum class moved package between 4.x and 5.x. */
    @SuppressWarnings({"unchecked", "rawtypes"})
    private static void setEnum(Object target, String setter, String value) throws Exception {
        for (Method m : target.getClass().getMethods()) {
            if (m.getName().equals(setter) && m.getParameterCount() == 1 && m.getParameterTypes()[0].isEnum()) {
                m.invoke(target, Enum.valueOf((Class<Enum>) m.getParameterTypes()[0], value));
                return;
            }
        }
        throw new NoSuchMethodException(setter);
    }

    private static JSONObject msgJson(MessageExt m) {
        JSONObject e = new JSONObject(true);
        e.put("topic", m.getTopic());
        e.put("body", new String(m.getBody(), StandardCharsets.UTF_8));
        e.put("keys", m.getKeys());
        e.put("tags", m.getTags());
        e.put("queue", m.getQueueId());
        e.put("offset", m.getQueueOffset());
        e.put("reconsume", m.getReconsumeTimes());
        e.put("msg_id", m.getMsgId());
        e.put("born_ms", m.getBornTimestamp());
        e.put("store_ms", m.getStoreTimestamp());
        e.put("props", new JSONObject(new HashMap<>(m.getProperties())));
        return e;
    }

    private static String describe(Throwable e) {
        StringBuilder s = new StringBuilder(e.toString());
        Throwable c = e.getCause();
        for (int depth = 0; c != null && depth < 3; depth++, c = c.getCause()) s.append(" <- ").append(c);
        return s.toString();
    }

    static JSONObject obj(Object... kv) {
        JSONObject o = new JSONObject(true);
        for (int i = 0; i + 1 < kv.length; i += 2) o.put((String) kv[i], kv[i + 1]);
        return o;
    }

    static void emit(JSONObject o) {
        String line = o.toJSONString();
        synchronized (PRINT_LOCK) {
            OUT.println(line);
            OUT.flush();
        }
    }

    /** "--key value" flags (repeatable) and bare "--flag" switches. */
    private static final class Args {
        private final Map<String, List<String>> values = new HashMap<>();

        Args(String[] words) {
            for (int i = 1; i < words.length; i++) {
                if (!words[i].startsWith("--")) throw new IllegalArgumentException("unexpected word " + words[i]);
                String key = words[i].substring(2);
                String value = "";
                if (i + 1 < words.length && !words[i + 1].startsWith("--")) value = words[++i];
                values.computeIfAbsent(key, k -> new ArrayList<>()).add(value);
            }
        }

        boolean has(String k) { return values.containsKey(k); }
        boolean flag(String k) { return values.containsKey(k); }
        List<String> all(String k) { return values.getOrDefault(k, new ArrayList<>()); }
        String or(String k, String d) { return has(k) ? values.get(k).get(0) : d; }
        String req(String k) {
            if (!has(k) || values.get(k).get(0).isEmpty()) throw new IllegalArgumentException("--" + k + " is required");
            return values.get(k).get(0);
        }
        int intOr(String k, int d) { return has(k) ? Integer.parseInt(values.get(k).get(0)) : d; }
        int count(String k) {
            int n = Integer.parseInt(req(k));
            if (n < 0 || n > MAX_COUNT) throw new IllegalArgumentException("--" + k + " must be 0.." + MAX_COUNT);
            return n;
        }
    }
}
