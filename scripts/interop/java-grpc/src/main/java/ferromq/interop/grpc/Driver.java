package ferromq.interop.grpc;

import java.io.IOException;
import java.io.PrintStream;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientException;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;

/**
 * The Java gRPC interop driver of ferromq: the official RocketMQ 5.x gRPC client
 * (rocketmq-client-java) against ferromq's gRPC endpoint, driven by
 * crates/cli/tests/interop_java_grpc.rs. One command per run; stdout carries JSON lines only
 * (the client logs under -Drocketmq.log.root).
 *
 * <pre>
 *   java -cp CLASSES:CLASSPATH ferromq.interop.grpc.Driver --endpoints HOST:PORT COMMAND [flags]
 *
 *   produce --topic T --count N [--prefix P]
 *       a Producer sends N messages one at a time. Message i is FIFO (group
 *       "P-group-((i / 2) % 4)") when i is odd, NORMAL otherwise; tag "Tag(i % 3)", keys
 *       "P-key-i" and "P-alt-i", user properties index=i and kind=fifo|normal, body "P:i".
 *       One line per acknowledged send {"index","body","tag","keys","group","properties",
 *       "message_id"}, one {"index","error"} per failed send, then {"summary":{"sent","failed"}}.
 *   specials --topic T [--prefix P]
 *       a transactional Producer sends 3 DELAY messages (delivery 2.5 s after the send; body
 *       "P:delay:i") and 3 TRANSACTION messages: "P:commit:0" and "P:commit:1" committed,
 *       "P:rollback:0" rolled back. One line each {"body","kind","sent_ms","deliver_ms"?},
 *       then {"summary":{"sent"}}; a check-back (none expected) commits and prints {"check"}.
 *   simple --topic T --group G --count N [--timeout S]
 *       a SimpleConsumer (long polling 2 s) receives batches of 32 (invisible 20 s) and acks
 *       each message, until N came or S seconds (default 60) passed; then receives once more,
 *       which must find nothing. One line per message {"consumer","body","tag","keys",
 *       "properties","message_id","group","attempt"}, then {"summary":{"received","extra"}}.
 *   push --topic T --group G [--group G2 ...] --count N [--timeout S] [--threads K]
 *           [--fail-mod M] [--deliveries D]
 *       one PushConsumer per group, answering SUCCESS, or FAILURE for a message whose user
 *       property index is a multiple of M; a line per delivery as above with "result" (in the
 *       order the listener ran), until every group saw N distinct bodies and D deliveries
 *       (default N) or S seconds passed, then closes them (a close waits for the receives still held) and prints
 *       {"summary":{"groups":{G:{"deliveries","distinct"}},"consume_seconds","close_seconds"}}.
 * </pre>
 *
 * <p>Exit status 0 when the command did everything it was asked, 1 otherwise, 2 on bad usage.
 */
public final class Driver {
    private static final PrintStream OUT = System.out;
    /** Bound on the messages one command sends or waits for. */
    private static final int MAX_COUNT = 100_000;
    /** Bound on the seconds one command waits. */
    private static final int MAX_TIMEOUT_S = 600;
    /** FIFO message groups the producer spreads its FIFO messages over. */
    private static final int FIFO_GROUPS = 4;
    /** Messages one receive asks for. */
    private static final int RECEIVE_BATCH = 32;
    /** Invisibility of a received message. */
    private static final Duration INVISIBLE = Duration.ofSeconds(20);
    /** Long polling of the simple consumer. */
    private static final Duration AWAIT = Duration.ofSeconds(2);

    private Driver() {}

