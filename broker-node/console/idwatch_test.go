package console_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/console"
	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/internal/syncbuf"
)

// Two processes announcing under one node id are each told once per
// finding — one ERROR and one count, not one per announcement — and the
// finding clears a TTL after the other stops (design.md §Deployment, "One
// node id per node").
func TestIDWatchTellsOncePerFinding(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	key := prefix + "broker:nodes"
	const ttl = 3 * time.Second // an announcement a second, a finding held 3 s
	type proc struct {
		logs  syncbuf.Buffer
		count atomic.Int64
		watch *console.IDWatch
		stop  context.CancelFunc
	}
	var wg sync.WaitGroup
	start := func(url string) *proc {
		p := &proc{}
		p.watch = console.NewIDWatch(slog.New(slog.NewJSONHandler(&p.logs, nil)), func() { p.count.Add(1) })
		ctx, stop := context.WithCancel(context.Background())
		p.stop = stop
		wg.Go(func() { console.Announce(ctx, rdb, key, "twin", url, ttl, func() bool { return false }, p.watch) })
		return p
	}
	a, b := start("http://a"), start("http://b")
	defer wg.Wait()
	defer a.stop()
	defer b.stop()
	until := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute) // a hang guard, not a timing claim
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("gave up waiting: %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	until("both find the other", func() bool { return a.watch.Duplicate() && b.watch.Duplicate() })
	// The barrier: the entry rewritten four more times, two by each.
	last, changes := "", 0
	until("four more announcements", func() bool {
		v, _ := rdb.HGet(context.Background(), key, "twin").Result()
		if v != last {
			last, changes = v, changes+1
		}
		return changes > 4
	})
	errorLogs := func(p *proc) (n int, other any) {
		for _, r := range p.logs.Records() {
			if r["level"] == "ERROR" {
				n, other = n+1, r["other_advertise"]
			}
		}
		return n, other
	}
	for _, c := range []struct {
		p     *proc
		other string
	}{{a, "http://b"}, {b, "http://a"}} {
		if n, other := errorLogs(c.p); n != 1 || other != c.other || c.p.count.Load() != 1 {
			t.Errorf("%d ERRORs (other_advertise %v), counted %d; want one naming %s, counted once\n%s",
				n, other, c.p.count.Load(), c.other, c.p.logs.String())
		}
	}
	b.stop()
	until("a clears once b is gone", func() bool { return !a.watch.Duplicate() })
}
