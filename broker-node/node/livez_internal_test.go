package node

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/broker-node/lease"
	"github.com/funduq/funduq-go/core/redistest"
)

// hangHook blocks every Redis command (with key set, every one naming
// key) until release is closed, whatever its context says: a call that
// never returns.
type hangHook struct {
	key              string
	reached, release chan struct{}
	once             sync.Once
}

func (h *hangHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *hangHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *hangHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.key != "" && !slices.Contains(cmd.Args(), any(h.key)) {
			return next(ctx, cmd)
		}
		h.once.Do(func() { close(h.reached) })
		<-h.release
		cmd.SetErr(context.Canceled)
		return cmd.Err()
	}
}

// A node whose lease elector's loop is blocked on a call that never
// returns answers /livez 503 naming the lease, so its supervisor restarts
// it (design.md §Failure, the lease); before, /livez was 200 whatever the
// loop did.
func TestLivezReportsStuckElector(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	h := &hangHook{reached: make(chan struct{}), release: make(chan struct{})}
	rdb.AddHook(h)
	const ttl = 6 * time.Second
	n := &Node{elector: &lease.Elector{Lease: lease.New(rdb, prefix+"lease", "node-a", ttl),
		Lead: func(ctx context.Context) { <-ctx.Done() }}}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = n.elector.Run(ctx)
	}()
	defer func() {
		cancel()
		close(h.release)
		<-stopped
	}()
	select {
	case <-h.reached: // the campaign is blocked for good
	case <-time.After(15 * time.Second):
		t.Fatal("the elector did not campaign")
	}
	livez := func(now time.Time) (int, map[string]string) {
		rec := httptest.NewRecorder()
		n.livezAt(rec, now)
		var body map[string]string
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("/livez %d %q: %v", rec.Code, rec.Body.String(), err)
		}
		return rec.Code, body
	}
	if code, body := livez(time.Now()); code != http.StatusOK || body["status"] != "alive" {
		t.Fatalf("/livez at once: %d %v; want 200 alive", code, body)
	}
	if code, body := livez(time.Now().Add(2 * ttl)); code != http.StatusServiceUnavailable || body["status"] != "stuck" || body["lease"] == "" {
		t.Fatalf("/livez 2×TTL on, the campaign blocked: %d %v; want 503 stuck naming the lease", code, body)
	}
}