    public static void main(String[] args) {
        String endpoints = null;
        String command = null;
        Map<String, List<String>> flags = new LinkedHashMap<>();
        for (int i = 0; i < args.length; i++) {
            String arg = args[i];
            if (arg.startsWith("--")) {
                if (i + 1 >= args.length) {
                    usage("flag " + arg + " needs a value");
                }
                String value = args[++i];
                if (arg.equals("--endpoints")) {
                    endpoints = value;
                } else {
                    flags.computeIfAbsent(arg.substring(2), k -> new ArrayList<>()).add(value);
                }
            } else if (command == null) {
                command = arg;
            } else {
                usage("unexpected argument " + arg);
            }
        }
        if (endpoints == null || command == null) {
            usage("--endpoints and a command are required");
        }
        ClientConfiguration config = ClientConfiguration.newBuilder()
            .setEndpoints(endpoints)
            .enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(10))
            .build();
        boolean ok;
        try {
            switch (command) {
                case "produce":
                    ok = produce(config, flags);
                    break;
                case "simple":
                    ok = simple(config, flags);
                    break;
                case "specials":
                    ok = specials(config, flags);
                    break;
                case "push":
                    ok = push(config, flags);
                    break;
                default:
                    usage("unknown command " + command);
                    return;
            }
        } catch (Exception e) {
            OUT.println("{\"fatal\":" + quote(e.toString()) + "}");
            e.printStackTrace();
            ok = false;
        }
        OUT.flush();
        // The client's executor threads are not all daemons: leave without waiting for them.
        System.exit(ok ? 0 : 1);
    }

    private static boolean produce(ClientConfiguration config, Map<String, List<String>> flags)
            throws ClientException, IOException {
        String topic = required(flags, "topic");
        int count = bounded(flags, "count", -1, MAX_COUNT);
        String prefix = optional(flags, "prefix", "java");
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        int sent = 0;
        int failed = 0;
        try (Producer producer = provider.newProducerBuilder()
                .setClientConfiguration(config)
                .setTopics(topic)
                .build()) {
            for (int i = 0; i < count; i++) {
                boolean fifo = i % 2 == 1;
                String body = prefix + ":" + i;
                String tag = "Tag" + (i % 3);
                List<String> keys = List.of(prefix + "-key-" + i, prefix + "-alt-" + i);
                Map<String, String> properties = new TreeMap<>();
                properties.put("index", Integer.toString(i));
                properties.put("kind", fifo ? "fifo" : "normal");
                String group = fifo ? prefix + "-group-" + ((i / 2) % FIFO_GROUPS) : null;
                MessageBuilder builder = provider.newMessageBuilder()
                    .setTopic(topic)
                    .setBody(body.getBytes(StandardCharsets.UTF_8))
                    .setTag(tag)
                    .setKeys(keys.toArray(new String[0]));
                properties.forEach(builder::addProperty);
                if (group != null) {
                    builder.setMessageGroup(group);
                }
                Message message = builder.build();
                SendReceipt receipt;
                try {
                    receipt = producer.send(message);
                } catch (ClientException e) {
                    failed++;
                    OUT.println("{\"index\":" + i + ",\"error\":" + quote(e.toString()) + "}");
                    continue;
                }
                sent++;
                OUT.println("{\"index\":" + i
                    + ",\"body\":" + quote(body)
                    + ",\"tag\":" + quote(tag)
                    + ",\"keys\":" + array(keys)
                    + ",\"group\":" + (group == null ? "null" : quote(group))
                    + ",\"properties\":" + object(properties)
                    + ",\"message_id\":" + quote(receipt.getMessageId().toString()) + "}");
            }
        }
        OUT.println("{\"summary\":{\"sent\":" + sent + ",\"failed\":" + failed + "}}");
        return failed == 0;
    }

    private static boolean specials(ClientConfiguration config, Map<String, List<String>> flags)
            throws ClientException, IOException {
        String topic = required(flags, "topic");
        String prefix = optional(flags, "prefix", "java");
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        int sent = 0;
        try (Producer producer = provider.newProducerBuilder()
                .setClientConfiguration(config)
                .setTopics(topic)
                .setTransactionChecker(view -> {
                    OUT.println("{\"check\":" + quote(body(view)) + "}");
                    return TransactionResolution.COMMIT;
                })
                .build()) {
            for (int i = 0; i < 3; i++) {
                String body = prefix + ":delay:" + i;
                long now = System.currentTimeMillis();
                long at = now + 2_500;
                Message message = provider.newMessageBuilder()
                    .setTopic(topic)
                    .setBody(body.getBytes(StandardCharsets.UTF_8))
                    .setDeliveryTimestamp(at)
                    .build();
                producer.send(message);
                sent++;
                OUT.println("{\"body\":" + quote(body) + ",\"kind\":\"delay\",\"sent_ms\":" + now
                    + ",\"deliver_ms\":" + at + "}");
            }
            String[][] transactions = {{"commit", "0"}, {"commit", "1"}, {"rollback", "0"}};
            for (String[] t : transactions) {
                String body = prefix + ":" + t[0] + ":" + t[1];
                Message message = provider.newMessageBuilder()
                    .setTopic(topic)
                    .setBody(body.getBytes(StandardCharsets.UTF_8))
                    .build();
                Transaction transaction = producer.beginTransaction();
                producer.send(message, transaction);
                if (t[0].equals("commit")) {
                    transaction.commit();
                } else {
                    transaction.rollback();
                }
                sent++;
                OUT.println("{\"body\":" + quote(body) + ",\"kind\":" + quote(t[0])
                    + ",\"sent_ms\":" + System.currentTimeMillis() + "}");
            }
        }
        OUT.println("{\"summary\":{\"sent\":" + sent + "}}");
        return sent == 6;
    }

    private static boolean simple(ClientConfiguration config, Map<String, List<String>> flags)
            throws ClientException, IOException {
        String topic = required(flags, "topic");
        String group = required(flags, "group");
        int count = bounded(flags, "count", -1, MAX_COUNT);
        int timeout = bounded(flags, "timeout", 60, MAX_TIMEOUT_S);
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        int received = 0;
        int extra;
        try (SimpleConsumer consumer = provider.newSimpleConsumerBuilder()
                .setClientConfiguration(config)
                .setConsumerGroup(group)
                .setAwaitDuration(AWAIT)
                .setSubscriptionExpressions(Collections.singletonMap(topic, FilterExpression.SUB_ALL))
                .build()) {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(timeout);
            while (received < count && System.nanoTime() < deadline) {
                List<MessageView> batch;
                try {
                    batch = consumer.receive(RECEIVE_BATCH, INVISIBLE);
                } catch (ClientException e) {
                    // MESSAGE_NOT_FOUND is thrown as an exception by some releases.
                    if (!isNotFound(e)) {
                        throw e;
                    }
                    continue;
                }
                for (MessageView message : batch) {
                    consumer.ack(message);
                    received++;
                    OUT.println(line(group, message));
                }
            }
            extra = receiveOnceMore(consumer);
        }
        OUT.println("{\"summary\":{\"received\":" + received + ",\"extra\":" + extra + "}}");
        return received == count && extra == 0;
    }

    private static int receiveOnceMore(SimpleConsumer consumer) throws ClientException {
        try {
            return consumer.receive(RECEIVE_BATCH, INVISIBLE).size();
        } catch (ClientException e) {
            if (isNotFound(e)) {
                return 0;
            }
            throw e;
        }
    }

    private static boolean isNotFound(ClientException e) {
        return e.getClass().getSimpleName().equals("NotFoundException")
            || String.valueOf(e.getMessage()).contains("MESSAGE_NOT_FOUND");
    }

    private static boolean push(ClientConfiguration config, Map<String, List<String>> flags)
            throws ClientException, IOException, InterruptedException {
        String topic = required(flags, "topic");
        List<String> groups = flags.getOrDefault("group", List.of());
        if (groups.isEmpty()) {
            usage("--group is required");
        }
        int count = bounded(flags, "count", -1, MAX_COUNT);
        int timeout = bounded(flags, "timeout", 60, MAX_TIMEOUT_S);
        int threads = bounded(flags, "threads", 4, 64);
        int failMod = bounded(flags, "fail-mod", 0, MAX_COUNT);
        int wantDeliveries = bounded(flags, "deliveries", count, MAX_COUNT);
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        CountDownLatch done = new CountDownLatch(groups.size());
        Map<String, Set<String>> distinct = new ConcurrentHashMap<>();
        Map<String, AtomicInteger> deliveries = new ConcurrentHashMap<>();
        List<PushConsumer> consumers = new ArrayList<>();
        long started = System.nanoTime();
        double consumed;
        try {
            for (String group : groups) {
                Set<String> bodies = ConcurrentHashMap.newKeySet();
                distinct.put(group, bodies);
                AtomicInteger seen = new AtomicInteger();
                deliveries.put(group, seen);
                AtomicBoolean finished = new AtomicBoolean();
                consumers.add(provider.newPushConsumerBuilder()
                    .setClientConfiguration(config)
                    .setConsumerGroup(group)
                    .setConsumptionThreadCount(threads)
                    .setSubscriptionExpressions(
                        Collections.singletonMap(topic, FilterExpression.SUB_ALL))
                    .setMessageListener(message -> {
                        String body = body(message);
                        String index = message.getProperties().getOrDefault("index", "-1");
                        ConsumeResult result = failMod > 0 && Integer.parseInt(index) % failMod == 0
                            ? ConsumeResult.FAILURE : ConsumeResult.SUCCESS;
                        String text = line(group, message);
                        synchronized (OUT) {
                            OUT.println(text.substring(0, text.length() - 1)
                                + ",\"result\":" + quote(result.name()) + "}");
                        }
                        int total = seen.incrementAndGet();
                        bodies.add(body);
                        if (bodies.size() >= count && total >= wantDeliveries
                                && finished.compareAndSet(false, true)) {
                            done.countDown();
                        }
                        return result;
                    })
                    .build());
            }
            done.await(timeout, TimeUnit.SECONDS);
        } finally {
            consumed = (System.nanoTime() - started) / 1e9;
            closeAll(consumers);
        }
        double closed = (System.nanoTime() - started) / 1e9 - consumed;
        StringBuilder summary = new StringBuilder("{\"summary\":{\"groups\":{");
        boolean all = true;
        for (int i = 0; i < groups.size(); i++) {
            String group = groups.get(i);
            int got = distinct.get(group).size();
            all &= got == count;
            summary.append(i == 0 ? "" : ",").append(quote(group))
                .append(":{\"deliveries\":").append(deliveries.get(group).get())
                .append(",\"distinct\":").append(got).append('}');
        }
        summary.append("},\"consume_seconds\":").append(String.format("%.2f", consumed))
            .append(",\"close_seconds\":").append(String.format("%.2f", closed)).append("}}");
        synchronized (OUT) {
            OUT.println(summary);
        }
        return all;
    }

    /**
     * Closes the consumers side by side: each close waits for its receives still held by the
     * broker (up to the long polling the broker told it), so one after the other would add up.
     */
    private static void closeAll(List<PushConsumer> consumers) throws IOException {
        List<CompletableFuture<Void>> closing = new ArrayList<>();
        for (PushConsumer consumer : consumers) {
            closing.add(CompletableFuture.runAsync(() -> {
                try {
                    consumer.close();
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
            }));
        }
        try {
            CompletableFuture.allOf(closing.toArray(new CompletableFuture[0])).join();
        } catch (CompletionException e) {
            throw new IOException("closing a push consumer", e.getCause());
        }
    }

    private static String body(MessageView message) {
        ByteBuffer buffer = message.getBody().duplicate();
        byte[] bytes = new byte[buffer.remaining()];
        buffer.get(bytes);
        return new String(bytes, StandardCharsets.UTF_8);
    }

    private static String line(String consumer, MessageView message) {
        List<String> keys = new ArrayList<>(message.getKeys());
        Collections.sort(keys);
        return "{\"consumer\":" + quote(consumer)
            + ",\"body\":" + quote(body(message))
            + ",\"tag\":" + message.getTag().map(Driver::quote).orElse("null")
            + ",\"keys\":" + array(keys)
            + ",\"properties\":" + object(new TreeMap<>(message.getProperties()))
            + ",\"message_id\":" + quote(message.getMessageId().toString())
            + ",\"group\":" + message.getMessageGroup().map(Driver::quote).orElse("null")
            + ",\"attempt\":" + message.getDeliveryAttempt()
            + ",\"received_ms\":" + System.currentTimeMillis() + "}";
    }

    // -----------------------------------------------------------------------------------------
    // flags and JSON

    private static void usage(String why) {
        System.err.println("usage: Driver --endpoints HOST:PORT produce|simple|push [flags]: " + why);
        System.exit(2);
    }

    private static String required(Map<String, List<String>> flags, String name) {
        List<String> values = flags.get(name);
        if (values == null || values.size() != 1) {
            usage("--" + name + " is required once");
        }
        return values.get(0);
    }

    private static String optional(Map<String, List<String>> flags, String name, String fallback) {
        List<String> values = flags.get(name);
        return values == null ? fallback : values.get(values.size() - 1);
    }

    /** The integer flag `name` in 1..=max; `fallback` when absent (-1: required, 0: off). */
    private static int bounded(Map<String, List<String>> flags, String name, int fallback,
            int max) {
        String text = optional(flags, name, null);
        if (text == null) {
            if (fallback < 0) {
                usage("--" + name + " is required");
            }
            return fallback;
        }
        int value;
        try {
            value = Integer.parseInt(text);
        } catch (NumberFormatException e) {
            usage("--" + name + " is not a number: " + text);
            return fallback;
        }
        if (value < 1 || value > max) {
            usage("--" + name + " must be in 1.." + max);
        }
        return value;
    }

    private static String quote(String text) {
        StringBuilder out = new StringBuilder(text.length() + 2).append('"');
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            switch (c) {
                case '"':
                    out.append("\\\"");
                    break;
                case '\\':
                    out.append("\\\\");
                    break;
                case '\n':
                    out.append("\\n");
                    break;
                case '\r':
                    out.append("\\r");
                    break;
                case '\t':
                    out.append("\\t");
                    break;
                default:
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
            }
        }
        return out.append('"').toString();
    }

    private static String array(Collection<String> values) {
        StringBuilder out = new StringBuilder("[");
        for (String value : values) {
            out.append(out.length() == 1 ? "" : ",").append(quote(value));
        }
        return out.append(']').toString();
    }

    private static String object(Map<String, String> values) {
        StringBuilder out = new StringBuilder("{");
        for (Map.Entry<String, String> e : values.entrySet()) {
            out.append(out.length() == 1 ? "" : ",").append(quote(e.getKey())).append(':')
                .append(quote(e.getValue()));
        }
        return out.append('}').toString();
    }
}
