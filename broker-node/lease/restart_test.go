package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/broker-node/lease"
	"github.com/funduq/funduq-go/internal/testservers"
)

// Redis restarted (connections refused, then an empty server) under a
// leader and a standby: both subscribe to lease events again, one of them
// leads, and a handover moves the lease to the other. Goroutines are
// checked for leaks by TestMain.
func TestElectorsComeBackAfterARedisRestart(t *testing.T) {
	rs := testservers.RedisServer(t)
	opt, err := redis.ParseURL(rs.URL())
	if err != nil {
		t.Fatal(err)
	}
	opt.ContextTimeoutEnabled = true // as broker-node/node builds its client
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	const channel = "restart:events"
	ctx := context.Background()
	subscribed := func(want int64, what string) {
		t.Helper()
		deadline := time.Now().Add(guard)
		for rdb.PubSubNumSub(ctx, channel).Val()[channel] < want {
			if time.Now().After(deadline) {
				t.Fatalf("gave up waiting: %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	const ttl = 3 * time.Second
	a := startElector(t, rdb, "restart:", "a", ttl)
	wait(t, a.led, "a leads")
	b := startElector(t, rdb, "restart:", "b", ttl)
	subscribed(2, "both subscribe")
	if err := rs.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := rs.Start(); err != nil {
		t.Fatal(err)
	}
	subscribed(2, "both subscribe again after the restart")
	// The restarted Redis is empty: a loses its lease at its next renewal
	// (or fences); b may have taken the lease by then — both lead until a
	// learns it, which only the store's epoch fences (design.md D10) —
	// and one of them leads after.
	if cause := wait(t, a.ended, "a learns its lease is gone"); !errors.Is(cause, lease.ErrLost) && !errors.Is(cause, lease.ErrExpiring) {
		t.Fatalf("cause %v", cause)
	}
	var leader, standby *elect
	select {
	case <-a.led:
		leader, standby = a, b
	case <-b.led:
		leader, standby = b, a
	case <-time.After(guard):
		t.Fatal("nobody leads after the restart")
	}
	if n, err := lease.RequestHandover(ctx, rdb, channel); err != nil || n < 2 {
		t.Fatalf("handover request reached %d subscribers: %v", n, err)
	}
	if cause := wait(t, leader.ended, "the leader hands over"); !errors.Is(cause, lease.ErrHandover) {
		t.Fatalf("cause %v", cause)
	}
	wait(t, standby.led, "the standby takes over")
}
