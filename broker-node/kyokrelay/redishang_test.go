package kyokrelay_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/broker-node/kyokrelay"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
	"github.com/funduq/funduq-go/internal/leaktest"
	"github.com/funduq/funduq-go/internal/testservers"
)

func TestMain(m *testing.M) { leaktest.MainWithPools(m) }

// guard bounds every wait: a hang detector, never a timing assertion.
const guard = 15 * time.Second

type noTickets struct{}

func (noTickets) Claim(context.Context, string, string) error { return nil }

// A relay whose Redis hangs (connections accepted, never answered) stops
// when its leadership ends — the node hands the lease over only once it
// has (design.md §Failure, the KYOK relay) — whatever timeouts the Redis
// URL gives the client: here none (read_timeout=0), on a client that
// honours context deadlines as the broker node's does. Before, each read
// of the request stream waited as long as the client let it (block +
// 10 s, or for ever while it set a connection up, or for a command that
// does not block), and go-redis does not cut a read short when its
// context is cancelled.
func TestRelayStopsWhileRedisHangs(t *testing.T) {
	hung := testservers.Hang(t, "")
	addr, reached, unhang := hung.Addr, hung.Reached, hung.Release
	opt, err := redis.ParseURL("redis://" + addr + "/0?read_timeout=0")
	if err != nil {
		t.Fatal(err)
	}
	opt.ContextTimeoutEnabled = true // as broker-node/node builds its client
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	signer, err := identity.NewSignerFromSeedHex("0707070707070707070707070707070707070707070707070707070707070707")
	if err != nil {
		t.Fatal(err)
	}
	r := &kyokrelay.Relay{Store: store.New(storetest.Pool(t), nil), Redis: rdb, Prefix: "kyokhang:",
		Funduq: signer, Tickets: noTickets{}}
	stop := r.Start(context.Background(), 1)
	<-reached // the relay is waiting on the hung Redis
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		stop()
	}()
	select {
	case <-stopped:
	case <-time.After(guard):
		unhang() // lets the relay go, so the test ends
		<-stopped
		t.Fatalf("the relay had not stopped %s after its leadership ended", guard)
	}
	if lead, _ := r.Leading(); lead {
		t.Fatal("the relay still says it leads")
	}
}
