package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/lease"
	"github.com/funduq/funduq-go/core/redistest"
)

// A leader whose subscription to lease events was dropped without a word
// (a NAT or load balancer forgetting an idle connection, or Redis
// restarted behind one) subscribes again, so an operator's handover still
// reaches it. Before, the elector read events with no health check: its
// reads kept timing out on the dead connection, it never subscribed again,
// and every later handover request reached nobody — the leader led on.
func TestElectorResubscribesAfterASilentDrop(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	p, own := throughProxy(t, rdb)
	ctx := context.Background()
	channel := prefix + "events"
	a := startElector(t, own, prefix, "a", time.Hour)
	wait(t, a.led, "a leads")
	subscribers := func(ok func(n int64) bool, what string) {
		t.Helper()
		deadline := time.Now().Add(guard)
		for !ok(rdb.PubSubNumSub(ctx, channel).Val()[channel]) {
			if time.Now().After(deadline) {
				t.Fatalf("gave up waiting: %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	subscribed := func(n int64) bool { return n >= 1 }
	subscribers(subscribed, "a subscribes to lease events")
	if n := p.cut(); n != 1 {
		t.Fatalf("silenced %d subscriptions, want 1", n)
	}
	// Redis drops the silenced subscription when it reads the closed
	// connection: until then it still counts it, and the count alone
	// would not show a new one.
	subscribers(func(n int64) bool { return n == 0 }, "Redis drops the silenced subscription")
	subscribers(subscribed, "a subscribes again after its subscription was silently dropped")
	if n, err := lease.RequestHandover(ctx, rdb, channel); err != nil || n < 1 {
		t.Fatalf("handover request reached %d subscribers: %v", n, err)
	}
	if cause := wait(t, a.ended, "a hands over"); !errors.Is(cause, lease.ErrHandover) {
		t.Fatalf("cause %v", cause)
	}
}
