package node_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/broker-node/lease"
	"github.com/funduq/funduq-go/broker-node/node"
	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/provider"
)

type configBroker = config.Broker

func io_Copy(b *strings.Builder, resp *http.Response) (int64, error) {
	defer resp.Body.Close()
	return io.Copy(b, resp.Body)
}

// runSDK runs an SDK client until the returned stop is called, and returns
// once the client is connected and registered.
func runSDK(client *provider.Client) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = client.Run(ctx) }()
	<-client.Ready()
	return func() { cancel(); wg.Wait() }
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// metrics reads the node's /metrics page.
func metrics(t *testing.T, h *nodetest.Harness) string {
	t.Helper()
	resp, err := http.Get(h.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if _, err := io_Copy(&b, resp); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// grepLines keeps the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// charges sums the counters that withdraw a provider (design.md §Counters).
func charges(q store.Quality) int64 {
	return q.Misdeclared + q.Unanswered + q.AnsweredLate + q.Abandoned + q.Undelivered
}

// requestHandover asks h's leader to hand its lease over, as `broker-node
// lease handover` does, and returns the Redis client it asked on (closed
// when the test ends).
func requestHandover(t *testing.T, h *nodetest.Harness) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(h.Cfg.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	if _, err := lease.RequestHandover(context.Background(), rdb, node.LeaseChannel(h.Prefix)); err != nil {
		t.Fatal(err)
	}
	return rdb
}

// sdkStart emits the run's RUN_STARTED from an SDK handler.
func sdkStart(ctx context.Context, r *provider.Run) error {
	return r.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": r.ThreadID, "runId": r.ID})
}

// sdkReply ends an SDK handler's run: one text message, then RUN_FINISHED.
func sdkReply(ctx context.Context, r *provider.Run, text string) error {
	if err := r.EmitText(ctx, "m1", text); err != nil {
		return err
	}
	return r.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID})
}
