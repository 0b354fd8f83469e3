// Command ferromq-go-grpc-interop drives github.com/apache/rocketmq-clients/golang/v5 (the
// official RocketMQ 5.x gRPC client for Go) against ferromq's gRPC endpoint for
// crates/cli/tests/interop_go_grpc.rs.
//
// Built by scripts/interop/install-go.sh into target/interop/go/bin/ferromq-go-grpc-interop.
//
//	ferromq-go-grpc-interop produce --endpoints HOST:PORT --topic T --count N [--prefix P]
//	    [--delayed D] [--delay-ms MS] [--transactions K] [--orphan] [--orphan-wait-s S]
//	ferromq-go-grpc-interop simple --endpoints HOST:PORT --topic T --group G --expect M
//	    [--timeout-s S]
//	ferromq-go-grpc-interop push --endpoints HOST:PORT --topic T --group G --expect M
//	    [--timeout-s S] [--linger-s S]
//
// Produce sends, in this order (each send waits for its receipt):
//   - N messages, body "<prefix>:<i>", tag "Tag<i%3>", keys "<prefix>-key-<i>" and
//     "<prefix>-alt-<i>", user properties {"index": i, "kind": "fifo"|"normal"}; message i is
//     FIFO with message group "<prefix>-group-<(i/2)%4>" when i is odd, NORMAL otherwise;
//   - K TRANSACTION messages "<prefix>:tx:<j>", each in its own transaction, committed;
//   - one TRANSACTION message "<prefix>:tx-rollback", rolled back;
//   - with --orphan, one TRANSACTION message "<prefix>:tx-orphan" neither committed nor rolled
//     back: the broker must ask the producer's checker (RecoverOrphanedTransactionCommand on
//     the Telemetry stream), which commits it; the producer waits for that check (at most
//     --orphan-wait-s);
//   - last, D DELAY messages "<prefix>:delay:<j>" delivered MS ms after their send.
//
// The checker answers ROLLBACK for "<prefix>:tx-rollback" and COMMIT for every other body.
//
// stdout carries JSON lines only. Produce: one line per acknowledged send {"kind", "index",
// "body", "tag", "keys", "group", "properties", "message_id", "offset", "deliver_at_ms",
// "decision", "sent_at_ms"}, one {"checked": body, "resolution"} per transaction check, then
// {"summary": {"sent", "failed", "checks"}}. Consume: one line per delivery {"body", "tag",
// "keys", "properties", "message_id", "group", "attempt", "delivery_timestamp_ms",
// "received_at_ms"} (the Go client's MessageView has no accessor for the message type: a
// FIFO message shows its group, a DELAY one its delivery timestamp), then
// {"summary": {"received", "extra", "receive_errors", "ack_errors"}}; "extra" counts
// deliveries after the expected count (a final receive for the simple consumer, --linger-s
// of waiting for the push consumer), which must be none.
//
// Exit status: 0 ok; 1 a send failed, the expected count was not reached, or extra
// deliveries came; 2 bad usage or the client could not start. The client's own log goes to
// $HOME/logs/rocketmq (the tests point HOME at their log directory), never to stdout.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
)

// fifoGroups is the number of message groups the FIFO messages are spread over.
const fifoGroups = 4

// Bounds of the simple consumer's receive calls.
const (
	receiveBatch      = 32
	invisibleDuration = 20 * time.Second
	awaitDuration     = 2 * time.Second
	// receiveCallTimeout bounds one Receive call (long polling plus the request).
	receiveCallTimeout = 15 * time.Second
	// sendTimeout bounds one send, ack or transaction decision.
	sendTimeout = 10 * time.Second
)

var printMu sync.Mutex

func emit(v any) {
	line, err := json.Marshal(v)
	if err != nil {
		line = []byte(fmt.Sprintf(`{"error":%q}`, err.Error()))
	}
	printMu.Lock()
	defer printMu.Unlock()
	os.Stdout.Write(append(line, '\n'))
}

func fail(what string, err error) {
	emit(map[string]any{"fatal": fmt.Sprintf("%s: %v", what, err)})
	os.Exit(2)
}

