// Command ferromq-go-interop drives github.com/apache/rocketmq-client-go/v2 (the official Go
// remoting client) against ferromq for crates/cli/tests/interop_go.rs.
//
// Built by scripts/interop/install-go.sh into target/interop/go/bin/ferromq-go-interop.
//
//	ferromq-go-interop produce --namesrv 127.0.0.1:9876 --topic T --group PG --count 1000 \
//	    --tag TagA --prefix m [--batch 10]
//	ferromq-go-interop consume --namesrv 127.0.0.1:9876 --topic T --group CG --expect 1000 \
//	    --timeout 60 [--subscribe TagA] [--expect-tag TagA] [--linger 2] [--events]
//
// Messages: body "{prefix}:{i}", key "{prefix}-{i}", tag --tag. With --batch N > 1 the
// producer sends N messages per SendSync call (one SEND_BATCH_MESSAGE request).
//
// stdout carries JSON lines only; the last line is the summary (an object without "event"):
//
//	produce: {"client","cmd":"produce","sent","failed","count","requests","batch","elapsed_s",
//	          "first_error","ok"}
//	consume: {"client","cmd":"consume","instance","received","distinct","duplicates","expected",
//	          "key_mismatches","tag_mismatches","bad_bodies","examples","by_prefix","elapsed_s",
//	          "first_msg_s","exit_reason":"expected|timeout|idle|signal","shutdown_s","ok"};
//	          with --events also {"event":"started"} and one {"event":"msg",...} per delivery.
//
// Exit status: 0 ok; 1 failed sends, expected count not reached or malformed messages; 2 bad
// usage or the client could not start. The client's own log goes to --log (default
// ./rocketmq-client-go.log), never to stdout.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"sync"
	"syscall"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

const clientName = "rocketmq-client-go-v2"

// maxExamples bounds the malformed deliveries kept for the summary.
const maxExamples = 5

var (
	printMu sync.Mutex
	bodyRe  = regexp.MustCompile(`^(.+):(\d+)$`)
)

func emit(v map[string]any) {
	line, err := json.Marshal(v)
	if err != nil {
		line = []byte(fmt.Sprintf(`{"error":%q}`, err.Error()))
	}
	printMu.Lock()
	defer printMu.Unlock()
	os.Stdout.Write(append(line, '\n'))
}

func failStart(cmd, what string, err error) {
	emit(map[string]any{"client": clientName, "cmd": cmd, "ok": false,
		"error": fmt.Sprintf("%s: %v", what, err)})
	os.Exit(2)
}

func seconds(d time.Duration) float64 {
	return float64(d.Milliseconds()) / 1000
}

func setupLog(path string) {
	rlog.SetLogLevel("warn")
	if err := rlog.SetOutputPath(path); err != nil {
		fmt.Fprintf(os.Stderr, "log output %s: %v\n", path, err)
	}
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: ferromq-go-interop produce|consume [flags]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "produce":
		produce(os.Args[2:])
	case "consume":
		consume(os.Args[2:])
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q (produce|consume)\n", os.Args[1])
		os.Exit(2)
	}
}

type produceArgs struct {
	namesrv, topic, group, tag, prefix, instance, log string
	count, start, batch, maxFailures                  int
	sendTimeout                                       time.Duration
}

