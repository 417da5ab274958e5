package node_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/provider"
)

// Our provider SDK keeps its agent running through a broker failover: the
// handler of a run in flight is never restarted, the SDK reconnects through
// the load balancer to the new leader, says which run it holds, and the run
// completes once, with every event stored once and no abandoned counted.
func TestSDKRunSurvivesFailover(t *testing.T) {
	grace := func(c *configBroker) { c.ProviderGrace = 30 * time.Second }
	a := nodetest.Start(t, grace)
	b := a.Peer("node-b")
	lb := nodetest.Balancer(t, a, b)

	signer, _ := identity.NewSignerFromSeedHex(nodetest.SeedHex(0xe7))
	var starts atomic.Int32
	release := make(chan struct{})
	started := make(chan string, 4)
	client, err := provider.New(provider.Config{
		BaseURL: lb, Signer: signer, FunduqKey: a.Node.FunduqKey(),
		Backoff: provider.Backoff{Min: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Agents: []provider.Agent{{Name: "slow", Handler: func(ctx context.Context, r *provider.Run) error {
			starts.Add(1)
			if err := sdkStart(ctx, r); err != nil {
				return err
			}
			started <- r.ID
			<-release // quiet: nothing to resend when the link drops
			return sdkReply(ctx, r, "done")
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer runSDK(client)()

	id, _ := a.Door(signer.PublicKeyHex(), "slow", "", "take your time")
	<-started
	a.Eventually("RUN_STARTED stored", func() bool { return len(a.Events(id)) == 1 })

	a.Shutdown()
	b.Eventually("b leads", b.Ready)
	b.Eventually("the SDK re-adopted its run on the new leader", func() bool {
		r := b.Run(id)
		return r.Status == run.Running && r.OwnerEpoch > 1
	})
	close(release)
	b.WaitStatus(id, run.Completed)
	if n := starts.Load(); n != 1 {
		t.Fatalf("the handler started %d times for one run", n)
	}
	if evs := b.Events(id); len(evs) != 5 {
		t.Fatalf("%d events stored, want 5 (each once): %v", len(evs), evs)
	}
	if q := b.Quality(signer.PublicKeyHex()); q.Abandoned != 0 || q.Unanswered != 0 {
		t.Fatalf("quality %+v", q)
	}
}