func nowMs() int64 { return time.Now().UnixMilli() }

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: ferromq-go-grpc-interop produce|simple|push --endpoints E --topic T ...")
		os.Exit(2)
	}
	cmd := os.Args[1]
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	endpoints := fs.String("endpoints", "", "gRPC endpoint host:port")
	topic := fs.String("topic", "", "topic")
	count := fs.Int("count", 1000, "produce: normal and FIFO messages")
	prefix := fs.String("prefix", "go", "produce: body prefix")
	delayed := fs.Int("delayed", 0, "produce: DELAY messages")
	delayMs := fs.Int64("delay-ms", 2000, "produce: delay of the DELAY messages")
	transactions := fs.Int("transactions", 0, "produce: committed TRANSACTION messages")
	orphan := fs.Bool("orphan", false, "produce: one undecided TRANSACTION message")
	orphanWait := fs.Int("orphan-wait-s", 30, "produce: how long to wait for the orphan's check")
	group := fs.String("group", "", "consumer group")
	expect := fs.Int("expect", 0, "consume: deliveries expected")
	timeout := fs.Int("timeout-s", 60, "consume: give up after this many seconds")
	linger := fs.Int("linger-s", 3, "push: wait this long after the expected count for extras")
	if err := fs.Parse(os.Args[2:]); err != nil {
		os.Exit(2)
	}
	if *endpoints == "" || *topic == "" {
		fmt.Fprintln(os.Stderr, "--endpoints and --topic are required")
		os.Exit(2)
	}
	// The client logs to $HOME/logs/rocketmq/rocketmq_client_go.log.
	rmq.ResetLogger()
	// The Go client dials TLS unless told otherwise (EnableSsl defaults to true, env
	// rocketmq.client.enableSsl); ferromq's endpoint is plaintext.
	rmq.EnableSsl = false
	config := &rmq.Config{
		Endpoint:      *endpoints,
		ConsumerGroup: *group,
		Credentials:   &credentials.SessionCredentials{},
	}
	switch cmd {
	case "produce":
		produce(config, *topic, *count, *prefix, *delayed, *delayMs, *transactions, *orphan,
			time.Duration(*orphanWait)*time.Second)
	case "simple":
		simple(config, *topic, *expect, time.Duration(*timeout)*time.Second)
	case "push":
		push(config, *topic, *expect, time.Duration(*timeout)*time.Second,
			time.Duration(*linger)*time.Second)
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n", cmd)
		os.Exit(2)
	}
}

type sentLine struct {
	Kind        string            `json:"kind"`
	Index       int               `json:"index"`
	Body        string            `json:"body"`
	Tag         string            `json:"tag"`
	Keys        []string          `json:"keys"`
	Group       *string           `json:"group"`
	Properties  map[string]string `json:"properties"`
	MessageID   string            `json:"message_id"`
	Offset      int64             `json:"offset"`
	DeliverAtMs *int64            `json:"deliver_at_ms"`
	Decision    *string           `json:"decision"`
	SentAtMs    int64             `json:"sent_at_ms"`
}