func produce(argv []string) {
	var a produceArgs
	fs := flag.NewFlagSet("produce", flag.ExitOnError)
	fs.StringVar(&a.namesrv, "namesrv", "", "name server host:port")
	fs.StringVar(&a.topic, "topic", "", "topic")
	fs.StringVar(&a.group, "group", "", "producer group")
	fs.StringVar(&a.tag, "tag", "", "tag of every message")
	fs.StringVar(&a.prefix, "prefix", "", "body/key prefix")
	fs.StringVar(&a.instance, "instance", "", "client instance name")
	fs.StringVar(&a.log, "log", "rocketmq-client-go.log", "client log file")
	fs.IntVar(&a.count, "count", 0, "messages to send")
	fs.IntVar(&a.start, "start", 0, "first index")
	fs.IntVar(&a.batch, "batch", 1, "messages per SendSync call (>1: batch request)")
	fs.IntVar(&a.maxFailures, "max-failures", 5, "stop after this many failed requests")
	fs.DurationVar(&a.sendTimeout, "send-timeout", 3*time.Second, "per-request timeout")
	fs.Parse(argv)
	if a.namesrv == "" || a.topic == "" || a.group == "" || a.prefix == "" || a.count <= 0 || a.batch <= 0 {
		fmt.Fprintln(os.Stderr, "produce needs --namesrv --topic --group --prefix --count>0 (--batch>0)")
		os.Exit(2)
	}
	setupLog(a.log)

	begin := time.Now()
	opts := []producer.Option{
		producer.WithNameServer([]string{a.namesrv}),
		producer.WithGroupName(a.group),
		producer.WithRetry(2),
		producer.WithSendMsgTimeout(a.sendTimeout),
	}
	if a.instance != "" {
		opts = append(opts, producer.WithInstanceName(a.instance))
	}
	p, err := rocketmq.NewProducer(opts...)
	if err != nil {
		failStart("produce", "new producer", err)
	}
	if err := p.Start(); err != nil {
		failStart("produce", "producer start", err)
	}

	sent, failed, requests := 0, 0, 0
	firstError := ""
	for i := a.start; i < a.start+a.count && failed < a.maxFailures; i += a.batch {
		end := min(i+a.batch, a.start+a.count)
		msgs := make([]*primitive.Message, 0, end-i)
		for j := i; j < end; j++ {
			m := primitive.NewMessage(a.topic, []byte(fmt.Sprintf("%s:%d", a.prefix, j)))
			m.WithKeys([]string{fmt.Sprintf("%s-%d", a.prefix, j)})
			if a.tag != "" {
				m.WithTag(a.tag)
			}
			msgs = append(msgs, m)
		}
		requests++
		ctx, cancel := context.WithTimeout(context.Background(), a.sendTimeout+time.Second)
		res, err := p.SendSync(ctx, msgs...)
		cancel()
		switch {
		case err != nil:
			failed++
			if firstError == "" {
				firstError = err.Error()
			}
		case res.Status != primitive.SendOK:
			failed++
			if firstError == "" {
				firstError = fmt.Sprintf("status %d", res.Status)
			}
		default:
			sent += len(msgs)
		}
	}
	shutdownErr := p.Shutdown()
	summary := map[string]any{
		"client": clientName, "cmd": "produce", "sent": sent, "failed": failed, "count": a.count,
		"requests": requests, "batch": a.batch, "elapsed_s": seconds(time.Since(begin)),
		"first_error": firstError, "ok": sent == a.count && failed == 0,
	}
	if shutdownErr != nil {
		summary["shutdown_error"] = shutdownErr.Error()
	}
	emit(summary)
	if sent != a.count {
		os.Exit(1)
	}
}

type consumeArgs struct {
	namesrv, topic, group, instance, subscribe, expectTag, log string
	expect                                                     int
	timeout, linger, idleExit, shutdownTimeout                 time.Duration
	events                                                     bool
}

type prefixStats struct {
	Received int `json:"received"`
	Distinct int `json:"distinct"`
}

// collector counts deliveries; the client calls it from several goroutines.
type collector struct {
	args                                    *consumeArgs
	mu                                      sync.Mutex
	start, firstMsg, lastMsg                time.Time
	received                                int
	bodies                                  map[string]struct{}
	byPrefix                                map[string]*prefixStats
	keyMismatches, tagMismatches, badBodies int
	examples                                []map[string]any
}

func (c *collector) onMessage(m *primitive.MessageExt) {
	body, key, tag := string(m.Body), m.GetKeys(), m.GetTags()
	problem := ""
	c.mu.Lock()
	now := time.Now()
	c.received++
	if c.firstMsg.IsZero() {
		c.firstMsg = now
	}
	c.lastMsg = now
	prefix := "?"
	if g := bodyRe.FindStringSubmatch(body); g == nil {
		c.badBodies++
		problem = "bad body"
	} else {
		prefix = g[1]
		if want := g[1] + "-" + g[2]; key != want {
			c.keyMismatches++
			problem = fmt.Sprintf("key %q, expected %q", key, want)
		}
		if c.args.expectTag != "" && tag != c.args.expectTag {
			c.tagMismatches++
			problem += fmt.Sprintf("; tag %q, expected %q", tag, c.args.expectTag)
		}
	}
	stats := c.byPrefix[prefix]
	if stats == nil {
		stats = &prefixStats{}
		c.byPrefix[prefix] = stats
	}
	stats.Received++
	if _, seen := c.bodies[body]; !seen {
		c.bodies[body] = struct{}{}
		stats.Distinct++
	}
	if problem != "" && len(c.examples) < maxExamples {
		c.examples = append(c.examples, map[string]any{"body": body, "key": key, "tag": tag, "problem": problem})
	}
	c.mu.Unlock()
	if c.args.events {
		emit(map[string]any{"event": "msg", "body": body, "key": key, "tag": tag,
			"queue_id": m.Queue.QueueId, "queue_offset": m.QueueOffset,
			"reconsume_times": m.ReconsumeTimes, "msg_id": m.MsgId})
	}
}

func (c *collector) distinct() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.bodies)
}

func (c *collector) idleFor() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lastMsg.IsZero() {
		return time.Since(c.start)
	}
	return time.Since(c.lastMsg)
}

