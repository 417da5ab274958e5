package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/functions/door"
)

// waitBuffer is the Lambda's stderr, written by go-redis's and the door's
// goroutines and read by the test; seen closes once a line holding want
// arrives.
type waitBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	once sync.Once
	seen chan struct{}
}

func (b *waitBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	if strings.Contains(b.buf.String(), b.want) {
		b.once.Do(func() { close(b.seen) })
	}
	return n, err
}

func (b *waitBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A cold AG-UI Lambda whose Redis does not answer says so in its JSON
// log, and only there: go-redis's own messages (a pool that cannot dial)
// printed plain text lines ("redis: 2026/12/07 … pool.go:770: …") to the
// function's stderr, between the door's JSON lines, which CloudWatch
// Logs Insights and any JSON log reader drop or choke on (design.md §Logs).
func TestLambdaLogsTheRedisClientAsJSON(t *testing.T) {
	recs, _, raw := streamWithoutRedis(t)
	dial := false
	for _, rec := range recs {
		if d, _ := rec["detail"].(string); rec["msg"] == "redis client" && strings.Contains(d, "failed to dial") {
			dial = true
			if rec["level"] != "WARN" || rec["door"] != "agui" {
				t.Errorf("go-redis's dial failure at %v, door %v; want WARN, agui: %v", rec["level"], rec["door"], rec)
			}
		}
	}
	if !dial {
		t.Errorf("go-redis's dial failure is not in the Lambda's JSON log (it went to the function's stderr as plain text):\n%s", raw)
	}
}

// streamWithoutRedis starts a run through a cold AG-UI Lambda whose Redis
// does not answer, reads its stream until the tail has found the live
// feed failing, then hangs up, and returns the Lambda's log lines (each
// one JSON), the run's provider key and the log as written.
func streamWithoutRedis(t *testing.T) (recs []map[string]any, providerKey, raw string) {
	t.Helper()
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe3, nil)
	p.Register("echo")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String() // nothing listens here once closed
	ln.Close()
	st := h.Cfg.Storage
	st.RedisPrefix = h.Prefix
	st.RedisURL = "redis://" + closed + "/0"
	// The tail logs the failed live feed after go-redis has given up
	// dialing, and said so.
	errb := &waitBuffer{want: `"tail: live feed failed`, seen: make(chan struct{})}
	log := slog.New(slog.NewJSONHandler(errb, nil)).With("door", "agui")
	handler, closeFn, err := newHandler(config.Door{Storage: st, Identity: h.Cfg.Identity}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()

	// The run's stream reads the live feed, in Redis. The deadline is
	// the invocation's, and only bounds a hang.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	path := "/agui/" + p.Key + "/echo"
	resp, err := door.WrapAPIGateway(handler, nil)(ctx, &events.APIGatewayProxyRequest{HTTPMethod: "POST", Path: path,
		Headers: map[string]string{"content-type": "application/json", "accept": "text/event-stream"},
		Body: `{"threadId":"new","runId":"r1","messages":[{"id":"m1","role":"user","content":"hi"}],` +
			`"tools":[],"context":[],"state":null,"forwardedProps":{}}`,
		RequestContext: events.APIGatewayProxyRequestContext{DomainName: "door.example", HTTPMethod: "POST", Path: path}})
	if err != nil {
		t.Fatal(err)
	}
	// The stream goes on as the caller reads it.
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		_, _ = io.Copy(io.Discard, resp.Body) // the stream ends with its invocation
	}()
	select {
	case <-errb.seen:
	case <-ctx.Done():
		t.Fatalf("the run's stream never read the live feed: %d; log:\n%s", resp.StatusCode, errb.String())
	}
	// The caller hangs up; the stream has ended once its body has.
	cancel()
	<-drained
	raw = errb.String()
	for _, line := range strings.Split(strings.TrimSpace(raw), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("a log line that is not JSON: %q", line)
			continue
		}
		recs = append(recs, rec)
	}
	return recs, p.Key, raw
}
