package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/broker-node/lease"
	"github.com/funduq/funduq-go/internal/testservers"
)

// A node whose Redis hangs (connections accepted, never answered) stops
// campaigning when it is told to stop — its SIGTERM completes (design.md
// §Failure, the lease) — whatever timeouts the Redis URL gives the
// client: here none (read_timeout=0), on a client that honours context
// deadlines as the broker node's does. Before, the elector's subscription
// to lease events, and each campaign, waited as long as the client let
// it: for ever, the node's context cancelled or not.
func TestElectorStopsWhileRedisHangs(t *testing.T) {
	// Each case's first call on Redis is the one that hangs: a new
	// connection's set-up (HELLO) goes unanswered.
	for _, x := range []struct{ name, channel string }{
		{"subscribing to lease events", "hang:events"},
		{"campaigning", ""}, // no events: Acquire is the first call
	} {
		t.Run(x.name, func(t *testing.T) {
			hung := testservers.Hang(t, "hello")
			addr, reached, unhang := hung.Addr, hung.Reached, hung.Release
			opt, err := redis.ParseURL("redis://" + addr + "/0?read_timeout=0")
			if err != nil {
				t.Fatal(err)
			}
			opt.ContextTimeoutEnabled = true // as broker-node/node builds its client
			rdb := redis.NewClient(opt)
			defer rdb.Close()
			e := &lease.Elector{Lease: lease.New(rdb, "hang:lease", "node-a", 3*time.Second), Channel: x.channel,
				Lead: func(ctx context.Context) { <-ctx.Done() }}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stopped := make(chan struct{})
			go func() {
				defer close(stopped)
				_ = e.Run(ctx)
			}()
			select {
			case <-reached: // the elector is waiting on the hung Redis
			case <-time.After(guard):
				t.Fatal("the elector did not reach Redis")
			}
			cancel()
			select {
			case <-stopped:
			case <-time.After(guard):
				unhang() // lets the elector go, so the test ends
				<-stopped
				t.Fatalf("the elector had not stopped %s after its context ended", guard)
			}
		})
	}
}