func produce(config *rmq.Config, topic string, count int, prefix string, delayed int,
	delayMs int64, transactions int, orphan bool, orphanWait time.Duration) {
	rollbackBody := prefix + ":tx-rollback"
	orphanBody := prefix + ":tx-orphan"
	orphanChecked := make(chan struct{}, 1)
	var checksMu sync.Mutex
	checks := 0
	checker := &rmq.TransactionChecker{
		Check: func(mv *rmq.MessageView) rmq.TransactionResolution {
			body := string(mv.GetBody())
			resolution, name := rmq.COMMIT, "commit"
			if body == rollbackBody {
				resolution, name = rmq.ROLLBACK, "rollback"
			}
			checksMu.Lock()
			checks++
			checksMu.Unlock()
			emit(map[string]any{"checked": body, "resolution": name, "message_id": mv.GetMessageId()})
			if body == orphanBody {
				select {
				case orphanChecked <- struct{}{}:
				default:
				}
			}
			return resolution
		},
	}
	producer, err := rmq.NewProducer(config, rmq.WithTopics(topic), rmq.WithTransactionChecker(checker))
	if err != nil {
		fail("NewProducer", err)
	}
	if err := producer.Start(); err != nil {
		fail("producer Start", err)
	}
	sent, failed := 0, 0
	report := func(line sentLine, receipts []*rmq.SendReceipt, err error) {
		if err == nil && len(receipts) != 1 {
			err = fmt.Errorf("%d receipts for one message", len(receipts))
		}
		if err != nil {
			failed++
			emit(map[string]any{"kind": line.Kind, "index": line.Index, "body": line.Body, "error": err.Error()})
			return
		}
		sent++
		line.MessageID = receipts[0].MessageID
		line.Offset = receipts[0].Offset
		emit(line)
	}
	build := func(kind string, index int, body, tag string, keys []string) (*rmq.Message, sentLine) {
		msg := &rmq.Message{Topic: topic, Body: []byte(body)}
		msg.SetTag(tag)
		msg.SetKeys(keys...)
		properties := map[string]string{"index": strconv.Itoa(index), "kind": kind}
		for name, value := range properties {
			msg.AddProperty(name, value)
		}
		return msg, sentLine{Kind: kind, Index: index, Body: body, Tag: tag, Keys: keys,
			Properties: properties}
	}
	for i := 0; i < count; i++ {
		kind := "normal"
		if i%2 == 1 {
			kind = "fifo"
		}
		msg, line := build(kind, i, fmt.Sprintf("%s:%d", prefix, i), fmt.Sprintf("Tag%d", i%3),
			[]string{fmt.Sprintf("%s-key-%d", prefix, i), fmt.Sprintf("%s-alt-%d", prefix, i)})
		if kind == "fifo" {
			group := fmt.Sprintf("%s-group-%d", prefix, (i/2)%fifoGroups)
			msg.SetMessageGroup(group)
			line.Group = &group
		}
		ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
		line.SentAtMs = nowMs()
		receipts, err := producer.Send(ctx, msg)
		cancel()
		report(line, receipts, err)
	}
	transact := func(index int, body string, decision string) {
		msg, line := build("transaction", index, body, "TagTx",
			[]string{fmt.Sprintf("%s-tx-%d", prefix, index), fmt.Sprintf("%s-tx-alt-%d", prefix, index)})
		line.Decision = &decision
		tx := producer.BeginTransaction()
		ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
		line.SentAtMs = nowMs()
		receipts, err := producer.SendWithTransaction(ctx, msg, tx)
		cancel()
		if err == nil {
			switch decision {
			case "commit":
				err = tx.Commit()
			case "rollback":
				err = tx.RollBack()
			}
		}
		report(line, receipts, err)
	}
	for j := 0; j < transactions; j++ {
		transact(j, fmt.Sprintf("%s:tx:%d", prefix, j), "commit")
	}
	transact(transactions, rollbackBody, "rollback")
	if orphan {
		transact(transactions+1, orphanBody, "orphan")
		select {
		case <-orphanChecked:
			// The checker's COMMIT goes out as EndTransaction right after Check returns.
			time.Sleep(500 * time.Millisecond)
		case <-time.After(orphanWait):
			failed++
			emit(map[string]any{"body": orphanBody, "error": "the broker did not check the orphaned transaction in time"})
		}
	}
	// DELAY messages last, so a consumer started right after this run would see one that
	// came early.
	for j := 0; j < delayed; j++ {
		msg, line := build("delay", j, fmt.Sprintf("%s:delay:%d", prefix, j), "TagDelay",
			[]string{fmt.Sprintf("%s-delay-%d", prefix, j), fmt.Sprintf("%s-delay-alt-%d", prefix, j)})
		line.SentAtMs = nowMs()
		at := time.UnixMilli(line.SentAtMs + delayMs)
		atMs := at.UnixMilli()
		msg.SetDelayTimestamp(at)
		line.DeliverAtMs = &atMs
		ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
		receipts, err := producer.Send(ctx, msg)
		cancel()
		report(line, receipts, err)
	}
	if err := producer.GracefulStop(); err != nil {
		emit(map[string]any{"warning": "GracefulStop: " + err.Error()})
	}
	checksMu.Lock()
	n := checks
	checksMu.Unlock()
	emit(map[string]any{"summary": map[string]any{"sent": sent, "failed": failed, "checks": n}})
	if failed > 0 {
		os.Exit(1)
	}
}

