package lease_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/lease"
	"github.com/funduq/funduq-go/core/redistest"
)

// A campaign whose SET NX landed but whose reply did not come back in
// time (a slow Redis, a lost packet) leaves the lease holding this node's
// own value. The node's next try must take it as its own: before, it got
// "not set" and stood by behind itself until the lease expired — for a
// whole TTL nobody led, and on a single node every run waited.
func TestElectorTakesTheLeaseItsTimedOutCampaignSet(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	p, own := throughProxy(t, rdb)
	// Whatever the campaign sends (a script, cached by Redis now), it
	// lands and its reply never comes: the first command on the key.
	ctx := context.Background()
	if _, err := lease.New(rdb, prefix+"warm", "w", time.Hour).Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	p.holdReplyTo(strings.ToLower(prefix + "lease"))
	a := startElectorWith(t, own, prefix, "a", time.Hour, func(e *lease.Elector) { e.RetryEvery = 100 * time.Millisecond })
	wait(t, a.led, "a leads after its first campaign timed out")
	if h, err := lease.ReadHolder(ctx, rdb, prefix+"lease"); err != nil || h.NodeID != "a" {
		t.Fatalf("holder %+v %v", h, err)
	}
}