func (c *collector) summary(reason string, shutdown *time.Duration) map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	distinct := len(c.bodies)
	clean := c.keyMismatches == 0 && c.tagMismatches == 0 && c.badBodies == 0
	reached := c.args.expect <= 0 || distinct >= c.args.expect
	var firstMsg, shutdownS any
	if !c.firstMsg.IsZero() {
		firstMsg = seconds(c.firstMsg.Sub(c.start))
	}
	if shutdown != nil {
		shutdownS = seconds(*shutdown)
	}
	return map[string]any{
		"client": clientName, "cmd": "consume", "instance": c.args.instance,
		"group": c.args.group, "topic": c.args.topic, "received": c.received,
		"distinct": distinct, "duplicates": c.received - distinct, "expected": c.args.expect,
		"key_mismatches": c.keyMismatches, "tag_mismatches": c.tagMismatches,
		"bad_bodies": c.badBodies, "examples": c.examples, "by_prefix": c.byPrefix,
		"elapsed_s": seconds(time.Since(c.start)), "first_msg_s": firstMsg,
		"exit_reason": reason, "shutdown_s": shutdownS,
		"ok": clean && reached && reason != "timeout",
	}
}

func consume(argv []string) {
	a := &consumeArgs{}
	fs := flag.NewFlagSet("consume", flag.ExitOnError)
	fs.StringVar(&a.namesrv, "namesrv", "", "name server host:port")
	fs.StringVar(&a.topic, "topic", "", "topic")
	fs.StringVar(&a.group, "group", "", "consumer group (clustering)")
	fs.StringVar(&a.instance, "instance", "", "client instance name (distinct per process)")
	fs.StringVar(&a.subscribe, "subscribe", "*", "tag expression")
	fs.StringVar(&a.expectTag, "expect-tag", "", "tag every message must carry")
	fs.StringVar(&a.log, "log", "rocketmq-client-go.log", "client log file")
	fs.IntVar(&a.expect, "expect", 0, "exit once this many distinct bodies arrived (0: never)")
	timeoutS := fs.Float64("timeout", 0, "exit after this many seconds in any case")
	lingerS := fs.Float64("linger", 0, "keep consuming this long after --expect is reached")
	idleS := fs.Float64("idle-exit", 0, "exit after this many seconds without a message (0: off)")
	shutdownS := fs.Float64("shutdown-timeout", 20, "bound on Shutdown()")
	fs.BoolVar(&a.events, "events", false, "print a JSON line per delivery")
	fs.Parse(argv)
	if a.namesrv == "" || a.topic == "" || a.group == "" || *timeoutS <= 0 {
		fmt.Fprintln(os.Stderr, "consume needs --namesrv --topic --group --timeout>0")
		os.Exit(2)
	}
	toDur := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	a.timeout, a.linger, a.idleExit, a.shutdownTimeout = toDur(*timeoutS), toDur(*lingerS), toDur(*idleS), toDur(*shutdownS)
	setupLog(a.log)

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	col := &collector{args: a, start: time.Now(), bodies: map[string]struct{}{}, byPrefix: map[string]*prefixStats{}}
	opts := []consumer.Option{
		consumer.WithNameServer([]string{a.namesrv}),
		consumer.WithGroupName(a.group),
		consumer.WithConsumerModel(consumer.Clustering),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	}
	if a.instance != "" {
		opts = append(opts, consumer.WithInstance(a.instance))
	}
	c, err := rocketmq.NewPushConsumer(opts...)
	if err != nil {
		failStart("consume", "new push consumer", err)
	}
	selector := consumer.MessageSelector{Type: consumer.TAG, Expression: a.subscribe}
	err = c.Subscribe(a.topic, selector, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range msgs {
			col.onMessage(m)
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		failStart("consume", "subscribe", err)
	}
	if err := c.Start(); err != nil {
		failStart("consume", "push consumer start", err)
	}
	if a.events {
		emit(map[string]any{"event": "started", "instance": a.instance, "after_s": seconds(time.Since(col.start))})
	}

	reason := waitForExit(a, col, signals)
	t0 := time.Now()
	done := make(chan error, 1)
	go func() { done <- c.Shutdown() }()
	var summary map[string]any
	select {
	case err := <-done:
		took := time.Since(t0)
		summary = col.summary(reason, &took)
		if err != nil {
			summary["shutdown_error"] = err.Error()
		}
	case <-time.After(a.shutdownTimeout):
		summary = col.summary(reason, nil)
		summary["error"] = fmt.Sprintf("shutdown did not finish within %v", a.shutdownTimeout)
		summary["ok"] = false
	}
	emit(summary)
	if summary["ok"] != true {
		os.Exit(1)
	}
	os.Exit(0)
}

// waitForExit returns why the consumer should stop: expected, idle, timeout or signal.
func waitForExit(a *consumeArgs, col *collector, signals <-chan os.Signal) string {
	deadline := col.start.Add(a.timeout)
	var reachedAt time.Time
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-signals:
			return "signal"
		case now := <-tick.C:
			if a.expect > 0 && reachedAt.IsZero() && col.distinct() >= a.expect {
				reachedAt = now
			}
			if !reachedAt.IsZero() && now.Sub(reachedAt) >= a.linger {
				return "expected"
			}
			if a.idleExit > 0 && col.idleFor() >= a.idleExit {
				return "idle"
			}
			if now.After(deadline) {
				if !reachedAt.IsZero() {
					return "expected"
				}
				return "timeout"
			}
		}
	}
}