func viewLine(mv *rmq.MessageView) map[string]any {
	keys := append([]string(nil), mv.GetKeys()...)
	sort.Strings(keys)
	var deliveryMs *int64
	if ts := mv.GetDeliveryTimestamp(); ts != nil {
		ms := ts.UnixMilli()
		deliveryMs = &ms
	}
	return map[string]any{
		"body":                  string(mv.GetBody()),
		"tag":                   mv.GetTag(),
		"keys":                  keys,
		"properties":            mv.GetProperties(),
		"message_id":            mv.GetMessageId(),
		"group":                 mv.GetMessageGroup(),
		"attempt":               mv.GetDeliveryAttempt(),
		"delivery_timestamp_ms": deliveryMs,
		"received_at_ms":        nowMs(),
	}
}

func simple(config *rmq.Config, topic string, expect int, timeout time.Duration) {
	consumer, err := rmq.NewSimpleConsumer(config,
		rmq.WithSimpleAwaitDuration(awaitDuration),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}))
	if err != nil {
		fail("NewSimpleConsumer", err)
	}
	if err := consumer.Start(); err != nil {
		fail("simple consumer Start", err)
	}
	received, receiveErrors, ackErrors := 0, 0, 0
	var lastError string
	receive := func() []*rmq.MessageView {
		ctx, cancel := context.WithTimeout(context.Background(), receiveCallTimeout)
		defer cancel()
		views, err := consumer.Receive(ctx, receiveBatch, invisibleDuration)
		if err != nil {
			// MESSAGE_NOT_FOUND (nothing within the long polling) is an error here too.
			receiveErrors++
			lastError = err.Error()
		}
		return views
	}
	ack := func(mv *rmq.MessageView) {
		ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
		defer cancel()
		if err := consumer.Ack(ctx, mv); err != nil {
			ackErrors++
			emit(map[string]any{"ack_error": err.Error(), "body": string(mv.GetBody())})
		}
	}
	deadline := time.Now().Add(timeout)
	for received < expect && time.Now().Before(deadline) {
		for _, mv := range receive() {
			line := viewLine(mv)
			ack(mv)
			received++
			emit(line)
		}
	}
	extra := 0
	if received >= expect {
		for _, mv := range receive() {
			extra++
			line := viewLine(mv)
			line["extra"] = true
			emit(line)
			ack(mv)
		}
	}
	if err := consumer.GracefulStop(); err != nil {
		emit(map[string]any{"warning": "GracefulStop: " + err.Error()})
	}
	emit(map[string]any{"summary": map[string]any{"received": received, "extra": extra,
		"receive_errors": receiveErrors, "ack_errors": ackErrors, "last_receive_error": lastError}})
	if received != expect || extra != 0 || ackErrors != 0 {
		os.Exit(1)
	}
}

func push(config *rmq.Config, topic string, expect int, timeout, linger time.Duration) {
	var mu sync.Mutex
	received := 0
	reached := make(chan struct{})
	listener := &rmq.FuncMessageListener{
		Consume: func(mv *rmq.MessageView) rmq.ConsumerResult {
			line := viewLine(mv)
			mu.Lock()
			received++
			n := received
			if n > expect {
				line["extra"] = true
			}
			emit(line)
			mu.Unlock()
			if n == expect {
				close(reached)
			}
			return rmq.SUCCESS
		},
	}
	consumer, err := rmq.NewPushConsumer(config,
		rmq.WithPushAwaitDuration(awaitDuration),
		rmq.WithPushSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}),
		rmq.WithPushMessageListener(listener),
		rmq.WithPushConsumptionThreadCount(4),
		rmq.WithPushMaxCacheMessageCount(1024))
	if err != nil {
		fail("NewPushConsumer", err)
	}
	if err := consumer.Start(); err != nil {
		fail("push consumer Start", err)
	}
	if expect == 0 {
		close(reached)
	}
	select {
	case <-reached:
		// Acks go out after the listener returns; wait for them and for any extra delivery.
		time.Sleep(linger)
	case <-time.After(timeout):
	}
	if err := consumer.GracefulStop(); err != nil {
		emit(map[string]any{"warning": "GracefulStop: " + err.Error()})
	}
	mu.Lock()
	n := received
	mu.Unlock()
	extra := 0
	if n > expect {
		extra = n - expect
	}
	emit(map[string]any{"summary": map[string]any{"received": n - extra, "extra": extra}})
	if n != expect {
		os.Exit(1)
	}
}
